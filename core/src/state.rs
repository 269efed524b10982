//! The session state machine: [`State`] folds events into sessions, asks and
//! named plans, and [`State::decide`] (in `state/decide.rs`) turns commands
//! into the events to append.
//!
//! The Store keeps one `State` in memory per process, catches it up on the
//! log tail under the append lock, decides, appends, then applies what it
//! appended. Because every process's events go through the same log and the
//! same `apply`, all processes agree on the state at a given cursor.
//!
//! `apply` is total: the log is input, so an event that names an unknown
//! session, ask or plan, or a transition that does not fit the current
//! status, is ignored rather than treated as a bug. `decide` never produces
//! such events, so they can only come from a damaged or foreign log.

mod decide;
mod named;
mod snapshot;
pub mod tasks;

pub use named::{
    EDITS_BYTES_MAX, EDITS_MAX, NAMED_PLAN_BYTES_MAX, REVIEW_COMMENT_CHARS_MAX,
    REVIEW_COMMENTS_MAX, REVIEW_FEEDBACK_CHARS_MAX, REVIEW_QUOTE_CHARS_MAX,
};
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use crate::answer::Answers;
use crate::event::{
    DeclineAction, Delivery, Envelope, EventBody, ReviewChannel, ReviewComment, Verdict,
};
use crate::id::{AskId, PlanName, SessionId};
use crate::plan_edit::apply_edits;
use crate::question::AskSpec;
use crate::time::{Cursor, Timestamp};

pub use decide::{
    Command, EVENT_ROOM_BYTES, INLINE_BLOB_BYTES_MAX, INLINE_BLOBS_BYTES_MAX, INTENT_CHARS_MAX,
    PLAN_CONTENT_BYTES_MAX, PROJECT_PATH_BYTES_MAX, Rejection, SESSION_TITLE_CHARS_MAX, StepStart,
};
pub use snapshot::{SNAPSHOT_VERSION, SnapshotError};

pub use crate::hash::ContentHash;
pub use crate::id::PlanKey;

/// Everything the core knows, as of [`State::last_cursor`].
#[derive(Clone, PartialEq, Debug, Default, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct State {
    sessions: BTreeMap<SessionId, Session>,
    asks: BTreeMap<AskId, Ask>,
    named_plans: BTreeMap<PlanKey, NamedPlan>,
    tasks: BTreeMap<crate::id::TaskId, tasks::Task>,
    last_cursor: Cursor,
    /// The cursor of the newest event that is not a task's.
    last_session_cursor: Cursor,
}

/// A planning session and what happened in it.
#[derive(Clone, PartialEq, Debug, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct Session {
    /// The session's id.
    pub id: SessionId,
    /// Optional short title.
    pub title: Option<String>,
    /// Optional description of what is planned.
    pub intent: Option<String>,
    /// Optional project directory.
    pub project_path: Option<String>,
    /// When the session was created.
    pub created_at: Timestamp,
    /// The latest timestamp of any event touching the session (never moves
    /// backwards, even if another process's clock is behind).
    pub updated_at: Timestamp,
    /// The session's asks, in the order they were opened.
    pub asks: Vec<AskId>,
    /// The saved plan versions, in version order (1, 2, 3, ...).
    pub plans: Vec<PlanVersion>,
}

/// One `save_plan` snapshot. The plan's text is not held here (a session
/// may have thousands of versions): it is in the event at `cursor`, and
/// `bytes` and `sha256` say what a copy of it must be.
#[derive(Clone, PartialEq, Debug, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct PlanVersion {
    /// 1-based version number.
    pub version: u32,
    /// Optional title of this version.
    pub title: Option<String>,
    /// The length of the plan's Markdown in UTF-8 bytes.
    pub bytes: u64,
    /// The SHA-256 of the plan's Markdown.
    pub sha256: ContentHash,
    /// When it was saved.
    pub created_at: Timestamp,
    /// The event that saved it, which holds the text.
    pub cursor: Cursor,
}

impl PlanVersion {
    /// Whether `content` is this version's text.
    pub fn is_content(&self, content: &[u8]) -> bool {
        u64::try_from(content.len()).ok() == Some(self.bytes)
            && ContentHash::of_bytes(content) == self.sha256
    }
}

/// Where an ask is in its life cycle. Only `Pending` asks can change status.
#[derive(Clone, Copy, PartialEq, Eq, Debug, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub enum AskStatus {
    /// The form is open and the tool is waiting.
    Pending,
    /// The person submitted while the tool was waiting.
    Answered,
    /// The tool stopped waiting.
    TimedOut,
    /// The person declined or cancelled the elicitation.
    Declined,
    /// Delivery or waiting failed.
    Failed,
}

impl std::fmt::Display for AskStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AskStatus::Pending => "pending",
            AskStatus::Answered => "answered",
            AskStatus::TimedOut => "timed out",
            AskStatus::Declined => "declined",
            AskStatus::Failed => "failed",
        })
    }
}

/// One `ask_user` round.
#[derive(Clone, PartialEq, Debug, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct Ask {
    /// The ask's id.
    pub id: AskId,
    /// The session it belongs to.
    pub session: SessionId,
    /// The questions.
    pub spec: AskSpec,
    /// How the form reached the person.
    pub delivery: Delivery,
    /// The form's address, without its secret.
    pub url: String,
    /// SHA-256 of the form's secret sid.
    pub sid_sha256: [u8; 32],
    /// Current status.
    pub status: AskStatus,
    /// When the form was opened.
    pub created_at: Timestamp,
    /// When the answers arrived (status `Answered` only).
    pub answered_at: Option<Timestamp>,
    /// When the ask left `Pending`, whatever the outcome.
    pub closed_at: Option<Timestamp>,
    /// The answers returned to the agent (status `Answered` only).
    pub answers: Option<Answers>,
    /// The latest autosaved draft.
    pub draft: Option<Answers>,
    /// The elicitation action (status `Declined` only).
    pub decline_action: Option<DeclineAction>,
    /// What went wrong (status `Failed` only).
    pub failure_detail: Option<String>,
    /// Answers submitted after the tool had returned, with when they came.
    pub late_answers: Vec<(Timestamp, Answers)>,
}

/// A named plan (`write_plan`, `edit_plan`, `submit_plan`).
#[derive(Clone, PartialEq, Debug, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct NamedPlan {
    /// The plan's name.
    pub name: PlanName,
    /// The session of the latest write that named one.
    pub session: Option<SessionId>,
    /// The current content.
    pub content: String,
    /// Every change of the content, oldest first.
    pub versions: Vec<NamedPlanVersion>,
    /// The hash of every content the plan has held, so that a file showing
    /// an older version is known to be behind the log, not edited by hand.
    pub held: BTreeSet<ContentHash>,
    /// Every review round, oldest first.
    pub rounds: Vec<ReviewRound>,
}

/// One change of a named plan's content.
#[derive(Clone, Copy, PartialEq, Eq, Debug, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct NamedPlanVersion {
    /// The event that made the change (read it to get the content then).
    pub cursor: Cursor,
    /// When.
    pub at: Timestamp,
    /// What made it.
    pub source: PlanSource,
}

/// What changed a named plan's content.
#[derive(Clone, Copy, PartialEq, Eq, Debug, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub enum PlanSource {
    /// `write_plan`.
    Written,
    /// `edit_plan`.
    Edited,
    /// Someone edited the file by hand.
    ChangedOutside,
}

/// One submission of a named plan for review, and its outcome.
#[derive(Clone, PartialEq, Debug, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct ReviewRound {
    /// 1-based round number.
    pub round: u32,
    /// When the plan was submitted.
    pub submitted_at: Timestamp,
    /// The content the reviewer was shown.
    pub content_at_submit: String,
    /// The outcome, once reviewed.
    pub verdict: Option<Verdict>,
    /// General feedback.
    pub feedback: Option<String>,
    /// Comments anchored to quoted passages.
    pub comments: Vec<ReviewComment>,
    /// How the review was collected, once reviewed.
    pub channel: Option<ReviewChannel>,
    /// When the review arrived.
    pub reviewed_at: Option<Timestamp>,
}

impl State {
    /// The cursor of the last event applied; [`Cursor::ZERO`] when empty.
    pub fn last_cursor(&self) -> Cursor {
        self.last_cursor
    }

    /// The cursor of the newest event that is not a task's (sessions, asks,
    /// plan versions, named plans): events after it changed no session, so
    /// a projection of the sessions current at this cursor is current at
    /// [`last_cursor`](Self::last_cursor).
    pub fn last_session_cursor(&self) -> Cursor {
        self.last_session_cursor
    }

    /// All sessions, by id.
    pub fn sessions(&self) -> &BTreeMap<SessionId, Session> {
        &self.sessions
    }

    /// All asks, by id.
    pub fn asks(&self) -> &BTreeMap<AskId, Ask> {
        &self.asks
    }

    /// All named plans, by name.
    pub fn named_plans(&self) -> &BTreeMap<PlanKey, NamedPlan> {
        &self.named_plans
    }

    /// The session with this id.
    pub fn session(&self, id: &SessionId) -> Option<&Session> {
        self.sessions.get(id)
    }

    /// The ask with this id.
    pub fn ask(&self, id: &AskId) -> Option<&Ask> {
        self.asks.get(id)
    }

    /// The named plan with this key. A plan recorded before event schema 2
    /// (no directory: names were global) answers for its name in any
    /// directory until one adopts it (see [`State::apply`]).
    pub fn named_plan(&self, key: &PlanKey) -> Option<&NamedPlan> {
        self.named_plans
            .get(key)
            .or_else(|| self.named_plans.get(&legacy_key(key)?))
    }

    /// Moves a plan recorded before event schema 2 under `key`, the first
    /// time an event names it with a directory: its history goes on there.
    fn adopt_legacy_plan(&mut self, key: &PlanKey) {
        if self.named_plans.contains_key(key) {
            return;
        }
        if let Some(plan) = legacy_key(key).and_then(|legacy| self.named_plans.remove(&legacy)) {
            self.named_plans.insert(key.clone(), plan);
        }
    }

    /// Asks still waiting for an answer, across all sessions, by id.
    pub fn pending_asks(&self) -> impl Iterator<Item = &Ask> {
        self.asks
            .values()
            .filter(|ask| ask.status == AskStatus::Pending)
    }

    /// The newest saved plan version of a session.
    pub fn latest_plan_version(&self, id: &SessionId) -> Option<&PlanVersion> {
        self.sessions.get(id)?.plans.last()
    }

    /// Folds one event into the state. Envelopes must come in cursor order;
    /// one at or before [`last_cursor`](Self::last_cursor) is a caller bug
    /// (asserted in debug builds) and is skipped in release builds so that
    /// nothing is applied twice.
    pub fn apply(&mut self, envelope: &Envelope) {
        let cursor = envelope.cursor;
        debug_assert!(
            cursor > self.last_cursor,
            "event at cursor {cursor} applied after cursor {}",
            self.last_cursor
        );
        if cursor <= self.last_cursor {
            return;
        }
        self.last_cursor = cursor;
        if envelope.event.body.task().is_none() {
            self.last_session_cursor = cursor;
        }
        let at = envelope.event.at;
        match &envelope.event.body {
            EventBody::SessionCreated {
                session,
                title,
                intent,
                project_path,
            } => self.create_session(at, *session, [title, intent, project_path]),
            EventBody::AskOpened {
                session,
                ask,
                spec,
                delivery,
                url,
                sid_sha256,
            } => self.open_ask(at, *session, *ask, spec, *delivery, (url, *sid_sha256)),
            EventBody::AskDraftSaved { ask, answers } => {
                self.update_ask(*ask, at, |a| a.draft = Some(answers.clone()));
            }
            EventBody::AskAnswered { ask, answers } => {
                self.close_ask(*ask, at, AskStatus::Answered, |a| {
                    a.answered_at = Some(at);
                    a.answers = Some(answers.clone());
                });
            }
            EventBody::AskTimedOut { ask } => {
                self.close_ask(*ask, at, AskStatus::TimedOut, |_| {});
            }
            EventBody::AskDeclined { ask, action } => {
                self.close_ask(*ask, at, AskStatus::Declined, |a| {
                    a.decline_action = Some(*action);
                });
            }
            EventBody::AskFailed { ask, detail } => {
                self.close_ask(*ask, at, AskStatus::Failed, |a| {
                    a.failure_detail = Some(detail.clone());
                });
            }
            EventBody::AskLateAnswer { ask, answers } => {
                self.update_ask(*ask, at, |a| a.late_answers.push((at, answers.clone())));
            }
            EventBody::PlanVersionSaved {
                session,
                version,
                title,
                content,
            } => self.save_plan_version(cursor, at, *session, (*version, title, content)),
            body if body.task().is_some() => self.apply_task(body, at),
            body => self.apply_named_plan(cursor, at, body),
        }
    }

    /// Session `id` with its title, intent and project path, unless it
    /// exists.
    fn create_session(&mut self, at: Timestamp, id: SessionId, texts: [&Option<String>; 3]) {
        let [title, intent, project_path] = texts;
        self.sessions.entry(id).or_insert_with(|| Session {
            id,
            title: title.clone(),
            intent: intent.clone(),
            project_path: project_path.clone(),
            created_at: at,
            updated_at: at,
            asks: Vec::new(),
            plans: Vec::new(),
        });
    }

    /// A plan version of `session`; versions only grow, so a stale or
    /// repeated number is ignored.
    fn save_plan_version(
        &mut self,
        cursor: Cursor,
        at: Timestamp,
        session: SessionId,
        (version, title, content): (u32, &Option<String>, &str),
    ) {
        let Some(s) = self.sessions.get_mut(&session) else {
            return;
        };
        if s.plans.last().is_some_and(|p| p.version >= version) {
            return;
        }
        s.plans.push(PlanVersion {
            version,
            title: title.clone(),
            bytes: u64::try_from(content.len()).unwrap_or(u64::MAX),
            sha256: ContentHash::of(content),
            created_at: at,
            cursor,
        });
        touch(s, at);
    }

    fn open_ask(
        &mut self,
        at: Timestamp,
        session: SessionId,
        ask: AskId,
        spec: &AskSpec,
        delivery: Delivery,
        (url, sid_sha256): (&str, [u8; 32]),
    ) {
        let Some(s) = self.sessions.get_mut(&session) else {
            return;
        };
        if self.asks.contains_key(&ask) {
            return;
        }
        s.asks.push(ask);
        touch(s, at);
        self.asks.insert(
            ask,
            Ask {
                id: ask,
                session,
                spec: spec.clone(),
                delivery,
                url: url.to_owned(),
                sid_sha256,
                status: AskStatus::Pending,
                created_at: at,
                answered_at: None,
                closed_at: None,
                answers: None,
                draft: None,
                decline_action: None,
                failure_detail: None,
                late_answers: Vec::new(),
            },
        );
    }

    /// Runs `change` on the ask, if known, and touches its session.
    fn update_ask(&mut self, ask: AskId, at: Timestamp, change: impl FnOnce(&mut Ask)) {
        let Some(a) = self.asks.get_mut(&ask) else {
            return;
        };
        change(a);
        if let Some(s) = self.sessions.get_mut(&a.session) {
            touch(s, at);
        }
    }

    /// Moves a pending ask to `status`; asks in any other status are left
    /// alone, since only pending asks can end.
    fn close_ask(
        &mut self,
        ask: AskId,
        at: Timestamp,
        status: AskStatus,
        change: impl FnOnce(&mut Ask),
    ) {
        let pending = self.ask(&ask).map(|a| a.status) == Some(AskStatus::Pending);
        if pending {
            self.update_ask(ask, at, |a| {
                a.status = status;
                a.closed_at = Some(at);
                change(a);
            });
        }
    }

    fn apply_named_plan(&mut self, cursor: Cursor, at: Timestamp, body: &EventBody) {
        let Some(key) = body.plan_key() else {
            return;
        };
        self.adopt_legacy_plan(&key);
        // Writes and changes found on disk may create the plan: a file
        // written by hand before any tool call is still a plan.
        let creates = matches!(
            body,
            EventBody::NamedPlanWritten { .. } | EventBody::NamedPlanChangedOutside { .. }
        );
        if creates && !self.named_plans.contains_key(&key) {
            let plan = NamedPlan {
                name: key.name.clone(),
                session: None,
                content: String::new(),
                versions: Vec::new(),
                held: BTreeSet::new(),
                rounds: Vec::new(),
            };
            self.named_plans.insert(key.clone(), plan);
        }
        let Some(plan) = self.named_plans.get_mut(&key) else {
            return;
        };
        let Some(session) = fold_named_plan(plan, cursor, at, body) else {
            return;
        };
        if plan.versions.last().is_some_and(|v| v.cursor == cursor) {
            plan.held.insert(ContentHash::of(&plan.content));
        }
        if let Some(s) = session.and_then(|id| self.sessions.get_mut(&id)) {
            touch(s, at);
        }
    }
}

/// Folds a named-plan event into `plan`: the session it touches, or `None`
/// when the event changes nothing (edits that no longer apply, a review of
/// an unknown round).
fn fold_named_plan(
    plan: &mut NamedPlan,
    cursor: Cursor,
    at: Timestamp,
    body: &EventBody,
) -> Option<Option<SessionId>> {
    let version = |source| NamedPlanVersion { cursor, at, source };
    match body {
        EventBody::NamedPlanWritten {
            content, session, ..
        } => {
            plan.content.clone_from(content);
            if session.is_some() {
                plan.session = *session;
            }
            plan.versions.push(version(PlanSource::Written));
        }
        EventBody::NamedPlanEdited {
            edits,
            content_len_after,
            ..
        } => {
            // The event holds the edits, not the result: replay them. If
            // they no longer apply, or give another length than when they
            // were recorded, the log disagrees with itself; keep the last
            // content that is known to be right.
            let (content, _) = apply_edits(&plan.content, edits).ok()?;
            if u64::try_from(content.len()).ok() != Some(*content_len_after) {
                return None;
            }
            plan.content = content;
            plan.versions.push(version(PlanSource::Edited));
        }
        EventBody::NamedPlanChangedOutside { content, .. } => {
            plan.content.clone_from(content);
            plan.versions.push(version(PlanSource::ChangedOutside));
        }
        EventBody::NamedPlanSubmitted { round, .. } => plan.rounds.push(ReviewRound {
            round: *round,
            submitted_at: at,
            content_at_submit: plan.content.clone(),
            verdict: None,
            feedback: None,
            comments: Vec::new(),
            channel: None,
            reviewed_at: None,
        }),
        EventBody::NamedPlanReviewed {
            round,
            verdict,
            feedback,
            comments,
            channel,
            ..
        } => {
            let r = plan.rounds.iter_mut().find(|r| r.round == *round)?;
            r.verdict = Some(*verdict);
            r.feedback.clone_from(feedback);
            r.comments.clone_from(comments);
            r.channel = Some(*channel);
            r.reviewed_at = Some(at);
        }
        _ => return Some(None),
    }
    Some(plan.session)
}

impl Ask {
    /// Whether `sid` is this ask's form secret.
    pub fn has_sid(&self, sid: &str) -> bool {
        self.has_form() && !sid.is_empty() && sid_sha256(sid) == self.sid_sha256
    }

    /// Whether the ask had a form (one imported from the Node tool did not).
    pub fn has_form(&self) -> bool {
        self.sid_sha256 != [0; 32]
    }

    /// Whether a submission would still be recorded: while the tool waits,
    /// and once after it stopped waiting (as a late answer; the tool may
    /// have stopped because its server exited). The same rule
    /// [`State::decide`] applies to a submission.
    pub fn accepts_answer(&self) -> bool {
        match self.status {
            AskStatus::Pending => true,
            AskStatus::Answered => false,
            AskStatus::TimedOut | AskStatus::Declined | AskStatus::Failed => {
                self.late_answers.is_empty()
            }
        }
    }
}

pub use crate::event::{sid_sha256, split_form_url};

impl NamedPlan {
    /// Whether the plan's content was `content` at some point: a file that
    /// shows it is behind the log, not edited by hand.
    pub fn has_held(&self, content: &str) -> bool {
        self.content == content || self.held.contains(&ContentHash::of(content))
    }
}

/// The key of the plan of the same name recorded before event schema 2,
/// when `key` has a directory.
fn legacy_key(key: &PlanKey) -> Option<PlanKey> {
    (!key.dir.is_empty()).then(|| PlanKey::new("", key.name.clone()))
}

fn touch(session: &mut Session, at: Timestamp) {
    session.updated_at = session.updated_at.max(at);
}
