//! The index shows everything a person did, in its sections, with ids that
//! tell apart what is shown; a named plan reviewed with no session has a
//! page of its own; positions are each page's own.

use std::sync::Arc;

use crate::oneshot::{PORT, check};
use axum::http::StatusCode;
use planb_core::{
    Command, PlanEdit, PlanKey, PlanName, ReviewChannel, ReviewComment, SessionId, TaskId,
    Timestamp, Verdict,
};
use planb_projections::{DataRoot, FixedEnvironment, Store};
use planb_retro::{AppState, Retro, app};
use tempfile::TempDir;
use uuid::Uuid;

const DIR: &str = "/home/ada/shop/plans";

/// A root with a session, another session's later events, a named plan
/// written and reviewed twice with no session (changes requested, an
/// edit, approved), and two tasks whose ids share their first 34
/// characters.
fn fixture() -> (TempDir, DataRoot, SessionId, [TaskId; 2]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = DataRoot::new(dir.path());
    let env = Arc::new(FixedEnvironment::new(Timestamp(1_700_000_000_000), 1_000));
    let (store, _) = Store::open(root.clone(), env).expect("open store");
    let (first, second) = (
        SessionId::from_uuid(Uuid::new_v4()),
        SessionId::from_uuid(Uuid::new_v4()),
    );
    let plan = PlanKey::new(DIR, PlanName::parse("checkout-flow").expect("name"));
    let tasks = [
        TaskId::parse("01a22468-1111-7000-8000-000000000001").expect("id"),
        TaskId::parse("01a22468-1111-7000-8000-000000000002").expect("id"),
    ];
    let mut commands = vec![
        Command::CreateSession {
            session: first,
            title: Some("Small session".into()),
            intent: None,
            project_path: None,
        },
        Command::SavePlan {
            session: first,
            title: None,
            content: "# One\n".into(),
        },
        Command::WritePlan {
            plan: plan.clone(),
            content: "# Checkout\n\n- pay by card\n".into(),
            session: None,
        },
        Command::SubmitPlan { plan: plan.clone() },
        Command::ReviewPlan {
            plan: plan.clone(),
            round: 1,
            verdict: Verdict::ChangesRequested,
            feedback: Some("What about refunds?".into()),
            comments: vec![ReviewComment {
                quote: "pay by card".into(),
                text: "and by invoice".into(),
            }],
            channel: ReviewChannel::Browser,
        },
        Command::EditPlan {
            plan: plan.clone(),
            edits: vec![PlanEdit {
                old: "- pay by card\n".into(),
                new: "- pay by card or invoice\n- refunds within 14 days\n".into(),
                replace_all: false,
            }],
        },
        Command::SubmitPlan { plan: plan.clone() },
        Command::ReviewPlan {
            plan,
            round: 2,
            verdict: Verdict::Approved,
            feedback: None,
            comments: Vec::new(),
            channel: ReviewChannel::Browser,
        },
        // A round left open, then another submitted on changed content.
        Command::WritePlan {
            plan: left_open(),
            content: "# Left open\n".into(),
            session: None,
        },
        Command::SubmitPlan { plan: left_open() },
        Command::WritePlan {
            plan: left_open(),
            content: "# Left open, changed\n".into(),
            session: None,
        },
        Command::SubmitPlan { plan: left_open() },
        Command::CreateSession {
            session: second,
            title: Some("Busy session".into()),
            intent: None,
            project_path: None,
        },
    ];
    for n in 0..5 {
        commands.push(Command::SavePlan {
            session: second,
            title: None,
            content: format!("# Busy {n}\n"),
        });
    }
    let pipeline = planb_core::pipelines::project_plan();
    for task in tasks {
        commands.push(Command::CreateTask {
            task,
            pipeline: pipeline.name().into(),
            pipeline_version: pipeline.version(),
            prompt: format!("Plan {task}"),
            speed: "fast".into(),
            target: "build_plan".into(),
            model_profile: None,
            client_request_id: None,
            project_path: None,
        });
    }
    for command in commands {
        store.execute(command).expect("command accepted");
    }
    (dir, root, first, tasks)
}

fn left_open() -> PlanKey {
    PlanKey::new("/elsewhere", PlanName::parse("left-open").expect("name"))
}

fn router(root: &DataRoot) -> axum::Router {
    let (retro, mut follower) = Retro::open(root);
    follower.poll(&retro);
    app(AppState { retro, port: PORT })
}

const NAMED: &str = "/named?dir=%2Fhome%2Fada%2Fshop%2Fplans&name=checkout-flow";

#[tokio::test]
async fn a_named_plan_reviewed_with_no_session_is_listed_and_has_its_page() {
    let (_dir, root, _, _) = fixture();
    let router = router(&root);
    let index = check(
        &router,
        "/",
        StatusCode::OK,
        &[
            "<h1 class=\"form-title\">What happened</h1>",
            "2 sessions · 2 named plans · 2 tasks · 0 execution plans",
            "id=\"sessions-title\"",
            "id=\"named-title\"",
            "id=\"tasks-title\"",
            "id=\"plans-title\"",
            &format!("in <code>{DIR}</code>"),
            &format!("href=\"{}\"", NAMED.replace('&', "&amp;")),
            ">approved<",
            "2 changes · 2 review rounds",
        ],
    )
    .await;
    // Sections in order: sessions, named plans, tasks, execution plans.
    let at = |marker: &str| index.find(marker).unwrap_or(usize::MAX);
    assert!(at("id=\"sessions-title\"") < at("id=\"named-title\""));
    assert!(at("id=\"named-title\"") < at("id=\"tasks-title\""));
    assert!(at("id=\"tasks-title\"") < at("id=\"plans-title\""));
    assert!(!index.contains("answers go only to the agent"), "{index}");
    // One search over every section.
    check(
        &router,
        "/?q=checkout",
        StatusCode::OK,
        &["checkout-flow", "No session matches", "No task matches"],
    )
    .await;
    let page = check(
        &router,
        NAMED,
        StatusCode::OK,
        &[
            "Named plan",
            "checkout-flow",
            DIR,
            "Round 1",
            "What about refunds?",
            "and by invoice",
            "Round 2",
            "approved",
            "refunds within 14 days",
            "History",
            "6 events",
        ],
    )
    .await;
    // Its events are numbered as the page's own, with their log cursors
    // only in titles.
    for n in 1..=6 {
        assert!(page.contains(&format!(">{n}</span>")), "event {n}: {page}");
    }
    check(
        &router,
        "/named?dir=%2Fnowhere&name=checkout-flow",
        StatusCode::NOT_FOUND,
        &["Named plan not found"],
    )
    .await;
    check(
        &router,
        "/named?dir=x",
        StatusCode::BAD_REQUEST,
        &["name: missing"],
    )
    .await;
    check(
        &router,
        "/named?dir=%2Felsewhere&name=left-open",
        StatusCode::OK,
        &["superseded by round 2", "awaiting review"],
    )
    .await;
}

#[tokio::test]
async fn ids_are_as_long_as_telling_them_apart_needs_and_positions_are_the_page_s_own() {
    let (_dir, root, first, tasks) = fixture();
    let router = router(&root);
    let index = check(&router, "/", StatusCode::OK, &[]).await;
    for task in tasks {
        let whole = task.to_string();
        assert!(
            index.contains(&format!("<code>{whole}</code>")),
            "{whole} not shown whole: {index}"
        );
    }
    // A session of 2 events, in a log of 24: the state panel counts the
    // session's events and names its own last one.
    check(
        &router,
        &format!("/sessions/{first}"),
        StatusCode::OK,
        &[
            "As of event 2 of 2",
            "plan version saved",
            "Event 2 of 2 · log cursor ",
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow: drives Chromium; scripts/test runs it"]
async fn the_index_and_a_named_plan_fit_a_phone_and_a_laptop_with_room_at_the_edges() {
    let (dir, _root, _, _) = fixture();
    let server = crate::support::RetroServer::start(dir.path()).await;
    let browser = planb_tests::browser::Browser::start().await;
    for (width, height) in [(1280, 900), (390, 844)] {
        browser.resize(width, height).await;
        for path in ["/", NAMED] {
            browser.open(&server.url(path)).await;
            let overflow = browser
                .eval("document.documentElement.scrollWidth - window.innerWidth")
                .await
                .as_f64()
                .unwrap_or(f64::MAX);
            assert!(
                overflow <= 0.0,
                "{path} at {width}px scrolls sideways by {overflow}"
            );
            // No text of the sections closer than 8px to the card's edges.
            let tight = browser
                .eval(
                    "(() => { const card = document.querySelector('main').getBoundingClientRect();
                      let worst = Infinity;
                      for (const el of document.querySelectorAll('main h2, main li, main p, main h3')) {
                        const r = el.getBoundingClientRect();
                        if (r.width === 0) continue;
                        worst = Math.min(worst, r.left - card.left, card.right - r.right);
                      }
                      return worst; })()",
                )
                .await
                .as_f64()
                .unwrap_or(0.0);
            assert!(
                tight >= 8.0,
                "{path} at {width}px: text {tight}px from the card's edge"
            );
        }
    }
    browser.close().await;
    drop(server);
}
