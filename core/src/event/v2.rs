//! Event schema version 2. FROZEN once released.
//!
//! Version 2 names a named plan by its plans directory as well as its name:
//! two projects that both use `auth-refactor` keep two histories. Every
//! named-plan event carries `plans_dir`, the absolute directory of the plan's
//! file; version 1 events are upcast with an empty `plans_dir`, the one
//! shared namespace plans had before. And an opened ask records only the
//! SHA-256 of its form's secret sid, never the sid: whoever reads the log
//! cannot answer a form with it. Version 1 events, which held the whole URL,
//! are upcast to the URL without its query and the hash of the sid in it.
//!
//! These types are the wire format of version 2, pinned byte for byte by
//! `fixtures/golden/events-v2.bin`; the small types they share with version 1
//! (`Delivery`, `DeclineAction`, `Verdict`, `ReviewChannel`, `ReviewComment`)
//! stay in [`super::v1`]. To change the schema again, add a `v3` the same way.

use crate::answer::Answers;
use crate::id::{AskId, EventId, PlanName, SessionId};
use crate::plan_edit::PlanEdit;
use crate::question::AskSpec;
use crate::time::Timestamp;

use super::v1::{DeclineAction, Delivery, ReviewChannel, ReviewComment, Verdict};

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
        /// The form's address without its secret (`http://127.0.0.1:<port>/ask`).
        url: String,
        /// SHA-256 of the form's secret sid, so any planb process can tell a
        /// link to this form from others without the log holding the secret.
        sid_sha256: [u8; 32],
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
        /// The plan's name.
        plan: PlanName,
        /// The absolute directory of the plan's file: with the name, what
        /// the plan is. Empty for plans recorded before version 2.
        plans_dir: String,
        /// The full new content.
        content: String,
        /// The session the writer was working in, when known.
        session: Option<SessionId>,
    },
    /// `edit_plan` applied string replacements to a named plan.
    NamedPlanEdited {
        /// The plan's name.
        plan: PlanName,
        /// The absolute directory of the plan's file: with the name, what
        /// the plan is. Empty for plans recorded before version 2.
        plans_dir: String,
        /// The edits, applied atomically to the previous content.
        edits: Vec<PlanEdit>,
        /// Length in bytes of the content after the edits, to check replays.
        content_len_after: u64,
    },
    /// The plan file was changed by something other than the tools; the
    /// content found on disk is recorded before the next write or edit.
    NamedPlanChangedOutside {
        /// The plan's name.
        plan: PlanName,
        /// The absolute directory of the plan's file: with the name, what
        /// the plan is. Empty for plans recorded before version 2.
        plans_dir: String,
        /// The content found on disk.
        content: String,
    },
    /// `submit_plan` asked for a review of the current content.
    NamedPlanSubmitted {
        /// The plan's name.
        plan: PlanName,
        /// The absolute directory of the plan's file: with the name, what
        /// the plan is. Empty for plans recorded before version 2.
        plans_dir: String,
        /// 1 for the first review round, then one more each time.
        round: u32,
    },
    /// A reviewer answered a submitted plan.
    NamedPlanReviewed {
        /// The plan's name.
        plan: PlanName,
        /// The absolute directory of the plan's file: with the name, what
        /// the plan is. Empty for plans recorded before version 2.
        plans_dir: String,
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

impl From<super::v1::Event> for Event {
    fn from(event: super::v1::Event) -> Event {
        use super::v1::EventBody as V1;
        let body = upcast_body!(
            event.body, V1 => EventBody,
            same {
                SessionCreated { session, title, intent, project_path },
                AskDraftSaved { ask, answers },
                AskAnswered { ask, answers },
                AskTimedOut { ask },
                AskDeclined { ask, action },
                AskFailed { ask, detail },
                AskLateAnswer { ask, answers },
                PlanVersionSaved { session, version, title, content },
            },
            V1::AskOpened {
                session,
                ask,
                spec,
                delivery,
                url,
            } => {
                let (url, sid_sha256) = super::split_form_url(&url);
                EventBody::AskOpened {
                    session,
                    ask,
                    spec,
                    delivery,
                    url,
                    sid_sha256,
                }
            },
            named @ (V1::NamedPlanWritten { .. }
            | V1::NamedPlanEdited { .. }
            | V1::NamedPlanChangedOutside { .. }
            | V1::NamedPlanSubmitted { .. }
            | V1::NamedPlanReviewed { .. }) => named_plan_in_no_dir(named),
        );
        Event {
            id: event.id,
            at: event.at,
            body,
        }
    }
}

/// A named plan's event of the first schema, which knew no plans
/// directory: the directory is empty (the default one).
fn named_plan_in_no_dir(body: super::v1::EventBody) -> EventBody {
    use super::v1::EventBody as V1;
    match body {
        V1::NamedPlanWritten {
            plan,
            content,
            session,
        } => EventBody::NamedPlanWritten {
            plan,
            plans_dir: String::new(),
            content,
            session,
        },
        V1::NamedPlanEdited {
            plan,
            edits,
            content_len_after,
        } => EventBody::NamedPlanEdited {
            plan,
            plans_dir: String::new(),
            edits,
            content_len_after,
        },
        V1::NamedPlanChangedOutside { plan, content } => EventBody::NamedPlanChangedOutside {
            plan,
            plans_dir: String::new(),
            content,
        },
        V1::NamedPlanSubmitted { plan, round } => EventBody::NamedPlanSubmitted {
            plan,
            plans_dir: String::new(),
            round,
        },
        V1::NamedPlanReviewed {
            plan,
            round,
            verdict,
            feedback,
            comments,
            channel,
        } => EventBody::NamedPlanReviewed {
            plan,
            plans_dir: String::new(),
            round,
            verdict,
            feedback,
            comments,
            channel,
        },
        // The caller passes a named plan's events only.
        other => unreachable!("not a named plan's event: {other:?}"),
    }
}
