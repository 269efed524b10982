//! The lines a downstream server writes on stdout, each one JSON-RPC
//! message, passed on whole up to [`ANSWER_BYTES_MAX`]. A longer line is not
//! passed on: in place of an answer goes an error answering the same
//! request, naming the size and the limit, so the call that asked fails at
//! once instead of waiting for an answer that was dropped. A longer request
//! of the server's own (its `id` is the server's, not one of ours) is
//! dropped, and said on stderr.

use planb_core::jsonrpc::IdScanner;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};

/// The largest message (one line) taken from a downstream server: a tool's
/// answer up to this size reaches its step whole.
pub const ANSWER_BYTES_MAX: usize = 64 << 20;

/// Copies `from` to `to` line by line until `from` ends, replacing each line
/// over `max` bytes by an error answer to its request id (a line without one
/// is dropped, and said on stderr).
pub async fn relay(
    from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    max: usize,
    server: String,
) -> std::io::Result<()> {
    let mut reader = BufReader::with_capacity(64 << 10, from);
    let mut line: Vec<u8> = Vec::new();
    let mut over: Option<(IdScanner, usize)> = None;
    loop {
        let (taken, ended) = {
            let available = reader.fill_buf().await?;
            if available.is_empty() {
                break;
            }
            let newline = available.iter().position(|b| *b == b'\n');
            let take = newline.map_or(available.len(), |at| at + 1);
            let chunk = &available[..take];
            match &mut over {
                Some((scanner, bytes)) => {
                    scanner.feed(chunk);
                    *bytes += take;
                }
                None if line.len() + take - usize::from(newline.is_some()) > max => {
                    let mut scanner = IdScanner::default();
                    scanner.feed(&line);
                    scanner.feed(chunk);
                    over = Some((scanner, line.len() + take));
                    line.clear();
                }
                None => line.extend_from_slice(chunk),
            }
            (take, newline.is_some())
        };
        reader.consume(taken);
        if !ended {
            continue;
        }
        match over.take() {
            None => to.write_all(&line).await?,
            Some((scanner, bytes)) => {
                let bytes = bytes.saturating_sub(1);
                match scanner.id() {
                    Some(id) if !scanner.is_request() => {
                        to.write_all(&too_long(id, bytes, max)).await?;
                    }
                    _ => tracing::warn!(
                        "downstream server {server:?} wrote a message of {bytes} bytes that answers no request of planb's, over the {max}-byte limit: dropped"
                    ),
                }
            }
        }
        line.clear();
    }
    to.write_all(&line).await?;
    to.shutdown().await
}

/// The error line answering request `id` whose answer was `bytes` long.
fn too_long(id: Value, bytes: usize, max: usize) -> Vec<u8> {
    let answer = json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {
            "code": -32603,
            "message": format!(
                "the answer was {bytes} bytes, over the limit of {max} bytes for one answer from a downstream server; it was not kept"
            ),
        },
    });
    let mut text = answer.to_string().into_bytes();
    text.push(b'\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    #[tokio::test]
    async fn a_line_over_the_limit_becomes_an_error_for_its_request() {
        let big = format!(
            "{{\"result\":{{\"text\":\"{}\"}},\"jsonrpc\":\"2.0\",\"id\":3}}\n",
            "x".repeat(500)
        );
        let input = format!("{{\"id\":1}}\n{big}{{\"id\":2}}\n");
        let mut out = Vec::new();
        relay(input.as_bytes(), &mut out, 100, "s".into())
            .await
            .expect("relay");
        let lines: Vec<Value> = String::from_utf8(out)
            .expect("utf-8")
            .lines()
            .map(|l| serde_json::from_str(l).expect("json"))
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0], json!({"id": 1}));
        assert_eq!(lines[1]["id"], json!(3));
        let message = lines[1]["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(&format!("{} bytes", big.len() - 1)) && message.contains("100 bytes"),
            "{message}"
        );
        assert_eq!(lines[2], json!({"id": 2}));
    }

    #[tokio::test]
    async fn a_line_of_the_limit_passes_and_a_request_over_it_is_dropped_unanswered() {
        let exact = format!("{{\"id\":4,\"result\":\"{}\"}}", "y".repeat(80));
        let max = exact.len();
        let request = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"sampling/createMessage\",\"params\":\"{}\"}}",
            "z".repeat(200)
        );
        let input = format!("{exact}\n{request}\n{{\"id\":6}}\n");
        let mut out = Vec::new();
        relay(input.as_bytes(), &mut out, max, "s".into())
            .await
            .expect("relay");
        let out = String::from_utf8(out).expect("utf-8");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines, [exact.as_str(), "{\"id\":6}"], "{out}");
    }
}
