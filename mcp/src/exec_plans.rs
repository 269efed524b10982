//! Execution plans' front doors (seed 003): what the `plan` command line and
//! the plan tools share. Finding a plan by id or unique prefix, creating
//! one (checked against the tools the downstream servers have), listing
//! and showing plans, and the servers file's place.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use planb_core::exec_plan::{ExecPlan, StepMark, render_dag};
use planb_core::{Command, Task, TaskId};
use planb_engine::plans::{Downstream, Servers};
use planb_projections::Store;
use serde_json::{Value, json};

/// The servers file: `--servers`, else `$PLANB_SERVERS`, else
/// `<root>/servers.json`.
pub(crate) fn servers_path(root: &Path, flag: Option<&Path>) -> PathBuf {
    if let Some(path) = flag {
        return path.to_owned();
    }
    if let Some(path) = std::env::var_os("PLANB_SERVERS").filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    root.join("servers.json")
}

/// The downstream servers of `path`, none started.
pub(crate) fn downstream(path: &Path) -> Result<Arc<Downstream>, String> {
    let servers = Servers::load(path)?;
    let start = std::env::var("PLANB_SERVER_START_SEC")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(30);
    Ok(Arc::new(Downstream::new(
        servers,
        std::time::Duration::from_secs(start),
    )))
}

/// The plans a person may name: not deleted, newest last.
fn plans(state: &planb_core::State) -> Vec<&Task> {
    let mut found: Vec<&Task> = state
        .tasks()
        .values()
        .filter(|t| t.plan.as_ref().is_some_and(|p| !p.deleted))
        .collect();
    found.sort_by_key(|t| (t.created_at, t.id));
    found
}

/// The plan named by `text`: its whole id or a prefix only it has.
pub(crate) fn find(store: &Store, text: &str) -> Result<Task, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("plan_id is required.".into());
    }
    let matches: Vec<Task> = store
        .read(|s| {
            plans(s)
                .into_iter()
                .filter(|t| t.id.to_string().starts_with(&text.to_ascii_lowercase()))
                .cloned()
                .collect()
        })
        .map_err(|e| e.to_string())?;
    match matches.as_slice() {
        // A run whose process was killed is ended `worker_error` before the
        // plan is shown or run, as for tasks.
        [one] => match store.end_dead_run(one.id).map_err(|e| e.to_string())? {
            None => Ok(one.clone()),
            Some(_) => store
                .read(|s| s.task(&one.id).cloned())
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("Plan not found: {text}")),
        },
        [] => Err(format!("Plan not found: {text}")),
        many => Err(format!(
            "Plan id {text:?} is the start of {} plans' ids; give more of it",
            many.len()
        )),
    }
}

/// Checks `value` as a plan and every tool against the servers, then
/// records it. Returns the new plan's id and the checked plan.
pub(crate) async fn create(
    store: &Arc<Store>,
    downstream: &Downstream,
    value: &Value,
    client_request_id: Option<String>,
) -> Result<(TaskId, ExecPlan), String> {
    let plan = ExecPlan::from_json(value).map_err(|e| e.to_string())?;
    if !plan.steps.is_empty() {
        let tools = downstream.tools().await.map_err(|e| e.message)?;
        plan.check_tools(|name| Downstream::resolve(&tools, name).map(|_| ()))
            .map_err(|e| e.to_string())?;
    }
    let task = TaskId::from_uuid(store.env().event_id());
    let command = Command::CreatePlan {
        task,
        title: plan.title.clone(),
        definition: plan.to_json().to_string(),
        client_request_id: client_request_id.clone(),
    };
    let store_now = Arc::clone(store);
    let done = tokio::task::spawn_blocking(move || store_now.execute(command))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    if done.is_empty()
        && let Some(key) = client_request_id
    {
        // The same request again: the plan it created.
        let existing = store
            .read(|s| s.task_by_request(&key).map(|t| t.id))
            .map_err(|e| e.to_string())?;
        if let Some(existing) = existing {
            return Ok((existing, plan));
        }
    }
    Ok((task, plan))
}

/// Each step's mark from the plan's latest run.
pub(crate) fn marks(task: &Task, plan: &ExecPlan) -> Vec<StepMark> {
    let Some(run) = task.runs.last() else {
        return vec![StepMark::Pending; plan.steps.len()];
    };
    plan.steps
        .iter()
        .map(|step| {
            if run.running.contains(&step.index) {
                StepMark::Running
            } else if run.succeeded.contains(&step.index) {
                StepMark::Completed
            } else if run.attempts.contains_key(&step.index) {
                StepMark::Failed
            } else if run.resumed_from.is_some() && task.successes.contains_key(&step.index) {
                // A resume reuses what succeeded before without a new start.
                StepMark::Completed
            } else {
                StepMark::Pending
            }
        })
        .collect()
}

/// The DAG of `task`'s plan with its latest run's marks.
pub(crate) fn rendered(task: &Task, plan: &ExecPlan) -> String {
    let marks = marks(task, plan);
    render_dag(plan, |at| marks[at])
}

/// One row of `plan list`.
pub(crate) fn summary_json(task: &Task) -> Value {
    let steps = task
        .plan
        .as_ref()
        .and_then(|p| serde_json::from_str::<Value>(&p.definition).ok())
        .and_then(|v| v.get("steps").and_then(Value::as_array).map(Vec::len))
        .unwrap_or(0);
    json!({
        "plan_id": task.id.to_string(),
        "title": task.plan.as_ref().map(|p| p.title.clone()).unwrap_or_default(),
        "steps": steps,
        "created_at": task.created_at.to_iso8601(),
        "state": task.runs.last().map_or("not run", |r| r.state.as_str()),
        "runs": task.runs.len(),
    })
}

/// Every plan, newest first, as rows.
pub(crate) fn list(store: &Store) -> Result<Vec<Value>, String> {
    store.reap_dead_runs().map_err(|e| e.to_string())?;
    store
        .read(|s| plans(s).into_iter().rev().map(summary_json).collect())
        .map_err(|e| e.to_string())
}
