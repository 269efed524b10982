//! The server loop over real sockets: half-sent requests are cut off, the
//! connection limit holds, and long responses are left alone.
//!
//! Timeouts here are short (200 ms) so that nothing sleeps long; every wait
//! for something that must happen is bounded generously by [`BOUND`], and
//! the one wait for something that must *not* happen can only pass early if
//! the server is wrong.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::routing::{get, post};
use http_body::Frame;
use planb_http::Limits;
use planb_tests::net::{connect, read_until_closed};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Sleep;

/// How long a test waits for something that should happen much sooner.
const BOUND: Duration = Duration::from_secs(10);

const SHORT: Limits = Limits {
    header_read_timeout: Duration::from_millis(200),
    body_read_timeout: Duration::from_millis(200),
    connections_max: 256,
};

fn router() -> Router {
    Router::new()
        .route("/", get(|| async { "ok" }))
        .route(
            "/echo",
            post(|body: Bytes| async move { format!("{} bytes", body.len()) }),
        )
        .route("/slow", get(|| async { Body::new(Slow::default()) }))
}

/// A response that takes several times the header and body timeouts to
/// finish, as an event stream does: [`SLOW_CHUNKS`] chunks, each after
/// [`SLOW_PAUSE`].
#[derive(Default)]
struct Slow {
    sent: usize,
    pause: Option<Pin<Box<Sleep>>>,
}

const SLOW_CHUNKS: usize = 8;
const SLOW_PAUSE: Duration = Duration::from_millis(100);

impl http_body::Body for Slow {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.sent == SLOW_CHUNKS {
            return Poll::Ready(None);
        }
        let pause = self
            .pause
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(SLOW_PAUSE)));
        if pause.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        self.pause = None;
        self.sent += 1;
        let chunk = format!("chunk {}\n", self.sent);
        Poll::Ready(Some(Ok(Frame::data(Bytes::from(chunk)))))
    }
}

async fn start(limits: Limits) -> u16 {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .expect("bind");
    let port = listener.local_addr().expect("address").port();
    tokio::spawn(planb_http::serve(listener, router(), limits));
    port
}

/// Sends a whole `GET path` that asks to close afterwards, and returns the
/// response.
async fn get_on(stream: &mut TcpStream, port: u16, path: &str) -> String {
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("send");
    read_until_closed(stream, BOUND, "a whole request").await
}

#[tokio::test]
async fn half_sent_headers_are_disconnected() {
    let port = start(SHORT).await;
    let mut stream = connect(port).await;
    let head = format!("GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n");
    stream.write_all(head.as_bytes()).await.expect("send");
    let response = read_until_closed(&mut stream, BOUND, "half-sent headers").await;
    assert!(
        !response.contains("200 OK"),
        "served half a request: {response}"
    );
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_disconnected() {
    let port = start(SHORT).await;
    let mut stream = connect(port).await;
    let response = read_until_closed(&mut stream, BOUND, "a silent connection").await;
    assert_eq!(response, "", "the server sent something unasked");
}

#[tokio::test]
async fn half_sent_body_is_disconnected() {
    let port = start(SHORT).await;
    let mut stream = connect(port).await;
    let request = format!(
        "POST /echo HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 100\r\n\r\nonly ten b"
    );
    stream.write_all(request.as_bytes()).await.expect("send");
    let response = read_until_closed(&mut stream, BOUND, "a half-sent body").await;
    assert!(
        !response.contains("bytes"),
        "the handler saw a body that never came: {response}"
    );
}

#[tokio::test]
async fn a_whole_body_is_served() {
    let port = start(SHORT).await;
    let mut stream = connect(port).await;
    let request = format!(
        "POST /echo HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nContent-Length: 10\r\n\r\nten bytes!"
    );
    stream.write_all(request.as_bytes()).await.expect("send");
    let response = read_until_closed(&mut stream, BOUND, "a whole request").await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.ends_with("10 bytes"), "{response}");
}

#[tokio::test]
async fn long_responses_outlive_the_timeouts() {
    let port = start(SHORT).await;
    let mut stream = connect(port).await;
    let response = get_on(&mut stream, port, "/slow").await;
    for chunk in 1..=SLOW_CHUNKS {
        assert!(
            response.contains(&format!("chunk {chunk}\n")),
            "chunk {chunk} missing; the response was cut: {response}"
        );
    }
}

#[tokio::test]
async fn connections_past_the_limit_wait_for_one_to_close() {
    // Headers may take a minute here, so only closing a connection frees a
    // place within the test.
    let limits = Limits {
        header_read_timeout: Duration::from_secs(60),
        connections_max: 2,
        ..SHORT
    };
    let port = start(limits).await;
    let first = connect(port).await;
    let _second = connect(port).await;
    let mut third = connect(port).await;
    let request = format!("GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    third.write_all(request.as_bytes()).await.expect("send");
    let mut byte = [0u8; 1];
    let early = tokio::time::timeout(Duration::from_millis(300), third.read(&mut byte)).await;
    assert!(
        early.is_err(),
        "a third connection was served while two were open and the limit is two"
    );
    drop(first);
    let response = read_until_closed(&mut third, BOUND, "the waiting connection").await;
    assert!(
        response.starts_with("HTTP/1.1 200"),
        "the waiting connection was not served once a place freed: {response:?}"
    );
}

#[tokio::test]
async fn many_idle_connections_do_not_stop_a_request() {
    let limits = Limits {
        connections_max: 4,
        ..SHORT
    };
    let port = start(limits).await;
    let mut idle = Vec::new();
    for _ in 0..40 {
        idle.push(connect(port).await);
    }
    let mut stream = connect(port).await;
    let response = get_on(&mut stream, port, "/").await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.ends_with("ok"), "{response}");
}
