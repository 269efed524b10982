//! Execution plans at the application layer, none of them run: found by
//! their id, a prefix of it or mcp-cli's id, listed, deleted, stopped,
//! created and their revisions seen, over a real store in a temporary data
//! root whose servers file is missing (no downstream server).

use std::path::Path;
use std::sync::Arc;

use planb_app::plans::ServersSource;
use planb_app::{App, ErrorCode};
use planb_core::TaskId;
use planb_core::exec_plan::ExecPlan;
use planb_projections::{DataRoot, Store, SystemEnvironment};
use planb_tests::fixtures::new_uuid;
use planb_tests::plans::step;
use serde_json::{Value, json};

/// An application over a store at `root`, with no servers configured.
pub(crate) fn open(root: &Path) -> (App, Arc<Store>) {
    let (store, _) = Store::open(DataRoot::new(root), Arc::new(SystemEnvironment)).expect("open");
    let store = Arc::new(store);
    let servers = ServersSource {
        file: root.join("servers.json"),
        project: None,
    };
    (App::ready(Arc::clone(&store), servers), store)
}

/// Records the plan `definition` as it is (checked against no server),
/// under the request key `key`.
pub(crate) async fn record(store: &Arc<Store>, definition: Value, key: Option<&str>) -> TaskId {
    let plan = ExecPlan::from_json(&definition).expect("a plan");
    let record_as = planb_app::plans::RecordAs {
        client_request_id: key.map(str::to_owned),
        project: None,
    };
    let recorded = planb_app::plans::record(store, plan, record_as).await;
    let (id, _, created) = recorded.expect("recorded");
    assert!(created, "recorded before");
    id
}

/// A plan titled `title` of `steps` independent echo steps.
pub(crate) fn titled(title: &str, steps: usize) -> Value {
    let steps: Vec<Value> = (1..=steps)
        .map(|i| {
            let n = i.to_string();
            step(&n, "alpha__echo", json!({"text": n}), &[], None)
        })
        .collect();
    json!({"title": title, "steps": steps})
}

/// An id no task or plan has.
pub(crate) fn stranger() -> TaskId {
    TaskId::from_uuid(new_uuid())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_answers_to_its_whole_id_and_to_a_prefix_written_as_a_list_shows_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (app, store) = open(dir.path());
    let id = record(&store, titled("Found", 1), None).await;
    let whole = id.to_string();
    let names = [
        whole.clone(),
        format!(" {whole} "),
        whole.to_uppercase(),
        whole[..8].to_owned(),
        whole[..8].to_uppercase(),
        format!("  {}…", &whole[..8]),
        format!("{}...", &whole[..13]),
    ];
    for name in names {
        let found = app.plans().find(&name).await;
        let found = found.unwrap_or_else(|e| panic!("{name:?}: {e}"));
        assert_eq!(found.id, id, "{name:?}");
        assert_eq!(found.plan.map(|p| p.title).as_deref(), Some("Found"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_plan_name_is_refused_rather_than_taken_as_the_start_of_every_id() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (app, store) = open(dir.path());
    record(&store, titled("Only one", 1), None).await;
    for name in ["", "   ", "…", "...", " … "] {
        let refused = app.plans().find(name).await.expect_err(name);
        assert_eq!(refused.code, ErrorCode::InvalidArgument, "{name:?}");
        assert_eq!(refused.message, "plan_id is required.", "{name:?}");
        let kept = app.plans().delete(name).await.expect_err(name);
        assert_eq!(kept.code, ErrorCode::InvalidArgument, "{name:?}");
    }
    assert_eq!(app.plans().list().await.expect("listed").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_two_plans_share_finds_and_deletes_neither_and_one_more_character_finds_each() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (app, store) = open(dir.path());
    let first = record(&store, titled("First", 1), None).await;
    let second = record(&store, titled("Second", 1), None).await;
    let (a, b) = (first.to_string(), second.to_string());
    let shared: String = a
        .chars()
        .zip(b.chars())
        .take_while(|(x, y)| x == y)
        .map(|(x, _)| x)
        .collect();
    assert!(!shared.is_empty(), "{a} and {b} share no prefix");
    let plans = app.plans();
    let refused = plans.find(&shared).await.expect_err("ambiguous");
    assert_eq!(refused.code, ErrorCode::InvalidArgument);
    assert_eq!(
        refused.message,
        format!("Plan id {shared:?} is the start of 2 plans' ids; give more of it")
    );
    let kept = plans.delete(&shared).await.expect_err("ambiguous");
    assert_eq!(kept.code, ErrorCode::InvalidArgument);
    assert_eq!(plans.list().await.expect("listed").len(), 2);
    let longer = shared.len() + 1;
    let found = plans.find(&a[..longer]).await.expect("the first");
    assert_eq!(found.id, first);
    let found = plans.find(&b[..longer]).await.expect("the second");
    assert_eq!(found.id, second);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exact_mcp_cli_id_wins_over_a_longer_one_it_begins() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (app, store) = open(dir.path());
    let chain = record(&store, titled("Chain", 1), Some("mcp-cli:peer-chain50")).await;
    let sleepy = record(
        &store,
        titled("Sleepy", 1),
        Some("mcp-cli:peer-chain50-sleep"),
    )
    .await;
    let plans = app.plans();
    for (name, expected) in [
        ("peer-chain50", chain),
        ("PEER-Chain50", chain),
        ("peer-chain50-", sleepy),
        ("peer-chain50-sleep", sleepy),
    ] {
        let found = plans.find(name).await;
        let found = found.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(found.id, expected, "{name}");
    }
    let both = plans.find("peer-chain").await.expect_err("two plans");
    assert_eq!(both.code, ErrorCode::InvalidArgument);
    assert!(
        both.message.contains("is the start of 2 plans' ids"),
        "{both}"
    );
    // With the exact one deleted, the prefix names the other alone.
    assert_eq!(plans.delete("peer-chain50").await.expect("deleted"), chain);
    let left = plans.find("peer-chain").await.expect("the one left");
    assert_eq!(left.id, sleepy);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planb_s_own_id_wins_over_an_imported_plan_whose_mcp_cli_id_is_the_same_text() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (app, store) = open(dir.path());
    let own = record(&store, titled("Own", 1), None).await;
    let key = format!("mcp-cli:{own}");
    let imported = record(&store, titled("Imported", 1), Some(&key)).await;
    let found = app.plans().find(&own.to_string()).await.expect("found");
    assert_eq!(found.id, own);
    let found = app.plans().find(&imported.to_string()).await;
    assert_eq!(found.expect("found by its own id").id, imported);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_or_prefix_no_plan_has_is_not_found_naming_what_was_given() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (app, store) = open(dir.path());
    record(&store, titled("Someone else's", 1), None).await;
    let nobody = stranger();
    let plans = app.plans();
    let cases = [
        (nobody.to_string(), format!("Plan not found: {nobody}")),
        ("zzz".to_owned(), "Plan not found: zzz".to_owned()),
        (" zzz… ".to_owned(), "Plan not found: zzz".to_owned()),
    ];
    for (name, said) in cases {
        let missing = plans.find(&name).await.expect_err(&name);
        assert_eq!(missing.code, ErrorCode::TaskNotFound, "{name:?}");
        assert_eq!(missing.message, said);
    }
    let missing = plans.get(nobody).await.expect_err("no such plan");
    assert_eq!(missing.code, ErrorCode::TaskNotFound);
    assert_eq!(missing.message, format!("Plan not found: {nobody}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_list_shows_each_plan_newest_first_with_its_title_and_steps_before_any_run() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (app, store) = open(dir.path());
    let older = record(&store, titled("Older", 3), None).await;
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let newer = record(&store, titled("Newer", 0), None).await;
    let listed = app.plans().list().await.expect("listed");
    let shown: Vec<(TaskId, &str, usize, &str, usize)> = listed
        .iter()
        .map(|p| (p.id, p.title.as_str(), p.steps, p.state, p.runs))
        .collect();
    assert_eq!(
        shown,
        [
            (newer, "Newer", 0, "not run", 0),
            (older, "Older", 3, "not run", 0)
        ]
    );
    assert!(listed[0].created_at > listed[1].created_at, "{listed:?}");
    let recorded = app.plans().get(older).await.expect("the plan");
    assert_eq!(listed[1].created_at, recorded.created_at);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_a_plan_that_is_not_running_is_refused_as_run_not_active() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (app, store) = open(dir.path());
    let id = record(&store, titled("Idle", 1), None).await;
    let idle = app.plans().stop(id).await.expect_err("no run");
    assert_eq!(idle.code, ErrorCode::RunNotActive, "{idle}");
    assert!(idle.message.contains("has no active run"), "{idle}");
    let nobody = app.plans().stop(stranger()).await.expect_err("no plan");
    assert_eq!(nobody.code, ErrorCode::TaskNotFound, "{nobody}");
    let task = app.plans().get(id).await.expect("the plan");
    assert!(task.runs.is_empty(), "a refused stop recorded a run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_plan_cannot_be_loaded_run_or_deleted_again() {
    use planb_app::execution::{Execution, RunAsk, Unreviewed};
    let dir = tempfile::tempdir().expect("temp dir");
    let (app, store) = open(dir.path());
    let id = record(&store, titled("Doomed", 2), None).await;
    let plans = app.plans();
    let before = plans.get(id).await.expect("the plan");
    assert_eq!(plans.load(&before).expect("read back").steps.len(), 2);
    assert_eq!(plans.delete(&id.to_string()).await.expect("deleted"), id);
    let after = store.read(|s| s.task(&id).cloned()).expect("read");
    let after = after.expect("its history is kept");
    let unread = plans.load(&after).expect_err("deleted");
    assert_eq!(unread.code, ErrorCode::TaskNotFound, "{unread}");
    let ask = RunAsk {
        dry_run: true,
        ..RunAsk::default()
    };
    match plans.execute(after, ask, false, &Unreviewed).await {
        Err(e) => assert_eq!(e.code, ErrorCode::TaskNotFound, "{e}"),
        Ok(Execution::DryRun { .. }) => panic!("a deleted plan was traced"),
        Ok(other) => panic!("a deleted plan: {other:?}"),
    }
    let again = plans.delete(&id.to_string()).await.expect_err("gone");
    assert_eq!(again.code, ErrorCode::TaskNotFound);
    let gone = plans.get(id).await.expect_err("gone");
    assert_eq!(gone.code, ErrorCode::TaskNotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_repeating_a_request_id_gives_the_plan_that_request_created() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (app, _) = open(dir.path());
    let plans = app.plans();
    let key = Some("request-1".to_owned());
    let first = plans.create(&titled("First", 0), key.clone()).await;
    let first = first.expect("created");
    assert_eq!(first.plan.title, "First");
    let again = plans.create(&titled("Second", 0), key).await;
    let again = again.expect("the same request");
    assert_eq!(again.id, first.id);
    assert_eq!(again.plan.title, "First", "the first request's plan");
    let other = plans.create(&titled("Other", 0), None).await;
    assert_ne!(other.expect("created").id, first.id);
    assert_eq!(plans.list().await.expect("listed").len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_id_of_a_deleted_plan_does_not_answer_with_the_deleted_plan() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (app, _) = open(dir.path());
    let plans = app.plans();
    let key = Some("request-1".to_owned());
    let first = plans.create(&titled("First", 0), key.clone()).await;
    let first = first.expect("created").id;
    plans.delete(&first.to_string()).await.expect("deleted");
    // As for a task: refused, or a new plan; never the deleted one.
    match plans.create(&titled("Again", 0), key).await {
        Err(refused) => assert_eq!(refused.code, ErrorCode::Conflict, "{refused}"),
        Ok(created) => {
            assert_ne!(created.id, first, "the deleted plan's id came back");
            plans.get(created.id).await.expect("the plan answered");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_of_what_is_not_a_plan_is_refused_naming_the_field_and_records_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (app, _) = open(dir.path());
    let cases = [
        (json!(["a", "list"]), "a plan must be a JSON object (got"),
        (json!({"steps": []}), "title: missing title"),
        (json!({"title": "No steps"}), "steps: missing steps"),
        (
            json!({"title": "T", "steps": [], "variables": 3}),
            "variables: must be an object",
        ),
        (
            json!({"title": "T", "steps": {}}),
            "steps: must be an array",
        ),
    ];
    for (value, said) in cases {
        let refused = app.plans().create(&value, None).await.expect_err(said);
        assert_eq!(refused.code, ErrorCode::InvalidArgument, "{value}");
        assert!(refused.message.contains(said), "{value}: {refused}");
    }
    assert!(app.plans().list().await.expect("listed").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_s_tool_with_no_server_configured_is_refused_saying_none_is() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (app, _) = open(dir.path());
    let plan = json!({"title": "Nowhere", "steps": [step("1", "echo", json!({}), &[], None)]});
    let refused = app.plans().create(&plan, None).await.expect_err("no tools");
    assert_eq!(refused.code, ErrorCode::InvalidArgument, "{refused}");
    assert!(
        refused.message.contains(
            "steps[0].tool: Unknown tool: echo. Available: (no tools: no downstream server is configured)"
        ),
        "{refused}"
    );
    assert!(app.plans().list().await.expect("listed").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_servers_file_refuses_create_and_run_but_not_a_dry_run() {
    use planb_app::execution::{Execution, RunAsk, Unreviewed};
    let dir = tempfile::tempdir().expect("temp dir");
    let (app, store) = open(dir.path());
    std::fs::write(dir.path().join("servers.json"), "{").expect("servers file");
    let refused = app.plans().create(&titled("T", 1), None).await;
    let refused = refused.expect_err("no usable servers");
    assert_eq!(refused.code, ErrorCode::InvalidConfiguration, "{refused}");
    assert!(
        refused.message.contains("servers.json: not JSON"),
        "{refused}"
    );
    let id = record(&store, titled("Recorded", 1), None).await;
    let task = app.plans().get(id).await.expect("the plan");
    let ran = app
        .plans()
        .execute(task.clone(), RunAsk::default(), false, &Unreviewed)
        .await;
    let ran = ran.expect_err("no usable servers");
    assert_eq!(ran.code, ErrorCode::InvalidConfiguration, "{ran}");
    let dry = RunAsk {
        dry_run: true,
        ..RunAsk::default()
    };
    let traced = app.plans().execute(task, dry, false, &Unreviewed).await;
    assert!(matches!(traced, Ok(Execution::DryRun { .. })), "{traced:?}");
    let after = app.plans().get(id).await.expect("the plan");
    assert!(after.runs.is_empty(), "a run was recorded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blank_goal_is_refused_before_any_model_is_asked() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (app, _) = open(dir.path());
    let told = std::sync::Mutex::new(0_usize);
    let tell = |_: &planb_app::plans::Attempt| *told.lock().expect("count") += 1;
    for goal in ["", "  \n\t "] {
        let refused = app
            .plans()
            .create_from_goal(goal, None, None, &tell)
            .await
            .expect_err("blank");
        assert_eq!(refused.code, ErrorCode::InvalidArgument, "{refused}");
        assert_eq!(refused.message, "Goal description is required.");
    }
    assert_eq!(*told.lock().expect("count"), 0);
    assert!(app.plans().list().await.expect("listed").is_empty());
}

/// A plan of `steps` steps recorded as revision `number` of `plan`'s run
/// `run`, which failed at `failed` with `error`.
fn revision(
    plan: TaskId,
    run: &str,
    number: u32,
    steps: usize,
    failed: &str,
    error: &str,
) -> Value {
    let mut definition = titled(&format!("Revision {number}"), steps);
    definition["revises"] = json!({"plan": plan.to_string(), "run": run,
        "number": number, "step": failed, "error": error});
    definition
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_revisions_of_a_plan_are_seen_in_their_order_and_no_other_plan_s() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (app, store) = open(dir.path());
    let original = record(&store, titled("Original", 2), None).await;
    let other = record(&store, titled("Other", 1), None).await;
    let run = "01890000-0000-7000-8000-000000000001";
    let second = record(&store, revision(original, run, 2, 3, "1", "again"), None).await;
    let first = record(&store, revision(original, run, 1, 1, "2", "boom"), None).await;
    record(&store, revision(other, run, 1, 1, "1", "elsewhere"), None).await;
    let task = app.plans().get(original).await.expect("the plan");
    let seen = app.plans().revisions(&task).await.expect("read");
    let shown: Vec<(u32, TaskId, usize, &str, &str, &str, &str)> = seen
        .iter()
        .map(|s| {
            let (run, step, error) = (s.run.as_str(), s.step.as_str(), s.error.as_str());
            (s.number, s.plan_id, s.steps, run, step, error, s.state)
        })
        .collect();
    assert_eq!(
        shown,
        [
            (1, first, 1, run, "2", "boom", "not run"),
            (2, second, 3, run, "1", "again", "not run"),
        ]
    );
    let unrevised = app.plans().get(first).await.expect("a revision");
    assert!(
        app.plans()
            .revisions(&unrevised)
            .await
            .expect("read")
            .is_empty()
    );
}
