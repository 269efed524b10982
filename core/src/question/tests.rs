use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

/// The example call from the planb-mcp README, without `sessionId`.
fn seed_example() -> Value {
    json!({
        "title": "Project kickoff preferences",
        "introTitle": "Kickoff",
        "intro": "A few quick questions to set up your workspace.",
        "questions": [
            { "id": "project_name", "kind": "text", "label": "Project name", "placeholder": "e.g. Aurora", "required": true, "tab": "Workspace" },
            { "id": "summary", "kind": "longtext", "label": "One-paragraph summary", "placeholder": "What are we building?", "tab": "Workspace" },
            { "id": "language", "kind": "single", "label": "Primary language", "required": true, "tab": "Workspace",
              "options": [
                { "value": "TypeScript", "markdown": "### TypeScript\n\nFull-stack web with strong typing." },
                "Go", "Rust", "Python"
              ] },
            { "id": "integrations", "kind": "multi", "label": "Integrations to enable", "options": ["GitHub", "Slack", "Linear", "PagerDuty"], "tab": "Integrations" },
            { "id": "priority", "kind": "scale", "label": "Priority (1 = low, 5 = high)", "min": 1, "max": 5, "step": 1, "required": true, "tab": "Priority" }
        ]
    })
}

/// A spec with one question, for testing question-level rules.
fn with_question(question: Value) -> Value {
    json!({ "title": "T", "questions": [question] })
}

fn check_spec_error(input: Value, expected: &[&str]) {
    let actual: Vec<String> = match AskSpec::from_json(&input) {
        Ok(spec) => panic!("accepted: {spec:?}"),
        Err(error) => error.errors.iter().map(ToString::to_string).collect(),
    };
    assert_eq!(actual, expected, "input: {input}");
}

fn check_question_error(question: Value, expected: &str) {
    check_spec_error(with_question(question), &[expected]);
}

#[test]
fn seed_example_parses() {
    let spec = AskSpec::from_json(&seed_example()).unwrap();
    assert_eq!(spec.title, "Project kickoff preferences");
    assert_eq!(spec.intro_title.as_deref(), Some("Kickoff"));
    let kinds: Vec<&str> = spec.questions.iter().map(|q| q.kind.name()).collect();
    assert_eq!(kinds, QuestionKind::NAMES);
    assert_eq!(
        spec.questions[2].kind.options()[0],
        Choice {
            value: "TypeScript".into(),
            markdown: Some("### TypeScript\n\nFull-stack web with strong typing.".into()),
        }
    );
    assert_eq!(
        spec.questions[4].kind,
        QuestionKind::Scale {
            min: 1.0,
            max: 5.0,
            step: Some(1.0)
        }
    );
    assert_eq!(spec.tabs(), ["Workspace", "Integrations", "Priority"]);
}

#[test]
fn to_json_gives_back_the_seed_shape() {
    let spec = AskSpec::from_json(&seed_example()).unwrap();
    assert_eq!(spec.to_json(), seed_example());
    assert_eq!(AskSpec::from_json(&spec.to_json()).unwrap(), spec);
    let via_serde: AskSpec = serde_json::from_value(serde_json::to_value(&spec).unwrap()).unwrap();
    assert_eq!(via_serde, spec);
}

#[test]
fn untagged_questions_share_the_default_tab() {
    let spec = AskSpec::from_json(&json!({
        "title": "T",
        "questions": [
            { "id": "a", "kind": "text", "label": "A" },
            { "id": "b", "kind": "text", "label": "B", "tab": "Later" },
            { "id": "c", "kind": "text", "label": "C" }
        ]
    }))
    .unwrap();
    assert_eq!(spec.tabs(), ["Questions", "Later"]);
}

#[test]
fn nulls_count_as_absent_and_false_required_is_dropped() {
    let spec = AskSpec::from_json(&json!({
        "title": "T", "intro": null,
        "questions": [{ "id": "a", "kind": "text", "label": "A", "tab": null, "required": false }]
    }))
    .unwrap();
    assert_eq!(spec.intro, None);
    assert_eq!(
        spec.to_json(),
        json!({ "title": "T", "questions": [{ "id": "a", "kind": "text", "label": "A" }] })
    );
}

#[test]
fn spec_level_rules() {
    check_spec_error(json!([]), &["input: must be a JSON object (got array)"]);
    check_spec_error(
        json!({}),
        &[
            "title: missing required field",
            "questions: missing required field",
        ],
    );
    check_spec_error(
        json!({ "title": "  ", "questions": [] }),
        &[
            "title: must not be empty",
            "questions: must have between 1 and 20 questions (got 0)",
        ],
    );
    check_spec_error(
        json!({ "title": "t".repeat(201), "introTitle": "", "intro": "x".repeat(65_537),
                "questions": {} }),
        &[
            "title: must be at most 200 characters (got 201)",
            "introTitle: must not be empty",
            "intro: must be at most 65536 bytes (got 65537)",
            "questions: must be an array (got object)",
        ],
    );
    check_spec_error(
        json!({ "title": 3, "introTitle": "é".repeat(61), "questions": "x" }),
        &[
            "title: must be a string (got number)",
            "introTitle: must be at most 60 characters (got 61)",
            "questions: must be an array (got string)",
        ],
    );
}

#[test]
fn session_id_and_other_extra_fields_are_unknown() {
    let mut input = seed_example();
    input["sessionId"] = json!("0190f5a2-7c1e-7d3b-9a4f-1c2d3e4f5a6b");
    input["questions"][0]["colour"] = json!("red");
    input["questions"][2]["options"][0]["emoji"] = json!("x");
    check_spec_error(
        input,
        &[
            "questions[0].colour: unknown field",
            "questions[2].options[0].emoji: unknown field",
            "sessionId: unknown field",
        ],
    );
}

#[test]
fn at_most_twenty_questions() {
    let questions: Vec<Value> = (0..21)
        .map(|i| json!({ "id": format!("q{i}"), "kind": "text", "label": "L" }))
        .collect();
    check_spec_error(
        json!({ "title": "T", "questions": questions }),
        &["questions: must have between 1 and 20 questions (got 21)"],
    );
}

#[test]
fn question_id_rules() {
    check_question_error(json!(7), "questions[0]: must be a JSON object (got number)");
    check_question_error(
        json!({ "kind": "text", "label": "L" }),
        "questions[0].id: missing required field",
    );
    check_question_error(
        json!({ "id": "", "kind": "text", "label": "L" }),
        "questions[0].id: must not be empty",
    );
    check_question_error(
        json!({ "id": "a b", "kind": "text", "label": "L" }),
        "questions[0].id: must contain only letters, digits, '_', '.' and '-' (found ' ')",
    );
    check_question_error(
        json!({ "id": "a".repeat(65), "kind": "text", "label": "L" }),
        "questions[0].id: must be at most 64 characters (got 65)",
    );
    check_spec_error(
        json!({ "title": "T", "questions": [
            { "id": "a", "kind": "text", "label": "L" },
            { "id": "b", "kind": "text", "label": "L" },
            { "id": "a", "kind": "text", "label": "L" }
        ]}),
        &[r#"questions[2].id: duplicate question id "a" (also used by questions[0])"#],
    );
}

#[test]
fn common_field_rules() {
    check_question_error(
        json!({ "id": "a", "kind": "text", "label": " " }),
        "questions[0].label: must not be empty",
    );
    check_question_error(
        json!({ "id": "a", "kind": "text", "label": "l".repeat(501) }),
        "questions[0].label: must be at most 500 characters (got 501)",
    );
    check_question_error(
        json!({ "id": "a", "kind": "text", "label": "L", "required": "yes" }),
        "questions[0].required: must be a boolean (got string)",
    );
    check_question_error(
        json!({ "id": "a", "kind": "text", "label": "L", "tab": "" }),
        "questions[0].tab: must not be empty",
    );
    check_question_error(
        json!({ "id": "a", "kind": "text", "label": "L", "tab": "t".repeat(61) }),
        "questions[0].tab: must be at most 60 characters (got 61)",
    );
}

#[test]
fn kind_rules() {
    check_question_error(
        json!({ "id": "a", "label": "L" }),
        r#"questions[0].kind: missing required field (one of "text", "longtext", "single", "multi", "scale")"#,
    );
    check_question_error(
        json!({ "id": "a", "kind": "radio", "label": "L", "options": ["x"] }),
        r#"questions[0].kind: unknown kind "radio" (expected one of "text", "longtext", "single", "multi", "scale")"#,
    );
    check_question_error(
        json!({ "id": "a", "kind": 1, "label": "L" }),
        "questions[0].kind: must be a string (got number)",
    );
    check_question_error(
        json!({ "id": "a", "kind": "text", "label": "L", "options": ["x"] }),
        r#"questions[0].options: not allowed for kind "text""#,
    );
    check_question_error(
        json!({ "id": "a", "kind": "scale", "label": "L", "min": 0, "max": 1, "placeholder": "p" }),
        r#"questions[0].placeholder: not allowed for kind "scale""#,
    );
    check_question_error(
        json!({ "id": "a", "kind": "longtext", "label": "L", "placeholder": "p".repeat(201) }),
        "questions[0].placeholder: must be at most 200 characters (got 201)",
    );
}

#[test]
fn option_rules() {
    let single =
        |options: Value| json!({ "id": "a", "kind": "single", "label": "L", "options": options });
    check_question_error(
        json!({ "id": "a", "kind": "multi", "label": "L" }),
        "questions[0].options: missing required field",
    );
    check_question_error(
        single(json!("Go")),
        "questions[0].options: must be an array (got string)",
    );
    check_question_error(
        single(json!([])),
        "questions[0].options: must have between 1 and 50 options (got 0)",
    );
    let many: Vec<String> = (0..51).map(|i| format!("o{i}")).collect();
    check_question_error(
        single(json!(many)),
        "questions[0].options: must have between 1 and 50 options (got 51)",
    );
    check_question_error(
        single(json!(["Go", "Rust", "Go"])),
        r#"questions[0].options[2].value: duplicate option value "Go""#,
    );
    check_question_error(
        single(json!(["Go", { "value": "Go", "markdown": "m" }])),
        r#"questions[0].options[1].value: duplicate option value "Go""#,
    );
    check_question_error(
        single(json!([""])),
        "questions[0].options[0].value: must not be empty",
    );
    check_question_error(
        single(json!(["v".repeat(201)])),
        "questions[0].options[0].value: must be at most 200 characters (got 201)",
    );
    check_question_error(
        single(json!([true])),
        r#"questions[0].options[0]: must be a string or an object with "value" and optional "markdown" (got boolean)"#,
    );
    check_question_error(
        single(json!([{ "markdown": "m" }])),
        "questions[0].options[0].value: missing required field",
    );
    check_question_error(
        single(json!([{ "value": "v", "markdown": "m".repeat(16_385) }])),
        "questions[0].options[0].markdown: must be at most 16384 bytes (got 16385)",
    );
}

#[test]
fn scale_rules() {
    let scale = |extra: Value| {
        let mut q = json!({ "id": "s", "kind": "scale", "label": "L" });
        if let (Value::Object(q), Value::Object(extra)) = (&mut q, extra) {
            q.extend(extra);
        }
        q
    };
    check_spec_error(
        with_question(scale(json!({}))),
        &[
            "questions[0].min: missing required field",
            "questions[0].max: missing required field",
        ],
    );
    check_question_error(
        scale(json!({ "min": "1", "max": 5 })),
        "questions[0].min: must be a number (got string)",
    );
    check_question_error(
        scale(json!({ "min": 5, "max": 5 })),
        "questions[0].max: must be greater than min (5)",
    );
    check_question_error(
        scale(json!({ "min": 0, "max": 1, "step": 0 })),
        "questions[0].step: must be greater than 0 (got 0)",
    );
    check_question_error(
        scale(json!({ "min": 0, "max": 1, "step": -0.5 })),
        "questions[0].step: must be greater than 0 (got -0.5)",
    );
    check_question_error(
        scale(json!({ "min": 0, "max": 2000, "step": 1 })),
        "questions[0].step: too small: (max - min) / step is 2000, at most 1000",
    );
    let spec = AskSpec::from_json(&with_question(scale(
        json!({ "min": 0, "max": 1000, "step": 1 }),
    )));
    assert!(spec.is_ok(), "exactly 1000 steps is allowed: {spec:?}");
}

#[test]
fn every_problem_is_reported_at_once() {
    check_spec_error(
        json!({ "title": "", "questions": [
            { "id": "a", "kind": "single", "label": "", "options": ["x", "x"] },
            { "id": "a", "kind": "scale", "label": "L", "min": 3, "max": 1 }
        ]}),
        &[
            "title: must not be empty",
            "questions[0].label: must not be empty",
            r#"questions[0].options[1].value: duplicate option value "x""#,
            "questions[1].max: must be greater than min (3)",
            r#"questions[1].id: duplicate question id "a" (also used by questions[0])"#,
        ],
    );
}

/// A spec of `questions` single questions of `options` options, each with
/// `markdown` bytes of Markdown.
fn sized_spec(questions: usize, options: usize, markdown: usize) -> Value {
    let question = |q: usize| {
        let options: Vec<Value> = (0..options)
            .map(|o| json!({"value": format!("o{o}"), "markdown": "m".repeat(markdown)}))
            .collect();
        json!({"id": format!("q{q}"), "kind": "single", "label": "L", "options": options})
    };
    json!({"title": "T", "questions": (0..questions).map(question).collect::<Vec<_>>()})
}

#[test]
fn a_spec_over_its_whole_limit_is_refused_naming_it_and_the_largest_fits_one_record() {
    // Every part within its own limit, the whole 16 MB.
    let huge = sized_spec(QUESTIONS_MAX, OPTIONS_MAX, OPTION_MARKDOWN_BYTES_MAX);
    let bytes = huge.to_string().len();
    check_spec_error(
        huge,
        &[&format!(
            "questions: the question spec is {bytes} bytes, over the limit of {SPEC_BYTES_MAX} bytes"
        )],
    );
    // The largest spec accepted, with its event, fits a 4 MiB log record.
    let markdown = SPEC_BYTES_MAX / (QUESTIONS_MAX * OPTIONS_MAX) - 100;
    let largest = sized_spec(QUESTIONS_MAX, OPTIONS_MAX, markdown);
    assert!(largest.to_string().len() > SPEC_BYTES_MAX - 100_000);
    let spec = AskSpec::from_json(&largest).expect("the largest spec is accepted");
    let event = crate::Event {
        id: crate::EventId::from_uuid(uuid::Uuid::nil()),
        at: crate::Timestamp::from_unix_ms(0),
        body: crate::EventBody::AskOpened {
            session: crate::SessionId::from_uuid(uuid::Uuid::nil()),
            ask: crate::AskId::from_uuid(uuid::Uuid::nil()),
            spec,
            delivery: crate::Delivery::BrowserOpened,
            url: "http://127.0.0.1:65535/ask".into(),
            sid_sha256: [0; 32],
        },
    };
    let encoded = crate::encode(&event).expect("encode");
    assert!(encoded.len() <= 4 << 20, "{} bytes", encoded.len());
}

#[test]
fn spec_error_display_joins_the_problems() {
    let error = AskSpec::from_json(&json!({ "title": "" })).unwrap_err();
    assert_eq!(
        error.to_string(),
        "title: must not be empty; questions: missing required field"
    );
}

fn valid_question() -> impl Strategy<Value = Value> {
    let id = "[a-z][a-z0-9_.-]{0,8}";
    let label = "[A-Za-z ]{0,10}[A-Za-z]";
    let options = proptest::collection::btree_set("[a-z]{1,5}", 1..5)
        .prop_map(|set| set.into_iter().collect::<Vec<_>>());
    prop_oneof![
        (id, label).prop_map(|(id, label)| json!({ "id": id, "kind": "text", "label": label })),
        (id, label, options.clone()).prop_map(|(id, label, options)| {
            json!({ "id": id, "kind": "multi", "label": label, "options": options, "required": true })
        }),
        (id, label, -100i32..100, 1i32..100).prop_map(|(id, label, min, span)| {
            json!({ "id": id, "kind": "scale", "label": label, "min": min, "max": min + span, "tab": "T" })
        }),
    ]
}

proptest! {
    #[test]
    fn from_json_and_to_json_round_trip(questions in proptest::collection::vec(valid_question(), 1..6)) {
        let mut seen = std::collections::HashSet::new();
        let questions: Vec<Value> = questions
            .into_iter()
            .filter(|q| seen.insert(q["id"].as_str().map(str::to_owned)))
            .collect();
        let input = json!({ "title": "T", "questions": questions });
        let spec = AskSpec::from_json(&input).unwrap();
        prop_assert_eq!(spec.to_json(), input);
    }
}
