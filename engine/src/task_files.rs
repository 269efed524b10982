//! `tasks/<task>/`: a task's artifacts as files (a projection of the log and
//! the blob store, rewritten whole, each file atomically).
//!
//! - `NN-<step>.md|json|html`: each step's current artifact, `NN` its place
//!   in the pipeline (stable across runs);
//! - `report.html`: the target's artifact when the target renders a report;
//! - `run.zip`: every artifact file and the report;
//! - `run.log`: the latest run-log lines.

use std::path::{Path, PathBuf};

use planb_core::Task;
use planb_core::dag::{Action, Pipeline, StepId};
use planb_projections::{BlobHash, DataRoot};

/// One file of a task's folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskFile {
    /// Its name in `tasks/<task>/`.
    pub name: String,
    /// The step it comes from, if it is an artifact.
    pub step: Option<String>,
    /// Its bytes' SHA-256.
    pub sha256: BlobHash,
    /// Its size.
    pub bytes: u64,
    /// Its content type.
    pub content_type: &'static str,
}

/// The content type of a file name's extension.
pub fn content_type(name: &str) -> &'static str {
    match name.rsplit('.').next() {
        Some("md") => "text/markdown",
        Some("json") => "application/json",
        Some("html") => "text/html",
        Some("zip") => "application/zip",
        _ => "text/plain",
    }
}

/// The file name of `step`'s artifact, given its bytes.
pub fn artifact_name(pipeline: &Pipeline, step: &StepId, bytes: &[u8]) -> Option<String> {
    let index = pipeline.steps().iter().position(|s| &s.id == step)?;
    let ext = match &pipeline.steps()[index].action {
        Action::Render { .. } => "html",
        _ if looks_like_json(bytes) => "json",
        _ => "md",
    };
    Some(format!("{:02}-{}.{ext}", index + 1, step.as_str()))
}

fn looks_like_json(bytes: &[u8]) -> bool {
    let trimmed = bytes.trim_ascii_start();
    (trimmed.starts_with(b"{") || trimmed.starts_with(b"["))
        && serde_json::from_slice::<serde_json::Value>(bytes).is_ok()
}

/// The artifacts of `task` in pipeline order, with their names and bytes.
/// A blob that cannot be read is skipped with a warning.
pub fn artifacts(root: &DataRoot, pipeline: &Pipeline, task: &Task) -> Vec<(TaskFile, Vec<u8>)> {
    let blobs = root.blobs();
    let mut out = Vec::new();
    for step in pipeline.steps() {
        let Some(success) = task.successes.get(step.id.as_str()) else {
            continue;
        };
        let bytes = match blobs.get(&success.artifact) {
            Ok(bytes) => bytes,
            Err(error) => {
                tracing::warn!("task {}: artifact of {}: {error}", task.id, step.id);
                continue;
            }
        };
        let Some(name) = artifact_name(pipeline, &step.id, &bytes) else {
            continue;
        };
        out.push((
            TaskFile {
                content_type: content_type(&name),
                name,
                step: Some(step.id.as_str().to_owned()),
                sha256: success.artifact,
                bytes: success.bytes,
            },
            bytes,
        ));
    }
    out
}

/// The report's bytes: the target's artifact when the target renders one.
pub fn report(root: &DataRoot, pipeline: &Pipeline, task: &Task) -> Option<Vec<u8>> {
    let target = StepId::parse(&task.target).ok()?;
    let step = pipeline.step(&target)?;
    if !matches!(step.action, Action::Render { .. }) {
        return None;
    }
    let success = task.successes.get(target.as_str())?;
    root.blobs().get(&success.artifact).ok()
}

fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.{}.{seq}.tmp", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, dir.join(name)).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// Rewrites `tasks/<task>/` from the state and the blobs; `whole` also
/// writes the report and the zip (at the end of a run, after an edit).
/// Returns the folder.
pub fn project(
    root: &DataRoot,
    pipeline: &Pipeline,
    task: &Task,
    whole: bool,
) -> std::io::Result<PathBuf> {
    let dir = root.task_dir(&task.id);
    std::fs::create_dir_all(&dir)?;
    let artifacts = artifacts(root, pipeline, task);
    let mut keep: Vec<String> = vec!["run.lock".into(), "worker.log".into()];
    for (file, bytes) in &artifacts {
        let current = std::fs::read(dir.join(&file.name)).ok();
        if current.as_deref() != Some(bytes.as_slice()) {
            write_atomic(&dir, &file.name, bytes)?;
        }
        keep.push(file.name.clone());
    }
    let log: String = task
        .log_tail
        .iter()
        .map(|line| format!("{} {}\n", line.at, line.text))
        .collect();
    write_atomic(&dir, "run.log", log.as_bytes())?;
    keep.push("run.log".into());
    if whole {
        let mut entries: Vec<(String, Vec<u8>)> = artifacts
            .into_iter()
            .map(|(file, bytes)| (file.name, bytes))
            .collect();
        if let Some(report) = report(root, pipeline, task) {
            write_atomic(&dir, "report.html", &report)?;
            entries.push(("report.html".into(), report));
        }
        entries.push(("run.log".into(), log.into_bytes()));
        let zip = crate::zip::write(&entries).map_err(std::io::Error::other)?;
        write_atomic(&dir, "run.zip", &zip)?;
    }
    keep.extend(["report.html".into(), "run.zip".into()]);
    // Artifact files of steps renamed away (JSON became Markdown), and
    // temporary files a killed writer left.
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let stale_temp = name.ends_with(".tmp")
                && entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .is_ok_and(|m| m.elapsed().is_ok_and(|age| age.as_secs() > 60));
            let old_artifact =
                name.starts_with(|c: char| c.is_ascii_digit()) && !keep.contains(&name);
            if stale_temp || old_artifact {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
    Ok(dir)
}
