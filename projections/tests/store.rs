//! The store's write path and its projections: decisions see every process's
//! events, rejections record nothing, and incremental projections equal rebuilt ones.

use std::sync::Arc;

use planb_core::{
    AskId, AskSpec, AskStatus, Command, DeclineAction, Delivery, Rejection, SessionId, State,
    Timestamp,
};
use planb_projections::{
    DataRoot, FixedEnvironment, Index, IndexedAskStatus, Store, StoreError, rebuild,
};
use proptest::prelude::*;
use serde_json::json;

fn env() -> Arc<FixedEnvironment> {
    Arc::new(FixedEnvironment::new(Timestamp(1_780_000_000_000), 1_000))
}

fn open(root: &std::path::Path) -> Store {
    Store::open(DataRoot::new(root), env())
        .expect("open store")
        .0
}

fn spec() -> AskSpec {
    AskSpec::from_json(&json!({
        "title": "Kickoff",
        "questions": [
            {"id": "name", "kind": "text", "label": "Project name", "required": true},
            {"id": "lang", "kind": "single", "label": "Language", "options": ["Rust", "Go"]}
        ]
    }))
    .expect("valid spec")
}

fn answers() -> planb_core::Answers {
    spec()
        .validate_answers(&json!({"name": "Aurora", "lang": "Rust"}))
        .expect("valid answers")
}

fn create_session(store: &Store, n: u128) -> SessionId {
    let session = SessionId::from_uuid(uuid::Uuid::from_u128(0x5e55_0000 + n));
    store
        .execute(Command::CreateSession {
            session,
            title: Some(format!("session {n}")),
            intent: None,
            project_path: Some(format!("/work/project-{}", n % 2)),
        })
        .expect("create session");
    session
}

fn save_plan(store: &Store, session: SessionId, content: &str) -> u32 {
    let events = store
        .execute(Command::SavePlan {
            session,
            title: None,
            content: content.to_string(),
        })
        .expect("save plan");
    match &events[0].event.body {
        planb_core::EventBody::PlanVersionSaved { version, .. } => *version,
        other => panic!("unexpected event {other:?}"),
    }
}

#[test]
fn plan_versions_count_up_across_two_processes_sharing_a_root() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Two stores on one root stand for two planb-mcp processes.
    let first = open(dir.path());
    let second = open(dir.path());
    let session = create_session(&first, 1);
    assert_eq!(save_plan(&second, session, "# v1"), 1);
    assert_eq!(save_plan(&first, session, "# v2"), 2);
    assert_eq!(save_plan(&second, session, "# v3"), 3);
    let versions: Vec<Option<String>> = (1..=3)
        .map(|v| first.plan_text(&session, v).expect("plan text"))
        .collect();
    assert_eq!(
        versions,
        [
            Some("# v1".into()),
            Some("# v2".into()),
            Some("# v3".into())
        ]
    );
    assert_eq!(first.plan_text(&session, 4).expect("no v4"), None);
}

#[test]
fn issue_8_one_store_owns_the_index_and_another_takes_over_when_it_closes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let owner = open(dir.path());
    let other = open(dir.path());
    let session = create_session(&other, 1);
    save_plan(&other, session, "# one");
    let applied = |store: &Store| {
        store
            .with_index(|index| {
                index.catch_up().expect("catch up");
                index.applied_cursor().expect("cursor").0
            })
            .expect("index")
    };
    assert_eq!(
        applied(&owner),
        Some(2),
        "the owner indexes the other's events"
    );
    assert_eq!(
        applied(&other),
        None,
        "redb keeps a database to one process"
    );
    drop(owner);
    save_plan(&other, session, "# two");
    assert_eq!(
        applied(&other),
        Some(3),
        "the other took over where the owner stopped"
    );
}

#[test]
fn a_rejected_command_records_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let unknown = SessionId::from_uuid(uuid::Uuid::from_u128(42));
    let before = store.read(|s| s.last_cursor()).expect("read");
    match store.execute(Command::SavePlan {
        session: unknown,
        title: None,
        content: "x".into(),
    }) {
        Err(StoreError::Rejected(Rejection::UnknownSession { session })) => {
            assert_eq!(session, unknown)
        }
        other => panic!("expected UnknownSession, got {other:?}"),
    }
    assert_eq!(store.read(|s| s.last_cursor()).expect("read"), before);
    drop(store);
    let (_, report) = Store::open(DataRoot::new(dir.path()), env()).expect("reopen");
    assert_eq!(report.events, 0);
}

#[test]
fn the_index_tracks_pending_asks_across_processes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = open(dir.path());
    let second = open(dir.path());
    let session = create_session(&first, 7);
    let asks: Vec<AskId> = (0..3)
        .map(|i| AskId::from_uuid(uuid::Uuid::from_u128(0xa5c0 + i)))
        .collect();
    for ask in &asks {
        second
            .execute(Command::OpenAsk {
                session,
                ask: *ask,
                spec: spec(),
                delivery: Delivery::BrowserNotOpened,
                url: "http://127.0.0.1:1/ask".into(),
                sid: "x".into(),
            })
            .expect("open ask");
    }
    first
        .execute(Command::SubmitAnswers {
            ask: asks[0],
            answers: answers(),
        })
        .expect("answer");
    second
        .execute(Command::TimeOut { ask: asks[1] })
        .expect("timeout");
    // One process at a time owns the index; it shows every process's asks.
    let mut owners = 0;
    for store in [&first, &second] {
        let pending = store
            .with_index(|index| {
                index.catch_up().expect("catch up");
                index
                    .asks_with_status(IndexedAskStatus::Pending)
                    .expect("pending")
            })
            .expect("index");
        if let Some(pending) = pending {
            owners += 1;
            assert_eq!(pending, vec![(asks[2].as_uuid(), session.as_uuid())]);
        }
    }
    assert_eq!(owners, 1, "exactly one store owns the index");
    // Answering after the timeout is kept as a late answer, never lost.
    second
        .execute(Command::SubmitAnswers {
            ask: asks[1],
            answers: answers(),
        })
        .expect("late answer");
    let ask = first
        .read(|s| s.ask(&asks[1]).cloned())
        .expect("read")
        .expect("ask");
    assert_eq!(ask.status, AskStatus::TimedOut);
    assert_eq!(ask.late_answers.len(), 1);
}

#[derive(Debug, Clone)]
enum Op {
    CreateSession,
    SavePlan(usize),
    OpenAsk(usize),
    Answer(usize),
    TimeOut(usize),
    Decline(usize),
    Draft(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        Just(Op::CreateSession),
        any::<usize>().prop_map(Op::SavePlan),
        any::<usize>().prop_map(Op::OpenAsk),
        any::<usize>().prop_map(Op::Answer),
        any::<usize>().prop_map(Op::TimeOut),
        any::<usize>().prop_map(Op::Decline),
        any::<usize>().prop_map(Op::Draft),
    ]
}

fn pick<T: Copy>(ids: &[T], i: usize) -> Option<T> {
    (!ids.is_empty()).then(|| ids[i % ids.len()])
}

fn command(
    op: &Op,
    sessions: &mut Vec<SessionId>,
    asks: &mut Vec<AskId>,
    n: u128,
) -> Option<Command> {
    Some(match op {
        Op::CreateSession => {
            let session = SessionId::from_uuid(uuid::Uuid::from_u128(0x1000 + n));
            sessions.push(session);
            Command::CreateSession {
                session,
                title: None,
                intent: Some("plan".into()),
                project_path: Some(format!("/p/{}", n % 3)),
            }
        }
        Op::SavePlan(i) => Command::SavePlan {
            session: pick(sessions, *i)?,
            title: Some(format!("t{n}")),
            content: format!("# plan {n}"),
        },
        Op::OpenAsk(i) => {
            let ask = AskId::from_uuid(uuid::Uuid::from_u128(0x2000 + n));
            asks.push(ask);
            Command::OpenAsk {
                session: pick(sessions, *i)?,
                ask,
                spec: spec(),
                delivery: Delivery::UrlElicitation,
                url: "http://127.0.0.1:9/ask".into(),
                sid: format!("{n}"),
            }
        }
        Op::Answer(i) => Command::SubmitAnswers {
            ask: pick(asks, *i)?,
            answers: answers(),
        },
        Op::TimeOut(i) => Command::TimeOut {
            ask: pick(asks, *i)?,
        },
        Op::Decline(i) => Command::Decline {
            ask: pick(asks, *i)?,
            action: DeclineAction::Cancel,
        },
        Op::Draft(i) => Command::SaveDraft {
            ask: pick(asks, *i)?,
            answers: answers(),
        },
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Two processes execute commands; a third index catches up at arbitrary
    /// points. Every incremental projection equals a rebuild from the empty state.
    #[test]
    fn incremental_projections_equal_a_rebuild(
        ops in prop::collection::vec((op(), any::<bool>(), any::<bool>()), 1..40),
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = DataRoot::new(dir.path());
        let first = open(dir.path());
        let second = open(dir.path());
        let side_index = Index::open(
            &dir.path().join("side.redb"),
            Arc::new(planb_log::FsStorage::open_read_only(&root.log_dir()).expect("log")),
            Default::default(),
        ).expect("side index");
        let (mut sessions, mut asks) = (Vec::new(), Vec::new());
        for (n, (op, on_second, split_here)) in ops.iter().enumerate() {
            let store = if *on_second { &second } else { &first };
            if let Some(command) = command(op, &mut sessions, &mut asks, n as u128) {
                // Rejections (answering twice, unknown ids) are part of the test.
                let _ = store.execute(command);
            }
            if *split_here {
                side_index.catch_up().expect("side catch-up");
            }
        }
        side_index.catch_up().expect("side catch-up");
        first.with_index(|index| index.catch_up().expect("catch-up")).expect("index");

        let (rebuilt_state, report) = rebuild(&root).expect("rebuild");
        let incremental_first: State = first.snapshot().expect("snapshot");
        let incremental_second: State = second.snapshot().expect("snapshot");
        drop((first, second));
        let fresh = open(dir.path());
        prop_assert_eq!(&incremental_first, &rebuilt_state);
        prop_assert_eq!(&incremental_second, &rebuilt_state);
        prop_assert_eq!(report.events, rebuilt_state.last_cursor().0);
        let rebuilt_index = fresh
            .with_index(|index| index.dump().expect("dump"))
            .expect("index")
            .expect("the only store owns the index");
        prop_assert_eq!(&side_index.dump().expect("dump"), &rebuilt_index);
        prop_assert_eq!(rebuilt_index.applied_cursor, rebuilt_state.last_cursor().0);
    }
}

/// Issue 8 item 9: a session's plan versions are not held in memory. The
/// state (and so `state.snapshot`) keeps each version's length and hash, its
/// text stays in the log, and every way of writing the tree still writes it:
/// the write path from the event at hand, a full rewrite and a rebuild from
/// the log.
#[test]
fn plan_texts_stay_in_the_log_and_every_tree_write_finds_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = DataRoot::new(dir.path());
    let store = open(dir.path());
    let session = create_session(&store, 1);
    let text = |v: usize| format!("# plan {v}\n\n{}\n", "a long plan line\n".repeat(6_000));
    for v in 1..=20 {
        assert_eq!(save_plan(&store, session, &text(v)) as usize, v);
    }
    let plans_bytes = 20 * text(1).len();
    let snapshot = store
        .snapshot()
        .expect("state")
        .encode_snapshot()
        .expect("encode");
    assert!(
        snapshot.len() < 20_000,
        "{} bytes of state for {plans_bytes} bytes of plans",
        snapshot.len()
    );
    let file = |v: usize| root.sessions_dir().join(format!("{session}/plans/v{v}.md"));
    let files_hold_every_text = || {
        for v in 1..=20 {
            assert_eq!(
                std::fs::read_to_string(file(v)).expect("plan file"),
                text(v)
            );
        }
    };
    files_hold_every_text();
    assert_eq!(
        store.plan_text(&session, 7).expect("read").as_deref(),
        Some(text(7).as_str())
    );
    drop(store);

    // A tree without its checkpoint is rewritten whole at the next open:
    // the texts of missing and damaged files come from the log.
    std::fs::remove_file(file(3)).expect("remove v3");
    std::fs::write(file(11), "damaged").expect("damage v11");
    std::fs::remove_file(root.sessions_checkpoint_path()).expect("remove checkpoint");
    let store = open(dir.path());
    store.read(|_| ()).expect("read");
    files_hold_every_text();
    drop(store);

    std::fs::remove_dir_all(root.sessions_dir()).expect("remove tree");
    rebuild(&root).expect("rebuild");
    files_hold_every_text();
}
