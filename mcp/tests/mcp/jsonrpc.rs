//! Malformed JSON-RPC lines get an answer, through the real
//! binary: a client whose request was damaged never waits forever, and the
//! server stays healthy.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

#[test]
fn every_malformed_line_gets_the_prescribed_error_and_the_server_stays_healthy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_planb-mcp"))
        .env("PLANB_MCP_DATA_DIR", dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    // Lines are read on a thread so that a missing reply fails the test
    // (after a generous bound) instead of hanging it.
    let (lines, replies) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if lines.send(line).is_err() {
                return;
            }
        }
    });
    let next = || {
        replies
            .recv_timeout(Duration::from_secs(60))
            .expect("a reply within 60 s")
    };
    let mut send = |line: &str| {
        stdin.write_all(line.as_bytes()).expect("write");
        stdin.write_all(b"\n").expect("write");
        stdin.flush().expect("flush");
    };
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}});
    send(&initialize.to_string());
    send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let initialized = next();
    assert!(initialized.contains("\"result\""), "{initialized}");
    let mut exchange = |line: &str| -> Value {
        send(line);
        let reply = next();
        serde_json::from_str(&reply).unwrap_or_else(|e| panic!("{reply}: {e}"))
    };

    let over_long = format!(
        r#"{{"jsonrpc":"2.0","id":9,"method":"ping","params":{{"x":"{}"}}}}"#,
        "a".repeat(16 * 1024 * 1024)
    );
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    // A string cut inside an emoji, as Node's JSON.stringify writes it (and
    // Python's json.dumps): valid JSON text, taken with U+FFFD.
    let cut = exchange(r#"{"jsonrpc":"2.0","id":2,"method":"ping","params":{"s":"\ud83d"}}"#);
    assert_eq!(cut["id"], 2, "{cut}");
    assert!(cut.get("result").is_some(), "{cut}");
    // Lines that cannot be parsed are answered with their id when it can
    // be read, so the client's call fails at once.
    let cases: [(&str, i64, Value); 6] = [
        (&deep, -32700, Value::Null),
        (
            r#"{"jsonrpc":"2.0","id":3,"method":"ping","params":{"n":1e400}}"#,
            -32700,
            json!(3),
        ),
        (
            r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":"x"}"#,
            -32602,
            json!(4),
        ),
        (
            r#"{"jsonrpc":"2.0","id":5,"method":"tools/li"#,
            -32700,
            json!(5),
        ),
        (&over_long, -32700, json!(9)),
        ("42", -32600, Value::Null),
    ];
    for (line, code, id) in cases {
        let reply = exchange(line);
        let shown = &line[..line.len().min(60)];
        assert_eq!(reply["error"]["code"], code, "{shown}: {reply}");
        assert_eq!(reply["id"], id, "{shown}: {reply}");
        // Still healthy: a ping right after is answered.
        let pong = exchange(r#"{"jsonrpc":"2.0","id":"after","method":"ping"}"#);
        assert_eq!(pong["id"], "after", "{pong}");
        assert!(pong.get("result").is_some(), "{pong}");
    }
    drop(stdin);
    assert!(child.wait().expect("exit").success());
}

#[test]
fn a_client_that_connects_by_a_unix_socket_is_served_as_one_that_uses_pipes() {
    // Node's clients (libuv) give a stdio server Unix sockets, not pipes:
    // planb reads and writes them itself, and their end ends it.
    use std::os::unix::net::UnixStream;
    let dir = tempfile::tempdir().expect("tempdir");
    let (ours, theirs) = UnixStream::pair().expect("socket pair");
    let mut child = Command::new(env!("CARGO_BIN_EXE_planb-mcp"))
        .env("PLANB_MCP_DATA_DIR", dir.path())
        .stdin(Stdio::from(std::os::fd::OwnedFd::from(
            theirs.try_clone().expect("clone"),
        )))
        .stdout(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    ours.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    let mut reader = BufReader::new(ours.try_clone().expect("clone"));
    let mut writer = ours;
    let mut exchange = move |line: &str| -> Value {
        writer.write_all(line.as_bytes()).expect("write");
        writer.write_all(b"\n").expect("write");
        let mut reply = String::new();
        reader.read_line(&mut reply).expect("a reply within 60 s");
        serde_json::from_str(&reply).unwrap_or_else(|e| panic!("{reply:?}: {e}"))
    };
    let initialized = exchange(
        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "socket", "version": "0"}}}).to_string(),
    );
    assert_eq!(initialized["id"], 1, "{initialized}");
    assert!(
        initialized["result"]["serverInfo"].is_object(),
        "{initialized}"
    );
    send_initialized(&mut exchange);
    let listed = exchange(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#);
    let tools = listed["result"]["tools"].as_array().expect("tools");
    assert!(tools.iter().any(|t| t["name"] == "ask_user"), "{listed}");
    let malformed = exchange("{not json");
    assert_eq!(malformed["error"]["code"], -32700, "{malformed}");
    // Our end closed (the closure owned it): the server sees the end of its
    // input and exits.
    drop(exchange);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "planb-mcp still runs 60 s after its client closed the socket"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends `notifications/initialized` through an exchange that expects no
/// reply to it: a ping follows, and its reply is the one read.
fn send_initialized(exchange: &mut impl FnMut(&str) -> Value) {
    let pong = exchange(
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}
{"jsonrpc":"2.0","id":"after-initialized","method":"ping"}"#,
    );
    assert_eq!(pong["id"], "after-initialized", "{pong}");
}

#[test]
fn a_browser_plan_setup_keeps_its_data_root_and_its_session_tool_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("browser-plan-root");
    let mut child = Command::new(env!("CARGO_BIN_EXE_planb-mcp"))
        .env_remove("PLANB_MCP_DATA_DIR")
        .env("BROWSER_PLAN_DATA_DIR", &root)
        .current_dir(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut exchange = |line: Value| -> Value {
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .expect("write");
        stdin.flush().expect("flush");
        loop {
            let reply = stdout.next().expect("a reply").expect("read");
            let reply: Value = serde_json::from_str(&reply).expect("json");
            if reply.get("id") == line.get("id") {
                return reply;
            }
        }
    };
    exchange(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}),
    );
    let listed = exchange(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"init_browser_plan_session"), "{names:?}");
    let started = exchange(
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "init_browser_plan_session", "arguments": {"title": "Old skill"}}}),
    );
    let text = started["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.starts_with("sessionId: "), "{started}");
    assert!(
        root.join("log").is_dir(),
        "the log is not under BROWSER_PLAN_DATA_DIR"
    );
    let _ = child.kill();
    let _ = child.wait();
}
