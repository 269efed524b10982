//! A process's execution-plan runs at the application layer, in process: a
//! real store in a temporary data root and a real downstream MCP server
//! (planb-mcp's `downstream` example, started over stdio by the plan's
//! servers file). One run per plan however many calls ask; a call that
//! hands back leaves the result for the next call; a follower hears each
//! step. The downstream servers' own behaviour (a crash, noise on stderr,
//! a server that never starts) is seen here as the plan's outcome.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use planb_app::ErrorCode;
use planb_app::plans::ServersSource;
use planb_app::runs::{Attached, Finished, Found, Heard, PlanRuns, RunEnd, Waited};
use planb_core::exec_plan::ExecPlan;
use planb_core::{Task, TaskId};
use planb_engine::plans::{self, Progress, RunOptions, RunRequest};
use planb_projections::{DataRoot, Store, SystemEnvironment};
use planb_tests::plans::step;
use serde_json::{Map, Value, json};

pub(crate) struct Setup {
    pub(crate) app: planb_app::App,
    pub(crate) store: Arc<Store>,
    pub(crate) source: ServersSource,
    pub(crate) runs: Arc<PlanRuns>,
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
    let (store, source) = (
        Arc::new(store),
        ServersSource {
            file,
            project: None,
        },
    );
    let app = planb_app::App::ready(Arc::clone(&store), source.clone());
    Setup {
        runs: Arc::clone(app.runs()),
        app,
        store,
        source,
    }
}

/// A store in `root` and two servers: `alpha` (every tool of the example)
/// and `beta` (its echo, sleep and crash only), so a bare `add` is alpha's
/// and a bare `echo` is either's.
pub(crate) fn alpha_and_beta(root: &Path) -> Setup {
    let server = planb_tests::process::downstream_binary(env!("CARGO"));
    let env = json!({"DOWNSTREAM_CALLS": root.join("calls")});
    setup_with(
        root,
        json!({
            "alpha": {"command": server, "args": ["alpha"], "env": env},
            "beta": {"command": server, "args": ["beta", "echo", "sleep", "crash"], "env": env},
        }),
    )
}

/// The downstream calls made so far, as the servers noted them.
pub(crate) fn calls(root: &Path) -> Vec<Value> {
    planb_tests::plans::calls(&root.join("calls"))
}

/// Records the plan `definition`, checked against the servers' tools, as
/// `plan_create` does.
pub(crate) async fn create(setup: &Setup, definition: &Value) -> Result<TaskId, planb_app::Error> {
    let created = setup.app.plans().create(definition, None).await;
    created.map(|c| c.id)
}

/// Plan `id` as recorded now, and its steps.
pub(crate) fn recorded(setup: &Setup, id: TaskId) -> (Task, Arc<ExecPlan>) {
    let task = setup.store.read(|s| s.task(&id).cloned()).expect("read");
    let task = task.expect("the plan's task");
    let plan = plans::load(&task).expect("the plan");
    (task, plan)
}

/// Runs the plan as `request` asks, to its end.
pub(crate) async fn run(setup: &Setup, request: RunRequest) -> Finished {
    let (_, plan) = recorded(setup, request.task);
    let started = setup
        .runs
        .start(&setup.store, &setup.source, &plan, request, false);
    until_ended(&mut started.expect("started").0).await
}

/// A request to run plan `id` with `options`.
pub(crate) fn request(id: TaskId, options: RunOptions) -> RunRequest {
    let mut request = RunRequest::new(id);
    request.options = options;
    request
}

/// Call-time variables.
pub(crate) fn variables(value: Value) -> Option<Map<String, Value>> {
    value.as_object().cloned()
}

/// Records the plan `definition` (checked against the servers) and runs
/// it to its end with `options`, as `plan_create_and_execute` does.
async fn create_and_run(
    setup: &Setup,
    definition: Value,
    options: RunOptions,
) -> Result<Arc<RunEnd>, String> {
    let id = create(setup, &definition).await.map_err(|e| e.message)?;
    run(setup, request(id, options))
        .await
        .map_err(|failure| failure.to_string())
}

pub(crate) fn completed(end: &RunEnd) -> usize {
    end.outcome.steps.iter().filter(|s| s.success).count()
}

/// Records a plan: a slow first step whose text the second echoes.
async fn two_step_plan(setup: &Setup, sleep_ms: u64) -> (TaskId, Arc<ExecPlan>) {
    let definition = json!({
        "title": "Slow then echo",
        "steps": [
            {"index": "1", "title": "Wait", "tool": "d__sleep",
             "args": {"ms": sleep_ms, "text": "waited"}, "result_variable": "first"},
            {"index": "2", "title": "Echo", "tool": "d__echo",
             "args": {"text": "${first} twice"}, "depends_on": ["1"], "result_variable": "second"}
        ]
    });
    let id = create(setup, &definition).await.expect("created");
    (id, recorded(setup, id).1)
}

/// Waits on `attached` until its run ends.
pub(crate) async fn until_ended(attached: &mut Attached) -> Finished {
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
    // The first call's limit has come: it hands back while the run goes on
    // (its first step takes 400 ms).
    let limit = Some(Instant::now());
    let waited = setup.runs.wait(&mut first, None, id, limit).await;
    let still = matches!(waited, Waited::StillRunning { total: 2, .. });
    assert!(still, "{waited:?}");
    let one = until_ended(&mut first).await.expect("ran");
    let two = until_ended(&mut second).await.expect("ran");
    assert_eq!(one.outcome.run, two.outcome.run, "one run for both calls");
    assert!(one.outcome.success, "{:?}", one.outcome);
    let expected = json!("waited twice");
    assert_eq!(one.outcome.variables.get("second"), Some(&expected));
    assert!(one.dag.as_deref().is_some_and(|d| d.contains("Echo")));

    // The run ended after its call handed back: the next call gets it, once.
    let collected = match setup.runs.find(&RunRequest::new(id), false) {
        Ok(Found::Ended(done)) => done.expect("ran"),
        other => panic!("the kept result: {other:?}"),
    };
    assert_eq!(collected.outcome.run, one.outcome.run);
    let again = setup.runs.find(&RunRequest::new(id), false);
    assert!(matches!(again, Ok(Found::Nothing)), "{again:?}");
    assert!(!setup.runs.running_here(id));
    let runs = setup.store.read(|s| s.task(&id).map(|t| t.runs.len()));
    assert_eq!(runs.expect("read"), Some(1));
}

/// A call that names other variables than the run of the plan under way
/// is refused rather than joined, and does not take that run's result
/// once its call has handed back; a call naming nothing, or the same,
/// is after that run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_asking_for_another_run_neither_joins_nor_collects_the_one_there_is() {
    let dir = tempfile::tempdir().expect("temp dir");
    let setup = setup(dir.path());
    let (id, plan) = two_step_plan(&setup, 400).await;
    let asking = |who: Option<&str>| {
        let mut request = RunRequest::new(id);
        request.variables = who.map(|who| {
            let mut map = Map::new();
            map.insert("who".into(), json!(who));
            map
        });
        request
    };
    let (mut first, _) = setup
        .runs
        .start(
            &setup.store,
            &setup.source,
            &plan,
            asking(Some("ada")),
            false,
        )
        .expect("started");
    let other = setup.runs.find(&asking(Some("bob")), false);
    let refused = other.expect_err("other variables while a run is under way");
    assert_eq!(refused.code, planb_app::ErrorCode::RunAlreadyActive);
    assert!(
        !refused.message.contains("plan_execute"),
        "app's words name no tool: {refused:?}"
    );
    let started = (setup.runs).start(
        &setup.store,
        &setup.source,
        &plan,
        asking(Some("bob")),
        false,
    );
    assert!(started.is_err(), "started beside the run under way");
    let mut empty = asking(None);
    empty.variables = Some(Map::new());
    for same in [asking(Some("ada")), asking(None), empty] {
        let found = setup.runs.find(&same, false);
        assert!(matches!(found, Ok(Found::Running(..))), "{found:?}");
    }
    // Its call hands back, then the run ends: the result is kept.
    let waited = setup
        .runs
        .wait(&mut first, None, id, Some(Instant::now()))
        .await;
    assert!(matches!(waited, Waited::StillRunning { .. }), "{waited:?}");
    until_ended(&mut first).await.expect("ran");
    // Not for a call that names other variables; that call may still be
    // refused (by its check or its review), so the result stays for a
    // call that is after it.
    let found = setup.runs.find(&asking(Some("bob")), false);
    assert!(matches!(found, Ok(Found::Nothing)), "{found:?}");
    let found = setup.runs.find(&asking(None), false);
    assert!(matches!(found, Ok(Found::Ended(_))), "{found:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_result_gives_way_only_to_a_run_that_starts() {
    let dir = tempfile::tempdir().expect("temp dir");
    let setup = setup(dir.path());
    let (id, plan) = two_step_plan(&setup, 100).await;
    let asking = |who: &str| {
        let mut request = RunRequest::new(id);
        let mut map = Map::new();
        map.insert("who".into(), json!(who));
        request.variables = Some(map);
        request
    };
    let start = |request: RunRequest| {
        (setup.runs)
            .start(&setup.store, &setup.source, &plan, request, false)
            .expect("started")
            .0
    };
    // A run whose call handed back ends: its result is kept.
    let mut first = start(asking("ada"));
    let waited = setup
        .runs
        .wait(&mut first, None, id, Some(Instant::now()))
        .await;
    assert!(matches!(waited, Waited::StillRunning { .. }), "{waited:?}");
    until_ended(&mut first).await.expect("ran");
    // Calls naming other variables find nothing, and leave it.
    for _ in 0..3 {
        let found = setup.runs.find(&asking("bob"), false);
        assert!(matches!(found, Ok(Found::Nothing)), "{found:?}");
    }
    // One that starts a run takes its place.
    let mut second = start(asking("bob"));
    until_ended(&mut second).await.expect("ran");
    let found = setup.runs.find(&RunRequest::new(id), false);
    assert!(matches!(found, Ok(Found::Nothing)), "{found:?}");
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
            Heard::Step(_, event) => panic!("no re-planning was asked for: {event:?}"),
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
    let kept = setup.runs.find(&RunRequest::new(id), false);
    assert!(matches!(kept, Ok(Found::Nothing)), "{kept:?}");
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
        .expect_err("nothing to resume")
        .to_string();
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
        step("1", "alpha__noise", json!({"bytes": 300000}), &[], None),
        step("2", "alpha__crash", json!({}), &["1"], None),
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
        step("1", "alpha__echo", json!({"text": "before"}), &[], None),
        step("2", "alpha__crash", json!({}), &["1"], None),
    ]});
    let crashed = create_and_run(&setup, definition, RunOptions::default()).await;
    let crashed = crashed.expect("ran");
    assert!(!crashed.outcome.success, "{:?}", crashed.outcome);
    let error = crashed.outcome.error.as_deref().unwrap_or_default();
    assert!(error.contains("crashing on purpose"), "{error}");
    for n in 0..2 {
        let definition = json!({"title": format!("After {n}"), "steps": [
            step("1", "alpha__echo", json!({"text": format!("after {n}")}), &[], None),
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
        step("1", "alpha__echo", json!({"text": "hi"}), &[], None),
    ]});
    let ran = create_and_run(&setup, definition, RunOptions::default()).await;
    assert!(ran.expect("ran").outcome.success);
    // A bare name needs every server: the ones that did not start are named.
    let definition =
        json!({"title": "Bare", "steps": [step("1", "nothing_has_this", json!({}), &[], None)]});
    let bare = create_and_run(&setup, definition, RunOptions::default()).await;
    let bare = bare.expect_err("no server has it");
    assert!(bare.contains("\"broken\" did not start"), "{bare}");
    assert!(bare.contains("\"remote\""), "{bare}");
    // A bare name the started servers have is fine.
    let definition =
        json!({"title": "Bare ok", "steps": [step("1", "echo", json!({"text": "x"}), &[], None)]});
    let found = create_and_run(&setup, definition, RunOptions::default()).await;
    assert!(found.expect("ran").outcome.success);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_diamond_passes_variables_and_a_dry_run_calls_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let setup = alpha_and_beta(dir.path());
    let definition = json!({"title": "Diamond", "variables": {"who": "Ada"}, "steps": [
        step("1", "alpha__echo", json!({"text": "hello ${who}"}), &[], Some("greeting")),
        step("2", "add", json!({"a": 2, "b": 3}), &["1"], Some("sum")),
        step("3", "beta__echo", json!({"text": "${greeting}!"}), &["1"], Some("loud")),
        step("4", "alpha__echo", json!({"text": "${loud} ${sum.sum}"}), &["2", "3"], None),
    ]});
    let id = create(&setup, &definition).await.expect("created");
    // Named by a prefix of its id, as a person names it.
    let prefix = &id.to_string()[..8];
    let task = setup
        .app
        .plans()
        .find(prefix)
        .await
        .expect("found by its prefix");
    let plan = plans::load(&task).expect("the plan");
    let shown = planb_app::plans::rendered(&task, &plan);
    assert!(shown.contains("  ○ 2. Step 2"), "{shown}");
    assert!(shown.contains("← after: 1 ∥"), "{shown}");

    let dry = plans::dry_run(&plan, task.id, &Map::new());
    let not_executed = json!("[dry-run: not executed]");
    assert!(
        dry.steps
            .iter()
            .all(|s| s.result.as_ref() == Some(&not_executed)),
        "{dry:?}"
    );
    let traced = json!("<alpha__echo result>");
    assert_eq!(dry.variables.get("greeting"), Some(&traced), "{dry:?}");
    assert!(calls(dir.path()).is_empty(), "a dry run called a tool");

    let mut first = RunRequest::new(id);
    first.variables = variables(json!({"who": "Grace"}));
    let ran = run(&setup, first).await.expect("ran");
    assert!(ran.outcome.success, "{:?}", ran.outcome);
    assert_eq!(completed(&ran), 4, "{:?}", ran.outcome);
    let made = calls(dir.path());
    assert_eq!(made.len(), 4);
    assert_eq!(
        made[0]["args"]["text"], "hello Grace",
        "call-time variables win"
    );
    // 3 reads step 1's result; 4 reads those of 2 and 3.
    let last = made.last().expect("call");
    assert_eq!(last["server"], "alpha");
    assert_eq!(last["args"]["text"], "hello Grace! 5.0");
    // A resume keeps the variables of the run it resumes (more may be
    // added): every recorded call matches, so nothing is called again.
    let mut resume = RunRequest::new(id);
    resume.resume = true;
    resume.variables = variables(json!({"extra": 1}));
    let resumed = run(&setup, resume).await.expect("resumed");
    assert!(resumed.outcome.success, "{:?}", resumed.outcome);
    assert_eq!(
        calls(dir.path()).len(),
        4,
        "a resume called again: {:?}",
        resumed.outcome
    );
    let (task, plan) = recorded(&setup, id);
    let shown = planb_app::plans::rendered(&task, &plan);
    assert!(shown.contains("  ● 4. Step 4"), "{shown}");
    let last_run = task.runs.last().map(|r| r.state.as_str());
    assert_eq!(last_run, Some("completed"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creation_refuses_unknown_tools_and_cycles_and_records_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let setup = alpha_and_beta(dir.path());
    let unknown = json!({"title": "Bad", "steps": [step("1", "nope", json!({}), &[], None)]});
    let refused = create(&setup, &unknown).await.expect_err("no such tool");
    assert_eq!(refused.code, ErrorCode::InvalidArgument, "{refused}");
    assert!(
        refused
            .message
            .contains("steps[0].tool: Unknown tool: nope. Available: add, alpha__add"),
        "{refused}"
    );
    let cycle = json!({"title": "Loop", "steps": [
        step("1", "echo", json!({}), &["2"], None),
        step("2", "alpha__echo", json!({}), &["1"], None)]});
    let refused = create(&setup, &cycle).await.expect_err("a cycle");
    assert_eq!(refused.code, ErrorCode::InvalidArgument, "{refused}");
    assert!(
        refused.message.contains("dependency cycle: 1 → 2 → 1"),
        "{refused}"
    );
    // Only planb names what a plan revises.
    let revising = json!({"title": "Mine", "steps": [step("1", "alpha__echo", json!({}), &[], None)],
        "revises": {"plan": "p", "run": "r", "number": 1, "step": "1", "error": "x"}});
    let refused = create(&setup, &revising).await.expect_err("revises");
    assert!(
        refused.message.starts_with("revises: set only by planb"),
        "{refused}"
    );
    let listed = setup.app.plans().list().await.expect("listed");
    assert!(listed.is_empty(), "{listed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_batch_stops_the_run_and_a_guard_blocks_without_calling() {
    let dir = tempfile::tempdir().expect("temp dir");
    let setup = alpha_and_beta(dir.path());
    let fails = json!({"title": "Fails", "steps": [
        step("1", "alpha__echo", json!({"text": "ok"}), &[], None),
        step("2", "alpha__fail", json!({"message": "boom"}), &[], None),
        step("3", "beta__echo", json!({"text": "never"}), &["1", "2"], None),
    ]});
    let failed = create_and_run(&setup, fails, RunOptions::default()).await;
    let failed = failed.expect("ran");
    assert!(!failed.outcome.success, "{:?}", failed.outcome);
    let error = failed.outcome.error.as_deref().unwrap_or_default();
    assert_eq!(error, "Batch 1 had failures: step 2: boom");
    assert!(
        !calls(dir.path())
            .iter()
            .any(|c| c["args"]["text"] == "never")
    );

    let chain = json!({"title": "Budget", "steps": [
        step("1", "beta__echo", json!({"text": "first"}), &[], None),
        step("2", "beta__echo", json!({"text": "second"}), &["1"], None),
    ]});
    let chain = create(&setup, &chain).await.expect("created");
    let before = calls(dir.path()).len();
    let mut budget = RunOptions::default();
    budget.guards.max_calls = Some(1);
    let blocked = run(&setup, request(chain, budget)).await.expect("ran");
    assert!(!blocked.outcome.success, "{:?}", blocked.outcome);
    let error = blocked.outcome.error.as_deref().unwrap_or_default();
    assert_eq!(
        error,
        "Step 2 failed: Guard blocked: the run's budget of 1 tool calls is spent"
    );
    assert_eq!(
        calls(dir.path()).len(),
        before + 1,
        "the blocked tool was called"
    );
    // Limits that could silently never apply are refused before any call.
    let mut capped = RunOptions::default();
    capped.guards.per_tool.insert("echo".into(), 1);
    let refused = run(&setup, request(chain, capped)).await;
    let refused = refused.expect_err("a cap of no step's tool").to_string();
    assert!(
        refused.contains("tool cap \"echo\": no step calls it (the plan's tools: beta__echo)"),
        "{refused}"
    );
    let mut unnamed = RunRequest::new(chain);
    unnamed.variables = variables(json!({"": "x"}));
    let refused = run(&setup, unnamed)
        .await
        .expect_err("no variable name")
        .to_string();
    assert!(
        refused.contains("variables[\"\"]: \"\" is not a variable name"),
        "{refused}"
    );
    assert_eq!(
        calls(dir.path()).len(),
        before + 1,
        "a refused run called a tool"
    );
    // A cap holds for its tool however the steps name it.
    let twice = json!({"title": "Twice", "steps": [
        step("1", "add", json!({"a": 1, "b": 2}), &[], None),
        step("2", "alpha__add", json!({"a": 3, "b": 4}), &["1"], None),
    ]});
    let twice = create(&setup, &twice).await.expect("created");
    let mut capped = RunOptions::default();
    capped.guards.per_tool.insert("add".into(), 1);
    let blocked = run(&setup, request(twice, capped)).await.expect("ran");
    let error = blocked.outcome.error.as_deref().unwrap_or_default();
    assert_eq!(
        error,
        "Step 2 failed: Guard blocked: alpha__add may be called at most 1 times in a run"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wide_plan_runs_every_step() {
    let dir = tempfile::tempdir().expect("temp dir");
    let setup = alpha_and_beta(dir.path());
    let wide = |tool: &str| -> Vec<Value> {
        (1..=50)
            .map(|i| {
                let text = json!({"text": format!("n{i}")});
                step(&i.to_string(), tool, text, &[], None)
            })
            .collect()
    };
    // `echo` is on both servers: a bare name that is not unique is refused.
    let bare = json!({"title": "Wide", "steps": wide("echo")});
    let refused = create(&setup, &bare).await.expect_err("not unique");
    assert_eq!(refused.code, ErrorCode::InvalidArgument, "{refused}");
    assert!(
        refused
            .message
            .contains("Unknown tool: echo. Available: alpha__echo, beta__echo"),
        "{refused}"
    );
    // So it is beside a step naming its server, which has the tool too.
    let mixed = json!({"title": "Mixed", "steps": [
        step("1", "beta__sleep", json!({"ms": 1}), &[], None),
        step("2", "echo", json!({"text": "x"}), &["1"], None),
    ]});
    let refused = create(&setup, &mixed).await.expect_err("not unique");
    assert!(
        refused
            .message
            .contains("Unknown tool: echo. Available: alpha__echo, beta__echo"),
        "{refused}"
    );
    let named = json!({"title": "Wide", "steps": wide("beta__echo")});
    let options = RunOptions {
        concurrency: 4,
        ..RunOptions::default()
    };
    let ran = create_and_run(&setup, named, options).await.expect("ran");
    assert!(ran.outcome.success, "{:?}", ran.outcome.error);
    let mut texts: Vec<String> = calls(dir.path())
        .iter()
        .map(|c| c["args"]["text"].as_str().unwrap_or("").to_owned())
        .collect();
    texts.sort();
    let mut expected: Vec<String> = (1..=50).map(|i| format!("n{i}")).collect();
    expected.sort();
    assert_eq!(texts, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_crashes_mid_call_fails_its_step_with_its_last_words() {
    let dir = tempfile::tempdir().expect("temp dir");
    let setup = alpha_and_beta(dir.path());
    let definition = json!({"title": "Crash", "steps": [
        step("1", "beta__crash", json!({}), &[], None),
    ]});
    let ran = create_and_run(&setup, definition, RunOptions::default()).await;
    let ran = ran.expect("ran");
    assert!(!ran.outcome.success, "{:?}", ran.outcome);
    let error = ran.outcome.error.as_deref().unwrap_or_default();
    assert!(
        error.starts_with("Step 1 failed: downstream server \"beta\" closed"),
        "{error}"
    );
    assert!(error.contains("crashing on purpose"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_plan_is_gone_from_the_list_and_cannot_be_found_to_run() {
    let dir = tempfile::tempdir().expect("temp dir");
    let setup = alpha_and_beta(dir.path());
    let definition = json!({"title": "Short-lived", "steps": [
        step("1", "beta__echo", json!({"text": "x"}), &[], None)]});
    let id = create(&setup, &definition).await.expect("created");
    let deleted = setup.app.plans().delete(&id.to_string()[..8]).await;
    assert_eq!(deleted.expect("deleted"), id);
    let listed = setup.app.plans().list().await.expect("listed");
    assert!(listed.is_empty(), "{listed:?}");
    let gone = setup.app.plans().find(&id.to_string()).await;
    let gone = gone.expect_err("deleted");
    assert_eq!(gone.code, ErrorCode::TaskNotFound, "{gone}");
    assert_eq!(gone.message, format!("Plan not found: {id}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_over_the_limit_fails_its_step_at_once_and_one_under_it_stays_whole() {
    let dir = tempfile::tempdir().expect("temp dir");
    let setup = alpha_and_beta(dir.path());
    // 20 MB is over the stdio transport's own 16 MiB line cap; 70 MB is over
    // planb's 64 MiB limit for one answer.
    let definition = json!({"title": "Large answers", "steps": [
        step("1", "alpha__big", json!({"bytes": 20_000_000}), &[], Some("blob")),
        step("2", "alpha__echo", json!({"text": "${blob}"}), &["1"], None),
        step("3", "alpha__big", json!({"bytes": 70_000_000}), &["2"], None),
    ]});
    let options = RunOptions {
        step_timeout: std::time::Duration::from_secs(600),
        ..RunOptions::default()
    };
    let ran = create_and_run(&setup, definition, options).await;
    let ran = ran.expect("ran");
    assert!(!ran.outcome.success, "{:?}", ran.outcome.error);
    let error = ran.outcome.error.as_deref().unwrap_or_default();
    assert!(
        error.contains("over the limit of 67108864 bytes") && error.contains("70000"),
        "the step names the size and the limit: {error}"
    );
    assert!(!error.contains("did not answer"), "{error}");
    let made = calls(dir.path());
    let echo = made
        .iter()
        .find(|c| c["tool"] == "echo")
        .expect("echo call");
    let text = echo["args"]["text"].as_str().expect("text");
    assert_eq!(
        text.len(),
        20_000_000,
        "the 20 MB result did not stay whole"
    );
}

/// A plan whose steps echo `texts` one after another (the example server
/// reads a text that is JSON as JSON: "0" binds the number 0).
fn echo_chain(texts: &[&str]) -> Value {
    let steps: Vec<Value> = texts
        .iter()
        .enumerate()
        .map(|(n, text)| {
            let index = (n + 1).to_string();
            let before = n.to_string();
            let after: Vec<&str> = if n == 0 { vec![] } else { vec![&before] };
            step(&index, "alpha__echo", json!({"text": text}), &after, None)
        })
        .collect();
    json!({"title": "Echoes", "steps": steps})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runaway_detection_stops_a_run_whose_numbers_degenerate_and_can_be_turned_off() {
    let dir = tempfile::tempdir().expect("temp dir");
    let setup = alpha_and_beta(dir.path());
    let cases = [
        (
            vec!["0", "1", "never"],
            "3",
            "degenerate",
            "a second result of 0 or 1 (the last was 1): the results have degenerated",
        ),
        (
            vec!["7", "7", "7", "never"],
            "4",
            "repeating",
            "the last 3 numeric results were all 7",
        ),
        (
            vec!["1e-13", "never"],
            "2",
            "saturation",
            "the last result, 1e-13, is effectively zero",
        ),
    ];
    for (texts, blocked, pattern, saw) in cases {
        let id = create(&setup, &echo_chain(&texts)).await.expect("created");
        let before = calls(dir.path()).len();
        let ended = run(&setup, request(id, RunOptions::default())).await;
        let outcome = ended.expect("ran").outcome.clone();
        assert!(!outcome.success, "{outcome:?}");
        let error = outcome.error.clone().unwrap_or_default();
        assert_eq!(
            error,
            format!(
                "Step {blocked} failed: Guard blocked: runaway detection ({pattern}) before calling alpha__echo: {saw}; turn it off with guards: false (--no-guards on the command line)"
            ),
            "{texts:?}"
        );
        let json = outcome.to_json();
        assert_eq!(json["error_code"], "GUARD_BLOCKED", "{json}");
        let last = json["steps"].as_array().and_then(|s| s.last()).cloned();
        assert_eq!(last.unwrap_or_default()["code"], "GUARD_BLOCKED", "{json}");
        let made = calls(dir.path()).len() - before;
        assert_eq!(made, texts.len() - 1, "the blocked step's tool was called");

        // Off, the same plan runs every step.
        let mut off = RunOptions::default();
        off.guards.runaway = false;
        let ended = run(&setup, request(id, off)).await.expect("ran");
        assert!(ended.outcome.success, "{:?}", ended.outcome);
        assert_eq!(completed(&ended), texts.len());
    }
    // Numbers that move on are not a runaway.
    let moving = echo_chain(&["0", "2", "3", "3", "5", "-1"]);
    let id = create(&setup, &moving).await.expect("created");
    let ended = run(&setup, request(id, RunOptions::default())).await;
    assert!(ended.expect("ran").outcome.success);
}
