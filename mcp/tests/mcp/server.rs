//! End to end: the real `planb-mcp` binary over stdio with rmcp's client, and the
//! callback server over real HTTP. The test plays the person at the browser.

use std::time::Duration;

use crate::support::{
    Response, Server, UrlAnswer, call, get, http, new_session, parse_form_url, post_json,
    recorded_kinds, sample_ask, start, text_of,
};
use planb_projections::{DataRoot, Store, SystemEnvironment};
use rmcp::model::{CallToolRequestParams, CallToolResult, ElicitationAction};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

/// Starts `ask_user` in the background; returns the pending result.
fn ask_in_background(
    server: &Server,
    arguments: serde_json::Map<String, Value>,
) -> tokio::task::JoinHandle<CallToolResult> {
    crate::support::call_in_background(server, "ask_user", Value::Object(arguments))
}

async fn next<T>(receiver: &mut tokio::sync::mpsc::UnboundedReceiver<T>) -> T {
    tokio::time::timeout(WAIT, receiver.recv())
        .await
        .expect("in time")
        .expect("channel open")
}

fn valid_answers() -> Value {
    json!({"name": "Aurora", "summary": "", "language": "Rust", "integrations": ["Slack", "GitHub"], "priority": 4})
}

#[tokio::test]
async fn tools_are_listed_with_schemas_and_annotations() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = start(dir.path(), UrlAnswer::NotSupported, &[]).await;
    // The task interface's version is readable without a call.
    let info = server.client.peer_info().expect("initialize result");
    let meta = serde_json::to_value(&info.meta).expect("json");
    assert_eq!(meta["planexe.version"], "1.0", "{meta}");
    let tools = server.client.list_all_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names.len(), 27, "{names:?}");
    for name in [
        "init_planb_session",
        "ask_user",
        "save_plan",
        "write_plan",
        "edit_plan",
        "submit_plan",
        "prompt_examples",
        "task_create",
        "task_status",
        "task_stop",
        "task_resume",
        "task_retry",
        "task_archive",
        "task_delete",
        "task_list",
        "task_get_latest",
        "task_wait",
        "task_logs_tail",
        "task_file_info",
        "task_download",
        "task_artifact_write",
        "plan_create",
        "plan_execute",
        "plan_create_and_execute",
        "plan_list",
        "plan_show",
        "plan_stop",
    ] {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
    let ask = tools
        .iter()
        .find(|t| t.name == "ask_user")
        .expect("ask_user");
    let schema = serde_json::to_value(&*ask.input_schema).expect("schema");
    let properties = &schema["properties"];
    for field in ["sessionId", "title", "introTitle", "intro", "questions"] {
        assert!(
            properties.get(field).is_some(),
            "ask_user schema lacks {field}: {schema}"
        );
    }
    assert!(
        properties.get("askId").is_some(),
        "ask_user schema lacks askId: {schema}"
    );
    // Hints at the protocol's defaults are left out: ask_user writes
    // (read-only false) and is not idempotent; it destroys nothing and stays
    // within planb, which are said.
    let annotations = ask.annotations.as_ref().expect("annotations");
    assert_eq!(annotations.read_only_hint, None);
    assert_eq!(annotations.destructive_hint, Some(false));
    assert_eq!(annotations.idempotent_hint, None);
    assert_eq!(annotations.open_world_hint, Some(false));
    let delete = tools
        .iter()
        .find(|t| t.name == "task_delete")
        .expect("task_delete");
    let hints = delete.annotations.as_ref().expect("annotations");
    assert_eq!(
        (
            hints.read_only_hint,
            hints.destructive_hint,
            hints.open_world_hint
        ),
        (None, None, Some(false)),
        "task_delete destroys (the default), within planb"
    );
    for tool in &tools {
        let schemas =
            serde_json::to_string(&(&tool.input_schema, &tool.output_schema)).expect("schemas");
        for format in ["uint", "int32", "int64", "double", "float"] {
            assert!(
                !schemas.contains(&format!("\"format\":\"{format}")),
                "{}: a number format clients warn about: {schemas}",
                tool.name
            );
        }
        // The title is the tool's own; the annotations do not repeat it.
        let annotated = tool.annotations.as_ref().and_then(|a| a.title.clone());
        assert!(tool.title.is_some(), "{} has no title", tool.name);
        assert_eq!(annotated, None, "{}", tool.name);
        // Tools that return JSON declare its shape.
        let returns_json = !matches!(tool.name.as_ref(), "init_planb_session" | "save_plan");
        assert_eq!(
            tool.output_schema.is_some(),
            returns_json,
            "{}: {:?}",
            tool.name,
            tool.output_schema
        );
    }
    server.client.cancel().await.expect("shutdown");
}

#[tokio::test]
async fn sessions_and_plan_versions_use_the_exact_texts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = start(dir.path(), UrlAnswer::NotSupported, &[]).await;
    let result = call(
        &server,
        "init_planb_session",
        json!({"title": "Auth", "intent": "plan auth", "projectPath": "/work/app"}),
    )
    .await;
    assert_eq!(result.is_error, Some(false));
    let session = new_session(&server).await;
    assert!(planb_core::SessionId::parse(&session).is_ok());
    let root = dir.path().canonicalize().expect("root");
    for version in 1..=2 {
        let result = call(
            &server,
            "save_plan",
            json!({"sessionId": session, "plan": format!("# Plan {version}"), "title": "draft"}),
        )
        .await;
        let expected = format!(
            "Saved plan v{version} for session {session}\npath: {}",
            root.join("sessions")
                .join(&session)
                .join("plans")
                .join(format!("v{version}.md"))
                .display()
        );
        assert_eq!(text_of(&result), expected);
    }
    let empty = call(
        &server,
        "save_plan",
        json!({"sessionId": session, "plan": "\n  \n"}),
    )
    .await;
    assert_eq!(empty.is_error, Some(true));
    assert_eq!(
        text_of(&empty),
        "plan: must not be empty; give the plan's Markdown"
    );
    server.client.cancel().await.expect("shutdown");
    let kinds = recorded_kinds(dir.path());
    assert_eq!(
        kinds,
        [
            "session_created",
            "session_created",
            "plan_version_saved",
            "plan_version_saved"
        ]
    );
}

#[tokio::test]
async fn url_elicitation_round_trip_returns_exactly_the_answers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = start(
        dir.path(),
        UrlAnswer::Answer(ElicitationAction::Accept),
        &[],
    )
    .await;
    let session = new_session(&server).await;
    let pending = ask_in_background(&server, sample_ask(&session));
    let (url, elicitation_id) = next(&mut server.seen.urls).await;
    let (port, sid) = parse_form_url(&url);
    assert!(sid.len() >= 32, "sid carries at least 128 bits: {sid}");

    let spec = get(port, &format!("/spec?sid={sid}")).await;
    assert_eq!(spec.status, 200);
    let spec = spec.json();
    assert_eq!(spec["title"], "Project kickoff");
    assert!(
        spec.get("sessionId").is_none(),
        "the spec never carries the session: {spec}"
    );
    assert!(!spec.to_string().contains(&session), "{spec}");

    let page = get(port, &format!("/ask?sid={sid}")).await;
    assert_eq!(page.status, 200);
    assert!(
        page.header("content-security-policy")
            .is_some_and(|c| c.contains("default-src 'none'"))
    );

    let submitted = post_json(
        port,
        "/submit",
        &json!({"sid": sid, "answers": valid_answers()}),
    )
    .await;
    assert_eq!(submitted.status, 200, "{}", submitted.body);
    assert_eq!(submitted.json()["status"], "answered");

    let result = tokio::time::timeout(WAIT, pending)
        .await
        .expect("in time")
        .expect("task");
    assert_eq!(result.is_error, Some(false));
    let returned: Value = serde_json::from_str(&text_of(&result)).expect("answers JSON");
    assert_eq!(
        returned,
        json!({"name": "Aurora", "summary": "", "language": "Rust", "integrations": ["Slack", "GitHub"], "priority": 4})
    );
    assert_eq!(next(&mut server.seen.completions).await, elicitation_id);

    // One-shot: a replayed submission is refused and nothing changes.
    let replay = post_json(
        port,
        "/submit",
        &json!({"sid": sid, "answers": valid_answers()}),
    )
    .await;
    assert_eq!(replay.status, 404, "{}", replay.body);
    server.client.cancel().await.expect("shutdown");
    let kinds = recorded_kinds(dir.path());
    assert_eq!(kinds, ["session_created", "ask_opened", "ask_answered"]);
}

/// The URL is the one line a healthy session prints on stderr, plainly:
/// clients such as Claude Code show every stderr line of a server as an
/// error.
#[tokio::test]
async fn a_bare_elicitation_client_gets_the_url_on_stderr_with_ask_no_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = start(dir.path(), UrlAnswer::NotSupported, &[]).await;
    let session = new_session(&server).await;
    let pending = ask_in_background(&server, sample_ask(&session));
    let url = next(&mut server.seen.stderr_urls).await;
    let (port, sid) = parse_form_url(&url);
    let submitted = post_json(
        port,
        "/submit",
        &json!({"sid": sid, "answers": valid_answers()}),
    )
    .await;
    assert_eq!(submitted.status, 200, "{}", submitted.body);
    let result = tokio::time::timeout(WAIT, pending)
        .await
        .expect("in time")
        .expect("task");
    let returned: Value = serde_json::from_str(&text_of(&result)).expect("answers JSON");
    assert_eq!(returned["priority"], 4);
    assert!(
        server.seen.urls.try_recv().is_err(),
        "no URL elicitation was sent"
    );
    let saved = call(
        &server,
        "save_plan",
        json!({"sessionId": session, "plan": "# Plan\n"}),
    )
    .await;
    assert_ne!(saved.is_error, Some(true), "{}", text_of(&saved));
    let refused = call(
        &server,
        "save_plan",
        json!({"sessionId": "nope", "plan": "x"}),
    )
    .await;
    assert_eq!(refused.is_error, Some(true));
    server.client.cancel().await.expect("shutdown");
    tokio::time::timeout(WAIT, server.stderr_closed)
        .await
        .expect("the server exits")
        .expect("stderr reader");
    let lines = server.stderr.lock().await.clone();
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(
        lines[0].starts_with(&format!("opening browser directly: {url} (")),
        "{lines:#?}"
    );
}

#[tokio::test]
async fn decline_and_cancel_return_user_cancelled_and_are_recorded() {
    for action in [ElicitationAction::Decline, ElicitationAction::Cancel] {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut server = start(dir.path(), UrlAnswer::Answer(action.clone()), &[]).await;
        let session = new_session(&server).await;
        let pending = ask_in_background(&server, sample_ask(&session));
        let (_, id) = next(&mut server.seen.urls).await;
        let result = tokio::time::timeout(WAIT, pending)
            .await
            .expect("in time")
            .expect("task");
        assert_eq!(text_of(&result), "User cancelled.");
        assert_eq!(next(&mut server.seen.completions).await, id);
        server.client.cancel().await.expect("shutdown");
        assert_eq!(
            recorded_kinds(dir.path()),
            ["session_created", "ask_opened", "ask_declined"]
        );
    }
}

#[tokio::test]
async fn a_timeout_is_plain_the_server_stays_healthy_and_a_late_answer_is_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = start(
        dir.path(),
        UrlAnswer::NotSupported,
        &[("ASK_ANSWER_TIMEOUT_MS", "300")],
    )
    .await;
    let session = new_session(&server).await;
    for _ in 0..3 {
        let result = call(&server, "ask_user", Value::Object(sample_ask(&session))).await;
        let text = text_of(&result);
        assert!(text.contains("timed out"), "{text}");
        assert!(text.contains("call ask_user again"), "{text}");
        assert_eq!(result.is_error, Some(false));
    }
    let url = next(&mut server.seen.stderr_urls).await;
    let (port, sid) = parse_form_url(&url);
    let late = post_json(
        port,
        "/submit",
        &json!({"sid": sid, "answers": valid_answers()}),
    )
    .await;
    assert_eq!(late.status, 200, "{}", late.body);
    assert_eq!(late.json()["status"], "late");
    // Still healthy: a new session works.
    new_session(&server).await;
    server.client.cancel().await.expect("shutdown");
    let kinds = recorded_kinds(dir.path());
    assert_eq!(kinds.iter().filter(|k| **k == "ask_timed_out").count(), 3);
    assert_eq!(kinds.iter().filter(|k| **k == "ask_late_answer").count(), 1);
}

#[tokio::test]
async fn unknown_and_malformed_sessions_are_refused_and_nothing_is_created() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = start(dir.path(), UrlAnswer::NotSupported, &[]).await;
    let unknown = "0190f1c2-0000-7000-8000-000000000001";
    for tool in ["ask_user", "save_plan"] {
        let mut arguments = sample_ask(unknown);
        if tool == "save_plan" {
            arguments = serde_json::from_value(json!({"sessionId": unknown, "plan": "# x"}))
                .expect("object");
        }
        let result = call(&server, tool, Value::Object(arguments)).await;
        assert_eq!(result.is_error, Some(true));
        let text = text_of(&result);
        assert!(text.contains("init_planb_session"), "{tool}: {text}");
    }
    let result = call(
        &server,
        "save_plan",
        json!({"sessionId": "not-a-uuid", "plan": "# x"}),
    )
    .await;
    assert_eq!(result.is_error, Some(true));
    assert!(
        text_of(&result).starts_with("sessionId:"),
        "{}",
        text_of(&result)
    );
    server.client.cancel().await.expect("shutdown");
    assert!(recorded_kinds(dir.path()).is_empty());
    assert!(!dir.path().join("sessions").join(unknown).exists());
}

#[tokio::test]
async fn spec_errors_name_the_field_and_open_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = start(dir.path(), UrlAnswer::NotSupported, &[]).await;
    let session = new_session(&server).await;
    let cases = [
        (
            json!({"title": " ", "questions": [{"id": "a", "kind": "text", "label": "A"}]}),
            "title",
        ),
        (json!({"title": "t", "questions": []}), "questions"),
        (
            json!({"title": "t", "questions": [{"id": "a", "kind": "text", "label": "A"}, {"id": "a", "kind": "text", "label": "B"}]}),
            "questions[1].id",
        ),
        (
            json!({"title": "t", "questions": [{"id": "a", "kind": "single", "label": "A", "options": ["x", "x"]}]}),
            "questions[0].options[1].value",
        ),
        (
            json!({"title": "t", "questions": [{"id": "a", "kind": "scale", "label": "A", "min": 5, "max": 5}]}),
            "questions[0].max",
        ),
        (
            json!({"title": "t", "questions": [{"id": "a", "kind": "slider", "label": "A"}]}),
            "questions[0].kind",
        ),
        (
            json!({"title": "t", "colour": "red", "questions": [{"id": "a", "kind": "text", "label": "A"}]}),
            "colour",
        ),
    ];
    for (mut spec, field) in cases {
        spec["sessionId"] = json!(session);
        let result = call(&server, "ask_user", spec.clone()).await;
        assert_eq!(result.is_error, Some(true), "{spec}");
        let text = text_of(&result);
        assert!(
            text.contains(&format!("{field}:")),
            "expected {field} in {text:?}"
        );
    }
    server.client.cancel().await.expect("shutdown");
    assert_eq!(recorded_kinds(dir.path()), ["session_created"]);
}

#[tokio::test]
async fn invalid_submissions_get_422_per_question_and_never_reach_the_agent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = start(dir.path(), UrlAnswer::NotSupported, &[]).await;
    let session = new_session(&server).await;
    let pending = ask_in_background(&server, sample_ask(&session));
    let (port, sid) = parse_form_url(&next(&mut server.seen.stderr_urls).await);
    let invalid = json!({"name": "", "language": "Cobol", "integrations": ["GitHub", "GitHub"], "priority": 9});
    let rejected = post_json(port, "/submit", &json!({"sid": sid, "answers": invalid})).await;
    assert_eq!(rejected.status, 422, "{}", rejected.body);
    let errors = &rejected.json()["errors"];
    for id in ["name", "language", "integrations", "priority"] {
        assert!(errors.get(id).is_some(), "no message for {id}: {errors}");
    }
    assert!(
        !pending.is_finished(),
        "an invalid submission reached the agent"
    );
    let accepted = post_json(
        port,
        "/submit",
        &json!({"sid": sid, "answers": valid_answers()}),
    )
    .await;
    assert_eq!(accepted.status, 200);
    let result = tokio::time::timeout(WAIT, pending)
        .await
        .expect("in time")
        .expect("task");
    assert_eq!(
        serde_json::from_str::<Value>(&text_of(&result)).expect("json")["language"],
        "Rust"
    );
    server.client.cancel().await.expect("shutdown");
}

/// DNS rebinding, cross-site posts and look-alike media types are refused,
/// each refusal with the security headers; a program on this machine that
/// posts without `Origin` (as the original planb-mcp's smoke test does) is
/// served.
#[tokio::test]
async fn foreign_hosts_and_origins_are_refused_and_a_plain_post_is_served() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = start(dir.path(), UrlAnswer::NotSupported, &[]).await;
    let session = new_session(&server).await;
    let pending = ask_in_background(&server, sample_ask(&session));
    let (port, sid) = parse_form_url(&next(&mut server.seen.stderr_urls).await);
    let body = json!({"sid": sid, "answers": valid_answers()}).to_string();
    let own_host = ("Host", format!("127.0.0.1:{port}"));
    let json_type = ("Content-Type", "application/json".to_string());
    let refused = |response: &Response, what: &str| {
        assert_eq!(response.status, 403, "{what}: {}", response.body);
        assert!(
            response.json()["error"].is_string(),
            "{what}: {}",
            response.body
        );
        assert_eq!(
            response.header("x-content-type-options"),
            Some("nosniff"),
            "{what}"
        );
        assert!(
            response.header("content-security-policy").is_some(),
            "{what}: a refusal without the security headers"
        );
    };
    let spec = format!("/spec?sid={sid}");
    let rebinding = http(
        port,
        "GET",
        &spec,
        &[("Host", "evil.example:80".into())],
        "",
    )
    .await;
    refused(&rebinding, "another host");
    let two_hosts = http(
        port,
        "GET",
        &spec,
        &[own_host.clone(), ("Host", "evil.example:80".into())],
        "",
    )
    .await;
    refused(&two_hosts, "two Host headers");
    let absolute = http(
        port,
        "GET",
        &format!("http://evil.example:{port}{spec}"),
        std::slice::from_ref(&own_host),
        "",
    )
    .await;
    refused(&absolute, "another host in the request line");
    for (name, value) in [
        ("Origin", "http://evil.example"),
        ("Origin", "null"),
        ("Sec-Fetch-Site", "cross-site"),
    ] {
        let headers = [
            own_host.clone(),
            json_type.clone(),
            (name, value.to_string()),
        ];
        let response = http(port, "POST", "/submit", &headers, &body).await;
        refused(&response, &format!("{name}: {value}"));
    }
    let jsonp = http(
        port,
        "POST",
        "/submit",
        &[
            own_host.clone(),
            ("Content-Type", "application/jsonp".into()),
        ],
        &body,
    )
    .await;
    assert_eq!(jsonp.status, 415, "{}", jsonp.body);
    let unknown = get(port, "/spec?sid=0000").await;
    assert_eq!(unknown.status, 404);
    assert!(unknown.json()["error"].is_string());
    assert!(unknown.header("content-security-policy").is_some());
    assert!(!pending.is_finished());
    let plain = http(
        port,
        "POST",
        "/submit",
        &[
            own_host,
            ("Content-Type", "application/json; charset=utf-8".into()),
        ],
        &body,
    )
    .await;
    assert_eq!(plain.status, 200, "{}", plain.body);
    let result = tokio::time::timeout(WAIT, pending)
        .await
        .expect("in time")
        .expect("task");
    assert_eq!(
        serde_json::from_str::<Value>(&text_of(&result)).expect("json")["language"],
        "Rust"
    );
    server.client.cancel().await.expect("shutdown");
}

#[tokio::test]
async fn several_asks_wait_at_once_and_drafts_are_recorded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = start(dir.path(), UrlAnswer::NotSupported, &[]).await;
    let session = new_session(&server).await;
    let first = ask_in_background(&server, sample_ask(&session));
    let (port, first_sid) = parse_form_url(&next(&mut server.seen.stderr_urls).await);
    let second = ask_in_background(&server, sample_ask(&session));
    let (_, second_sid) = parse_form_url(&next(&mut server.seen.stderr_urls).await);
    assert_ne!(first_sid, second_sid);
    let draft = post_json(
        port,
        "/draft",
        &json!({"sid": second_sid, "answers": {"name": "Dra"}}),
    )
    .await;
    assert_eq!(draft.status, 204, "{}", draft.body);
    let mut second_answers = valid_answers();
    second_answers["name"] = json!("Second");
    assert_eq!(
        post_json(
            port,
            "/submit",
            &json!({"sid": second_sid, "answers": second_answers})
        )
        .await
        .status,
        200
    );
    assert_eq!(
        post_json(
            port,
            "/submit",
            &json!({"sid": first_sid, "answers": valid_answers()})
        )
        .await
        .status,
        200
    );
    let first = tokio::time::timeout(WAIT, first)
        .await
        .expect("in time")
        .expect("task");
    let second = tokio::time::timeout(WAIT, second)
        .await
        .expect("in time")
        .expect("task");
    assert!(text_of(&first).contains("Aurora"));
    assert!(text_of(&second).contains("Second"));
    server.client.cancel().await.expect("shutdown");
    let kinds = recorded_kinds(dir.path());
    assert_eq!(kinds.iter().filter(|k| **k == "ask_draft_saved").count(), 1);
    assert_eq!(kinds.iter().filter(|k| **k == "ask_answered").count(), 2);
}

#[tokio::test]
async fn progress_notifications_name_the_url_while_waiting() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = start(
        dir.path(),
        UrlAnswer::NotSupported,
        &[("PLANB_PROGRESS_INTERVAL_MS", "50")],
    )
    .await;
    let session = new_session(&server).await;
    let peer = server.client.peer().clone();
    let mut request = CallToolRequestParams::new("ask_user").with_arguments(sample_ask(&session));
    request.meta = Some(rmcp::model::RequestMetaObject::with_progress_token(
        rmcp::model::ProgressToken(rmcp::model::NumberOrString::Number(7)),
    ));
    let pending = tokio::spawn(async move { peer.call_tool(request).await.expect("call") });
    let url = next(&mut server.seen.stderr_urls).await;
    let message = next(&mut server.seen.progress).await;
    assert!(message.contains(&url), "{message}");
    let (port, sid) = parse_form_url(&url);
    assert_eq!(
        post_json(
            port,
            "/submit",
            &json!({"sid": sid, "answers": valid_answers()})
        )
        .await
        .status,
        200
    );
    tokio::time::timeout(WAIT, pending)
        .await
        .expect("in time")
        .expect("task");
    server.client.cancel().await.expect("shutdown");
}

#[test]
fn nothing_but_json_rpc_reaches_stdout() {
    // Drive the binary with raw JSON-RPC lines and check every stdout byte.
    use std::io::{BufRead, Write};
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_planb-mcp"))
        .env("PLANB_MCP_DATA_DIR", dir.path())
        .env("RUST_LOG", "debug")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    let requests = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {"elicitation": {}}, "clientInfo": {"name": "raw", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "init_planb_session", "arguments": {"title": "raw"}}}),
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "save_plan", "arguments": {"sessionId": "nope", "plan": "x"}}}),
    ];
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = std::io::BufReader::new(stdout).lines();
    let mut responses = Vec::new();
    for request in &requests {
        writeln!(stdin, "{request}").expect("write");
        stdin.flush().expect("flush");
        if request.get("id").is_some() {
            let line = lines.next().expect("a line").expect("read");
            let value: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("not JSON on stdout: {line:?}: {e}"));
            assert_eq!(value["jsonrpc"], "2.0", "{line}");
            responses.push(value);
        }
    }
    drop(stdin);
    for line in lines {
        let line = line.expect("read");
        let value: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("not JSON on stdout: {line:?}: {e}"));
        assert_eq!(value["jsonrpc"], "2.0");
    }
    let status = child.wait().expect("exit");
    assert!(status.success(), "{status:?}");
    assert_eq!(responses[0]["result"]["protocolVersion"], "2025-06-18");
    assert!(
        responses[2]["result"]["content"][0]["text"]
            .as_str()
            .expect("text")
            .starts_with("sessionId: ")
    );
    assert_eq!(responses[3]["result"]["isError"], true);
}

#[test]
fn a_kill_9_while_an_ask_is_pending_loses_nothing() {
    use std::io::{BufRead, Write};
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_planb-mcp"))
        .env("PLANB_MCP_DATA_DIR", dir.path())
        .env("ASK_NO_OPEN", "1")
        .env("RUST_LOG", "info")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    let stderr = std::io::BufReader::new(child.stderr.take().expect("stderr"));
    let mut send = |request: Value| {
        writeln!(stdin, "{request}").expect("write");
        stdin.flush().expect("flush");
    };
    let mut reply = || -> Value {
        serde_json::from_str(&stdout.next().expect("a line").expect("read")).expect("json")
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {"elicitation": {}}, "clientInfo": {"name": "raw", "version": "0"}}}),
    );
    reply();
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "init_planb_session", "arguments": {}}}),
    );
    let created = reply();
    let text = created["result"]["content"][0]["text"]
        .as_str()
        .expect("text")
        .to_string();
    let session = text
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("sessionId: "))
        .expect("id")
        .to_string();
    send(
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "save_plan", "arguments": {"sessionId": session, "plan": "# before the crash"}}}),
    );
    reply();
    send(
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "ask_user", "arguments": sample_ask(&session)}}),
    );
    // The URL is logged only after the ask is durable in the log.
    for line in stderr.lines() {
        if line.expect("stderr").contains("opening browser directly: ") {
            break;
        }
    }
    child.kill().expect("kill -9");
    child.wait().expect("reap");

    let check = crate::support::planb(dir.path(), &["check"]);
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
    let (store, _) = Store::open(
        DataRoot::new(dir.path()),
        std::sync::Arc::new(SystemEnvironment),
    )
    .expect("reopen");
    let session = planb_core::SessionId::parse(&session).expect("id");
    store
        .read(|state| {
            let plans = &state.session(&session).expect("session kept").plans;
            assert_eq!(plans.len(), 1);
            assert!(plans[0].is_content(b"# before the crash"));
            let pending: Vec<_> = state.pending_asks().collect();
            assert_eq!(pending.len(), 1, "the ask is still pending");
            assert_eq!(pending[0].session, session);
        })
        .expect("read");
}

/// Reads the demo's transcript up to the next page address (a line that
/// is only `http://…`), or, with `marker`, the next line holding it.
fn next_line_with(
    stdout: &mut impl std::io::BufRead,
    transcript: &mut String,
    marker: &str,
) -> String {
    loop {
        let mut line = String::new();
        assert!(
            stdout.read_line(&mut line).expect("read") > 0,
            "the demo ended early: {transcript}"
        );
        transcript.push_str(&line);
        if line.trim().starts_with(marker) || line.contains(marker) {
            return line.trim().to_owned();
        }
    }
}

/// The `key` of a page's address (`sid`, `rid`) and its port.
fn page_key(url: &str, key: &str) -> (u16, String) {
    let rest = url.strip_prefix("http://127.0.0.1:").expect("loopback url");
    let (port, rest) = rest.split_once('/').expect("path");
    let value = rest.split_once(&format!("{key}=")).expect("key").1;
    (port.parse().expect("port"), value.to_owned())
}

/// The demo on a machine with no display, a person answering: every page's
/// address is printed; the form, a review that asks for a change, and one
/// that approves are answered from "a browser"; the replay is served until
/// Ctrl-C, and answers.
#[test]
fn the_demo_tours_planb_on_a_headless_machine_with_a_person_answering() {
    use std::io::Read;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut demo = std::process::Command::new(env!("CARGO_BIN_EXE_planb-mcp"))
        .args(["demo", "--data-dir"])
        .arg(dir.path())
        // The caller's own server settings do not reach the demo's server.
        .env("PLANB_TOOLS", "tasks")
        .env_remove("PLANB_MODEL")
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .env_remove("PLANB_LOG")
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn demo");
    let mut stdout = std::io::BufReader::new(demo.stdout.take().expect("stdout"));
    let mut transcript = String::new();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let url = next_line_with(&mut stdout, &mut transcript, "http://");
    let (port, sid) = page_key(&url, "sid");
    let answers = json!({"name": "tidy", "purpose": "Tidy up files", "language": "Go", "features": ["JSON output"], "effort": 3});
    let answered = runtime.block_on(post_json(
        port,
        "/submit",
        &json!({"sid": sid, "answers": answers}),
    ));
    assert_eq!(answered.status, 200, "{}", answered.body);
    for verdict in [
        json!({"verdict": "changes", "feedback": "roll back how?"}),
        json!({"verdict": "approve"}),
    ] {
        let url = next_line_with(&mut stdout, &mut transcript, "http://");
        let (port, rid) = page_key(&url, "rid");
        let mut body = verdict;
        body["rid"] = json!(rid);
        let reviewed = runtime.block_on(post_json(port, "/review", &body));
        assert_eq!(reviewed.status, 200, "{}", reviewed.body);
    }
    let serving = next_line_with(&mut stdout, &mut transcript, "serving http://");
    let replay = serving
        .strip_prefix("serving ")
        .expect("address")
        .trim_end_matches('/');
    let port: u16 = replay
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("port");
    let index = runtime.block_on(get(port, "/"));
    assert_eq!(index.status, 200, "{}", index.body);
    assert!(
        index.body.contains("demo-release") && index.body.contains("planb demo"),
        "{}",
        index.body
    );
    next_line_with(&mut stdout, &mut transcript, "press Ctrl-C");
    let interrupted = std::process::Command::new("kill")
        .args(["-INT", &demo.id().to_string()])
        .status()
        .expect("kill -INT");
    assert!(interrupted.success());
    stdout.read_to_string(&mut transcript).expect("rest");
    assert!(demo.wait().expect("exit").success(), "{transcript}");
    let mut stderr = String::new();
    demo.stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("stderr");
    assert_eq!(stderr, "", "the demo shows only its own lines");
    for told in [
        "[1/5] A question form: ",
        "save_plan -> Saved plan v2",
        "[2/5] A plan you review: ",
        "submit_plan, round 1 -> {\"approved\":false,\"feedback\":\"roll back how?\"}",
        "submit_plan, round 2 -> {\"approved\":true}",
        "[3/5] An execution plan: ",
        "plan_execute -> success true, 3 of 3 steps",
        "[4/5] A plan-generation task: ",
        "skipped: no model is configured. Set PLANB_MODEL",
        "[5/5] The replay: ",
        "ssh -L ",
    ] {
        assert!(transcript.contains(told), "{told:?} not in:\n{transcript}");
    }
    let plans: Vec<_> = std::fs::read_dir(dir.path().join("sessions"))
        .expect("sessions")
        .map(|e| e.expect("entry").path().join("plans").join("v2.md"))
        .collect();
    assert_eq!(plans.len(), 1);
    let plan = std::fs::read_to_string(&plans[0]).expect("v2.md");
    assert!(
        plan.contains("# Plan: tidy") && plan.contains("Language: Go"),
        "{plan}"
    );
    let named = dir.path().join("demo/plans/demo-release-plan.md");
    let named = std::fs::read_to_string(&named).expect("the named plan in the demo's folder");
    assert!(named.contains("Re-publish the previous tag"), "{named}");
}

/// `demo --auto` with a model configured (a real OpenAI-compatible server)
/// runs every stage without a person, the task to its end, and checks the
/// replay before it stops.
#[test]
fn the_demo_runs_every_stage_by_itself_with_auto() {
    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let model = runtime.block_on(planb_tests::model::ModelServer::start(
        planb_tests::model::Script::INSTANT,
    ));
    let output = crate::support::demo_auto(dir.path(), &model.spec())
        .output()
        .expect("run demo");
    let transcript = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{transcript}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for told in [
        "--auto answers it",
        "submit_plan, round 2 -> {\"approved\":true}",
        "plan_execute -> success true, 3 of 3 steps",
        "task_wait -> completed",
        "lists the session, the reviewed plan and the execution plan",
    ] {
        assert!(transcript.contains(told), "{told:?} not in:\n{transcript}");
    }
    assert!(model.requests() > 1, "the task asked the model");
}

/// The rough token count of a tool list every client can be held to: the
/// compact JSON of `tools/list`'s result, divided by 4.
async fn listed_tokens(server: &crate::support::Server) -> (Vec<String>, usize) {
    let tools = server.client.list_all_tools().await.expect("tools/list");
    let names = tools.iter().map(|t| t.name.to_string()).collect();
    let json = serde_json::to_string(&json!({"tools": tools})).expect("json");
    (names, json.len() / 4)
}

/// What the whole tool list may cost every agent, in the rough measure
/// every client can be held to.
const ALL_TOOLS_TOKENS_MAX: usize = 6_000;

#[tokio::test]
async fn tool_groups_list_and_serve_only_their_tools_and_each_group_s_cost_is_measured() {
    let groups = [
        (
            "sessions",
            vec!["ask_user", "init_planb_session", "save_plan"],
        ),
        ("review", vec!["edit_plan", "submit_plan", "write_plan"]),
        (
            "tasks",
            vec!["prompt_examples", "task_create", "task_status"],
        ),
        ("plans", vec!["plan_create", "plan_execute", "plan_list"]),
    ];
    let dir = tempfile::tempdir().expect("tempdir");
    let mut costs = Vec::new();
    let mut sum = 0;
    for (group, some) in &groups {
        let server = start(
            dir.path(),
            UrlAnswer::NotSupported,
            &[("PLANB_TOOLS", group)],
        )
        .await;
        let (names, tokens) = listed_tokens(&server).await;
        for name in some {
            assert!(
                names.iter().any(|n| n == name),
                "{group}: {name} missing from {names:?}"
            );
        }
        for (other, theirs) in &groups {
            if other != group {
                for name in theirs {
                    assert!(!names.iter().any(|n| n == name), "{group} lists {name}");
                }
            }
        }
        costs.push(format!("{group}: {} tools, {tokens} tokens", names.len()));
        sum += tokens;
        server.client.cancel().await.expect("shutdown");
    }
    // The flag wins over the variable; a tool of another group is refused
    // by name, with the flag that serves it.
    let server = crate::support::start_with(
        dir.path(),
        UrlAnswer::NotSupported,
        None,
        &[("PLANB_TOOLS", "tasks")],
        &["--tools", "sessions,review"],
    )
    .await;
    let (names, tokens) = listed_tokens(&server).await;
    assert_eq!(names.len(), 6, "{names:?}");
    let refused = call(&server, "task_list", json!({})).await;
    assert_eq!(refused.is_error, Some(true));
    let text = text_of(&refused);
    assert!(text.contains("--tools tasks"), "{text}");
    costs.push(format!("sessions,review: {tokens} tokens"));
    server.client.cancel().await.expect("shutdown");
    // An unreadable selection serves everything, saying why on stderr.
    let server = start(
        dir.path(),
        UrlAnswer::NotSupported,
        &[("PLANB_TOOLS", "everything")],
    )
    .await;
    let (names, all) = listed_tokens(&server).await;
    assert_eq!(names.len(), 27, "{names:?}");
    costs.push(format!(
        "all: {} tools, {all} tokens (groups summed: {sum})",
        names.len()
    ));
    eprintln!("tools/list cost (JSON bytes / 4): {}", costs.join("; "));
    assert!(all <= ALL_TOOLS_TOKENS_MAX, "{}", costs.join("; "));
    server.client.cancel().await.expect("shutdown");
    let said = server.stderr.lock().await.join("\n");
    assert!(
        said.contains("PLANB_TOOLS") && said.contains("everything"),
        "{said}"
    );
}

#[tokio::test]
async fn other_names_of_tools_are_served_always_and_listed_when_asked_for() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = start(dir.path(), UrlAnswer::NotSupported, &[]).await;
    let (names, _) = listed_tokens(&server).await;
    assert!(!names.iter().any(|n| n == "task_recent"), "{names:?}");
    // A client written against the other name still works.
    let recent = call(&server, "task_recent", json!({"limit": 5})).await;
    assert_eq!(recent.is_error, Some(false), "{}", text_of(&recent));
    assert!(recent.structured_content.expect("structured")["tasks"].is_array());
    server.client.cancel().await.expect("shutdown");
    let server = start(
        dir.path(),
        UrlAnswer::NotSupported,
        &[("PLANB_TOOLS", "all,aliases")],
    )
    .await;
    let (names, _) = listed_tokens(&server).await;
    for alias in ["task_recent", "init_browser_plan_session"] {
        assert!(names.iter().any(|n| n == alias), "{alias} not in {names:?}");
    }
    server.client.cancel().await.expect("shutdown");
}
