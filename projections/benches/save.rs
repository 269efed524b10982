//! The store's share of a durable `save_plan`: `Store::execute` of a plan of
//! about 1 KB in one process, against a raw write + `fdatasync` of the same
//! size on the same disk in the same run. The MCP round trip on top of it is
//! measured by `cargo bench -p planb-mcp`.
//!
//! Run with `cargo bench -p planb-projections --bench save`. Files go under
//! cargo's target tmp dir or `PLANB_BENCH_DIR`.

#![allow(clippy::print_stdout, reason = "a benchmark reports on stdout")]

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use planb_core::{Command, SessionId};
use planb_projections::{DataRoot, Store, SystemEnvironment};

const SAVES: usize = 2_000;
const VERSIONS_PER_SESSION: usize = 200;

fn bench_dir(name: &str) -> PathBuf {
    let root = std::env::var_os("PLANB_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")))
        .join(name);
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).expect("create bench dir");
    root
}

fn median_ms(samples: &mut [Duration]) -> f64 {
    samples.sort_unstable();
    samples[samples.len() / 2].as_secs_f64() * 1e3
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let plan = "- a step of the plan\n".repeat(50);

    let raw_dir = bench_dir("save-raw");
    let mut raw_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(raw_dir.join("raw"))
        .expect("raw file");
    let mut raw: Vec<Duration> = (0..SAVES)
        .map(|_| {
            let start = Instant::now();
            raw_file.write_all(plan.as_bytes()).expect("write");
            raw_file.sync_data().expect("sync");
            start.elapsed()
        })
        .collect();
    let raw = median_ms(&mut raw);

    let root = bench_dir("save-store");
    let (store, _) =
        Store::open(DataRoot::new(&root), Arc::new(SystemEnvironment)).expect("open store");
    // Sessions of 200 versions, so every save rewrites `session.json` too
    // (a larger session's manifest is rewritten at most once a second).
    let sessions: Vec<SessionId> = (0..SAVES.div_ceil(VERSIONS_PER_SESSION))
        .map(|n| {
            let session = SessionId::from_uuid(uuid::Uuid::from_u128(n as u128 + 1));
            store
                .execute(Command::CreateSession {
                    session,
                    title: Some("bench".into()),
                    intent: None,
                    project_path: None,
                })
                .expect("create session");
            session
        })
        .collect();
    let mut saves: Vec<Duration> = (0..SAVES)
        .map(|i| {
            let session = sessions[i / VERSIONS_PER_SESSION];
            let command = Command::SavePlan {
                session,
                title: None,
                content: format!("# v{i}\n{plan}"),
            };
            let start = Instant::now();
            store.execute(command).expect("save");
            start.elapsed()
        })
        .collect();
    let save = median_ms(&mut saves);
    println!(
        "Store::execute(SavePlan), {} B plan, {SAVES} saves in sessions of {VERSIONS_PER_SESSION} versions: median {save:.3} ms; raw write+fdatasync of the same size: median {raw:.3} ms -> {:.2}x the floor",
        plan.len(),
        save / raw
    );
}
