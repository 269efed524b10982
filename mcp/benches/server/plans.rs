//! Execution plans through the real binary against a real downstream MCP
//! server (the `downstream` example, release build): a 50-step chain of
//! `echo` (per-step overhead over a raw call), 50 independent 20 ms
//! `sleep`s at concurrency 4 (wall time against ⌈50/4⌉ × 20 ms), and a
//! one-step plan (time to the first call); the chain again after 500 runs
//! of it (a long history). The floors, measured in the same
//! run: a raw JSON-RPC `tools/call` of `echo` to the same server binary, and
//! a raw write + fdatasync.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{Server, bench_root, stats};

const STEPS: usize = 50;
const RUNS: usize = 7;
const RAW_CALLS: usize = 500;
const SLEEP_MS: u64 = 20;
const RAW_SLEEPS: usize = 20;
/// Runs of the chain between its first and its late measurement.
const HISTORY: usize = 500;
/// Chain runs each paired with a burst of raw calls.
const PAIRED: usize = 15;
/// Raw calls in one burst.
const BURST: usize = 30;
/// The engine's default concurrency: calls in flight in a wide plan.
const WIDTH: usize = 4;

fn downstream() -> PathBuf {
    let status = planb_tests::process::cargo(env!("CARGO"))
        .args([
            "build",
            "--release",
            "-p",
            "planb-mcp",
            "--example",
            "downstream",
        ])
        .status()
        .expect("cargo build");
    assert!(status.success(), "building the downstream example failed");
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../target/release/examples/downstream")
        .canonicalize()
        .expect("the downstream example")
}

/// The medians of a raw `tools/call` of `echo`, and of a `sleep` of
/// SLEEP_MS, to the server, straight over its stdio.
fn raw_call_medians(server: &mut Server) -> (f64, f64) {
    for _ in 0..50 {
        server.call("echo", json!({"text": "warm"}));
    }
    let mut samples: Vec<Duration> = (0..RAW_CALLS)
        .map(|n| {
            let start = Instant::now();
            server.call("echo", json!({"text": format!("step {n}")}));
            start.elapsed()
        })
        .collect();
    let mut sleeps: Vec<Duration> = (0..RAW_SLEEPS)
        .map(|_| {
            let start = Instant::now();
            server.call("sleep", json!({"ms": SLEEP_MS}));
            start.elapsed()
        })
        .collect();
    (stats(&mut samples).0, stats(&mut sleeps).0)
}

/// The median of a `tools/call` of `echo` through rmcp's client, the
/// client planb's engine calls with, on a current-thread runtime as the
/// engine's: the call as planb can make it, before any plan work.
fn rmcp_call_median(binary: &Path) -> f64 {
    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let mut command = tokio::process::Command::new(binary);
        command.args(["bench", "echo", "sleep"]);
        let transport = rmcp::transport::TokioChildProcess::new(command).expect("spawn");
        let client = ().serve(transport).await.expect("handshake");
        let call = |text: String| {
            let args = json!({ "text": text })
                .as_object()
                .cloned()
                .unwrap_or_default();
            client.call_tool(CallToolRequestParams::new("echo").with_arguments(args))
        };
        for _ in 0..50 {
            call("warm".into()).await.expect("echo");
        }
        let mut samples = Vec::with_capacity(RAW_CALLS);
        for n in 0..RAW_CALLS {
            let start = Instant::now();
            call(format!("step {n}")).await.expect("echo");
            samples.push(start.elapsed());
        }
        let _ = client.cancel().await;
        stats(&mut samples).0
    })
}

fn chain() -> Value {
    let steps: Vec<Value> = (1..=STEPS)
        .map(|n| {
            let depends: Vec<String> = if n == 1 {
                Vec::new()
            } else {
                vec![(n - 1).to_string()]
            };
            json!({"index": n.to_string(), "title": format!("Echo {n}"), "tool": "echo",
                "args": {"text": format!("step {n} of run ${{run}}")}, "depends_on": depends})
        })
        .collect();
    json!({"title": "Chain of 50", "steps": steps})
}

fn wide() -> Value {
    let steps: Vec<Value> = (1..=STEPS)
        .map(|n| {
            json!({"index": n.to_string(), "title": format!("Sleep {n}"), "tool": "sleep",
                "args": {"ms": SLEEP_MS}})
        })
        .collect();
    json!({"title": "50 wide", "steps": steps})
}

fn wide_echo() -> Value {
    let steps: Vec<Value> = (1..=STEPS)
        .map(|n| {
            json!({"index": n.to_string(), "title": format!("Echo {n}"), "tool": "echo",
                "args": {"text": format!("wide {n} of run ${{run}}")}})
        })
        .collect();
    json!({"title": "50 wide echo", "steps": steps})
}

fn one() -> Value {
    json!({"title": "One call", "steps": [
        {"index": "1", "title": "Echo", "tool": "echo", "args": {"text": "first"}}
    ]})
}

/// A plan's per-step overhead with each of PAIRED runs of plan `id` set
/// against its tool time measured on `raw` just before it, so both see the
/// machine in the same state: `floor(raw, n)` is the tool time of run `n`'s
/// calls, in ms. The medians of the overhead a step and of the floor.
fn paired_overhead(
    server: &mut Server,
    raw: &mut Server,
    id: &str,
    first: usize,
    mut floor: impl FnMut(&mut Server, usize) -> f64,
) -> (f64, f64) {
    let (overheads, floors): (Vec<f64>, Vec<f64>) = (first..first + PAIRED)
        .map(|n| {
            let floor = floor(raw, n);
            let wall = run_times(server, id, n..=n)[0].as_secs_f64() * 1e3;
            ((wall - floor) / STEPS as f64, floor)
        })
        .unzip();
    (median(overheads), median(floors))
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The tool time of a chain run: STEPS times the median of BURST raw calls.
fn raw_chain(raw: &mut Server, tag: usize) -> f64 {
    let mut burst: Vec<Duration> = (0..BURST)
        .map(|k| {
            let start = Instant::now();
            raw.call("echo", json!({"text": format!("pair {tag} {k}")}));
            start.elapsed()
        })
        .collect();
    stats(&mut burst).0 * STEPS as f64
}

/// The wall time of STEPS raw `echo` calls to `raw` with WIDTH of them in
/// flight (a new one sent as each reply comes): the tool time of a wide
/// plan of echo at the engine's concurrency, on the same server.
fn raw_wide(raw: &mut Server, tag: usize) -> f64 {
    let start = Instant::now();
    let mut sent = 0;
    let mut pending = std::collections::HashSet::new();
    while sent < WIDTH.min(STEPS) {
        pending.insert(raw.send_call("echo", json!({"text": format!("wide {tag} {sent}")})));
        sent += 1;
    }
    while !pending.is_empty() {
        let id = raw.next_reply_id();
        assert!(pending.remove(&id), "a reply to no call sent: {id}");
        if sent < STEPS {
            pending.insert(raw.send_call("echo", json!({"text": format!("wide {tag} {sent}")})));
            sent += 1;
        }
    }
    start.elapsed().as_secs_f64() * 1e3
}

/// Median wall time of `plan_execute` of `plan` (created once) over RUNS
/// runs after a warm-up run; and the plan's id.
fn runs(server: &mut Server, plan: &Value) -> (f64, String) {
    let created = server.call_json("plan_create", plan.clone());
    let id = created["plan_id"].as_str().expect("plan id").to_owned();
    let mut samples = run_times(server, &id, 0..=RUNS);
    samples.remove(0);
    (stats(&mut samples).0, id)
}

/// The wall time of each `plan_execute` of the plan `id`, the run numbers
/// (`${run}`) taken from `numbers`.
fn run_times(
    server: &mut Server,
    id: &str,
    numbers: std::ops::RangeInclusive<usize>,
) -> Vec<Duration> {
    numbers
        .map(|n| {
            let start = Instant::now();
            // Each run's calls differ (`${run}`), so none reuses the blobs
            // of the one before.
            let outcome = server.call_json(
                "plan_execute",
                json!({"plan_id": id, "variables": {"run": n}}),
            );
            let elapsed = start.elapsed();
            assert_eq!(outcome["success"], true, "{outcome}");
            elapsed
        })
        .collect()
}

pub fn run(raw_fsync: f64) {
    let binary = downstream();
    let mut raw = {
        let mut command = Command::new(&binary);
        command.args(["bench", "echo", "sleep"]);
        let mut raw = Server::from_command(command);
        raw.initialize();
        raw
    };
    let (raw_call, raw_sleep) = raw_call_medians(&mut raw);
    let rmcp_call = rmcp_call_median(&binary);
    let root = bench_root("plans");
    let servers = root.join("servers.json");
    std::fs::write(
        &servers,
        json!({"mcpServers": {"bench": {"command": binary, "args": ["bench", "echo", "sleep"]}}})
            .to_string(),
    )
    .expect("servers file");
    let mut server = Server::spawn_with(
        &root,
        &[
            ("PLANB_SERVERS", servers.to_str().expect("path")),
            ("PLANB_LOG", "warn"),
        ],
    );
    server.initialize();
    let (chain_wall, chain_id) = runs(&mut server, &chain());
    let per_step = chain_wall / STEPS as f64;
    let overhead = per_step - raw_call;
    println!(
        "plan: 50-step chain of echo: median {chain_wall:.1} ms = {per_step:.3} ms per step; raw echo call {raw_call:.3} ms, raw write+fdatasync {raw_fsync:.3} ms"
    );
    println!(
        "plan: engine overhead per step (per step - raw call) {overhead:.3} ms = {:.2}x one fdatasync; a chain step records its result and the next step's start in one durable append; budget <= 1 ms + one durable append = {:.3} ms",
        overhead / raw_fsync,
        1.0 + raw_fsync
    );
    println!(
        "plan: the same echo call through rmcp's client (planb's): {rmcp_call:.3} ms; per step - that call = {:.3} ms, the plan's own work",
        per_step - rmcp_call
    );
    let (paired, _) = paired_overhead(&mut server, &mut raw, &chain_id, RUNS + 1, raw_chain);
    println!(
        "plan: engine overhead per step, each of {PAIRED} runs set against {BURST} raw calls just before it: median {paired:.3} ms"
    );
    // The same plan again after HISTORY runs of it: every run stays in
    // its task, so whatever copies or scans a plan's runs shows here.
    let done = RUNS + PAIRED;
    run_times(&mut server, &chain_id, done + 1..=done + HISTORY);
    let mut late = run_times(
        &mut server,
        &chain_id,
        done + HISTORY + 1..=done + HISTORY + RUNS,
    );
    let late_per_step = stats(&mut late).0 / STEPS as f64;
    println!(
        "plan: the same chain after {} runs of it: {late_per_step:.3} ms per step = {:.2}x its first runs (flat: 1.0)",
        done + HISTORY,
        late_per_step / per_step
    );
    let (wide_wall, _) = runs(&mut server, &wide());
    let ideal = STEPS.div_ceil(4) as f64 * SLEEP_MS as f64;
    // The tool's own time is a little over SLEEP_MS (timer, transport).
    let floor = STEPS.div_ceil(4) as f64 * raw_sleep;
    println!(
        "plan: 50 wide x {SLEEP_MS} ms sleep at concurrency 4: median {wide_wall:.1} ms against the ideal {ideal:.0} ms = {:.2}x; against {} x a raw sleep call ({raw_sleep:.2} ms) = {floor:.0} ms: {:.2}x",
        wide_wall / ideal,
        STEPS.div_ceil(4),
        wide_wall / floor
    );
    // The same width of echo calls: at concurrency 4 the calls themselves
    // take about 13 raw calls; the rest is the engine's, shared by 50 steps.
    let (wide_echo_wall, wide_echo_id) = runs(&mut server, &wide_echo());
    let wide_echo_overhead =
        (wide_echo_wall - STEPS.div_ceil(WIDTH) as f64 * raw_call) / STEPS as f64;
    println!(
        "plan: 50 wide x echo at concurrency {WIDTH}: median {wide_echo_wall:.2} ms; less {} raw calls = {wide_echo_overhead:.3} ms a step",
        STEPS.div_ceil(WIDTH)
    );
    // Four calls in flight do not take the time of one on two cores: the
    // server does four calls' work. The tool time of the wide plan is that
    // of the same calls made raw, four at a time, measured beside each run.
    let (wide_echo_paired, wide_floor) =
        paired_overhead(&mut server, &mut raw, &wide_echo_id, RUNS + 1, raw_wide);
    println!(
        "plan: 50 wide x echo, each of {PAIRED} runs set against {STEPS} raw calls {WIDTH} at a time just before it (median {wide_floor:.2} ms): {wide_echo_paired:.3} ms a step"
    );
    let (one_wall, _) = runs(&mut server, &one());
    println!(
        "plan: one-step plan (plan_execute to result, connection warm): median {one_wall:.2} ms; of which the call itself ~{raw_call:.3} ms"
    );
    // For bench/mcp-cli/compare.py, which sets these beside the peer's.
    println!(
        "plan-figures {}",
        json!({
            "chain_ms_per_step": per_step,
            "raw_call_ms": raw_call,
            "rmcp_call_ms": rmcp_call,
            "overhead_vs_rmcp_ms": per_step - rmcp_call,
            "overhead_ms": overhead,
            "overhead_paired_ms": paired,
            "raw_fsync_ms": raw_fsync,
            "wide_ms": wide_wall,
            "wide_ideal_ms": ideal,
            "wide_floor_ms": floor,
            "one_step_ms": one_wall,
            "wide_echo_ms": wide_echo_wall,
            "wide_echo_overhead_ms": wide_echo_overhead,
            "wide_echo_raw_ms": wide_floor,
            "wide_echo_overhead_paired_ms": wide_echo_paired,
            "chain_after_history_ms_per_step": late_per_step,
        })
    );
}
