//! The execution-plan tools over stdio with a real MCP client: `plan_create`
//! (written steps, and a goal turned into steps by a model program),
//! `plan_execute` (dry run, progress per step, resume after a kill, stop),
//! `plan_create_and_execute`, `plan_list`, `plan_show`, against real
//! downstream MCP servers (the `downstream` example) recording their calls.

use planb_tests::plans::step;

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::{Server, UrlAnswer, call, start};
use rmcp::model::{CallToolRequestParams, CallToolResult, NumberOrString, ProgressToken};
use serde_json::{Value, json};

pub(crate) fn write_servers(dir: &Path) -> PathBuf {
    let ds = crate::support::downstream_binary();
    let servers = json!({"mcpServers": {
        "alpha": {"command": ds, "args": ["alpha"]},
        "beta": {"command": ds, "args": ["beta", "echo", "sleep"]},
    }});
    let path = dir.join("servers.json");
    std::fs::write(&path, servers.to_string()).expect("servers");
    path
}

async fn planb(dir: &Path, env: &[(&str, &str)]) -> Server {
    let servers = write_servers(dir);
    let calls = dir.join("calls");
    let mut all: Vec<(&str, &str)> = vec![
        ("PLANB_SERVERS", servers.to_str().expect("path")),
        ("DOWNSTREAM_CALLS", calls.to_str().expect("path")),
    ];
    all.extend_from_slice(env);
    start(dir, UrlAnswer::NotSupported, &all).await
}

fn calls(dir: &Path) -> Vec<Value> {
    planb_tests::plans::calls(&dir.join("calls"))
}

fn json_of(result: &CallToolResult) -> Value {
    let structured = result.structured_content.clone().expect("structured");
    let text = crate::support::text_of(result);
    assert_eq!(
        serde_json::from_str::<Value>(&text).expect("the text is JSON"),
        structured,
        "text and structuredContent differ"
    );
    structured
}

fn ok(result: &CallToolResult) -> Value {
    let value = json_of(result);
    assert_ne!(result.is_error, Some(true), "{value}");
    value
}

fn error(result: &CallToolResult) -> String {
    let value = json_of(result);
    assert_eq!(result.is_error, Some(true), "{value}");
    value["error"].as_str().expect("error text").to_owned()
}

pub(crate) fn diamond() -> Value {
    json!({"title": "Diamond", "variables": {"who": "Ada"}, "steps": [
        step("1", "alpha__echo", json!({"text": "hello ${who}"}), &[], Some("greeting")),
        step("2", "add", json!({"a": 2, "b": 3}), &["1"], Some("sum")),
        step("3", "beta__echo", json!({"text": "${greeting}!"}), &["1"], Some("loud")),
        step("4", "alpha__echo", json!({"text": "${loud} ${sum.sum}"}), &["2", "3"], None),
    ]})
}

/// Calls a tool with a progress token; returns the result and the first
/// `expected` progress messages.
async fn call_with_progress(
    server: &mut Server,
    tool: &'static str,
    arguments: Value,
    expected: usize,
) -> (CallToolResult, Vec<String>) {
    let Value::Object(arguments) = arguments else {
        panic!("arguments must be an object")
    };
    let mut request = CallToolRequestParams::new(tool).with_arguments(arguments);
    request.meta = Some(rmcp::model::RequestMetaObject::with_progress_token(
        ProgressToken(NumberOrString::Number(11)),
    ));
    let result = server.client.call_tool(request).await.expect("tools/call");
    // Every notification was sent before the result, so `expected` of them
    // arrive; the client may hand them over a moment after the result.
    let mut messages = Vec::new();
    while messages.len() < expected {
        let message = tokio::time::timeout(Duration::from_secs(30), server.seen.progress.recv())
            .await
            .expect("a progress notification in time")
            .expect("the client is open");
        messages.push(message);
    }
    (result, messages)
}

#[tokio::test]
async fn an_agent_creates_inspects_dry_runs_and_runs_the_diamond() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = planb(dir.path(), &[]).await;

    // Refusals name the problem and record nothing.
    assert_eq!(
        error(&call(&server, "plan_create", json!({})).await),
        "Goal description is required."
    );
    let unknown = error(
        &call(
            &server,
            "plan_create",
            json!({"title": "Bad", "steps": [step("1", "nope", json!({}), &[], None)]}),
        )
        .await,
    );
    assert!(
        unknown.contains("steps[0].tool: Unknown tool: nope. Available: add, alpha__add"),
        "{unknown}"
    );
    let cycle = error(
        &call(
            &server,
            "plan_create",
            json!({"title": "Loop", "steps": [
                step("1", "add", json!({}), &["2"], None),
                step("2", "add", json!({}), &["1"], None)]}),
        )
        .await,
    );
    assert!(cycle.contains("dependency cycle: 1 → 2 → 1"), "{cycle}");
    let typo = error(&call(&server, "plan_create", json!({"title": "x", "step": []})).await);
    assert!(typo.contains("step: unknown field"), "{typo}");
    assert_eq!(
        error(&call(&server, "plan_execute", json!({})).await),
        "plan_id is required."
    );
    assert_eq!(
        error(&call(&server, "plan_show", json!({"plan_id": "zzz"})).await),
        "Plan not found: zzz"
    );
    assert!(
        ok(&call(&server, "plan_list", json!({})).await)["plans"]
            .as_array()
            .expect("plans")
            .is_empty()
    );

    let created = ok(&call(&server, "plan_create", diamond()).await);
    assert_eq!(created["success"], true);
    assert_eq!(created["title"], "Diamond");
    assert_eq!(
        created["steps"],
        json!([
            {"index": "1", "title": "Step 1", "tool": "alpha__echo"},
            {"index": "2", "title": "Step 2", "tool": "add"},
            {"index": "3", "title": "Step 3", "tool": "beta__echo"},
            {"index": "4", "title": "Step 4", "tool": "alpha__echo"},
        ])
    );
    let id = created["plan_id"].as_str().expect("id").to_owned();
    let dag = created["dag"].as_str().expect("dag");
    assert!(dag.contains("← after: 1 ∥"), "{dag}");

    let listed = ok(&call(&server, "plan_list", json!({})).await);
    assert_eq!(listed["plans"][0]["id"], format!("{}...", &id[..8]));
    assert_eq!(listed["plans"][0]["plan_id"], id);
    assert_eq!(listed["plans"][0]["steps"], 4);
    let limited = ok(&call(&server, "plan_list", json!({"limit": 1})).await);
    assert_eq!(limited["plans"].as_array().map(Vec::len), Some(1));
    let refused = error(&call(&server, "plan_list", json!({"limit": 0})).await);
    assert!(refused.starts_with("limit:"), "{refused}");
    let refused = error(&call(&server, "plan_list", json!({"page": 2})).await);
    assert!(
        refused.contains("page: unknown field (expected one of: limit)"),
        "{refused}"
    );

    let capped = error(
        &call(
            &server,
            "plan_execute",
            json!({"plan_id": id, "tool_caps": {"nosuch": 1}}),
        )
        .await,
    );
    assert!(
        capped.contains("tool cap \"nosuch\": no step calls it"),
        "{capped}"
    );

    let dry = ok(&call(
        &server,
        "plan_execute",
        json!({"plan_id": &id[..8], "dry_run": true, "variables": {"who": "Grace"}}),
    )
    .await);
    assert_eq!(dry["success"], true, "{dry}");
    assert_eq!(dry["results"]["greeting"], "<alpha__echo result>");
    assert!(calls(dir.path()).is_empty(), "a dry run called a tool");

    let (result, progress) = call_with_progress(
        &mut server,
        "plan_execute",
        json!({"plan_id": &id[..8], "variables": {"who": "Grace"}}),
        8,
    )
    .await;
    let ran = ok(&result);
    assert_eq!(ran["success"], true, "{ran}");
    assert_eq!(ran["steps_completed"], 4);
    assert_eq!(ran["steps_total"], 4);
    assert_eq!(ran["results"]["greeting"], "hello Grace");
    assert_eq!(ran["results"]["sum"]["sum"], 5.0);
    assert!(ran["duration"].is_number());
    assert_eq!(ran["steps"].as_array().expect("steps").len(), 4);
    assert!(ran["dag"].as_str().expect("dag").contains("● 4. Step 4"));
    let done: Vec<&String> = progress.iter().filter(|m| m.contains("done in")).collect();
    assert_eq!(done.len(), 4, "one progress message per step: {progress:?}");
    assert!(
        progress.iter().any(|m| m.starts_with("4/4 ")),
        "{progress:?}"
    );
    let made = calls(dir.path());
    assert_eq!(made.len(), 4);
    assert_eq!(made[3]["args"]["text"], "hello Grace! 5.0");

    let shown = ok(&call(&server, "plan_show", json!({"plan_id": id})).await);
    assert_eq!(shown["last_run"]["state"], "completed", "{shown}");
    assert_eq!(shown["steps"][3]["state"], "completed");
    assert_eq!(shown["variables"]["who"], "Ada");

    // A failing plan in one call: its result says which step, the run
    // stops there.
    let failed = ok(&call(
        &server,
        "plan_create_and_execute",
        json!({"title": "Fails", "steps": [
            step("1", "alpha__fail", json!({"message": "boom"}), &[], None),
            step("2", "alpha__echo", json!({"text": "never"}), &["1"], None),
        ]}),
    )
    .await);
    assert_eq!(failed["success"], false, "{failed}");
    assert_eq!(failed["error"], "Step 1 failed: boom");
    assert_eq!(failed["steps_completed"], 0);
    assert!(
        !calls(dir.path())
            .iter()
            .any(|c| c["args"]["text"] == "never")
    );
    let guarded = ok(&call(
        &server,
        "plan_create_and_execute",
        json!({"title": "Guarded", "max_calls": 0, "steps": [
            step("1", "alpha__echo", json!({"text": "blocked"}), &[], None),
        ]}),
    )
    .await);
    assert!(
        guarded["error"]
            .as_str()
            .is_some_and(|e| e.contains("Guard blocked:")),
        "{guarded}"
    );
    assert!(
        !calls(dir.path())
            .iter()
            .any(|c| c["args"]["text"] == "blocked")
    );
    assert_eq!(guarded["error_code"], "GUARD_BLOCKED", "{guarded}");
    assert_eq!(guarded["steps"][0]["code"], "GUARD_BLOCKED", "{guarded}");
    // Runaway detection is on unless `guards: false` turns it off.
    let degenerate = |guards: bool| {
        json!({"title": "Degenerate", "guards": guards, "steps": [
            step("1", "alpha__echo", json!({"text": "1"}), &[], None),
            step("2", "alpha__echo", json!({"text": "1"}), &["1"], None),
            step("3", "alpha__echo", json!({"text": "third"}), &["2"], None),
        ]})
    };
    let stopped = ok(&call(&server, "plan_create_and_execute", degenerate(true)).await);
    assert_eq!(stopped["error_code"], "GUARD_BLOCKED", "{stopped}");
    assert!(
        stopped["error"].as_str().is_some_and(
            |e| e.contains("runaway detection (degenerate) before calling alpha__echo")
        ),
        "{stopped}"
    );
    let ran = ok(&call(&server, "plan_create_and_execute", degenerate(false)).await);
    assert_eq!(ran["success"], true, "{ran}");
    assert_eq!(ran["steps_completed"], 3, "{ran}");
}

/// A plan's C1 control characters (the 8-bit CSI) stay in its JSON value
/// and are escaped in the result's text, which a client may print.
#[tokio::test]
async fn c1_control_characters_in_a_plan_are_escaped_in_the_text() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = planb(dir.path(), &[]).await;
    let title = "T\u{9b}2J";
    let created = ok(&call(
        &server,
        "plan_create",
        json!({"title": title, "steps": [step("1", "add", json!({"a": "\u{9b}"}), &[], None)]}),
    )
    .await);
    let id = created["plan_id"].as_str().expect("id").to_owned();
    for (tool, arguments) in [
        ("plan_show", json!({"plan_id": id})),
        ("plan_list", json!({})),
    ] {
        let result = call(&server, tool, arguments).await;
        let text = crate::support::text_of(&result);
        assert!(
            !text.chars().any(|c| ('\u{80}'..='\u{9f}').contains(&c)),
            "{tool}: {text:?}"
        );
        assert!(text.contains("T\\u009b2J"), "{tool}: {text}");
        let value = ok(&result);
        let shown = value.get("plans").map_or(&value, |plans| &plans[0]);
        assert_eq!(shown["title"], title, "{tool}: {value}");
    }
}

#[tokio::test]
async fn a_killed_server_leaves_a_run_that_plan_execute_resumes_exactly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = planb(dir.path(), &[]).await;
    let created = ok(&call(
        &server,
        "plan_create",
        json!({"title": "Interrupted", "steps": [
            step("1", "alpha__big", json!({"bytes": 50000}), &[], Some("blob")),
            step("2", "beta__sleep", json!({"ms": 60000}), &["1"], None),
            step("3", "alpha__echo", json!({"text": "${blob}"}), &["2"], None),
        ]}),
    )
    .await);
    let id = created["plan_id"].as_str().expect("id").to_owned();
    let peer = server.client.peer().clone();
    let Value::Object(arguments) = json!({"plan_id": id}) else {
        unreachable!()
    };
    let pending = tokio::spawn(async move {
        peer.call_tool(CallToolRequestParams::new("plan_execute").with_arguments(arguments))
            .await
    });
    // Wait until step 2's call reached its server, then kill planb.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !calls(dir.path()).iter().any(|c| c["tool"] == "sleep") {
        assert!(std::time::Instant::now() < deadline, "step 2 never started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.kill_9();
    let _ = pending.await;
    drop(server);

    // A new server: the dead run shows failed. The resume does not call
    // step 1 again and has its 50 KB result whole; its step 2 (a minute's
    // sleep) is stopped with plan_stop from another process, which cancels
    // the call.
    let server = planb(dir.path(), &[]).await;
    let shown = ok(&call(&server, "plan_show", json!({"plan_id": id})).await);
    assert_eq!(shown["last_run"]["state"], "failed", "{shown}");
    assert_eq!(shown["steps"][0]["state"], "completed", "{shown}");
    let before = calls(dir.path());
    assert_eq!(before.iter().filter(|c| c["tool"] == "big").count(), 1);
    let stop = {
        let dir = dir.path().to_owned();
        let id = id.clone();
        tokio::spawn(async move {
            // Stop the resumed run once its step 2 is under way again.
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while calls(&dir).iter().filter(|c| c["tool"] == "sleep").count() < 2 {
                assert!(std::time::Instant::now() < deadline, "step 2 not re-run");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            // Another window's planb stops it with plan_stop.
            let other = planb(&dir, &[]).await;
            let stopped = ok(&call(&other, "plan_stop", json!({"plan_id": id})).await);
            assert!(
                stopped["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("Stop requested")),
                "{stopped}"
            );
        })
    };
    let resumed = ok(&call(
        &server,
        "plan_execute",
        json!({"plan_id": id, "resume": true}),
    )
    .await);
    stop.await.expect("stopper");
    assert_eq!(resumed["stopped"], true, "{resumed}");
    let after = calls(dir.path());
    assert_eq!(
        after.iter().filter(|c| c["tool"] == "big").count(),
        1,
        "step 1 was called again: {after:?}"
    );
    assert_eq!(
        resumed["results"]["blob"].as_str().map(str::len),
        Some(50000)
    );
}

/// A model program for `PLANB_MODEL=command:…`: its first answer is not a
/// plan, its second is; each prompt is kept.
pub(crate) fn model_script(dir: &Path) -> PathBuf {
    let script = dir.join("model.sh");
    let plan = json!({"title": "Greet twice", "steps": [
        {"index": "1", "title": "Greet", "tool": "alpha__echo", "args": {"text": "hi"}, "result_variable": "g"},
        {"index": "2", "title": "Again", "tool": "beta__echo", "args": {"text": "${g} again"}, "depends_on": ["1"]}
    ]});
    let body = format!(
        "#!/bin/sh\nn=$(ls {dir}/prompt-* 2>/dev/null | wc -l)\ncat > {dir}/prompt-$n\nif [ \"$n\" = 0 ]; then echo 'I would call some tools.'; else printf '%s\\n' '```json' '{plan}' '```'; fi\n",
        dir = dir.display(),
        plan = plan
    );
    std::fs::write(&script, body).expect("script");
    let mut permissions = std::fs::metadata(&script).expect("meta").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&script, permissions).expect("chmod");
    script
}

#[tokio::test]
async fn a_goal_becomes_a_checked_plan_through_the_model() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = dir.path().join("model");
    std::fs::create_dir_all(&model).expect("dir");
    let script = model_script(&model);
    let spec = format!("command:{}", script.display());

    // Without a model, a goal says how to configure one.
    let server = planb(dir.path(), &[]).await;
    let missing = error(&call(&server, "plan_create", json!({"goal": "greet"})).await);
    assert!(missing.contains("PLANB_MODEL"), "{missing}");
    drop(server);

    let server = planb(dir.path(), &[("PLANB_MODEL", &spec)]).await;
    let ran = ok(&call(
        &server,
        "plan_create_and_execute",
        json!({"goal": "Say hi, then say it again"}),
    )
    .await);
    assert_eq!(ran["success"], true, "{ran}");
    assert_eq!(ran["title"], "Greet twice");
    let made = calls(dir.path());
    assert_eq!(made.len(), 2);
    assert_eq!(made[1]["args"]["text"], "hi again");
    let first = std::fs::read_to_string(model.join("prompt-0")).expect("prompt 0");
    assert!(first.contains("Say hi, then say it again"), "{first}");
    assert!(first.contains("alpha__echo"), "{first}");
    let second = std::fs::read_to_string(model.join("prompt-1")).expect("prompt 1");
    assert!(
        second.contains("Your previous answer was refused: the answer holds no JSON object"),
        "{second}"
    );
    let shown = ok(&call(&server, "plan_show", json!({"plan_id": ran["plan_id"]})).await);
    assert_eq!(shown["description"], "Say hi, then say it again");
    // With a progress token, each answer asked for is told.
    let mut server = server;
    let (made, told) = call_with_progress(
        &mut server,
        "plan_create",
        json!({"goal": "Greet again"}),
        1,
    )
    .await;
    assert_eq!(ok(&made)["title"], "Greet twice");
    assert_eq!(told, ["asking the model for a plan (answer 1 of 3)"]);
    drop(server);

    // No model configured, but the client samples: its model plans.
    let servers = write_servers(dir.path());
    let calls_file = dir.path().join("calls");
    let mut sampling = crate::support::start_sampling(
        dir.path(),
        &[
            ("PLANB_SERVERS", servers.to_str().expect("path")),
            ("DOWNSTREAM_CALLS", calls_file.to_str().expect("path")),
        ],
        sampled_plan,
        Duration::ZERO,
    )
    .await;
    let ran = ok(&call(
        &sampling,
        "plan_create_and_execute",
        json!({"goal": "Greet once, by sampling"}),
    )
    .await);
    assert_eq!(ran["success"], true, "{ran}");
    assert_eq!(ran["title"], "Greet by sampling");
    let asked = sampling.seen.samples.try_recv().expect("one prompt");
    assert!(asked.contains("Greet once, by sampling"), "{asked}");
    assert!(asked.contains("alpha__echo"), "{asked}");
    assert_eq!(
        calls(dir.path()).last().expect("a call")["args"]["text"],
        "sampled"
    );
    // Re-planning asks the client's model too.
    let replanned = ok(&call(
        &sampling,
        "plan_create_and_execute",
        json!({"title": "Fails", "replan": 1, "steps": [
            step("1", "alpha__fail", json!({"message": "boom"}), &[], None),
        ]}),
    )
    .await);
    assert_eq!(replanned["replanned"], true, "{replanned}");
    assert_eq!(replanned["success"], true, "{replanned}");
    let asked = sampling.seen.samples.try_recv().expect("a revision prompt");
    assert!(
        asked.contains("An execution plan failed part way"),
        "{asked}"
    );
    assert!(asked.contains("Its error: boom"), "{asked}");
}

/// The client's model, asked for a plan.
fn sampled_plan(_prompt: &str) -> String {
    let plan = json!({"title": "Greet by sampling", "steps": [
        {"index": "1", "title": "Greet", "tool": "alpha__echo", "args": {"text": "sampled"}}
    ]});
    format!("```json\n{plan}\n```")
}

/// `plan_execute` of plan `id` with a review (and `who` set to Grace),
/// waiting in the background for the person's verdict.
fn execute_with_review(server: &Server, id: &str) -> tokio::task::JoinHandle<CallToolResult> {
    let arguments = json!({"plan_id": id, "review": true, "variables": {"who": "Grace"}});
    crate::support::call_in_background(server, "plan_execute", arguments)
}

#[tokio::test]
async fn review_runs_the_plan_only_once_the_person_approves() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = planb(dir.path(), &[]).await;
    let created = ok(&call(&server, "plan_create", diamond()).await);
    let id = created["plan_id"].as_str().expect("id").to_owned();

    let mut seen_urls: Vec<String> = Vec::new();
    for (decision, runs) in [("Do not run it", false), ("Run it", true)] {
        let pending = execute_with_review(&server, &id);
        // Each review is a new form with a new link.
        let url = loop {
            let url = tokio::time::timeout(Duration::from_secs(30), server.seen.stderr_urls.recv())
                .await
                .expect("a form in time")
                .expect("stderr open");
            if !seen_urls.contains(&url) {
                break url;
            }
        };
        seen_urls.push(url.clone());
        let (port, sid) = crate::support::parse_form_url(&url);
        let page = crate::support::get(port, &format!("/ask?sid={sid}")).await;
        assert_eq!(page.status, 200);
        // The form shows the DAG and the first call as it will be made.
        assert!(page.body.contains("← after: 1 ∥"), "{}", page.body);
        assert!(page.body.contains("hello Grace"), "{}", page.body);
        assert!(calls(dir.path()).is_empty(), "a call before the verdict");
        let submitted = crate::support::post_json(
            port,
            "/submit",
            &json!({"sid": sid, "answers": {"decision": decision, "feedback": "checked"}}),
        )
        .await;
        assert_eq!(submitted.status, 200, "{}", submitted.body);
        let result = ok(&pending.await.expect("call"));
        if runs {
            assert_eq!(result["success"], true, "{result}");
            assert_eq!(calls(dir.path()).len(), 4);
        } else {
            assert_eq!(result["approved"], false, "{result}");
            assert_eq!(result["feedback"], "checked");
            assert!(calls(dir.path()).is_empty(), "a rejected run called a tool");
        }
    }
    // Both verdicts are in the log as answered asks.
    let (state, _) = crate::support::fold_log(dir.path());
    let answered = state
        .sessions()
        .values()
        .filter(|s| {
            s.title
                .as_deref()
                .is_some_and(|t| t.starts_with("Run \"Diamond\""))
        })
        .count();
    assert_eq!(answered, 2);
}

#[tokio::test]
#[ignore = "slow: drives Chromium; scripts/test runs it"]
async fn in_chromium_the_review_shows_the_dag_and_the_first_call_and_runs_once_approved() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = planb(dir.path(), &[]).await;
    let created = ok(&call(&server, "plan_create", diamond()).await);
    let id = created["plan_id"].as_str().expect("id").to_owned();
    let pending = execute_with_review(&server, &id);
    let url = tokio::time::timeout(Duration::from_secs(30), server.seen.stderr_urls.recv())
        .await
        .expect("a form in time")
        .expect("stderr open");
    let browser = planb_tests::browser::Browser::start().await;
    browser.open(&url).await;
    browser
        .wait_until("the form", "!!document.getElementById('ask-form')")
        .await;
    // The person sees the DAG and the first call as it will be made.
    let shown = browser.string("document.body.innerText").await;
    assert!(shown.contains("← after: 1 ∥"), "{shown}");
    assert!(shown.contains("hello Grace"), "{shown}");
    assert!(calls(dir.path()).is_empty(), "a call before the verdict");
    // The question is on the second tab: "Run it", then Submit.
    browser.click("#tab-1").await;
    browser.click_option("decision", 0).await;
    browser.click("#submit").await;
    browser
        .wait_until(
            "the thanks state",
            "!document.getElementById('done').hidden && document.getElementById('ask-form').hidden",
        )
        .await;
    let result = ok(&pending.await.expect("call"));
    assert_eq!(result["success"], true, "{result}");
    let made = calls(dir.path());
    assert_eq!(made.len(), 4, "{made:?}");
    assert_eq!(made[0]["args"]["text"], "hello Grace");
    browser.close().await;
}

#[tokio::test]
async fn two_servers_on_one_data_root_see_one_run_and_never_run_it_twice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = planb(dir.path(), &[]).await;
    let second = planb(dir.path(), &[]).await;
    let created = ok(&call(
        &first,
        "plan_create",
        json!({"title": "Shared", "steps": [
            step("1", "beta__sleep", json!({"ms": 60000}), &[], None),
        ]}),
    )
    .await);
    let id = created["plan_id"].as_str().expect("id").to_owned();
    let peer = first.client.peer().clone();
    let Value::Object(arguments) = json!({"plan_id": id}) else {
        unreachable!()
    };
    let running = tokio::spawn(async move {
        peer.call_tool(CallToolRequestParams::new("plan_execute").with_arguments(arguments))
            .await
            .expect("tools/call")
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !calls(dir.path()).iter().any(|c| c["tool"] == "sleep") {
        assert!(std::time::Instant::now() < deadline, "the run never called");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The other window sees the run and may not start it again.
    let shown = ok(&call(&second, "plan_show", json!({"plan_id": id})).await);
    assert_eq!(shown["last_run"]["state"], "running", "{shown}");
    let refused = error(&call(&second, "plan_execute", json!({"plan_id": id})).await);
    assert!(
        refused.contains("is running in another planb process"),
        "{refused}"
    );
    // Killing the process that runs it leaves a run the other one reports
    // failed, and may resume.
    first.kill_9();
    let _ = running.await;
    // A stop asked for after the death is not left waiting: the run is
    // ended failed, and the answer says so.
    let refused = error(&call(&second, "plan_stop", json!({"plan_id": id})).await);
    assert_eq!(
        refused,
        format!("Plan {id} is not running; its last run is failed.")
    );
    let shown = ok(&call(&second, "plan_show", json!({"plan_id": id})).await);
    assert_eq!(shown["last_run"]["state"], "failed", "{shown}");
    assert_eq!(shown["last_run"]["reason"], "worker_error", "{shown}");

    assert_eq!(
        calls(dir.path())
            .iter()
            .filter(|c| c["tool"] == "sleep")
            .count(),
        1
    );
}

/// `replan` through the tools, with a model (a real OpenAI-compatible
/// server): a failed step is re-planned; `plan_show` lists the revision on
/// the plan and names what the revised plan revises.
#[tokio::test]
async fn a_failed_step_is_re_planned_through_the_tools_and_shown() {
    use planb_tests::model::{Answer, ModelServer, Script};
    let dir = tempfile::tempdir().expect("tempdir");
    let failing = |replan: u32| {
        json!({"title": "Fails", "replan": replan, "steps": [
            step("1", "alpha__echo", json!({"text": "first"}), &[], Some("a")),
            step("2", "alpha__fail", json!({"message": "boom"}), &["1"], None),
        ]})
    };
    let revised = json!({"title": "Instead", "steps": [
        step("1", "alpha__echo", json!({"text": "${a} instead"}), &[], Some("b")),
    ]});
    let answer: Answer = std::sync::Arc::new(move |_: &str| revised.to_string());
    let model = ModelServer::answering(Script::INSTANT, answer).await;
    let spec = model.spec();
    let server = planb(dir.path(), &[("PLANB_MODEL", spec.as_str())]).await;
    let ran = ok(&call(&server, "plan_create_and_execute", failing(1)).await);
    assert_eq!(ran["success"], true, "{ran}");
    assert_eq!(ran["replanned"], true, "{ran}");
    assert_eq!(ran["results"]["b"], "first instead", "{ran}");
    assert_eq!(model.requests(), 1);
    let plan_id = ran["plan_id"].as_str().expect("id");
    let shown = ok(&call(&server, "plan_show", json!({"plan_id": plan_id})).await);
    let revision = &shown["revisions"][0];
    assert_eq!(revision["failed_step"], "2", "{shown}");
    assert_eq!(revision["state"], "completed", "{shown}");
    assert_eq!(revision["run_id"], ran["run_id"], "{shown}");
    let revised_id = revision["plan_id"].as_str().expect("id");
    let revised = ok(&call(&server, "plan_show", json!({"plan_id": revised_id})).await);
    assert_eq!(revised["revises"]["plan_id"], plan_id, "{revised}");
    assert_eq!(revised["revises"]["error"], "boom", "{revised}");
    assert_eq!(revised["variables"]["a"], "first", "{revised}");
    server.client.cancel().await.expect("closed");
}
