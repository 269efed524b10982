//! Raw connections to a server on loopback, for tests of what a server does
//! with a connection itself: half a request, an idle one, one it must close.

use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// A connection to 127.0.0.1:`port`.
pub async fn connect(port: u16) -> TcpStream {
    TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap_or_else(|e| panic!("connect to 127.0.0.1:{port}: {e}"))
}

/// Everything the server sends on `stream` until it closes the connection;
/// panics, naming `what`, if it still holds the connection after `bound`.
pub async fn read_until_closed(stream: &mut TcpStream, bound: Duration, what: &str) -> String {
    let mut received = Vec::new();
    let read = tokio::time::timeout(bound, async {
        // A reset is a close too: the server may drop unread bytes.
        let _ = stream.read_to_end(&mut received).await;
    })
    .await;
    assert!(
        read.is_ok(),
        "{what}: the server still held the connection after {bound:?}"
    );
    String::from_utf8_lossy(&received).into_owned()
}
