//! Named plans changed by several `planb-mcp` processes at once, and by
//! processes killed mid-change: no acknowledged edit is ever
//! undone, a file that is merely behind the log is never taken for a hand
//! edit, and no temp file is left behind.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::support::{Server, UrlAnswer, call, fold_log, start_with, text_of};
use serde_json::{Value, json};

const PLAN: &str = "shared";
const PROCESSES: usize = 3;
const EDITS_PER_PROCESS: usize = 30;
/// Calls each process has in flight at once.
const IN_FLIGHT: usize = 6;

async fn start_server(dir: &Path) -> Server {
    start_with(dir, UrlAnswer::NotSupported, None, &[], &[]).await
}

fn item(process: usize, index: usize) -> String {
    format!("- step p{process}-{index}:")
}

/// One line per edit any process will make, each edited by exactly one call.
fn initial_plan(processes: usize, edits: usize) -> String {
    let mut plan = String::from("# Shared plan\n");
    for process in 0..processes {
        for index in 0..edits {
            plan.push_str(&format!("{} todo\n", item(process, index)));
        }
    }
    plan
}

/// The shared plan as the servers name it: in `<dir>/docs/plans`.
fn plan_key(dir: &Path) -> planb_core::PlanKey {
    let plans = dir.canonicalize().expect("dir").join("docs/plans");
    planb_core::PlanKey::new(plans.display().to_string(), PLAN.parse().expect("name"))
}

fn plan_path(dir: &Path) -> std::path::PathBuf {
    dir.join("docs/plans").join(format!("{PLAN}-plan.md"))
}

fn temp_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir.join("docs/plans"))
        .expect("plans dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".tmp"))
        .collect()
}

/// Marks item `index` of `process` done. A call the server did not answer
/// (it was killed) is an error too, never a panic, so the caller keeps the
/// edits acknowledged before it.
async fn edit(server: &Server, process: usize, index: usize) -> Result<(), String> {
    let arguments = json!({
        "planName": PLAN,
        "oldString": format!("{} todo", item(process, index)),
        "newString": format!("{} done", item(process, index)),
    });
    let Value::Object(arguments) = arguments else {
        unreachable!("an object literal")
    };
    let result = server
        .client
        .call_tool(rmcp::model::CallToolRequestParams::new("edit_plan").with_arguments(arguments))
        .await
        .map_err(|error| format!("no answer: {error}"))?;
    if result.is_error == Some(true) {
        return Err(text_of(&result));
    }
    let replacements = result
        .structured_content
        .as_ref()
        .and_then(|v| v.get("replacementsMade"))
        .and_then(Value::as_u64);
    assert_eq!(replacements, Some(1), "{}", text_of(&result));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_edit_plan_from_three_processes_undoes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut servers = Vec::new();
    for _ in 0..PROCESSES {
        servers.push(Arc::new(start_server(dir.path()).await));
    }
    let written = call(
        &servers[0],
        "write_plan",
        json!({"planName": PLAN, "content": initial_plan(PROCESSES, EDITS_PER_PROCESS)}),
    )
    .await;
    assert_eq!(written.is_error, Some(false), "{}", text_of(&written));

    let mut tasks = Vec::new();
    for (process, server) in servers.iter().enumerate() {
        for lane in 0..IN_FLIGHT {
            let server = Arc::clone(server);
            tasks.push(tokio::spawn(async move {
                for index in (lane..EDITS_PER_PROCESS).step_by(IN_FLIGHT) {
                    edit(&server, process, index)
                        .await
                        .unwrap_or_else(|error| panic!("edit p{process}-{index}: {error}"));
                }
            }));
        }
    }
    for task in tasks {
        task.await.expect("edits");
    }

    let (state, kinds) = fold_log(dir.path());
    assert!(
        !kinds.contains(&"named_plan_changed_outside"),
        "nobody edited the file by hand, yet the log records a hand edit: {kinds:?}"
    );
    let content = &state
        .named_plan(&plan_key(dir.path()))
        .expect("plan")
        .content;
    for process in 0..PROCESSES {
        for index in 0..EDITS_PER_PROCESS {
            let line = format!("{} done", item(process, index));
            assert!(content.contains(&line), "acknowledged edit lost: {line}");
        }
    }
    assert_eq!(
        &std::fs::read_to_string(plan_path(dir.path())).expect("file"),
        content,
        "the file shows the last recorded version"
    );
    assert_eq!(temp_files(dir.path()), Vec::<String>::new());
    for server in servers {
        if let Ok(server) = Arc::try_unwrap(server) {
            server.client.cancel().await.expect("shutdown");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_edit_plan_leaves_no_spurious_hand_edit_or_temp_file() {
    const ROUNDS: usize = 8;
    const EDITS_PER_ROUND: usize = 12;
    let dir = tempfile::tempdir().expect("tempdir");
    let keeper = start_server(dir.path()).await;
    let written = call(
        &keeper,
        "write_plan",
        json!({"planName": PLAN, "content": initial_plan(ROUNDS, EDITS_PER_ROUND)}),
    )
    .await;
    assert_eq!(written.is_error, Some(false), "{}", text_of(&written));

    let mut acknowledged = BTreeSet::new();
    for round in 0..ROUNDS {
        let victim = Arc::new(start_server(dir.path()).await);
        let answered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for lane in 0..3 {
            let victim = Arc::clone(&victim);
            let answered = Arc::clone(&answered);
            tasks.push(tokio::spawn(async move {
                let mut done = Vec::new();
                for index in (lane..EDITS_PER_ROUND).step_by(3) {
                    match edit(&victim, round, index).await {
                        Ok(()) => done.push(index),
                        Err(_) => break,
                    }
                    answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
                done
            }));
        }
        // Once an edit is through, let a few more start, then kill the
        // server wherever it is.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while answered.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            assert!(std::time::Instant::now() < deadline, "no edit answered");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tokio::time::sleep(Duration::from_millis(5 * round as u64)).await;
        victim.kill_9();
        for task in tasks {
            // Only calls that returned are acknowledged.
            let done = task.await.expect("a lane ends without panicking");
            acknowledged.extend(done.into_iter().map(|index| (round, index)));
        }
        // Another process keeps working on the same plan.
        edit(&keeper, round, EDITS_PER_ROUND - 1).await.ok();
    }

    assert!(
        acknowledged.len() >= ROUNDS,
        "every round had an edit answered before the kill: {acknowledged:?}"
    );
    let (state, kinds) = fold_log(dir.path());
    assert!(
        !kinds.contains(&"named_plan_changed_outside"),
        "a killed writer made a later one see a hand edit: {kinds:?}"
    );
    let content = &state
        .named_plan(&plan_key(dir.path()))
        .expect("plan")
        .content;
    for (round, index) in &acknowledged {
        let line = format!("{} done", item(*round, *index));
        assert!(content.contains(&line), "acknowledged edit lost: {line}");
    }
    // One more change by a live process cleans up whatever a kill left.
    let written = call(
        &keeper,
        "edit_plan",
        json!({"planName": PLAN, "oldString": "# Shared plan", "newString": "# Shared plan (final)"}),
    )
    .await;
    assert_eq!(written.is_error, Some(false), "{}", text_of(&written));
    assert_eq!(temp_files(dir.path()), Vec::<String>::new());
    let (state, _) = fold_log(dir.path());
    assert_eq!(
        std::fs::read_to_string(plan_path(dir.path())).expect("file"),
        state
            .named_plan(&plan_key(dir.path()))
            .expect("plan")
            .content
    );
    keeper.client.cancel().await.expect("shutdown");
}

/// A temp file a killed writer left beside a plan's file is removed when
/// the data root is next opened, with no plan changed; one whose writer
/// still runs is left to it.
#[tokio::test]
async fn a_dead_writers_temp_file_is_removed_when_the_root_is_opened() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = start_server(dir.path()).await;
    let written = call(
        &server,
        "write_plan",
        json!({"planName": PLAN, "content": "# Plan\n"}),
    )
    .await;
    assert_eq!(written.is_error, Some(false), "{}", text_of(&written));
    server.client.cancel().await.expect("shutdown");
    let mut gone = std::process::Command::new("true").spawn().expect("spawn");
    let dead = gone.id();
    gone.wait().expect("wait");
    let plans = dir.path().join("docs/plans");
    let stale = plans.join(format!(".{PLAN}-plan.md.{dead}.0.tmp"));
    let live = plans.join(format!(".{PLAN}-plan.md.{}.0.tmp", std::process::id()));
    std::fs::write(&stale, "half a plan").expect("stale temp file");
    std::fs::write(&live, "a plan being written").expect("live temp file");
    let output = crate::support::planb(dir.path(), &["plan", "list"]);
    assert!(
        output.status.success(),
        "{}",
        crate::support::all_output(&output)
    );
    assert!(!stale.exists(), "left: {:?}", temp_files(dir.path()));
    assert!(live.exists(), "a running writer's temp file was removed");
}

#[tokio::test]
async fn a_file_behind_the_log_is_brought_up_to_date_not_recorded_as_a_hand_edit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = start_server(dir.path()).await;
    let v1 = "# Plan\n- one\n";
    call(
        &server,
        "write_plan",
        json!({"planName": PLAN, "content": v1}),
    )
    .await;
    call(
        &server,
        "edit_plan",
        json!({"planName": PLAN, "oldString": "- one", "newString": "- one\n- two"}),
    )
    .await;
    // What a writer killed between its append and its rename leaves: the
    // file still shows an older version, which planb's record of what it
    // last wrote there still names, and a temp file lies beside it.
    std::fs::write(plan_path(dir.path()), v1).expect("roll the file back");
    let hex = |bytes: &[u8]| planb_core::state::ContentHash::of_bytes(bytes).to_hex();
    let path = plan_path(dir.path()).canonicalize().expect("plan file");
    let record = dir
        .path()
        .join("plans.written")
        .join(hex(path.as_os_str().as_encoded_bytes()));
    std::fs::write(&record, hex(v1.as_bytes())).expect("roll the record back");
    let stale = dir
        .path()
        .join("docs/plans")
        .join(format!(".{PLAN}-plan.md.4242.7.tmp"));
    std::fs::write(&stale, "half a plan").expect("stale temp file");
    let edited = call(
        &server,
        "edit_plan",
        json!({"planName": PLAN, "oldString": "- two", "newString": "- two\n- three"}),
    )
    .await;
    assert_eq!(edited.is_error, Some(false), "{}", text_of(&edited));
    let (state, kinds) = fold_log(dir.path());
    assert_eq!(
        kinds,
        [
            "named_plan_written",
            "named_plan_edited",
            "named_plan_edited"
        ]
    );
    let content = &state
        .named_plan(&plan_key(dir.path()))
        .expect("plan")
        .content;
    assert_eq!(content, "# Plan\n- one\n- two\n- three\n");
    assert_eq!(
        &std::fs::read_to_string(plan_path(dir.path())).expect("file"),
        content
    );
    assert!(!stale.exists(), "the stale temp file was removed");
    server.client.cancel().await.expect("shutdown");
}
