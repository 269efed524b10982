//! Router tests without a socket (`oneshot`), over a real data root written
//! through `planb_projections::Store`, plus the live follower.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::oneshot::{PORT, check, get_with_host};
use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use planb_core::{
    AnswerValue, Answers, AskId, Command, Delivery, PlanKey, PlanName, ReviewChannel,
    ReviewComment, SessionId, Timestamp, Verdict,
};
use planb_projections::{DataRoot, FixedEnvironment, Store};
use planb_retro::{AppState, Retro, app};
use planb_tests::fixtures::one_question;
use tempfile::TempDir;
use tower::ServiceExt;
use uuid::Uuid;

struct Fixture {
    _dir: TempDir,
    root: DataRoot,
    store: Store,
    session: SessionId,
    ask: AskId,
    pending: AskId,
}

/// A session with an answered ask, a pending one, three plan versions and a
/// reviewed named plan.
fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = DataRoot::new(dir.path());
    let env = Arc::new(FixedEnvironment::new(Timestamp(1_700_000_000_000), 1_000));
    let (store, _) = Store::open(root.clone(), env).expect("open store");
    let session = SessionId::from_uuid(Uuid::new_v4());
    let ask = AskId::from_uuid(Uuid::new_v4());
    let pending = AskId::from_uuid(Uuid::new_v4());
    let plan = PlanKey::new(
        "/home/ada/app/docs/plans",
        PlanName::parse("auth-refactor").expect("plan name"),
    );
    let commands = vec![
        Command::CreateSession {
            session,
            title: Some("Auth refactor".into()),
            intent: Some("Move sessions to tokens".into()),
            project_path: Some("/work/app".into()),
        },
        Command::SavePlan {
            session,
            title: Some("First cut".into()),
            content: "# Plan\n\nUse cookies\n".into(),
        },
        Command::OpenAsk {
            session,
            ask,
            spec: one_question("Storage choice"),
            delivery: Delivery::BrowserOpened,
            url: "http://127.0.0.1:9/ask".into(),
            sid: "a".into(),
        },
        Command::SubmitAnswers {
            ask,
            answers: Answers(vec![("db".into(), AnswerValue::Text("Postgres".into()))]),
        },
        Command::SavePlan {
            session,
            title: None,
            content: "# Plan\n\nUse tokens in Postgres\n".into(),
        },
        Command::WritePlan {
            plan: plan.clone(),
            content: "# Named\n\nstep one\n".into(),
            session: Some(session),
        },
        Command::SubmitPlan { plan: plan.clone() },
        Command::ReviewPlan {
            plan,
            round: 1,
            verdict: Verdict::ChangesRequested,
            feedback: Some("Needs a rollback story".into()),
            comments: vec![ReviewComment {
                quote: "step one".into(),
                text: "too vague".into(),
            }],
            channel: ReviewChannel::Browser,
        },
        Command::SavePlan {
            session,
            title: Some("Final".into()),
            content: "# Plan\n\nUse tokens in Postgres\n\nRollback: keep cookies a week\n".into(),
        },
        Command::OpenAsk {
            session,
            ask: pending,
            spec: one_question("Ship it?"),
            delivery: Delivery::BrowserOpened,
            url: "http://127.0.0.1:9/ask".into(),
            sid: "b".into(),
        },
    ];
    for command in commands {
        store.execute(command).expect("command accepted");
    }
    Fixture {
        _dir: dir,
        root,
        store,
        session,
        ask,
        pending,
    }
}

fn router(root: &DataRoot) -> (Retro, axum::Router) {
    let (retro, mut follower) = Retro::open(root);
    follower.poll(&retro);
    let router = app(AppState {
        retro: retro.clone(),
        port: PORT,
    });
    (retro, router)
}

#[tokio::test]
async fn index_lists_sessions_marks_pending_and_shows_the_inbox() {
    let f = fixture();
    let (_retro, router) = router(&f.root);
    let body = check(
        &router,
        "/",
        StatusCode::OK,
        &[
            "Auth refactor",
            "Move sessions to tokens",
            "/work/app",
            "2 questions · 3 plan versions",
            "question waiting",
            "Ship it?",
        ],
    )
    .await;
    assert!(
        body.contains(&format!("askId {}", f.pending)),
        "the waiting ask is named so the agent can reopen it"
    );
    assert!(
        !body.contains(&format!("askId {}", f.ask)),
        "the answered ask is not in the inbox"
    );
    check(
        &router,
        "/?project=%2Fwork%2Fapp",
        StatusCode::OK,
        &["Auth refactor"],
    )
    .await;
    let other = check(
        &router,
        "/?project=%2Felsewhere",
        StatusCode::OK,
        &["No session matches"],
    )
    .await;
    assert!(!other.contains("retro-session-title"));
    check(&router, "/?q=TOKENS", StatusCode::OK, &["Auth refactor"]).await;
    check(
        &router,
        "/?q=nothing-like-this",
        StatusCode::OK,
        &["No session matches"],
    )
    .await;
}

#[tokio::test]
async fn session_page_shows_every_event_and_the_state_at_the_end() {
    let f = fixture();
    let (retro, router) = router(&f.root);
    let last = retro.timeline().last_cursor();
    let path = format!("/sessions/{}", f.session);
    let body = check(
        &router,
        &path,
        StatusCode::OK,
        &[
            "Session replay",
            "id=\"scrubber\"",
            "data-cursors=\"1,2,3,4,5,6,7,8,9,10\"",
            "Answered",
            "Postgres",
            "Which database?",
            "Plan v3",
            "Rollback: keep cookies a week",
            "diff-added",
            "changes requested",
            "Needs a rollback story",
            "too vague",
            "auth-refactor",
            "1 closed, 1 pending",
        ],
    )
    .await;
    assert_eq!(body.matches("<li class=\"retro-entry").count(), 10);
    assert!(body.contains(&format!("Event 10 of 10 · log cursor {last}")));
    assert!(body.contains("disabled"), "the form is read-only");
}

#[tokio::test]
async fn time_travel_shows_the_state_as_of_the_cursor() {
    let f = fixture();
    let (_retro, router) = router(&f.root);
    // After the first plan version, before any question.
    let early = check(
        &router,
        &format!("/sessions/{}?at=2", f.session),
        StatusCode::OK,
        &["Use cookies", "No question asked yet", "Event 2 of 10"],
    )
    .await;
    assert!(!early.contains("Plan v3 ·"), "{early}");
    // After the question opened but before its answer.
    let fragment = check(
        &router,
        &format!("/sessions/{}/at/3", f.session),
        StatusCode::OK,
        &["0 closed, 1 pending", "Storage choice", "Use cookies"],
    )
    .await;
    assert!(!fragment.contains("<html"), "a fragment, not a page");
    check(
        &router,
        &format!("/sessions/{}/at/4", f.session),
        StatusCode::OK,
        &["1 closed, 0 pending", "Postgres"],
    )
    .await;
    check(
        &router,
        &format!("/sessions/{}/at/0", f.session),
        StatusCode::OK,
        &["did not exist yet"],
    )
    .await;
}

#[tokio::test]
async fn plan_pages_render_a_version_and_diffs() {
    let f = fixture();
    let (_retro, router) = router(&f.root);
    check(
        &router,
        &format!("/sessions/{}/plans/1", f.session),
        StatusCode::OK,
        &["First cut", "Use cookies", "retro-raw", "# Plan"],
    )
    .await;
    check(
        &router,
        &format!("/sessions/{}/plans/1/diff/3", f.session),
        StatusCode::OK,
        &["v1 → v3", "diff-removed", "diff-added", "Rollback"],
    )
    .await;
    check(
        &router,
        &format!("/sessions/{}/plans/9", f.session),
        StatusCode::NOT_FOUND,
        &["no plan version 9"],
    )
    .await;
    check(
        &router,
        &format!("/sessions/{}/plans/1/diff/9", f.session),
        StatusCode::NOT_FOUND,
        &["no plan version"],
    )
    .await;
    check(
        &router,
        &format!("/sessions/{}/plans/one", f.session),
        StatusCode::BAD_REQUEST,
        &["version: &quot;one&quot; is not a number"],
    )
    .await;
}

#[tokio::test]
async fn errors_are_pages_with_their_status() {
    let f = fixture();
    let (_retro, router) = router(&f.root);
    let unknown = SessionId::from_uuid(Uuid::new_v4());
    let s = f.session;
    for (path, status, snippet) in [
        (
            format!("/sessions/{unknown}"),
            StatusCode::NOT_FOUND,
            "no session".to_owned(),
        ),
        (
            format!("/sessions/{unknown}/at/1"),
            StatusCode::NOT_FOUND,
            "no session".to_owned(),
        ),
        (
            format!("/sessions/{unknown}/plans/1"),
            StatusCode::NOT_FOUND,
            "no session".to_owned(),
        ),
        (
            format!("/sessions/{unknown}/plans/1/diff/2"),
            StatusCode::NOT_FOUND,
            "no session".to_owned(),
        ),
        (
            "/sessions/not-a-uuid".to_owned(),
            StatusCode::BAD_REQUEST,
            "is malformed".to_owned(),
        ),
        (
            "/sessions/not-a-uuid/at/1".to_owned(),
            StatusCode::BAD_REQUEST,
            "is malformed".to_owned(),
        ),
        (
            format!("/sessions/{s}?at=abc"),
            StatusCode::BAD_REQUEST,
            "at: &quot;abc&quot; is not a number".to_owned(),
        ),
        (
            format!("/sessions/{s}/at/abc"),
            StatusCode::BAD_REQUEST,
            "is not a number".to_owned(),
        ),
        (
            format!("/sessions/{s}?at=99"),
            StatusCode::NOT_FOUND,
            "the last cursor is 10".to_owned(),
        ),
        (
            format!("/sessions/{s}/at/11"),
            StatusCode::NOT_FOUND,
            "the last cursor is 10".to_owned(),
        ),
        (
            "/nowhere".to_owned(),
            StatusCode::NOT_FOUND,
            "no page at this address".to_owned(),
        ),
        (
            "/assets/nope.js".to_owned(),
            StatusCode::NOT_FOUND,
            "no page".to_owned(),
        ),
    ] {
        check(&router, &path, status, &[&snippet, "<html"]).await;
    }
    let _ = (f.ask, f.pending);
}

#[tokio::test]
async fn other_hosts_are_refused_and_pages_carry_the_csp() {
    let f = fixture();
    let (_retro, router) = router(&f.root);
    let (status, body) = get_with_host(&router, "/", "evil.example:4317").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, _) = get_with_host(&router, "/", "localhost:4317").await;
    assert_eq!(status, StatusCode::OK);
    let request = Request::get("/assets/retro.js")
        .header("host", format!("127.0.0.1:{PORT}"))
        .body(Body::empty())
        .expect("request");
    let response = router.clone().oneshot(request).await.expect("response");
    assert_eq!(response.status(), StatusCode::OK);
    let csp = response
        .headers()
        .get("content-security-policy")
        .expect("csp header");
    assert_eq!(csp, planb_ui::pages::CONTENT_SECURITY_POLICY);
    assert!(!csp.to_str().expect("ascii").contains("unsafe-inline"));
}

#[tokio::test]
async fn a_missing_log_is_a_message_page() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = DataRoot::new(dir.path().join("nothing-here"));
    let (retro, router) = router(&root);
    check(
        &router,
        "/",
        StatusCode::OK,
        &[
            "Nothing to replay yet",
            "Run `planb-mcp demo`",
            "PLANB_MCP_DATA_DIR",
        ],
    )
    .await;
    // The data root is named once.
    let problem = retro.problem().unwrap_or_default();
    assert_eq!(problem.matches("nothing-here").count(), 1, "{problem}");
    assert!(retro.problem().is_some());
    assert!(
        !dir.path().join("nothing-here").exists(),
        "retro creates nothing"
    );
}

#[tokio::test]
async fn the_follower_sees_appended_events_without_a_rebuild() {
    let f = fixture();
    let (retro, follower) = Retro::open(&f.root);
    let mut appended = retro.subscribe();
    let before = retro.timeline().len();
    retro.follow(follower, Duration::from_millis(20));
    f.store
        .execute(Command::SavePlan {
            session: f.session,
            title: Some("Live".into()),
            content: "# Plan\n\nlive edit\n".into(),
        })
        .expect("save");
    let cursor = tokio::time::timeout(Duration::from_secs(10), appended.recv())
        .await
        .expect("a notification within 10 s")
        .expect("a cursor");
    assert_eq!(cursor.0, before as u64 + 1);
    let timeline = retro.timeline();
    assert_eq!(timeline.len(), before + 1);
    let session = timeline.state().session(&f.session).expect("session");
    assert_eq!(session.plans.last().map(|p| p.version), Some(4));
    // The old snapshots are still there: the timeline grew, it was not refolded.
    assert_eq!(
        timeline
            .state_at(planb_core::Cursor(2))
            .session(&f.session)
            .map(|s| s.plans.len()),
        Some(1)
    );
}

#[tokio::test]
async fn the_session_stream_sends_new_entries() {
    let f = fixture();
    let (retro, follower) = Retro::open(&f.root);
    retro.follow(follower, Duration::from_millis(20));
    let router = app(AppState {
        retro: retro.clone(),
        port: PORT,
    });
    let request = Request::get(format!("/sessions/{}/events?after=10", f.session))
        .header("host", format!("127.0.0.1:{PORT}"))
        .body(Body::empty())
        .expect("request");
    let response = router.oneshot(request).await.expect("response");
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body();
    f.store
        .execute(Command::TimeOut { ask: f.pending })
        .expect("time out");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut text = String::new();
    while !text.contains("\"cursor\":11") {
        let frame = tokio::time::timeout_at(deadline.into(), body.frame())
            .await
            .expect("an event within 10 s")
            .expect("stream open")
            .expect("frame");
        if let Ok(data) = frame.into_data() {
            text.push_str(&String::from_utf8_lossy(&data));
        }
    }
    assert!(text.contains("event: entry"), "{text}");
    assert!(text.contains("Timed out"), "{text}");
}
