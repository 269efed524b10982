//! The team store against a private PostgreSQL server started here:
//!
//! 1. shipping 1 000 000 events (the rebuild benchmark's mix: 10 000
//!    sessions, each with 30 asks answered and 39 plan versions) from one
//!    origin, against a raw binary `COPY` of the same rows into a table of
//!    the same shape in the same server, in the same run;
//! 2. replication lag (a save's acknowledgement to the database's mark
//!    passing it) while plans are saved at 100 a second;
//! 3. a save's latency with shipping on and off.
//!
//! Run with `cargo bench -p planb-team`. Files go under cargo's target tmp
//! dir or `PLANB_BENCH_DIR`.

#![allow(clippy::print_stdout, reason = "a benchmark reports on stdout")]
#![allow(clippy::unwrap_used, reason = "a benchmark fails loudly")]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use planb_core::{
    AskId, AskSpec, Command, Event, EventBody, EventId, SessionId, Timestamp, encode,
};
use planb_projections::{DataRoot, Store, SystemEnvironment};
use planb_team::{Projects, TeamSettings};
use planb_tests::postgres::Postgres;
use serde_json::json;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::Type;

const SESSIONS: u128 = 10_000;
const ASKS_PER_SESSION: u128 = 30;
const PLANS_PER_SESSION: u32 = 39;
const SAVES: usize = 1_000;
const SAVES_PER_SECOND: u64 = 100;

fn bench_dir(name: &str) -> PathBuf {
    let dir = std::env::var_os("PLANB_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")))
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
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

/// Writes the million-event log; its event count.
fn write_log(root: &DataRoot) -> u64 {
    let spec = AskSpec::from_json(&json!({
        "title": "Choices",
        "questions": [
            {"id": "name", "kind": "text", "label": "Name", "required": true},
            {"id": "lang", "kind": "single", "label": "Language", "options": ["Rust", "Go", "Zig"]},
            {"id": "scale", "kind": "scale", "label": "Priority", "min": 1, "max": 5}
        ]
    }))
    .unwrap();
    let answers = spec
        .validate_answers(&json!({"name": "Aurora", "lang": "Rust", "scale": 4}))
        .unwrap();
    let (log, _) = planb_log::open_dir(&root.log_dir(), Default::default()).unwrap();
    let mut total = 0u64;
    for n in 0..SESSIONS {
        let payloads: Vec<Vec<u8>> = events_of_session(n, &spec, &answers)
            .into_iter()
            .map(|body| {
                let event = Event {
                    id: EventId::from_uuid(uuid::Uuid::now_v7()),
                    at: Timestamp(1_780_000_000_000 + total as i64),
                    body,
                };
                encode(&event).unwrap()
            })
            .collect();
        total += payloads.len() as u64;
        let refs: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
        log.append(&refs).unwrap();
    }
    total
}

async fn client(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

/// The rows the shipper would write, built in memory before the clock.
struct Rows {
    cursor: Vec<i64>,
    at: Vec<SystemTime>,
    kind: Vec<&'static str>,
    project: Vec<Option<String>>,
    checksum: Vec<i64>,
    payload: Vec<Vec<u8>>,
    body: Vec<serde_json::Value>,
}

fn rows_of(root: &DataRoot) -> Rows {
    let mut rows = Rows {
        cursor: Vec::new(),
        at: Vec::new(),
        kind: Vec::new(),
        project: Vec::new(),
        checksum: Vec::new(),
        payload: Vec::new(),
        body: Vec::new(),
    };
    let mut reader =
        planb_log::read_dir(&root.log_dir(), Default::default(), planb_log::Cursor(1)).unwrap();
    while let Some(record) = reader.next().unwrap() {
        let envelope =
            planb_core::decode(&record.payload, planb_core::Cursor(record.cursor.0)).unwrap();
        let event = envelope.event;
        rows.cursor.push(record.cursor.0 as i64);
        rows.at
            .push(std::time::UNIX_EPOCH + Duration::from_millis(event.at.unix_ms().max(0) as u64));
        rows.kind.push(event.body.kind_name());
        rows.project.push(match &event.body {
            EventBody::SessionCreated { project_path, .. } => project_path.clone(),
            _ => None,
        });
        rows.checksum.push(i64::from(record.checksum));
        rows.body.push(serde_json::to_value(&event).unwrap());
        rows.payload.push(record.payload);
    }
    rows
}

/// A binary `COPY` of `rows` into a fresh table shaped like
/// `planb_events` (its key and indexes included); its duration.
async fn raw_copy(url: &str, rows: &Rows) -> Duration {
    let client = client(url).await;
    client
        .batch_execute(
            "DROP TABLE IF EXISTS bench_copy; CREATE TABLE bench_copy (LIKE planb_events INCLUDING ALL)",
        )
        .await
        .unwrap();
    let origin = uuid::Uuid::from_u128(7);
    let start = Instant::now();
    let sink = client
        .copy_in("COPY bench_copy (origin, cursor, member, at, kind, project, checksum, payload, body) FROM STDIN BINARY")
        .await
        .unwrap();
    let types = [
        Type::UUID,
        Type::INT8,
        Type::TEXT,
        Type::TIMESTAMPTZ,
        Type::TEXT,
        Type::TEXT,
        Type::INT8,
        Type::BYTEA,
        Type::JSONB,
    ];
    let writer = BinaryCopyInWriter::new(sink, &types);
    let mut writer = std::pin::pin!(writer);
    for i in 0..rows.cursor.len() {
        writer
            .as_mut()
            .write(&[
                &origin,
                &rows.cursor[i],
                &"bench",
                &rows.at[i],
                &rows.kind[i],
                &rows.project[i],
                &rows.checksum[i],
                &rows.payload[i],
                &rows.body[i],
            ])
            .await
            .unwrap();
    }
    writer.finish().await.unwrap();
    start.elapsed()
}

fn settings(url: &str) -> TeamSettings {
    TeamSettings::new(url, "bench", Projects::everything()).unwrap()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Saves [`SAVES`] plan versions at [`SAVES_PER_SECOND`]; each save's
/// acknowledgement time, cursor and latency.
fn save_loop(store: &Store) -> Vec<(Instant, u64, Duration)> {
    let session = SessionId::from_uuid(uuid::Uuid::new_v4());
    store
        .execute(Command::CreateSession {
            session,
            title: Some("lag".into()),
            intent: None,
            project_path: None,
        })
        .unwrap();
    let period = Duration::from_micros(1_000_000 / SAVES_PER_SECOND);
    let start = Instant::now();
    (0..SAVES)
        .map(|n| {
            let due = start + period * n as u32;
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
            let before = Instant::now();
            let events = store
                .execute(Command::SavePlan {
                    session,
                    title: None,
                    content: format!("# Plan {n}\n\n{}", "- a step\n".repeat(40)),
                })
                .unwrap();
            let acked = Instant::now();
            (acked, events.last().unwrap().cursor.get(), acked - before)
        })
        .collect()
}

/// Watches the database's mark and notes when it first passes each value.
async fn watch_mark(
    url: String,
    origin: uuid::Uuid,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> Vec<(Instant, u64)> {
    let client = client(&url).await;
    let mut seen = Vec::new();
    let mut last = 0u64;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        if let Ok(Some(row)) = client
            .query_opt(
                "SELECT max(shipped_to) FROM planb_origins WHERE origin = $1",
                &[&origin],
            )
            .await
        {
            let mark = row.get::<_, Option<i64>>(0).unwrap_or(0) as u64;
            if mark > last {
                seen.push((Instant::now(), mark));
                last = mark;
            }
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    seen
}

fn latency_line(label: &str, saves: &[(Instant, u64, Duration)]) -> Duration {
    let mut latencies: Vec<Duration> = saves.iter().map(|s| s.2).collect();
    latencies.sort();
    println!(
        "save latency, shipping {label}: p50 {:.3} ms, p99 {:.3} ms ({} saves at {SAVES_PER_SECOND}/s)",
        ms(percentile(&latencies, 0.5)),
        ms(percentile(&latencies, 0.99)),
        latencies.len()
    );
    percentile(&latencies, 0.5)
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("planb-team bench: run with `cargo bench -p planb-team`");
        return;
    }
    let pg = Postgres::start();
    let url = pg.url();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();

    // 1. A million events shipped, against COPY.
    let root = DataRoot::new(bench_dir("team-ship"));
    let start = Instant::now();
    let total = write_log(&root);
    println!(
        "wrote {total} events in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    let start = Instant::now();
    let pass = runtime
        .block_on(planb_team::push(root.clone(), settings(&url)))
        .unwrap();
    let shipped = start.elapsed();
    assert_eq!(pass.shipped, total);
    let rows = rows_of(&root);
    let copied = runtime.block_on(raw_copy(&url, &rows));
    drop(rows);
    let ship_rate = total as f64 / shipped.as_secs_f64();
    let copy_rate = total as f64 / copied.as_secs_f64();
    println!(
        "shipping {total} events from one origin: {:.1} s = {ship_rate:.0} events/s; raw binary COPY of the same rows into the same server: {:.1} s = {copy_rate:.0} events/s; ratio {:.2} of COPY's rate",
        shipped.as_secs_f64(),
        copied.as_secs_f64(),
        ship_rate / copy_rate
    );

    // 2 and 3. Saves with shipping off, then on.
    let off_root = DataRoot::new(bench_dir("team-saves-off"));
    let (store, _) = Store::open(off_root, Arc::new(SystemEnvironment)).unwrap();
    let off = latency_line("off", &save_loop(&store));
    drop(store);

    let on_root = DataRoot::new(bench_dir("team-saves-on"));
    let (store, _) = Store::open(on_root.clone(), Arc::new(SystemEnvironment)).unwrap();
    let origin = planb_team::local::origin(&on_root).unwrap();
    let background = planb_team::background::start(settings(&url), on_root).unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = runtime.spawn(watch_mark(url.clone(), origin, stop.clone()));
    let saves = save_loop(&store);
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let seen = runtime.block_on(watcher).unwrap();
    drop(background);
    let on = latency_line("on", &saves);
    println!(
        "save latency p50 with shipping on / off: {:.2}",
        on.as_secs_f64() / off.as_secs_f64()
    );
    let mut lags: Vec<Duration> = saves
        .iter()
        .filter_map(|(acked, cursor, _)| {
            let (at, _) = seen.iter().find(|(_, mark)| mark >= cursor)?;
            Some(at.saturating_duration_since(*acked))
        })
        .collect();
    lags.sort();
    println!(
        "replication lag (ack to the database's mark, watched every 1 ms) at {SAVES_PER_SECOND} saves/s: p50 {:.1} ms, p99 {:.1} ms ({} of {} saves seen shipped)",
        ms(percentile(&lags, 0.5)),
        ms(percentile(&lags, 0.99)),
        lags.len(),
        saves.len()
    );
}
