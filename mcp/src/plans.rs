//! Named plans: `write_plan`, `edit_plan`, `submit_plan`, and the `plan` prompt.
//!
//! The plans themselves (their files, hand edits, rounds, a submit
//! command's feedback) are planb-app's `named`; here the arguments are read,
//! the review is put in front of the person (the review page, or a form
//! elicitation) and the verdict is worded for the agent.

use planb_core::{PlanEdit, PlanKey, PlanName, ReviewChannel, Verdict};
use rmcp::RoleServer;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, GetPromptResult, JsonObject, PromptMessage, Role};
use rmcp::service::{ElicitationMode, RequestContext};
use rmcp::{ErrorData, prompt, prompt_router, tool, tool_router};
use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::args::{ArgErrors, Args};
use crate::config::ReviewMode;
use crate::deliver::{Outcome, Page, deliver_and_wait};
use crate::schema;
use crate::server::{Answer, PlanbServer, bad_arguments, store_error, tool_error};
use planb_app::named::{
    CommandReviewError, EditRefused, NamedPlans, ReviewOutcome, SubmitError, Submitted,
};
use planb_forms::{PageKind, ReviewInfo};

/// The `planb-plan` skill: the same review loop for clients (Claude Code)
/// that pass a prompt only its first word per argument, while a skill gets
/// the whole text. Its body is the built-in `plan` prompt.
const PLAN_SKILL: &str = include_str!("../../skills/planb-plan/SKILL.md");

/// The built-in plan-mode prompt (the skill without its front matter);
/// `$ARGUMENTS` is the task.
fn built_in_plan_prompt() -> &'static str {
    PLAN_SKILL
        .strip_prefix("---\n")
        .and_then(|rest| rest.split_once("\n---\n"))
        .map_or(PLAN_SKILL, |(_, body)| body.trim_start())
}

/// Longest `ARGUMENTS` the `plan` prompt takes.
const PROMPT_ARGUMENTS_BYTES_MAX: usize = 64 << 10;
/// Longest `plan` prompt, its template filled.
const PROMPT_BYTES_MAX: usize = 1 << 20;
/// Largest `--prompt-file`.
pub const PROMPT_FILE_BYTES_MAX: usize = 256 << 10;

/// Arguments of the `plan` prompt.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct PlanPromptArgs {
    /// What to plan.
    #[serde(rename = "ARGUMENTS")]
    #[schemars(rename = "ARGUMENTS")]
    pub arguments: String,
}

fn plan_name(args: &mut Args<'_>) -> Option<PlanName> {
    let text = args.string("planName", 200)?;
    match PlanName::parse(&text) {
        Ok(name) => Some(name),
        Err(error) => {
            args.push(error.to_string());
            None
        }
    }
}

/// Reads one `{oldString, newString, replaceAll?}` edit. `prefix` goes in front
/// of field names in messages: `""` for the single-edit form, `"edits[2]."` for
/// an item of `edits`.
fn parse_edit(value: &Value, prefix: &str) -> Result<PlanEdit, ArgErrors> {
    let Value::Object(object) = value else {
        return Err(ArgErrors::one(format!(
            "{}: must be an object {{oldString, newString, replaceAll?}}",
            prefix.trim_end_matches('.')
        )));
    };
    let mut old = None;
    let mut new = None;
    let mut replace_all = false;
    for (key, value) in object {
        match (key.as_str(), value) {
            ("oldString", Value::String(s)) => old = Some(s.clone()),
            ("newString", Value::String(s)) => new = Some(s.clone()),
            ("replaceAll", Value::Bool(b)) => replace_all = *b,
            ("replaceAll", Value::Null) => {}
            ("oldString" | "newString", _) => {
                return Err(ArgErrors::one(format!("{prefix}{key}: must be a string")));
            }
            ("replaceAll", _) => {
                return Err(ArgErrors::one(format!(
                    "{prefix}replaceAll: must be a boolean"
                )));
            }
            (other, _) => return Err(ArgErrors::one(format!("{prefix}{other}: unknown field"))),
        }
    }
    let old = old.ok_or_else(|| ArgErrors::one(format!("{prefix}oldString: required")))?;
    let new = new.ok_or_else(|| ArgErrors::one(format!("{prefix}newString: required")))?;
    Ok(PlanEdit {
        old,
        new,
        replace_all,
    })
}

/// The edits of an `edit_plan` call: either the single-edit fields or `edits`;
/// the flag says which form was used.
fn parse_edits(arguments: &JsonObject) -> Result<(PlanName, Vec<PlanEdit>, bool), ArgErrors> {
    let mut single = JsonObject::new();
    let mut rest = JsonObject::new();
    for (key, value) in arguments {
        match key.as_str() {
            "oldString" | "newString" | "replaceAll" => {
                single.insert(key.clone(), value.clone());
            }
            _ => {
                rest.insert(key.clone(), value.clone());
            }
        }
    }
    let edits_value = rest.remove("edits");
    let one_edit_form = edits_value.is_none();
    let mut args = Args::new(&rest);
    let plan = plan_name(&mut args);
    args.finish()?;
    let plan = plan.ok_or_else(|| ArgErrors::one("planName: required"))?;
    let edits = match (edits_value, single.is_empty()) {
        (Some(_), false) => {
            return Err(ArgErrors::one(
                "edits: give either oldString/newString or edits, not both",
            ));
        }
        (Some(Value::Array(items)), true) => {
            if items.is_empty() {
                return Err(ArgErrors::one("edits: must hold at least one edit"));
            }
            items
                .iter()
                .enumerate()
                .map(|(i, item)| parse_edit(item, &format!("edits[{i}].")))
                .collect::<Result<Vec<_>, _>>()?
        }
        (Some(_), true) => return Err(ArgErrors::one("edits: must be an array")),
        (None, false) => {
            vec![parse_edit(&Value::Object(single), "")?]
        }
        (None, true) => return Err(ArgErrors::one("oldString: required (or pass edits)")),
    };
    Ok((plan, edits, one_edit_form))
}

/// Folds comments into the feedback text so a model can act on them.
fn feedback_text(outcome: &ReviewOutcome) -> Option<String> {
    let mut text = outcome.feedback.clone().unwrap_or_default();
    if !outcome.comments.is_empty() {
        if !text.is_empty() {
            text.push_str("\n\n");
        }
        text.push_str("Comments on the plan:");
        for comment in &outcome.comments {
            let quote = comment.quote.lines().collect::<Vec<_>>().join("\n> ");
            text.push_str(&format!("\n\n> {quote}\n{}", comment.text));
        }
    }
    (!text.trim().is_empty()).then_some(text)
}

/// The feedback of a review the person dismissed.
const DISMISSED: &str = "The person dismissed the review without a verdict.";

fn verdict_result(approved: bool, feedback: Option<String>) -> CallToolResult {
    let mut value = json!({ "approved": approved });
    if let Some(feedback) = feedback {
        value["feedback"] = Value::String(feedback);
    }
    crate::reply::structured(value)
}

/// The form-mode elicitation of a review: a flat `decision` (approve/deny,
/// default deny) and `feedback`, the plan in `_meta`.
fn review_form_request(
    plan: &PlanKey,
    round: u32,
    content: &str,
) -> Option<rmcp::model::ElicitRequestParams> {
    let schema = json!({
        "type": "object",
        "properties": {
            "decision": {"type": "string", "title": "Decision", "enum": ["approve", "deny"], "enumNames": ["Approve", "Request changes"], "default": "deny"},
            "feedback": {"type": "string", "title": "Feedback", "description": "What should change (optional when approving)"}
        },
        "required": ["decision"]
    });
    let schema = serde_json::from_value(schema).ok()?;
    let mut meta = rmcp::model::JsonObject::new();
    meta.insert("ui".into(), "planReview".into());
    meta.insert("planName".into(), plan.name.as_str().into());
    meta.insert("round".into(), round.into());
    meta.insert("plan".into(), content.into());
    Some(rmcp::model::ElicitRequestParams::FormElicitationParams {
        meta: Some(rmcp::model::RequestMetaObject(rmcp::model::MetaObject(
            meta,
        ))),
        message: format!(
            "Review plan \"{}\" (round {round}) at {}",
            plan.name.as_str(),
            NamedPlans::path(plan).display()
        ),
        requested_schema: schema,
    })
}

impl PlanbServer {
    /// The named plans of this server's plans directory.
    fn named(&self) -> NamedPlans {
        self.app().named(self.config().plans_dir.clone())
    }
}

#[tool_router(router = plan_tool_router, vis = "pub(crate)")]
impl PlanbServer {
    #[tool(
        name = "write_plan",
        description = "Write (create or replace) a named plan, Markdown, at <plans-dir>/<planName>-plan.md; every change is kept as a version. Returns {planName, planPath, bytesWritten}.",
        title = "Write a plan",
        input_schema = schema::of::<schema::WritePlanInput>(),
        output_schema = schema::of::<schema::WritePlanOutput>(),
        annotations(title = "Write a plan", read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn write_plan(&self, arguments: JsonObject) -> Answer {
        let mut args = Args::new(&arguments);
        let plan = plan_name(&mut args);
        let content = args.string("content", planb_core::state::NAMED_PLAN_BYTES_MAX);
        let session = args.optional_session_id();
        args.finish().map_err(bad_arguments)?;
        let (Some(plan), Some(content)) = (plan, content) else {
            return Err(tool_error("planName and content are required").into());
        };
        let named = self.named();
        let plan = named.key(plan);
        let change = (named.write(&plan, content, session).await).map_err(store_error)?;
        Ok(crate::reply::structured(json!({
            "planName": plan.name.as_str(),
            "planPath": change.path.display().to_string(),
            "bytesWritten": change.content.len(),
        })))
    }

    #[tool(
        name = "edit_plan",
        description = "Edit a named plan by exact replacement: oldString -> newString, or several `edits` at once. A missing, ambiguous (without replaceAll) or overlapping match changes nothing. Hand edits to the file are kept. Returns {planName, planPath, replacementsMade}.",
        title = "Edit a plan",
        input_schema = schema::of::<schema::EditPlanInput>(),
        output_schema = schema::of::<schema::EditPlanOutput>(),
        annotations(title = "Edit a plan", read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false)
    )]
    async fn edit_plan(&self, arguments: JsonObject) -> Answer {
        let (plan, edits, single) =
            parse_edits(&arguments).map_err(|e| tool_error(e.to_string()))?;
        let named = self.named();
        let plan = named.key(plan);
        let (path, replacements) = (named.edit(&plan, edits).await).map_err(|e| match e {
            // The one-edit form names its fields as the caller sent them.
            EditRefused::Edit(error) => tool_error(error.message(single)),
            EditRefused::Recording(error) => store_error(error),
        })?;
        Ok(crate::reply::structured(json!({
            "planName": plan.name.as_str(),
            "planPath": path.display().to_string(),
            "replacementsMade": replacements,
        })))
    }

    #[tool(
        name = "submit_plan",
        description = "Submit a named plan for the person's review and wait for the verdict: {approved, feedback?}. Not approved: revise with edit_plan and submit again. {pending: true, reviewUrl} (after ~45 s without a progress token): call again to keep waiting.",
        title = "Submit a plan for review",
        input_schema = schema::of::<schema::SubmitPlanInput>(),
        output_schema = schema::of::<schema::SubmitPlanOutput>(),
        annotations(title = "Submit a plan for review", read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false)
    )]
    async fn submit_plan(
        &self,
        arguments: JsonObject,
        context: RequestContext<RoleServer>,
    ) -> Answer {
        let mut args = Args::new(&arguments);
        let plan = plan_name(&mut args);
        args.finish().map_err(bad_arguments)?;
        let plan = plan.ok_or_else(|| tool_error("planName: required"))?;
        let named = self.named();
        let plan = named.key(plan);
        if self.config().submit_command.is_empty()
            && self.config().review == ReviewMode::Browser
            && let Some(result) = self.rejoin_review(&context, &plan).await
        {
            return Ok(result);
        }
        // Nothing is submitted for a review this client cannot hold.
        if self.config().submit_command.is_empty()
            && self.config().review == ReviewMode::Form
            && !context
                .peer
                .supported_elicitation_modes()
                .contains(&ElicitationMode::Form)
        {
            return Err(tool_error(
                "this client cannot show forms (no elicitation capability); start planb-mcp without --review form to review in the browser",
            ).into());
        }
        let submitted = named.submit(&plan).await.map_err(|e| match e {
            SubmitError::Store(error) => store_error(error),
            other => tool_error(other.to_string()),
        })?;
        let Submitted {
            round,
            content,
            previous,
            path,
        } = submitted;
        let command = &self.config().submit_command;
        if !command.is_empty() {
            let reviewed = named.review_by_command(&plan, round, &path, command).await;
            let outcome = reviewed.map_err(|e| match e {
                CommandReviewError::Store(error) => store_error(error),
                other => tool_error(other.to_string()),
            })?;
            return Ok(verdict_result(false, outcome.feedback));
        }
        match self.config().review {
            ReviewMode::Form => self.review_by_form(&plan, round, &content, &context).await,
            ReviewMode::Browser => {
                let info = ReviewInfo {
                    plan,
                    round,
                    content: content.into(),
                    previous: previous.map(Into::into),
                    path: path.display().to_string().into(),
                };
                self.review_in_browser(&context, info).await
            }
        }
    }
}

impl PlanbServer {
    /// Form-mode elicitation: a flat `decision` (approve/deny, default deny)
    /// and `feedback`, with the plan itself in `_meta` (`ui: "planReview"`,
    /// `planName`, `round`, `plan` as Markdown) so that a client with a plan
    /// review view of its own can show it.
    async fn review_by_form(
        &self,
        plan: &PlanKey,
        round: u32,
        content: &str,
        context: &RequestContext<RoleServer>,
    ) -> Answer {
        let request = review_form_request(plan, round, content)
            .ok_or_else(|| tool_error("internal error: the review form schema is invalid"))?;
        let response = (context.peer.create_elicitation(request).await)
            .map_err(|error| tool_error(format!("the review form could not be shown: {error}")))?;
        if response.action != rmcp::model::ElicitationAction::Accept {
            return Ok(verdict_result(false, Some(DISMISSED.into())));
        }
        let content = response.content.unwrap_or(Value::Null);
        let approved = content.get("decision").and_then(Value::as_str) == Some("approve");
        let feedback = content
            .get("feedback")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|f| !f.is_empty())
            .map(str::to_string);
        let outcome = ReviewOutcome {
            verdict: if approved {
                Verdict::Approved
            } else {
                Verdict::ChangesRequested
            },
            feedback,
            comments: Vec::new(),
        };
        let channel = ReviewChannel::FormElicitation;
        (self.named().record(plan, round, &outcome, channel).await).map_err(store_error)?;
        Ok(verdict_result(approved, feedback_text(&outcome)))
    }

    /// The review page, delivered like a question form.
    async fn review_in_browser(
        &self,
        context: &RequestContext<RoleServer>,
        info: ReviewInfo,
    ) -> Answer {
        let page = self.pages().new_page(PageKind::REVIEW).await;
        let page = page.map_err(|problem| tool_error(problem.to_string()))?;
        let (url, rid) = (page.url(), page.id);
        let (sender, answered) = oneshot::channel();
        let (plan, round) = (info.plan.clone(), info.round);
        (self.reviews().register(rid.clone(), info, sender))
            .map_err(|error| tool_error(error.to_string()))?;
        let review = Review {
            rid: &rid,
            url: &url,
            plan: &plan,
            round,
            deliver: true,
        };
        Ok(self.wait_for_review(context, review, answered).await)
    }

    /// `submit_plan` of a plan unchanged since its last submission, whose
    /// review page this process still shows unanswered (an earlier call
    /// returned "still open", or timed out): waits on that review instead of
    /// opening a new round. `None` when there is no such review.
    async fn rejoin_review(
        &self,
        context: &RequestContext<RoleServer>,
        plan: &PlanKey,
    ) -> Option<CallToolResult> {
        // Only a review page of this process can be rejoined: without one,
        // no need to look at the file and the log.
        if !self.reviews().knows(|info| info.plan == *plan) {
            return None;
        }
        // The last round, if the plan is as it was submitted then (a hand
        // edit, recorded first, makes it changed).
        let (round, verdict) = match self.named().unchanged_round(plan).await {
            Ok(last) => last?,
            Err(error) => return Some(store_error(error)),
        };
        let this_round = |info: &ReviewInfo| info.plan == *plan && info.round == round;
        if verdict.is_some() {
            // Reviewed after the call that waited on it had handed back.
            if let Some(outcome) = self.reviews().claim(this_round) {
                return Some(verdict_result(
                    outcome.verdict == Verdict::Approved,
                    feedback_text(&outcome),
                ));
            }
            // Otherwise the callback server has recorded the verdict and is
            // about to hand it over: an unfinished page is waited on below,
            // and a verdict already handed to another call is not rejoined.
        }
        let Some((rid, _, answered)) = self.reviews().rewait(this_round) else {
            // The verdict may have come since the state was read: the page
            // is then answered, and its outcome waits to be claimed.
            return self.reviews().claim(this_round).map(|outcome| {
                verdict_result(
                    outcome.verdict == Verdict::Approved,
                    feedback_text(&outcome),
                )
            });
        };
        let url = match self.pages().page_url(PageKind::REVIEW, &rid).await {
            Ok(url) => url,
            Err(problem) => {
                self.reviews().detach(&rid);
                return Some(tool_error(problem.to_string()));
            }
        };
        let review = Review {
            rid: &rid,
            url: &url,
            plan,
            round,
            deliver: false,
        };
        Some(self.wait_for_review(context, review, answered).await)
    }

    /// Waits for the verdict on a registered review page.
    async fn wait_for_review(
        &self,
        context: &RequestContext<RoleServer>,
        review: Review<'_>,
        answered: oneshot::Receiver<ReviewOutcome>,
    ) -> CallToolResult {
        let url_mode = crate::deliver::url_mode(context);
        let label = format!("review of plan \"{}\"", review.plan.name.as_str());
        let page = Page {
            context,
            url: review.url,
            label: &label,
            elicitation_id: format!("{}-{}", review.plan.name.as_str(), review.round),
            url_mode,
            deliver: review.deliver,
        };
        let outcome = deliver_and_wait(self.config(), &page, answered).await;
        self.reviews().detach(review.rid);
        let url = review.url;
        match outcome {
            // The callback server recorded the verdict before handing it over.
            Outcome::Answered(outcome) => verdict_result(
                outcome.verdict == Verdict::Approved,
                feedback_text(&outcome),
            ),
            Outcome::StillOpen => crate::reply::structured(json!({
                "approved": false,
                "pending": true,
                "round": review.round,
                "reviewUrl": url,
                "feedback": format!(
                    "Not reviewed yet: the review page of round {} is open at {url}, and the \
                     verdict is recorded whenever the person gives it. Call submit_plan with \
                     the same planName to keep waiting; while the plan is unchanged it waits \
                     on this review instead of starting a new one.",
                    review.round
                ),
            })),
            Outcome::TimedOut => verdict_result(
                false,
                Some(format!(
                    "The review timed out: nobody reviewed the plan within {}. The review page at {url} stays open; submit_plan again to keep waiting on it (while the plan is unchanged), or after revising to ask for a new review.",
                    crate::server::timeout_text(self.config())
                )),
            ),
            Outcome::Dismissed(_) => verdict_result(false, Some(DISMISSED.into())),
            Outcome::ClientCancelled | Outcome::Closed | Outcome::Disconnected => {
                tool_error("submit_plan was cancelled before a verdict")
            }
        }
    }
}

/// A review page a tool waits on.
#[derive(Debug)]
struct Review<'a> {
    rid: &'a str,
    url: &'a str,
    plan: &'a PlanKey,
    round: u32,
    /// False when an earlier call already put the page in front of the person.
    deliver: bool,
}

#[prompt_router(vis = "pub(crate)")]
impl PlanbServer {
    #[prompt(
        name = "plan",
        description = "Plan a task with planb before implementing it: ask before guessing, write a named plan, submit it for review, revise until approved."
    )]
    async fn plan_prompt(
        &self,
        Parameters(args): Parameters<PlanPromptArgs>,
    ) -> Result<GetPromptResult, ErrorData> {
        let template = self
            .config()
            .prompt_template
            .as_deref()
            .unwrap_or(built_in_plan_prompt());
        let uses = template.matches("$ARGUMENTS").count();
        let bytes = template.len() + uses.saturating_mul(args.arguments.len());
        if args.arguments.len() > PROMPT_ARGUMENTS_BYTES_MAX || bytes > PROMPT_BYTES_MAX {
            return Err(ErrorData::invalid_params(
                format!(
                    "ARGUMENTS: {} bytes make the prompt too long (at most {PROMPT_ARGUMENTS_BYTES_MAX} bytes, and {PROMPT_BYTES_MAX} for the whole prompt)",
                    args.arguments.len()
                ),
                None,
            ));
        }
        let text = template.replace("$ARGUMENTS", &args.arguments);
        // A prompt file that could not be read is said where the person
        // looks when the prompt is not theirs.
        let description = match &self.config().prompt_problem {
            Some(problem) => format!("Plan mode with planb (the built-in prompt: {problem})"),
            None => "Plan mode with planb".to_owned(),
        };
        Ok(
            GetPromptResult::new(vec![PromptMessage::new_text(Role::User, text)])
                .with_description(description),
        )
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_plan_prompt_is_the_skill_body() {
        let prompt = super::built_in_plan_prompt();
        assert!(prompt.starts_with("You are in plan mode."), "{prompt}");
        assert!(prompt.contains("$ARGUMENTS"));
        assert!(!prompt.contains("disable-model-invocation"));
    }
}
