//! The MCP tools: `init_planb_session`, `ask_user`, `save_plan`.
//!
//! Glue: arguments are parsed and validated here, decisions are the core's,
//! recording is the store's. The result texts are part of the interface
//! (agents and scripts parse them) and follow the brief exactly.

use std::sync::Arc;

use planb_core::{AskSpec, DeclineAction};

use planb_app::App;
use planb_app::asks::{Asks, Ending};
use planb_app::sessions::{NewSession, Sessions};
use planb_app::store::StoreHandle;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::{
    CallToolResult, ContentBlock, CustomNotification, ElicitationAction, Implementation,
    JsonObject, ListResourceTemplatesResult, ListResourcesResult, PaginatedRequestParams,
    ProgressNotificationParam, ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities,
    ServerConfig, ServerNotification,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, tool, tool_handler, tool_router};

use crate::args::Args;
use crate::config::{Config, human_duration};
use crate::schema;
use planb_forms::{Callback, Forms, Reviews};

/// The version of the task interface (PlanExe's) the task tools implement.
pub(crate) const PLANEXE_VERSION: &str = "1.0";

/// The planb MCP server.
#[derive(Debug, Clone)]
pub struct PlanbServer {
    app: App,
    config: Arc<Config>,
    /// The callback server and its pages, started on the first page.
    pages: Arc<Callback>,
    tool_router: ToolRouter<Self>,
    prompt_router: rmcp::handler::server::router::prompt::PromptRouter<Self>,
}

fn text(message: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(message.into())])
}

/// A tool call refused or failed: the error result it answers with, so
/// that a tool's body can stop at the first problem with `?`.
#[derive(Debug)]
pub(crate) struct Refusal(Box<CallToolResult>);

impl From<CallToolResult> for Refusal {
    fn from(result: CallToolResult) -> Refusal {
        Refusal(Box::new(result))
    }
}

impl rmcp::handler::server::tool::IntoCallToolResult for Refusal {
    fn into_call_tool_result(self) -> Result<rmcp::model::CallToolResponse, ErrorData> {
        Ok((*self.0).into())
    }
}

/// What a tool answers: its result, or the refusal it stops at.
pub(crate) type Answer = Result<CallToolResult, Refusal>;

pub(crate) fn tool_error(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.into())])
}

/// Arguments that cannot be taken, as a tool error naming each problem.
pub(crate) fn bad_arguments(errors: impl ToString) -> CallToolResult {
    tool_error(errors.to_string())
}

/// A failure to record as the agent sees it: a refusal is the agent's to
/// fix, anything else is ours (planb-app has logged it).
pub(crate) fn store_error(error: planb_app::Error) -> CallToolResult {
    tool_error(error.message)
}

impl PlanbServer {
    /// A server of `app`.
    pub fn new(app: App, config: Config) -> PlanbServer {
        let mut tool_router = Self::tool_router()
            + Self::plan_tool_router()
            + Self::task_tool_router()
            + Self::plan_exec_tool_router();
        for route in tool_router.map.values_mut() {
            crate::groups::lean(&mut route.attr);
        }
        // Tools of the groups not selected are neither listed nor served.
        for tool in tool_router.list_all() {
            if !config.tools.serves(&tool.name) {
                tool_router.disable_route(tool.name.to_string());
            }
        }
        PlanbServer {
            pages: Arc::new(Callback::new(app.clone(), config.env.port)),
            app,
            config: Arc::new(config),
            tool_router,
            prompt_router: Self::prompt_router(),
        }
    }

    pub(crate) fn app(&self) -> &App {
        &self.app
    }

    pub(crate) fn store(&self) -> &StoreHandle {
        self.app.store()
    }

    /// The callback server and the pages it serves.
    pub(crate) fn pages(&self) -> &Callback {
        &self.pages
    }

    pub(crate) fn forms(&self) -> &Forms {
        self.pages.forms()
    }

    pub(crate) fn reviews(&self) -> &Reviews {
        self.pages.reviews()
    }

    pub(crate) fn plan_runs(&self) -> &Arc<planb_app::runs::PlanRuns> {
        self.app.runs()
    }

    /// The sessions of this server's store.
    pub(crate) fn sessions(&self) -> Sessions {
        self.app.sessions()
    }

    /// The asks of this server's store.
    pub(crate) fn asks(&self) -> Asks {
        self.app.asks()
    }
}

#[tool_router]
impl PlanbServer {
    #[tool(
        name = "init_planb_session",
        description = "Start a planning session; returns its sessionId. Call once per planning arc and pass the id to ask_user and save_plan, so questions, answers and plan versions are kept and replayed together.",
        title = "Start a planning session",
        input_schema = schema::of::<schema::InitSessionInput>(),
        annotations(title = "Start a planning session", read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false)
    )]
    async fn init_planb_session(&self, arguments: JsonObject) -> Answer {
        self.start_session(arguments).await
    }

    #[tool(
        name = "init_browser_plan_session",
        description = "The same as init_planb_session, under the name skills written for browser-plan call.",
        title = "Start a planning session (browser-plan name)",
        input_schema = schema::of::<schema::InitSessionInput>(),
        annotations(title = "Start a planning session (browser-plan name)", read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false)
    )]
    async fn init_browser_plan_session(&self, arguments: JsonObject) -> Answer {
        self.start_session(arguments).await
    }

    #[tool(
        name = "save_plan",
        description = "Save a session's whole plan (Markdown) as its next version (v1, v2, ...); earlier versions are kept for the replay.",
        title = "Save a plan version",
        input_schema = schema::of::<schema::SavePlanInput>(),
        annotations(title = "Save a plan version", read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false)
    )]
    async fn save_plan(&self, arguments: JsonObject) -> Answer {
        let mut args = Args::new(&arguments);
        let session = args.session_id();
        let plan = args.string("plan", planb_core::state::PLAN_CONTENT_BYTES_MAX);
        let title = args.optional_string("title", 200);
        args.finish().map_err(bad_arguments)?;
        let (Some(session), Some(plan)) = (session, plan) else {
            // `finish` has already reported both; kept as a plain error, not a panic.
            return Err(tool_error("sessionId and plan are required").into());
        };
        // The agent reads the version's file by the path it is given; the
        // manifests follow off this reply's path.
        let saved = (self.sessions().save_plan(session, title, plan).await).map_err(store_error)?;
        Ok(text(format!(
            "Saved plan v{} for session {session}\npath: {}",
            saved.version,
            saved.path.display()
        )))
    }

    #[tool(
        name = "ask_user",
        description = "Ask the person structured questions in a browser form; returns their answers as JSON {questionId: value}. Kinds: text, longtext (strings), single (an option's value), multi (option values), scale (a number; min, max, step). Questions group into tabs by `tab`; an optional Markdown intro (tables, code, mermaid) opens the form. Waits for the person. After a timeout or a \"waiting\" result (about 45 s when the request has no progress token), call with {askId} alone to collect the answer or keep waiting. For non-sensitive input only.",
        title = "Ask the user (browser form)",
        input_schema = schema::of::<schema::AskUserInput>(),
        output_schema = schema::of::<schema::AskUserOutput>(),
        annotations(title = "Ask the user (browser form)", read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false)
    )]
    async fn ask_user(&self, arguments: JsonObject, context: RequestContext<RoleServer>) -> Answer {
        if arguments.contains_key("askId") {
            return Ok(self.collect_ask(&arguments, &context).await.into_result());
        }
        let mut args = Args::new(&arguments);
        let session = args.session_id();
        args.finish_partial().map_err(bad_arguments)?;
        let session = session.ok_or_else(|| tool_error("sessionId: required"))?;
        let mut spec_json = arguments.clone();
        spec_json.remove("sessionId");
        let spec = AskSpec::from_json(&serde_json::Value::Object(spec_json))
            .map_err(|errors| tool_error(format!("invalid question spec: {errors}")))?;
        if !self.sessions().exists(session).await.map_err(store_error)? {
            return Err(tool_error(format!(
                "sessionId: unknown session {session}; call init_planb_session first and pass the sessionId it returns"
            ))
            .into());
        }
        Ok(self.open_ask(session, spec, &context).await.into_result())
    }
}

impl PlanbServer {
    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    /// How a dismissed form ends its ask.
    pub(crate) fn declined(action: ElicitationAction) -> Ending {
        Ending::Declined(if action == ElicitationAction::Cancel {
            DeclineAction::Cancel
        } else {
            DeclineAction::Decline
        })
    }

    pub(crate) async fn notify_progress(
        context: &RequestContext<RoleServer>,
        token: &rmcp::model::ProgressToken,
        progress: f64,
        message: String,
    ) {
        let param = ProgressNotificationParam::new(token.clone(), progress).with_message(message);
        if let Err(error) = context.peer.notify_progress(param).await {
            tracing::debug!("progress notification not sent: {error}");
        }
    }

    pub(crate) async fn notify_elicitation_complete(
        context: &RequestContext<RoleServer>,
        elicitation_id: &str,
    ) {
        let notification = ServerNotification::CustomNotification(CustomNotification::new(
            "notifications/elicitation/complete",
            Some(serde_json::json!({ "elicitationId": elicitation_id })),
        ));
        if let Err(error) = context.peer.send_notification(notification).await {
            tracing::debug!("elicitation completion not sent: {error}");
        }
    }
}

#[tool_handler(router = self.tool_router)]
#[rmcp::prompt_handler(router = self.prompt_router)]
impl ServerHandler for PlanbServer {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_prompts()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new("planb", env!("CARGO_PKG_VERSION")));
        info.instructions = Some(instructions(&self.config.tools));
        // The version of the task interface the task tools implement,
        // readable without a call.
        let mut meta = rmcp::model::JsonObject::new();
        meta.insert("planexe.version".into(), PLANEXE_VERSION.into());
        info.meta = Some(rmcp::model::MetaObject(meta));
        info
    }

    async fn list_tools(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListToolsResult, ErrorData> {
        // Another name for a tool is served always, listed only when asked
        // for, so the list every agent reads does not grow.
        let config = &self.config;
        let tools = self
            .tool_router
            .list_all()
            .into_iter()
            .filter(|tool| {
                config
                    .tools
                    .lists(&tool.name, config.env.browser_plan_names)
            })
            .collect();
        Ok(rmcp::model::ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: rmcp::model::CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, ErrorData> {
        if self.tool_router.is_disabled(&request.name) {
            return Ok(tool_error(crate::groups::Selection::refusal(&request.name)).into());
        }
        let call = rmcp::handler::server::tool::ToolCallContext::new(self, request, context);
        self.tool_router.call(call).await
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.list_task_resources(request.and_then(|r| r.cursor))
            .await
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(
            Self::resource_templates(),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.read_task_resource(request.uri).await.map(Into::into)
    }
}

/// What the client is told planb is for: a sentence per group served.
fn instructions(tools: &crate::groups::Selection) -> String {
    use crate::groups::Group;
    let parts = [
        (
            Group::Sessions,
            "planb records a planning arc: call init_planb_session once, ask the person with ask_user (a browser form) \
             instead of guessing, and save the full plan with save_plan; every question, answer and plan version is kept.",
        ),
        (
            Group::Review,
            "For a plan the person must approve, write it with write_plan, revise it with edit_plan and ask for a verdict \
             with submit_plan.",
        ),
        (
            Group::Tasks,
            "To generate a full project-plan draft (executive summary, Gantt schedule, risk register, \
             governance, SWOT, ...) from a goal, call prompt_examples, then task_create with a detailed prompt; a background \
             worker runs many model calls, so wait with task_wait or poll task_status every few minutes, then open the \
             report via task_file_info. The result is a draft to refine, not a final plan.",
        ),
        (
            Group::Plans,
            "To run a fixed sequence of tool calls on the downstream MCP servers configured for planb (reproducibly, \
             with parallel batches, a dry run and an exact resume after an interruption), write it once with plan_create \
             and run it with plan_execute; plan_list and plan_show find and show plans, plan_stop stops a run.",
        ),
    ];
    parts
        .iter()
        .filter(|(group, _)| tools.has(*group))
        .map(|(_, text)| *text)
        .collect::<Vec<_>>()
        .join(" ")
}

/// A human name for how long the server waits for an answer.
pub(crate) fn timeout_text(config: &Config) -> String {
    human_duration(config.env.answer_timeout)
}

impl PlanbServer {
    /// `init_planb_session` (and its browser-plan name).
    async fn start_session(&self, arguments: JsonObject) -> Answer {
        let mut args = Args::new(&arguments);
        let title = args.optional_string("title", 200);
        let intent = args.optional_string("intent", 2000);
        let project_path = args.optional_string("projectPath", 4096);
        args.finish().map_err(bad_arguments)?;
        let new = NewSession {
            title,
            intent,
            project_path,
        };
        let (session, dir) = self.sessions().start(new).await.map_err(store_error)?;
        Ok(text(format!(
            "sessionId: {session}\n\nPass this sessionId to every ask_user and save_plan call of this planning session. \
             Ask the person with ask_user before guessing, batch related questions into one form, and save the full plan \
             with save_plan whenever it changes: every call keeps a new version. Everything is recorded under {}.",
            dir.display()
        )))
    }
}
