//! Plan-generation tasks as every front door uses them: a task's status as
//! plain data (how far its target's closure got, which step runs, the
//! artifact files its successes wrote), and [`Tasks`], the operations on
//! them (find, create, stop, archive, delete, list, the run log, the
//! report and zip, an artifact's edit, the outputs listed and read in
//! [`outputs`]). The front doors shape and word
//! the answers (the MCP tools' JSON, a page).

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use planb_core::dag::Pipeline;
use planb_core::progress::Progress;
use planb_core::{Command, Run, RunId, Task, TaskId, Timestamp};
use planb_engine::host::{blocking, off_workers};
use planb_engine::pipelines::{self, PROJECT_PLAN};
use planb_projections::{DataRoot, Store};
use serde_json::json;

use crate::error::{Error, ErrorCode};
use crate::shared::Shared;

mod create;
pub mod examples;
mod files;
pub mod outputs;

pub use create::{CreateRequest, checked_pipeline};
pub use files::{ArtifactWritten, FileInfo, TaskFile};
pub use planb_engine::task_files::{content_type, rewrite_all as rewrite_folders};

/// Most artifact files a status lists (the newest); `files_count` says how
/// many there are.
pub const STATUS_FILES_MAX: usize = 10;

fn built_in() -> &'static Pipeline {
    static PIPELINE: OnceLock<Pipeline> = OnceLock::new();
    PIPELINE.get_or_init(pipelines::project_plan)
}

/// The pipeline named `name`: the built-in one (parsed once per process)
/// or a user's file under the data root; `INVALID_TARGET` saying why it
/// cannot be used (the file and the JSON path of the problem).
pub fn pipeline_of(root: &DataRoot, name: &str) -> Result<Pipeline, Error> {
    if name == PROJECT_PLAN {
        return Ok(built_in().clone());
    }
    pipelines::resolve(root, name)
        .map_err(|problem| Error::new(ErrorCode::InvalidTarget, problem.to_string()))
}

/// One artifact file a step's success wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusFile {
    /// Its name in the task's folder (`02-purpose`).
    pub path: String,
    /// The step.
    pub step: String,
    /// When the step succeeded (or the artifact was edited).
    pub updated_at: Timestamp,
    /// Its size in bytes.
    pub size: u64,
}

/// Where a task stands.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskStatus {
    /// Settled steps of the target's closure, its size, the running step
    /// (nothing when the pipeline cannot be read).
    pub progress: Progress,
    /// `progress` as a percentage to a tenth (0 for an empty closure).
    pub percentage: f64,
    /// The newest [`STATUS_FILES_MAX`] artifact files, newest first.
    pub files: Vec<StatusFile>,
    /// How many artifact files there are.
    pub files_count: usize,
}

/// The status of `task` (its pipeline read from `root`).
pub fn status(root: &DataRoot, task: &Task) -> TaskStatus {
    let pipeline = pipeline_of(root, &task.pipeline).ok();
    let progress = pipeline
        .as_ref()
        .map_or_else(Progress::default, |p| task.progress(p));
    // To a tenth: 46.2, not 46.15384615384615.
    let percentage = if progress.total == 0 {
        0.0
    } else {
        (1000.0 * progress.done as f64 / progress.total as f64).round() / 10.0
    };
    let mut files: Vec<StatusFile> = pipeline
        .iter()
        .flat_map(|p| p.steps().iter().enumerate())
        .filter_map(|(index, step)| {
            let success = task.successes.get(step.id.as_str())?;
            Some(StatusFile {
                path: format!("{:02}-{}", index + 1, step.id.as_str()),
                step: step.id.as_str().to_owned(),
                updated_at: success.at,
                size: success.bytes,
            })
        })
        .collect();
    let files_count = files.len();
    files.sort_by_key(|f| std::cmp::Reverse(f.updated_at));
    files.truncate(STATUS_FILES_MAX);
    TaskStatus {
        progress,
        percentage,
        files,
        files_count,
    }
}

/// How long `run` has taken by `now` (or took), in seconds.
pub fn elapsed_sec(run: &Run, now: Timestamp) -> f64 {
    let end = run.ended_at.unwrap_or(now);
    (end.0 - run.started_at.0).max(0) as f64 / 1000.0
}

/// The name of `task`'s state: its latest run's, `created` before any.
pub fn state_name(task: &Task) -> &'static str {
    task.runs.last().map_or("created", |run| run.state.as_str())
}

/// The task operations every front door calls ([`crate::App::tasks`]).
#[derive(Debug, Clone)]
pub struct Tasks {
    shared: Shared,
}

/// One task as a list shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The task.
    pub id: TaskId,
    /// When it was created.
    pub created_at: Timestamp,
    /// Its state's name ([`state_name`]).
    pub state: &'static str,
    /// Its lifecycle's name (`active`, `archived`, …).
    pub lifecycle: &'static str,
    /// Its prompt, whole.
    pub prompt: String,
}

/// The newer lines of a task's run log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogTail {
    /// The lines, oldest first.
    pub lines: Vec<planb_core::LogLine>,
    /// What to pass as `since` next time.
    pub next_cursor: u64,
    /// Whether lines after `since` were dropped from the kept tail.
    pub older_lines_dropped: bool,
}

impl Tasks {
    pub(crate) fn new(shared: Shared) -> Tasks {
        Tasks { shared }
    }

    /// The store, once open.
    async fn store(&self) -> Result<Arc<Store>, Error> {
        self.shared.opened().await
    }

    /// The data root.
    pub fn root(&self) -> DataRoot {
        self.shared.root()
    }

    /// Runs `f` on the state, after catching up on the log.
    async fn read<R: Send + 'static>(
        &self,
        f: impl FnOnce(&planb_core::State) -> R + Send + 'static,
    ) -> Result<R, Error> {
        let store = self.store().await?;
        Ok(blocking(move || store.read(f)).await?)
    }

    /// Executes `command`; how many events it recorded.
    async fn execute(&self, command: Command) -> Result<usize, Error> {
        let store = self.store().await?;
        Ok(blocking(move || store.execute(command).map(|events| events.len())).await?)
    }

    /// The task (not an execution plan) as recorded.
    pub async fn get(&self, id: TaskId) -> Result<Option<Task>, Error> {
        self.read(move |s| s.pipeline_task(&id).cloned()).await
    }

    /// The task, after ending its active run if the process that ran it is
    /// gone (its folder then says why); `TASK_NOT_FOUND` when there is none.
    pub async fn find(&self, id: TaskId) -> Result<Task, Error> {
        let not_found = || {
            Error::with(
                ErrorCode::TaskNotFound,
                format!("task_id: no task {id}"),
                json!({"task_id": id.to_string()}),
            )
        };
        let task = self.get(id).await?.ok_or_else(not_found)?;
        if task.active_run().is_none() {
            return Ok(task);
        }
        let store = self.store().await?;
        if blocking(move || store.end_dead_run(id)).await?.is_none() {
            return Ok(task);
        }
        // This process recorded the end: the folder says why.
        let task = self.get(id).await?.ok_or_else(not_found)?;
        planb_engine::task_files::project_ended(self.root(), task.clone()).await;
        Ok(task)
    }

    /// Records the hand edits of `task`'s folder (before this process
    /// writes it) and returns the task as it is then.
    pub async fn with_hand_edits(&self, task: Task) -> Result<Task, Error> {
        let notes = planb_engine::worker::record_hand_edits(&self.store().await?, &task).await?;
        if notes.is_empty() {
            return Ok(task);
        }
        for note in &notes {
            tracing::info!("task {}: {note}", task.id);
        }
        Ok(self.get(task.id).await?.unwrap_or(task))
    }

    /// Asks the task's run to stop, and waits (at most [`STOP_WAIT`]) for
    /// it to end.
    pub async fn stop(&self, id: TaskId) -> Result<Task, Error> {
        self.find(id).await?;
        self.execute(Command::RequestStop { task: id }).await?;
        let started = Instant::now();
        loop {
            let task = self.find(id).await?;
            if task.active_run().is_none() || started.elapsed() > STOP_WAIT {
                return Ok(task);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Archives the task (not while it runs).
    pub async fn archive(&self, id: TaskId) -> Result<Task, Error> {
        self.find(id).await?;
        self.execute(Command::ArchiveTask { task: id }).await?;
        self.find(id).await
    }

    /// Deletes the task (not while it runs) and removes its folder; returns
    /// the folder.
    pub async fn delete(&self, id: TaskId) -> Result<PathBuf, Error> {
        // Refused at once while a run is active, as the record refuses it;
        // should the run have ended meanwhile, this records the deletion.
        let recorded = self.find(id).await?.active_run().is_some();
        if recorded {
            self.execute(Command::DeleteTask { task: id }).await?;
        }
        let details = json!({"task_id": id.to_string()});
        // Decided and done under the task's run lock: a run starting
        // meanwhile holds the task first (the deletion is then refused while
        // it runs), or finds it deleted and leaves no folder.
        let lock = planb_engine::host::take_run_lock(&self.root(), id)
            .await
            .map_err(|e| match e {
                planb_engine::worker::WorkerError::Busy(_) => Error::with(
                    ErrorCode::RunAlreadyActive,
                    format!("task {id} is starting a run; stop it before deleting the task"),
                    details.clone(),
                ),
                other => Error::internal(other),
            })?;
        if !recorded {
            self.execute(Command::DeleteTask { task: id }).await?;
        }
        let root = self.root();
        let folder = root.task_dir(&id);
        let removed =
            off_workers(move || planb_engine::task_files::remove_folder(&root, &id)).await;
        drop(lock);
        match removed {
            Ok(Ok(())) => Ok(folder),
            // The deletion is recorded; `planb-mcp rebuild` removes the folder.
            Ok(Err(e)) => Err(Error::with(
                ErrorCode::InternalError,
                format!(
                    "task {id} is deleted, but its folder {} could not be removed: {e}",
                    folder.display()
                ),
                details,
            )),
            Err(e) => Err(Error::with(
                ErrorCode::InternalError,
                e.to_string(),
                details,
            )),
        }
    }

    /// The most recently created task.
    pub async fn latest(&self) -> Result<Task, Error> {
        let latest = self
            .read(|s| {
                s.pipeline_tasks()
                    .max_by_key(|t| (t.created_at, t.id))
                    .map(|t| t.id)
            })
            .await?;
        match latest {
            Some(id) => self.find(id).await,
            None => Err(Error::with(
                ErrorCode::TaskNotFound,
                "there are no tasks yet",
                json!({"tasks": 0}),
            )),
        }
    }

    /// The newest `limit` tasks, newest first; archived ones only with
    /// `archived`.
    pub async fn list(&self, limit: usize, archived: bool) -> Result<Vec<Listed>, Error> {
        self.read(move |s| {
            let mut tasks: Vec<&Task> = s
                .pipeline_tasks()
                .filter(|t| archived || t.archived_at.is_none())
                .collect();
            tasks.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id)));
            tasks
                .into_iter()
                .take(limit)
                .map(|t| Listed {
                    id: t.id,
                    created_at: t.created_at,
                    state: state_name(t),
                    lifecycle: t.lifecycle().as_str(),
                    prompt: t.prompt.clone(),
                })
                .collect()
        })
        .await
    }
}

impl Tasks {
    /// Where a run of a task with `profile` goes ([`crate::launch::runner`]),
    /// the client's model offered as `sampler`.
    pub fn runner(
        &self,
        profile: Option<&str>,
        sampler: Option<crate::models::Sampler>,
    ) -> Result<crate::launch::Runner, Error> {
        crate::launch::runner(profile, sampler)
    }

    /// Starts task `id`'s next run where `runner` says, beginning where
    /// `from` says (`runs_before` being the runs the caller saw), and
    /// returns the task once the run is recorded. An in-process run's tool
    /// steps use this process's downstream connections.
    pub async fn start_run(
        &self,
        id: TaskId,
        runs_before: usize,
        runner: crate::launch::Runner,
        from: crate::launch::Start,
    ) -> Result<Task, Error> {
        let servers = self.shared.servers.clone();
        let downstream = match runner {
            crate::launch::Runner::Here(_) => self.shared.downstream().ok(),
            crate::launch::Runner::Worker => None,
        };
        let launch = crate::launch::Launch {
            store: self.store().await?,
            servers,
            downstream,
        };
        crate::launch::start(&launch, id, runs_before, runner, from).await
    }
}

/// What [`Tasks::wait`] found.
#[derive(Debug, Clone)]
pub enum TaskWaited {
    /// The task's run has ended.
    Ended(Task),
    /// The limit came first: the task as it is then.
    TimedOut(Task),
    /// Still running, further along than the caller was last told.
    Progressed(Task, TaskStatus),
}

impl Tasks {
    /// Waits until the run of task `id` ends or `until` comes, looking at
    /// it every `poll`; returns early once its progress is past `told` per
    /// cent, for the caller to tell (`f64::INFINITY` never is). A task whose
    /// first run has not started yet is waited on.
    pub async fn wait(
        &self,
        id: TaskId,
        until: Instant,
        poll: Duration,
        told: f64,
    ) -> Result<TaskWaited, Error> {
        loop {
            let task = self.find(id).await?;
            if !task.runs.is_empty() && task.active_run().is_none() {
                return Ok(TaskWaited::Ended(task));
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(TaskWaited::TimedOut(task));
            }
            let status = status(&self.root(), &task);
            if status.percentage > told {
                return Ok(TaskWaited::Progressed(task, status));
            }
            tokio::time::sleep(poll.min(left)).await;
        }
    }
}

/// How long [`Tasks::stop`] waits for the run to end.
pub const STOP_WAIT: Duration = Duration::from_secs(10);

/// The run `run` names of `task` (its latest when `None`), or
/// `RUN_NOT_FOUND` for an id that is none of the task's runs.
pub fn run_of(task: &Task, run: Option<RunId>) -> Result<Option<&Run>, Error> {
    let Some(id) = run else {
        return Ok(task.runs.last().map(|r| &**r));
    };
    task.runs
        .iter()
        .find(|r| r.id == id)
        .map(|r| Some(&**r))
        .ok_or_else(|| {
            Error::with(
                ErrorCode::RunNotFound,
                format!(
                    "run_id: {id} is not a run of task {} (it has {} run(s))",
                    task.id,
                    task.runs.len()
                ),
                json!({"run_id": id.to_string()}),
            )
        })
}

/// The lines of `task`'s run log after `since` (of the run `run` only,
/// when given), the newest `max` of them.
pub fn log_tail(task: &Task, run: Option<RunId>, since: u64, max: usize) -> LogTail {
    let newer: Vec<&planb_core::LogLine> = task
        .log_tail
        .iter()
        .filter(|l| l.number > since && run.is_none_or(|r| l.run == r))
        .collect();
    let skip = newer.len().saturating_sub(max);
    LogTail {
        lines: newer[skip..].iter().map(|l| (*l).clone()).collect(),
        next_cursor: task.log_lines.max(since),
        older_lines_dropped: task.log_tail.front().is_some_and(|l| l.number > since + 1),
    }
}

/// Core's refusal of a new run of `task` ([`Task::may_start_run`], the rule
/// the worker's start is decided by), answered before a worker is started.
pub fn may_run_again(task: &Task) -> Result<(), Error> {
    task.may_start_run().map_err(|rejection| {
        let details = task
            .active_run()
            .map_or(json!({}), |run| json!({"run_id": run.id.to_string()}));
        let mut error = Error::from(rejection);
        error.details = details;
        error
    })
}
