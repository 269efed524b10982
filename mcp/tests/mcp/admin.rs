//! The admin commands on a real data root, through the real binary.

use std::process::Output;
use std::sync::Arc;

use crate::support::{all_output, planb};
use planb_core::{Command as Cmd, SessionId, Timestamp};
use planb_projections::{DataRoot, FixedEnvironment, Store};

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A data root with one session and two plan versions (three events).
fn populated_root() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Arc::new(FixedEnvironment::new(Timestamp(1_780_000_000_000), 1000));
    let (store, _) = Store::open(DataRoot::new(dir.path()), env).expect("open");
    let session = SessionId::from_uuid(uuid::Uuid::from_u128(0xabc));
    store
        .execute(Cmd::CreateSession {
            session,
            title: Some("Demo".into()),
            intent: None,
            project_path: Some("/work/demo".into()),
        })
        .expect("create");
    for content in ["# one", "# two"] {
        store
            .execute(Cmd::SavePlan {
                session,
                title: None,
                content: content.into(),
            })
            .expect("save");
    }
    dir
}

fn applied_cursor(store: &Store) -> u64 {
    store
        .with_index(|index| {
            index.catch_up().expect("catch up");
            index.applied_cursor().expect("cursor").0
        })
        .expect("index")
        .expect("the only store owns the index")
}

#[test]
fn check_reports_a_healthy_log_and_exits_zero() {
    let dir = populated_root();
    let output = planb(dir.path(), &["check"]);
    let text = stdout(&output);
    assert!(output.status.success(), "{text}");
    assert!(text.contains("3 record(s), last cursor 3"), "{text}");
    assert!(text.contains("plan_version_saved"), "{text}");
    assert!(text.trim_end().ends_with("ok"), "{text}");
}

#[test]
fn check_names_the_cursor_and_offset_of_corruption_and_changes_nothing() {
    let dir = populated_root();
    let segment = dir.path().join("log").join("00000000000000000001.seg");
    let mut bytes = std::fs::read(&segment).expect("read segment");
    // Flip a payload byte of the first record (segment header 32 + record header 32).
    bytes[32 + 32 + 10] ^= 0x40;
    std::fs::write(&segment, &bytes).expect("write segment");
    let output = planb(dir.path(), &["check"]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert!(text.contains("CORRUPT"), "{text}");
    assert!(text.contains("byte offset 32 (cursor 1)"), "{text}");
    assert_eq!(
        std::fs::read(&segment).expect("read"),
        bytes,
        "check changed the log"
    );
}

#[test]
fn rebuild_recreates_the_index_from_the_log() {
    let dir = populated_root();
    std::fs::write(dir.path().join("index.redb"), b"garbage").expect("damage index");
    let output = planb(dir.path(), &["rebuild"]);
    let text = stdout(&output);
    assert!(
        output.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        text.contains("rebuilt from 3 event(s): 1 session(s)"),
        "{text}"
    );
    let (store, report) = Store::open(
        DataRoot::new(dir.path()),
        Arc::new(planb_projections::SystemEnvironment),
    )
    .expect("open after rebuild");
    assert_eq!(report.indexed, 0, "the rebuilt index was already complete");
    assert_eq!(applied_cursor(&store), 3);
}

#[test]
fn an_unreadable_index_is_rebuilt_on_open() {
    let dir = populated_root();
    std::fs::write(dir.path().join("index.redb"), b"not a database").expect("damage index");
    let (store, report) = Store::open(
        DataRoot::new(dir.path()),
        Arc::new(planb_projections::SystemEnvironment),
    )
    .expect("open with a damaged index");
    assert_eq!(report.indexed, 3);
    assert_eq!(applied_cursor(&store), 3);
}

#[test]
fn log_dump_prints_one_line_per_event() {
    let dir = populated_root();
    let output = planb(dir.path(), &["log", "dump"]);
    let text = stdout(&output);
    assert!(output.status.success());
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].contains("session_created") && lines[0].contains("/work/demo"));
    assert!(lines[2].contains("plan_version_saved") && lines[2].contains("version=2"));
    assert!(lines[0].contains("2026-05-28T"), "{}", lines[0]);
    let tail = stdout(&planb(
        dir.path(),
        &["log", "tail", "-n", "1", "--no-follow"],
    ));
    assert_eq!(tail.lines().count(), 1, "{tail}");
    assert!(tail.contains("version=2"), "{tail}");
}

#[test]
fn a_data_root_without_a_log_is_reported_and_left_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("fresh");
    let output = planb(&root, &["check"]);
    assert!(output.status.success());
    assert!(
        stdout(&output).contains("nothing recorded"),
        "{}",
        stdout(&output)
    );
    assert!(!root.exists(), "check created the data root");
    let output = planb(&root, &["log", "dump"]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("nothing is recorded in") && stderr.contains("run `planb-mcp demo`"),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("fresh").count(),
        1,
        "the root named once: {stderr}"
    );
}

#[test]
fn import_of_a_node_data_root_is_idempotent_and_export_writes_the_layout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node_root =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/import/node-root");
    let first = planb(dir.path(), &["import", node_root.to_str().expect("utf8")]);
    let text = stdout(&first);
    assert!(
        text.contains("2 session(s)") && text.contains("5 plan version(s)"),
        "{text}{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let second = planb(dir.path(), &["import", node_root.to_str().expect("utf8")]);
    let text = stdout(&second);
    assert!(text.starts_with("imported nothing"), "{text}");

    let exported = dir.path().join("exported");
    let output = planb(
        dir.path(),
        &["export", "--to", exported.to_str().expect("utf8")],
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout(&output).contains("exported 2 session(s)"),
        "{}",
        stdout(&output)
    );
    let sessions: Vec<_> = std::fs::read_dir(exported.join("sessions"))
        .expect("sessions dir")
        .collect();
    assert_eq!(sessions.len(), 2);
    for entry in sessions {
        let session = entry.expect("entry").path();
        let manifest: serde_json::Value = serde_json::from_slice(
            &std::fs::read(session.join("session.json")).expect("session.json"),
        )
        .expect("json");
        assert_eq!(manifest["schemaVersion"], 1);
    }
}

/// The number before `what` in an import's summary (0 when absent).
fn imported_count(text: &str, what: &str) -> usize {
    text.split(", ")
        .flat_map(|part| part.split(' '))
        .collect::<Vec<_>>()
        .windows(2)
        .find(|pair| pair[1].starts_with(what))
        .and_then(|pair| pair[0].trim_start_matches("imported ").parse().ok())
        .unwrap_or(0)
}

/// Two imports of one folder into one root at once: one waits for the
/// other, so every session and plan version is recorded once.
#[test]
fn two_imports_at_once_record_each_plan_version_once() {
    let node_root =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/import/node-root");
    let node_root = node_root.to_str().expect("utf8");
    for _ in 0..4 {
        let dir = tempfile::tempdir().expect("tempdir");
        let outputs: Vec<Output> = std::thread::scope(|scope| {
            let importers: Vec<_> = (0..2)
                .map(|_| scope.spawn(|| planb(dir.path(), &["import", node_root])))
                .collect();
            importers
                .into_iter()
                .map(|i| i.join().expect("import"))
                .collect()
        });
        let mut versions = 0;
        let mut sessions = 0;
        for output in &outputs {
            assert!(output.status.success(), "{}", all_output(output));
            versions += imported_count(&stdout(output), "plan");
            sessions += imported_count(&stdout(output), "session");
        }
        let all: String = outputs.iter().map(all_output).collect();
        assert_eq!((sessions, versions), (2, 5), "{all}");
    }
}

/// Copies the directory `from` to `to`, files and folders.
fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// `planb-mcp import` without a directory reads browser-plan's root:
/// `~/.browser-plan`, or `BROWSER_PLAN_DATA_DIR`, never planb's own.
#[test]
fn import_without_a_directory_reads_the_browser_plan_root() {
    let home = tempfile::tempdir().expect("home");
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/import/node-root");
    let run = |root: &std::path::Path, env: &[(&str, &std::path::Path)]| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_planb-mcp"));
        command
            .env_remove("BROWSER_PLAN_DATA_DIR")
            .env_remove("PLANB_MCP_DATA_DIR")
            .env("HOME", home.path())
            .arg("--data-dir")
            .arg(root)
            .arg("import");
        for (key, value) in env {
            command.env(key, value);
        }
        command.output().expect("run planb-mcp")
    };
    let root = home.path().join(".planb-mcp");
    let none = run(&root, &[]);
    assert_eq!(none.status.code(), Some(2), "{}", all_output(&none));
    assert!(
        all_output(&none).contains(".browser-plan"),
        "{}",
        all_output(&none)
    );
    copy_tree(&fixture, &home.path().join(".browser-plan"));
    let imported = run(&root, &[]);
    assert!(
        stdout(&imported).contains("2 session(s)"),
        "{}",
        all_output(&imported)
    );
    // A root named by the variable, imported into another planb root.
    let elsewhere = home.path().join("bp");
    copy_tree(&fixture, &elsewhere);
    let other = home.path().join("other");
    let named = run(&other, &[("BROWSER_PLAN_DATA_DIR", &elsewhere)]);
    assert!(
        stdout(&named).contains("2 session(s)"),
        "{}",
        all_output(&named)
    );
    // Never planb's own root.
    let own = run(&elsewhere, &[("BROWSER_PLAN_DATA_DIR", &elsewhere)]);
    assert_eq!(own.status.code(), Some(2), "{}", all_output(&own));
    assert!(
        all_output(&own).contains("own data root"),
        "{}",
        all_output(&own)
    );
}

/// `check` verifies every blob the log names: present, and holding the bytes
/// its name says.
#[test]
fn check_verifies_every_blob_the_log_names() {
    use planb_core::{RunOutcome, TaskId, id::RunId};
    let dir = tempfile::tempdir().expect("tempdir");
    let root = DataRoot::new(dir.path());
    let env = Arc::new(FixedEnvironment::new(Timestamp(1_780_000_000_000), 1000));
    let (store, _) = Store::open(root.clone(), env).expect("open");
    let task = TaskId::from_uuid(uuid::Uuid::from_u128(0x7a5c));
    let run = RunId::from_uuid(uuid::Uuid::from_u128(0x0b01));
    let artifact = root.blobs().put(b"# Intake\n").expect("blob");
    for command in [
        Cmd::CreateTask {
            task,
            pipeline: "project-plan".into(),
            pipeline_version: 1,
            prompt: "Open a bakery".into(),
            speed: "ping".into(),
            target: "intake".into(),
            model_profile: None,
            client_request_id: None,
            project_path: None,
        },
        Cmd::StartRun {
            task,
            run,
            resumed_from: None,
            owner_pid: 1,
            host: "h".into(),
            variables: None,
        },
        Cmd::StartStep {
            task,
            run,
            step: "intake".into(),
            input: [1; 32],
            call: None,
        },
        Cmd::SucceedStep {
            task,
            run,
            step: "intake".into(),
            input: [1; 32],
            artifact,
            bytes: 9,
            duration_ms: 3,
            tokens_in: 0,
            tokens_out: 0,
        },
        Cmd::EndRun {
            task,
            run,
            outcome: RunOutcome::Completed,
            reason: None,
            failed_step: None,
            recoverable: false,
        },
    ] {
        store.execute(command).expect("recorded");
    }
    drop(store);
    let ok = planb(dir.path(), &["check"]);
    assert!(ok.status.success(), "{}", stdout(&ok));
    assert!(
        stdout(&ok).contains("blobs: all 1 the log names are present and intact"),
        "{}",
        stdout(&ok)
    );
    let path = root.blobs().path(&artifact);
    std::fs::write(&path, b"# Intake, damaged\n").expect("damage the blob");
    let damaged = planb(dir.path(), &["check"]);
    assert!(!damaged.status.success());
    assert!(
        stdout(&damaged).contains("is damaged"),
        "{}",
        stdout(&damaged)
    );
    std::fs::remove_file(&path).expect("remove the blob");
    let missing = planb(dir.path(), &["check"]);
    assert!(!missing.status.success());
    assert!(
        stdout(&missing).contains("is missing"),
        "{}",
        stdout(&missing)
    );
}
