//! The lines a downstream server writes on stdout, each one JSON-RPC
//! message, passed on whole up to [`ANSWER_BYTES_MAX`]. A longer line is not
//! passed on: in place of an answer goes an error answering the same
//! request, naming the size and the limit, so the call that asked fails at
//! once instead of waiting for an answer that was dropped. A longer request
//! of the server's own (its `id` is the server's, not one of ours) is
//! dropped, and said on stderr.

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

/// The top-level `"id"` of the JSON-RPC message `bytes` (a string or a
/// number), read without parsing the rest: found even in a message that is
/// cut short or broken after it.
pub fn top_level_id(bytes: &[u8]) -> Option<Value> {
    let mut scanner = IdScanner::default();
    scanner.feed(bytes);
    scanner.id()
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

/// Finds the top-level `"id"` of a JSON object fed in pieces, without
/// keeping the rest.
#[derive(Default)]
struct IdScanner {
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// After `{` or `,` at the top level: the next string is a key.
    expect_key: bool,
    /// The top-level key being read (its first bytes).
    key: Option<Vec<u8>>,
    /// A top-level `method` key was read: the message is a request or a
    /// notification, not an answer.
    method: bool,
    /// A top-level `result`, `error` or `method` key was read: what the
    /// message is, is known.
    kind_known: bool,
    /// The key just read was `id` and `:` has not come yet, or has.
    id_key: bool,
    id_colon: bool,
    /// The id's text as read so far; `found` once it ended.
    value: Option<Vec<u8>>,
    found: Option<Vec<u8>>,
    /// The id was not one a request can have (too long).
    spoiled: bool,
}

/// Longer ids are not request ids this client makes.
const ID_BYTES_MAX: usize = 128;

impl IdScanner {
    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if (self.found.is_some() && self.kind_known) || self.spoiled {
                return;
            }
            if self.value.is_some() {
                self.value_byte(b);
            } else if self.in_string {
                self.string_byte(b);
            } else {
                self.structure_byte(b);
            }
        }
    }

    fn value_byte(&mut self, b: u8) {
        let Some(value) = self.value.as_mut() else {
            return;
        };
        let quoted = value.first() == Some(&b'"');
        if !quoted && (b == b',' || b == b'}' || b.is_ascii_whitespace()) {
            self.id_found();
            // The byte that ended the value belongs to the structure.
            self.structure_byte(b);
            return;
        }
        value.push(b);
        if value.len() > ID_BYTES_MAX {
            self.spoiled = true;
        } else if quoted && value.len() > 1 {
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.id_found();
            }
        }
    }

    /// The id's value is read whole: the scan goes on among the keys.
    fn id_found(&mut self) {
        self.found = self.value.take();
        self.id_key = false;
        self.id_colon = false;
    }

    fn string_byte(&mut self, b: u8) {
        if self.escaped {
            self.escaped = false;
        } else if b == b'\\' {
            self.escaped = true;
        } else if b == b'"' {
            self.in_string = false;
            if let Some(key) = self.key.take() {
                self.id_key = key == b"id";
                self.method |= key == b"method";
                self.kind_known |= matches!(key.as_slice(), b"method" | b"result" | b"error");
            }
            return;
        }
        if let Some(key) = self.key.as_mut()
            && key.len() <= 6
        {
            key.push(b);
        }
    }

    fn structure_byte(&mut self, b: u8) {
        match b {
            b'"' if self.id_colon => self.value = Some(vec![b]),
            b'"' => {
                self.in_string = true;
                self.key = (self.depth == 1 && self.expect_key).then(Vec::new);
                self.expect_key = false;
            }
            b'{' | b'[' => {
                self.depth += 1;
                self.expect_key = self.depth == 1 && b == b'{';
            }
            b'}' | b']' => self.depth = self.depth.saturating_sub(1),
            b',' if self.depth == 1 => {
                self.expect_key = true;
                self.id_key = false;
            }
            b':' if self.depth == 1 && self.id_key => self.id_colon = true,
            _ if b.is_ascii_whitespace() => {}
            _ if self.id_colon => self.value = Some(vec![b]),
            _ => {}
        }
    }

    /// Whether the message is a request (or a notification) of its own.
    fn is_request(&self) -> bool {
        self.method
    }

    /// The id, when one was found whole.
    fn id(&self) -> Option<Value> {
        let found = self.found.as_deref()?;
        match serde_json::from_slice::<Value>(found).ok()? {
            id @ (Value::Number(_) | Value::String(_)) => Some(id),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id_of(text: &str, piece: usize) -> Option<Value> {
        let mut scanner = IdScanner::default();
        for chunk in text.as_bytes().chunks(piece) {
            scanner.feed(chunk);
        }
        scanner.id()
    }

    #[test]
    fn the_top_level_id_is_found_wherever_it_stands_and_however_it_is_cut() {
        let cases = [
            (
                r#"{"jsonrpc":"2.0","id":7,"result":{"id":1}}"#,
                Some(json!(7)),
            ),
            (
                r#"{"result":{"id":1,"content":[{"text":"\"id\":3"}]},"jsonrpc":"2.0","id":12}"#,
                Some(json!(12)),
            ),
            (r#"{ "id" : "a\"b" , "result": 1}"#, Some(json!("a\"b"))),
            (r#"{"result":{"x":"id"},"id":null}"#, None),
            (
                r#"{"method":"notifications/message","params":{"id":4}}"#,
                None,
            ),
            (r#"{"idx":5,"id":6}"#, Some(json!(6))),
        ];
        for (text, expected) in cases {
            for piece in [1, 3, 1000] {
                assert_eq!(id_of(text, piece), expected, "{text} in pieces of {piece}");
            }
        }
    }

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
