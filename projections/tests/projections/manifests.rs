//! `session.json` is current when a write returns, at any session size: a
//! reader that looks the moment a tool answers finds the manifest, the
//! version's files and the checkpoint agreeing with the log.

use std::path::Path;
use std::sync::Arc;

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

fn create(store: &Store) {
    store
        .execute(Command::CreateSession {
            session: session(),
            title: None,
            intent: None,
            project_path: None,
        })
        .expect("create");
}

fn manifest(root: &Path) -> serde_json::Value {
    let path = root
        .join("sessions")
        .join(session().to_string())
        .join("session.json");
    serde_json::from_slice(&std::fs::read(path).expect("read session.json")).expect("json")
}

fn checkpoint(root: &Path) -> String {
    std::fs::read_to_string(root.join("sessions.cursor")).expect("checkpoint")
}

fn assert_tree_holds(root: &Path) {
    let check = check_tree(&DataRoot::new(root)).expect("check");
    assert!(matches!(check, TreeCheck::Holds { .. }), "{check:?}");
}

#[test]
fn every_save_of_a_large_session_leaves_its_manifest_current() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    create(&store);
    for n in 1..=400 {
        save(&store, n);
        let json = manifest(dir.path());
        assert_eq!(json["planCount"], n as u64, "after save {n}");
        assert_eq!(json["latestPlanVersion"], n as u64, "after save {n}");
        let plans = dir
            .path()
            .join("sessions")
            .join(session().to_string())
            .join("plans");
        let meta: serde_json::Value = serde_json::from_slice(
            &std::fs::read(plans.join(format!("v{n}.json"))).expect("vN.json at the reply"),
        )
        .expect("json");
        assert_eq!(meta["version"], n as u64);
        // Cursor 1 created the session; save n is cursor n + 1.
        assert!(
            checkpoint(dir.path()).starts_with(&format!("{} ", n + 1)),
            "after save {n}: {}",
            checkpoint(dir.path())
        );
    }
    drop(store);
    assert_tree_holds(dir.path());
}

#[test]
fn a_checkpoint_naming_manifests_left_behind_is_not_trusted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    create(&store);
    for n in 1..=3 {
        save(&store, n);
    }
    drop(store);
    // What an earlier version left when killed while a manifest lagged:
    // the checkpoint names the session, its manifest shows fewer plans.
    let first = checkpoint(dir.path());
    let first = first.lines().next().expect("first line");
    std::fs::write(
        dir.path().join("sessions.cursor"),
        format!("{first}\nlagging {}\n", session()),
    )
    .expect("write checkpoint");
    let path = dir
        .path()
        .join("sessions")
        .join(session().to_string())
        .join("session.json");
    let text = std::fs::read_to_string(&path).expect("read");
    std::fs::write(&path, text.replace("\"planCount\": 3", "\"planCount\": 1")).expect("write");

    let store = open(dir.path());
    assert_eq!(manifest(dir.path())["planCount"], 3);
    assert_eq!(checkpoint(dir.path()).lines().count(), 1);
    drop(store);
    assert_tree_holds(dir.path());
}
