//! Asks outlive the server that opened them: any planb process on the data
//! root serves a form whose ask is in the log, and `ask_user {askId}` collects
//! an answer (or waits for one) from any process.
//!
//! A form's link names the port of the process that opened it and the ask's
//! secret sid; the log holds only the sid's SHA-256. When that process is
//! gone, the ask stays pending in the log: a process on the same port (a fixed
//! `PLANB_PORT`) recognises the old link by the hash, and `ask_user {askId}` in
//! any process serves the form again on its own port under a new sid, and
//! waits. Whoever records the answer, a waiting tool sees it: it watches the
//! log as well as its own form.

use std::sync::Arc;

use planb_core::{AskId, AskSpec, SessionId};
use rmcp::RoleServer;
use rmcp::model::JsonObject;
use rmcp::service::RequestContext;
use serde_json::Value;
use tokio::sync::oneshot;

use crate::args::ArgErrors;
use crate::ask::Asked;
use crate::server::{PlanbServer, store_error, tool_error};
use planb_forms::{FormInfo, PageKind};

impl PlanbServer {
    /// With a fixed `PLANB_PORT`, starts the callback server at once when the
    /// log holds forms that would still record an answer, so their links
    /// work again after a restart (the forms are found by sid on the first
    /// request).
    pub async fn serve_answerable_forms(&self) {
        if self.config().env.port == 0 {
            return;
        }
        let pending = self.asks().answerable_forms().await;
        if pending == 0 {
            return;
        }
        match self.pages().address().await {
            Ok(address) => tracing::info!(
                "{pending} form(s) in the log that can still be answered are served again at http://{address}"
            ),
            Err(error) => {
                tracing::warn!(
                    "{pending} form(s) in the log that can still be answered cannot be served: {error}"
                )
            }
        }
    }

    /// `ask_user {askId}`: the ask's answer if the log holds one; otherwise
    /// its form is served by this process and the call waits, as ask_user does.
    pub(crate) async fn collect_ask(
        &self,
        arguments: &JsonObject,
        context: &RequestContext<RoleServer>,
    ) -> Asked {
        match collect_arguments(arguments) {
            Ok((ask_id, session)) => self.collect(ask_id, session, context).await,
            Err(problem) => ended(problem.to_string()),
        }
    }

    /// The answer to `ask_id` (an ask of `session`, when given) if the log
    /// holds one; otherwise its form is served by this process and the call
    /// waits.
    pub(crate) async fn collect(
        &self,
        ask_id: AskId,
        session: Option<SessionId>,
        context: &RequestContext<RoleServer>,
    ) -> Asked {
        let found = match self.asks().find(ask_id).await {
            Ok(Some(found)) => found,
            Ok(None) => return ended(format!("askId: unknown ask {ask_id}")),
            Err(error) => return store_error(error).into(),
        };
        if session.is_some_and(|s| s != found.session) {
            return ended(format!(
                "askId: ask {ask_id} belongs to session {}, not the sessionId given",
                found.session
            ));
        }
        if let Some(answer) = found.answer {
            return Asked::Answered(ask_id, answer);
        }
        if !found.has_form {
            return ended(format!(
                "askId: ask {ask_id} has no form to serve (it was imported); call ask_user with the questions again"
            ));
        }
        let url_mode = crate::deliver::url_mode(context);
        if let Some(waited) = self.wait_on_shown(context, ask_id, url_mode).await {
            return waited;
        }
        self.serve_again(context, ask_id, Arc::new(found.spec), &found.url, url_mode)
            .await
    }

    /// Waits on the form of `ask_id` this process already shows the person
    /// (an earlier call returned "still open", or timed out) rather than
    /// opening it again; `None` when it shows none.
    async fn wait_on_shown(
        &self,
        context: &RequestContext<RoleServer>,
        ask_id: AskId,
        url_mode: bool,
    ) -> Option<Asked> {
        let (sid, info, answered) = self.forms().rewait(|info| info.ask == ask_id)?;
        let url = match self.pages().page_url(PageKind::FORM, &sid).await {
            Ok(url) => url,
            Err(problem) => {
                self.forms().detach(&sid);
                return Some(ended(problem.to_string()));
            }
        };
        Some(
            crate::ask::wait(crate::ask::Wait {
                server: self,
                context,
                ask: ask_id,
                spec: &info.spec,
                url: &url,
                url_mode,
                deliver: false,
                sid: Some(&sid),
                answered,
            })
            .await,
        )
    }

    /// Waits for the answer to a pending ask this process does not show:
    /// through the log when its link reaches this process too (a fixed
    /// port), else on its form served here under a new sid.
    async fn serve_again(
        &self,
        context: &RequestContext<RoleServer>,
        ask_id: AskId,
        spec: Arc<AskSpec>,
        form_address: &str,
        url_mode: bool,
    ) -> Asked {
        // On a fixed port the link the person was given reaches this process
        // too (any planb-mcp on the port serves it, found by the hash of its
        // sid): wait for the answer without opening another page.
        let port = self.config().env.port;
        if port != 0
            && form_address == format!("http://127.0.0.1:{port}/ask")
            && self.pages().address().await.is_ok()
        {
            // Nobody sends on this channel: the answer comes through the log.
            let (_unused, answered) = oneshot::channel();
            return crate::ask::wait(crate::ask::Wait {
                server: self,
                context,
                ask: ask_id,
                spec: &spec,
                url: form_address,
                url_mode,
                deliver: false,
                sid: None,
                answered,
            })
            .await;
        }
        // The log holds only the hash of the old sid: this process serves
        // the form under a new one.
        let page = match self.pages().new_page(PageKind::FORM).await {
            Ok(page) => page,
            Err(problem) => return ended(problem.to_string()),
        };
        let (url, sid) = (page.url(), page.id);
        let (sender, answered) = oneshot::channel();
        let info = FormInfo {
            ask: ask_id,
            spec: Arc::clone(&spec),
        };
        if let Err(error) = self.forms().register(sid.clone(), info, sender) {
            return ended(error.to_string());
        }
        crate::ask::wait(crate::ask::Wait {
            server: self,
            context,
            ask: ask_id,
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

/// A call that ends with `message`, an error.
fn ended(message: impl Into<String>) -> Asked {
    tool_error(message).into()
}

/// `ask_user {askId}`'s arguments: the ask and, when given, the session it
/// must belong to; what is wrong otherwise.
fn collect_arguments(arguments: &JsonObject) -> Result<(AskId, Option<SessionId>), ArgErrors> {
    let mut ask_id = None;
    let mut session = None;
    for (key, value) in arguments {
        match (key.as_str(), value) {
            ("askId", Value::String(text)) => match AskId::parse(text.trim()) {
                Ok(id) => ask_id = Some(id),
                Err(error) => return Err(ArgErrors::one(format!("askId: {error}"))),
            },
            ("askId", _) => return Err(ArgErrors::one("askId: must be a string (the ask's id)")),
            ("sessionId", Value::String(text)) => match SessionId::parse(text.trim()) {
                Ok(id) => session = Some(id),
                Err(error) => return Err(ArgErrors::one(format!("sessionId: {error}"))),
            },
            ("sessionId", Value::Null) => {}
            ("sessionId", _) => return Err(ArgErrors::one("sessionId: must be a string")),
            (other, _) => {
                return Err(ArgErrors::one(format!(
                    "{other}: not taken with askId; pass askId (and optionally sessionId) to collect an ask, or title and questions to ask anew"
                )));
            }
        }
    }
    match ask_id {
        Some(ask_id) => Ok((ask_id, session)),
        None => Err(ArgErrors::one("askId: required")),
    }
}
