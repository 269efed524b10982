//! What every replay page shares: its frame (the styles, the script, the
//! banner that says the history stops early) and what the sessions index
//! is narrowed to (a filter, the team's members).

use maud::{Markup, html};
use planb_core::{Session, SessionId, TaskId};
use planb_projections::Timeline;

use super::assets::{RETRO_CSS, RETRO_JS, REVIEW_CSS};
use super::shell::{Libraries, document_with};

/// What the sessions index is narrowed to.
#[derive(Clone, Copy, Debug, Default)]
pub struct RetroFilter<'a> {
    /// Only sessions whose project path is exactly this.
    pub project: Option<&'a str>,
    /// Only sessions whose title, intent or project contains this text
    /// (case-insensitive).
    pub query: Option<&'a str>,
    /// In a team replay, only sessions of this member.
    pub member: Option<&'a str>,
}

/// Who is who in a team replay, for the sessions index.
pub struct TeamIndex<'a> {
    /// Each origin shipping to the database: member, host, events.
    pub origins: Vec<(&'a str, &'a str, u64)>,
    /// The member a session came from.
    pub member_of: &'a dyn Fn(&SessionId) -> Option<&'a str>,
    /// The member a task or execution plan came from.
    pub task_member_of: &'a dyn Fn(&TaskId) -> Option<&'a str>,
}

impl std::fmt::Debug for TeamIndex<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TeamIndex")
            .field("origins", &self.origins)
            .finish_non_exhaustive()
    }
}

impl RetroFilter<'_> {
    pub(super) fn keeps_member(&self, session: &Session, team: Option<&TeamIndex<'_>>) -> bool {
        match (self.member, team) {
            (Some(member), Some(team)) => (team.member_of)(&session.id) == Some(member),
            _ => true,
        }
    }

    pub(super) fn keeps(&self, session: &Session) -> bool {
        let project_ok = self
            .project
            .is_none_or(|p| session.project_path.as_deref() == Some(p));
        let query_ok = self.query.is_none_or(|q| {
            let q = q.to_lowercase();
            [&session.title, &session.intent, &session.project_path]
                .into_iter()
                .flatten()
                .any(|text| text.to_lowercase().contains(&q))
                || session.id.to_string().starts_with(&q)
        });
        project_ok && query_ok
    }
}

/// A replay page. `timeline` is given when the page should say, above
/// everything else, that the history is incomplete; the session page passes
/// `None` because its state panel says so, and the panel is also what the
/// scrubber swaps in.
pub(super) fn page(
    title: &str,
    libraries: Libraries,
    live: Option<String>,
    timeline: Option<&Timeline>,
    body: Markup,
) -> Markup {
    let body = html! {
        link rel="stylesheet" href=(REVIEW_CSS);
        link rel="stylesheet" href=(RETRO_CSS);
        main #main .card .retro-card data-live=[live] {
            @if let Some(timeline) = timeline { (incomplete_banner(timeline)) }
            (body)
        }
        script src=(RETRO_JS) defer {}
    };
    document_with(
        title,
        libraries,
        body,
        "planb replay · read-only: what is shown here was recorded in the log and cannot be changed from this page",
    )
}

/// When the log cannot be read to its end: that the history shown stops
/// early, where, and why; when a team replay left events out: how many.
/// Empty otherwise.
pub(super) fn incomplete_banner(timeline: &Timeline) -> Markup {
    html! {
        @if let Some(incomplete) = timeline.incomplete() {
            div.banner.banner-error.retro-incomplete role="alert" {
                strong { "History incomplete." }
                " The log cannot be read from event #" (incomplete.cursor)
                " on, so this shows only what happened before it: "
                (incomplete.reason)
            }
        }
        @if timeline.left_out() > 0 {
            div.banner.banner-error.retro-left-out role="alert" {
                strong { "Events left out." }
                " " (timeline.left_out())
                " event(s) of the team database cannot be trusted and are not in this replay, so what follows them may differ from what happened; "
                a href="/" { "the index" } " names each."
            }
        }
    }
}
