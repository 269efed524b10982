//! Rebuilding every projection from a log of 1 000 000 events, and opening a
//! store over it, against the brief's budget (rebuild <= 5 s).
//!
//! The log holds a realistic mix: 10 000 sessions, each with 30 questions asked
//! and answered and 39 plan versions of about 500 bytes. Run with
//! `cargo bench -p planb-projections`. Files go under cargo's target tmp dir or
//! `PLANB_BENCH_DIR`.

#![allow(clippy::print_stdout, reason = "a benchmark reports on stdout")]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use planb_core::{AskId, AskSpec, Event, EventBody, EventId, SessionId, Timestamp, encode};
use planb_projections::{DataRoot, Store, SystemEnvironment, rebuild};
use serde_json::json;

const SESSIONS: u128 = 10_000;
const ASKS_PER_SESSION: u128 = 30;
const PLANS_PER_SESSION: u32 = 39;

fn bench_root() -> PathBuf {
    let root = std::env::var_os("PLANB_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")))
        .join("rebuild");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).expect("create bench dir");
    root
}

fn events_of_session(n: u128, spec: &AskSpec, answers: &planb_core::Answers) -> Vec<EventBody> {
    let session = SessionId::from_uuid(uuid::Uuid::from_u128(n + 1));
    let mut bodies = vec![EventBody::SessionCreated {
        session,
        title: Some(format!("session {n}")),
        intent: Some("benchmark".into()),
        project_path: Some(format!("/work/project-{}", n % 50)),
    }];
    for a in 0..ASKS_PER_SESSION {
        let ask = AskId::from_uuid(uuid::Uuid::from_u128((n << 32) + a + 1));
        bodies.push(EventBody::AskOpened {
            session,
            ask,
            spec: spec.clone(),
            delivery: planb_core::Delivery::BrowserOpened,
            url: "http://127.0.0.1:40000/ask".into(),
            sid_sha256: planb_core::state::sid_sha256("0123456789abcdef0123456789abcdef"),
        });
        bodies.push(EventBody::AskAnswered {
            ask,
            answers: answers.clone(),
        });
    }
    for version in 1..=PLANS_PER_SESSION {
        bodies.push(EventBody::PlanVersionSaved {
            session,
            version,
            title: Some(format!("v{version}")),
            content: format!(
                "# Plan {version}\n\n{}",
                "- a step of the plan\n".repeat(24)
            ),
        });
    }
    bodies
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("planb-projections bench: run with `cargo bench -p planb-projections`");
        return;
    }
    let root = DataRoot::new(bench_root());
    let spec = AskSpec::from_json(&json!({
        "title": "Choices",
        "questions": [
            {"id": "name", "kind": "text", "label": "Name", "required": true},
            {"id": "lang", "kind": "single", "label": "Language", "options": ["Rust", "Go", "Zig"]},
            {"id": "scale", "kind": "scale", "label": "Priority", "min": 1, "max": 5}
        ]
    }))
    .expect("spec");
    let answers = spec
        .validate_answers(&json!({"name": "Aurora", "lang": "Rust", "scale": 4}))
        .expect("answers");

    let start = Instant::now();
    let (log, _) = planb_log::open_dir(&root.log_dir(), Default::default()).expect("log");
    let mut total = 0u64;
    let mut payload_bytes = 0u64;
    for n in 0..SESSIONS {
        let payloads: Vec<Vec<u8>> = events_of_session(n, &spec, &answers)
            .into_iter()
            .map(|body| {
                let event = Event {
                    id: EventId::from_uuid(uuid::Uuid::now_v7()),
                    at: Timestamp(1_780_000_000_000 + total as i64),
                    body,
                };
                encode(&event).expect("encode")
            })
            .collect();
        total += payloads.len() as u64;
        payload_bytes += payloads.iter().map(|p| p.len() as u64).sum::<u64>();
        let refs: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
        log.append(&refs).expect("append");
    }
    drop(log);
    println!(
        "wrote {total} events ({:.0} MB of payload) in {:.1} s",
        payload_bytes as f64 / 1e6,
        start.elapsed().as_secs_f64()
    );

    let start = Instant::now();
    let (state, report) = rebuild(&root).expect("rebuild");
    let elapsed = start.elapsed();
    assert_eq!(report.events, total);
    assert_eq!(state.sessions().len() as u128, SESSIONS);
    println!(
        "rebuild of every projection (state, redb index and the sessions/ tree; plan texts read back from the log in a second pass) from {total} events: {:.2} s; budget <= 5 s: {:.2}x of budget",
        elapsed.as_secs_f64(),
        elapsed.as_secs_f64() / 5.0
    );

    let _ = std::fs::remove_file(root.state_snapshot_path());
    let start = Instant::now();
    let (store, open_report) =
        Store::open(root.clone(), Arc::new(SystemEnvironment)).expect("open store");
    let opened = start.elapsed();
    assert_eq!(open_report.from_snapshot, None);
    println!(
        "store open over {total} events without a state snapshot (log recovery + whole fold + saving the snapshot; the index was {} event(s) behind): {:.2} s",
        open_report.indexed,
        opened.as_secs_f64()
    );
    drop(store);
    let snapshot = std::fs::metadata(root.state_snapshot_path()).map_or(0, |m| m.len());
    let start = Instant::now();
    let (store, open_report) =
        Store::open(root.clone(), Arc::new(SystemEnvironment)).expect("open store");
    let opened = start.elapsed();
    assert_eq!(open_report.from_snapshot.map(|c| c.0), Some(total));
    println!(
        "store open over {total} events from the state snapshot ({:.0} MB): {:.2} s",
        snapshot as f64 / 1e6,
        opened.as_secs_f64()
    );
    drop(store);
}
