//! The worker: runs one run of a task to its end.
//!
//! `planb-mcp worker <task>` calls [`run`] in a detached process. The run
//! is hosted like every other (`host`: the task's run lock held for the
//! worker's whole life, a run a dead worker left active ended `failed`,
//! `worker_error`, recoverable, before the new run starts) and settled by
//! the shared loop (`settle`), with a task's steps as its kind.
//!
//! The steps are the target's closure under `dag::Schedule`: a step whose
//! recorded success ran on the inputs it would read now is kept; every
//! other step runs once its needs are settled, at most `concurrency` at a
//! time, and the first failure lets nothing more start. A model step asks
//! the backend (again, saying why, while its answer is refused), a render
//! step draws the report page, a tool step calls a downstream server. A
//! success's artifact is stored before its end is recorded and its file
//! written after; the folder is written whole when the run ends.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use planb_core::dag::{Action, Decision, Pipeline, Schedule, StepId, Success};
use planb_core::state::ContentHash;
use planb_core::{
    Command, INLINE_BLOB_BYTES_MAX, Rejection, RunEndReason, RunId, RunOutcome, StepStart, Task,
    TaskErrorCode, TaskId,
};
use planb_projections::{DataRoot, Store, StoreError};

use crate::backend::{Backend, BackendError};
pub use crate::host::WorkerError;
use crate::host::{RunHost, blocking, hold_task, off_workers};
use crate::pipelines;
use crate::settle::{Cut, End, Launch, Next, Pace, Settled, StepKind, settle};

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
fn checked_answer(kind: Option<&str>, text: &str) -> Result<String, AnswerRefused> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(AnswerRefused::Empty);
    }
    let Some(kind) = kind else {
        return Ok(text.to_owned());
    };
    let body = planb_core::report::unfenced(trimmed);
    serde_json::from_str::<serde_json::Value>(body).map_err(AnswerRefused::NotJson)?;
    if kind == "schedule" {
        planb_core::report::schedule(body)?;
    }
    Ok(body.to_owned())
}

/// Why a model's answer is not kept as its step's artifact.
#[derive(Debug, thiserror::Error)]
enum AnswerRefused {
    /// Nothing but white space.
    #[error("the answer is empty")]
    Empty,
    /// The step needs JSON.
    #[error("the answer is not JSON ({0})")]
    NotJson(serde_json::Error),
    /// The step needs a schedule.
    #[error(transparent)]
    Schedule(#[from] planb_core::report::ScheduleError),
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

/// A task's run being hosted, and the lines its run log gets.
struct Runner {
    host: RunHost,
    /// The run this one resumes, whose completed steps it reuses.
    resumed_from: Option<RunId>,
    log_lines: Vec<String>,
}

impl Runner {
    fn note(&mut self, line: impl Into<String>) {
        let line: String = line.into();
        tracing::info!("task {}: {line}", self.host.task);
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
            self.host
                .execute(Command::AppendRunLog {
                    task: self.host.task,
                    run: self.host.run,
                    lines,
                })
                .await?;
        }
        Ok(())
    }

    /// Ends the run: its log, then its folder (report, zip, run.log: whoever
    /// sees the run ended finds its files), then the end itself.
    async fn end(&mut self, end: RunEnd) -> Result<Ended, StoreError> {
        let RunEnd {
            outcome,
            reason,
            failed_step,
            recoverable,
        } = end;
        let reason = reason.map(|r| r.to_wire());
        self.note(match (&outcome, &reason) {
            (RunOutcome::Completed, _) => "run completed".to_owned(),
            (RunOutcome::Stopped, _) => "run stopped on request".to_owned(),
            (RunOutcome::Failed, Some(reason)) => format!("run failed: {reason}"),
            (RunOutcome::Failed, None) => "run failed".to_owned(),
        });
        self.flush_log().await?;
        self.project_files().await;
        self.host
            .execute(Command::EndRun {
                task: self.host.task,
                run: self.host.run,
                outcome,
                reason: reason.clone(),
                failed_step,
                recoverable,
            })
            .await?;
        // A failed run's folder also says why (`run_error.json`), which
        // only the recorded end tells.
        if outcome == RunOutcome::Failed
            && let Ok(Some(task)) = self.host.task().await
        {
            crate::task_files::project_ended(self.host.store.root().clone(), task).await;
        }
        Ok(Ended {
            run: self.host.run,
            outcome,
            reason,
        })
    }

    /// Writes the task's folder whole.
    async fn project_files(&self) {
        let Ok(Some(task)) = self.host.task().await else {
            return;
        };
        let Ok(pipeline) = pipelines::resolve(self.host.store.root(), &task.pipeline) else {
            return;
        };
        let root = self.host.store.root().clone();
        let written =
            off_workers(move || crate::task_files::project(&root, &pipeline, &task, true)).await;
        if let Ok(Err(error)) = written {
            tracing::warn!("task {}: files not written: {error}", self.host.task);
        }
    }
}

/// How a task's run ends, as recorded.
struct RunEnd {
    outcome: RunOutcome,
    reason: Option<RunEndReason>,
    failed_step: Option<String>,
    recoverable: bool,
}

impl RunEnd {
    fn completed() -> RunEnd {
        RunEnd {
            outcome: RunOutcome::Completed,
            reason: None,
            failed_step: None,
            recoverable: false,
        }
    }

    fn stopped() -> RunEnd {
        RunEnd {
            outcome: RunOutcome::Stopped,
            reason: None,
            failed_step: None,
            recoverable: true,
        }
    }

    fn failed(reason: RunEndReason, recoverable: bool) -> RunEnd {
        RunEnd {
            outcome: RunOutcome::Failed,
            reason: Some(reason),
            failed_step: None,
            recoverable,
        }
    }
}

/// Whether `task` is recorded and not deleted.
async fn is_live(store: &Arc<Store>, task: TaskId) -> Result<bool, WorkerError> {
    let held = Arc::clone(store);
    let live = blocking(move || held.read(|s| s.task(&task).map(|t| t.deleted_at.is_none())));
    Ok(live.await?.unwrap_or(false))
}

/// Takes `task`'s run lock and reads the task, unless it is unknown or
/// deleted (`NoTask`). A deleted task's folder is never left behind: no lock
/// is tried for a task already deleted, and one deleted while the lock was
/// being taken loses what taking it made, before the lock is let go (a
/// deletion is recorded under that lock).
async fn hold_live_task(
    store: &Arc<Store>,
    task: TaskId,
) -> Result<(planb_projections::RunLock, Task), WorkerError> {
    if !is_live(store, task).await? {
        return Err(WorkerError::NoTask(task));
    }
    let (lock, found) = hold_task(store, task).await?;
    match found.filter(|t| t.deleted_at.is_none()) {
        Some(found) => Ok((lock, found)),
        None => {
            let root = store.root().clone();
            let removed = off_workers(move || crate::task_files::remove_folder(&root, &task)).await;
            if let Ok(Err(error)) = removed {
                tracing::warn!("task {task} is deleted; its folder could not be removed: {error}");
            }
            drop(lock);
            Err(WorkerError::NoTask(task))
        }
    }
}

/// Runs task `task` once, from its recorded state to an end. The run lock is
/// held until this returns.
pub async fn run(store: Arc<Store>, task: TaskId, options: Options) -> Result<Ended, WorkerError> {
    let (lock, found) = hold_live_task(&store, task).await?;
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
    // The run's id is told before the run is recorded: whoever waits for a
    // new run sees at once that it is this one.
    let run = RunId::from_uuid(store.env().event_id());
    if let Some(started) = &options.started {
        let _ = started.set(run);
    }
    let host = RunHost::start_as(&store, task, run, resumed_from, None).await?;
    let mut runner = Runner {
        host,
        resumed_from,
        log_lines: Vec::new(),
    };
    for line in edit_notes {
        runner.note(line);
    }
    let ended = match drive(&mut runner, &found, &options).await {
        Ok(ended) => ended,
        Err(error) => {
            // Record what can be recorded; a store that fails here is
            // reported by the next process as worker_error.
            let reason = RunEndReason::WorkerError(Some(error.to_string()));
            let _ = runner.end(RunEnd::failed(reason, true)).await;
            drop(lock);
            return Err(error);
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
///
/// Under a run, an edit cannot be recorded (the run may be writing the
/// very file): it stays in the folder, where no projection overwrites it,
/// until the run has ended.
pub async fn record_hand_edits(store: &Arc<Store>, task: &Task) -> Result<Vec<String>, StoreError> {
    if task.active_run().is_some() {
        return Ok(Vec::new());
    }
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
        let step = edit.step.clone();
        let name = edit.name.clone();
        if !record_hand_edit(store, task.id, edit).await? {
            // A run began since `task` was read: the edit waits for its end.
            break;
        }
        let downstream = pipeline
            .downstream(&step)
            .map_or(0, |d| d.len().saturating_sub(1));
        notes.push(format!(
            "hand edit of {name} recorded as the artifact of {step}; {downstream} step(s) downstream of it are out of date"
        ));
    }
    Ok(notes)
}

/// Records one hand edit of task `id` as its step's artifact and notes it
/// taken; `false` when a run has begun since (the edit waits for its end).
async fn record_hand_edit(
    store: &Arc<Store>,
    id: TaskId,
    edit: crate::task_files::HandEdit,
) -> Result<bool, StoreError> {
    let blobs = store.root().blobs();
    let bytes = edit.bytes;
    let taken = bytes.clone();
    let size = bytes.len() as u64;
    let artifact = blocking(move || blobs.put(&bytes).map_err(crate::host::blob_error)).await?;
    let command = Command::EditArtifact {
        task: id,
        step: edit.step.as_str().to_owned(),
        artifact,
        bytes: size,
        by: format!("hand edit of {}", edit.name),
    };
    let store_now = Arc::clone(store);
    match blocking(move || store_now.execute(command).map(|_| ())).await {
        Err(StoreError::Rejected(Rejection::Task {
            code: TaskErrorCode::RunningReadonly,
            ..
        })) => return Ok(false),
        recorded => recorded?,
    }
    let (root, name) = (store.root().clone(), edit.name);
    blocking(move || {
        crate::task_files::mark_taken(&root, &id, &name, &taken).map_err(|source| StoreError::Io {
            op: "note a recorded hand edit",
            path: name.clone(),
            source,
        })
    })
    .await?;
    Ok(true)
}

/// Runs the task's run to an end and records it.
async fn drive(runner: &mut Runner, task: &Task, options: &Options) -> Result<Ended, WorkerError> {
    let prepared = match prepare(runner, task, options) {
        Ok(prepared) => prepared,
        Err(end) => return Ok(runner.end(end).await?),
    };
    let pipeline = Arc::clone(&prepared.launcher.pipeline);
    let Some(schedule) = Schedule::new(&pipeline, &prepared.context, &prepared.target) else {
        let end = RunEnd::failed(RunEndReason::InvalidTarget(None), false);
        return Ok(runner.end(end).await?);
    };
    let retry = if runner.resumed_from.is_none() && !task.runs.is_empty() {
        ", a retry from the first step"
    } else {
        ""
    };
    runner.note(format!(
        "run started: {} of pipeline {} toward {} ({} steps, speed {}{retry})",
        runner.host.run,
        pipeline.name(),
        prepared.target,
        schedule.steps().len(),
        task.speed
    ));
    runner.flush_log().await?;
    let pace = Pace {
        concurrency: options.concurrency,
        poll: options.poll,
        inactivity: Some(options.inactivity),
    };
    let host = runner.host.clone();
    let mut steps = TaskSteps {
        runner: &mut *runner,
        prepared: &prepared,
        schedule,
        settled: BTreeMap::new(),
        running: BTreeSet::new(),
        failed: None,
        to_write: Vec::new(),
    };
    let settled = settle(&host, &mut steps, pace).await?;
    let end = match settled {
        Settled::Completed => RunEnd::completed(),
        Settled::Stopped => RunEnd::stopped(),
        Settled::Inactive => RunEnd::failed(RunEndReason::InactivityTimeout, true),
        Settled::Failed(end) => end,
        Settled::EndedElsewhere(_) => {
            return Ok(Ended {
                run: runner.host.run,
                outcome: RunOutcome::Failed,
                reason: Some("the run was ended by another process".into()),
            });
        }
    };
    Ok(runner.end(end).await?)
}

/// What a task's run settles, read before its first step.
struct Prepared {
    launcher: Arc<Launcher>,
    /// The run's context (what every step's input includes).
    context: Vec<u8>,
    target: StepId,
    /// The successes of the runs this one resumes, by step.
    recorded: BTreeMap<StepId, Success>,
}

/// Reads the task's pipeline and target; the run's end when they cannot be.
fn prepare(runner: &mut Runner, task: &Task, options: &Options) -> Result<Prepared, RunEnd> {
    let pipeline = pipelines::resolve(runner.host.store.root(), &task.pipeline).map_err(|p| {
        runner.note(p.to_string());
        RunEnd::failed(RunEndReason::PipelineError(p.to_string()), true)
    })?;
    if pipeline.version() != task.pipeline_version {
        runner.note(format!(
            "pipeline {} is now version {} (the task was created with version {}): steps whose definition changed run again",
            pipeline.name(),
            pipeline.version(),
            task.pipeline_version
        ));
    }
    let target = pipelines::run_target(&pipeline, task).map_err(|p| {
        runner.note(p.to_string());
        RunEnd::failed(RunEndReason::InvalidTarget(Some(p.to_string())), false)
    })?;
    let recorded = task
        .resumable_successes(runner.resumed_from)
        .iter()
        .filter_map(|(id, s)| {
            let success = Success {
                input: ContentHash(s.input),
                artifact: ContentHash(s.artifact),
            };
            Some((StepId::parse(id).ok()?, success))
        })
        .collect();
    let titles = pipeline
        .steps()
        .iter()
        .map(|s| (s.id.clone(), s.title.clone()))
        .collect();
    let launcher = Arc::new(Launcher {
        root: runner.host.store.root().clone(),
        pipeline: Arc::new(pipeline),
        task: Arc::new(task.clone()),
        titles: Arc::new(titles),
        backend: options.backend.clone(),
        timeout: options.step_timeout,
        servers: options.servers.clone(),
        report: options.report,
        made: Mutex::default(),
    });
    Ok(Prepared {
        launcher,
        context: pipelines::context(task),
        target,
        recorded,
    })
}

/// A task's steps as the settle loop runs them: the schedule decides what
/// is ready, the launcher does each step's work.
struct TaskSteps<'r> {
    runner: &'r mut Runner,
    prepared: &'r Prepared,
    schedule: Schedule<'r>,
    /// Each settled step's artifact.
    settled: BTreeMap<StepId, ContentHash>,
    running: BTreeSet<StepId>,
    /// The first step that failed: nothing more starts.
    failed: Option<RunEnd>,
    /// Artifacts recorded whose file is written once their end is.
    to_write: Vec<(StepId, Vec<u8>)>,
}

impl StepKind for TaskSteps<'_> {
    type Work = Job;
    type Done = StepResult;
    type Failure = RunEnd;

    async fn next(&mut self, room: usize, idle: bool) -> Result<Next<Job, RunEnd>, StoreError> {
        if self.failed.is_some() {
            // Nothing more starts; the run ends once nothing runs.
            return Ok(match self.failed.take_if(|_| idle) {
                Some(end) => Next::Settle(Settled::Failed(end)),
                None => Next::Start(Vec::new()),
            });
        }
        let recorded = &self.prepared.recorded;
        let starts = ready(
            &self.schedule,
            &mut self.settled,
            recorded,
            &self.running,
            room,
        );
        if starts.is_empty() && idle {
            return Ok(Next::Settle(self.settle_idle()));
        }
        let launches = starts
            .into_iter()
            .map(|(step, input)| {
                self.running.insert(step.clone());
                let work = self
                    .prepared
                    .launcher
                    .job(step.clone(), input, &self.settled);
                let start = StepStart {
                    step: step.as_str().to_owned(),
                    input: input.0,
                    call: None,
                };
                Launch {
                    start,
                    blob: None,
                    work,
                }
            })
            .collect();
        Ok(Next::Start(launches))
    }

    fn launch(work: Job) -> BoxFuture<'static, StepResult> {
        Box::pin(work.perform())
    }

    fn step_of(done: &StepResult) -> &str {
        done.step.as_str()
    }

    fn started(&mut self, step: &str) {
        self.runner.note(format!("step {step} started"));
    }

    fn ended(&mut self, done: StepResult) -> End {
        let step = done.step.clone();
        self.running.remove(&step);
        match done.outcome {
            Ok(produced) => self.succeeded(step, done.input, produced),
            Err(failure) => {
                self.runner
                    .note(format!("step {step} failed: {}", failure.message));
                let command = self.fail(
                    step.as_str(),
                    &failure.class,
                    &failure.message,
                    failure.recoverable,
                );
                End {
                    command,
                    blob: None,
                }
            }
        }
    }

    fn unstored(&mut self, step: &str, error: &StoreError) -> Command {
        if let Ok(id) = StepId::parse(step) {
            self.settled.remove(&id);
        }
        self.to_write.retain(|(id, _)| id.as_str() != step);
        let message = format!("the artifact could not be stored: {error}");
        self.fail(step, "storage_error", &message, true)
    }

    fn cancelled(&mut self, step: &str, cut: Cut) -> Command {
        let (class, message) = match cut {
            Cut::Stopped => ("cancelled", "the run was stopped".to_owned()),
            Cut::Inactive(limit) => (
                "inactivity_timeout",
                format!("no step progressed for {} s", limit.as_secs_f64()),
            ),
        };
        self.runner
            .note(format!("step {step} cancelled: {message}"));
        failure(&self.runner.host, step, class, &message, true)
    }

    async fn recorded(&mut self) -> Result<(), StoreError> {
        self.runner.flush_log().await?;
        let written = std::mem::take(&mut self.to_write);
        if written.is_empty() {
            return Ok(());
        }
        let root = self.runner.host.store.root().clone();
        let (pipeline, task) = (
            Arc::clone(&self.prepared.launcher.pipeline),
            self.runner.host.task,
        );
        // Only the new files: the whole folder is written when the run ends.
        let _ = off_workers(move || {
            for (step, bytes) in written {
                if let Err(error) =
                    crate::task_files::write_artifact(&root, &pipeline, &task, &step, &bytes)
                {
                    tracing::warn!("task {task}: files not written: {error}");
                }
            }
        })
        .await;
        Ok(())
    }
}

impl TaskSteps<'_> {
    /// How the run settles when nothing runs and nothing is ready.
    fn settle_idle(&self) -> Settled<RunEnd> {
        if self
            .schedule
            .steps()
            .iter()
            .all(|s| self.settled.contains_key(s))
        {
            return Settled::Completed;
        }
        // Cannot happen in a DAG.
        let stuck = RunEndReason::WorkerError(Some("no step is ready".into()));
        Settled::Failed(RunEnd::failed(stuck, true))
    }

    /// A step's success: its artifact settles it (the steps it lets start
    /// are asked for with its end recorded).
    fn succeeded(&mut self, step: StepId, input: ContentHash, produced: Produced) -> End {
        for (n, reason) in produced.refusals.iter().enumerate() {
            self.runner.note(format!(
                "step {step}: answer {} refused ({reason}); asked again",
                n + 1
            ));
        }
        self.runner.note(format!(
            "step {step} done in {} ms",
            produced.duration.as_millis()
        ));
        let artifact = ContentHash::of_bytes(&produced.bytes);
        self.settled.insert(step.clone(), artifact);
        if produced.bytes.len() <= INLINE_BLOB_BYTES_MAX {
            let launcher = &self.prepared.launcher;
            launcher.remember(artifact.0, produced.bytes.clone());
        }
        self.to_write.push((step.clone(), produced.bytes.clone()));
        let command = Command::SucceedStep {
            task: self.runner.host.task,
            run: self.runner.host.run,
            step: step.as_str().to_owned(),
            input: input.0,
            artifact: artifact.0,
            bytes: produced.bytes.len() as u64,
            duration_ms: u64::try_from(produced.duration.as_millis()).unwrap_or(u64::MAX),
            tokens_in: produced.tokens_in.unwrap_or(0),
            tokens_out: produced.tokens_out.unwrap_or(0),
        };
        End {
            command,
            blob: Some(produced.bytes),
        }
    }

    /// A step's failure, the first of which ends the run once nothing runs.
    fn fail(&mut self, step: &str, class: &str, message: &str, recoverable: bool) -> Command {
        self.failed.get_or_insert(RunEnd {
            outcome: RunOutcome::Failed,
            reason: Some(RunEndReason::Step(class.to_owned())),
            failed_step: Some(step.to_owned()),
            recoverable,
        });
        failure(&self.runner.host, step, class, message, recoverable)
    }
}

/// A step's failure as recorded, its message clipped.
fn failure(host: &RunHost, step: &str, class: &str, message: &str, recoverable: bool) -> Command {
    Command::FailStep {
        task: host.task,
        run: host.run,
        step: step.to_owned(),
        class: class.to_owned(),
        message: planb_core::text::clip(message, planb_core::state::tasks::STEP_MESSAGE_CHARS_MAX),
        recoverable,
    }
}

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
        match &def.action {
            Action::Model { prompt, answer } => {
                let first =
                    pipelines::fill(prompt, &self.shared.task, def, &self.shared.titles, &inputs);
                self.model(first, answer.as_deref()).await
            }
            Action::Render { what } if what == "report" => self.report(def, &inputs),
            Action::Render { what } => Err(StepFailure {
                class: "unsupported".into(),
                message: format!("no renderer {what:?}"),
                recoverable: false,
            }),
            Action::Tool { server, tool, args } => self.tool(server, tool, args, &inputs).await,
            _ => Err(StepFailure {
                class: "unsupported".into(),
                message: "this kind of step is not run yet".into(),
                recoverable: false,
            }),
        }
    }

    /// Asks the model `first`, and again (saying why) while its answer is
    /// refused, up to [`ANSWER_ATTEMPTS`] answers within the step's time.
    async fn model(&self, first: String, answer: Option<&str>) -> Result<Produced, StepFailure> {
        let deadline = Instant::now() + self.shared.timeout;
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
            let reason = match checked_answer(answer, &reply.text) {
                Ok(kept) => {
                    produced.bytes = kept.into_bytes();
                    return Ok(produced);
                }
                Err(reason) => reason,
            };
            if produced.refusals.len() + 1 >= ANSWER_ATTEMPTS {
                return Err(StepFailure {
                    class: "model_answer_invalid".into(),
                    message: format!(
                        "the model's answer was refused {ANSWER_ATTEMPTS} times; the last time: {reason}"
                    ),
                    recoverable: true,
                });
            }
            text = format!(
                "{first}\n\nYour previous answer was refused: {reason}. \
                 Answer again, following the instructions exactly."
            );
            produced.refusals.push(reason.to_string());
        }
    }

    /// Draws the report page from the step's needs.
    fn report(
        &self,
        def: &planb_core::dag::StepDef,
        inputs: &BTreeMap<StepId, String>,
    ) -> Result<Produced, StepFailure> {
        let started = Instant::now();
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
        let task = &self.shared.task;
        let title = format!("Plan: {}", first_line(&task.prompt));
        let html = render(&title, &task.prompt, &task.created_at.to_human(), &sections);
        Ok(Produced {
            bytes: html.into_bytes(),
            duration: started.elapsed(),
            tokens_in: None,
            tokens_out: None,
            refusals: Vec::new(),
        })
    }

    /// Calls `server`'s `tool` with `args`, `${need}` resolved to that
    /// need's artifact (its JSON when it is JSON, else its text).
    async fn tool(
        &self,
        server: &str,
        tool: &str,
        args: &str,
        inputs: &BTreeMap<StepId, String>,
    ) -> Result<Produced, StepFailure> {
        let started = Instant::now();
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
        let variables: serde_json::Map<String, serde_json::Value> = inputs
            .iter()
            .map(|(id, text)| {
                let value = serde_json::from_str(text)
                    .unwrap_or_else(|_| serde_json::Value::String(text.clone()));
                (id.as_str().to_owned(), value)
            })
            .collect();
        let args = planb_core::exec_plan::resolve_args(&args, &variables);
        let failed = |class: &str, message: String| StepFailure {
            class: class.into(),
            message,
            recoverable: true,
        };
        let answer = servers
            .call(server, tool, args, self.shared.timeout)
            .await
            .map_err(|e| failed(e.class, e.message))?;
        let value = answer
            .value()
            .map_err(|message| failed("tool_error", format!("{server}__{tool}: {message}")))?;
        let bytes = match value {
            serde_json::Value::String(text) => text.into_bytes(),
            other => serde_json::to_vec_pretty(&other).unwrap_or_default(),
        };
        if bytes.is_empty() {
            return Err(failed(
                "tool_error",
                format!("{server}__{tool} returned nothing"),
            ));
        }
        Ok(Produced {
            bytes,
            duration: started.elapsed(),
            tokens_in: None,
            tokens_out: None,
            refusals: Vec::new(),
        })
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
            checked_answer(None, "## Text\n").ok().as_deref(),
            Some("## Text\n")
        );
        assert_eq!(
            checked_answer(None, " \n ")
                .expect_err("refused")
                .to_string(),
            "the answer is empty"
        );
        assert_eq!(
            checked_answer(Some("json"), "```json\n{\"a\": 1}\n```")
                .ok()
                .as_deref(),
            Some("{\"a\": 1}")
        );
        assert!(
            checked_answer(Some("json"), "Sure! Here it is.")
                .expect_err("refused")
                .to_string()
                .starts_with("the answer is not JSON")
        );
        let schedule =
            r#"{"tasks": [{"id": "1", "name": "A", "duration_days": 2, "depends_on": ["9"]}]}"#;
        assert!(checked_answer(Some("json"), schedule).is_ok());
        assert_eq!(
            checked_answer(Some("schedule"), schedule)
                .expect_err("refused")
                .to_string(),
            "tasks[0].depends_on: no task \"9\""
        );
    }
}
