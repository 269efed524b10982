//! Where a task stands against its pipeline: the step its runs aim at, what
//! every step reads besides its inputs, and which of its recorded successes
//! are settled. The worker's schedule, the task tools and the replay pages
//! ask these rules; none writes its own.
//!
//! A success is settled when it happened in the run being looked at, or when
//! the input hash it ran on is the one the step would read now from the
//! settled steps before it (the worker's rule: such a step is not run
//! again). So an edited artifact unsettles every step downstream of it until
//! a run does them again.

use std::collections::BTreeMap;

use crate::dag::{Action, Pipeline, StepId};
use crate::hash::ContentHash;
use crate::state::tasks::{RunState, Speed, Task};

/// Why a task's target is not a step its pipeline can run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// The pipeline has no steps at all.
    #[error("the pipeline has no steps")]
    NoSteps,
    /// The target is not a well-formed step id.
    #[error("target: {0}")]
    Malformed(String),
    /// The target names no step of the pipeline.
    #[error("target: {target:?} is not a step of pipeline {pipeline}")]
    Unknown {
        /// The task's target.
        target: String,
        /// The pipeline's name.
        pipeline: String,
    },
}

/// The step a run of `task` aims at: the task's target, or for `ping` the
/// pipeline's first step (one model call that shows the backend answers).
pub fn run_target(pipeline: &Pipeline, task: &Task) -> Result<StepId, TargetError> {
    if task.speed() == Some(Speed::Ping) {
        let first = pipeline
            .steps()
            .iter()
            .find(|s| s.needs.is_empty() && matches!(s.action, Action::Model { .. }))
            .or_else(|| pipeline.steps().first())
            .ok_or(TargetError::NoSteps)?;
        return Ok(first.id.clone());
    }
    let target = StepId::parse(&task.target).map_err(|e| TargetError::Malformed(e.to_string()))?;
    if pipeline.step(&target).is_none() {
        return Err(TargetError::Unknown {
            target: task.target.clone(),
            pipeline: pipeline.name().to_owned(),
        });
    }
    Ok(target)
}

/// What every step of a task's runs reads besides its inputs: the prompt
/// and the settings, each length-prefixed. Part of each step's input hash.
pub fn context(task: &Task) -> Vec<u8> {
    let mut bytes = Vec::new();
    for field in [
        task.prompt.as_str(),
        task.speed.as_str(),
        task.model_profile.as_deref().unwrap_or(""),
    ] {
        bytes.extend_from_slice(&(field.len() as u64).to_le_bytes());
        bytes.extend_from_slice(field.as_bytes());
    }
    bytes
}

/// How far a task's latest run has come toward its target.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Progress {
    /// Steps of the target's closure that are settled.
    pub done: usize,
    /// Steps in the target's closure.
    pub total: usize,
    /// A step the run is running now, if any.
    pub current: Option<String>,
}

/// The recorded successes among `steps` (in topological order) that are
/// settled, by the rule of the module docs, with `run` the run looked at
/// (none: the next run's view): what the worker will not run again. Every
/// freshness question asks this.
pub fn settled(
    pipeline: &Pipeline,
    task: &Task,
    steps: &[StepId],
    run: Option<&crate::state::tasks::Run>,
) -> BTreeMap<StepId, ContentHash> {
    let context = context(task);
    let latest = run;
    let mut settled: BTreeMap<StepId, ContentHash> = BTreeMap::new();
    for step in steps {
        let Some(success) = task.successes.get(step.as_str()) else {
            continue;
        };
        let fresh = latest.is_some_and(|run| run.succeeded.contains(step.as_str()))
            || pipeline
                .input_hash(&context, step, &settled)
                .is_some_and(|hash| hash.0 == success.input);
        if fresh {
            settled.insert(step.clone(), ContentHash(success.artifact));
        }
    }
    settled
}

impl Task {
    /// How far the latest run has come on `pipeline`: settled steps of the
    /// target's closure (see the module docs), all of them once it
    /// completed, none before a run. Only grows within a run.
    pub fn progress(&self, pipeline: &Pipeline) -> Progress {
        let Some(closure) = run_target(pipeline, self)
            .ok()
            .and_then(|target| pipeline.closure(&target))
        else {
            return Progress::default();
        };
        let total = closure.len();
        let Some(run) = self.runs.last() else {
            return Progress {
                total,
                ..Progress::default()
            };
        };
        if run.state == RunState::Completed {
            return Progress {
                done: total,
                total,
                current: None,
            };
        }
        Progress {
            done: settled(pipeline, self, &closure, Some(run)).len(),
            total,
            current: run.running.iter().next().cloned(),
        }
    }
}
