//! The task tools (on the DAG engine): `prompt_examples`,
//! `task_create`, `task_status`, `task_stop`, `task_resume`, `task_list`,
//! `task_get_latest`, `task_wait`, `task_logs_tail`, `task_file_info`,
//! `task_download`, `task_artifact_write`, and the `worker` subcommand.
//!
//! Every result is JSON in both `structuredContent` and the text; every
//! error is `{"error": {"code", "message", "details"}}` with `isError`, the
//! code one of the task interface's. A run is executed by a detached worker process
//! (`planb-mcp worker <task>`) that this server starts and does not wait
//! for, so a run outlives the agent's session.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use planb_app::models::{ANSWER_BYTES_MAX, PROFILES, Sampler};
use planb_core::pipelines::{DEFAULT_TARGET, PROJECT_PLAN};
use planb_core::{Run, RunState, Task, TaskId};
use planb_projections::DataRoot;
use rmcp::model::{CallToolResult, JsonObject};
use rmcp::service::RequestContext;
use rmcp::{Peer, RoleServer, tool, tool_router};
use serde_json::{Value, json};

use planb_app::ErrorCode;
use planb_app::launch::{Runner, Start};
use planb_app::tasks::{CreateRequest, TaskFile, TaskWaited, Tasks, checked_pipeline};

use crate::args::Args;
use crate::schema::schema;
use crate::server::{Answer, PLANEXE_VERSION, PlanbServer, Refusal};

fn error(code: &str, message: impl Into<String>, details: Value) -> CallToolResult {
    crate::reply::structured_error(json!({
        "error": {"code": code, "message": message.into(), "details": details}
    }))
}

fn task_id_schema() -> Value {
    json!({"type": "string", "description": "The task's id, as task_create returned it."})
}

/// A task and, optionally, one of its runs (its latest by default).
fn input_task_and_run() -> Arc<JsonObject> {
    schema(json!({
        "type": "object",
        "properties": {"task_id": task_id_schema(), "run_id": {"type": "string"}},
        "required": ["task_id"],
        "additionalProperties": false
    }))
}

fn input_task_only() -> Arc<JsonObject> {
    schema(json!({
        "type": "object",
        "properties": {"task_id": task_id_schema()},
        "required": ["task_id"],
        "additionalProperties": false
    }))
}

/// The shape every status-like result has; open, so an error object fits.
fn status_output() -> Arc<JsonObject> {
    schema(json!({
        "type": "object",
        "properties": {
            "task_id": {"type": "string"},
            "state": {"enum": ["created", "running", "stopping", "stopped", "completed", "failed"]},
            "progress_percentage": {"type": "number"},
            "steps_completed": {"type": "integer"},
            "steps_total": {"type": "integer"},
            "error": {"type": "object"}
        }
    }))
}

/// `task_list`'s (and `task_recent`'s) arguments.
fn list_input() -> Arc<JsonObject> {
    schema(json!({
        "type": "object",
        "properties": {
            "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 10},
            "include_archived": {"type": "boolean", "default": false}
        },
        "additionalProperties": false
    }))
}

fn open_output() -> Arc<JsonObject> {
    schema(json!({"type": "object"}))
}

use planb_app::tasks::state_name;

/// Whether prompts are kept out of lists and replays
/// (`PLANB_REDACT_PROMPTS=1`).
pub(crate) fn prompts_redacted() -> bool {
    planb_app::settings::redact_prompts()
}

fn prompt_summary(prompt: &str) -> String {
    if prompts_redacted() {
        return "[prompt redacted]".to_owned();
    }
    let flat: String = prompt.split_whitespace().collect::<Vec<_>>().join(" ");
    planb_core::text::clip(&flat, 120)
}

/// `task_status`'s answer, from memory.
pub(crate) fn status(root: &DataRoot, task: &Task, now: planb_core::Timestamp) -> Value {
    status_of(root, task, task.runs.last().map(|r| &**r), now)
}

/// `task_status`'s answer for the run `run` of `task` (its latest, or an
/// earlier one named by `run_id`).
fn status_of(root: &DataRoot, task: &Task, run: Option<&Run>, now: planb_core::Timestamp) -> Value {
    let status = planb_app::tasks::status(root, task);
    let files: Vec<Value> = status
        .files
        .iter()
        .map(|f| {
            json!({
                "path": f.path,
                "step": f.step,
                "updated_at": f.updated_at.to_iso8601(),
                "size": f.size,
            })
        })
        .collect();
    let mut value = json!({
        "task_id": task.id.to_string(),
        "lifecycle": task.lifecycle().as_str(),
        "state": run.map_or("created", |r| r.state.as_str()),
        "progress_percentage": status.percentage,
        "steps_completed": status.progress.done,
        "steps_total": status.progress.total,
        "current_step": status.progress.current,
        "run_id": run.map(|r| r.id.to_string()),
        "runs": task.runs.len(),
        "speed_vs_detail": task.speed,
        "target": task.target,
        "pipeline": task.pipeline,
        "timing": timing(task, run, now),
        "files": files,
        "files_count": status.files_count,
        "planexe": {"version": PLANEXE_VERSION},
    });
    if let Value::Object(map) = &mut value {
        if prompts_redacted() {
            map.insert(
                "prompt_redacted".into(),
                "the prompt is kept out of this server's task lists and run logs (PLANB_REDACT_PROMPTS=1); planb-retro keeps it out when started with the same setting; the log keeps it for the run".into(),
            );
        }
        if let Some(at) = task.archived_at {
            map.insert("archived_at".into(), at.to_iso8601().into());
        }
        // The project it was made for, which a team ships it with.
        if let Some(project) = &task.project_path {
            map.insert("project_path".into(), project.clone().into());
        }
        if let Some(run) = run.filter(|r| r.state == RunState::Failed) {
            map.insert("error".into(), failure_of(run));
        }
    }
    value
}

/// When the task was created and its run started, ended, last progressed.
fn timing(task: &Task, run: Option<&Run>, now: planb_core::Timestamp) -> Value {
    match run {
        None => json!({"created_at": task.created_at.to_iso8601()}),
        Some(run) => json!({
            "created_at": task.created_at.to_iso8601(),
            "started_at": run.started_at.to_iso8601(),
            "ended_at": run.ended_at.map(|t| t.to_iso8601()),
            "elapsed_sec": planb_app::tasks::elapsed_sec(run, now),
            "last_progress_at": run.last_progress_at.to_iso8601(),
        }),
    }
}

/// Why a failed run failed, and where to look.
fn failure_of(run: &Run) -> Value {
    json!({
        "failure_reason": run.reason,
        "failed_step": run.failed_step,
        "recoverable": run.recoverable,
        "message": match (&run.reason, &run.failed_step) {
            (Some(reason), Some(step)) => format!("step {step} failed ({reason}); see task_logs_tail"),
            (Some(reason), None) => format!("the run failed: {reason}"),
            _ => "the run failed".to_owned(),
        },
    })
}

/// A waited-on task's progress as a line: `running 40% (2 of 5 steps), running purpose`.
fn progress_message(task: &Task, status: &planb_app::tasks::TaskStatus) -> String {
    let running = (status.progress.current.as_deref())
        .map(|step| format!(", running {step}"))
        .unwrap_or_default();
    format!(
        "{} {:.0}% ({} of {}){running}",
        state_name(task),
        status.percentage,
        status.progress.done,
        planb_core::text::counted(status.progress.total, "step", "steps"),
    )
}

fn next_steps(task: &Task) -> Vec<String> {
    let id = task.id;
    if task.archived_at.is_some() {
        return vec![
            "The task is archived: its status, files and replay stay readable; create a new task to plan again.".into(),
        ];
    }
    match task.runs.last().map(|r| (r.state, r.recoverable)) {
        None => vec![format!(
            "The worker has not started the run yet; call task_status {{task_id: \"{id}\"}} again shortly."
        )],
        Some((RunState::Running | RunState::Stopping, _)) => vec![
            format!(
                "Still running: call task_wait {{task_id: \"{id}\"}} again, or task_status now and then."
            ),
            "The person can watch it live in planb-retro.".into(),
        ],
        Some((RunState::Completed, _)) => vec![
            format!(
                "Open the report: task_file_info {{task_id: \"{id}\", artifact: \"report\"}} gives its local path."
            ),
            "All artifacts: task_file_info with artifact \"zip\".".into(),
        ],
        Some((RunState::Stopped, _)) => vec![format!(
            "Edit an artifact with task_artifact_write if needed, then task_resume {{task_id: \"{id}\"}}: only missing steps and those downstream of an edit run again."
        )],
        Some((RunState::Failed, true)) => vec![format!(
            "See why with task_logs_tail {{task_id: \"{id}\"}}, fix the cause, then task_resume {{task_id: \"{id}\"}}."
        )],
        Some((RunState::Failed, false)) => vec![format!(
            "See why with task_logs_tail {{task_id: \"{id}\"}}; resuming cannot recover this failure: fix the cause, then task_retry {{task_id: \"{id}\"}} runs it again from the first step."
        )],
    }
}

fn parse_task_id(args: &mut Args<'_>) -> Option<TaskId> {
    let text = args.string("task_id", 100)?;
    match TaskId::parse(text.trim()) {
        Ok(id) => Some(id),
        Err(e) => {
            args.push(format!("task_id: {e}"));
            None
        }
    }
}

/// The optional `run_id` argument: one run of the task.
fn parse_run_id(args: &mut Args<'_>) -> Option<planb_core::RunId> {
    let text = args.optional_string("run_id", 100)?;
    match planb_core::RunId::parse(text.trim()) {
        Ok(id) => Some(id),
        Err(e) => {
            args.push(format!("run_id: {e}"));
            None
        }
    }
}

fn invalid(errors: impl ToString) -> CallToolResult {
    error(
        ErrorCode::InvalidArgument.as_str(),
        errors.to_string(),
        json!({}),
    )
}

/// Reads `task_id` and whatever `more` reads, then refuses unknown fields:
/// every problem in one `INVALID_ARGUMENT` error.
fn task_args<T>(
    arguments: &JsonObject,
    more: impl FnOnce(&mut Args<'_>) -> T,
) -> Result<(TaskId, T), Refusal> {
    let mut args = Args::new(arguments);
    let id = parse_task_id(&mut args);
    let rest = more(&mut args);
    args.finish()
        .map_err(|errors| Refusal::from(invalid(errors)))?;
    // `finish` has reported a missing or malformed id already.
    let id = id.ok_or_else(|| Refusal::from(invalid("task_id: required")))?;
    Ok((id, rest))
}

impl PlanbServer {
    pub(crate) fn data_root(&self) -> DataRoot {
        DataRoot::new(self.config().data_root.clone())
    }

    /// The task operations.
    fn tasks(&self) -> Tasks {
        self.app().tasks()
    }

    /// The task, after ending its active run if the worker is gone.
    async fn task_checked(&self, id: TaskId) -> Result<(Tasks, Task), Refusal> {
        let tasks = self.tasks();
        let task = tasks.find(id).await.map_err(app_error)?;
        Ok((tasks, task))
    }

    /// Starts the task's next run where `runner` says, and waits until the
    /// run is recorded, or what was to run it has ended.
    async fn start_task_run(
        &self,
        tasks: &Tasks,
        id: TaskId,
        runs_before: usize,
        runner: Runner,
        from: Start,
    ) -> Result<Task, Refusal> {
        (tasks.start_run(id, runs_before, runner, from).await).map_err(app_error)
    }

    /// Where a run of a task with `profile` goes (see
    /// [`planb_app::launch::runner`]), the client's model offered when it
    /// declared sampling.
    fn runner(&self, profile: Option<&str>, peer: &Peer<RoleServer>) -> Result<Runner, Refusal> {
        (self.tasks().runner(profile, Sampler::of(peer, profile))).map_err(app_error)
    }

    /// The task's status as the tools answer it.
    fn answer_status(&self, task: &Task) -> CallToolResult {
        crate::reply::structured(status(&self.data_root(), task, self.store().env().now()))
    }
}

impl PlanbServer {
    /// `task_resume` and `task_retry`: the task's next run, beginning where
    /// `from` says, once no run is active and the task is not completed.
    async fn next_run(
        &self,
        arguments: JsonObject,
        peer: &Peer<RoleServer>,
        from: Start,
    ) -> Answer {
        let (id, ()) = task_args(&arguments, |_| ())?;
        let (tasks, task) = self.task_checked(id).await?;
        planb_app::tasks::may_run_again(&task).map_err(app_error)?;
        let runner = self.runner(task.model_profile.as_deref(), peer)?;
        let task = (self.start_task_run(&tasks, id, task.runs.len(), runner, from)).await?;
        Ok(self.answer_status(&task))
    }
}

/// `task_create`'s arguments, checked; every problem is named at once.
fn create_request(arguments: &JsonObject) -> Result<CreateRequest, Refusal> {
    let mut args = Args::new(arguments);
    let prompt = args.string(
        "prompt",
        4 * planb_core::state::tasks::TASK_PROMPT_CHARS_MAX,
    );
    let speed = args
        .optional_string("speed_vs_detail", 10)
        .unwrap_or_else(|| "ping".into());
    let target = args
        .optional_string("target", 64)
        .unwrap_or_else(|| DEFAULT_TARGET.into());
    let pipeline = args
        .optional_string("pipeline", 64)
        .unwrap_or_else(|| PROJECT_PLAN.into());
    let profile = args.optional_string("model_profile", 20);
    let request_id = args.optional_string("client_request_id", 200);
    if prompt.as_deref().is_some_and(|p| p.trim().is_empty()) {
        args.push("prompt: must not be empty".to_owned());
    }
    if planb_core::Speed::parse(&speed).is_none() {
        args.push(planb_core::Speed::refusal(&speed));
    }
    if let Some(p) = &profile
        && !PROFILES.contains(&p.as_str())
    {
        args.push(format!(
            "model_profile: {p:?} is not one of {}",
            PROFILES.join(", ")
        ));
    }
    args.finish()
        .map_err(|errors| Refusal::from(invalid(errors)))?;
    let prompt = prompt.ok_or_else(|| Refusal::from(invalid("prompt: required")))?;
    Ok(CreateRequest {
        prompt,
        speed,
        target,
        pipeline,
        profile,
        request_id,
    })
}

/// An application error as the tools answer it, with the tool that helps
/// next where there is one.
fn app_error(e: planb_app::Error) -> Refusal {
    let next = match e.code {
        ErrorCode::TaskNotFound if e.details["tasks"] == 0 => "; create one with task_create",
        ErrorCode::RunNotFound => "; task_status gives the latest run_id",
        ErrorCode::InvalidArtifactUri => "; task_status lists the task's files",
        ErrorCode::InternalError if e.details["still_starting"] == true => {
            " (task_status shows when)"
        }
        _ => "",
    };
    let message = format!("{}{next}", e.message);
    Refusal::from(error(e.code.as_str(), message, e.details))
}

#[tool_router(router = task_tool_router, vis = "pub(crate)")]
impl PlanbServer {
    #[tool(
        name = "prompt_examples",
        description = "Example prompts for task_create: call first and write yours to the same standard (context, budget, timeline, place, success criteria, what is banned).",
        title = "Example task prompts",
        input_schema = schema(json!({"type": "object", "properties": {}, "additionalProperties": false})),
        output_schema = schema(json!({"type": "object", "properties": {"samples": {"type": "array", "items": {"type": "string"}}, "message": {"type": "string"}}})),
        annotations(title = "Example task prompts", read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn prompt_examples(&self, arguments: JsonObject) -> Answer {
        if let Err(errors) = Args::new(&arguments).finish() {
            return Ok(invalid(errors));
        }
        let examples = &planb_app::tasks::examples::EXAMPLES;
        Ok(crate::reply::structured(json!({
            "samples": examples.iter().map(|e| e.prompt).collect::<Vec<_>>(),
            "examples": examples
                .iter()
                .map(|e| json!({"title": e.title, "tags": e.tags, "prompt": e.prompt}))
                .collect::<Vec<_>>(),
            "message": "Good prompts run 300-800 words: background, constraints (budget, timeline, location, technology), success criteria and anything banned. Refine yours to this standard, then call task_create.",
        })))
    }

    #[tool(
        name = "task_create",
        description = "Generate a project plan from a detailed prompt: a background worker runs model steps (risks, team, SWOT, work breakdown, Gantt, premortem, summary, ...) into an HTML report and a zip. speed_vs_detail: \"ping\" (default) checks the setup with one call, \"fast\" brief, \"all\" full. Returns {task_id, state}; then task_wait.",
        title = "Create a plan-generation task",
        input_schema = schema(json!({
            "type": "object",
            "properties": {
                "prompt": {"type": "string", "description": "What to plan: 300-800 words with context, constraints, success criteria (see prompt_examples)."},
                "speed_vs_detail": {"type": "string", "enum": ["ping", "fast", "all"], "default": "ping"},
                "target": {"type": "string", "description": "build_plan (default), validate_plan or build_plan_and_validate."},
                "pipeline": {"type": "string", "description": "project-plan (default) or a file's name in <data-root>/pipelines/."},
                "model_profile": {"type": "string", "enum": PROFILES},
                "client_request_id": {"type": "string", "description": "Makes the call idempotent: the same id returns the same task."}
            },
            "required": ["prompt"],
            "additionalProperties": false
        })),
        output_schema = open_output(),
        annotations(title = "Create a plan-generation task", read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = true)
    )]
    async fn task_create(&self, arguments: JsonObject, peer: Peer<RoleServer>) -> Answer {
        let create = create_request(&arguments)?;
        let tasks = self.tasks();
        if let Some(key) = create.request_id.clone()
            && let Ok(Some(task)) = tasks.by_request(key).await
        {
            return Ok(crate::reply::structured(created(&task)));
        }
        let runner = self.runner(create.profile.as_deref(), &peer)?;
        let checked = checked_pipeline(&self.data_root(), &create.pipeline, &create.target);
        let pipeline = checked.map_err(app_error)?;
        let id = tasks.create(create, &pipeline).await.map_err(app_error)?;
        let task = (self.start_task_run(&tasks, id, 0, runner, Start::Resume)).await?;
        Ok(crate::reply::structured(created(&task)))
    }

    #[tool(
        name = "task_status",
        description = "A task's state, progress_percentage, steps, timing, latest files and, after a failure, error {failure_reason, failed_step, recoverable}. Poll every few minutes at most.",
        title = "Task status",
        input_schema = input_task_and_run(),
        output_schema = status_output(),
        annotations(title = "Task status", read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn task_status(&self, arguments: JsonObject) -> Answer {
        let (id, run_id) = task_args(&arguments, parse_run_id)?;
        let (_, task) = self.task_checked(id).await?;
        let now = self.store().env().now();
        let run = planb_app::tasks::run_of(&task, run_id).map_err(app_error)?;
        Ok(crate::reply::structured(status_of(
            &self.data_root(),
            &task,
            run,
            now,
        )))
    }

    #[tool(
        name = "task_stop",
        description = "Stop a task's run: calls in flight are cancelled, completed steps kept for task_resume. Returns task_status's fields (state \"stopping\" while it winds down).",
        title = "Stop a task",
        input_schema = input_task_only(),
        output_schema = open_output(),
        annotations(title = "Stop a task", read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn task_stop(&self, arguments: JsonObject) -> Answer {
        let (id, ()) = task_args(&arguments, |_| ())?;
        let task = self.tasks().stop(id).await;
        Ok(self.answer_status(&task.map_err(app_error)?))
    }

    #[tool(
        name = "task_resume",
        description = "Start a new run of a stopped or failed task: only steps missing or downstream of an edit run again. Returns task_status's fields.",
        title = "Resume a task",
        input_schema = input_task_only(),
        output_schema = open_output(),
        annotations(title = "Resume a task", read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = true)
    )]
    async fn task_resume(&self, arguments: JsonObject, peer: Peer<RoleServer>) -> Answer {
        self.next_run(arguments, &peer, Start::Resume).await
    }

    #[tool(
        name = "task_retry",
        description = "Run a stopped or failed task again from its first step under the same id, reusing nothing (task_resume keeps completed steps); earlier runs stay in its history.",
        title = "Retry a task from the start",
        input_schema = input_task_only(),
        output_schema = open_output(),
        annotations(title = "Retry a task from the start", read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = true)
    )]
    async fn task_retry(&self, arguments: JsonObject, peer: Peer<RoleServer>) -> Answer {
        self.next_run(arguments, &peer, Start::Retry).await
    }

    #[tool(
        name = "task_archive",
        description = "Freeze a task that is not running: status, files and replay stay readable; it can no longer be resumed, retried, edited or stopped, and task_list leaves it out unless include_archived.",
        title = "Archive a task",
        input_schema = input_task_only(),
        output_schema = open_output(),
        annotations(title = "Archive a task", read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn task_archive(&self, arguments: JsonObject) -> Answer {
        let (id, ()) = task_args(&arguments, |_| ())?;
        let task = self.tasks().archive(id).await;
        Ok(self.answer_status(&task.map_err(app_error)?))
    }

    #[tool(
        name = "task_delete",
        description = "Delete a task that is not running: it leaves every list and its folder is removed; its history stays in planb-retro.",
        title = "Delete a task",
        input_schema = input_task_only(),
        output_schema = open_output(),
        annotations(title = "Delete a task", read_only_hint = false, destructive_hint = true, idempotent_hint = false, open_world_hint = false)
    )]
    async fn task_delete(&self, arguments: JsonObject) -> Answer {
        let (id, ()) = task_args(&arguments, |_| ())?;
        let tasks = self.tasks();
        let folder = tasks.delete(id).await.map_err(app_error)?;
        Ok(crate::reply::structured(json!({
            "task_id": id.to_string(),
            "lifecycle": "deleted",
            "folder_removed": folder.display().to_string(),
        })))
    }

    #[tool(
        name = "task_list",
        description = "The most recently created tasks, newest first: task_id, created_at, state, lifecycle and a prompt summary; archived ones only with include_archived. Use it to find a task_id again.",
        title = "List tasks",
        input_schema = list_input(),
        output_schema = schema(json!({"type": "object", "properties": {"tasks": {"type": "array"}}})),
        annotations(title = "List tasks", read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn task_list(&self, arguments: JsonObject) -> Answer {
        self.recent_tasks(arguments).await
    }

    #[tool(
        name = "task_recent",
        description = "The same as task_list, under the task interface's other name for it.",
        title = "List tasks (task_recent)",
        input_schema = list_input(),
        output_schema = schema(json!({"type": "object", "properties": {"tasks": {"type": "array"}}})),
        annotations(title = "List tasks (task_recent)", read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn task_recent(&self, arguments: JsonObject) -> Answer {
        self.recent_tasks(arguments).await
    }

    #[tool(
        name = "task_get_latest",
        description = "task_status of the most recently created task (the simplest way back to a task whose id was lost).",
        title = "Latest task",
        input_schema = schema(json!({"type": "object", "properties": {}, "additionalProperties": false})),
        output_schema = open_output(),
        annotations(title = "Latest task", read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn task_get_latest(&self, arguments: JsonObject) -> Answer {
        if let Err(errors) = Args::new(&arguments).finish() {
            return Ok(invalid(errors));
        }
        let task = self.tasks().latest().await;
        Ok(self.answer_status(&task.map_err(app_error)?))
    }

    #[tool(
        name = "task_wait",
        description = "Wait until the task's run ends or timeout_sec passes (default 60), with progress notifications. Returns task_status's fields and next_steps.",
        title = "Wait for a task",
        input_schema = schema(json!({"type": "object", "properties": {"task_id": task_id_schema(), "timeout_sec": {"type": "number", "minimum": 0, "maximum": 3600, "default": 60}, "poll_interval_sec": {"type": "number", "minimum": 0.05, "maximum": 60}}, "required": ["task_id"], "additionalProperties": false})),
        output_schema = open_output(),
        annotations(title = "Wait for a task", read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn task_wait(
        &self,
        arguments: JsonObject,
        context: RequestContext<RoleServer>,
    ) -> Answer {
        let parsed = task_args(&arguments, |args| {
            (
                args.optional_number("timeout_sec", 0.0, 3600.0)
                    .unwrap_or(60.0),
                args.optional_number("poll_interval_sec", 0.05, 60.0)
                    .unwrap_or(0.5),
            )
        });
        let (id, (timeout, poll)) = parsed?;
        let token = context.meta.get_progress_token();
        // Without a progress token a client's own timeout applies: hand back
        // in time (the agent calls again).
        let mut limit = Duration::from_secs_f64(timeout);
        if token.is_none() {
            limit = limit.min(self.config().env.hand_back);
        }
        let (until, poll) = (Instant::now() + limit, Duration::from_secs_f64(poll));
        let tasks = self.tasks();
        // Progress is told only to a request that carries a token.
        let mut told = if token.is_some() { -1.0 } else { f64::INFINITY };
        let (task, ended) = loop {
            match tasks.wait(id, until, poll, told).await.map_err(app_error)? {
                TaskWaited::Ended(task) => break (task, true),
                TaskWaited::TimedOut(task) => break (task, false),
                TaskWaited::Progressed(task, status) => {
                    told = status.percentage;
                    if let Some(token) = &token {
                        let message = progress_message(&task, &status);
                        PlanbServer::notify_progress(&context, token, told, message).await;
                    }
                }
            }
        };
        let mut value = status(&self.data_root(), &task, self.store().env().now());
        if let Value::Object(map) = &mut value {
            map.insert("next_steps".into(), json!(next_steps(&task)));
            map.insert("timed_out".into(), json!(!ended));
        }
        Ok(crate::reply::structured(value))
    }

    #[tool(
        name = "task_logs_tail",
        description = "A task's latest run-log lines, oldest first; since_cursor (an earlier next_cursor) returns only newer ones.",
        title = "Task log",
        input_schema = schema(json!({"type": "object", "properties": {"task_id": task_id_schema(), "max_lines": {"type": "integer", "minimum": 1, "maximum": 500, "default": 50}, "since_cursor": {"type": "integer", "minimum": 0}, "run_id": {"type": "string"}}, "required": ["task_id"], "additionalProperties": false})),
        output_schema = schema(json!({"type": "object", "properties": {"lines": {"type": "array"}, "next_cursor": {"type": "integer"}}})),
        annotations(title = "Task log", read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn task_logs_tail(&self, arguments: JsonObject) -> Answer {
        let parsed = task_args(&arguments, |args| {
            (
                args.optional_integer("max_lines", 1, 500).unwrap_or(50),
                args.optional_integer("since_cursor", 0, u64::MAX)
                    .unwrap_or(0),
                parse_run_id(args),
            )
        });
        let (id, (max, since, run_id)) = parsed?;
        let max = usize::try_from(max).unwrap_or(usize::MAX);
        let (_, task) = self.task_checked(id).await?;
        planb_app::tasks::run_of(&task, run_id).map_err(app_error)?;
        // One run's lines when a run_id is given.
        let tail = planb_app::tasks::log_tail(&task, run_id, since, max);
        let lines: Vec<Value> = tail
            .lines
            .iter()
            .map(|l| json!({"cursor": l.number, "at": l.at.to_iso8601(), "run_id": l.run.to_string(), "text": l.text}))
            .collect();
        Ok(crate::reply::structured(json!({
            "task_id": id.to_string(),
            "lines": lines,
            "next_cursor": tail.next_cursor,
            "older_lines_dropped": tail.older_lines_dropped,
        })))
    }

    #[tool(
        name = "task_file_info",
        description = "Where a task's \"report\" (self-contained HTML) or \"zip\" (every artifact) is: {content_type, sha256, size, path, download_url}.",
        title = "Task file info",
        input_schema = schema(json!({"type": "object", "properties": {"task_id": task_id_schema(), "artifact": {"type": "string", "enum": ["report", "zip"], "default": "report"}, "run_id": {"type": "string"}}, "required": ["task_id"], "additionalProperties": false})),
        output_schema = open_output(),
        annotations(title = "Task file info", read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn task_file_info(&self, arguments: JsonObject) -> Answer {
        self.file_info(arguments, false).await
    }

    #[tool(
        name = "task_download",
        description = "Save a task's \"report\" or \"zip\" to save_path (outside planb's data root; an existing file only with overwrite: true). Returns {content_type, sha256, size, path}.",
        title = "Download a task file",
        input_schema = schema(json!({"type": "object", "properties": {"task_id": task_id_schema(), "artifact": {"type": "string", "enum": ["report", "zip"], "default": "report"}, "save_path": {"type": "string"}, "overwrite": {"type": "boolean", "default": false}}, "required": ["task_id"], "additionalProperties": false})),
        output_schema = open_output(),
        annotations(title = "Download a task file", read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn task_download(&self, arguments: JsonObject) -> Answer {
        self.file_info(arguments, true).await
    }

    #[tool(
        name = "task_artifact_write",
        description = "Replace one step's artifact of a stopped or failed task (path: \"04-assumptions\" as task_status lists it, or the step id); task_resume then re-runs what depends on it. Refused while a run is active.",
        title = "Edit a task artifact",
        input_schema = schema(json!({"type": "object", "properties": {"task_id": task_id_schema(), "path": {"type": "string"}, "content": {"type": "string"}}, "required": ["task_id", "path", "content"], "additionalProperties": false})),
        output_schema = open_output(),
        annotations(title = "Edit a task artifact", read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn task_artifact_write(&self, arguments: JsonObject) -> Answer {
        let parsed = task_args(&arguments, |args| {
            (
                args.string("path", 300),
                args.string("content", ANSWER_BYTES_MAX),
            )
        });
        let (id, (Some(path), Some(content))) = parsed? else {
            // `task_args` has reported a missing path or content already.
            return Ok(invalid("path and content are required"));
        };
        let tasks = self.tasks();
        let written = tasks.write_artifact(id, &path, content).await;
        let written = written.map_err(app_error)?;
        Ok(crate::reply::structured(json!({
            "task_id": id.to_string(),
            "step": written.step,
            "sha256": written.sha256,
            "size": written.size,
            "changed": written.changed,
            "invalidated": written.invalidated,
        })))
    }
}

fn created(task: &Task) -> Value {
    json!({
        "task_id": task.id.to_string(),
        "created_at": task.created_at.to_iso8601(),
        "state": state_name(task),
        "speed_vs_detail": task.speed,
        "target": task.target,
    })
}

impl PlanbServer {
    async fn file_info(&self, arguments: JsonObject, download: bool) -> Answer {
        let parsed = task_args(&arguments, |args| {
            let artifact = args
                .optional_string("artifact", 10)
                .unwrap_or_else(|| "report".into());
            if !["report", "zip"].contains(&artifact.as_str()) {
                args.push(format!("artifact: {artifact:?} is not one of report, zip"));
            }
            let save = download
                .then(|| args.optional_string("save_path", 4096))
                .flatten();
            let overwrite = download && args.optional_bool("overwrite").unwrap_or(false);
            let run = (!download).then(|| parse_run_id(args)).flatten();
            (artifact, save, overwrite, run)
        });
        let (id, (artifact, save, overwrite, run_id)) = parsed?;
        let (tasks, task) = self.task_checked(id).await?;
        // The files are those of the task as it is now, which is its latest
        // run's; an earlier run's id is accepted and the answer says so.
        let run = planb_app::tasks::run_of(&task, run_id).map_err(app_error)?;
        let earlier = run.is_some_and(|r| task.runs.last().is_some_and(|last| last.id != r.id));
        let file = if artifact == "report" {
            TaskFile::Report
        } else {
            TaskFile::Zip
        };
        let save = save.map(|to| (PathBuf::from(to), overwrite));
        let info = tasks.file(task, file, save).await.map_err(app_error)?;
        let mut answer = json!({
            "task_id": id.to_string(),
            "artifact": artifact,
            "content_type": info.content_type,
            "sha256": info.sha256,
            "size": info.size,
            "path": info.path.display().to_string(),
            "download_url": format!("file://{}", info.path.display()),
        });
        if earlier {
            answer["note"] = "the files are kept for the task as it is now (its latest run); an earlier run's report is not kept apart".into();
        }
        Ok(crate::reply::structured(answer))
    }
}

impl PlanbServer {
    /// `task_list` (and `task_recent`): the newest tasks.
    async fn recent_tasks(&self, arguments: JsonObject) -> Answer {
        let mut args = Args::new(&arguments);
        let limit = args
            .optional_integer("limit", 1, 100)
            .map_or(10, |n| usize::try_from(n).unwrap_or(100));
        let archived = args.optional_bool("include_archived").unwrap_or(false);
        if let Err(errors) = args.finish() {
            return Ok(invalid(errors));
        }
        let tasks = self.tasks();
        let listed = tasks.list(limit, archived).await.map_err(app_error)?;
        let tasks: Vec<Value> = listed
            .iter()
            .map(|t| {
                json!({
                    "task_id": t.id.to_string(),
                    "created_at": t.created_at.to_iso8601(),
                    "state": t.state,
                    "lifecycle": t.lifecycle,
                    "prompt_summary": prompt_summary(&t.prompt),
                })
            })
            .collect();
        Ok(crate::reply::structured(json!({"tasks": tasks})))
    }
}
