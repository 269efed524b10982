//! Named plans and the review loop, end to end through the real binary.

use std::path::Path;
use std::time::Duration;

use crate::support::{Server, UrlAnswer, call, call_in_background, get, http, start_with, text_of};
use rmcp::model::{CallToolResult, ElicitationAction, GetPromptRequestParams};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

async fn start_server(dir: &Path, args: &[&str]) -> Server {
    start_with(dir, UrlAnswer::NotSupported, None, &[], args).await
}

fn structured(result: &CallToolResult) -> Value {
    assert_eq!(result.is_error, Some(false), "{}", text_of(result));
    let value = result
        .structured_content
        .clone()
        .expect("structured content");
    // The same JSON is also given as text.
    assert_eq!(
        serde_json::from_str::<Value>(&text_of(result)).expect("json text"),
        value
    );
    value
}

fn plan_file(dir: &Path, name: &str) -> std::path::PathBuf {
    dir.join("docs/plans").join(format!("{name}-plan.md"))
}

/// The plans folder has one spelling whatever way it was given: two
/// windows started with `docs/plans` and `./docs/plans/` share one plan.
#[tokio::test]
async fn a_plans_folder_given_two_ways_is_one_folder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plain = start_server(dir.path(), &["--plans-dir", "docs/plans"]).await;
    let dotted = start_server(dir.path(), &["--plans-dir", "./docs/plans/"]).await;
    let content = json!({"planName": "auth", "content": "# Auth"});
    let first = structured(&call(&plain, "write_plan", content).await);
    let edit = json!({"planName": "auth", "oldString": "Auth", "newString": "Auth v2"});
    let edited = structured(&call(&dotted, "edit_plan", edit).await);
    assert_eq!(first["planPath"], edited["planPath"]);
    let path = plan_file(dir.path(), "auth")
        .canonicalize()
        .expect("plan file");
    assert_eq!(edited["planPath"], path.display().to_string());
    plain.client.cancel().await.expect("shutdown");
    dotted.client.cancel().await.expect("shutdown");
    // One plan in the log, with no hand edit: each saw the other's write.
    let events = planb_tests::logs::events(dir.path());
    let edits = events
        .iter()
        .filter(|e| matches!(e, planb_core::EventBody::NamedPlanChangedOutside { .. }))
        .count();
    assert_eq!(
        edits, 0,
        "a write of the other window was taken for a hand edit"
    );
}

#[tokio::test]
async fn write_and_edit_keep_the_file_and_report_what_changed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = start_server(dir.path(), &[]).await;
    let written = structured(
        &call(
            &server,
            "write_plan",
            json!({"planName": "auth", "content": "# Auth\n- a\n- b\n- a\n"}),
        )
        .await,
    );
    assert_eq!(written["planName"], "auth");
    assert_eq!(written["bytesWritten"], 19);
    let path = plan_file(dir.path(), "auth")
        .canonicalize()
        .expect("plan file");
    assert_eq!(Path::new(written["planPath"].as_str().expect("path")), path);

    let single = structured(
        &call(
            &server,
            "edit_plan",
            json!({"planName": "auth", "oldString": "- b", "newString": "- B"}),
        )
        .await,
    );
    assert_eq!(single["replacementsMade"], 1);
    let all = structured(
        &call(
            &server,
            "edit_plan",
            json!({"planName": "auth", "oldString": "- a", "newString": "- A", "replaceAll": true}),
        )
        .await,
    );
    assert_eq!(all["replacementsMade"], 2);
    let several = structured(
        &call(
            &server,
            "edit_plan",
            json!({"planName": "auth", "edits": [
                {"oldString": "# Auth", "newString": "# Authentication"},
                {"oldString": "- B", "newString": "- Bee"}
            ]}),
        )
        .await,
    );
    assert_eq!(several["replacementsMade"], 2);
    assert_eq!(
        std::fs::read_to_string(&path).expect("read"),
        "# Authentication\n- A\n- Bee\n- A\n"
    );

    for (arguments, expected) in [
        // The one-edit form names the fields it was sent, and quotes the
        // text so the caller can see what did not match.
        (
            json!({"planName": "auth", "oldString": "no\nwhere", "newString": "x"}),
            "oldString: not found in the plan: \"no\\nwhere\"",
        ),
        (
            json!({"planName": "auth", "oldString": "- A", "newString": "x"}),
            "oldString: \"- A\" matches 2 places; pass replaceAll",
        ),
        (
            json!({"planName": "auth", "edits": [{"oldString": "- A\n- Bee", "newString": "x"}, {"oldString": "nowhere", "newString": "y"}]}),
            "edits[1].oldString: not found in the plan: \"nowhere\"",
        ),
        (
            json!({"planName": "nope", "oldString": "a", "newString": "b"}),
            "planName: no plan named nope in this plans directory",
        ),
        (
            json!({"planName": "auth", "edits": [{"oldString": "- A\n- Bee", "newString": "x"}, {"oldString": "Bee", "newString": "y"}]}),
            "overlap",
        ),
        (
            json!({"planName": "missing", "oldString": "a", "newString": "b"}),
            "write_plan first",
        ),
        (
            json!({"planName": "auth", "oldString": "- A"}),
            "newString: required",
        ),
        (
            json!({"planName": "auth", "edits": [{"oldString": "- A", "newString": 3}]}),
            "edits[0].newString: must be a string",
        ),
    ] {
        let result = call(&server, "edit_plan", arguments.clone()).await;
        assert_eq!(result.is_error, Some(true), "{arguments}");
        assert!(
            text_of(&result).contains(expected),
            "{arguments}: {}",
            text_of(&result)
        );
        if arguments.get("edits").is_none() {
            assert!(!text_of(&result).contains("edits["), "{}", text_of(&result));
        }
    }
    // A failed edit changes nothing.
    assert_eq!(
        std::fs::read_to_string(&path).expect("read"),
        "# Authentication\n- A\n- Bee\n- A\n"
    );

    for (arguments, expected) in [
        (
            json!({"planName": "auth", "content": " \n"}),
            "content: must not be empty",
        ),
        (
            json!({"planName": "big", "content": "x".repeat(4 << 20)}),
            "content: must be at most 4128768 bytes (got 4194304)",
        ),
    ] {
        let result = call(&server, "write_plan", arguments).await;
        assert_eq!(result.is_error, Some(true));
        assert!(
            text_of(&result).starts_with(expected),
            "{}",
            text_of(&result)
        );
    }
    for name in ["../x", "", "two words", "a/b", "-auth", "auth_"] {
        let result = call(
            &server,
            "write_plan",
            json!({"planName": name, "content": "x"}),
        )
        .await;
        assert_eq!(result.is_error, Some(true), "{name:?}");
        assert!(
            text_of(&result).starts_with("planName"),
            "{name:?}: {}",
            text_of(&result)
        );
    }
    assert!(!dir.path().join("docs/x-plan.md").exists());
    server.client.cancel().await.expect("shutdown");
}

/// A person who sets the plan's file back to an earlier version's text has
/// changed it: that is recorded, and the next edit applies to it, rather
/// than the file being taken for one planb left behind and overwritten.
#[tokio::test]
async fn a_hand_revert_to_an_earlier_version_is_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = start_server(dir.path(), &[]).await;
    let write = |content: &str| json!({"planName": "db", "content": content});
    structured(&call(&server, "write_plan", write("# DB\n- migrate\n")).await);
    structured(&call(&server, "write_plan", write("# DB\n- rewrite it all\n")).await);
    let path = plan_file(dir.path(), "db");
    std::fs::write(&path, "# DB\n- migrate\n").expect("the person reverts");
    let edit =
        json!({"planName": "db", "oldString": "- migrate", "newString": "- migrate in two steps"});
    structured(&call(&server, "edit_plan", edit).await);
    assert_eq!(
        std::fs::read_to_string(&path).expect("read"),
        "# DB\n- migrate in two steps\n"
    );
    // Changed by hand, kept by a refused edit (which writes nothing), then
    // set back by hand to what planb had written: that is an edit too.
    std::fs::write(&path, "# DB\n- by hand\n").expect("the person edits");
    let refused = json!({"planName": "db", "oldString": "nowhere", "newString": "x"});
    let refused = call(&server, "edit_plan", refused).await;
    assert_eq!(refused.is_error, Some(true), "{}", text_of(&refused));
    std::fs::write(&path, "# DB\n- migrate in two steps\n").expect("and reverts");
    let edit = json!({"planName": "db", "oldString": "two", "newString": "three"});
    structured(&call(&server, "edit_plan", edit).await);
    assert_eq!(
        std::fs::read_to_string(&path).expect("read"),
        "# DB\n- migrate in three steps\n"
    );
    server.client.cancel().await.expect("shutdown");
    assert_eq!(
        crate::support::fold_log(dir.path()).1,
        [
            "named_plan_written",
            "named_plan_written",
            "named_plan_changed_outside",
            "named_plan_edited",
            "named_plan_changed_outside",
            "named_plan_changed_outside",
            "named_plan_edited"
        ]
    );
}

async fn review_url(server: &mut Server) -> (u16, String) {
    let url = tokio::time::timeout(WAIT, server.seen.stderr_urls.recv())
        .await
        .expect("in time")
        .expect("url");
    let rest = url.strip_prefix("http://127.0.0.1:").expect("loopback");
    let (port, path) = rest.split_once('/').expect("path");
    let rid = path.strip_prefix("review?rid=").expect("rid").to_string();
    (port.parse().expect("port"), rid)
}

async fn post_review(port: u16, body: Value) -> crate::support::Response {
    http(
        port,
        "POST",
        "/review",
        &[
            ("Host", format!("127.0.0.1:{port}")),
            ("Origin", format!("http://127.0.0.1:{port}")),
            ("Content-Type", "application/json".to_string()),
        ],
        &body.to_string(),
    )
    .await
}

#[tokio::test]
async fn the_browser_review_approves_or_requests_changes_with_comments() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = start_server(dir.path(), &[]).await;
    structured(
        &call(
            &server,
            "write_plan",
            json!({"planName": "api", "content": "# API\n- add /v2\n"}),
        )
        .await,
    );

    let pending = call_in_background(&server, "submit_plan", json!({"planName": "api"}));
    let (port, rid) = review_url(&mut server).await;
    let page = get(port, &format!("/review?rid={rid}")).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("add /v2"), "the page shows the plan");
    let refused = post_review(port, json!({"rid": rid, "verdict": "changes"})).await;
    assert_eq!(
        refused.status, 422,
        "changes need feedback or a comment: {}",
        refused.body
    );
    let sent = post_review(
        port,
        json!({"rid": rid, "verdict": "changes", "feedback": "Needs a rollout plan.",
        "comments": [{"quote": "add /v2", "text": "Keep /v1 for a release."}]}),
    )
    .await;
    assert_eq!(sent.status, 200, "{}", sent.body);
    let verdict = structured(
        &tokio::time::timeout(WAIT, pending)
            .await
            .expect("in time")
            .expect("task"),
    );
    assert_eq!(verdict["approved"], false);
    let feedback = verdict["feedback"].as_str().expect("feedback");
    assert!(
        feedback.contains("Needs a rollout plan.")
            && feedback.contains("> add /v2")
            && feedback.contains("Keep /v1"),
        "{feedback}"
    );
    let replay = post_review(port, json!({"rid": rid, "verdict": "approve"})).await;
    assert_eq!(replay.status, 404, "a review is sent once");

    structured(&call(&server, "edit_plan", json!({"planName": "api", "oldString": "- add /v2", "newString": "- add /v2, keep /v1"})).await);
    let pending = call_in_background(&server, "submit_plan", json!({"planName": "api"}));
    let (port, rid) = review_url(&mut server).await;
    let page = get(port, &format!("/review?rid={rid}")).await;
    assert!(
        page.body.contains("keep /v1"),
        "round 2 shows the revised plan"
    );
    assert_eq!(
        post_review(port, json!({"rid": rid, "verdict": "approve"}))
            .await
            .status,
        200
    );
    let verdict = structured(
        &tokio::time::timeout(WAIT, pending)
            .await
            .expect("in time")
            .expect("task"),
    );
    assert_eq!(verdict, json!({"approved": true}));
    server.client.cancel().await.expect("shutdown");
    let kinds = crate::support::fold_log(dir.path()).1;
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == "named_plan_reviewed")
            .count(),
        2
    );
}

#[tokio::test]
async fn the_review_form_elicitation_records_the_decision() {
    let cases = [
        (
            ElicitationAction::Accept,
            Some(json!({"decision": "approve"})),
            json!({"approved": true}),
        ),
        (
            ElicitationAction::Accept,
            Some(json!({"decision": "deny", "feedback": "Split step 2."})),
            json!({"approved": false, "feedback": "Split step 2."}),
        ),
        (
            ElicitationAction::Decline,
            None,
            json!({"approved": false, "feedback": "The person dismissed the review without a verdict."}),
        ),
    ];
    for (action, content, expected) in cases {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = start_with(
            dir.path(),
            UrlAnswer::NotSupported,
            Some((action, content)),
            &[],
            &["--review", "form"],
        )
        .await;
        structured(
            &call(
                &server,
                "write_plan",
                json!({"planName": "p", "content": "# P"}),
            )
            .await,
        );
        let verdict = structured(&call(&server, "submit_plan", json!({"planName": "p"})).await);
        assert_eq!(verdict, expected);
        // The plan rides along for a client with its own review view.
        let mut server = server;
        let form = server.seen.forms.try_recv().expect("the form request");
        assert_eq!(form["_meta"]["ui"], "planReview", "{form}");
        assert_eq!(form["_meta"]["plan"], "# P", "{form}");
        assert_eq!(form["_meta"]["planName"], "p", "{form}");
        server.client.cancel().await.expect("shutdown");
    }
}

/// A submit command that prints the name of the plan file it is given.
const ECHO_REVIEWER: [&str; 4] = [
    "sh",
    "-c",
    "echo \"reviewed $(basename \"$1\")\"",
    "reviewer",
];

/// Starts a server with `args` (ending with [`ECHO_REVIEWER`]), writes and
/// submits a plan, and checks the command's output comes back as feedback,
/// never as approval.
async fn reviewed_by_echo(args: &[&str]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = start_server(dir.path(), args).await;
    structured(
        &call(
            &server,
            "write_plan",
            json!({"planName": "ops", "content": "# Ops"}),
        )
        .await,
    );
    let verdict = structured(&call(&server, "submit_plan", json!({"planName": "ops"})).await);
    assert_eq!(
        verdict,
        json!({"approved": false, "feedback": "reviewed ops-plan.md"})
    );
    server.client.cancel().await.expect("shutdown");
}

/// A submit command that fails is `submit_plan`'s error, saying what the
/// command printed on stderr (what a command's output becomes is tested
/// at planb-app: app/tests/app/sessions.rs).
#[tokio::test]
async fn a_failing_submit_command_is_an_error_with_its_stderr() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = start_server(
        dir.path(),
        &[
            "--",
            "sh",
            "-c",
            "echo 'lint failed' >&2; exit 3",
            "reviewer",
        ],
    )
    .await;
    structured(
        &call(
            &server,
            "write_plan",
            json!({"planName": "ops", "content": "# Ops"}),
        )
        .await,
    );
    let result = call(&server, "submit_plan", json!({"planName": "ops"})).await;
    assert_eq!(result.is_error, Some(true));
    assert!(
        text_of(&result).contains("lint failed"),
        "{}",
        text_of(&result)
    );
    server.client.cancel().await.expect("shutdown");
}

#[tokio::test]
async fn the_plan_prompt_substitutes_arguments_and_can_be_replaced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = start_server(dir.path(), &[]).await;
    let prompts = server
        .client
        .list_all_prompts()
        .await
        .expect("prompts/list");
    let plan = prompts
        .iter()
        .find(|p| p.name == "plan")
        .expect("plan prompt");
    let arguments = plan.arguments.as_ref().expect("arguments");
    assert_eq!(arguments.len(), 1);
    assert_eq!(arguments[0].name, "ARGUMENTS");
    assert_eq!(arguments[0].required, Some(true));
    let Value::Object(args) = json!({"ARGUMENTS": "migrate the billing service"}) else {
        unreachable!()
    };
    let prompt = server
        .client
        .get_prompt(GetPromptRequestParams::new("plan").with_arguments(args.clone()))
        .await
        .expect("prompts/get");
    let text = serde_json::to_string(&prompt.messages).expect("json");
    assert!(
        text.contains("migrate the billing service") && text.contains("submit_plan"),
        "{text}"
    );
    server.client.cancel().await.expect("shutdown");

    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("prompt.md");
    std::fs::write(&file, "Custom planning for: $ARGUMENTS!").expect("write");
    let server = start_server(dir.path(), &["--prompt-file", file.to_str().expect("utf8")]).await;
    let prompt = server
        .client
        .get_prompt(GetPromptRequestParams::new("plan").with_arguments(args))
        .await
        .expect("prompts/get");
    let text = serde_json::to_string(&prompt.messages).expect("json");
    assert!(
        text.contains("Custom planning for: migrate the billing service!"),
        "{text}"
    );
    server.client.cancel().await.expect("shutdown");
}

#[tokio::test]
async fn a_plan_can_be_tied_to_a_session_so_the_arc_replays_together() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = start_server(dir.path(), &[]).await;
    let unknown = call(&server, "write_plan", json!({"planName": "x", "content": "# X", "sessionId": "0190f1c2-0000-7000-8000-000000000001"})).await;
    assert_eq!(unknown.is_error, Some(true));
    assert!(
        text_of(&unknown).contains("init_planb_session"),
        "{}",
        text_of(&unknown)
    );
    let session = crate::support::new_session(&server).await;
    structured(
        &call(
            &server,
            "write_plan",
            json!({"planName": "x", "content": "# X", "sessionId": session}),
        )
        .await,
    );
    server.client.cancel().await.expect("shutdown");
    let (store, _) = planb_projections::Store::open(
        planb_projections::DataRoot::new(dir.path()),
        std::sync::Arc::new(planb_projections::SystemEnvironment),
    )
    .expect("open");
    let tied = store
        .read(|s| {
            let dir = dir.path().canonicalize().expect("dir").join("docs/plans");
            let key = planb_core::PlanKey::new(
                dir.display().to_string(),
                planb_core::PlanName::parse("x").expect("name"),
            );
            s.named_plan(&key).and_then(|p| p.session)
        })
        .expect("read");
    assert_eq!(tied.map(|s| s.to_string()), Some(session));
}

#[tokio::test]
async fn temp_files_left_by_killed_writers_are_swept_by_the_next_change_of_any_plan() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = start_server(dir.path(), &[]).await;
    structured(
        &call(
            &server,
            "write_plan",
            json!({"planName": "auth", "content": "# Auth\n"}),
        )
        .await,
    );
    let plans = dir.path().join("docs/plans");
    // What writers killed mid-write leave: one of this plan, one of another
    // plan nobody changes again; and files that are not such temp files.
    let left = [".auth-plan.md.4242.0.tmp", ".billing-plan.md.4243.17.tmp"];
    let kept = ["notes.tmp", ".billing-plan.md.tmp", "billing-plan.md"];
    for name in left.iter().chain(&kept) {
        std::fs::write(plans.join(name), "partial").expect("leftover");
    }
    structured(
        &call(
            &server,
            "write_plan",
            json!({"planName": "db", "content": "# DB\n"}),
        )
        .await,
    );
    for name in left {
        assert!(!plans.join(name).exists(), "{name} was not swept");
    }
    for name in kept {
        assert!(plans.join(name).exists(), "{name} was removed");
    }
    server.client.cancel().await.expect("shutdown");
}

#[tokio::test]
async fn configs_written_for_other_plan_servers_start_a_submit_command_without_separator_and_a_missing_prompt_file()
 {
    // The submit command follows planb's own options, without `--`, as
    // other plan servers take it.
    let mut args = vec!["--plans-dir", "docs/plans"];
    args.extend(ECHO_REVIEWER);
    reviewed_by_echo(&args).await;

    // A prompt file that does not exist: the server starts with the built-in
    // prompt and says what was wrong.
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("no-such-prompt.md");
    let server = start_server(
        dir.path(),
        &["--prompt-file", missing.to_str().expect("utf8")],
    )
    .await;
    let Value::Object(args) = json!({"ARGUMENTS": "ship it"}) else {
        unreachable!()
    };
    let prompt = server
        .client
        .get_prompt(GetPromptRequestParams::new("plan").with_arguments(args))
        .await
        .expect("prompts/get");
    let text = serde_json::to_string(&prompt.messages).expect("json");
    assert!(
        text.contains("ship it") && text.contains("submit_plan"),
        "{text}"
    );
    let description = prompt.description.unwrap_or_default();
    assert!(description.contains("no-such-prompt.md"), "{description}");
    // ARGUMENTS past the prompt's limit are refused, named.
    let Value::Object(args) = json!({"ARGUMENTS": "x".repeat(100_000)}) else {
        unreachable!()
    };
    let refused = server
        .client
        .get_prompt(GetPromptRequestParams::new("plan").with_arguments(args))
        .await
        .expect_err("too long");
    assert!(refused.to_string().contains("ARGUMENTS"), "{refused}");
    server.client.cancel().await.expect("shutdown");
    let said = server.stderr.lock().await.join("\n");
    assert!(said.contains("no-such-prompt.md"), "{said}");

    // A prompt file over its limit is not used, and the reason says so.
    let big = dir.path().join("big-prompt.md");
    std::fs::write(&big, "$ARGUMENTS\n".repeat(40_000)).expect("big prompt");
    let server = start_server(dir.path(), &["--prompt-file", big.to_str().expect("utf8")]).await;
    let Value::Object(args) = json!({"ARGUMENTS": "ship it"}) else {
        unreachable!()
    };
    let prompt = server
        .client
        .get_prompt(GetPromptRequestParams::new("plan").with_arguments(args))
        .await
        .expect("prompts/get");
    let description = prompt.description.unwrap_or_default();
    assert!(
        description.contains("over the 262144-byte limit"),
        "{description}"
    );
    server.client.cancel().await.expect("shutdown");
}
