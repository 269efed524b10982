//! The task operations at the application layer, in process: a real store
//! in a temporary data root, runs on this process's runtime (the
//! in-process runner) against a real OpenAI-compatible HTTP model server,
//! and every answer read back as plain data. What needs the protocol or the
//! detached worker stays in planb-mcp's tests.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use planb_app::ErrorCode;
use planb_app::launch::{self, Launch, Runner, Start};
use planb_app::plans::ServersSource;
use planb_app::tasks::outputs::{Output, ReadError};
use planb_app::tasks::{self, CreateRequest, TaskFile, Tasks};
use planb_core::dag::StepId;
use planb_core::{EventBody, Task, TaskId};
use planb_engine::backend::Backend;
use planb_engine::pipelines::{DEFAULT_TARGET, PROJECT_PLAN};
use planb_projections::{DataRoot, Store, SystemEnvironment};
use planb_tests::model::{ModelServer, Script};
use serde_json::json;

/// Longest a run in these tests may take.
const RUN_WAIT: Duration = Duration::from_secs(120);

fn open(root: &Path) -> Tasks {
    let (store, _) = Store::open(DataRoot::new(root), Arc::new(SystemEnvironment)).expect("open");
    Tasks::new(Arc::new(store))
}

fn launch_of(tasks: &Tasks) -> Launch {
    Launch {
        store: Arc::clone(tasks.store()),
        servers: ServersSource {
            file: tasks.store().root().root().join("no-servers.json"),
            project: None,
        },
        downstream: None,
    }
}

/// A run in this process on the model `spec` names (as `PLANB_MODEL`).
fn here_on(spec: String) -> Runner {
    let var = move |name: &str| (name == "PLANB_MODEL").then(|| spec.clone());
    Runner::Here(Backend::configured(None, &var).expect("the model's spec"))
}

fn here(model: &ModelServer) -> Runner {
    here_on(model.spec())
}

const PROMPT: &str = "Open a small bakery in Lisbon within six months on a budget of 80k EUR.";

/// A task of `speed` planning `prompt`, toward the default target.
fn request(prompt: &str, speed: &str) -> CreateRequest {
    CreateRequest {
        prompt: prompt.into(),
        speed: speed.into(),
        target: DEFAULT_TARGET.into(),
        pipeline: PROJECT_PLAN.into(),
        profile: None,
        request_id: None,
    }
}

/// Creates the task `request` describes and starts its first run with
/// `launch`, on `runner`.
async fn start_new(
    tasks: &Tasks,
    launch: &Launch,
    runner: Runner,
    request: CreateRequest,
) -> TaskId {
    let root = tasks.store().root().clone();
    let pipeline =
        tasks::checked_pipeline(&root, &request.pipeline, &request.target).expect("the pipeline");
    let id = tasks.create(request, &pipeline).await.expect("created");
    let started = launch::start(launch, id, 0, runner, Start::Resume).await;
    assert_eq!(started.expect("started").runs.len(), 1);
    id
}

/// Creates a `speed` task toward the default target and starts its first
/// run in this process.
async fn create_and_start(tasks: &Tasks, model: &ModelServer, speed: &str) -> TaskId {
    let launch = launch_of(tasks);
    start_new(tasks, &launch, here(model), request(PROMPT, speed)).await
}

/// The task once `done` holds of it.
async fn until(tasks: &Tasks, id: TaskId, what: &str, done: impl Fn(&Task) -> bool) -> Task {
    let started = Instant::now();
    loop {
        let task = tasks.find(id).await.expect("the task");
        if done(&task) {
            return task;
        }
        assert!(started.elapsed() < RUN_WAIT, "task {id}: not {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn until_ended(tasks: &Tasks, id: TaskId) -> Task {
    until(tasks, id, "ended", |t| t.active_run().is_none()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_runs_here_to_its_report_zip_and_run_log_and_is_listed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let model = ModelServer::start(Script::INSTANT).await;
    let tasks = open(dir.path());
    let id = create_and_start(&tasks, &model, "fast").await;
    let task = until_ended(&tasks, id).await;
    assert_eq!(tasks::state_name(&task), "completed");
    let root = tasks.store().root().clone();
    let status = tasks::status(&root, &task);
    assert!(status.progress.total > 1, "{status:?}");
    assert_eq!(status.progress.done, status.progress.total);
    assert!((status.percentage - 100.0).abs() < f64::EPSILON);
    assert!(model.requests() > 0);

    let report = tasks.file(task.clone(), TaskFile::Report, None).await;
    let report = report.expect("the report");
    let bytes = std::fs::read(&report.path).expect("the report's file");
    assert_eq!(report.size, bytes.len());
    assert!(
        report
            .path
            .starts_with(root.task_dir(&id).canonicalize().expect("dir"))
    );
    assert_eq!(report.content_type, "text/html");

    let away = tempfile::tempdir().expect("another dir");
    let save = Some((away.path().to_path_buf(), false));
    let zip = tasks.file(task.clone(), TaskFile::Zip, save.clone()).await;
    let zip = zip.expect("the zip saved");
    assert!(
        zip.path
            .starts_with(away.path().canonicalize().expect("dir"))
    );
    let again = tasks.file(task.clone(), TaskFile::Zip, save).await;
    assert_eq!(again.expect_err("no overwrite").code, ErrorCode::Conflict);
    let inside = Some((root.root().to_path_buf(), true));
    let inside = tasks.file(task.clone(), TaskFile::Zip, inside).await;
    assert_eq!(
        inside.expect_err("inside").code,
        ErrorCode::PermissionDenied
    );

    let tail = tasks::log_tail(&task, None, 0, 500);
    let last = tail.lines.last().map(|l| l.text.as_str());
    assert_eq!(last, Some("run completed"), "{:?}", tail.lines);
    // A line as each step starts and as it ends, with its duration.
    let texts: Vec<&str> = tail.lines.iter().map(|l| l.text.as_str()).collect();
    let starts = texts
        .iter()
        .filter(|t| t.ends_with(" started") && t.starts_with("step "))
        .count();
    let ends = texts
        .iter()
        .filter(|t| t.starts_with("step ") && t.contains(" done in ") && t.ends_with(" ms"))
        .count();
    assert!(
        starts == status.progress.total && ends == starts,
        "{starts} starts, {ends} ends of {}: {texts:?}",
        status.progress.total
    );
    let newer = tasks::log_tail(&task, None, tail.next_cursor, 500);
    assert!(newer.lines.is_empty());

    let listed = tasks.list(10, false).await.expect("listed");
    assert_eq!(listed.iter().map(|t| t.id).collect::<Vec<_>>(), vec![id]);
    assert_eq!(listed[0].state, "completed");
    assert_eq!(tasks.latest().await.expect("latest").id, id);
    let run = tasks::run_of(
        &task,
        Some(planb_core::RunId::parse("01890000-0000-7000-8000-000000000007").expect("an id")),
    );
    assert_eq!(run.expect_err("no such run").code, ErrorCode::RunNotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_s_outputs_are_listed_a_page_at_a_time_and_read_back_as_recorded() {
    let dir = tempfile::tempdir().expect("temp dir");
    let model = ModelServer::start(Script::INSTANT).await;
    let tasks = open(dir.path());
    let id = create_and_start(&tasks, &model, "fast").await;
    let task = until_ended(&tasks, id).await;
    let (all, more) = tasks.outputs(0, 1_000).await.expect("listed");
    assert!(!more);
    let kinds: Vec<&Output> = all.iter().map(|o| &o.output).take(2).collect();
    assert_eq!(kinds, [&Output::Report, &Output::Zip]);
    let artifacts = all.len() - 2;
    assert_eq!(artifacts, task.successes.len(), "one per step's success");
    // Pages share one order.
    let (first, more) = tasks.outputs(0, 3).await.expect("a page");
    assert!(more);
    let (rest, more) = tasks.outputs(3, 1_000).await.expect("the rest");
    assert!(!more);
    assert_eq!([first, rest].concat(), all);

    for listed in &all {
        let read = tasks.read_output(id, listed.output.clone()).await;
        let read = read.expect("read back");
        if let Some(size) = listed.size {
            assert_eq!(read.bytes.len() as u64, size, "{listed:?}");
            assert_eq!(Some(read.sha256), listed.sha256, "{listed:?}");
        }
        assert_eq!(read.at, listed.at, "{listed:?}");
    }
    let report = tasks.read_output(id, Output::Report).await.expect("report");
    let file = tasks.file(task.clone(), TaskFile::Report, None).await;
    let on_disk = std::fs::read(file.expect("the report").path).expect("its file");
    assert_eq!((report.content_type, report.bytes), ("text/html", on_disk));
    let zip = tasks.read_output(id, Output::Zip).await.expect("zip");
    assert!(zip.bytes.starts_with(b"PK"), "a zip archive");

    let unknown = tasks
        .read_output(id, Output::Artifact("99-nothing.md".into()))
        .await;
    assert!(
        matches!(unknown, Err(ReadError::UnknownName(_))),
        "{unknown:?}"
    );
    let stranger = TaskId::parse("01890000-0000-7000-8000-000000000009").expect("an id");
    let missing = tasks.read_output(stranger, Output::Report).await;
    assert!(matches!(missing, Err(ReadError::NoTask(_))), "{missing:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_task_edited_then_resumed_runs_only_what_is_missing_or_downstream() {
    let dir = tempfile::tempdir().expect("temp dir");
    let model = ModelServer::start(Script {
        delay: Duration::from_millis(150),
        fail_first: 0,
    })
    .await;
    let tasks = open(dir.path());
    let id = create_and_start(&tasks, &model, "fast").await;
    until(&tasks, id, "two steps in", |t| t.successes.len() >= 2).await;
    let stopped = tasks.stop(id).await.expect("stopped");
    let stopped = match stopped.active_run() {
        Some(_) => until_ended(&tasks, id).await,
        None => stopped,
    };
    assert_eq!(tasks::state_name(&stopped), "stopped");
    // Part way, the percentage is given to a tenth.
    let percentage = tasks::status(tasks.store().root(), &stopped).percentage;
    assert!(percentage > 0.0 && percentage < 100.0, "{percentage}");
    assert_eq!(
        percentage,
        (percentage * 10.0).round() / 10.0,
        "{percentage}"
    );
    let first = stopped.runs[0].clone();

    // The first step that succeeded and has steps after it is edited.
    let root = tasks.store().root().clone();
    let pipeline = tasks::pipeline_of(&root, PROJECT_PLAN).expect("pipeline");
    let closure: BTreeSet<String> = pipeline
        .closure(&StepId::parse(DEFAULT_TARGET).expect("target"))
        .expect("closure")
        .iter()
        .map(|s| s.as_str().to_owned())
        .collect();
    let edited = first
        .succeeded
        .iter()
        .find(|s| {
            let step = StepId::parse(s).expect("step");
            pipeline.downstream(&step).is_some_and(|d| d.len() > 1)
        })
        .expect("an edited step with steps after it")
        .clone();
    let written = tasks
        .write_artifact(id, &edited, "## Edited by hand\n".into())
        .await;
    let written = written.expect("written");
    assert!(written.changed);
    assert!(!written.invalidated.is_empty());
    let same = tasks
        .write_artifact(id, &edited, "## Edited by hand\n".into())
        .await;
    assert!(!same.expect("written again").changed);
    let nowhere = tasks.write_artifact(id, "../etc/passwd", "x".into()).await;
    assert_eq!(nowhere.expect_err("no").code, ErrorCode::InvalidArtifactUri);

    let task = tasks.find(id).await.expect("task");
    tasks::may_run_again(&task).expect("it may run again");
    let resumed = launch::start(&launch_of(&tasks), id, 1, here(&model), Start::Resume).await;
    assert_eq!(resumed.expect("resumed").runs.len(), 2);
    let done = until_ended(&tasks, id).await;
    assert_eq!(tasks::state_name(&done), "completed");

    let invalidated: BTreeSet<String> = written.invalidated.into_iter().collect();
    let kept: BTreeSet<String> = first
        .succeeded
        .iter()
        .filter(|s| !invalidated.contains(*s))
        .cloned()
        .collect();
    let second: BTreeSet<String> = done.runs[1].attempts.keys().cloned().collect();
    let expected: BTreeSet<String> = closure.difference(&kept).cloned().collect();
    assert_eq!(
        second, expected,
        "kept {kept:?}, invalidated {invalidated:?}"
    );
    assert!(!second.contains(&edited));
}

/// A completed task whose artifact is edited is not a dead end: resuming it
/// computes again exactly what depended on the edit, and asks the model
/// only for those steps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completed_task_edited_then_resumed_recomputes_exactly_what_the_edit_invalidated() {
    let dir = tempfile::tempdir().expect("temp dir");
    let model = ModelServer::start(Script {
        delay: Duration::ZERO,
        fail_first: 0,
    })
    .await;
    let tasks = open(dir.path());
    let id = create_and_start(&tasks, &model, "fast").await;
    let done = until_ended(&tasks, id).await;
    assert_eq!(tasks::state_name(&done), "completed");
    let root = tasks.store().root().clone();
    let pipeline = tasks::pipeline_of(&root, PROJECT_PLAN).expect("pipeline");
    let edited = done.runs[0]
        .succeeded
        .iter()
        .find(|s| {
            let step = StepId::parse(s).expect("step");
            pipeline.downstream(&step).is_some_and(|d| d.len() > 1)
        })
        .expect("a step with steps after it")
        .clone();
    let written = tasks
        .write_artifact(id, &edited, "## Edited by hand\n".into())
        .await
        .expect("written");
    assert!(!written.invalidated.is_empty());
    let asked_before = model.requests();

    let task = tasks.find(id).await.expect("task");
    tasks::may_run_again(&task).expect("an edited completed task may run again");
    let resumed = launch::start(&launch_of(&tasks), id, 1, here(&model), Start::Resume).await;
    assert_eq!(resumed.expect("resumed").runs.len(), 2);
    let again = until_ended(&tasks, id).await;
    assert_eq!(tasks::state_name(&again), "completed");
    // Only invalidated steps of the run's target ran, the steps reading the
    // edit first of all; a step whose inputs came out unchanged is reused.
    let invalidated: BTreeSet<String> = written.invalidated.into_iter().collect();
    let second: BTreeSet<String> = again.runs[1].attempts.keys().cloned().collect();
    assert!(
        second.is_subset(&invalidated),
        "{second:?} beyond {invalidated:?}"
    );
    assert!(!second.contains(&edited));
    let closure: BTreeSet<String> = pipeline
        .closure(&StepId::parse(DEFAULT_TARGET).expect("target"))
        .expect("closure")
        .iter()
        .map(|s| s.as_str().to_owned())
        .collect();
    let readers = pipeline.steps().iter().filter(|d| {
        closure.contains(d.id.as_str()) && d.needs.iter().any(|n| n.as_str() == edited)
    });
    for reader in readers {
        assert!(
            second.contains(reader.id.as_str()),
            "{} read the edit",
            reader.id.as_str()
        );
    }
    let model_steps = second
        .iter()
        .filter(|s| {
            pipeline
                .step(&StepId::parse(s).expect("step"))
                .is_some_and(|d| matches!(d.action, planb_core::dag::Action::Model { .. }))
        })
        .count();
    assert_eq!(model.requests() - asked_before, model_steps as u64);
    // Without an edit since, a completed task is still not run again.
    let task = tasks.find(id).await.expect("task");
    let refused = tasks::may_run_again(&task).expect_err("nothing to compute");
    assert_eq!(refused.code, ErrorCode::Conflict, "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archive_and_delete_wait_for_the_run_and_a_deleted_task_leaves_no_folder() {
    let dir = tempfile::tempdir().expect("temp dir");
    let model = ModelServer::start(Script {
        delay: Duration::from_millis(200),
        fail_first: 0,
    })
    .await;
    let tasks = open(dir.path());
    let id = create_and_start(&tasks, &model, "fast").await;
    let refused = tasks.archive(id).await.expect_err("not while it runs");
    let busy = tasks.delete(id).await.expect_err("not while it runs");
    for error in [&refused, &busy] {
        assert_ne!(error.code, ErrorCode::InternalError, "{error}");
    }
    assert!(
        tasks
            .find(id)
            .await
            .expect("still there")
            .active_run()
            .is_some()
    );

    tasks.stop(id).await.expect("stopped");
    until_ended(&tasks, id).await;
    let archived = tasks.archive(id).await.expect("archived");
    assert_eq!(archived.lifecycle().as_str(), "archived");
    assert!(tasks::may_run_again(&archived).is_err());
    assert!(tasks.list(10, false).await.expect("listed").is_empty());
    assert_eq!(tasks.list(10, true).await.expect("listed").len(), 1);

    let folder = tasks.delete(id).await.expect("deleted");
    assert!(!folder.exists(), "{}", folder.display());
    let gone = tasks.find(id).await.expect_err("gone");
    assert_eq!(gone.code, ErrorCode::TaskNotFound);
    let latest = tasks.latest().await.expect_err("none left");
    assert_eq!(latest.code, ErrorCode::TaskNotFound);
}

/// A wait on a task tells its progress only past what was told, hands back
/// at its limit while the run goes on, waits on a task whose run has not
/// started yet, and returns the task once its run has ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_tells_new_progress_hands_back_at_its_limit_and_ends_with_the_run() {
    use planb_app::tasks::TaskWaited;
    let dir = tempfile::tempdir().expect("temp dir");
    // Each model step takes longer than a wait's short limit, so the run
    // cannot end within one.
    let model = ModelServer::start(Script {
        delay: Duration::from_millis(400),
        fail_first: 0,
    })
    .await;
    let tasks = open(dir.path());
    let root = tasks.store().root().clone();
    let pipeline = tasks::checked_pipeline(&root, PROJECT_PLAN, DEFAULT_TARGET).expect("pipeline");
    let unstarted = tasks.create(request(PROMPT, "fast"), &pipeline).await;
    let unstarted = unstarted.expect("created");
    let poll = Duration::from_millis(20);
    let soon = || Instant::now() + Duration::from_millis(150);
    let waited = tasks.wait(unstarted, soon(), poll, f64::INFINITY).await;
    assert!(
        matches!(waited.expect("waited"), TaskWaited::TimedOut(t) if t.runs.is_empty()),
        "a task whose run has not started is waited on"
    );

    let id = create_and_start(&tasks, &model, "fast").await;
    let first = tasks.wait(id, soon(), poll, -1.0).await.expect("waited");
    let TaskWaited::Progressed(_, status) = first else {
        panic!("anything is news to a caller told nothing: {first:?}");
    };
    let waited = tasks.wait(id, soon(), poll, 100.0).await.expect("waited");
    assert!(
        matches!(&waited, TaskWaited::TimedOut(t) if t.active_run().is_some()),
        "nothing is past 100%: the wait hands back while the run goes on ({waited:?}, first at {}%)",
        status.percentage
    );
    let mut told = status.percentage;
    let deadline = Instant::now() + RUN_WAIT;
    let ended = loop {
        match tasks.wait(id, deadline, poll, told).await.expect("waited") {
            TaskWaited::Ended(task) => break task,
            TaskWaited::TimedOut(task) => panic!("the run did not end: {task:?}"),
            TaskWaited::Progressed(_, now) => {
                assert!(now.percentage > told, "{} after {told}", now.percentage);
                told = now.percentage;
            }
        }
    };
    assert_eq!(tasks::state_name(&ended), "completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_id_creates_one_task_and_an_unknown_target_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let tasks = open(dir.path());
    let root = tasks.store().root().clone();
    let refused = tasks::checked_pipeline(&root, PROJECT_PLAN, "nowhere");
    let refused = refused.expect_err("no such step");
    assert_eq!(refused.code, ErrorCode::InvalidTarget);
    assert!(
        refused.message.contains("build_plan"),
        "{}",
        refused.message
    );
    let missing = tasks::checked_pipeline(&root, "absent", DEFAULT_TARGET);
    assert_eq!(
        missing.expect_err("no such pipeline").code,
        ErrorCode::InvalidTarget
    );

    let pipeline = tasks::checked_pipeline(&root, PROJECT_PLAN, DEFAULT_TARGET).expect("ok");
    let request = CreateRequest {
        prompt: "Plan a garden.".into(),
        speed: "ping".into(),
        target: DEFAULT_TARGET.into(),
        pipeline: PROJECT_PLAN.into(),
        profile: None,
        request_id: Some("garden-1".into()),
    };
    let first = tasks
        .create(request.clone(), &pipeline)
        .await
        .expect("first");
    let second = tasks.create(request, &pipeline).await.expect("second");
    assert_eq!(first, second);
    let found = tasks.by_request("garden-1".into()).await.expect("read");
    assert_eq!(found.map(|t| t.id), Some(first));
    assert_eq!(tasks.list(10, true).await.expect("listed").len(), 1);
}

/// The log's lines of `task`'s runs, as one text.
fn log_text(task: &Task) -> String {
    let tail = tasks::log_tail(task, None, 0, 500);
    let lines: Vec<&str> = tail.lines.iter().map(|l| l.text.as_str()).collect();
    lines.join("\n")
}

/// The artifact `step` of `task` recorded, as text.
fn artifact(tasks: &Tasks, task: &Task, step: &str) -> String {
    let blobs = tasks.store().root().blobs();
    let bytes = blobs.get(&task.successes[step].artifact).expect("its blob");
    String::from_utf8(bytes).expect("text")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_tool_step_calls_a_downstream_server_with_the_artifact_it_needs() {
    let dir = tempfile::tempdir().expect("temp dir");
    let pipelines = dir.path().join("pipelines");
    std::fs::create_dir_all(&pipelines).expect("pipelines");
    std::fs::write(
        pipelines.join("scout.json"),
        json!({"name": "scout", "version": 1, "steps": [
            {"id": "intake", "title": "Intake", "model": {"prompt": "Restate the goal: {{prompt}}"}},
            {"id": "lookup", "title": "Look it up", "needs": ["intake"],
             "tool": {"server": "alpha", "tool": "echo", "args": {"text": "${intake}"}}},
            {"id": "report", "title": "Report", "needs": ["intake", "lookup"], "render": "report"}
        ]})
        .to_string(),
    )
    .expect("pipeline");
    // Not the data root's own servers.json: the second part runs without it.
    let servers = dir.path().join("elsewhere-servers.json");
    let calls = dir.path().join("calls");
    let server = planb_tests::process::downstream_binary(env!("CARGO"));
    std::fs::write(
        &servers,
        json!({"mcpServers": {"alpha": {"command": server, "args": ["alpha"],
            "env": {"DOWNSTREAM_CALLS": calls}}}})
        .to_string(),
    )
    .expect("servers");
    let model = ModelServer::start(Script::INSTANT).await;
    let tasks = open(dir.path());
    let source = ServersSource {
        file: servers.clone(),
        project: None,
    };
    let launch = Launch {
        downstream: Some(planb_app::plans::downstream(&source).expect("the servers")),
        servers: source,
        ..launch_of(&tasks)
    };
    let scout = |prompt: &str| CreateRequest {
        pipeline: "scout".into(),
        target: "report".into(),
        ..request(prompt, "fast")
    };
    let id = start_new(&tasks, &launch, here(&model), scout(PROMPT)).await;
    let done = until_ended(&tasks, id).await;
    assert_eq!(tasks::state_name(&done), "completed", "{}", log_text(&done));

    // The tool got the intake's artifact, and its answer is the lookup's.
    let made = planb_tests::plans::calls(&calls);
    assert_eq!(made.len(), 1, "{made:?}");
    assert_eq!(made[0]["tool"], "echo");
    assert_eq!(made[0]["args"]["text"], artifact(&tasks, &done, "intake"));
    assert_eq!(
        artifact(&tasks, &done, "lookup"),
        artifact(&tasks, &done, "intake")
    );
    assert!(artifact(&tasks, &done, "report").contains("Look it up"));

    // With no servers, the tool step fails saying so; the model step
    // before it ran.
    let another = scout("Another goal entirely, to plan from scratch.");
    let id = start_new(&tasks, &launch_of(&tasks), here(&model), another).await;
    let failed = until_ended(&tasks, id).await;
    assert_eq!(
        tasks::state_name(&failed),
        "failed",
        "{}",
        log_text(&failed)
    );
    let run = failed.runs.last().expect("its run");
    assert_eq!(run.failed_step.as_deref(), Some("lookup"));
    assert!(failed.successes.contains_key("intake"));
    let logs = log_text(&failed);
    assert!(
        logs.contains("no downstream servers are configured"),
        "{logs}"
    );
}

/// A model program (`command:sh <script>`) whose script is `body`.
fn script_model(dir: &Path, name: &str, body: &str) -> Runner {
    let script = dir.join(name);
    std::fs::write(&script, body).expect("script");
    here_on(format!("command:sh {}", script.display()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_of_the_wrong_shape_is_asked_for_again_and_then_fails_its_step() {
    let dir = tempfile::tempdir().expect("temp dir");
    let tasks = open(dir.path());
    let root = tasks.store().root().clone();
    let pipeline = tasks::pipeline_of(&root, PROJECT_PLAN).expect("pipeline");
    let closure = pipeline
        .closure(&StepId::parse(DEFAULT_TARGET).expect("target"))
        .expect("closure");
    assert!(closure.iter().any(|s| s.as_str() == "schedule"));
    let schedule =
        r#"{"tasks": [{"id": "1", "name": "Do it", "duration_days": 3, "depends_on": []}]}"#;
    // Prose where the schedule step wants JSON; JSON once told why not.
    let learns = script_model(
        dir.path(),
        "learns.sh",
        &format!(
            "#!/bin/sh\np=$(cat)\ncase \"$p\" in\n  *'previous answer was refused'*) echo '{schedule}' ;;\n  *'Answer with JSON only'*) echo 'Here is the schedule you asked for.' ;;\n  *) printf '## Part\\n\\nText.\\n' ;;\nesac\n"
        ),
    );
    let launch = launch_of(&tasks);
    let id = start_new(&tasks, &launch, learns, request(PROMPT, "fast")).await;
    let done = until_ended(&tasks, id).await;
    let logs = log_text(&done);
    assert_eq!(tasks::state_name(&done), "completed", "{logs}");
    assert!(
        logs.contains("step schedule: answer 1 refused (the answer is not JSON"),
        "{logs}"
    );
    assert_eq!(artifact(&tasks, &done, "schedule").trim(), schedule);

    // A model that never gives the shape fails the step after three
    // answers, recoverably, saying why.
    let stubborn = script_model(
        dir.path(),
        "stubborn.sh",
        "#!/bin/sh\np=$(cat)\ncase \"$p\" in\n  *'Answer with JSON only'*) echo 'A schedule in words.' ;;\n  *) printf '## Part\\n\\nText.\\n' ;;\nesac\n",
    );
    let id = start_new(&tasks, &launch, stubborn, request(PROMPT, "fast")).await;
    let failed = until_ended(&tasks, id).await;
    let logs = log_text(&failed);
    assert_eq!(tasks::state_name(&failed), "failed", "{logs}");
    let run = failed.runs.last().expect("its run");
    assert_eq!(run.failed_step.as_deref(), Some("schedule"), "{logs}");
    assert!(run.recoverable, "{logs}");
    assert!(logs.contains("refused 3 times"), "{logs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_edit_is_recorded_before_a_tool_writes_another_file_of_the_folder() {
    let dir = tempfile::tempdir().expect("temp dir");
    let model = ModelServer::start(Script::INSTANT).await;
    let tasks = open(dir.path());
    let id = create_and_start(&tasks, &model, "fast").await;
    let done = until_ended(&tasks, id).await;
    assert_eq!(tasks::state_name(&done), "completed", "{}", log_text(&done));
    let folder = tasks.store().root().task_dir(&id);
    let mut files: Vec<String> = std::fs::read_dir(&folder)
        .expect("task folder")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(|c: char| c.is_ascii_digit()))
        .collect();
    files.sort();
    let step_of = |name: &str| {
        name.split_once('-')
            .and_then(|(_, rest)| rest.split('.').next())
            .expect("step")
            .to_owned()
    };
    let (by_hand, other) = (&files[0], &files[1]);
    std::fs::write(folder.join(by_hand), "## Rewritten in an editor\n").expect("hand edit");
    let written = tasks
        .write_artifact(id, other, "## Written by the agent\n".into())
        .await;
    assert!(written.expect("written").changed);
    assert_eq!(
        std::fs::read_to_string(folder.join(by_hand)).expect("file"),
        "## Rewritten in an editor\n",
        "the hand edit was overwritten"
    );
    let edits: Vec<(String, String)> = planb_tests::logs::events(dir.path())
        .into_iter()
        .filter_map(|event| match event {
            EventBody::ArtifactEdited { step, by, .. } => Some((step, by)),
            _ => None,
        })
        .collect();
    assert_eq!(
        edits,
        vec![
            (step_of(by_hand), format!("hand edit of {by_hand}")),
            (step_of(other), "task_artifact_write".to_owned()),
        ]
    );
    // A later write of the hand-edited step itself takes the tool's text.
    let again = tasks
        .write_artifact(id, by_hand, "## Agent again\n".into())
        .await;
    again.expect("written");
    assert_eq!(
        std::fs::read_to_string(folder.join(by_hand)).expect("file"),
        "## Agent again\n"
    );
}

/// A file of the task's folder a person edits while a run is under way:
/// the report and the zip are still to be had (the edit cannot be recorded
/// under a run), and the edit is recorded once the run has ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_edit_during_a_run_waits_for_its_end_and_the_zip_is_still_to_be_had() {
    let dir = tempfile::tempdir().expect("temp dir");
    // Steps slow enough that the run is still under way after the edit.
    let model = ModelServer::start(Script {
        delay: Duration::from_millis(1500),
        fail_first: 0,
    })
    .await;
    let tasks = open(dir.path());
    let id = create_and_start(&tasks, &model, "fast").await;
    let folder = tasks.store().root().task_dir(&id);
    let first_file = || {
        std::fs::read_dir(&folder)
            .ok()?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .find(|n| n.starts_with(|c: char| c.is_ascii_digit()) && !n.ends_with(".tmp"))
    };
    let running = until(&tasks, id, "past a step", |_| first_file().is_some()).await;
    let name = first_file().expect("an artifact file");
    std::fs::write(folder.join(&name), "## Rewritten in an editor\n").expect("hand edit");
    let zip = tasks.file(running, TaskFile::Zip, None).await;
    let under_way = tasks
        .find(id)
        .await
        .expect("the task")
        .active_run()
        .is_some();
    assert!(under_way, "the run ended before the zip was asked for");
    zip.expect("the zip while a run is under way");
    // A write of the agent's under the run is refused, its bytes not kept.
    let text = "## Written by the agent under the run\n";
    let refused = tasks.write_artifact(id, &name, text.into()).await;
    let refused = refused.expect_err("a write under a run");
    assert_eq!(refused.code, ErrorCode::RunningReadonly, "{refused:?}");
    let hash = planb_core::state::ContentHash::of_bytes(text.as_bytes()).0;
    let blob = tasks.store().root().blobs().path(&hash);
    assert!(!blob.exists(), "the refused write left its blob");
    let edits = || {
        planb_tests::logs::events(dir.path())
            .into_iter()
            .filter(|event| matches!(event, EventBody::ArtifactEdited { .. }))
            .count()
    };
    assert_eq!(edits(), 0, "an edit recorded under a run");
    let stopped = tasks.stop(id).await.expect("stopped");
    let ended = until_ended(&tasks, stopped.id).await;
    tasks
        .file(ended, TaskFile::Zip, None)
        .await
        .expect("the zip");
    assert_eq!(edits(), 1, "the edit is recorded once the run has ended");
    assert_eq!(
        std::fs::read_to_string(folder.join(&name)).expect("file"),
        "## Rewritten in an editor\n",
        "the hand edit was overwritten"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_retries_from_its_first_step_then_is_archived_and_deleted_never_under_a_run() {
    let dir = tempfile::tempdir().expect("temp dir");
    let model = ModelServer::start(Script {
        delay: Duration::from_millis(200),
        fail_first: 0,
    })
    .await;
    let tasks = open(dir.path());
    let root = tasks.store().root().clone();
    let id = create_and_start(&tasks, &model, "fast").await;
    let running = until(&tasks, id, "two steps in", |t| t.successes.len() >= 2).await;
    // Not retried, archived or deleted under a live run.
    let retry = tasks::may_run_again(&running).expect_err("a run is active");
    let archive = tasks.archive(id).await.expect_err("a run is active");
    let delete = tasks.delete(id).await.expect_err("a run is active");
    for refused in [retry, archive, delete] {
        assert_eq!(refused.code, ErrorCode::RunAlreadyActive, "{refused}");
    }
    let stopped = tasks.stop(id).await.expect("stopped");
    let stopped = match stopped.active_run() {
        Some(_) => until_ended(&tasks, id).await,
        None => stopped,
    };
    assert_eq!(tasks::state_name(&stopped), "stopped");
    assert!(tasks::status(&root, &stopped).progress.done >= 2);
    let stopped_run = stopped.runs[0].id;

    // A retry starts over: the new run starts every step of the target's
    // closure again, the stopped run stays in the history.
    tasks::may_run_again(&stopped).expect("a stopped task may run again");
    let retried = launch::start(&launch_of(&tasks), id, 1, here(&model), Start::Retry).await;
    let retried = retried.expect("retried");
    assert_eq!(tasks::state_name(&retried), "running");
    assert_eq!(retried.runs.len(), 2);
    let done = until_ended(&tasks, id).await;
    assert_eq!(tasks::state_name(&done), "completed", "{}", log_text(&done));
    let runs = planb_tests::logs::started_by_run(dir.path());
    let mut again = runs.last().expect("the retry").clone();
    again.sort();
    let pipeline = tasks::pipeline_of(&root, &done.pipeline).expect("pipeline");
    let target = StepId::parse(&done.target).expect("target");
    let mut everything: Vec<String> = pipeline
        .closure(&target)
        .expect("closure")
        .iter()
        .map(|s| s.as_str().to_owned())
        .collect();
    everything.sort();
    assert_eq!(again, everything, "the retry ran every step");
    let earlier = tasks::run_of(&done, Some(stopped_run)).expect("its run");
    assert_eq!(earlier.map(|r| r.state.as_str()), Some("stopped"));
    let completed = tasks::may_run_again(&done).expect_err("a completed task");
    assert_eq!(
        completed.code,
        ErrorCode::Conflict,
        "a completed task is not run again"
    );

    // Archived: readable, frozen, out of the default list.
    let archived = tasks.archive(id).await.expect("archived");
    assert_eq!(archived.lifecycle().as_str(), "archived");
    assert_eq!(tasks::state_name(&archived), "completed");
    assert!(archived.archived_at.is_some());
    let twice = tasks.archive(id).await.expect("archived again");
    assert_eq!(
        twice.archived_at, archived.archived_at,
        "archiving twice changes nothing"
    );
    assert!(tasks.list(10, false).await.expect("listed").is_empty());
    let listed = tasks.list(10, true).await.expect("listed");
    assert_eq!(listed.iter().map(|t| t.id).collect::<Vec<_>>(), vec![id]);
    let found = tasks.find(id).await.expect("found");
    assert_eq!(found.lifecycle().as_str(), "archived");
    let report = tasks.file(found.clone(), TaskFile::Report, None).await;
    assert!(report.expect("the report").path.is_file());
    let frozen = [
        tasks::may_run_again(&found).expect_err("no resume or retry"),
        tasks.stop(id).await.expect_err("no stop"),
        tasks
            .write_artifact(id, "intake", "x".into())
            .await
            .expect_err("no edit"),
    ];
    for refused in frozen {
        assert_eq!(refused.code, ErrorCode::Conflict, "{refused}");
    }

    // Deleted: gone from every list and its folder removed; the log keeps
    // its history.
    assert!(root.task_dir(&id).is_dir());
    let folder = tasks.delete(id).await.expect("deleted");
    assert!(!folder.exists(), "{}", folder.display());
    assert!(tasks.list(10, true).await.expect("listed").is_empty());
    let gone = [
        tasks.find(id).await.expect_err("no status"),
        tasks.delete(id).await.expect_err("no second deletion"),
        tasks.archive(id).await.expect_err("no archive"),
    ];
    for refused in gone {
        assert_eq!(refused.code, ErrorCode::TaskNotFound, "{refused}");
    }
    let kept = tasks.store().read(|s| s.task(&id).cloned()).expect("read");
    let kept = kept.expect("the task's history");
    assert_eq!(kept.runs.len(), 2);
    assert!(kept.deleted_at.is_some() && kept.archived_at.is_some());
}

/// A run starting while its task is deleted: they take turns. The deletion
/// waits for the run (refused while it goes on), or the start answers that
/// the task is gone; neither answers an internal error, and a deleted
/// task's folder never comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_racing_a_delete_leaves_no_folder_and_names_the_winner() {
    const ROUNDS: usize = 20;
    let dir = tempfile::tempdir().expect("temp dir");
    let tasks = open(dir.path());
    let root = tasks.store().root().clone();
    let pipeline = tasks::checked_pipeline(&root, PROJECT_PLAN, DEFAULT_TARGET).expect("pipeline");
    let launch = launch_of(&tasks);
    let mut problems = Vec::new();
    for round in 0..ROUNDS {
        let id = tasks
            .create(request(PROMPT, "ping"), &pipeline)
            .await
            .expect("created");
        let runner = script_model(dir.path(), "fails.sh", "sleep 0.2; exit 1\n");
        let from = if round % 2 == 0 {
            Start::Retry
        } else {
            Start::Resume
        };
        let (started, deleted) = tokio::join!(
            launch::start(&launch, id, 0, runner, from),
            tasks.delete(id)
        );
        let refused = [
            ErrorCode::TaskNotFound,
            ErrorCode::RunAlreadyActive,
            ErrorCode::Conflict,
        ];
        match (&started, &deleted) {
            // The run came first and ended before the deletion took the task.
            (Ok(_), Ok(_)) => {}
            (Ok(_), Err(e)) if refused.contains(&e.code) => {
                until_ended(&tasks, id).await;
                tasks.delete(id).await.expect("deleted once the run ended");
            }
            (Err(e), Ok(_)) if refused.contains(&e.code) => {}
            _ => problems.push(format!(
                "round {round}: start {:?}, delete {:?}",
                started.as_ref().map(|_| ()).map_err(ToString::to_string),
                deleted.as_ref().map(|_| ()).map_err(ToString::to_string)
            )),
        }
        // Whatever took the task's run lock has let it go by now.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let folder = root.task_dir(&id);
        if folder.exists() {
            let left: Vec<_> = std::fs::read_dir(&folder)
                .map(|entries| entries.flatten().map(|e| e.file_name()).collect())
                .unwrap_or_default();
            problems.push(format!(
                "round {round}: the deleted task's folder holds {left:?}"
            ));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}
