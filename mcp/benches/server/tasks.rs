//! The task engine benchmarks: `task_status` at 10 000 tasks, and a 40-step
//! run against a local model server that answers at once.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use planb_core::{EventBody, RunId, RunOutcome, TaskId};
use serde_json::json;

use super::{Server, bench_root, stats, write_log};

const TASKS: u128 = 10_000;
const STATUS_CALLS: usize = 2_000;
/// Model steps in the long run; with its report, 40 steps.
const CHAIN: usize = 39;

fn task_id(n: u128) -> TaskId {
    TaskId::from_uuid(uuid::Uuid::from_u128(0x7a5c_0000_0000 + n))
}

/// A task of the built-in pipeline with one run: completed for most,
/// stopped half way for every tenth.
fn task_events(n: u128, closure: &[String]) -> Vec<EventBody> {
    let task = task_id(n);
    let run = RunId::from_uuid(uuid::Uuid::from_u128(0x0b00_0000_0000 + n));
    let mut bodies = vec![
        EventBody::TaskCreated {
            task,
            pipeline: "project-plan".into(),
            pipeline_version: 1,
            prompt: format!("Plan number {n}: open a bakery in Lyon within 9 months"),
            speed: "fast".into(),
            target: "build_plan".into(),
            model_profile: None,
            client_request_id: None,
            project_path: None,
        },
        EventBody::RunStarted {
            task,
            run,
            resumed_from: None,
            owner_pid: 1,
            host: "bench".into(),
            variables: None,
        },
    ];
    let stopped = n.is_multiple_of(10);
    let steps = if stopped {
        closure.len() / 2
    } else {
        closure.len()
    };
    for (i, step) in closure.iter().take(steps).enumerate() {
        bodies.push(EventBody::StepStarted {
            task,
            run,
            step: step.clone(),
            attempt: 1,
            input: [i as u8; 32],
            call: None,
        });
        bodies.push(EventBody::StepSucceeded {
            task,
            run,
            step: step.clone(),
            input: [i as u8; 32],
            artifact: [(n % 251) as u8; 32],
            bytes: 900,
            duration_ms: 1_500,
            tokens_in: 800,
            tokens_out: 300,
        });
    }
    bodies.push(EventBody::RunEnded {
        task,
        run,
        outcome: if stopped {
            RunOutcome::Stopped
        } else {
            RunOutcome::Completed
        },
        reason: None,
        failed_step: None,
        recoverable: true,
    });
    bodies
}

fn status_at_scale() {
    let root = bench_root("tasks-status");
    let pipeline = planb_core::pipelines::project_plan();
    let target = planb_core::dag::StepId::parse("build_plan").expect("id");
    let closure: Vec<String> = pipeline
        .closure(&target)
        .expect("closure")
        .iter()
        .map(|s| s.as_str().to_owned())
        .collect();
    let events = write_log(&root, (0..TASKS).flat_map(|n| task_events(n, &closure)));
    let mut server = Server::spawn(&root);
    server.initialize();
    // The first call waits for the store to open.
    server.call_json("task_status", json!({"task_id": task_id(0).to_string()}));
    let mut status: Vec<Duration> = (0..STATUS_CALLS)
        .map(|i| {
            let n = (i as u128 * 7_919) % TASKS;
            let start = Instant::now();
            let reply = server.call_json("task_status", json!({"task_id": task_id(n).to_string()}));
            let elapsed = start.elapsed();
            assert!(reply["state"].is_string(), "{reply}");
            elapsed
        })
        .collect();
    let mut constant: Vec<Duration> = (0..STATUS_CALLS)
        .map(|_| {
            let start = Instant::now();
            server.call_json("prompt_examples", json!({}));
            start.elapsed()
        })
        .collect();
    let (median, p99) = stats(&mut status);
    let (floor_median, floor_p99) = stats(&mut constant);
    println!(
        "task_status with {TASKS} tasks ({events} events) through JSON-RPC: median {median:.3} ms, p99 {p99:.3} ms (budget p99 <= 1 ms); prompt_examples (a constant answer) through the same transport: median {floor_median:.3} ms, p99 {floor_p99:.3} ms -> p99 {:.2}x the transport",
        p99 / floor_p99
    );
}

/// An OpenAI-compatible chat completions server that answers every request
/// at once with a short fixed text; returns its port.
fn instant_model() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || answer(stream));
        }
    });
    port
}

fn answer(stream: TcpStream) {
    let mut reader = BufReader::new(stream);
    loop {
        let mut length = 0usize;
        let mut line = String::new();
        // Request line, then headers to the blank line.
        let mut first = true;
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" && !first {
                break;
            }
            first = false;
            let lower = line.to_ascii_lowercase();
            if let Some(value) = lower.strip_prefix("content-length:") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let reply = json!({
            "id": "bench",
            "object": "chat.completion",
            "choices": [{"index": 0, "finish_reason": "stop",
                "message": {"role": "assistant", "content": "## Answer\n\n- one point\n- another point\n"}}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 12, "total_tokens": 112}
        })
        .to_string();
        let response = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{reply}",
            reply.len()
        );
        if reader.get_mut().write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}

/// The median of raw request/response round trips to the model server.
fn raw_model_round_trip(port: u16) -> f64 {
    let body =
        json!({"model": "bench", "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let mut samples: Vec<Duration> = (0..200)
        .map(|_| {
            let start = Instant::now();
            let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
            let request = format!(
                "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            stream.write_all(request.as_bytes()).expect("send");
            let mut reader = BufReader::new(stream);
            let mut line = String::new();
            let mut length = 0;
            loop {
                line.clear();
                reader.read_line(&mut line).expect("read");
                if line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().expect("length");
                }
            }
            let mut reply = vec![0; length];
            reader.read_exact(&mut reply).expect("body");
            start.elapsed()
        })
        .collect();
    stats(&mut samples).0
}

fn write_chain_pipeline(root: &Path) {
    let mut steps: Vec<serde_json::Value> = (1..=CHAIN)
        .map(|i| {
            let needs: Vec<String> = if i == 1 {
                vec![]
            } else {
                vec![format!("s{:02}", i - 1)]
            };
            json!({"id": format!("s{i:02}"), "title": format!("Step {i}"), "needs": needs,
                "model": {"prompt": "Continue the plan for: {{prompt}}. {{detail}}"}})
        })
        .collect();
    steps.push(json!({"id": "report", "title": "Report",
        "needs": (1..=CHAIN).map(|i| format!("s{i:02}")).collect::<Vec<_>>(), "render": "report"}));
    let dir = root.join("pipelines");
    std::fs::create_dir_all(&dir).expect("pipelines dir");
    std::fs::write(
        dir.join("chain40.json"),
        json!({"name": "chain40", "version": 1, "steps": steps}).to_string(),
    )
    .expect("pipeline file");
}

/// Start and end time (ms) of each step of the task's only run, and the
/// run's own start and end, from the log.
fn timings(root: &Path) -> (i64, i64, BTreeMap<String, (i64, i64)>) {
    let mut reader =
        planb_log::read_dir(&root.join("log"), Default::default(), planb_log::Cursor(1))
            .expect("reader");
    let (mut started, mut ended) = (0, 0);
    let mut steps: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    while let Some(record) = reader.next().expect("read") {
        let envelope = planb_core::decode(&record.payload, planb_core::Cursor(record.cursor.0))
            .expect("decode");
        let at = envelope.event.at.0;
        match envelope.event.body {
            EventBody::RunStarted { .. } => started = at,
            EventBody::RunEnded { .. } => ended = at,
            EventBody::StepStarted { step, .. } => {
                steps.insert(step, (at, 0));
            }
            EventBody::StepSucceeded { step, .. } => {
                if let Some(entry) = steps.get_mut(&step) {
                    entry.1 = at;
                }
            }
            _ => {}
        }
    }
    (started, ended, steps)
}

fn long_run(raw_fsync: f64) {
    let root = bench_root("tasks-run");
    write_chain_pipeline(&root);
    let port = instant_model();
    let model_round_trip = raw_model_round_trip(port);
    let spec = format!("openai:http://127.0.0.1:{port}/v1");
    let mut server = Server::spawn_with(
        &root,
        &[
            ("PLANB_MODEL", spec.as_str()),
            ("PLANB_MODEL_NAME", "bench"),
        ],
    );
    server.initialize();
    let clock = Instant::now();
    let created = server.call_json(
        "task_create",
        json!({"prompt": "Open a neighbourhood bakery in Lyon", "speed_vs_detail": "fast",
            "pipeline": "chain40", "target": "report"}),
    );
    let task = created["task_id"].as_str().expect("task_id").to_owned();
    let created_after = clock.elapsed();
    loop {
        let status = server.call_json("task_status", json!({"task_id": task}));
        match status["state"].as_str() {
            Some("completed") => break,
            Some("running" | "created") => std::thread::sleep(Duration::from_millis(20)),
            other => panic!("the run ended {other:?}: {status}"),
        }
    }
    let observed = clock.elapsed();
    let (started, ended, steps) = timings(&root);
    let run_ms = (ended - started) as f64;
    let inside: f64 = steps.values().map(|(s, e)| (e - s) as f64).sum();
    let between = run_ms - inside;
    let count = steps.len() as f64;
    println!(
        "40-step run (39 model steps in a chain + report, a model server answering at once): {run_ms:.0} ms from RunStarted to RunEnded ({:.2} ms a step); task_create returned after {:.0} ms; completion seen by polling after {:.0} ms",
        run_ms / count,
        created_after.as_secs_f64() * 1e3,
        observed.as_secs_f64() * 1e3,
    );
    println!(
        "  where it goes: {inside:.0} ms inside steps (start to success: the model call plus the worker's own work), {between:.0} ms between them (recording each success, writing tasks/<id>/, scheduling the next); raw HTTP round trip to the same model server: {model_round_trip:.3} ms"
    );
    let overhead = run_ms / count - model_round_trip;
    println!(
        "  engine overhead per step over the model's own round trip: {overhead:.2} ms (budget <= 1 ms + one durable append = {:.2} ms); raw write+fdatasync: {raw_fsync:.3} ms -> {:.1} fdatasyncs a step",
        1.0 + raw_fsync,
        overhead / raw_fsync
    );
}

/// Every task engine benchmark; `raw_fsync` is the floor measured by the caller.
pub fn run(raw_fsync: f64) {
    status_at_scale();
    long_run(raw_fsync);
}
