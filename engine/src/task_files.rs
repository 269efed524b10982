//! `tasks/<task>/`: a task's artifacts as files (a projection of the log and
//! the blob store, rewritten whole, each file atomically).
//!
//! - `NN-<step>.md|json|html`: each step's current artifact, `NN` its place
//!   in the pipeline (stable across runs);
//! - `report.html`: the target's artifact when the target renders a report;
//! - `run.zip`: every artifact file and the report;
//! - `run.log`: the latest run-log lines;
//! - `run_error.json`: when the latest run failed, why (reason, failed
//!   step, whether a resume may succeed) and that run's last log lines;
//!   gone once a later run is not failed;
//! - `.written.json`: the SHA-256 of each artifact file as this projection
//!   last wrote it, so a resume can tell a person's edit of a file from a
//!   file the projection has not caught up on ([`hand_edits`]).

use std::path::{Path, PathBuf};

use std::collections::BTreeMap;

use planb_core::dag::{Action, Pipeline, StepId};
use planb_core::state::ContentHash;
use planb_core::{RunState, Task};
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

/// The step an artifact file name belongs to: `NN-<step>` with an optional
/// extension, `NN` the step's place in the pipeline, or a bare step id;
/// never a name with folders or `..`.
pub fn step_of_name(pipeline: &Pipeline, name: &str) -> Option<StepId> {
    let name = name.trim();
    if name.contains('/') || name.contains('\\') || name.contains("..") {
        return None;
    }
    let stem = name.split('.').next().unwrap_or(name);
    let candidate = match stem.split_once('-') {
        Some((number, rest))
            if number.chars().all(|c| c.is_ascii_digit()) && !number.is_empty() =>
        {
            let id = StepId::parse(rest).ok()?;
            let index = pipeline.steps().iter().position(|s| s.id == id)?;
            (number.parse::<usize>().ok()? == index + 1).then_some(id)?
        }
        _ => StepId::parse(stem).ok()?,
    };
    pipeline.step(&candidate).map(|s| s.id.clone())
}

/// The step whose artifact file `name` is, named as the projection names
/// them (`NN-<step>.md`, `.json` or `.html`); `None` for any other file,
/// such as one a person put in the folder (`2026-budget.md`,
/// `01-intake.md.bak`), which is neither an edit nor removed.
pub fn step_of_file(pipeline: &Pipeline, name: &str) -> Option<StepId> {
    let (stem, ext) = name.rsplit_once('.')?;
    if !matches!(ext, "md" | "json" | "html") {
        return None;
    }
    let (number, step) = stem.split_once('-')?;
    let id = StepId::parse(step).ok()?;
    let index = pipeline.steps().iter().position(|s| s.id == id)?;
    (number == format!("{:02}", index + 1)).then_some(id)
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

/// The text of `run.log`: the task's latest run-log lines.
pub fn run_log(task: &Task) -> String {
    task.log_tail
        .iter()
        .map(|line| format!("{} {}\n", line.at, line.text))
        .collect()
}

/// Run-log lines `run_error.json` keeps (the failed run's latest).
const RUN_ERROR_LINES: usize = 40;

/// The bytes of `run_error.json`, when the task's latest run failed.
pub fn run_error(task: &Task) -> Option<Vec<u8>> {
    let run = task.runs.last().filter(|r| r.state == RunState::Failed)?;
    let mut lines: Vec<serde_json::Value> = task
        .log_tail
        .iter()
        .rev()
        .filter(|line| line.run == run.id)
        .take(RUN_ERROR_LINES)
        .map(|line| serde_json::json!({"at": line.at.to_iso8601(), "text": line.text}))
        .collect();
    lines.reverse();
    let value = serde_json::json!({
        "task_id": task.id.to_string(),
        "run_id": run.id.to_string(),
        "state": "failed",
        "failure_reason": run.reason,
        "failed_step": run.failed_step,
        "recoverable": run.recoverable,
        "started_at": run.started_at.to_iso8601(),
        "ended_at": run.ended_at.map(|t| t.to_iso8601()),
        "log": lines,
    });
    serde_json::to_vec_pretty(&value).ok()
}

fn zip_of(
    artifacts: Vec<(TaskFile, Vec<u8>)>,
    report: Option<Vec<u8>>,
    log: String,
    error: Option<Vec<u8>>,
) -> std::io::Result<Vec<u8>> {
    let mut entries: Vec<(String, Vec<u8>)> = artifacts
        .into_iter()
        .map(|(file, bytes)| (file.name, bytes))
        .collect();
    if let Some(report) = report {
        entries.push(("report.html".into(), report));
    }
    entries.push(("run.log".into(), log.into_bytes()));
    if let Some(error) = error {
        entries.push(("run_error.json".into(), error));
    }
    crate::zip::write(&entries).map_err(std::io::Error::other)
}

/// The bytes `run.zip` holds: every artifact file, the report and the run
/// log, built in memory.
pub fn zip(root: &DataRoot, pipeline: &Pipeline, task: &Task) -> std::io::Result<Vec<u8>> {
    zip_of(
        artifacts(root, pipeline, task),
        report(root, pipeline, task),
        run_log(task),
        run_error(task),
    )
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

/// The record of what [`project`] wrote: artifact file name → SHA-256 hex.
const WRITTEN: &str = ".written.json";

/// Largest record of what was written read back (a file a person could
/// replace).
const WRITTEN_BYTES_MAX: usize = 16 << 20;

fn read_written(dir: &Path) -> Option<BTreeMap<String, String>> {
    let bytes = planb_projections::bounded::read(&dir.join(WRITTEN), WRITTEN_BYTES_MAX)
        .ok()?
        .ok()?;
    match serde_json::from_slice(&bytes) {
        Ok(written) => Some(written),
        Err(error) => {
            tracing::warn!("{}: {error}", dir.join(WRITTEN).display());
            None
        }
    }
}

/// A file under `tasks/<task>/` that a person changed: its bytes are
/// neither the step's recorded artifact nor what the projection last wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandEdit {
    /// The step whose artifact it is.
    pub step: StepId,
    /// The file's name in the task's folder.
    pub name: String,
    /// Its bytes now.
    pub bytes: Vec<u8>,
}

/// What can go wrong with one edited file; the others are still found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedEdit {
    /// The file's name.
    pub name: String,
    /// Why it is not taken as an edit.
    pub why: String,
}

/// The artifact files of `task` a person edited by hand since the
/// projection wrote them, in pipeline order. Only steps with an artifact
/// count; a deleted file is not an edit (the projection writes it again);
/// a folder the projection never recorded (no `.written.json`) has no
/// edits, since nothing tells an edit from an old file. A file over
/// `max_bytes` or unreadable is reported in the second list, not read.
pub fn hand_edits(
    root: &DataRoot,
    pipeline: &Pipeline,
    task: &Task,
    max_bytes: usize,
) -> (Vec<HandEdit>, Vec<SkippedEdit>) {
    let dir = root.task_dir(&task.id);
    let mut edits = Vec::new();
    let mut skipped = Vec::new();
    let Some(written) = read_written(&dir) else {
        return (edits, skipped);
    };
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return (edits, skipped);
    };
    let mut names: Vec<String> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(|c: char| c.is_ascii_digit()) && !n.ends_with(".tmp"))
        .collect();
    names.sort();
    for name in names {
        let Some(step) = step_of_file(pipeline, &name) else {
            continue;
        };
        let Some(success) = task.successes.get(step.as_str()) else {
            continue;
        };
        if edits.iter().any(|e: &HandEdit| e.step == step) {
            continue;
        }
        let path = dir.join(&name);
        let len = std::fs::metadata(&path).map_or(0, |m| m.len());
        if len > max_bytes as u64 {
            skipped.push(SkippedEdit {
                name,
                why: format!("{len} bytes, over the {max_bytes}-byte artifact limit"),
            });
            continue;
        }
        let bytes = match planb_projections::bounded::read(&path, max_bytes) {
            Ok(Ok(bytes)) => bytes,
            Ok(Err(over)) => {
                skipped.push(SkippedEdit {
                    name,
                    why: format!("{} bytes, over the {max_bytes}-byte artifact limit", over.0),
                });
                continue;
            }
            Err(error) => {
                skipped.push(SkippedEdit {
                    name,
                    why: error.to_string(),
                });
                continue;
            }
        };
        let hash = ContentHash::of_bytes(&bytes);
        let as_written = written.get(&name).is_some_and(|w| *w == hash.to_hex());
        if hash.0 == success.artifact || as_written {
            continue;
        }
        edits.push(HandEdit { step, name, bytes });
    }
    (edits, skipped)
}

/// Notes in `.written.json` that the file `name` of `task`'s folder, as it
/// is now (`bytes`), is known to the state: a hand edit just recorded.
pub fn mark_taken(
    root: &DataRoot,
    task: &planb_core::TaskId,
    name: &str,
    bytes: &[u8],
) -> std::io::Result<()> {
    let dir = root.task_dir(task);
    let mut written = read_written(&dir).unwrap_or_default();
    written.insert(name.to_owned(), ContentHash::of_bytes(bytes).to_hex());
    let record = serde_json::to_vec_pretty(&written).map_err(std::io::Error::other)?;
    write_atomic(&dir, WRITTEN, &record)
}

/// Writes one step's new artifact file into `tasks/<task>/` and records it
/// in `.written.json`: what the worker does after each success, so a run's
/// cost does not grow with the square of its steps ([`project`] writes the
/// whole folder when the run ends).
pub fn write_artifact(
    root: &DataRoot,
    pipeline: &Pipeline,
    task: &planb_core::TaskId,
    step: &StepId,
    bytes: &[u8],
) -> std::io::Result<()> {
    let Some(name) = artifact_name(pipeline, step, bytes) else {
        return Ok(());
    };
    let dir = root.task_dir(task);
    std::fs::create_dir_all(&dir)?;
    write_atomic(&dir, &name, bytes)?;
    let mut written = read_written(&dir).unwrap_or_default();
    // A step's earlier file under another extension is the old artifact.
    let prefix = format!(
        "{}.",
        name.rsplit_once('.')
            .map_or(name.as_str(), |(stem, _)| stem)
    );
    let stale: Vec<String> = written
        .keys()
        .filter(|k| k.starts_with(&prefix) && **k != name)
        .cloned()
        .collect();
    for old in stale {
        written.remove(&old);
        let _ = std::fs::remove_file(dir.join(&old));
    }
    written.insert(name, ContentHash::of_bytes(bytes).to_hex());
    let record = serde_json::to_vec_pretty(&written).map_err(std::io::Error::other)?;
    write_atomic(&dir, WRITTEN, &record)
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
    keep.extend(artifacts.iter().map(|(file, _)| file.name.clone()));
    write_artifacts(&dir, &artifacts)?;
    let log = run_log(task);
    write_atomic(&dir, "run.log", log.as_bytes())?;
    keep.push("run.log".into());
    let error = run_error(task);
    match &error {
        Some(bytes) => write_atomic(&dir, "run_error.json", bytes)?,
        None => match std::fs::remove_file(dir.join("run_error.json")) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        },
    }
    if whole {
        let report = report(root, pipeline, task);
        if let Some(report) = &report {
            write_atomic(&dir, "report.html", report)?;
        }
        let zip = zip_of(artifacts, report, log, error)?;
        write_atomic(&dir, "run.zip", &zip)?;
    }
    keep.extend(["report.html".into(), "run.zip".into()]);
    remove_stale(&dir, &keep, pipeline);
    Ok(dir)
}

/// Writes the artifact files that changed, leaving those changed by hand,
/// then the record of what was written.
fn write_artifacts(dir: &Path, artifacts: &[(TaskFile, Vec<u8>)]) -> std::io::Result<()> {
    let before = read_written(dir);
    let mut written = BTreeMap::new();
    for (file, bytes) in artifacts {
        // Read with a bound: a person may have put anything there, even a
        // link to an endless file. Over it, it is not what was written.
        let limit = bytes.len().max(crate::backend::ANSWER_BYTES_MAX);
        let current = planb_projections::bounded::read(&dir.join(&file.name), limit).ok();
        if current.as_ref().and_then(|c| c.as_deref().ok()) != Some(bytes.as_slice()) {
            // A file changed by hand since it was written is left for
            // `hand_edits` to find, never overwritten unrecorded.
            let last = before.as_ref().and_then(|w| w.get(&file.name));
            let by_hand = match (&current, last) {
                (Some(Ok(now)), Some(last)) => ContentHash::of_bytes(now).to_hex() != *last,
                (Some(Err(_)), Some(_)) => true,
                _ => false,
            };
            if let (true, Some(last)) = (by_hand, last) {
                written.insert(file.name.clone(), last.clone());
                continue;
            }
            write_atomic(dir, &file.name, bytes)?;
        }
        written.insert(file.name.clone(), ContentHash(file.sha256).to_hex());
    }
    // After the files: a file newer than this record is the state's own
    // artifact, which `hand_edits` does not take for an edit either.
    if read_written(dir).as_ref() != Some(&written) {
        let record = serde_json::to_vec_pretty(&written).map_err(std::io::Error::other)?;
        write_atomic(dir, WRITTEN, &record)?;
    }
    Ok(())
}

/// Removes the artifact files of steps renamed away (JSON became
/// Markdown), and temporary files a killed writer left.
fn remove_stale(dir: &Path, keep: &[String], pipeline: &Pipeline) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let stale_temp = name.ends_with(".tmp")
            && entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|m| m.elapsed().is_ok_and(|age| age.as_secs() > 60));
        let old_artifact = step_of_file(pipeline, &name).is_some() && !keep.contains(&name);
        if stale_temp || old_artifact {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// After a run's end was recorded by this process: rewrites the folder's
/// run files (`run.log`, `run_error.json`) from `task`. A failure is logged,
/// not returned: the end is recorded either way, and the next writer of the
/// folder catches up.
pub async fn project_ended(root: DataRoot, task: Task) {
    let id = task.id;
    let written = crate::host::off_workers(move || {
        let pipeline =
            crate::pipelines::resolve(&root, &task.pipeline).map_err(std::io::Error::other)?;
        project(&root, &pipeline, &task, false)
    })
    .await;
    match written {
        Ok(Ok(_)) => {}
        Ok(Err(error)) => tracing::warn!("task {id}: files not written: {error}"),
        Err(error) => tracing::warn!("task {id}: files not written: {error}"),
    }
}

/// What [`rewrite_all`] did.
#[derive(Debug, Default)]
pub struct Rewritten {
    /// Task folders written whole.
    pub written: usize,
    /// Folders left as they are, and why (a live run writes its own; a
    /// person's edits not yet recorded are never overwritten).
    pub left: Vec<(String, String)>,
}

/// Rewrites every pipeline task's folder from `state` and the blobs (after
/// `rebuild`, or when files were lost). A folder holding hand edits not yet
/// recorded is left alone, as is the folder of a task whose run is active.
pub fn rewrite_all(root: &DataRoot, state: &planb_core::State) -> Rewritten {
    let mut done = Rewritten::default();
    for task in state.tasks().values().filter(|t| t.plan.is_none()) {
        let id = task.id.to_string();
        if task.deleted_at.is_some() {
            if let Err(error) = remove_folder(root, &task.id) {
                done.left.push((id, error.to_string()));
            }
            continue;
        }
        if task.active_run().is_some() {
            done.left.push((id, "its run is active".into()));
            continue;
        }
        let pipeline = match crate::pipelines::resolve(root, &task.pipeline) {
            Ok(pipeline) => pipeline,
            Err(problem) => {
                done.left.push((id, problem.to_string()));
                continue;
            }
        };
        // The same bound as a resume's: a file past it is never read, and
        // its folder is left for the person to sort out.
        let (edits, skipped) = hand_edits(root, &pipeline, task, crate::backend::ANSWER_BYTES_MAX);
        let unrecorded: Vec<&str> = edits
            .iter()
            .map(|e| e.name.as_str())
            .chain(skipped.iter().map(|s| s.name.as_str()))
            .collect();
        if !unrecorded.is_empty() {
            done.left.push((
                id,
                format!(
                    "hand edits not yet recorded ({}); task_resume records them",
                    unrecorded.join(", ")
                ),
            ));
            continue;
        }
        match project(root, &pipeline, task, true) {
            Ok(_) => done.written += 1,
            Err(error) => done.left.push((id, error.to_string())),
        }
    }
    done
}

/// Removes a deleted task's folder, `tasks/<task>/`, whole (none there is
/// fine).
pub fn remove_folder(root: &DataRoot, task: &planb_core::TaskId) -> std::io::Result<()> {
    match std::fs::remove_dir_all(root.task_dir(task)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Why a copy of a task file was not saved where it was asked for.
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    /// The place is inside the data root, which only planb writes.
    #[error("{0} is inside planb's data root {1}; save the copy elsewhere")]
    InsideDataRoot(String, String),
    /// A file is there already and the call did not say to replace it.
    #[error("{0} exists; pass overwrite: true to replace it")]
    Exists(String),
    /// The place cannot be written.
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
}

/// Saves `bytes` as a copy at `to` (a file, or an existing directory that
/// gets `name`), never inside the data root `root` and never over an
/// existing file unless `overwrite`. The bytes go to a temporary file in
/// the same directory, synced, then take the name in one step: a reader
/// sees the old file or the whole new one, and a crash leaves no half copy
/// under the name.
pub fn save_copy(
    root: &Path,
    to: &Path,
    name: &str,
    bytes: &[u8],
    overwrite: bool,
) -> Result<PathBuf, SaveError> {
    let shown = |p: &Path| p.display().to_string();
    let to = if to.is_dir() {
        to.join(name)
    } else {
        to.to_path_buf()
    };
    let (Some(dir), Some(file)) = (to.parent(), to.file_name()) else {
        return Err(SaveError::Io(
            shown(&to),
            std::io::Error::other("not a file name"),
        ));
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let dir = dir
        .canonicalize()
        .map_err(|e| SaveError::Io(shown(dir), e))?;
    let to = dir.join(file);
    // The name itself may be a link into the root.
    let real = to.canonicalize().unwrap_or_else(|_| to.clone());
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    if dir.starts_with(&root) || real.starts_with(&root) {
        return Err(SaveError::InsideDataRoot(shown(&to), shown(&root)));
    }
    let exists = std::fs::symlink_metadata(&to).is_ok();
    if exists && !overwrite {
        return Err(SaveError::Exists(shown(&to)));
    }
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(
        ".{}.{}.{seq}.tmp",
        file.to_string_lossy(),
        std::process::id()
    ));
    let written = (|| {
        use std::io::Write;
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        out.write_all(bytes)?;
        out.sync_all()?;
        if overwrite {
            std::fs::rename(&tmp, &to)
        } else {
            // A link fails if the name was taken meanwhile: never replaced.
            std::fs::hard_link(&tmp, &to)
        }
    })();
    let _ = std::fs::remove_file(&tmp);
    match written {
        Ok(()) => Ok(to),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            Err(SaveError::Exists(shown(&to)))
        }
        Err(e) => Err(SaveError::Io(shown(&to), e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn artifact_paths_never_leave_the_task() {
        let pipeline = crate::pipelines::project_plan();
        let step = |p: &str| step_of_name(&pipeline, p).map(|s| s.as_str().to_owned());
        assert_eq!(step("01-intake").as_deref(), Some("intake"));
        assert_eq!(step("01-intake.md").as_deref(), Some("intake"));
        assert_eq!(step("intake").as_deref(), Some("intake"));
        for bad in [
            "../01-intake",
            "/etc/passwd",
            "02-intake",
            "99-nothing",
            "x/01-intake",
            "",
            "..",
            "nothing",
        ] {
            assert_eq!(step(bad), None, "{bad}");
        }
    }
}
