//! The `sessions/` layout is a contract other tools read the moment a tool
//! answers: at each reply, the files it changed are in place and agree with
//! the log. This test process reads them right at the reply, while the
//! server (another process) goes on, and after killing it with SIGKILL.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::{
    Server, UrlAnswer, all_output, call, new_session, parse_form_url, planb, post_json, sample_ask,
    start, start_with, text_of,
};
use rmcp::model::{CallToolRequestParams, ElicitationAction};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

fn session_dir(root: &Path, session: &str) -> PathBuf {
    root.join("sessions").join(session)
}

fn read_json(path: &Path) -> Value {
    let bytes =
        std::fs::read(path).unwrap_or_else(|e| panic!("{} at the reply: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The cursor the session files vouch for (`sessions.cursor`).
fn checkpoint(root: &Path) -> u64 {
    std::fs::read_to_string(root.join("sessions.cursor"))
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The log's last cursor, read by this process.
fn log_end(root: &Path) -> u64 {
    let mut reader = planb_log::read_dir(
        &planb_projections::DataRoot::new(root).log_dir(),
        Default::default(),
        planb_log::Cursor(1),
    )
    .expect("reader");
    let mut end = 0;
    while let Some(record) = reader.next().expect("read") {
        end = record.cursor.0;
    }
    end
}

/// What a reader finds right after `save_plan` answered version `n`.
fn assert_saved(root: &Path, session: &str, n: u64, plan: &str) {
    let dir = session_dir(root, session);
    let md = dir.join("plans").join(format!("v{n}.md"));
    assert_eq!(std::fs::read_to_string(&md).expect("vN.md"), plan);
    let meta = read_json(&dir.join("plans").join(format!("v{n}.json")));
    assert_eq!(meta["version"], n);
    assert_eq!(meta["bytes"], plan.len() as u64);
    let manifest = read_json(&dir.join("session.json"));
    assert_eq!(manifest["latestPlanVersion"], n, "{manifest}");
    assert_eq!(manifest["planCount"], n, "{manifest}");
    assert_eq!(manifest["plans"].as_array().map(Vec::len), Some(n as usize));
    assert_eq!(
        checkpoint(root),
        log_end(root),
        "the checkpoint at the reply"
    );
}

async fn save(server: &Server, session: &str, plan: &str) -> String {
    let result = call(
        server,
        "save_plan",
        json!({"sessionId": session, "plan": plan}),
    )
    .await;
    assert_eq!(result.is_error, Some(false), "{}", text_of(&result));
    text_of(&result)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_file_a_save_implies_is_there_at_its_reply_even_when_killed_right_after() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = start(dir.path(), UrlAnswer::NotSupported, &[]).await;
    let session = new_session(&server).await;
    let manifest = read_json(&session_dir(dir.path(), &session).join("session.json"));
    assert_eq!(manifest["sessionId"], session.as_str());
    assert_eq!(manifest["planCount"], 0);
    assert_eq!(checkpoint(dir.path()), log_end(dir.path()));
    for n in 1..=12u64 {
        let plan = format!("# Plan v{n}\n\n- step {n}\n");
        let reply = save(&server, &session, &plan).await;
        assert!(reply.starts_with(&format!("Saved plan v{n} ")), "{reply}");
        assert_saved(dir.path(), &session, n, &plan);
        if n % 4 == 0 {
            // Killed right after a reply: nothing of the layout was left
            // for later.
            server.kill_9();
            let _ = server.client.cancel().await;
            assert_saved(dir.path(), &session, n, &plan);
            server = start(dir.path(), UrlAnswer::NotSupported, &[]).await;
        }
    }
    // A named plan written for the session moves the session's manifest.
    let before = read_json(&session_dir(dir.path(), &session).join("session.json"));
    server.client.cancel().await.expect("shutdown");
    let plans = dir.path().join("named").display().to_string();
    let server = start_with(
        dir.path(),
        UrlAnswer::NotSupported,
        None,
        &[],
        &["--plans-dir", &plans],
    )
    .await;
    let written = call(
        &server,
        "write_plan",
        json!({"planName": "layout", "content": "# Layout\n", "sessionId": session}),
    )
    .await;
    assert_eq!(written.is_error, Some(false), "{}", text_of(&written));
    let after = read_json(&session_dir(dir.path(), &session).join("session.json"));
    assert_ne!(after["updatedAt"], before["updatedAt"], "{after}");
    assert_eq!(checkpoint(dir.path()), log_end(dir.path()));
    server.client.cancel().await.expect("shutdown");
    let output = planb(dir.path(), &["check"]);
    assert!(output.status.success(), "{}", all_output(&output));
}

/// The one ask file of `session`, read now.
fn ask_file(root: &Path, session: &str) -> Value {
    let asks = session_dir(root, session).join("asks");
    let files: Vec<PathBuf> = std::fs::read_dir(&asks)
        .expect("asks/ at the reply")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    read_json(&files[0])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_s_files_are_there_when_its_form_opens_and_when_it_is_answered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = start(
        dir.path(),
        UrlAnswer::Answer(ElicitationAction::Accept),
        &[],
    )
    .await;
    let session = new_session(&server).await;
    let peer = server.client.peer().clone();
    let arguments = sample_ask(&session);
    let pending = tokio::spawn(async move {
        peer.call_tool(CallToolRequestParams::new("ask_user").with_arguments(arguments))
            .await
            .expect("ask_user call")
    });
    let (url, _) = tokio::time::timeout(WAIT, server.seen.urls.recv())
        .await
        .expect("in time")
        .expect("a form URL");
    // The form is in front of the person: its record says so.
    let ask = ask_file(dir.path(), &session);
    assert_eq!(ask["status"], "pending", "{ask}");
    let (port, sid) = parse_form_url(&url);
    let answers = json!({"name": "Aurora", "summary": "", "language": "Rust",
        "integrations": ["Slack"], "priority": 4});
    let submitted = post_json(port, "/submit", &json!({"sid": sid, "answers": answers})).await;
    assert_eq!(submitted.status, 200, "{}", submitted.body);
    // The form's own reply and the tool's reply both find it answered.
    assert_eq!(ask_file(dir.path(), &session)["status"], "answered");
    let result = tokio::time::timeout(WAIT, pending)
        .await
        .expect("in time")
        .expect("task");
    assert_eq!(result.is_error, Some(false), "{}", text_of(&result));
    let ask = ask_file(dir.path(), &session);
    assert_eq!(ask["status"], "answered");
    assert_eq!(ask["answers"], answers);
    let manifest = read_json(&session_dir(dir.path(), &session).join("session.json"));
    assert_eq!(manifest["askCount"], 1);
    assert_eq!(manifest["asks"][0]["status"], "answered", "{manifest}");
    assert_eq!(checkpoint(dir.path()), log_end(dir.path()));
    server.client.cancel().await.expect("shutdown");
}
