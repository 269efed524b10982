//! A plan's run as a front door asks for it through `Plans::execute` and
//! `Plans::run_here`: a dry run, the request checked before the person is
//! asked to review it, a review that refuses or approves, a run joined or
//! its kept result collected; with a real store and, where something runs,
//! real downstream MCP servers.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use planb_app::ErrorCode;
use planb_app::execution::{Execution, Review, RunAsk, Unreviewed};
use planb_app::runs::Waited;
use planb_core::exec_plan::ExecPlan;
use planb_core::{Task, TaskId};
use planb_engine::plans::Progress;
use planb_tests::plans::step;
use serde_json::{Map, Value, json};

use crate::plans::{open, record};
use crate::runs::{alpha_and_beta, calls, create, until_ended, variables};

/// What a review was shown: the plan's id and title, the call-time
/// variables.
type Shown = (TaskId, String, Option<Map<String, Value>>);

/// A review that answers as told, keeping what it was shown: the plan's id
/// and title and the call-time variables.
struct Reviewer {
    approves: bool,
    shown: Mutex<Vec<Shown>>,
}

impl Reviewer {
    fn new(approves: bool) -> Reviewer {
        Reviewer {
            approves,
            shown: Mutex::default(),
        }
    }

    fn asked(&self) -> usize {
        self.shown.lock().expect("shown").len()
    }
}

impl Review for Reviewer {
    type Refused = String;

    async fn review(
        &self,
        task: &Task,
        plan: &Arc<ExecPlan>,
        variables: Option<&Map<String, Value>>,
    ) -> Result<(), String> {
        let seen = (task.id, plan.title.clone(), variables.cloned());
        self.shown.lock().expect("shown").push(seen);
        match self.approves {
            true => Ok(()),
            false => Err(format!("{} is not approved", plan.title)),
        }
    }
}

/// A plan greeting `who`, then echoing the greeting.
fn greeting() -> Value {
    json!({"title": "Greeting", "variables": {"who": "Ada"}, "steps": [
        step("1", "alpha__echo", json!({"text": "hello ${who}"}), &[], Some("greeting")),
        step("2", "beta__echo", json!({"text": "${greeting}!"}), &["1"], None),
    ]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_traces_the_call_time_variables_asks_no_review_and_records_no_run() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (app, store) = open(dir.path());
    let id = record(&store, greeting(), None).await;
    let task = app.plans().get(id).await.expect("the plan");
    let reviewer = Reviewer::new(false);
    let ask = RunAsk {
        dry_run: true,
        review: true,
        variables: variables(json!({"who": "Grace"})),
        ..RunAsk::default()
    };
    let traced = app.plans().execute(task, ask, false, &reviewer).await;
    let Ok(Execution::DryRun { plan, outcome }) = traced else {
        panic!("a dry run: {traced:?}");
    };
    assert_eq!(plan.title, "Greeting");
    assert_eq!(outcome.run, None);
    let args: Vec<&Value> = outcome.steps.iter().map(|s| &s.args["text"]).collect();
    assert_eq!(
        args,
        [&json!("hello Grace"), &json!("<alpha__echo result>!")]
    );
    assert_eq!(reviewer.asked(), 0, "a dry run was put up for review");
    let after = app.plans().get(id).await.expect("the plan");
    assert!(after.runs.is_empty(), "a dry run recorded a run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_that_refuses_gives_back_its_answer_and_starts_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (app, store) = open(dir.path());
    let id = record(&store, greeting(), None).await;
    let task = app.plans().get(id).await.expect("the plan");
    let reviewer = Reviewer::new(false);
    let ask = RunAsk {
        review: true,
        variables: variables(json!({"who": "Grace"})),
        ..RunAsk::default()
    };
    let refused = app.plans().execute(task, ask, false, &reviewer).await;
    match refused {
        Ok(Execution::Refused(answer)) => assert_eq!(answer, "Greeting is not approved"),
        other => panic!("refused by the review: {other:?}"),
    }
    let shown = reviewer.shown.lock().expect("shown").clone();
    let expected = (
        id,
        "Greeting".to_owned(),
        variables(json!({"who": "Grace"})),
    );
    assert_eq!(shown, [expected]);
    assert!(!app.runs().running_here(id));
    let after = app.plans().get(id).await.expect("the plan");
    assert!(after.runs.is_empty(), "a refused run was recorded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_would_be_refused_is_never_put_up_for_review() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (app, store) = open(dir.path());
    let id = record(&store, greeting(), None).await;
    let reviewer = Reviewer::new(true);
    let mut capped = RunAsk::default();
    capped
        .options
        .guards
        .per_tool
        .insert("nothing_calls_it".into(), 1);
    let asks = [
        (
            RunAsk {
                resume: true,
                ..RunAsk::default()
            },
            "has not run yet: nothing to resume",
        ),
        (
            RunAsk {
                variables: variables(json!({"not a name": 1})),
                ..RunAsk::default()
            },
            "is not a variable name",
        ),
        (capped, "tool cap \"nothing_calls_it\": no step calls it"),
    ];
    for (mut ask, said) in asks {
        ask.review = true;
        let task = app.plans().get(id).await.expect("the plan");
        let refused = app.plans().execute(task, ask, false, &reviewer).await;
        let refused = refused.expect_err(said);
        assert_eq!(refused.code, ErrorCode::InvalidArgument, "{refused}");
        assert!(refused.message.contains(said), "{refused}");
    }
    assert_eq!(
        reviewer.asked(),
        0,
        "a refused request was put up for review"
    );
    let after = app.plans().get(id).await.expect("the plan");
    assert!(after.runs.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_here_is_checked_first_and_records_nothing_it_refuses() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (app, store) = open(dir.path());
    let id = record(&store, greeting(), None).await;
    let task = app.plans().get(id).await.expect("the plan");
    let heard = Arc::new(Mutex::new(0_usize));
    let counted = Arc::clone(&heard);
    let progress: planb_app::plans::ProgressFn = Arc::new(move |_: &Progress| {
        *counted.lock().expect("count") += 1;
    });
    let resume = RunAsk {
        resume: true,
        ..RunAsk::default()
    };
    let unnamed = RunAsk {
        variables: variables(json!({"": "x"})),
        ..RunAsk::default()
    };
    for ask in [resume, unnamed] {
        let refused = app
            .plans()
            .run_here(&task, ask, Arc::clone(&progress))
            .await;
        let refused = refused.expect_err("refused");
        assert_eq!(refused.code, ErrorCode::InvalidArgument, "{refused}");
    }
    assert_eq!(*heard.lock().expect("count"), 0);
    let after = app.plans().get(id).await.expect("the plan");
    assert!(after.runs.is_empty(), "a refused run was recorded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_here_tells_each_step_as_it_starts_and_settles_and_answers_its_outcome() {
    let dir = tempfile::tempdir().expect("temp dir");
    let setup = alpha_and_beta(dir.path());
    let id = create(&setup, &greeting()).await.expect("created");
    let task = setup.app.plans().get(id).await.expect("the plan");
    let heard = Arc::new(Mutex::new(Vec::<String>::new()));
    let told = Arc::clone(&heard);
    let progress: planb_app::plans::ProgressFn = Arc::new(move |event: &Progress| {
        let said = match event {
            Progress::Started { index } => format!("start {index}"),
            Progress::Ended(report) => format!("end {} {}", report.index, report.success),
            other => format!("{other:?}"),
        };
        told.lock().expect("heard").push(said);
    });
    let ask = RunAsk {
        variables: variables(json!({"who": "Grace"})),
        ..RunAsk::default()
    };
    let outcome = setup.app.plans().run_here(&task, ask, progress).await;
    let outcome = outcome.expect("ran");
    assert!(outcome.success, "{outcome:?}");
    assert_eq!(outcome.variables["greeting"], "hello Grace");
    let heard = heard.lock().expect("heard").clone();
    assert_eq!(heard, ["start 1", "end 1 true", "start 2", "end 2 true"]);
    let texts: Vec<Value> = calls(dir.path())
        .iter()
        .map(|c| c["args"]["text"].clone())
        .collect();
    assert_eq!(texts, [json!("hello Grace"), json!("hello Grace!")]);
    assert!(
        !setup.runs.running_here(id),
        "a run here is not the process's background run"
    );
    let after = setup.app.plans().get(id).await.expect("the plan");
    let states: Vec<&str> = after.runs.iter().map(|r| r.state.as_str()).collect();
    assert_eq!(states, ["completed"]);
}

/// A plan whose first step sleeps `ms` before the second echoes it.
fn slow(ms: u64) -> Value {
    json!({"title": "Slow", "steps": [
        step("1", "alpha__sleep", json!({"ms": ms, "text": "waited"}), &[], Some("first")),
        step("2", "alpha__echo", json!({"text": "${first} twice"}), &["1"], Some("second")),
    ]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_run_starts_once_and_a_second_call_joins_it_without_a_second_review() {
    let dir = tempfile::tempdir().expect("temp dir");
    let setup = alpha_and_beta(dir.path());
    let id = create(&setup, &slow(400)).await.expect("created");
    let plans = setup.app.plans();
    let reviewer = Reviewer::new(true);
    let reviewed = || RunAsk {
        review: true,
        ..RunAsk::default()
    };
    let task = plans.get(id).await.expect("the plan");
    let first = plans
        .execute(task.clone(), reviewed(), false, &reviewer)
        .await;
    let Ok(Execution::Running {
        mut attached,
        follower: None,
        plan,
    }) = first
    else {
        panic!("started: {first:?}");
    };
    assert_eq!(plan.steps.len(), 2);
    let second = plans.execute(task, reviewed(), true, &reviewer).await;
    let Ok(Execution::Running {
        attached: mut joined,
        follower: Some(_),
        ..
    }) = second
    else {
        panic!("joined with a follower: {second:?}");
    };
    assert_eq!(reviewer.asked(), 1, "the run was reviewed twice");
    let one = until_ended(&mut attached).await.expect("ran");
    let two = until_ended(&mut joined).await.expect("ran");
    assert!(one.outcome.success, "{:?}", one.outcome);
    assert_eq!(one.outcome.run, two.outcome.run, "one run for both calls");
    assert_eq!(one.outcome.variables["second"], "waited twice");
    let after = plans.get(id).await.expect("the plan");
    assert_eq!(after.runs.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_review_asked_for_the_reviewer_is_never_consulted() {
    let dir = tempfile::tempdir().expect("temp dir");
    let setup = alpha_and_beta(dir.path());
    let id = create(&setup, &greeting()).await.expect("created");
    let task = setup.app.plans().get(id).await.expect("the plan");
    let reviewer = Reviewer::new(false);
    let started = setup
        .app
        .plans()
        .execute(task, RunAsk::default(), false, &reviewer)
        .await;
    let Ok(Execution::Running { mut attached, .. }) = started else {
        panic!("started: {started:?}");
    };
    let done = until_ended(&mut attached).await.expect("ran");
    assert!(done.outcome.success, "{:?}", done.outcome);
    assert_eq!(reviewer.asked(), 0);
    assert_eq!(calls(dir.path()).len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_handed_back_is_collected_by_the_next_call_without_a_review() {
    let dir = tempfile::tempdir().expect("temp dir");
    let setup = alpha_and_beta(dir.path());
    let id = create(&setup, &slow(300)).await.expect("created");
    let plans = setup.app.plans();
    let task = plans.get(id).await.expect("the plan");
    let started = plans
        .execute(task.clone(), RunAsk::default(), false, &Unreviewed)
        .await;
    let Ok(Execution::Running { mut attached, .. }) = started else {
        panic!("started: {started:?}");
    };
    let waited = setup
        .runs
        .wait(&mut attached, None, id, Some(Instant::now()))
        .await;
    assert!(matches!(waited, Waited::StillRunning { .. }), "{waited:?}");
    let run = until_ended(&mut attached).await.expect("ran").outcome.run;
    let deadline = Instant::now() + Duration::from_secs(30);
    while setup.runs.running_here(id) {
        assert!(Instant::now() < deadline, "the run is still listed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let refusing = Reviewer::new(false);
    let reviewed = || RunAsk {
        review: true,
        ..RunAsk::default()
    };
    let collected = plans
        .execute(task.clone(), reviewed(), false, &refusing)
        .await;
    match collected {
        Ok(Execution::Ended(Ok(end))) => assert_eq!(end.outcome.run, run),
        other => panic!("the kept result: {other:?}"),
    }
    assert_eq!(
        refusing.asked(),
        0,
        "collecting a result asked for a review"
    );
    // Collected once: the next call asks for a run of its own.
    let next = plans.execute(task, reviewed(), false, &refusing).await;
    assert!(matches!(next, Ok(Execution::Refused(_))), "{next:?}");
    assert_eq!(plans.get(id).await.expect("the plan").runs.len(), 1);
}
