//! [`TaskAt`]: one task as of a cursor, as the replay's task view shows it:
//! the task folded from its own events only, each step's latest mark, and
//! those events.

use std::borrow::Cow;
use std::collections::BTreeMap;

use planb_core::{Envelope, EventBody, RunId, State, Task, TaskId, Timestamp};

/// Where a step stands as of a cursor, from the last event about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepMark {
    /// Started and not yet ended.
    Running {
        /// The run.
        run: RunId,
        /// Its attempt in that run.
        attempt: u32,
        /// When it started.
        since: Timestamp,
    },
    /// Produced its artifact.
    Succeeded {
        /// The run.
        run: RunId,
        /// How long it took.
        duration_ms: u64,
    },
    /// Failed.
    Failed {
        /// The run.
        run: RunId,
        /// The failure's class.
        class: String,
        /// What went wrong.
        message: String,
    },
    /// Its artifact was replaced by an edit.
    Edited {
        /// Who edited it.
        by: String,
    },
    /// Was running when its run ended without a word about it (the worker
    /// died).
    Interrupted {
        /// The run.
        run: RunId,
    },
}

/// A task as of a cursor. Made by
/// [`Timeline::task_at`](super::Timeline::task_at).
#[derive(Debug)]
pub struct TaskAt<'t> {
    /// The task as of the cursor.
    pub task: Task,
    /// Each step's latest mark, by step id.
    pub steps: BTreeMap<String, StepMark>,
    /// The task's events up to the cursor, in order (texts held elsewhere
    /// put back).
    pub events: Vec<Cow<'t, Envelope>>,
}

/// Folds `events` (one task's, in order) into the task and its step marks;
/// `None` if they hold no `TaskCreated`.
pub(super) fn fold<'t>(id: &TaskId, events: Vec<Cow<'t, Envelope>>) -> Option<TaskAt<'t>> {
    let mut state = State::default();
    let mut steps: BTreeMap<String, StepMark> = BTreeMap::new();
    for envelope in &events {
        state.apply(envelope);
        mark_steps(&mut steps, &state, envelope);
    }
    let task = state.task(id)?.clone();
    Some(TaskAt {
        task,
        steps,
        events,
    })
}

/// Updates the step marks after one event of the task (`state`: with it
/// applied).
fn mark_steps(steps: &mut BTreeMap<String, StepMark>, state: &State, envelope: &Envelope) {
    match &envelope.event.body {
        // An execution plan run from the start calls every step again:
        // the marks of earlier runs no longer describe it (a resume
        // keeps them, reusing what succeeded).
        EventBody::RunStarted {
            task,
            resumed_from: None,
            ..
        } if state.task(task).is_some_and(|t| t.plan.is_some()) => steps.clear(),
        EventBody::StepStarted {
            run, step, attempt, ..
        } => {
            steps.insert(
                step.clone(),
                StepMark::Running {
                    run: *run,
                    attempt: *attempt,
                    since: envelope.event.at,
                },
            );
        }
        EventBody::StepSucceeded {
            run,
            step,
            duration_ms,
            ..
        } => {
            steps.insert(
                step.clone(),
                StepMark::Succeeded {
                    run: *run,
                    duration_ms: *duration_ms,
                },
            );
        }
        EventBody::StepFailed {
            run,
            step,
            class,
            message,
            ..
        } => {
            steps.insert(
                step.clone(),
                StepMark::Failed {
                    run: *run,
                    class: class.clone(),
                    message: message.clone(),
                },
            );
        }
        EventBody::ArtifactEdited { step, by, .. } => {
            steps.insert(step.clone(), StepMark::Edited { by: by.clone() });
        }
        EventBody::RunEnded { run: ended, .. } => {
            for mark in steps.values_mut() {
                if let StepMark::Running { run, .. } = mark
                    && run == ended
                {
                    *mark = StepMark::Interrupted { run: *run };
                }
            }
        }
        _ => {}
    }
}
