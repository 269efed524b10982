//! Getting a page (question form or plan review) in front of the person, and
//! waiting for what comes back.
//!
//! The page is delivered by URL elicitation when the client advertises it, else
//! by opening the default browser (or, with `ASK_NO_OPEN`, by logging the URL).
//! The wait ends at the first of: the answer, the timeout, a decline or cancel
//! of the elicitation, or the client cancelling the request. While waiting,
//! progress notifications keep clients that honour them from timing out and
//! tell a person on a headless machine where the page is. A request without a
//! progress token gets nothing that keeps its client waiting, and clients
//! give up on a request after a minute or two (the MCP Inspector after 60 s,
//! mcp-cli after 120 s): such a wait ends "still open" after
//! `Config::hand_back`, the page stays up, and the caller tells the agent how
//! to wait on. Recording what happened is the caller's job.

use std::future::Future;
use std::pin::Pin;

use rmcp::RoleServer;
use rmcp::model::ElicitationAction;
use rmcp::service::{ElicitationError, ElicitationMode, RequestContext};
use tokio::sync::oneshot;

use crate::config::Config;
use crate::server::PlanbServer;

/// Whether the client takes a page by URL elicitation.
pub fn url_mode(context: &RequestContext<RoleServer>) -> bool {
    context
        .peer
        .supported_elicitation_modes()
        .contains(&ElicitationMode::Url)
}

/// How a wait ended.
#[derive(Debug)]
pub enum Outcome<T> {
    /// The person answered in time.
    Answered(T),
    /// The timeout passed first.
    TimedOut,
    /// The person declined or cancelled the URL elicitation.
    Dismissed(ElicitationAction),
    /// The client cancelled the tool call.
    ClientCancelled,
    /// The page was dropped without an answer (the server is shutting down).
    Closed,
    /// The client's connection closed (the agent or its window exited).
    Disconnected,
    /// The request carries no progress token and waited `Config::hand_back`:
    /// the page stays open, and the caller returns before the client's
    /// request timeout would fail the call.
    StillOpen,
}

/// One page to deliver.
#[derive(Debug)]
pub struct Page<'a> {
    /// The tool call's context (peer, progress token, cancellation).
    pub context: &'a RequestContext<RoleServer>,
    /// The page's loopback URL.
    pub url: &'a str,
    /// What the elicitation and progress messages call it, e.g. `"Kickoff" form`.
    pub label: &'a str,
    /// The elicitation id (the ask or round it belongs to).
    pub elicitation_id: String,
    /// Whether to use URL elicitation.
    pub url_mode: bool,
    /// Whether to put the page in front of the person; false when an
    /// earlier call already did and this one only waits on.
    pub deliver: bool,
}

type Elicitation =
    Pin<Box<dyn Future<Output = Result<ElicitationAction, ElicitationError>> + Send>>;

/// Delivers `page` and waits for `answer`, a timeout or a dismissal. Sends
/// `notifications/elicitation/complete` at the end in URL mode.
pub async fn deliver_and_wait<T>(
    config: &Config,
    page: &Page<'_>,
    answer: oneshot::Receiver<T>,
) -> Outcome<T> {
    let outcome = wait(config, page, answer).await;
    if page.url_mode && !matches!(outcome, Outcome::StillOpen) {
        PlanbServer::notify_elicitation_complete(page.context, &page.elicitation_id).await;
    }
    outcome
}

async fn wait<T>(config: &Config, page: &Page<'_>, mut answer: oneshot::Receiver<T>) -> Outcome<T> {
    let mut elicitation: Option<Elicitation> = None;
    match url::Url::parse(page.url) {
        _ if !page.deliver => {}
        Ok(url) if page.url_mode => {
            let peer = page.context.peer.clone();
            let message = format!("Open the {} (planb, on this machine)", page.label);
            let id = page.elicitation_id.clone();
            elicitation = Some(Box::pin(
                async move { peer.elicit_url(message, url, id).await },
            ));
            tracing::info!("sent by URL elicitation: {}", page.url);
        }
        _ => {
            planb_forms::browser::open(page.url, config.env.no_open);
        }
    }
    let deadline = tokio::time::sleep(config.env.answer_timeout);
    tokio::pin!(deadline);
    let token = page.context.meta.get_progress_token();
    let hand_back = tokio::time::sleep(config.env.hand_back);
    tokio::pin!(hand_back);
    let mut ticker = tokio::time::interval(config.env.progress_interval);
    ticker.tick().await;
    let mut progress = 0.0;
    loop {
        tokio::select! {
            answered = &mut answer => {
                return match answered {
                    Ok(answered) => Outcome::Answered(answered),
                    Err(_) => Outcome::Closed,
                };
            }
            () = &mut deadline => return Outcome::TimedOut,
            () = &mut hand_back, if token.is_none() => return Outcome::StillOpen,
            result = async { elicitation.as_mut().expect("guarded by the branch condition").await }, if elicitation.is_some() => {
                elicitation = None;
                match result {
                    // Accept only means the browser opened: keep waiting.
                    Ok(ElicitationAction::Accept) => {}
                    Ok(action) => return Outcome::Dismissed(action),
                    Err(error) => {
                        // Some clients advertise URL elicitation and then fail it:
                        // fall back to opening the browser ourselves.
                        tracing::warn!("URL elicitation failed ({error}); opening the page directly");
                        planb_forms::browser::open(page.url, config.env.no_open);
                    }
                }
            }
            _ = ticker.tick(), if token.is_some() => {
                progress += 1.0;
                if let Some(token) = &token {
                    let message = format!("Waiting for the person to answer the {} at {}", page.label, page.url);
                    PlanbServer::notify_progress(page.context, token, progress, message).await;
                }
            }
            () = page.context.ct.cancelled() => return Outcome::ClientCancelled,
            () = config.disconnect.closed() => return Outcome::Disconnected,
        }
    }
}
