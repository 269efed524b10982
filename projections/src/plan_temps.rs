//! The temp files a named plan's file is written through
//! (`.<planName>-plan.md.<pid>.<sequence>.tmp`), and removing those a
//! writer left when it was killed mid-write.

use std::path::Path;

/// The process id in a plan file's temp file's name
/// (`.<planName>-plan.md.<pid>.<sequence>.tmp`); `None` for any other name.
fn temp_writer(name: &str) -> Option<u32> {
    let inner = name.strip_prefix('.')?.strip_suffix(".tmp")?;
    let (_, numbers) = inner.rsplit_once("-plan.md.")?;
    let (pid, sequence) = numbers.split_once('.')?;
    let digits = |n: &str| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit());
    if !digits(pid) || !digits(sequence) {
        return None;
    }
    pid.parse().ok()
}

/// Whether the process `pid` is gone: no process of that id runs (one
/// this process may not signal still runs).
fn writer_gone(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    rustix::process::test_kill_process(pid) == Err(rustix::io::Errno::SRCH)
}

/// Most plans directories swept when a data root is opened.
const SWEPT_DIRS_MAX: usize = 1024;

/// Removes, from each plans directory the log names, the temp files of
/// writers no longer running, so what a killed writer left does not wait for
/// the next change of a plan. Without the append lock: a writer still
/// running keeps its file, as the process id in its name tells.
pub(crate) fn remove_dead_writers_temps(state: &planb_core::State) {
    let dirs: std::collections::BTreeSet<&str> = state
        .named_plans()
        .keys()
        .map(|key| key.dir.as_str())
        .filter(|dir| Path::new(dir).is_absolute())
        .collect();
    for dir in dirs.into_iter().take(SWEPT_DIRS_MAX) {
        remove_temps(Path::new(dir), writer_gone);
    }
}

/// Removes the plan temp files in `dir` whose writer's process id `stale`
/// accepts.
pub(crate) fn remove_temps(dir: &Path, stale: impl Fn(u32) -> bool) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if temp_writer(&name).is_some_and(&stale) {
            let path = entry.path();
            match std::fs::remove_file(&path) {
                Ok(()) => tracing::info!(
                    "removed {}, left by a write that was interrupted",
                    path.display()
                ),
                Err(error) => tracing::warn!("cannot remove {}: {error}", path.display()),
            }
        }
    }
}
