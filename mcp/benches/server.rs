//! Server benchmarks through the real binary, against the performance budgets:
//! cold start to a finished `initialize`, durable `save_plan` (median, p99),
//! the `ask_user` round trip (call → /spec → /submit → result), and idle RSS.
//! Each is shown beside a floor measured in the same run: spawning a trivial
//! process, and a raw write + fdatasync.
//!
//! It also measures how they hold as history grows: `initialize` over a log of
//! 50 000 events, and `save_plan` in a session holding 10 versions against one
//! holding 10 000 (the logs are written straight to the log, one sync per
//! batch, so building them takes seconds).
//!
//! The task engine: `task_status` with 10 000 tasks in the store beside a
//! constant tool call (`prompt_examples`) through the same transport, and a
//! 40-step run against a local OpenAI-compatible server that answers at
//! once, with where its time goes (from the log's own timestamps) beside
//! the raw fdatasync floor and a raw HTTP round trip to the same server.
//!
//! Execution plans: per-step overhead on a 50-step chain, a 50-wide plan
//! against its ideal wall time, and a one-step plan, beside a raw MCP
//! round trip to the same downstream server.
//!
//! Run with `cargo bench -p planb-mcp` (everything),
//! `cargo bench -p planb-mcp --bench server -- sessions` (start, saves,
//! asks and memory only), `-- tasks` (the task engine only) or `-- plans`
//! (execution plans only). The data root goes under cargo's target tmp dir (a real disk) or
//! `PLANB_BENCH_DIR`.

#![allow(clippy::print_stdout, reason = "a benchmark reports on stdout")]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const COLD_STARTS: usize = 30;
const SAVES: usize = 500;
const ASKS: usize = 100;

fn bench_root(name: &str) -> PathBuf {
    let root = std::env::var_os("PLANB_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")))
        .join(name);
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).expect("bench dir");
    root
}

struct Server {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    stderr: std::sync::mpsc::Receiver<String>,
    next_id: u64,
}

impl Server {
    fn spawn(root: &Path) -> Server {
        Server::spawn_with(root, &[])
    }

    fn spawn_with(root: &Path, env: &[(&str, &str)]) -> Server {
        let mut command = Command::new(env!("CARGO_BIN_EXE_planb-mcp"));
        command
            .envs(env.iter().copied())
            .env("PLANB_MCP_DATA_DIR", root)
            .env("ASK_NO_OPEN", "1")
            .env("RUST_LOG", "info");
        Server::from_command(command)
    }

    /// Any stdio MCP server.
    fn from_command(mut command: Command) -> Server {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn planb-mcp");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("opening browser directly: ").nth(1) {
                    let _ = tx.send(
                        rest.split_whitespace()
                            .next()
                            .unwrap_or_default()
                            .to_string(),
                    );
                }
            }
        });
        Server {
            child,
            stdin,
            stdout,
            stderr: rx,
            next_id: 1,
        }
    }

    /// Writes `message` and its line end in one write, as a client's
    /// buffered writer would: written in two, the server may wake for each.
    fn send(&mut self, message: &Value) {
        let mut line = serde_json::to_vec(message).expect("json");
        line.push(b'\n');
        self.stdin.write_all(&line).expect("write");
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send(&message);
        self.wait_reply(id)
    }

    /// The next message the server writes.
    fn receive(&mut self) -> Value {
        let mut line = String::new();
        assert!(
            self.stdout.read_line(&mut line).expect("read") > 0,
            "server closed"
        );
        serde_json::from_str(&line).expect("json")
    }

    fn initialize(&mut self) {
        self.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {"elicitation": {}}, "clientInfo": {"name": "bench", "version": "0"}}),
        );
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    }

    fn call_json(&mut self, tool: &str, arguments: Value) -> Value {
        let reply = self.request("tools/call", json!({"name": tool, "arguments": arguments}));
        assert_ne!(reply["result"]["isError"], true, "{tool}: {reply}");
        reply["result"]["structuredContent"].clone()
    }

    /// A new session titled `title`: its id.
    fn new_session(&mut self, title: &str) -> String {
        let created = self.call("init_planb_session", json!({"title": title}));
        created
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("sessionId: "))
            .expect("session")
            .to_string()
    }

    fn call(&mut self, tool: &str, arguments: Value) -> String {
        let reply = self.request("tools/call", json!({"name": tool, "arguments": arguments}));
        reply["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// Sends a call without waiting for its reply.
    fn send_call(&mut self, tool: &str, arguments: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let message = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}});
        self.send(&message);
        id
    }

    /// The id of the next reply, whichever call it answers.
    fn next_reply_id(&mut self) -> u64 {
        loop {
            let value = self.receive();
            if let Some(id) = value["id"].as_u64() {
                assert!(value.get("error").is_none(), "{value}");
                return id;
            }
        }
    }

    fn wait_reply(&mut self, id: u64) -> Value {
        loop {
            let value = self.receive();
            if value["id"] == id {
                return value;
            }
        }
    }

    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn http(port: u16, method: &str, path: &str, body: &str) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nOrigin: http://127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).expect("send");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read");
    response
}

fn stats(samples: &mut [Duration]) -> (f64, f64) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let p99 = samples[((samples.len() as f64 * 0.99) as usize).min(samples.len() - 1)];
    (ms(samples[samples.len() / 2]), ms(p99))
}

/// Writes `events` to a fresh log at `root`, in batches of one sync each.
fn write_log(root: &Path, events: impl Iterator<Item = planb_core::EventBody>) -> u64 {
    let (log, _) = planb_log::open_dir(&root.join("log"), Default::default()).expect("log");
    let mut batch = Vec::new();
    let mut total = 0u64;
    let flush = |batch: &mut Vec<Vec<u8>>| {
        let refs: Vec<&[u8]> = batch.iter().map(Vec::as_slice).collect();
        log.append(&refs).expect("append");
        batch.clear();
    };
    for body in events {
        let event = planb_core::Event {
            id: planb_core::EventId::from_uuid(uuid::Uuid::now_v7()),
            at: planb_core::Timestamp(1_780_000_000_000 + total as i64),
            body,
        };
        batch.push(planb_core::encode(&event).expect("encode"));
        total += 1;
        if batch.len() == 1000 {
            flush(&mut batch);
        }
    }
    flush(&mut batch);
    total
}

fn session_id(n: u128) -> planb_core::SessionId {
    planb_core::SessionId::from_uuid(uuid::Uuid::from_u128(n + 1))
}

/// A session with `versions` plan versions of `plan`.
fn session_with_plans(n: u128, versions: u32, plan: &str) -> Vec<planb_core::EventBody> {
    let session = session_id(n);
    let mut bodies = vec![planb_core::EventBody::SessionCreated {
        session,
        title: Some(format!("session {n}")),
        intent: None,
        project_path: Some(format!("/work/project-{}", n % 50)),
    }];
    bodies.extend(
        (1..=versions).map(|version| planb_core::EventBody::PlanVersionSaved {
            session,
            version,
            title: None,
            content: format!("# v{version}\n{plan}"),
        }),
    );
    bodies
}

/// Median time of `count` saves into `session`.
fn median_saves(server: &mut Server, session: &str, plan: &str, count: usize) -> f64 {
    let mut saves: Vec<Duration> = (0..count)
        .map(|i| {
            let start = Instant::now();
            let text = server.call(
                "save_plan",
                json!({"sessionId": session, "plan": format!("# extra {i}\n{plan}")}),
            );
            let elapsed = start.elapsed();
            assert_layout_at_reply(&text);
            elapsed
        })
        .collect();
    stats(&mut saves).0
}

/// Spawn to finished `initialize`, and spawn to the first `save_plan`
/// answered (which waits for the store to open), `runs` times each.
fn starts(root: &Path, session: &str, runs: usize, snapshot: bool) -> (f64, f64) {
    let mut initialized = Vec::new();
    let mut first_call = Vec::new();
    for i in 0..runs {
        if !snapshot {
            let _ = std::fs::remove_file(root.join("state.snapshot"));
        }
        let start = Instant::now();
        let mut server = Server::spawn(root);
        server.initialize();
        initialized.push(start.elapsed());
        let text = server.call(
            "save_plan",
            json!({"sessionId": session, "plan": format!("# start {i}\n")}),
        );
        first_call.push(start.elapsed());
        assert!(text.starts_with("Saved plan v"), "{text}");
    }
    (stats(&mut initialized).0, stats(&mut first_call).0)
}

/// Grown histories: start-up over 50 000 and 1 000 000 events, and
/// save_plan in a session of 10 against one of 10 000 versions.
fn history(raw_median: f64, plan: &str) {
    let empty = bench_root("server-empty");
    let mut server = Server::spawn(&empty);
    server.initialize();
    let session = server.new_session("empty");
    drop(server);
    let (init, call) = starts(&empty, &session, 10, true);
    println!(
        "start-up on an empty root: initialize {init:.1} ms, first save_plan answered {call:.1} ms (budget: initialize <= 20 ms)"
    );
    let short_plan = "- a step of the plan\n".repeat(8);
    for (sessions, runs) in [(1000u128, 10), (20_000, 3)] {
        let root = bench_root("server-history");
        let events = write_log(
            &root,
            (0..sessions).flat_map(|n| session_with_plans(n, 49, &short_plan)),
        );
        let session = session_id(0).to_string();
        let (init, call) = starts(&root, &session, runs, false);
        println!(
            "start-up over {events} events without a state snapshot: initialize {init:.1} ms, first save_plan answered {call:.1} ms"
        );
        let (init, call) = starts(&root, &session, runs, true);
        println!(
            "start-up over {events} events from the state snapshot: initialize {init:.1} ms (budget <= 20 ms), first save_plan answered {call:.1} ms"
        );
        let snapshot = std::fs::metadata(root.join("state.snapshot")).map_or(0, |m| m.len());
        let log: u64 = std::fs::read_dir(root.join("log"))
            .expect("log dir")
            .flatten()
            .filter_map(|e| e.metadata().ok())
            .map(|m| m.len())
            .sum();
        println!(
            "  log {:.1} MiB, state snapshot {:.1} MiB",
            log as f64 / 1048576.0,
            snapshot as f64 / 1048576.0
        );
    }

    for versions in [10u32, 10_000] {
        let root = bench_root("server-versions");
        write_log(&root, session_with_plans(0, versions, plan).into_iter());
        let mut server = Server::spawn(&root);
        server.initialize();
        let session = session_id(0).to_string();
        let median = median_saves(&mut server, &session, plan, 100);
        println!(
            "save_plan in a session of {versions} versions (layout complete at the reply): median {median:.3} ms = {:.2}x the raw fdatasync floor",
            median / raw_median
        );
    }
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("planb-mcp bench: run with `cargo bench -p planb-mcp`");
        return;
    }
    // Floor 1: spawning a trivial process and reading its exit.
    let mut spawn: Vec<Duration> = (0..COLD_STARTS)
        .map(|_| {
            let start = Instant::now();
            Command::new("true").status().expect("true");
            start.elapsed()
        })
        .collect();
    let (spawn_median, _) = stats(&mut spawn);
    let tasks_only = std::env::args().any(|a| a == "tasks");
    if std::env::args().any(|a| a == "plans") {
        plans::run(raw_fsync_median());
        return;
    }
    if tasks_only {
        tasks::run(raw_fsync_median());
        return;
    }
    // Cold start to a finished initialize, on a data root holding one session.
    let root = bench_root("server-cold");
    {
        let mut server = Server::spawn(&root);
        server.initialize();
        server.call("init_planb_session", json!({"title": "bench"}));
    }
    let mut cold: Vec<Duration> = (0..COLD_STARTS)
        .map(|_| {
            let start = Instant::now();
            let mut server = Server::spawn(&root);
            server.initialize();
            let elapsed = start.elapsed();
            drop(server);
            elapsed
        })
        .collect();
    let (cold_median, cold_p99) = stats(&mut cold);
    println!(
        "cold start to finished initialize: median {cold_median:.1} ms, p99 {cold_p99:.1} ms (budget <= 20 ms); spawning `true`: {spawn_median:.1} ms"
    );

    // Floor 2: raw write + fdatasync of a plan-sized record.
    let raw_median = raw_fsync_median();
    let plan = "- a step of the plan\n".repeat(50);

    let root = bench_root("server-hot");
    let mut server = Server::spawn(&root);
    server.initialize();
    let session = server.new_session("bench");
    std::thread::sleep(Duration::from_millis(300));
    let idle_kib = server.rss_kib();
    let mut saves: Vec<Duration> = (0..SAVES)
        .map(|i| {
            let start = Instant::now();
            let text = server.call(
                "save_plan",
                json!({"sessionId": session, "plan": format!("# v{i}\n{plan}")}),
            );
            let elapsed = start.elapsed();
            assert!(text.starts_with("Saved plan v"), "{text}");
            assert_layout_at_reply(&text);
            elapsed
        })
        .collect();
    let (save_median, save_p99) = stats(&mut saves);
    println!(
        "save_plan (durable, {} B plan, through JSON-RPC, layout complete at the reply): median {save_median:.3} ms, p99 {save_p99:.3} ms; raw write+fdatasync of the same size: median {raw_median:.3} ms -> {:.2}x the floor (budget <= 2x)",
        plan.len(),
        save_median / raw_median
    );
    let mut lists: Vec<Duration> = (0..SAVES)
        .map(|_| {
            let start = Instant::now();
            let reply = server.request("tools/list", json!({}));
            let elapsed = start.elapsed();
            assert!(reply["result"]["tools"].is_array(), "{reply}");
            elapsed
        })
        .collect();
    let (list_median, list_p99) = stats(&mut lists);
    println!(
        "tools/list through JSON-RPC: median {list_median:.3} ms, p99 {list_p99:.3} ms (budget <= 1 ms)"
    );

    let ask = json!({"sessionId": session, "title": "Bench", "questions": [
        {"id": "name", "kind": "text", "label": "Name", "required": true},
        {"id": "lang", "kind": "single", "label": "Language", "options": ["Rust", "Go"]},
        {"id": "n", "kind": "scale", "label": "N", "min": 1, "max": 5}
    ]});
    let answers = json!({"name": "x", "lang": "Rust", "n": 3});
    let mut asks: Vec<Duration> = (0..ASKS)
        .map(|_| {
            let start = Instant::now();
            let id = server.send_call("ask_user", ask.clone());
            let url = server.stderr.recv().expect("url");
            let rest = url.strip_prefix("http://127.0.0.1:").expect("url");
            let (port, query) = rest.split_once('/').expect("path");
            let port: u16 = port.parse().expect("port");
            let sid = query.strip_prefix("ask?sid=").expect("sid");
            let spec = http(port, "GET", &format!("/spec?sid={sid}"), "");
            assert!(spec.starts_with("HTTP/1.1 200"), "{spec}");
            let body = json!({"sid": sid, "answers": answers}).to_string();
            let submitted = http(port, "POST", "/submit", &body);
            assert!(submitted.starts_with("HTTP/1.1 200"), "{submitted}");
            let reply = server.wait_reply(id);
            let elapsed = start.elapsed();
            assert!(
                reply["result"]["content"][0]["text"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("\"lang\"")
            );
            elapsed
        })
        .collect();
    let (ask_median, ask_p99) = stats(&mut asks);
    println!(
        "ask_user round trip (call -> /spec -> /submit -> result, 3 durable events): median {ask_median:.2} ms, p99 {ask_p99:.2} ms (budget median <= 2 ms); {:.1}x the raw fdatasync floor",
        ask_median / raw_median
    );
    println!(
        "idle resident memory after initialize and one session: {:.1} MB (budget <= 15 MB)",
        idle_kib as f64 / 1024.0
    );
    drop(server);
    short_session_rss(&ask, &answers, &plan);
    if std::env::args().any(|a| a == "sessions") {
        return;
    }
    history(raw_median, &plan);
    tasks::run(raw_median);
}

/// Resident memory of a fresh server after a short session: 20 saves and
/// 5 asks answered.
fn short_session_rss(ask: &Value, answers: &Value, plan: &str) {
    let root = bench_root("server-short");
    let mut server = Server::spawn(&root);
    server.initialize();
    let session = server.new_session("short");
    for i in 0..20 {
        let text = server.call(
            "save_plan",
            json!({"sessionId": session, "plan": format!("# v{i}\n{plan}")}),
        );
        assert!(text.starts_with("Saved plan v"), "{text}");
    }
    let mut ask = ask.clone();
    ask["sessionId"] = json!(session);
    for _ in 0..5 {
        let id = server.send_call("ask_user", ask.clone());
        let url = server.stderr.recv().expect("url");
        let rest = url.strip_prefix("http://127.0.0.1:").expect("url");
        let (port, query) = rest.split_once('/').expect("path");
        let port: u16 = port.parse().expect("port");
        let sid = query.strip_prefix("ask?sid=").expect("sid");
        let body = json!({"sid": sid, "answers": answers}).to_string();
        let submitted = http(port, "POST", "/submit", &body);
        assert!(submitted.starts_with("HTTP/1.1 200"), "{submitted}");
        server.wait_reply(id);
    }
    std::thread::sleep(Duration::from_millis(300));
    println!(
        "resident memory after 20 saves and 5 asks: {:.1} MB (budget <= 15 MB)",
        server.rss_kib() as f64 / 1024.0
    );
}

/// Checks, right after `save_plan` answered, that the files the layout
/// promises are there: the version's Markdown and metadata, and a manifest
/// listing it (read after the timing stopped).
fn assert_layout_at_reply(reply: &str) {
    let version: u64 = reply
        .strip_prefix("Saved plan v")
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no version in {reply}"));
    let md = reply
        .lines()
        .find_map(|l| l.strip_prefix("path: "))
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("no path in {reply}"));
    let json = md.with_extension("json");
    let meta: Value =
        serde_json::from_slice(&std::fs::read(&json).expect("vN.json at the reply")).expect("json");
    assert_eq!(meta["version"], version);
    let manifest = md
        .parent()
        .and_then(Path::parent)
        .expect("session dir")
        .join("session.json");
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(manifest).expect("session.json")).expect("json");
    assert_eq!(manifest["latestPlanVersion"], version, "{manifest}");
}

/// The median of raw write + fdatasync of a plan-sized record.
fn raw_fsync_median() -> f64 {
    let raw_dir = bench_root("server-raw");
    let mut raw_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(raw_dir.join("raw"))
        .expect("raw");
    let plan = "- a step of the plan\n".repeat(50);
    let mut raw: Vec<Duration> = (0..SAVES)
        .map(|_| {
            let start = Instant::now();
            raw_file.write_all(plan.as_bytes()).expect("write");
            raw_file.sync_data().expect("sync");
            start.elapsed()
        })
        .collect();
    stats(&mut raw).0
}

#[path = "server/tasks.rs"]
mod tasks;

#[path = "server/plans.rs"]
mod plans;
