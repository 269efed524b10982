//! Named plans' files, `<plans-dir>/<planName>-plan.md`: a projection of the
//! plan's events that a person may also edit by hand.
//!
//! **Why under the append lock.** Several servers may change one plan at
//! once. Each change (read the file, record a hand edit if there is one,
//! decide and append the command, write the file) runs as one step under the
//! log's append lock, so the writes of the file follow the log's order and an
//! older version can never land last.
//!
//! **What counts as a hand edit.** planb keeps the hash of the content
//! each plan file last held as recorded (`<data root>/plans.written/`). A
//! file showing a version the plan has held that is still that content is
//! merely behind the log (its writer was killed between the append and the
//! write, or failed to write); it is brought up to date, never recorded as
//! a version. Anything else is a hand edit, recorded first so the person's
//! version is kept before the command applies: even a file set back to an
//! earlier version's text. Without that record (a file planb wrote before
//! it kept one), any content the plan has held is taken for one behind.
//!
//! **Temp files.** The new content is written to a temp file unique to the
//! process and the write, then renamed over the plan. Every plan file is
//! written under the lock, so any plan's temp file found in the directory
//! under the lock belongs to a writer that died mid-write: each change of a
//! plan removes those of every plan beside it. Opening a data root removes,
//! from every plans directory its log names, those whose writer's process
//! (its id is in the name) no longer runs.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use planb_core::state::ContentHash;
use planb_core::{Command, Envelope, PlanKey, PlanName, Rejection};

use crate::store::{Locked, Store};
use crate::{DataRoot, StoreError};

/// Largest plan file planb reads, in bytes: the largest plan it records.
pub const PLAN_FILE_BYTES_MAX: usize = planb_core::state::NAMED_PLAN_BYTES_MAX;

/// What a change through a plan's file did.
#[derive(Debug, Clone)]
pub struct PlanFileChange {
    /// The recorded events: a hand edit found in the file first, if any, then
    /// the command's.
    pub events: Vec<Envelope>,
    /// The plan's content the command was decided on (after any hand edit).
    pub before: Option<String>,
    /// The plan's content afterwards, as now in the file.
    pub content: String,
    /// The plan's file.
    pub path: PathBuf,
}

/// Why a plan's file could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanFileError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The plan's file.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file is larger than any plan planb records.
    #[error(
        "{path}: {bytes} bytes is over the {PLAN_FILE_BYTES_MAX}-byte (4 MiB) plan limit; planb does not manage files that large"
    )]
    TooLarge {
        /// The plan's file.
        path: String,
        /// Its size.
        bytes: usize,
    },
    /// The file is not UTF-8 text.
    #[error("{path}: not UTF-8 text")]
    NotText {
        /// The plan's file.
        path: String,
    },
    /// The events are durable, but the file could not be written.
    #[error("the plan is recorded, but {path} could not be written: {source}")]
    Write {
        /// The plan's file.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// Distinguishes the temp files of one process's writes.
static TEMP_SEQUENCE: AtomicU64 = AtomicU64::new(0);

impl Store {
    /// Runs `command` (if any) on the named plan `plan` whose file is `path`,
    /// as one step under the append lock: a hand edit found in the file is
    /// recorded first, then the command is decided and appended, then the file
    /// is brought up to the recorded content. A rejection of the command is
    /// returned after any hand edit was recorded.
    pub fn execute_on_plan_file(
        &self,
        plan: &PlanKey,
        path: &Path,
        command: Option<Command>,
    ) -> Result<PlanFileChange, StoreError> {
        self.locked(|locked| {
            remove_stale_temp_files(path);
            let on_disk = read_plan_file(path)?;
            let mut events = Vec::new();
            if let Some(text) = &on_disk {
                let held = locked
                    .state()
                    .named_plan(plan)
                    .is_some_and(|p| p.has_held(text));
                // Content the plan held, still as planb last wrote it there
                // (when that is known). A file holding a version the log has
                // lost is no file behind: it may be that version's only copy.
                let hash = ContentHash::of_bytes(text.as_bytes()).to_hex();
                let behind = held && last_written(self.root(), path).is_none_or(|l| l == hash);
                if !behind {
                    tracing::info!(
                        "{} was changed by hand; recording that version first",
                        path.display()
                    );
                    let recorded = locked.decide_and_append(
                        Command::RecordOutsideChange {
                            plan: plan.clone(),
                            content: text.clone(),
                        },
                        None,
                    );
                    match recorded {
                        Ok(recorded) => events.extend(recorded),
                        Err(StoreError::Rejected(Rejection::Unchanged { .. })) => {}
                        Err(error) => return Err(error),
                    }
                }
            }
            let before = locked.state().named_plan(plan).map(|p| p.content.clone());
            let outcome = match command {
                Some(command) => locked.decide_and_append(command, None),
                None => Ok(Vec::new()),
            };
            locked.project();
            // Bring the file up to date even when the command was rejected:
            // it may be behind the log.
            let content = locked.state().named_plan(plan).map(|p| p.content.clone());
            if let Some(content) = &content {
                let placed = on_disk.as_deref() == Some(content.as_str())
                    || write_plan_file(locked, &plan.name, path, content, on_disk.as_deref())?;
                // The file holds the plan as recorded: what a later look
                // compares it with, however it came to hold it. One the
                // person saved meanwhile stays theirs, recorded at the next
                // look.
                if placed {
                    note_written(self.root(), path, content);
                }
            }
            events.extend(outcome?);
            Ok(PlanFileChange {
                events,
                before,
                content: content.unwrap_or_default(),
                path: path.to_path_buf(),
            })
        })
    }
}

fn read_plan_file(path: &Path) -> Result<Option<String>, StoreError> {
    let display = || path.display().to_string();
    let bytes = match crate::bounded::read(path, PLAN_FILE_BYTES_MAX) {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(crate::bounded::Over(bytes))) => {
            return Err(PlanFileError::TooLarge {
                path: display(),
                bytes,
            }
            .into());
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(PlanFileError::Read {
                path: display(),
                source,
            }
            .into());
        }
    };
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| PlanFileError::NotText { path: display() }.into())
}

/// Where the hash of what planb last wrote to the plan file `path` is kept.
fn written_record(root: &DataRoot, path: &Path) -> PathBuf {
    let key = ContentHash::of_bytes(path.as_os_str().as_encoded_bytes()).to_hex();
    root.root().join("plans.written").join(key)
}

/// The hash (hex) of what planb last wrote to `path`, when it is known.
fn last_written(root: &DataRoot, path: &Path) -> Option<String> {
    let bytes = crate::bounded::read(&written_record(root, path), 128)
        .ok()?
        .ok()?;
    let hex = String::from_utf8(bytes).ok()?;
    Some(hex.trim().to_owned()).filter(|h| h.len() == 64)
}

/// Notes that planb wrote `content` to `path` (under the append lock, after
/// the file). A failure is logged: without the note, a file set back to an
/// earlier version by hand is taken for one behind, as before.
fn note_written(root: &DataRoot, path: &Path, content: &str) {
    let hash = ContentHash::of_bytes(content.as_bytes()).to_hex();
    // A look or a refused change leaves it as it was: a read, no write.
    if last_written(root, path).as_deref() == Some(hash.as_str()) {
        return;
    }
    let record = written_record(root, path);
    let temp = record.with_extension("tmp");
    let written = record
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(&temp, hash))
        .and_then(|()| std::fs::rename(&temp, &record));
    if let Err(error) = written {
        tracing::warn!("{}: {error}", record.display());
    }
}

/// The prefix of the plan's temp files: `.<planName>-plan.md.`.
fn temp_prefix(path: &Path) -> String {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    format!(".{}.", name.unwrap_or_default())
}

/// Writes `content` to a temp file of its own and puts it in `path`'s
/// place, unless the file no longer holds `found` (what the look before
/// read; `None`: no file): a person's save that came in between is left
/// where it is. Returns whether the file now holds `content`.
fn write_plan_file(
    _locked: &Locked<'_, '_>,
    plan: &PlanName,
    path: &Path,
    content: &str,
    found: Option<&str>,
) -> Result<bool, StoreError> {
    let error = |source| PlanFileError::Write {
        path: path.display().to_string(),
        source,
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(error)?;
    let temp = dir.join(format!(
        "{}{}.{}.tmp",
        temp_prefix(path),
        std::process::id(),
        TEMP_SEQUENCE.fetch_add(1, Ordering::Relaxed)
    ));
    // Synced before the rename: the file is the person's document, and one
    // torn by a power loss would read as a hand edit to record.
    let written = std::fs::File::create(&temp)
        .and_then(|mut file| {
            std::io::Write::write_all(&mut file, content.as_bytes())?;
            file.sync_all()
        })
        .and_then(|()| put_in_place(&temp, path, found));
    match written {
        Ok(placed) => {
            if !placed {
                tracing::info!(
                    plan = plan.as_str(),
                    "{} was saved by hand while planb wrote it; the person's version stays, recorded at the next look",
                    path.display()
                );
            }
            Ok(placed)
        }
        Err(source) => {
            let _ = std::fs::remove_file(&temp);
            tracing::warn!(
                plan = plan.as_str(),
                "could not write the plan file: {source}"
            );
            Err(error(source).into())
        }
    }
}

/// Moves `temp` to `path` if `path` still holds `found` (`None`: no file),
/// and says whether it did; `temp` is gone either way. The check and the
/// move are one step: the file is swapped atomically with `temp`
/// (`RENAME_EXCHANGE`), what it held compared with `found`, and swapped
/// back when a writer changed it in between; a file that appeared is never
/// replaced (`RENAME_NOREPLACE`). Where the system cannot swap, a plain
/// rename.
#[cfg(target_os = "linux")]
fn put_in_place(temp: &Path, path: &Path, found: Option<&str>) -> std::io::Result<bool> {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    let Some(found) = found else {
        return match renameat_with(CWD, temp, CWD, path, RenameFlags::NOREPLACE) {
            Ok(()) => Ok(true),
            Err(rustix::io::Errno::EXIST) => std::fs::remove_file(temp).map(|()| false),
            Err(rustix::io::Errno::INVAL) => std::fs::rename(temp, path).map(|()| true),
            Err(errno) => Err(errno.into()),
        };
    };
    match renameat_with(CWD, temp, CWD, path, RenameFlags::EXCHANGE) {
        Ok(()) => {}
        Err(rustix::io::Errno::NOENT) => return put_in_place(temp, path, None),
        Err(rustix::io::Errno::INVAL) => return std::fs::rename(temp, path).map(|()| true),
        Err(errno) => return Err(errno.into()),
    }
    // `temp` now holds what `path` held at the swap.
    let mut out = read_swapped(temp)?;
    let unchanged = out.as_deref() == Some(found.as_bytes());
    if !unchanged {
        // A save came in between: swap it back. Should yet another save
        // replace what was put in `path` meanwhile, that one is the newest
        // and goes back in turn.
        let mut put = read_swapped(path)?;
        for _ in 0..SWAP_BACKS_MAX {
            renameat_with(CWD, temp, CWD, path, RenameFlags::EXCHANGE)?;
            let came_out = read_swapped(temp)?;
            if came_out == put {
                break;
            }
            put = std::mem::replace(&mut out, came_out);
        }
    }
    std::fs::remove_file(temp)?;
    Ok(unchanged)
}

/// How many times a person's save is swapped back into place while further
/// saves keep coming.
#[cfg(target_os = "linux")]
const SWAP_BACKS_MAX: usize = 16;

/// What a swap left under the temp name (`None`: too large to compare).
#[cfg(target_os = "linux")]
fn read_swapped(temp: &Path) -> std::io::Result<Option<Vec<u8>>> {
    Ok(crate::bounded::read(temp, PLAN_FILE_BYTES_MAX)?.ok())
}

#[cfg(not(target_os = "linux"))]
fn put_in_place(temp: &Path, path: &Path, _found: Option<&str>) -> std::io::Result<bool> {
    std::fs::rename(temp, path).map(|()| true)
}

/// Removes the temp files of the plans in `path`'s directory left by writers
/// that died mid-write. Called under the append lock, when no writer of this
/// data root is writing one.
fn remove_stale_temp_files(path: &Path) {
    if let Some(dir) = path.parent() {
        crate::plan_temps::remove_temps(dir, |_| true);
    }
}
