//! The session page with 1 000 events and one scrub step, timed from an HTTP
//! client over a real loopback socket (`cargo bench -p planb-retro`).
//! Budgets: session page ≤ 20 ms, scrub step ≤ 5 ms (median and p99
//! printed against them). Without `--bench` (as `cargo test` runs it) it
//! does nothing.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use planb_core::{
    AnswerValue, Answers, AskId, AskSpec, Command, Delivery, Question, QuestionKind, SessionId,
    Timestamp,
};
use planb_projections::{DataRoot, FixedEnvironment, Store};
use planb_retro::{Retro, serve};
use uuid::Uuid;

const EVENTS: usize = 1_000;
const SAMPLES: usize = 200;
const PAGE_BUDGET: Duration = Duration::from_millis(20);
const SCRUB_BUDGET: Duration = Duration::from_millis(5);

fn build(root: &DataRoot) -> SessionId {
    let env = Arc::new(FixedEnvironment::new(Timestamp(1_700_000_000_000), 1_000));
    let (store, _) = Store::open(root.clone(), env).expect("open store");
    let session = SessionId::from_uuid(Uuid::new_v4());
    store
        .execute(Command::CreateSession {
            session,
            title: Some("Benchmark".into()),
            intent: None,
            project_path: Some("/bench".into()),
        })
        .expect("create");
    let mut plan = String::from("# Plan\n\n");
    let mut events = 1;
    let mut round = 0;
    while events < EVENTS {
        round += 1;
        if round % 2 == 0 {
            let ask = AskId::from_uuid(Uuid::new_v4());
            let spec = AskSpec {
                title: format!("Question {round}"),
                intro_title: None,
                intro: None,
                questions: vec![Question {
                    id: "q".into(),
                    label: "Which way?".into(),
                    required: true,
                    tab: None,
                    kind: QuestionKind::Text { placeholder: None },
                }],
            };
            store
                .execute(Command::OpenAsk {
                    session,
                    ask,
                    spec,
                    delivery: Delivery::BrowserOpened,
                    url: "http://127.0.0.1:1/ask".into(),
                    sid: "".into(),
                })
                .expect("ask");
            store
                .execute(Command::SubmitAnswers {
                    ask,
                    answers: Answers(vec![(
                        "q".into(),
                        AnswerValue::Text(format!("answer {round}")),
                    )]),
                })
                .expect("answer");
            events += 2;
        } else {
            plan.push_str(&format!("- step {round}: do the next thing\n"));
            store
                .execute(Command::SavePlan {
                    session,
                    title: None,
                    content: plan.clone(),
                })
                .expect("save");
            events += 1;
        }
    }
    session
}

fn fetch(address: SocketAddr, path: &str) -> Duration {
    let start = Instant::now();
    let mut stream = TcpStream::connect(address).expect("connect");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut response = Vec::new();
    stream.read_to_end(&mut response).expect("read");
    let elapsed = start.elapsed();
    assert!(
        response.starts_with(b"HTTP/1.1 200"),
        "GET {path}: {}",
        String::from_utf8_lossy(&response[..200.min(response.len())])
    );
    elapsed
}

fn report(name: &str, mut samples: Vec<Duration>, budget: Duration) {
    samples.sort();
    let median = samples[samples.len() / 2];
    let p99 = samples[samples.len() * 99 / 100];
    let verdict = if p99 <= budget { "within" } else { "OVER" };
    eprintln!(
        "{name}: median {median:.2?}, p99 {p99:.2?} ({verdict} the {budget:?} budget, {} samples)",
        samples.len()
    );
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let root = DataRoot::new(dir.path());
    let session = build(&root);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (retro, follower) = Retro::open(&root);
    let cursors = retro.timeline().session_cursors(&session);
    assert_eq!(cursors.len(), EVENTS, "the session has {EVENTS} events");
    retro.follow(follower, planb_retro::POLL_INTERVAL);
    let address = runtime.block_on(serve(retro, 0)).expect("serve");
    let page = format!("/sessions/{session}");
    for _ in 0..10 {
        fetch(address, &page);
    }
    let pages: Vec<Duration> = (0..SAMPLES).map(|_| fetch(address, &page)).collect();
    report("session page (1 000 events)", pages, PAGE_BUDGET);
    let scrubs: Vec<Duration> = (0..SAMPLES)
        .map(|i| {
            let cursor = cursors[(i * 7919) % cursors.len()];
            fetch(address, &format!("/sessions/{session}/at/{cursor}"))
        })
        .collect();
    report("scrub step", scrubs, SCRUB_BUDGET);
}
