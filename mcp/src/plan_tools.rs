//! The execution-plan tools: `plan_create`, `plan_execute`,
//! `plan_create_and_execute`, `plan_list`, `plan_show`.
//!
//! Results are fixed JSON shapes, in both `structuredContent` and the
//! text; a request that cannot be carried out is `{"error": "<text>"}` with
//! `isError`, fixed texts ("plan_id is required.", "Plan not found:
//! <id>", "Goal description is required."). A run executes inside this
//! server process, in the background: the call that started it waits for
//! it (with a progress notification per step when the request carries a
//! token; otherwise it hands back in time and a second `plan_execute` of
//! the same plan waits again instead of starting it twice). The downstream
//! servers stay connected between calls.

use std::sync::Arc;
use std::time::{Duration, Instant};

use planb_app::execution::{Execution, Review, RunAsk};
use planb_app::models::{Backend, Sampler};
use planb_app::plans::{ATTEMPTS, Attempt, GOAL_BYTES_MAX, Guards, Progress, RunOptions};
use planb_core::exec_plan::{ExecPlan, StepMark, render_dag};
use planb_core::text::clip;
use planb_core::{Task, TaskId};
use rmcp::model::{CallToolResult, JsonObject};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, tool, tool_router};
use serde_json::{Map, Value, json};

use crate::args::Args;
use crate::ask::Asked;
use crate::schema::schema;
use crate::server::{Answer, PlanbServer};
use planb_app::plans::{self as exec_plans, PlanSummary, approval};
use planb_app::runs::{Attached, Finished, Follower, RunFailure, Waited};
use planb_app::sessions::NewSession;

/// Most tools `tool_caps` names.
const TOOL_CAPS_MAX: usize = 256;

/// Most plans `plan_list` returns.
const LIST_MAX: usize = 200;

fn failure(message: impl Into<String>) -> CallToolResult {
    crate::reply::structured_error(json!({ "error": message.into() }))
}

/// An application error as the plan tools answer it: its text, and for a
/// run already under way what to do about it.
fn app_failure(e: planb_app::Error) -> CallToolResult {
    if e.code == planb_app::ErrorCode::RunAlreadyActive {
        return failure(format!(
            "RUN_ALREADY_ACTIVE: {}; wait for that run (plan_execute with its plan_id alone) or stop it (plan_stop), then call again",
            e.message
        ));
    }
    failure(e.message)
}

fn step_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "index": {"type": "string", "description": "The step's id (\"1\"), named by depends_on."},
            "title": {"type": "string"},
            "tool": {"type": "string", "description": "server__tool, or a name only one server has."},
            "args": {"type": "object", "description": "\"${var}\" is a variable's whole value, \"${var.field}\" a field of it."},
            "depends_on": {"type": "array", "items": {"type": "string"}},
            "result_variable": {"type": "string", "description": "Binds the step's result for later steps."}
        },
        "required": ["title", "tool"]
    })
}

fn create_properties() -> Map<String, Value> {
    let Value::Object(map) = json!({
        "title": {"type": "string"},
        "description": {"type": "string"},
        "steps": {"type": "array", "items": step_schema()},
        "variables": {"type": "object"},
        "goal": {"type": "string", "description": "Instead of title and steps: the configured model plans it."},
        "client_request_id": {"type": "string", "description": "A retry with it returns the first plan."}
    }) else {
        return Map::new();
    };
    map
}

fn execute_properties() -> Map<String, Value> {
    let Value::Object(map) = json!({
        "variables": {"type": "object", "description": "Call-time variables; they override the plan's."},
        "dry_run": {"type": "boolean", "default": false},
        "resume": {"type": "boolean", "default": false},
        "review": {"type": "boolean", "default": false, "description": "Run only once the person approves the DAG and the first calls in a browser form."},
        "max_calls": {"type": "integer", "minimum": 0, "maximum": 100000, "description": "Most tool calls in the run."},
        "tool_caps": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}, "description": "Most calls per tool name."},
        "max_seconds": {"type": "integer", "minimum": 1, "maximum": 604800, "description": "No call starts after this many seconds."},
        "replan": {"type": "integer", "minimum": 0, "maximum": 10, "default": 0, "description": "On a failed step, ask the model (PLANB_MODEL, else the client's through sampling) for a revised plan of the remaining work and run it, up to this many times; the result says replanned and lists the revisions."},
        "guards": {"type": "boolean", "default": true, "description": "false turns runaway detection off (a run stops, GUARD_BLOCKED, when its numeric results degenerate to 0 or 1, become effectively zero, or repeat); max_calls, tool_caps and max_seconds still hold."},
        "concurrency": {"type": "integer", "minimum": 1, "maximum": 64, "default": 4},
        "step_timeout_sec": {"type": "integer", "minimum": 1, "maximum": 86400, "default": 300}
    }) else {
        return Map::new();
    };
    map
}

fn object_schema(properties: Map<String, Value>, required: &[&str]) -> Arc<JsonObject> {
    schema(json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false
    }))
}

/// `plan_create`'s result (an error is `{error}`).
fn created_output() -> Arc<JsonObject> {
    schema(json!({
        "type": "object",
        "properties": {
            "success": {"type": "boolean"},
            "plan_id": {"type": "string"},
            "title": {"type": "string"},
            "steps": {"type": "array", "items": {"type": "object"}},
            "dag": {"type": "string"},
            "error": {"type": "string"}
        }
    }))
}

/// `plan_execute`'s result: the run's outcome, a hand-back while it runs,
/// or `{error}`.
fn executed_output() -> Arc<JsonObject> {
    schema(json!({
        "type": "object",
        "properties": {
            "success": {"type": "boolean"},
            "plan_id": {"type": "string"},
            "error": {"type": "string"},
            "running": {"type": "boolean"},
            "results": {"type": "object"},
            "steps": {"type": "array"},
            "dag": {"type": "string"}
        }
    }))
}

fn plan_id_schema() -> Value {
    json!({"type": "string", "description": "The plan's id, or a prefix of it only that plan has (plan_list shows the first 8 characters)."})
}

/// Reads the create half of the arguments: the plan as written, or a goal.
enum Source {
    Written(Value),
    Goal(String),
}

fn create_args(args: &mut Args<'_>) -> (Option<Source>, Option<String>) {
    let title = args.raw("title").cloned();
    let description = args.raw("description").cloned();
    let steps = args.raw("steps").cloned();
    let variables = args.raw("variables").cloned();
    let goal = args.optional_string("goal", GOAL_BYTES_MAX);
    let request = args.optional_string("client_request_id", 200);
    let source = match (steps, goal) {
        (Some(steps), _) => {
            let mut plan = Map::new();
            if let Some(title) = title {
                plan.insert("title".into(), title);
            }
            if let Some(description) = description {
                plan.insert("description".into(), description);
            }
            if let Some(variables) = variables {
                plan.insert("variables".into(), variables);
            }
            plan.insert("steps".into(), steps);
            Some(Source::Written(Value::Object(plan)))
        }
        (None, Some(goal)) => Some(Source::Goal(goal)),
        (None, None) if title.is_some() => {
            args.push(
                "steps: required with title (or give goal alone to have the model write them)"
                    .into(),
            );
            None
        }
        (None, None) => {
            args.push("Goal description is required.".into());
            None
        }
    };
    (source, request)
}

/// The run half of the arguments. `plan_create_and_execute` passes
/// `with_call_variables: false`: there `variables` are the plan's (read by
/// [`create_args`]) and there is no run to resume.
fn exec_args(args: &mut Args<'_>, with_call_variables: bool) -> RunAsk {
    let (variables, resume) = if with_call_variables {
        (
            args.optional_object("variables").cloned(),
            args.optional_bool("resume").unwrap_or(false),
        )
    } else {
        (None, false)
    };
    let dry_run = args.optional_bool("dry_run").unwrap_or(false);
    let review = args.optional_bool("review").unwrap_or(false);
    if dry_run && resume {
        args.push("dry_run: cannot be combined with resume".into());
    }
    if dry_run && review {
        args.push("review: a dry run calls nothing, so there is nothing to approve".into());
    }
    let max_calls = args.optional_integer("max_calls", 0, 100_000);
    let runaway = args.optional_bool("guards").unwrap_or(true);
    let replan = args.optional_integer("replan", 0, 10).unwrap_or(0);
    let max_seconds = args.optional_integer("max_seconds", 1, 604_800);
    let concurrency = args.optional_integer("concurrency", 1, 64).unwrap_or(4);
    let step_timeout = args
        .optional_integer("step_timeout_sec", 1, 86_400)
        .unwrap_or(300);
    let mut per_tool = std::collections::BTreeMap::new();
    let caps = args.optional_object("tool_caps");
    if let Some(caps) = caps.filter(|caps| caps.len() > TOOL_CAPS_MAX) {
        args.push(format!(
            "tool_caps: at most {TOOL_CAPS_MAX} tools (got {})",
            caps.len()
        ));
    } else if let Some(caps) = caps {
        for (tool, cap) in caps {
            match cap.as_u64().and_then(|n| u32::try_from(n).ok()) {
                Some(n) => {
                    per_tool.insert(tool.clone(), n);
                }
                None => args.push(format!(
                    "tool_caps.{}: must be a whole number from 0 to {}",
                    clip(tool, 100),
                    u32::MAX
                )),
            }
        }
    }
    RunAsk {
        variables,
        dry_run,
        review,
        resume,
        planner: None,
        options: RunOptions {
            concurrency: usize::try_from(concurrency).unwrap_or(4),
            step_timeout: Duration::from_secs(step_timeout),
            guards: Guards {
                max_calls: max_calls.and_then(|n| u32::try_from(n).ok()),
                per_tool,
                max_wall: max_seconds.map(Duration::from_secs),
                runaway,
            },
            replan: u32::try_from(replan).unwrap_or(0),
            ..RunOptions::default()
        },
    }
}

/// An attempt at a plan from a goal, as a progress line.
fn attempt_line(attempt: &Attempt) -> String {
    match attempt {
        Attempt::Asking { answer } => {
            format!("asking the model for a plan (answer {answer} of {ATTEMPTS})")
        }
        Attempt::Refused { answer, reason } => format!(
            "answer {answer} refused: {}",
            planb_core::text::visible(reason, false)
        ),
    }
}

/// A run's result as the tool returns it: an error when it could not run.
fn finished(finished: Finished) -> CallToolResult {
    match finished {
        Ok(end) => {
            let mut value = end.outcome.to_json();
            if let (Value::Object(map), Some(dag)) = (&mut value, &end.dag) {
                map.insert("dag".into(), dag.clone().into());
            }
            crate::reply::structured(value)
        }
        Err(why) => failure(run_failure(&why)),
    }
}

/// Why a run came to no result, with what the caller can do.
fn run_failure(failure: &RunFailure) -> String {
    match failure {
        RunFailure::Interrupted { .. } => {
            format!("{failure}; resume it with plan_execute and resume: true")
        }
        RunFailure::RunningElsewhere { plan } => format!(
            "{failure}: see it with plan_show, or stop it with `planb-mcp plan stop {plan}`"
        ),
        RunFailure::StartedMeanwhile(message) => format!("RUN_ALREADY_ACTIVE: {message}"),
        RunFailure::Failed(message) => message.clone(),
    }
}

/// A step's start or end as a progress line: settled so far of `total`.
fn progress_line(n: usize, total: usize, event: &Progress) -> String {
    let shown = |text: &str| planb_core::text::visible(text, false).into_owned();
    let report = match event {
        Progress::Ended(report) => report,
        Progress::Started { index } => return format!("step {} started", shown(index)),
        Progress::Replanning {
            number,
            step,
            error,
        } => {
            return format!(
                "step {} failed ({}): asking the model for revised plan {number}",
                shown(step),
                shown(error)
            );
        }
        Progress::Revised(revised) => {
            return format!(
                "revised plan {} ({}, {}) runs now",
                revised.number,
                revised.plan_id,
                planb_core::text::counted(revised.plan.steps.len(), "step", "steps")
            );
        }
    };
    let head = format!(
        "{n}/{total} step {} {} [{}]",
        shown(&report.index),
        shown(&report.title),
        shown(&report.tool)
    );
    if report.reused {
        format!("{head}: recorded result reused")
    } else if report.success {
        format!("{head} done in {} ms", report.duration_ms)
    } else {
        let error = shown(report.error.as_deref().unwrap_or("failed"));
        format!("{head} failed: {error}")
    }
}

fn steps_summary(plan: &ExecPlan) -> Value {
    plan.steps
        .iter()
        .map(|s| json!({"index": s.index, "title": s.title, "tool": s.tool}))
        .collect()
}

impl PlanbServer {
    /// The plan `id` names (`plan_id is required.` when it names none).
    async fn plan_named(&self, id: Option<String>) -> Result<Task, CallToolResult> {
        let Some(id) = id.filter(|id| !id.trim().is_empty()) else {
            return Err(failure("plan_id is required."));
        };
        (self.app().plans().find(&id).await).map_err(app_failure)
    }

    /// Creates the plan `source` gives (refused when there is none), on
    /// the plan store.
    async fn create_plan(
        &self,
        source: Option<Source>,
        request: Option<String>,
        context: &RequestContext<RoleServer>,
    ) -> Result<exec_plans::Created, CallToolResult> {
        let Some(source) = source else {
            return Err(failure("Goal description is required."));
        };
        let plans = self.app().plans();
        let created = match source {
            Source::Written(value) => plans.create(&value, request).await,
            Source::Goal(goal) => {
                let sampler = Sampler::of(&context.peer, Some("planner"));
                // Each model answer is told as progress: generation can take
                // minutes.
                let (sender, mut told) = tokio::sync::mpsc::unbounded_channel::<String>();
                let tell = move |attempt: &Attempt| {
                    let _ = sender.send(attempt_line(attempt));
                };
                let token = context.meta.get_progress_token();
                let forward = async {
                    let mut n = 0.0;
                    while let Some(line) = told.recv().await {
                        if let Some(token) = &token {
                            n += 1.0;
                            PlanbServer::notify_progress(context, token, n, line).await;
                        }
                    }
                };
                let create = async {
                    let created = plans.create_from_goal(&goal, request, sampler, &tell).await;
                    drop(tell);
                    created
                };
                tokio::join!(create, forward).0
            }
        }
        .map_err(app_failure)?;
        Ok(created)
    }

    /// Waits for `attached` to end, telling its steps as progress when the
    /// request has a token; without one, hands back after the hand-back time.
    async fn wait_run(
        &self,
        mut attached: Attached,
        mut follow: Option<Follower>,
        task: TaskId,
        title: &str,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let token = context.meta.get_progress_token();
        let until = token
            .is_none()
            .then(|| Instant::now() + self.config().env.hand_back);
        let runs = &self.plan_runs();
        loop {
            let waited = tokio::select! {
                // Nobody is left to answer: the server is about to exit.
                () = self.config().disconnect.closed() => {
                    return failure("the connection closed while the plan ran; it ends with this server (resume it with plan_execute and resume: true)");
                }
                waited = runs.wait(&mut attached, follow.as_mut(), task, until) => waited,
            };
            match waited {
                Waited::Ended(done) => return finished(done),
                Waited::StillRunning { settled, total } => {
                    return crate::reply::structured(json!({
                        "success": false,
                        "running": true,
                        "plan_id": task.to_string(),
                        "title": title,
                        "steps_settled": settled,
                        "steps_total": total,
                        "message": "The plan is still running in planb. Call plan_execute again with the same plan_id to wait for this run and get its result (it is not started twice), or plan_show to see its DAG.",
                    }));
                }
                Waited::Lost => {
                    return failure(
                        "the plan's run ended without a result (the server is shutting down); resume it with plan_execute and resume: true",
                    );
                }
                Waited::Step(n, event) => {
                    if let Some(token) = &token {
                        let line = progress_line(n, attached.steps_total(), &event);
                        PlanbServer::notify_progress(context, token, n as f64, line).await;
                    }
                }
            }
        }
    }

    /// Dry runs or runs `task` as `ask` says.
    async fn execute_plan(
        &self,
        task: Task,
        mut ask: RunAsk,
        context: &RequestContext<RoleServer>,
    ) -> Answer {
        ask.planner = Sampler::of(&context.peer, Some("planner")).map(Backend::Sampling);
        let id = task.id;
        // Followed only to be told on: a call without a token is not woken
        // by every step.
        let follow = context.meta.get_progress_token().is_some();
        let reviewer = Reviewer {
            server: self,
            context,
        };
        let plans = self.app().plans();
        let execution = plans.execute(task, ask, follow, &reviewer).await;
        match execution.map_err(app_failure)? {
            Execution::DryRun { plan, outcome } => {
                let mut value = outcome.to_json();
                if let Value::Object(map) = &mut value {
                    map.insert("dry_run".into(), true.into());
                    map.insert(
                        "dag".into(),
                        render_dag(&plan, |_| StepMark::Pending).into(),
                    );
                }
                Ok(crate::reply::structured(value))
            }
            // The result of a run whose call handed back is this call's.
            Execution::Ended(done) => Ok(finished(done)),
            // A refused review is an answer, not an error: returned as it is.
            Execution::Refused(refused) => Ok(refused),
            Execution::Running {
                attached,
                follower,
                plan,
            } => Ok(self
                .wait_run(attached, follower, id, &plan.title, context)
                .await),
        }
    }
}

/// The person's review of a run, on a form this server opens.
struct Reviewer<'a> {
    server: &'a PlanbServer,
    context: &'a RequestContext<RoleServer>,
}

impl Review for Reviewer<'_> {
    type Refused = CallToolResult;

    async fn review(
        &self,
        task: &Task,
        plan: &Arc<ExecPlan>,
        variables: Option<&Map<String, Value>>,
    ) -> Result<(), CallToolResult> {
        (self.server)
            .review_run(task, plan, variables, self.context)
            .await
    }
}

impl PlanbServer {
    /// Asks the person to approve running `plan` on a form showing its DAG
    /// and its first batch's calls as they would be made; the form and the
    /// answer are in the log like any ask. `Ok` once approved; otherwise the
    /// result to return (rejected, or still undecided after the hand-back:
    /// the next `plan_execute` with `review` waits on the same form).
    async fn review_run(
        &self,
        task: &Task,
        plan: &ExecPlan,
        variables: Option<&Map<String, Value>>,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), CallToolResult> {
        let asked = match self.plan_runs().take_approval(task.id) {
            Some(ask) => self.collect(ask, None, context).await,
            None => self.open_review(task, plan, variables, context).await?,
        };
        match self.refused(task, plan, asked) {
            None => Ok(()),
            Some(refused) => Err(refused),
        }
    }

    /// Opens the review form of a run of `plan` in a session of its own.
    async fn open_review(
        &self,
        task: &Task,
        plan: &ExecPlan,
        variables: Option<&Map<String, Value>>,
        context: &RequestContext<RoleServer>,
    ) -> Result<Asked, CallToolResult> {
        let variables = variables.cloned().unwrap_or_default();
        let spec = approval::form(task.id, plan, &variables)
            .map_err(|error| failure(format!("the review form could not be made: {error}")))?;
        let new = NewSession {
            title: Some(clip(&format!("Run \"{}\"?", plan.title), 200)),
            intent: Some(format!(
                "Approve or reject a run of execution plan {}",
                task.id
            )),
            project_path: None,
        };
        let (session, _) = (self.sessions().start(new).await)
            .map_err(|error| failure(format!("the review could not be recorded: {error}")))?;
        Ok(self.open_ask(session, spec, context).await)
    }

    /// What the review form's outcome means for the run: `None` once
    /// approved; otherwise the result to return.
    fn refused(&self, task: &Task, plan: &ExecPlan, asked: Asked) -> Option<CallToolResult> {
        let base = |more: Value| {
            let mut value = json!({
                "success": false,
                "plan_id": task.id.to_string(),
                "title": plan.title,
            });
            if let (Value::Object(map), Value::Object(more)) = (&mut value, more) {
                map.extend(more);
            }
            Some(crate::reply::structured(value))
        };
        match asked {
            Asked::Answered(_, answers) => {
                let answers = answers.to_json();
                if approval::approved(&answers) {
                    return None;
                }
                base(json!({
                    "approved": false,
                    "error": "The person did not approve this run; no tool was called.",
                    "feedback": answers["feedback"],
                }))
            }
            Asked::Waiting {
                ask, url, is_link, ..
            } => {
                self.plan_runs().approval_pending(task.id, ask);
                base(json!({
                    "review": "waiting",
                    "url": is_link.then_some(url),
                    "message": "The person has not approved or rejected this run yet; the review form stays open. Call plan_execute again with the same plan_id and review: true to keep waiting on it. No tool was called.",
                }))
            }
            Asked::Ended(result) => {
                let said = (result.content.first())
                    .and_then(|c| c.as_text())
                    .map(|t| t.text.clone())
                    .unwrap_or_default();
                base(json!({
                    "approved": false,
                    "error": format!("The review ended without an approval; no tool was called. {said}"),
                }))
            }
        }
    }
}

#[tool_router(router = plan_exec_tool_router, vis = "pub(crate)")]
impl PlanbServer {
    #[tool(
        name = "plan_create",
        description = "Create an execution plan: a DAG of tool calls on planb's downstream MCP servers. Give title and steps (\"${var}\" in args reads a variable or an earlier result), or, with a model configured, goal alone. Tools are checked, cycles refused. Returns {success, plan_id, steps, dag}.",
        title = "Create an execution plan",
        input_schema = object_schema(create_properties(), &[]),
        output_schema = created_output(),
        annotations(title = "Create an execution plan", read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = true)
    )]
    async fn plan_create(
        &self,
        arguments: JsonObject,
        context: RequestContext<RoleServer>,
    ) -> Answer {
        let mut args = Args::new(&arguments);
        let (source, request) = create_args(&mut args);
        args.finish()
            .map_err(|errors| failure(errors.to_string()))?;
        let created = self.create_plan(source, request, &context).await?;
        let plan = &created.plan;
        let mut out = json!({
            "success": true,
            "plan_id": created.id.to_string(),
            "title": plan.title,
            "steps": steps_summary(plan),
            "dag": render_dag(plan, |_| StepMark::Pending),
        });
        if !created.silent.is_empty() {
            out["servers_not_answering"] = json!(created.silent);
        }
        Ok(crate::reply::structured(out))
    }

    #[tool(
        name = "plan_execute",
        description = "Run an execution plan (plan_id or a unique prefix): independent steps in parallel, each result bound to its result_variable, a failure stops the run. dry_run calls nothing; resume skips what succeeded; max_calls, tool_caps, max_seconds are guards; review asks the person first. Returns {success, error?, results, steps, dag, ...}.",
        title = "Run an execution plan",
        input_schema = {
            let mut properties = execute_properties();
            properties.insert("plan_id".into(), plan_id_schema());
            object_schema(properties, &["plan_id"])
        },
        output_schema = executed_output(),
        annotations(title = "Run an execution plan", read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = true)
    )]
    async fn plan_execute(
        &self,
        arguments: JsonObject,
        context: RequestContext<RoleServer>,
    ) -> Answer {
        let mut args = Args::new(&arguments);
        let id = args.optional_string("plan_id", 200);
        let request = exec_args(&mut args, true);
        args.finish()
            .map_err(|errors| failure(errors.to_string()))?;
        let task = self.plan_named(id).await?;
        self.execute_plan(task, request, &context).await
    }

    #[tool(
        name = "plan_create_and_execute",
        description = "plan_create then plan_execute in one call: the arguments of both, as those tools describe them (title and steps, or goal; variables, dry_run, review, guards). Returns plan_execute's result.",
        title = "Create and run an execution plan",
        input_schema = {
            // The same arguments as plan_create's and plan_execute's, whose
            // schemas describe them: not described twice.
            let mut properties = create_properties();
            properties.extend(execute_properties());
            properties.remove("resume");
            object_schema(crate::schema::without_descriptions(properties), &[])
        },
        output_schema = executed_output(),
        annotations(title = "Create and run an execution plan", read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = true)
    )]
    async fn plan_create_and_execute(
        &self,
        arguments: JsonObject,
        context: RequestContext<RoleServer>,
    ) -> Answer {
        let mut args = Args::new(&arguments);
        let (source, client_request) = create_args(&mut args);
        let request = exec_args(&mut args, false);
        args.finish()
            .map_err(|errors| failure(errors.to_string()))?;
        let created = (self.create_plan(source, client_request, &context)).await?;
        let task = (self.app().plans().get(created.id).await).map_err(app_failure)?;
        self.execute_plan(task, request, &context).await
    }

    #[tool(
        name = "plan_list",
        description = "The execution plans, newest first: {plans: [{id (a short unique prefix), plan_id, title, steps, state, runs, created_at}]}.",
        title = "List execution plans",
        input_schema = schema(json!({"type": "object", "properties": {"limit": {"type": "integer", "minimum": 1, "maximum": LIST_MAX, "default": LIST_MAX}}, "additionalProperties": false})),
        output_schema = schema(json!({"type": "object", "properties": {"plans": {"type": "array"}}})),
        annotations(title = "List execution plans", read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn plan_list(&self, arguments: JsonObject) -> Answer {
        let mut args = Args::new(&arguments);
        let limit = args
            .optional_integer("limit", 1, LIST_MAX as u64)
            .map_or(LIST_MAX, |n| usize::try_from(n).unwrap_or(LIST_MAX));
        args.finish()
            .map_err(|errors| failure(errors.to_string()))?;
        let rows = (self.app().plans().list().await).map_err(app_failure)?;
        Ok(crate::reply::structured(
            json!({ "plans": listed(rows, limit) }),
        ))
    }

    #[tool(
        name = "plan_stop",
        description = "Stop a running execution plan, whichever planb process runs it: no call starts, calls in flight are cancelled. plan_execute with resume: true continues it. Returns {success, plan_id, message}.",
        title = "Stop an execution plan",
        input_schema = schema(json!({"type": "object", "properties": {"plan_id": plan_id_schema()}, "required": ["plan_id"], "additionalProperties": false})),
        output_schema = schema(json!({"type": "object", "properties": {"success": {"type": "boolean"}, "plan_id": {"type": "string"}, "message": {"type": "string"}, "error": {"type": "string"}}})),
        annotations(title = "Stop an execution plan", read_only_hint = false, destructive_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn plan_stop(&self, arguments: JsonObject) -> Answer {
        let mut args = Args::new(&arguments);
        let id = args.optional_string("plan_id", 200);
        args.finish()
            .map_err(|errors| failure(errors.to_string()))?;
        let task = self.plan_named(id).await?;
        let plan_id = task.id;
        // `plan_named` has ended a run whose process died (failed,
        // recoverable): no stop is left waiting for a process that is gone.
        let last = task.runs.last().map(|run| run.state.as_str());
        let stop = (self.app().plans().stop(plan_id).await).map_err(|e| match e.code {
            planb_app::ErrorCode::RunNotActive => failure(match last {
                Some(state) => {
                    format!("Plan {plan_id} is not running; its last run is {state}.")
                }
                None => format!("Plan {plan_id} is not running; it has never run."),
            }),
            _ => failure(e.message),
        })?;
        Ok(crate::reply::structured(json!({
            "success": true,
            "plan_id": plan_id.to_string(),
            "message": if stop == exec_plans::Stop::AlreadyAsked {
                "A stop was already asked for; the run ends once its calls in flight are cancelled."
            } else {
                "Stop requested; the run ends once its calls in flight are cancelled. Resume it with plan_execute and resume: true."
            },
        })))
    }

    #[tool(
        name = "plan_show",
        description = "One execution plan (plan_id or a unique prefix): steps, variables, the DAG marked with the last run's states, that run's state and error.",
        title = "Show an execution plan",
        input_schema = schema(json!({"type": "object", "properties": {"plan_id": plan_id_schema()}, "required": ["plan_id"], "additionalProperties": false})),
        output_schema = schema(json!({"type": "object", "properties": {"success": {"type": "boolean"}, "plan_id": {"type": "string"}, "title": {"type": "string"}, "description": {"type": ["string", "null"]}, "variables": {"type": "object"}, "steps": {"type": "array"}, "dag": {"type": "string"}, "runs": {"type": "integer"}, "last_run": {"type": ["object", "null"]}, "error": {"type": "string"}}})),
        annotations(title = "Show an execution plan", read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn plan_show(&self, arguments: JsonObject) -> Answer {
        let mut args = Args::new(&arguments);
        let id = args.optional_string("plan_id", 200);
        args.finish()
            .map_err(|errors| failure(errors.to_string()))?;
        let task = self.plan_named(id).await?;
        let plans = self.app().plans();
        let plan = plans.load(&task).map_err(app_failure)?;
        let marks = exec_plans::marks(&task, &plan);
        let revisions: Vec<Value> = (plans.revisions(&task).await)
            .map_err(app_failure)?
            .into_iter()
            .map(|seen| {
                json!({
                    "number": seen.number, "plan_id": seen.plan_id.to_string(),
                    "steps": seen.steps, "run_id": seen.run, "failed_step": seen.step,
                    "error": seen.error, "state": seen.state,
                })
            })
            .collect();
        let last_run = task.runs.last().map(|run| {
            json!({
                "run_id": run.id.to_string(),
                "state": run.state.as_str(),
                "reason": run.reason,
                "started_at": run.started_at.to_iso8601(),
                "ended_at": run.ended_at.map(|t| t.to_iso8601()),
                "resumed_from": run.resumed_from.map(|r| r.to_string()),
            })
        });
        let steps: Vec<Value> = plan
            .steps
            .iter()
            .zip(&marks)
            .map(|(step, mark)| {
                json!({
                    "index": step.index,
                    "title": step.title,
                    "tool": step.tool,
                    "args": step.args,
                    "depends_on": step.depends_on,
                    "result_variable": step.result_variable,
                    "state": mark_name(*mark),
                })
            })
            .collect();
        Ok(crate::reply::structured(json!({
            "success": true,
            "plan_id": task.id.to_string(),
            "title": plan.title,
            "description": plan.description,
            "variables": plan.variables,
            "steps": steps,
            "dag": render_dag(&plan, |at| marks[at]),
            "runs": task.runs.len(),
            "last_run": last_run,
            "revises": plan.revises.as_ref().map(|r| json!({
                "plan_id": r.plan, "run_id": r.run, "number": r.number,
                "failed_step": r.step, "error": r.error,
            })),
            "revisions": revisions,
        })))
    }
}

fn mark_name(mark: StepMark) -> &'static str {
    match mark {
        StepMark::Pending => "pending",
        StepMark::Running => "running",
        StepMark::Completed => "completed",
        StepMark::Failed => "failed",
    }
}

/// The first `limit` of `rows`, each with a short `id` no other listed plan
/// shares and its title cut to 50 characters.
/// `plan_list`'s rows: the newest `limit` plans, each id also as its
/// shortest prefix no other listed plan shares.
fn listed(rows: Vec<PlanSummary>, limit: usize) -> Vec<Value> {
    let rows: Vec<PlanSummary> = rows.into_iter().take(limit).collect();
    let ids: Vec<String> = rows.iter().map(|row| row.id.to_string()).collect();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let lengths = planb_core::text::unique_prefix_lengths(&refs, 8);
    rows.iter()
        .zip(&ids)
        .zip(lengths)
        .map(|((row, id), length)| {
            let short: String = id.chars().take(length).collect();
            json!({
                "plan_id": id,
                "title": row.title.chars().take(50).collect::<String>(),
                "steps": row.steps,
                "created_at": row.created_at.to_iso8601(),
                "state": row.state,
                "runs": row.runs,
                "id": format!("{short}..."),
            })
        })
        .collect()
}
