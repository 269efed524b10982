//! One run of an execution plan: Kahn batches, at most `concurrency` calls
//! at once within a batch, guards checked before each call, every fact
//! recorded through the store before the next decision.
//!
//! The process that runs a plan holds the plan's run lock for the whole
//! run, as a task's worker does: a run whose process died is ended `failed`
//! (`worker_error`, recoverable) by whoever looks next, and resumed with
//! [`run_plan`]`(…, resume: true)`. A resume binds the variables of every
//! step that succeeded before from its recorded result (never truncated)
//! and calls again only the steps whose call, resolved now, differs from
//! the one that succeeded.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use futures_util::stream::{FuturesUnordered, StreamExt};
use planb_core::exec_plan::{ExecPlan, resolve_args};
use planb_core::{
    Command, ContentHash, EventBody, INLINE_BLOB_BYTES_MAX, INLINE_BLOBS_BYTES_MAX, Rejection,
    RunEndReason, RunId, RunOutcome, RunState, StepStart, Task, TaskErrorCode, TaskId,
};
use planb_projections::{Store, StoreError};
use serde_json::{Map, Value, json};

use super::servers::{Downstream, PlanTools, ToolInfo};
use crate::worker::{WorkerError, blocking, hold_task, start_run};

/// Largest tool result kept, in bytes of JSON.
pub const RESULT_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Limits checked before each call; a blocked step fails with
/// `Guard blocked: <reason>` and its tool is never called.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Guards {
    /// Most tool calls in one run.
    pub max_calls: Option<u32>,
    /// Most calls of one tool (by the name the plan uses) in one run.
    pub per_tool: BTreeMap<String, u32>,
    /// Longest a run may take before no new call starts.
    pub max_wall: Option<Duration>,
}

/// How a plan runs.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Most calls in flight within a batch.
    pub concurrency: usize,
    /// The longest one call may take.
    pub step_timeout: Duration,
    /// Guards.
    pub guards: Guards,
    /// How often a stop request is looked for while calls run.
    pub poll: Duration,
}

impl Default for RunOptions {
    fn default() -> RunOptions {
        RunOptions {
            concurrency: 4,
            step_timeout: Duration::from_secs(300),
            guards: Guards::default(),
            poll: Duration::from_millis(200),
        }
    }
}

/// One step's outcome in a run.
#[derive(Clone, Debug, PartialEq)]
pub struct StepReport {
    /// The step's index.
    pub index: String,
    /// Its title.
    pub title: String,
    /// The tool as the plan names it.
    pub tool: String,
    /// The arguments as resolved for the call.
    pub args: Value,
    /// Whether it succeeded.
    pub success: bool,
    /// Its result.
    pub result: Option<Value>,
    /// Why it failed.
    pub error: Option<String>,
    /// How long the call took.
    pub duration_ms: u64,
    /// True when the result was the one recorded before (a resume), and the
    /// tool was not called.
    pub reused: bool,
}

impl StepReport {
    fn summary(&self) -> Value {
        json!({
            "index": self.index,
            "title": self.title,
            "tool": self.tool,
            "success": self.success,
            "error": self.error,
        })
    }
}

impl Guards {
    /// Refuses a per-tool cap that names no tool of `plan` (as its steps
    /// write them): such a cap would silently never apply.
    pub fn check(&self, plan: &ExecPlan) -> Result<(), String> {
        for tool in self.per_tool.keys() {
            if !plan.steps.iter().any(|s| &s.tool == tool) {
                let mut used: Vec<&str> = plan.steps.iter().map(|s| s.tool.as_str()).collect();
                used.sort_unstable();
                used.dedup();
                return Err(format!(
                    "tool cap {tool:?}: no step calls it (the plan's tools: {})",
                    used.join(", ")
                ));
            }
        }
        Ok(())
    }
}

/// What a run (or a dry run) came to.
#[derive(Clone, Debug, PartialEq)]
pub struct PlanOutcome {
    /// The plan.
    pub plan_id: TaskId,
    /// Its title.
    pub title: String,
    /// The run, `None` for a dry run.
    pub run: Option<RunId>,
    /// Whether every step succeeded.
    pub success: bool,
    /// Whether the run stopped on request.
    pub stopped: bool,
    /// Wall time.
    pub duration: Duration,
    /// The steps settled, in the order they settled.
    pub steps: Vec<StepReport>,
    /// Steps in the plan.
    pub steps_in_plan: usize,
    /// Every variable at the end: the plan's, the call's, the results.
    pub variables: Map<String, Value>,
    /// Why it failed (`Step N failed: …`, `Batch K had failures: …`).
    pub error: Option<String>,
    /// Steps of a resume that the resumed run had called with no success
    /// recorded (in flight when it was cut short, or failed), called a
    /// second time.
    pub called_again: Vec<String>,
    /// Servers still starting when the plan's tool names had resolved
    /// without them, so not waited for.
    pub servers_not_answering: Vec<String>,
}

impl PlanOutcome {
    /// The result shape the plan tools return: `{success, plan_id, title, duration,
    /// steps_completed, steps_total, error?, results, steps}`; `results` holds
    /// every variable, whole.
    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        out.insert("success".into(), self.success.into());
        out.insert("plan_id".into(), self.plan_id.to_string().into());
        out.insert("title".into(), self.title.clone().into());
        let seconds = (self.duration.as_secs_f64() * 100.0).round() / 100.0;
        out.insert("duration".into(), json!(seconds));
        out.insert(
            "steps_completed".into(),
            self.steps.iter().filter(|s| s.success).count().into(),
        );
        out.insert("steps_total".into(), self.steps_in_plan.into());
        if let Some(error) = &self.error {
            out.insert("error".into(), error.clone().into());
        }
        if self.stopped {
            out.insert("stopped".into(), true.into());
        }
        if let Some(run) = self.run {
            out.insert("run_id".into(), run.to_string().into());
        }
        if !self.called_again.is_empty() {
            out.insert("called_again".into(), json!(self.called_again));
            out.insert(
                "called_again_note".into(),
                "these steps were called in the resumed run with no success recorded (in flight when it was cut short, or failed) and were called a second time: check that a tool that is not idempotent did not act twice".into(),
            );
        }
        if !self.servers_not_answering.is_empty() {
            out.insert(
                "servers_not_answering".into(),
                json!(self.servers_not_answering),
            );
        }
        out.insert("results".into(), Value::Object(self.variables.clone()));
        out.insert(
            "steps".into(),
            self.steps.iter().map(StepReport::summary).collect(),
        );
        Value::Object(out)
    }
}

/// What a run tells as it goes.
#[derive(Clone, Debug)]
pub enum Progress {
    /// A step's call started.
    Started {
        /// The step's index.
        index: String,
    },
    /// A step settled.
    Ended(Box<StepReport>),
}

/// Called with each progress event.
pub type ProgressFn = Arc<dyn Fn(&Progress) + Send + Sync>;

/// Why a plan could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanRunError {
    /// No plan of that id (or it was deleted).
    #[error("Plan not found: {0}")]
    NotFound(String),
    /// The plan cannot run as it is (a tool no server has, nothing to resume).
    #[error("{0}")]
    Invalid(String),
    /// A downstream server failed before the run started.
    #[error("{0}")]
    Downstream(String),
    /// The run lock or the store failed.
    #[error(transparent)]
    Worker(#[from] WorkerError),
    /// A run of the plan was active when this call looked, or started
    /// after: running as well would do the plan's work twice.
    #[error(
        "RUN_ALREADY_ACTIVE: run {run} of plan {task} {when} (it is {state}); call again to run the plan once more"
    )]
    StartedMeanwhile {
        /// The plan.
        task: TaskId,
        /// The other run.
        run: RunId,
        /// `was running when this call was made` or `started after this call was made`.
        when: &'static str,
        /// Its state now.
        state: &'static str,
    },
}

impl From<StoreError> for PlanRunError {
    fn from(error: StoreError) -> PlanRunError {
        PlanRunError::Worker(WorkerError::Store(error))
    }
}

/// A plan read back: its task, the definition it was read from, the plan.
type Parsed = (TaskId, Arc<str>, Arc<ExecPlan>);
/// Plans read back lately. A plan run again and again is parsed once, not
/// on each run.
static PARSED: std::sync::Mutex<Vec<Parsed>> = std::sync::Mutex::new(Vec::new());
/// Plans kept read back.
const PARSED_KEPT: usize = 32;

/// The plan a task holds.
pub fn load(task: &Task) -> Result<Arc<ExecPlan>, PlanRunError> {
    let Some(info) = task.plan.as_ref().filter(|p| !p.deleted) else {
        return Err(PlanRunError::NotFound(task.id.to_string()));
    };
    let lock = || {
        PARSED
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    };
    // The definition is compared whole: a task's definition is recorded
    // once, but a cache must not be the reason a changed one is missed.
    if let Some((_, _, plan)) = lock()
        .iter()
        .find(|(id, definition, _)| *id == task.id && **definition == *info.definition)
    {
        return Ok(Arc::clone(plan));
    }
    let plan = Arc::new(info.exec_plan().map_err(PlanRunError::Invalid)?);
    let mut parsed = lock();
    parsed.retain(|(id, _, _)| *id != task.id);
    if parsed.len() >= PARSED_KEPT {
        parsed.remove(0);
    }
    parsed.push((task.id, info.definition.as_str().into(), Arc::clone(&plan)));
    Ok(plan)
}

fn merged(plan: &ExecPlan, call: &Map<String, Value>) -> Map<String, Value> {
    let mut variables = plan.variables.clone();
    for (k, v) in call {
        variables.insert(k.clone(), v.clone());
    }
    variables
}

/// A dry run: every step in batch order with its arguments resolved, no
/// call made, nothing recorded; each result is `"[dry-run: not executed]"`
/// and each variable is bound to `"<tool result>"`.
pub fn dry_run(plan: &ExecPlan, plan_id: TaskId, call: &Map<String, Value>) -> PlanOutcome {
    let mut variables = merged(plan, call);
    let mut steps = Vec::new();
    for batch in plan.batches() {
        for &at in batch {
            let step = &plan.steps[at];
            steps.push(StepReport {
                index: step.index.clone(),
                title: step.title.clone(),
                tool: step.tool.clone(),
                args: Value::Object(resolve_args(&step.args, &variables)),
                success: true,
                result: Some("[dry-run: not executed]".into()),
                error: None,
                duration_ms: 0,
                reused: false,
            });
            if let Some(var) = &step.result_variable {
                variables.insert(var.clone(), format!("<{} result>", step.tool).into());
            }
        }
    }
    PlanOutcome {
        plan_id,
        title: plan.title.clone(),
        run: None,
        success: true,
        stopped: false,
        duration: Duration::ZERO,
        steps,
        steps_in_plan: plan.steps.len(),
        variables,
        error: None,
        called_again: Vec::new(),
        servers_not_answering: Vec::new(),
    }
}

struct Call {
    at: usize,
    tool: Arc<ToolInfo>,
    args: Map<String, Value>,
    bytes: Vec<u8>,
    input: ContentHash,
}

/// A step whose call ended, as it will be recorded.
struct Finished {
    at: usize,
    report: StepReport,
    input: [u8; 32],
    /// The result's JSON and its SHA-256, or the failure's class.
    outcome: Result<(Vec<u8>, [u8; 32]), &'static str>,
}

/// A step's end not recorded yet, and the blob it needs stored first.
struct Unrecorded {
    end: Command,
    blob: Option<Vec<u8>>,
    /// The report to tell once it is recorded (kept only when someone
    /// listens).
    tell: Option<StepReport>,
}

/// A step about to start: its start is recorded before its call is made.
struct Starting {
    call: Call,
    report: StepReport,
    guard: Option<String>,
}

struct Shared {
    store: Arc<Store>,
    downstream: Arc<Downstream>,
    task: TaskId,
    run: RunId,
    timeout: Duration,
    progress: Option<ProgressFn>,
}

fn blob_error(error: impl std::fmt::Display) -> StoreError {
    StoreError::Io {
        op: "store a blob",
        path: String::new(),
        source: std::io::Error::other(error.to_string()),
    }
}

impl Shared {
    async fn execute(&self, command: Command) -> Result<(), StoreError> {
        let store = Arc::clone(&self.store);
        blocking(move || store.execute(command).map(|_| ())).await
    }

    /// Records `ends` and `starts` in one append, with the blobs they name:
    /// one durable write (and, off the engine thread, one trip to the
    /// blocking pool). A small blob
    /// goes in the log ahead of them (and has no file); a
    /// large one is synced in the blob store first. Returns the steps whose
    /// start was recorded: none of them while the run is stopping.
    async fn record(
        &self,
        blobs: Vec<Vec<u8>>,
        ends: Vec<Command>,
        starts: Vec<StepStart>,
    ) -> Result<Vec<String>, StoreError> {
        if ends.is_empty() && starts.is_empty() {
            return Ok(Vec::new());
        }
        let store = Arc::clone(&self.store);
        let (task, run) = (self.task, self.run);
        blocking(move || {
            // Small blobs go in the log while one append can hold them (a
            // wide batch's calls and results can add up to more): the rest
            // are synced in the blob store first.
            let mut inline = Vec::new();
            let mut inlined = 0;
            for bytes in blobs {
                if bytes.len() <= INLINE_BLOB_BYTES_MAX
                    && inlined + bytes.len() <= INLINE_BLOBS_BYTES_MAX
                {
                    inlined += bytes.len();
                    inline.push(bytes);
                } else {
                    store.root().blobs().put(&bytes).map_err(blob_error)?;
                }
            }
            let envelopes = store.execute(Command::SettleAndStart {
                task,
                run,
                ends,
                starts,
                inline,
            })?;
            Ok(envelopes
                .into_iter()
                .filter_map(|e| match e.event.body {
                    EventBody::StepStarted { step, .. } => Some(step),
                    _ => None,
                })
                .collect())
        })
        .await
    }

    /// Records the ends in `unrecorded`, with `starting`'s starts after
    /// them; tells each end recorded. Returns the starts recorded.
    async fn settle(
        &self,
        unrecorded: &mut Vec<Unrecorded>,
        starting: &mut [Starting],
    ) -> Result<Vec<String>, StoreError> {
        let mut blobs = Vec::new();
        let mut ends = Vec::new();
        let mut tell = Vec::new();
        for one in unrecorded.drain(..) {
            blobs.extend(one.blob);
            ends.push(one.end);
            tell.extend(one.tell);
        }
        let starts = starting
            .iter_mut()
            .map(|s| {
                blobs.push(std::mem::take(&mut s.call.bytes));
                StepStart {
                    step: s.report.index.clone(),
                    input: s.call.input.0,
                    call: Some(s.call.input.0),
                }
            })
            .collect();
        let started = self.record(blobs, ends, starts).await?;
        for report in tell {
            self.tell(Progress::Ended(Box::new(report)));
        }
        Ok(started)
    }

    fn tell(&self, progress: Progress) {
        if let Some(tell) = &self.progress {
            tell(&progress);
        }
    }

    /// Tells a settled step; its result is copied only when someone listens.
    fn tell_ended(&self, report: &StepReport) {
        if self.progress.is_some() {
            self.tell(Progress::Ended(Box::new(report.clone())));
        }
    }

    /// The end of `finished` as it will be recorded, and its report.
    fn unrecorded(&self, finished: Finished) -> (Unrecorded, StepReport) {
        let Finished {
            report,
            input,
            outcome,
            ..
        } = finished;
        let (end, blob) = match outcome {
            Ok((bytes, artifact)) => (
                Command::SucceedStep {
                    task: self.task,
                    run: self.run,
                    step: report.index.clone(),
                    input,
                    artifact,
                    bytes: bytes.len() as u64,
                    duration_ms: report.duration_ms,
                    tokens_in: 0,
                    tokens_out: 0,
                },
                Some(bytes),
            ),
            Err(class) => (
                self.failure(
                    &report.index,
                    class,
                    report.error.as_deref().unwrap_or_default(),
                ),
                None,
            ),
        };
        let tell = self.progress.is_some().then(|| report.clone());
        (Unrecorded { end, blob, tell }, report)
    }

    fn failure(&self, index: &str, class: &str, message: &str) -> Command {
        Command::FailStep {
            task: self.task,
            run: self.run,
            step: index.to_owned(),
            class: class.to_owned(),
            message: planb_core::text::clip(
                message,
                planb_core::state::tasks::STEP_MESSAGE_CHARS_MAX,
            ),
            recoverable: true,
        }
    }
}

/// Calls the step's tool (or not, when `guard` blocks it); its start is
/// recorded already, its end is recorded by the caller.
async fn perform(shared: Arc<Shared>, starting: Starting) -> Finished {
    let Starting {
        call,
        mut report,
        guard,
    } = starting;
    let started = Instant::now();
    let outcome = match guard {
        Some(reason) => Err(("guard_blocked", format!("Guard blocked: {reason}"))),
        None => match shared
            .downstream
            .call(
                &call.tool.server,
                &call.tool.name,
                call.args,
                shared.timeout,
            )
            .await
        {
            Ok(answer) => answer.value().map_err(|e| ("tool_error", e)),
            Err(e) => Err((e.class, e.message)),
        },
    };
    report.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let outcome = outcome.and_then(|value| {
        let bytes = serde_json::to_vec(&value).unwrap_or_default();
        if bytes.len() > RESULT_BYTES_MAX {
            Err((
                "result_too_large",
                format!(
                    "the result is {} bytes of JSON; at most {RESULT_BYTES_MAX} are kept",
                    bytes.len()
                ),
            ))
        } else {
            Ok((value, bytes))
        }
    });
    let outcome = match outcome {
        Ok((value, bytes)) => {
            report.success = true;
            report.result = Some(value);
            let artifact = ContentHash::of_bytes(&bytes).0;
            Ok((bytes, artifact))
        }
        Err((class, message)) => {
            report.error = Some(message);
            Err(class)
        }
    };
    Finished {
        at: call.at,
        report,
        input: call.input.0,
        outcome,
    }
}

/// The plan's latest run when a call looks, and whether it was active.
async fn latest_run(store: &Arc<Store>, task: TaskId) -> Result<Option<(RunId, bool)>, StoreError> {
    let store = Arc::clone(store);
    blocking(move || {
        store.read(|s| {
            s.task(&task)
                .and_then(|t| t.runs.last().map(|r| (r.id, r.state.is_active())))
        })
    })
    .await
}

/// Refuses to run, under the run lock, when another run started after the
/// call looked (`seen`), or was active then and ended on its own (one that
/// lost its process is ended `worker_error` and may be resumed): two
/// starts of one plan at once run it once, however long it takes.
fn refuse_a_second_run(found: &Task, seen: Option<(RunId, bool)>) -> Result<(), PlanRunError> {
    let Some(latest) = found.runs.last() else {
        return Ok(());
    };
    let when = match seen {
        Some((id, _)) if id != latest.id => "started after this call was made",
        Some((_, true))
            if !latest
                .reason
                .as_deref()
                .is_some_and(|r| RunEndReason::parse(r).is_lost()) =>
        {
            "was running when this call was made"
        }
        None => "started after this call was made",
        _ => return Ok(()),
    };
    Err(PlanRunError::StartedMeanwhile {
        task: found.id,
        run: latest.id,
        when,
        state: latest.state.as_str(),
    })
}

/// Takes the plan `task`'s run lock, ends a run whose process died, and
/// reads the plan as recorded.
async fn hold(
    store: &Arc<Store>,
    task: TaskId,
) -> Result<(planb_projections::RunLock, Task, Arc<ExecPlan>), PlanRunError> {
    let (lock, found) = hold_task(store, task).await?;
    let found = found.ok_or_else(|| PlanRunError::NotFound(task.to_string()))?;
    let plan = load(&found)?;
    Ok((lock, found, plan))
}

/// Each step's tool, starting the servers the plan needs; a name that
/// resolves to no tool, or to several, is an error naming the step. Also
/// the servers not waited for (see [`Downstream::tools_for`]).
async fn step_tools(
    downstream: &Downstream,
    plan: &ExecPlan,
) -> Result<(Vec<Arc<ToolInfo>>, Vec<String>), PlanRunError> {
    let PlanTools { tools, silent } = downstream
        .tools_for(plan.steps.iter().map(|s| s.tool.as_str()))
        .await
        .map_err(|e| PlanRunError::Downstream(e.message))?;
    plan.check_tools(|name| Downstream::resolve(&tools, name).map(|_| ()))
        .map_err(|e| PlanRunError::Invalid(e.to_string()))?;
    // Each name once: a plan's steps mostly share a few tools.
    let mut resolved: BTreeMap<&str, Arc<ToolInfo>> = BTreeMap::new();
    let tools = plan
        .steps
        .iter()
        .filter_map(|s| match resolved.get(s.tool.as_str()) {
            Some(found) => Some(Arc::clone(found)),
            None => {
                let found = Arc::new(Downstream::resolve(&tools, &s.tool).ok()?);
                resolved.insert(&s.tool, Arc::clone(&found));
                Some(found)
            }
        })
        .collect();
    Ok((tools, silent))
}

/// Runs (or, with `resume`, resumes) the plan `task` to an end, holding its
/// run lock. `variables` are the call-time variables; a resume without them
/// uses those of the run it resumes.
pub async fn run_plan(
    store: Arc<Store>,
    downstream: Arc<Downstream>,
    task: TaskId,
    variables: Option<Map<String, Value>>,
    resume: bool,
    options: RunOptions,
    progress: Option<ProgressFn>,
) -> Result<PlanOutcome, PlanRunError> {
    let started = Instant::now();
    let seen = latest_run(&store, task).await?;
    let (lock, found, plan) = hold(&store, task).await?;
    refuse_a_second_run(&found, seen)?;
    let previous = found.runs.last();
    if resume && previous.is_none() {
        return Err(PlanRunError::Invalid(format!(
            "plan {task} has not run yet: nothing to resume (run it)"
        )));
    }
    options.guards.check(&plan).map_err(PlanRunError::Invalid)?;
    if let Some(given) = &variables {
        planb_core::exec_plan::check_variable_names(given, "variables")
            .map_err(|e| PlanRunError::Invalid(e.to_string()))?;
    }
    let (resolved, silent) = step_tools(&downstream, &plan).await?;
    // A resume keeps the variables of the run it resumes (the results it
    // reuses were made with them); variables given now override them.
    let mut call_vars: Map<String, Value> = if resume {
        previous
            .and_then(|r| r.variables.as_deref())
            .and_then(|text| serde_json::from_str(text).ok())
            .unwrap_or_default()
    } else {
        Map::new()
    };
    call_vars.extend(variables.unwrap_or_default());
    let recorded = if resume {
        found.resumable_successes(previous.map(|r| r.id))
    } else {
        BTreeMap::new()
    };
    let resumed_from = if resume { previous.map(|r| r.id) } else { None };
    // Called in the run resumed with no success recorded (in flight when it
    // was cut short, or failed): called a second time.
    let in_flight: Vec<String> = match previous {
        Some(run) if resume => run
            .attempts
            .keys()
            .filter(|step| !run.succeeded.contains(*step))
            .cloned()
            .collect(),
        _ => Vec::new(),
    };
    // No copy of the task is held while its run starts: the run list it
    // shares would be copied whole.
    drop(found);
    let run = start_run(
        &store,
        task,
        resumed_from,
        Some(Value::Object(call_vars.clone()).to_string()),
    )
    .await?;
    let shared = Arc::new(Shared {
        store: Arc::clone(&store),
        downstream,
        task,
        run,
        timeout: options.step_timeout,
        progress,
    });
    let mut outcome = PlanOutcome {
        plan_id: task,
        title: plan.title.clone(),
        run: Some(run),
        success: false,
        stopped: false,
        duration: Duration::ZERO,
        steps: Vec::new(),
        steps_in_plan: plan.steps.len(),
        variables: merged(&plan, &call_vars),
        error: None,
        called_again: Vec::new(),
        servers_not_answering: silent,
    };
    let ended = drive(
        &shared,
        &plan,
        &resolved,
        &recorded,
        &options,
        started,
        &mut outcome,
    )
    .await;
    outcome.called_again = in_flight
        .into_iter()
        .filter(|i| outcome.steps.iter().any(|s| s.index == *i && !s.reused))
        .collect();
    let (result, reason, failed_step) = match ended {
        Ok(Settled::Completed) => {
            outcome.success = true;
            (RunOutcome::Completed, None, None)
        }
        Ok(Settled::Stopped) => {
            outcome.stopped = true;
            outcome.error = Some("the run stopped on request; resume it to go on".into());
            (RunOutcome::Stopped, None, None)
        }
        Ok(Settled::EndedElsewhere(state)) => {
            outcome.error = Some(format!(
                "the run was ended by another process (it is {state}); resume it to go on"
            ));
            drop(lock);
            outcome.duration = started.elapsed();
            return Ok(outcome);
        }
        Ok(Settled::Failed { message, step }) => {
            outcome.error = Some(message);
            (
                RunOutcome::Failed,
                Some(RunEndReason::StepFailed.to_wire()),
                Some(step),
            )
        }
        Err(error) => {
            let reason = RunEndReason::WorkerError(Some(error.to_string())).to_wire();
            let _ = shared
                .execute(Command::EndRun {
                    task,
                    run,
                    outcome: RunOutcome::Failed,
                    reason: Some(reason),
                    failed_step: None,
                    recoverable: true,
                })
                .await;
            drop(lock);
            return Err(error.into());
        }
    };
    shared
        .execute(Command::EndRun {
            task,
            run,
            outcome: result,
            reason,
            failed_step,
            recoverable: result != RunOutcome::Completed,
        })
        .await?;
    drop(lock);
    outcome.duration = started.elapsed();
    Ok(outcome)
}

enum Settled {
    Completed,
    Stopped,
    Failed {
        message: String,
        step: String,
    },
    /// Another process recorded the run's end (it should not: this process
    /// holds the run lock); there is nothing left to record.
    EndedElsewhere(String),
}

/// Whether the run goes on: `None` while it runs, else how it settles (a
/// stop asked for, or an end recorded by someone else).
async fn look(shared: &Shared) -> Result<Option<Settled>, StoreError> {
    let store = Arc::clone(&shared.store);
    let (task, run) = (shared.task, shared.run);
    let state = blocking(move || {
        store.read(|s| {
            s.task(&task)
                .and_then(|t| t.runs.iter().rev().find(|r| r.id == run))
                .map(|r| r.state)
        })
    })
    .await?;
    Ok(match state {
        Some(RunState::Running) => None,
        Some(RunState::Stopping) => Some(Settled::Stopped),
        Some(other) => Some(Settled::EndedElsewhere(other.as_str().to_owned())),
        None => Some(Settled::EndedElsewhere("gone".to_owned())),
    })
}

async fn drive(
    shared: &Arc<Shared>,
    plan: &ExecPlan,
    tools: &[Arc<ToolInfo>],
    recorded: &BTreeMap<String, planb_core::StepSuccess>,
    options: &RunOptions,
    started: Instant,
    outcome: &mut PlanOutcome,
) -> Result<Settled, StoreError> {
    let mut calls_made: u32 = 0;
    let mut per_tool: BTreeMap<String, u32> = BTreeMap::new();
    // A stop is looked for before the first batch, then at least every
    // `poll` (not before every batch: a chain of fast steps would pay a
    // read of the store per step).
    let mut last_look: Option<Instant> = None;
    // Ends not recorded yet. They go with the next starts, in one append;
    // when a batch ends, with the next batch's first starts. They wait for
    // nothing else: with calls still in flight and none to start, they are
    // recorded alone.
    let mut unrecorded: Vec<Unrecorded> = Vec::new();
    for (number, batch) in plan.batches().iter().enumerate() {
        if last_look.is_none_or(|at| at.elapsed() >= options.poll) {
            last_look = Some(Instant::now());
            if let Some(settled) = look(shared).await? {
                let _ = shared.settle(&mut unrecorded, &mut []).await;
                return Ok(settled);
            }
        }
        let mut queue = Vec::new();
        for &at in batch {
            let step = &plan.steps[at];
            let args = resolve_args(&step.args, &outcome.variables);
            let call = json!({"tool": tools[at].qualified(), "args": args});
            let bytes = serde_json::to_vec(&call).unwrap_or_default();
            let input = ContentHash::of_bytes(&bytes);
            let report = StepReport {
                index: step.index.clone(),
                title: step.title.clone(),
                tool: step.tool.clone(),
                args: Value::Object(args.clone()),
                success: false,
                result: None,
                error: None,
                duration_ms: 0,
                reused: false,
            };
            if let Some(success) = recorded.get(&step.index)
                && success.input == input.0
                && let Some(value) = restore(shared, success.artifact, &step.index).await
            {
                let report = StepReport {
                    success: true,
                    result: Some(value),
                    reused: true,
                    ..report
                };
                shared.tell_ended(&report);
                queue.push((at, None, report));
                continue;
            }
            queue.push((
                at,
                Some(Call {
                    at,
                    tool: Arc::clone(&tools[at]),
                    args,
                    bytes,
                    input,
                }),
                report,
            ));
        }
        let mut reports: BTreeMap<usize, StepReport> = BTreeMap::new();
        // Polled by this task, not spawned: a call's answer wakes the run
        // itself, with no task in between.
        let mut in_flight = FuturesUnordered::new();
        let mut running: Vec<String> = Vec::new();
        let mut queue = queue.into_iter();
        loop {
            let mut starting: Vec<Starting> = Vec::new();
            while in_flight.len() + starting.len() < options.concurrency.max(1) {
                let Some((at, call, report)) = queue.next() else {
                    break;
                };
                let Some(call) = call else {
                    reports.insert(at, report);
                    continue;
                };
                let guard = guard_reason(
                    &options.guards,
                    &report.tool,
                    calls_made,
                    &per_tool,
                    started.elapsed(),
                );
                if guard.is_none() {
                    calls_made = calls_made.saturating_add(1);
                    *per_tool.entry(report.tool.clone()).or_default() += 1;
                }
                starting.push(Starting {
                    call,
                    report,
                    guard,
                });
            }
            if starting.is_empty() && in_flight.is_empty() {
                break;
            }
            // A refused start means the run no longer runs (which way, the
            // state says).
            let mut refused = false;
            if !starting.is_empty() || !unrecorded.is_empty() {
                match shared.settle(&mut unrecorded, &mut starting).await {
                    Ok(started) => {
                        for one in starting {
                            if started.contains(&one.report.index) {
                                shared.tell(Progress::Started {
                                    index: one.report.index.clone(),
                                });
                                running.push(one.report.index.clone());
                                in_flight.push(
                                    std::panic::AssertUnwindSafe(perform(Arc::clone(shared), one))
                                        .catch_unwind(),
                                );
                            } else {
                                refused = true;
                            }
                        }
                    }
                    Err(StoreError::Rejected(Rejection::Task {
                        code: TaskErrorCode::RunNotActive,
                        ..
                    })) => refused = true,
                    Err(error) => return Err(error),
                }
            }
            if !refused && !in_flight.is_empty() {
                let joined = tokio::select! {
                    joined = in_flight.next() => joined,
                    () = tokio::time::sleep(options.poll) => None,
                };
                let mut ended: Vec<_> = joined.into_iter().collect();
                if !ended.is_empty() {
                    // Calls that have ended too are recorded with it, in
                    // the same append.
                    while let Some(Some(more)) = in_flight.next().now_or_never() {
                        ended.push(more);
                    }
                }
                for joined in ended {
                    match joined {
                        Ok(finished) => {
                            running.retain(|i| *i != finished.report.index);
                            let at = finished.at;
                            let (end, report) = shared.unrecorded(finished);
                            unrecorded.push(end);
                            reports.insert(at, report);
                        }
                        Err(panicked) => {
                            let said = panicked
                                .downcast_ref::<&str>()
                                .map(|s| (*s).to_owned())
                                .or_else(|| panicked.downcast_ref::<String>().cloned())
                                .unwrap_or_default();
                            return Err(StoreError::Io {
                                op: "run a step",
                                path: String::new(),
                                source: std::io::Error::other(format!(
                                    "a call of one of steps {} panicked: {said}",
                                    running.join(", ")
                                )),
                            });
                        }
                    }
                }
            }
            // Look for a stop at least every `poll`, however fast calls end.
            let due = last_look.is_none_or(|at| at.elapsed() >= options.poll);
            if due {
                last_look = Some(Instant::now());
            }
            if refused || due {
                let settled = match look(shared).await? {
                    None if refused => Some(Settled::Stopped),
                    other => other,
                };
                if let Some(settled) = settled {
                    cancel(
                        shared,
                        &mut in_flight,
                        running,
                        &mut unrecorded,
                        &mut reports,
                    )
                    .await;
                    outcome.steps.extend(reports.into_values());
                    return Ok(settled);
                }
            }
        }
        // Bind in index order, only what succeeded.
        let mut failed: Vec<&StepReport> = Vec::new();
        for &at in batch {
            let Some(report) = reports.get(&at) else {
                continue;
            };
            if report.success {
                if let (Some(var), Some(value)) = (&plan.steps[at].result_variable, &report.result)
                {
                    outcome.variables.insert(var.clone(), value.clone());
                }
            } else {
                failed.push(report);
            }
        }
        if !failed.is_empty() {
            let message = if batch.len() == 1 {
                format!(
                    "Step {} failed: {}",
                    failed[0].index,
                    failed[0].error.as_deref().unwrap_or("unknown error")
                )
            } else {
                let list: Vec<String> = failed
                    .iter()
                    .map(|r| {
                        format!(
                            "step {}: {}",
                            r.index,
                            r.error.as_deref().unwrap_or("unknown error")
                        )
                    })
                    .collect();
                format!("Batch {} had failures: {}", number + 1, list.join("; "))
            };
            let step = failed[0].index.clone();
            outcome.steps.extend(reports.into_values());
            shared.settle(&mut unrecorded, &mut []).await?;
            return Ok(Settled::Failed { message, step });
        }
        outcome.steps.extend(reports.into_values());
    }
    shared.settle(&mut unrecorded, &mut []).await?;
    Ok(Settled::Completed)
}

/// The result recorded for a step before, read back whole; `None` (and the
/// step is called again) when it cannot be.
async fn restore(shared: &Shared, artifact: [u8; 32], index: &str) -> Option<Value> {
    let blobs = shared.store.root().blobs();
    let restored = blocking(move || blobs.get(&artifact).map_err(blob_error))
        .await
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok());
    if restored.is_none() {
        tracing::warn!("step {index}: its recorded result cannot be read back; calling it again");
    }
    restored
}

/// Cancels the calls in flight, then records in one append the ends of the
/// steps that finished (a call that ended before it could be cancelled
/// keeps its outcome) and each other started step failed `cancelled`.
/// When the run was ended elsewhere nothing more is accepted, and nothing
/// is.
async fn cancel<F: Future<Output = std::thread::Result<Finished>>>(
    shared: &Shared,
    in_flight: &mut FuturesUnordered<F>,
    mut running: Vec<String>,
    unrecorded: &mut Vec<Unrecorded>,
    reports: &mut BTreeMap<usize, StepReport>,
) {
    // The calls whose answers are in are taken; the others are dropped,
    // which cancels them. A look may end before it has polled every call
    // (the set yields after a round), so there are as many looks as calls.
    for _ in 0..=in_flight.len() {
        let joined = match in_flight.next().now_or_never() {
            Some(Some(joined)) => joined,
            Some(None) => break,
            None => continue,
        };
        if let Ok(finished) = joined {
            running.retain(|i| *i != finished.report.index);
            let at = finished.at;
            let (end, report) = shared.unrecorded(finished);
            unrecorded.push(end);
            reports.insert(at, report);
        }
    }
    in_flight.clear();
    for index in running {
        unrecorded.push(Unrecorded {
            end: shared.failure(&index, "cancelled", "the run was stopped during the call"),
            blob: None,
            tell: None,
        });
    }
    let _ = shared.settle(unrecorded, &mut []).await;
}

fn guard_reason(
    guards: &Guards,
    tool: &str,
    calls_made: u32,
    per_tool: &BTreeMap<String, u32>,
    elapsed: Duration,
) -> Option<String> {
    if let Some(max) = guards.max_calls
        && calls_made >= max
    {
        return Some(format!("the run's budget of {max} tool calls is spent"));
    }
    if let Some(&cap) = guards.per_tool.get(tool)
        && per_tool.get(tool).copied().unwrap_or(0) >= cap
    {
        return Some(format!("{tool} may be called at most {cap} times in a run"));
    }
    if let Some(max) = guards.max_wall
        && elapsed >= max
    {
        return Some(format!(
            "the run's time limit of {} s is reached",
            max.as_secs_f64()
        ));
    }
    None
}

/// A run another program made of a plan, to be recorded as a planb run: the
/// steps it completed with their results, and how it ended.
#[derive(Clone, Debug)]
pub struct ForeignRun {
    /// The variables the run was given over the plan's.
    pub call_variables: Map<String, Value>,
    /// Every variable as the run last saw it (plan, call and results):
    /// what the steps' arguments are resolved with.
    pub variables: Map<String, Value>,
    /// The completed steps (by index) whose results are known whole.
    pub completed: Vec<(String, Value)>,
    /// Whether the run finished every step.
    pub finished: bool,
    /// Why it did not finish, when it did not.
    pub reason: Option<String>,
}

/// Records `foreign` as a run of the plan `task`: each completed step's
/// call (resolved as this build would resolve it, so a resume reuses the
/// step exactly when its call is the same) and result, then the run's end:
/// completed only when `finished`, otherwise failed and recoverable, so
/// `resume` runs the rest. Holds the plan's run lock meanwhile.
pub async fn record_foreign_run(
    store: Arc<Store>,
    downstream: Arc<Downstream>,
    task: TaskId,
    foreign: ForeignRun,
) -> Result<RunId, PlanRunError> {
    let (lock, _, plan) = hold(&store, task).await?;
    let (tools, _) = step_tools(&downstream, &plan).await?;
    let run = start_run(
        &store,
        task,
        None,
        Some(Value::Object(foreign.call_variables.clone()).to_string()),
    )
    .await?;
    let shared = Shared {
        store: Arc::clone(&store),
        downstream,
        task,
        run,
        timeout: Duration::ZERO,
        progress: None,
    };
    for (step, tool) in plan.steps.iter().zip(&tools) {
        let Some((_, result)) = foreign.completed.iter().find(|(i, _)| *i == step.index) else {
            continue;
        };
        let args = resolve_args(&step.args, &foreign.variables);
        let call = json!({"tool": tool.qualified(), "args": args});
        let bytes = serde_json::to_vec(&call).unwrap_or_default();
        let input = ContentHash::of_bytes(&bytes).0;
        let result = serde_json::to_vec(result).unwrap_or_default();
        let success = Command::SucceedStep {
            task,
            run,
            step: step.index.clone(),
            input,
            artifact: ContentHash::of_bytes(&result).0,
            bytes: result.len() as u64,
            duration_ms: 0,
            tokens_in: 0,
            tokens_out: 0,
        };
        let start = StepStart {
            step: step.index.clone(),
            input,
            call: Some(input),
        };
        shared.record(vec![bytes], Vec::new(), vec![start]).await?;
        shared
            .record(vec![result], vec![success], Vec::new())
            .await?;
    }
    shared
        .execute(Command::EndRun {
            task,
            run,
            outcome: if foreign.finished {
                RunOutcome::Completed
            } else {
                RunOutcome::Failed
            },
            reason: foreign.reason,
            failed_step: None,
            recoverable: !foreign.finished,
        })
        .await?;
    drop(lock);
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;
    use planb_projections::{DataRoot, FixedEnvironment};

    #[test]
    fn a_plan_is_parsed_once_however_often_it_runs_and_read_anew_when_its_definition_differs() {
        let dir = tempfile::tempdir().expect("temp dir");
        let env = Arc::new(FixedEnvironment::new(
            planb_core::Timestamp(1_700_000_000_000),
            1_000,
        ));
        let (store, _) = Store::open(DataRoot::new(dir.path()), env).expect("store");
        let task = TaskId::from_uuid(uuid::Uuid::new_v4());
        let definition = |title: &str| {
            json!({"title": title, "steps": [
                {"index": "1", "title": "Echo", "tool": "echo", "args": {"text": "hi"}}
            ]})
            .to_string()
        };
        store
            .execute(Command::CreatePlan {
                task,
                definition: definition("First"),
                client_request_id: None,
            })
            .expect("create");
        let mut found = store
            .read(|s| s.task(&task).cloned())
            .expect("read")
            .expect("the plan's task");
        let first = load(&found).expect("load");
        assert_eq!(first.title, "First");
        assert!(Arc::ptr_eq(&first, &load(&found).expect("load again")));
        // Not a change the log can make, but a cache must not hide one.
        if let Some(info) = found.plan.as_mut() {
            info.definition = definition("Second");
        }
        let second = load(&found).expect("load the changed one");
        assert_eq!(second.title, "Second");
        if let Some(info) = found.plan.as_mut() {
            info.deleted = true;
        }
        assert!(matches!(load(&found), Err(PlanRunError::NotFound(_))));
    }
}
