//! The plan review page in headless Chromium: a person comments on passages
//! of the real page served by the real `planb-mcp` binary, requests changes,
//! then approves the revised plan, while the agent's `submit_plan` call waits
//! over stdio. Needs Debian's `chromium` and `chromium-driver`
//! (`scripts/test` installs them); without them the test fails.

use std::path::Path;

use crate::support::{Server, UrlAnswer, call, call_in_background, get, start, text_of};
use fantoccini::actions::{InputSource, KeyAction, KeyActions};
use fantoccini::key::Key;
use planb_core::{EventBody, ReviewChannel, ReviewComment, Verdict};
use planb_tests::WAIT;
use planb_tests::browser::Browser;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

const PLAN: &str = "\
# Rollout plan

- Migrate the users table in two steps
- Back up the database first

The deploy runs behind a feature flag so it can be turned off quickly.
";
/// The line round 2 adds after the second list item.
const ADDED_LINE: &str = "- Keep the old columns for one release";

/// A passage inside the first list item, commented on with the "Add comment"
/// button that follows the selection.
const LIST_PASSAGE: &str = "in two steps";
const LIST_COMMENT: &str = "Say which step comes first.";
/// A passage inside the paragraph, commented on with the C shortcut.
const PARAGRAPH_PASSAGE: &str = "feature flag";
const PARAGRAPH_COMMENT: &str = "Name the flag.";
const FEEDBACK: &str = "Add a rollback step.";

/// review.js ignores a click on "Confirm approval" sooner than this after
/// the click on "Approve", taking it for the second half of a double click.
const CONFIRM_DELAY_MS: u64 = 600;

/// The `submit_plan` result as JSON, checked to be a success whose text
/// repeats its structured content.
fn structured(result: &CallToolResult) -> Value {
    let text = text_of(result);
    assert_eq!(result.is_error, Some(false), "{text}");
    let value = result
        .structured_content
        .clone()
        .unwrap_or_else(|| panic!("no structured content: {text}"));
    let from_text: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON text: {e}: {text:?}"));
    assert_eq!(
        from_text, value,
        "the text and the structured content differ"
    );
    value
}

/// Calls `submit_plan` for `plan` in the background: it returns only once
/// the person has sent a verdict.
fn submit_in_background(server: &Server, plan: &str) -> JoinHandle<CallToolResult> {
    call_in_background(server, "submit_plan", json!({"planName": plan}))
}

/// The next review URL the server printed (`ASK_NO_OPEN=1` prints it instead
/// of opening a browser), with its port and its path (`/review?rid=…`).
async fn review_url(server: &mut Server) -> (String, u16, String) {
    let url = tokio::time::timeout(WAIT, server.seen.stderr_urls.recv())
        .await
        .expect("the server printed the review URL in time")
        .expect("stderr open");
    let (port, path) = url
        .strip_prefix("http://127.0.0.1:")
        .and_then(|rest| rest.split_once('/'))
        .filter(|(_, path)| path.starts_with("review?rid="))
        .and_then(|(port, path)| Some((port.parse().ok()?, format!("/{path}"))))
        .unwrap_or_else(|| panic!("not a loopback review URL: {url}"));
    (url, port, path)
}

/// The verdict the agent got, waiting at most [`WAIT`] for it.
async fn verdict(pending: JoinHandle<CallToolResult>) -> Value {
    let result = tokio::time::timeout(WAIT, pending)
        .await
        .expect("submit_plan returned in time")
        .expect("the submit_plan task");
    structured(&result)
}

/// Selects `passage`, the first occurrence of it inside one text node of the
/// rendered plan, as a person dragging over it would.
async fn select_in_plan(browser: &Browser, passage: &str) {
    let passage_json = serde_json::to_string(passage).expect("a string");
    let script = format!(
        "const passage = {passage_json};
         const walker = document.createTreeWalker(document.getElementById('plan'), NodeFilter.SHOW_TEXT);
         for (let node = walker.nextNode(); node; node = walker.nextNode()) {{
             const at = node.data.indexOf(passage);
             if (at < 0) continue;
             const range = document.createRange();
             range.setStart(node, at);
             range.setEnd(node, at + passage.length);
             const selection = document.getSelection();
             selection.removeAllRanges();
             selection.addRange(range);
             return true;
         }}
         return false;"
    );
    assert_eq!(
        browser.js(&script).await,
        Value::Bool(true),
        "{passage:?} is not in one text node of the plan"
    );
}

/// Waits for the comment composer to open on `passage` with the focus in
/// its text field.
async fn wait_for_composer(browser: &Browser, passage: &str) {
    browser
        .wait_until(
            "the comment composer",
            "!document.getElementById('composer').hidden \
             && document.activeElement === document.getElementById('composer-text')",
        )
        .await;
    assert_eq!(browser.text_content("#composer-quote").await, passage);
}

/// Ctrl+Enter, which saves the comment being written.
async fn press_ctrl_enter(browser: &Browser) {
    let control: char = Key::Control.into();
    let enter: char = Key::Enter.into();
    let keys = KeyActions::new("keyboard".to_owned())
        .then(KeyAction::Down { value: control })
        .then(KeyAction::Down { value: enter })
        .then(KeyAction::Up { value: enter })
        .then(KeyAction::Up { value: control });
    browser
        .client()
        .perform_actions(keys)
        .await
        .expect("Ctrl+Enter");
}

/// The `(quote, comment)` of each card in the page's list of comments.
async fn comment_cards(browser: &Browser) -> Vec<(String, String)> {
    let cards = browser
        .eval(
            "[...document.querySelectorAll('#comment-list .comment-card')] \
             .map(c => [c.querySelector('.quote').textContent, c.querySelector('.comment-text').textContent])",
        )
        .await;
    serde_json::from_value(cards).expect("pairs of strings")
}

/// The reviews recorded in the log of the data root at `root`, read after
/// the server stopped, and the kinds of every named-plan event in order.
fn recorded_reviews(root: &Path) -> (Vec<&'static str>, Vec<EventBody>) {
    let mut kinds = Vec::new();
    let mut reviews = Vec::new();
    for event in planb_tests::logs::events(root) {
        let kind = event.kind_name();
        if kind.starts_with("named_plan_") {
            kinds.push(kind);
        }
        if matches!(event, EventBody::NamedPlanReviewed { .. }) {
            reviews.push(event);
        }
    }
    (kinds, reviews)
}

#[tokio::test]
#[ignore = "slow: drives Chromium; scripts/test runs it"]
async fn comments_and_feedback_request_changes_then_a_confirmed_approval_approves() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = start(dir.path(), UrlAnswer::NotSupported, &[]).await;
    structured(
        &call(
            &server,
            "write_plan",
            json!({"planName": "rollout", "content": PLAN}),
        )
        .await,
    );
    let browser = Browser::start().await;

    let pending = submit_in_background(&server, "rollout");
    let (url, _, _) = review_url(&mut server).await;
    browser.open(&url).await;
    comment_and_request_changes(&browser).await;
    let round_1 = verdict(pending).await;
    assert_eq!(round_1["approved"], false, "{round_1}");
    let fields = round_1.as_object().map(|o| o.len());
    assert_eq!(fields, Some(2), "only approved and feedback: {round_1}");
    let feedback = round_1["feedback"].as_str().unwrap_or_default();
    let list_quote = format!("> {LIST_PASSAGE}\n{LIST_COMMENT}");
    let paragraph_quote = format!("> {PARAGRAPH_PASSAGE}\n{PARAGRAPH_COMMENT}");
    assert!(
        feedback.starts_with(FEEDBACK)
            && feedback.contains(&list_quote)
            && feedback.contains(&paragraph_quote),
        "{feedback}"
    );
    assert!(
        feedback.find(&list_quote) < feedback.find(&paragraph_quote),
        "comments in the plan's order: {feedback}"
    );

    structured(
        &call(
            &server,
            "edit_plan",
            json!({
                "planName": "rollout",
                "oldString": "- Back up the database first\n",
                "newString": format!("- Back up the database first\n{ADDED_LINE}\n"),
            }),
        )
        .await,
    );
    let pending = submit_in_background(&server, "rollout");
    let (url, port, path) = review_url(&mut server).await;
    browser.open(&url).await;
    check_changes_tab(&browser).await;
    approve_with_two_clicks(&browser, port, &path, &pending).await;
    assert_eq!(verdict(pending).await, json!({"approved": true}));
    browser.close().await;
    server.client.cancel().await.expect("shutdown");

    check_recorded_reviews(dir.path());
}

/// Round 1 in the page: a comment through the "Add comment" button that
/// follows a selection, one through the C shortcut, general feedback, then
/// "Request changes".
async fn comment_and_request_changes(browser: &Browser) {
    browser
        .wait_until(
            "the review script to add the comment buttons",
            "document.querySelectorAll('#panel-plan .block-comment').length === 4",
        )
        .await;
    assert_eq!(
        browser.missing_assets().await,
        Vec::<String>::new(),
        "the page refers to assets its server does not serve"
    );
    assert_eq!(browser.text("#plan h1").await, "Rollout plan");

    select_in_plan(browser, LIST_PASSAGE).await;
    browser
        .wait_until(
            "the Add comment button beside the selection",
            "!document.getElementById('selection-comment').hidden",
        )
        .await;
    assert!(browser.is_visible("#selection-comment").await);
    browser.click("#selection-comment").await;
    wait_for_composer(browser, LIST_PASSAGE).await;
    browser.type_text(LIST_COMMENT).await;
    browser.click("#composer-save").await;
    wait_for_comments(browser, 1).await;

    select_in_plan(browser, PARAGRAPH_PASSAGE).await;
    browser.type_text("c").await;
    wait_for_composer(browser, PARAGRAPH_PASSAGE).await;
    browser.type_text(PARAGRAPH_COMMENT).await;
    press_ctrl_enter(browser).await;
    wait_for_comments(browser, 2).await;
    // Started from the keyboard, the focus returns beside the passage.
    let focused_label = browser
        .eval("document.activeElement.getAttribute('aria-label') || ''")
        .await;
    assert!(
        focused_label
            .as_str()
            .is_some_and(|label| label.starts_with("Comment on paragraph: The deploy")),
        "focus after saving: {focused_label}"
    );
    assert_eq!(
        comment_cards(browser).await,
        [
            (LIST_PASSAGE.to_owned(), LIST_COMMENT.to_owned()),
            (PARAGRAPH_PASSAGE.to_owned(), PARAGRAPH_COMMENT.to_owned()),
        ]
    );
    assert!(
        browser
            .check("CSS.highlights.get('planb-comment').size === 2")
            .await,
        "both passages are painted in the plan"
    );

    browser.send_keys("#feedback", FEEDBACK).await;
    assert_eq!(
        browser.text("#review-status").await,
        "2 comments · feedback written"
    );
    browser.click("#request-changes").await;
    browser
        .wait_until(
            "the changes-requested confirmation",
            "!document.getElementById('done-changes').hidden \
             && document.getElementById('review-form').hidden",
        )
        .await;
    assert_eq!(
        browser.text("#done-changes-title").await,
        "Changes requested — sent to the agent"
    );
}

/// Waits until the list holds `count` comments and the composer is closed.
async fn wait_for_comments(browser: &Browser, count: usize) {
    browser
        .wait_until(
            &format!("{count} comments in the list"),
            &format!(
                "document.querySelectorAll('#comment-list .comment-card').length === {count} \
                 && document.getElementById('composer').hidden"
            ),
        )
        .await;
}

/// Round 2 in the page: the Changes tab marks the one added line.
async fn check_changes_tab(browser: &Browser) {
    browser
        .wait_until(
            "the review script to add the comment buttons",
            "document.querySelectorAll('#panel-plan .block-comment').length === 5",
        )
        .await;
    assert_eq!(browser.text_content(".round-number").await, "Round 2");
    assert_eq!(
        browser.text_content("#tab-changes .count-added").await,
        "+1"
    );
    browser.click("#tab-changes").await;
    browser
        .wait_until(
            "the Changes panel",
            "!document.getElementById('panel-changes').hidden \
             && document.getElementById('panel-plan').hidden",
        )
        .await;
    let added = browser
        .eval(
            "[...document.querySelectorAll('#panel-changes .diff-line.diff-added')] \
             .map(l => [l.querySelector('.diff-sign').textContent, l.querySelector('ins.diff-text').textContent])",
        )
        .await;
    assert_eq!(added, json!([["+", format!("Added: {ADDED_LINE}")]]));
    assert!(
        browser
            .check("document.querySelector('#panel-changes .diff-removed') === null")
            .await
    );
    let marked = browser
        .check(
            "getComputedStyle(document.querySelector('#panel-changes .diff-added')).backgroundColor \
             !== getComputedStyle(document.querySelector('#panel-changes .diff-unchanged')).backgroundColor",
        )
        .await;
    assert!(
        marked,
        "the added line is drawn like the unchanged ones around it"
    );
}

/// Round 2's verdict: one click on Approve only arms it, and the agent's
/// call keeps waiting; a click on "Confirm approval" sends it.
async fn approve_with_two_clicks(
    browser: &Browser,
    port: u16,
    path: &str,
    pending: &JoinHandle<CallToolResult>,
) {
    // Every POST the page makes is counted, so "nothing was sent" is a fact
    // about the page rather than a guess about timing.
    browser
        .js("window.__posts = 0; const fetch = window.fetch; \
             window.fetch = (...args) => { window.__posts += 1; return fetch.apply(window, args); };")
        .await;
    browser.click("#approve").await;
    browser
        .js("window.__armedAt = window.performance.now();")
        .await;
    assert_eq!(
        browser.text_content("#approve .btn-label").await,
        "Confirm approval"
    );
    assert!(browser.is_visible("#approve-cancel").await);
    let message = browser.text("#verdict-message").await;
    assert!(message.contains("Click Confirm approval"), "{message}");
    assert_eq!(
        browser.eval("window.__posts").await,
        json!(0),
        "one click on Approve sent the review"
    );
    let page = get(port, path).await;
    assert_eq!(page.status, 200, "the review is still open on the server");
    assert!(
        !pending.is_finished(),
        "one click on Approve ended the agent's call"
    );

    browser
        .wait_until(
            "the page's guard against double clicks to pass",
            &format!("window.performance.now() - window.__armedAt > {CONFIRM_DELAY_MS}"),
        )
        .await;
    browser.click("#approve").await;
    browser
        .wait_until(
            "the approval confirmation",
            "!document.getElementById('done-approve').hidden \
             && document.getElementById('review-form').hidden",
        )
        .await;
    assert_eq!(browser.eval("window.__posts").await, json!(1));
    assert_eq!(
        browser.text("#done-approve-title").await,
        "Approved — the agent can proceed"
    );
}

/// The log holds both rounds' reviews as the page sent them.
fn check_recorded_reviews(root: &Path) {
    let (kinds, reviews) = recorded_reviews(root);
    assert_eq!(
        kinds,
        [
            "named_plan_written",
            "named_plan_submitted",
            "named_plan_reviewed",
            "named_plan_edited",
            "named_plan_submitted",
            "named_plan_reviewed",
        ]
    );
    let EventBody::NamedPlanReviewed {
        round,
        verdict,
        feedback,
        comments,
        channel,
        ..
    } = &reviews[0]
    else {
        unreachable!("only reviews are collected")
    };
    assert_eq!(
        (*round, *verdict, feedback.as_deref(), *channel),
        (
            1,
            Verdict::ChangesRequested,
            Some(FEEDBACK),
            ReviewChannel::Browser
        )
    );
    assert_eq!(
        comments,
        &[
            ReviewComment {
                quote: LIST_PASSAGE.into(),
                text: LIST_COMMENT.into()
            },
            ReviewComment {
                quote: PARAGRAPH_PASSAGE.into(),
                text: PARAGRAPH_COMMENT.into()
            },
        ]
    );
    let EventBody::NamedPlanReviewed {
        round,
        verdict,
        feedback,
        comments,
        channel,
        ..
    } = &reviews[1]
    else {
        unreachable!("only reviews are collected")
    };
    assert_eq!(
        (
            *round,
            *verdict,
            feedback.as_deref(),
            comments.len(),
            *channel
        ),
        (2, Verdict::Approved, None, 0, ReviewChannel::Browser)
    );
}

/// A review whose server went away with its page open is taken up by the
/// next server's `submit_plan`: the same round, its Changes tab against
/// what the person last reviewed; the round is answered once and no round
/// is left awaiting review.
#[tokio::test]
#[ignore = "slow: drives Chromium; scripts/test runs it"]
async fn a_review_open_when_its_server_exits_is_taken_up_by_the_next_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut first = start(dir.path(), UrlAnswer::NotSupported, &[]).await;
    let write = json!({"planName": "rollout", "content": PLAN});
    structured(&call(&first, "write_plan", write).await);
    // Round 1, reviewed: changes requested.
    let pending = submit_in_background(&first, "rollout");
    let (_, port, path) = review_url(&mut first).await;
    let rid = path.trim_start_matches("/review?rid=");
    let sent = crate::support::post_json(
        port,
        "/review",
        &json!({"rid": rid, "verdict": "changes", "feedback": "Keep the old columns."}),
    )
    .await;
    assert_eq!(sent.status, 200, "{}", sent.body);
    assert_eq!(verdict(pending).await["approved"], false);
    let edit = json!({
        "planName": "rollout",
        "oldString": "- Back up the database first\n",
        "newString": format!("- Back up the database first\n{ADDED_LINE}\n"),
    });
    structured(&call(&first, "edit_plan", edit).await);
    // Round 2 opens; its server exits before anyone answers.
    let peer = first.client.peer().clone();
    let Value::Object(arguments) = json!({"planName": "rollout"}) else {
        unreachable!("a JSON object literal")
    };
    // The call is cut off when its server exits: its end is not awaited.
    tokio::spawn(async move {
        let _ = peer
            .call_tool(CallToolRequestParams::new("submit_plan").with_arguments(arguments))
            .await;
    });
    review_url(&mut first).await;
    first.client.cancel().await.expect("shutdown");

    let mut second = start(dir.path(), UrlAnswer::NotSupported, &[]).await;
    let pending = submit_in_background(&second, "rollout");
    let (url, port, path) = review_url(&mut second).await;
    let browser = Browser::start().await;
    browser.open(&url).await;
    // Round 2 again, its changes against round 1, which the person read.
    check_changes_tab(&browser).await;
    browser.close().await;
    let rid = path.trim_start_matches("/review?rid=");
    let sent =
        crate::support::post_json(port, "/review", &json!({"rid": rid, "verdict": "approve"}))
            .await;
    assert_eq!(sent.status, 200, "{}", sent.body);
    assert_eq!(verdict(pending).await, json!({"approved": true}));
    second.client.cancel().await.expect("shutdown");
    let (kinds, reviews) = recorded_reviews(dir.path());
    let submitted = kinds
        .iter()
        .filter(|k| **k == "named_plan_submitted")
        .count();
    assert_eq!(submitted, 2, "{kinds:?}");
    let rounds: Vec<u32> = reviews
        .iter()
        .filter_map(|r| match r {
            EventBody::NamedPlanReviewed { round, .. } => Some(*round),
            _ => None,
        })
        .collect();
    assert_eq!(rounds, [1, 2], "every round answered once");
}
