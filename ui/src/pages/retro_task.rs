//! The task pages of `planb-retro`: the tasks list on the index, a task's
//! DAG with every step's state as of a cursor (time travel over the task's
//! events), its runs and run log, and a step's prompt, answer and every
//! version of its artifact with the diff between consecutive ones.
//!
//! Like every page here these do no IO: the server reads the blobs, resolves
//! the pipeline and rebuilds the prompt, and hands the texts in.

use std::collections::{BTreeMap, BTreeSet};

use maud::{Markup, PreEscaped, html};
use planb_core::dag::{Action, Pipeline, StepDef, StepId};
use planb_core::exec_plan::{self, ExecPlan, PlanStep, render_dag};
use planb_core::{Cursor, Envelope, EventBody, RunId, RunOutcome, Task, TaskId, Timestamp};
use planb_projections::{StepMark, TaskAt, Timeline};

use super::dag_graph::{GraphNode, dag_graph};
use super::diff::Folds;
use super::retro_entry::{count, diff_view, short, when};
use super::retro_frame::page;
use super::shell::Libraries;
use crate::markdown;
use planb_core::text::counted;

pub(super) fn state_of(task: &Task) -> &'static str {
    task.runs.last().map_or("created", |run| run.state.as_str())
}

/// Whether a task's prompt is kept off the replay (`PLANB_REDACT_PROMPTS`):
/// set once by the process that serves it.
static REDACT_PROMPTS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// What a page shows in place of a prompt kept off it.
pub const REDACTED: &str = "[prompt redacted]";

/// Keeps tasks' prompts off every page rendered after this (their titles
/// and the prompts steps sent), for `PLANB_REDACT_PROMPTS=1`.
pub fn redact_prompts(on: bool) {
    REDACT_PROMPTS.store(on, std::sync::atomic::Ordering::Relaxed);
}

fn redacted() -> bool {
    REDACT_PROMPTS.load(std::sync::atomic::Ordering::Relaxed)
}

pub(super) fn summary(prompt: &str) -> String {
    if redacted() {
        return REDACTED.to_owned();
    }
    let line = prompt.lines().next().unwrap_or("").trim();
    let mut text: String = line.chars().take(120).collect();
    if line.chars().count() > 120 {
        text.push('…');
    }
    text
}

/// `deleted` or `archived` for a task (or plan) in that state.
pub(super) fn lifecycle_mark(task: &Task) -> Option<&'static str> {
    match task.lifecycle() {
        planb_core::Lifecycle::Deleted | planb_core::Lifecycle::Archived => {
            Some(task.lifecycle().as_str())
        }
        planb_core::Lifecycle::Created | planb_core::Lifecycle::Active => None,
    }
}

/// What the task page shows besides the task as of the cursor.
#[derive(Debug)]
pub struct TaskView<'a> {
    /// The task as of the cursor, with its step marks and events.
    pub at: &'a TaskAt<'a>,
    /// What its steps are.
    pub steps: Steps<'a>,
    /// Steps whose artifact no longer matches what they would read now (an
    /// upstream artifact changed since): the next run does them again.
    pub out_of_date: &'a BTreeSet<String>,
    /// The cursors of the task's events, in order.
    pub cursors: &'a [Cursor],
    /// The cursor shown.
    pub cursor: Cursor,
    /// The revised plans made of this plan's failed runs, oldest first.
    pub revisions: &'a [RevisionLink],
}

/// A revised plan as the plan it revises links to it.
#[derive(Debug, Clone, PartialEq)]
pub struct RevisionLink {
    /// The revised plan.
    pub plan: TaskId,
    /// Which revision, from 1.
    pub number: u32,
    /// The step that failed and its error.
    pub step: String,
    pub error: String,
    /// Its last run's state, or `not run`.
    pub state: &'static str,
}

/// What a revised plan revises, and the revised plans made of this one.
fn replanning(view: &TaskView<'_>) -> Markup {
    let revises = match view.steps {
        Steps::Plan(Ok(plan)) => plan.revises.as_ref(),
        _ => None,
    };
    html! {
        @if let Some(r) = revises {
            p.retro-revises {
                "Revised plan " (r.number) " of "
                a href={"/tasks/" (r.plan)} { "plan " code { (r.plan.get(..8).unwrap_or(&r.plan)) } }
                ", made when its run failed at step " (r.step) ": " (r.error)
            }
        }
        @if !view.revisions.is_empty() {
            section.retro-runs aria-label="Re-planned" {
                h2 { "Re-planned" }
                ol.retro-list {
                    @for r in view.revisions {
                        li {
                            "Step " (r.step) " failed: " (r.error) " → "
                            a href={"/tasks/" (r.plan)} { "revised plan " (r.number) }
                            " · " strong { (r.state) }
                        }
                    }
                }
            }
        }
    }
}

/// What a task's steps are, or why they cannot be read.
#[derive(Debug, Clone, Copy)]
pub enum Steps<'a> {
    /// A pipeline's model and render steps, in layers.
    Pipeline(Result<&'a Pipeline, &'a dyn std::error::Error>),
    /// An execution plan's tool calls, in batches.
    Plan(Result<&'a ExecPlan, &'a dyn std::error::Error>),
}

/// Links to the pages of the steps `needs` names, as of `cursor`.
fn need_links(task: TaskId, cursor: Cursor, needs: &[&str]) -> Markup {
    html! {
        @for (i, need) in needs.iter().enumerate() {
            @if i > 0 { ", " }
            a href={"/tasks/" (task) "/steps/" (need) "?at=" (cursor)} { (need) }
        }
    }
}

/// One step of a DAG: a link to its page, its state, and (for readers
/// who do not see the arrows) what it waits for.
/// Where a step stands besides its mark: out of date (an artifact it reads
/// changed since), or outside the target of the task's runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    InTarget,
    Stale,
    Outside,
}

fn dag_step<'a>(
    href: &str,
    id: &'a str,
    (label, label_chars): (Markup, usize),
    mark: Option<&StepMark>,
    place: Place,
    needs: Vec<&'a str>,
) -> GraphNode<'a> {
    let state = mark_text(mark, place);
    let text = (label_chars, state.chars().count());
    let body = html! {
        a href=(href) title=(id) { strong { (label) } }
        span.dag-state { (state) }
        @if !needs.is_empty() {
            span.visually-hidden { "needs " (needs.join(", ")) }
        }
    };
    GraphNode {
        id,
        body,
        class: mark_class(mark, place),
        needs,
        text,
    }
}

fn mark_class(mark: Option<&StepMark>, place: Place) -> &'static str {
    match mark {
        _ if place == Place::Stale => "is-stale",
        None if place == Place::Outside => "is-outside",
        None => "is-pending",
        Some(StepMark::Failed { class, .. }) if class == "cancelled" => "is-cancelled",
        Some(StepMark::Running { .. }) => "is-running",
        Some(StepMark::Succeeded { .. }) => "is-done",
        Some(StepMark::Edited { .. }) => "is-edited",
        Some(StepMark::Failed { .. }) => "is-failed",
        Some(StepMark::Interrupted { .. }) => "is-interrupted",
    }
}

fn mark_text(mark: Option<&StepMark>, place: Place) -> String {
    let text = match mark {
        None if place == Place::Outside => "not in this run's target".to_owned(),
        None => "waiting".to_owned(),
        Some(StepMark::Failed { class, .. }) if class == "cancelled" => "cancelled".to_owned(),
        Some(StepMark::Running { attempt, .. }) => format!("running (attempt {attempt})"),
        Some(StepMark::Succeeded { duration_ms, .. }) => format!("done in {duration_ms} ms"),
        Some(StepMark::Edited { by }) => format!("edited ({by})"),
        Some(StepMark::Failed { class, .. }) => format!("failed: {class}"),
        Some(StepMark::Interrupted { .. }) => "interrupted".to_owned(),
    };
    if place == Place::Stale {
        format!("{text} · out of date")
    } else {
        text
    }
}

/// The pipeline's steps in layers: a step's layer is one more than its
/// deepest need's, so every arrow points to a later column. Steps may be
/// defined before their needs; the pipeline has no cycle (checked when it
/// was defined), so the recursion ends.
fn layers(pipeline: &Pipeline) -> Vec<Vec<&StepDef>> {
    fn depth<'p>(
        pipeline: &'p Pipeline,
        step: &'p StepDef,
        memo: &mut BTreeMap<&'p StepId, usize>,
    ) -> usize {
        if let Some(d) = memo.get(&step.id) {
            return *d;
        }
        let d = step
            .needs
            .iter()
            .filter_map(|n| pipeline.step(n))
            .map(|need| depth(pipeline, need, memo) + 1)
            .max()
            .unwrap_or(0);
        memo.insert(&step.id, d);
        d
    }
    let mut memo = BTreeMap::new();
    let mut out: Vec<Vec<&StepDef>> = Vec::new();
    for step in pipeline.steps() {
        let d = depth(pipeline, step, &mut memo);
        if out.len() <= d {
            out.resize_with(d + 1, Vec::new);
        }
        out[d].push(step);
    }
    out
}

fn event_line(envelope: &Envelope) -> Option<Markup> {
    let text = match &envelope.event.body {
        EventBody::TaskCreated {
            pipeline,
            target,
            speed,
            ..
        } => {
            format!("task created: {pipeline} → {target}, {speed}")
        }
        EventBody::PlanCreated { title, .. } => format!("execution plan created: {title}"),
        EventBody::PlanDeleted { .. } => "execution plan deleted".to_owned(),
        EventBody::TaskArchived { .. } => "task archived".to_owned(),
        EventBody::TaskDeleted { .. } => "task deleted".to_owned(),
        EventBody::RunStarted {
            run, resumed_from, ..
        } => match resumed_from {
            Some(from) => format!("run {} started, resuming {}", short(run), short(from)),
            None => format!("run {} started", short(run)),
        },
        EventBody::StepStarted { step, attempt, .. } => {
            format!("{step} started (attempt {attempt})")
        }
        EventBody::StepSucceeded {
            step,
            bytes,
            duration_ms,
            tokens_in,
            tokens_out,
            ..
        } => {
            // A tool call's step reads no model: no token counts to show.
            let tokens = if tokens_in + tokens_out > 0 {
                format!(", {tokens_in} tokens in, {tokens_out} out")
            } else {
                String::new()
            };
            format!("{step} done: {bytes} bytes in {duration_ms} ms{tokens}")
        }
        EventBody::StepFailed {
            step,
            class,
            message,
            ..
        } => format!("{step} failed ({class}): {message}"),
        EventBody::ArtifactEdited {
            step, by, bytes, ..
        } => format!("{step} edited by {by}: {bytes} bytes"),
        EventBody::StopRequested { .. } => "stop requested".to_owned(),
        EventBody::RunEnded {
            outcome, reason, ..
        } => {
            let outcome = match outcome {
                RunOutcome::Completed => "completed",
                RunOutcome::Stopped => "stopped",
                RunOutcome::Failed => "failed",
            };
            match reason {
                Some(reason) => format!("run ended {outcome}: {reason}"),
                None => format!("run ended {outcome}"),
            }
        }
        _ => return None,
    };
    Some(html! { (text) })
}

/// Runs shown on a task's page: the latest.
pub const RUNS_SHOWN: usize = 50;

/// A task as of `view.cursor`: the scrubber over its events, the DAG with
/// each step's state, its latest runs, its events and its run log.
pub fn retro_task_page(timeline: &Timeline, view: &TaskView<'_>) -> Markup {
    let task = &view.at.task;
    let is_plan = matches!(view.steps, Steps::Plan(_));
    let live = (view.cursor >= timeline.last_cursor()).then(|| "/events".to_owned());
    let title = summary(&task.prompt);
    let body = html! {
        header.card-header {
            a.retro-back href="/" { "‹ Everything" }
            p.eyebrow { @if is_plan { "Plan run replay" } @else { "Task replay" } }
            h1.form-title { (title) }
            p.retro-muted {
                code { (task.id) } " · "
                @if is_plan { "execution plan" }
                @else { (task.pipeline) " v" (task.pipeline_version) " → " (task.target) " · " (task.speed) }
                @if let Some(mark) = lifecycle_mark(task) { " " span.retro-badge { (mark) } }
                " · created " (when(task.created_at))
            }
        }
        div.retro-body {
            (task_scrubber(view))
            div #task-live data-swap {
                p.retro-muted.retro-progress {
                    "State: " strong.{"task-" (state_of(task))} { (state_of(task)) }
                    @if let Some(progress) = progress_line(view) { " · " (progress) }
                    " · " (count(task.successes.len(), "artifact", "artifacts"))
                    @if let Some(run) = task.runs.last() {
                        @if let Some(reason) = &run.reason { " · " (reason) }
                    }
                }
                (replanning(view))
                section.retro-dag aria-label="Steps" {
                    h2 { "Steps" }
                    @match view.steps {
                        Steps::Plan(Ok(plan)) => (plan_dag(plan, view)),
                        Steps::Plan(Err(problem)) => {
                            div.banner.banner-error role="alert" { "The plan cannot be read: " (problem.to_string()) }
                        },
                        Steps::Pipeline(Err(problem)) => {
                            div.banner.banner-error role="alert" { "The pipeline cannot be read: " (problem.to_string()) }
                        },
                        Steps::Pipeline(Ok(pipeline)) => (pipeline_dag(pipeline, view)),
                    }
                }
                (runs_section(task))
                div.retro-layout {
                    (task_events(view))
                    (run_log(task))
                }
            }
        }
    };
    page(&title, Libraries::default(), live, Some(timeline), body)
}

/// How far the latest run as of the cursor has come, as the agent is told
/// it: `12 of 25 steps · 48 % · 0:12 · running: Dependencies`.
fn progress_line(view: &TaskView<'_>) -> Option<String> {
    let task = &view.at.task;
    let (done, total, current) = match view.steps {
        Steps::Pipeline(Ok(pipeline)) => {
            let progress = task.progress(pipeline);
            let title = progress.current.map(|id| {
                StepId::parse(&id)
                    .ok()
                    .and_then(|step| pipeline.step(&step))
                    .map_or(id, |step| step.title.clone())
            });
            (progress.done, progress.total, title)
        }
        Steps::Plan(Ok(plan)) => {
            let mark = |s: &&PlanStep| view.at.steps.get(&s.index);
            let done = plan
                .steps
                .iter()
                .filter(|s| matches!(mark(s), Some(StepMark::Succeeded { .. })))
                .count();
            let running = plan
                .steps
                .iter()
                .find(|s| matches!(mark(s), Some(StepMark::Running { .. })));
            (done, plan.steps.len(), running.map(|s| s.title.clone()))
        }
        _ => return None,
    };
    if total == 0 {
        return None;
    }
    let percent = (done * 100 + total / 2) / total;
    let mut line = format!(
        "{done} of {} · {percent} %",
        counted(total, "step", "steps")
    );
    if let Some(run) = task.runs.last() {
        let now = view.at.events.last().map_or(run.started_at, |e| e.event.at);
        let end = run.ended_at.unwrap_or(now);
        let ms = u64::try_from(end.0.saturating_sub(run.started_at.0)).unwrap_or(0);
        line.push_str(&format!(" · {}", clock(ms)));
    }
    if let Some(current) = current {
        line.push_str(&format!(" · running: {current}"));
    }
    Some(line)
}

/// `0:12`, `12:05`, `1:02:03`: a duration in milliseconds as a clock shows it.
fn clock(ms: u64) -> String {
    let seconds = ms / 1000;
    let (h, m, s) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
    if h > 0 {
        format!("{h}:{m:02}:{s:02}")
    } else {
        format!("{m}:{s:02}")
    }
}

/// The task page's scrubber: links to the events before and after the one
/// shown, and to the latest.
fn task_scrubber(view: &TaskView<'_>) -> Markup {
    let id = view.at.task.id;
    let position = view
        .cursors
        .partition_point(|c| *c <= view.cursor)
        .saturating_sub(1);
    let last = view.cursors.len().saturating_sub(1);
    let at_link = |index: usize| format!("/tasks/{id}?at={}", view.cursors[index]);
    html! {
        nav #task-scrubber .retro-scrubber aria-label="Replay position"
            data-base={"/tasks/" (id) "?pos="} {
            @if position > 0 {
                a.btn.btn-ghost href=(at_link(position - 1)) rel="prev" { "‹ Prev" }
            }
            input #task-scrub .retro-range type="range" min="0" max=(last) value=(position) step="1"
                aria-label="Replay position";
            @if position < last {
                a.btn.btn-ghost href=(at_link(position + 1)) rel="next" { "Next ›" }
            }
            span.retro-muted aria-live="polite" {
                "Event " (position + 1) " of " (view.cursors.len())
                span title="The event's place in the whole log" { " · log cursor " (view.cursor) }
            }
            @if position < last {
                a.retro-permalink href={"/tasks/" (id)} { "Latest" }
            }
        }
    }
}

/// A task's latest [`RUNS_SHOWN`] runs, each with its state and times.
fn runs_section(task: &Task) -> Markup {
    html! {
        section.retro-runs aria-label="Runs" {
            h2 { "Runs" }
            @let earlier = task.runs.len().saturating_sub(RUNS_SHOWN);
            @if earlier > 0 {
                p.retro-muted { "The " (RUNS_SHOWN) " latest of " (task.runs.len()) " runs by this point." }
            }
            ol.retro-list start=(earlier + 1) {
                @for run in task.runs.iter().skip(earlier) {
                    li {
                        code { (short(&run.id)) } " · " strong { (run.state.as_str()) }
                        " · started " (when(run.started_at))
                        @if let Some(ended) = run.ended_at { " · ended " (when(ended)) }
                        " · " (count(run.succeeded.len(), "step done", "steps done"))
                        @if let Some(reason) = &run.reason { " · " (reason) }
                        @if let Some(step) = &run.failed_step { " (step " (step) ")" }
                        span.retro-muted { " · worker pid " (run.owner_pid) " on " (run.host) }
                    }
                }
            }
        }
    }
}

/// A task's latest 200 events by the cursor, newest first.
fn task_events(view: &TaskView<'_>) -> Markup {
    let id = view.at.task.id;
    html! {
        section.retro-timeline aria-label="Events" {
            h2 { "Events" }
            ol.retro-entries {
                @for (number, envelope) in view.at.events.iter().enumerate().rev().take(200) {
                    @if let Some(line) = event_line(envelope) {
                        li.retro-entry.is-current[envelope.cursor == view.cursor] {
                            a.retro-cursor href={"/tasks/" (id) "?at=" (envelope.cursor)}
                                title={"Log cursor " (envelope.cursor)} { (number + 1) }
                            " " span.retro-muted { (when(envelope.event.at)) } " " (line)
                        }
                    }
                }
            }
        }
    }
}

/// The tail of a task's run log.
fn run_log(task: &Task) -> Markup {
    html! {
        section.retro-runlog aria-label="Run log" {
            h2 { "Run log" }
            @if task.log_tail.is_empty() {
                p.retro-muted { "No line yet." }
            } @else {
                pre.run-log {
                    @for line in &task.log_tail {
                        (line.at.to_iso8601()) " " (line.text) "\n"
                    }
                }
            }
        }
    }
}

/// One version of a step's artifact.
#[derive(Debug, Clone)]
pub struct ArtifactVersion {
    /// The event that recorded it.
    pub cursor: Cursor,
    /// When.
    pub at: planb_core::Timestamp,
    /// Who made it: a run's step, or an edit.
    pub by: String,
    /// Its text (lossy UTF-8), or why it cannot be read.
    pub text: Result<String, NotShown>,
}

/// Why something the log recorded cannot be shown on a page.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotShown {
    /// Its blob cannot be read.
    #[error("the {what} cannot be read: {why}")]
    Unreadable {
        /// What it is (`artifact`, `call`, `result`).
        what: &'static str,
        /// The read's failure.
        why: String,
    },
    /// The call's blob was not recorded.
    #[error("the call was not recorded")]
    NotRecorded,
    /// The step asks no model, so it has no prompt.
    #[error("this step calls no model: it is built from its inputs")]
    NoModel,
    /// An input of the prompt had no artifact at the time.
    #[error("{0} had no artifact then")]
    NoArtifact(String),
    /// An input of the prompt cannot be shown.
    #[error("{need}: {why}")]
    Input {
        /// The step whose artifact it is.
        need: String,
        /// Why.
        why: Box<NotShown>,
    },
}

/// The mark for a step's state as of the cursor (○ ◉ ● ✗).
fn ascii_mark(mark: Option<&StepMark>) -> exec_plan::StepMark {
    match mark {
        Some(StepMark::Running { .. }) => exec_plan::StepMark::Running,
        Some(StepMark::Succeeded { .. }) => exec_plan::StepMark::Completed,
        Some(StepMark::Failed { .. } | StepMark::Interrupted { .. }) => exec_plan::StepMark::Failed,
        None | Some(StepMark::Edited { .. }) => exec_plan::StepMark::Pending,
    }
}

/// A pipeline's steps as of the cursor, drawn with their needs.
fn pipeline_dag(pipeline: &Pipeline, view: &TaskView<'_>) -> Markup {
    let id = view.at.task.id;
    let target = planb_core::progress::run_target(pipeline, &view.at.task)
        .ok()
        .and_then(|t| pipeline.closure(&t))
        .unwrap_or_default();
    let place = |step: &StepId| {
        if view.out_of_date.contains(step.as_str()) {
            Place::Stale
        } else if target.contains(step) {
            Place::InTarget
        } else {
            Place::Outside
        }
    };
    let layers: Vec<Vec<GraphNode<'_>>> = layers(pipeline)
        .into_iter()
        .map(|layer| {
            layer
                .into_iter()
                .map(|step| {
                    dag_step(
                        &format!("/tasks/{id}/steps/{}?at={}", step.id.as_str(), view.cursor),
                        step.id.as_str(),
                        (html! { (step.title) }, step.title.chars().count()),
                        view.at.steps.get(step.id.as_str()),
                        place(&step.id),
                        step.needs.iter().map(StepId::as_str).collect(),
                    )
                })
                .collect()
        })
        .collect();
    dag_graph(&layers, "Layer")
}

/// An execution plan's steps as of the cursor: the plan's text rendering,
/// then the batches drawn with each step's state, linking to its calls.
fn plan_dag(plan: &ExecPlan, view: &TaskView<'_>) -> Markup {
    let id = view.at.task.id;
    let marks: Vec<exec_plan::StepMark> = plan
        .steps
        .iter()
        .map(|step| ascii_mark(view.at.steps.get(&step.index)))
        .collect();
    let layers: Vec<Vec<GraphNode<'_>>> = plan
        .batches()
        .iter()
        .map(|batch| {
            batch
                .iter()
                .map(|&at| {
                    let step = &plan.steps[at];
                    dag_step(
                        &format!("/tasks/{id}/steps/{}?at={}", step.index, view.cursor),
                        &step.index,
                        (
                            html! { (step.index) ". " (step.title) " " code { (step.tool) } },
                            format!("{}. {} {}", step.index, step.title, step.tool)
                                .chars()
                                .count(),
                        ),
                        view.at.steps.get(&step.index),
                        Place::InTarget,
                        plan.needs(at)
                            .iter()
                            .map(|&n| plan.steps[n].index.as_str())
                            .collect(),
                    )
                })
                .collect()
        })
        .collect();
    html! {
        pre.plan-dag aria-label="The plan as text" { (render_dag(plan, |at| marks[at])) }
        (dag_graph(&layers, "Batch"))
    }
}

/// How one call of a plan step ended.
#[derive(Debug, Clone)]
pub enum CallEnd {
    /// It returned; the result as recorded (pretty JSON), or why it cannot
    /// be read.
    Succeeded {
        /// The event.
        cursor: Cursor,
        /// How long the call took.
        duration_ms: u64,
        /// The result.
        result: Result<String, NotShown>,
    },
    /// It failed (or a guard blocked it).
    Failed {
        /// The event.
        cursor: Cursor,
        /// A short class: `tool_error`, `guard`, `tool_timeout`, …
        class: String,
        /// The message.
        message: String,
    },
}

/// One call of a plan step: the arguments as sent, and its end.
#[derive(Debug, Clone)]
pub struct PlanCall {
    /// The start event.
    pub cursor: Cursor,
    /// When.
    pub at: Timestamp,
    /// The run.
    pub run: RunId,
    /// The call as made (`{tool, args}`, pretty JSON), or why it cannot be read.
    pub call: Result<String, NotShown>,
    /// Its end, if it had one by the cursor.
    pub end: Option<CallEnd>,
}

/// What a plan step's page shows.
#[derive(Debug)]
pub struct PlanStepView<'a> {
    /// The task as of the cursor.
    pub at: &'a TaskAt<'a>,
    /// The plan's title.
    pub plan_title: &'a str,
    /// The step.
    pub step: &'a PlanStep,
    /// The indexes of the steps it waits for.
    pub needs: Vec<&'a str>,
    /// The latest calls of the step up to the cursor, oldest first.
    pub calls: Vec<PlanCall>,
    /// Calls before those, not shown.
    pub earlier: usize,
    /// The cursor shown.
    pub cursor: Cursor,
}

/// A step of an execution plan as of a cursor: its definition (arguments
/// as written), then every call made for it with the arguments as sent and
/// the result or failure.
pub fn retro_plan_step_page(timeline: &Timeline, view: &PlanStepView<'_>) -> Markup {
    let id: TaskId = view.at.task.id;
    let step = view.step;
    let mark = view.at.steps.get(&step.index);
    let written = serde_json::to_string_pretty(&step.args).unwrap_or_default();
    let title = format!("{} · {}", step.title, view.plan_title);
    let body = html! {
        header.card-header {
            a.retro-back href={"/tasks/" (id) "?at=" (view.cursor)} { "‹ Plan" }
            p.eyebrow { "Plan step replay · tool call" }
            h1.form-title { (step.index) ". " (step.title) }
            p.retro-muted {
                code { (step.tool) } " · " (mark_text(mark, Place::InTarget)) " · as of log cursor " (view.cursor)
                @if let Some(var) = &step.result_variable { " · binds " code { (var) } }
                @if !view.needs.is_empty() {
                    " · after " (need_links(id, view.cursor, &view.needs))
                }
            }
        }
        div.retro-body {
            section aria-label="Arguments as written" {
                h2 { "Arguments as written" }
                pre { (written) }
            }
            section.retro-calls aria-label="Calls" {
                h2 { "Calls" }
                @if view.calls.is_empty() {
                    p.retro-muted { "Not called by this point." }
                }
                @if let (true, Some(first)) = (view.earlier > 0, view.calls.first()) {
                    p.retro-muted {
                        "The " (view.calls.len()) " latest calls by this point; "
                        (view.earlier) " earlier ones are not shown. "
                        a href={"/tasks/" (id) "/steps/" (step.index) "?at=" (first.cursor.0 - 1)} { "Earlier calls" }
                    }
                }
                ol.retro-entries {
                    @for call in &view.calls { (plan_call(view, call)) }
                }
            }
        }
    };
    page(&title, Libraries::default(), None, Some(timeline), body)
}

/// One call of a plan step: the arguments as sent, then its result, its
/// failure, or that it had no answer by the cursor.
fn plan_call(view: &PlanStepView<'_>, call: &PlanCall) -> Markup {
    let id: TaskId = view.at.task.id;
    let step = view.step;
    let mark = view.at.steps.get(&step.index);
    html! {
        li.retro-entry.is-current[call.cursor == view.cursor] {
            p.retro-entry-meta {
                a.retro-cursor href={"/tasks/" (id) "/steps/" (step.index) "?at=" (call.cursor)} { "#" (call.cursor) }
                " run " code { (short(&call.run)) } " · " (when(call.at))
            }
            h3 { "Sent" }
            @match &call.call {
                Ok(text) => pre.plan-call { (text) },
                Err(why) => p.retro-muted { (why.to_string()) },
            }
            @match &call.end {
                None if matches!(mark, Some(StepMark::Interrupted { run }) if *run == call.run) => {
                    p.retro-muted { "Interrupted: its run ended before it answered." }
                },
                None => p.retro-muted { "No answer by this point." },
                Some(CallEnd::Succeeded { cursor, duration_ms, result }) => {
                    h3 { "Result" span.retro-muted { " #" (cursor) " · " (duration_ms) " ms" } }
                    @match result {
                        Ok(text) => pre.plan-result { (text) },
                        Err(why) => div.banner.banner-error role="alert" { (why.to_string()) },
                    }
                },
                Some(CallEnd::Failed { cursor, class, message }) => {
                    h3 { "Failed" span.retro-muted { " #" (cursor) } }
                    div.banner.banner-error role="alert" { (class) ": " (message) }
                },
            }
        }
    }
}

/// A step's prompt, rebuilt from the pipeline and the inputs it read.
#[derive(Debug, Clone)]
pub struct PromptView {
    /// The cursor of the start it belongs to.
    pub cursor: Cursor,
    /// The prompt text.
    pub text: String,
    /// Whether the rebuilt inputs hash to what the start recorded.
    pub verified: bool,
}

/// What the step page shows.
#[derive(Debug)]
pub struct StepView<'a> {
    /// The task as of the cursor.
    pub at: &'a TaskAt<'a>,
    /// The step's definition.
    pub step: &'a StepDef,
    /// Its prompt at its latest start at or before the cursor.
    pub prompt: Option<Result<PromptView, NotShown>>,
    /// Every version of its artifact up to the cursor, oldest first.
    pub versions: Vec<ArtifactVersion>,
    /// The cursor shown.
    pub cursor: Cursor,
}

fn artifact_body(text: &str) -> Markup {
    let trimmed = text.trim_start();
    if trimmed.starts_with("<!DOCTYPE") || trimmed.starts_with("<html") {
        html! { p.retro-muted { "An HTML report of " (text.len()) " bytes (tasks/<id>/report.html)." } }
    } else if trimmed.starts_with('{') || trimmed.starts_with('[') {
        html! { pre { (text) } }
    } else {
        html! { div.markdown-body { (PreEscaped(markdown::render(text))) } }
    }
}

/// A step of a task as of a cursor: its state, prompt, answer, and every
/// version of its artifact with the diff from the one before.
pub fn retro_step_page(timeline: &Timeline, view: &StepView<'_>) -> Markup {
    let id: TaskId = view.at.task.id;
    let step = view.step;
    let mark = view.at.steps.get(step.id.as_str());
    let kind = match &step.action {
        Action::Model { .. } => "model step",
        Action::Render { .. } => "report",
        Action::Tool { .. } => "tool call",
        _ => "step",
    };
    let title = format!("{} · {}", step.title, summary(&view.at.task.prompt));
    let body = html! {
        header.card-header {
            a.retro-back href={"/tasks/" (id) "?at=" (view.cursor)} { "‹ Task" }
            p.eyebrow { "Step replay · " (kind) }
            h1.form-title { (step.title) }
            p.retro-muted {
                code { (step.id.as_str()) } " · " (mark_text(mark, Place::InTarget)) " · as of log cursor " (view.cursor)
                @if !step.needs.is_empty() {
                    @let needs: Vec<&str> = step.needs.iter().map(StepId::as_str).collect();
                    " · reads " (need_links(id, view.cursor, &needs))
                }
            }
        }
        div.retro-body {
            @if let Some(StepMark::Failed { class, message, .. }) = mark {
                div.banner.banner-error role="alert" { (class) ": " (message) }
            }
            (prompt_section(view))
            section.retro-answer aria-label="Answer" {
                h2 { "Answer" }
                @match view.versions.last() {
                    None => p.retro-muted { "No artifact by this point." },
                    Some(latest) => {
                        p.retro-muted { "#" (latest.cursor) " · " (latest.by) " · " (when(latest.at)) }
                        @match &latest.text {
                            Ok(text) => (artifact_body(text)),
                            Err(why) => div.banner.banner-error role="alert" { (why.to_string()) },
                        }
                    }
                }
            }
            @if view.versions.len() > 1 { (versions_section(view)) }
        }
    };
    page(&title, Libraries::default(), None, Some(timeline), body)
}

/// A step's prompt as sent, rebuilt from the pipeline and the inputs it
/// read, or why it is not shown.
fn prompt_section(view: &StepView<'_>) -> Markup {
    html! {
        section.retro-prompt aria-label="Prompt" {
            h2 { "Prompt" }
            @match &view.prompt {
                _ if redacted() => p.retro-muted { "Prompts are kept off the replay (PLANB_REDACT_PROMPTS)." },
                None => p.retro-muted { "Not started by this point." },
                Some(Err(why)) => p.retro-muted { "The prompt cannot be rebuilt: " (why.to_string()) },
                Some(Ok(prompt)) => {
                    p.retro-muted {
                        "As sent at #" (prompt.cursor) ", rebuilt from the pipeline and the inputs it read"
                        @if prompt.verified { " (they hash to what the run recorded)." }
                        @else { "; they do not hash to what the run recorded, so this may differ from what was sent." }
                    }
                    pre.retro-prompt-text { (prompt.text) }
                }
            }
        }
    }
}

/// Every version of a step's artifact after the first, each with its diff
/// from the one before.
fn versions_section(view: &StepView<'_>) -> Markup {
    let id: TaskId = view.at.task.id;
    let step = view.step;
    html! {
        section.retro-versions aria-label="Versions" {
            h2 { "Versions" }
            ol.retro-entries {
                @for (i, version) in view.versions.iter().enumerate().skip(1) {
                    @let before = &view.versions[i - 1];
                    li.retro-entry {
                        p.retro-entry-meta {
                            a.retro-cursor href={"/tasks/" (id) "/steps/" (step.id.as_str()) "?at=" (version.cursor)} { "#" (version.cursor) }
                            " version " (i + 1) " · " (version.by) " · " (when(version.at))
                        }
                        @match (&before.text, &version.text) {
                            (Ok(a), Ok(b)) => details.retro-diff open[i + 1 == view.versions.len()] {
                                summary { "Changes from version " (i) }
                                (diff_view(a, b, Folds::Expandable))
                            },
                            _ => p.retro-muted { "A version cannot be read, so no diff." },
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::layers;

    #[test]
    fn a_step_defined_before_its_needs_is_laid_after_them() {
        let pipeline = planb_core::dag::parse_pipeline(
            r#"{"name": "back", "version": 1, "steps": [
                {"id": "report", "needs": ["b"], "render": "report"},
                {"id": "b", "needs": ["a"], "model": {"prompt": "x"}},
                {"id": "a", "model": {"prompt": "y"}}
            ]}"#,
        )
        .expect("pipeline");
        let ids: Vec<Vec<&str>> = layers(&pipeline)
            .iter()
            .map(|layer| layer.iter().map(|s| s.id.as_str()).collect())
            .collect();
        assert_eq!(ids, [["a"], ["b"], ["report"]]);
    }
}
