//! The task pages over a real data root: task events recorded through
//! `planb_projections::Store` with the built-in pipeline's real input hashes,
//! artifacts in the real blob store, pages requested through the router; and
//! the task scrubber driven with the keyboard in headless Chromium against
//! the real `planb-retro` binary.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::oneshot::{PORT, check};
use axum::http::StatusCode;
use fantoccini::key::Key;
use planb_core::dag::{Pipeline, StepId};
use planb_core::pipelines;
use planb_core::state::ContentHash;
use planb_core::{Command, RunId, RunOutcome, TaskId, Timestamp};
use planb_projections::{DataRoot, FixedEnvironment, Store};
use planb_retro::{AppState, Retro, app};
use uuid::Uuid;

const INTAKE: &str = "## Goal\n\nOpen a bakery in Lyon.\n";
const INTAKE_EDITED: &str = "## Goal\n\nOpen a bakery in Lyon by June.\n";

struct Fixture {
    _dir: tempfile::TempDir,
    root: DataRoot,
    task: TaskId,
    /// The cursor right after intake succeeded.
    intake_done: u64,
}

/// The input hash the worker would start `step` of `task` on, from what is
/// recorded now.
fn worker_input(store: &Store, pipeline: &Pipeline, task: TaskId, step: &StepId) -> [u8; 32] {
    let found = store
        .read(|s| s.task(&task).cloned())
        .expect("read")
        .expect("task");
    let artifacts: BTreeMap<StepId, ContentHash> = found
        .successes
        .iter()
        .map(|(s, v)| (StepId::parse(s).expect("id"), ContentHash(v.artifact)))
        .collect();
    pipeline
        .input_hash(&planb_core::progress::context(&found), step, &artifacts)
        .expect("a step")
        .0
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = DataRoot::new(dir.path());
    let env = Arc::new(FixedEnvironment::new(Timestamp(1_700_000_000_000), 1_000));
    let (store, _) = Store::open(root.clone(), env).expect("open store");
    let task = TaskId::from_uuid(Uuid::new_v4());
    let run = RunId::from_uuid(Uuid::new_v4());
    let pipeline = pipelines::project_plan();
    store
        .execute(Command::CreateTask {
            task,
            pipeline: pipeline.name().into(),
            pipeline_version: pipeline.version(),
            prompt: "Open a neighbourhood bakery in Lyon".into(),
            speed: "fast".into(),
            target: "build_plan".into(),
            model_profile: None,
            client_request_id: None,
            project_path: None,
        })
        .expect("create");
    store
        .execute(Command::StartRun {
            task,
            run,
            resumed_from: None,
            owner_pid: 4242,
            host: "test".into(),
            variables: None,
        })
        .expect("start run");
    // Each step starts on the input hash the worker would compute.
    let input =
        |step: &str| worker_input(&store, &pipeline, task, &StepId::parse(step).expect("id"));
    let blobs = root.blobs();
    let intake_input = input("intake");
    store
        .execute(Command::StartStep {
            task,
            run,
            step: "intake".into(),
            input: intake_input,
            call: None,
        })
        .expect("start intake");
    let intake = blobs.put(INTAKE.as_bytes()).expect("blob");
    let events = store
        .execute(Command::SucceedStep {
            task,
            run,
            step: "intake".into(),
            input: intake_input,
            artifact: intake,
            bytes: INTAKE.len() as u64,
            duration_ms: 12,
            tokens_in: 30,
            tokens_out: 20,
        })
        .expect("intake done");
    let intake_done = events.last().expect("an event").cursor.0;
    store
        .execute(Command::StartStep {
            task,
            run,
            step: "purpose".into(),
            input: input("purpose"),
            call: None,
        })
        .expect("start purpose");
    store
        .execute(Command::FailStep {
            task,
            run,
            step: "purpose".into(),
            class: "model_timeout".into(),
            message: "the model did not answer within 600 s".into(),
            recoverable: true,
        })
        .expect("purpose failed");
    store
        .execute(Command::AppendRunLog {
            task,
            run,
            lines: vec!["step purpose failed: the model did not answer".into()],
        })
        .expect("log");
    store
        .execute(Command::EndRun {
            task,
            run,
            outcome: RunOutcome::Failed,
            reason: Some("model_timeout".into()),
            failed_step: Some("purpose".into()),
            recoverable: true,
        })
        .expect("end");
    let edited = blobs.put(INTAKE_EDITED.as_bytes()).expect("blob");
    store
        .execute(Command::EditArtifact {
            task,
            step: "intake".into(),
            artifact: edited,
            bytes: INTAKE_EDITED.len() as u64,
            by: "hand edit of 01-intake.md".into(),
        })
        .expect("edit");
    Fixture {
        _dir: dir,
        root,
        task,
        intake_done,
    }
}

/// A data root with the execution plan `plan` recorded, as `plan create`
/// records one: the root's directory, the root, its store and the plan's id.
fn plan_root(plan: serde_json::Value) -> (tempfile::TempDir, DataRoot, Store, TaskId) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = DataRoot::new(dir.path());
    let env = Arc::new(FixedEnvironment::new(Timestamp(1_700_000_000_000), 1_000));
    let (store, _) = Store::open(root.clone(), env).expect("open store");
    let plan = planb_core::exec_plan::ExecPlan::from_json(&plan).expect("plan");
    let task = TaskId::from_uuid(Uuid::new_v4());
    store
        .execute(Command::CreatePlan {
            task,
            definition: plan.to_json().to_string(),
            client_request_id: None,
            project_path: None,
        })
        .expect("create plan");
    (dir, root, store, task)
}

/// The cursors of `task`'s events, as planb-retro counts them.
fn task_cursors(root: &DataRoot, task: &TaskId) -> Vec<u64> {
    let (retro, mut follower) = Retro::open(root);
    follower.poll(&retro);
    let timeline = retro.timeline();
    timeline.task_cursors(task).iter().map(|c| c.0).collect()
}

fn router(root: &DataRoot) -> axum::Router {
    let (retro, mut follower) = Retro::open(root);
    follower.poll(&retro);
    app(AppState { retro, port: PORT })
}

#[tokio::test]
async fn the_index_lists_tasks_and_a_task_shows_its_dag_runs_and_log() {
    let f = fixture();
    let router = router(&f.root);
    let task = f.task.to_string();
    check(
        &router,
        "/",
        StatusCode::OK,
        &[
            "Tasks",
            &format!("href=\"/tasks/{task}\""),
            "Open a neighbourhood bakery in Lyon",
            "task-failed",
        ],
    )
    .await;
    let end = check(
        &router,
        &format!("/tasks/{task}"),
        StatusCode::OK,
        &[
            "Goal and constraints",
            "model_timeout",
            "step purpose failed: the model did not answer",
            "worker pid 4242",
            "intake edited by hand edit of 01-intake.md",
            "data-live=\"/events\"",
        ],
    )
    .await;
    // At the end: intake was edited, purpose failed, the rest never ran.
    assert!(
        end.contains("data-step=\"intake\"") && end.contains("edited (hand edit of 01-intake.md)")
    );
    assert!(
        end.contains("class=\"dag-step is-failed\" data-step=\"purpose\""),
        "{end}"
    );
    assert!(
        end.contains("class=\"dag-step is-pending\" data-step=\"assumptions\""),
        "{end}"
    );
    // Progress as the agent is told it, and steps outside the run's target
    // said to be so rather than waiting.
    assert!(end.contains(" of 25 steps · "), "{end}");
    assert!(
        end.contains("class=\"dag-step is-outside\"") && end.contains("not in this run's target"),
        "{end}"
    );
    // Back in time: right after intake succeeded, it is done and nothing failed yet.
    let then = check(
        &router,
        &format!("/tasks/{task}?at={}", f.intake_done),
        StatusCode::OK,
        &[
            "done in 12 ms",
            "State: <strong class=\"task-running\">running</strong> · 1 of 25 steps · 4 % · 0:0",
        ],
    )
    .await;
    assert!(!then.contains("is-failed"), "{then}");
    assert!(
        !then.contains("data-live"),
        "a past position does not follow the log"
    );
}

#[tokio::test]
async fn an_archived_then_deleted_task_keeps_its_replay_marked_so() {
    let f = fixture();
    let env = Arc::new(FixedEnvironment::new(Timestamp(1_700_000_100_000), 1_000));
    let (store, _) = Store::open(f.root.clone(), env).expect("open store");
    let task = f.task.to_string();
    store
        .execute(Command::ArchiveTask { task: f.task })
        .expect("archive");
    check(&router(&f.root), "/", StatusCode::OK, &[">archived<"]).await;
    store
        .execute(Command::DeleteTask { task: f.task })
        .expect("delete");
    let router = router(&f.root);
    let index = check(&router, "/", StatusCode::OK, &[">deleted<"]).await;
    assert!(
        index.contains(&format!("href=\"/tasks/{task}\"")),
        "{index}"
    );
    check(
        &router,
        &format!("/tasks/{task}"),
        StatusCode::OK,
        &[
            ">deleted<",
            "task archived",
            "task deleted",
            "model_timeout",
        ],
    )
    .await;
}

#[tokio::test]
async fn a_step_shows_its_rebuilt_prompt_its_answer_and_its_versions() {
    let f = fixture();
    let router = router(&f.root);
    let task = f.task.to_string();
    // purpose read intake's first artifact; the rebuilt prompt holds it and
    // hashes to what the start recorded.
    check(
        &router,
        &format!("/tasks/{task}/steps/purpose"),
        StatusCode::OK,
        &[
            "Open a bakery in Lyon.",
            "they hash to what the run recorded",
            "model_timeout: the model did not answer within 600 s",
            "No artifact by this point.",
        ],
    )
    .await;
    let intake = check(
        &router,
        &format!("/tasks/{task}/steps/intake"),
        StatusCode::OK,
        &[
            "Open a bakery in Lyon by June.",
            "edited: hand edit of 01-intake.md",
            "Changes from version 1",
        ],
    )
    .await;
    assert!(intake.contains("run "), "the first version names its run");
    // Before the edit there was one version and no diff.
    check(
        &router,
        &format!("/tasks/{task}/steps/intake?at={}", f.intake_done),
        StatusCode::OK,
        &["Open a bakery in Lyon."],
    )
    .await;
}

#[tokio::test]
async fn bad_task_addresses_are_pages_with_their_status() {
    let f = fixture();
    let router = router(&f.root);
    let task = f.task.to_string();
    check(
        &router,
        "/tasks/nope",
        StatusCode::BAD_REQUEST,
        &["Bad task id", "malformed"],
    )
    .await;
    let unknown = TaskId::from_uuid(Uuid::new_v4());
    check(
        &router,
        &format!("/tasks/{unknown}"),
        StatusCode::NOT_FOUND,
        &["no task"],
    )
    .await;
    check(
        &router,
        &format!("/tasks/{task}/steps/../../etc"),
        StatusCode::NOT_FOUND,
        &[],
    )
    .await;
    check(
        &router,
        &format!("/tasks/{task}/steps/nonesuch"),
        StatusCode::NOT_FOUND,
        &["Step not found", "is not in pipeline project-plan"],
    )
    .await;
    check(
        &router,
        &format!("/tasks/{task}?at=999999"),
        StatusCode::NOT_FOUND,
        &["past the end of the log"],
    )
    .await;
    // The scrubber moves by position among the task's events: the page
    // redirects a position to its event's cursor, past the last to the last.
    let cursors = task_cursors(&f.root, &f.task);
    for (pos, cursor) in [
        (0, cursors[0]),
        (2, cursors[2]),
        (999_999, cursors[cursors.len() - 1]),
    ] {
        assert_eq!(
            crate::oneshot::redirect(&router, &format!("/tasks/{task}?pos={pos}")).await,
            format!("/tasks/{task}?at={cursor}")
        );
    }
    check(
        &router,
        &format!("/tasks/{task}?pos=first"),
        StatusCode::BAD_REQUEST,
        &["pos: &quot;first&quot; is not a number"],
    )
    .await;
}

/// An execution plan run recorded as `planb-mcp plan run` records one:
/// each call and result in the blob store, named by its step's events.
#[tokio::test]
async fn a_plan_run_shows_its_dag_over_time_and_each_call_with_its_result() {
    let (_dir, root, store, task) = plan_root(
        serde_json::json!({"title": "Greet and add", "steps": [
        {"index": "1", "title": "Greet", "tool": "alpha__echo", "args": {"text": "hi ${who}"}, "result_variable": "g"},
        {"index": "2", "title": "Add", "tool": "alpha__add", "args": {"a": 1, "b": "${g}"}, "depends_on": ["1"]}
    ], "variables": {"who": "Ada"}}),
    );
    let run = RunId::from_uuid(Uuid::new_v4());
    store
        .execute(Command::StartRun {
            task,
            run,
            resumed_from: None,
            owner_pid: 77,
            host: "test".into(),
            variables: Some("{}".into()),
        })
        .expect("start run");
    let blobs = root.blobs();
    let call = br#"{"tool":"alpha__echo","args":{"text":"hi Ada"}}"#;
    let call_hash = blobs.put(call).expect("call blob");
    let input = ContentHash::of_bytes(call).0;
    let started = store
        .execute(Command::StartStep {
            task,
            run,
            step: "1".into(),
            input,
            call: Some(call_hash),
        })
        .expect("start 1");
    let running_at = started.last().expect("event").cursor.0;
    let result = blobs
        .put(br#"{"greeting":"hello from alpha"}"#)
        .expect("result blob");
    store
        .execute(Command::SucceedStep {
            task,
            run,
            step: "1".into(),
            input,
            artifact: result,
            bytes: 31,
            duration_ms: 3,
            tokens_in: 0,
            tokens_out: 0,
        })
        .expect("1 done");
    let call2 = br#"{"tool":"alpha__add","args":{"a":1,"b":"hi Ada"}}"#;
    store
        .execute(Command::StartStep {
            task,
            run,
            step: "2".into(),
            input: ContentHash::of_bytes(call2).0,
            call: Some(blobs.put(call2).expect("blob")),
        })
        .expect("start 2");
    store
        .execute(Command::FailStep {
            task,
            run,
            step: "2".into(),
            class: "tool_error".into(),
            message: "b: not a number".into(),
            recoverable: true,
        })
        .expect("2 failed");
    store
        .execute(Command::EndRun {
            task,
            run,
            outcome: RunOutcome::Failed,
            reason: Some("step_failed".into()),
            failed_step: Some("2".into()),
            recoverable: true,
        })
        .expect("end");
    let ended = store.read(|s| s.last_cursor()).expect("read").0;
    // A second run from the start, ended before it reached any step.
    let second = RunId::from_uuid(Uuid::new_v4());
    store
        .execute(Command::StartRun {
            task,
            run: second,
            resumed_from: None,
            owner_pid: 78,
            host: "test".into(),
            variables: Some("{}".into()),
        })
        .expect("second run");
    store
        .execute(Command::EndRun {
            task,
            run: second,
            outcome: RunOutcome::Failed,
            reason: Some("worker_error: killed".into()),
            failed_step: None,
            recoverable: true,
        })
        .expect("second run ended");
    store.execute(Command::DeletePlan { task }).expect("delete");
    drop(store);

    let router = router(&root);
    let id = task.to_string();
    let end = check(
        &router,
        &format!("/tasks/{id}?at={ended}"),
        StatusCode::OK,
        &[
            "Greet and add",
            "failed</strong> · 1 of 2 steps · 50 % · ",
            "● 1. Greet",
            "✗ 2. Add",
            "← after: 1",
            "alpha__add",
            "execution plan created: Greet and add",
        ],
    )
    .await;
    assert!(
        end.contains("class=\"dag-step is-failed\" data-step=\"2\""),
        "{end}"
    );
    let then = check(
        &router,
        &format!("/tasks/{id}?at={running_at}"),
        StatusCode::OK,
        &["◉ 1. Greet", "○ 2. Add"],
    )
    .await;
    assert!(!then.contains("is-failed"), "{then}");
    // The second run starts over: no step keeps a mark of the first, and
    // the deleted plan says so.
    let latest = check(
        &router,
        &format!("/tasks/{id}"),
        StatusCode::OK,
        &[
            "○ 1. Greet",
            "○ 2. Add",
            "deleted",
            "execution plan deleted",
        ],
    )
    .await;
    assert!(!latest.contains("is-failed"), "{latest}");
    let step_page = check(
        &router,
        &format!("/tasks/{id}/steps/1?at={ended}"),
        StatusCode::OK,
        &[
            "Arguments as written",
            "hi ${who}",
            "&quot;text&quot;: &quot;hi Ada&quot;",
        ],
    )
    .await;
    let result_shown = step_page
        .split("class=\"plan-result\"")
        .nth(1)
        .expect("a result block");
    assert!(
        result_shown.contains("&quot;greeting&quot;: &quot;hello from alpha&quot;"),
        "{step_page}"
    );
    check(
        &router,
        &format!("/tasks/{id}/steps/2?at={ended}"),
        StatusCode::OK,
        &[
            "tool_error: b: not a number",
            "&quot;b&quot;: &quot;hi Ada&quot;",
        ],
    )
    .await;
    check(
        &router,
        &format!("/tasks/{id}/steps/9"),
        StatusCode::NOT_FOUND,
        &["is not in plan"],
    )
    .await;
}

/// A plan run many times: a step's page shows its latest calls, with
/// their results read from the log, and links back to the earlier ones.
#[tokio::test]
async fn a_step_called_in_many_runs_shows_its_latest_calls_and_links_to_earlier_ones() {
    let (_dir, root, store, task) =
        plan_root(serde_json::json!({"title": "Again and again", "steps": [
            {"index": "1", "title": "Echo", "tool": "alpha__echo", "args": {"text": "${n}"}}
        ]}));
    let shown = planb_retro::CALLS_SHOWN;
    let runs_shown = planb_ui::pages::RUNS_SHOWN;
    let runs = shown.max(runs_shown) + 5;
    for n in 1..=runs {
        let run = RunId::from_uuid(Uuid::new_v4());
        store
            .execute(Command::StartRun {
                task,
                run,
                resumed_from: None,
                owner_pid: 77,
                host: "test".into(),
                variables: Some(format!("{{\"n\":\"call {n}\"}}")),
            })
            .expect("start run");
        let call = format!(r#"{{"tool":"alpha__echo","args":{{"text":"call {n}"}}}}"#).into_bytes();
        let result = format!(r#""echoed {n}""#).into_bytes();
        let input = ContentHash::of_bytes(&call).0;
        let artifact = ContentHash::of_bytes(&result).0;
        store
            .execute(Command::SettleAndStart {
                task,
                run,
                ends: Vec::new(),
                starts: vec![planb_core::StepStart {
                    step: "1".into(),
                    input,
                    call: Some(input),
                }],
                inline: vec![call],
            })
            .expect("start");
        store
            .execute(Command::SettleAndStart {
                task,
                run,
                ends: vec![Command::SucceedStep {
                    task,
                    run,
                    step: "1".into(),
                    input,
                    artifact,
                    bytes: result.len() as u64,
                    duration_ms: 1,
                    tokens_in: 0,
                    tokens_out: 0,
                }],
                starts: Vec::new(),
                inline: vec![result],
            })
            .expect("succeed");
        store
            .execute(Command::EndRun {
                task,
                run,
                outcome: RunOutcome::Completed,
                reason: None,
                failed_step: None,
                recoverable: false,
            })
            .expect("end");
    }
    drop(store);
    let router = router(&root);
    let id = task.to_string();
    let page = check(
        &router,
        &format!("/tasks/{id}/steps/1"),
        StatusCode::OK,
        &[
            &format!("{} earlier ones are not shown", runs - shown),
            &format!("&quot;text&quot;: &quot;call {}&quot;", runs - shown + 1),
            &format!("&quot;echoed {runs}&quot;"),
        ],
    )
    .await;
    assert_eq!(page.matches("class=\"plan-result\"").count(), shown);
    let last_hidden = format!("&quot;call {}&quot;", runs - shown);
    assert!(!page.contains(&last_hidden), "an earlier call shown");
    let earlier = page
        .split("href=\"")
        .find_map(|rest| {
            let link = &rest[..rest.find('"')?];
            (link.starts_with(&format!("/tasks/{id}/steps/1?at="))
                && rest.contains("\">Earlier calls"))
            .then(|| link.to_owned())
        })
        .filter(|link| page.contains(&format!("{link}\">Earlier calls")))
        .expect("a link to the earlier calls");
    // As of just before the first call shown: the calls before it.
    let before = check(
        &router,
        &earlier,
        StatusCode::OK,
        &[
            &last_hidden,
            &format!("&quot;echoed {}&quot;", runs - shown),
        ],
    )
    .await;
    assert_eq!(
        before.matches("class=\"plan-result\"").count(),
        shown.min(runs - shown)
    );
    // The task's page lists the latest runs.
    check(
        &router,
        &format!("/tasks/{id}"),
        StatusCode::OK,
        &[&format!(
            "The {runs_shown} latest of {runs} runs by this point."
        )],
    )
    .await;
}

#[tokio::test]
#[ignore = "slow: drives Chromium; scripts/test runs it"]
async fn the_task_scrubber_moved_with_the_keyboard_shows_each_step_as_of_each_event() {
    let f = fixture();
    let task = f.task.to_string();
    let server = crate::support::RetroServer::start(f.root.root()).await;
    let browser = planb_tests::browser::Browser::start().await;
    browser.open(&server.url(&format!("/tasks/{task}"))).await;
    let state = |step: &str| format!("document.querySelector('[data-step=\"{step}\"]').className");
    let context = "document.querySelector('#task-scrubber').innerText + ' | ' + \
                   [...document.querySelectorAll('.dag-step')].slice(0, 3).map(e => e.dataset.step + ':' + e.className).join(' ')";
    // At the latest event: intake edited, purpose failed.
    browser
        .wait_until_or_show(
            "the latest state",
            &format!("{}.includes('is-edited')", state("intake")),
            context,
        )
        .await;
    assert!(
        browser
            .string(&state("purpose"))
            .await
            .contains("is-failed")
    );
    // The page carries no list of cursors: the scrubber moves by position
    // and the server redirects each position to its event's cursor.
    assert_eq!(
        browser
            .string("String(document.querySelector('#task-scrubber').dataset.cursors)")
            .await,
        "undefined"
    );
    let cursors = task_cursors(&f.root, &f.task);
    assert!(cursors.len() >= 6, "{cursors:?}");
    assert!(
        browser
            .string("document.querySelector('#task-scrubber').innerText")
            .await
            .contains(&format!(
                "Event {n} of {n} · log cursor {}",
                cursors[cursors.len() - 1],
                n = cursors.len()
            ))
    );

    // Home: the first event, the task created and nothing run.
    browser.tab_to("task-scrub", false, 12).await;
    browser.press(Key::Home).await;
    browser
        .wait_until_or_show(
            "the first event",
            &format!("location.search === '?at={}'", cursors[0]),
            context,
        )
        .await;
    browser
        .wait_until_or_show(
            "intake not run",
            &format!("{}.includes('is-pending')", state("intake")),
            context,
        )
        .await;
    assert!(
        browser
            .string("document.querySelector('#task-scrubber').innerText")
            .await
            .contains(&format!("Event 1 of {}", cursors.len()))
    );

    // Right, one event at a time, until intake has succeeded: done, and
    // purpose not failed yet.
    let done_at = cursors
        .iter()
        .position(|c| *c == f.intake_done)
        .expect("intake's success among the task's events");
    for cursor in &cursors[1..=done_at] {
        browser.tab_to("task-scrub", false, 12).await;
        browser.press(Key::Right).await;
        browser
            .wait_until_or_show(
                "the next event",
                &format!("location.search === '?at={cursor}'"),
                context,
            )
            .await;
    }
    assert!(browser.string(&state("intake")).await.contains("is-done"));
    assert!(
        !browser
            .string(&state("purpose"))
            .await
            .contains("is-failed")
    );

    // End: back to the latest state.
    browser.tab_to("task-scrub", false, 12).await;
    browser.press(Key::End).await;
    browser
        .wait_until_or_show(
            "the last event",
            &format!("location.search === '?at={}'", cursors[cursors.len() - 1]),
            context,
        )
        .await;
    assert!(browser.string(&state("intake")).await.contains("is-edited"));
    assert!(
        browser
            .string(&state("purpose"))
            .await
            .contains("is-failed")
    );
    browser.close().await;
}

#[tokio::test]
#[ignore = "slow: drives Chromium; scripts/test runs it"]
async fn the_built_in_pipeline_is_drawn_with_an_arrow_per_need_and_fits_the_page() {
    let f = fixture();
    let pipeline = pipelines::project_plan();
    let needs: usize = pipeline.steps().iter().map(|s| s.needs.len()).sum();
    assert!(pipeline.steps().len() >= 20 && needs > pipeline.steps().len());
    // One arrow per need that no other need of the step already leads to.
    let mut before: BTreeMap<&str, std::collections::BTreeSet<&str>> = BTreeMap::new();
    fn upstream<'p>(
        pipeline: &'p planb_core::dag::Pipeline,
        step: &'p str,
        memo: &mut BTreeMap<&'p str, std::collections::BTreeSet<&'p str>>,
    ) -> std::collections::BTreeSet<&'p str> {
        if let Some(set) = memo.get(step) {
            return set.clone();
        }
        let mut set = std::collections::BTreeSet::new();
        for need in &pipeline
            .steps()
            .iter()
            .find(|s| s.id.as_str() == step)
            .expect("step")
            .needs
        {
            set.insert(need.as_str());
            set.extend(upstream(pipeline, need.as_str(), memo));
        }
        memo.insert(step, set.clone());
        set
    }
    let arrows: usize = pipeline
        .steps()
        .iter()
        .map(|step| {
            step.needs
                .iter()
                .filter(|need| {
                    !step.needs.iter().any(|other| {
                        other != *need
                            && upstream(&pipeline, other.as_str(), &mut before)
                                .contains(need.as_str())
                    })
                })
                .count()
        })
        .sum();
    assert!(
        arrows < needs,
        "the built-in pipeline has needs other paths show"
    );
    let server = crate::support::RetroServer::start(f.root.root()).await;
    let browser = planb_tests::browser::Browser::start().await;
    browser
        .open(&server.url(&format!("/tasks/{}", f.task)))
        .await;
    let context = "JSON.stringify(document.querySelector('.dag').getBoundingClientRect())";
    browser
        .wait_until_or_show(
            "the drawing",
            "document.querySelectorAll('.dag-step').length > 0",
            context,
        )
        .await;
    assert_eq!(
        number(&browser, "document.querySelectorAll('.dag-edge').length").await as usize,
        arrows
    );
    assert_eq!(
        number(&browser, "document.querySelectorAll('.dag-step').length").await as usize,
        pipeline.steps().len()
    );
    // No horizontal scrolling, and the drawing inside its card.
    assert!(
        number(
            &browser,
            "document.documentElement.scrollWidth - window.innerWidth"
        )
        .await
            <= 0.0,
        "the page scrolls sideways"
    );
    assert!(
        number(&browser, "document.querySelector('.dag').getBoundingClientRect().right - document.querySelector('main').getBoundingClientRect().right")
        .await
            <= 0.0
    );
    // Every box inside the drawing, none over another.
    let overlaps = "(() => { const r = [...document.querySelectorAll('.dag-step')].map(e => e.getBoundingClientRect()); \
        const d = document.querySelector('.dag').getBoundingClientRect(); let bad = 0; \
        r.forEach((a, i) => { if (a.left < d.left - 1 || a.right > d.right + 1 || a.top < d.top - 1 || a.bottom > d.bottom + 1) bad++; \
          r.forEach((b, j) => { if (i < j && a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1) bad++; }); }); \
        return bad; })()";
    let shown = browser
        .string(
            "JSON.stringify([document.querySelector('.dag').getBoundingClientRect(), \
             ...[...document.querySelectorAll('.dag-step')].slice(0, 4).map(e => [e.dataset.step, e.getBoundingClientRect(), getComputedStyle(e).position])])",
        )
        .await;
    assert_eq!(
        number(&browser, overlaps).await,
        0.0,
        "boxes outside the drawing or over each other: {shown}"
    );
    // No arrow through a box: points along every arrow, in page
    // coordinates, are inside no box (their own ends touch their boxes'
    // edges, so each box is shrunk by 2 px).
    let through = "(() => { const boxes = [...document.querySelectorAll('.dag-graph foreignObject')].map(e => [e.querySelector('.dag-step').dataset.step, e.getBoundingClientRect()]);         const hits = []; for (const path of document.querySelectorAll('.dag-edge')) {           const m = path.getScreenCTM(); const n = path.getTotalLength();           for (let k = 0; k <= 200; k++) { const p = new DOMPoint(path.getPointAtLength(n * k / 200).x, path.getPointAtLength(n * k / 200).y).matrixTransform(m);             for (const [id, b] of boxes) { if (p.x > b.left + 2 && p.x < b.right - 2 && p.y > b.top + 2 && p.y < b.bottom - 2) { hits.push(id); } } } }         return JSON.stringify([...new Set(hits)]); })()";
    assert_eq!(
        browser.string(through).await,
        "[]",
        "arrows through these boxes"
    );
    // No label cut: every box holds its text.
    let cut = "JSON.stringify([...document.querySelectorAll('.dag-step')].filter(e => e.scrollHeight > e.clientHeight + 1 || e.scrollWidth > e.clientWidth + 1).map(e => e.dataset.step))";
    assert_eq!(browser.string(cut).await, "[]", "boxes whose text is cut");
    // The drawing uses the card's width.
    let used = number(
        &browser,
        "document.querySelector('.dag-graph').getBoundingClientRect().width / document.querySelector('.retro-dag').getBoundingClientRect().width",
    )
    .await;
    assert!(
        used >= 0.85,
        "the drawing takes {used:.2} of its section's width"
    );
    browser.close().await;
}

/// The JavaScript `expression`'s value as a number.
async fn number(browser: &planb_tests::browser::Browser, expression: &str) -> f64 {
    browser
        .string(&format!("String({expression})"))
        .await
        .parse()
        .expect("a number")
}

/// A plan re-planned after a failed run links to its revised plan (its
/// step, error and state), and the revised plan says what it revises.
#[tokio::test]
async fn a_re_planned_run_links_to_its_revised_plan_and_back() {
    let (_dir, root, store, task) = plan_root(serde_json::json!({"title": "Fails", "steps": [
        {"index": "1", "title": "Greet", "tool": "alpha__echo", "args": {"text": "hi"}},
        {"index": "2", "title": "Break", "tool": "alpha__fail", "args": {}, "depends_on": ["1"]}
    ]}));
    let run = RunId::from_uuid(Uuid::new_v4());
    let revised = planb_core::exec_plan::ExecPlan::from_json(&serde_json::json!({
        "title": "Fails (revised plan 1)", "steps": [
            {"index": "1", "title": "Instead", "tool": "alpha__echo", "args": {"text": "ok"}}
        ],
        "revises": {"plan": task.to_string(), "run": run.to_string(), "number": 1,
            "step": "2", "error": "it broke"}
    }))
    .expect("revised plan");
    let revised_id = TaskId::from_uuid(Uuid::new_v4());
    store
        .execute(Command::CreatePlan {
            task: revised_id,
            definition: revised.to_json().to_string(),
            client_request_id: None,
            project_path: None,
        })
        .expect("revised plan recorded");
    let router = router(&root);
    let link = format!("href=\"/tasks/{revised_id}\"");
    check(
        &router,
        &format!("/tasks/{task}"),
        StatusCode::OK,
        &[
            "<h2>Re-planned</h2>",
            "Step 2 failed: it broke",
            &link,
            "revised plan 1",
            "not run",
        ],
    )
    .await;
    let back = format!("href=\"/tasks/{task}\"");
    check(
        &router,
        &format!("/tasks/{revised_id}"),
        StatusCode::OK,
        &[
            "Revised plan 1 of",
            &back,
            "made when its run failed at step 2: it broke",
        ],
    )
    .await;
}

/// After an edit of the first artifact, every recorded step downstream of it
/// is out of date on the replay, as the worker will do each again: not only
/// the steps that read the edited artifact themselves.
#[tokio::test]
async fn an_edit_puts_out_of_date_every_step_the_worker_will_run_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = DataRoot::new(dir.path());
    let env = Arc::new(FixedEnvironment::new(Timestamp(1_700_000_000_000), 1_000));
    let (store, _) = Store::open(root.clone(), env).expect("open store");
    let pipeline = pipelines::project_plan();
    let (task, run) = (
        TaskId::from_uuid(Uuid::new_v4()),
        RunId::from_uuid(Uuid::new_v4()),
    );
    let created = Command::CreateTask {
        task,
        pipeline: pipeline.name().into(),
        pipeline_version: pipeline.version(),
        prompt: "Open a bakery".into(),
        speed: "fast".into(),
        target: "build_plan".into(),
        model_profile: None,
        client_request_id: None,
        project_path: None,
    };
    store.execute(created).expect("create");
    let start = Command::StartRun {
        task,
        run,
        resumed_from: None,
        owner_pid: 1,
        host: "t".into(),
        variables: None,
    };
    store.execute(start).expect("run");
    let target = StepId::parse("build_plan").expect("id");
    // The first eight steps a run can do, each done on what it read.
    let mut done: Vec<StepId> = Vec::new();
    for step in pipeline.closure(&target).expect("closure") {
        let def = pipeline.step(&step).expect("step");
        if done.len() == 8 || !def.needs.iter().all(|n| done.contains(n)) {
            continue;
        }
        let input = worker_input(&store, &pipeline, task, &step);
        let name = step.as_str().to_owned();
        store
            .execute(Command::StartStep {
                task,
                run,
                step: name.clone(),
                input,
                call: None,
            })
            .expect("start");
        let artifact = root.blobs().put(name.as_bytes()).expect("blob");
        let bytes = name.len() as u64;
        let succeed = Command::SucceedStep {
            task,
            run,
            step: name,
            input,
            artifact,
            bytes,
            duration_ms: 1,
            tokens_in: 0,
            tokens_out: 0,
        };
        store.execute(succeed).expect("done");
        done.push(step);
    }
    let ended = Command::EndRun {
        task,
        run,
        outcome: RunOutcome::Stopped,
        reason: None,
        failed_step: None,
        recoverable: true,
    };
    store.execute(ended).expect("end");
    // The second step edited: every step done downstream of it is stale,
    // those that read it and those that read only what it feeds.
    let edited_step = done[1].clone();
    let edited = root.blobs().put(b"edited by hand").expect("blob");
    let edit = Command::EditArtifact {
        task,
        step: edited_step.as_str().into(),
        artifact: edited,
        bytes: 14,
        by: "hand".into(),
    };
    store.execute(edit).expect("edit");
    let found = store
        .read(|s| s.task(&task).cloned())
        .expect("read")
        .expect("task");
    let stale = planb_retro::out_of_date(&pipeline, &found);
    let downstream = pipeline.downstream(&edited_step).expect("downstream");
    let expected: std::collections::BTreeSet<String> = done
        .iter()
        .filter(|s| **s != edited_step && downstream.contains(s))
        .map(|s| s.as_str().to_owned())
        .collect();
    let indirect = expected.iter().any(|s| {
        let id = StepId::parse(s).expect("id");
        !pipeline
            .step(&id)
            .expect("step")
            .needs
            .contains(&edited_step)
    });
    assert!(
        indirect,
        "a step must read the edit only through another: {done:?}"
    );
    assert_eq!(stale, expected, "steps done: {done:?}");
}
