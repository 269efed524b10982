//! The DAG engine's tasks and runs: what the log says
//! about each task, and which changes are allowed. A refused change carries
//! the error code ([`TaskErrorCode`]) for the tools to return.
//!
//! A task is a pipeline and an immutable configuration; a run is one attempt
//! at it. At most one run of a task is active (`running` or `stopping`); a
//! completed task is not run again (a new task is). A step's success is kept
//! across runs with the input hash it ran on, which is what lets a resumed
//! run skip it (see `dag::Schedule`); an edited artifact replaces the
//! success's artifact, so the steps that read it run again. A run of a task
//! that resumes nothing while earlier runs exist is a retry: it starts from
//! the first step, and the earlier successes leave the task's current view
//! (their runs keep them).
//!
//! A task's lifecycle for a caller: created (no run), active (a run exists),
//! archived (frozen: readable, never run, edited or stopped again). A
//! deleted task is gone for every command; its history stays in the log.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::State;
pub use super::decide::TaskErrorCode;
use super::decide::{Command, INLINE_BLOB_BYTES_MAX, INLINE_BLOBS_BYTES_MAX, Rejection, StepStart};
use crate::dag::StepId;
use crate::event::{EventBody, RunOutcome};
use crate::id::{RunId, TaskId};
use crate::time::Timestamp;

/// Longest task prompt, in characters.
pub const TASK_PROMPT_CHARS_MAX: usize = 100_000;
/// Most run-log lines in one event.
pub const RUN_LOG_LINES_MAX: usize = 100;
/// Longest run-log line, in characters.
pub const RUN_LOG_LINE_CHARS_MAX: usize = 2_000;
/// Longest failure message of a step, in characters.
pub const STEP_MESSAGE_CHARS_MAX: usize = 10_000;
/// Run-log lines each task keeps in memory for `task_logs_tail`.
pub const LOG_TAIL_LINES: usize = 500;
/// Why a run whose process died was ended (`failed`, recoverable): the
/// process that finds it so records it. A run its own process ends never
/// has this reason alone.
pub const LOST_RUN_REASON: &str = "worker_error";
/// Why a run ended other than completed, as its `RunEnded` event records it
/// (`reason`). The wire strings are the ones the log has always held: a
/// code, and for some a `: ` and what went wrong.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum RunEndReason {
    /// `worker_error`: its process died (alone: found lost by another
    /// process, [`LOST_RUN_REASON`]) or could not record its steps (with
    /// what went wrong).
    WorkerError(Option<String>),
    /// `inactivity_timeout`: no step started or ended within the limit.
    InactivityTimeout,
    /// `pipeline_error: …`: the task's pipeline could not be read.
    PipelineError(String),
    /// `INVALID_TARGET`, `INVALID_TARGET: …`: the target is not a step.
    InvalidTarget(Option<String>),
    /// `step_failed`: a step of an execution plan failed.
    StepFailed,
    /// A task's failed step's class (`model_timeout`, `model_error`, …).
    Step(String),
}

impl RunEndReason {
    /// The text the event records.
    pub fn to_wire(&self) -> String {
        let with = |code: &str, detail: &Option<String>| match detail {
            Some(detail) => format!("{code}: {detail}"),
            None => code.to_owned(),
        };
        match self {
            RunEndReason::WorkerError(detail) => with(LOST_RUN_REASON, detail),
            RunEndReason::InactivityTimeout => "inactivity_timeout".to_owned(),
            RunEndReason::PipelineError(detail) => format!("pipeline_error: {detail}"),
            RunEndReason::InvalidTarget(detail) => with("INVALID_TARGET", detail),
            RunEndReason::StepFailed => "step_failed".to_owned(),
            RunEndReason::Step(class) => class.clone(),
        }
    }

    /// The reason a recorded text says (any text not another's is a step's
    /// class).
    pub fn parse(wire: &str) -> RunEndReason {
        let (code, detail) = match wire.split_once(": ") {
            Some((code, detail)) => (code, Some(detail.to_owned())),
            None => (wire, None),
        };
        match (code, detail) {
            (LOST_RUN_REASON, detail) => RunEndReason::WorkerError(detail),
            ("inactivity_timeout", None) => RunEndReason::InactivityTimeout,
            ("pipeline_error", Some(detail)) => RunEndReason::PipelineError(detail),
            ("INVALID_TARGET", detail) => RunEndReason::InvalidTarget(detail),
            ("step_failed", None) => RunEndReason::StepFailed,
            _ => RunEndReason::Step(wire.to_owned()),
        }
    }

    /// Whether another process found the run lost (its process died).
    pub fn is_lost(&self) -> bool {
        *self == RunEndReason::WorkerError(None)
    }
}

impl std::fmt::Display for RunEndReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_wire())
    }
}

/// How much detail a task's runs go into (`speed_vs_detail`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Speed {
    /// One model call that checks the setup; no report.
    Ping,
    /// Every step, briefly.
    Fast,
    /// Every step in full.
    All,
}

impl Speed {
    /// Every speed, in the order they are offered.
    pub const EVERY: [Speed; 3] = [Speed::Ping, Speed::Fast, Speed::All];

    /// `ping`, `fast` or `all`, as recorded and as the tools take it.
    pub fn as_str(self) -> &'static str {
        match self {
            Speed::Ping => "ping",
            Speed::Fast => "fast",
            Speed::All => "all",
        }
    }

    /// The speed named `text`, if any.
    pub fn parse(text: &str) -> Option<Speed> {
        Speed::EVERY.into_iter().find(|s| s.as_str() == text)
    }

    /// What a value that names no speed is told.
    pub fn refusal(text: &str) -> String {
        format!("speed_vs_detail: {text:?} is not one of ping, fast, all")
    }
}

/// A long-running task.
#[derive(Clone, PartialEq, Debug, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct Task {
    /// Its id.
    pub id: TaskId,
    /// When it was created.
    pub created_at: Timestamp,
    /// The latest event touching it.
    pub updated_at: Timestamp,
    /// The pipeline's name.
    pub pipeline: String,
    /// The pipeline's version.
    pub pipeline_version: u32,
    /// What to plan.
    pub prompt: String,
    /// `ping`, `fast` or `all`.
    pub speed: String,
    /// The step the runs aim at.
    pub target: String,
    /// The model profile, when one was asked for.
    pub model_profile: Option<String>,
    /// The caller's idempotency key.
    pub client_request_id: Option<String>,
    /// The project it was made for, when its creator knew it.
    pub project_path: Option<String>,
    /// Every run, oldest first. A copy costs the same however many runs
    /// there are; archived as plain runs.
    #[rkyv(with = RunsAsVec)]
    pub runs: Runs,
    /// Each step's latest success in any run, with an edit's artifact in
    /// place of the one it produced.
    pub successes: BTreeMap<String, StepSuccess>,
    /// The latest run-log lines of every run, oldest first, at most
    /// [`LOG_TAIL_LINES`].
    pub log_tail: std::collections::VecDeque<LogLine>,
    /// Run-log lines recorded over all runs; the next line's number.
    pub log_lines: u64,
    /// For an execution plan: its title, definition and whether it was
    /// deleted. `None` for a task of a pipeline.
    pub plan: Option<PlanInfo>,
    /// When it was archived.
    pub archived_at: Option<Timestamp>,
    /// When it was deleted.
    pub deleted_at: Option<Timestamp>,
}

/// A task's runs, oldest first.
///
/// Every step changes the latest run, and tasks are copied out of the state
/// on every call that looks at one: the runs before the latest are shared
/// (`Arc`), so a copy costs two pointers and a change to the latest run
/// copies that run alone (when a copy holds it). The shared runs are copied
/// only when a run starts while a copy of the task is held, or when an
/// earlier run changes (its end recorded late).
#[derive(Clone, PartialEq, Debug, Default)]
pub struct Runs {
    earlier: Arc<Vec<Arc<Run>>>,
    /// `Some` exactly when there is a run.
    latest: Option<Arc<Run>>,
}

impl Runs {
    /// How many runs.
    pub fn len(&self) -> usize {
        self.earlier.len() + usize::from(self.latest.is_some())
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.latest.is_none()
    }

    /// The newest.
    pub fn last(&self) -> Option<&Arc<Run>> {
        self.latest.as_ref()
    }

    /// The `index`th, from the oldest.
    pub fn get(&self, index: usize) -> Option<&Arc<Run>> {
        self.earlier
            .get(index)
            .or_else(|| self.latest.as_ref().filter(|_| index == self.earlier.len()))
    }

    /// Oldest first.
    pub fn iter(&self) -> RunsIter<'_> {
        RunsIter {
            earlier: self.earlier.iter(),
            latest: self.latest.as_ref(),
        }
    }

    fn push(&mut self, run: Arc<Run>) {
        if let Some(previous) = self.latest.replace(run) {
            Arc::make_mut(&mut self.earlier).push(previous);
        }
    }

    /// The run `id`, to change: the latest is looked at first.
    fn find_mut(&mut self, id: RunId) -> Option<&mut Run> {
        if self.latest.as_ref().is_some_and(|r| r.id == id) {
            return self.latest.as_mut().map(Arc::make_mut);
        }
        if !self.earlier.iter().any(|r| r.id == id) {
            return None;
        }
        Arc::make_mut(&mut self.earlier)
            .iter_mut()
            .rev()
            .find(|r| r.id == id)
            .map(Arc::make_mut)
    }
}

impl std::ops::Index<usize> for Runs {
    type Output = Arc<Run>;

    fn index(&self, index: usize) -> &Arc<Run> {
        self.get(index)
            .unwrap_or_else(|| panic!("run {index} of {}", self.len()))
    }
}

impl<'a> IntoIterator for &'a Runs {
    type Item = &'a Arc<Run>;
    type IntoIter = RunsIter<'a>;

    fn into_iter(self) -> RunsIter<'a> {
        self.iter()
    }
}

impl FromIterator<Run> for Runs {
    fn from_iter<I: IntoIterator<Item = Run>>(runs: I) -> Runs {
        let mut all = Runs::default();
        for run in runs {
            all.push(Arc::new(run));
        }
        all
    }
}

/// A task's runs, oldest first.
#[derive(Clone, Debug)]
pub struct RunsIter<'a> {
    earlier: std::slice::Iter<'a, Arc<Run>>,
    latest: Option<&'a Arc<Run>>,
}

impl<'a> Iterator for RunsIter<'a> {
    type Item = &'a Arc<Run>;

    fn next(&mut self) -> Option<&'a Arc<Run>> {
        self.earlier.next().or_else(|| self.latest.take())
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let len = self.earlier.len() + usize::from(self.latest.is_some());
        (len, Some(len))
    }
}

impl DoubleEndedIterator for RunsIter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.latest.take().or_else(|| self.earlier.next_back())
    }
}

impl ExactSizeIterator for RunsIter<'_> {}

/// Archives [`Runs`] as a plain vector of runs: the layout snapshots had
/// when the runs were one `Vec`.
#[derive(Debug)]
pub struct RunsAsVec;

impl rkyv::with::ArchiveWith<Runs> for RunsAsVec {
    type Archived = rkyv::vec::ArchivedVec<ArchivedRun>;
    type Resolver = rkyv::vec::VecResolver;

    fn resolve_with(field: &Runs, resolver: Self::Resolver, out: rkyv::Place<Self::Archived>) {
        rkyv::vec::ArchivedVec::resolve_from_len(field.len(), resolver, out);
    }
}

impl<S> rkyv::with::SerializeWith<Runs, S> for RunsAsVec
where
    S: rkyv::rancor::Fallible + rkyv::ser::Allocator + rkyv::ser::Writer + ?Sized,
    Run: rkyv::Serialize<S, Archived = ArchivedRun>,
{
    fn serialize_with(field: &Runs, s: &mut S) -> Result<Self::Resolver, S::Error> {
        rkyv::vec::ArchivedVec::<ArchivedRun>::serialize_from_iter::<Run, _, _>(
            field.iter().map(|run| &**run),
            s,
        )
    }
}

impl<D> rkyv::with::DeserializeWith<rkyv::vec::ArchivedVec<ArchivedRun>, Runs, D> for RunsAsVec
where
    D: rkyv::rancor::Fallible + ?Sized,
    ArchivedRun: rkyv::Deserialize<Run, D>,
{
    fn deserialize_with(
        field: &rkyv::vec::ArchivedVec<ArchivedRun>,
        d: &mut D,
    ) -> Result<Runs, D::Error> {
        let mut runs = Runs::default();
        for archived in field.iter() {
            runs.push(Arc::new(rkyv::Deserialize::deserialize(archived, d)?));
        }
        Ok(runs)
    }
}

/// What an execution plan adds to its task.
#[derive(Clone, PartialEq, Eq, Debug, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct PlanInfo {
    /// The plan's title.
    pub title: String,
    /// The checked plan as compact JSON.
    pub definition: String,
    /// Deleted plans are not listed or run.
    pub deleted: bool,
}

impl PlanInfo {
    /// The recorded plan, read back and checked.
    pub fn exec_plan(&self) -> Result<crate::exec_plan::ExecPlan, UnreadablePlan> {
        crate::exec_plan::ExecPlan::from_definition(&self.definition).map_err(UnreadablePlan)
    }
}

/// A recorded plan that does not read back, and why.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
#[error("the recorded plan cannot be read: {0}")]
pub struct UnreadablePlan(pub crate::exec_plan::DefinitionReadError);

/// The pipeline name an execution plan's task carries.
pub const EXEC_PLAN_PIPELINE: &str = "exec-plan";
/// Longest execution plan definition (compact JSON), in bytes.
pub const PLAN_DEFINITION_BYTES_MAX: usize = crate::exec_plan::PLAN_JSON_BYTES_MAX;

/// A run-log line.
#[derive(Clone, PartialEq, Eq, Debug, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct LogLine {
    /// Its number within the task, from 1: the cursor `task_logs_tail` pages by.
    pub number: u64,
    /// The run that wrote it.
    pub run: RunId,
    /// When.
    pub at: Timestamp,
    /// The text.
    pub text: String,
}

/// A step's latest success.
#[derive(Clone, Copy, PartialEq, Eq, Debug, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct StepSuccess {
    /// The input hash it ran on.
    pub input: [u8; 32],
    /// The artifact now (SHA-256 of its bytes).
    pub artifact: [u8; 32],
    /// Its size.
    pub bytes: u64,
    /// Whether the artifact was edited after the step produced it.
    pub edited: bool,
    /// When the artifact last changed.
    pub at: Timestamp,
}

/// Where a run is.
#[derive(Clone, Copy, PartialEq, Eq, Debug, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub enum RunState {
    /// Steps are running.
    Running,
    /// A stop was asked for; the worker is winding down.
    Stopping,
    /// Stopped on request; resumable.
    Stopped,
    /// Every step of the target's closure succeeded.
    Completed,
    /// Failed; see `reason` and `recoverable`.
    Failed,
}

impl RunState {
    /// `running`, `stopping`, … as the tools report it.
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Stopping => "stopping",
            RunState::Stopped => "stopped",
            RunState::Completed => "completed",
            RunState::Failed => "failed",
        }
    }

    /// Whether the run may still change.
    pub fn is_active(self) -> bool {
        matches!(self, RunState::Running | RunState::Stopping)
    }
}

/// One attempt at a task.
#[derive(Clone, PartialEq, Debug, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct Run {
    /// Its id.
    pub id: RunId,
    /// The run it resumes.
    pub resumed_from: Option<RunId>,
    /// The worker's process id.
    pub owner_pid: u32,
    /// The worker's host.
    pub host: String,
    /// When it started.
    pub started_at: Timestamp,
    /// When a step last started, succeeded or failed (or the run started).
    pub last_progress_at: Timestamp,
    /// Where it is.
    pub state: RunState,
    /// When it ended.
    pub ended_at: Option<Timestamp>,
    /// Why it failed.
    pub reason: Option<String>,
    /// The step that failed.
    pub failed_step: Option<String>,
    /// Whether resuming may succeed.
    pub recoverable: bool,
    /// Steps started and not ended.
    pub running: BTreeSet<String>,
    /// The latest attempt of each step started in this run.
    pub attempts: BTreeMap<String, u32>,
    /// Steps that succeeded in this run.
    pub succeeded: BTreeSet<String>,
    /// Step failures in this run.
    pub failures: u32,
    /// Run-log lines recorded.
    pub log_lines: u64,
    /// An execution plan's call-time variables (a JSON object).
    pub variables: Option<String>,
}

/// The attempt number of `step` starting in `active`, once its name is
/// checked and `running` says it does not run already.
fn start_attempt(
    found: &Task,
    active: &Run,
    step: &String,
    running: impl Fn(&String) -> bool,
) -> Result<u32, Rejection> {
    if found.plan.is_some() {
        crate::exec_plan::check_step_index(step)
            .map_err(|e| refuse(TaskErrorCode::InvalidArgument, format!("step: {e}")))?;
    } else {
        step_name("step", step)?;
    }
    if running(step) {
        return Err(refuse(
            TaskErrorCode::Conflict,
            format!("step {step} is running already"),
        ));
    }
    Ok(active.attempts.get(step).map_or(1, |a| a.saturating_add(1)))
}

fn refuse(code: TaskErrorCode, message: impl Into<String>) -> Rejection {
    Rejection::Task {
        code,
        message: message.into(),
    }
}

/// The blobs a [`Command::SettleAndStart`] records in the log: each, and
/// all of them together, within their limits.
fn inline_fits(inline: &[Vec<u8>]) -> Result<(), Rejection> {
    let total: usize = inline.iter().map(Vec::len).sum();
    if let Some(big) = inline.iter().find(|b| b.len() > INLINE_BLOB_BYTES_MAX) {
        return Err(refuse(
            TaskErrorCode::Conflict,
            format!(
                "inline: a blob of {} bytes is over the {INLINE_BLOB_BYTES_MAX}-byte limit of the log",
                big.len()
            ),
        ));
    }
    if total > INLINE_BLOBS_BYTES_MAX {
        return Err(refuse(
            TaskErrorCode::Conflict,
            format!(
                "inline: {total} bytes of blobs is over the {INLINE_BLOBS_BYTES_MAX}-byte limit of one append"
            ),
        ));
    }
    Ok(())
}

fn step_name(field: &str, step: &str) -> Result<(), Rejection> {
    StepId::parse(step)
        .map(|_| ())
        .map_err(|e| refuse(TaskErrorCode::InvalidArgument, format!("{field}: {e}")))
}

/// A task's or a plan's project path: within the limit a session's has.
fn project(path: Option<&str>) -> Result<(), Rejection> {
    let actual = path.map_or(0, str::len);
    let max = super::decide::PROJECT_PATH_BYTES_MAX;
    if actual > max {
        return Err(refuse(
            TaskErrorCode::InvalidArgument,
            format!("project_path: must be at most {max} bytes (got {actual})"),
        ));
    }
    Ok(())
}

fn chars_at_most(field: &str, text: &str, max: usize) -> Result<(), Rejection> {
    let actual = text.chars().count();
    if actual > max {
        return Err(refuse(
            TaskErrorCode::InvalidArgument,
            format!("{field}: must be at most {max} characters (got {actual})"),
        ));
    }
    Ok(())
}

/// Where a task is in its life, as a caller sees it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Lifecycle {
    /// No run yet.
    Created,
    /// At least one run, running or not.
    Active,
    /// Frozen: readable, never run, edited or stopped again.
    Archived,
    /// Gone from every list and command (a task or an execution plan); its
    /// history stays in the log.
    Deleted,
}

impl Lifecycle {
    /// `created`, `active`, `archived`, `deleted` as the tools report it.
    pub fn as_str(self) -> &'static str {
        match self {
            Lifecycle::Created => "created",
            Lifecycle::Active => "active",
            Lifecycle::Archived => "archived",
            Lifecycle::Deleted => "deleted",
        }
    }
}

impl Task {
    /// Its speed (`None` for an execution plan, which has none).
    pub fn speed(&self) -> Option<Speed> {
        Speed::parse(&self.speed)
    }

    /// Where the task is in its life.
    pub fn lifecycle(&self) -> Lifecycle {
        if self.deleted_at.is_some() || self.plan.as_ref().is_some_and(|p| p.deleted) {
            Lifecycle::Deleted
        } else if self.archived_at.is_some() {
            Lifecycle::Archived
        } else if self.runs.is_empty() {
            Lifecycle::Created
        } else {
            Lifecycle::Active
        }
    }

    /// Refuses a deleted task (`TASK_NOT_FOUND`).
    fn live(&self) -> Result<(), Rejection> {
        if self.deleted_at.is_some() || self.plan.as_ref().is_some_and(|p| p.deleted) {
            return Err(refuse(
                TaskErrorCode::TaskNotFound,
                format!("task_id: task {} was deleted", self.id),
            ));
        }
        Ok(())
    }

    /// Refuses a deleted or an archived task (`CONFLICT` for an archived one:
    /// it is never run, edited or stopped again).
    fn changeable(&self) -> Result<(), Rejection> {
        self.live()?;
        if self.archived_at.is_some() {
            return Err(refuse(
                TaskErrorCode::Conflict,
                format!(
                    "task {} is archived: it can be read, not run, edited or stopped",
                    self.id
                ),
            ));
        }
        Ok(())
    }

    /// Whether a new run may start now: not while a run is active, not of a
    /// deleted or archived task, not of a completed task of a pipeline (a
    /// plan is a recipe: running it again is expected). The rule
    /// `StartRun` is decided by, for a caller to answer before starting a
    /// worker.
    pub fn may_start_run(&self) -> Result<(), Rejection> {
        self.changeable()?;
        if let Some(active) = self.active_run() {
            return Err(refuse(
                TaskErrorCode::RunAlreadyActive,
                format!(
                    "run {} of task {} is {}",
                    active.id,
                    self.id,
                    active.state.as_str()
                ),
            ));
        }
        if self.plan.is_none()
            && self
                .runs
                .last()
                .is_some_and(|r| r.state == RunState::Completed && !self.edited_since(r))
        {
            return Err(refuse(
                TaskErrorCode::Conflict,
                format!(
                    "task {} is completed; edit an artifact (task_artifact_write) to compute \
                     again what depends on it, or create a new task to plan again",
                    self.id
                ),
            ));
        }
        Ok(())
    }

    /// Whether an artifact was edited since `run` ended: then a completed
    /// task runs again, to compute what depends on the edit (the steps
    /// whose inputs changed; the rest is reused).
    fn edited_since(&self, run: &Run) -> bool {
        run.ended_at.is_some_and(|ended| {
            self.successes
                .values()
                .any(|success| success.edited && success.at >= ended)
        })
    }

    /// The active run (`running` or `stopping`), if any.
    pub fn active_run(&self) -> Option<&Run> {
        self.runs
            .last()
            .map(|run| &**run)
            .filter(|run| run.state.is_active())
    }

    /// The successes a run resuming `from` may reuse: those of the steps
    /// that succeeded in `from` or in the runs it resumed in turn, back to
    /// the run that started afresh (given the latest run, what it and the
    /// runs it resumed have done). A resume continues the run it resumes:
    /// an earlier, separate run that made the same call does not count, or
    /// the work the interrupted run had not done would never happen.
    ///
    /// A resume always resumes the latest run, so the chain is the newest
    /// runs; should a run outside the chain come between (never recorded
    /// today), the chain is cut there, and the steps are called again.
    pub fn resumable_successes(&self, from: Option<RunId>) -> BTreeMap<String, StepSuccess> {
        let mut done: BTreeSet<&str> = BTreeSet::new();
        let mut wanted = from;
        for run in self.runs.iter().rev() {
            if wanted != Some(run.id) {
                break;
            }
            done.extend(run.succeeded.iter().map(String::as_str));
            wanted = run.resumed_from;
        }
        self.successes
            .iter()
            .filter(|(step, _)| done.contains(step.as_str()))
            .map(|(step, success)| (step.clone(), *success))
            .collect()
    }

    fn run(&self, run: RunId) -> Result<&Run, Rejection> {
        // Newest first: the run asked for is nearly always the last.
        self.runs
            .iter()
            .rev()
            .find(|r| r.id == run)
            .map(|r| &**r)
            .ok_or_else(|| {
                refuse(
                    TaskErrorCode::RunNotFound,
                    format!("run {run} is not a run of task {}", self.id),
                )
            })
    }

    fn active(&self, run: RunId) -> Result<&Run, Rejection> {
        let found = self.run(run)?;
        if !found.state.is_active() {
            return Err(refuse(
                TaskErrorCode::RunNotActive,
                format!("run {run} is {}, not active", found.state.as_str()),
            ));
        }
        Ok(found)
    }

    fn run_mut(&mut self, run: RunId) -> Option<&mut Run> {
        self.runs.find_mut(run)
    }
}

impl State {
    /// Every task, by id.
    pub fn tasks(&self) -> &BTreeMap<TaskId, Task> {
        &self.tasks
    }

    /// One task.
    pub fn task(&self, id: &TaskId) -> Option<&Task> {
        self.tasks.get(id)
    }

    /// The task created with this idempotency key.
    pub fn task_by_request(&self, client_request_id: &str) -> Option<&Task> {
        self.tasks
            .values()
            .find(|t| t.client_request_id.as_deref() == Some(client_request_id))
    }

    /// A task of a pipeline (not an execution plan), unless it was deleted.
    pub fn pipeline_task(&self, id: &TaskId) -> Option<&Task> {
        self.tasks
            .get(id)
            .filter(|t| t.plan.is_none() && t.deleted_at.is_none())
    }

    /// Every task of a pipeline not deleted, by id; execution plans are
    /// left out.
    pub fn pipeline_tasks(&self) -> impl Iterator<Item = &Task> {
        self.tasks
            .values()
            .filter(|t| t.plan.is_none() && t.deleted_at.is_none())
    }

    /// Every execution plan not deleted, by id.
    pub fn exec_plans(&self) -> impl Iterator<Item = &Task> {
        self.tasks
            .values()
            .filter(|t| t.plan.as_ref().is_some_and(|p| !p.deleted))
    }

    /// The execution plan `id`, unless it was deleted.
    pub fn exec_plan(&self, id: &TaskId) -> Option<&Task> {
        self.tasks
            .get(id)
            .filter(|t| t.plan.as_ref().is_some_and(|p| !p.deleted))
    }

    /// Whether a create command repeats an earlier one (its idempotency key
    /// is known: nothing to record); refuses a taken id or a key too long.
    /// A key is a repeat only of a create of the same kind (`plan`: an
    /// execution plan, else a pipeline task).
    fn is_repeat(
        &self,
        task: TaskId,
        client_request_id: Option<&str>,
        plan: bool,
    ) -> Result<bool, Rejection> {
        if let Some(key) = client_request_id {
            if let Some(earlier) = self.task_by_request(key) {
                let plan_deleted = earlier.plan.as_ref().is_some_and(|p| p.deleted);
                if earlier.deleted_at.is_some() || plan_deleted {
                    let kind = if plan_deleted { "plan" } else { "task" };
                    return Err(refuse(
                        TaskErrorCode::Conflict,
                        format!(
                            "client_request_id: {key:?} was used for {kind} {}, since deleted; use another key",
                            earlier.id
                        ),
                    ));
                }
                if earlier.plan.is_some() != plan {
                    return Err(refuse(
                        TaskErrorCode::Conflict,
                        format!(
                            "client_request_id: {key:?} was used for {} {}; use another key",
                            if plan { "task" } else { "execution plan" },
                            earlier.id
                        ),
                    ));
                }
                return Ok(true);
            }
            chars_at_most("client_request_id", key, 200)?;
        }
        if self.tasks.contains_key(&task) {
            return Err(refuse(
                TaskErrorCode::Conflict,
                format!("task {task} exists"),
            ));
        }
        Ok(false)
    }

    fn known_task(&self, task: TaskId) -> Result<&Task, Rejection> {
        self.tasks.get(&task).ok_or_else(|| {
            refuse(
                TaskErrorCode::TaskNotFound,
                format!("task_id: no task {task}"),
            )
        })
    }

    /// The task, unless it is unknown or deleted (`TASK_NOT_FOUND`).
    fn live_task(&self, task: TaskId) -> Result<&Task, Rejection> {
        let found = self.known_task(task)?;
        found.live()?;
        Ok(found)
    }

    /// The task, unless it is unknown, deleted or archived (`CONFLICT`: an
    /// archived task is never run, edited or stopped again).
    fn changeable_task(&self, task: TaskId) -> Result<&Task, Rejection> {
        let found = self.known_task(task)?;
        found.changeable()?;
        Ok(found)
    }

    /// [`Command::SettleAndStart`]: the ends, then each start.
    pub(super) fn decide_settle_and_start(
        &self,
        task: TaskId,
        run: RunId,
        ends: Vec<Command>,
        starts: Vec<StepStart>,
        inline: Vec<Vec<u8>>,
    ) -> Result<Vec<EventBody>, Rejection> {
        inline_fits(&inline)?;
        let mut bodies: Vec<EventBody> = inline
            .into_iter()
            .map(|bytes| EventBody::BlobStored { task, bytes })
            .collect();
        let ended = self.decide_ends(task, run, ends, &mut bodies)?;
        let found = self.known_task(task)?;
        let active = found.active(run)?;
        if active.state != RunState::Running {
            return Ok(bodies);
        }
        let mut starting: BTreeSet<String> = BTreeSet::new();
        for StepStart { step, input, call } in starts {
            let busy = |s: &String| {
                (active.running.contains(s) && !ended.contains(s)) || starting.contains(s)
            };
            let attempt = start_attempt(found, active, &step, busy)?;
            starting.insert(step.clone());
            bodies.push(EventBody::StepStarted {
                task,
                run,
                step,
                attempt,
                input,
                call,
            });
        }
        Ok(bodies)
    }

    /// The ends of a [`Command::SettleAndStart`], each a step's success or
    /// failure in `run` and no step twice, decided into `bodies`; the steps
    /// they end.
    fn decide_ends(
        &self,
        task: TaskId,
        run: RunId,
        ends: Vec<Command>,
        bodies: &mut Vec<EventBody>,
    ) -> Result<BTreeSet<String>, Rejection> {
        let mut ended: BTreeSet<String> = BTreeSet::new();
        for end in ends {
            let step = match &end {
                Command::SucceedStep {
                    task: t,
                    run: r,
                    step,
                    ..
                }
                | Command::FailStep {
                    task: t,
                    run: r,
                    step,
                    ..
                } if *t == task && *r == run => step.clone(),
                _ => {
                    return Err(refuse(
                        TaskErrorCode::Conflict,
                        "ends: each must be a step's success or failure in this run".to_owned(),
                    ));
                }
            };
            if !ended.insert(step.clone()) {
                return Err(refuse(
                    TaskErrorCode::Conflict,
                    format!("ends: step {step} ends twice"),
                ));
            }
            bodies.extend(self.decide_task(end)?);
        }
        Ok(ended)
    }

    /// Decides a task command: the event, none (a repeat that changes
    /// nothing), or a rejection with its code.
    pub(super) fn decide_task(&self, command: Command) -> Result<Option<EventBody>, Rejection> {
        match command {
            create @ Command::CreateTask { .. } => self.decide_create_task(create),
            create @ Command::CreatePlan { .. } => self.decide_create_plan(create),
            Command::DeletePlan { task } => self.decide_delete_plan(task),
            Command::ArchiveTask { task } => self.decide_archive_task(task),
            Command::DeleteTask { task } => self.decide_delete_task(task),
            Command::StartRun {
                task,
                run,
                resumed_from,
                owner_pid,
                host,
                variables,
            } => self.decide_start_run(task, run, resumed_from, owner_pid, host, variables),
            Command::StartStep { .. }
            | Command::SucceedStep { .. }
            | Command::FailStep { .. }
            | Command::EditArtifact { .. } => self.decide_step(command),
            Command::RequestStop { task } => self.decide_request_stop(task),
            Command::EndRun {
                task,
                run,
                outcome,
                reason,
                failed_step,
                recoverable,
            } => self.decide_end_run(task, run, outcome, reason, failed_step, recoverable),
            Command::AppendRunLog { task, run, lines } => {
                self.decide_append_run_log(task, run, lines)
            }
            other => unreachable!("decide_task is only called for task commands: {other:?}"),
        }
    }

    /// Decides a command about one step: its start, its end, or an edit of
    /// its artifact.
    fn decide_step(&self, command: Command) -> Result<Option<EventBody>, Rejection> {
        match command {
            Command::StartStep {
                task,
                run,
                step,
                input,
                call,
            } => self.decide_start_step(task, run, step, input, call),
            Command::SucceedStep {
                task,
                run,
                step,
                input,
                artifact,
                bytes,
                duration_ms,
                tokens_in,
                tokens_out,
            } => self.decide_succeed_step(
                task,
                run,
                step,
                input,
                artifact,
                bytes,
                duration_ms,
                tokens_in,
                tokens_out,
            ),
            Command::FailStep {
                task,
                run,
                step,
                class,
                message,
                recoverable,
            } => self.decide_fail_step(task, run, step, class, message, recoverable),
            Command::EditArtifact {
                task,
                step,
                artifact,
                bytes,
                by,
            } => self.decide_edit_artifact(task, step, artifact, bytes, by),
            other => unreachable!("decide_step is only called for step commands: {other:?}"),
        }
    }

    /// Decides a `CreateTask` command.
    fn decide_create_task(&self, command: Command) -> Result<Option<EventBody>, Rejection> {
        let Command::CreateTask {
            task,
            pipeline,
            pipeline_version,
            prompt,
            speed,
            target,
            model_profile,
            client_request_id,
            project_path,
        } = command
        else {
            unreachable!("decide_create_task is called with a CreateTask: {command:?}");
        };
        Ok(Some({
            if self.is_repeat(task, client_request_id.as_deref(), false)? {
                return Ok(None);
            }
            if prompt.trim().is_empty() {
                return Err(refuse(
                    TaskErrorCode::InvalidArgument,
                    "prompt: must not be empty",
                ));
            }
            chars_at_most("prompt", &prompt, TASK_PROMPT_CHARS_MAX)?;
            if Speed::parse(&speed).is_none() {
                return Err(refuse(
                    TaskErrorCode::InvalidArgument,
                    Speed::refusal(&speed),
                ));
            }
            step_name("target", &target)?;
            project(project_path.as_deref())?;
            EventBody::TaskCreated {
                task,
                pipeline,
                pipeline_version,
                prompt,
                speed,
                target,
                model_profile,
                client_request_id,
                project_path,
            }
        }))
    }

    /// Decides a `CreatePlan` command.
    fn decide_create_plan(&self, command: Command) -> Result<Option<EventBody>, Rejection> {
        let Command::CreatePlan {
            task,
            definition,
            client_request_id,
            project_path,
        } = command
        else {
            unreachable!("decide_create_plan is called with a CreatePlan: {command:?}");
        };
        Ok(Some({
            if self.is_repeat(task, client_request_id.as_deref(), true)? {
                return Ok(None);
            }
            if definition.len() > PLAN_DEFINITION_BYTES_MAX {
                return Err(refuse(
                    TaskErrorCode::Conflict,
                    format!(
                        "the plan is {} bytes; at most {PLAN_DEFINITION_BYTES_MAX} are accepted",
                        definition.len()
                    ),
                ));
            }
            // What is recorded must read back as the plan it claims to be.
            let plan = crate::exec_plan::ExecPlan::from_definition(&definition)
                .map_err(|e| refuse(TaskErrorCode::Conflict, format!("definition: {e}")))?;
            let title = plan.title;
            project(project_path.as_deref())?;
            EventBody::PlanCreated {
                task,
                title,
                definition,
                client_request_id,
                project_path,
            }
        }))
    }

    /// Decides a `DeletePlan` command.
    fn decide_delete_plan(&self, task: crate::id::TaskId) -> Result<Option<EventBody>, Rejection> {
        Ok(Some({
            let found = self.known_task(task)?;
            let Some(plan) = &found.plan else {
                return Err(refuse(
                    TaskErrorCode::TaskNotFound,
                    format!("{task} is a task, not an execution plan"),
                ));
            };
            if plan.deleted {
                return Ok(None);
            }
            if let Some(active) = found.active_run() {
                return Err(refuse(
                    TaskErrorCode::RunAlreadyActive,
                    format!(
                        "run {} of plan {task} is {}; stop it before deleting the plan",
                        active.id,
                        active.state.as_str()
                    ),
                ));
            }
            EventBody::PlanDeleted { task }
        }))
    }

    /// The pipeline task `task` while no run of it is active: what archiving
    /// or deleting it needs.
    fn idle_pipeline_task(&self, task: TaskId, doing: &str) -> Result<&Task, Rejection> {
        let found = self.live_task(task)?;
        if found.plan.is_some() {
            return Err(refuse(
                TaskErrorCode::TaskNotFound,
                format!("task_id: {task} is an execution plan, not a task of a pipeline"),
            ));
        }
        if let Some(active) = found.active_run() {
            return Err(refuse(
                TaskErrorCode::RunAlreadyActive,
                format!(
                    "run {} of task {task} is {}; stop it (task_stop) before {doing} the task",
                    active.id,
                    active.state.as_str()
                ),
            ));
        }
        Ok(found)
    }

    /// Decides an `ArchiveTask` command (archiving twice records nothing).
    fn decide_archive_task(&self, task: TaskId) -> Result<Option<EventBody>, Rejection> {
        let found = self.idle_pipeline_task(task, "archiving")?;
        Ok((found.archived_at.is_none()).then_some(EventBody::TaskArchived { task }))
    }

    /// Decides a `DeleteTask` command.
    fn decide_delete_task(&self, task: TaskId) -> Result<Option<EventBody>, Rejection> {
        self.idle_pipeline_task(task, "deleting")?;
        Ok(Some(EventBody::TaskDeleted { task }))
    }

    /// Decides a `StartRun` command.
    fn decide_start_run(
        &self,
        task: crate::id::TaskId,
        run: crate::id::RunId,
        resumed_from: Option<crate::id::RunId>,
        owner_pid: u32,
        host: String,
        variables: Option<String>,
    ) -> Result<Option<EventBody>, Rejection> {
        Ok(Some({
            let found = self.known_task(task)?;
            found.may_start_run()?;
            if found.runs.iter().any(|r| r.id == run) {
                return Err(refuse(TaskErrorCode::Conflict, format!("run {run} exists")));
            }
            if let Some(previous) = resumed_from {
                found.run(previous)?;
            }
            if let Some(variables) = &variables
                && variables.len() > PLAN_DEFINITION_BYTES_MAX
            {
                return Err(refuse(
                    TaskErrorCode::Conflict,
                    format!(
                        "variables: {} bytes; at most {PLAN_DEFINITION_BYTES_MAX} are accepted",
                        variables.len()
                    ),
                ));
            }
            EventBody::RunStarted {
                task,
                run,
                resumed_from,
                owner_pid,
                host,
                variables,
            }
        }))
    }

    /// Decides a `StartStep` command.
    fn decide_start_step(
        &self,
        task: crate::id::TaskId,
        run: crate::id::RunId,
        step: String,
        input: [u8; 32],
        call: Option<[u8; 32]>,
    ) -> Result<Option<EventBody>, Rejection> {
        Ok(Some({
            let found = self.known_task(task)?;
            let active = found.active(run)?;
            if active.state != RunState::Running {
                return Err(refuse(
                    TaskErrorCode::RunNotActive,
                    format!("run {run} is stopping: no new step starts"),
                ));
            }
            let attempt = start_attempt(found, active, &step, |s| active.running.contains(s))?;
            EventBody::StepStarted {
                task,
                run,
                step,
                attempt,
                input,
                call,
            }
        }))
    }

    /// Decides a `SucceedStep` command.
    #[allow(
        clippy::too_many_arguments,
        reason = "one argument per field of its command"
    )]
    fn decide_succeed_step(
        &self,
        task: crate::id::TaskId,
        run: crate::id::RunId,
        step: String,
        input: [u8; 32],
        artifact: [u8; 32],
        bytes: u64,
        duration_ms: u64,
        tokens_in: u64,
        tokens_out: u64,
    ) -> Result<Option<EventBody>, Rejection> {
        Ok(Some({
            self.running_step(task, run, &step)?;
            EventBody::StepSucceeded {
                task,
                run,
                step,
                input,
                artifact,
                bytes,
                duration_ms,
                tokens_in,
                tokens_out,
            }
        }))
    }

    /// Decides a `FailStep` command.
    fn decide_fail_step(
        &self,
        task: crate::id::TaskId,
        run: crate::id::RunId,
        step: String,
        class: String,
        message: String,
        recoverable: bool,
    ) -> Result<Option<EventBody>, Rejection> {
        Ok(Some({
            self.running_step(task, run, &step)?;
            chars_at_most("message", &message, STEP_MESSAGE_CHARS_MAX)?;
            EventBody::StepFailed {
                task,
                run,
                step,
                class,
                message,
                recoverable,
            }
        }))
    }

    /// Decides a `EditArtifact` command.
    fn decide_edit_artifact(
        &self,
        task: crate::id::TaskId,
        step: String,
        artifact: [u8; 32],
        bytes: u64,
        by: String,
    ) -> Result<Option<EventBody>, Rejection> {
        Ok(Some({
            let found = self.changeable_task(task)?;
            if let Some(active) = found.active_run() {
                return Err(refuse(
                    TaskErrorCode::RunningReadonly,
                    format!(
                        "run {} is {}: stop it (task_stop) before editing an artifact",
                        active.id,
                        active.state.as_str()
                    ),
                ));
            }
            let Some(current) = found.successes.get(&step) else {
                return Err(refuse(
                    TaskErrorCode::InvalidArtifactUri,
                    format!("step {step:?} of task {task} has no artifact"),
                ));
            };
            if current.artifact == artifact {
                return Ok(None);
            }
            EventBody::ArtifactEdited {
                task,
                step,
                artifact,
                bytes,
                by,
            }
        }))
    }

    /// Decides a `RequestStop` command.
    fn decide_request_stop(&self, task: crate::id::TaskId) -> Result<Option<EventBody>, Rejection> {
        Ok(Some({
            let found = self.changeable_task(task)?;
            match found.active_run() {
                Some(run) if run.state == RunState::Stopping => return Ok(None),
                Some(run) => EventBody::StopRequested { task, run: run.id },
                None => {
                    return Err(refuse(
                        TaskErrorCode::RunNotActive,
                        format!("task {task} has no active run to stop"),
                    ));
                }
            }
        }))
    }

    /// Decides a `EndRun` command.
    fn decide_end_run(
        &self,
        task: crate::id::TaskId,
        run: crate::id::RunId,
        outcome: crate::event::RunOutcome,
        reason: Option<String>,
        failed_step: Option<String>,
        recoverable: bool,
    ) -> Result<Option<EventBody>, Rejection> {
        Ok(Some({
            let active = self.known_task(task)?.active(run)?;
            if outcome == RunOutcome::Completed && !active.running.is_empty() {
                return Err(refuse(
                    TaskErrorCode::Conflict,
                    format!(
                        "run {run} cannot complete with steps still running: {}",
                        active
                            .running
                            .iter()
                            .cloned()
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            }
            EventBody::RunEnded {
                task,
                run,
                outcome,
                reason,
                failed_step,
                recoverable,
            }
        }))
    }

    /// Decides a `AppendRunLog` command.
    fn decide_append_run_log(
        &self,
        task: crate::id::TaskId,
        run: crate::id::RunId,
        lines: Vec<String>,
    ) -> Result<Option<EventBody>, Rejection> {
        Ok(Some({
            self.known_task(task)?.active(run)?;
            if lines.len() > RUN_LOG_LINES_MAX {
                return Err(refuse(
                    TaskErrorCode::Conflict,
                    format!(
                        "lines: at most {RUN_LOG_LINES_MAX} in one record (got {})",
                        lines.len()
                    ),
                ));
            }
            for (i, line) in lines.iter().enumerate() {
                chars_at_most(&format!("lines[{i}]"), line, RUN_LOG_LINE_CHARS_MAX)?;
            }
            if lines.is_empty() {
                return Ok(None);
            }
            EventBody::RunLog { task, run, lines }
        }))
    }

    fn running_step(&self, task: TaskId, run: RunId, step: &str) -> Result<(), Rejection> {
        let active = self.known_task(task)?.active(run)?;
        if !active.running.contains(step) {
            return Err(refuse(
                TaskErrorCode::Conflict,
                format!("step {step:?} is not running in run {run}"),
            ));
        }
        Ok(())
    }

    /// Folds a DAG engine event. Events the rules would have refused (a
    /// damaged or hand-made log) change nothing.
    pub(super) fn apply_task(&mut self, body: &EventBody, at: Timestamp) {
        let touched = match body {
            EventBody::TaskCreated {
                task,
                pipeline,
                pipeline_version,
                prompt,
                speed,
                target,
                model_profile,
                client_request_id,
                project_path,
            } => self.apply_task_created(
                task,
                pipeline,
                pipeline_version,
                prompt,
                speed,
                target,
                model_profile,
                client_request_id,
                project_path,
                at,
            ),
            EventBody::PlanCreated {
                task,
                title,
                definition,
                client_request_id,
                project_path,
            } => self.apply_plan_created(
                task,
                (title, definition),
                client_request_id,
                project_path,
                at,
            ),
            EventBody::PlanDeleted { task } => self.apply_plan_deleted(task),
            EventBody::TaskArchived { task } => self.apply_lifecycle(task, at, false),
            EventBody::TaskDeleted { task } => self.apply_lifecycle(task, at, true),
            EventBody::RunStarted {
                task,
                run,
                resumed_from,
                owner_pid,
                host,
                variables,
            } => self.apply_run_started(task, run, resumed_from, owner_pid, host, variables, at),
            EventBody::StepStarted { .. }
            | EventBody::StepSucceeded { .. }
            | EventBody::StepFailed { .. }
            | EventBody::ArtifactEdited { .. } => self.apply_step(body, at),
            EventBody::StopRequested { task, run } => self.apply_stop_requested(task, run),
            EventBody::RunEnded {
                task,
                run,
                outcome,
                reason,
                failed_step,
                recoverable,
            } => self.apply_run_ended(task, run, outcome, reason, failed_step, recoverable, at),
            EventBody::RunLog { task, run, lines } => self.apply_run_log(task, run, lines, at),
            _ => false,
        };
        if touched && let Some(task) = body.task().and_then(|t| self.tasks.get_mut(&t)) {
            task.updated_at = task.updated_at.max(at);
        }
    }

    /// Folds an event about one step (its start, its end, or an edit of its
    /// artifact); whether it touched its task.
    fn apply_step(&mut self, body: &EventBody, at: Timestamp) -> bool {
        match body {
            EventBody::StepStarted {
                task,
                run,
                step,
                attempt,
                ..
            } => self.apply_step_started(task, run, step, attempt, at),
            EventBody::StepSucceeded {
                task,
                run,
                step,
                input,
                artifact,
                bytes,
                ..
            } => self.apply_step_succeeded(task, run, step, input, artifact, bytes, at),
            EventBody::StepFailed {
                task, run, step, ..
            } => self.apply_step_failed(task, run, step, at),
            EventBody::ArtifactEdited {
                task,
                step,
                artifact,
                bytes,
                ..
            } => self.apply_artifact_edited(task, step, artifact, bytes, at),
            _ => false,
        }
    }

    /// Applies a `TaskCreated` event; whether it touched its task.
    #[allow(
        clippy::too_many_arguments,
        reason = "one argument per field of its event"
    )]
    fn apply_task_created(
        &mut self,
        task: &TaskId,
        pipeline: &str,
        pipeline_version: &u32,
        prompt: &str,
        speed: &str,
        target: &str,
        model_profile: &Option<String>,
        client_request_id: &Option<String>,
        project_path: &Option<String>,
        at: Timestamp,
    ) -> bool {
        self.tasks.entry(*task).or_insert_with(|| Task {
            id: *task,
            created_at: at,
            updated_at: at,
            pipeline: pipeline.to_owned(),
            pipeline_version: *pipeline_version,
            prompt: prompt.to_owned(),
            speed: speed.to_owned(),
            target: target.to_owned(),
            model_profile: model_profile.clone(),
            client_request_id: client_request_id.clone(),
            project_path: project_path.clone(),
            runs: Runs::default(),
            successes: BTreeMap::new(),
            log_tail: std::collections::VecDeque::new(),
            log_lines: 0,
            plan: None,
            archived_at: None,
            deleted_at: None,
        });
        false
    }

    /// Applies a `PlanCreated` event; whether it touched its task.
    fn apply_plan_created(
        &mut self,
        task: &TaskId,
        (title, definition): (&str, &str),
        client_request_id: &Option<String>,
        project_path: &Option<String>,
        at: Timestamp,
    ) -> bool {
        self.tasks.entry(*task).or_insert_with(|| Task {
            id: *task,
            created_at: at,
            updated_at: at,
            pipeline: EXEC_PLAN_PIPELINE.to_owned(),
            pipeline_version: 1,
            prompt: title.to_owned(),
            speed: String::new(),
            target: String::new(),
            model_profile: None,
            client_request_id: client_request_id.clone(),
            project_path: project_path.clone(),
            runs: Runs::default(),
            successes: BTreeMap::new(),
            log_tail: std::collections::VecDeque::new(),
            log_lines: 0,
            plan: Some(PlanInfo {
                title: title.to_owned(),
                definition: definition.to_owned(),
                deleted: false,
            }),
            archived_at: None,
            deleted_at: None,
        });
        false
    }

    /// Applies a `PlanDeleted` event; whether it touched its task.
    fn apply_plan_deleted(&mut self, task: &TaskId) -> bool {
        if let Some(plan) = self.tasks.get_mut(task).and_then(|t| t.plan.as_mut()) {
            plan.deleted = true;
        }
        true
    }

    /// Applies a `TaskArchived` (or, `deleted`, a `TaskDeleted`) event;
    /// whether it touched its task. The first time counts.
    fn apply_lifecycle(&mut self, task: &TaskId, at: Timestamp, deleted: bool) -> bool {
        let Some(found) = self.tasks.get_mut(task) else {
            return false;
        };
        let when = if deleted {
            &mut found.deleted_at
        } else {
            &mut found.archived_at
        };
        when.get_or_insert(at);
        true
    }

    /// Applies a `RunStarted` event; whether it touched its task.
    #[allow(
        clippy::too_many_arguments,
        reason = "one argument per field of its event"
    )]
    fn apply_run_started(
        &mut self,
        task: &TaskId,
        run: &RunId,
        resumed_from: &Option<RunId>,
        owner_pid: &u32,
        host: &str,
        variables: &Option<String>,
        at: Timestamp,
    ) -> bool {
        let Some(found) = self.tasks.get_mut(task) else {
            return false;
        };
        if found.runs.iter().any(|r| r.id == *run) {
            return false;
        }
        if found.plan.is_none() && resumed_from.is_none() && !found.runs.is_empty() {
            // A retry: from the first step, reusing nothing.
            found.successes.clear();
        }
        found.runs.push(Arc::new(Run {
            id: *run,
            resumed_from: *resumed_from,
            owner_pid: *owner_pid,
            host: host.to_owned(),
            started_at: at,
            last_progress_at: at,
            state: RunState::Running,
            ended_at: None,
            reason: None,
            failed_step: None,
            recoverable: false,
            running: BTreeSet::new(),
            attempts: BTreeMap::new(),
            succeeded: BTreeSet::new(),
            failures: 0,
            log_lines: 0,
            variables: variables.clone(),
        }));
        true
    }

    /// Applies a `StepStarted` event; whether it touched its task.
    fn apply_step_started(
        &mut self,
        task: &TaskId,
        run: &RunId,
        step: &str,
        attempt: &u32,
        at: Timestamp,
    ) -> bool {
        if let Some(found) = self.run_mut(*task, *run) {
            found.running.insert(step.to_owned());
            found.attempts.insert(step.to_owned(), *attempt);
            found.last_progress_at = at;
        }
        true
    }

    /// Applies a `StepSucceeded` event; whether it touched its task.
    #[allow(
        clippy::too_many_arguments,
        reason = "one argument per field of its event"
    )]
    fn apply_step_succeeded(
        &mut self,
        task: &TaskId,
        run: &RunId,
        step: &str,
        input: &[u8; 32],
        artifact: &[u8; 32],
        bytes: &u64,
        at: Timestamp,
    ) -> bool {
        let Some(found) = self.run_mut(*task, *run) else {
            return false;
        };
        found.running.remove(step);
        found.succeeded.insert(step.to_owned());
        found.last_progress_at = at;
        if let Some(task) = self.tasks.get_mut(task) {
            task.successes.insert(
                step.to_owned(),
                StepSuccess {
                    input: *input,
                    artifact: *artifact,
                    bytes: *bytes,
                    edited: false,
                    at,
                },
            );
        }
        true
    }

    /// Applies a `StepFailed` event; whether it touched its task.
    fn apply_step_failed(&mut self, task: &TaskId, run: &RunId, step: &str, at: Timestamp) -> bool {
        if let Some(found) = self.run_mut(*task, *run) {
            found.running.remove(step);
            found.failures = found.failures.saturating_add(1);
            found.last_progress_at = at;
        }
        true
    }

    /// Applies a `ArtifactEdited` event; whether it touched its task.
    fn apply_artifact_edited(
        &mut self,
        task: &TaskId,
        step: &str,
        artifact: &[u8; 32],
        bytes: &u64,
        at: Timestamp,
    ) -> bool {
        if let Some(success) = self
            .tasks
            .get_mut(task)
            .and_then(|t| t.successes.get_mut(step))
        {
            success.artifact = *artifact;
            success.bytes = *bytes;
            success.edited = true;
            success.at = at;
        }
        true
    }

    /// Applies a `StopRequested` event; whether it touched its task.
    fn apply_stop_requested(&mut self, task: &TaskId, run: &RunId) -> bool {
        if let Some(found) = self.run_mut(*task, *run)
            && found.state == RunState::Running
        {
            found.state = RunState::Stopping;
        }
        true
    }

    /// Applies a `RunEnded` event; whether it touched its task.
    #[allow(
        clippy::too_many_arguments,
        reason = "one argument per field of its event"
    )]
    fn apply_run_ended(
        &mut self,
        task: &TaskId,
        run: &RunId,
        outcome: &RunOutcome,
        reason: &Option<String>,
        failed_step: &Option<String>,
        recoverable: &bool,
        at: Timestamp,
    ) -> bool {
        if let Some(found) = self.run_mut(*task, *run)
            && found.state.is_active()
        {
            found.state = match outcome {
                RunOutcome::Completed => RunState::Completed,
                RunOutcome::Stopped => RunState::Stopped,
                RunOutcome::Failed => RunState::Failed,
            };
            found.ended_at = Some(at);
            found.reason.clone_from(reason);
            found.failed_step.clone_from(failed_step);
            found.recoverable = *recoverable;
            found.running.clear();
        }
        true
    }

    /// Applies a `RunLog` event; whether it touched its task.
    fn apply_run_log(
        &mut self,
        task: &TaskId,
        run: &RunId,
        lines: &Vec<String>,
        at: Timestamp,
    ) -> bool {
        let Some(found) = self.run_mut(*task, *run) else {
            return false;
        };
        found.log_lines = found.log_lines.saturating_add(lines.len() as u64);
        if let Some(found) = self.tasks.get_mut(task) {
            for line in lines {
                found.log_lines = found.log_lines.saturating_add(1);
                if found.log_tail.len() == LOG_TAIL_LINES {
                    found.log_tail.pop_front();
                }
                found.log_tail.push_back(LogLine {
                    number: found.log_lines,
                    run: *run,
                    at,
                    text: line.clone(),
                });
            }
        }
        true
    }

    fn run_mut(&mut self, task: TaskId, run: RunId) -> Option<&mut Run> {
        self.tasks.get_mut(&task)?.run_mut(run)
    }
}

#[cfg(test)]
mod runs_tests {
    use super::*;

    fn run(n: u128) -> Run {
        Run {
            id: RunId::from_uuid(uuid::Uuid::from_u128(n)),
            resumed_from: None,
            owner_pid: 7,
            host: "here".into(),
            started_at: Timestamp(1_000 + n as i64),
            last_progress_at: Timestamp(1_000 + n as i64),
            state: RunState::Stopped,
            ended_at: None,
            reason: None,
            failed_step: None,
            recoverable: true,
            running: BTreeSet::new(),
            attempts: BTreeMap::new(),
            succeeded: BTreeSet::from([format!("step {n}")]),
            failures: 0,
            log_lines: 0,
            variables: None,
        }
    }

    fn id(n: u128) -> RunId {
        RunId::from_uuid(uuid::Uuid::from_u128(n))
    }

    #[test]
    fn a_copy_shares_the_earlier_runs_and_a_change_to_the_latest_copies_it_alone() {
        let mut runs: Runs = (1..=1000).map(run).collect();
        assert_eq!(runs.len(), 1000);
        assert_eq!(runs.last().map(|r| r.id), Some(id(1000)));
        assert_eq!(runs[0].id, id(1));
        assert_eq!(runs.get(999).map(|r| r.id), Some(id(1000)));
        assert!(runs.get(1000).is_none());
        let order: Vec<RunId> = runs.iter().map(|r| r.id).collect();
        assert_eq!(order, (1..=1000).map(id).collect::<Vec<_>>());
        let back: Vec<RunId> = runs.iter().rev().take(2).map(|r| r.id).collect();
        assert_eq!(back, vec![id(1000), id(999)]);
        assert_eq!(runs.iter().len(), 1000);

        let copy = runs.clone();
        assert!(Arc::ptr_eq(&copy.earlier, &runs.earlier));
        // Every step changes the latest run: the earlier ones stay shared.
        runs.find_mut(id(1000)).expect("latest").failures = 1;
        assert!(Arc::ptr_eq(&copy.earlier, &runs.earlier));
        assert_eq!(copy[999].failures, 0);
        assert_eq!(runs[999].failures, 1);
        // A run starting while a copy is held: the copy keeps its runs.
        runs.push(Arc::new(run(1001)));
        assert_eq!((copy.len(), runs.len()), (1000, 1001));
        assert_eq!(runs[999].failures, 1);
        // An earlier run changing (an end recorded late) copies the list
        // once, and only that run.
        let held = runs.clone();
        runs.find_mut(id(3)).expect("an earlier run").failures = 2;
        assert_eq!((held[2].failures, runs[2].failures), (0, 2));
        assert!(Arc::ptr_eq(&held[4], &runs[4]));
        assert!(runs.find_mut(id(5000)).is_none());
        assert!(Runs::default().is_empty() && Runs::default().last().is_none());
    }

    #[test]
    fn runs_are_archived_exactly_as_a_vector_of_runs_was() {
        #[derive(rkyv::Archive, rkyv::Serialize)]
        struct AsVector {
            #[rkyv(with = rkyv::with::Map<rkyv::with::Unshare>)]
            runs: Vec<Arc<Run>>,
        }
        #[derive(PartialEq, Debug, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
        struct AsRuns {
            #[rkyv(with = RunsAsVec)]
            runs: Runs,
        }
        for count in [0, 1, 2, 7] {
            let vector = AsVector {
                runs: (1..=count).map(|n| Arc::new(run(n))).collect(),
            };
            let runs = AsRuns {
                runs: (1..=count).map(run).collect(),
            };
            let before = rkyv::to_bytes::<rkyv::rancor::Error>(&vector).expect("archive");
            let now = rkyv::to_bytes::<rkyv::rancor::Error>(&runs).expect("archive");
            assert_eq!(before.as_slice(), now.as_slice(), "{count} runs");
            let read = rkyv::from_bytes::<AsRuns, rkyv::rancor::Error>(&before).expect("read");
            assert_eq!(read, runs);
        }
    }
}
