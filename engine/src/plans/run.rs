//! One run of an execution plan: Kahn batches, at most `concurrency` calls
//! at once within a batch, guards checked before each call, every fact
//! recorded through the store before the next decision. The plan's calls
//! are one kind of step of the shared settle loop (`PlanSteps`), hosted
//! like a task's run.
//!
//! The process that runs a plan holds the plan's run lock for the whole
//! run, as a task's worker does: a run whose process died is ended `failed`
//! (`worker_error`, recoverable) by whoever looks next, and resumed with
//! [`run_plan`] and a [`RunRequest`] with `resume`. A resume binds the variables of every
//! step that succeeded before from its recorded result (never truncated)
//! and calls again only the steps whose call, resolved now, differs from
//! the one that succeeded.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use planb_core::exec_plan::{
    ExecPlan, Runaway, TypedArg, resolve_args, typed_args, whole_reference,
};
use planb_core::{Command, ContentHash, RunEndReason, RunId, RunOutcome, StepStart, Task, TaskId};
use planb_projections::{Store, StoreError};
use serde_json::{Map, Value, json};

use super::servers::{Downstream, PlanTools, ToolInfo};
use crate::host::{RunHost, WorkerError, blob_error, blocking, hold_task};
use crate::settle::{Cut, End, Launch, Next, Pace, Settled, StepKind, settle};

/// Largest tool result kept, in bytes of JSON.
pub const RESULT_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Limits checked before each call; a blocked step fails with
/// `Guard blocked: <reason>` (code [`GUARD_BLOCKED`]) and its tool is never
/// called.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Guards {
    /// Most tool calls in one run.
    pub max_calls: Option<u32>,
    /// Most calls of one tool (by the name the plan uses) in one run.
    pub per_tool: BTreeMap<String, u32>,
    /// Longest a run may take before no new call starts.
    pub max_wall: Option<Duration>,
    /// Whether runaway detection ([`Runaway`]) stops a run whose numeric
    /// results have degenerated; on unless turned off.
    pub runaway: bool,
}

impl Default for Guards {
    fn default() -> Guards {
        Guards {
            max_calls: None,
            per_tool: BTreeMap::new(),
            max_wall: None,
            runaway: true,
        }
    }
}

/// The code of a step a guard blocked.
pub const GUARD_BLOCKED: &str = "GUARD_BLOCKED";

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
    /// How many revised plans of a failed run may be asked for and run
    /// (re-planning, done by planb-app around [`run_plan`]); 0 turns it off.
    pub replan: u32,
}

impl Default for RunOptions {
    fn default() -> RunOptions {
        RunOptions {
            concurrency: 4,
            step_timeout: Duration::from_secs(300),
            guards: Guards::default(),
            poll: Duration::from_millis(200),
            replan: 0,
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
    /// The failure's code, when it has one ([`GUARD_BLOCKED`]).
    pub code: Option<&'static str>,
    /// In a dry run, the arguments passed with their own JSON type rather
    /// than as text (a whole-string `${var}` of a value that is not a
    /// string, or of a step's result): `name: type`.
    pub typed: Vec<String>,
    /// 0 for a step of the plan run; `k` for a step of its `k`th revised
    /// plan (re-planning).
    pub revision: u32,
}

impl StepReport {
    fn summary(&self) -> Value {
        let mut summary = json!({
            "index": self.index,
            "title": self.title,
            "tool": self.tool,
            "success": self.success,
            "error": self.error,
        });
        if let (Some(code), Value::Object(map)) = (self.code, &mut summary) {
            map.insert("code".into(), code.into());
        }
        if let (1.., Value::Object(map)) = (self.revision, &mut summary) {
            map.insert("revision".into(), self.revision.into());
        }
        if let (false, Value::Object(map)) = (self.typed.is_empty(), &mut summary) {
            map.insert("typed".into(), json!(self.typed));
        }
        summary
    }
}

/// A per-tool cap that names no tool of the plan: it would silently never
/// apply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tool cap {tool:?}: no step calls it (the plan's tools: {})", used.join(", "))]
pub struct UnknownToolCap {
    /// The tool the cap names.
    pub tool: String,
    /// The tools the plan's steps call, each once, sorted.
    pub used: Vec<String>,
}

impl Guards {
    /// Refuses a per-tool cap that names no tool of `plan` (as its steps
    /// write them).
    pub fn check(&self, plan: &ExecPlan) -> Result<(), UnknownToolCap> {
        for tool in self.per_tool.keys() {
            if !plan.steps.iter().any(|s| &s.tool == tool) {
                let mut used: Vec<String> = plan.steps.iter().map(|s| s.tool.clone()).collect();
                used.sort_unstable();
                used.dedup();
                return Err(UnknownToolCap {
                    tool: tool.clone(),
                    used,
                });
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
    /// The revised plans run after this run failed, in order (re-planning).
    pub revisions: Vec<RevisionReport>,
}

/// A revised plan run after a run failed.
#[derive(Clone, Debug, PartialEq)]
pub struct RevisionReport {
    /// Which revision, from 1.
    pub number: u32,
    /// The revised plan.
    pub plan_id: TaskId,
    /// Its run, once it started.
    pub run: Option<RunId>,
    /// The step whose failure it answers.
    pub step: String,
    /// That step's error.
    pub error: String,
    /// The revised plan's steps.
    pub steps: usize,
    /// Whether its run succeeded.
    pub success: bool,
}

impl RevisionReport {
    fn to_json(&self) -> Value {
        json!({
            "number": self.number,
            "plan_id": self.plan_id.to_string(),
            "run_id": self.run.map(|r| r.to_string()),
            "failed_step": self.step,
            "error": self.error,
            "steps": self.steps,
            "success": self.success,
        })
    }
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
            let code = self.steps.iter().find_map(|s| s.code);
            if let Some(code) = code {
                out.insert("error_code".into(), code.into());
            }
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
        if !self.revisions.is_empty() {
            out.insert("replanned".into(), true.into());
            let revisions = self.revisions.iter().map(RevisionReport::to_json);
            out.insert("revisions".into(), revisions.collect());
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
    /// The run failed and a revised plan is asked for (re-planning).
    Replanning {
        /// Which revision is asked for, from 1.
        number: u32,
        /// The step that failed.
        step: String,
        /// Its error.
        error: String,
    },
    /// A revised plan was recorded and runs next; its steps are told as
    /// the plan's are.
    Revised(Box<Revised>),
}

/// A revised plan about to run.
#[derive(Clone, Debug)]
pub struct Revised {
    /// Which revision, from 1.
    pub number: u32,
    /// The revised plan's id.
    pub plan_id: TaskId,
    /// The revised plan.
    pub plan: Arc<ExecPlan>,
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
        "run {run} of plan {task} {when} (it is {state}); call again to run the plan once more"
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
    let plan = Arc::new(
        info.exec_plan()
            .map_err(|e| PlanRunError::Invalid(e.to_string()))?,
    );
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
    let mut results: BTreeMap<String, String> = BTreeMap::new();
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
                code: None,
                typed: dry_typed(step, &variables, &results),
                revision: 0,
            });
            if let Some(var) = &step.result_variable {
                variables.insert(var.clone(), format!("<{} result>", step.tool).into());
                results.insert(var.clone(), step.tool.clone());
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
        revisions: Vec::new(),
    }
}

/// The arguments of `step` a dry run marks as typed: `name: type` for a
/// whole-string reference to a value that is not text, `name: the result
/// of TOOL, as it returns it` for one to a step's result (`results`: the
/// variables bound so far by steps, and their tools).
fn dry_typed(
    step: &planb_core::exec_plan::PlanStep,
    variables: &Map<String, Value>,
    results: &BTreeMap<String, String>,
) -> Vec<String> {
    let mut typed: Vec<String> = typed_args(&step.args, variables)
        .into_iter()
        .map(|t| format!("{}: {}", t.arg, t.kind))
        .collect();
    for (arg, written) in &step.args {
        let Some(path) = written.as_str().and_then(whole_reference) else {
            continue;
        };
        let name = path.split('.').next().unwrap_or(path);
        if let Some(tool) = results.get(name) {
            typed.push(format!("{arg}: the result of {tool}, with its own type"));
        }
    }
    typed
}

/// A step's call, resolved: the tool, its arguments, and the call's JSON
/// (what its start names) and hash.
struct Call {
    at: usize,
    tool: Arc<ToolInfo>,
    args: Map<String, Value>,
    bytes: Vec<u8>,
    input: ContentHash,
    /// The arguments passed with their JSON type from a whole-string
    /// `${var}`: named when the tool refuses the call.
    typed: Vec<TypedArg>,
}

/// A step whose call ended, as it will be recorded.
struct Finished {
    at: usize,
    report: StepReport,
    input: [u8; 32],
    /// The result's JSON and its SHA-256, or the failure's class.
    outcome: Result<(Vec<u8>, [u8; 32]), &'static str>,
}

/// A step about to start: its start is recorded before its call is made.
struct Starting {
    shared: Arc<Shared>,
    call: Call,
    report: StepReport,
    guard: Option<String>,
}

/// What every call of a run shares.
struct Shared {
    host: RunHost,
    downstream: Arc<Downstream>,
    timeout: Duration,
    progress: Option<ProgressFn>,
}

impl Shared {
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

    fn failure(&self, index: &str, class: &str, message: &str) -> Command {
        Command::FailStep {
            task: self.host.task,
            run: self.host.run,
            step: index.to_owned(),
            class: class.to_owned(),
            message: planb_core::text::clip(
                message,
                planb_core::state::tasks::STEP_MESSAGE_CHARS_MAX,
            ),
            recoverable: true,
        }
    }

    /// The end of a step's call as it will be recorded.
    fn end_of(&self, report: &StepReport, input: [u8; 32], outcome: Outcome) -> End {
        match outcome {
            Ok((bytes, artifact)) => End {
                command: Command::SucceedStep {
                    task: self.host.task,
                    run: self.host.run,
                    step: report.index.clone(),
                    input,
                    artifact,
                    bytes: bytes.len() as u64,
                    duration_ms: report.duration_ms,
                    tokens_in: 0,
                    tokens_out: 0,
                },
                blob: Some(bytes),
            },
            Err(class) => End {
                command: self.failure(
                    &report.index,
                    class,
                    report.error.as_deref().unwrap_or_default(),
                ),
                blob: None,
            },
        }
    }
}

/// A call's result as JSON with its hash, or its failure's class.
type Outcome = Result<(Vec<u8>, [u8; 32]), &'static str>;

/// Calls the step's tool (or not, when its guard blocks it); its start is
/// recorded already, its end is recorded by the settle loop.
async fn perform(starting: Starting) -> Finished {
    let Starting {
        shared,
        mut call,
        mut report,
        guard,
    } = starting;
    let started = Instant::now();
    if guard.is_some() {
        report.code = Some(GUARD_BLOCKED);
    }
    let typed = std::mem::take(&mut call.typed);
    let outcome = match guard {
        Some(reason) => Err(("guard_blocked", format!("Guard blocked: {reason}"))),
        None => shared
            .downstream
            .call(
                &call.tool.server,
                &call.tool.name,
                call.args,
                shared.timeout,
            )
            .await
            .map_err(|e| (e.class, e.message))
            .and_then(|answer| answer.value().map_err(|e| ("tool_error", e.to_string())))
            .map_err(|(class, message)| (class, with_typed_hint(class, message, &typed))),
    };
    report.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let outcome = match outcome.and_then(kept) {
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

/// A refusal's message with a line for each argument passed with its JSON
/// type from a whole-string `${var}`: the likely cause when a tool
/// expecting text refuses it.
fn with_typed_hint(class: &str, message: String, typed: &[TypedArg]) -> String {
    if typed.is_empty() || !matches!(class, "tool_error" | "server_error") {
        return message;
    }
    let mut message = message;
    for arg in typed {
        message.push('\n');
        message.push_str(&arg.hint());
    }
    message
}

/// A result as kept, its JSON at most [`RESULT_BYTES_MAX`] bytes.
fn kept(value: Value) -> Result<(Value, Vec<u8>), (&'static str, String)> {
    let bytes = serde_json::to_vec(&value).unwrap_or_default();
    if bytes.len() > RESULT_BYTES_MAX {
        return Err((
            "result_too_large",
            format!(
                "the result is {} bytes of JSON; at most {RESULT_BYTES_MAX} are kept",
                bytes.len()
            ),
        ));
    }
    Ok((value, bytes))
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

/// A run of a plan, as asked for.
#[derive(Clone)]
pub struct RunRequest {
    /// The plan.
    pub task: TaskId,
    /// The call-time variables; a resume without them uses those of the
    /// run it resumes.
    pub variables: Option<Map<String, Value>>,
    /// Resume the latest run (reusing what it completed) instead of
    /// running afresh.
    pub resume: bool,
    /// How it runs.
    pub options: RunOptions,
    /// Told of each step's start and end.
    pub progress: Option<ProgressFn>,
    /// The model re-planning asks, when `options.replan` allows it; `None`:
    /// the one configured (`PLANB_MODEL_PLANNER`, `PLANB_MODEL`).
    pub planner: Option<crate::backend::Backend>,
}

impl std::fmt::Debug for RunRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunRequest")
            .field("task", &self.task)
            .field("variables", &self.variables)
            .field("resume", &self.resume)
            .field("options", &self.options)
            .field("progress", &self.progress.is_some())
            .field("planner", &self.planner.is_some())
            .finish()
    }
}

impl RunRequest {
    /// A fresh run of `task` with default options, telling no one.
    pub fn new(task: TaskId) -> RunRequest {
        RunRequest {
            task,
            variables: None,
            resume: false,
            options: RunOptions::default(),
            progress: None,
            planner: None,
        }
    }
}

/// What a run starts from, read under the run lock.
struct Begun {
    plan: Arc<ExecPlan>,
    tools: Vec<Arc<ToolInfo>>,
    silent: Vec<String>,
    call_vars: Map<String, Value>,
    recorded: BTreeMap<String, planb_core::StepSuccess>,
    resumed_from: Option<RunId>,
    /// Steps the resumed run called with no success recorded.
    in_flight: Vec<String>,
}

/// Whether `request` can run `plan` (the task `found`), as far as the plan
/// and its record tell: something to resume, guards that name its tools,
/// variables with usable names. Checked again when the run begins (under
/// its run lock); a front door checks first when it asks a person before
/// running, so that nothing is asked for a run that would be refused.
pub fn check_request(
    found: &Task,
    plan: &ExecPlan,
    request: &RunRequest,
) -> Result<(), RequestRefused> {
    if request.resume && found.runs.is_empty() {
        return Err(RequestRefused::NothingToResume(request.task));
    }
    request.options.guards.check(plan)?;
    if let Some(given) = &request.variables {
        planb_core::exec_plan::check_variable_names(given, "variables")?;
    }
    Ok(())
}

/// Why a run of a plan is refused before it begins.
#[derive(Debug, thiserror::Error)]
pub enum RequestRefused {
    /// A resume of a plan that never ran.
    #[error("plan {0} has not run yet: nothing to resume (run it)")]
    NothingToResume(TaskId),
    /// A guard names a tool the plan does not call.
    #[error(transparent)]
    ToolCap(#[from] UnknownToolCap),
    /// A call-time variable's name cannot be a variable's.
    #[error(transparent)]
    Variables(#[from] planb_core::exec_plan::PlanError),
}

/// Checks the request against the plan as recorded (under its run lock)
/// and reads what the run starts from.
async fn begin(
    downstream: &Downstream,
    found: &Task,
    plan: Arc<ExecPlan>,
    request: &mut RunRequest,
) -> Result<Begun, PlanRunError> {
    check_request(found, &plan, request).map_err(|e| PlanRunError::Invalid(e.to_string()))?;
    let previous = found.runs.last();
    let (tools, silent) = step_tools(downstream, &plan).await?;
    let previous = previous.filter(|_| request.resume);
    // A resume keeps the variables of the run it resumes (the results it
    // reuses were made with them); variables given now override them.
    let mut call_vars: Map<String, Value> = previous
        .and_then(|r| r.variables.as_deref())
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default();
    call_vars.extend(request.variables.take().unwrap_or_default());
    // Called in the run resumed with no success recorded (in flight when it
    // was cut short, or failed): called a second time.
    let in_flight = previous.map_or_else(Vec::new, |run| {
        run.attempts
            .keys()
            .filter(|step| !run.succeeded.contains(*step))
            .cloned()
            .collect()
    });
    Ok(Begun {
        recorded: previous.map_or_else(BTreeMap::new, |r| found.resumable_successes(Some(r.id))),
        resumed_from: previous.map(|r| r.id),
        plan,
        tools,
        silent,
        call_vars,
        in_flight,
    })
}

/// Runs (or, with `resume`, resumes) the plan to an end, holding its run
/// lock.
pub async fn run_plan(
    store: Arc<Store>,
    downstream: Arc<Downstream>,
    mut request: RunRequest,
) -> Result<PlanOutcome, PlanRunError> {
    let started = Instant::now();
    let task = request.task;
    let seen = latest_run(&store, task).await?;
    let (lock, found, plan) = hold(&store, task).await?;
    refuse_a_second_run(&found, seen)?;
    let begun = begin(&downstream, &found, plan, &mut request).await?;
    // No copy of the task is held while its run starts: the run list it
    // shares would be copied whole.
    drop(found);
    let variables = Some(Value::Object(begun.call_vars.clone()).to_string());
    let host = RunHost::start(&store, task, begun.resumed_from, variables).await?;
    let shared = Arc::new(Shared {
        host: host.clone(),
        downstream,
        timeout: request.options.step_timeout,
        progress: request.progress.take(),
    });
    let mut steps = PlanSteps::new(shared, &begun, &request.options.guards, started);
    let pace = Pace {
        concurrency: request.options.concurrency,
        poll: request.options.poll,
        inactivity: None,
    };
    let settled = settle(&host, &mut steps, pace).await;
    let mut outcome = steps.outcome(&begun, task);
    let ended = finish(&host, settled, &mut outcome).await;
    drop(lock);
    outcome.duration = started.elapsed();
    ended.map(|()| outcome)
}

/// Records the run's end as it settled, and says it in `outcome`.
async fn finish(
    host: &RunHost,
    settled: Result<Settled<(String, String)>, WorkerError>,
    outcome: &mut PlanOutcome,
) -> Result<(), PlanRunError> {
    let (result, reason, failed_step) = match settled {
        Ok(Settled::Completed) => {
            outcome.success = true;
            (RunOutcome::Completed, None, None)
        }
        Ok(Settled::Stopped | Settled::Inactive) => {
            outcome.stopped = true;
            outcome.error = Some("the run stopped on request; resume it to go on".into());
            (RunOutcome::Stopped, None, None)
        }
        Ok(Settled::EndedElsewhere(state)) => {
            outcome.error = Some(format!(
                "the run was ended by another process (it is {state}); resume it to go on"
            ));
            return Ok(());
        }
        Ok(Settled::Failed((message, step))) => {
            outcome.error = Some(message);
            (
                RunOutcome::Failed,
                Some(RunEndReason::StepFailed),
                Some(step),
            )
        }
        Err(error) => {
            let reason = RunEndReason::WorkerError(Some(error.to_string()));
            let _ = host
                .execute(end_run(host, RunOutcome::Failed, Some(reason), None))
                .await;
            return Err(error.into());
        }
    };
    host.execute(end_run(host, result, reason, failed_step))
        .await?;
    Ok(())
}

/// The run's end as recorded: recoverable unless it completed.
fn end_run(
    host: &RunHost,
    outcome: RunOutcome,
    reason: Option<RunEndReason>,
    failed_step: Option<String>,
) -> Command {
    Command::EndRun {
        task: host.task,
        run: host.run,
        outcome,
        reason: reason.map(|r| r.to_wire()),
        failed_step,
        recoverable: outcome != RunOutcome::Completed,
    }
}

/// One queued step of the batch running: its position, its call (none when
/// its recorded result is reused) and its report.
type Queued = (usize, Option<Call>, StepReport);

/// A plan's steps as the settle loop runs them: Kahn batches, one after
/// another, guards checked before each call, a batch's results bound
/// before the next batch resolves its arguments.
struct PlanSteps {
    shared: Arc<Shared>,
    plan: Arc<ExecPlan>,
    tools: Vec<Arc<ToolInfo>>,
    recorded: BTreeMap<String, planb_core::StepSuccess>,
    guards: Guards,
    started: Instant,
    /// The next batch to open.
    next_batch: usize,
    /// The batch running, when one is.
    batch: Option<usize>,
    queue: VecDeque<Queued>,
    /// The batch running's settled steps, by position.
    reports: BTreeMap<usize, StepReport>,
    /// The steps of the batches done.
    done: Vec<StepReport>,
    variables: Map<String, Value>,
    calls_made: u32,
    per_tool: BTreeMap<String, u32>,
    /// The numeric results of the batches done, in index order.
    runaway: Runaway,
    /// Ends recorded soon, told once they are (when someone listens).
    to_tell: Vec<StepReport>,
}

impl PlanSteps {
    fn new(shared: Arc<Shared>, begun: &Begun, guards: &Guards, started: Instant) -> PlanSteps {
        PlanSteps {
            shared,
            plan: Arc::clone(&begun.plan),
            tools: begun.tools.clone(),
            recorded: begun.recorded.clone(),
            guards: by_tool(guards, &begun.plan, &begun.tools),
            started,
            next_batch: 0,
            batch: None,
            queue: VecDeque::new(),
            reports: BTreeMap::new(),
            done: Vec::new(),
            variables: merged(&begun.plan, &begun.call_vars),
            calls_made: 0,
            per_tool: BTreeMap::new(),
            runaway: Runaway::default(),
            to_tell: Vec::new(),
        }
    }

    /// What the run came to, the steps in the order they settled.
    fn outcome(self, begun: &Begun, task: TaskId) -> PlanOutcome {
        let mut steps = self.done;
        steps.extend(self.reports.into_values());
        let called_again = begun
            .in_flight
            .iter()
            .filter(|i| steps.iter().any(|s| s.index == **i && !s.reused))
            .cloned()
            .collect();
        PlanOutcome {
            plan_id: task,
            title: self.plan.title.clone(),
            run: Some(self.shared.host.run),
            success: false,
            stopped: false,
            duration: Duration::ZERO,
            steps,
            steps_in_plan: self.plan.steps.len(),
            variables: self.variables,
            error: None,
            called_again,
            servers_not_answering: begun.silent.clone(),
            revisions: Vec::new(),
        }
    }

    /// Queues batch `number`'s steps, their arguments resolved with the
    /// variables bound so far; a step a resume may reuse is settled here.
    async fn open(&mut self, number: usize) {
        let batch = self.plan.batches()[number].clone();
        for at in batch {
            let queued = self.queued(at).await;
            self.queue.push_back(queued);
        }
        self.batch = Some(number);
    }

    async fn queued(&self, at: usize) -> Queued {
        let step = &self.plan.steps[at];
        let args = resolve_args(&step.args, &self.variables);
        let call = json!({"tool": self.tools[at].qualified(), "args": args});
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
            code: None,
            typed: Vec::new(),
            revision: 0,
        };
        if let Some(success) = self.recorded.get(&step.index)
            && success.input == input.0
            && let Some(value) = restore(&self.shared.host, success.artifact, &step.index).await
        {
            let report = StepReport {
                success: true,
                result: Some(value),
                reused: true,
                ..report
            };
            self.shared.tell_ended(&report);
            return (at, None, report);
        }
        let tool = Arc::clone(&self.tools[at]);
        let typed = typed_args(&step.args, &self.variables);
        let call = Call {
            at,
            tool,
            args,
            bytes,
            input,
            typed,
        };
        (at, Some(call), report)
    }

    /// Up to `room` calls of the batch running to start.
    fn take(&mut self, room: usize) -> Vec<Launch<Starting>> {
        let mut launches = Vec::new();
        while launches.len() < room {
            let Some((at, call, report)) = self.queue.pop_front() else {
                break;
            };
            let Some(mut call) = call else {
                self.reports.insert(at, report);
                continue;
            };
            let guard = self.guard(&call.tool.qualified());
            let start = StepStart {
                step: report.index.clone(),
                input: call.input.0,
                call: Some(call.input.0),
            };
            let blob = Some(std::mem::take(&mut call.bytes));
            let shared = Arc::clone(&self.shared);
            let work = Starting {
                shared,
                call,
                report,
                guard,
            };
            launches.push(Launch { start, blob, work });
        }
        launches
    }

    /// Why a call of `tool` may not be made now; counts it when it may.
    fn guard(&mut self, tool: &str) -> Option<String> {
        let elapsed = self.started.elapsed();
        let guard = guard_reason(&self.guards, tool, self.calls_made, &self.per_tool, elapsed)
            .or_else(|| self.runaway_reason(tool));
        if guard.is_none() {
            self.calls_made = self.calls_made.saturating_add(1);
            *self.per_tool.entry(tool.to_owned()).or_default() += 1;
        }
        guard
    }

    /// Why runaway detection stops the run before a call of `tool`.
    fn runaway_reason(&self, tool: &str) -> Option<String> {
        if !self.guards.runaway {
            return None;
        }
        let stop = self.runaway.check()?;
        Some(format!(
            "runaway detection ({}) before calling {tool}: {stop}; turn it off with guards: false (--no-guards on the command line)",
            stop.pattern.name()
        ))
    }

    /// Closes the batch running: binds, in index order, what succeeded;
    /// its failure (message, first failed step) when a step failed.
    fn close(&mut self, number: usize) -> Option<(String, String)> {
        let batch = &self.plan.batches()[number];
        let mut failed: Vec<&StepReport> = Vec::new();
        for &at in batch {
            let Some(report) = self.reports.get(&at) else {
                continue;
            };
            if !report.success {
                failed.push(report);
                continue;
            }
            if let Some(value) = &report.result {
                self.runaway.record(value);
            }
            if let (Some(var), Some(value)) = (&self.plan.steps[at].result_variable, &report.result)
            {
                self.variables.insert(var.clone(), value.clone());
            }
        }
        let failure = (!failed.is_empty()).then(|| {
            let message = batch_failure(batch.len(), number, &failed);
            (message, failed[0].index.clone())
        });
        self.done
            .extend(std::mem::take(&mut self.reports).into_values());
        self.batch = None;
        failure
    }

    fn report_mut(&mut self, step: &str) -> Option<&mut StepReport> {
        self.reports.values_mut().find(|r| r.index == step)
    }
}

/// What a batch's failure says: its one step's error, or each failed
/// step's.
fn batch_failure(size: usize, number: usize, failed: &[&StepReport]) -> String {
    let error = |r: &StepReport| r.error.clone().unwrap_or_else(|| "unknown error".into());
    if size == 1 {
        return format!("Step {} failed: {}", failed[0].index, error(failed[0]));
    }
    let list: Vec<String> = failed
        .iter()
        .map(|r| format!("step {}: {}", r.index, error(r)))
        .collect();
    format!("Batch {} had failures: {}", number + 1, list.join("; "))
}

impl StepKind for PlanSteps {
    type Work = Starting;
    type Done = Finished;
    type Failure = (String, String);

    async fn next(
        &mut self,
        room: usize,
        idle: bool,
    ) -> Result<Next<Starting, (String, String)>, StoreError> {
        loop {
            if let Some(number) = self.batch {
                let launches = self.take(room);
                if !launches.is_empty() || !idle || !self.queue.is_empty() {
                    return Ok(Next::Start(launches));
                }
                if let Some(failure) = self.close(number) {
                    return Ok(Next::Settle(Settled::Failed(failure)));
                }
            }
            if self.next_batch >= self.plan.batches().len() {
                return Ok(Next::Settle(Settled::Completed));
            }
            self.next_batch += 1;
            self.open(self.next_batch - 1).await;
        }
    }

    fn launch(work: Starting) -> BoxFuture<'static, Finished> {
        Box::pin(perform(work))
    }

    fn step_of(done: &Finished) -> &str {
        &done.report.index
    }

    fn started(&mut self, step: &str) {
        self.shared.tell(Progress::Started {
            index: step.to_owned(),
        });
    }

    fn ended(&mut self, done: Finished) -> End {
        let Finished {
            at,
            report,
            input,
            outcome,
        } = done;
        let end = self.shared.end_of(&report, input, outcome);
        if self.shared.progress.is_some() {
            self.to_tell.push(report.clone());
        }
        self.reports.insert(at, report);
        end
    }

    fn unstored(&mut self, step: &str, error: &StoreError) -> Command {
        let message = format!("the result could not be stored: {error}");
        if let Some(report) = self.report_mut(step) {
            report.success = false;
            report.result = None;
            report.error = Some(message.clone());
            let report = report.clone();
            self.to_tell.retain(|r| r.index != step);
            if self.shared.progress.is_some() {
                self.to_tell.push(report);
            }
        }
        self.shared.failure(step, "storage_error", &message)
    }

    fn cancelled(&mut self, step: &str, _cut: Cut) -> Command {
        let message = "the run was stopped during the call";
        self.shared.failure(step, "cancelled", message)
    }

    async fn recorded(&mut self) -> Result<(), StoreError> {
        for report in self.to_tell.drain(..) {
            self.shared.tell(Progress::Ended(Box::new(report)));
        }
        Ok(())
    }
}

/// The result recorded for a step before, read back whole; `None` (and the
/// step is called again) when it cannot be.
async fn restore(host: &RunHost, artifact: [u8; 32], index: &str) -> Option<Value> {
    let blobs = host.store.root().blobs();
    let restored = blocking(move || blobs.get(&artifact).map_err(blob_error))
        .await
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok());
    if restored.is_none() {
        tracing::warn!("step {index}: its recorded result cannot be read back; calling it again");
    }
    restored
}

/// `guards` with each per-tool cap keyed by the tool its steps call, as
/// resolved (`server__tool`): steps naming one tool two ways (`add`,
/// `alpha__add`) share its cap; of two caps on one tool, the lower holds.
fn by_tool(guards: &Guards, plan: &ExecPlan, tools: &[Arc<ToolInfo>]) -> Guards {
    let mut per_tool: BTreeMap<String, u32> = BTreeMap::new();
    for (written, &cap) in &guards.per_tool {
        for (step, tool) in plan.steps.iter().zip(tools) {
            if step.tool == *written {
                let held = per_tool.entry(tool.qualified()).or_insert(cap);
                *held = (*held).min(cap);
            }
        }
    }
    Guards {
        per_tool,
        ..guards.clone()
    }
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
/// `resume` runs the rest. Holds the plan's run lock meanwhile. Refused
/// once the plan has a run: the foreign run would be taken for its newest.
pub async fn record_foreign_run(
    store: Arc<Store>,
    downstream: Arc<Downstream>,
    task: TaskId,
    foreign: ForeignRun,
) -> Result<RunId, PlanRunError> {
    let (lock, found, plan) = hold(&store, task).await?;
    if let Some(run) = found.runs.last() {
        return Err(PlanRunError::Invalid(format!(
            "the plan has run since it was imported (run {}); a checkpoint is recorded only before a plan's first run",
            run.id
        )));
    }
    drop(found);
    let (tools, _) = step_tools(&downstream, &plan).await?;
    let variables = Some(Value::Object(foreign.call_variables.clone()).to_string());
    let host = RunHost::start(&store, task, None, variables).await?;
    let run = host.run;
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
        host.record(vec![bytes], Vec::new(), vec![start]).await?;
        host.record(vec![result], vec![success], Vec::new()).await?;
    }
    host.execute(Command::EndRun {
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
                project_path: None,
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
