//! The task tools end to end: the real `planb-mcp` over stdio with rmcp's
//! client, detached real worker processes, and a real OpenAI-compatible
//! HTTP server started by each test with scripted answers (it counts the
//! requests, can answer slowly, and can fail the first requests with 503).
//! What a run does in one process is tested at planb-app
//! (`app/tests/app/tasks.rs`); here, what needs the protocol, the detached
//! worker, kills or several servers on one root.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::{Server, UrlAnswer, call, start};
use planb_core::dag::StepId;
use planb_core::{EventBody, RunState};
use planb_tests::model::{ModelServer, Script, scripted_answer};
use rmcp::model::CallToolResult;
use serde_json::{Value, json};

async fn start_planb(dir: &Path, model: Option<&ModelServer>, extra: &[(&str, &str)]) -> Server {
    let spec = model.map(ModelServer::spec);
    let mut env: Vec<(&str, &str)> =
        vec![("PLANB_MODEL_NAME", "scripted"), ("PLANB_CONCURRENCY", "2")];
    if let Some(spec) = &spec {
        env.push(("PLANB_MODEL", spec));
    }
    env.extend_from_slice(extra);
    start(dir, UrlAnswer::NotSupported, &env).await
}

/// planb with `command:sh <dir>/<name>` as its model, the script `body`.
async fn start_with_script(dir: &Path, name: &str, body: &str) -> Server {
    let script = dir.join(name);
    std::fs::write(&script, body).expect("script");
    let spec = format!("command:sh {}", script.display());
    start_planb(dir, None, &[("PLANB_MODEL", &spec)]).await
}

fn structured(result: &CallToolResult) -> Value {
    result
        .structured_content
        .clone()
        .expect("structuredContent")
}

fn ok(result: &CallToolResult) -> Value {
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let value = structured(result);
    let text = crate::support::text_of(result);
    assert_eq!(
        serde_json::from_str::<Value>(&text).expect("the text is JSON"),
        value
    );
    value
}

fn error_code(result: &CallToolResult) -> String {
    assert_eq!(result.is_error, Some(true), "{result:?}");
    let value = structured(result);
    assert!(value["error"]["message"].is_string(), "{value}");
    value["error"]["code"].as_str().expect("a code").to_owned()
}

const PROMPT: &str = "Open a neighbourhood bakery in Lyon within 9 months on a budget of EUR 180,000; break even by month 18.";

async fn create(server: &Server, speed: &str) -> String {
    let created = ok(&call(
        server,
        "task_create",
        json!({"prompt": PROMPT, "speed_vs_detail": speed}),
    )
    .await);
    created["task_id"].as_str().expect("task_id").to_owned()
}

async fn wait(server: &Server, task: &str) -> Value {
    ok(&call(
        server,
        "task_wait",
        json!({"task_id": task, "timeout_sec": 300, "poll_interval_sec": 0.1}),
    )
    .await)
}

/// Waits for the task's run to end and requires it completed; otherwise
/// fails with the status and the run's error as the task folder holds it.
async fn completed(server: &Server, dir: &std::path::Path, task: &str) -> Value {
    let ended = wait(server, task).await;
    if ended["state"] != "completed" {
        let folder = dir.join("tasks").join(task);
        let error = std::fs::read_to_string(folder.join("run_error.json")).unwrap_or_default();
        let log = std::fs::read_to_string(folder.join("worker.log")).unwrap_or_default();
        panic!("task {task} did not complete: {ended}\nrun_error.json: {error}\nworker.log: {log}");
    }
    ended
}

async fn status(server: &Server, task: &str) -> Value {
    ok(&call(server, "task_status", json!({"task_id": task})).await)
}

/// Polls until at least `steps` steps are completed.
async fn until_completed(server: &Server, task: &str, steps: u64) -> Value {
    for _ in 0..600 {
        let now = status(server, task).await;
        if now["steps_completed"].as_u64().unwrap_or(0) >= steps || now["state"] != "running" {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("task {task} never reached {steps} completed steps");
}

/// Polls until the task is no longer running (or 10 s pass), and returns
/// that status.
async fn until_settled(server: &Server, task: &str) -> Value {
    let mut now = Value::Null;
    for _ in 0..200 {
        now = status(server, task).await;
        if now["state"] != "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    now
}

/// Every artifact edit in the log, as (step, by), each checked to come
/// before the run that follows it started.
fn edits_in_log(dir: &Path) -> Vec<(String, String)> {
    let mut edits = Vec::new();
    for event in planb_tests::logs::events(dir) {
        match event {
            EventBody::ArtifactEdited { step, by, .. } => edits.push((step, by)),
            EventBody::StepStarted { .. } => {
                assert!(
                    edits.is_empty() || edits.len() == 2,
                    "a step started between the two edits"
                );
            }
            _ => {}
        }
    }
    edits
}

/// Resumes `task` (one run so far, ended) and checks it completes without
/// running again a step that run finished; returns each run's started steps.
async fn resume_reruns_nothing_done(server: &Server, dir: &Path, task: &str) -> Vec<Vec<String>> {
    let (state, _) = crate::support::fold_log(dir);
    let done_first: BTreeSet<String> = state.tasks().values().next().expect("task").runs[0]
        .succeeded
        .iter()
        .cloned()
        .collect();
    ok(&call(server, "task_resume", json!({"task_id": task})).await);
    let done = wait(server, task).await;
    assert_eq!(done["state"], "completed", "{done}");
    let runs = planb_tests::logs::started_by_run(dir);
    let again: Vec<&String> = runs[1].iter().filter(|s| done_first.contains(*s)).collect();
    assert!(
        again.is_empty(),
        "steps the first run finished ran again: {again:?}"
    );
    runs
}

fn closure_of(target: &str) -> Vec<String> {
    let pipeline = planb_core::pipelines::project_plan();
    pipeline
        .closure(&StepId::parse(target).expect("id"))
        .expect("closure")
        .iter()
        .map(|s| s.as_str().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_task_runs_to_a_report_and_a_zip() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = ModelServer::start(Script {
        delay: Duration::ZERO,
        fail_first: 2,
    })
    .await;
    let server = start_planb(dir.path(), Some(&model), &[]).await;
    let examples = ok(&call(&server, "prompt_examples", json!({})).await);
    assert!(examples["samples"].as_array().expect("samples").len() >= 2);
    let task = create(&server, "fast").await;
    let done = wait(&server, &task).await;
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["planexe"]["version"], "1.0", "{done}");
    assert_eq!(done["progress_percentage"], 100.0);
    let closure = closure_of("build_plan");
    assert_eq!(done["steps_total"], closure.len());
    assert_eq!(done["files_count"], closure.len());
    assert!(done["files"].as_array().expect("files").len() <= 10);
    assert!(
        done["next_steps"][0]
            .as_str()
            .expect("next steps")
            .contains("task_file_info")
    );
    // Every model step asked once; the two 503s were retried.
    assert_eq!(model.requests(), closure.len() as u64 - 1 + 2);

    let report = ok(&call(
        &server,
        "task_file_info",
        json!({"task_id": task, "artifact": "report"}),
    )
    .await);
    assert_eq!(report["content_type"], "text/html");
    let html = std::fs::read_to_string(report["path"].as_str().expect("path")).expect("the report");
    for title in [
        "Executive summary",
        "Risk register",
        "Schedule (Gantt)",
        "SWOT analysis",
        "Premortem",
    ] {
        assert!(html.contains(title), "the report lacks {title}");
    }
    assert!(html.contains("<svg class=\"gantt\""), "no Gantt chart");
    assert!(
        !html.contains("<script") && !html.contains("src=\"http"),
        "the report must not load anything"
    );
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let zip = ok(&call(
        &server,
        "task_download",
        json!({"task_id": task, "artifact": "zip", "save_path": elsewhere.path()}),
    )
    .await);
    downloads_never_write_in_the_root_or_over_a_file(&server, dir.path(), &task, &zip).await;
    let listed = std::process::Command::new("python3")
        .args(["-c", "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); assert z.testzip() is None; print(len(z.namelist()))"])
        .arg(zip["path"].as_str().expect("path"))
        .output()
        .expect("python3");
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&listed.stdout).trim(),
        (closure.len() + 2).to_string()
    );

    let logs = ok(&call(
        &server,
        "task_logs_tail",
        json!({"task_id": task, "max_lines": 5}),
    )
    .await);
    let lines = logs["lines"].as_array().expect("lines");
    assert!(
        lines.last().expect("a line")["text"]
            .as_str()
            .expect("text")
            .contains("run completed"),
        "{logs}"
    );
    let listed = ok(&call(&server, "task_list", json!({})).await);
    assert_eq!(listed["tasks"][0]["task_id"], task.as_str());
    let latest = ok(&call(&server, "task_get_latest", json!({})).await);
    assert_eq!(latest["task_id"], task.as_str());
    // A completed task is not run again; stopping it is refused.
    assert_eq!(
        error_code(&call(&server, "task_resume", json!({"task_id": task})).await),
        "CONFLICT"
    );
    assert_eq!(
        error_code(&call(&server, "task_stop", json!({"task_id": task})).await),
        "RUN_NOT_ACTIVE"
    );
    let (state, _) = crate::support::fold_log(dir.path());
    let recorded = state.tasks().values().next().expect("the task");
    assert_eq!(recorded.runs.len(), 1);
    assert_eq!(recorded.runs[0].state, RunState::Completed);
    let zip_bytes = std::fs::read(zip["path"].as_str().expect("path")).expect("zip");
    resources_match_the_files(&server, &task, &report, &zip_bytes, closure.len()).await;
    server.client.cancel().await.expect("close");
    a_lost_folder_comes_back_with_rebuild(dir.path(), &task);
}

/// `rebuild` writes a task's folder again, byte for byte, from the log and
/// the blobs; a person's edit it has not recorded is never overwritten.
/// `task_download` refuses a place inside the data root (a log segment
/// above all) and an existing file unless told to replace it; the files
/// stay as they were.
async fn downloads_never_write_in_the_root_or_over_a_file(
    server: &Server,
    root: &Path,
    task: &str,
    zip: &Value,
) {
    let segment = std::fs::read_dir(root.join("log"))
        .expect("log dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "seg") || p.is_file())
        .expect("a log file");
    let before = std::fs::read(&segment).expect("segment");
    let download = |save: &Path, overwrite: bool| json!({"task_id": task, "artifact": "report", "save_path": save, "overwrite": overwrite});
    for overwrite in [false, true] {
        let refused = call(server, "task_download", download(&segment, overwrite)).await;
        assert_eq!(error_code(&refused), "PERMISSION_DENIED", "{refused:?}");
        let inside = call(server, "task_download", download(root, overwrite)).await;
        assert_eq!(error_code(&inside), "PERMISSION_DENIED", "{inside:?}");
    }
    assert_eq!(std::fs::read(&segment).expect("segment"), before);
    let existing = PathBuf::from(zip["path"].as_str().expect("path")).with_file_name("mine.txt");
    std::fs::write(&existing, "a person's own file").expect("write");
    let zip_bytes = std::fs::read(&existing).expect("file");
    let refused = call(server, "task_download", download(&existing, false)).await;
    assert_eq!(error_code(&refused), "CONFLICT", "{refused:?}");
    assert!(
        structured(&refused)["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("overwrite: true")),
        "{refused:?}"
    );
    assert_eq!(std::fs::read(&existing).expect("file"), zip_bytes);
    let replaced = ok(&call(server, "task_download", download(&existing, true)).await);
    assert_eq!(replaced["path"], existing.display().to_string());
    let report = std::fs::read_to_string(&existing).expect("report");
    assert!(report.to_lowercase().contains("<html"), "not the report");
    let leftovers: Vec<_> = std::fs::read_dir(existing.parent().expect("dir"))
        .expect("dir")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

fn a_lost_folder_comes_back_with_rebuild(dir: &Path, task: &str) {
    let folder = planb_projections::DataRoot::new(dir)
        .task_dir(&planb_core::TaskId::parse(task).expect("id"));
    let files = |folder: &Path| -> std::collections::BTreeMap<String, Vec<u8>> {
        std::fs::read_dir(folder)
            .expect("folder")
            .map(|e| e.expect("entry"))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| name != "worker.log" && name != "run.lock")
            .map(|name| {
                let bytes = std::fs::read(folder.join(&name)).expect("file");
                (name, bytes)
            })
            .collect()
    };
    let before = files(&folder);
    assert!(before.contains_key("report.html") && before.contains_key("run.zip"));
    std::fs::remove_dir_all(&folder).expect("lose the folder");
    let output = crate::support::planb(dir, &["rebuild"]);
    let said = crate::support::all_output(&output);
    assert!(output.status.success(), "{said}");
    assert!(said.contains("task folders rewritten: 1"), "{said}");
    assert_eq!(files(&folder), before);

    let (name, _) = before
        .iter()
        .find(|(name, _)| name.ends_with(".md"))
        .expect("an artifact file");
    std::fs::write(folder.join(name), "edited by hand\n").expect("edit");
    let output = crate::support::planb(dir, &["rebuild"]);
    let said = crate::support::all_output(&output);
    assert!(output.status.success(), "{said}");
    assert!(said.contains("hand edits not yet recorded"), "{said}");
    assert_eq!(
        std::fs::read_to_string(folder.join(name)).expect("kept"),
        "edited by hand\n"
    );
}

/// The task's report, zip and artifacts as MCP resources: listed with mime
/// type, size and SHA-256, read back equal to the files the tools give,
/// and bad URIs refused with a message that names the problem.
async fn resources_match_the_files(
    server: &Server,
    task: &str,
    report: &Value,
    zip: &[u8],
    artifacts: usize,
) {
    use base64::Engine as _;
    use rmcp::model::{ReadResourceRequestParams, ResourceContents};
    let templates = server
        .client
        .list_all_resource_templates()
        .await
        .expect("templates");
    let uris: Vec<&str> = templates.iter().map(|t| t.uri_template.as_str()).collect();
    assert_eq!(
        uris,
        [
            "planb://task/{task_id}/report",
            "planb://task/{task_id}/zip",
            "planb://task/{task_id}/artifact/{name}"
        ]
    );
    let listed = server.client.list_all_resources().await.expect("resources");
    assert_eq!(listed.len(), 2 + artifacts, "{listed:#?}");
    let report_uri = format!("planb://task/{task}/report");
    let entry = listed
        .iter()
        .find(|r| r.uri == report_uri)
        .expect("the report is listed");
    assert_eq!(entry.mime_type.as_deref(), Some("text/html"));
    assert_eq!(entry.size, report["size"].as_u64());
    assert_eq!(
        entry.meta.as_ref().expect("meta").0["sha256"],
        report["sha256"]
    );
    // Every listed resource says when it was made.
    for resource in &listed {
        let at = resource.meta.as_ref().map(|m| m.0["generated_at"].clone());
        assert!(
            at.as_ref()
                .and_then(Value::as_str)
                .is_some_and(|t| t.ends_with('Z')),
            "{} has no generated_at: {at:?}",
            resource.uri
        );
    }
    let read = |uri: String| async move {
        server
            .client
            .read_resource(ReadResourceRequestParams::new(uri))
            .await
    };
    let html = read(report_uri.clone()).await.expect("read the report");
    // The task interface's name for the same resource reads the same.
    let again = read(format!("planexe://task/{task}/report"))
        .await
        .expect("read by the planexe name");
    let (
        ResourceContents::TextResourceContents { text: first, .. },
        ResourceContents::TextResourceContents { text: second, .. },
    ) = (&html.contents[0], &again.contents[0])
    else {
        panic!("the report is text");
    };
    assert_eq!(first, second);
    let ResourceContents::TextResourceContents {
        text, mime_type, ..
    } = &html.contents[0]
    else {
        panic!("the report is text: {html:?}");
    };
    assert_eq!(mime_type.as_deref(), Some("text/html"));
    let on_disk = std::fs::read_to_string(report["path"].as_str().expect("path")).expect("file");
    assert_eq!(*text, on_disk);
    let archive = read(format!("planb://task/{task}/zip")).await.expect("zip");
    let ResourceContents::BlobResourceContents { blob, meta, .. } = &archive.contents[0] else {
        panic!("the zip is a blob: {archive:?}");
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(blob)
        .expect("base64");
    assert_eq!(bytes, zip, "the zip resource equals task_download's file");
    assert_eq!(
        meta.as_ref().expect("meta").0["sha256"],
        planb_core::state::ContentHash::of_bytes(zip).to_hex()
    );
    // Every listed artifact reads back with its listed size and hash.
    for entry in listed.iter().filter(|r| r.uri.contains("/artifact/")) {
        let got = read(entry.uri.clone()).await.expect("artifact");
        let ResourceContents::TextResourceContents { text, meta, .. } = &got.contents[0] else {
            panic!("an artifact is text: {got:?}");
        };
        assert_eq!(Some(text.len() as u64), entry.size, "{}", entry.uri);
        assert_eq!(meta, &entry.meta, "{}", entry.uri);
    }
    // A step id names its artifact too.
    let by_step = read(format!("planb://task/{task}/artifact/intake"))
        .await
        .expect("by step id");
    assert!(matches!(
        &by_step.contents[0],
        ResourceContents::TextResourceContents { uri, .. } if uri.ends_with("/artifact/intake")
    ));
    for (uri, says) in [
        (
            format!("planb://task/{task}/artifact/../../etc/passwd"),
            "names no artifact",
        ),
        (
            format!("planb://task/{task}/summary"),
            "is not report, zip or artifact",
        ),
        ("planb://task/not-a-task/report".to_owned(), "task id"),
        (
            "file:///etc/passwd".to_owned(),
            "is not a planb task resource",
        ),
        (
            "planb://task/0190a5f0-0000-7000-8000-000000000000/report".to_owned(),
            "no task",
        ),
    ] {
        let refused = read(uri.clone()).await.expect_err(&uri).to_string();
        assert!(refused.contains(says), "{uri}: {refused}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_then_edit_then_resume_reruns_only_what_is_missing_or_downstream() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = ModelServer::start(Script {
        delay: Duration::from_millis(150),
        fail_first: 0,
    })
    .await;
    let server = start_planb(dir.path(), Some(&model), &[]).await;
    let task = create(&server, "fast").await;
    until_completed(&server, &task, 6).await;
    // Artifacts are read-only while the run is active.
    assert_eq!(
        error_code(
            &call(
                &server,
                "task_artifact_write",
                json!({"task_id": task, "path": "intake", "content": "x"})
            )
            .await
        ),
        "RUNNING_READONLY"
    );
    assert_eq!(
        error_code(&call(&server, "task_resume", json!({"task_id": task})).await),
        "RUN_ALREADY_ACTIVE"
    );
    let stopped = ok(&call(&server, "task_stop", json!({"task_id": task})).await);
    assert_eq!(stopped["state"], "stopped", "{stopped}");
    let (state, _) = crate::support::fold_log(dir.path());
    let first = state.tasks().values().next().expect("task").runs[0].clone();
    let done_first: BTreeSet<String> = first.succeeded.iter().cloned().collect();
    assert!(
        done_first.contains("intake") && done_first.len() >= 6,
        "{done_first:?}"
    );

    // Edit the finished step with the fewest dependents.
    let pipeline = planb_core::pipelines::project_plan();
    let closure = closure_of("build_plan");
    let downstream = |step: &str| -> BTreeSet<String> {
        pipeline
            .downstream(&StepId::parse(step).expect("id"))
            .expect("a step")
            .iter()
            .map(|s| s.as_str().to_owned())
            .filter(|s| s != step)
            .collect()
    };
    let edited = done_first
        .iter()
        .min_by_key(|s| downstream(s).len())
        .expect("a finished step")
        .clone();
    assert_eq!(
        error_code(
            &call(
                &server,
                "task_artifact_write",
                json!({"task_id": task, "path": "../../etc/passwd", "content": "x"})
            )
            .await
        ),
        "INVALID_ARTIFACT_URI"
    );
    let written = ok(&call(
        &server,
        "task_artifact_write",
        json!({"task_id": task, "path": edited, "content": "## Edited by a person\n"}),
    )
    .await);
    assert_eq!(written["changed"], true);
    // A person edits another finished step's file by hand.
    // Not upstream of the first edit, which would then run again.
    let by_hand = done_first
        .iter()
        .filter(|s| **s != edited && !downstream(s).contains(&edited))
        .min_by_key(|s| downstream(s).len())
        .expect("a second finished step")
        .clone();
    let folder = dir.path().join("tasks").join(&task);
    let file = std::fs::read_dir(&folder)
        .expect("task folder")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| {
            n.split_once('-')
                .is_some_and(|(_, rest)| rest.split('.').next() == Some(by_hand.as_str()))
        })
        .expect("the step's file");
    std::fs::write(folder.join(&file), "## Rewritten in an editor\n").expect("hand edit");
    let resumed = ok(&call(&server, "task_resume", json!({"task_id": task})).await);
    assert_eq!(resumed["state"], "running", "{resumed}");
    let done = wait(&server, &task).await;
    assert_eq!(done["state"], "completed", "{done}");

    let runs = planb_tests::logs::started_by_run(dir.path());
    assert_eq!(runs.len(), 2);
    let second: BTreeSet<String> = runs[1].iter().cloned().collect();
    assert_eq!(second.len(), runs[1].len(), "a step ran twice in one run");
    let expected: BTreeSet<String> = closure
        .iter()
        .filter(|s| {
            !done_first.contains(*s)
                || downstream(&edited).contains(*s)
                || downstream(&by_hand).contains(*s)
        })
        .cloned()
        .collect();
    assert_eq!(second, expected, "edited {edited}, by hand {by_hand}");
    // Both edits are in the log, the hand edit under its file's name, and
    // recorded before the second run started.
    let edits = edits_in_log(dir.path());
    assert_eq!(
        edits,
        vec![
            (edited.clone(), "task_artifact_write".to_owned()),
            (by_hand.clone(), format!("hand edit of {file}")),
        ]
    );
    let hand_edited = std::fs::read_to_string(folder.join(&file)).expect("file");
    assert_eq!(hand_edited, "## Rewritten in an editor\n");
    let report = std::fs::read_to_string(dir.path().join("tasks").join(&task).join("report.html"))
        .expect("report");
    if pipeline
        .step(&StepId::parse("build_plan").expect("id"))
        .expect("step")
        .needs
        .iter()
        .any(|n| n.as_str() == edited)
    {
        assert!(report.contains("Edited by a person"));
    }
    server.client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_is_a_recoverable_worker_error_and_resume_completes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = ModelServer::start(Script {
        delay: Duration::from_millis(150),
        fail_first: 0,
    })
    .await;
    let server = start_planb(dir.path(), Some(&model), &[]).await;
    let task = create(&server, "fast").await;
    until_completed(&server, &task, 3).await;
    let (state, _) = crate::support::fold_log(dir.path());
    let run = state.tasks().values().next().expect("task").runs[0].clone();
    let killed = std::process::Command::new("kill")
        .args(["-9", &run.owner_pid.to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    // The lock is released when the process is gone.
    let failed = until_settled(&server, &task).await;
    assert_eq!(failed["state"], "failed", "{failed}");
    assert_eq!(failed["error"]["failure_reason"], "worker_error");
    assert_eq!(failed["error"]["recoverable"], true);
    // The process that recorded the end wrote why in the folder.
    let recorded: Value =
        serde_json::from_slice(&written(&run_error_file(dir.path(), &task)).await).expect("JSON");
    assert_eq!(recorded["failure_reason"], "worker_error", "{recorded}");
    resume_reruns_nothing_done(&server, dir.path(), &task).await;
    // Files the killed worker had not written yet are not taken for edits.
    assert_eq!(edits_in_log(dir.path()), Vec::<(String, String)>::new());
    server.client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_outlives_its_server_and_any_server_on_the_root_stops_resumes_and_waits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = ModelServer::start(Script {
        delay: Duration::from_millis(150),
        fail_first: 0,
    })
    .await;
    let first = start_planb(dir.path(), Some(&model), &[]).await;
    let task = create(&first, "fast").await;
    until_completed(&first, &task, 2).await;
    // The agent window that started the task goes away without a word.
    first.kill_9();
    let second = start_planb(dir.path(), Some(&model), &[]).await;
    let third = start_planb(dir.path(), Some(&model), &[]).await;
    let running = status(&second, &task).await;
    assert_eq!(
        running["state"], "running",
        "the worker died with its server: {running}"
    );
    let before = running["steps_completed"].as_u64().expect("steps");
    let later = until_completed(&third, &task, before + 1).await;
    assert_eq!(later["state"], "running", "{later}");
    let stopped = ok(&call(&second, "task_stop", json!({"task_id": task})).await);
    assert_eq!(stopped["state"], "stopped", "{stopped}");
    assert_eq!(status(&third, &task).await["state"], "stopped");
    let (state, _) = crate::support::fold_log(dir.path());
    let done_first: BTreeSet<String> = state.tasks().values().next().expect("task").runs[0]
        .succeeded
        .iter()
        .cloned()
        .collect();
    ok(&call(&third, "task_resume", json!({"task_id": task})).await);
    assert_eq!(
        error_code(&call(&second, "task_resume", json!({"task_id": task})).await),
        "RUN_ALREADY_ACTIVE"
    );
    let done = wait(&second, &task).await;
    assert_eq!(done["state"], "completed", "{done}");
    let runs = planb_tests::logs::started_by_run(dir.path());
    assert_eq!(runs.len(), 2);
    let again: Vec<&String> = runs[1].iter().filter(|s| done_first.contains(*s)).collect();
    assert!(
        again.is_empty(),
        "steps that succeeded before the stop ran again: {again:?}"
    );
    second.client.cancel().await.expect("close");
    third.client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_backend_answers_a_ping_and_bad_input_gets_the_seed_codes() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Nothing configured: a clear error, nothing recorded.
    let bare = start_planb(dir.path(), None, &[]).await;
    let refused = call(&bare, "task_create", json!({"prompt": PROMPT})).await;
    assert_eq!(error_code(&refused), "MODEL_NOT_CONFIGURED");
    assert!(
        structured(&refused)["error"]["message"]
            .as_str()
            .expect("message")
            .contains("PLANB_MODEL=")
    );
    assert_eq!(
        error_code(&call(&bare, "task_status", json!({"task_id": "not-a-uuid"})).await),
        "INVALID_ARGUMENT"
    );
    assert_eq!(
        error_code(
            &call(
                &bare,
                "task_status",
                json!({"task_id": "0190b4a2-7c4d-7b4e-9a4d-1234567890ab"})
            )
            .await
        ),
        "TASK_NOT_FOUND"
    );
    assert_eq!(
        error_code(&call(&bare, "task_get_latest", json!({})).await),
        "TASK_NOT_FOUND"
    );
    bare.client.cancel().await.expect("close");
    assert!(
        !crate::support::fold_log(dir.path())
            .1
            .contains(&"task_created")
    );

    let server = start_with_script(
        dir.path(),
        "model.sh",
        "#!/bin/sh\ncat > /dev/null\necho '## Intake'\necho 'The goal, restated.'\n",
    )
    .await;
    let spec = format!("command:sh {}", dir.path().join("model.sh").display());
    let bad_target = call(
        &server,
        "task_create",
        json!({"prompt": PROMPT, "target": "nope"}),
    )
    .await;
    assert_eq!(error_code(&bad_target), "INVALID_TARGET");
    let bad_speed = call(
        &server,
        "task_create",
        json!({"prompt": PROMPT, "speed_vs_detail": "slow"}),
    )
    .await;
    // One rule: a malformed argument is INVALID_ARGUMENT naming its field,
    // whatever its length; a well-formed name of nothing has its own code.
    assert_eq!(error_code(&bad_speed), "INVALID_ARGUMENT");
    let long_speed = call(
        &server,
        "task_create",
        json!({"prompt": PROMPT, "speed_vs_detail": "extremely-detailed"}),
    )
    .await;
    assert_eq!(error_code(&long_speed), "INVALID_ARGUMENT");
    for refused in [&bad_speed, &long_speed] {
        let message = structured(refused)["error"]["message"].to_string();
        assert!(message.contains("speed_vs_detail"), "{message}");
    }
    let empty = call(&server, "task_create", json!({"prompt": "  "})).await;
    assert_eq!(error_code(&empty), "INVALID_ARGUMENT");
    assert!(
        structured(&empty)["error"]["message"]
            .to_string()
            .contains("prompt")
    );
    let first = ok(&call(
        &server,
        "task_create",
        json!({"prompt": PROMPT, "client_request_id": "req-1"}),
    )
    .await);
    let again = ok(&call(
        &server,
        "task_create",
        json!({"prompt": PROMPT, "client_request_id": "req-1"}),
    )
    .await);
    assert_eq!(first["task_id"], again["task_id"]);
    let task = first["task_id"].as_str().expect("id").to_owned();
    let logs = call(
        &server,
        "task_logs_tail",
        json!({"task_id": task, "max_lines": 2.5}),
    )
    .await;
    assert_eq!(error_code(&logs), "INVALID_ARGUMENT");
    assert!(
        structured(&logs)["error"]["message"]
            .as_str()
            .expect("message")
            .contains("max_lines: must be a whole number"),
        "{logs:?}"
    );
    let done = wait(&server, &task).await;
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["steps_total"], 1);
    // Made for the project the server was started in.
    let project = dir.path().canonicalize().expect("the folder");
    assert_eq!(
        done["project_path"],
        project.display().to_string(),
        "{done}"
    );
    let no_report = call(
        &server,
        "task_file_info",
        json!({"task_id": task, "artifact": "report"}),
    )
    .await;
    assert_eq!(error_code(&no_report), "INVALID_ARTIFACT_URI");
    let intake = std::fs::read_to_string(dir.path().join("tasks").join(&task).join("01-intake.md"))
        .expect("artifact");
    assert_eq!(intake, "## Intake\nThe goal, restated.\n");
    server.client.cancel().await.expect("close");

    // A worker setting that cannot be used is named, not ignored.
    let badly_set = start_planb(
        dir.path(),
        None,
        &[("PLANB_MODEL", &spec), ("PLANB_STEP_TIMEOUT_SEC", "1e300")],
    )
    .await;
    let refused = call(&badly_set, "task_create", json!({"prompt": PROMPT})).await;
    assert_eq!(error_code(&refused), "INVALID_CONFIGURATION");
    let error = &structured(&refused)["error"];
    assert_eq!(
        error["details"]["variable"], "PLANB_STEP_TIMEOUT_SEC",
        "{error}"
    );
    let message = error["message"].as_str().expect("message").to_owned();
    assert!(
        message.contains("PLANB_STEP_TIMEOUT_SEC: must be a number of seconds"),
        "{message}"
    );
    // Refused before anything is recorded: no task is left behind.
    let left = crate::support::fold_log(dir.path())
        .0
        .tasks()
        .values()
        .filter(|t| t.runs.is_empty())
        .count();
    assert_eq!(left, 0, "a refused task_create left a task behind");
    badly_set.client.cancel().await.expect("close");
    // Each setting is named on its own.
    let other = start_planb(
        dir.path(),
        None,
        &[("PLANB_MODEL", &spec), ("PLANB_CONCURRENCY", "0")],
    )
    .await;
    let refused = call(&other, "task_create", json!({"prompt": PROMPT})).await;
    assert_eq!(error_code(&refused), "INVALID_CONFIGURATION");
    let message = structured(&refused)["error"]["message"]
        .as_str()
        .expect("message")
        .to_owned();
    assert!(
        message.contains("PLANB_CONCURRENCY: must be a whole number"),
        "{message}"
    );
    assert!(!message.contains("PLANB_STEP_TIMEOUT_SEC"), "{message}");
    other.client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow: drives Chromium; scripts/test runs it"]
async fn the_report_opens_from_disk_in_chromium_with_every_section() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = ModelServer::start(Script::INSTANT).await;
    let server = start_planb(dir.path(), Some(&model), &[]).await;
    let task = ok(&call(
        &server,
        "task_create",
        json!({"prompt": PROMPT, "speed_vs_detail": "fast", "target": "build_plan_and_validate"}),
    )
    .await);
    let task = task["task_id"].as_str().expect("id").to_owned();
    completed(&server, dir.path(), &task).await;
    let report = ok(&call(
        &server,
        "task_file_info",
        json!({"task_id": task, "artifact": "report"}),
    )
    .await);
    server.client.cancel().await.expect("close");
    // No server: the browser reads the file itself.
    let browser = planb_tests::browser::Browser::start().await;
    browser
        .open(report["download_url"].as_str().expect("url"))
        .await;
    let pipeline = planb_core::pipelines::project_plan();
    let target = pipeline
        .step(&StepId::parse("build_plan_and_validate").expect("id"))
        .expect("the target");
    for need in &target.needs {
        let css = format!("section#{} h2", need.as_str());
        assert!(
            browser.is_visible(&css).await,
            "section {need} is not shown"
        );
    }
    let listed = format!(
        "document.querySelectorAll('nav li').length === {}",
        target.needs.len()
    );
    assert!(
        browser.check(&listed).await,
        "the contents do not list every section"
    );
    assert!(
        browser
            .check("document.querySelector('svg.gantt rect.bar').getBBox().width > 0")
            .await,
        "the Gantt chart is not drawn"
    );
    assert!(
        browser
            .check("document.querySelectorAll('script, link[href]').length === 0")
            .await
    );
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_without_progress_fails_with_inactivity_timeout_and_resume_completes() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Every answer takes 3 s; the run may go 1 s without a step ending.
    let slow = ModelServer::start(Script {
        delay: Duration::from_secs(3),
        fail_first: 0,
    })
    .await;
    let server = start_planb(dir.path(), Some(&slow), &[("PLANB_INACTIVITY_SEC", "1")]).await;
    let task = create(&server, "ping").await;
    let failed = until_settled(&server, &task).await;
    assert_eq!(failed["state"], "failed", "{failed}");
    assert_eq!(failed["error"]["failure_reason"], "inactivity_timeout");
    assert_eq!(failed["error"]["recoverable"], true);
    // The folder says why, with the run's last log lines.
    let error_file = run_error_file(dir.path(), &task);
    let recorded: Value = serde_json::from_slice(&written(&error_file).await).expect("JSON");
    assert_eq!(
        recorded["failure_reason"], "inactivity_timeout",
        "{recorded}"
    );
    assert_eq!(recorded["recoverable"], true, "{recorded}");
    assert!(
        recorded["log"]
            .to_string()
            .contains("no step progressed for 1 s"),
        "{recorded}"
    );
    let logs = ok(&call(&server, "task_logs_tail", json!({"task_id": task})).await);
    assert!(
        logs.to_string().contains("no step progressed for 1 s"),
        "{logs}"
    );
    // The cancelled step is recorded failed, and nothing succeeded.
    let (state, _) = crate::support::fold_log(dir.path());
    let recorded = state.tasks().values().next().expect("the task");
    assert!(recorded.successes.is_empty());
    assert_eq!(recorded.runs[0].failures, 1, "{:?}", recorded.runs[0]);
    server.client.cancel().await.expect("close");

    // With a model that answers in time, a resume completes.
    let quick = ModelServer::start(Script::INSTANT).await;
    let server = start_planb(dir.path(), Some(&quick), &[("PLANB_INACTIVITY_SEC", "1")]).await;
    ok(&call(&server, "task_resume", json!({"task_id": task})).await);
    let done = wait(&server, &task).await;
    assert_eq!(done["state"], "completed", "{done}");
    assert!(
        !error_file.exists(),
        "a completed task has no run_error.json"
    );
    server.client.cancel().await.expect("close");
}

/// The bytes of `path` once the process that recorded a run's end has
/// written it (just after the end is in the log, which status reads first).
async fn written(path: &Path) -> Vec<u8> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match std::fs::read(path) {
            Ok(bytes) => return bytes,
            Err(e) => assert!(
                std::time::Instant::now() < deadline,
                "{}: {e}",
                path.display()
            ),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn run_error_file(dir: &Path, task: &str) -> std::path::PathBuf {
    planb_projections::DataRoot::new(dir)
        .task_dir(&planb_core::TaskId::parse(task).expect("id"))
        .join("run_error.json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_server_over_https_answers_once_its_authority_is_trusted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = ModelServer::start(Script::INSTANT).await;
    let front = crate::support::TlsFront::start(dir.path(), model.port);
    let spec = format!("openai:https://127.0.0.1:{}/v1", front.port);

    // The system does not trust the front's authority: the step fails at
    // once (a certificate is not retried), saying why, and no request
    // reaches the model.
    let server = start_planb(dir.path(), None, &[("PLANB_MODEL", &spec)]).await;
    let task = create(&server, "ping").await;
    let failed = wait(&server, &task).await;
    assert_eq!(failed["state"], "failed", "{failed}");
    assert_eq!(failed["error"]["recoverable"], true, "{failed}");
    let logs = ok(&call(&server, "task_logs_tail", json!({"task_id": task})).await);
    let logs = logs.to_string();
    assert!(logs.contains("invalid peer certificate"), "{logs}");
    assert!(logs.contains("SSL_CERT_FILE"), "{logs}");
    assert!(!logs.contains("retrying"), "{logs}");
    assert_eq!(model.requests(), 0);
    server.client.cancel().await.expect("close");

    // Trusted through SSL_CERT_FILE, the resumed run asks the model once.
    let ca = front.ca.to_str().expect("path");
    let server = start_planb(
        dir.path(),
        None,
        &[("PLANB_MODEL", &spec), ("SSL_CERT_FILE", ca)],
    )
    .await;
    ok(&call(&server, "task_resume", json!({"task_id": task})).await);
    let done = wait(&server, &task).await;
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(model.requests(), 1);
    server.client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_model_configured_a_sampling_client_answers_in_process_until_its_server_dies() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = [("PLANB_CONCURRENCY", "2")];
    // Each answer takes 100 ms, so the run is caught halfway.
    let mut server = crate::support::start_sampling(
        dir.path(),
        &env,
        scripted_answer,
        Duration::from_millis(100),
    )
    .await;
    let task = create(&server, "fast").await;
    until_completed(&server, &task, 3).await;
    // The run is this server's: no worker process, no worker log.
    let (state, _) = crate::support::fold_log(dir.path());
    let run = state.tasks().values().next().expect("task").runs[0].clone();
    assert_eq!(run.owner_pid, server.pid);
    let task_id = planb_core::TaskId::parse(&task).expect("id");
    assert!(
        !planb_projections::DataRoot::new(dir.path())
            .task_dir(&task_id)
            .join("worker.log")
            .exists()
    );
    let mut asked = 0;
    while server.seen.samples.try_recv().is_ok() {
        asked += 1;
    }
    assert!(asked >= 3, "{asked} prompts reached the client");

    // Its server dies: the run is a recoverable worker error.
    server.kill_9();
    let mut server =
        crate::support::start_sampling(dir.path(), &env, scripted_answer, Duration::ZERO).await;
    let failed = until_settled(&server, &task).await;
    assert_eq!(failed["state"], "failed", "{failed}");
    assert_eq!(failed["error"]["failure_reason"], "worker_error");
    assert_eq!(failed["error"]["recoverable"], true);
    // Resumed from another window, its client's model finishes the run,
    // asked only for the steps not done before.
    let runs = resume_reruns_nothing_done(&server, dir.path(), &task).await;
    let mut asked = 0;
    while server.seen.samples.try_recv().is_ok() {
        asked += 1;
    }
    let pipeline = planb_core::pipelines::project_plan();
    let model_steps = runs[1]
        .iter()
        .filter(|s| {
            pipeline
                .step(&StepId::parse(s).expect("id"))
                .is_some_and(|step| matches!(step.action, planb_core::dag::Action::Model { .. }))
        })
        .count();
    assert_eq!(
        asked, model_steps,
        "one prompt per model step of the second run"
    );
    let report = ok(&call(
        &server,
        "task_file_info",
        json!({"task_id": task, "artifact": "report"}),
    )
    .await);
    assert!(report["size"].as_u64().unwrap_or(0) > 0, "{report}");
    server.client.cancel().await.expect("close");

    // A client without sampling still gets MODEL_NOT_CONFIGURED.
    let bare = start_planb(dir.path(), None, &[]).await;
    let refused = call(&bare, "task_create", json!({"prompt": PROMPT})).await;
    assert_eq!(error_code(&refused), "MODEL_NOT_CONFIGURED");
    bare.client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_page_through_every_task_newest_first() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = ModelServer::start(Script::INSTANT).await;
    let server = start_planb(dir.path(), Some(&model), &[]).await;
    // Four fast tasks: a report, a zip and an artifact per step each, more
    // than one page of 100.
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let task = create(&server, "fast").await;
        completed(&server, dir.path(), &task).await;
        tasks.push(task);
    }
    let per_task = closure_of("build_plan").len() + 2;
    let mut pages = Vec::new();
    let mut all: Vec<String> = Vec::new();
    let mut cursor = None;
    loop {
        let page = server
            .client
            .list_resources(Some(
                rmcp::model::PaginatedRequestParams::default().with_cursor(cursor.clone()),
            ))
            .await
            .expect("a page");
        assert!(page.resources.len() <= 100);
        pages.push(page.resources.len());
        cursor = page.next_cursor.clone();
        all.extend(page.resources.iter().map(|r| r.uri.clone()));
        if cursor.is_none() {
            break;
        }
    }
    assert!(pages.len() >= 2, "{pages:?}");
    assert_eq!(all.len(), 4 * per_task, "{pages:?}");
    let unique: BTreeSet<&String> = all.iter().collect();
    assert_eq!(unique.len(), all.len(), "a resource listed twice");
    // Newest task first, each task's resources together.
    let order = tasks_order(&all);
    let newest_first: Vec<String> = tasks.iter().rev().cloned().collect();
    assert_eq!(order, newest_first);
    // A cursor the server never gave is refused, naming it.
    let refused = server
        .client
        .list_resources(Some(
            rmcp::model::PaginatedRequestParams::default().with_cursor(Some("later".into())),
        ))
        .await
        .expect_err("a bad cursor");
    assert!(refused.to_string().contains("cursor"), "{refused}");
    server.client.cancel().await.expect("close");
}

/// The task ids of `uris`, in the order they first appear, each once.
fn tasks_order(uris: &[String]) -> Vec<String> {
    let mut order: Vec<String> = Vec::new();
    for uri in uris {
        let task = uri
            .strip_prefix("planb://task/")
            .and_then(|rest| rest.split('/').next())
            .expect("a task uri")
            .to_owned();
        if order.last() != Some(&task) {
            assert!(!order.contains(&task), "{task} split: {uris:?}");
            order.push(task);
        }
    }
    order
}

/// How many tasks the kill test runs, each killed at up to 5 random points
/// (`PLANB_KILL9_TASKS`, default 1; more to soak).
fn killed_tasks() -> usize {
    std::env::var("PLANB_KILL9_TASKS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_at_random_points_a_task_still_ends_as_an_uninterrupted_run_would() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = ModelServer::start(Script {
        delay: Duration::from_millis(25),
        fail_first: 0,
    })
    .await;
    let server = start_planb(dir.path(), Some(&model), &[]).await;
    let reference = create(&server, "fast").await;
    assert_eq!(wait(&server, &reference).await["state"], "completed");

    // Where the kills fall varies from run to run (the seed is printed);
    // every point must be survivable, so the assertions do not depend on it.
    let (seed, mut next) = crate::support::kill_points();
    let mut all_kills = 0;
    for _ in 0..killed_tasks() {
        let task = create(&server, "fast").await;
        let kills = kill_until_completed(&server, dir.path(), &task, &mut next).await;
        check_killed_task(
            dir.path(),
            &task,
            &reference,
            &format!("{kills} kill(s), seed {seed}"),
        );
        all_kills += kills;
    }
    eprintln!(
        "{} task(s) completed after {all_kills} kill(s)",
        killed_tasks()
    );
    server.client.cancel().await.expect("close");
}

/// Kills the task's worker at up to 5 random points, resuming it after
/// each, then waits for it to complete; returns the kills.
async fn kill_until_completed(
    server: &Server,
    dir: &Path,
    task: &str,
    next: &mut impl FnMut(u64) -> u64,
) -> usize {
    let id = planb_core::TaskId::parse(task).expect("id");
    let mut kills = 0;
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(next(200))).await;
        let (state, _) = crate::support::fold_log(dir);
        let run = state.task(&id).and_then(|t| t.runs.last()).cloned();
        let Some(run) = run.filter(|r| r.state == RunState::Running) else {
            break;
        };
        let _ = std::process::Command::new("kill")
            .args(["-9", &run.owner_pid.to_string()])
            .status();
        kills += 1;
        let now = until_settled(server, task).await;
        if now["state"] == "completed" {
            break;
        }
        assert_eq!(now["error"]["failure_reason"], "worker_error", "{now}");
        ok(&call(server, "task_resume", json!({"task_id": task})).await);
    }
    let done = wait(server, task).await;
    assert_eq!(done["state"], "completed", "{done} after {kills} kill(s)");
    kills
}

/// No step that succeeded ran again in a later run of `task`, and its
/// model artifacts are those of `reference`, a run nobody interrupted.
fn check_killed_task(dir: &Path, task: &str, reference: &str, how: &str) {
    let id = planb_core::TaskId::parse(task).expect("id");
    let (state, _) = crate::support::fold_log(dir);
    let recorded = state.task(&id).expect("task");
    let mut succeeded_before: BTreeSet<String> = BTreeSet::new();
    for (run, steps) in recorded.runs.iter().zip(started_by_task_run(dir, &id)) {
        let again: Vec<&String> = steps
            .iter()
            .filter(|s| succeeded_before.contains(*s))
            .collect();
        assert!(
            again.is_empty(),
            "ran again after a kill: {again:?} ({how})"
        );
        succeeded_before.extend(run.succeeded.iter().cloned());
    }
    // The report also shows its own task's creation time: compare the
    // model's artifacts.
    let reference_id = planb_core::TaskId::parse(reference).expect("id");
    let pipeline = planb_core::pipelines::project_plan();
    let artifacts = |t: &planb_core::Task| -> Vec<(String, [u8; 32])> {
        t.successes
            .iter()
            .filter(|(step, _)| {
                pipeline
                    .step(&StepId::parse(step).expect("id"))
                    .is_some_and(|d| matches!(d.action, planb_core::dag::Action::Model { .. }))
            })
            .map(|(step, success)| (step.clone(), success.artifact))
            .collect()
    };
    assert_eq!(
        artifacts(recorded),
        artifacts(state.task(&reference_id).expect("reference")),
        "{how}"
    );
}

/// The steps each run of task `id` started, in run order.
pub(crate) fn started_by_task_run(dir: &Path, id: &planb_core::TaskId) -> Vec<Vec<String>> {
    let mut runs: Vec<(planb_core::RunId, Vec<String>)> = Vec::new();
    for event in planb_tests::logs::events(dir) {
        match event {
            planb_core::EventBody::RunStarted { task, run, .. } if task == *id => {
                runs.push((run, Vec::new()))
            }
            planb_core::EventBody::StepStarted { run, step, .. } => {
                if let Some((_, steps)) = runs.iter_mut().find(|(r, _)| *r == run) {
                    steps.push(step);
                }
            }
            _ => {}
        }
    }
    runs.into_iter().map(|(_, steps)| steps).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_resumes_of_one_task_at_once_start_one_run_and_refuse_the_other() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = ModelServer::start(Script {
        delay: Duration::from_millis(300),
        fail_first: 0,
    })
    .await;
    let first = start_planb(dir.path(), Some(&model), &[]).await;
    let second = start_planb(dir.path(), Some(&model), &[]).await;
    let task = create(&first, "fast").await;
    for round in 1..=3 {
        until_completed(&first, &task, round).await;
        let stopped = ok(&call(&first, "task_stop", json!({"task_id": task})).await);
        assert_eq!(stopped["state"], "stopped", "{stopped}");
        let args = json!({"task_id": task});
        let (a, b) = tokio::join!(
            call(&first, "task_resume", args.clone()),
            call(&second, "task_resume", args.clone())
        );
        let answers = [&a, &b].map(|r| {
            if r.is_error == Some(true) {
                error_code(r)
            } else {
                structured(r)["state"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            }
        });
        let mut sorted = answers.clone();
        sorted.sort();
        assert_eq!(
            sorted,
            ["RUN_ALREADY_ACTIVE", "running"],
            "round {round}: {answers:?}"
        );
        let (state, _) = crate::support::fold_log(dir.path());
        let runs = state.tasks().values().next().expect("task").runs.len();
        assert_eq!(
            runs,
            round as usize + 1,
            "round {round}: one run per resume"
        );
    }
    let done = wait(&second, &task).await;
    assert_eq!(done["state"], "completed", "{done}");
    // An earlier run answers for itself; an id of no run of the task is
    // RUN_NOT_FOUND, a malformed one INVALID_ARGUMENT.
    let (state, _) = crate::support::fold_log(dir.path());
    let earliest = state.tasks().values().next().expect("task").runs[0]
        .id
        .to_string();
    let then = ok(&call(
        &first,
        "task_status",
        json!({"task_id": task, "run_id": earliest}),
    )
    .await);
    assert_eq!(then["state"], "stopped", "{then}");
    assert_eq!(then["run_id"], earliest.as_str(), "{then}");
    let lines = ok(&call(
        &first,
        "task_logs_tail",
        json!({"task_id": task, "run_id": earliest, "max_lines": 500}),
    )
    .await);
    let runs: std::collections::BTreeSet<&str> = lines["lines"]
        .as_array()
        .expect("lines")
        .iter()
        .filter_map(|l| l["run_id"].as_str())
        .collect();
    assert!(runs.iter().all(|r| *r == earliest), "{lines}");
    let info = ok(&call(
        &first,
        "task_file_info",
        json!({"task_id": task, "run_id": earliest}),
    )
    .await);
    assert!(
        info["note"]
            .as_str()
            .is_some_and(|n| n.contains("latest run")),
        "{info}"
    );
    let elsewhere = "01a00000-0000-7000-8000-000000000000";
    for tool in ["task_status", "task_logs_tail", "task_file_info"] {
        let refused = call(&first, tool, json!({"task_id": task, "run_id": elsewhere})).await;
        assert_eq!(error_code(&refused), "RUN_NOT_FOUND", "{tool}");
        let refused = call(&first, tool, json!({"task_id": task, "run_id": "nope"})).await;
        assert_eq!(error_code(&refused), "INVALID_ARGUMENT", "{tool}");
    }
    first.client.cancel().await.expect("close");
    second.client.cancel().await.expect("close");
}

/// The processes a model script recorded (its own and a child's), each
/// still running (a zombie is not).
fn running(pids_file: &Path) -> Vec<String> {
    std::fs::read_to_string(pids_file)
        .unwrap_or_default()
        .lines()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    let state = stat.rsplit_once(") ")?.1.chars().next()?;
                    Some(state != 'Z')
                })
                .unwrap_or(false)
        })
        .map(str::to_owned)
        .collect()
}

async fn until_none_running(pids_file: &Path, what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let left = running(pids_file);
        if left.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: model processes still running: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_program_and_what_it_started_end_with_its_step_or_its_worker() {
    for (case, timeout) in [("timeout", "2"), ("killed worker", "600")] {
        let dir = tempfile::tempdir().expect("tempdir");
        let pids = dir.path().join("pids");
        // The program starts a child and waits for it: it never answers.
        let script = dir.path().join("model.sh");
        std::fs::write(
            &script,
            format!(
                "echo $$ >> '{0}'\nsleep 1000 &\necho $! >> '{0}'\nwait\n",
                pids.display()
            ),
        )
        .expect("script");
        let spec = format!("command:sh {}", script.display());
        let server = start_planb(
            dir.path(),
            None,
            &[("PLANB_MODEL", &spec), ("PLANB_STEP_TIMEOUT_SEC", timeout)],
        )
        .await;
        let task = create(&server, "ping").await;
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while running(&pids).len() < 2 {
            assert!(std::time::Instant::now() < deadline, "{case}: no program");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Only the first call's processes: a retry may start others.
        let first: Vec<String> = running(&pids).into_iter().take(2).collect();
        std::fs::write(&pids, first.join("\n") + "\n").expect("pids");
        if case == "killed worker" {
            let (state, _) = crate::support::fold_log(dir.path());
            let worker = state.tasks().values().next().expect("task").runs[0].owner_pid;
            let killed = std::process::Command::new("kill")
                .args(["-9", &worker.to_string()])
                .status()
                .expect("kill");
            assert!(killed.success());
        }
        until_none_running(&pids, case).await;
        if case == "timeout" {
            let _ = call(&server, "task_stop", json!({"task_id": task})).await;
        }
        server.client.cancel().await.expect("close");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_prompts_redacted_lists_show_no_prompt_and_the_status_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = ModelServer::start(Script::INSTANT).await;
    let server = start_planb(dir.path(), Some(&model), &[("PLANB_REDACT_PROMPTS", "1")]).await;
    let task = create(&server, "ping").await;
    let listed = ok(&call(&server, "task_list", json!({})).await);
    let text = listed.to_string();
    assert!(!text.contains("bakery"), "{text}");
    assert_eq!(
        listed["tasks"][0]["prompt_summary"], "[prompt redacted]",
        "{listed}"
    );
    let done = wait(&server, &task).await;
    assert!(done["prompt_redacted"].is_string(), "{done}");
    // The run's log carries no prompt text either.
    let logs = ok(&call(
        &server,
        "task_logs_tail",
        json!({"task_id": task, "max_lines": 500}),
    )
    .await);
    assert!(!logs.to_string().contains("bakery"), "{logs}");
    server.client.cancel().await.expect("close");
}

/// What `tool` answers for `task`: its state, or its error code.
async fn answer(server: &Server, tool: &'static str, args: Value) -> String {
    let result = call(server, tool, args).await;
    if result.is_error == Some(true) {
        error_code(&result)
    } else {
        structured(&result)["state"]
            .as_str()
            .unwrap_or("ok")
            .to_owned()
    }
}

/// The ids `task_list` shows, with or without archived tasks.
async fn listed(server: &Server, include_archived: bool) -> Vec<String> {
    let list = ok(&call(
        server,
        "task_list",
        json!({"include_archived": include_archived}),
    )
    .await);
    list["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .map(|t| t["task_id"].as_str().expect("id").to_owned())
        .collect()
}

/// Another server on the same root cannot retry, archive or delete under
/// a live run; each tool answers with its fields; a deleted task's folder
/// put back goes with the next rebuild (what retrying, archiving and
/// deleting do to the task is tested at planb-app: app/tests/app/tasks.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_server_is_refused_under_a_run_and_rebuild_drops_a_deleted_task_s_folder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = ModelServer::start(Script {
        delay: Duration::from_millis(200),
        fail_first: 0,
    })
    .await;
    let first = start_planb(dir.path(), Some(&model), &[]).await;
    let second = start_planb(dir.path(), Some(&model), &[]).await;
    let task = create(&first, "fast").await;
    let args = json!({"task_id": task});
    until_completed(&first, &task, 2).await;
    // Another process cannot retry, archive or delete under a live run.
    for tool in ["task_retry", "task_archive", "task_delete"] {
        assert_eq!(
            answer(&second, tool, args.clone()).await,
            "RUN_ALREADY_ACTIVE",
            "{tool}"
        );
    }
    let stopped = ok(&call(&first, "task_stop", args.clone()).await);
    assert_eq!(stopped["state"], "stopped", "{stopped}");
    assert!(
        stopped["steps_completed"].as_u64().unwrap_or(0) >= 2,
        "{stopped}"
    );
    let retried = ok(&call(&second, "task_retry", args.clone()).await);
    assert_eq!(retried["state"], "running", "{retried}");
    assert_eq!(retried["runs"], 2, "{retried}");
    completed(&second, dir.path(), &task).await;
    let earlier = ok(&call(
        &first,
        "task_status",
        json!({"task_id": task, "run_id": stopped["run_id"]}),
    )
    .await);
    assert_eq!(earlier["state"], "stopped", "{earlier}");
    let archived = ok(&call(&first, "task_archive", args.clone()).await);
    assert_eq!(archived["lifecycle"], "archived", "{archived}");
    assert_eq!(archived["state"], "completed", "{archived}");
    assert!(archived["archived_at"].is_string(), "{archived}");
    assert!(listed(&first, false).await.is_empty());
    assert_eq!(listed(&first, true).await, vec![task.clone()]);
    assert_eq!(status(&second, &task).await["lifecycle"], "archived");
    let report = ok(&call(
        &second,
        "task_file_info",
        json!({"task_id": task, "artifact": "report"}),
    )
    .await);
    assert!(report["path"].is_string(), "{report}");
    let folder = dir.path().join("tasks").join(&task);
    assert!(folder.is_dir());
    let deleted = ok(&call(&second, "task_delete", args.clone()).await);
    assert_eq!(deleted["lifecycle"], "deleted", "{deleted}");
    assert!(!folder.exists(), "{}", folder.display());
    assert_eq!(
        answer(&first, "task_status", args.clone()).await,
        "TASK_NOT_FOUND"
    );
    first.client.cancel().await.expect("close");
    second.client.cancel().await.expect("close");
    // A folder of a deleted task found later (a copy put back) goes with
    // the next rebuild.
    std::fs::create_dir_all(&folder).expect("folder");
    std::fs::write(folder.join("01-intake.md"), "old").expect("file");
    let rebuilt = crate::support::planb(dir.path(), &["rebuild"]);
    assert!(
        rebuilt.status.success(),
        "{}",
        crate::support::all_output(&rebuilt)
    );
    assert!(!folder.exists(), "{}", folder.display());
}

/// With `--project-servers`, a task's detached worker calls the project's
/// servers (its `.mcp.json`) as the server that started it would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_calls_the_project_s_servers_as_its_server_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pipelines = dir.path().join("pipelines");
    std::fs::create_dir_all(&pipelines).expect("pipelines");
    let pipeline = json!({"name": "scout", "version": 1, "steps": [
        {"id": "intake", "title": "Intake", "model": {"prompt": "Restate the goal: {{prompt}}"}},
        {"id": "lookup", "title": "Look it up", "needs": ["intake"],
         "tool": {"server": "alpha", "tool": "echo", "args": {"text": "${intake}"}}},
        {"id": "report", "title": "Report", "needs": ["intake", "lookup"], "render": "report"}
    ]});
    std::fs::write(pipelines.join("scout.json"), pipeline.to_string()).expect("pipeline");
    // The project's servers only: the data root has no servers file.
    let calls = dir.path().join("calls");
    let project = json!({"mcpServers": {"alpha": {
        "command": crate::support::downstream_binary(), "args": ["alpha"],
        "env": {"DOWNSTREAM_CALLS": calls}}}});
    std::fs::write(dir.path().join(".mcp.json"), project.to_string()).expect(".mcp.json");
    let model = ModelServer::start(Script::INSTANT).await;
    let env = [("PLANB_MODEL", model.spec())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let server = crate::support::start_with(
        dir.path(),
        UrlAnswer::NotSupported,
        None,
        &env,
        &["--project-servers"],
    )
    .await;
    let created = ok(&call(
        &server,
        "task_create",
        json!({"prompt": PROMPT, "speed_vs_detail": "fast", "pipeline": "scout", "target": "report"}),
    )
    .await);
    let task = created["task_id"].as_str().expect("task_id");
    completed(&server, dir.path(), task).await;
    let made = planb_tests::plans::calls(&calls);
    assert_eq!(made.len(), 1, "{made:?}");
    assert_eq!(made[0]["tool"], "echo");
}

/// planb-mcp replaced while a server runs (an upgrade): the server's task
/// workers are still the program it runs, not a file that is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_whose_binary_was_replaced_still_starts_its_workers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = tempfile::tempdir().expect("bin dir");
    let binary = bin.path().join("planb-mcp");
    std::fs::copy(env!("CARGO_BIN_EXE_planb-mcp"), &binary).expect("copy the binary");
    let model = ModelServer::start(Script::INSTANT).await;
    let spec = model.spec();
    let env = [
        ("PLANB_MODEL", spec.as_str()),
        ("PLANB_MODEL_NAME", "scripted"),
    ];
    let server = crate::support::start_binary(&binary, dir.path(), &env).await;
    std::fs::remove_file(&binary).expect("the binary goes");
    let created = call(&server, "task_create", json!({"prompt": PROMPT})).await;
    let task = ok(&created)["task_id"].as_str().expect("id").to_owned();
    completed(&server, dir.path(), &task).await;
    server.client.cancel().await.expect("close");
}

/// A `command:` model that leaves something running in the background with
/// its output (`sleep 600 &`): its answer counts once it has ended, and
/// what it left goes with its group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_program_that_leaves_a_child_holding_its_output_still_answers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("model.sh");
    let body =
        "#!/bin/sh\ncat > /dev/null\necho '## Intake'\necho 'The goal, restated.'\nsleep 600 &\n";
    std::fs::write(&script, body).expect("script");
    let spec = format!("command:sh {}", script.display());
    let env = [
        ("PLANB_MODEL", spec.as_str()),
        ("PLANB_STEP_TIMEOUT_SEC", "60"),
    ];
    let server = start_planb(dir.path(), None, &env).await;
    let created = call(&server, "task_create", json!({"prompt": PROMPT})).await;
    let task = ok(&created)["task_id"].as_str().expect("id").to_owned();
    completed(&server, dir.path(), &task).await;
    server.client.cancel().await.expect("close");
}

/// A sampling request planb no longer waits for is cancelled at the
/// client (`notifications/cancelled`), so its model stops and the person
/// is not left with a request nobody reads: at the step's timeout, and
/// when the run is stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sampling_request_no_longer_waited_for_is_cancelled_at_the_client() {
    let dir = tempfile::tempdir().expect("tempdir");
    let never = Duration::from_secs(600);
    let env = [("PLANB_STEP_TIMEOUT_SEC", "1")];
    let mut server = crate::support::start_sampling(dir.path(), &env, scripted_answer, never).await;
    create(&server, "fast").await;
    let reason = tokio::time::timeout(Duration::from_secs(60), server.seen.cancelled.recv())
        .await
        .expect("a cancellation within a minute")
        .expect("channel open");
    assert!(reason.contains("timeout"), "{reason}");
    server.client.cancel().await.expect("close");

    let mut server = crate::support::start_sampling(dir.path(), &[], scripted_answer, never).await;
    let task = create(&server, "fast").await;
    // The run waits on the client's model; stopping it drops the request.
    let running = until_completed(&server, &task, 0).await;
    assert_eq!(running["state"], "running", "{running}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        server.seen.cancelled.try_recv().is_err(),
        "nothing cancelled yet"
    );
    ok(&call(&server, "task_stop", json!({"task_id": task})).await);
    let reason = tokio::time::timeout(Duration::from_secs(30), server.seen.cancelled.recv())
        .await
        .expect("a cancellation once the run stopped")
        .expect("channel open");
    assert!(reason.contains("stopped"), "{reason}");
    server.client.cancel().await.expect("close");
}
