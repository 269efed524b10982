//! Large `session.json` manifests may lag their session by about a second
//! while their writer lives, so a save costs the same at any session size;
//! they never lag for good: the writer rewrites them when due and when it
//! closes. (A process that finds one a killed writer left rewrites it:
//! mcp/tests/mcp/damage_and_rebuild.rs, with real processes.)

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use planb_core::{Command, SessionId, Timestamp};
use planb_projections::{DataRoot, FixedEnvironment, Store, TreeCheck, check_tree};

fn open(root: &Path) -> Store {
    let env = Arc::new(FixedEnvironment::new(Timestamp(1_780_000_000_000), 1_000));
    Store::open(DataRoot::new(root), env).expect("open store").0
}

fn session() -> SessionId {
    SessionId::from_uuid(uuid::Uuid::from_u128(0x5e55_0001))
}

fn save(store: &Store, n: usize) {
    store
        .execute(Command::SavePlan {
            session: session(),
            title: None,
            content: format!("# v{n}\n"),
        })
        .expect("save");
}

/// A session with 300 plan versions: past the size whose manifest is
/// rewritten with every change.
fn large_session(root: &Path) {
    let store = open(root);
    store
        .execute(Command::CreateSession {
            session: session(),
            title: None,
            intent: None,
            project_path: None,
        })
        .expect("create");
    for n in 1..=300 {
        save(&store, n);
    }
}

/// Saves until the manifest lags (two saves within a second of a rewrite
/// do that); returns the version saved last.
fn save_until_lagging(store: &Store, root: &Path, from: usize) -> usize {
    let mut n = from;
    loop {
        save(store, n);
        if checkpoint(root).contains(&format!("lagging {}", session())) {
            return n;
        }
        n += 1;
        assert!(n < from + 1000, "the manifest never lagged");
    }
}

fn plan_count(root: &Path) -> u64 {
    let path = root
        .join("sessions")
        .join(session().to_string())
        .join("session.json");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(path).expect("read session.json")).expect("json");
    json["planCount"].as_u64().expect("planCount")
}

fn checkpoint(root: &Path) -> String {
    std::fs::read_to_string(root.join("sessions.cursor")).expect("checkpoint")
}

fn assert_tree_holds(root: &Path) {
    let check = check_tree(&DataRoot::new(root)).expect("check");
    assert!(matches!(check, TreeCheck::Holds { .. }), "{check:?}");
}

#[test]
fn a_manifest_left_behind_is_vouched_for_and_caught_up_without_another_command() {
    let dir = tempfile::tempdir().expect("tempdir");
    large_session(dir.path());
    assert_eq!(plan_count(dir.path()), 300, "a closing store flushes");
    let store = open(dir.path());
    let last = save_until_lagging(&store, dir.path(), 301);
    // Every plan file is there at once; the checkpoint names the manifest
    // that lags, which `check` accepts.
    for n in 301..=last {
        let file = planb_projections::files::plan_file(dir.path(), &session(), n as u32);
        assert!(file.exists(), "{}", file.display());
    }
    assert_tree_holds(dir.path());
    // Without another command, the flusher brings it up to date.
    let deadline = Instant::now() + Duration::from_secs(20);
    while plan_count(dir.path()) < last as u64 {
        assert!(Instant::now() < deadline, "the manifest never caught up");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!checkpoint(dir.path()).contains("lagging"));
    assert_tree_holds(dir.path());
    drop(store);
}

#[test]
fn closing_the_store_writes_the_manifest_it_left_behind() {
    let dir = tempfile::tempdir().expect("tempdir");
    large_session(dir.path());
    let store = open(dir.path());
    let last = save_until_lagging(&store, dir.path(), 301);
    drop(store);
    assert_eq!(plan_count(dir.path()), last as u64);
    assert!(!checkpoint(dir.path()).contains("lagging"));
    assert_tree_holds(dir.path());
}
