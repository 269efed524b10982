//! The worker: runs one run of a task to its end.
//!
//! `planb-mcp worker <task>` calls [`run`] in a detached process. The worker
//! takes the task's run lock first and holds it for its whole life: that
//! lock is how every other process tells a live run from a dead one, and
//! why at most one run of a task is active across processes. A run still
//! active when the lock is taken belonged to a worker that died: it is
//! ended `failed`, `worker_error`, recoverable, before the new run starts.
//!
//! The run settles the target's closure with `dag::Schedule`: a step whose
//! recorded success ran on the inputs it would read now is kept; every
//! other step runs once its needs are settled, at most `concurrency` at a
//! time. Each step's start, success (artifact in the blob store first) and
//! failure is recorded through the store before the next decision. The
//! worker follows the log for a stop request; on one, or when no step has
//! progressed for `inactivity`, in-flight calls are cancelled (a command
//! backend's program is killed), their steps recorded failed, and the run
//! ended `stopped` or `failed` (`inactivity_timeout`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use planb_core::dag::{Action, Decision, Pipeline, Schedule, StepId, Success};
use planb_core::state::ContentHash;
use planb_core::{
    Command, EventBody, INLINE_BLOB_BYTES_MAX, Rejection, RunEndReason, RunId, RunOutcome,
    RunState, StepStart, Task, TaskErrorCode, TaskId,
};
use planb_projections::{DataRoot, RunLock, RunLockError, Store, StoreError};
use tokio::task::JoinSet;

use crate::backend::{Backend, BackendError};
use crate::pipelines;

/// How a worker runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where model steps are answered.
    pub backend: Backend,
    /// The longest a model call may take.
    pub step_timeout: Duration,
    /// The longest the run may go without a step starting or ending.
    pub inactivity: Duration,
    /// Most steps in flight.
    pub concurrency: usize,
    /// How often the log is checked for a stop request.
    pub poll: Duration,
    /// The downstream MCP servers `tool` steps call; `None` when none are
    /// configured (a tool step then fails saying so).
    pub servers: Option<Arc<crate::plans::Downstream>>,
    /// How many runs the task had when this run was asked for: a run
    /// recorded since (by another caller) refuses this one.
    pub runs_seen: Option<usize>,
    /// Set to the run's id once it is recorded.
    pub started: Option<Arc<std::sync::OnceLock<RunId>>>,
    /// Where the run begins.
    pub start: Start,
    /// Draws the `report` page (`render: report` steps); without one such a
    /// step fails `unsupported`.
    pub report: Option<RenderReport>,
}

/// Draws a report page: its title, the request, when it was generated, and
/// its sections.
pub type RenderReport = fn(&str, &str, &str, &[planb_core::report::Section<'_>]) -> String;

/// Where a task's run begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Start {
    /// After what the latest run (and the runs it resumed) completed: a
    /// task's first run, or a resume.
    #[default]
    Resume,
    /// At the first step, reusing nothing (`task_retry`): earlier runs are
    /// kept in the history, their successes leave the task's current view.
    Retry,
}

impl Options {
    /// Defaults: 10 min per call, 30 min without progress, 4 at a time,
    /// stop requests seen within 250 ms.
    pub fn new(backend: Backend) -> Options {
        Options {
            backend,
            step_timeout: Duration::from_secs(600),
            inactivity: Duration::from_secs(1800),
            concurrency: 4,
            poll: Duration::from_millis(250),
            servers: None,
            runs_seen: None,
            started: None,
            start: Start::Resume,
            report: None,
        }
    }
}

/// Why a worker could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    /// Another live worker runs the task.
    #[error("RUN_ALREADY_ACTIVE: another worker runs task {0}")]
    Busy(TaskId),
    /// The store failed or refused.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The task does not exist.
    #[error("TASK_NOT_FOUND: no task {0}")]
    NoTask(TaskId),
    /// A run of the task began after this one was asked for.
    #[error("RUN_ALREADY_ACTIVE: run {run} of task {task} started after this run was asked for")]
    StartedMeanwhile {
        /// The task.
        task: TaskId,
        /// The run that began meanwhile.
        run: RunId,
    },
}

impl From<RunLockError> for WorkerError {
    fn from(error: RunLockError) -> WorkerError {
        match error {
            RunLockError::Held(task) => WorkerError::Busy(task),
            RunLockError::Store(error) => WorkerError::Store(error),
            other => WorkerError::Store(StoreError::Io {
                op: "take the run lock",
                path: String::new(),
                source: std::io::Error::other(other.to_string()),
            }),
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    /// The run.
    pub run: RunId,
    /// Its outcome.
    pub outcome: RunOutcome,
    /// Why, when it failed.
    pub reason: Option<String>,
}

/// A step's result, before it is recorded.
struct StepResult {
    step: StepId,
    input: ContentHash,
    outcome: Result<Produced, StepFailure>,
}

struct Produced {
    bytes: Vec<u8>,
    duration: Duration,
    tokens_in: Option<u64>,
    tokens_out: Option<u64>,
    /// Why earlier answers to this step were refused.
    refusals: Vec<String>,
}

/// Answers a `model` step may have refused before the step fails.
pub const ANSWER_ATTEMPTS: usize = 3;

/// The answer as stored, or why it is refused: never empty, and for a step
/// that requires one, the shape its `answer` names (a Markdown code fence
/// around JSON is taken off).
fn checked_answer(kind: Option<&str>, text: &str) -> Result<String, String> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err("the answer is empty".into());
    }
    let Some(kind) = kind else {
        return Ok(text.to_owned());
    };
    let body = planb_core::report::unfenced(trimmed);
    serde_json::from_str::<serde_json::Value>(body)
        .map_err(|e| format!("the answer is not JSON ({e})"))?;
    if kind == "schedule" {
        planb_core::report::schedule(body)?;
    }
    Ok(body.to_owned())
}

struct StepFailure {
    class: String,
    message: String,
    recoverable: bool,
}

impl From<BackendError> for StepFailure {
    fn from(error: BackendError) -> StepFailure {
        StepFailure {
            class: error.class().into(),
            message: error.to_string(),
            recoverable: true,
        }
    }
}

pub(crate) fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// Runs `f`, which may wait on the disk, off the async workers: on the
/// blocking pool under a multi-thread runtime, inline on a current-thread
/// one (see [`blocking`]).
pub(crate) async fn off_workers<R: Send + 'static>(
    f: impl FnOnce() -> R + Send + 'static,
) -> Result<R, tokio::task::JoinError> {
    if tokio::runtime::Handle::current().runtime_flavor()
        == tokio::runtime::RuntimeFlavor::CurrentThread
    {
        return Ok(f());
    }
    tokio::task::spawn_blocking(f).await
}

/// Runs the store call `f` (which may sync to disk) off the async workers:
/// on the blocking pool under a multi-thread runtime (whose workers serve
/// other requests), inline on a current-thread one (the engine thread, a
/// worker process, a command-line run), where the hand-off to the pool and
/// back would cost more than the call and the caller waits for it anyway.
pub(crate) async fn blocking<R: Send + 'static>(
    f: impl FnOnce() -> Result<R, StoreError> + Send + 'static,
) -> Result<R, StoreError> {
    off_workers(f)
        .await
        .map_err(|e| StoreError::Interrupted(e.to_string()))?
}

/// How storing a step's artifact and recording its success went.
enum Stored {
    /// Both done; how many of the steps asked to start did (fewer when the
    /// run is stopping).
    Recorded(usize),
    /// The blob could not be stored: the step fails, the run goes on.
    BlobFailed(String),
    /// The success could not be recorded: the run cannot go on.
    Failed(StoreError),
}

struct Runner {
    store: Arc<Store>,
    task: TaskId,
    run: RunId,
    /// The run this one resumes, whose completed steps it reuses.
    resumed_from: Option<RunId>,
    log_lines: Vec<String>,
}

impl Runner {
    async fn execute(&self, command: Command) -> Result<(), StoreError> {
        let store = Arc::clone(&self.store);
        blocking(move || store.execute(command).map(|_| ())).await
    }

    fn note(&mut self, line: impl Into<String>) {
        let line: String = line.into();
        tracing::info!("task {}: {line}", self.task);
        self.log_lines.push(
            line.chars()
                .take(planb_core::state::tasks::RUN_LOG_LINE_CHARS_MAX)
                .collect(),
        );
    }

    async fn flush_log(&mut self) -> Result<(), StoreError> {
        while !self.log_lines.is_empty() {
            let take = self
                .log_lines
                .len()
                .min(planb_core::state::tasks::RUN_LOG_LINES_MAX);
            let lines: Vec<String> = self.log_lines.drain(..take).collect();
            self.execute(Command::AppendRunLog {
                task: self.task,
                run: self.run,
                lines,
            })
            .await?;
        }
        Ok(())
    }

    async fn task(&self) -> Result<Task, StoreError> {
        let store = Arc::clone(&self.store);
        let id = self.task;
        blocking(move || store.read(|s| s.task(&id).cloned()))
            .await?
            .ok_or_else(|| StoreError::Io {
                op: "find the task",
                path: id.to_string(),
                source: std::io::Error::other("the task vanished"),
            })
    }

    async fn end(
        &mut self,
        outcome: RunOutcome,
        reason: Option<String>,
        failed_step: Option<String>,
        recoverable: bool,
    ) -> Result<Ended, StoreError> {
        let summary = match (&outcome, &reason) {
            (RunOutcome::Completed, _) => "run completed".to_owned(),
            (RunOutcome::Stopped, _) => "run stopped on request".to_owned(),
            (RunOutcome::Failed, Some(reason)) => format!("run failed: {reason}"),
            (RunOutcome::Failed, None) => "run failed".to_owned(),
        };
        self.note(summary);
        self.flush_log().await?;
        // The folder (report, zip, run.log) is complete before the end is
        // recorded, so whoever sees the run ended finds its files.
        if let Ok(task) = self.task().await
            && let Ok(pipeline) = pipelines::resolve(self.store.root(), &task.pipeline)
        {
            let root = self.store.root().clone();
            let written =
                off_workers(move || crate::task_files::project(&root, &pipeline, &task, true))
                    .await;
            if let Ok(Err(error)) = written {
                tracing::warn!("task {}: files not written: {error}", self.task);
            }
        }
        self.execute(Command::EndRun {
            task: self.task,
            run: self.run,
            outcome,
            reason: reason.clone(),
            failed_step,
            recoverable,
        })
        .await?;
        // A failed run's folder also says why (`run_error.json`), which
        // only the recorded end tells.
        if outcome == RunOutcome::Failed
            && let Ok(task) = self.task().await
        {
            crate::task_files::project_ended(self.store.root().clone(), task).await;
        }
        Ok(Ended {
            run: self.run,
            outcome,
            reason,
        })
    }
}

/// How long a worker keeps trying for a run lock another process holds:
/// a liveness check (`worker_alive`) holds it for an instant.
const LOCK_PATIENCE: Duration = Duration::from_secs(2);

pub(crate) async fn take_run_lock(root: &DataRoot, task: TaskId) -> Result<RunLock, WorkerError> {
    let started = Instant::now();
    loop {
        let root = root.clone();
        // A try: a lock held elsewhere is `Held` at once.
        let taken = off_workers(move || RunLock::acquire(&root, &task))
            .await
            .map_err(|e| StoreError::Interrupted(format!("taking the run lock of {task}: {e}")))?;
        match taken {
            Ok(lock) => return Ok(lock),
            Err(RunLockError::Held(_)) if started.elapsed() < LOCK_PATIENCE => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(error) => return Err(error.into()),
        }
    }
}

/// Takes `task`'s run lock, ends the run still active (it lost its process:
/// this one holds the lock now) and reads the task as recorded: how a task
/// worker and a plan's runner begin.
pub(crate) async fn hold_task(
    store: &Arc<Store>,
    task: TaskId,
) -> Result<(RunLock, Option<Task>), WorkerError> {
    let lock = take_run_lock(store.root(), task).await?;
    let held = Arc::clone(store);
    let found = blocking(move || {
        held.end_lost_run(task)?;
        held.read(|s| s.task(&task).cloned())
    })
    .await?;
    Ok((lock, found))
}

/// Records a new run of `task`, owned by this process (under its run lock).
pub(crate) async fn start_run(
    store: &Arc<Store>,
    task: TaskId,
    resumed_from: Option<RunId>,
    variables: Option<String>,
) -> Result<RunId, StoreError> {
    let run = RunId::from_uuid(store.env().event_id());
    let start = Command::StartRun {
        task,
        run,
        resumed_from,
        owner_pid: std::process::id(),
        host: host(),
        variables,
    };
    let store = Arc::clone(store);
    blocking(move || store.execute(start).map(|_| ())).await?;
    Ok(run)
}

/// Runs task `task` once, from its recorded state to an end. The run lock is
/// held until this returns.
pub async fn run(store: Arc<Store>, task: TaskId, options: Options) -> Result<Ended, WorkerError> {
    let (lock, found) = hold_task(&store, task).await?;
    let found = found.ok_or(WorkerError::NoTask(task))?;
    if let Some(seen) = options.runs_seen
        && let Some(run) = found.runs.get(seen)
    {
        return Err(WorkerError::StartedMeanwhile { task, run: run.id });
    }
    let edit_notes = record_hand_edits(&store, &found).await?;
    let found = if edit_notes.is_empty() {
        found
    } else {
        let store = Arc::clone(&store);
        blocking(move || store.read(|s| s.task(&task).cloned()))
            .await?
            .ok_or(WorkerError::NoTask(task))?
    };
    let resumed_from = match options.start {
        Start::Resume => found.runs.last().map(|r| r.id),
        Start::Retry => None,
    };
    let run_id = start_run(&store, task, resumed_from, None).await?;
    if let Some(started) = &options.started {
        let _ = started.set(run_id);
    }
    let mut runner = Runner {
        store: Arc::clone(&store),
        task,
        run: run_id,
        resumed_from,
        log_lines: Vec::new(),
    };
    for line in edit_notes {
        runner.note(line);
    }
    let ended = drive(&mut runner, &found, &options).await;
    let ended = match ended {
        Ok(ended) => ended,
        Err(error) => {
            // Record what can be recorded; a store that fails here is
            // reported by the next process as worker_error.
            let reason = RunEndReason::WorkerError(Some(error.to_string())).to_wire();
            let _ = runner
                .end(RunOutcome::Failed, Some(reason), None, true)
                .await;
            drop(lock);
            return Err(error.into());
        }
    };
    drop(lock);
    Ok(ended)
}

/// Records each file under `tasks/<task>/` a person edited since the
/// projection wrote it as an artifact edit, so the schedule runs its
/// dependents again: before a run starts (under the run lock) and before
/// anything else writes the folder. Returns the lines the run log gets
/// about them.
pub async fn record_hand_edits(store: &Arc<Store>, task: &Task) -> Result<Vec<String>, StoreError> {
    let Ok(pipeline) = pipelines::resolve(store.root(), &task.pipeline) else {
        return Ok(Vec::new());
    };
    let found = {
        let root = store.root().clone();
        let (pipeline, task) = (pipeline.clone(), task.clone());
        blocking(move || {
            Ok(crate::task_files::hand_edits(
                &root,
                &pipeline,
                &task,
                crate::backend::ANSWER_BYTES_MAX,
            ))
        })
        .await?
    };
    let (edits, skipped) = found;
    let mut notes: Vec<String> = skipped
        .into_iter()
        .map(|s| format!("hand edit of {} not recorded: {}", s.name, s.why))
        .collect();
    for edit in edits {
        let blobs = store.root().blobs();
        let bytes = edit.bytes;
        let taken = bytes.clone();
        let size = bytes.len() as u64;
        let artifact = blocking(move || {
            blobs.put(&bytes).map_err(|e| StoreError::Io {
                op: "store a hand-edited artifact",
                path: String::new(),
                source: std::io::Error::other(e.to_string()),
            })
        })
        .await?;
        let command = Command::EditArtifact {
            task: task.id,
            step: edit.step.as_str().to_owned(),
            artifact,
            bytes: size,
            by: format!("hand edit of {}", edit.name),
        };
        let store_now = Arc::clone(store);
        blocking(move || store_now.execute(command).map(|_| ())).await?;
        let (root, name) = (store.root().clone(), edit.name.clone());
        let id = task.id;
        blocking(move || {
            crate::task_files::mark_taken(&root, &id, &name, &taken).map_err(|source| {
                StoreError::Io {
                    op: "note a recorded hand edit",
                    path: name.clone(),
                    source,
                }
            })
        })
        .await?;
        let downstream = pipeline
            .downstream(&edit.step)
            .map_or(0, |d| d.len().saturating_sub(1));
        notes.push(format!(
            "hand edit of {} recorded as the artifact of {}; {downstream} step(s) downstream of it are out of date",
            edit.name, edit.step
        ));
    }
    Ok(notes)
}

async fn drive(runner: &mut Runner, task: &Task, options: &Options) -> Result<Ended, StoreError> {
    let pipeline = match pipelines::resolve(runner.store.root(), &task.pipeline) {
        Ok(pipeline) => pipeline,
        Err(problem) => {
            runner.note(problem.clone());
            return runner
                .end(
                    RunOutcome::Failed,
                    Some(RunEndReason::PipelineError(problem.to_string()).to_wire()),
                    None,
                    true,
                )
                .await;
        }
    };
    if pipeline.version() != task.pipeline_version {
        runner.note(format!(
            "pipeline {} is now version {} (the task was created with version {}): steps whose definition changed run again",
            pipeline.name(),
            pipeline.version(),
            task.pipeline_version
        ));
    }
    let target = match pipelines::run_target(&pipeline, task) {
        Ok(target) => target,
        Err(problem) => {
            runner.note(problem.to_string());
            return runner
                .end(
                    RunOutcome::Failed,
                    Some(RunEndReason::InvalidTarget(Some(problem.to_string())).to_wire()),
                    None,
                    false,
                )
                .await;
        }
    };
    let pipeline = Arc::new(pipeline);
    let context = pipelines::context(task);
    let Some(schedule) = Schedule::new(&pipeline, &context, &target) else {
        return runner
            .end(
                RunOutcome::Failed,
                Some(RunEndReason::InvalidTarget(None).to_wire()),
                None,
                false,
            )
            .await;
    };
    let recorded: BTreeMap<StepId, Success> = task
        .resumable_successes(runner.resumed_from)
        .iter()
        .filter_map(|(id, s)| {
            Some((
                StepId::parse(id).ok()?,
                Success {
                    input: ContentHash(s.input),
                    artifact: ContentHash(s.artifact),
                },
            ))
        })
        .collect();
    let titles: Arc<BTreeMap<StepId, String>> = Arc::new(
        pipeline
            .steps()
            .iter()
            .map(|s| (s.id.clone(), s.title.clone()))
            .collect(),
    );
    let task = Arc::new(task.clone());
    let retry = if runner.resumed_from.is_none() && !task.runs.is_empty() {
        ", a retry from the first step"
    } else {
        ""
    };
    runner.note(format!(
        "run started: {} of pipeline {} toward {} ({} steps, speed {}{retry})",
        runner.run,
        pipeline.name(),
        target,
        schedule.steps().len(),
        task.speed
    ));
    runner.flush_log().await?;

    let launcher = Arc::new(Launcher {
        root: runner.store.root().clone(),
        pipeline: Arc::clone(&pipeline),
        task: Arc::clone(&task),
        titles: Arc::clone(&titles),
        backend: options.backend.clone(),
        timeout: options.step_timeout,
        servers: options.servers.clone(),
        report: options.report,
        made: Mutex::default(),
    });
    let mut settled: BTreeMap<StepId, ContentHash> = BTreeMap::new();
    let mut running: BTreeSet<StepId> = BTreeSet::new();
    let mut in_flight: JoinSet<StepResult> = JoinSet::new();
    let mut failed: Option<(String, String, bool)> = None;
    let mut last_progress = Instant::now();
    let mut last_poll = Instant::now();
    // Set when a step start was refused because the run is stopping: the
    // stop is handled at once instead of as a store failure.
    let mut stop_seen = false;
    loop {
        // Check for a stop request (another process's event).
        if stop_seen || last_poll.elapsed() >= options.poll || in_flight.is_empty() {
            stop_seen = false;
            last_poll = Instant::now();
            let store = Arc::clone(&runner.store);
            let (task_id, run_id) = (runner.task, runner.run);
            let state = blocking(move || {
                store.read(|s| {
                    s.task(&task_id)
                        .and_then(|t| t.runs.iter().find(|r| r.id == run_id))
                        .map(|r| r.state)
                })
            })
            .await?;
            match state {
                Some(RunState::Running) => {}
                Some(RunState::Stopping) => {
                    cancel(
                        runner,
                        &mut in_flight,
                        &mut running,
                        "cancelled",
                        "the run was stopped",
                    )
                    .await?;
                    return runner.end(RunOutcome::Stopped, None, None, true).await;
                }
                // Ended by someone else (it should not be): nothing more to record.
                _ => {
                    in_flight.abort_all();
                    return Ok(Ended {
                        run: runner.run,
                        outcome: RunOutcome::Failed,
                        reason: Some("the run was ended by another process".into()),
                    });
                }
            }
        }
        if last_progress.elapsed() >= options.inactivity {
            let message = format!(
                "no step progressed for {} s",
                options.inactivity.as_secs_f64()
            );
            cancel(
                runner,
                &mut in_flight,
                &mut running,
                "inactivity_timeout",
                &message,
            )
            .await?;
            return runner
                .end(
                    RunOutcome::Failed,
                    Some(RunEndReason::InactivityTimeout.to_wire()),
                    None,
                    true,
                )
                .await;
        }
        // Start what is ready, unless a step failed.
        if failed.is_none() {
            let limit = options.concurrency.max(1).saturating_sub(running.len());
            for (step, input) in ready(&schedule, &mut settled, &recorded, &running, limit) {
                let started = runner
                    .execute(Command::StartStep {
                        task: runner.task,
                        run: runner.run,
                        step: step.as_str().to_owned(),
                        input: input.0,
                        call: None,
                    })
                    .await;
                match started {
                    Ok(()) => {}
                    Err(StoreError::Rejected(Rejection::Task {
                        code: TaskErrorCode::RunNotActive,
                        ..
                    })) => {
                        stop_seen = true;
                        break;
                    }
                    Err(error) => return Err(error),
                }
                last_progress = Instant::now();
                running.insert(step.clone());
                in_flight.spawn(launcher.job(step, input, &settled).perform());
            }
        }
        if stop_seen {
            continue;
        }
        if in_flight.is_empty() {
            if let Some((step, class, recoverable)) = failed {
                return runner
                    .end(
                        RunOutcome::Failed,
                        Some(RunEndReason::Step(class).to_wire()),
                        Some(step),
                        recoverable,
                    )
                    .await;
            }
            if schedule.steps().iter().all(|s| settled.contains_key(s)) {
                return runner.end(RunOutcome::Completed, None, None, false).await;
            }
            // Nothing runs and nothing is ready: cannot happen in a DAG.
            return runner
                .end(
                    RunOutcome::Failed,
                    Some(RunEndReason::WorkerError(Some("no step is ready".into())).to_wire()),
                    None,
                    true,
                )
                .await;
        }
        let wait = options
            .poll
            .min(options.inactivity.saturating_sub(last_progress.elapsed()));
        let joined = tokio::select! {
            joined = in_flight.join_next() => joined,
            () = tokio::time::sleep(wait) => None,
        };
        let Some(joined) = joined else {
            continue;
        };
        let result = match joined {
            Ok(result) => result,
            Err(error) => {
                // A step's task panicked: the run cannot know which step.
                return Err(StoreError::Io {
                    op: "run a step",
                    path: String::new(),
                    source: std::io::Error::other(error.to_string()),
                });
            }
        };
        running.remove(&result.step);
        last_progress = Instant::now();
        match result.outcome {
            Ok(produced) => {
                for (n, reason) in produced.refusals.iter().enumerate() {
                    runner.note(format!(
                        "step {}: answer {} refused ({reason}); asked again",
                        result.step,
                        n + 1
                    ));
                }
                // The steps this success lets start are recorded with it, in
                // one append; the artifact is stored (synced) first and the
                // step's file written after, all in one trip to the blocking
                // pool.
                let artifact = ContentHash::of_bytes(&produced.bytes);
                settled.insert(result.step.clone(), artifact);
                let starts = if failed.is_none() {
                    let limit = options.concurrency.max(1).saturating_sub(running.len());
                    ready(&schedule, &mut settled, &recorded, &running, limit)
                } else {
                    Vec::new()
                };
                let command = Command::SettleAndStart {
                    task: runner.task,
                    run: runner.run,
                    ends: vec![Command::SucceedStep {
                        task: runner.task,
                        run: runner.run,
                        step: result.step.as_str().to_owned(),
                        input: result.input.0,
                        artifact: artifact.0,
                        bytes: produced.bytes.len() as u64,
                        duration_ms: u64::try_from(produced.duration.as_millis())
                            .unwrap_or(u64::MAX),
                        tokens_in: produced.tokens_in.unwrap_or(0),
                        tokens_out: produced.tokens_out.unwrap_or(0),
                    }],
                    starts: starts
                        .iter()
                        .map(|(step, input)| StepStart {
                            step: step.as_str().to_owned(),
                            input: input.0,
                            call: None,
                        })
                        .collect(),
                    inline: Vec::new(),
                };
                if produced.bytes.len() <= INLINE_BLOB_BYTES_MAX {
                    launcher.remember(artifact.0, produced.bytes.clone());
                }
                let (store, pipeline, task, step, bytes) = (
                    Arc::clone(&runner.store),
                    Arc::clone(&pipeline),
                    runner.task,
                    result.step.clone(),
                    produced.bytes,
                );
                let settled_step = off_workers(move || {
                    // A small artifact goes in the log with the success (it
                    // has no file); a large one is synced in the blob store
                    // first.
                    let mut command = command;
                    let put = if bytes.len() <= INLINE_BLOB_BYTES_MAX {
                        if let Command::SettleAndStart { inline, .. } = &mut command {
                            inline.push(bytes.clone());
                        }
                        Ok(artifact.0)
                    } else {
                        store.root().blobs().put(&bytes)
                    };
                    match put {
                        Ok(hash) if hash == artifact.0 => {}
                        Ok(_) => {
                            return Stored::BlobFailed("the blob store named it otherwise".into());
                        }
                        Err(error) => return Stored::BlobFailed(error.to_string()),
                    }
                    let started = match store.execute(command) {
                        Ok(events) => events
                            .iter()
                            .filter(|e| matches!(e.event.body, EventBody::StepStarted { .. }))
                            .count(),
                        Err(error) => return Stored::Failed(error),
                    };
                    // Only the new file: the whole folder is written when the run ends.
                    let root = store.root().clone();
                    if let Err(error) =
                        crate::task_files::write_artifact(&root, &pipeline, &task, &step, &bytes)
                    {
                        tracing::warn!("task {task}: files not written: {error}");
                    }
                    Stored::Recorded(started)
                })
                .await
                .map_err(|error| StoreError::Io {
                    op: "store an artifact",
                    path: String::new(),
                    source: std::io::Error::other(error.to_string()),
                })?;
                match settled_step {
                    Stored::Recorded(started) => {
                        if started < starts.len() {
                            // The run is stopping: the starts were left out.
                            stop_seen = true;
                        } else {
                            for (step, input) in starts {
                                running.insert(step.clone());
                                in_flight.spawn(launcher.job(step, input, &settled).perform());
                            }
                        }
                    }
                    Stored::Failed(error) => return Err(error),
                    Stored::BlobFailed(error) => {
                        settled.remove(&result.step);
                        let message = format!("the artifact could not be stored: {error}");
                        record_failure(runner, &result.step, "storage_error", &message, true)
                            .await?;
                        failed.get_or_insert((
                            result.step.as_str().into(),
                            "storage_error".into(),
                            true,
                        ));
                        continue;
                    }
                }
            }
            Err(failure) => {
                runner.note(format!("step {} failed: {}", result.step, failure.message));
                runner.flush_log().await?;
                record_failure(
                    runner,
                    &result.step,
                    &failure.class,
                    &failure.message,
                    failure.recoverable,
                )
                .await?;
                failed.get_or_insert((
                    result.step.as_str().into(),
                    failure.class,
                    failure.recoverable,
                ));
            }
        }
    }
}

async fn record_failure(
    runner: &Runner,
    step: &StepId,
    class: &str,
    message: &str,
    recoverable: bool,
) -> Result<(), StoreError> {
    let message: String = message
        .chars()
        .take(planb_core::state::tasks::STEP_MESSAGE_CHARS_MAX)
        .collect();
    runner
        .execute(Command::FailStep {
            task: runner.task,
            run: runner.run,
            step: step.as_str().to_owned(),
            class: class.to_owned(),
            message,
            recoverable,
        })
        .await
}

/// Cancels every in-flight step and records each as failed with `class`.
async fn cancel(
    runner: &mut Runner,
    in_flight: &mut JoinSet<StepResult>,
    running: &mut BTreeSet<StepId>,
    class: &str,
    message: &str,
) -> Result<(), StoreError> {
    in_flight.abort_all();
    while in_flight.join_next().await.is_some() {}
    for step in std::mem::take(running) {
        runner.note(format!("step {step} cancelled: {message}"));
        record_failure(runner, &step, class, message, true).await?;
    }
    Ok(())
}

/// One step's work, away from the run loop.
/// The steps ready to start now, at most `limit`, in the schedule's order;
/// steps whose recorded artifact still holds are settled on the way.
fn ready(
    schedule: &Schedule,
    settled: &mut BTreeMap<StepId, ContentHash>,
    recorded: &BTreeMap<StepId, Success>,
    running: &BTreeSet<StepId>,
    limit: usize,
) -> Vec<(StepId, ContentHash)> {
    let mut starts = Vec::new();
    loop {
        let mut kept_any = false;
        for decision in schedule.next(settled, recorded, running) {
            match decision {
                Decision::Fresh(step) => {
                    if let Some(success) = recorded.get(&step) {
                        settled.insert(step, success.artifact);
                        kept_any = true;
                    }
                }
                Decision::Run(step, input) => {
                    if starts.len() < limit && !starts.iter().any(|(s, _)| *s == step) {
                        starts.push((step, input));
                    }
                }
            }
        }
        if !kept_any {
            return starts;
        }
    }
}

/// What every step's job shares.
struct Launcher {
    root: DataRoot,
    pipeline: Arc<Pipeline>,
    task: Arc<Task>,
    titles: Arc<BTreeMap<StepId, String>>,
    backend: Backend,
    timeout: Duration,
    servers: Option<Arc<crate::plans::Downstream>>,
    report: Option<RenderReport>,
    /// The small artifacts this run made, by hash: the steps that need them
    /// read them here, not from the log (whose places of small blobs are
    /// noted a little later).
    made: Mutex<HashMap<[u8; 32], Arc<Vec<u8>>>>,
}

impl Launcher {
    fn remember(&self, hash: [u8; 32], bytes: Vec<u8>) {
        self.made
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(hash, Arc::new(bytes));
    }

    fn made(&self, hash: &[u8; 32]) -> Option<Arc<Vec<u8>>> {
        self.made
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(hash)
            .cloned()
    }

    /// The job of `step`, reading its needs' artifacts as `settled` has them.
    fn job(
        self: &Arc<Self>,
        step: StepId,
        input: ContentHash,
        settled: &BTreeMap<StepId, ContentHash>,
    ) -> Job {
        let inputs: BTreeMap<StepId, ContentHash> = self
            .pipeline
            .step(&step)
            .map(|def| {
                def.needs
                    .iter()
                    .filter_map(|n| Some((n.clone(), *settled.get(n)?)))
                    .collect()
            })
            .unwrap_or_default();
        Job {
            shared: Arc::clone(self),
            step,
            input,
            inputs,
        }
    }
}

/// One step to run.
struct Job {
    shared: Arc<Launcher>,
    step: StepId,
    input: ContentHash,
    inputs: BTreeMap<StepId, ContentHash>,
}

impl Job {
    async fn perform(self) -> StepResult {
        let outcome = self.outcome().await;
        StepResult {
            step: self.step,
            input: self.input,
            outcome,
        }
    }

    fn read_inputs(&self) -> Result<BTreeMap<StepId, String>, StepFailure> {
        let blobs = self.shared.root.blobs();
        self.inputs
            .iter()
            .map(|(id, hash)| {
                if let Some(bytes) = self.shared.made(&hash.0) {
                    return Ok((id.clone(), String::from_utf8_lossy(&bytes).into_owned()));
                }
                let bytes = blobs.get(&hash.0).map_err(|e| StepFailure {
                    class: "storage_error".into(),
                    message: format!("the artifact of {id} cannot be read: {e}"),
                    recoverable: true,
                })?;
                Ok((id.clone(), String::from_utf8_lossy(&bytes).into_owned()))
            })
            .collect()
    }

    async fn outcome(&self) -> Result<Produced, StepFailure> {
        let Some(def) = self.shared.pipeline.step(&self.step) else {
            return Err(StepFailure {
                class: "worker_error".into(),
                message: format!("step {} is not in the pipeline", self.step),
                recoverable: false,
            });
        };
        let inputs = self.read_inputs()?;
        let started = Instant::now();
        match &def.action {
            Action::Model { prompt, answer } => {
                let first =
                    pipelines::fill(prompt, &self.shared.task, def, &self.shared.titles, &inputs);
                let deadline = started + self.shared.timeout;
                let mut text = first.clone();
                let mut produced = Produced {
                    bytes: Vec::new(),
                    duration: Duration::ZERO,
                    tokens_in: None,
                    tokens_out: None,
                    refusals: Vec::new(),
                };
                let add = |sum: Option<u64>, more: Option<u64>| match (sum, more) {
                    (None, None) => None,
                    (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
                };
                loop {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(BackendError::Timeout(self.shared.timeout).into());
                    }
                    let reply = self.shared.backend.ask(&text, left).await?;
                    produced.duration += reply.duration;
                    produced.tokens_in = add(produced.tokens_in, reply.tokens_in);
                    produced.tokens_out = add(produced.tokens_out, reply.tokens_out);
                    match checked_answer(answer.as_deref(), &reply.text) {
                        Ok(kept) => {
                            produced.bytes = kept.into_bytes();
                            return Ok(produced);
                        }
                        Err(reason) if produced.refusals.len() + 1 >= ANSWER_ATTEMPTS => {
                            return Err(StepFailure {
                                class: "model_answer_invalid".into(),
                                message: format!(
                                    "the model's answer was refused {ANSWER_ATTEMPTS} times; the last time: {reason}"
                                ),
                                recoverable: true,
                            });
                        }
                        Err(reason) => {
                            text = format!(
                                "{first}\n\nYour previous answer was refused: {reason}. \
                                 Answer again, following the instructions exactly."
                            );
                            produced.refusals.push(reason);
                        }
                    }
                }
            }
            Action::Render { what } if what == "report" => {
                let sections: Vec<planb_core::report::Section<'_>> = def
                    .needs
                    .iter()
                    .filter_map(|need| {
                        Some(planb_core::report::Section {
                            id: need.as_str(),
                            title: self
                                .shared
                                .titles
                                .get(need)
                                .map_or(need.as_str(), String::as_str),
                            text: inputs.get(need)?,
                        })
                    })
                    .collect();
                let Some(render) = self.shared.report else {
                    return Err(StepFailure {
                        class: "unsupported".into(),
                        message: "this process has no report renderer".into(),
                        recoverable: false,
                    });
                };
                let title = format!("Plan: {}", first_line(&self.shared.task.prompt));
                let html = render(
                    &title,
                    &self.shared.task.prompt,
                    &self.shared.task.created_at.to_iso8601(),
                    &sections,
                );
                Ok(Produced {
                    bytes: html.into_bytes(),
                    duration: started.elapsed(),
                    tokens_in: None,
                    tokens_out: None,
                    refusals: Vec::new(),
                })
            }
            Action::Render { what } => Err(StepFailure {
                class: "unsupported".into(),
                message: format!("no renderer {what:?}"),
                recoverable: false,
            }),
            Action::Tool { server, tool, args } => {
                let Some(servers) = &self.shared.servers else {
                    return Err(StepFailure {
                        class: "server_start".into(),
                        message: format!(
                            "step {} calls {server}__{tool}, but no downstream servers are configured (the servers file, PLANB_SERVERS)",
                            self.step
                        ),
                        recoverable: true,
                    });
                };
                let args: serde_json::Map<String, serde_json::Value> =
                    serde_json::from_str(args).unwrap_or_default();
                // `${need}` is that need's artifact: its JSON when it is
                // JSON, else its text.
                let variables: serde_json::Map<String, serde_json::Value> = inputs
                    .iter()
                    .map(|(id, text)| {
                        let value = serde_json::from_str(text)
                            .unwrap_or_else(|_| serde_json::Value::String(text.clone()));
                        (id.as_str().to_owned(), value)
                    })
                    .collect();
                let args = planb_core::exec_plan::resolve_args(&args, &variables);
                let answer = servers
                    .call(server, tool, args, self.shared.timeout)
                    .await
                    .map_err(|e| StepFailure {
                        class: e.class.into(),
                        message: e.message,
                        recoverable: true,
                    })?;
                let value = answer.value().map_err(|message| StepFailure {
                    class: "tool_error".into(),
                    message: format!("{server}__{tool}: {message}"),
                    recoverable: true,
                })?;
                let bytes = match value {
                    serde_json::Value::String(text) => text.into_bytes(),
                    other => serde_json::to_vec_pretty(&other).unwrap_or_default(),
                };
                if bytes.is_empty() {
                    return Err(StepFailure {
                        class: "tool_error".into(),
                        message: format!("{server}__{tool} returned nothing"),
                        recoverable: true,
                    });
                }
                Ok(Produced {
                    bytes,
                    duration: started.elapsed(),
                    tokens_in: None,
                    tokens_out: None,
                    refusals: Vec::new(),
                })
            }
            _ => Err(StepFailure {
                class: "unsupported".into(),
                message: "this kind of step is not run yet".into(),
                recoverable: false,
            }),
        }
    }
}

fn first_line(text: &str) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    planb_core::text::clip(line, 81)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_kept_or_refused_with_the_reason() {
        assert_eq!(
            checked_answer(None, "## Text\n").as_deref(),
            Ok("## Text\n")
        );
        assert_eq!(
            checked_answer(None, " \n ").expect_err("refused"),
            "the answer is empty"
        );
        assert_eq!(
            checked_answer(Some("json"), "```json\n{\"a\": 1}\n```").as_deref(),
            Ok("{\"a\": 1}")
        );
        assert!(
            checked_answer(Some("json"), "Sure! Here it is.")
                .expect_err("refused")
                .starts_with("the answer is not JSON")
        );
        let schedule =
            r#"{"tasks": [{"id": "1", "name": "A", "duration_days": 2, "depends_on": ["9"]}]}"#;
        assert!(checked_answer(Some("json"), schedule).is_ok());
        assert_eq!(
            checked_answer(Some("schedule"), schedule).expect_err("refused"),
            "tasks[0].depends_on: no task \"9\""
        );
    }
}
