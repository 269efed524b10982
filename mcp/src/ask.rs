//! Waiting for a person to answer a question form, and recording how it ended.
//!
//! The ask is already in the log as pending and its form is registered. An
//! answer arriving after the wait ended is recorded as a late answer by the
//! callback server.

use planb_core::{Answers, AskId, AskSpec, Command};
use rmcp::RoleServer;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::service::RequestContext;
use tokio::sync::oneshot;

use crate::deliver::{Outcome, Page, deliver_and_wait};
use crate::server::{PlanbServer, timeout_text};

/// Everything one wait needs.
#[derive(Debug)]
pub struct Wait<'a> {
    pub server: &'a PlanbServer,
    pub context: &'a RequestContext<RoleServer>,
    pub ask: AskId,
    pub spec: &'a AskSpec,
    pub url: &'a str,
    pub url_mode: bool,
    pub answered: oneshot::Receiver<Answers>,
}

/// The tool result for answers: exactly the answers JSON.
pub(crate) fn answers_result(answers: &Answers) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(answers.to_json().to_string())])
}

/// Delivers the form, waits, records the outcome; returns the tool result.
pub async fn wait(wait: Wait<'_>) -> CallToolResult {
    let config = wait.server.config().clone();
    let label = format!("form \"{}\"", wait.spec.title);
    let page = Page {
        context: wait.context,
        url: wait.url,
        label: &label,
        elicitation_id: wait.ask.to_string(),
        url_mode: wait.url_mode,
    };
    // Another process may record the answer (it served the same form).
    let outcome = tokio::select! {
        outcome = deliver_and_wait(&config, &page, wait.answered) => outcome,
        answers = crate::collect::answered_in_log(wait.server.store(), wait.ask) => {
            // The delivery was dropped before it could tell the client the
            // elicitation is over.
            if page.url_mode {
                PlanbServer::notify_elicitation_complete(page.context, &page.elicitation_id).await;
            }
            Outcome::Answered(answers)
        }
    };
    let (command, result) = match outcome {
        Outcome::Answered(answers) => return answers_result(&answers),
        Outcome::TimedOut => (
            Command::TimeOut { ask: wait.ask },
            CallToolResult::success(vec![ContentBlock::text(format!(
                "The question \"{}\" timed out: the person did not answer within {}. \
                 The form at {} stays open and an answer submitted later is still recorded. \
                 If you still need the answer, call ask_user with {{\"askId\": \"{}\"}} to collect it or keep waiting \
                 (or call ask_user again with new questions); otherwise carry on without it.",
                wait.spec.title,
                timeout_text(&config),
                wait.url,
                wait.ask
            ))]),
        ),
        Outcome::Dismissed(action) => (
            PlanbServer::decline_command(wait.ask, action),
            CallToolResult::success(vec![ContentBlock::text("User cancelled.")]),
        ),
        Outcome::ClientCancelled => (
            Command::Fail {
                ask: wait.ask,
                detail: "the client cancelled the ask_user request".into(),
            },
            CallToolResult::error(vec![ContentBlock::text(
                "ask_user was cancelled by the client",
            )]),
        ),
        Outcome::Disconnected => (
            Command::Fail {
                ask: wait.ask,
                detail: "the MCP connection closed before the person answered (the agent or its window exited)".into(),
            },
            CallToolResult::error(vec![ContentBlock::text(
                "the MCP connection closed before the person answered",
            )]),
        ),
        Outcome::Closed => (
            Command::Fail {
                ask: wait.ask,
                detail: "the form closed without an answer".into(),
            },
            CallToolResult::error(vec![ContentBlock::text(
                "the form closed without an answer; call ask_user again",
            )]),
        ),
    };
    // The person may have submitted at the same moment: then the answer wins.
    match wait.server.close_ask(wait.ask, command).await {
        Err(Some(answers)) => answers_result(&answers),
        _ => result,
    }
}
