//! The one handle a front door holds, `App`: its store opened on a thread
//! of its own (calls made meanwhile wait for it, or learn why it could not
//! be opened), and what its clones share.

use std::sync::Arc;

use planb_app::plans::ServersSource;
use planb_app::sessions::NewSession;
use planb_app::{App, ErrorCode};
use planb_projections::{DataRoot, SystemEnvironment};

fn app_on(root: &std::path::Path) -> App {
    let servers = ServersSource {
        file: root.join("servers.json"),
        project: None,
    };
    App::open(DataRoot::new(root), Arc::new(SystemEnvironment), servers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_whose_data_root_cannot_be_opened_answers_each_call_with_why() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("a-file");
    std::fs::write(&file, "not a directory").expect("file");
    let app = app_on(&file);
    assert_eq!(app.root(), file.as_path());
    let listed = app.tasks().list(10, true).await.expect_err("no store");
    assert_eq!(listed.code, ErrorCode::InternalError);
    assert!(
        listed
            .message
            .starts_with("planb could not open its store: "),
        "{listed}"
    );
    assert!(
        listed.message.contains(&file.display().to_string()),
        "{listed}"
    );
    let plans = app.plans().list().await.expect_err("no store");
    assert_eq!(plans.message, listed.message);
    let session = app.sessions().start(NewSession::default()).await;
    assert!(session.is_err(), "a session started without a store");
    assert_eq!(app.asks().answerable_forms().await, 0);
    assert!(app.store().get().is_none());
    assert_eq!(
        std::fs::read_to_string(&file).expect("file"),
        "not a directory"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_made_while_the_store_opens_are_answered_once_it_is_open() {
    let dir = tempfile::tempdir().expect("temp dir");
    let app = app_on(dir.path());
    let (tasks, sessions) = (app.tasks(), app.sessions());
    let (listed, started) =
        tokio::join!(tasks.list(10, true), sessions.start(NewSession::default()));
    assert!(listed.expect("listed").is_empty());
    let (session, folder) = started.expect("started");
    assert!(folder.starts_with(dir.path()), "{}", folder.display());
    assert!(app.store().get().is_some(), "the store is open by now");
    // Another handle on the same root sees what this one recorded.
    let other = app_on(dir.path());
    assert!(other.sessions().exists(session).await.expect("read"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clones_of_an_app_share_its_store_its_plan_runs_and_its_answer_watch() {
    let dir = tempfile::tempdir().expect("temp dir");
    let app = app_on(dir.path());
    let clone = app.clone();
    assert!(Arc::ptr_eq(app.runs(), clone.runs()));
    assert!(Arc::ptr_eq(app.answer_watch(), clone.answer_watch()));
    assert_eq!(clone.servers(), app.servers());
    assert_eq!(clone.servers().file, dir.path().join("servers.json"));
    let (session, _) = app
        .sessions()
        .start(NewSession::default())
        .await
        .expect("started");
    assert!(clone.sessions().exists(session).await.expect("read"));
    let other = app_on(dir.path());
    assert!(
        !Arc::ptr_eq(app.runs(), other.runs()),
        "another app shares its runs"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tasks_and_plans_an_app_in_a_project_creates_record_that_project() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (app, store) = crate::plans::open(dir.path());
    let in_shop = app.in_project(Some("/work/shop".into()));
    assert_eq!(
        (app.project(), in_shop.project()),
        (None, Some("/work/shop"))
    );
    // Clones in a project share the store and the runs.
    assert!(Arc::ptr_eq(app.runs(), in_shop.runs()));
    let plans = in_shop.plans();
    let plan = plans.create(&crate::plans::titled("Lint", 0), None).await;
    let plan = plan.expect("created").id;
    let other = crate::plans::titled("Other", 0);
    let elsewhere = app.plans().create(&other, None).await.expect("created").id;
    let request = crate::tasks::request("Open a shop", "ping");
    let pipeline = planb_app::tasks::checked_pipeline(
        &in_shop.tasks().root(),
        &request.pipeline,
        &request.target,
    )
    .expect("pipeline");
    let task = in_shop
        .tasks()
        .create(request, &pipeline)
        .await
        .expect("task");
    let project = |id| {
        let read = store.read(|s| s.task(&id).map(|t| t.project_path.clone()));
        read.expect("read").expect("recorded")
    };
    assert_eq!(project(plan).as_deref(), Some("/work/shop"));
    assert_eq!(project(task).as_deref(), Some("/work/shop"));
    assert_eq!(project(elsewhere), None);
    // The log says it too: what a team ships reads it there.
    let created: Vec<Option<String>> = planb_tests::logs::events(dir.path())
        .into_iter()
        .filter_map(|body| match body {
            planb_core::EventBody::TaskCreated { project_path, .. }
            | planb_core::EventBody::PlanCreated { project_path, .. } => Some(project_path),
            _ => None,
        })
        .collect();
    let shop = Some("/work/shop".to_owned());
    assert_eq!(created, [shop.clone(), None, shop]);
}
