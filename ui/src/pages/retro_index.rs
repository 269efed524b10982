//! The index of `planb-retro`: everything a person did, in four sections
//! (sessions, named plans, tasks, execution plans), each with the most
//! recent activity first, under one search; the inbox of waiting questions
//! above them. Every id shown is as long as it must be to tell it apart
//! from every other id on the page.

use std::collections::BTreeMap;

use maud::{Markup, html};
use planb_core::text::unique_prefix_lengths;
use planb_core::{AskStatus, NamedPlan, PlanKey, Session, State, Task, Timestamp, Verdict};
use planb_projections::Timeline;

use super::retro::TeamLine;
use super::retro_entry::{count, when};
use super::retro_frame::{RetroFilter, TeamIndex, page};
use super::retro_task::{lifecycle_mark, state_of, summary};
use super::shell::Libraries;

/// Shortest id prefix shown.
const ID_CHARS_MIN: usize = 8;

/// What the index shows, filtered and in order.
struct Shown<'s> {
    sessions: Vec<&'s Session>,
    named: Vec<(&'s PlanKey, &'s NamedPlan)>,
    tasks: Vec<&'s Task>,
    plans: Vec<&'s Task>,
    /// Each id shown, and the prefix of it shown.
    ids: BTreeMap<String, String>,
}

impl<'s> Shown<'s> {
    fn of(state: &'s State, filter: RetroFilter<'_>, team: Option<&TeamIndex<'_>>) -> Shown<'s> {
        let mut sessions: Vec<&Session> = state
            .sessions()
            .values()
            .filter(|s| filter.keeps(s) && filter.keeps_member(s, team))
            .collect();
        sessions.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then(b.id.cmp(&a.id)));
        let mut named: Vec<(&PlanKey, &NamedPlan)> = state
            .named_plans()
            .iter()
            .filter(|(key, plan)| keeps_named(filter, key, plan, state, team))
            .collect();
        named.sort_by_key(|(key, plan)| (std::cmp::Reverse(named_activity(plan)), *key));
        let member = |task: &&Task| {
            filter.member.is_none()
                || team.is_none_or(|t| (t.task_member_of)(&task.id) == filter.member)
        };
        let mut all: Vec<&Task> = state
            .tasks()
            .values()
            .filter(member)
            .filter(|t| keeps_task(filter, t))
            .collect();
        all.sort_by_key(|t| (std::cmp::Reverse(task_activity(t)), std::cmp::Reverse(t.id)));
        let (plans, tasks) = all.into_iter().partition(|t| t.plan.is_some());
        let mut shown = Shown {
            sessions,
            named,
            tasks,
            plans,
            ids: BTreeMap::new(),
        };
        shown.ids = shown.short_ids();
        shown
    }

    /// Every id the page shows, each cut to the shortest prefix no other
    /// shown id shares (at least [`ID_CHARS_MIN`] characters).
    fn short_ids(&self) -> BTreeMap<String, String> {
        let mut ids: Vec<String> = self.sessions.iter().map(|s| s.id.to_string()).collect();
        let tasks = self.tasks.iter().chain(&self.plans);
        ids.extend(tasks.map(|t| t.id.to_string()));
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        let lengths = unique_prefix_lengths(&refs, ID_CHARS_MIN);
        ids.iter()
            .zip(lengths)
            .map(|(id, n)| (id.clone(), id.chars().take(n).collect()))
            .collect()
    }

    fn id(&self, id: &impl std::fmt::Display) -> String {
        let id = id.to_string();
        self.ids.get(&id).cloned().unwrap_or(id)
    }
}

/// When a named plan last changed or was submitted or reviewed.
fn named_activity(plan: &NamedPlan) -> Timestamp {
    let changed = plan.versions.last().map(|v| v.at);
    let reviewed = plan
        .rounds
        .last()
        .map(|r| r.reviewed_at.unwrap_or(r.submitted_at));
    changed.max(reviewed).unwrap_or(Timestamp(0))
}

/// When a task (or execution plan) was created or its latest run last
/// moved.
fn task_activity(task: &Task) -> Timestamp {
    let run = task
        .runs
        .last()
        .map(|r| r.ended_at.unwrap_or(r.last_progress_at));
    run.map_or(task.created_at, |at| at.max(task.created_at))
}

fn matches(query: Option<&str>, texts: &[&str], id: &str) -> bool {
    query.is_none_or(|q| {
        let q = q.to_lowercase();
        texts.iter().any(|t| t.to_lowercase().contains(&q)) || id.starts_with(&q)
    })
}

fn keeps_named(
    filter: RetroFilter<'_>,
    key: &PlanKey,
    plan: &NamedPlan,
    state: &State,
    team: Option<&TeamIndex<'_>>,
) -> bool {
    let project_ok = filter
        .project
        .is_none_or(|p| key.dir == p || key.dir.starts_with(&format!("{p}/")));
    let member_ok = match (filter.member, team, plan.session) {
        (Some(member), Some(team), Some(session)) => (team.member_of)(&session) == Some(member),
        (Some(_), Some(_), None) => false,
        _ => true,
    };
    let session_title = plan
        .session
        .and_then(|s| state.session(&s))
        .and_then(|s| s.title.as_deref())
        .unwrap_or_default();
    let texts = [plan.name.as_str(), key.dir.as_str(), session_title];
    project_ok && member_ok && matches(filter.query, &texts, "")
}

/// Tasks and execution plans record no project: a project filter leaves
/// them all.
fn keeps_task(filter: RetroFilter<'_>, task: &Task) -> bool {
    let title = task
        .plan
        .as_ref()
        .map_or(task.prompt.as_str(), |p| p.title.as_str());
    let texts = [title, task.pipeline.as_str()];
    matches(filter.query, &texts, &task.id.to_string())
}

/// The replay's index. `problem`, when the log cannot be read, is shown as
/// a banner above everything; so is `team` when shipping to a team
/// database fails (a quiet line when it works).
pub fn retro_index_page(
    timeline: &Timeline,
    filter: RetroFilter<'_>,
    problem: Option<&str>,
    team: Option<&TeamLine>,
    team_index: Option<&TeamIndex<'_>>,
) -> Markup {
    let state = timeline.state();
    let shown = Shown::of(state, filter, team_index);
    let body = html! {
        header.card-header {
            p.eyebrow { "planb replay" }
            h1.form-title { "What happened" }
            p.retro-muted {
                (count(state.sessions().len(), "session", "sessions")) " · "
                (count(state.named_plans().len(), "named plan", "named plans")) " · "
                (count(state.tasks().len() - state.exec_plans().count(), "task", "tasks")) " · "
                (count(state.exec_plans().count(), "execution plan", "execution plans"))
            }
        }
        div.retro-body {
            @if let Some(problem) = problem {
                div.banner.banner-error role="alert" { (problem) }
            }
            @if let Some(team) = team {
                @if team.failing {
                    div.banner #team-status role="alert" { (team.text) }
                } @else {
                    p.retro-muted #team-status { (team.text) }
                }
            }
            (inbox_section(state))
            @if let Some(team_index) = team_index { (team_section(team_index)) }
            (filter_form(state, filter, team_index))
            (sessions_section(state, &shown, team_index))
            (named_section(state, &shown))
            (tasks_section(&shown, team_index, filter, false))
            (tasks_section(&shown, team_index, filter, true))
        }
    };
    page(
        "What happened",
        Libraries::default(),
        Some("/events".into()),
        Some(timeline),
        body,
    )
}

/// The inbox of the index: the questions waiting for an answer.
fn inbox_section(state: &State) -> Markup {
    let pending: Vec<_> = state.pending_asks().collect();
    html! {
        section #inbox .retro-inbox aria-labelledby="inbox-title" data-swap {
            h2 #inbox-title { "Waiting for an answer" span.retro-muted { " · " (pending.len()) } }
            @if pending.is_empty() {
                p.retro-muted { "No question is waiting." }
            } @else {
                // The log holds only a hash of the form's secret, so the
                // link lives with the agent: this names the ask it reopens.
                p.retro-muted {
                    "The agent that asked reopens a form: ask it to call "
                    code { "ask_user" } " with the question's " code { "askId" } "."
                }
                ul.retro-list {
                    @for ask in &pending {
                        li {
                            strong { (ask.spec.title) }
                            " "
                            code.retro-url title="ask_user {\"askId\": …} reopens the form" { "askId " (ask.id) }
                            span.retro-muted {
                                " · asked " (when(ask.created_at)) " in "
                                a href={"/sessions/" (ask.session)} {
                                    (state.session(&ask.session).and_then(|s| s.title.clone()).unwrap_or_else(|| format!("session {}", ask.session)))
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The machines of a team replay, each with its member, host and events.
fn team_section(team_index: &TeamIndex<'_>) -> Markup {
    html! {
        section #team .retro-team aria-labelledby="team-title" data-swap {
            h2 #team-title { "Team" span.retro-muted { " · " (count(team_index.origins.len(), "machine", "machines")) } }
            ul.retro-list {
                @for (member, host, events) in &team_index.origins {
                    li { strong { (member) } span.retro-muted { " · " (host) " · " (count(*events as usize, "event", "events")) } }
                }
            }
        }
    }
}

/// The index's search form: text, project and, in a team replay, member.
fn filter_form(
    state: &State,
    filter: RetroFilter<'_>,
    team_index: Option<&TeamIndex<'_>>,
) -> Markup {
    let mut members: Vec<&str> = team_index
        .map(|t| t.origins.iter().map(|o| o.0).collect())
        .unwrap_or_default();
    members.sort_unstable();
    members.dedup();
    let mut projects: Vec<&str> = state
        .sessions()
        .values()
        .filter_map(|s| s.project_path.as_deref())
        .collect();
    projects.sort_unstable();
    projects.dedup();
    html! {
        form.retro-filter method="get" action="/" role="search" {
            label for="filter-q" { "Search" }
            input #filter-q .text-input type="search" name="q" value=[filter.query]
                placeholder="Title, name, project or id";
            label for="filter-project" { "Project" }
            select #filter-project name="project" {
                option value="" { "All projects" }
                @for p in &projects {
                    option value=(p) selected[filter.project == Some(*p)] { (p) }
                }
            }
            @if team_index.is_some() {
                label for="filter-member" { "Member" }
                select #filter-member name="member" {
                    option value="" { "Everyone" }
                    @for m in &members {
                        option value=(m) selected[filter.member == Some(*m)] { (m) }
                    }
                }
            }
            button.btn.btn-secondary type="submit" { "Filter" }
        }
    }
}

/// The sessions the filter keeps, each with its counts and whether a
/// question of it waits.
fn sessions_section(state: &State, shown: &Shown<'_>, team: Option<&TeamIndex<'_>>) -> Markup {
    html! {
        section #sessions .retro-sessions aria-labelledby="sessions-title" data-swap {
            h2 #sessions-title { "Sessions" span.retro-muted { " · " (shown.sessions.len()) } }
            @if shown.sessions.is_empty() {
                p.retro-muted { "No session matches." }
            }
            ul.retro-list {
                @for s in &shown.sessions {
                    @let waiting = s.asks.iter().filter_map(|a| state.ask(a)).any(|a| a.status == AskStatus::Pending);
                    li.retro-session.has-pending[waiting] {
                        a.retro-session-title href={"/sessions/" (s.id)} {
                            (s.title.clone().unwrap_or_else(|| format!("Session {}", shown.id(&s.id))))
                        }
                        @if waiting { " " span.retro-badge.badge-pending { "question waiting" } }
                        @if let Some(intent) = &s.intent { p.retro-intent { (intent) } }
                        p.retro-muted {
                            @if let Some(member) = team.and_then(|t| (t.member_of)(&s.id)) { "by " (member) " · " }
                            code { (shown.id(&s.id)) } " · "
                            @if let Some(p) = &s.project_path { code { (p) } " · " }
                            (count(s.asks.len(), "question", "questions")) " · "
                            (count(s.plans.len(), "plan version", "plan versions")) " · last activity "
                            (when(s.updated_at))
                        }
                    }
                }
            }
        }
    }
}

/// The address of a named plan's page.
pub(super) fn named_href(key: &PlanKey) -> String {
    format!(
        "/named?dir={}&name={}",
        query_escape(&key.dir),
        query_escape(key.name.as_str())
    )
}

/// `text` for a URL's query: every byte but letters, digits and `-._~`
/// percent-encoded.
fn query_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The latest round's verdict as a badge, or that it was never submitted.
pub(super) fn review_badge(plan: &NamedPlan) -> Markup {
    html! {
        @match plan.rounds.last().map(|r| r.verdict) {
            None => span.retro-badge { "not submitted" },
            Some(Some(Verdict::Approved)) => span.retro-badge.badge-answered { "approved" },
            Some(Some(Verdict::ChangesRequested)) => span.retro-badge.badge-closed { "changes requested" },
            Some(None) => span.retro-badge.badge-pending { "awaiting review" },
        }
    }
}

/// The named plans the filter keeps, by plans directory (the directory of
/// the most recent activity first), each with its rounds and last verdict.
fn named_section(state: &State, shown: &Shown<'_>) -> Markup {
    let mut dirs: Vec<(&str, Vec<(&PlanKey, &NamedPlan)>)> = Vec::new();
    for &(key, plan) in &shown.named {
        match dirs.iter_mut().find(|(dir, _)| *dir == key.dir) {
            Some((_, plans)) => plans.push((key, plan)),
            None => dirs.push((key.dir.as_str(), vec![(key, plan)])),
        }
    }
    html! {
        section #named .retro-named-index aria-labelledby="named-title" data-swap {
            h2 #named-title { "Named plans" span.retro-muted { " · " (shown.named.len()) } }
            @if shown.named.is_empty() {
                p.retro-muted { "No named plan matches. An agent writes one with write_plan and submits it for review with submit_plan." }
            }
            @for (dir, plans) in &dirs {
                h3.retro-dir { "in " code { (if dir.is_empty() { "(no directory recorded)" } else { dir }) } }
                ul.retro-list {
                    @for (key, plan) in plans {
                        li.retro-named-item {
                            a.retro-session-title href=(named_href(key)) { (plan.name) }
                            " " (review_badge(plan))
                            p.retro-muted {
                                (count(plan.versions.len(), "change", "changes")) " · "
                                (count(plan.rounds.len(), "review round", "review rounds"))
                                @if let Some(session) = plan.session.and_then(|s| state.session(&s)) {
                                    " · in " a href={"/sessions/" (session.id)} {
                                        (session.title.clone().unwrap_or_else(|| format!("session {}", session.id)))
                                    }
                                }
                                " · last activity " (when(named_activity(plan)))
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The tasks (or, with `plans`, the execution plans) the filter keeps.
fn tasks_section(
    shown: &Shown<'_>,
    team: Option<&TeamIndex<'_>>,
    filter: RetroFilter<'_>,
    plans: bool,
) -> Markup {
    let (id, title, list) = match plans {
        false => ("tasks", "Tasks", &shown.tasks),
        true => ("plans", "Execution plans", &shown.plans),
    };
    let member_of = |task: &Task| team.and_then(|t| (t.task_member_of)(&task.id));
    html! {
        section.retro-tasks #(id) aria-labelledby={(id) "-title"} data-swap {
            h2 #{(id) "-title"} { (title) span.retro-muted { " · " (list.len()) } }
            @if filter.project.is_some() {
                p.retro-muted { (title) " do not record their project: the project filter leaves them all." }
            }
            @if list.is_empty() {
                p.retro-muted {
                    @if plans { "No execution plan matches. An agent makes one with plan_create." }
                    @else { "No task matches. An agent starts one with task_create." }
                }
            } @else {
                ul.retro-list {
                    @for task in list {
                        li.retro-task {
                            a.retro-session-title href={"/tasks/" (task.id)} {
                                @match &task.plan {
                                    Some(plan) => (plan.title),
                                    None => (summary(&task.prompt)),
                                }
                            }
                            " " span.retro-badge.{"task-" (state_of(task))} { (state_of(task)) }
                            @if let Some(mark) = lifecycle_mark(task) { " " span.retro-badge { (mark) } }
                            p.retro-muted {
                                @if let Some(by) = member_of(task) { "by " (by) " · " }
                                code { (shown.id(&task.id)) } " · "
                                @if task.plan.is_none() { (task.pipeline) " → " (task.target) " · " (task.speed) " · " }
                                (count(task.runs.len(), "run", "runs"))
                                " · last activity " (when(task_activity(task)))
                            }
                        }
                    }
                }
            }
        }
    }
}
