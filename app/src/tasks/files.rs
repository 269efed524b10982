//! A task's files as the front doors hand them out: the report and the zip
//! (the folder written first, with the hand edits recorded), a copy saved
//! outside the data root, and an artifact replaced by its new text.

use std::path::{Path, PathBuf};

use planb_core::state::ContentHash;
use planb_core::{Command, Task, TaskId};
use planb_engine::host::off_workers;
use planb_engine::task_files::{self, SaveError};
use serde_json::json;

use super::{Tasks, pipeline_of, state_name};
use crate::error::{Error, ErrorCode};

/// Which of a task's files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskFile {
    /// The report page, self-contained HTML.
    Report,
    /// Every artifact, zipped.
    Zip,
}

impl TaskFile {
    /// Its name in the task's folder.
    pub fn name(self) -> &'static str {
        match self {
            TaskFile::Report => "report.html",
            TaskFile::Zip => "run.zip",
        }
    }
}

/// Where a task's file is, and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileInfo {
    /// Its path (canonical), in the task's folder or where it was saved.
    pub path: PathBuf,
    /// Its media type.
    pub content_type: &'static str,
    /// Its SHA-256, hex.
    pub sha256: String,
    /// Its size in bytes.
    pub size: usize,
}

/// An artifact replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactWritten {
    /// The step whose artifact it is.
    pub step: String,
    /// The new artifact's SHA-256, hex.
    pub sha256: String,
    /// Its size in bytes.
    pub size: u64,
    /// Whether it differs from the one recorded (an edit was recorded).
    pub changed: bool,
    /// The steps downstream of it, which a resume runs again.
    pub invalidated: Vec<String>,
}

impl Tasks {
    /// Writes `task`'s folder (its hand edits recorded first) and returns
    /// `file`'s info; with `save` (a place outside the data root, and
    /// whether an existing file there may be replaced), a copy saved there.
    pub async fn file(
        &self,
        task: Task,
        file: TaskFile,
        save: Option<(PathBuf, bool)>,
    ) -> Result<FileInfo, Error> {
        let task = self.with_hand_edits(task).await?;
        let root = self.root();
        let id = task.id;
        let pipeline =
            pipeline_of(&root, &task.pipeline).map_err(|e| Error::internal(e.message))?;
        if file == TaskFile::Report && task_files::report(&root, &pipeline, &task).is_none() {
            let why = if task.speed == "ping" {
                "this task ran with speed_vs_detail \"ping\" (one model call, no report); create a task with \"fast\" or \"all\""
            } else {
                "the report is not built yet; wait for the task to complete"
            };
            return Err(Error::with(
                ErrorCode::InvalidArtifactUri,
                format!("no report for task {id}: {why}"),
                json!({"state": state_name(&task)}),
            ));
        }
        let written = {
            let root = root.clone();
            off_workers(move || task_files::project(&root, &pipeline, &task, true)).await
        };
        let dir = match written {
            Ok(Ok(dir)) => dir,
            Ok(Err(e)) => {
                return Err(Error::internal(format!(
                    "the task's files could not be written: {e}"
                )));
            }
            Err(e) => return Err(Error::internal(e.to_string())),
        };
        let mut path = dir.join(file.name());
        let bytes = std::fs::read(&path)
            .map_err(|e| Error::internal(format!("{}: {e}", path.display())))?;
        if let Some((to, overwrite)) = save {
            path = saved(root.root(), &to, id, file, &bytes, overwrite)?;
        }
        Ok(FileInfo {
            path: path.canonicalize().unwrap_or(path),
            content_type: task_files::content_type(file.name()),
            sha256: ContentHash::of_bytes(&bytes).to_hex(),
            size: bytes.len(),
        })
    }

    /// Replaces the artifact `path` names (a file name the status lists, or
    /// a step id) with `content`; refused while a run is active.
    pub async fn write_artifact(
        &self,
        id: TaskId,
        path: &str,
        content: String,
    ) -> Result<ArtifactWritten, Error> {
        let task = self.find(id).await?;
        // A hand edit of another file is recorded before this one writes.
        let task = self.with_hand_edits(task).await?;
        let root = self.root();
        let pipeline =
            pipeline_of(&root, &task.pipeline).map_err(|e| Error::internal(e.message))?;
        let Some(step) = task_files::step_of_name(&pipeline, path) else {
            return Err(Error::with(
                ErrorCode::InvalidArtifactUri,
                format!(
                    "path: {path:?} names no artifact of this task (name a step's file, like \"01-intake\", or give a step id; no folders)"
                ),
                json!({"path": path}),
            ));
        };
        let blobs = root.blobs();
        let bytes = content.into_bytes();
        let size = bytes.len() as u64;
        let command = Command::EditArtifact {
            task: id,
            step: step.as_str().to_owned(),
            artifact: ContentHash::of_bytes(&bytes).0,
            bytes: size,
            by: "task_artifact_write".into(),
        };
        // An edit that would be refused (a run under way, an archived task)
        // is refused before its bytes are stored, so no blob is left over.
        let decided = command.clone();
        self.read(move |state| state.decide(decided)).await??;
        let hash = match off_workers(move || blobs.put(&bytes)).await {
            Ok(Ok(hash)) => hash,
            Ok(Err(e)) => return Err(Error::internal(e.to_string())),
            Err(e) => return Err(Error::internal(e.to_string())),
        };
        let changed = self.execute(command).await? > 0;
        let invalidated: Vec<String> = pipeline
            .downstream(&step)
            .unwrap_or_default()
            .into_iter()
            .filter(|s| *s != step)
            .map(|s| s.as_str().to_owned())
            .collect();
        if let Ok(Some(task)) = self.get(id).await {
            let _ = off_workers(move || task_files::project(&root, &pipeline, &task, true)).await;
        }
        Ok(ArtifactWritten {
            step: step.as_str().to_owned(),
            sha256: ContentHash(hash).to_hex(),
            size,
            changed,
            invalidated,
        })
    }
}

/// Saves a copy of `bytes` at `to` (outside `root`), named for the task
/// when `to` is a directory.
fn saved(
    root: &Path,
    to: &Path,
    id: TaskId,
    file: TaskFile,
    bytes: &[u8],
    overwrite: bool,
) -> Result<PathBuf, Error> {
    let name = format!("{id}-{}", file.name());
    task_files::save_copy(root, to, &name, bytes, overwrite).map_err(|e| {
        let code = match e {
            SaveError::Exists(_) => ErrorCode::Conflict,
            _ => ErrorCode::PermissionDenied,
        };
        Error::new(code, format!("save_path: {e}"))
    })
}
