//! A task's outputs as a front door lists and reads them: its report, its
//! zip (every artifact, the report and the run log) and each step's
//! artifact, with size, SHA-256 and when each was made. Listed through
//! the tasks newest first, a page at a time; reading never writes (the zip
//! is built in memory from the blobs) and is bounded by
//! [`OUTPUT_BYTES_MAX`].

use planb_core::dag::{Action, Pipeline, StepId};
use planb_core::state::ContentHash;
use planb_core::state::tasks::StepSuccess;
use planb_core::{Task, TaskId, Timestamp};
use planb_engine::task_files;
use planb_projections::DataRoot;

use super::{Tasks, pipeline_of};
use crate::error::Error;
use crate::store::off_thread;

/// The largest output read whole (a zip of many large artifacts can
/// exceed it; a download writes it to a file instead).
pub const OUTPUT_BYTES_MAX: usize = 10 << 20;

/// Which output of a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// The HTML report (the target step's artifact).
    Report,
    /// Every artifact, the report and the run log, zipped.
    Zip,
    /// One step's artifact, by its file name (`03-assumptions.md`) or the
    /// step's id.
    Artifact(String),
}

/// One listed output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// Its task.
    pub task: TaskId,
    /// Which output; an artifact by its file name.
    pub output: Output,
    /// The step that made it (none for the zip).
    pub step: Option<String>,
    /// Its size in bytes (unknown for the zip until it is built).
    pub size: Option<u64>,
    /// Its SHA-256 (unknown for the zip).
    pub sha256: Option<ContentHash>,
    /// When it was made.
    pub at: Timestamp,
}

/// One output read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    /// Its media type.
    pub content_type: &'static str,
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// Their SHA-256.
    pub sha256: ContentHash,
    /// When it was made.
    pub at: Timestamp,
}

/// Why an output cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// No such task.
    #[error("no task {0}")]
    NoTask(TaskId),
    /// The run has not reached a report target.
    #[error("task {0} has no report yet")]
    NoReport(TaskId),
    /// No step has succeeded.
    #[error("task {0} has no artifacts yet")]
    NoArtifacts(TaskId),
    /// The name is no step's artifact.
    #[error("{0:?} names no artifact of this task")]
    UnknownName(String),
    /// The step has not succeeded.
    #[error("step {step} of task {task} has no artifact yet")]
    NotYet {
        /// The task.
        task: TaskId,
        /// The step.
        step: StepId,
    },
    /// Over [`OUTPUT_BYTES_MAX`].
    #[error("{0} bytes, over the {OUTPUT_BYTES_MAX}-byte limit")]
    TooLarge(usize),
    /// The pipeline, a blob or the zip could not be read.
    #[error("{0}")]
    Internal(String),
}

impl From<Error> for ReadError {
    fn from(error: Error) -> ReadError {
        ReadError::Internal(error.message)
    }
}

/// When the newest artifact of `task` was made (its creation, before any).
fn newest(task: &Task) -> Timestamp {
    task.successes
        .values()
        .map(|s| s.at)
        .max()
        .unwrap_or(task.created_at)
}

/// A step's artifact not yet named: its task and pipeline, the step, its
/// success.
struct Made {
    task: TaskId,
    pipeline: String,
    step: String,
    success: StepSuccess,
}

/// One output before its pipeline is read.
enum Entry {
    Report(Made),
    Zip(TaskId, Timestamp),
    Artifact(Made),
}

/// Every output of the tasks, newest task first: report, zip, then the
/// artifacts in step-name order. Lazy: a page takes only what it shows.
fn entries<'s>(tasks: Vec<&'s Task>) -> impl Iterator<Item = Entry> + 's {
    tasks
        .into_iter()
        .filter(|task| !task.successes.is_empty())
        .flat_map(|task| {
            let made = |step: &String, success: &StepSuccess| Made {
                task: task.id,
                pipeline: task.pipeline.clone(),
                step: step.clone(),
                success: *success,
            };
            // Kept only if the target renders a report (`listed` checks).
            let report = task
                .successes
                .get(&task.target)
                .map(|success| Entry::Report(made(&task.target, success)));
            let artifacts = task
                .successes
                .iter()
                .map(move |(step, success)| Entry::Artifact(made(step, success)));
            report
                .into_iter()
                .chain(std::iter::once(Entry::Zip(task.id, newest(task))))
                .chain(artifacts)
        })
}

impl Made {
    fn listed(self, output: Output) -> Listed {
        Listed {
            task: self.task,
            output,
            step: Some(self.step),
            size: Some(self.success.bytes),
            sha256: Some(ContentHash(self.success.artifact)),
            at: self.success.at,
        }
    }
}

/// An entry as listed; `None` for a target that renders no report, or an
/// artifact whose blob cannot be read (logged).
fn listed(root: &DataRoot, entry: Entry) -> Option<Listed> {
    match entry {
        Entry::Report(made) => {
            let pipeline = pipeline_of(root, &made.pipeline).ok()?;
            let step = pipeline.step(&StepId::parse(&made.step).ok()?)?;
            matches!(step.action, Action::Render { .. }).then(|| made.listed(Output::Report))
        }
        Entry::Zip(task, at) => Some(Listed {
            task,
            output: Output::Zip,
            step: None,
            size: None,
            sha256: None,
            at,
        }),
        Entry::Artifact(made) => {
            let pipeline = pipeline_of(root, &made.pipeline).ok()?;
            let found = root
                .blobs()
                .get(&made.success.artifact)
                .inspect_err(|e| {
                    tracing::warn!("task {}: artifact of {}: {e}", made.task, made.step)
                })
                .ok()?;
            let id = StepId::parse(&made.step).ok()?;
            let name = task_files::artifact_name(&pipeline, &id, &found)?;
            Some(made.listed(Output::Artifact(name)))
        }
    }
}

/// Reads `output` of `task` from the blobs.
fn read(root: &DataRoot, task: &Task, output: Output) -> Result<Read, ReadError> {
    let pipeline = pipeline_of(root, &task.pipeline)?;
    let (content_type, bytes, at) = match output {
        Output::Report => {
            let bytes =
                task_files::report(root, &pipeline, task).ok_or(ReadError::NoReport(task.id))?;
            let at = task
                .successes
                .get(&task.target)
                .map_or(newest(task), |s| s.at);
            ("text/html", bytes, at)
        }
        Output::Zip => {
            if task.successes.is_empty() {
                return Err(ReadError::NoArtifacts(task.id));
            }
            let bytes = task_files::zip(root, &pipeline, task)
                .map_err(|e| ReadError::Internal(format!("task {}: zip: {e}", task.id)))?;
            ("application/zip", bytes, newest(task))
        }
        Output::Artifact(name) => read_artifact(root, &pipeline, task, name)?,
    };
    if bytes.len() > OUTPUT_BYTES_MAX {
        return Err(ReadError::TooLarge(bytes.len()));
    }
    let sha256 = ContentHash::of_bytes(&bytes);
    Ok(Read {
        content_type,
        bytes,
        sha256,
        at,
    })
}

/// One step's artifact, named by its file name or the step's id.
fn read_artifact(
    root: &DataRoot,
    pipeline: &Pipeline,
    task: &Task,
    name: String,
) -> Result<(&'static str, Vec<u8>, Timestamp), ReadError> {
    let step = task_files::step_of_name(pipeline, &name).ok_or(ReadError::UnknownName(name))?;
    let success = task
        .successes
        .get(step.as_str())
        .ok_or_else(|| ReadError::NotYet {
            task: task.id,
            step: step.clone(),
        })?;
    if success.bytes > OUTPUT_BYTES_MAX as u64 {
        return Err(ReadError::TooLarge(success.bytes as usize));
    }
    let bytes = root
        .blobs()
        .get(&success.artifact)
        .map_err(|e| ReadError::Internal(format!("task {}: artifact of {step}: {e}", task.id)))?;
    let name = task_files::artifact_name(pipeline, &step, &bytes)
        .unwrap_or_else(|| step.as_str().to_owned());
    Ok((task_files::content_type(&name), bytes, success.at))
}

impl Tasks {
    /// The outputs from position `from` on, at most `page` of them, in
    /// the order every page shares; and whether more follow.
    pub async fn outputs(&self, from: usize, page: usize) -> Result<(Vec<Listed>, bool), Error> {
        let mut entries: Vec<Entry> = self
            .read(move |s| {
                let mut tasks: Vec<&Task> = s.pipeline_tasks().collect();
                tasks.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id)));
                // One more than a page tells whether another follows.
                let wanted = page.saturating_add(1);
                entries(tasks).skip(from).take(wanted).collect()
            })
            .await?;
        let more = entries.len() > page;
        entries.truncate(page);
        let root = self.root();
        off_thread(move || {
            let listed = entries.into_iter().filter_map(|e| listed(&root, e));
            (listed.collect(), more)
        })
        .await
        .map_err(Error::internal)
    }

    /// Reads `output` of the task `id`.
    pub async fn read_output(&self, id: TaskId, output: Output) -> Result<Read, ReadError> {
        let task = self.read(move |s| s.pipeline_task(&id).cloned()).await?;
        let task = task.ok_or(ReadError::NoTask(id))?;
        let root = self.root();
        off_thread(move || read(&root, &task, output))
            .await
            .map_err(|e| ReadError::Internal(e.to_string()))?
    }
}
