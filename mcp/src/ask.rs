//! Waiting for a person to answer a form.
//!
//! The ask is already in the log as pending and its form is registered. This
//! delivers the form (URL elicitation, or the default browser) and waits for the
//! first of: the answer, the timeout, a decline or cancel of the elicitation, or
//! the client cancelling the request. Whatever happens is recorded; an answer
//! that arrives afterwards is still recorded as a late answer by the callback
//! server. While waiting, progress notifications keep clients that honour them
//! from timing out and tell a person on a headless machine where the form is.

use std::future::Future;
use std::pin::Pin;

use planb_core::{Answers, AskId, AskSpec, Command};
use rmcp::RoleServer;
use rmcp::model::{CallToolResult, ContentBlock, ElicitationAction};
use rmcp::service::{ElicitationError, RequestContext};
use tokio::sync::oneshot;

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

type Elicitation =
    Pin<Box<dyn Future<Output = Result<ElicitationAction, ElicitationError>> + Send>>;

/// The tool result for answers: exactly the answers JSON.
fn answers_result(answers: &Answers) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(answers.to_json().to_string())])
}

/// Delivers the form and waits; returns the tool result.
pub async fn wait(mut wait: Wait<'_>) -> CallToolResult {
    let result = wait_inner(&mut wait).await;
    if wait.url_mode {
        PlanbServer::notify_elicitation_complete(wait.context, &wait.ask.to_string()).await;
    }
    result
}

async fn wait_inner(wait: &mut Wait<'_>) -> CallToolResult {
    let config = wait.server.config().clone();
    let mut elicitation: Option<Elicitation> = None;
    if wait.url_mode {
        match url::Url::parse(wait.url) {
            Ok(url) => {
                let peer = wait.context.peer.clone();
                let message = format!(
                    "Open this form to answer \"{}\" (planb, on this machine)",
                    wait.spec.title
                );
                let id = wait.ask.to_string();
                elicitation = Some(Box::pin(
                    async move { peer.elicit_url(message, url, id).await },
                ));
                tracing::info!("form sent by URL elicitation: {}", wait.url);
            }
            Err(error) => {
                tracing::warn!(
                    "form URL {} is not a URL ({error}); opening directly",
                    wait.url
                );
                crate::browser::open(wait.url, config.no_open);
            }
        }
    } else {
        crate::browser::open(wait.url, config.no_open);
    }

    let deadline = tokio::time::sleep(config.answer_timeout);
    tokio::pin!(deadline);
    let token = wait.context.meta.get_progress_token();
    let mut ticker = tokio::time::interval(config.progress_interval);
    ticker.tick().await;
    let mut progress = 0.0;
    loop {
        tokio::select! {
            answers = &mut wait.answered => {
                return match answers {
                    Ok(answers) => answers_result(&answers),
                    Err(_) => CallToolResult::error(vec![ContentBlock::text(
                        "the form closed without an answer; call ask_user again",
                    )]),
                };
            }
            () = &mut deadline => {
                let command = Command::TimeOut { ask: wait.ask };
                if let Err(Some(answers)) = wait.server.close_ask(wait.ask, command).await {
                    return answers_result(&answers);
                }
                return CallToolResult::success(vec![ContentBlock::text(format!(
                    "The question \"{}\" timed out: the person did not answer within {}. \
                     The form at {} stays open and an answer submitted later is still recorded. \
                     If you still need the answer, call ask_user again; otherwise carry on without it.",
                    wait.spec.title,
                    timeout_text(&config),
                    wait.url
                ))]);
            }
            outcome = async { elicitation.as_mut().expect("guarded by the branch condition").await }, if elicitation.is_some() => {
                elicitation = None;
                match outcome {
                    Ok(ElicitationAction::Accept) => {
                        // Accept only means the browser opened: keep waiting.
                    }
                    Ok(action) => {
                        let command = PlanbServer::decline_command(wait.ask, action);
                        if let Err(Some(answers)) = wait.server.close_ask(wait.ask, command).await {
                            return answers_result(&answers);
                        }
                        return CallToolResult::success(vec![ContentBlock::text("User cancelled.")]);
                    }
                    Err(error) => {
                        // Some clients advertise URL elicitation and then fail it:
                        // fall back to opening the browser ourselves.
                        tracing::warn!("URL elicitation failed ({error}); opening the form directly");
                        crate::browser::open(wait.url, config.no_open);
                    }
                }
            }
            _ = ticker.tick(), if token.is_some() => {
                progress += 1.0;
                if let Some(token) = &token {
                    let message = format!(
                        "Waiting for the person to answer \"{}\" at {}",
                        wait.spec.title, wait.url
                    );
                    PlanbServer::notify_progress(wait.context, token, progress, message).await;
                }
            }
            () = wait.context.ct.cancelled() => {
                let command = Command::Fail {
                    ask: wait.ask,
                    detail: "the client cancelled the ask_user request".into(),
                };
                if let Err(Some(answers)) = wait.server.close_ask(wait.ask, command).await {
                    return answers_result(&answers);
                }
                return CallToolResult::error(vec![ContentBlock::text("ask_user was cancelled by the client")]);
            }
        }
    }
}
