//! A named plan's page in `planb-retro`: its plans directory, its review
//! rounds with their verdicts and comments, its current content, and every
//! event of it (each change with its diff, each submission and review),
//! whichever session, if any, made them.

use maud::{Markup, html};
use planb_core::PlanKey;
use planb_projections::Timeline;

use super::retro_entry::{EntryCache, count, entry, named_plan, when};
use super::retro_frame::page;
use super::retro_index::review_badge;
use super::shell::Libraries;

/// The latest events a named plan's page shows.
pub const NAMED_EVENTS_SHOWN: usize = 500;

/// The page of the named plan `key`, or `None` when there is none.
pub fn retro_named_page(timeline: &Timeline, cache: &EntryCache, key: &PlanKey) -> Option<Markup> {
    let state = timeline.state();
    let plan = state.named_plan(key)?;
    let (events, total) = timeline.named_plan_events(key, NAMED_EVENTS_SHOWN);
    let first = total.saturating_sub(NAMED_EVENTS_SHOWN) + 1;
    let session = plan.session.and_then(|s| state.session(&s));
    let title = plan.name.as_str();
    let link = session.map(|s| format!("/sessions/{}", s.id));
    let body = html! {
        header.card-header {
            a.retro-back href="/" { "‹ Everything" }
            p.eyebrow { "Named plan" }
            h1.form-title { (title) " " (review_badge(plan)) }
            p.retro-muted {
                "in " code { (if key.dir.is_empty() { "(no directory recorded)" } else { key.dir.as_str() }) }
                " · " (count(plan.versions.len(), "change", "changes"))
                " · " (count(plan.rounds.len(), "review round", "review rounds"))
                @if let Some(session) = session {
                    " · written in " a href={"/sessions/" (session.id)} {
                        (session.title.clone().unwrap_or_else(|| format!("session {}", session.id)))
                    }
                }
                @if let Some(last) = plan.versions.last() { " · last changed " (when(last.at)) }
            }
        }
        div.retro-body {
            section.retro-named { (named_plan(plan)) }
            section.retro-timeline aria-label="History" {
                h2 { "History" span.retro-muted { " · " (count(total, "event", "events")) } }
                @if first > 1 {
                    p.retro-muted { "The latest " (NAMED_EVENTS_SHOWN) " events of " (total) "." }
                }
                ol.retro-entries {
                    @for (number, envelope) in (first..).zip(events) {
                        (entry(timeline, cache, &envelope, (number, link.as_deref()), false))
                    }
                }
            }
        }
    };
    Some(page(
        title,
        Libraries::default(),
        None,
        Some(timeline),
        body,
    ))
}
