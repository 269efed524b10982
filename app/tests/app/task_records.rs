//! Plan-generation tasks as recorded, before or between runs: created,
//! listed, found, stopped, their outputs and run log read, kept apart from
//! execution plans, and the pipelines they name checked; over a real store
//! in a temporary data root. Runs here are short ones on a model program
//! (`command:sh`), in this process.

use std::path::Path;
use std::time::{Duration, Instant};

use planb_app::ErrorCode;
use planb_app::launch::Start;
use planb_app::tasks::outputs::{Output, ReadError};
use planb_app::tasks::{self, CreateRequest, TaskFile, Tasks};
use planb_core::{RunId, Task, TaskId};
use planb_engine::pipelines::{DEFAULT_TARGET, PROJECT_PLAN};
use planb_tests::fixtures::new_uuid;
use serde_json::json;

use crate::plans::{open, record, stranger, titled};
use crate::tasks::script_model;

/// A task of `speed` planning `prompt` on the built-in pipeline.
fn asking(prompt: &str, speed: &str, key: Option<&str>) -> CreateRequest {
    CreateRequest {
        prompt: prompt.into(),
        speed: speed.into(),
        target: DEFAULT_TARGET.into(),
        pipeline: PROJECT_PLAN.into(),
        profile: None,
        request_id: key.map(str::to_owned),
    }
}

async fn created(tasks: &Tasks, request: CreateRequest) -> TaskId {
    let root = tasks.root();
    let pipeline = tasks::checked_pipeline(&root, &request.pipeline, &request.target);
    let pipeline = pipeline.expect("the pipeline");
    tasks.create(request, &pipeline).await.expect("created")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_task_is_listed_as_the_latest_with_nothing_done_and_may_run() {
    let dir = tempfile::tempdir().expect("temp dir");
    let tasks = open(dir.path()).0.tasks();
    let id = created(&tasks, asking("Plan a garden.", "fast", None)).await;
    let task = tasks.find(id).await.expect("the task");
    assert_eq!(tasks::state_name(&task), "created");
    assert!(task.runs.is_empty());
    let status = tasks::status(&tasks.root(), &task);
    assert!(status.progress.total > 1, "{status:?}");
    assert_eq!(status.progress.done, 0);
    assert_eq!(status.percentage, 0.0);
    assert!(status.files.is_empty() && status.files_count == 0);
    let listed = tasks.list(10, false).await.expect("listed");
    let shown: Vec<(TaskId, &str, &str, &str)> = listed
        .iter()
        .map(|t| (t.id, t.state, t.lifecycle, t.prompt.as_str()))
        .collect();
    assert_eq!(shown, [(id, "created", "created", "Plan a garden.")]);
    assert_eq!(listed[0].created_at, task.created_at);
    assert_eq!(tasks.latest().await.expect("latest").id, id);
    tasks::may_run_again(&task).expect("a new task may run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_task_list_is_newest_first_and_cut_at_its_limit() {
    let dir = tempfile::tempdir().expect("temp dir");
    let tasks = open(dir.path()).0.tasks();
    let mut ids = Vec::new();
    for n in 0..3 {
        let prompt = format!("Plan number {n}.");
        ids.push(created(&tasks, asking(&prompt, "ping", None)).await);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let tasks = &tasks;
    let listed = |limit| async move {
        let listed = tasks.list(limit, false).await.expect("listed");
        listed.iter().map(|t| t.id).collect::<Vec<_>>()
    };
    assert_eq!(listed(2).await, [ids[2], ids[1]]);
    assert_eq!(listed(10).await, [ids[2], ids[1], ids[0]]);
    assert!(listed(0).await.is_empty());
    assert_eq!(tasks.latest().await.expect("latest").id, ids[2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_and_execution_plans_are_never_found_as_each_other() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (app, store) = open(dir.path());
    let (tasks, plans) = (app.tasks(), app.plans());
    let plan = record(&store, titled("A plan", 1), None).await;
    let task = created(&tasks, asking("Plan a garden.", "ping", None)).await;
    assert!(tasks.get(plan).await.expect("read").is_none());
    let not_a_task = tasks.find(plan).await.expect_err("a plan");
    assert_eq!(not_a_task.code, ErrorCode::TaskNotFound);
    let not_a_plan = plans.get(task).await.expect_err("a task");
    assert_eq!(not_a_plan.code, ErrorCode::TaskNotFound);
    let not_a_plan = plans.find(&task.to_string()).await.expect_err("a task");
    assert_eq!(not_a_plan.code, ErrorCode::TaskNotFound);
    let listed: Vec<TaskId> = tasks
        .list(10, true)
        .await
        .expect("listed")
        .iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(listed, [task]);
    let listed: Vec<TaskId> = plans
        .list()
        .await
        .expect("listed")
        .iter()
        .map(|p| p.id)
        .collect();
    assert_eq!(listed, [plan]);
    assert_eq!(tasks.latest().await.expect("latest").id, task);
    let output = tasks.read_output(plan, Output::Zip).await;
    assert!(
        matches!(output, Err(ReadError::NoTask(id)) if id == plan),
        "{output:?}"
    );
    let stop = tasks.stop(plan).await.expect_err("a plan");
    assert_eq!(stop.code, ErrorCode::TaskNotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_root_has_no_latest_task_no_outputs_and_names_the_task_it_lacks() {
    let dir = tempfile::tempdir().expect("temp dir");
    let tasks = open(dir.path()).0.tasks();
    assert!(tasks.list(10, true).await.expect("listed").is_empty());
    let latest = tasks.latest().await.expect_err("no tasks");
    assert_eq!(latest.code, ErrorCode::TaskNotFound);
    assert_eq!(latest.message, "there are no tasks yet");
    assert_eq!(latest.details, json!({"tasks": 0}));
    let (outputs, more) = tasks.outputs(0, 10).await.expect("listed");
    assert!(outputs.is_empty() && !more);
    let nobody = stranger();
    let missing = tasks.find(nobody).await.expect_err("no such task");
    assert_eq!(missing.code, ErrorCode::TaskNotFound);
    assert_eq!(missing.message, format!("task_id: no task {nobody}"));
    assert_eq!(missing.details, json!({"task_id": nobody.to_string()}));
    let until = Instant::now() + Duration::from_secs(1);
    let waited = tasks
        .wait(nobody, until, Duration::from_millis(10), 0.0)
        .await;
    assert_eq!(
        waited.expect_err("no such task").code,
        ErrorCode::TaskNotFound
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_never_run_has_no_run_to_name_and_an_empty_log() {
    let dir = tempfile::tempdir().expect("temp dir");
    let tasks = open(dir.path()).0.tasks();
    let id = created(&tasks, asking("Plan a garden.", "fast", None)).await;
    let task = tasks.find(id).await.expect("the task");
    assert!(
        tasks::run_of(&task, None)
            .expect("no run asked for")
            .is_none()
    );
    let asked = RunId::from_uuid(new_uuid());
    let missing = tasks::run_of(&task, Some(asked)).expect_err("no such run");
    assert_eq!(missing.code, ErrorCode::RunNotFound);
    assert_eq!(
        missing.message,
        format!("run_id: {asked} is not a run of task {id} (it has 0 run(s))")
    );
    assert_eq!(missing.details, json!({"run_id": asked.to_string()}));
    let tail = tasks::log_tail(&task, None, 0, 100);
    assert!(tail.lines.is_empty());
    assert_eq!((tail.next_cursor, tail.older_lines_dropped), (0, false));
    let later = tasks::log_tail(&task, None, 7, 100);
    assert_eq!(later.next_cursor, 7, "a cursor is never moved back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_a_task_that_is_not_running_is_refused_as_run_not_active() {
    let dir = tempfile::tempdir().expect("temp dir");
    let tasks = open(dir.path()).0.tasks();
    let id = created(&tasks, asking("Plan a garden.", "fast", None)).await;
    let idle = tasks.stop(id).await.expect_err("no run");
    assert_eq!(idle.code, ErrorCode::RunNotActive, "{idle}");
    let nobody = tasks.stop(stranger()).await.expect_err("no task");
    assert_eq!(nobody.code, ErrorCode::TaskNotFound, "{nobody}");
    let task = tasks.find(id).await.expect("the task");
    assert!(task.runs.is_empty(), "a refused stop recorded a run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_never_run_lists_no_output_and_each_read_says_what_is_missing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let tasks = open(dir.path()).0.tasks();
    let id = created(&tasks, asking("Plan a garden.", "fast", None)).await;
    let (outputs, more) = tasks.outputs(0, 10).await.expect("listed");
    assert!(outputs.is_empty() && !more, "{outputs:?}");
    let report = tasks.read_output(id, Output::Report).await;
    assert!(
        matches!(report, Err(ReadError::NoReport(t)) if t == id),
        "{report:?}"
    );
    let zip = tasks.read_output(id, Output::Zip).await;
    assert!(
        matches!(zip, Err(ReadError::NoArtifacts(t)) if t == id),
        "{zip:?}"
    );
    let intake = tasks
        .read_output(id, Output::Artifact("intake".into()))
        .await;
    let not_yet = matches!(&intake, Err(ReadError::NotYet { task, step }) if *task == id && step.as_str() == "intake");
    assert!(not_yet, "{intake:?}");
    let unknown = tasks
        .read_output(id, Output::Artifact("99-nothing".into()))
        .await;
    assert!(
        matches!(unknown, Err(ReadError::UnknownName(_))),
        "{unknown:?}"
    );
    let task = tasks.find(id).await.expect("the task");
    let file = tasks.file(task, TaskFile::Report, None).await;
    let file = file.expect_err("no report yet");
    assert_eq!(file.code, ErrorCode::InvalidArtifactUri, "{file}");
    assert!(
        file.message.contains("the report is not built yet"),
        "{file}"
    );
    assert_eq!(file.details, json!({"state": "created"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_id_of_a_deleted_task_finds_nothing_and_is_not_used_again() {
    let dir = tempfile::tempdir().expect("temp dir");
    let tasks = open(dir.path()).0.tasks();
    let id = created(&tasks, asking("Plan a garden.", "ping", Some("garden"))).await;
    let found = tasks.by_request("garden".into()).await.expect("read");
    assert_eq!(found.map(|t| t.id), Some(id));
    assert!(
        tasks
            .by_request("orchard".into())
            .await
            .expect("read")
            .is_none()
    );
    tasks.delete(id).await.expect("deleted");
    assert!(
        tasks
            .by_request("garden".into())
            .await
            .expect("read")
            .is_none()
    );
    let root = tasks.root();
    let pipeline = tasks::checked_pipeline(&root, PROJECT_PLAN, DEFAULT_TARGET).expect("pipeline");
    let again = tasks
        .create(asking("Plan a garden.", "ping", Some("garden")), &pipeline)
        .await;
    let refused = again.expect_err("the key of a deleted task");
    assert_eq!(refused.code, ErrorCode::Conflict, "{refused}");
    assert!(
        refused.message.contains("since deleted; use another key"),
        "{refused}"
    );
    assert!(tasks.list(10, true).await.expect("listed").is_empty());
}

/// Writes the pipeline file `name` under `root` with `steps`.
fn pipeline_file(root: &Path, name: &str, steps: serde_json::Value) {
    let dir = root.join("pipelines");
    std::fs::create_dir_all(&dir).expect("pipelines");
    let text = json!({"name": name, "version": 1, "steps": steps}).to_string();
    std::fs::write(dir.join(format!("{name}.json")), text).expect("pipeline");
}

/// Two steps: an intake a model writes, and a report of it.
fn two_steps() -> serde_json::Value {
    json!([
        {"id": "intake", "title": "Intake", "model": {"prompt": "Restate: {{prompt}}"}},
        {"id": "build_plan", "title": "Report", "needs": ["intake"], "render": "report"}
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_pipeline_that_cannot_be_used_is_an_invalid_target_saying_why() {
    let dir = tempfile::tempdir().expect("temp dir");
    let tasks = open(dir.path()).0.tasks();
    let root = tasks.root();
    pipeline_file(dir.path(), "renamed", two_steps());
    let renamed = dir.path().join("pipelines").join("renamed.json");
    let text = std::fs::read_to_string(&renamed).expect("file");
    std::fs::write(&renamed, text.replace("\"renamed\"", "\"other\"")).expect("rename");
    std::fs::write(dir.path().join("pipelines").join("broken.json"), "{").expect("broken");
    let cases = [
        ("Not A Name", "is not a pipeline name".to_owned()),
        ("absent", "pipeline: no pipeline \"absent\"".to_owned()),
        (
            "broken",
            format!(
                "{}",
                dir.path().join("pipelines").join("broken.json").display()
            ),
        ),
        (
            "renamed",
            "name: \"other\" does not match the file's name \"renamed\"".to_owned(),
        ),
    ];
    for (name, said) in cases {
        let refused = tasks::pipeline_of(&root, name).expect_err(name);
        assert_eq!(refused.code, ErrorCode::InvalidTarget, "{name}");
        assert!(refused.message.contains(&said), "{name}: {refused}");
    }
    let built_in = tasks::pipeline_of(&root, PROJECT_PLAN).expect("built in");
    assert!(built_in.steps().len() > 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_pipeline_takes_any_of_its_steps_as_target_and_names_its_standard_ones() {
    let dir = tempfile::tempdir().expect("temp dir");
    let tasks = open(dir.path()).0.tasks();
    let root = tasks.root();
    pipeline_file(dir.path(), "mine", two_steps());
    let pipeline = tasks::pipeline_of(&root, "mine").expect("the user's pipeline");
    let steps: Vec<&str> = pipeline.steps().iter().map(|s| s.id.as_str()).collect();
    assert_eq!(steps, ["intake", "build_plan"]);
    for target in ["intake", "build_plan"] {
        tasks::checked_pipeline(&root, "mine", target).expect(target);
    }
    let refused = tasks::checked_pipeline(&root, "mine", "validate_plan");
    let refused = refused.expect_err("not a step of it");
    assert_eq!(refused.code, ErrorCode::InvalidTarget);
    assert_eq!(
        refused.message,
        "target: \"validate_plan\" is not a step of pipeline mine (targets: build_plan)"
    );
    assert_eq!(refused.details, json!({"targets": ["build_plan"]}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_pipeline_file_is_gone_shows_no_progress_rather_than_failing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let tasks = open(dir.path()).0.tasks();
    pipeline_file(dir.path(), "mine", two_steps());
    let request = CreateRequest {
        pipeline: "mine".into(),
        ..asking("Plan a garden.", "fast", None)
    };
    let id = created(&tasks, request).await;
    let task = tasks.find(id).await.expect("the task");
    let before = tasks::status(&tasks.root(), &task);
    assert_eq!((before.progress.done, before.progress.total), (0, 2));
    std::fs::remove_file(dir.path().join("pipelines").join("mine.json")).expect("removed");
    let after = tasks::status(&tasks.root(), &task);
    assert_eq!((after.progress.done, after.progress.total), (0, 0));
    assert_eq!(after.percentage, 0.0);
    assert_eq!(tasks.find(id).await.expect("still there").id, id);
}

async fn until_ended(tasks: &Tasks, id: TaskId) -> Task {
    let started = Instant::now();
    loop {
        let task = tasks.find(id).await.expect("the task");
        if !task.runs.is_empty() && task.active_run().is_none() {
            return task;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "task {id} did not end"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

const ANSWERS: &str = "printf '## Part\\n\\nText.\\n'\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_log_is_read_one_run_at_a_time_and_the_newest_lines_first_kept() {
    let dir = tempfile::tempdir().expect("temp dir");
    let tasks = open(dir.path()).0.tasks();
    let id = created(&tasks, asking("Plan a garden.", "ping", None)).await;
    let fails = script_model(dir.path(), "fails.sh", "echo no >&2; exit 1\n");
    tasks
        .start_run(id, 0, fails, Start::Resume)
        .await
        .expect("started");
    let failed = until_ended(&tasks, id).await;
    assert_eq!(tasks::state_name(&failed), "failed");
    tasks::may_run_again(&failed).expect("a failed task may run again");
    let answers = script_model(dir.path(), "answers.sh", ANSWERS);
    tasks
        .start_run(id, 1, answers, Start::Retry)
        .await
        .expect("started");
    let done = until_ended(&tasks, id).await;
    assert_eq!(tasks::state_name(&done), "completed");
    let (first, second) = (done.runs[0].id, done.runs[1].id);
    let all = tasks::log_tail(&done, None, 0, 1_000);
    let of = |run| all.lines.iter().filter(|l| l.run == run).count();
    assert!(of(first) > 0 && of(second) > 0, "{:?}", all.lines);
    assert_eq!(of(first) + of(second), all.lines.len());
    assert_eq!(all.next_cursor, done.log_lines);
    let numbers: Vec<u64> = all.lines.iter().map(|l| l.number).collect();
    assert!(numbers.windows(2).all(|w| w[0] < w[1]), "{numbers:?}");
    let only = tasks::log_tail(&done, Some(first), 0, 1_000);
    assert!(only.lines.iter().all(|l| l.run == first));
    assert_eq!(only.lines.len(), of(first));
    let newest = tasks::log_tail(&done, None, 0, 2);
    assert_eq!(newest.lines, all.lines[all.lines.len() - 2..]);
    let since = tasks::log_tail(&done, None, numbers[1], 1_000);
    assert_eq!(since.lines, all.lines[2..]);
    let nothing_new = tasks::log_tail(&done, None, all.next_cursor, 1_000);
    assert!(nothing_new.lines.is_empty() && !nothing_new.older_lines_dropped);
    let run = tasks::run_of(&done, Some(first))
        .expect("its run")
        .expect("a run");
    let ended = run.ended_at.expect("ended");
    let elapsed = tasks::elapsed_sec(run, planb_core::Timestamp(ended.0 + 60_000));
    assert_eq!(elapsed, (ended.0 - run.started_at.0) as f64 / 1000.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ping_task_completes_without_a_report_and_says_which_speed_has_one() {
    let dir = tempfile::tempdir().expect("temp dir");
    let tasks = open(dir.path()).0.tasks();
    let id = created(&tasks, asking("Plan a garden.", "ping", None)).await;
    let answers = script_model(dir.path(), "answers.sh", ANSWERS);
    tasks
        .start_run(id, 0, answers, Start::Resume)
        .await
        .expect("started");
    let done = until_ended(&tasks, id).await;
    assert_eq!(tasks::state_name(&done), "completed");
    assert_eq!(done.successes.len(), 1, "ping is one model call");
    let listed = tasks.list(10, false).await.expect("listed");
    assert_eq!(
        (listed[0].state, listed[0].lifecycle),
        ("completed", "active")
    );
    let status = tasks::status(&tasks.root(), &done);
    assert_eq!((status.progress.done, status.progress.total), (1, 1));
    assert_eq!(status.percentage, 100.0);
    let report = tasks.file(done.clone(), TaskFile::Report, None).await;
    let report = report.expect_err("no report");
    assert_eq!(report.code, ErrorCode::InvalidArtifactUri, "{report}");
    assert!(
        report.message.contains("speed_vs_detail \"ping\""),
        "{report}"
    );
    assert_eq!(report.details, json!({"state": "completed"}));
    let zip = tasks.read_output(id, Output::Zip).await.expect("the zip");
    assert!(zip.bytes.starts_with(b"PK"));
    let again = tasks::may_run_again(&done).expect_err("completed");
    assert_eq!(again.code, ErrorCode::Conflict);
}
