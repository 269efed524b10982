//! A pending ask outlives the server that opened it: after
//! a `kill -9`, another server on the data root serves its form (by its old
//! link on a fixed port, or again on its own port through `ask_user
//! {askId}`), records the answer, and hands it to the agent.

use std::time::Duration;

use crate::support::{
    UrlAnswer, call, fold_log, new_session, parse_form_url, post_json, sample_ask, start, text_of,
};
use planb_core::{AskId, AskStatus};
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

fn answers() -> Value {
    json!({"name": "Aurora", "summary": "", "language": "Rust", "integrations": ["Slack"], "priority": 4})
}

/// How the server that opened an ask goes away.
#[derive(Clone, Copy, PartialEq)]
enum End {
    /// `kill -9`: the ask stays pending in the log.
    Killed,
    /// The agent closes the connection: the server records the ask as
    /// failed and exits.
    Disconnected,
}

/// Opens an ask on a server that is then killed; returns the ask, its form
/// URL and the session.
async fn ask_on_a_server_that_dies(
    dir: &std::path::Path,
    env: &[(&str, &str)],
) -> (AskId, String, String) {
    ask_on_a_server_that_ends(dir, env, End::Killed).await
}

/// Opens an ask on a server that then goes away as `end` says; returns the
/// ask, its form URL and the session.
async fn ask_on_a_server_that_ends(
    dir: &std::path::Path,
    env: &[(&str, &str)],
    end: End,
) -> (AskId, String, String) {
    let mut first = start(dir, UrlAnswer::NotSupported, env).await;
    let session = new_session(&first).await;
    // The call is cut off by the kill below; its result is of no interest.
    let peer = first.client.peer().clone();
    let arguments = sample_ask(&session);
    tokio::spawn(async move {
        let _ = peer
            .call_tool(CallToolRequestParams::new("ask_user").with_arguments(arguments))
            .await;
    });
    let url = tokio::time::timeout(WAIT, first.seen.stderr_urls.recv())
        .await
        .expect("in time")
        .expect("url");
    let expected = match end {
        End::Killed => {
            first.kill_9();
            AskStatus::Pending
        }
        End::Disconnected => {
            first.client.cancel().await.expect("close the connection");
            AskStatus::Failed
        }
    };
    let state = fold_log(dir).0;
    let ask = state.asks().values().next().expect("the ask");
    assert_eq!(ask.status, expected);
    (ask.id, url, session)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_old_link_works_again_on_a_fixed_port_and_the_agent_collects_the_answer() {
    old_link_on_a_fixed_port(End::Killed, AskStatus::Answered).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_its_server_closed_on_exit_still_takes_the_answer_through_its_old_link() {
    // The ask was recorded as failed when the agent went away; what the
    // person submits through the still open page is kept as a late answer
    // and handed to the agent that asks for it.
    old_link_on_a_fixed_port(End::Disconnected, AskStatus::Failed).await;
}

async fn old_link_on_a_fixed_port(end: End, status_after: AskStatus) {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = planb_tests::process::free_port().to_string();
    let env = [("PLANB_PORT", port.as_str())];
    let (ask, url, _) = ask_on_a_server_that_ends(dir.path(), &env, end).await;

    let second = start(dir.path(), UrlAnswer::NotSupported, &env).await;
    let (port, sid) = parse_form_url(&url);
    // The callback server starts at once because the log has a pending form;
    // retry while it binds the port the dead server left.
    let listening = async {
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(WAIT, listening)
        .await
        .expect("the old port is served again");
    let answered = post_json(port, "/submit", &json!({"sid": sid, "answers": answers()})).await;
    assert_eq!(answered.status, 200, "{}", answered.body);

    let collected = call(&second, "ask_user", json!({"askId": ask.to_string()})).await;
    assert_eq!(collected.is_error, Some(false), "{}", text_of(&collected));
    assert_eq!(
        serde_json::from_str::<Value>(&text_of(&collected)).expect("json"),
        answers()
    );
    second.client.cancel().await.expect("shutdown");
    assert_eq!(
        fold_log(dir.path()).0.ask(&ask).expect("ask").status,
        status_after
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_user_with_an_ask_id_serves_the_form_again_and_waits_for_the_answer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ask, old_url, _) = ask_on_a_server_that_dies(dir.path(), &[]).await;

    let mut second = start(dir.path(), UrlAnswer::NotSupported, &[]).await;
    let collecting =
        crate::support::call_in_background(&second, "ask_user", json!({"askId": ask.to_string()}));
    let url = tokio::time::timeout(WAIT, second.seen.stderr_urls.recv())
        .await
        .expect("in time")
        .expect("url");
    let (port, sid) = parse_form_url(&url);
    let old_sid = parse_form_url(&old_url).1;
    assert_ne!(
        sid, old_sid,
        "the log holds no secret to serve again: a new one"
    );
    let log = std::fs::read_dir(dir.path().join("log"))
        .expect("log dir")
        .flatten()
        .map(|e| std::fs::read(e.path()).expect("segment"))
        .collect::<Vec<_>>()
        .concat();
    assert!(
        !log.windows(old_sid.len()).any(|w| w == old_sid.as_bytes()),
        "the form secret is in the log"
    );
    let response = post_json(port, "/submit", &json!({"sid": sid, "answers": answers()})).await;
    assert_eq!(response.status, 200, "{}", response.body);
    let result = tokio::time::timeout(WAIT, collecting)
        .await
        .expect("in time")
        .expect("task");
    assert_eq!(
        serde_json::from_str::<Value>(&text_of(&result)).expect("json"),
        answers()
    );

    // Collecting again returns the recorded answer at once.
    let again = call(&second, "ask_user", json!({"askId": ask.to_string()})).await;
    assert_eq!(
        serde_json::from_str::<Value>(&text_of(&again)).expect("json"),
        answers()
    );
    let unknown = call(
        &second,
        "ask_user",
        json!({"askId": uuid::Uuid::from_u128(7).to_string()}),
    )
    .await;
    assert_eq!(unknown.is_error, Some(true));
    assert!(
        text_of(&unknown).contains("askId: unknown ask"),
        "{}",
        text_of(&unknown)
    );
    second.client.cancel().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_ask_sees_an_answer_recorded_by_another_process() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The first client takes the form as a URL elicitation.
    let mut first = start(
        dir.path(),
        UrlAnswer::Answer(rmcp::model::ElicitationAction::Accept),
        &[],
    )
    .await;
    let session = new_session(&first).await;
    let waiting =
        crate::support::call_in_background(&first, "ask_user", Value::Object(sample_ask(&session)));
    tokio::time::timeout(WAIT, first.seen.urls.recv())
        .await
        .expect("in time")
        .expect("url");
    let ask = fold_log(dir.path())
        .0
        .asks()
        .values()
        .next()
        .expect("ask")
        .id;

    // The person answers the form served by a second server.
    let mut second = start(dir.path(), UrlAnswer::NotSupported, &[]).await;
    let collecting =
        crate::support::call_in_background(&second, "ask_user", json!({"askId": ask.to_string()}));
    let url = tokio::time::timeout(WAIT, second.seen.stderr_urls.recv())
        .await
        .expect("in time")
        .expect("url");
    let (port, sid) = parse_form_url(&url);
    let response = post_json(port, "/submit", &json!({"sid": sid, "answers": answers()})).await;
    assert_eq!(response.status, 200, "{}", response.body);
    for handle in [waiting, collecting] {
        let result = tokio::time::timeout(WAIT, handle)
            .await
            .expect("in time")
            .expect("task");
        assert_eq!(
            serde_json::from_str::<Value>(&text_of(&result)).expect("json"),
            answers()
        );
    }
    // The first client is told its elicitation is over.
    let completed = tokio::time::timeout(WAIT, first.seen.completions.recv())
        .await
        .expect("notifications/elicitation/complete in time")
        .expect("an elicitation id");
    assert_eq!(completed, ask.to_string());
    first.client.cancel().await.expect("shutdown");
    second.client.cancel().await.expect("shutdown");
}
