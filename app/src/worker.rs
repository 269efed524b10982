//! The detached worker: one run of a task, then exit. Why it could not run
//! reaches whoever started it as a [`WorkerFailure`], whose code the binary
//! turns into its exit status ([`ErrorCode::exit_status`]).

use std::path::Path;
use std::sync::Arc;

use planb_core::TaskId;
use planb_engine::backend::{Backend, BackendError};
use planb_engine::worker::{Ended, Start};
use planb_projections::{DataRoot, Store, SystemEnvironment};

use crate::error::ErrorCode;
use crate::plans::ServersSource;

/// Why a worker did not run.
#[derive(Debug, thiserror::Error)]
#[error("{code}: {message}")]
pub struct WorkerFailure {
    /// What kind of failure.
    pub code: ErrorCode,
    /// What happened.
    pub message: String,
}

fn failed(code: ErrorCode, message: impl ToString) -> WorkerFailure {
    WorkerFailure {
        code,
        message: message.to_string(),
    }
}

/// Runs one run of `task` in the data root `root` to its end, with the
/// servers of `servers` for its tool steps. `runs_seen` is how many runs its
/// starter saw: one begun since refuses this run. `start` says where the
/// run begins.
pub fn run(
    root: &Path,
    servers: &ServersSource,
    task: &str,
    runs_seen: Option<usize>,
    start: Start,
) -> Result<Ended, WorkerFailure> {
    let task = TaskId::parse(task.trim())
        .map_err(|e| failed(ErrorCode::InvalidArgument, format!("task: {e}")))?;
    let root = DataRoot::new(root);
    let internal = |e: &dyn std::fmt::Display| failed(ErrorCode::InternalError, e);
    let (store, _) = Store::open(root, Arc::new(SystemEnvironment)).map_err(|e| internal(&e))?;
    let profile = store
        .read(|s| s.task(&task).map(|t| t.model_profile.clone()))
        .map_err(|e| internal(&e))?
        .ok_or_else(|| failed(ErrorCode::TaskNotFound, format!("no task {task}")))?;
    let backend = Backend::configured(profile.as_deref(), &|n| std::env::var(n).ok()).map_err(
        |e| match e {
            BackendError::NotConfigured | BackendError::BadSpec { .. } => {
                failed(ErrorCode::ModelNotConfigured, e)
            }
            other => internal(&other),
        },
    )?;
    let mut options = crate::settings::worker_options(backend)
        .map_err(|e| failed(ErrorCode::InvalidConfiguration, e))?;
    options.runs_seen = runs_seen;
    options.start = start;
    // Tool steps call the servers of the servers file and the project's;
    // without either (or with one that cannot be read) they fail saying
    // so, and model steps run on.
    let configured = std::iter::once(&servers.file).chain(&servers.project);
    if configured.into_iter().any(|file| file.exists()) {
        match crate::plans::downstream(servers) {
            Ok(downstream) => options.servers = Some(downstream),
            Err(problem) => tracing::warn!("task {task}: no downstream servers: {problem}"),
        }
    }
    // One thread: the run's model calls, tool calls and appends (made
    // inline) take turns on it, with no hand-off between threads.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| internal(&e))?;
    runtime
        .block_on(planb_engine::worker::run(Arc::new(store), task, options))
        .map_err(|e| failed(ErrorCode::of_run(&e), e))
}

/// Ends the active runs this process owned (dropped with its runtimes) as
/// a dead worker's: `failed`, `worker_error`, recoverable. Each is named by
/// its id, so a run another process has started on the task since is never
/// the one ended (the core refuses to end a run that is not active).
pub fn end_own_runs(store: &planb_projections::Store) {
    let me = std::process::id();
    let own = store.read(|state| {
        state
            .tasks()
            .values()
            .filter_map(|task| {
                let run = task.active_run().filter(|run| run.owner_pid == me)?;
                Some((task.id, run.id, run.running.iter().next().cloned()))
            })
            .collect::<Vec<_>>()
    });
    for (task, run, failed_step) in own.unwrap_or_default() {
        let ended = store.execute(planb_core::Command::EndRun {
            task,
            run,
            outcome: planb_core::RunOutcome::Failed,
            reason: Some(planb_core::RunEndReason::WorkerError(None).to_wire()),
            failed_step,
            recoverable: true,
        });
        match ended {
            Ok(_) | Err(planb_projections::StoreError::Rejected(_)) => {}
            Err(error) => tracing::warn!("the run of {task} was not ended: {error}"),
        }
    }
}
