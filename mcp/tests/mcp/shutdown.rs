//! Closing the connection while a tool waits for a person:
//! the server exits promptly, without a panic, and the ask is closed in the
//! log with a recorded outcome.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use planb_core::AskStatus;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);

/// `planb-mcp` on the data root `dir` with `env`, its stdio piped.
fn spawn_server(dir: &std::path::Path, env: &[(&str, &str)]) -> std::process::Child {
    let mut command = Command::new(env!("CARGO_BIN_EXE_planb-mcp"));
    command
        .env("PLANB_MCP_DATA_DIR", dir)
        .env_remove("PLANB_LOG")
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (key, value) in env {
        command.env(key, value);
    }
    command.spawn().expect("spawn")
}

/// Closes the server's stdin and waits for it to exit by itself.
fn close_and_wait(
    stdin: std::process::ChildStdin,
    child: &mut std::process::Child,
) -> std::process::ExitStatus {
    drop(stdin);
    let closed_at = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        assert!(closed_at.elapsed() < WAIT, "the server did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Writes `value` as one JSON-RPC line.
fn send(stdin: &mut std::process::ChildStdin, value: Value) {
    writeln!(stdin, "{value}").expect("write");
    stdin.flush().expect("flush");
}

/// The MCP handshake over raw stdio, with the client's `capabilities`.
fn initialize(
    stdin: &mut std::process::ChildStdin,
    stdout: &mut std::io::Lines<BufReader<std::process::ChildStdout>>,
    capabilities: Value,
) {
    send(
        stdin,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": capabilities, "clientInfo": {"name": "raw", "version": "0"}}}),
    );
    stdout.next().expect("initialize result").expect("read");
    send(
        stdin,
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
}

#[test]
fn closing_stdin_while_ask_user_waits_closes_the_ask_and_exits_cleanly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = spawn_server(dir.path(), &[("ASK_NO_OPEN", "1"), ("RUST_LOG", "info")]);
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let (stderr_tx, stderr_lines) = mpsc::channel::<String>();
    let stderr = child.stderr.take().expect("stderr");
    let stderr_thread = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = stderr_tx.send(line);
        }
    });
    initialize(&mut stdin, &mut stdout, json!({"elicitation": {}}));
    send(
        &mut stdin,
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
        &mut stdin,
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

    let closed_at = Instant::now();
    let status = close_and_wait(stdin, &mut child);
    eprintln!("exited {:?} after stdin closed", closed_at.elapsed());
    stderr_thread.join().expect("stderr reader");
    seen.extend(stderr_lines.try_iter());
    let stderr = seen.join("\n");
    assert!(status.success(), "{status:?}\n{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");

    let (state, _) = crate::support::fold_log(dir.path());
    let ask = state.asks().values().next().expect("the ask");
    assert_eq!(ask.status, AskStatus::Failed, "{stderr}");
    let detail = ask.failure_detail.as_deref().unwrap_or_default();
    assert!(detail.contains("connection closed"), "{detail}");
}

/// The processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        // After "(comm)": state, then the parent's pid.
        let parent = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if parent == Some(pid) {
            found.push(child);
        }
    }
    found
}

/// Whether `pid` is a process that has not exited (a zombie has).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

/// Closing the connection while `plan_execute` waits on a downstream call
/// (a minute's sleep): the server exits by itself, the downstream server
/// it started (whose connection lives on its engine thread) is gone with
/// it, and the run is recorded ended (failed, resumable) before it exits.
#[test]
fn closing_stdin_mid_run_ends_the_server_and_the_downstream_servers_it_started() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ds = crate::support::downstream_binary();
    let servers = dir.path().join("servers.json");
    std::fs::write(
        &servers,
        json!({"mcpServers": {"beta": {"command": ds, "args": ["beta", "echo", "sleep"]}}})
            .to_string(),
    )
    .expect("servers");
    let calls = dir.path().join("calls");
    let mut child = spawn_server(
        dir.path(),
        &[
            ("PLANB_SERVERS", servers.to_str().expect("path")),
            ("DOWNSTREAM_CALLS", calls.to_str().expect("path")),
        ],
    );
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let stderr = child.stderr.take().expect("stderr");
    let stderr_thread = std::thread::spawn(move || {
        BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<_>>()
            .join("\n")
    });
    initialize(&mut stdin, &mut stdout, json!({}));
    send(
        &mut stdin,
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "plan_create", "arguments": {
        "title": "Long", "steps": [
            {"index": "1", "title": "Hello", "tool": "echo", "args": {"text": "hi"}},
            {"index": "2", "title": "Wait", "tool": "sleep", "args": {"ms": 60000}, "depends_on": ["1"]}
        ]}}}),
    );
    let created: Value =
        serde_json::from_str(&stdout.next().expect("created").expect("read")).expect("json");
    let id = created["result"]["structuredContent"]["plan_id"]
        .as_str()
        .expect("plan id")
        .to_owned();
    send(
        &mut stdin,
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "plan_execute", "arguments": {"plan_id": id}}}),
    );
    let deadline = Instant::now() + WAIT;
    while !std::fs::read_to_string(&calls).is_ok_and(|c| c.contains("\"sleep\"")) {
        assert!(Instant::now() < deadline, "the sleep call never came");
        std::thread::sleep(Duration::from_millis(20));
    }
    let downstream = children_of(child.id());
    assert_eq!(downstream.len(), 1, "one downstream server: {downstream:?}");

    let closed_at = Instant::now();
    let status = close_and_wait(stdin, &mut child);
    let stderr = stderr_thread.join().expect("stderr reader");
    assert!(status.success(), "{status:?}\n{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    while downstream.iter().any(|pid| alive(*pid)) {
        assert!(
            closed_at.elapsed() < WAIT,
            "the downstream server outlived planb-mcp"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // The server ended its run before it exited: failed, resumable.
    let (state, _) = crate::support::fold_log(dir.path());
    let run = state
        .tasks()
        .values()
        .find_map(|t| t.runs.last())
        .expect("the run");
    assert_eq!(run.state, planb_core::RunState::Failed, "{run:?}");
    assert_eq!(run.reason.as_deref(), Some("worker_error"), "{run:?}");
    assert!(run.recoverable, "{run:?}");
    let output = Command::new(env!("CARGO_BIN_EXE_planb-mcp"))
        .args(["--data-dir"])
        .arg(dir.path())
        .args(["plan", "show", &id])
        .env("PLANB_SERVERS", &servers)
        .output()
        .expect("plan show");
    let shown = String::from_utf8_lossy(&output.stdout);
    eprintln!(
        "exited {:?} after stdin closed\n{shown}",
        closed_at.elapsed()
    );
    assert!(output.status.success(), "{shown}");
    assert!(shown.contains("failed"), "{shown}");
}
