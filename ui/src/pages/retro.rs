//! The pages of `planb-retro`, the read-only replay of sessions: the sessions
//! index with the inbox of waiting questions, a session's timeline with its
//! time-travel scrubber, a plan version, and the diff of two versions.
//!
//! Everything is rendered from a [`Timeline`]; the server only parses the URL
//! and picks the page. Like every page here these hold no inline script or
//! style: `retro.js` reads what it needs from `data-*` attributes (the
//! session's cursors, the fragment and event-stream URLs).

use std::ops::Range;

use maud::{Markup, PreEscaped, html};
use planb_core::{Cursor, Session, SessionId};

use super::diff::Folds;
use super::retro_entry::{
    EntryCache, count, diff_view, entry, named_plan, short, state_panel, when,
};
use super::retro_frame::{incomplete_banner, page};
use super::shell::{Libraries, message_page_with};
use crate::markdown;
use planb_projections::Timeline;

/// A message page for a refusal (no such session, version or cursor) that
/// also says when the history is incomplete, since what is missing may lie
/// past the damage.
pub fn retro_message_page(timeline: &Timeline, title: &str, message: &str) -> Markup {
    message_page_with(title, message, incomplete_banner(timeline))
}

fn back_link() -> Markup {
    html! { a.retro-back href="/" { "‹ Everything" } }
}

/// Where shipping to a team database stands, for the index page: a
/// quiet line, or an alert when it is failing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeamLine {
    /// What to say.
    pub text: String,
    /// Shipping is failing (said as an alert).
    pub failing: bool,
}

/// Timeline entries a session page shows at once; "Show earlier" and "Show
/// later" fetch as many again. Rendering every entry of a long session
/// (thousands of plan versions, each with its diff) took seconds.
pub const ENTRIES_WINDOW: usize = 200;

/// Entries shown before the scrubber's position when the page opens on an
/// older one, so what led up to it is in view.
const ENTRIES_BEFORE_POSITION: usize = ENTRIES_WINDOW / 10;

/// The positions among a session's `len` entries its page shows with the
/// scrubber on the entry at `position`: the latest [`ENTRIES_WINDOW`], or,
/// for a position before those, a window that starts just before it.
fn entries_window(len: usize, position: usize) -> Range<usize> {
    let latest = len.saturating_sub(ENTRIES_WINDOW);
    let start = if position >= latest {
        latest
    } else {
        position.saturating_sub(ENTRIES_BEFORE_POSITION)
    };
    start..len.min(start + ENTRIES_WINDOW)
}

/// Which entries a fragment holds: those just before a cursor, or just after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntriesBeyond {
    /// The [`ENTRIES_WINDOW`] entries before this cursor.
    Before(Cursor),
    /// The [`ENTRIES_WINDOW`] entries after this cursor.
    After(Cursor),
}

/// The control in place of the entries before position `start`, or after
/// position `end`, of a session's timeline. The link works without script
/// (it opens the page on the nearest hidden entry); `retro.js` fetches the
/// fragment named by `data-src` instead and puts it in the control's place.
fn more_entries(id: &SessionId, cursors: &[Cursor], shown: &Range<usize>) -> (Markup, Markup) {
    // A fragment asked for beyond either end of the session holds nothing,
    // and there is nothing on from there.
    if shown.is_empty() {
        return (Markup::default(), Markup::default());
    }
    let earlier = shown.start.checked_sub(1).map(|last_hidden| {
        let first_shown = cursors[shown.start];
        html! {
            li.retro-more data-src={"/sessions/" (id) "/entries?before=" (first_shown)} {
                a.btn.btn-ghost href={"?at=" (cursors[last_hidden])} {
                    "Show earlier events (" (shown.start) " more)"
                }
            }
        }
    });
    let later = (shown.end < cursors.len()).then(|| {
        let last_shown = cursors[shown.end - 1];
        html! {
            li.retro-more data-src={"/sessions/" (id) "/entries?after=" (last_shown)} data-later {
                a.btn.btn-ghost href={"?at=" (cursors[shown.end])} {
                    "Show later events (" (cursors.len() - shown.end) " more)"
                }
            }
        }
    });
    (earlier.unwrap_or_default(), later.unwrap_or_default())
}

/// Which "Show earlier" and "Show later" controls a list of entries carries
/// when entries remain on that side: a page both, a fragment only the one
/// on the side it extends.
#[derive(Clone, Copy)]
struct Controls {
    earlier: bool,
    later: bool,
}

/// The entries at `shown` among the session's, with `controls` for those
/// before and after. `at` dims the entries after the scrubber's position.
fn entries(
    timeline: &Timeline,
    cache: &EntryCache,
    id: &SessionId,
    shown: Range<usize>,
    controls: Controls,
    at: Option<Cursor>,
) -> Markup {
    let cursors = timeline.session_cursors(id);
    let (earlier, later) = more_entries(id, &cursors, &shown);
    html! {
        @if controls.earlier { (earlier) }
        @for (number, envelope) in (shown.start + 1..).zip(timeline.session_events(id, shown)) {
            (entry(timeline, cache, &envelope, (number, Some("")), at.is_some_and(|at| envelope.cursor > at)))
        }
        @if controls.later { (later) }
    }
}

/// A session's replay with the scrubber at `at` (a cursor at or before the
/// end of the log), or `None` for an unknown session. The timeline shows a
/// window of [`ENTRIES_WINDOW`] entries around `at`.
pub fn retro_session_page(
    timeline: &Timeline,
    cache: &EntryCache,
    id: &SessionId,
    at: Cursor,
) -> Option<Markup> {
    let session = timeline.state().session(id)?;
    let cursors = timeline.session_cursors(id);
    let position = timeline.session_position(id, at).saturating_sub(1);
    let shown = entries_window(cursors.len(), position);
    let panel = state_panel(timeline, id, at);
    let panel_html = panel.into_string();
    let libraries = Libraries::needed_by([panel_html.as_str()]);
    let title = session
        .title
        .clone()
        .unwrap_or_else(|| format!("Session {}", short(id)));
    let named: Vec<_> = timeline
        .state()
        .named_plans()
        .values()
        .filter(|p| p.session.as_ref() == Some(id))
        .collect();
    let body = html! {
        (session_header(session, &title))
        div.retro-body {
            (scrubber(timeline, id, &cursors, position, at))
            div.retro-layout {
                section #state-panel .retro-panel aria-label="State at this point" {
                    (PreEscaped(panel_html))
                }
                section.retro-timeline aria-label="Timeline" {
                    h2 { "Timeline" }
                    ol #timeline .retro-entries {
                        (entries(timeline, cache, id, shown, Controls { earlier: true, later: true }, Some(at)))
                    }
                }
            }
            @if !session.plans.is_empty() { (plan_versions(id, session)) }
            @if !named.is_empty() {
                section.retro-named {
                    h2 { "Named plans and reviews" }
                    @for plan in named { (named_plan(plan)) }
                }
            }
        }
    };
    Some(page(&title, libraries, None, None, body))
}

/// A session page's header: its title, intent, project and counts.
fn session_header(session: &Session, title: &str) -> Markup {
    html! {
        header.card-header {
            (back_link())
            p.eyebrow { "Session replay" }
            h1.form-title { (title) }
            @if let Some(intent) = &session.intent { p.retro-intent { (intent) } }
            p.retro-muted {
                @if let Some(p) = &session.project_path { code { (p) } " · " }
                "created " (when(session.created_at)) " · last activity " (when(session.updated_at))
                " · " (count(session.asks.len(), "question", "questions"))
                " · " (count(session.plans.len(), "plan version", "plan versions"))
            }
        }
    }
}

/// The time-travel scrubber over a session's `cursors`, at the entry at
/// `position` (cursor `at`).
fn scrubber(
    timeline: &Timeline,
    id: &SessionId,
    cursors: &[Cursor],
    position: usize,
    at: Cursor,
) -> Markup {
    let cursor_list = cursors
        .iter()
        .map(Cursor::to_string)
        .collect::<Vec<_>>()
        .join(",");
    html! {
        div #scrubber .retro-scrubber data-session=(id) data-cursors=(cursor_list)
            data-fragment={"/sessions/" (id) "/at/"}
            data-live={"/sessions/" (id) "/events?after=" (timeline.last_cursor())} {
            button #scrub-prev .btn .btn-ghost type="button" aria-keyshortcuts="ArrowLeft" { "‹ Prev" }
            input #scrub .retro-range type="range" min="0" max=(cursors.len().saturating_sub(1))
                value=(position) step="1" aria-label="Replay position";
            button #scrub-next .btn .btn-ghost type="button" aria-keyshortcuts="ArrowRight" { "Next ›" }
            span #scrub-label .retro-muted aria-live="polite" {
                "Event " (position + 1) " of " (cursors.len()) " · log cursor " (at)
            }
            a #permalink .retro-permalink href={"?at=" (at)} { "Permalink" }
        }
    }
}

/// A session's plan versions, each linked with its diff to the one before.
fn plan_versions(id: &SessionId, session: &Session) -> Markup {
    html! {
        section.retro-versions {
            h2 { "Plan versions" }
            ul.retro-list {
                @for plan in &session.plans {
                    li {
                        a href={"/sessions/" (id) "/plans/" (plan.version)} { "v" (plan.version) }
                        @if let Some(t) = &plan.title { " · " (t) }
                        span.retro-muted { " · " (when(plan.created_at)) }
                        @if plan.version > 1 {
                            " · " a href={"/sessions/" (id) "/plans/" (plan.version - 1) "/diff/" (plan.version)} { "diff" }
                        }
                    }
                }
            }
        }
    }
}

/// The entries of `id` just before or after a cursor, as `li` elements with
/// a control for more beyond them, for the session page to put in place of
/// its "Show earlier" or "Show later" control.
pub fn retro_entries_fragment(
    timeline: &Timeline,
    cache: &EntryCache,
    id: &SessionId,
    beyond: EntriesBeyond,
) -> Markup {
    let len = timeline.session_len(id);
    let (shown, controls) = match beyond {
        EntriesBeyond::Before(cursor) => {
            let end = timeline.session_position(id, Cursor(cursor.0.saturating_sub(1)));
            let controls = Controls {
                earlier: true,
                later: false,
            };
            (end.saturating_sub(ENTRIES_WINDOW)..end, controls)
        }
        EntriesBeyond::After(cursor) => {
            let start = timeline.session_position(id, cursor);
            let controls = Controls {
                earlier: false,
                later: true,
            };
            (start..len.min(start + ENTRIES_WINDOW), controls)
        }
    };
    entries(timeline, cache, id, shown, controls, None)
}

/// The state panel alone, as the scrubber fetches it.
pub fn retro_state_fragment(timeline: &Timeline, id: &SessionId, at: Cursor) -> Markup {
    state_panel(timeline, id, at)
}

/// The timeline entries of `id` after cursor `after`, for the live stream.
pub fn retro_entries_after(
    timeline: &Timeline,
    cache: &EntryCache,
    id: &SessionId,
    after: Cursor,
) -> Vec<(Cursor, String)> {
    let start = timeline.session_position(id, after);
    (start + 1..)
        .zip(timeline.session_events(id, start..usize::MAX))
        .map(|(n, e)| {
            (
                e.cursor,
                entry(timeline, cache, &e, (n, Some("")), false).into_string(),
            )
        })
        .collect()
}

/// One plan version, rendered and as Markdown; `None` if there is no such
/// session or version.
pub fn retro_plan_page(timeline: &Timeline, id: &SessionId, version: u32) -> Option<Markup> {
    let session = timeline.state().session(id)?;
    let plan = session.plans.iter().find(|p| p.version == version)?;
    let text = timeline.plan_text(plan)?;
    let html_fragment = markdown::render(text);
    let libraries = Libraries::needed_by([html_fragment.as_str()]);
    let latest = session.plans.last().map_or(version, |p| p.version);
    let body = html! {
        header.card-header {
            a.retro-back href={"/sessions/" (id) "?at=" (plan.cursor)} { "‹ Session" }
            p.eyebrow { "Plan version " (version) " of " (latest) }
            h1.form-title { (plan.title.clone().unwrap_or_else(|| format!("Plan v{version}"))) }
            p.retro-muted {
                "saved " (when(plan.created_at))
                span title="The event's place in the whole log" { " · log cursor " (plan.cursor) }
                @if version > 1 {
                    " · " a href={"/sessions/" (id) "/plans/" (version - 1)} { "‹ v" (version - 1) }
                    " · " a href={"/sessions/" (id) "/plans/" (version - 1) "/diff/" (version)} { "diff to v" (version - 1) }
                }
                @if version < latest {
                    " · " a href={"/sessions/" (id) "/plans/" (version + 1)} { "v" (version + 1) " ›" }
                }
            }
        }
        div.retro-body {
            div.md.plan-doc #plan { (PreEscaped(html_fragment)) }
            details.retro-source open {
                summary { "Markdown" }
                pre.retro-raw { code { (text) } }
            }
        }
    };
    Some(page(
        &format!("Plan v{version}"),
        libraries,
        None,
        Some(timeline),
        body,
    ))
}

/// The diff from version `from` to version `to` of a session's plan; `None`
/// if the session or either version does not exist.
pub fn retro_diff_page(timeline: &Timeline, id: &SessionId, from: u32, to: u32) -> Option<Markup> {
    let session = timeline.state().session(id)?;
    let find = |v: u32| session.plans.iter().find(|p| p.version == v);
    let (a, b) = (find(from)?, find(to)?);
    let (a_text, b_text) = (timeline.plan_text(a)?, timeline.plan_text(b)?);
    let body = html! {
        header.card-header {
            a.retro-back href={"/sessions/" (id)} { "‹ Session" }
            p.eyebrow { "Plan diff" }
            h1.form-title { "v" (from) " → v" (to) }
            p.retro-muted {
                a href={"/sessions/" (id) "/plans/" (from)} { "v" (from) } " saved " (when(a.created_at))
                " · " a href={"/sessions/" (id) "/plans/" (to)} { "v" (to) } " saved " (when(b.created_at))
            }
        }
        section.changes-panel.retro-diff { (diff_view(a_text, b_text, Folds::Expandable)) }
    };
    Some(page(
        &format!("Plan v{from} → v{to}"),
        Libraries::default(),
        None,
        Some(timeline),
        body,
    ))
}
