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

/// Records a project-plan task.
fn create_task(store: &Store, task: planb_core::TaskId, prompt: &str) {
    store
        .execute(Command::CreateTask {
            task,
            pipeline: "project-plan".into(),
            pipeline_version: 2,
            prompt: prompt.into(),
            speed: "fast".into(),
            target: "build_plan".into(),
            model_profile: None,
            client_request_id: None,
            project_path: None,
        })
        .expect("create task");
}

/// Records a run of `task` started.
fn start_run(store: &Store, task: planb_core::TaskId, run: planb_core::RunId) {
    store
        .execute(Command::StartRun {
            task,
            run,
            resumed_from: None,
            owner_pid: 1,
            host: "test".into(),
            variables: None,
        })
        .expect("start run");
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
fn one_store_owns_the_index_and_another_takes_over_when_it_closes() {
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

/// A session's plan versions are not held in memory. The
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

/// The index keeps tasks (and execution plans) by creation time and by their
/// latest run's state, across two processes, equal after a rebuild.
#[test]
fn the_index_keeps_tasks_by_state_and_by_creation_time() {
    use planb_core::{RunId, RunOutcome, TaskId};
    use planb_projections::IndexedTaskState;

    let dir = tempfile::tempdir().expect("tempdir");
    let first = open(dir.path());
    let second = open(dir.path());
    let tasks: Vec<TaskId> = (1..=4)
        .map(|n| TaskId::from_uuid(uuid::Uuid::from_u128(0x7000 + n)))
        .collect();
    for (n, task) in tasks.iter().enumerate() {
        let store = if n % 2 == 0 { &first } else { &second };
        create_task(store, *task, &format!("plan number {n}"));
    }
    let start = |store: &Store, task: TaskId, n: u128| {
        let run = RunId::from_uuid(uuid::Uuid::from_u128(0x8000 + n));
        start_run(store, task, run);
        run
    };
    // Task 0 completes, task 1 is asked to stop, task 2 fails, task 3 waits.
    let run = start(&first, tasks[0], 0);
    first
        .execute(Command::EndRun {
            task: tasks[0],
            run,
            outcome: RunOutcome::Completed,
            reason: None,
            failed_step: None,
            recoverable: false,
        })
        .expect("end");
    start(&second, tasks[1], 1);
    second
        .execute(Command::RequestStop { task: tasks[1] })
        .expect("stop");
    let run = start(&second, tasks[2], 2);
    second
        .execute(Command::EndRun {
            task: tasks[2],
            run,
            outcome: RunOutcome::Failed,
            reason: Some("worker_error".into()),
            failed_step: None,
            recoverable: true,
        })
        .expect("end");
    let owner = if first.with_index(|_| ()).expect("index").is_some() {
        &first
    } else {
        &second
    };
    let (newest, by_state) = owner
        .with_index(|index| {
            index.catch_up().expect("catch up");
            let newest = index.tasks_by_created(3).expect("by time");
            let by_state: Vec<(IndexedTaskState, Vec<uuid::Uuid>)> = [
                IndexedTaskState::Created,
                IndexedTaskState::Stopping,
                IndexedTaskState::Completed,
                IndexedTaskState::Failed,
                IndexedTaskState::Running,
            ]
            .into_iter()
            .map(|state| (state, index.tasks_in_state(state).expect("by state")))
            .collect();
            (newest, by_state)
        })
        .expect("index")
        .expect("an owner");
    let ids: Vec<uuid::Uuid> = newest.iter().map(|(_, id)| *id).collect();
    assert_eq!(
        ids,
        [tasks[3], tasks[2], tasks[1]].map(|t| t.as_uuid()),
        "newest first"
    );
    assert!(newest.windows(2).all(|w| w[0].0 >= w[1].0), "{newest:?}");
    let expect = |state: IndexedTaskState| -> Vec<uuid::Uuid> {
        by_state
            .iter()
            .find(|(s, _)| *s == state)
            .map(|(_, ids)| ids.clone())
            .unwrap_or_default()
    };
    assert_eq!(expect(IndexedTaskState::Created), vec![tasks[3].as_uuid()]);
    assert_eq!(expect(IndexedTaskState::Stopping), vec![tasks[1].as_uuid()]);
    assert_eq!(
        expect(IndexedTaskState::Completed),
        vec![tasks[0].as_uuid()]
    );
    assert_eq!(expect(IndexedTaskState::Failed), vec![tasks[2].as_uuid()]);
    assert!(expect(IndexedTaskState::Running).is_empty());

    // A rebuild from the log gives the same tables.
    let before = owner
        .with_index(|index| index.dump().expect("dump"))
        .expect("index")
        .expect("owner");
    drop((first, second));
    rebuild(&DataRoot::new(dir.path())).expect("rebuild");
    let fresh = open(dir.path());
    let after = fresh
        .with_index(|index| index.dump().expect("dump"))
        .expect("index")
        .expect("owner");
    assert_eq!(after.tasks_by_state, before.tasks_by_state);
    assert_eq!(after.tasks_by_created, before.tasks_by_created);
    assert_eq!(after.tasks_by_state.len(), 4);
}

/// Task events change no session file: they only move the session files'
/// checkpoint (a witness of how far the log went); a store opened after
/// them (from a state snapshot, or from the start) takes the files as
/// current and writes nothing, and the next session event moves the
/// checkpoint to the end of the log.
#[test]
fn task_events_leave_the_session_files_alone_and_move_their_checkpoint() {
    use planb_core::TaskId;
    use planb_projections::{TreeCheck, check_tree};

    let dir = tempfile::tempdir().expect("tempdir");
    let checkpoint = || std::fs::read_to_string(dir.path().join("sessions.cursor")).expect("read");
    let first = open(dir.path());
    let session = create_session(&first, 1);
    save_plan(&first, session, "# one\n");
    let before = checkpoint();
    assert!(before.starts_with("2 "), "{before}");
    for n in 1..=3 {
        let task = TaskId::from_uuid(uuid::Uuid::from_u128(0x7100 + n));
        create_task(&first, task, &format!("plan number {n}"));
    }
    let after = checkpoint();
    assert!(
        after.starts_with("5 "),
        "the checkpoint stayed behind: {after}"
    );
    let boot = |text: &str| text.split_whitespace().nth(1).map(str::to_owned);
    assert_eq!(boot(&after), boot(&before), "the checkpoint's boot changed");
    assert_eq!(after.len(), before.len(), "rewritten in place, same length");
    first.save_snapshot();
    drop(first);
    for from_snapshot in [true, false] {
        if !from_snapshot {
            std::fs::remove_file(dir.path().join("state.snapshot")).expect("remove snapshot");
        }
        let second = open(dir.path());
        let tasks = second.read(|s| s.tasks().len()).expect("read");
        assert_eq!(tasks, 3);
        assert_eq!(checkpoint(), after, "a reader rewrote the session files");
        assert!(matches!(
            check_tree(&DataRoot::new(dir.path())).expect("check"),
            TreeCheck::Holds { .. }
        ));
    }
    let third = open(dir.path());
    assert_eq!(save_plan(&third, session, "# two\n"), 2);
    assert!(checkpoint().starts_with("6 "), "{}", checkpoint());
    assert!(matches!(
        check_tree(&DataRoot::new(dir.path())).expect("check"),
        TreeCheck::Holds { .. }
    ));
}

/// After task events, the next session event rewrites only the files it
/// touches: a checkpoint that vouched for the task events is as good as one
/// at the end of the log. (A full rewrite would have put back the other
/// session's file, which a person changed here.)
#[test]
fn a_session_event_after_task_events_writes_only_its_own_files() {
    use planb_core::TaskId;

    let dir = tempfile::tempdir().expect("tempdir");
    let first = open(dir.path());
    let changed = create_session(&first, 1);
    let other = create_session(&first, 2);
    save_plan(&first, changed, "# changed, version one\n");
    save_plan(&first, other, "# other\n");
    let other_file = dir
        .path()
        .join("sessions")
        .join(other.to_string())
        .join("plans/v1.md");
    assert_eq!(
        std::fs::read_to_string(&other_file).expect("read"),
        "# other\n"
    );
    std::fs::write(&other_file, "changed by hand\n").expect("write");
    // Task events from this process and from another one.
    let second = open(dir.path());
    for n in 1..=4 {
        let task = TaskId::from_uuid(uuid::Uuid::from_u128(0x7300 + n));
        let by = if n % 2 == 0 { &first } else { &second };
        create_task(by, task, &format!("plan number {n}"));
    }
    for store in [&first, &second] {
        assert!(save_plan(store, changed, "# changed, again\n") > 1);
        let end = store.read(|s| s.last_cursor().0).expect("read");
        let checkpoint = std::fs::read_to_string(dir.path().join("sessions.cursor")).expect("read");
        assert!(checkpoint.starts_with(&format!("{end} ")), "{checkpoint}");
        assert_eq!(
            std::fs::read_to_string(&other_file).expect("read"),
            "changed by hand\n",
            "the other session's files were rewritten"
        );
    }
    let latest = dir
        .path()
        .join("sessions")
        .join(changed.to_string())
        .join("plans/v3.md");
    assert_eq!(
        std::fs::read_to_string(latest).expect("read"),
        "# changed, again\n"
    );
}

/// A small blob is recorded in the log with the step that names it and
/// has no file: a read goes to its record where the places file says it
/// is, and finds it in the log when the places file is gone, wrong or
/// behind.
#[test]
fn a_small_blob_lives_in_the_log_and_is_read_from_its_place_there() {
    use planb_core::{ContentHash, RunId, StepStart, TaskId};

    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let task = TaskId::from_uuid(uuid::Uuid::from_u128(0x7200));
    let run = RunId::from_uuid(uuid::Uuid::from_u128(0x8200));
    create_task(&store, task, "a plan");
    start_run(&store, task, run);
    let call = br#"{"tool":"a__echo","args":{"text":"hi"}}"#.to_vec();
    let result = br#""hi""#.to_vec();
    let input = ContentHash::of_bytes(&call).0;
    let artifact = ContentHash::of_bytes(&result).0;
    let started = store
        .execute(Command::SettleAndStart {
            task,
            run,
            ends: Vec::new(),
            starts: vec![StepStart {
                step: "intake".into(),
                input,
                call: Some(input),
            }],
            inline: vec![call.clone()],
        })
        .expect("start");
    let kinds: Vec<&str> = started.iter().map(|e| e.event.body.kind_name()).collect();
    assert_eq!(kinds, ["blob_stored", "step_started"]);
    store
        .execute(Command::SettleAndStart {
            task,
            run,
            ends: vec![Command::SucceedStep {
                task,
                run,
                step: "intake".into(),
                input,
                artifact,
                bytes: result.len() as u64,
                duration_ms: 1,
                tokens_in: 0,
                tokens_out: 0,
            }],
            starts: Vec::new(),
            inline: vec![result.clone()],
        })
        .expect("succeed");
    // Closing the store writes the places it has pending; no blob has a
    // file.
    drop(store);
    let blobs_dir = dir.path().join("blobs");
    let places = blobs_dir.join("places");
    let names: Vec<String> = std::fs::read_dir(&blobs_dir)
        .expect("blobs")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["places"], "only the places file");
    assert_eq!(std::fs::metadata(&places).expect("places").len(), 2 * 68);
    let blobs = DataRoot::new(dir.path()).blobs();
    assert_eq!(blobs.get(&artifact).expect("at its place"), result);
    assert_eq!(blobs.get(&input).expect("at its place"), call);

    // A process reads a places file once and then only what is added to
    // it, so each case below starts from a copy of the root.
    let kept = std::fs::read(&places).expect("places");
    // The places file gone: a reader that writes nothing (planb-retro)
    // finds both in the log and leaves everything as it is (it keeps the
    // places in memory: the second read needs no look through the log); a
    // reader that may write notes their places again.
    let gone = tempfile::tempdir().expect("tempdir");
    copy_dir(dir.path(), gone.path());
    let gone_places = gone.path().join("blobs").join("places");
    std::fs::remove_file(&gone_places).expect("remove places");
    let reading_only = DataRoot::new(gone.path()).blobs().reading_only();
    assert_eq!(reading_only.get(&input).expect("from the log"), call);
    assert_eq!(reading_only.get(&artifact).expect("kept in memory"), result);
    assert!(!gone_places.exists(), "a read-only reader wrote");
    let noted = tempfile::tempdir().expect("tempdir");
    copy_dir(dir.path(), noted.path());
    let noted_places = noted.path().join("blobs").join("places");
    std::fs::remove_file(&noted_places).expect("remove places");
    let noting = DataRoot::new(noted.path()).blobs();
    assert_eq!(noting.get(&input).expect("from the log"), call);
    assert_eq!(noting.get(&artifact).expect("noted on the way"), result);
    assert_eq!(
        std::fs::read(&noted_places).expect("noted").len(),
        2 * 68,
        "both places noted, once"
    );
    // Wrong places (each hash at the other's record): the bytes are still
    // right, found in the log.
    let misled_root = tempfile::tempdir().expect("tempdir");
    copy_dir(dir.path(), misled_root.path());
    let mut wrong = kept.clone();
    wrong[4..36].copy_from_slice(&kept[72..104]);
    wrong[72..104].copy_from_slice(&kept[4..36]);
    for entry in wrong.chunks_mut(68) {
        let crc = crc32fast::hash(&entry[..64]);
        entry[64..].copy_from_slice(&crc.to_le_bytes());
    }
    std::fs::write(misled_root.path().join("blobs").join("places"), &wrong).expect("swap");
    let misled = DataRoot::new(misled_root.path()).blobs();
    assert_eq!(misled.get(&input).expect("despite its place"), call);
    assert_eq!(misled.get(&artifact).expect("despite its place"), result);

    // A copy an earlier version wrote is read; a damaged one is read past
    // and removed.
    let copy = blobs.path(&artifact);
    std::fs::create_dir_all(copy.parent().expect("shard")).expect("shard");
    std::fs::write(&copy, &result).expect("copy");
    assert_eq!(blobs.get(&artifact).expect("the copy"), result);
    let mut damaged = result.clone();
    damaged[1] ^= 0x20;
    std::fs::write(&copy, &damaged).expect("damage");
    assert_eq!(blobs.get(&artifact).expect("from the log"), result);
    assert!(!copy.exists(), "the damaged copy was not removed");
    assert!(matches!(
        blobs.get(&[9; 32]),
        Err(planb_projections::BlobError::Missing(_))
    ));
    // Readers at once, while the places file goes and comes back: each
    // read gets the bytes.
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for _ in 0..50 {
                let _ = std::fs::remove_file(&places);
                let _ = std::fs::write(&places, &kept);
            }
        });
        for _ in 0..4 {
            scope.spawn(|| {
                let blobs = DataRoot::new(dir.path()).blobs();
                for _ in 0..50 {
                    assert_eq!(blobs.get(&artifact).expect("result"), result);
                    assert_eq!(blobs.get(&input).expect("call"), call);
                }
            });
        }
    });
}

/// A log that holds the same small blob many times (runs that store the
/// same call) gives it one place: looking through the log again and again,
/// as reads of a blob nobody holds do, adds nothing to the places file.
#[test]
fn a_blob_stored_many_times_keeps_one_place_however_often_the_log_is_looked_through() {
    use planb_core::{ContentHash, RunId, RunOutcome, StepStart, TaskId};

    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let task = TaskId::from_uuid(uuid::Uuid::from_u128(0x7300));
    create_task(&store, task, "a plan");
    let call = br#"{"tool":"a__echo","args":{"text":"the same"}}"#.to_vec();
    let input = ContentHash::of_bytes(&call).0;
    for n in 0..5u128 {
        let run = RunId::from_uuid(uuid::Uuid::from_u128(0x8300 + n));
        start_run(&store, task, run);
        store
            .execute(Command::SettleAndStart {
                task,
                run,
                ends: Vec::new(),
                starts: vec![StepStart {
                    step: "intake".into(),
                    input,
                    call: Some(input),
                }],
                inline: vec![call.clone()],
            })
            .expect("start");
        store
            .execute(Command::EndRun {
                task,
                run,
                outcome: RunOutcome::Stopped,
                reason: None,
                failed_step: None,
                recoverable: true,
            })
            .expect("end");
    }
    drop(store);
    let places = dir.path().join("blobs").join("places");
    // Recorded five times by this process: one entry, the first place.
    assert_eq!(std::fs::metadata(&places).expect("places").len(), 68);
    // Another process with the file gone looks through the log three times
    // for a blob nobody holds, then reads the one that is there.
    let other = tempfile::tempdir().expect("tempdir");
    copy_dir(dir.path(), other.path());
    let other_places = other.path().join("blobs").join("places");
    std::fs::remove_file(&other_places).expect("remove");
    let blobs = DataRoot::new(other.path()).blobs();
    for _ in 0..3 {
        assert!(matches!(
            blobs.get(&[9; 32]),
            Err(planb_projections::BlobError::Missing(_))
        ));
    }
    assert_eq!(blobs.get(&input).expect("the call"), call);
    assert_eq!(
        std::fs::metadata(&other_places).expect("noted").len(),
        68,
        "one place for the one blob"
    );
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    for entry in std::fs::read_dir(from).expect("list") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            std::fs::create_dir_all(&target).expect("dir");
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// Copies the directory `from` to `to`, files only (a log's segments).
fn copy_files(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("entry");
        if entry.file_type().expect("type").is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copy");
        }
    }
}

/// A lost tail made of task events alone is found by a process that does
/// not own the index too: the session files' checkpoint moves over task
/// events, and witnesses how far the log went.
#[test]
fn a_lost_tail_of_task_events_alone_is_seen_by_a_process_without_the_index() {
    let dir = tempfile::tempdir().expect("tempdir");
    let backup = tempfile::tempdir().expect("backup");
    let log = dir.path().join("log");
    let store = open(dir.path());
    create_session(&store, 1);
    copy_files(&log, backup.path());
    let pipeline = planb_core::pipelines::project_plan();
    store
        .execute(Command::CreateTask {
            task: planb_core::TaskId::from_uuid(uuid::Uuid::from_u128(7)),
            pipeline: pipeline.name().into(),
            pipeline_version: pipeline.version(),
            prompt: "Plan the move".into(),
            speed: "fast".into(),
            target: "build_plan".into(),
            model_profile: None,
            client_request_id: None,
            project_path: None,
        })
        .expect("a task event after the backup");
    drop(store);
    // The disk is rolled back to the backup, and another process owns the
    // index, so this one cannot read what the index saw.
    std::fs::remove_dir_all(&log).expect("remove log");
    copy_files(backup.path(), &log);
    let owner = std::fs::File::create(dir.path().join("index.lock")).expect("lock file");
    owner.lock().expect("the index's owner");
    let store = open(dir.path());
    let lost = store.lost_tail().expect("the lost task event is seen");
    assert_eq!(
        (lost.log_end.0, lost.seen.0, lost.witness),
        (1, 2, "sessions.cursor")
    );
}
