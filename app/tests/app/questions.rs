//! Questions put to the person, at the application layer: drafts, answers
//! on time and late, each way an ask ends, an ask opened nowhere, and an
//! answer recorded by another process reaching the one that waits for it;
//! over a real store in a temporary data root.

use std::sync::Arc;
use std::time::{Duration, Instant};

use planb_app::asks::{Ending, NewAsk};
use planb_app::sessions::NewSession;
use planb_app::{App, ErrorCode};
use planb_core::{Answers, AskId, AskStatus, Command, Delivery, SessionId};
use planb_projections::{DataRoot, Store, SystemEnvironment};
use planb_tests::fixtures::{new_uuid, storage_spec};
use serde_json::json;

use crate::plans::open;

async fn session(app: &App) -> SessionId {
    let started = app.sessions().start(NewSession::default()).await;
    started.expect("a session").0
}

/// Opens an ask of the storage form, its secret `sid`.
async fn ask(app: &App, session: SessionId, sid: &str) -> AskId {
    let new = NewAsk {
        session,
        spec: storage_spec(),
        delivery: Delivery::BrowserNotOpened,
        url: "http://127.0.0.1:9/ask".into(),
        sid: sid.into(),
    };
    app.asks().open(new).await.expect("opened")
}

fn answers(db: &str) -> Answers {
    let given = json!({"db": db});
    storage_spec().validate_answers(&given).expect("valid")
}

/// The ask as the log holds it.
async fn recorded(app: &App, ask: AskId) -> planb_core::Ask {
    let read = app.store().read(move |s| s.ask(&ask).cloned()).await;
    read.expect("read").expect("the ask")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draft_keeps_the_latest_answers_and_is_not_the_ask_s_answer() {
    let dir = tempfile::tempdir().expect("temp dir");
    let app = open(dir.path()).0;
    let asked = ask(&app, session(&app).await, "sid-draft").await;
    let asks = app.asks();
    asks.save_draft(asked, answers("Postg"))
        .await
        .expect("draft");
    asks.save_draft(asked, answers("Postgres"))
        .await
        .expect("draft");
    let held = recorded(&app, asked).await;
    assert_eq!(held.draft, Some(answers("Postgres")));
    assert_eq!((held.status, held.answers), (AskStatus::Pending, None));
    let found = asks.find(asked).await.expect("read").expect("the ask");
    assert_eq!(found.answer, None, "a draft answered the ask");
    let form = asks.answerable("sid-draft").await.expect("still open");
    assert_eq!(form.0, asked);
    assert_eq!(asks.answerable_forms().await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_given_while_the_ask_waits_is_on_time_and_a_second_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let app = open(dir.path()).0;
    let asked = ask(&app, session(&app).await, "sid-answer").await;
    let asks = app.asks();
    let on_time = asks.submit(asked, answers("SQLite")).await;
    assert!(
        on_time.expect("answered"),
        "an answer in time was taken as late"
    );
    let held = recorded(&app, asked).await;
    assert_eq!(held.status, AskStatus::Answered);
    assert!(held.answered_at.is_some() && held.late_answers.is_empty());
    let second = asks.submit(asked, answers("Postgres")).await;
    let second = second.expect_err("answered already");
    assert_eq!(second.code, ErrorCode::Conflict, "{second}");
    assert_eq!(second.details["already_answered"], true, "{second}");
    let found = asks.find(asked).await.expect("read").expect("the ask");
    assert_eq!(found.answer, Some(answers("SQLite")));
    assert!(found.has_form);
    assert!(asks.answerable("sid-answer").await.is_none());
    assert_eq!(asks.answerable_forms().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_ask_keeps_its_detail_and_an_answer_after_it_is_late() {
    let dir = tempfile::tempdir().expect("temp dir");
    let app = open(dir.path()).0;
    let asked = ask(&app, session(&app).await, "sid-failed").await;
    let asks = app.asks();
    let why = Ending::Failed("the browser could not be opened".into());
    assert_eq!(asks.end(asked, why).await, Ok(()));
    let held = recorded(&app, asked).await;
    assert_eq!(held.status, AskStatus::Failed);
    let detail = held.failure_detail.as_deref();
    assert_eq!(detail, Some("the browser could not be opened"));
    assert!(held.closed_at.is_some());
    assert!(asks.answerable("sid-failed").await.is_some());
    let late = asks.submit(asked, answers("SQLite")).await.expect("taken");
    assert!(!late, "an answer after the ask ended was taken as on time");
    let held = recorded(&app, asked).await;
    assert_eq!(
        held.status,
        AskStatus::Failed,
        "a late answer changed the status"
    );
    assert_eq!(held.late_answers.len(), 1);
    let found = asks.find(asked).await.expect("read").expect("the ask");
    assert_eq!(found.answer, Some(answers("SQLite")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_nobody_opened_is_not_found_and_ending_it_gives_no_answer() {
    let dir = tempfile::tempdir().expect("temp dir");
    let app = open(dir.path()).0;
    let nobody = AskId::from_uuid(new_uuid());
    let asks = app.asks();
    assert!(asks.find(nobody).await.expect("read").is_none());
    let endings = [
        Ending::TimedOut,
        Ending::Declined(planb_core::DeclineAction::Cancel),
        Ending::Failed("gone".into()),
    ];
    for ending in endings {
        assert_eq!(
            asks.end(nobody, ending.clone()).await,
            Err(None),
            "{ending:?}"
        );
    }
    let answered = asks.submit(nobody, answers("SQLite")).await;
    let answered = answered.expect_err("no such ask");
    assert_eq!(answered.code, ErrorCode::Conflict, "{answered}");
    assert!(answered.message.contains("unknown ask"), "{answered}");
    let draft = asks.save_draft(nobody, answers("SQLite")).await;
    let draft = draft.expect_err("no such ask");
    assert_eq!(draft.code, ErrorCode::Conflict, "{draft}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_in_a_session_that_does_not_exist_is_refused_and_opens_no_form() {
    let dir = tempfile::tempdir().expect("temp dir");
    let app = open(dir.path()).0;
    let stranger = SessionId::from_uuid(new_uuid());
    let new = NewAsk {
        session: stranger,
        spec: storage_spec(),
        delivery: Delivery::BrowserNotOpened,
        url: "http://127.0.0.1:9/ask".into(),
        sid: "sid-nowhere".into(),
    };
    let refused = app.asks().open(new).await.expect_err("no such session");
    assert_eq!(refused.code, ErrorCode::Conflict, "{refused}");
    let rejection = planb_core::Rejection::UnknownSession { session: stranger };
    assert_eq!(refused.message, rejection.to_string());
    assert_eq!(app.asks().answerable_forms().await, 0);
    assert!(app.asks().answerable("sid-nowhere").await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_hears_an_answer_another_process_records_on_the_same_root() {
    let dir = tempfile::tempdir().expect("temp dir");
    let app = open(dir.path()).0;
    let asked = ask(&app, session(&app).await, "sid-elsewhere").await;
    let (watch, handle) = (Arc::clone(app.answer_watch()), app.store().clone());
    let waiting = tokio::spawn(async move { watch.answered(&handle, asked).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(app.answer_watch().is_watching());
    assert!(!waiting.is_finished());
    // Another process's store on the same data root records the answer.
    let env = Arc::new(SystemEnvironment);
    let (other, _) = Store::open(DataRoot::new(dir.path()), env).expect("another store");
    let submit = Command::SubmitAnswers {
        ask: asked,
        answers: answers("SQLite"),
    };
    other.execute(submit).expect("answered elsewhere");
    let heard = tokio::time::timeout(Duration::from_secs(10), waiting).await;
    let heard = heard.expect("heard in time").expect("the wait");
    assert_eq!(heard, answers("SQLite"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while app.answer_watch().is_watching() {
        assert!(
            Instant::now() < deadline,
            "the watch kept going with nobody waiting"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
