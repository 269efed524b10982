//! Re-planning in process: a plan whose step fails, a real downstream MCP
//! server, and a real OpenAI-compatible model server answering revised
//! plans. What completed is never called again; a revised plan is not
//! re-planned; a refused revision is asked again with the reason.

use std::sync::{Arc, Mutex};

use planb_engine::backend::Backend;
use planb_engine::plans::{PlanOutcome, RunOptions, RunRequest};
use planb_tests::model::{Answer, ModelServer, Script};
use planb_tests::plans::step;
use serde_json::{Value, json};

use crate::runs::{Setup, alpha_and_beta, calls, create, recorded, run};

/// The plan: echo "first" into `a`, a step that fails, then a step that
/// echoes `a`.
fn failing_plan() -> Value {
    json!({"title": "Fails in the middle", "steps": [
        step("1", "alpha__echo", json!({"text": "first"}), &[], Some("a")),
        step("2", "alpha__fail", json!({"message": "boom"}), &["1"], None),
        step("3", "alpha__echo", json!({"text": "${a} then"}), &["2"], None),
    ]})
}

/// A model that answers every prompt with `plan` (as JSON), and keeps the
/// prompts.
fn answering(plan: Value) -> (Answer, Arc<Mutex<Vec<String>>>) {
    let prompts = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&prompts);
    let answer: Answer = Arc::new(move |prompt: &str| {
        kept.lock().expect("prompts").push(prompt.to_owned());
        plan.to_string()
    });
    (answer, prompts)
}

/// Runs plan `id` with `replan` revisions allowed, asking `model`.
async fn run_replanning(
    setup: &Setup,
    id: planb_core::TaskId,
    model: &ModelServer,
    replan: u32,
) -> PlanOutcome {
    let mut request = RunRequest::new(id);
    request.options = RunOptions {
        replan,
        ..RunOptions::default()
    };
    let backend = Backend::from_spec(Some(&model.spec())).expect("model spec");
    request.planner = Some(backend);
    let ended = run(setup, request).await.expect("ran");
    ended.outcome.clone()
}

fn texts(setup_dir: &std::path::Path) -> Vec<String> {
    calls(setup_dir)
        .iter()
        .map(|c| {
            let arg = &c["args"];
            arg["text"]
                .as_str()
                .or(arg["message"].as_str())
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_step_is_re_planned_to_success_and_what_completed_is_not_called_again() {
    let dir = tempfile::tempdir().expect("temp dir");
    let setup = alpha_and_beta(dir.path());
    let revised = json!({"title": "Instead", "steps": [
        step("1", "alpha__echo", json!({"text": "${a} instead"}), &[], Some("b")),
    ]});
    let (answer, prompts) = answering(revised);
    let model = ModelServer::answering(Script::INSTANT, answer).await;
    let id = create(&setup, &failing_plan()).await.expect("created");
    let outcome = run_replanning(&setup, id, &model, 1).await;
    assert!(outcome.success, "{outcome:?}");
    assert_eq!(model.requests(), 1);
    assert_eq!(texts(dir.path()), ["first", "boom", "first instead"]);
    // The result merges the plan's completed step with the revised plan's.
    let json = outcome.to_json();
    assert_eq!(json["replanned"], true, "{json}");
    assert_eq!(json["plan_id"], id.to_string());
    let steps: Vec<(String, u64)> = json["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|s| {
            let index = s["index"].as_str().unwrap_or_default().to_owned();
            (index, s["revision"].as_u64().unwrap_or(0))
        })
        .collect();
    assert_eq!(steps, [("1".to_owned(), 0), ("1".to_owned(), 1)], "{json}");
    assert_eq!(json["results"]["b"], "first instead", "{json}");
    let revision = &json["revisions"][0];
    assert_eq!(revision["failed_step"], "2", "{json}");
    assert_eq!(revision["error"], "boom", "{json}");
    assert_eq!(revision["success"], true, "{json}");
    // The model was told what completed, what failed and what is left.
    let prompt = prompts.lock().expect("prompts")[0].clone();
    for told in [
        "- step 1 \"Step 1\" [alpha__echo]",
        "result \"first\"",
        "The step that failed: step 2",
        "Its error: boom",
        "- step 3 \"Step 3\" [alpha__echo]",
        "- a = \"first\"",
    ] {
        assert!(prompt.contains(told), "{told:?} not in:\n{prompt}");
    }
    // The revised plan is a plan of its own, naming what it revises, with
    // the run's variables.
    let revised_id = revision["plan_id"].as_str().expect("id");
    let revised_id = planb_core::TaskId::parse(revised_id).expect("an id");
    let (_, plan) = recorded(&setup, revised_id);
    let revises = plan.revises.clone().expect("revises");
    assert_eq!(revises.plan, id.to_string());
    assert_eq!((revises.number, revises.step.as_str()), (1, "2"));
    assert_eq!(plan.variables["a"], "first");
    assert_eq!(plan.title, "Fails in the middle (revised plan 1)");
    let found = planb_app::replan::revisions_of(&setup.store, id, None).expect("read");
    assert_eq!(found.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revised_plan_that_fails_is_not_re_planned_and_each_revision_is_of_the_plan() {
    let dir = tempfile::tempdir().expect("temp dir");
    let setup = alpha_and_beta(dir.path());
    let revised = json!({"title": "Still failing", "steps": [
        step("1", "alpha__echo", json!({"text": "tried"}), &[], None),
        step("2", "alpha__fail", json!({"message": "again"}), &["1"], None),
    ]});
    let (answer, prompts) = answering(revised);
    let model = ModelServer::answering(Script::INSTANT, answer).await;
    let id = create(&setup, &failing_plan()).await.expect("created");
    let outcome = run_replanning(&setup, id, &model, 1).await;
    assert!(!outcome.success, "{outcome:?}");
    assert_eq!(model.requests(), 1, "a failing revised plan was re-planned");
    assert_eq!(outcome.error.as_deref(), Some("Step 2 failed: again"));
    assert_eq!(outcome.revisions.len(), 1);
    assert!(!outcome.revisions[0].success);

    // Two revisions allowed: the second is asked after the first fails,
    // again of the plan's run, told what the first completed.
    let outcome = run_replanning(&setup, id, &model, 2).await;
    assert!(!outcome.success, "{outcome:?}");
    assert_eq!(model.requests(), 3);
    let numbers: Vec<u32> = outcome.revisions.iter().map(|r| r.number).collect();
    assert_eq!(numbers, [1, 2]);
    let run = outcome.run.expect("a run").to_string();
    for (task, revises) in
        planb_app::replan::revisions_of(&setup.store, id, outcome.run).expect("read")
    {
        assert_eq!(
            revises.run, run,
            "revision {} of {}",
            revises.number, task.id
        );
    }
    let last = prompts.lock().expect("prompts").last().cloned();
    let last = last.unwrap_or_default();
    assert!(
        last.contains("\"Step 1\" [alpha__echo] args {\"text\":\"tried\"}"),
        "{last}"
    );
    assert!(last.contains("Its error: again"), "{last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_revision_is_asked_again_with_the_reason() {
    let dir = tempfile::tempdir().expect("temp dir");
    let setup = alpha_and_beta(dir.path());
    let prompts = Arc::new(Mutex::new(Vec::<String>::new()));
    let kept = Arc::clone(&prompts);
    let answer: Answer = Arc::new(move |prompt: &str| {
        kept.lock().expect("prompts").push(prompt.to_owned());
        let tool = if prompt.contains("Your previous answer was refused") {
            "alpha__echo"
        } else {
            "nope"
        };
        json!({"title": "Revised", "steps": [
            step("1", tool, json!({"text": "fixed"}), &[], None),
        ]})
        .to_string()
    });
    let model = ModelServer::answering(Script::INSTANT, answer).await;
    let id = create(&setup, &failing_plan()).await.expect("created");
    let outcome = run_replanning(&setup, id, &model, 1).await;
    assert!(outcome.success, "{outcome:?}");
    assert_eq!(model.requests(), 2);
    let second = prompts.lock().expect("prompts")[1].clone();
    assert!(
        second.contains("Your previous answer was refused: steps[0].tool: Unknown tool: nope."),
        "{second}"
    );
    assert!(texts(dir.path()).contains(&"fixed".to_owned()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn re_planning_without_a_model_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().expect("temp dir");
    let setup = alpha_and_beta(dir.path());
    let id = create(&setup, &failing_plan()).await.expect("created");
    let mut request = RunRequest::new(id);
    request.options.replan = 1;
    let refused = run(&setup, request)
        .await
        .expect_err("no model")
        .to_string();
    assert!(
        refused.starts_with("replan: re-planning asks a model"),
        "{refused}"
    );
    assert!(refused.contains("PLANB_MODEL"), "{refused}");
    assert!(calls(dir.path()).is_empty());
}
