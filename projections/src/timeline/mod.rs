//! [`Timeline`]: every event of the log in memory, with the state as of any
//! cursor, for replaying how sessions unfolded (`planb-retro`).
//!
//! Events are decoded once and kept in cursor order. Alongside them the
//! timeline keeps the [`State`] folded to the end and a snapshot of the state
//! every [`Timeline::spacing`] events, so the state as of cursor N is the
//! nearest snapshot at or before N plus at most `spacing - 1` applies: a scrub
//! step never re-reads the log nor refolds from the start.
//!
//! The timeline is pure: it does no IO. Whoever follows the log (the retro
//! server's poller) decodes records and calls [`Timeline::push`].
//!
//! **Invariant**: `state_at(c)` equals a fresh `State` after applying, in
//! order, every pushed event with a cursor at or before `c` (tested by a
//! property over generated command sequences and every snapshot spacing).

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::Arc;

use planb_core::{Cursor, Envelope, EventBody, PlanName, SessionId, State};

/// Events between two snapshots when the caller does not choose.
pub const SNAPSHOT_SPACING_DEFAULT: usize = 256;

/// All events seen so far, the state at the end, and periodic snapshots.
#[derive(Debug, Clone)]
pub struct Timeline {
    events: Vec<Envelope>,
    /// The state after every event in `events`.
    state: State,
    /// `snapshots[i]` is the state after the first `i * spacing` events;
    /// `snapshots[0]` is the empty state.
    snapshots: Vec<State>,
    spacing: usize,
    /// Indexes into `events` of the events that concern each session, in order.
    by_session: HashMap<SessionId, Vec<usize>>,
    /// For each named-plan event that changed a plan's content, the content
    /// right after it (an edit records only its replacements).
    plan_content_after: HashMap<Cursor, Arc<str>>,
    /// Set when the log goes on past the last event but cannot be read.
    incomplete: Option<Incomplete>,
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

impl Default for Timeline {
    fn default() -> Self {
        Timeline::new(SNAPSHOT_SPACING_DEFAULT)
    }
}

impl Timeline {
    /// An empty timeline that snapshots the state every `spacing` events
    /// (at least 1).
    pub fn new(spacing: usize) -> Timeline {
        Timeline {
            events: Vec::new(),
            state: State::default(),
            snapshots: vec![State::default()],
            spacing: spacing.max(1),
            by_session: HashMap::new(),
            plan_content_after: HashMap::new(),
            incomplete: None,
        }
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

    /// Events between two snapshots.
    pub fn spacing(&self) -> usize {
        self.spacing
    }

    /// Appends the next event of the log. Returns `false`, changing nothing,
    /// for an event at or before the last cursor (already seen).
    pub fn push(&mut self, envelope: Envelope) -> bool {
        if envelope.cursor <= self.state.last_cursor() {
            return false;
        }
        self.state.apply(&envelope);
        let index = self.events.len();
        if let Some(session) = session_of(&self.state, &envelope.event.body) {
            self.by_session.entry(session).or_default().push(index);
        }
        if let Some(plan) = content_change(&envelope.event.body)
            && let Some(named) = self.state.named_plan(plan)
            && named.versions.last().map(|v| v.cursor) == Some(envelope.cursor)
        {
            self.plan_content_after
                .insert(envelope.cursor, Arc::from(named.content.as_str()));
        }
        self.events.push(envelope);
        if self.events.len().is_multiple_of(self.spacing) {
            self.snapshots.push(self.state.clone());
        }
        true
    }

    /// Every event, in cursor order.
    pub fn events(&self) -> &[Envelope] {
        &self.events
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
    pub fn event(&self, cursor: Cursor) -> Option<&Envelope> {
        let index = self.events.partition_point(|e| e.cursor < cursor);
        self.events.get(index).filter(|e| e.cursor == cursor)
    }

    /// The state after every event at or before `cursor`: the nearest
    /// snapshot plus fewer than [`spacing`](Self::spacing) applies.
    pub fn state_at(&self, cursor: Cursor) -> State {
        let count = self.events.partition_point(|e| e.cursor <= cursor);
        if count == self.events.len() {
            return self.state.clone();
        }
        let snapshot = count / self.spacing;
        let mut state = self.snapshots[snapshot].clone();
        for envelope in &self.events[snapshot * self.spacing..count] {
            state.apply(envelope);
        }
        state
    }

    /// The events that concern `session`, in order: those naming it, those
    /// of its asks, and those of named plans tied to it when they happened.
    pub fn session_events(&self, session: &SessionId) -> impl Iterator<Item = &Envelope> {
        self.by_session
            .get(session)
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|&index| &self.events[index])
    }

    /// The cursors of [`session_events`](Self::session_events).
    pub fn session_cursors(&self, session: &SessionId) -> Vec<Cursor> {
        self.session_events(session).map(|e| e.cursor).collect()
    }

    /// A named plan's content right after the event at `cursor`, for events
    /// that changed it (written, edited, changed outside).
    pub fn plan_content_after(&self, cursor: Cursor) -> Option<&str> {
        self.plan_content_after.get(&cursor).map(|c| &**c)
    }
}

/// The session an event concerns, looked up in the state right after it.
fn session_of(state: &State, body: &EventBody) -> Option<SessionId> {
    if let Some(session) = body.session() {
        return Some(session);
    }
    if let Some(ask) = body.ask() {
        return state.ask(&ask).map(|a| a.session);
    }
    body.plan()
        .and_then(|plan| state.named_plan(plan))
        .and_then(|plan| plan.session)
}

fn content_change(body: &EventBody) -> Option<&PlanName> {
    match body {
        EventBody::NamedPlanWritten { plan, .. }
        | EventBody::NamedPlanEdited { plan, .. }
        | EventBody::NamedPlanChangedOutside { plan, .. } => Some(plan),
        _ => None,
    }
}
