use serde_json::{Value, json};

use super::*;

fn spec() -> AskSpec {
    AskSpec::from_json(&json!({
        "title": "T",
        "questions": [
            { "id": "name", "kind": "text", "label": "Name", "required": true },
            { "id": "summary", "kind": "longtext", "label": "Summary" },
            { "id": "language", "kind": "single", "label": "Language", "required": true,
              "options": ["Go", "Rust"] },
            { "id": "tools", "kind": "multi", "label": "Tools", "required": true,
              "options": ["GitHub", "Slack", "Linear"] },
            { "id": "extras", "kind": "multi", "label": "Extras", "options": ["a", "b"] },
            { "id": "priority", "kind": "scale", "label": "Priority", "min": 1, "max": 3, "step": 0.1 },
            { "id": "free", "kind": "scale", "label": "Free", "min": 0, "max": 1 }
        ]
    }))
    .unwrap()
}

/// A complete valid submission, to which each test applies one change.
fn valid() -> Value {
    json!({ "name": "Aurora", "language": "Rust", "tools": ["Slack", "GitHub"] })
}

fn with(key: &str, value: Value) -> Value {
    let mut answers = valid();
    answers[key] = value;
    answers
}

fn without(key: &str) -> Value {
    let mut answers = valid();
    if let Value::Object(map) = &mut answers {
        map.remove(key);
    }
    answers
}

/// Checks a final submission: `Ok(json)` is the expected answers JSON,
/// `Err(text)` the expected error display.
fn check_answers(answers: Value, expected: Result<Value, &str>) {
    let actual = spec()
        .validate_answers(&answers)
        .map(|a| a.to_json())
        .map_err(|e| e.to_string());
    assert_eq!(
        actual,
        expected.map_err(str::to_owned),
        "answers: {answers}"
    );
}

fn check_draft(answers: Value, expected: Result<Value, &str>) {
    let actual = spec()
        .validate_draft(&answers)
        .map(|a| a.to_json())
        .map_err(|e| e.to_string());
    assert_eq!(actual, expected.map_err(str::to_owned), "draft: {answers}");
}

#[test]
fn valid_submission_keeps_spec_order_and_types() {
    let answers = spec()
        .validate_answers(&json!({
            "priority": 2.5, "tools": ["Slack"], "language": "Go", "name": "A",
            "summary": "", "extras": [], "free": 0.123
        }))
        .unwrap();
    assert_eq!(
        answers.0,
        vec![
            ("name".to_owned(), AnswerValue::Text("A".into())),
            ("summary".to_owned(), AnswerValue::Text(String::new())),
            ("language".to_owned(), AnswerValue::Choice("Go".into())),
            (
                "tools".to_owned(),
                AnswerValue::Choices(vec!["Slack".into()])
            ),
            ("extras".to_owned(), AnswerValue::Choices(Vec::new())),
            ("priority".to_owned(), AnswerValue::Number(2.5)),
            ("free".to_owned(), AnswerValue::Number(0.123)),
        ]
    );
    assert_eq!(
        serde_json::to_string(&answers).unwrap(),
        r#"{"name":"A","summary":"","language":"Go","tools":["Slack"],"extras":[],"priority":2.5,"free":0.123}"#
    );
}

#[test]
fn integral_numbers_print_as_integers() {
    check_answers(
        with("priority", json!(2.0)),
        Ok(
            json!({ "name": "Aurora", "language": "Rust", "tools": ["Slack", "GitHub"], "priority": 2 }),
        ),
    );
    let answers = spec()
        .validate_answers(&with("priority", json!(2)))
        .unwrap();
    assert!(
        serde_json::to_string(&answers)
            .unwrap()
            .ends_with(r#""priority":2}"#)
    );
}

#[test]
fn required_questions_must_be_answered() {
    check_answers(without("name"), Err("name: an answer is required"));
    check_answers(
        with("name", json!("   ")),
        Err("name: an answer is required"),
    );
    check_answers(
        with("name", Value::Null),
        Err("name: an answer is required"),
    );
    check_answers(without("language"), Err("language: an answer is required"));
    check_answers(
        with("tools", json!([])),
        Err("tools: an answer is required"),
    );
    check_answers(
        json!({}),
        Err(
            "name: an answer is required; language: an answer is required; tools: an answer is required",
        ),
    );
}

#[test]
fn wrong_json_types_are_named() {
    check_answers(json!([]), Err("answers: must be a JSON object (got array)"));
    check_answers(
        with("name", json!(3)),
        Err("name: must be a string (got number)"),
    );
    check_answers(
        with("language", json!(["Go"])),
        Err("language: must be a string (got array)"),
    );
    check_answers(
        with("tools", json!("Slack")),
        Err("tools: must be an array of strings (got string)"),
    );
    check_answers(
        with("tools", json!(["Slack", 1])),
        Err("tools: item 1 must be a string (got number)"),
    );
    check_answers(
        with("priority", json!("2")),
        Err("priority: must be a number (got string)"),
    );
}

#[test]
fn unknown_question_ids_are_rejected() {
    check_answers(
        with("colour", json!("red")),
        Err(r#"answers: unknown question id "colour""#),
    );
}

#[test]
fn text_length_limits() {
    check_answers(
        with("name", json!("x".repeat(10_000))),
        Ok({
            let mut expected = valid();
            expected["name"] = json!("x".repeat(10_000));
            expected
        }),
    );
    check_answers(
        with("name", json!("é".repeat(10_001))),
        Err("name: must be at most 10000 characters (got 10001)"),
    );
    check_answers(
        with("summary", json!("x".repeat(100_001))),
        Err("summary: must be at most 100000 characters (got 100001)"),
    );
}

#[test]
fn choices_must_be_known_and_unique() {
    check_answers(
        with("language", json!("Kotlin")),
        Err(r#"language: "Kotlin" is not one of the options"#),
    );
    check_answers(
        with("tools", json!(["Slack", "Jira"])),
        Err(r#"tools: "Jira" is not one of the options"#),
    );
    check_answers(
        with("tools", json!(["Slack", "Slack"])),
        Err(r#"tools: "Slack" is chosen more than once"#),
    );
}

#[test]
fn scale_range_and_step() {
    let ok = |value: Value| {
        let answers = spec().validate_answers(&with("priority", value.clone()));
        assert!(answers.is_ok(), "{value} should be accepted: {answers:?}");
    };
    ok(json!(1));
    ok(json!(3));
    // 0.1 + 0.2 is not exactly 0.3; the tolerance absorbs it.
    ok(json!(1.0 + 0.1 + 0.2));
    ok(json!(2.7));
    check_answers(
        with("priority", json!(0.9)),
        Err("priority: must be between 1 and 3 (got 0.9)"),
    );
    check_answers(
        with("priority", json!(3.05)),
        Err("priority: must be between 1 and 3 (got 3.05)"),
    );
    check_answers(
        with("priority", json!(1.25)),
        Err("priority: must be 1 plus a multiple of 0.1 (got 1.25)"),
    );
    // Without a step any value in range is allowed.
    check_answers(
        with("free", json!(0.3333)),
        Ok(
            json!({ "name": "Aurora", "language": "Rust", "tools": ["Slack", "GitHub"], "free": 0.3333 }),
        ),
    );
}

#[test]
fn every_question_is_reported_once() {
    let error = spec()
        .validate_answers(&json!({ "name": 1, "language": "x", "tools": ["y", "z"], "nope": 1 }))
        .unwrap_err();
    assert_eq!(error.general, [r#"answers: unknown question id "nope""#]);
    let ids: Vec<&str> = error.questions.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["name", "language", "tools"]);
}

#[test]
fn drafts_may_be_partial_and_empty() {
    check_draft(json!({}), Ok(json!({})));
    check_draft(
        json!({ "name": "", "language": "", "tools": [] }),
        Ok(json!({ "name": "", "tools": [] })),
    );
    check_draft(
        json!({ "summary": "half a thought" }),
        Ok(json!({ "summary": "half a thought" })),
    );
}

#[test]
fn drafts_still_check_values() {
    check_draft(
        json!({ "language": "Kotlin" }),
        Err(r#"language: "Kotlin" is not one of the options"#),
    );
    check_draft(
        json!({ "priority": 9 }),
        Err("priority: must be between 1 and 3 (got 9)"),
    );
    check_draft(
        json!({ "name": false }),
        Err("name: must be a string (got boolean)"),
    );
    check_draft(
        json!({ "x": "y" }),
        Err(r#"answers: unknown question id "x""#),
    );
}
