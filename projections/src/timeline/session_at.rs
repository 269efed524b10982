//! [`SessionAt`]: one session as of a cursor, as the time-travel view shows
//! it.

use std::borrow::Cow;

use planb_core::{Ask, NamedPlan, PlanVersion, SessionId, State};

/// A session as of a cursor: whether it existed, its asks, its latest plan
/// version and the named plans tied to it. Made by
/// [`Timeline::session_at`](super::Timeline::session_at).
#[derive(Debug)]
pub struct SessionAt<'t> {
    /// Holds the session, its asks and the named plans tied to it as of the
    /// cursor. Its session plan versions were folded without their texts:
    /// `end` holds their lengths and hashes.
    state: Cow<'t, State>,
    /// The state at the end of the timeline.
    end: &'t State,
    session: SessionId,
}

impl<'t> SessionAt<'t> {
    pub(super) fn new(state: Cow<'t, State>, end: &'t State, session: SessionId) -> Self {
        SessionAt {
            state,
            end,
            session,
        }
    }

    /// Whether the session had been created.
    pub fn exists(&self) -> bool {
        self.state.session(&self.session).is_some()
    }

    /// The session's asks, in the order they were opened.
    pub fn asks(&self) -> Vec<&Ask> {
        self.state
            .session(&self.session)
            .map(|s| s.asks.iter().filter_map(|id| self.state.ask(id)).collect())
            .unwrap_or_default()
    }

    /// The session's latest plan version (its text:
    /// [`Timeline::plan_text`](super::Timeline::plan_text)).
    pub fn latest_plan(&self) -> Option<&PlanVersion> {
        let latest = self.state.latest_plan_version(&self.session)?;
        // This fold decided about the session's plan versions as the fold to
        // the end did, and versions are only ever appended, so the end holds
        // this one.
        let plans = &self.end.session(&self.session)?.plans;
        let index = plans.partition_point(|p| p.cursor < latest.cursor);
        let found = plans.get(index).filter(|p| p.cursor == latest.cursor);
        debug_assert!(found.is_some(), "plan version at {} missing", latest.cursor);
        found
    }

    /// The named plans tied to the session, by name.
    pub fn named_plans(&self) -> impl Iterator<Item = &NamedPlan> {
        self.state
            .named_plans()
            .values()
            .filter(|p| p.session == Some(self.session))
    }
}
