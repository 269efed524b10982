//! planb-retro's server over real sockets: a client that sends half a
//! request is disconnected, idle connections cannot starve it, and event
//! streams, which are long responses, are not cut by the request timeouts.
//!
//! The timeouts are configured short (200 ms) so nothing sleeps long; waits
//! for what must happen are bounded generously by [`BOUND`].

use std::sync::Arc;
use std::time::Duration;

use planb_core::{Command, SessionId, Timestamp};
use planb_projections::{DataRoot, FixedEnvironment, Store};
use planb_retro::{Limits, Retro};
use planb_tests::net::{connect, read_until_closed};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use uuid::Uuid;

/// How long a test waits for something that should happen much sooner.
const BOUND: Duration = Duration::from_secs(10);

const SHORT: Limits = Limits {
    header_read_timeout: Duration::from_millis(200),
    body_read_timeout: Duration::from_millis(200),
    connections_max: 4,
};

struct Server {
    _dir: TempDir,
    store: Store,
    port: u16,
}

/// planb-retro over a log holding one session, following it every 20 ms.
async fn start() -> Server {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = DataRoot::new(dir.path());
    let env = Arc::new(FixedEnvironment::new(Timestamp(1_700_000_000_000), 1_000));
    let (store, _) = Store::open(root.clone(), env).expect("open store");
    create_session(&store);
    let (retro, follower) = Retro::open(&root);
    retro.follow(follower, Duration::from_millis(20));
    let address = planb_retro::serve_with(retro, 0, SHORT)
        .await
        .expect("serve");
    Server {
        _dir: dir,
        store,
        port: address.port(),
    }
}

fn create_session(store: &Store) {
    store
        .execute(Command::CreateSession {
            session: SessionId::from_uuid(Uuid::new_v4()),
            title: Some("Connections".into()),
            intent: None,
            project_path: None,
        })
        .expect("session created");
}

fn get_request(port: u16, path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n")
}

#[tokio::test]
async fn half_sent_headers_are_disconnected() {
    let server = start().await;
    let mut stream = connect(server.port).await;
    let head = format!("GET / HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n", server.port);
    stream.write_all(head.as_bytes()).await.expect("send");
    let response = read_until_closed(&mut stream, BOUND, "half-sent headers").await;
    assert_eq!(response, "", "half a request was answered");
}

#[tokio::test]
async fn many_idle_connections_do_not_stop_a_page() {
    let server = start().await;
    let mut idle = Vec::new();
    for _ in 0..(SHORT.connections_max * 10) {
        idle.push(connect(server.port).await);
    }
    let mut stream = connect(server.port).await;
    stream
        .write_all(get_request(server.port, "/").as_bytes())
        .await
        .expect("send");
    let response = read_until_closed(&mut stream, BOUND, "a whole request").await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.contains("Connections"), "{response}");
}

#[tokio::test]
async fn event_streams_outlive_the_request_timeouts() {
    let server = start().await;
    let mut stream = connect(server.port).await;
    stream
        .write_all(get_request(server.port, "/events").as_bytes())
        .await
        .expect("send");
    // Several header and body timeouts pass with the stream open and quiet.
    tokio::time::sleep(SHORT.header_read_timeout * 4).await;
    create_session(&server.store);
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    let found = tokio::time::timeout(BOUND, async {
        loop {
            let read = stream.read(&mut buffer).await.expect("read the stream");
            assert!(
                read > 0,
                "the stream was closed: {}",
                String::from_utf8_lossy(&received)
            );
            received.extend_from_slice(&buffer[..read]);
            if String::from_utf8_lossy(&received).contains("event: append") {
                return;
            }
        }
    })
    .await;
    assert!(
        found.is_ok(),
        "no append event within {BOUND:?}: {}",
        String::from_utf8_lossy(&received)
    );
}
