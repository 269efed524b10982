//! Planning sessions, their asks and named plans at the application layer,
//! in process: a real store in a temporary data root, held as a front door
//! holds it (`App`, its store opened on a thread of its own), every answer
//! read back as plain data. The
//! forms' delivery and the tools' wording stay in planb-mcp's tests.

use std::path::Path;
use std::sync::Arc;

use planb_app::App;
use planb_app::asks::{Asks, Ending, NewAsk};
use planb_app::named::{CommandReviewError, NamedPlans, ReviewOutcome, SubmitError};
use planb_app::sessions::NewSession;
use planb_app::store::StoreHandle;
use planb_core::state::PlanSource;
use planb_core::{
    AskStatus, Command, DeclineAction, Delivery, PlanEdit, PlanKey, PlanName, ReviewChannel,
    SessionId, Verdict,
};
use planb_projections::{DataRoot, SystemEnvironment};
use planb_tests::fixtures::{new_uuid, storage_spec};

fn app(root: &Path) -> App {
    let servers = planb_app::plans::ServersSource {
        file: root.join("servers.json"),
        project: None,
    };
    App::open(DataRoot::new(root), Arc::new(SystemEnvironment), servers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_s_plan_versions_are_numbered_in_order_and_written_before_the_answer() {
    let dir = tempfile::tempdir().expect("temp dir");
    let sessions = app(dir.path()).sessions();
    let new = NewSession {
        title: Some("Storage".into()),
        ..NewSession::default()
    };
    let (session, folder) = sessions.start(new).await.expect("started");
    assert!(folder.starts_with(dir.path()), "{}", folder.display());
    assert!(folder.display().to_string().contains(&session.to_string()));
    assert!(sessions.exists(session).await.expect("read"));
    let stranger = SessionId::from_uuid(new_uuid());
    assert!(!sessions.exists(stranger).await.expect("read"));

    for (version, content) in [(1, "# Plan\n\nfirst"), (2, "# Plan\n\nsecond")] {
        let saved = sessions.save_plan(session, None, content.into()).await;
        let saved = saved.expect("saved");
        assert_eq!(saved.version, version);
        let written = std::fs::read_to_string(&saved.path).expect("the version's file");
        assert_eq!(written, content);
    }
    let refused = sessions.save_plan(stranger, None, "# no".into()).await;
    assert!(refused.is_err(), "a plan for no session is refused");
}

/// An ask opened in a session, with the secret of its form.
async fn opened(asks: &Asks, session: SessionId, sid: &str) -> planb_core::AskId {
    let new = NewAsk {
        session,
        spec: storage_spec(),
        delivery: Delivery::BrowserNotOpened,
        url: "http://127.0.0.1:9/ask".into(),
        sid: sid.into(),
    };
    asks.open(new).await.expect("opened")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_ended_after_its_answer_keeps_it_and_an_ended_form_takes_one_late_answer() {
    let dir = tempfile::tempdir().expect("temp dir");
    let app = app(dir.path());
    let handle = app.store().clone();
    let sessions = app.sessions();
    let (session, _) = sessions
        .start(NewSession::default())
        .await
        .expect("session");
    let asks = app.asks();

    let answered = opened(&asks, session, "sid-answered").await;
    let found = asks.answerable("sid-answered").await.expect("its form");
    assert_eq!(found.0, answered);
    assert!(asks.answerable("sid-unknown").await.is_none());
    let before = asks.find(answered).await.expect("read").expect("the ask");
    assert_eq!(before.session, session);
    assert!(before.has_form && before.answer.is_none());

    // The person answers just before the wait records its timeout.
    let answers = storage_spec()
        .validate_answers(&serde_json::json!({"db": "SQLite"}))
        .expect("valid");
    let submit = Command::SubmitAnswers {
        ask: answered,
        answers: answers.clone(),
    };
    handle.execute(submit).await.expect("answered");
    let ended = asks.end(answered, Ending::TimedOut).await;
    assert_eq!(ended, Err(Some(answers.clone())), "the answer wins");
    let after = asks.find(answered).await.expect("read").expect("the ask");
    assert_eq!(after.answer, Some(answers));
    assert!(asks.answerable("sid-answered").await.is_none());

    let waiting = opened(&asks, session, "sid-waiting").await;
    let dismissed = opened(&asks, session, "sid-dismissed").await;
    assert_eq!(asks.answerable_forms().await, 2);
    assert_eq!(asks.end(waiting, Ending::TimedOut).await, Ok(()));
    let declined = Ending::Declined(DeclineAction::Decline);
    assert_eq!(asks.end(dismissed, declined).await, Ok(()));
    // A form that ended without an answer still records one late answer,
    // which is then the ask's answer; a second is refused.
    assert_eq!(asks.answerable_forms().await, 2);
    let late = asks
        .answerable("sid-dismissed")
        .await
        .expect("still answerable");
    assert_eq!(late.0, dismissed);
    let answers = storage_spec()
        .validate_answers(&serde_json::json!({"db": "Postgres"}))
        .expect("valid");
    let submit = |answers| Command::SubmitAnswers {
        ask: dismissed,
        answers,
    };
    handle
        .execute(submit(answers.clone()))
        .await
        .expect("late answer");
    let found = asks.find(dismissed).await.expect("read").expect("the ask");
    assert_eq!(found.answer, Some(answers.clone()));
    assert!(asks.answerable("sid-dismissed").await.is_none());
    assert_eq!(asks.answerable_forms().await, 1);
    assert!(
        handle.execute(submit(answers)).await.is_err(),
        "one late answer"
    );
    let status = handle
        .read(move |s| s.ask(&waiting).map(|a| a.status))
        .await
        .expect("read");
    assert_eq!(status, Some(AskStatus::TimedOut));
}

fn plan_name(text: &str) -> PlanName {
    PlanName::parse(text).expect("a plan name")
}

/// What made each version of `plan`, oldest first.
async fn sources(handle: &StoreHandle, plan: &PlanKey) -> Vec<PlanSource> {
    let plan = plan.clone();
    let read = handle.read(move |s| {
        let found = s.named_plan(&plan).expect("the plan");
        found.versions.iter().map(|v| v.source).collect::<Vec<_>>()
    });
    read.await.expect("read")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_edit_is_a_version_of_its_own_and_submitting_opens_numbered_rounds() {
    let dir = tempfile::tempdir().expect("temp dir");
    let app = app(dir.path());
    let handle = app.store().clone();
    let named = app.named(dir.path().join("plans"));
    let plan = named.key(plan_name("storage"));
    let written = named
        .write(&plan, "# Storage\n\nUse A.\n".into(), None)
        .await;
    let path = written.expect("written").path;
    assert_eq!(path, NamedPlans::path(&plan));
    let edit = PlanEdit {
        old: "Use A.".into(),
        new: "Use B.".into(),
        replace_all: false,
    };
    let (edited, replacements) = named.edit(&plan, vec![edit]).await.expect("edited");
    assert_eq!((edited, replacements), (path.clone(), 1));
    std::fs::write(&path, "# Storage\n\nUse C, by hand.\n").expect("hand edit");

    let first = named.submit(&plan).await.expect("submitted");
    assert_eq!(first.round, 1);
    assert_eq!(first.content, "# Storage\n\nUse C, by hand.\n");
    assert_eq!(first.previous, None);
    let expected = [
        PlanSource::Written,
        PlanSource::Edited,
        PlanSource::ChangedOutside,
    ];
    assert_eq!(sources(&handle, &plan).await, expected);
    assert_eq!(
        named.unchanged_round(&plan).await.expect("read"),
        Some((1, None))
    );

    // Submitted again unchanged and unreviewed: the same round, taken up.
    let again = named.submit(&plan).await.expect("submitted");
    assert_eq!((again.round, again.previous.as_deref()), (1, None));
    let changes = ReviewOutcome {
        verdict: Verdict::ChangesRequested,
        feedback: Some("Say why C.".into()),
        comments: Vec::new(),
    };
    let channel = ReviewChannel::Browser;
    named
        .record(&plan, 1, &changes, channel)
        .await
        .expect("reviewed");

    named
        .write(&plan, "# Storage\n\nUse D.\n".into(), None)
        .await
        .expect("written");
    assert_eq!(named.unchanged_round(&plan).await.expect("read"), None);
    let second = named.submit(&plan).await.expect("submitted");
    assert_eq!(second.round, 2);
    assert_eq!(second.previous.as_deref(), Some(first.content.as_str()));
    // Round 2 left unreviewed and the plan changed: round 3 shows its
    // changes against round 1, the last the person reviewed.
    named
        .write(&plan, "# Storage\n\nUse E.\n".into(), None)
        .await
        .expect("written");
    let third = named.submit(&plan).await.expect("submitted");
    assert_eq!(third.round, 3);
    assert_eq!(third.previous.as_deref(), Some(first.content.as_str()));

    let stranger = named.key(plan_name("nothing"));
    let refused = named.submit(&stranger).await;
    assert!(matches!(refused, Err(SubmitError::Store(_))), "{refused:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submit_command_s_output_is_recorded_as_feedback_and_never_as_an_approval() {
    let dir = tempfile::tempdir().expect("temp dir");
    let app = app(dir.path());
    let handle = app.store().clone();
    let named = app.named(dir.path().join("plans"));
    let plan = named.key(plan_name("launch"));
    named
        .write(&plan, "# Launch\n".into(), None)
        .await
        .expect("written");
    let submitted = named.submit(&plan).await.expect("submitted");
    let say = |script: &str| -> Vec<String> {
        ["sh", "-c", script, "review"].map(str::to_owned).to_vec()
    };

    let approve = say("echo \"approved $(basename \"$1\")\"");
    let outcome = named
        .review_by_command(&plan, submitted.round, &submitted.path, &approve)
        .await
        .expect("reviewed");
    assert_eq!(outcome.verdict, Verdict::ChangesRequested);
    assert_eq!(outcome.feedback.as_deref(), Some("approved launch-plan.md"));
    let key = plan.clone();
    let round = handle
        .read(move |s| s.named_plan(&key).and_then(|p| p.rounds.last().cloned()))
        .await
        .expect("read")
        .expect("a round");
    assert_eq!(round.verdict, Some(Verdict::ChangesRequested));
    assert_eq!(round.feedback.as_deref(), Some("approved launch-plan.md"));

    let again = named.submit(&plan).await.expect("submitted");
    let failing = say("echo broken >&2; exit 3");
    let failed = named
        .review_by_command(&plan, again.round, &again.path, &failing)
        .await;
    match failed {
        Err(CommandReviewError::Failed { status, stderr }) => {
            assert_eq!(status.code(), Some(3));
            assert_eq!(stderr, "broken");
        }
        other => panic!("expected the command's failure, got {other:?}"),
    }
    let missing = ["/nonexistent/reviewer".to_owned()];
    let not_run = named
        .review_by_command(&plan, again.round, &again.path, &missing)
        .await;
    assert!(
        matches!(not_run, Err(CommandReviewError::NotRun { .. })),
        "{not_run:?}"
    );
    // Past what feedback holds, the output is read no further.
    let chatty = say("yes feedback | head -c 2000000");
    let too_long = named
        .review_by_command(&plan, again.round, &again.path, &chatty)
        .await;
    assert!(
        matches!(too_long, Err(CommandReviewError::TooLong)),
        "{too_long:?}"
    );
    let key = plan.clone();
    let verdict = handle
        .read(move |s| s.named_plan(&key).and_then(|p| p.rounds.last()?.verdict))
        .await
        .expect("read");
    assert_eq!(verdict, None, "a failed command records no verdict");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_session_numbers_its_own_plan_versions_from_one_in_a_folder_of_its_own() {
    let dir = tempfile::tempdir().expect("temp dir");
    let sessions = app(dir.path()).sessions();
    let (first, first_folder) = sessions
        .start(NewSession::default())
        .await
        .expect("started");
    let (second, second_folder) = sessions
        .start(NewSession::default())
        .await
        .expect("started");
    assert_ne!(first, second);
    assert_ne!(first_folder, second_folder);
    let saved = |session, text: &str| sessions.save_plan(session, None, text.into());
    assert_eq!(saved(first, "# One\n").await.expect("saved").version, 1);
    assert_eq!(
        saved(first, "# One, again\n").await.expect("saved").version,
        2
    );
    let other = saved(second, "# Two\n").await.expect("saved");
    assert_eq!(
        other.version, 1,
        "numbered after another session's versions"
    );
    assert!(
        other.path.starts_with(&second_folder),
        "{}",
        other.path.display()
    );
    assert_eq!(
        std::fs::read_to_string(&other.path).expect("file"),
        "# Two\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_keeps_what_it_was_started_with_and_each_version_s_title() {
    let dir = tempfile::tempdir().expect("temp dir");
    let app = app(dir.path());
    let new = NewSession {
        title: Some("Storage".into()),
        intent: Some("Choose a database".into()),
        project_path: Some("/work/shop".into()),
    };
    let sessions = app.sessions();
    let (session, _) = sessions.start(new).await.expect("started");
    let titled = sessions.save_plan(session, Some("First cut".into()), "# A\n".into());
    titled.await.expect("saved");
    let kept = app
        .store()
        .read(move |s| s.session(&session).cloned())
        .await;
    let kept = kept.expect("read").expect("the session");
    assert_eq!(kept.title.as_deref(), Some("Storage"));
    assert_eq!(kept.intent.as_deref(), Some("Choose a database"));
    assert_eq!(kept.project_path.as_deref(), Some("/work/shop"));
    let versions: Vec<(u32, Option<&str>, u64)> = kept
        .plans
        .iter()
        .map(|v| (v.version, v.title.as_deref(), v.bytes))
        .collect();
    assert_eq!(versions, [(1, Some("First cut"), 4)]);
}
