//! Limits agree from the form down to the log: answers that
//! pass every per-question limit but would not fit in one log record are a
//! 422 naming the limit, the ask stays open, and nothing is lost.

use std::time::Duration;

use crate::support::{UrlAnswer, new_session, parse_form_url, post_json, start, text_of};
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

const QUESTIONS: usize = 20;
const WAIT: Duration = Duration::from_secs(60);

fn long_answers(chars_each: usize) -> Value {
    // A three-byte character: the worst case for bytes per character.
    let text = "漢".repeat(chars_each);
    let answers: serde_json::Map<String, Value> = (0..QUESTIONS)
        .map(|i| (format!("q{i}"), Value::String(text.clone())))
        .collect();
    Value::Object(answers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_within_every_field_limit_but_over_a_record_get_422_and_lose_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = start(dir.path(), UrlAnswer::NotSupported, &[]).await;
    let session = new_session(&server).await;
    let questions: Vec<Value> = (0..QUESTIONS)
        .map(|i| json!({"id": format!("q{i}"), "kind": "longtext", "label": format!("Question {i}")}))
        .collect();
    let Value::Object(arguments) =
        json!({"sessionId": session, "title": "Long answers", "questions": questions})
    else {
        unreachable!()
    };
    let peer = server.client.peer().clone();
    let pending = tokio::spawn(async move {
        peer.call_tool(CallToolRequestParams::new("ask_user").with_arguments(arguments))
            .await
            .expect("ask_user")
    });
    let url = tokio::time::timeout(WAIT, server.seen.stderr_urls.recv())
        .await
        .expect("in time")
        .expect("url");
    let (port, sid) = parse_form_url(&url);

    // 20 × 100,000 characters: each at its limit, 6 MB in all.
    let too_much = long_answers(100_000);
    let kept_draft = json!({"q0": "the draft so far"});
    let saved = post_json(port, "/draft", &json!({"sid": sid, "answers": kept_draft})).await;
    assert_eq!(saved.status, 204, "{}", saved.body);
    for path in ["/draft", "/submit"] {
        let refused = post_json(port, path, &json!({"sid": sid, "answers": too_much})).await;
        assert_eq!(refused.status, 422, "{path}: {}", refused.body);
        let general = refused.json()["general"].to_string();
        assert!(
            general.contains("limit of 2097152 bytes"),
            "{path}: {general}"
        );
    }

    // Just under the limit is recorded and returned whole.
    let fits = long_answers(34_000);
    let accepted = post_json(port, "/submit", &json!({"sid": sid, "answers": fits})).await;
    assert_eq!(accepted.status, 200, "{}", accepted.body);
    let result = tokio::time::timeout(WAIT, pending)
        .await
        .expect("in time")
        .expect("task");
    let answers: Value = serde_json::from_str(&text_of(&result)).expect("answers json");
    assert_eq!(answers, fits);
    server.client.cancel().await.expect("shutdown");

    // The log holds the kept draft and the answers, and checks clean.
    let check = crate::support::planb(dir.path(), &["check"]);
    let text = String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success(), "{text}");
    assert!(text.contains("ask_draft_saved              1"), "{text}");
    assert!(text.contains("ask_answered                 1"), "{text}");
}

/// A question spec within every per-field limit but 16 MB in all is refused
/// before anything is recorded, naming the field and the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_spec_over_its_whole_limit_is_refused_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = start(dir.path(), UrlAnswer::NotSupported, &[]).await;
    let session = new_session(&server).await;
    let markdown = "m".repeat(planb_core::question::OPTION_MARKDOWN_BYTES_MAX);
    let options: Vec<Value> = (0..planb_core::question::OPTIONS_MAX)
        .map(|o| json!({"value": format!("o{o}"), "markdown": markdown}))
        .collect();
    let questions: Vec<Value> = (0..QUESTIONS)
        .map(|i| json!({"id": format!("q{i}"), "kind": "single", "label": "Pick", "options": options}))
        .collect();
    let Value::Object(arguments) =
        json!({"sessionId": session, "title": "Many options", "questions": questions})
    else {
        unreachable!()
    };
    let result = tokio::time::timeout(
        WAIT,
        server
            .client
            .call_tool(CallToolRequestParams::new("ask_user").with_arguments(arguments)),
    )
    .await
    .expect("an answer in time")
    .expect("ask_user");
    let text = text_of(&result);
    let shown = planb_core::text::clip(&text, 300);
    assert_eq!(result.is_error, Some(true), "{shown}");
    let limit = planb_core::question::SPEC_BYTES_MAX;
    assert!(
        text.contains("questions: the question spec is ")
            && text.contains(&format!("bytes, over the limit of {limit} bytes")),
        "{shown}"
    );
    let (_, kinds) = crate::support::fold_log(dir.path());
    assert!(!kinds.contains(&"ask_opened"), "{kinds:?}");
}
