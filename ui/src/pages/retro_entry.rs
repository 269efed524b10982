//! The pieces of a session's replay: one timeline entry per event, and the
//! state panel that shows the session as of a cursor.
//!
//! Questions are drawn with the form's own `question_block` inside a disabled
//! fieldset, so a round looks as the person saw it but cannot be edited; plan
//! versions carry the diff to the version before.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use maud::{Markup, PreEscaped, html};
use planb_core::{
    AnswerValue, Answers, Ask, AskSpec, AskStatus, Cursor, Delivery, Envelope, EventBody,
    NamedPlan, SessionId, Timestamp, Verdict,
};

use super::diff::{Folds, LineDiff};
use super::question::question_block;
use crate::markdown;
use planb_projections::Timeline;

/// `2024-05-01 12:30:05` (UTC), for people.
pub(super) fn when(at: Timestamp) -> String {
    let iso = at.to_iso8601();
    iso.get(..19).map_or(iso.clone(), |s| s.replace('T', " ")) + " UTC"
}

/// `1 question`, `2 questions`: `n` with the noun in the right number.
pub(super) fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// How a form reached the person, in words.
fn delivery_text(delivery: Delivery) -> &'static str {
    match delivery {
        Delivery::UrlElicitation => "Delivered by URL elicitation",
        Delivery::BrowserOpened => "Opened in the browser",
        Delivery::BrowserNotOpened => "URL printed for the person (browser not opened)",
    }
}

/// The first eight characters of an id, enough to tell ids apart on a page.
pub(super) fn short(id: &impl std::fmt::Display) -> String {
    id.to_string().chars().take(8).collect()
}

/// The diff of `previous` against `current` with a one-line summary above
/// it, or a note when nothing changed. The timeline passes
/// [`Folds::CountOnly`]: it shows every version's diff.
pub(super) fn diff_view(previous: &str, current: &str, folds: Folds) -> Markup {
    let diff = LineDiff::new(previous, current);
    html! {
        @if diff.is_unchanged() {
            p.diff-none.retro-diff-none { "No changes to the Markdown." }
        } @else {
            p.diff-summary {
                span.count-added { "+" (diff.added) " added" }
                ", "
                span.count-removed { "−" (diff.removed) " removed" }
            }
            (diff.rows(folds))
        }
    }
}

fn answer_text(value: &AnswerValue) -> String {
    match value {
        AnswerValue::Text(text) | AnswerValue::Choice(text) => text.clone(),
        AnswerValue::Choices(values) => values.join(", "),
        AnswerValue::Number(number) => number.to_string(),
    }
}

/// The answers as question label → answer, in spec order.
fn answers_list(spec: &AskSpec, answers: &Answers) -> Markup {
    html! {
        dl.retro-answers {
            @for question in &spec.questions {
                dt { (question.label) }
                dd {
                    @match answers.get(&question.id) {
                        Some(value) => (answer_text(value)),
                        None => span.retro-muted { "no answer" },
                    }
                }
            }
        }
    }
}

/// The form read-only, pre-filled with `answers` when given.
fn read_only_form(spec: &AskSpec, answers: Option<&Answers>, summary: &str) -> Markup {
    html! {
        details.retro-form {
            summary { (summary) " (" (count(spec.questions.len(), "question", "questions")) ")" }
            @if let Some(intro) = spec.intro.as_deref().filter(|i| !i.trim().is_empty()) {
                div.md.intro { (PreEscaped(markdown::render(intro))) }
            }
            fieldset.retro-fieldset disabled {
                legend.visually-hidden { (spec.title) }
                @for (index, question) in spec.questions.iter().enumerate() {
                    (question_block(question, index + 1, answers.and_then(|a| a.get(&question.id))))
                }
            }
        }
    }
}

fn status_class(status: AskStatus) -> &'static str {
    match status {
        AskStatus::Pending => "retro-badge badge-pending",
        AskStatus::Answered => "retro-badge badge-answered",
        AskStatus::TimedOut | AskStatus::Declined | AskStatus::Failed => "retro-badge badge-closed",
    }
}

fn verdict_badge(verdict: Option<Verdict>) -> Markup {
    html! {
        @match verdict {
            Some(Verdict::Approved) => span.retro-badge.badge-answered { "approved" },
            Some(Verdict::ChangesRequested) => span.retro-badge.badge-closed { "changes requested" },
            None => span.retro-badge.badge-pending { "awaiting review" },
        }
    }
}

/// The ask an ask event is about, as the log ends (its spec never changes).
fn ask_of<'a>(timeline: &'a Timeline, body: &EventBody) -> Option<&'a Ask> {
    body.ask().and_then(|id| timeline.state().ask(&id))
}

/// Rendered entry bodies a server keeps, in bytes: enough for the windows
/// of many long sessions, small beside the log itself.
const ENTRY_CACHE_BYTES_MAX: usize = 8 << 20;

/// Rendered entry bodies by cursor. An event's entry never changes once the
/// event is in the log (it depends only on that event and earlier ones, and
/// on ask specs, which never change), so a server renders each one once, as
/// long as it stays among the most recently rendered
/// [`ENTRY_CACHE_BYTES_MAX`] bytes.
#[derive(Debug, Default)]
pub struct EntryCache(Mutex<CachedEntries>);

#[derive(Debug, Default)]
struct CachedEntries {
    bodies: HashMap<Cursor, Arc<str>>,
    /// Insertion order, oldest first, for eviction.
    order: VecDeque<Cursor>,
    /// The sum of the lengths of `bodies`.
    bytes: usize,
}

impl EntryCache {
    fn entries(&self) -> MutexGuard<'_, CachedEntries> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn body(&self, timeline: &Timeline, envelope: &Envelope) -> Arc<str> {
        if let Some(body) = self.entries().bodies.get(&envelope.cursor) {
            return Arc::clone(body);
        }
        let body: Arc<str> = Arc::from(entry_body(timeline, envelope).into_string());
        let mut entries = self.entries();
        if entries
            .bodies
            .insert(envelope.cursor, Arc::clone(&body))
            .is_none()
        {
            entries.order.push_back(envelope.cursor);
            entries.bytes += body.len();
        }
        while entries.bytes > ENTRY_CACHE_BYTES_MAX {
            let Some(oldest) = entries.order.pop_front() else {
                break;
            };
            if let Some(evicted) = entries.bodies.remove(&oldest) {
                entries.bytes -= evicted.len();
            }
        }
        body
    }
}

/// Where an entry's number links: the session page (`base`, `""` for this
/// page) as of the event, or nowhere.
pub(super) type StateLink<'a> = Option<&'a str>;

/// One `li` of a timeline, its event the `number`th of the page's list
/// (from 1), its number a link to the state as of it at `link`. `future`
/// dims events after the scrubber's position.
pub(super) fn entry(
    timeline: &Timeline,
    cache: &EntryCache,
    envelope: &Envelope,
    (number, link): (usize, StateLink<'_>),
    future: bool,
) -> Markup {
    let body = &envelope.event.body;
    let cursor = envelope.cursor;
    html! {
        li.retro-entry.is-future[future] #{"ev-" (cursor)} data-cursor=(cursor)
            data-kind=(body.kind_name()) {
            div.retro-entry-meta {
                @match link {
                    Some(base) => a.retro-cursor href={(base) "?at=" (cursor)}
                        title={"Show the session as of this event (log cursor " (cursor) ")"} { (number) },
                    None => span.retro-cursor title={"Log cursor " (cursor)} { (number) },
                }
                time datetime=(envelope.event.at.to_iso8601()) { (when(envelope.event.at)) }
                span.retro-kind { (body.kind_name().replace('_', " ")) }
            }
            div.retro-entry-body { (PreEscaped(&*cache.body(timeline, envelope))) }
        }
    }
}

fn entry_body(timeline: &Timeline, envelope: &Envelope) -> Markup {
    let body = &envelope.event.body;
    match body {
        EventBody::SessionCreated {
            title,
            intent,
            project_path,
            ..
        } => html! {
            p { strong { "Session created" } @if let Some(t) = title { ": " (t) } }
            @if let Some(i) = intent { p.retro-muted { (i) } }
            @if let Some(p) = project_path { p.retro-muted { code { (p) } } }
        },
        EventBody::AskOpened { .. }
        | EventBody::AskDraftSaved { .. }
        | EventBody::AskAnswered { .. }
        | EventBody::AskLateAnswer { .. }
        | EventBody::AskTimedOut { .. }
        | EventBody::AskDeclined { .. }
        | EventBody::AskFailed { .. } => ask_entry(timeline, body),
        EventBody::PlanVersionSaved {
            session,
            version,
            title,
            content,
        } => plan_saved(timeline, *session, *version, title.as_deref(), content),
        EventBody::NamedPlanWritten { .. }
        | EventBody::NamedPlanEdited { .. }
        | EventBody::NamedPlanChangedOutside { .. }
        | EventBody::NamedPlanSubmitted { .. }
        | EventBody::NamedPlanReviewed { .. } => named_plan_entry(timeline, envelope),
        // The DAG engine's events belong to tasks, not sessions; a session's
        // replay never lists them.
        EventBody::TaskCreated { .. }
        | EventBody::RunStarted { .. }
        | EventBody::StepStarted { .. }
        | EventBody::StepSucceeded { .. }
        | EventBody::StepFailed { .. }
        | EventBody::ArtifactEdited { .. }
        | EventBody::StopRequested { .. }
        | EventBody::RunEnded { .. }
        | EventBody::RunLog { .. }
        | EventBody::PlanCreated { .. }
        | EventBody::PlanDeleted { .. }
        | EventBody::BlobStored { .. }
        | EventBody::TaskArchived { .. }
        | EventBody::TaskDeleted { .. } => html! {
            p { "Task event (" (body.kind_name().replace('_', " ")) ")" }
        },
    }
}

/// The entry of an event about an ask: the form shown, a draft, the
/// answers, or how waiting for them ended.
fn ask_entry(timeline: &Timeline, body: &EventBody) -> Markup {
    let ask = ask_of(timeline, body);
    let spec = ask.map(|a| &a.spec);
    match body {
        EventBody::AskOpened {
            spec,
            delivery,
            url,
            ..
        } => html! {
            p { strong { "Asked: " } (spec.title) }
            p.retro-muted { (delivery_text(*delivery)) " · " code.retro-url { (url) } }
            (read_only_form(spec, None, "The form as shown"))
        },
        EventBody::AskDraftSaved { answers, .. } => html! {
            p { "Draft autosaved (" (count(answers.0.len(), "answer", "answers")) " so far)" }
        },
        EventBody::AskAnswered { answers, .. } | EventBody::AskLateAnswer { answers, .. } => {
            let late = matches!(body, EventBody::AskLateAnswer { .. });
            html! {
                p {
                    strong { @if late { "Answered late" } @else { "Answered" } }
                    @if let Some(spec) = spec { ": " (spec.title) }
                }
                @if late { p.retro-muted { "The tool had already returned; the answers were kept." } }
                @if let Some(spec) = spec {
                    (answers_list(spec, answers))
                    (read_only_form(spec, Some(answers), "The form as submitted"))
                }
            }
        }
        EventBody::AskTimedOut { .. } => html! {
            p { strong { "Timed out" } @if let Some(spec) = spec { ": " (spec.title) } }
        },
        EventBody::AskDeclined { action, .. } => html! {
            p { strong { @match action { planb_core::DeclineAction::Decline => "Declined", planb_core::DeclineAction::Cancel => "Cancelled" } } @if let Some(spec) = spec { ": " (spec.title) } }
        },
        EventBody::AskFailed { detail, .. } => html! {
            p { strong { "Failed" } @if let Some(spec) = spec { ": " (spec.title) } }
            p.retro-muted { (detail) }
        },
        other => unreachable!(
            "ask_entry is only called for ask events: {}",
            other.kind_name()
        ),
    }
}

/// The entry of an event about a named plan: a change with its diff, a
/// submission, or a review.
fn named_plan_entry(timeline: &Timeline, envelope: &Envelope) -> Markup {
    let body = &envelope.event.body;
    match body {
        EventBody::NamedPlanWritten { plan, .. }
        | EventBody::NamedPlanEdited { plan, .. }
        | EventBody::NamedPlanChangedOutside { plan, .. } => {
            let verb = match body {
                EventBody::NamedPlanWritten { .. } => "written",
                EventBody::NamedPlanEdited { .. } => "edited",
                _ => "changed outside planb",
            };
            let previous = named_previous(timeline, envelope);
            html! {
                p { "Named plan " strong { (plan) } " " (verb) }
                @if let Some(after) = timeline.plan_content_after(envelope.cursor) {
                    details.retro-diff open {
                        summary { "Changes" }
                        (diff_view(previous.unwrap_or_default(), after, Folds::CountOnly))
                    }
                }
            }
        }
        EventBody::NamedPlanSubmitted { plan, round, .. } => html! {
            p { "Named plan " strong { (plan) } " submitted for review, round " (round) }
        },
        EventBody::NamedPlanReviewed {
            plan,
            round,
            verdict,
            feedback,
            comments,
            ..
        } => html! {
            p { "Review of " strong { (plan) } ", round " (round) ": " (verdict_badge(Some(*verdict))) }
            @if let Some(f) = feedback { blockquote.retro-feedback { (f) } }
            @if !comments.is_empty() {
                ul.retro-comments {
                    @for c in comments { li { q { (c.quote) } " — " (c.text) } }
                }
            }
        },
        other => unreachable!(
            "named_plan_entry is only called for named-plan events: {}",
            other.kind_name()
        ),
    }
}

/// The content of the named plan before the change at `envelope`.
fn named_previous<'a>(timeline: &'a Timeline, envelope: &Envelope) -> Option<&'a str> {
    let plan = timeline
        .state()
        .named_plan(&envelope.event.body.plan_key()?)?;
    let position = plan
        .versions
        .iter()
        .position(|v| v.cursor == envelope.cursor)?;
    let before = plan.versions.get(position.checked_sub(1)?)?;
    timeline.plan_content_after(before.cursor)
}

fn plan_saved(
    timeline: &Timeline,
    session: SessionId,
    version: u32,
    title: Option<&str>,
    content: &str,
) -> Markup {
    let previous = timeline
        .state()
        .session(&session)
        .and_then(|s| s.plans.iter().find(|p| p.version + 1 == version));
    html! {
        p {
            strong { "Plan v" (version) " saved" }
            @if let Some(t) = title { ": " (t) }
            " · " a href={"/sessions/" (session) "/plans/" (version)} { "open" }
            @if previous.is_some() {
                " · " a href={"/sessions/" (session) "/plans/" (version - 1) "/diff/" (version)} { "diff" }
            }
        }
        details.retro-diff open[version > 1] {
            summary { @if previous.is_some() { "Changes since v" (version - 1) } @else { "First version" } }
            (diff_view(previous.and_then(|p| timeline.plan_text(p)).unwrap_or(""), content, Folds::CountOnly))
        }
    }
}

/// The session as of `at`: its current plan, its questions answered and
/// pending, and the named plans tied to it.
pub(super) fn state_panel(timeline: &Timeline, session: &SessionId, at: Cursor) -> Markup {
    let view = timeline.session_at(session, at);
    // The page's own position: the session's events up to `at`, and the
    // last of them.
    let position = timeline.session_position(session, at);
    let total = timeline.session_len(session);
    let event = position
        .checked_sub(1)
        .and_then(|p| timeline.session_events(session, p..p + 1).next());
    html! {
        div.retro-state #state data-cursor=(at) {
            (super::retro_frame::incomplete_banner(timeline))
            p.eyebrow {
                @match &event {
                    Some(e) => {
                        "As of event " (position) " of " (total) " · " (when(e.event.at)) " · "
                        (e.event.body.kind_name().replace('_', " "))
                    }
                    None => { "Before the session's first event" }
                }
            }
            @if !view.exists() {
                p.retro-muted { "The session did not exist yet at this point." }
            } @else {
                (questions(&view.asks()))
                section.retro-plan {
                    @match view.latest_plan() {
                        None => { h2 { "Plan" } p.retro-muted #current-plan data-version="0" { "No plan saved yet." } }
                        Some(plan) => {
                            h2 { "Plan v" (plan.version) @if let Some(t) = &plan.title { " · " (t) } }
                            div.md.retro-plan-doc #current-plan data-version=(plan.version) {
                                (PreEscaped(markdown::render(timeline.plan_text(plan).unwrap_or(""))))
                            }
                        }
                    }
                }
                (named_plans(view.named_plans().collect()))
            }
        }
    }
}

fn questions(asks: &[&Ask]) -> Markup {
    let pending = asks
        .iter()
        .filter(|a| a.status == AskStatus::Pending)
        .count();
    html! {
        section.retro-questions {
            h2 { "Questions" span.retro-muted { " · " (asks.len() - pending) " closed, " (pending) " pending" } }
            @if asks.is_empty() { p.retro-muted { "No question asked yet." } }
            ul.retro-asks {
                @for ask in asks {
                    li.retro-ask data-status=(ask.status.to_string()) {
                        span class=(status_class(ask.status)) { (ask.status.to_string()) }
                        " " strong { (ask.spec.title) }
                        @if let Some(answers) = &ask.answers { (answers_list(&ask.spec, answers)) }
                        @for (at, answers) in &ask.late_answers {
                            p.retro-muted { "Late answer at " (when(*at)) }
                            (answers_list(&ask.spec, answers))
                        }
                    }
                }
            }
        }
    }
}

fn named_plans(plans: Vec<&NamedPlan>) -> Markup {
    html! {
        @if !plans.is_empty() {
            section.retro-named {
                h2 { "Named plans" }
                @for plan in plans { (named_plan(plan)) }
            }
        }
    }
}

/// A named plan with its review rounds, verdicts and comments.
pub(super) fn named_plan(plan: &NamedPlan) -> Markup {
    html! {
        article.retro-named-plan {
            h3 {
                (plan.name)
                span.retro-muted {
                    " · " (count(plan.versions.len(), "change", "changes")) ", "
                    (count(plan.rounds.len(), "review round", "review rounds"))
                }
            }
            @for (at, round) in plan.rounds.iter().enumerate() {
                div.retro-round {
                    p {
                        "Round " (round.round) " · submitted " (when(round.submitted_at)) " · "
                        @match (round.verdict, plan.rounds.get(at + 1)) {
                            // A later round was opened on other content: this
                            // one will not be reviewed.
                            (None, Some(next)) => span.retro-badge { "superseded by round " (next.round) },
                            (verdict, _) => (verdict_badge(verdict)),
                        }
                    }
                    @if let Some(f) = &round.feedback { blockquote.retro-feedback { (f) } }
                    @if !round.comments.is_empty() {
                        ul.retro-comments {
                            @for c in &round.comments { li { q { (c.quote) } " — " (c.text) } }
                        }
                    }
                }
            }
            details.retro-source {
                summary { "Current content" }
                div.md { (PreEscaped(markdown::render(&plan.content))) }
            }
        }
    }
}
