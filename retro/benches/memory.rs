//! planb-retro on large logs, measured on the real binary
//! (`cargo bench -p planb-retro --bench memory`):
//!
//! - a log of 50 000 events over many sessions: the time from starting the
//!   process to its first page, and its peak resident memory (VmHWM, read
//!   from `/proc/<pid>/status`) against a budget of twice the log's size
//!   plus 30 MB;
//! - one session with 2 000 plan versions, of a 40-line and of a 300-line
//!   plan: the time to serve its page, and a scrub step.
//!
//! - with `-- team`: ten machines of 100 000 events each shipped to a
//!   private PostgreSQL server, and `planb-retro --team`'s first page and
//!   peak memory over them, beside the local replay of one machine.
//!
//! Budgets: memory ≤ 2 × log + 30 MB, first page ≤ 1 s, the 2 000-version
//! session page ≤ 50 ms. The logs are written straight through `planb_log`
//! in batches (no store, no fsync per event) so building them takes seconds.
//! Without `--bench` (as `cargo test` runs it) it does nothing.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use planb_core::{
    AnswerValue, Answers, AskId, AskSpec, Cursor, Delivery, Event, EventBody, EventId, Question,
    QuestionKind, SessionId, Timestamp, encode,
};
use planb_log::LogOptions;
use planb_projections::DataRoot;
use uuid::Uuid;

const EVENTS: usize = 50_000;
const SESSIONS: usize = 100;
const VERSIONS: usize = 2_000;
/// Lines of the long session's plan: a typical plan, and a long one whose
/// bodies dominate the cost of folding and diffing.
const PLAN_LINES: [usize; 2] = [40, 300];
const APPEND_BATCH: usize = 1_000;
const PAGE_SAMPLES: usize = 20;

const MEMORY_SLACK_BYTES: u64 = 30_000_000;
const FIRST_PAGE_BUDGET: Duration = Duration::from_secs(1);
const PAGE_BUDGET: Duration = Duration::from_millis(50);
const START_WAIT: Duration = Duration::from_secs(600);

/// Writes `bodies` as a log under `root`; returns the log's size in bytes.
fn write_log(root: &DataRoot, bodies: impl Iterator<Item = EventBody>) -> u64 {
    write_origin_log(root, 0, bodies)
}

/// [`write_log`] for the `origin`th machine of a team: its event ids apart
/// from the others', its times interleaved with theirs.
fn write_origin_log(root: &DataRoot, origin: u128, bodies: impl Iterator<Item = EventBody>) -> u64 {
    let (log, _) = planb_log::open_dir(&root.log_dir(), LogOptions::default()).expect("open log");
    let mut batch: Vec<Vec<u8>> = Vec::with_capacity(APPEND_BATCH);
    let flush = |batch: &mut Vec<Vec<u8>>| {
        let payloads: Vec<&[u8]> = batch.iter().map(Vec::as_slice).collect();
        log.append(&payloads).expect("append");
        batch.clear();
    };
    for (index, body) in bodies.enumerate() {
        let event = Event {
            id: EventId::from_uuid(Uuid::from_u128((origin << 64) + index as u128 + 1)),
            at: Timestamp(1_700_000_000_000 + index as i64 * 1_000 + origin as i64),
            body,
        };
        batch.push(encode(&event).expect("encode"));
        if batch.len() == APPEND_BATCH {
            flush(&mut batch);
        }
    }
    if !batch.is_empty() {
        flush(&mut batch);
    }
    drop(log);
    std::fs::read_dir(root.log_dir())
        .expect("list the log")
        .map(|entry| entry.expect("entry").metadata().expect("metadata").len())
        .sum()
}

fn spec(round: usize) -> AskSpec {
    let question = |id: &str, label: String| Question {
        id: id.into(),
        label,
        required: true,
        tab: None,
        kind: QuestionKind::Text { placeholder: None },
    };
    AskSpec {
        title: format!("Decisions for round {round}"),
        intro_title: None,
        intro: Some(format!(
            "Round {round}: a few choices shape the next version of the plan; \
             answer what you can, the rest can wait."
        )),
        questions: vec![
            question(
                "storage",
                format!("Where should round {round} keep its data?"),
            ),
            question("rollout", "How should the change roll out?".into()),
            question("risks", "Which risks worry you most?".into()),
        ],
    }
}

/// A plan of `lines` lines, of which version `version` revises one, as an
/// agent refining a plan does: its diff to the version before is a few lines.
fn plan(version: usize, lines: usize) -> String {
    let mut text = format!("# Plan, version {version}\n\n");
    for line in 0..lines {
        let revised = if line == version % lines {
            format!(" (revised in v{version})")
        } else {
            String::new()
        };
        text.push_str(&format!(
            "- step {line}: migrate the sessions table, then switch the readers over{revised}\n"
        ));
    }
    text
}

/// `SESSIONS` sessions, each a cycle of plan version, ask, draft, answer,
/// interleaved in runs of a few events as concurrent agents would write.
fn many_sessions() -> impl Iterator<Item = EventBody> {
    origin_sessions(0, EVENTS)
}

/// [`many_sessions`] of about `events` events, with the ids of the
/// `origin`th machine of a team.
fn origin_sessions(origin: u128, events: usize) -> impl Iterator<Item = EventBody> {
    let sessions: Vec<SessionId> = (0..SESSIONS)
        .map(|i| SessionId::from_uuid(Uuid::from_u128((origin << 64) + 0x5e55_0000 + i as u128)))
        .collect();
    let per_session = events / SESSIONS;
    let runs = per_session / 4;
    // Generated lazily per run so the benchmark process stays small.
    (0..runs + 1).flat_map(move |run| {
        let mut bodies = Vec::with_capacity(sessions.len() * 4);
        for (index, &session) in sessions.iter().enumerate() {
            if run == 0 {
                bodies.push(EventBody::SessionCreated {
                    session,
                    title: Some(format!("Session {index}")),
                    intent: Some("Move sessions to tokens".into()),
                    project_path: Some(format!("/work/project-{}", index % 7)),
                });
                continue;
            }
            let ask = AskId::from_uuid(Uuid::from_u128(
                (origin << 64) + 0xa5c0_0000_0000 + (index * runs + run) as u128,
            ));
            let answers = Answers(vec![
                ("storage".into(), AnswerValue::Text("Postgres".into())),
                ("rollout".into(), AnswerValue::Text("Behind a flag".into())),
            ]);
            bodies.push(EventBody::PlanVersionSaved {
                session,
                version: run as u32,
                title: Some(format!("Round {run}")),
                content: plan(run, 24),
            });
            bodies.push(EventBody::AskOpened {
                session,
                ask,
                spec: spec(run),
                delivery: Delivery::BrowserOpened,
                url: "http://127.0.0.1:4242/ask".into(),
                sid_sha256: planb_core::state::sid_sha256(&format!("{run:064x}")),
            });
            bodies.push(EventBody::AskDraftSaved {
                ask,
                answers: Answers(answers.0[..1].to_vec()),
            });
            bodies.push(EventBody::AskAnswered { ask, answers });
        }
        bodies
    })
}

fn one_long_session(session: SessionId, lines: usize) -> impl Iterator<Item = EventBody> {
    let created = EventBody::SessionCreated {
        session,
        title: Some("Long session".into()),
        intent: None,
        project_path: Some("/work/long".into()),
    };
    std::iter::once(created).chain(
        (1..=VERSIONS).map(move |version| EventBody::PlanVersionSaved {
            session,
            version: version as u32,
            title: None,
            content: plan(version, lines),
        }),
    )
}

/// The real planb-retro, started on `root`; killed on drop.
struct Retro {
    child: Child,
    address: SocketAddr,
    /// From spawning the process to its first page.
    first_page: Duration,
}

impl Retro {
    fn start(root: &Path) -> Retro {
        Retro::start_with(|command| {
            command.env("PLANB_MCP_DATA_DIR", root);
        })
    }

    fn start_with(setup: impl Fn(&mut Command)) -> Retro {
        let port = std::net::TcpListener::bind(("127.0.0.1", 0))
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let address = SocketAddr::from(([127, 0, 0, 1], port));
        let started = Instant::now();
        let mut command = Command::new(env!("CARGO_BIN_EXE_planb-retro"));
        command
            .env("PORT", port.to_string())
            .env_remove("PLANB_TEAM_URL")
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        setup(&mut command);
        let child = command.spawn().expect("start planb-retro");
        let mut retro = Retro {
            child,
            address,
            first_page: Duration::ZERO,
        };
        while started.elapsed() < START_WAIT {
            if let Some((status, _)) = retro.try_get("/")
                && status == 200
            {
                retro.first_page = started.elapsed();
                return retro;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        panic!("planb-retro served no page within {START_WAIT:?}");
    }

    fn try_get(&self, path: &str) -> Option<(u16, Vec<u8>)> {
        let mut stream = TcpStream::connect(self.address).ok()?;
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.address
        )
        .ok()?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).ok()?;
        let status = String::from_utf8_lossy(response.get(9..12)?).parse().ok()?;
        Some((status, response))
    }

    /// The time to GET `path`, and the response's size.
    fn time(&self, path: &str) -> (Duration, usize) {
        let started = Instant::now();
        let (status, body) = self.try_get(path).expect("a response");
        let elapsed = started.elapsed();
        assert_eq!(status, 200, "GET {path}");
        (elapsed, body.len())
    }

    /// (peak, current) resident memory in bytes.
    fn memory(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("read the process status");
        let field = |name: &str| -> u64 {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .and_then(|rest| {
                    rest.trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<u64>()
                        .ok()
                })
                .map_or(0, |kib| kib * 1024)
        };
        (field("VmHWM:"), field("VmRSS:"))
    }
}

impl Drop for Retro {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn verdict(within: bool) -> &'static str {
    if within { "within" } else { "OVER" }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn median_and_max(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    (samples[samples.len() / 2], samples[samples.len() - 1])
}

fn large_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = DataRoot::new(dir.path());
    let bytes = write_log(&root, many_sessions());
    let retro = Retro::start(dir.path());
    let session = SessionId::from_uuid(Uuid::from_u128(0x5e55_0000));
    let (page, page_bytes) = retro.time(&format!("/sessions/{session}"));
    let (peak, now) = retro.memory();
    let budget = 2 * bytes + MEMORY_SLACK_BYTES;
    eprintln!(
        "log of {EVENTS} events in {SESSIONS} sessions: {:.1} MiB",
        mib(bytes)
    );
    eprintln!(
        "  first page after {:.2?} ({} the {FIRST_PAGE_BUDGET:?} budget)",
        retro.first_page,
        verdict(retro.first_page <= FIRST_PAGE_BUDGET)
    );
    eprintln!("  a session page ({} KiB): {page:.2?}", page_bytes / 1024);
    eprintln!(
        "  resident memory: peak {:.1} MiB, now {:.1} MiB ({} the budget of {:.1} MiB = 2 × log + 30 MB)",
        mib(peak),
        mib(now),
        verdict(peak <= budget),
        mib(budget)
    );
}

fn long_session(lines: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = DataRoot::new(dir.path());
    let session = SessionId::from_uuid(Uuid::from_u128(0x1006));
    let bytes = write_log(&root, one_long_session(session, lines));
    let retro = Retro::start(dir.path());
    let path = format!("/sessions/{session}");
    let (first, page_bytes) = retro.time(&path);
    let samples: Vec<Duration> = (0..PAGE_SAMPLES).map(|_| retro.time(&path).0).collect();
    let (median, max) = median_and_max(samples);
    let middle = Cursor(VERSIONS as u64 / 2);
    let scrubs: Vec<Duration> = (0..PAGE_SAMPLES)
        .map(|i| {
            let at = Cursor(middle.0 + i as u64);
            retro.time(&format!("/sessions/{session}/at/{at}")).0
        })
        .collect();
    let (scrub_median, scrub_max) = median_and_max(scrubs);
    let (peak, _) = retro.memory();
    eprintln!(
        "one session with {VERSIONS} versions of a {lines}-line plan: log {:.1} MiB, first page after {:.2?}, peak memory {:.1} MiB",
        mib(bytes),
        retro.first_page,
        mib(peak)
    );
    eprintln!(
        "  session page ({} KiB): first {first:.2?}, median {median:.2?}, max {max:.2?} ({} the {PAGE_BUDGET:?} budget)",
        page_bytes / 1024,
        verdict(median <= PAGE_BUDGET)
    );
    eprintln!("  scrub step: median {scrub_median:.2?}, max {scrub_max:.2?}");
}

/// Ten machines of 100 000 events each, shipped to a private PostgreSQL
/// server: `planb-retro --team`'s first page and memory, beside the local
/// replay of one machine's log in the same run.
fn team_replay() {
    const ORIGINS: u128 = 10;
    const ORIGIN_EVENTS: usize = 100_000;
    let pg = planb_tests::postgres::Postgres::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dirs: Vec<tempfile::TempDir> = (0..ORIGINS)
        .map(|_| tempfile::tempdir().expect("tempdir"))
        .collect();
    let mut bytes = 0;
    let started = Instant::now();
    for (origin, dir) in dirs.iter().enumerate() {
        let root = DataRoot::new(dir.path());
        bytes += write_origin_log(
            &root,
            origin as u128 + 1,
            origin_sessions(origin as u128 + 1, ORIGIN_EVENTS),
        );
        let settings = planb_team::TeamSettings::new(
            &pg.url(),
            &format!("member-{origin}"),
            planb_team::Projects::everything(),
        )
        .expect("settings");
        runtime
            .block_on(planb_team::push(root, settings))
            .expect("push");
    }
    eprintln!(
        "team of {ORIGINS} machines × {ORIGIN_EVENTS} events ({:.1} MiB of logs) written and shipped in {:.1?}",
        mib(bytes),
        started.elapsed()
    );
    let local = Retro::start(dirs[0].path());
    eprintln!(
        "  the local replay of one machine: first page after {:.2?}",
        local.first_page
    );
    drop(local);
    let cache = tempfile::tempdir().expect("cache");
    let team = Retro::start_with(|command| {
        command
            .arg("--team")
            .env("PLANB_TEAM_URL", pg.url())
            .env("XDG_CACHE_HOME", cache.path());
    });
    let (index, index_bytes) = team.time("/");
    let (peak, now) = team.memory();
    let budget = 2 * bytes + MEMORY_SLACK_BYTES;
    eprintln!(
        "  planb-retro --team over all {}: first page after {:.2?}; the index ({} KiB) then in {index:.2?}",
        ORIGINS as usize * ORIGIN_EVENTS,
        team.first_page,
        index_bytes / 1024
    );
    eprintln!(
        "  resident memory: peak {:.1} MiB, now {:.1} MiB ({} the budget of {:.1} MiB = 2 × logs + 30 MB)",
        mib(peak),
        mib(now),
        verdict(peak <= budget),
        mib(budget)
    );
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    if std::env::args().any(|a| a == "team") {
        team_replay();
        return;
    }
    large_log();
    for lines in PLAN_LINES {
        long_session(lines);
    }
}
