//! Clients that send no progress token and give up on a request after a
//! minute or two (the MCP Inspector after 60 s, mcp-cli after 120 s), driven
//! with raw JSON-RPC through the real binary, since rmcp's own client always
//! sends a token. A wait hands back "still open" well before such a timeout;
//! the next call waits on the same page instead of opening another, and the
//! answer or verdict comes back the moment it exists.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::{parse_form_url, post_json};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};

/// How long a test waits for something that should happen much sooner.
const WAIT: Duration = Duration::from_secs(30);

type Replies = Arc<Mutex<HashMap<u64, oneshot::Sender<Value>>>>;

/// `planb-mcp` spoken to in raw JSON-RPC lines, as a client without
/// progress support does.
struct RawClient {
    child: tokio::process::Child,
    stdin: Arc<tokio::sync::Mutex<tokio::process::ChildStdin>>,
    replies: Replies,
    next_id: u64,
    /// URLs the server printed on stderr (`opening browser directly: <url>`).
    urls: mpsc::UnboundedReceiver<String>,
}

impl RawClient {
    async fn start(dir: &std::path::Path) -> RawClient {
        RawClient::start_with(dir, &[], &[]).await
    }

    /// [`RawClient::start`] with `env` set and `args` given as well.
    async fn start_with(dir: &std::path::Path, env: &[(&str, &str)], args: &[&str]) -> RawClient {
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_planb-mcp"))
            .args(args)
            .envs(env.iter().copied())
            .current_dir(dir)
            .env("PLANB_MCP_DATA_DIR", dir)
            .env("ASK_NO_OPEN", "1")
            .env("PLANB_HAND_BACK_MS", "1500")
            .env_remove("PLANB_PORT")
            .env_remove("ASK_ANSWER_TIMEOUT_MS")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn planb-mcp");
        let replies: Replies = Arc::default();
        let stdout = child.stdout.take().expect("stdout");
        tokio::spawn({
            let replies = Arc::clone(&replies);
            async move {
                let mut lines = BufReader::new(stdout).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let message: Value = serde_json::from_str(&line).expect("JSON on stdout");
                    if let Some(id) = message.get("id").and_then(Value::as_u64)
                        && let Some(reply) = replies.lock().expect("replies").remove(&id)
                    {
                        let _ = reply.send(message);
                    }
                }
            }
        });
        let (url_tx, urls) = mpsc::unbounded_channel();
        let stderr = child.stderr.take().expect("stderr");
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                eprintln!("server: {line}");
                if let Some(rest) = line.split("opening browser directly: ").nth(1) {
                    let url = rest.split_whitespace().next().unwrap_or_default();
                    let _ = url_tx.send(url.to_string());
                }
            }
        });
        let stdin = Arc::new(tokio::sync::Mutex::new(child.stdin.take().expect("stdin")));
        let mut client = RawClient {
            child,
            stdin,
            replies,
            next_id: 0,
            urls,
        };
        let initialize = client.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "no-progress", "version": "0"}}),
        );
        let reply = tokio::time::timeout(WAIT, initialize)
            .await
            .expect("initialize in time");
        assert!(reply.get("result").is_some(), "{reply}");
        client
            .send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        client
    }

    async fn send(&self, message: Value) {
        let mut stdin = self.stdin.lock().await;
        stdin
            .write_all(format!("{message}\n").as_bytes())
            .await
            .expect("write");
        stdin.flush().await.expect("flush");
    }

    /// Sends a request (no `_meta`, so no progress token) and returns a
    /// future of its reply.
    fn request(
        &mut self,
        method: &str,
        params: Value,
    ) -> impl Future<Output = Value> + Send + 'static {
        self.next_id += 1;
        let id = self.next_id;
        let (reply, replied) = oneshot::channel();
        self.replies.lock().expect("replies").insert(id, reply);
        let stdin = Arc::clone(&self.stdin);
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        async move {
            {
                let mut stdin = stdin.lock().await;
                stdin
                    .write_all(format!("{message}\n").as_bytes())
                    .await
                    .expect("write");
                stdin.flush().await.expect("flush");
            }
            replied.await.expect("a reply")
        }
    }

    /// Calls a tool in the background; the handle yields its `result`.
    fn call(&mut self, tool: &str, arguments: Value) -> tokio::task::JoinHandle<Value> {
        let reply = self.request("tools/call", json!({"name": tool, "arguments": arguments}));
        tokio::spawn(async move {
            let reply = reply.await;
            reply
                .get("result")
                .cloned()
                .unwrap_or_else(|| panic!("no result: {reply}"))
        })
    }

    async fn next_url(&mut self) -> String {
        tokio::time::timeout(WAIT, self.urls.recv())
            .await
            .expect("a URL in time")
            .expect("stderr open")
    }

    async fn close(mut self) {
        drop(self.stdin);
        let status = tokio::time::timeout(WAIT, self.child.wait())
            .await
            .expect("exits")
            .expect("status");
        assert!(status.success(), "{status:?}");
    }
}

async fn finished(call: tokio::task::JoinHandle<Value>) -> Value {
    tokio::time::timeout(WAIT, call)
        .await
        .expect("the call returned in time")
        .expect("task")
}

fn text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn an_ask_hands_back_still_open_and_the_next_call_gets_the_answer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut client = RawClient::start(dir.path()).await;
    let created = finished(client.call("init_planb_session", json!({}))).await;
    let session = text(&created)
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("sessionId: "))
        .expect("sessionId")
        .to_string();
    let questions = json!({"sessionId": session, "title": "Storage", "questions": [
        {"id": "db", "kind": "single", "label": "Which database?", "options": ["Postgres", "SQLite"], "required": true}
    ]});
    let first = client.call("ask_user", questions);
    let url = client.next_url().await;
    let first = finished(first).await;
    assert_ne!(first["isError"], true, "{first}");
    let waiting = &first["structuredContent"];
    assert_eq!(waiting["status"], "waiting", "{first}");
    assert_eq!(waiting["url"], url.as_str());
    let ask = waiting["askId"].as_str().expect("askId").to_string();
    assert!(
        text(&first).contains(&format!("{{\"askId\": \"{ask}\"}}")),
        "{first}"
    );
    assert_eq!(
        crate::support::fold_log(dir.path()).1,
        ["session_created", "ask_opened"],
        "handing back ends nothing"
    );

    // The next call waits on the page the person has open; it is not opened again.
    let second = client.call("ask_user", json!({"askId": ask}));
    let (port, sid) = parse_form_url(&url);
    let answered = post_json(
        port,
        "/submit",
        &json!({"sid": sid, "answers": {"db": "SQLite"}}),
    )
    .await;
    assert_eq!(answered.status, 200, "{}", answered.body);
    let second = finished(second).await;
    assert_eq!(text(&second), r#"{"db":"SQLite"}"#, "{second}");
    assert_eq!(second["structuredContent"]["status"], "answered");
    assert_eq!(second["structuredContent"]["answers"]["db"], "SQLite");
    assert!(client.urls.try_recv().is_err(), "the form was opened twice");

    // Asked again after the answer exists: it comes back at once.
    let third = finished(client.call("ask_user", json!({"askId": ask}))).await;
    assert_eq!(text(&third), r#"{"db":"SQLite"}"#, "{third}");
    client.close().await;
    assert_eq!(
        crate::support::fold_log(dir.path()).1,
        ["session_created", "ask_opened", "ask_answered"]
    );
}

#[tokio::test]
async fn a_review_hands_back_still_open_and_submitting_again_rejoins_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut client = RawClient::start(dir.path()).await;
    let written = finished(client.call(
        "write_plan",
        json!({"planName": "auth", "content": "# Auth\n- step one\n"}),
    ))
    .await;
    assert_ne!(written["isError"], true, "{written}");
    let first = client.call("submit_plan", json!({"planName": "auth"}));
    let url = client.next_url().await;
    let first = finished(first).await;
    let pending = &first["structuredContent"];
    assert_eq!(pending["approved"], false, "{first}");
    assert_eq!(pending["pending"], true, "{first}");
    assert_eq!(pending["round"], 1, "{first}");
    assert_eq!(pending["reviewUrl"], url.as_str());

    // Submitting the unchanged plan again waits on the same review.
    let second = client.call("submit_plan", json!({"planName": "auth"}));
    let rest = url.strip_prefix("http://127.0.0.1:").expect("loopback");
    let (port, query) = rest.split_once('/').expect("path");
    let rid = query.strip_prefix("review?rid=").expect("rid");
    let port: u16 = port.parse().expect("port");
    let reviewed = post_json(port, "/review", &json!({"rid": rid, "verdict": "approve"})).await;
    assert_eq!(reviewed.status, 200, "{}", reviewed.body);
    let second = finished(second).await;
    assert_eq!(second["structuredContent"]["approved"], true, "{second}");
    assert!(
        client.urls.try_recv().is_err(),
        "the review was opened twice"
    );

    // A verdict given between two calls is what the next call returns.
    let edited = finished(client.call(
        "edit_plan",
        json!({"planName": "auth", "oldString": "step one", "newString": "step 1"}),
    ))
    .await;
    assert_ne!(edited["isError"], true, "{edited}");
    let third = client.call("submit_plan", json!({"planName": "auth"}));
    let url = client.next_url().await;
    let third = finished(third).await;
    assert_eq!(third["structuredContent"]["round"], 2, "{third}");
    let rid = url.split("rid=").nth(1).expect("rid");
    let reviewed = post_json(
        port,
        "/review",
        &json!({"rid": rid, "verdict": "changes", "feedback": "Name the session store."}),
    )
    .await;
    assert_eq!(reviewed.status, 200, "{}", reviewed.body);
    let fourth = finished(client.call("submit_plan", json!({"planName": "auth"}))).await;
    assert_eq!(fourth["structuredContent"]["approved"], false, "{fourth}");
    assert_eq!(
        fourth["structuredContent"]["feedback"], "Name the session store.",
        "{fourth}"
    );
    assert!(client.urls.try_recv().is_err(), "a third review was opened");
    client.close().await;
    assert_eq!(
        crate::support::fold_log(dir.path()).1,
        [
            "named_plan_written",
            "named_plan_submitted",
            "named_plan_reviewed",
            "named_plan_edited",
            "named_plan_submitted",
            "named_plan_reviewed"
        ]
    );
}

#[tokio::test]
async fn a_long_plan_run_hands_back_and_the_next_call_waits_for_the_same_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let calls = dir.path().join("calls");
    let servers = json!({"mcpServers": {"slow": {
        "command": crate::support::downstream_binary(),
        "args": ["slow", "sleep", "echo"],
        "env": {"DOWNSTREAM_CALLS": &calls},
    }}});
    std::fs::write(dir.path().join("servers.json"), servers.to_string()).expect("servers");
    let mut client = RawClient::start(dir.path()).await;
    let created = finished(client.call(
        "plan_create",
        json!({"title": "Slow", "steps": [
            {"index": "1", "title": "Nap", "tool": "sleep", "args": {"ms": 4000, "text": "slept"}, "result_variable": "nap"},
            {"index": "2", "title": "Tell", "tool": "echo", "args": {"text": "after ${nap}"}, "depends_on": ["1"]}
        ]}),
    ))
    .await;
    let id = created["structuredContent"]["plan_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_owned();
    let first = finished(client.call("plan_execute", json!({"plan_id": id}))).await;
    assert_eq!(first["structuredContent"]["running"], true, "{first}");
    assert!(text(&first).contains("plan_execute again"), "{first}");
    // A second call joins the run under way (and hands back again).
    let joined = finished(client.call("plan_execute", json!({"plan_id": id}))).await;
    assert_eq!(joined["structuredContent"]["running"], true, "{joined}");
    // The run ends while nobody waits; the next call gets its result
    // instead of starting the plan again.
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let shown = finished(client.call("plan_show", json!({"plan_id": id}))).await;
        if shown["structuredContent"]["last_run"]["state"] == "completed" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{shown}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let last = finished(client.call("plan_execute", json!({"plan_id": id}))).await;
    assert_eq!(last["structuredContent"]["success"], true, "{last}");
    let sleeps = || -> Vec<Value> {
        std::fs::read_to_string(&calls)
            .expect("calls")
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).expect("call line"))
            .filter(|c| c["tool"] == "sleep")
            .collect()
    };
    assert_eq!(sleeps().len(), 1, "the run was started once");
    // Collected once: the call after that is a new run.
    let again = finished(client.call("plan_execute", json!({"plan_id": id}))).await;
    assert_eq!(again["structuredContent"]["running"], true, "{again}");
    assert_eq!(sleeps().len(), 2);
    client.close().await;
}

/// An execution plan's review not decided when the call hands back stays
/// open: each next `plan_execute` with a review waits on the same form (no
/// second one is opened), and the plan runs once the person approves there.
#[tokio::test]
async fn an_undecided_run_review_is_waited_on_again_by_the_next_call() {
    let dir = tempfile::tempdir().expect("tempdir");
    crate::plan_tools::write_servers(dir.path());
    let calls_file = dir.path().join("calls");
    let env = [("DOWNSTREAM_CALLS", calls_file.to_str().expect("path"))];
    let mut client = RawClient::start_with(dir.path(), &env, &[]).await;
    let created = finished(client.call("plan_create", crate::plan_tools::diamond())).await;
    let id = created["structuredContent"]["plan_id"]
        .as_str()
        .expect("id")
        .to_owned();
    let review = json!({"plan_id": id, "review": true});
    let first = client.call("plan_execute", review.clone());
    let url = client.next_url().await;
    let first = finished(first).await;
    assert_eq!(first["structuredContent"]["review"], "waiting", "{first}");
    assert_eq!(first["structuredContent"]["url"], url.as_str());
    let calls = || planb_tests::plans::calls(&calls_file);
    assert!(calls().is_empty(), "a call before the verdict");

    // The next call waits on the same form, and hands back the same link.
    let second = finished(client.call("plan_execute", review.clone())).await;
    assert_eq!(second["structuredContent"]["review"], "waiting", "{second}");
    assert_eq!(second["structuredContent"]["url"], url.as_str());

    let again = client.call("plan_execute", review);
    let (port, sid) = parse_form_url(&url);
    let answers = json!({"sid": sid, "answers": {"decision": "Run it", "feedback": ""}});
    let submitted = post_json(port, "/submit", &answers).await;
    assert_eq!(submitted.status, 200, "{}", submitted.body);
    let ran = finished(again).await;
    assert_eq!(ran["structuredContent"]["success"], true, "{ran}");
    assert_eq!(calls().len(), 4);
    assert!(
        client.urls.try_recv().is_err(),
        "a second review form was opened"
    );
    client.close().await;
}

/// With `--review form`, a client that cannot show forms (this one declares
/// no elicitation) is told so, and nothing is submitted: no review round
/// waits for a verdict it cannot get.
#[tokio::test]
async fn a_form_review_for_a_client_without_forms_submits_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut client = RawClient::start_with(dir.path(), &[], &["--review", "form"]).await;
    let plan = json!({"planName": "p", "content": "# P"});
    let written = finished(client.call("write_plan", plan)).await;
    assert_ne!(written["isError"], true, "{written}");
    let refused = finished(client.call("submit_plan", json!({"planName": "p"}))).await;
    assert_eq!(refused["isError"], true, "{refused}");
    assert!(text(&refused).contains("cannot show forms"), "{refused}");
    client.close().await;
    let submitted = planb_tests::logs::events(dir.path())
        .into_iter()
        .filter(|e| matches!(e, planb_core::EventBody::NamedPlanSubmitted { .. }))
        .count();
    assert_eq!(submitted, 0, "a round was submitted");
}
