//! The state snapshot: a store opens from it and folds only the tail, ends in
//! the same state as a fold of the whole log, and ignores a snapshot that is
//! damaged or belongs to another log.

use std::path::Path;
use std::sync::Arc;

use planb_core::{Command, Cursor, SessionId, State, Timestamp};
use planb_projections::{
    DataRoot, FixedEnvironment, SNAPSHOT_AFTER_EVENTS, SnapshotCheck, Store, StoreError,
    check_snapshot,
};

fn open(root: &Path) -> (Store, planb_projections::OpenReport) {
    let env = Arc::new(FixedEnvironment::new(Timestamp(1_780_000_000_000), 1_000));
    Store::open(DataRoot::new(root), env).expect("open store")
}

fn session(n: u128) -> SessionId {
    SessionId::from_uuid(uuid::Uuid::from_u128(0x5e55_0000 + n))
}

/// Sessions `from..to`, each with a title and two plan versions.
fn write(store: &Store, from: u128, to: u128) {
    for n in from..to {
        store
            .execute(Command::CreateSession {
                session: session(n),
                title: Some(format!("session {n}")),
                intent: None,
                project_path: None,
            })
            .expect("create");
        for v in 1..=2 {
            store
                .execute(Command::SavePlan {
                    session: session(n),
                    title: None,
                    content: format!("# plan {n} v{v}"),
                })
                .expect("save");
        }
    }
}

fn check(root: &Path, log_end: u64) -> SnapshotCheck {
    let storage: Arc<dyn planb_log::Storage> = Arc::new(
        planb_log::FsStorage::open_read_only(&root.join("log")).expect("open the log read-only"),
    );
    check_snapshot(&DataRoot::new(root), &storage, Cursor(log_end)).expect("check")
}

/// The state a fold of the whole log gives, with no snapshot to start from.
fn full_fold(root: &Path) -> State {
    let copy = tempfile::tempdir().expect("tempdir");
    let log = copy.path().join("log");
    std::fs::create_dir_all(&log).expect("mkdir");
    for entry in std::fs::read_dir(root.join("log")).expect("read log dir") {
        let entry = entry.expect("entry");
        std::fs::copy(entry.path(), log.join(entry.file_name())).expect("copy segment");
    }
    let (store, report) = open(copy.path());
    assert_eq!(report.from_snapshot, None);
    store.snapshot().expect("state")
}

#[test]
fn a_store_opens_from_the_snapshot_and_folds_only_the_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let snapshot = dir.path().join("state.snapshot");
    {
        let (store, report) = open(dir.path());
        assert_eq!(report.from_snapshot, None);
        write(&store, 0, 400);
        assert!(!snapshot.exists(), "nothing saved while the store is open");
    }
    assert!(
        snapshot.exists(),
        "a store that folded 1,200 events saves one when it closes"
    );
    let (second, report) = open(dir.path());
    assert_eq!(report.from_snapshot, Some(Cursor(1200)));
    assert_eq!(report.events, 0);
    // Another process appends after the snapshot; a third folds only those.
    write(&second, 400, 410);
    let (third, report) = open(dir.path());
    assert_eq!(report.from_snapshot, Some(Cursor(1200)));
    assert_eq!(report.events, 30);
    let state = third.snapshot().expect("state");
    assert_eq!(state, full_fold(dir.path()));
    assert_eq!(state.sessions().len(), 410);
    // Decisions on a state from a snapshot continue the log's numbering.
    let events = third
        .execute(Command::SavePlan {
            session: session(3),
            title: None,
            content: "# plan 3 v3".into(),
        })
        .expect("save");
    assert!(matches!(
        events[0].event.body,
        planb_core::EventBody::PlanVersionSaved { version: 3, .. }
    ));
    assert_eq!(events[0].cursor, Cursor(1231));
}

#[test]
fn a_store_saves_a_snapshot_after_folding_a_long_tail_at_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let (store, _) = open(dir.path());
        write(&store, 0, 400);
    }
    std::fs::remove_file(dir.path().join("state.snapshot")).expect("remove snapshot");
    let (store, report) = open(dir.path());
    assert_eq!(report.events, 1200);
    assert!(report.events >= SNAPSHOT_AFTER_EVENTS);
    assert!(
        dir.path().join("state.snapshot").exists(),
        "saved right after the long fold"
    );
    drop(store);
    let (_, report) = open(dir.path());
    assert_eq!(report.from_snapshot, Some(Cursor(1200)));
}

#[test]
fn a_damaged_snapshot_is_ignored_and_the_whole_log_folded() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let (store, _) = open(dir.path());
        write(&store, 0, 400);
    }
    let path = dir.path().join("state.snapshot");
    let good = std::fs::read(&path).expect("read snapshot");
    let expected = full_fold(dir.path());
    let mut damaged: Vec<Vec<u8>> = Vec::new();
    for at in [0, 9, 20, 33, 37, 45, 50, good.len() / 2, good.len() - 1] {
        let mut bytes = good.clone();
        bytes[at] ^= 0x10;
        damaged.push(bytes);
    }
    damaged.push(good[..good.len() / 3].to_vec());
    damaged.push(Vec::new());
    for bytes in damaged {
        std::fs::write(&path, &bytes).expect("write damaged snapshot");
        assert!(
            matches!(check(dir.path(), 1200), SnapshotCheck::Unusable { .. }),
            "{:?}",
            check(dir.path(), 1200)
        );
        let (store, report) = open(dir.path());
        assert_eq!(report.from_snapshot, None);
        assert_eq!(report.events, 1200);
        assert_eq!(store.snapshot().expect("state"), expected);
    }
}

#[test]
fn a_snapshot_of_another_log_is_ignored() {
    let first = tempfile::tempdir().expect("tempdir");
    let second = tempfile::tempdir().expect("tempdir");
    {
        let (store, _) = open(first.path());
        write(&store, 0, 400);
    }
    {
        // Another history, longer than the first, so the snapshot's cursor
        // and offsets exist in it but hold other records.
        let (store, _) = open(second.path());
        write(&store, 1000, 1500);
    }
    std::fs::copy(
        first.path().join("state.snapshot"),
        second.path().join("state.snapshot"),
    )
    .expect("copy snapshot");
    let (store, report) = open(second.path());
    assert_eq!(report.from_snapshot, None);
    let state = store.snapshot().expect("state");
    assert_eq!(state.sessions().len(), 500);
    assert!(state.session(&session(3)).is_none());
}

#[test]
fn a_snapshot_past_the_end_of_the_log_is_a_lost_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let backup = tempfile::tempdir().expect("tempdir");
    {
        let (store, _) = open(dir.path());
        write(&store, 0, 10);
    }
    // A copy of the log as it was (a backup), taken before more was written.
    for entry in std::fs::read_dir(dir.path().join("log")).expect("read") {
        let entry = entry.expect("entry");
        std::fs::copy(entry.path(), backup.path().join(entry.file_name())).expect("copy");
    }
    {
        let (store, _) = open(dir.path());
        write(&store, 10, 400);
    }
    // Only the snapshot remembers how far the log went: the other
    // projections are gone too.
    for name in ["index.redb", "sessions.cursor"] {
        std::fs::remove_file(dir.path().join(name)).expect("remove projection");
    }
    std::fs::remove_dir_all(dir.path().join("sessions")).expect("remove tree");
    std::fs::remove_dir_all(dir.path().join("log")).expect("remove log");
    std::fs::create_dir_all(dir.path().join("log")).expect("mkdir");
    for entry in std::fs::read_dir(backup.path()).expect("read") {
        let entry = entry.expect("entry");
        std::fs::copy(entry.path(), dir.path().join("log").join(entry.file_name()))
            .expect("restore");
    }
    let snapshot_before = std::fs::read(dir.path().join("state.snapshot")).expect("read");
    assert_eq!(
        check(dir.path(), 30),
        SnapshotCheck::PastEnd {
            cursor: Cursor(1200)
        }
    );
    let (store, report) = open(dir.path());
    assert_eq!(report.from_snapshot, None);
    let lost = store
        .lost_tail()
        .expect("the snapshot witnesses a lost tail");
    assert_eq!(lost.witness, "state.snapshot");
    let refused = store.execute(Command::CreateSession {
        session: session(9999),
        title: None,
        intent: None,
        project_path: None,
    });
    assert!(
        matches!(refused, Err(StoreError::LostTail(_))),
        "{refused:?}"
    );
    drop(store);
    assert_eq!(
        std::fs::read(dir.path().join("state.snapshot")).expect("read"),
        snapshot_before,
        "the snapshot, which may hold the only trace of the lost events, is kept"
    );
}

#[test]
fn a_rebuild_leaves_a_snapshot_of_the_rebuilt_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let (store, _) = open(dir.path());
        write(&store, 0, 400);
    }
    std::fs::remove_file(dir.path().join("state.snapshot")).expect("remove snapshot");
    let (state, report) = planb_projections::rebuild(&DataRoot::new(dir.path())).expect("rebuild");
    assert_eq!(report.events, 1200);
    assert!(
        matches!(
            check(dir.path(), 1200),
            SnapshotCheck::Holds {
                cursor: Cursor(1200),
                ..
            }
        ),
        "the rebuild's snapshot checks out against the log"
    );
    let (store, report) = open(dir.path());
    assert_eq!(report.from_snapshot, Some(Cursor(1200)));
    assert_eq!(report.events, 0);
    assert_eq!(store.snapshot().expect("state"), state);
}
