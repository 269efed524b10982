//! A process's execution-plan runs at the application layer, in process: a
//! real store in a temporary data root and a real downstream MCP server
//! (planb-mcp's `downstream` example, started over stdio by the plan's
//! servers file). One run per plan however many calls ask; a call that
//! hands back leaves the result for the next call; a follower hears each
//! step. The downstream servers' own behaviour (a crash, noise on stderr,
//! a server that never starts) is seen here as the plan's outcome.

use std::path::Path;
use std::sync::Arc;

use planb_app::plans::ServersSource;
use planb_app::runs::{Attached, Finished, Heard, PlanRuns, RunEnd};
use planb_core::TaskId;
use planb_engine::plans::{self, Progress, RunOptions, RunRequest};
use planb_projections::{DataRoot, Store, SystemEnvironment};
use serde_json::json;

struct Setup {
    store: Arc<Store>,
    source: ServersSource,
    runs: Arc<PlanRuns>,
}

fn setup(root: &Path) -> Setup {
    let server = planb_tests::process::downstream_binary(env!("CARGO"));
    let calls = root.join("calls");
    let env = json!({"DOWNSTREAM_CALLS": calls});
    setup_with(
        root,
        json!({
            "d": {"command": server, "args": ["d"], "env": env},
            "alpha": {"command": server, "args": ["alpha"], "env": env},
        }),
    )
}

/// A store in `root` and the servers `servers` (an `mcpServers` map).
fn setup_with(root: &Path, servers: serde_json::Value) -> Setup {
    let (store, _) = Store::open(DataRoot::new(root), Arc::new(SystemEnvironment)).expect("open");
    let file = root.join("servers.json");
    let servers = json!({ "mcpServers": servers });
    std::fs::write(&file, servers.to_string()).expect("servers file");
    Setup {
        store: Arc::new(store),
        source: ServersSource {
            file,
            project: None,
        },
        runs: Arc::default(),
    }
}

/// The downstream calls made so far, as the servers noted them.
fn calls(root: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(root.join("calls"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("call line"))
        .collect()
}

/// Records the plan `definition` (checked against the servers) and runs
/// it to its end with `options`, as `plan_create_and_execute` does.
async fn create_and_run(
    setup: &Setup,
    definition: serde_json::Value,
    options: RunOptions,
) -> Result<Arc<RunEnd>, String> {
    let downstream = setup.runs.downstream.get(&setup.source).expect("servers");
    let created = planb_app::plans::create(&setup.store, &downstream, &definition, None).await;
    let id = created.map_err(|e| e.message)?.id;
    let task = setup.store.read(|s| s.task(&id).cloned()).expect("read");
    let plan = plans::load(&task.expect("the plan's task")).expect("the plan");
    let mut request = RunRequest::new(id);
    request.options = options;
    let started = setup
        .runs
        .start(&setup.store, &setup.source, &plan, request, false);
    until_ended(&mut started.expect("started").0).await
}

fn step(index: &str, tool: &str, args: serde_json::Value, deps: &[&str]) -> serde_json::Value {
    json!({"index": index, "title": format!("Step {index}"), "tool": tool, "args": args, "depends_on": deps})
}

fn completed(end: &RunEnd) -> usize {
    end.outcome.steps.iter().filter(|s| s.success).count()
}

/// Records a plan: a slow first step whose text the second echoes.
async fn two_step_plan(
    setup: &Setup,
    sleep_ms: u64,
) -> (TaskId, Arc<planb_core::exec_plan::ExecPlan>) {
    let downstream = setup.runs.downstream.get(&setup.source).expect("servers");
    let definition = json!({
        "title": "Slow then echo",
        "steps": [
            {"index": "1", "title": "Wait", "tool": "d__sleep",
             "args": {"ms": sleep_ms, "text": "waited"}, "result_variable": "first"},
            {"index": "2", "title": "Echo", "tool": "d__echo",
             "args": {"text": "${first} twice"}, "depends_on": ["1"], "result_variable": "second"}
        ]
    });
    let created = planb_app::plans::create(&setup.store, &downstream, &definition, None).await;
    let id = created.expect("created").id;
    let task = setup
        .store
        .read(|s| s.task(&id).cloned())
        .expect("read")
        .expect("the plan's task");
    (id, plans::load(&task).expect("the plan"))
}

async fn until_ended(attached: &mut Attached) -> Finished {
    loop {
        if let Some(finished) = attached.result() {
            return finished;
        }
        match attached.next(None, None).await {
            Heard::Ended(finished) => return finished,
            Heard::Lost => panic!("the run ended without a result"),
            Heard::Step(..) | Heard::Nothing => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_calls_share_one_run_and_a_handed_back_result_waits_for_the_next_call() {
    let dir = tempfile::tempdir().expect("temp dir");
    let setup = setup(dir.path());
    let (id, plan) = two_step_plan(&setup, 400).await;
    let start = || {
        let request = RunRequest::new(id);
        setup
            .runs
            .start(&setup.store, &setup.source, &plan, request, false)
    };
    let (mut first, _) = start().expect("started");
    let (mut second, _) = start().expect("joined");
    assert!(setup.runs.running_here(id));
    assert_eq!(first.steps_total(), 2);
    // The first call stops waiting while the run goes on.
    assert!(setup.runs.hand_back(&first, id).is_none());
    let one = until_ended(&mut first).await.expect("ran");
    let two = until_ended(&mut second).await.expect("ran");
    assert_eq!(one.outcome.run, two.outcome.run, "one run for both calls");
    assert!(one.outcome.success, "{:?}", one.outcome);
    let expected = json!("waited twice");
    assert_eq!(one.outcome.variables.get("second"), Some(&expected));
    assert!(one.dag.as_deref().is_some_and(|d| d.contains("Echo")));

    // The run ended after its call handed back: the next call gets it, once.
    let collected = setup.runs.collect(id).expect("kept").expect("ran");
    assert_eq!(collected.outcome.run, one.outcome.run);
    assert!(setup.runs.collect(id).is_none());
    assert!(!setup.runs.running_here(id));
    let runs = setup.store.read(|s| s.task(&id).map(|t| t.runs.len()));
    assert_eq!(runs.expect("read"), Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_hears_each_step_start_and_settle_in_order() {
    let dir = tempfile::tempdir().expect("temp dir");
    let setup = setup(dir.path());
    let (id, plan) = two_step_plan(&setup, 200).await;
    // The follower is made before the run starts: it hears the first step.
    let (mut attached, follow) = setup
        .runs
        .start(
            &setup.store,
            &setup.source,
            &plan,
            RunRequest::new(id),
            true,
        )
        .expect("started");
    let mut follow = follow.expect("a follower");
    let mut heard: Vec<(usize, String)> = Vec::new();
    let finished = loop {
        match attached.next(Some(&mut follow), None).await {
            Heard::Ended(finished) => break finished,
            Heard::Step(n, Progress::Started { index }) => {
                heard.push((n, format!("start {index}")))
            }
            Heard::Step(n, Progress::Ended(report)) => {
                heard.push((n, format!("end {} {}", report.index, report.success)));
            }
            Heard::Lost => panic!("the run ended without a result"),
            Heard::Nothing => {}
        }
    };
    let end = finished.expect("ran");
    assert!(end.outcome.success);
    let expected: Vec<(usize, String)> = vec![
        (0, "start 1".into()),
        (1, "end 1 true".into()),
        (1, "start 2".into()),
        (2, "end 2 true".into()),
    ];
    assert_eq!(heard, expected);
    assert_eq!(attached.settled(), 2);
    // A finished run is not kept for anyone: nobody handed back.
    assert!(setup.runs.collect(id).is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_cannot_start_says_why_as_its_result() {
    let dir = tempfile::tempdir().expect("temp dir");
    let setup = setup(dir.path());
    let (id, plan) = two_step_plan(&setup, 10).await;
    let mut request = RunRequest::new(id);
    request.resume = true;
    let (mut attached, _) = setup
        .runs
        .start(&setup.store, &setup.source, &plan, request, false)
        .expect("started");
    let said = until_ended(&mut attached)
        .await
        .expect_err("nothing to resume");
    assert!(said.contains("nothing to resume"), "{said}");
    assert!(!setup.runs.running_here(id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_s_last_words_are_kept_after_stderr_that_is_not_text() {
    let dir = tempfile::tempdir().expect("temp dir");
    let setup = setup(dir.path());
    // Far more than a pipe holds, none of it UTF-8; then the server dies,
    // and its last line must still reach the error.
    let options = RunOptions {
        step_timeout: std::time::Duration::from_secs(30),
        ..RunOptions::default()
    };
    let definition = json!({"title": "Noisy", "steps": [
        step("1", "alpha__noise", json!({"bytes": 300000}), &[]),
        step("2", "alpha__crash", json!({}), &["1"]),
    ]});
    let ran = create_and_run(&setup, definition, options)
        .await
        .expect("ran");
    assert!(!ran.outcome.success, "{:?}", ran.outcome);
    assert_eq!(completed(&ran), 1, "{:?}", ran.outcome);
    let error = ran.outcome.error.as_deref().expect("error");
    assert!(error.contains("alpha: crashing on purpose"), "{error}");
}

/// A downstream server that died mid-call is started again on its next
/// use: later plans in the same long-lived process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_server_crashes_the_next_plans_start_it_again() {
    let dir = tempfile::tempdir().expect("temp dir");
    let setup = setup(dir.path());
    let definition = json!({"title": "Crash", "steps": [
        step("1", "alpha__echo", json!({"text": "before"}), &[]),
        step("2", "alpha__crash", json!({}), &["1"]),
    ]});
    let crashed = create_and_run(&setup, definition, RunOptions::default()).await;
    let crashed = crashed.expect("ran");
    assert!(!crashed.outcome.success, "{:?}", crashed.outcome);
    let error = crashed.outcome.error.as_deref().unwrap_or_default();
    assert!(error.contains("crashing on purpose"), "{error}");
    for n in 0..2 {
        let definition = json!({"title": format!("After {n}"), "steps": [
            step("1", "alpha__echo", json!({"text": format!("after {n}")}), &[]),
        ]});
        let ran = create_and_run(&setup, definition, RunOptions::default()).await;
        let ran = ran.expect("ran");
        assert!(
            ran.outcome.success,
            "plan {n} after the crash: {:?}",
            ran.outcome
        );
    }
    let echoes = calls(dir.path())
        .iter()
        .filter(|c| c["tool"] == "echo" && c["server"] == "alpha")
        .count();
    assert_eq!(echoes, 3, "{:?}", calls(dir.path()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_no_step_names_does_not_stop_a_plan() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = planb_tests::process::downstream_binary(env!("CARGO"));
    let setup = setup_with(
        dir.path(),
        json!({
            "alpha": {"command": server, "args": ["alpha"]},
            "remote": {"url": "https://mcp.example.invalid/mcp"},
            "broken": {"command": "/nonexistent/server"},
        }),
    );
    let definition = json!({"title": "Named", "steps": [
        step("1", "alpha__echo", json!({"text": "hi"}), &[]),
    ]});
    let ran = create_and_run(&setup, definition, RunOptions::default()).await;
    assert!(ran.expect("ran").outcome.success);
    // A bare name needs every server: the ones that did not start are named.
    let definition =
        json!({"title": "Bare", "steps": [step("1", "nothing_has_this", json!({}), &[])]});
    let bare = create_and_run(&setup, definition, RunOptions::default()).await;
    let bare = bare.expect_err("no server has it");
    assert!(bare.contains("\"broken\" did not start"), "{bare}");
    assert!(bare.contains("\"remote\""), "{bare}");
    // A bare name the started servers have is fine.
    let definition =
        json!({"title": "Bare ok", "steps": [step("1", "echo", json!({"text": "x"}), &[])]});
    let found = create_and_run(&setup, definition, RunOptions::default()).await;
    assert!(found.expect("ran").outcome.success);
}
