//! Waiting for a person to answer a question form, and recording how it ended.
//!
//! The ask is already in the log as pending and its form is registered. An
//! answer arriving after the wait ended is recorded as a late answer by the
//! callback server.

use std::sync::Arc;

use planb_core::{Answers, AskId, AskSpec, Delivery, SessionId};
use rmcp::RoleServer;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::service::RequestContext;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use planb_app::asks::{Ending, NewAsk};

use crate::config::Config;
use crate::deliver::{Outcome, Page, deliver_and_wait, url_mode};
use crate::server::{PlanbServer, store_error, timeout_text, tool_error};
use planb_forms::PageKind;

/// Everything one wait needs.
#[derive(Debug)]
pub struct Wait<'a> {
    pub server: &'a PlanbServer,
    pub context: &'a RequestContext<RoleServer>,
    pub ask: AskId,
    pub spec: &'a AskSpec,
    pub url: &'a str,
    pub url_mode: bool,
    /// False when the form is already in front of the person (an earlier
    /// call delivered it) and this call only waits on.
    pub deliver: bool,
    /// The form's sid in this process's registry, which the wait detaches
    /// from when it ends (the page stays known for late answers); `None`
    /// when it waits on a link another process gave out.
    pub sid: Option<&'a str>,
    pub answered: oneshot::Receiver<Answers>,
}

/// How a call that put a form in front of the person ended.
#[derive(Debug)]
pub(crate) enum Asked {
    /// The person's answers.
    Answered(AskId, Answers),
    /// Not answered yet: the form stays open at `url` (its link when
    /// `is_link`, else only its address: this process waits on a link
    /// another process gave out, whose sid it never saw).
    Waiting {
        ask: AskId,
        title: String,
        url: String,
        is_link: bool,
    },
    /// Ended without answers (timed out, dismissed, failed, refused): the
    /// tool's result says how.
    Ended(CallToolResult),
}

impl Asked {
    /// The `ask_user` result.
    pub fn into_result(self) -> CallToolResult {
        match self {
            Asked::Answered(ask, answers) => answers_result(ask, &answers),
            Asked::Waiting {
                ask,
                title,
                url,
                is_link,
            } => still_open_result(ask, &title, &url, is_link),
            Asked::Ended(result) => result,
        }
    }
}

impl From<CallToolResult> for Asked {
    fn from(result: CallToolResult) -> Asked {
        Asked::Ended(result)
    }
}

/// A successful `ask_user` result: `text` for the model (the form the interface
/// specifies) and the same outcome as `structuredContent` (see
/// `args::AskUserOutput`).
fn ask_result(text: String, structured: Value) -> CallToolResult {
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(structured);
    result
}

/// The tool result for answers: exactly the answers JSON as text.
fn answers_result(ask: AskId, answers: &Answers) -> CallToolResult {
    let answers = answers.to_json();
    ask_result(
        answers.to_string(),
        json!({"status": "answered", "askId": ask.to_string(), "answers": answers}),
    )
}

/// The person has not answered yet and the request could time out in its
/// client: say where the form is and how to keep waiting.
fn still_open_result(ask: AskId, title: &str, url: &str, is_link: bool) -> CallToolResult {
    let (whereabouts, structured) = if is_link {
        (
            format!("It stays open at {url}"),
            json!({"status": "waiting", "askId": ask.to_string(), "url": url}),
        )
    } else {
        (
            format!("It stays open at the link given when it was asked (on {url})"),
            json!({"status": "waiting", "askId": ask.to_string()}),
        )
    };
    ask_result(
        format!(
            "The person has not answered the form \"{title}\" yet. {whereabouts}, and whatever \
             they submit is recorded, whenever they do. To keep waiting, call ask_user with \
             {{\"askId\": \"{ask}\"}}: it returns the answers as soon as they exist (at once if \
             they already do)."
        ),
        structured,
    )
}

/// Delivers the form, waits, records the outcome.
pub async fn wait(wait: Wait<'_>) -> Asked {
    let (server, sid) = (wait.server, wait.sid);
    let result = wait_detached(wait).await;
    if let Some(sid) = sid {
        server.forms().detach(sid);
    }
    result
}

async fn wait_detached(wait: Wait<'_>) -> Asked {
    let config = wait.server.config().clone();
    let label = format!("form \"{}\"", wait.spec.title);
    let page = Page {
        context: wait.context,
        url: wait.url,
        label: &label,
        elicitation_id: wait.ask.to_string(),
        url_mode: wait.url_mode,
        deliver: wait.deliver,
    };
    // Another process may record the answer (it served the same form).
    let outcome = tokio::select! {
        outcome = deliver_and_wait(&config, &page, wait.answered) => outcome,
        answers = wait.server.app().answered(wait.ask) => {
            // The delivery was dropped before it could tell the client the
            // elicitation is over.
            if page.url_mode {
                PlanbServer::notify_elicitation_complete(page.context, &page.elicitation_id).await;
            }
            Outcome::Answered(answers)
        }
    };
    let closed = closing(wait.ask, wait.spec, wait.url, wait.sid, &config, outcome);
    let (ending, result) = match closed {
        Ok(closing) => closing,
        Err(asked) => return *asked,
    };
    // The person may have submitted at the same moment: then the answer wins.
    match wait.server.asks().end(wait.ask, ending).await {
        Err(Some(answers)) => Asked::Answered(wait.ask, answers),
        _ => Asked::Ended(result),
    }
}

/// How a wait that ended with `outcome` closes the ask: how it ended and
/// the tool's result; how the call ended alone when nothing is to be
/// recorded (the answer came, or the form stays open).
fn closing(
    ask: AskId,
    spec: &AskSpec,
    url: &str,
    sid: Option<&str>,
    config: &Config,
    outcome: Outcome<Answers>,
) -> Result<(Ending, CallToolResult), Box<Asked>> {
    Ok(match outcome {
        Outcome::Answered(answers) => return Err(Box::new(Asked::Answered(ask, answers))),
        // Nothing ended: the ask stays pending and its form open.
        Outcome::StillOpen => {
            return Err(Box::new(Asked::Waiting {
                ask,
                title: spec.title.clone(),
                url: url.to_owned(),
                is_link: sid.is_some(),
            }));
        }
        Outcome::TimedOut => (
            Ending::TimedOut,
            ask_result(format!(
                "The question \"{}\" timed out: the person did not answer within {}. \
                 The form at {} stays open and an answer submitted later is still recorded. \
                 If you still need the answer, call ask_user with {{\"askId\": \"{}\"}} to collect it or keep waiting \
                 (or call ask_user again with new questions); otherwise carry on without it.",
                spec.title,
                timeout_text(config),
                url,
                ask
            ), json!({"status": "timed_out", "askId": ask.to_string(), "url": url})),
        ),
        Outcome::Dismissed(action) => (
            PlanbServer::declined(action),
            cancelled_result(ask),
        ),
        Outcome::ClientCancelled => (
            Ending::Failed("the client cancelled the ask_user request".into()),
            CallToolResult::error(vec![ContentBlock::text(
                "ask_user was cancelled by the client",
            )]),
        ),
        Outcome::Disconnected => (
            Ending::Failed("the MCP connection closed before the person answered (the agent or its window exited)".into()),
            CallToolResult::error(vec![ContentBlock::text(
                "the MCP connection closed before the person answered",
            )]),
        ),
        Outcome::Closed => (
            Ending::Failed("the form closed without an answer".into()),
            CallToolResult::error(vec![ContentBlock::text(
                "the form closed without an answer; call ask_user again",
            )]),
        ),
    })
}

/// `User cancelled.`, the text given for a dismissed form.
pub(crate) fn cancelled_result(ask: AskId) -> CallToolResult {
    ask_result(
        "User cancelled.".into(),
        json!({"status": "cancelled", "askId": ask.to_string()}),
    )
}

impl PlanbServer {
    /// Opens a form for `spec` in `session`, records it and waits for the
    /// person as `ask_user` does.
    pub(crate) async fn open_ask(
        &self,
        session: SessionId,
        spec: AskSpec,
        context: &RequestContext<RoleServer>,
    ) -> Asked {
        let page = match self.pages().new_page(PageKind::FORM).await {
            Ok(page) => page,
            Err(problem) => return tool_error(problem.to_string()).into(),
        };
        let url = page.url();
        let url_mode = url_mode(context);
        let delivery = if url_mode {
            Delivery::UrlElicitation
        } else if self.config().env.no_open {
            Delivery::BrowserNotOpened
        } else {
            Delivery::BrowserOpened
        };
        let spec = Arc::new(spec);
        let new = NewAsk {
            session,
            spec: (*spec).clone(),
            delivery,
            url: page.address,
            sid: page.id.clone(),
        };
        let ask = match self.asks().open(new).await {
            Ok(ask) => ask,
            Err(error) => return store_error(error).into(),
        };
        let (sender, answered) = oneshot::channel();
        let info = planb_forms::FormInfo {
            ask,
            spec: Arc::clone(&spec),
        };
        let sid = page.id;
        if let Err(error) = self.forms().register(sid.clone(), info, sender) {
            let _ = self
                .asks()
                .end(ask, Ending::Failed(error.to_string()))
                .await;
            return tool_error(error.to_string()).into();
        }
        wait(Wait {
            server: self,
            context,
            ask,
            spec: &spec,
            url: &url,
            url_mode,
            deliver: true,
            sid: Some(&sid),
            answered,
        })
        .await
    }
}
