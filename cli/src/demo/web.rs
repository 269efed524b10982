//! What the demo does over HTTP in `--auto` mode, as a person's browser
//! would: send a form's answers or a review's verdict to the loopback page
//! server that opened it, and read a page of the replay.

use anyhow::Context;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The largest answer read.
const RESPONSE_BYTES_MAX: u64 = 4 * 1024 * 1024;

/// A page's address on the loopback: its port and the value of `key` in its
/// query (`sid`, `rid`).
pub(super) fn page_key(url: &str, key: &str) -> anyhow::Result<(u16, String)> {
    let rest = url
        .strip_prefix("http://127.0.0.1:")
        .with_context(|| format!("{url}: not a loopback page"))?;
    let (port, rest) = rest.split_once('/').context("no path")?;
    let port: u16 = port.parse().with_context(|| format!("{url}: no port"))?;
    let query = rest.split_once('?').map_or("", |(_, q)| q);
    let value = query
        .split('&')
        .find_map(|pair| pair.strip_prefix(&format!("{key}=")))
        .with_context(|| format!("{url}: no {key}"))?;
    Ok((port, value.to_owned()))
}

/// Sends `request` (method and path) to 127.0.0.1:`port`, with `body` as
/// JSON when given, from the page's own origin; the status and the body.
async fn exchange(port: u16, request: &str, body: Option<&Value>) -> anyhow::Result<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .with_context(|| format!("cannot reach 127.0.0.1:{port}"))?;
    let body = body.map(Value::to_string).unwrap_or_default();
    let head = format!(
        "{request} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nOrigin: http://127.0.0.1:{port}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    let mut answer = Vec::new();
    stream
        .take(RESPONSE_BYTES_MAX)
        .read_to_end(&mut answer)
        .await?;
    let answer = String::from_utf8_lossy(&answer);
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .context("no HTTP status in the answer")?;
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Ok((status, body.to_owned()))
}

/// POSTs `body` to `path` on the page server at `port`; refuses an answer
/// that is not a success.
pub(super) async fn post(port: u16, path: &str, body: &Value) -> anyhow::Result<String> {
    let (status, text) = exchange(port, &format!("POST {path}"), Some(body)).await?;
    anyhow::ensure!((200..300).contains(&status), "POST {path}: {status} {text}");
    Ok(text)
}

/// GETs `path` from the server at `port`: the status and the page.
pub(super) async fn get(port: u16, path: &str) -> anyhow::Result<(u16, String)> {
    exchange(port, &format!("GET {path}"), None).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_s_port_and_key_are_read_from_its_address() {
        let (port, sid) = page_key("http://127.0.0.1:4321/ask?sid=abc&x=1", "sid").expect("read");
        assert_eq!((port, sid.as_str()), (4321, "abc"));
        assert!(page_key("http://example.com/ask?sid=a", "sid").is_err());
        assert!(page_key("http://127.0.0.1:9/review?rid=r", "sid").is_err());
    }
}
