//! Execution plans' front doors: what the `plan` command line and
//! the plan tools share. Finding a plan by id or unique prefix, creating
//! one (checked against the tools the downstream servers have), listing
//! and showing plans, and the servers file's place.

pub mod approval;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use planb_core::exec_plan::{ExecPlan, StepMark, render_dag};
use planb_core::{Command, Task, TaskId};
use planb_engine::backend::sampling::Sampler;
use planb_engine::backend::{Backend, BackendError};
use planb_engine::plans::{Downstream, ServerSpec, Servers, generate};
use planb_projections::{Store, StoreError};
use serde_json::Value;

use crate::error::{Error, ErrorCode};

pub use planb_engine::plans::generate::{ATTEMPTS, Attempt, GOAL_BYTES_MAX, Tell};
pub use planb_engine::plans::run::ProgressFn;
pub use planb_engine::plans::{Guards, PlanOutcome, Progress, RunOptions, StepReport};

/// Why a plan could not run, with its code.
pub(crate) fn run_error(error: planb_engine::plans::PlanRunError) -> Error {
    use planb_engine::plans::PlanRunError;
    let code = match &error {
        PlanRunError::NotFound(_) => ErrorCode::TaskNotFound,
        PlanRunError::Invalid(_) => ErrorCode::InvalidArgument,
        PlanRunError::StartedMeanwhile { .. } => ErrorCode::RunAlreadyActive,
        PlanRunError::Worker(worker) => ErrorCode::of_run(worker),
        _ => ErrorCode::InternalError,
    };
    Error::new(code, error.to_string())
}

/// The plan `task` holds, read back (`TASK_NOT_FOUND` once deleted).
pub fn load(task: &Task) -> Result<Arc<ExecPlan>, Error> {
    planb_engine::plans::load(task).map_err(run_error)
}

/// The servers file: `--servers`, else `$PLANB_SERVERS`, else
/// `<root>/servers.json`.
pub fn servers_path(root: &Path, flag: Option<&Path>) -> PathBuf {
    if let Some(path) = flag {
        return path.to_owned();
    }
    if let Some(path) = std::env::var_os("PLANB_SERVERS").filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    root.join("servers.json")
}

/// Where the downstream servers are configured: the servers file, and the
/// project's `.mcp.json` when asked for (`--project-servers`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServersSource {
    /// The servers file (missing: no servers).
    pub file: PathBuf,
    /// The project's `.mcp.json`, when its servers are wanted too.
    pub project: Option<PathBuf>,
}

/// Each servers file's length and modification time (`None`: missing).
type Stamp = Vec<Option<(u64, std::time::SystemTime)>>;

/// A servers file or a setting that cannot be used.
fn unusable(e: impl std::fmt::Display) -> Error {
    Error::new(ErrorCode::InvalidConfiguration, e.to_string())
}

fn not_found(text: &str) -> Error {
    Error::new(ErrorCode::TaskNotFound, format!("Plan not found: {text}"))
}

/// Whether a `.mcp.json` entry is planb itself (which must not call itself).
fn is_planb(spec: &ServerSpec) -> bool {
    let ServerSpec::Stdio { command, args, .. } = spec else {
        return false;
    };
    let named = |word: &str| {
        Path::new(word)
            .file_name()
            .is_some_and(|name| name.to_string_lossy().starts_with("planb-mcp"))
    };
    named(command) || args.iter().any(|a| named(a))
}

impl ServersSource {
    /// The servers of both files: the servers file's entry wins a name both
    /// have; planb's own entry in `.mcp.json` is left out.
    pub fn load(&self) -> Result<Servers, Error> {
        let mut servers = Servers::load(&self.file).map_err(unusable)?;
        if let Some(project) = &self.project {
            for (name, spec) in Servers::load(project).map_err(unusable)?.servers {
                if is_planb(&spec) || servers.servers.contains_key(&name) {
                    continue;
                }
                servers.servers.insert(name, spec);
            }
        }
        Ok(servers)
    }

    /// What changes when either file changes (length and modification time).
    fn stamp(&self) -> Stamp {
        std::iter::once(&self.file)
            .chain(self.project.as_ref())
            .map(|path| {
                std::fs::metadata(path)
                    .ok()
                    .map(|m| (m.len(), m.modified().unwrap_or(std::time::UNIX_EPOCH)))
            })
            .collect()
    }
}

/// The downstream servers of `source`, none started; each may take
/// `PLANB_SERVER_START_SEC` (default 30) to start and list its tools.
pub fn downstream(source: &ServersSource) -> Result<Arc<Downstream>, Error> {
    configured(source).map(Arc::new)
}

fn configured(source: &ServersSource) -> Result<Downstream, Error> {
    let start = crate::settings::server_start()
        .map_err(unusable)?
        .unwrap_or(std::time::Duration::from_secs(30));
    Ok(Downstream::new(source.load()?, start))
}

/// A server process's downstream connections, made on the engine thread,
/// kept between tool calls and replaced (new connections; runs under way keep theirs) when a servers
/// file changes.
#[derive(Debug, Default)]
pub struct DownstreamCache {
    current: std::sync::Mutex<Option<(Stamp, Arc<Downstream>)>>,
}

impl DownstreamCache {
    /// The servers of `source` as they are configured now.
    pub fn get(&self, source: &ServersSource) -> Result<Arc<Downstream>, Error> {
        let stamp = source.stamp();
        let mut current = self
            .current
            .lock()
            .map_err(|_| Error::internal("the downstream servers' cache is poisoned"))?;
        if let Some((seen, downstream)) = current.as_ref()
            && *seen == stamp
        {
            return Ok(Arc::clone(downstream));
        }
        // Connected on the engine thread, where this process runs plans.
        let fresh = configured(source)?;
        let fresh = Arc::new(match planb_engine::runtime::handle() {
            Some(home) => fresh.homed(home),
            None => fresh,
        });
        *current = Some((stamp, Arc::clone(&fresh)));
        Ok(fresh)
    }
}

/// The plans a person may name: not deleted, newest last.
fn plans(state: &planb_core::State) -> Vec<&Task> {
    let mut found: Vec<&Task> = state.exec_plans().collect();
    found.sort_by_key(|t| (t.created_at, t.id));
    found
}

/// What the request key of a plan imported from mcp-cli begins with; the
/// rest is mcp-cli's id of it.
pub const IMPORTED_KEY_PREFIX: &str = "mcp-cli:";

/// The plans imported from mcp-cli whose mcp-cli id starts with `prefix`
/// (lowercase), and whether one's id is all of it: then only that one.
fn imported_as(store: &Store, prefix: &str) -> Result<(bool, Vec<Task>), Error> {
    let found: Vec<(bool, Task)> = store
        .read(|s| {
            plans(s)
                .into_iter()
                .filter_map(|t| {
                    let id = t
                        .client_request_id
                        .as_deref()?
                        .strip_prefix(IMPORTED_KEY_PREFIX)?
                        .to_ascii_lowercase();
                    id.starts_with(prefix).then(|| (id == prefix, t.clone()))
                })
                .collect()
        })
        .map_err(Error::internal)?;
    let exact = found.iter().any(|(whole, _)| *whole);
    let kept = found
        .into_iter()
        .filter(|(whole, _)| *whole || !exact)
        .map(|(_, task)| task)
        .collect();
    Ok((exact, kept))
}

/// The plan named by `text`: its whole id or a prefix only it has (or,
/// imported from mcp-cli, mcp-cli's id or a prefix of it).
pub(crate) fn find(store: &Store, text: &str) -> Result<Task, Error> {
    // An id as `plan list` shows it ("1a2b3c4d…", "1a2b3c4d...") works too.
    let text = text
        .trim()
        .trim_end_matches('…')
        .trim_end_matches("...")
        .trim();
    if text.is_empty() {
        return Err(Error::new(
            ErrorCode::InvalidArgument,
            "plan_id is required.",
        ));
    }
    // A whole id is looked up; only a prefix is matched against every plan.
    let whole = TaskId::parse(text).ok();
    let prefix = text.to_ascii_lowercase();
    let matches: Vec<Task> = store
        .read(|s| match whole {
            Some(id) => s.exec_plan(&id).into_iter().cloned().collect(),
            None => plans(s)
                .into_iter()
                .filter(|t| t.id.to_string().starts_with(&prefix))
                .cloned()
                .collect(),
        })
        .map_err(Error::internal)?;
    // A plan imported from mcp-cli also answers to mcp-cli's id (or a
    // prefix of it), which it was recorded under. A name given whole wins
    // over every prefix: planb's id, then mcp-cli's, then prefixes.
    let matches = match whole {
        Some(_) if !matches.is_empty() => matches,
        _ => match imported_as(store, &prefix)? {
            (true, exact) => exact,
            (false, imported) if matches.is_empty() => imported,
            (false, _) => matches,
        },
    };
    let count = matches.len();
    let mut matches = matches.into_iter();
    match (matches.next(), count) {
        // A run whose process was killed is ended `worker_error` before the
        // plan is shown or run, as for tasks.
        (Some(one), 1) => match store.end_dead_run(one.id).map_err(Error::internal)? {
            None => Ok(one),
            Some(_) => store
                .read(|s| s.task(&one.id).cloned())
                .map_err(Error::internal)?
                .ok_or_else(|| not_found(text)),
        },
        (None, _) => Err(not_found(text)),
        (Some(_), many) => Err(Error::new(
            ErrorCode::InvalidArgument,
            format!("Plan id {text:?} is the start of {many} plans' ids; give more of it"),
        )),
    }
}

/// Deletes the plan named by `text` (as [`find`] finds it); its history
/// stays in the log. Returns the deleted plan's id.
pub(crate) fn delete(store: &Store, text: &str) -> Result<TaskId, Error> {
    let task = find(store, text)?;
    store
        .execute(Command::DeletePlan { task: task.id })
        .map_err(Error::internal)?;
    Ok(task.id)
}

/// What asking a plan's run to stop did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// The stop is recorded; the run ends once its calls in flight are
    /// cancelled.
    Requested,
    /// A stop had been asked for already.
    AlreadyAsked,
}

/// Asks the run of the plan `task` to stop; refused (`RUN_NOT_ACTIVE`)
/// when none runs.
pub(crate) fn stop(store: &Store, task: TaskId) -> Result<Stop, StoreError> {
    let events = store.execute(Command::RequestStop { task })?;
    Ok(if events.is_empty() {
        Stop::AlreadyAsked
    } else {
        Stop::Requested
    })
}

/// How a plan is recorded: the caller's idempotency key, and the project
/// it is made for.
#[derive(Debug, Clone, Default)]
pub struct RecordAs {
    /// The caller's idempotency key.
    pub client_request_id: Option<String>,
    /// The project the plan is made for.
    pub project: Option<String>,
}

/// Checks `value` as a plan and every tool against the servers, then
/// records it. Returns the new plan's id and the checked plan.
pub(crate) async fn create(
    store: &Arc<Store>,
    downstream: &Downstream,
    value: &Value,
    record_as: RecordAs,
) -> Result<Created, Error> {
    let plan = ExecPlan::from_json(value).map_err(Error::invalid)?;
    if plan.revises.is_some() {
        return Err(Error::new(
            ErrorCode::InvalidArgument,
            "revises: set only by planb, on the revised plans it makes when it re-plans a failed run",
        ));
    }
    let mut silent = Vec::new();
    if !plan.steps.is_empty() {
        let found = downstream
            .tools_for(plan.steps.iter().map(|s| s.tool.as_str()))
            .await
            .map_err(|e| Error::internal(e.message))?;
        plan.check_tools(|name| Downstream::resolve(&found.tools, name).map(|_| ()))
            .map_err(Error::invalid)?;
        silent = found.silent;
    }
    let (id, plan, _) = record(store, plan, record_as).await?;
    Ok(Created { id, plan, silent })
}

/// A plan just recorded.
#[derive(Debug)]
pub struct Created {
    pub id: TaskId,
    pub plan: ExecPlan,
    /// Servers not waited for: still starting when every tool name of the
    /// plan had resolved without them.
    pub silent: Vec<String>,
}

/// Asks the configured model (`PLANB_MODEL`), else the client's through
/// `sampler` (MCP sampling), for a plan for `goal` over the servers' tools,
/// checks it as a written plan is checked, and records it; the goal becomes
/// the description when the model gave none.
pub(crate) async fn create_from_goal(
    store: &Arc<Store>,
    downstream: &Downstream,
    servers: &ServersSource,
    goal: &str,
    record_as: RecordAs,
    sampler: Option<Sampler>,
    tell: generate::Tell<'_>,
) -> Result<Created, Error> {
    if goal.trim().is_empty() {
        return Err(Error::new(
            ErrorCode::InvalidArgument,
            "Goal description is required.",
        ));
    }
    let configured = Backend::configured(Some("planner"), &|n| std::env::var(n).ok());
    let backend = match (configured, sampler) {
        (Ok(backend), _) => backend,
        (Err(BackendError::NotConfigured), Some(sampler)) => Backend::Sampling(sampler),
        (Err(e), _) => return Err(Error::new(ErrorCode::ModelNotConfigured, e.to_string())),
    };
    let tools = tools_to_plan_with(downstream, servers).await?;
    // As long as a model step of a task may take.
    let timeout = crate::settings::step_timeout()
        .map_err(unusable)?
        .unwrap_or(std::time::Duration::from_secs(600));
    let mut plan = generate::generate(&backend, goal, &tools, timeout, tell)
        .await
        .map_err(|e| Error::new(ErrorCode::ModelError, e.to_string()))?;
    if plan
        .description
        .as_deref()
        .is_none_or(|d| d.trim().is_empty())
    {
        plan.description = Some(
            goal.trim()
                .chars()
                .take(planb_core::exec_plan::PLAN_DESCRIPTION_CHARS_MAX)
                .collect(),
        );
    }
    let (id, plan, _) = record(store, plan, record_as).await?;
    Ok(Created {
        id,
        plan,
        silent: Vec::new(),
    })
}

/// The tools a model plans with: those of the servers that start; those
/// that do not are named when none does.
async fn tools_to_plan_with(
    downstream: &Downstream,
    servers: &ServersSource,
) -> Result<Vec<planb_engine::plans::ToolInfo>, Error> {
    let (tools, failed) = downstream.available_tools().await;
    for error in &failed {
        tracing::warn!("planning without a server: {error}");
    }
    if !tools.is_empty() {
        return Ok(tools);
    }
    let why = failed
        .iter()
        .map(|e| e.message.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    Err(Error::internal(format!(
        "Failed to generate a valid plan: no downstream server offers a tool{}",
        if why.is_empty() {
            format!(
                " (none is configured: add servers to {})",
                servers.file.display()
            )
        } else {
            format!(":\n{why}")
        }
    )))
}

/// Records `plan`; with `client_request_id` used before (by this process or
/// another), the plan that request created instead. The flag says whether
/// this call created it.
pub async fn record(
    store: &Arc<Store>,
    plan: ExecPlan,
    record_as: RecordAs,
) -> Result<(TaskId, ExecPlan, bool), Error> {
    let RecordAs {
        client_request_id,
        project,
    } = record_as;
    let task = TaskId::from_uuid(store.env().event_id());
    let command = Command::CreatePlan {
        task,
        definition: plan.to_json().to_string(),
        client_request_id: client_request_id.clone(),
        project_path: project,
    };
    let store_now = Arc::clone(store);
    // A refusal (a key used for a deleted plan) keeps its code.
    let done = planb_engine::host::blocking(move || store_now.execute(command))
        .await
        .map_err(Error::from)?;
    if done.is_empty()
        && let Some(key) = client_request_id
    {
        // The same request again: the plan it created.
        let existing = store
            .read(|s| s.task_by_request(&key).map(|t| t.id))
            .map_err(Error::internal)?;
        if let Some(existing) = existing {
            let found = store
                .read(|s| s.task(&existing).cloned())
                .map_err(Error::internal)?;
            let plan = found
                .as_ref()
                .map(planb_engine::plans::load)
                .transpose()
                .map_err(Error::internal)?
                .map_or(plan, |found| ExecPlan::clone(&found));
            return Ok((existing, plan, false));
        }
    }
    Ok((task, plan, true))
}

/// Each step's mark from the plan's latest run.
pub fn marks(task: &Task, plan: &ExecPlan) -> Vec<StepMark> {
    let Some(run) = task.runs.last() else {
        return vec![StepMark::Pending; plan.steps.len()];
    };
    // What this run did and what it reused from the runs it resumed.
    let reusable = task.resumable_successes(Some(run.id));
    plan.steps
        .iter()
        .map(|step| {
            if run.running.contains(&step.index) {
                StepMark::Running
            } else if run.succeeded.contains(&step.index) {
                StepMark::Completed
            } else if run.attempts.contains_key(&step.index) {
                StepMark::Failed
            } else if reusable.contains_key(&step.index) {
                // A resume reuses what succeeded before without a new start.
                StepMark::Completed
            } else {
                StepMark::Pending
            }
        })
        .collect()
}

/// The DAG of `task`'s plan with its latest run's marks.
pub fn rendered(task: &Task, plan: &ExecPlan) -> String {
    let marks = marks(task, plan);
    render_dag(plan, |at| marks[at])
}

/// One plan as a list shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanSummary {
    /// The plan.
    pub id: TaskId,
    /// Its title.
    pub title: String,
    /// How many steps it has.
    pub steps: usize,
    /// When it was created.
    pub created_at: planb_core::Timestamp,
    /// Its latest run's state, `not run` before any.
    pub state: &'static str,
    /// How many runs it has had.
    pub runs: usize,
}

impl PlanSummary {
    fn of(task: &Task) -> PlanSummary {
        let steps = task
            .plan
            .as_ref()
            .and_then(|p| serde_json::from_str::<Value>(&p.definition).ok())
            .and_then(|v| v.get("steps").and_then(Value::as_array).map(Vec::len))
            .unwrap_or(0);
        PlanSummary {
            id: task.id,
            title: task
                .plan
                .as_ref()
                .map(|p| p.title.clone())
                .unwrap_or_default(),
            steps,
            created_at: task.created_at,
            state: task.runs.last().map_or("not run", |r| r.state.as_str()),
            runs: task.runs.len(),
        }
    }
}

/// Every plan, newest first (a run whose process died ended first).
pub(crate) fn list(store: &Store) -> Result<Vec<PlanSummary>, Error> {
    store.reap_dead_runs().map_err(Error::internal)?;
    store
        .read(|s| plans(s).into_iter().rev().map(PlanSummary::of).collect())
        .map_err(Error::internal)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_project_servers_join_the_servers_file_without_planb_itself() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("servers.json");
        let project = dir.path().join(".mcp.json");
        std::fs::write(
            &file,
            json!({"mcpServers": {"fs": {"command": "fs-server"}}}).to_string(),
        )
        .expect("write");
        std::fs::write(
            &project,
            json!({"mcpServers": {
                "planb": {"type": "stdio", "command": "/usr/local/bin/planb-mcp"},
                "planb-dev": {"command": "cargo", "args": ["run", "--bin", "planb-mcp"]},
                "fs": {"command": "other-fs"},
                "git": {"type": "stdio", "command": "git-mcp", "args": ["--repo", "."]},
            }})
            .to_string(),
        )
        .expect("write");
        let only_file = ServersSource {
            file: file.clone(),
            project: None,
        };
        assert_eq!(only_file.load().expect("load").servers.len(), 1);
        let both = ServersSource {
            file,
            project: Some(project),
        };
        let servers = both.load().expect("load").servers;
        let names: Vec<&str> = servers.keys().map(String::as_str).collect();
        assert_eq!(names, ["fs", "git"]);
        assert!(matches!(
            &servers["fs"],
            ServerSpec::Stdio { command, .. } if command == "fs-server"
        ));
    }

    #[test]
    fn a_changed_servers_file_gives_new_connections() {
        let dir = tempfile::tempdir().expect("tempdir");
        let source = ServersSource {
            file: dir.path().join("servers.json"),
            project: None,
        };
        let cache = DownstreamCache::default();
        let none = cache.get(&source).expect("no file is no servers");
        assert!(none.names().is_empty());
        assert!(Arc::ptr_eq(&none, &cache.get(&source).expect("again")));
        std::fs::write(
            &source.file,
            json!({"mcpServers": {"a": {"command": "a"}}}).to_string(),
        )
        .expect("write");
        assert_eq!(cache.get(&source).expect("changed").names(), ["a"]);
        std::fs::write(&source.file, "{").expect("write");
        let broken = cache.get(&source).expect_err("not JSON");
        assert_eq!(broken.code, crate::ErrorCode::InvalidConfiguration);
        assert!(
            broken.message.contains("servers.json: not JSON"),
            "{broken}"
        );
    }
}
