//! Event schema version 1. FROZEN once released.
//!
//! These types are the wire format: their rkyv archive is what the log
//! stores under schema version 1, and `fixtures/golden/events-v1.bin` pins it
//! byte for byte. Do not add, remove, reorder or retype a field or variant
//! here, nor in any type they contain (`AskSpec`, `Answers`, `PlanEdit`, the
//! ids, `Timestamp`); the golden test fails if you do.
//!
//! To change the schema: copy these types (and the contained types that
//! change) into a `v2` module, point the public re-exports in `event.rs` at
//! `v2`, keep this module as the decoder of old payloads, and add an upcast
//! `From<v1::Event> for v2::Event` used by `decode` for version 1.

use crate::answer::Answers;
use crate::id::{AskId, EventId, PlanName, SessionId};
use crate::plan_edit::PlanEdit;
use crate::question::AskSpec;
use crate::time::Timestamp;

/// One fact recorded in the log: what happened, when, under which id.
#[derive(Clone, PartialEq, Debug, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct Event {
    /// Unique id of this event (a UUID v7 minted by the writer).
    pub id: EventId,
    /// When the writer recorded it.
    pub at: Timestamp,
    /// What happened.
    pub body: EventBody,
}

/// What happened. Each variant is a fact, named in the past tense.
#[derive(Clone, PartialEq, Debug, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub enum EventBody {
    /// `init_planb_session` created a session.
    SessionCreated {
        /// The new session.
        session: SessionId,
        /// Optional short title.
        title: Option<String>,
        /// Optional one-line description of what is being planned.
        intent: Option<String>,
        /// Optional project directory the session is about.
        project_path: Option<String>,
    },
    /// `ask_user` opened a form.
    AskOpened {
        /// The session the ask belongs to.
        session: SessionId,
        /// The new ask.
        ask: AskId,
        /// The validated questions.
        spec: AskSpec,
        /// How the form reached the person.
        delivery: Delivery,
        /// The form's URL (loopback; carries the one-time sid).
        url: String,
    },
    /// The form autosaved a partial answer.
    AskDraftSaved {
        /// The ask being answered.
        ask: AskId,
        /// The validated draft.
        answers: Answers,
    },
    /// The person submitted the form while the tool was waiting.
    AskAnswered {
        /// The ask answered.
        ask: AskId,
        /// The validated answers returned to the agent.
        answers: Answers,
    },
    /// The tool stopped waiting (`ASK_ANSWER_TIMEOUT_MS` elapsed).
    AskTimedOut {
        /// The ask that timed out.
        ask: AskId,
    },
    /// The person declined or cancelled the URL elicitation.
    AskDeclined {
        /// The ask declined.
        ask: AskId,
        /// Which elicitation action the client reported.
        action: DeclineAction,
    },
    /// The form could not be delivered or the wait failed.
    AskFailed {
        /// The ask that failed.
        ask: AskId,
        /// What went wrong, for the person reading the history.
        detail: String,
    },
    /// The person submitted the form after the tool had already returned
    /// (timeout, decline or failure); kept so no answer is lost.
    AskLateAnswer {
        /// The ask answered late.
        ask: AskId,
        /// The validated answers.
        answers: Answers,
    },
    /// `save_plan` stored a new version of the session's plan.
    PlanVersionSaved {
        /// The session the plan belongs to.
        session: SessionId,
        /// 1 for the first version, then one more each time.
        version: u32,
        /// Optional title of this version.
        title: Option<String>,
        /// The plan (Markdown).
        content: String,
    },
    /// `write_plan` replaced a named plan's content (creating it if new).
    NamedPlanWritten {
        /// The plan.
        plan: PlanName,
        /// The full new content.
        content: String,
        /// The session the writer was working in, when known.
        session: Option<SessionId>,
    },
    /// `edit_plan` applied string replacements to a named plan.
    NamedPlanEdited {
        /// The plan.
        plan: PlanName,
        /// The edits, applied atomically to the previous content.
        edits: Vec<PlanEdit>,
        /// Length in bytes of the content after the edits, to check replays.
        content_len_after: u64,
    },
    /// The plan file was changed by something other than the tools; the
    /// content found on disk is recorded before the next write or edit.
    NamedPlanChangedOutside {
        /// The plan.
        plan: PlanName,
        /// The content found on disk.
        content: String,
    },
    /// `submit_plan` asked for a review of the current content.
    NamedPlanSubmitted {
        /// The plan.
        plan: PlanName,
        /// 1 for the first review round, then one more each time.
        round: u32,
    },
    /// A reviewer answered a submitted plan.
    NamedPlanReviewed {
        /// The plan.
        plan: PlanName,
        /// The round this review answers.
        round: u32,
        /// Approved or not.
        verdict: Verdict,
        /// General feedback.
        feedback: Option<String>,
        /// Comments anchored to quoted passages of the plan.
        comments: Vec<ReviewComment>,
        /// How the review was collected.
        channel: ReviewChannel,
    },
}

/// How a form reached the person. Serde names are snake_case
/// (`url_elicitation`); they are not part of the wire format.
#[derive(
    Clone,
    Copy,
    PartialEq,
    Eq,
    Debug,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// The client opened it through URL-mode elicitation.
    UrlElicitation,
    /// The server opened the default browser.
    BrowserOpened,
    /// The server did not open a browser (`ASK_NO_OPEN=1` or the launch
    /// failed); the URL was logged for the person to open by hand.
    BrowserNotOpened,
}

/// The elicitation action that ended an ask without an answer.
#[derive(
    Clone,
    Copy,
    PartialEq,
    Eq,
    Debug,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum DeclineAction {
    /// The person declined.
    Decline,
    /// The person or the client cancelled.
    Cancel,
}

/// The outcome of a plan review.
#[derive(
    Clone,
    Copy,
    PartialEq,
    Eq,
    Debug,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The plan may go ahead.
    Approved,
    /// The plan needs another round.
    ChangesRequested,
}

/// How a review was collected.
#[derive(
    Clone,
    Copy,
    PartialEq,
    Eq,
    Debug,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum ReviewChannel {
    /// The browser review page.
    Browser,
    /// A form-mode elicitation (`--review form`).
    FormElicitation,
    /// An external submit command given after `--`.
    ExternalCommand,
}

/// A review comment anchored to a quoted passage of the plan.
#[derive(
    Clone,
    PartialEq,
    Eq,
    Debug,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct ReviewComment {
    /// The passage the comment is about, quoted from the plan.
    pub quote: String,
    /// The comment.
    pub text: String,
}
