//! A task's status as plain data: how far its target's closure got, which
//! step runs, and the artifact files its successes wrote. The front doors
//! shape and word it (the MCP tool's JSON, a page).

use std::sync::OnceLock;

use planb_core::dag::Pipeline;
use planb_core::progress::Progress;
use planb_core::{Run, Task, Timestamp};
use planb_engine::pipelines::{self, PROJECT_PLAN};
use planb_projections::DataRoot;

/// Most artifact files a status lists (the newest); `files_count` says how
/// many there are.
pub const STATUS_FILES_MAX: usize = 10;

fn built_in() -> &'static Pipeline {
    static PIPELINE: OnceLock<Pipeline> = OnceLock::new();
    PIPELINE.get_or_init(pipelines::project_plan)
}

/// The pipeline named `name`: the built-in one (parsed once per process)
/// or a user's file under the data root; the error says why it cannot be
/// used.
pub fn pipeline_of(root: &DataRoot, name: &str) -> Result<Pipeline, String> {
    if name == PROJECT_PLAN {
        return Ok(built_in().clone());
    }
    pipelines::resolve(root, name)
}

/// One artifact file a step's success wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusFile {
    /// Its name in the task's folder (`02-purpose`).
    pub path: String,
    /// The step.
    pub step: String,
    /// When the step succeeded (or the artifact was edited).
    pub updated_at: Timestamp,
    /// Its size in bytes.
    pub size: u64,
}

/// Where a task stands.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskStatus {
    /// Settled steps of the target's closure, its size, the running step
    /// (nothing when the pipeline cannot be read).
    pub progress: Progress,
    /// `progress` as a percentage (0 for an empty closure).
    pub percentage: f64,
    /// The newest [`STATUS_FILES_MAX`] artifact files, newest first.
    pub files: Vec<StatusFile>,
    /// How many artifact files there are.
    pub files_count: usize,
}

/// The status of `task` (its pipeline read from `root`).
pub fn status(root: &DataRoot, task: &Task) -> TaskStatus {
    let pipeline = pipeline_of(root, &task.pipeline).ok();
    let progress = pipeline
        .as_ref()
        .map_or_else(Progress::default, |p| task.progress(p));
    let percentage = if progress.total == 0 {
        0.0
    } else {
        100.0 * progress.done as f64 / progress.total as f64
    };
    let mut files: Vec<StatusFile> = pipeline
        .iter()
        .flat_map(|p| p.steps().iter().enumerate())
        .filter_map(|(index, step)| {
            let success = task.successes.get(step.id.as_str())?;
            Some(StatusFile {
                path: format!("{:02}-{}", index + 1, step.id.as_str()),
                step: step.id.as_str().to_owned(),
                updated_at: success.at,
                size: success.bytes,
            })
        })
        .collect();
    let files_count = files.len();
    files.sort_by_key(|f| std::cmp::Reverse(f.updated_at));
    files.truncate(STATUS_FILES_MAX);
    TaskStatus {
        progress,
        percentage,
        files,
        files_count,
    }
}

/// How long `run` has taken by `now` (or took), in seconds.
pub fn elapsed_sec(run: &Run, now: Timestamp) -> f64 {
    let end = run.ended_at.unwrap_or(now);
    (end.0 - run.started_at.0).max(0) as f64 / 1000.0
}
