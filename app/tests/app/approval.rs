//! The form a run of an execution plan waits on when a review is asked
//! for: what it shows the person (the DAG, the call-time variables, the
//! first batch's calls as they will be sent) and which answer approves.

use planb_app::plans::approval::{APPROVE, REJECT, approved, form};
use planb_core::TaskId;
use planb_core::exec_plan::ExecPlan;
use planb_tests::fixtures::new_uuid;
use planb_tests::plans::step;
use serde_json::{Map, Value, json};

fn plan(value: Value) -> ExecPlan {
    ExecPlan::from_json(&value).expect("a plan")
}

fn id() -> TaskId {
    TaskId::from_uuid(new_uuid())
}

/// A plan of three steps in two batches: two greetings, then one of both.
fn greetings() -> ExecPlan {
    plan(
        json!({"title": "Greetings", "description": "Say hello twice.",
            "variables": {"who": "Ada"}, "steps": [
            step("1", "alpha__echo", json!({"text": "hello ${who}"}), &[], Some("a")),
            step("2", "beta__echo", json!({"text": "hi ${who}"}), &[], Some("b")),
            step("3", "alpha__echo", json!({"text": "${a} and ${b}"}), &["1", "2"], None),
        ]}),
    )
}

#[test]
fn the_form_shows_the_plan_the_variables_and_the_first_batch_s_calls_as_they_will_be_sent() {
    let mut call = Map::new();
    call.insert("who".into(), json!("Grace"));
    let spec = form(id(), &greetings(), &call).expect("a form");
    assert_eq!(spec.title, "Run execution plan \"Greetings\"?");
    assert_eq!(spec.intro_title.as_deref(), Some("The plan"));
    let intro = spec.intro.expect("an intro");
    for shown in [
        "**Greetings**: 3 steps in 2 batches.",
        "Say hello twice.",
        "Variables given for this run:",
        "\"who\": \"Grace\"",
        "- Step 1: Step 1 (`alpha__echo`)",
        "\"text\": \"hello Grace\"",
        "- Step 2: Step 2 (`beta__echo`)",
        "\"text\": \"hi Grace\"",
    ] {
        assert!(intro.contains(shown), "{shown:?} not in:\n{intro}");
    }
    assert!(
        !intro.contains("- Step 3:"),
        "a later batch's call is shown:\n{intro}"
    );
    assert!(
        !intro.contains("hello Ada"),
        "the plan's value, not the call's:\n{intro}"
    );
    let ids: Vec<&str> = spec.questions.iter().map(|q| q.id.as_str()).collect();
    assert_eq!(ids, ["decision", "feedback"]);
}

#[test]
fn without_call_time_variables_or_a_description_the_form_shows_neither() {
    let bare = plan(json!({"title": "Bare", "steps": [
        step("1", "alpha__echo", json!({"text": "x"}), &[], None),
    ]}));
    let spec = form(id(), &bare, &Map::new()).expect("a form");
    let intro = spec.intro.expect("an intro");
    assert!(
        intro.starts_with("**Bare**: 1 step in 1 batch.\n\n```text\n"),
        "{intro}"
    );
    assert!(!intro.contains("Variables given"), "{intro}");
    let long = plan(json!({"title": "x".repeat(400), "steps": []}));
    let spec = form(id(), &long, &Map::new()).expect("a form");
    assert!(spec.title.chars().count() <= 200, "{}", spec.title);
    assert!(
        spec.title.starts_with("Run execution plan \"xxx"),
        "{}",
        spec.title
    );
}

#[test]
fn only_the_answer_to_run_it_approves_and_the_decision_is_required() {
    assert!(approved(&json!({"decision": APPROVE, "feedback": "go"})));
    for refused in [
        json!({"decision": REJECT}),
        json!({"decision": "run it"}),
        json!({"feedback": APPROVE}),
        json!({}),
        json!(null),
    ] {
        assert!(!approved(&refused), "{refused}");
    }
    let spec = form(id(), &greetings(), &Map::new()).expect("a form");
    spec.validate_answers(&json!({"decision": APPROVE}))
        .expect("an approval");
    spec.validate_answers(&json!({"decision": REJECT, "feedback": "not now"}))
        .expect("a refusal with a note");
    for invalid in [
        json!({"feedback": "no decision"}),
        json!({"decision": "maybe"}),
    ] {
        assert!(spec.validate_answers(&invalid).is_err(), "{invalid}");
    }
}
