//! mcp-cli's saved plans brought in at the application layer: the plan
//! files of a directory, each converted to a planb plan, a checkpoint read
//! as a run (what it kept whole, what runs again), and the import itself
//! over a real store: once per plan, a malformed file named, one import at
//! a time, and a checkpoint a resume continues from a real downstream MCP
//! server.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use planb_app::execution::{Execution, RunAsk, Unreviewed};
use planb_app::import::{self, Imported, Saved};
use planb_app::plans::ServersSource;
use planb_app::runs::Heard;
use planb_app::{App, ErrorCode};
use planb_core::exec_plan::ExecPlan;
use planb_projections::{DataRoot, ImportLock, Store, SystemEnvironment};
use serde_json::{Value, json};

use crate::plans::open;

/// An mcp-cli plan of three steps, each echoing the one before.
fn chain(id: &str, title: &str) -> Value {
    json!({"id": id, "title": title, "tags": [], "metadata": {}, "variables": {"base": "one"},
        "steps": [
        {"id": "s1", "index": "1", "title": "First",
         "tool_calls": [{"id": "c1", "name": "echo", "args": {"text": "${base}"}}],
         "result_variable": "a"},
        {"id": "s2", "index": "2", "title": "Second",
         "tool_calls": [{"id": "c2", "name": "echo", "args": {"text": "${a} two"}}],
         "result_variable": "b", "depends_on": ["1"]},
        {"id": "s3", "index": "3", "title": "Third",
         "tool_calls": [{"id": "c3", "name": "echo", "args": {"text": "${b} three"}}],
         "result_variable": null, "depends_on": ["2"]}
    ]})
}

fn write(dir: &Path, name: &str, value: &Value) {
    std::fs::write(dir.join(name), value.to_string()).expect("written");
}

/// The chain as planb reads it.
fn chain_plan() -> ExecPlan {
    let converted = import::convert(&chain("p", "Chain")).expect("converted");
    ExecPlan::from_json(&converted).expect("a plan")
}

#[test]
fn the_saved_plans_of_a_directory_are_listed_by_id_with_their_checkpoints() {
    let dir = tempfile::tempdir().expect("temp dir");
    for name in [
        "b.json",
        "a.json",
        "a_state.json",
        "orphan_state.json",
        ".json",
    ] {
        std::fs::write(dir.path().join(name), "{}").expect("file");
    }
    std::fs::write(dir.path().join("notes.txt"), "not a plan").expect("file");
    let saved = import::saved(dir.path()).expect("listed");
    let shown: Vec<(&str, &Path, Option<&Path>)> = saved
        .iter()
        .map(|s| (s.id.as_str(), s.path.as_path(), s.checkpoint.as_deref()))
        .collect();
    let (a, b) = (dir.path().join("a.json"), dir.path().join("b.json"));
    let checkpoint = dir.path().join("a_state.json");
    assert_eq!(
        shown,
        [
            ("a", a.as_path(), Some(checkpoint.as_path())),
            ("b", b.as_path(), None)
        ]
    );
    let missing = dir.path().join("nowhere");
    let refused = import::saved(&missing).expect_err("no such directory");
    assert_eq!(refused.code, ErrorCode::InvalidArgument);
    let shown = missing.display().to_string();
    assert!(refused.message.starts_with(&shown), "{refused}");
}

#[test]
fn what_is_not_an_mcp_cli_plan_is_refused_naming_the_field() {
    let cases = [
        (json!("a plan"), "not a JSON object"),
        (json!({"title": "T"}), "steps: missing or not an array"),
        (
            json!({"steps": {"1": {}}}),
            "steps: missing or not an array",
        ),
        (
            json!({"steps": [{"index": "1", "tool": "echo"}, "second"]}),
            "steps[1]: not an object",
        ),
    ];
    for (raw, said) in cases {
        let refused = import::convert(&raw).expect_err(said);
        assert_eq!(refused.code, ErrorCode::InvalidArgument, "{raw}");
        assert_eq!(refused.message, said, "{raw}");
    }
}

#[test]
fn a_step_without_one_tool_call_keeps_its_own_tool_and_arguments() {
    let raw = json!({"id": "p", "title": "Own", "description": null, "tags": ["x"], "steps": [
        {"index": "1", "title": "A", "tool": "echo", "args": {"text": "a"}, "tool_calls": []},
        {"index": "2", "title": "B", "tool": "add", "result_variable": null, "depends_on": ["1"]}
    ]});
    let converted = import::convert(&raw).expect("converted");
    assert_eq!(
        converted,
        json!({"title": "Own", "steps": [
            {"index": "1", "title": "A", "tool": "echo", "args": {"text": "a"}, "depends_on": []},
            {"index": "2", "title": "B", "tool": "add", "args": {}, "depends_on": ["1"]}
        ]})
    );
    let plan = ExecPlan::from_json(&converted).expect("a plan");
    assert_eq!(plan.batches().len(), 2);
}

#[test]
fn a_completed_checkpoint_whose_results_are_whole_is_a_finished_run() {
    let checkpoint = json!({"status": "completed", "completed_steps": ["1", "2", "3"],
        "variables": {"base": "one", "a": "one", "b": {"k": [1, 2]}}});
    let (run, notes) = import::foreign_run(&checkpoint, &chain_plan()).expect("read");
    assert!(notes.is_empty(), "{notes:?}");
    assert!(run.finished);
    assert_eq!(run.reason, None);
    let completed = [
        ("1".to_owned(), json!("one")),
        ("2".to_owned(), json!({"k": [1, 2]})),
        ("3".to_owned(), Value::Null),
    ];
    assert_eq!(run.completed, completed);
    assert!(run.call_variables.is_empty(), "{:?}", run.call_variables);
    assert_eq!(run.variables["b"], json!({"k": [1, 2]}));
}

#[test]
fn a_result_mcp_cli_cut_or_did_not_keep_runs_again_and_the_run_says_why_it_did_not_finish() {
    let cut = format!("{}... [truncated]", "x".repeat(1000));
    let checkpoint = json!({"status": "completed", "completed_steps": ["1", "2", "3"],
        "variables": {"a": cut}});
    let (run, notes) = import::foreign_run(&checkpoint, &chain_plan()).expect("read");
    assert_eq!(run.completed, [("3".to_owned(), Value::Null)]);
    assert_eq!(
        notes,
        [
            "step 1: mcp-cli cut its result (a); it runs again on resume",
            "step 2: its result (b) is not in the checkpoint; it runs again on resume",
        ]
    );
    assert!(!run.finished);
    let reason = run.reason.as_deref();
    assert_eq!(
        reason,
        Some("imported from mcp-cli: completed there, but not every result was kept")
    );
    for (status, said) in [
        (
            json!("failed"),
            "imported from mcp-cli: the run failed there",
        ),
        (
            json!("running"),
            "imported from mcp-cli: the run was interrupted there",
        ),
        (
            json!("paused"),
            "imported from mcp-cli: its status was \"paused\"",
        ),
        (
            Value::Null,
            "imported from mcp-cli: its status was \"unknown\"",
        ),
    ] {
        let checkpoint =
            json!({"status": status, "completed_steps": ["1"], "variables": {"a": "one"}});
        let (run, _) = import::foreign_run(&checkpoint, &chain_plan()).expect("read");
        assert!(!run.finished);
        assert_eq!(run.reason.as_deref(), Some(said), "{status}");
        assert_eq!(run.completed, [("1".to_owned(), json!("one"))]);
    }
}

#[test]
fn a_checkpoint_without_its_completed_steps_is_refused_and_numbered_ones_are_read_as_text() {
    let plan = chain_plan();
    let cases = [
        (
            json!({"status": "completed"}),
            "completed_steps: missing or not an array",
        ),
        (
            json!({"completed_steps": "1"}),
            "completed_steps: missing or not an array",
        ),
        (
            json!({"completed_steps": [], "variables": [1]}),
            "variables: not an object",
        ),
    ];
    for (checkpoint, said) in cases {
        let refused = import::foreign_run(&checkpoint, &plan).expect_err(said);
        assert_eq!(refused.code, ErrorCode::InvalidArgument);
        assert_eq!(refused.message, said);
    }
    let numbered = json!({"status": "running", "completed_steps": [1], "variables": {"a": 7}});
    let (run, notes) = import::foreign_run(&numbered, &plan).expect("read");
    assert_eq!(run.completed, [("1".to_owned(), json!(7))]);
    assert!(notes.is_empty(), "{notes:?}");
}

#[test]
fn the_variables_mcp_cli_s_run_was_given_are_those_no_step_made_and_the_plan_did_not_hold() {
    let checkpoint = json!({"status": "running", "completed_steps": [], "variables": {
        "base": "changed", "extra": "given", "same": 3, "a": "a result",
        "b": "[dict, 1901 chars]", "huge": "[list, 52 chars]"}});
    let mut plan = chain_plan();
    plan.variables.insert("same".into(), json!(3));
    let (run, _) = import::foreign_run(&checkpoint, &plan).expect("read");
    let given: Vec<(&str, &Value)> = run
        .call_variables
        .iter()
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    assert_eq!(
        given,
        [("base", &json!("changed")), ("extra", &json!("given"))]
    );
    assert_eq!(
        run.variables.len(),
        6,
        "every variable is kept to resolve the calls"
    );
}

fn saved(dir: &Path, id: &str) -> Saved {
    let checkpoint = dir.join(format!("{id}_state.json"));
    Saved {
        id: id.to_owned(),
        path: dir.join(format!("{id}.json")),
        checkpoint: checkpoint.is_file().then_some(checkpoint),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_imported_twice_is_recorded_once_and_answers_to_mcp_cli_s_id() {
    let dir = tempfile::tempdir().expect("temp dir");
    let app = open(dir.path()).0;
    let from = tempfile::tempdir().expect("mcp-cli's plans");
    let id = "e9b14d1f-5728-48f3-b6db-622c2a84bacf";
    write(from.path(), &format!("{id}.json"), &chain(id, "Chain"));
    let plans = [saved(from.path(), id)];
    let first = app
        .plans()
        .import(&plans, || {}, |_, _| {})
        .await
        .expect("imported");
    let task = match first.as_slice() {
        [
            Ok(Imported::New {
                task,
                title,
                steps: 3,
                run: None,
                notes,
            }),
        ] => {
            assert_eq!(title, "Chain");
            assert!(notes.is_empty(), "{notes:?}");
            *task
        }
        other => panic!("one new plan: {other:?}"),
    };
    let again = app
        .plans()
        .import(&plans, || {}, |_, _| {})
        .await
        .expect("imported");
    assert!(
        matches!(again.as_slice(), [Ok(Imported::Already { task: t, run: None, .. })] if *t == task),
        "{again:?}"
    );
    assert_eq!(app.plans().list().await.expect("listed").len(), 1);
    for name in [id, "e9b14d1f", "E9B14D1F-5728"] {
        let found = app.plans().find(name).await.expect(name);
        assert_eq!(found.id, task, "{name}");
    }
    let recorded = app.plans().get(task).await.expect("the plan");
    let key = recorded.client_request_id.as_deref();
    assert_eq!(key, Some(format!("{}{id}", import::KEY_PREFIX).as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_plan_file_is_refused_naming_it_and_the_others_are_still_imported() {
    let dir = tempfile::tempdir().expect("temp dir");
    let app = open(dir.path()).0;
    let from = tempfile::tempdir().expect("mcp-cli's plans");
    std::fs::write(from.path().join("a-broken.json"), "{").expect("file");
    let mut two = chain("b-two", "Two calls");
    two["steps"][0]["tool_calls"] =
        json!([{"name": "echo", "args": {}}, {"name": "add", "args": {}}]);
    write(from.path(), "b-two.json", &two);
    let mut cycle = chain("c-cycle", "Cycle");
    cycle["steps"][0]["depends_on"] = json!(["3"]);
    write(from.path(), "c-cycle.json", &cycle);
    write(from.path(), "d-good.json", &chain("d-good", "Good"));
    let listed = import::saved(from.path()).expect("listed");
    let done = app
        .plans()
        .import(&listed, || {}, |_, _| {})
        .await
        .expect("imported");
    assert_eq!(done.len(), 4);
    let said = |at: usize| match &done[at] {
        Err(e) => {
            assert_eq!(e.code, ErrorCode::InvalidArgument, "{e}");
            e.message.clone()
        }
        Ok(other) => panic!("{at}: imported {other:?}"),
    };
    let file = |name: &str| from.path().join(name).display().to_string();
    let broken = said(0);
    assert!(
        broken.starts_with(&format!("{}: not JSON", file("a-broken.json"))),
        "{broken}"
    );
    let two = said(1);
    assert_eq!(
        two,
        format!(
            "{}: steps[0].tool_calls: 2 calls; a step makes one",
            file("b-two.json")
        )
    );
    let cycle = said(2);
    assert!(
        cycle.starts_with(&file("c-cycle.json")) && cycle.contains("dependency cycle"),
        "{cycle}"
    );
    assert!(
        matches!(&done[3], Ok(Imported::New { title, .. }) if title == "Good"),
        "{:?}",
        done[3]
    );
    let titles: Vec<String> = app
        .plans()
        .list()
        .await
        .expect("listed")
        .into_iter()
        .map(|p| p.title)
        .collect();
    assert_eq!(titles, ["Good"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_waits_while_another_holds_the_data_root_s_import_lock() {
    let dir = tempfile::tempdir().expect("temp dir");
    let app = open(dir.path()).0;
    let from = tempfile::tempdir().expect("mcp-cli's plans");
    write(from.path(), "held.json", &chain("held", "Held"));
    let held = ImportLock::take(&DataRoot::new(dir.path()), || panic!("nobody imports yet"));
    let held = held.expect("the lock");
    let told = Arc::new(AtomicBool::new(false));
    let waiting = Arc::clone(&told);
    let plans = app.plans();
    let listed = vec![saved(from.path(), "held")];
    let importing = tokio::spawn(async move {
        let waiting = move || waiting.store(true, Ordering::SeqCst);
        plans.import(&listed, waiting, |_, _| {}).await
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while !told.load(Ordering::SeqCst) {
        assert!(Instant::now() < deadline, "the import was not told to wait");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!importing.is_finished(), "an import ran beside another");
    assert!(app.plans().list().await.expect("listed").is_empty());
    drop(held);
    let done = tokio::time::timeout(Duration::from_secs(30), importing).await;
    let done = done
        .expect("in time")
        .expect("the import")
        .expect("imported");
    assert!(
        matches!(done.as_slice(), [Ok(Imported::New { .. })]),
        "{done:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_imported_again_after_its_copy_was_deleted_is_not_answered_with_the_deleted_copy() {
    let dir = tempfile::tempdir().expect("temp dir");
    let app = open(dir.path()).0;
    let from = tempfile::tempdir().expect("mcp-cli's plans");
    write(from.path(), "again.json", &chain("again", "Again"));
    let plans = [saved(from.path(), "again")];
    let first = app
        .plans()
        .import(&plans, || {}, |_, _| {})
        .await
        .expect("imported");
    let Some(Ok(Imported::New { task: deleted, .. })) = first.into_iter().next() else {
        panic!("imported");
    };
    app.plans()
        .delete(&deleted.to_string())
        .await
        .expect("deleted");
    let again = app
        .plans()
        .import(&plans, || {}, |_, _| {})
        .await
        .expect("imported");
    match again.as_slice() {
        [Err(refused)] => assert_ne!(refused.code, ErrorCode::InternalError, "{refused}"),
        [Ok(Imported::New { task, .. } | Imported::Already { task, .. })] => {
            assert_ne!(*task, deleted, "answered with the deleted copy");
            app.plans().get(*task).await.expect("the plan it names");
        }
        other => panic!("one result: {other:?}"),
    }
}

/// An application at `root` whose one server, `alpha`, is planb-mcp's
/// downstream example noting its calls in `<root>/calls`.
fn with_alpha(root: &Path) -> App {
    let server = planb_tests::process::downstream_binary(env!("CARGO"));
    let env = json!({"DOWNSTREAM_CALLS": root.join("calls")});
    let servers =
        json!({"mcpServers": {"alpha": {"command": server, "args": ["alpha"], "env": env}}});
    let file = root.join("servers.json");
    std::fs::write(&file, servers.to_string()).expect("servers file");
    let (store, _) = Store::open(DataRoot::new(root), Arc::new(SystemEnvironment)).expect("open");
    App::ready(
        Arc::new(store),
        ServersSource {
            file,
            project: None,
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_imported_checkpoint_is_a_run_whose_resume_calls_only_what_it_had_not_done() {
    let dir = tempfile::tempdir().expect("temp dir");
    let app = with_alpha(dir.path());
    let from = tempfile::tempdir().expect("mcp-cli's plans");
    write(from.path(), "half.json", &chain("half", "Half done"));
    let checkpoint = json!({"status": "running", "completed_steps": ["1", "2"],
        "variables": {"base": "one", "a": "one", "b": "one two"}});
    write(from.path(), "half_state.json", &checkpoint);
    let done = app
        .plans()
        .import(&[saved(from.path(), "half")], || {}, |_, _| {})
        .await;
    let done = done.expect("imported");
    let task = match done.as_slice() {
        [
            Ok(Imported::New {
                task,
                run: Some(run),
                notes,
                ..
            }),
        ] => {
            assert_eq!(run, "2 of 3 steps done");
            assert!(notes.is_empty(), "{notes:?}");
            *task
        }
        other => panic!("a plan and its run: {other:?}"),
    };
    let imported = app.plans().get(task).await.expect("the plan");
    let run = imported.runs.last().expect("the imported run").clone();
    assert_eq!(run.state.as_str(), "failed");
    assert_eq!(
        run.reason.as_deref(),
        Some("imported from mcp-cli: the run was interrupted there")
    );
    let ask = RunAsk {
        resume: true,
        ..RunAsk::default()
    };
    let started = app.plans().execute(imported, ask, false, &Unreviewed).await;
    let Ok(Execution::Running { mut attached, .. }) = started else {
        panic!("resumed: {started:?}");
    };
    let end = loop {
        match attached.next(None, None).await {
            Heard::Ended(finished) => break finished.expect("ran"),
            Heard::Lost => panic!("no result"),
            Heard::Step(..) | Heard::Nothing => {}
        }
    };
    assert!(end.outcome.success, "{:?}", end.outcome);
    let made = planb_tests::plans::calls(&dir.path().join("calls"));
    let texts: Vec<&Value> = made.iter().map(|c| &c["args"]["text"]).collect();
    assert_eq!(texts, [&json!("one two three")], "{made:?}");
}
