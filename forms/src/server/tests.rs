//! The callback server over real sockets: a form submission whose body never
//! finishes arriving, or whose headers never do, is disconnected after the
//! configured timeout instead of holding its socket, and records nothing.

use std::sync::Arc;
use std::time::Duration;

use planb_core::{AskId, AskStatus, Command, Delivery};
use planb_http::Limits;
use planb_projections::Store;
use tempfile::TempDir;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use uuid::Uuid;

use crate::registry::{FormInfo, Forms, Reviews};

/// How long a test waits for something that should happen much sooner.
const BOUND: Duration = Duration::from_secs(10);

const SHORT: Limits = Limits {
    header_read_timeout: Duration::from_millis(200),
    body_read_timeout: Duration::from_millis(200),
    connections_max: 8,
};

const SID: &str = "test-sid";

struct Server {
    _dir: TempDir,
    store: Arc<Store>,
    ask: AskId,
    port: u16,
}

/// A callback server with one open form, registered under [`SID`].
async fn start() -> Server {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, session) = planb_tests::fixtures::store_with_session(dir.path());
    let ask = AskId::from_uuid(Uuid::new_v4());
    let spec = planb_tests::fixtures::storage_spec();
    store
        .execute(Command::OpenAsk {
            session,
            ask,
            spec: spec.clone(),
            delivery: Delivery::BrowserNotOpened,
            url: "http://127.0.0.1:9/ask".into(),
            sid: SID.into(),
        })
        .expect("ask opened");
    let forms = Arc::new(Forms::default());
    let (waiter, _answers) = tokio::sync::oneshot::channel();
    let info = FormInfo {
        ask,
        spec: Arc::new(spec),
    };
    forms
        .register(SID.into(), info, waiter)
        .expect("form registered");
    let address = super::start_with(
        planb_app::App::ready(
            Arc::clone(&store),
            planb_app::plans::ServersSource {
                file: dir.path().join("servers.json"),
                project: None,
            },
        ),
        forms,
        Arc::new(Reviews::default()),
        0,
        SHORT,
    )
    .await
    .expect("start the callback server");
    Server {
        _dir: dir,
        store,
        ask,
        port: address.port(),
    }
}

/// Everything the server sends until it closes the connection; panics if it
/// has not closed it within [`BOUND`].
async fn read_until_closed(stream: &mut TcpStream, what: &str) -> String {
    planb_tests::net::read_until_closed(stream, BOUND, what).await
}

fn status(server: &Server) -> AskStatus {
    let ask = server.ask;
    server
        .store
        .read(move |state| state.ask(&ask).map(|a| a.status))
        .expect("read the state")
        .expect("the ask exists")
}

#[tokio::test]
async fn a_half_sent_submission_is_disconnected_and_records_nothing() {
    let server = start().await;
    let port = server.port;
    let body = format!(r#"{{"sid":"{SID}","answers":{{"db":"Postgres"}}}}"#);
    let mut stream = planb_tests::net::connect(port).await;
    let head = format!(
        "POST /submit HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nOrigin: http://127.0.0.1:{port}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.expect("send");
    stream
        .write_all(&body.as_bytes()[..body.len() / 2])
        .await
        .expect("send half the body");
    let response = read_until_closed(&mut stream, "half a body").await;
    assert!(
        !response.contains("answered"),
        "half a body was taken for answers: {response}"
    );
    assert_eq!(status(&server), AskStatus::Pending);
}

#[tokio::test]
async fn half_sent_headers_are_disconnected() {
    let server = start().await;
    let port = server.port;
    let mut stream = planb_tests::net::connect(port).await;
    let head = format!("GET /ask?sid={SID} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n");
    stream.write_all(head.as_bytes()).await.expect("send");
    let response = read_until_closed(&mut stream, "half-sent headers").await;
    assert_eq!(response, "", "half a request was answered");
}

#[tokio::test]
async fn a_whole_submission_is_recorded() {
    let server = start().await;
    let port = server.port;
    let body = format!(r#"{{"sid":"{SID}","answers":{{"db":"Postgres"}}}}"#);
    let mut stream = planb_tests::net::connect(port).await;
    let request = format!(
        "POST /submit HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nOrigin: http://127.0.0.1:{port}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("send");
    let response = read_until_closed(&mut stream, "a whole submission").await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert_eq!(status(&server), AskStatus::Answered);
}
