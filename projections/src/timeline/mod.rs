//! [`Timeline`]: every event of the log in memory, with the state of a
//! session as of any cursor, for replaying how sessions unfolded
//! (`planb-retro`).
//!
//! Events are decoded once and kept in cursor order, beside the [`State`]
//! folded to the end and two indexes: the events of each session, and the
//! events of each named plan.
//!
//! **Memory.** The timeline holds about one copy of the log. Whole-state
//! snapshots cost the state's size each and the state grows with the log, so
//! any fixed spacing of them makes memory grow with the square of the log
//! (gigabytes for a log of tens of MiB); the timeline keeps none. A plan body is
//! held once: a session plan version's text stays in its event (the state
//! keeps only its length and hash, [`Timeline::plan_text`] reads it); where
//! the state at the end holds an ask's spec, and where
//! [`Timeline::plan_content_after`] holds a named plan's content, the stored
//! event drops its copy, and reading the event puts it back.
//!
//! **Time travel.** What a replay shows at cursor N is one session: the
//! session, its asks and the named plans tied to it. No event of another
//! session changes those, so [`Timeline::session_at`] folds only the
//! session's own events and those of every named plan ever tied to it, up to
//! N, folding the session's plan versions without their texts (the view
//! takes the latest one from the state at the end): the cost of a scrub step
//! grows with the number of the session's events, not with the log nor with
//! the size of its plans.
//!
//! The timeline is pure: it does no IO. Whoever follows the log (the retro
//! server's poller) decodes records and calls [`Timeline::push`].
//!
//! **Invariants** (tested by properties over generated command sequences):
//! [`Timeline::state_at`]`(c)` equals a fresh `State` after applying, in
//! order, every pushed event with a cursor at or before `c`; and
//! [`Timeline::session_at`]`(s, c)` agrees with it on session `s`, its asks,
//! its latest plan version and the named plans tied to `s`.

mod session_at;
mod task_at;
#[cfg(test)]
mod tests;

pub use session_at::SessionAt;
pub use task_at::{StepMark, TaskAt};

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::ops::Range;
use std::sync::Arc;

use planb_core::{
    AskId, AskSpec, Cursor, Envelope, EventBody, PlanKey, PlanVersion, SessionId, State, TaskId,
};

/// All events seen so far, the state at the end, and what finds a session's
/// events.
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    /// In cursor order. Plan bodies held elsewhere are taken out: read
    /// events through [`Timeline::full`].
    events: Vec<Envelope>,
    /// The state after every event in `events`.
    state: State,
    /// Indexes into `events` of the events that concern each session, in order.
    by_session: HashMap<SessionId, Vec<usize>>,
    /// Indexes into `events` of every event of each named plan, in order.
    by_plan: HashMap<PlanKey, Vec<usize>>,
    /// Indexes into `events` of every event of each task, in order.
    by_task: HashMap<TaskId, Vec<usize>>,
    /// The named plans each session was ever tied to.
    plans_of_session: HashMap<SessionId, BTreeSet<PlanKey>>,
    /// For each named-plan event that changed a plan's content, the content
    /// right after it (an edit records only its replacements).
    plan_content_after: HashMap<Cursor, Arc<str>>,
    /// The event that opened each ask the state holds, whose spec and URL
    /// the stored event leaves to the state.
    ask_opened_at: HashMap<AskId, Cursor>,
    /// Set when the log goes on past the last event but cannot be read.
    incomplete: Option<Incomplete>,
    /// Events of a team database left out as untrusted (altered, deleted,
    /// unreadable): the history shown goes on past them.
    left_out: u64,
}

/// Why a timeline stops before the log does: the record at `cursor` could
/// not be read (damaged, or in a format this build does not know), so
/// neither it nor any event after it is in the timeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incomplete {
    /// The first event missing.
    pub cursor: Cursor,
    /// What is wrong there, as the log or the decoder reports it: the
    /// segment, byte offset and cursor of the damage.
    pub reason: String,
}

impl Timeline {
    /// An empty timeline.
    pub fn new() -> Timeline {
        Timeline::default()
    }

    /// Records that the log cannot be read past the last event, so that
    /// every view of this timeline can say its history is partial.
    pub fn mark_incomplete(&mut self, incomplete: Incomplete) {
        debug_assert!(incomplete.cursor > self.last_cursor());
        self.incomplete = Some(incomplete);
    }

    /// Why the timeline ends before the log does, if it does.
    pub fn incomplete(&self) -> Option<&Incomplete> {
        self.incomplete.as_ref()
    }

    /// Records that `count` more events were left out of the history (a
    /// team replay's untrusted rows), so every view can say so.
    pub fn note_left_out(&mut self, count: u64) {
        self.left_out += count;
    }

    /// How many events were left out of the history.
    pub fn left_out(&self) -> u64 {
        self.left_out
    }

    /// Appends the next event of the log. Returns `false`, changing nothing,
    /// for an event at or before the last cursor (already seen).
    pub fn push(&mut self, mut envelope: Envelope) -> bool {
        if envelope.cursor <= self.state.last_cursor() {
            return false;
        }
        let opens = match &envelope.event.body {
            EventBody::AskOpened { ask, .. } => self.state.ask(ask).is_none().then_some(*ask),
            _ => None,
        };
        self.state.apply(&envelope);
        if let Some(ask) = opens.filter(|ask| self.state.ask(ask).is_some()) {
            self.ask_opened_at.insert(ask, envelope.cursor);
        }
        let index = self.events.len();
        let cursor = envelope.cursor;
        if let Some(session) = session_of(&self.state, &envelope.event.body) {
            self.by_session.entry(session).or_default().push(index);
        }
        if let Some(plan) = envelope.event.body.plan_key() {
            if let Some(named) = self.state.named_plan(&plan) {
                if let Some(session) = named.session {
                    self.plans_of_session
                        .entry(session)
                        .or_default()
                        .insert(plan.clone());
                }
                if content_change(&envelope.event.body)
                    && named.versions.last().map(|v| v.cursor) == Some(cursor)
                {
                    self.plan_content_after
                        .insert(cursor, Arc::from(named.content.as_str()));
                }
            }
            self.by_plan.entry(plan).or_default().push(index);
        }
        // A blob's bytes are not a step of a task's history: the event that
        // names them is.
        if let Some(task) = envelope.event.body.task()
            && !matches!(envelope.event.body, EventBody::BlobStored { .. })
        {
            self.by_task.entry(task).or_default().push(index);
        }
        self.take_held_body(&mut envelope);
        self.events.push(envelope);
        true
    }

    /// Drops the plan body, or the ask spec and URL, of a just-applied event
    /// when the state or `plan_content_after` holds the same; [`Timeline::full`]
    /// puts it back. An event the state ignored keeps its body.
    fn take_held_body(&self, envelope: &mut Envelope) {
        let cursor = envelope.cursor;
        match &mut envelope.event.body {
            EventBody::NamedPlanWritten { content, .. }
            | EventBody::NamedPlanChangedOutside { content, .. } => {
                if let Some(after) = self.plan_content_after.get(&cursor) {
                    debug_assert_eq!(&**after, content.as_str());
                    *content = String::new();
                }
            }
            EventBody::AskOpened { ask, spec, url, .. }
                if self.ask_opened_at.get(ask) == Some(&cursor) =>
            {
                debug_assert_eq!(self.state.ask(ask).map(|a| &a.spec), Some(&*spec));
                *spec = AskSpec {
                    title: String::new(),
                    intro_title: None,
                    intro: None,
                    questions: Vec::new(),
                };
                *url = String::new();
            }
            _ => {}
        }
    }

    /// The event as it was logged, with any plan body, ask spec or URL the
    /// timeline holds elsewhere put back.
    fn full<'a>(&'a self, stored: &'a Envelope) -> Cow<'a, Envelope> {
        let cursor = stored.cursor;
        match &stored.event.body {
            EventBody::NamedPlanWritten { .. } | EventBody::NamedPlanChangedOutside { .. } => {
                match self.plan_content_after.get(&cursor) {
                    Some(after) => refill(stored, |body| {
                        if let EventBody::NamedPlanWritten { content, .. }
                        | EventBody::NamedPlanChangedOutside { content, .. } = body
                        {
                            after.as_ref().clone_into(content);
                        }
                    }),
                    None => Cow::Borrowed(stored),
                }
            }
            EventBody::AskOpened { ask, .. } => {
                let held = (self.ask_opened_at.get(ask) == Some(&cursor))
                    .then(|| self.state.ask(ask))
                    .flatten();
                match held {
                    Some(opened) => refill(stored, |body| {
                        if let EventBody::AskOpened { spec, url, .. } = body {
                            spec.clone_from(&opened.spec);
                            opened.url.clone_into(url);
                        }
                    }),
                    None => Cow::Borrowed(stored),
                }
            }
            _ => Cow::Borrowed(stored),
        }
    }

    /// The text of a session plan version (the state holds only its length
    /// and hash): from the event that saved it.
    pub fn plan_text(&self, plan: &PlanVersion) -> Option<&str> {
        match &self.stored(plan.cursor)?.event.body {
            EventBody::PlanVersionSaved { content, .. } => Some(content),
            _ => None,
        }
    }

    /// The event at `cursor` as the timeline stores it.
    fn stored(&self, cursor: Cursor) -> Option<&Envelope> {
        let index = self.events.partition_point(|e| e.cursor < cursor);
        self.events.get(index).filter(|e| e.cursor == cursor)
    }

    /// The number of events.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether no event was pushed yet.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The cursor of the last event; [`Cursor::ZERO`] when empty.
    pub fn last_cursor(&self) -> Cursor {
        self.state.last_cursor()
    }

    /// The state after every event.
    pub fn state(&self) -> &State {
        &self.state
    }

    /// The event at `cursor`, if there is one.
    pub fn event(&self, cursor: Cursor) -> Option<Cow<'_, Envelope>> {
        self.stored(cursor).map(|e| self.full(e))
    }

    /// The state after every event at or before `cursor`, folded from the
    /// start: its cost grows with the log. Pages use
    /// [`session_at`](Self::session_at).
    pub fn state_at(&self, cursor: Cursor) -> Cow<'_, State> {
        if cursor >= self.last_cursor() {
            return Cow::Borrowed(&self.state);
        }
        let count = self.events.partition_point(|e| e.cursor <= cursor);
        let mut state = State::default();
        for stored in &self.events[..count] {
            state.apply(&self.full(stored));
        }
        Cow::Owned(state)
    }

    /// `session` as of `cursor`: the session, its asks and the named plans
    /// tied to it, as the time-travel view shows them. Folds the session's
    /// events and those of every named plan ever tied to it, so its cost
    /// grows with the session, not with the log.
    pub fn session_at(&self, session: &SessionId, cursor: Cursor) -> SessionAt<'_> {
        if cursor >= self.last_cursor() {
            return SessionAt::new(Cow::Borrowed(&self.state), &self.state, *session);
        }
        let mut indexes: Vec<usize> = self.session_indexes(session).to_vec();
        for plan in self.plans_of_session.get(session).into_iter().flatten() {
            indexes.extend(self.by_plan.get(plan).into_iter().flatten());
        }
        indexes.sort_unstable();
        indexes.dedup();
        let mut state = State::default();
        for index in indexes {
            let stored = &self.events[index];
            if stored.cursor > cursor {
                break;
            }
            match without_text(stored) {
                // Folding the text would hash it on every scrub step; the
                // view takes the version from the state at the end.
                Some(stripped) => state.apply(&stripped),
                None => state.apply(&self.full(stored)),
            }
        }
        SessionAt::new(Cow::Owned(state), &self.state, *session)
    }

    fn session_indexes(&self, session: &SessionId) -> &[usize] {
        self.by_session
            .get(session)
            .map(Vec::as_slice)
            .unwrap_or_default()
    }

    /// How many events concern `session`.
    pub fn session_len(&self, session: &SessionId) -> usize {
        self.session_indexes(session).len()
    }

    /// How many of the events that concern `session` are at or before
    /// `cursor`: the position of the first one after it.
    pub fn session_position(&self, session: &SessionId, cursor: Cursor) -> usize {
        self.session_indexes(session)
            .partition_point(|&index| self.events[index].cursor <= cursor)
    }

    /// The cursors of the events that concern `session`, in order.
    pub fn session_cursors(&self, session: &SessionId) -> Vec<Cursor> {
        self.session_indexes(session)
            .iter()
            .map(|&index| self.events[index].cursor)
            .collect()
    }

    /// The events that concern `session` (those naming it, those of its
    /// asks, and those of named plans tied to it when they happened), at
    /// `positions` among them, in order.
    pub fn session_events(
        &self,
        session: &SessionId,
        positions: Range<usize>,
    ) -> impl Iterator<Item = Cow<'_, Envelope>> {
        let indexes = self.session_indexes(session);
        let positions = positions.start.min(indexes.len())..positions.end.min(indexes.len());
        indexes[positions]
            .iter()
            .map(|&index| self.full(&self.events[index]))
    }

    /// The events of the named plan `key` (its changes, submissions and
    /// reviews, whichever session made them), the newest `limit`, in order,
    /// and how many there are in all.
    pub fn named_plan_events(
        &self,
        key: &PlanKey,
        limit: usize,
    ) -> (impl Iterator<Item = Cow<'_, Envelope>>, usize) {
        let indexes = self.by_plan.get(key).map_or(&[][..], Vec::as_slice);
        let shown = &indexes[indexes.len().saturating_sub(limit)..];
        let events = shown.iter().map(|&index| self.full(&self.events[index]));
        (events, indexes.len())
    }

    /// The cursors of the events of `task`, in order.
    pub fn task_cursors(&self, task: &TaskId) -> Vec<Cursor> {
        self.by_task
            .get(task)
            .into_iter()
            .flatten()
            .map(|&index| self.events[index].cursor)
            .collect()
    }

    /// `task` as of `cursor`, folded from its own events only (task events
    /// touch nothing else), so the cost grows with the task, not the log;
    /// `None` if it did not exist yet.
    pub fn task_at(&self, task: &TaskId, cursor: Cursor) -> Option<TaskAt<'_>> {
        let events: Vec<Cow<'_, Envelope>> = self
            .by_task
            .get(task)?
            .iter()
            .map(|&index| &self.events[index])
            .take_while(|e| e.cursor <= cursor)
            .map(|e| self.full(e))
            .collect();
        task_at::fold(task, events)
    }

    /// A named plan's content right after the event at `cursor`, for events
    /// that changed it (written, edited, changed outside).
    pub fn plan_content_after(&self, cursor: Cursor) -> Option<&str> {
        self.plan_content_after.get(&cursor).map(|c| &**c)
    }
}

/// A copy of `stored` with what the timeline held elsewhere put back by
/// `fill`.
fn refill<'a>(stored: &Envelope, fill: impl FnOnce(&mut EventBody)) -> Cow<'a, Envelope> {
    let mut envelope = stored.clone();
    fill(&mut envelope.event.body);
    Cow::Owned(envelope)
}

/// A `PlanVersionSaved` event with its text left out; `None` for any other.
fn without_text(stored: &Envelope) -> Option<Envelope> {
    let EventBody::PlanVersionSaved {
        session,
        version,
        title,
        ..
    } = &stored.event.body
    else {
        return None;
    };
    Some(Envelope {
        cursor: stored.cursor,
        event: planb_core::Event {
            id: stored.event.id,
            at: stored.event.at,
            body: EventBody::PlanVersionSaved {
                session: *session,
                version: *version,
                title: title.clone(),
                content: String::new(),
            },
        },
    })
}

/// The session an event concerns, looked up in the state right after it.
fn session_of(state: &State, body: &EventBody) -> Option<SessionId> {
    if let Some(session) = body.session() {
        return Some(session);
    }
    if let Some(ask) = body.ask() {
        return state.ask(&ask).map(|a| a.session);
    }
    body.plan_key()
        .and_then(|plan| state.named_plan(&plan))
        .and_then(|plan| plan.session)
}

fn content_change(body: &EventBody) -> bool {
    matches!(
        body,
        EventBody::NamedPlanWritten { .. }
            | EventBody::NamedPlanEdited { .. }
            | EventBody::NamedPlanChangedOutside { .. }
    )
}
