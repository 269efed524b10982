//! MCP sampling: a `model` step's prompt sent to the model of the client
//! planb-mcp serves (`sampling/createMessage`), for clients that declare
//! the sampling capability (VS Code does; Claude Code does not). The client
//! chooses the model, and may show the person each request first.
//!
//! A run on this backend executes inside the planb-mcp process whose client
//! answers, so it lasts as long as that session: if the process exits, the
//! run's lock is freed and the run is reported `worker_error`, recoverable.
//!
//! The model profile becomes the request's model preferences: `baseline`
//! favours cost, `premium` capability, `frontier` capability above all.

#![allow(
    deprecated,
    reason = "rmcp marks sampling deprecated after the 2026-07-28 protocol; the 2025-06-18 and \
              2025-11-25 sessions clients open still carry it"
)]

use std::time::{Duration, Instant};

use rmcp::model::{
    CancelledNotification, CancelledNotificationParam, ClientResult, CreateMessageRequest,
    CreateMessageRequestParams, CreateMessageResult, ModelPreferences, RequestId, SamplingMessage,
    SamplingMessageContentBlock, ServerRequest,
};
use rmcp::service::{PeerRequestOptions, ServiceError};
use rmcp::{Peer, RoleServer};

use super::{ANSWER_BYTES_MAX, Answer, BackendError};

/// The most tokens a step's answer may take, as asked of the client.
pub const MAX_TOKENS: u32 = 8_192;

/// The client of one MCP session, as a model.
#[derive(Clone)]
pub struct Sampler {
    peer: Peer<RoleServer>,
    profile: Option<String>,
}

impl std::fmt::Debug for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler")
            .field("profile", &self.profile)
            .finish_non_exhaustive()
    }
}

impl Sampler {
    /// The client behind `peer` as a model, if it declared sampling.
    pub fn of(peer: &Peer<RoleServer>, profile: Option<&str>) -> Option<Sampler> {
        let declared = peer
            .peer_info()
            .is_some_and(|info| info.capabilities.sampling.is_some());
        declared.then(|| Sampler {
            peer: peer.clone(),
            profile: profile.map(str::to_owned),
        })
    }

    fn preferences(&self) -> Option<ModelPreferences> {
        let (cost, intelligence) = match self.profile.as_deref()? {
            "baseline" => (0.8, 0.3),
            "premium" => (0.3, 0.8),
            "frontier" => (0.0, 1.0),
            _ => return None,
        };
        let mut preferences = ModelPreferences::new().with_cost_priority(cost);
        preferences.intelligence_priority = Some(intelligence);
        Some(preferences)
    }

    /// Sends `sampling/createMessage` and waits for its answer within
    /// `timeout`. The client is told when planb stops waiting: on the
    /// timeout (`notifications/cancelled`, sent by rmcp) and when the step
    /// is dropped unanswered (a stopped run), so it can stop its model and
    /// take the request off the person's screen.
    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        timeout: Duration,
    ) -> Result<CreateMessageResult, BackendError> {
        params.validate().map_err(BackendError::Sampling)?;
        let request = ServerRequest::CreateMessageRequest(CreateMessageRequest::new(params));
        let handle = self
            .peer
            .send_cancellable_request(request, PeerRequestOptions::with_timeout(timeout))
            .await
            .map_err(|e| BackendError::Sampling(e.to_string()))?;
        let mut unanswered = CancelOnDrop {
            peer: self.peer.clone(),
            id: Some(handle.id.clone()),
        };
        let answered = handle.await_response().await;
        // Answered, or cancelled by rmcp at its timeout.
        unanswered.id = None;
        match answered {
            Ok(ClientResult::CreateMessageResult(result)) => Ok(*result),
            Ok(_) => Err(BackendError::Sampling(
                "the client answered sampling/createMessage with another kind of result".into(),
            )),
            Err(ServiceError::Timeout { .. }) => Err(BackendError::Timeout(timeout)),
            Err(error) => Err(BackendError::Sampling(error.to_string())),
        }
    }

    /// Asks the client's model `prompt`, within `timeout`.
    pub async fn ask(&self, prompt: &str, timeout: Duration) -> Result<Answer, BackendError> {
        let started = Instant::now();
        let mut params =
            CreateMessageRequestParams::new(vec![SamplingMessage::user_text(prompt)], MAX_TOKENS);
        if let Some(preferences) = self.preferences() {
            params = params.with_model_preferences(preferences);
        }
        let result = self.create_message(params, timeout).await?;
        let mut text = String::new();
        for block in result.message.content.into_vec() {
            if let SamplingMessageContentBlock::Text(part) = block {
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(&part.text);
                if text.len() > ANSWER_BYTES_MAX {
                    return Err(BackendError::TooLarge);
                }
            }
        }
        if text.trim().is_empty() {
            return Err(BackendError::Sampling(format!(
                "the client's model ({}) answered no text",
                result.model
            )));
        }
        // Stopped at the token limit: not the whole answer.
        if result.stop_reason.as_deref() == Some("maxTokens") {
            return Err(BackendError::Sampling(format!(
                "the client's model ({}) was cut off at {MAX_TOKENS} tokens (stopReason maxTokens)",
                result.model
            )));
        }
        Ok(Answer {
            text,
            duration: started.elapsed(),
            tokens_in: None,
            tokens_out: None,
        })
    }
}

/// Tells the client a sampling request is no longer waited for, should the
/// step waiting on it be dropped before an answer came (`id` still set).
struct CancelOnDrop {
    peer: Peer<RoleServer>,
    id: Option<RequestId>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let peer = self.peer.clone();
        runtime.spawn(async move {
            let notification = CancelledNotification::new(CancelledNotificationParam::new(
                Some(id),
                Some("the step waiting for this answer was stopped".into()),
            ));
            let _ = peer.send_notification(notification.into()).await;
        });
    }
}
