//! Closing the connection while a tool waits for a person (issue 8, item 8):
//! the server exits promptly, without a panic, and the ask is closed in the
//! log with a recorded outcome.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use planb_core::AskStatus;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);

#[test]
fn issue_8_closing_stdin_while_ask_user_waits_closes_the_ask_and_exits_cleanly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_planb-mcp"))
        .env("PLANB_MCP_DATA_DIR", dir.path())
        .env("ASK_NO_OPEN", "1")
        .env("RUST_LOG", "info")
        .current_dir(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let (stderr_tx, stderr_lines) = mpsc::channel::<String>();
    let stderr = child.stderr.take().expect("stderr");
    let stderr_thread = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = stderr_tx.send(line);
        }
    });
    let mut send = |value: Value| {
        writeln!(stdin, "{value}").expect("write");
        stdin.flush().expect("flush");
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {"elicitation": {}}, "clientInfo": {"name": "raw", "version": "0"}}}),
    );
    stdout.next().expect("initialize result").expect("read");
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "init_planb_session", "arguments": {"title": "t"}}}),
    );
    let created: Value =
        serde_json::from_str(&stdout.next().expect("session").expect("read")).expect("json");
    let text = created["result"]["content"][0]["text"]
        .as_str()
        .expect("text");
    let session = text
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("sessionId: "))
        .expect("session id");
    send(
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "ask_user", "arguments": {
        "sessionId": session, "title": "Waiting", "questions": [{"id": "a", "kind": "text", "label": "A"}]}}}),
    );
    // The form is open once its URL is logged.
    let deadline = Instant::now() + WAIT;
    let mut seen = Vec::new();
    loop {
        let line = stderr_lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("the form URL on stderr");
        let opened = line.contains("opening browser directly:");
        seen.push(line);
        if opened {
            break;
        }
    }

    drop(stdin);
    let closed_at = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        assert!(closed_at.elapsed() < WAIT, "the server did not exit");
        std::thread::sleep(Duration::from_millis(20));
    };
    eprintln!("exited {:?} after stdin closed", closed_at.elapsed());
    stderr_thread.join().expect("stderr reader");
    seen.extend(stderr_lines.try_iter());
    let stderr = seen.join("\n");
    assert!(status.success(), "{status:?}\n{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");

    let (state, _) = support::fold_log(dir.path());
    let ask = state.asks().values().next().expect("the ask");
    assert_eq!(ask.status, AskStatus::Failed, "{stderr}");
    let detail = ask.failure_detail.as_deref().unwrap_or_default();
    assert!(detail.contains("connection closed"), "{detail}");
}
