//! The stdio framing in front of rmcp: every line the client sends is checked
//! here before rmcp sees it, and the end of stdin is announced at once.
//!
//! **Malformed lines get an answer.** rmcp drops a line that is not JSON (and
//! answers a mis-shaped one without its id), so a client whose request was
//! damaged on the way waits forever. Here every line is read with a bound
//! ([`LINE_BYTES_MAX`]) and checked against the message types rmcp decodes;
//! a line rmcp could not take gets the JSON-RPC error the specification
//! prescribes (parse error `-32700`, invalid request `-32600`, invalid params
//! `-32602`) and never reaches rmcp. The error carries the request's id
//! whenever it can be read, even from a line that does not parse, so the
//! client's call fails at once instead of waiting out its own timeout.
//!
//! **Lone surrogates.** A `\uD83D` escape without its other half (a string
//! cut inside an emoji, as JavaScript's `JSON.stringify` and Python's
//! `json.dumps` write it) is valid JSON text that Rust strings cannot hold:
//! it is taken as U+FFFD, and the replacement is logged with the request's
//! id.
//! Notifications and responses get no answer (JSON-RPC forbids it) but are
//! logged.
//!
//! **One writer.** rmcp writes its messages into an in-memory pipe; a single
//! task copies them to stdout a whole line at a time, with the error answers
//! in between, so the two never interleave inside a line.
//!
//! **Closing.** When stdin ends, [`Disconnect`] fires before rmcp learns of it,
//! so tools waiting for a person stop waiting and record how the wait ended
//! instead of sitting out rmcp's drain period.

use std::os::fd::{AsFd, OwnedFd};

use rmcp::model::ClientJsonRpcMessage;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream};
use tokio::net::unix::pipe;
use tokio::sync::{mpsc, watch};

/// Longest line accepted from the client (16 MiB, without its line end):
/// above the largest tool argument planb accepts (a 4 MiB plan,
/// JSON-escaped). rmcp reads what this layer forwards with a bound above it
/// ([`RMCP_LINE_BYTES_MAX`]), so a line let through is never dropped there.
pub const LINE_BYTES_MAX: usize = 16 * 1024 * 1024;

/// The line bound to give rmcp's transport: a forwarded line, its `\r` and
/// its `\n`.
pub const RMCP_LINE_BYTES_MAX: usize = LINE_BYTES_MAX + 2;

/// Capacity of the in-memory pipes between this layer and rmcp.
const PIPE_BYTES: usize = 256 * 1024;

/// Fires once stdin has ended (the client closed the connection or exited).
#[derive(Debug, Clone)]
pub struct Disconnect {
    receiver: watch::Receiver<bool>,
    /// For [`Disconnect::never`]: keeps the channel open so it never fires.
    _sender: Option<std::sync::Arc<watch::Sender<bool>>>,
}

impl Disconnect {
    /// A signal that never fires (for servers not on stdio).
    pub fn never() -> Disconnect {
        let (sender, receiver) = watch::channel(false);
        Disconnect {
            receiver,
            _sender: Some(std::sync::Arc::new(sender)),
        }
    }

    /// Resolves when the connection has closed.
    pub async fn closed(&self) {
        let mut receiver = self.receiver.clone();
        if receiver.wait_for(|closed| *closed).await.is_err() {
            // The reader task ended without saying so: treat as closed.
        }
    }
}

/// What to do with one line from the client.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    /// Hand it to rmcp.
    Forward,
    /// Hand rmcp this repaired line instead: the client's, with each lone
    /// surrogate escape (a cut-off emoji) made U+FFFD; how many were.
    Repaired(Vec<u8>, usize),
    /// Answer with this error response; rmcp never sees the line.
    Answer(Value),
    /// Neither (a blank line, or a malformed notification or response).
    Drop(&'static str),
}

fn error_response(id: Value, code: i64, message: String) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// Checks one line (without its newline) the way rmcp will decode it.
pub fn check_line(line: &[u8]) -> Verdict {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Verdict::Drop("blank line");
    }
    if line.len() > LINE_BYTES_MAX {
        return Verdict::Answer(error_response(
            planb_core::jsonrpc::top_level_id(line).unwrap_or(Value::Null),
            -32700,
            format!("Parse error: message over the {LINE_BYTES_MAX}-byte (16 MiB) line limit"),
        ));
    }
    // The usual case, decoded once: a message rmcp takes. Only a line it
    // would refuse is looked at again, to say what is wrong with it.
    if serde_json::from_slice::<ClientJsonRpcMessage>(line).is_ok() {
        return Verdict::Forward;
    }
    let value: Value = match serde_json::from_slice(line) {
        Ok(value) => value,
        Err(error) => {
            if let Some((repaired, count)) = without_lone_surrogates(line)
                && serde_json::from_slice::<ClientJsonRpcMessage>(&repaired).is_ok()
            {
                return Verdict::Repaired(repaired, count);
            }
            // The id, when it can be read, so the client's call fails now
            // instead of waiting for an answer that cannot come.
            let id = planb_core::jsonrpc::top_level_id(line).unwrap_or(Value::Null);
            return Verdict::Answer(error_response(id, -32700, format!("Parse error: {error}")));
        }
    };
    message_verdict(&value)
}

/// The verdict on a line that is JSON but that rmcp would not take as it
/// stands: the error its shape earns, with the id when it is usable.
fn message_verdict(value: &Value) -> Verdict {
    let Value::Object(object) = value else {
        return Verdict::Answer(error_response(
            Value::Null,
            -32600,
            "Invalid Request: a message must be a JSON object (batches are not supported)".into(),
        ));
    };
    // A usable id is a string or an integer; anything else cannot be echoed.
    let id = match object.get("id") {
        Some(id @ Value::String(_)) => Some(id.clone()),
        Some(id @ Value::Number(n)) if n.is_i64() || n.is_u64() => Some(id.clone()),
        _ => None,
    };
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Verdict::Answer(error_response(
            id.unwrap_or(Value::Null),
            -32600,
            "Invalid Request: \"jsonrpc\" must be \"2.0\"".into(),
        ));
    }
    match ClientJsonRpcMessage::deserialize(value) {
        Ok(_) => Verdict::Forward,
        Err(error) => refused(object, id, &error),
    }
}

/// The answer to a JSON-RPC object rmcp refused with `error`, by what it
/// lacks; nothing for a malformed notification or response.
fn refused(
    object: &serde_json::Map<String, Value>,
    id: Option<Value>,
    error: &dyn std::fmt::Display,
) -> Verdict {
    let method = object.get("method");
    match (method, id) {
        (Some(Value::String(method)), Some(id)) => {
            let params = object.get("params");
            let (code, what) = match params {
                Some(Value::Object(_)) | None => (-32602, "Invalid params"),
                Some(_) => (-32602, "Invalid params: \"params\" must be an object;"),
            };
            Verdict::Answer(error_response(
                id,
                code,
                format!("{what} for {method}: {error}"),
            ))
        }
        (Some(_), Some(id)) => Verdict::Answer(error_response(
            id,
            -32600,
            "Invalid Request: \"method\" must be a string".into(),
        )),
        (Some(_), None) if object.contains_key("id") => Verdict::Answer(error_response(
            Value::Null,
            -32600,
            "Invalid Request: \"id\" must be a string or an integer".into(),
        )),
        (Some(_), None) => Verdict::Drop("malformed notification"),
        (None, _) if object.contains_key("result") || object.contains_key("error") => {
            Verdict::Drop("malformed response")
        }
        (None, id) => Verdict::Answer(error_response(
            id.unwrap_or(Value::Null),
            -32600,
            "Invalid Request: no \"method\"".into(),
        )),
    }
}

/// `line` with each `\uXXXX` escape of a lone surrogate (one not paired
/// with its other half) inside a string replaced by `\uFFFD`, and how many
/// were; `None` when there was none.
fn without_lone_surrogates(line: &[u8]) -> Option<(Vec<u8>, usize)> {
    let surrogate = |at: usize| -> Option<u16> {
        let hex = line.get(at + 2..at + 6)?;
        let unit = u16::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
        (line.get(at..at + 2) == Some(b"\\u") && (0xD800..=0xDFFF).contains(&unit)).then_some(unit)
    };
    let mut out = Vec::with_capacity(line.len());
    let (mut at, mut count, mut in_string) = (0, 0, false);
    while at < line.len() {
        let byte = line[at];
        if !in_string {
            in_string = byte == b'"';
            out.push(byte);
            at += 1;
            continue;
        }
        match byte {
            b'"' => in_string = false,
            b'\\' => {
                if let Some(unit) = surrogate(at) {
                    let paired =
                        unit < 0xDC00 && surrogate(at + 6).is_some_and(|next| next >= 0xDC00);
                    if paired {
                        out.extend_from_slice(&line[at..at + 12]);
                        at += 12;
                    } else {
                        out.extend_from_slice(b"\\uFFFD");
                        count += 1;
                        at += 6;
                    }
                } else {
                    // Any other escape: itself and the character it escapes.
                    out.extend_from_slice(&line[at..(at + 2).min(line.len())]);
                    at += 2;
                }
                continue;
            }
            _ => {}
        }
        out.push(byte);
        at += 1;
    }
    (count > 0).then_some((out, count))
}

/// Reads one line of at most [`LINE_BYTES_MAX`] bytes (plus one, to tell
/// an over-long line), discarding the rest of a longer one. Returns `None` at
/// the end of input.
async fn read_line(
    reader: &mut (impl AsyncBufReadExt + Unpin),
    line: &mut Vec<u8>,
) -> std::io::Result<Option<()>> {
    line.clear();
    let mut over = false;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok((!line.is_empty() || over).then_some(()));
        }
        let (chunk, done) = match available.iter().position(|b| *b == b'\n') {
            Some(end) => (&available[..end], Some(end + 1)),
            None => (available, None),
        };
        if !over {
            let room = LINE_BYTES_MAX + 1 - line.len();
            line.extend_from_slice(&chunk[..chunk.len().min(room)]);
            over = line.len() > LINE_BYTES_MAX;
        }
        let consumed = done.unwrap_or(available.len());
        reader.consume(consumed);
        if done.is_some() {
            return Ok(Some(()));
        }
    }
}

/// Starts the framing on the process's stdin and stdout. Returns the ends rmcp
/// reads and writes, and the disconnect signal.
pub fn start() -> (DuplexStream, DuplexStream, Disconnect) {
    let input: Box<dyn AsyncRead + Unpin + Send> = match polled_input() {
        Some(input) => input,
        None => Box::new(tokio::io::stdin()),
    };
    let output: Box<dyn AsyncWrite + Unpin + Send> = match polled_output() {
        Some(output) => output,
        None => Box::new(tokio::io::stdout()),
    };
    start_on(input, output)
}

// Stdin and stdout are read and written non-blocking by the runtime itself
// when they are pipes or Unix sockets: what clients starting a stdio server
// connect it with (Node's, through libuv, hand it sockets). Tokio's own
// stdin and stdout hand each read and write to a thread of the blocking pool
// and wait for it: two hand-offs between threads a message, which on a
// small machine cost more than most calls' work. A terminal or a file keeps
// tokio's.

fn polled_input() -> Option<Box<dyn AsyncRead + Unpin + Send>> {
    let fd = std::io::stdin().as_fd().try_clone_to_owned().ok()?;
    match pipe::Receiver::from_owned_fd(fd.try_clone().ok()?) {
        Ok(pipe) => Some(Box::new(pipe)),
        Err(_) => Some(Box::new(unix_socket(fd)?)),
    }
}

fn polled_output() -> Option<Box<dyn AsyncWrite + Unpin + Send>> {
    let fd = std::io::stdout().as_fd().try_clone_to_owned().ok()?;
    match pipe::Sender::from_owned_fd(fd.try_clone().ok()?) {
        Ok(pipe) => Some(Box::new(pipe)),
        Err(_) => Some(Box::new(unix_socket(fd)?)),
    }
}

/// `fd` as a Unix stream socket the runtime polls; `None` when it is not one.
fn unix_socket(fd: OwnedFd) -> Option<tokio::net::UnixStream> {
    let socket = std::os::unix::net::UnixStream::from(fd);
    // Fails unless the descriptor is a Unix socket.
    socket.local_addr().ok()?;
    socket.set_nonblocking(true).ok()?;
    tokio::net::UnixStream::from_std(socket).ok()
}

/// Reads the client's lines: each rmcp can take goes to it (repaired when
/// it holds lone surrogates), each it could not gets its error answer sent
/// to the writer. At the end of input, `closed` fires before rmcp is told.
async fn read_client(
    input: impl AsyncRead + Unpin,
    mut to_rmcp: DuplexStream,
    answers: mpsc::UnboundedSender<Value>,
    closed: watch::Sender<bool>,
) {
    let mut reader = BufReader::new(input);
    let mut line = Vec::new();
    loop {
        match read_line(&mut reader, &mut line).await {
            Ok(Some(())) => {}
            Ok(None) => break,
            Err(error) => {
                tracing::warn!("reading stdin failed: {error}");
                break;
            }
        }
        match check_line(&line) {
            Verdict::Forward => {
                line.push(b'\n');
                if to_rmcp.write_all(&line).await.is_err() {
                    break;
                }
            }
            Verdict::Repaired(mut repaired, count) => {
                let id = planb_core::jsonrpc::top_level_id(&repaired)
                    .map_or_else(|| "without an id".to_owned(), |id| id.to_string());
                tracing::warn!(
                    "request {id}: {count} lone surrogate escape(s) (a cut-off emoji?) taken as U+FFFD"
                );
                repaired.push(b'\n');
                if to_rmcp.write_all(&repaired).await.is_err() {
                    break;
                }
            }
            Verdict::Answer(response) => {
                tracing::warn!("answered a malformed message: {}", response["error"]);
                let _ = answers.send(response);
            }
            Verdict::Drop(what) => tracing::debug!("ignored a {what} from the client"),
        }
    }
    let _ = closed.send(true);
    let _ = to_rmcp.shutdown().await;
}

/// Copies rmcp's messages and the error answers to the client, a whole line
/// at a time.
async fn write_client(
    mut output: impl AsyncWrite + Unpin,
    from_rmcp: DuplexStream,
    mut answer_lines: mpsc::UnboundedReceiver<Value>,
) {
    let mut from_rmcp = BufReader::new(from_rmcp);
    let mut line = Vec::new();
    let mut rmcp_open = true;
    loop {
        tokio::select! {
            read = from_rmcp.read_until(b'\n', &mut line), if rmcp_open => {
                match read {
                    Ok(0) | Err(_) => rmcp_open = false,
                    Ok(_) => {
                        if output.write_all(&line).await.is_err() || output.flush().await.is_err() {
                            return;
                        }
                        line.clear();
                    }
                }
            }
            // Once the reader is gone, `recv` yields `None` at once: the
            // pattern then disables this branch instead of spinning, and
            // `else` ends the task when rmcp has closed too.
            Some(answer) = answer_lines.recv() => {
                let mut bytes = answer.to_string().into_bytes();
                bytes.push(b'\n');
                if output.write_all(&bytes).await.is_err() || output.flush().await.is_err() {
                    return;
                }
            }
            else => return,
        }
    }
}

fn start_on(
    input: impl AsyncRead + Unpin + Send + 'static,
    output: impl AsyncWrite + Unpin + Send + 'static,
) -> (DuplexStream, DuplexStream, Disconnect) {
    let (rmcp_input, to_rmcp) = tokio::io::duplex(PIPE_BYTES);
    let (from_rmcp, rmcp_output) = tokio::io::duplex(PIPE_BYTES);
    let (answers, answer_lines) = mpsc::unbounded_channel::<Value>();
    let (closed, disconnect) = watch::channel(false);

    tokio::spawn(read_client(input, to_rmcp, answers, closed));
    tokio::spawn(write_client(output, from_rmcp, answer_lines));

    let disconnect = Disconnect {
        receiver: disconnect,
        _sender: None,
    };
    (rmcp_input, rmcp_output, disconnect)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(line: &str) -> Value {
        match check_line(line.as_bytes()) {
            Verdict::Answer(value) => value,
            other => panic!("{line}: expected an error answer, got {other:?}"),
        }
    }

    #[test]
    fn malformed_lines_get_the_error_the_specification_prescribes() {
        let cases = [
            // Unparsable, but the id is readable: the error carries it.
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"n":1e400}}"#,
                -32700,
                json!(1),
            ),
            (
                r#"{"jsonrpc":"2.0","id":"r-9","method":"tools/li"#,
                -32700,
                json!("r-9"),
            ),
            (
                r#"{"jsonrpc":"2.0","method":"tools/li"#,
                -32700,
                Value::Null,
            ),
            ("[1,2]", -32600, Value::Null),
            (
                r#"{"jsonrpc":"1.0","id":7,"method":"ping"}"#,
                -32600,
                json!(7),
            ),
            (
                r#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":[1]}"#,
                -32602,
                json!("a"),
            ),
            (r#"{"jsonrpc":"2.0","id":4}"#, -32600, json!(4)),
        ];
        for (line, code, id) in cases {
            let value = answered(line);
            assert_eq!(value["error"]["code"], code, "{line}: {value}");
            assert_eq!(value["id"], id, "{line}: {value}");
            assert_eq!(value["jsonrpc"], "2.0");
        }
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert_eq!(answered(&deep)["error"]["code"], -32700);
    }

    #[test]
    fn a_lone_surrogate_is_taken_as_u_fffd_and_a_pair_or_an_escaped_backslash_is_not() {
        // What Node's JSON.stringify writes for a string cut inside an emoji.
        let cut = br#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"save_plan","arguments":{"plan":"ok \ud83d","t":"\udc00 \ud83d\ude00 \\ud83d"}}}"#;
        let Verdict::Repaired(repaired, count) = check_line(cut) else {
            panic!("not repaired: {:?}", check_line(cut));
        };
        assert_eq!(count, 2);
        let value: Value = serde_json::from_slice(&repaired).expect("json");
        let arguments = &value["params"]["arguments"];
        assert_eq!(arguments["plan"], "ok \u{FFFD}");
        assert_eq!(arguments["t"], "\u{FFFD} \u{1F600} \\ud83d");
        // A line without one is left to the usual checks.
        assert_eq!(without_lone_surrogates(br#"{"a":"\ud83d\ude00"}"#), None);
    }

    #[test]
    fn good_messages_pass_and_notifications_are_never_answered() {
        for line in [
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
        ] {
            assert_eq!(check_line(line.as_bytes()), Verdict::Forward, "{line}");
        }
        assert!(matches!(check_line(b"   "), Verdict::Drop(_)));
        assert!(matches!(
            check_line(br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":[]}"#),
            Verdict::Drop(_) | Verdict::Forward
        ));
    }

    #[tokio::test]
    async fn an_over_long_line_is_answered_and_the_next_one_still_read() {
        let mut input = vec![b'x'; LINE_BYTES_MAX + 10];
        input.push(b'\n');
        input.extend_from_slice(br#"{"jsonrpc":"2.0","id":9,"method":"ping"}"#);
        input.push(b'\n');
        let mut reader = BufReader::new(&input[..]);
        let mut line = Vec::new();
        read_line(&mut reader, &mut line)
            .await
            .expect("read")
            .expect("a line");
        assert_eq!(line.len(), LINE_BYTES_MAX + 1);
        assert_eq!(
            answered(std::str::from_utf8(&line).expect("ascii"))["error"]["code"],
            -32700
        );
        read_line(&mut reader, &mut line)
            .await
            .expect("read")
            .expect("a line");
        assert_eq!(check_line(&line), Verdict::Forward);
        assert_eq!(read_line(&mut reader, &mut line).await.expect("read"), None);
    }
}
