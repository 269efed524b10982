//! The planb-mcp file layout (`sessions/<id>/…`): the golden export tree, the
//! live tree kept current across processes, rebuild, and import of a data
//! root written by the Node tool.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use planb_core::{
    AskId, AskSpec, AskStatus, Command, DeclineAction, Delivery, Event, EventBody, EventId,
    SessionId, Timestamp,
};
use planb_projections::{DataRoot, FixedEnvironment, ImportLock, Store, export, rebuild};
use serde_json::{Value, json};

/// Imports `from` into `store`, holding its root's import lock.
fn import(
    store: &Store,
    from: &Path,
) -> Result<planb_projections::ImportReport, planb_projections::StoreError> {
    let lock = ImportLock::take(store.root(), || {}).expect("the import lock");
    planb_projections::import(store, from, &lock)
}

fn at(iso: &str) -> Timestamp {
    Timestamp::parse_iso8601(iso).expect("timestamp")
}

fn open(root: &Path) -> Store {
    // 61.007 s per event, so times differ down to the millisecond.
    let env = FixedEnvironment::new(at("2026-06-07T18:21:10.123Z"), 61_007);
    Store::open(DataRoot::new(root), Arc::new(env))
        .expect("open store")
        .0
}

fn session_id(n: u128) -> SessionId {
    SessionId::from_uuid(uuid::Uuid::from_u128(
        0x3f1c_2b7a_9d4e_4c1a_8b2f_5e6d_7c8b_9a00 + n,
    ))
}

fn ask_id(n: u128) -> AskId {
    AskId::from_uuid(uuid::Uuid::from_u128(
        0x8e2d_4f6a_1b3c_4d5e_9f70_1a2b_3c4d_5e00 + n,
    ))
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

/// Every file under `dir`, by path relative to it.
fn files_under(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                walk(base, &path, out);
            } else {
                let relative = path.strip_prefix(base).expect("under base");
                let name = relative.to_string_lossy().replace('\\', "/");
                out.insert(name, std::fs::read(&path).expect("read file"));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn read_json(path: &Path) -> Value {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&bytes).expect("json")
}

fn run(store: &Store, command: Command) {
    store.execute(command).expect("command");
}

fn create(store: &Store, session: SessionId, title: Option<&str>) {
    let command = Command::CreateSession {
        session,
        title: title.map(str::to_owned),
        intent: None,
        project_path: None,
    };
    run(store, command);
}

fn open_ask(store: &Store, session: SessionId, ask: AskId, spec: Value) {
    run(
        store,
        Command::OpenAsk {
            session,
            ask,
            spec: AskSpec::from_json(&spec).expect("spec"),
            delivery: Delivery::BrowserOpened,
            url: "http://127.0.0.1:43123/ask".into(),
            sid: "0f1e2d3c4b5a69788796a5b4c3d2e1f0".into(),
        },
    );
}

fn submit(store: &Store, ask: AskId, answers: Value) {
    let spec = store
        .read(|s| s.ask(&ask).map(|a| a.spec.clone()))
        .expect("read")
        .expect("ask");
    let answers = spec.validate_answers(&answers).expect("answers");
    run(store, Command::SubmitAnswers { ask, answers });
}

/// Two sessions covering every status, a late answer and both plan shapes.
fn script(store: &Store) {
    let (s1, s2) = (session_id(1), session_id(2));
    run(
        store,
        Command::CreateSession {
            session: s1,
            title: Some("Aurora kickoff".into()),
            intent: Some("Plan the Aurora workspace set-up".into()),
            project_path: Some("/home/ana/src/aurora".into()),
        },
    );
    let kickoff = json!({
        "title": "Project kickoff preferences",
        "introTitle": "Kickoff",
        "intro": "A few quick questions.\n\n| a | b |\n|---|---|\n| 1 | 2 |",
        "questions": [
            {"id": "name", "kind": "text", "label": "Project name", "placeholder": "e.g. Aurora", "required": true, "tab": "Workspace"},
            {"id": "summary", "kind": "longtext", "label": "Summary", "tab": "Workspace"},
            {"id": "language", "kind": "single", "label": "Language", "required": true,
             "options": [{"value": "TypeScript", "markdown": "### TypeScript\n\n\"typed\" <web>"}, "Rust"]},
            {"id": "integrations", "kind": "multi", "label": "Integrations", "options": ["GitHub", "Slack"]},
            {"id": "priority", "kind": "scale", "label": "Priority", "min": 1, "max": 5, "step": 0.5}
        ]
    });
    open_ask(store, s1, ask_id(1), kickoff);
    submit(
        store,
        ask_id(1),
        json!({"name": "Aurora", "summary": "Ünïcode — «quotes» \"and\" \\ tabs\t", "language": "TypeScript",
               "integrations": ["Slack", "GitHub"], "priority": 3.5}),
    );
    let storage = json!({"title": "Storage", "questions": [
        {"id": "engine", "kind": "single", "label": "Which store?", "options": ["redb", "files"], "required": true}]});
    open_ask(store, s1, ask_id(2), storage);
    run(store, Command::TimeOut { ask: ask_id(2) });
    submit(store, ask_id(2), json!({"engine": "redb"}));
    let deadline = json!({"title": "Deadline", "questions": [{"id": "date", "kind": "text", "label": "When?"}]});
    open_ask(store, s1, ask_id(3), deadline.clone());
    run(
        store,
        Command::Decline {
            ask: ask_id(3),
            action: DeclineAction::Cancel,
        },
    );
    run(
        store,
        Command::SavePlan {
            session: s1,
            title: Some("First cut".into()),
            content: "# Aurora\n\n1. Repo\n2. Ünïcode ✓\n".into(),
        },
    );
    open_ask(store, s1, ask_id(4), deadline);
    run(
        store,
        Command::Fail {
            ask: ask_id(4),
            detail: "failed to open the browser: spawn xdg-open ENOENT".into(),
        },
    );
    run(
        store,
        Command::SavePlan {
            session: s1,
            title: None,
            content: "# Aurora v2\n\nno trailing newline".into(),
        },
    );
    create(store, s2, Some("Side quest"));
    let budget = json!({"title": "Budget", "questions": [{"id": "hours", "kind": "scale", "label": "Hours", "min": 0, "max": 40}]});
    open_ask(store, s2, ask_id(5), budget);
}

fn assert_same_trees(expected: &BTreeMap<String, Vec<u8>>, actual: &BTreeMap<String, Vec<u8>>) {
    let missing: Vec<&String> = expected
        .keys()
        .filter(|k| !actual.contains_key(*k))
        .collect();
    let extra: Vec<&String> = actual
        .keys()
        .filter(|k| !expected.contains_key(*k))
        .collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "missing {missing:?}, extra {extra:?}"
    );
    for (name, bytes) in expected {
        assert_eq!(
            String::from_utf8_lossy(&actual[name]),
            String::from_utf8_lossy(bytes),
            "{name} differs"
        );
    }
}

#[test]
fn export_writes_the_golden_tree_byte_for_byte() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    script(&store);
    let out = tempfile::tempdir().expect("tempdir");
    let report = export(&store, out.path()).expect("export");
    assert_eq!(report.sessions, 2);
    let actual = files_under(out.path());
    // 2 manifests, 5 asks, 2 plans of 2 files each.
    assert_eq!(report.files_written, 11);
    assert_eq!(actual.len(), 11);

    let golden = fixtures().join("export/expected");
    if std::env::var_os("PLANB_BLESS").is_some() {
        let _ = std::fs::remove_dir_all(&golden);
        for (name, bytes) in &actual {
            let path = golden.join(name);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, bytes).expect("bless");
        }
    }
    assert_same_trees(&files_under(&golden), &actual);

    // The live tree, written event by event, is the same tree.
    let live = files_under(&DataRoot::new(dir.path()).sessions_dir());
    assert_same_trees(&files_under(&out.path().join("sessions")), &live);
    // Exporting again finds every file right.
    let again = export(&store, out.path()).expect("export again");
    assert_eq!((again.files_written, again.files_unchanged), (0, 11));
}

/// Appends `body` as another process would, without writing any file.
fn append_behind_the_stores_back(root: &Path, body: EventBody, n: u128) {
    let log_dir = DataRoot::new(root).log_dir();
    let (log, _) = planb_log::open_dir(&log_dir, Default::default()).expect("open log");
    let event = Event {
        id: EventId::from_uuid(uuid::Uuid::from_u128(0xeeee_0000 + n)),
        at: at("2026-06-08T08:00:00.000Z"),
        body,
    };
    let payload = planb_core::encode(&event).expect("encode");
    log.append(&[&payload]).expect("append");
}

fn plan_body(session: SessionId, version: u32) -> EventBody {
    EventBody::PlanVersionSaved {
        session,
        version,
        title: None,
        content: format!("# v{version}\n"),
    }
}

#[test]
fn the_live_tree_shows_every_process_s_events() {
    let dir = tempfile::tempdir().expect("tempdir");
    let session_dir = DataRoot::new(dir.path())
        .sessions_dir()
        .join(session_id(1).to_string());
    let first = open(dir.path());
    let second = open(dir.path());
    let spec = json!({"title": "Q", "questions": [{"id": "q", "kind": "text", "label": "Q"}]});
    create(&first, session_id(1), None);
    assert_eq!(read_json(&session_dir.join("session.json"))["askCount"], 0);

    open_ask(&second, session_id(1), ask_id(1), spec);
    let manifest = read_json(&session_dir.join("session.json"));
    assert_eq!(manifest["askCount"], 1);
    let ask_file = session_dir.join(manifest["asks"][0]["file"].as_str().expect("file"));
    assert_eq!(read_json(&ask_file)["status"], "pending");
    run(&first, Command::TimeOut { ask: ask_id(1) });
    assert_eq!(read_json(&ask_file)["status"], "timeout");

    // A process that crashed between appending and writing its files.
    append_behind_the_stores_back(dir.path(), plan_body(session_id(1), 1), 1);
    assert!(!session_dir.join("plans/v1.md").exists());
    second.read(|_| ()).expect("read");
    assert_eq!(
        std::fs::read_to_string(session_dir.join("plans/v1.md")).expect("v1"),
        "# v1\n"
    );
    assert_eq!(
        read_json(&session_dir.join("session.json"))["latestPlanVersion"],
        1
    );

    // A store opening on a root whose tree is behind brings it up to date.
    append_behind_the_stores_back(dir.path(), plan_body(session_id(1), 2), 2);
    let third = open(dir.path());
    assert!(
        session_dir.join("plans/v2.md").exists(),
        "projected at open"
    );
    let out = tempfile::tempdir().expect("tempdir");
    export(&third, out.path()).expect("export");
    let live = files_under(&DataRoot::new(dir.path()).sessions_dir());
    assert_same_trees(&files_under(&out.path().join("sessions")), &live);
}

#[test]
fn a_file_that_cannot_be_written_fails_no_command_and_is_written_later() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let session = session_id(1);
    create(&store, session, None);
    let plans = DataRoot::new(dir.path())
        .sessions_dir()
        .join(session.to_string())
        .join("plans");
    std::fs::write(&plans, "a file where the plans directory belongs").expect("block");
    let saved = store.execute(Command::SavePlan {
        session,
        title: None,
        content: "# kept in the log\n".into(),
    });
    assert_eq!(
        saved
            .expect("the event is durable, the command succeeds")
            .len(),
        1
    );
    assert!(!plans.is_dir());

    std::fs::remove_file(&plans).expect("unblock");
    // The failed projection left the checkpoint behind: the next one redoes everything.
    create(&store, session_id(2), None);
    let v1 = std::fs::read_to_string(plans.join("v1.md")).expect("v1 written later");
    assert_eq!(v1, "# kept in the log\n");
}

#[test]
fn rebuild_deletes_the_tree_and_writes_it_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = DataRoot::new(dir.path());
    let store = open(dir.path());
    script(&store);
    let sessions = root.sessions_dir();
    std::fs::write(sessions.join("stray.txt"), "not from the log").expect("stray");
    let manifest = sessions
        .join(session_id(1).to_string())
        .join("session.json");
    std::fs::write(&manifest, "{}").expect("tamper");
    std::fs::remove_dir_all(sessions.join(session_id(2).to_string())).expect("delete");

    let stale = sessions
        .join(session_id(1).to_string())
        .join("asks/stale.json");
    std::fs::write(&stale, "{}").expect("stale");
    // A session the log does not know (a Node tree not imported yet) is kept.
    let foreign = sessions
        .join(session_id(9).to_string())
        .join("session.json");
    std::fs::create_dir_all(foreign.parent().expect("parent")).expect("mkdir");
    std::fs::write(&foreign, "{}").expect("foreign");

    rebuild(&root).expect("rebuild");
    let out = tempfile::tempdir().expect("tempdir");
    export(&store, out.path()).expect("export");
    let mut expected = files_under(&out.path().join("sessions"));
    let foreign_name = format!("{}/session.json", session_id(9));
    expected.insert(foreign_name, b"{}".to_vec());
    assert_same_trees(&expected, &files_under(&sessions));
}

fn node_root() -> PathBuf {
    fixtures().join("import/node-root")
}

const NODE_A: &str = "6f1d2c3b-8a7e-4d5c-9b1a-0e2f3d4c5b6a";
const NODE_B: &str = "7a2e3d4c-9b8f-4e6d-a0c1-1f2e3d4c5b6a";

fn statuses(store: &Store, session: &str) -> Vec<AskStatus> {
    let id = SessionId::parse(session).expect("id");
    store
        .read(|s| {
            let asks = &s.session(&id).expect("session").asks;
            asks.iter().map(|a| s.ask(a).expect("ask").status).collect()
        })
        .expect("read")
}

#[test]
fn import_of_a_node_root_replays_it_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let report = import(&store, &node_root()).expect("import");
    assert_eq!(report.problems, vec![], "no problems");
    // 2 sessions, 7 asks, 5 plan versions.
    assert_eq!(report.imported.len(), 14, "{:?}", report.imported);
    assert!(report.skipped.is_empty());

    use AskStatus::*;
    assert_eq!(
        statuses(&store, NODE_A),
        [Answered, TimedOut, Declined, Failed, Pending]
    );
    assert_eq!(statuses(&store, NODE_B), [Answered, Declined]);
    let state = store.snapshot().expect("snapshot");
    let a = state
        .session(&SessionId::parse(NODE_A).expect("id"))
        .expect("a");
    assert_eq!(a.created_at, at("2026-05-02T09:14:03.512Z"));
    assert_eq!(
        a.intent.as_deref(),
        Some("Plan the Aurora workspace set-up")
    );
    let answered = state.ask(&a.asks[0]).expect("ask");
    assert_eq!(answered.answered_at, Some(at("2026-05-02T09:17:45.871Z")));
    assert_eq!(
        answered.answers.as_ref().expect("answers").to_json()["priority"],
        4
    );
    let failed = state.ask(&a.asks[3]).expect("ask");
    let detail = "failed to open the browser: spawn xdg-open ENOENT";
    assert_eq!(failed.failure_detail.as_deref(), Some(detail));
    let b = state
        .session(&SessionId::parse(NODE_B).expect("id"))
        .expect("b");
    assert_eq!(
        state.ask(&b.asks[1]).expect("ask").decline_action,
        Some(DeclineAction::Cancel)
    );
    let titles: Vec<Option<&str>> = b.plans.iter().map(|p| p.title.as_deref()).collect();
    assert_eq!(titles, [Some("Sketch"), None, None]);
    assert_eq!(
        store.plan_text(&b.id, 3).expect("plan text").as_deref(),
        Some("# Retro v3\n\nWritten without a sidecar.\n")
    );

    let again = import(&store, &node_root()).expect("import again");
    assert_eq!((again.imported.len(), again.problems.len()), (0, 0));
    assert_eq!(again.skipped.len(), 14);
    assert_eq!(
        store.snapshot().expect("snapshot"),
        state,
        "a second import changes nothing"
    );

    let out = tempfile::tempdir().expect("tempdir");
    export(&store, out.path()).expect("export");
    assert_round_trip(&files_under(&node_root()), &files_under(out.path()));
    let live = files_under(&DataRoot::new(dir.path()).sessions_dir());
    assert_same_trees(&files_under(&out.path().join("sessions")), &live);
}

/// The export of an imported Node root holds the same content, except:
/// - `updatedAt` is recomputed from the events (the Node tool also moved it
///   for timeouts, which its files do not date);
/// - `input` is written in planb's canonical form (key order, no
///   `"required": false`), so it is compared as a spec;
/// - fields unknown to the layout (`via`) are dropped;
/// - a manifest without `asks`/`plans` gets them, and a plan without a
///   sidecar gets one.
fn assert_round_trip(node: &BTreeMap<String, Vec<u8>>, ours: &BTreeMap<String, Vec<u8>>) {
    let extra: Vec<&String> = ours.keys().filter(|k| !node.contains_key(*k)).collect();
    assert_eq!(extra, [&format!("sessions/{NODE_B}/plans/v3.json")]);
    for (name, node_bytes) in node {
        let our_bytes = ours
            .get(name)
            .unwrap_or_else(|| panic!("{name} not exported"));
        if name.contains("/plans/") {
            assert_eq!(our_bytes, node_bytes, "{name} differs");
            continue;
        }
        let mut theirs: Value = serde_json::from_slice(node_bytes).expect("node json");
        let mut mine: Value = serde_json::from_slice(our_bytes).expect("our json");
        let (t, m) = (
            theirs.as_object_mut().expect("object"),
            mine.as_object_mut().expect("object"),
        );
        t.shift_remove("updatedAt");
        m.shift_remove("updatedAt");
        t.shift_remove("via");
        for key in ["asks", "plans"] {
            if !t.contains_key(key) {
                m.shift_remove(key);
            }
        }
        if let (Some(ti), Some(mi)) = (t.shift_remove("input"), m.shift_remove("input")) {
            let spec = |v: &Value| AskSpec::from_json(v).expect("spec");
            assert_eq!(spec(&ti), spec(&mi), "{name}: input differs");
        }
        assert_eq!(theirs, mine, "{name} differs");
    }
}

fn copy_tree(from: &Path, to: &Path) {
    for (name, bytes) in files_under(from) {
        let path = to.join(name);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, bytes).expect("copy");
    }
}

#[test]
fn a_malformed_file_is_reported_with_its_path_and_the_rest_is_imported() {
    let node = tempfile::tempdir().expect("tempdir");
    copy_tree(&node_root(), node.path());
    let a = node.path().join("sessions").join(NODE_A);
    let asks = files_under(&a.join("asks"));
    let names: Vec<&String> = asks.keys().collect();
    let truncated = a.join("asks").join(names[1]);
    std::fs::write(&truncated, "{\"schemaVersion\": 1, \"askId\": ").expect("truncate");
    let bad_spec = a.join("asks").join(names[4]);
    let mut record = read_json(&bad_spec);
    record["input"]["questions"][0]["kind"] = json!("dropdown");
    std::fs::write(&bad_spec, record.to_string()).expect("bad spec");
    let b_manifest = node
        .path()
        .join("sessions")
        .join(NODE_B)
        .join("session.json");
    let good_manifest = std::fs::read(&b_manifest).expect("read");
    std::fs::write(&b_manifest, "not json").expect("garble");

    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let report = import(&store, node.path()).expect("import");
    let problems: Vec<(PathBuf, String)> = report
        .problems
        .iter()
        .map(|p| (p.path.clone(), p.problem.clone()))
        .collect();
    assert_eq!(problems.len(), 3, "{problems:?}");
    assert_eq!(problems[0].0, truncated);
    assert!(
        problems[0].1.starts_with("malformed json: EOF"),
        "{}",
        problems[0].1
    );
    assert_eq!(problems[1].0, bad_spec);
    assert!(
        problems[1]
            .1
            .starts_with("input.questions[0].kind: unknown kind \"dropdown\"")
    );
    assert_eq!(problems[2].0, b_manifest);
    assert!(
        problems[2].1.starts_with("malformed json"),
        "{}",
        problems[2].1
    );
    use AskStatus::*;
    assert_eq!(statuses(&store, NODE_A), [Answered, Declined, Failed]);
    let has_b = store.read(|s| s.session(&SessionId::parse(NODE_B).expect("id")).is_some());
    assert!(!has_b.expect("read"));

    // Once the manifest is repaired, the session comes in; the rest is skipped.
    std::fs::write(&b_manifest, good_manifest).expect("repair");
    let report = import(&store, node.path()).expect("import");
    assert_eq!(report.problems.len(), 2);
    assert_eq!(report.imported.len(), 6, "{:?}", report.imported);
    assert_eq!(statuses(&store, NODE_B), [Answered, Declined]);
}

/// A file over an import's size limit is reported, named, without being
/// read past the limit; the rest is imported.
#[test]
fn a_file_over_the_limit_is_reported_and_the_rest_is_imported() {
    let node = tempfile::tempdir().expect("tempdir");
    copy_tree(&node_root(), node.path());
    let a = node.path().join("sessions").join(NODE_A);
    let asks = files_under(&a.join("asks"));
    let huge = a.join("asks").join(asks.keys().next().expect("an ask"));
    let file = std::fs::File::create(&huge).expect("create");
    file.set_len(17 << 20).expect("a sparse 17 MiB file");
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let report = import(&store, node.path()).expect("import");
    let problems: Vec<(PathBuf, String)> = report
        .problems
        .iter()
        .map(|p| (p.path.clone(), p.problem.clone()))
        .collect();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].0, huge);
    assert!(
        problems[0].1.contains("over the 16777216-byte limit"),
        "{}",
        problems[0].1
    );
    assert_eq!(report.imported.len(), 13, "{:?}", report.imported);
}
