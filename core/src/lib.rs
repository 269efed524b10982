//! `planb-core`: the pure domain of planb.
//!
//! This crate holds what planb *means*, with no way to touch the world:
//!
//! - [`id`](mod@id): UUID newtypes ([`SessionId`], [`AskId`], [`EventId`], ...) and
//!   the validated [`PlanName`].
//! - [`time`](mod@time): [`Timestamp`] (milliseconds since the epoch, ISO-8601 text)
//!   and [`Cursor`] (an event's 1-based position in the log).
//! - [`question`](mod@question): the `ask_user` question spec [`AskSpec`], validated from
//!   the tool's JSON with every problem named by its path.
//! - [`answer`](mod@answer): [`Answers`] and their validation against a spec.
//! - [`event`](mod@event): the versioned event schema ([`Event`], [`EventBody`]) and its
//!   byte codec ([`encode`], [`decode`]); released versions are frozen.
//! - [`plan_edit`](mod@plan_edit): atomic string-replacement edits of named plans.
//! - [`dag`](mod@dag): the DAG engine's pure core: pipeline definitions
//!   checked when defined, and which steps a run settles next (fresh or run,
//!   by input hash), so resume re-runs only what is missing or downstream of
//!   an edit.
//! - [`state`](mod@state): the session state machine: [`State::apply`] folds events,
//!   [`State::decide`] turns a [`Command`] into events or a [`Rejection`].
//!
//! **Architecture invariant**: the core does no IO, reads no clock and draws
//! no random numbers. Callers pass timestamps and freshly minted ids in, so
//! every function here is deterministic and tests need no set-up. It depends
//! on neither the log nor the projections; they depend on it.

pub mod answer;
pub mod dag;
pub mod event;
pub mod exec_plan;
pub mod hash;
pub mod id;
mod json;
pub mod jsonrpc;
pub mod pipelines;
pub mod plan_edit;
pub mod progress;
pub mod question;
pub mod report;
pub mod state;
pub mod text;
pub mod time;

#[cfg(test)]
mod arbitrary;

pub use answer::{AnswerErrors, AnswerValue, Answers};
pub use event::{
    DeclineAction, DecodeError, Delivery, EncodeError, Envelope, Event, EventBody, ReviewChannel,
    ReviewComment, RunOutcome, Verdict, decode, encode,
};
pub use id::{AskId, EventId, IdError, PlanName, RunId, SessionId, TaskId};
pub use plan_edit::{EditError, PlanEdit, apply_edits};
pub use question::{AskSpec, Choice, FieldError, Question, QuestionKind, SpecError};
pub use state::tasks::{
    LOST_RUN_REASON, Lifecycle, LogLine, Run, RunEndReason, RunState, Runs, RunsIter, Speed,
    StepSuccess, Task, TaskErrorCode,
};
pub use state::{
    Ask, AskStatus, Command, ContentHash, INLINE_BLOB_BYTES_MAX, INLINE_BLOBS_BYTES_MAX, NamedPlan,
    NamedPlanVersion, PlanKey, PlanSource, PlanVersion, Rejection, ReviewRound, Session, State,
    StepStart,
};
pub use time::{Cursor, TimeError, Timestamp};
