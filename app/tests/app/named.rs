//! Named plans at the application layer: edits that do not apply, every
//! occurrence replaced, rounds and their verdicts, two plans folders, the
//! planning a plan belongs to, a file gone from disk, and submit commands
//! that cannot give feedback; over a real store in a temporary data root.

use planb_app::App;
use planb_app::ErrorCode;
use planb_app::named::{CommandReviewError, EditRefused, NamedPlans, ReviewOutcome};
use planb_app::sessions::NewSession;
use planb_core::state::PlanSource;
use planb_core::{NamedPlan, PlanEdit, PlanKey, PlanName, ReviewChannel, Verdict};

use crate::plans::open;

fn key(named: &NamedPlans, name: &str) -> PlanKey {
    named.key(PlanName::parse(name).expect("a plan name"))
}

async fn held(app: &App, plan: &PlanKey) -> NamedPlan {
    let plan = plan.clone();
    let read = app.store().read(move |s| s.named_plan(&plan).cloned());
    read.await.expect("read").expect("the plan")
}

fn edit(old: &str, new: &str, replace_all: bool) -> PlanEdit {
    PlanEdit {
        old: old.into(),
        new: new.into(),
        replace_all,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_that_does_not_apply_is_refused_and_leaves_the_file_and_the_log_alone() {
    let dir = tempfile::tempdir().expect("temp dir");
    let app = open(dir.path()).0;
    let named = app.named(dir.path().join("plans"));
    let plan = key(&named, "storage");
    let text = "# Storage\n\nUse A. Then use A again.\n";
    let path = named
        .write(&plan, text.into(), None)
        .await
        .expect("written")
        .path;
    let refusals = [
        vec![edit("Use Z.", "Use B.", false)],
        vec![
            edit("Use A.", "Use B.", false),
            edit("A. Then", "C. Then", false),
        ],
        vec![edit("A", "B", false)],
        vec![edit("", "B", false)],
        Vec::new(),
    ];
    for edits in refusals {
        let refused = named.edit(&plan, edits.clone()).await;
        assert!(
            matches!(refused, Err(EditRefused::Edit(_))),
            "{edits:?}: {refused:?}"
        );
    }
    assert_eq!(std::fs::read_to_string(&path).expect("the file"), text);
    let versions = held(&app, &plan).await.versions;
    assert_eq!(versions.len(), 1, "a refused edit made a version");
    let stranger = key(&named, "never-written");
    let refused = named.edit(&stranger, vec![edit("a", "b", false)]).await;
    assert!(refused.is_err(), "an edit of a plan never written");
    assert!(!NamedPlans::path(&stranger).exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replacing_every_occurrence_counts_each_one_across_the_edits() {
    let dir = tempfile::tempdir().expect("temp dir");
    let app = open(dir.path()).0;
    let named = app.named(dir.path().join("plans"));
    let plan = key(&named, "rename");
    let text = "Ask Ada. Ada answers. Ada signs.\nDone by Friday.\n";
    named
        .write(&plan, text.into(), None)
        .await
        .expect("written");
    let edits = vec![edit("Ada", "Grace", true), edit("Friday", "Monday", false)];
    let (path, replacements) = named.edit(&plan, edits).await.expect("edited");
    assert_eq!(replacements, 4);
    let expected = "Ask Grace. Grace answers. Grace signs.\nDone by Monday.\n";
    assert_eq!(std::fs::read_to_string(path).expect("the file"), expected);
    let plan = held(&app, &plan).await;
    assert_eq!(plan.content, expected);
    let sources: Vec<PlanSource> = plan.versions.iter().map(|v| v.source).collect();
    assert_eq!(sources, [PlanSource::Written, PlanSource::Edited]);
}

fn outcome(verdict: Verdict) -> ReviewOutcome {
    ReviewOutcome {
        verdict,
        feedback: None,
        comments: Vec::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_takes_one_verdict_and_an_approved_plan_submitted_again_opens_a_new_round() {
    let dir = tempfile::tempdir().expect("temp dir");
    let app = open(dir.path()).0;
    let named = app.named(dir.path().join("plans"));
    let plan = key(&named, "launch");
    named
        .write(&plan, "# Launch\n".into(), None)
        .await
        .expect("written");
    let first = named.submit(&plan).await.expect("submitted");
    assert_eq!(first.round, 1);
    let channel = ReviewChannel::Browser;
    let approved = outcome(Verdict::Approved);
    named
        .record(&plan, 1, &approved, channel)
        .await
        .expect("approved");
    let again = named
        .record(&plan, 1, &outcome(Verdict::ChangesRequested), channel)
        .await;
    let again = again.expect_err("a second verdict");
    assert_eq!(again.code, ErrorCode::Conflict, "{again}");
    assert_eq!(again.details["already_reviewed"], true, "{again}");
    let unknown = named.record(&plan, 7, &approved, channel).await;
    let unknown = unknown.expect_err("no round 7");
    assert_eq!(unknown.code, ErrorCode::Conflict, "{unknown}");
    assert!(
        unknown.details.get("already_reviewed").is_none(),
        "{unknown}"
    );
    let unchanged = named.unchanged_round(&plan).await.expect("read");
    assert_eq!(unchanged, Some((1, Some(Verdict::Approved))));
    // Approved already: submitting it again unchanged is a new round, its
    // previous content the approved one.
    let second = named.submit(&plan).await.expect("submitted");
    assert_eq!(second.round, 2);
    assert_eq!(second.previous.as_deref(), Some("# Launch\n"));
    let rounds = held(&app, &plan).await.rounds;
    let verdicts: Vec<Option<Verdict>> = rounds.iter().map(|r| r.verdict).collect();
    assert_eq!(verdicts, [Some(Verdict::Approved), None]);
    assert_eq!(rounds[0].channel, Some(ReviewChannel::Browser));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_name_in_two_plans_folders_is_two_plans_with_their_own_files() {
    let dir = tempfile::tempdir().expect("temp dir");
    let app = open(dir.path()).0;
    let first = app.named(dir.path().join("one").join("plans"));
    let second = app.named(dir.path().join("two").join("plans"));
    let (a, b) = (key(&first, "storage"), key(&second, "storage"));
    assert_ne!(a, b);
    let a_path = first
        .write(&a, "# One\n".into(), None)
        .await
        .expect("written")
        .path;
    let b_path = second
        .write(&b, "# Two\n".into(), None)
        .await
        .expect("written")
        .path;
    assert_ne!(a_path, b_path);
    second
        .edit(&b, vec![edit("Two", "Two, edited", false)])
        .await
        .expect("edited");
    assert_eq!(std::fs::read_to_string(&a_path).expect("file"), "# One\n");
    assert_eq!(
        std::fs::read_to_string(&b_path).expect("file"),
        "# Two, edited\n"
    );
    assert_eq!(first.submit(&a).await.expect("submitted").round, 1);
    assert_eq!(held(&app, &a).await.versions.len(), 1);
    assert!(held(&app, &b).await.rounds.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_written_in_a_session_stays_tied_to_it_until_another_session_writes_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let app = open(dir.path()).0;
    let sessions = app.sessions();
    let start = || sessions.start(NewSession::default());
    let (first, _) = start().await.expect("a session");
    let (second, _) = start().await.expect("a session");
    let named = app.named(dir.path().join("plans"));
    let plan = key(&named, "tied");
    named
        .write(&plan, "# v1\n".into(), Some(first))
        .await
        .expect("written");
    assert_eq!(held(&app, &plan).await.session, Some(first));
    named
        .write(&plan, "# v2\n".into(), None)
        .await
        .expect("written");
    assert_eq!(
        held(&app, &plan).await.session,
        Some(first),
        "a write naming none"
    );
    named
        .write(&plan, "# v3\n".into(), Some(second))
        .await
        .expect("written");
    assert_eq!(held(&app, &plan).await.session, Some(second));
    let stranger = planb_core::SessionId::from_uuid(planb_tests::fixtures::new_uuid());
    let refused = named.write(&plan, "# v4\n".into(), Some(stranger)).await;
    assert!(refused.is_err(), "a write naming no session that exists");
    assert_eq!(held(&app, &plan).await.content, "# v3\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_file_removed_from_disk_is_written_again_and_a_hand_revert_is_kept() {
    let dir = tempfile::tempdir().expect("temp dir");
    let app = open(dir.path()).0;
    let named = app.named(dir.path().join("plans"));
    let plan = key(&named, "kept");
    let path = named
        .write(&plan, "# Kept\n".into(), None)
        .await
        .expect("written")
        .path;
    std::fs::remove_file(&path).expect("removed");
    let change = named
        .on_file(&plan, None)
        .await
        .expect("brought up to date");
    assert_eq!(change.content, "# Kept\n");
    assert!(change.events.is_empty(), "{:?}", change.events);
    assert_eq!(
        std::fs::read_to_string(&path).expect("the file"),
        "# Kept\n"
    );
    assert_eq!(held(&app, &plan).await.versions.len(), 1);
    // An older version put back by hand is the person's edit, and kept.
    named
        .write(&plan, "# Kept, v2\n".into(), None)
        .await
        .expect("written");
    std::fs::write(&path, "# Kept\n").expect("an old copy");
    let submitted = named.submit(&plan).await.expect("submitted");
    assert_eq!(submitted.content, "# Kept\n");
    assert_eq!(
        std::fs::read_to_string(&path).expect("the file"),
        "# Kept\n"
    );
    let sources: Vec<PlanSource> = held(&app, &plan)
        .await
        .versions
        .iter()
        .map(|v| v.source)
        .collect();
    let expected = [
        PlanSource::Written,
        PlanSource::Written,
        PlanSource::ChangedOutside,
    ];
    assert_eq!(sources, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_submit_command_is_not_run_and_a_silent_one_requests_changes_without_feedback() {
    let dir = tempfile::tempdir().expect("temp dir");
    let app = open(dir.path()).0;
    let named = app.named(dir.path().join("plans"));
    let plan = key(&named, "quiet");
    named
        .write(&plan, "# Quiet\n".into(), None)
        .await
        .expect("written");
    let submitted = named.submit(&plan).await.expect("submitted");
    let (round, path) = (submitted.round, submitted.path);
    let empty = named.review_by_command(&plan, round, &path, &[]).await;
    let not_run =
        matches!(&empty, Err(CommandReviewError::NotRun { program, .. }) if program.is_empty());
    assert!(not_run, "{empty:?}");
    assert_eq!(held(&app, &plan).await.rounds[0].verdict, None);
    let silent = ["true".to_owned()];
    let outcome = named.review_by_command(&plan, round, &path, &silent).await;
    let outcome = outcome.expect("reviewed");
    assert_eq!(
        (outcome.verdict, outcome.feedback),
        (Verdict::ChangesRequested, None)
    );
    let recorded = held(&app, &plan).await.rounds[0].clone();
    assert_eq!(recorded.verdict, Some(Verdict::ChangesRequested));
    assert_eq!(recorded.channel, Some(ReviewChannel::ExternalCommand));
    assert_eq!(recorded.feedback, None);
}
