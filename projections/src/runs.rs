//! Whether a task's worker lives: the run lock.
//!
//! A worker takes `<root>/tasks/<task>/run.lock` (an exclusive `flock`)
//! before it records `RunStarted` and holds it until after `RunEnded`; the
//! kernel drops the lock when the process dies, however it dies. So a run
//! the log says is active, whose lock is free, lost its worker:
//! [`Store::reap_dead_runs`] ends it `failed` with `worker_error`,
//! recoverable. The state is read before the lock is tried, never after:
//! a run seen active was started by a worker that already held the lock.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::PathBuf;

use planb_core::{Command, RunId, RunOutcome, TaskId};

use crate::{DataRoot, Store, StoreError};

/// Why a run lock could not be taken.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunLockError {
    /// Another live process holds it: a worker runs this task.
    #[error("task {0}: a worker is already running it")]
    Held(TaskId),
    /// The lock file could not be opened or locked.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A worker's hold on its task's run lock; dropping it releases the lock.
#[derive(Debug)]
pub struct RunLock {
    _file: File,
}

impl DataRoot {
    /// `tasks/<task>/`: the task's files.
    pub fn task_dir(&self, task: &TaskId) -> PathBuf {
        self.root().join("tasks").join(task.to_string())
    }

    /// `tasks/<task>/run.lock`.
    pub fn run_lock_path(&self, task: &TaskId) -> PathBuf {
        self.task_dir(task).join("run.lock")
    }
}

fn open(root: &DataRoot, task: &TaskId) -> Result<File, StoreError> {
    let path = root.run_lock_path(task);
    let io = |op: &'static str| {
        let path = path.display().to_string();
        move |source| StoreError::Io { op, path, source }
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io("create directory"))?;
    }
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io("open"))
}

impl RunLock {
    /// Takes the run lock of `task` for this process, or says that a live
    /// worker holds it.
    pub fn acquire(root: &DataRoot, task: &TaskId) -> Result<RunLock, RunLockError> {
        let file = open(root, task)?;
        match file.try_lock() {
            Ok(()) => Ok(RunLock { _file: file }),
            Err(TryLockError::WouldBlock) => Err(RunLockError::Held(*task)),
            Err(TryLockError::Error(source)) => Err(StoreError::Io {
                op: "lock",
                path: root.run_lock_path(task).display().to_string(),
                source,
            }
            .into()),
        }
    }
}

/// Whether a live process holds `task`'s run lock.
pub fn worker_alive(root: &DataRoot, task: &TaskId) -> Result<bool, StoreError> {
    match RunLock::acquire(root, task) {
        Ok(_released_on_drop) => Ok(false),
        Err(RunLockError::Held(_)) => Ok(true),
        Err(RunLockError::Store(error)) => Err(error),
    }
}

impl Store {
    /// Ends every active run whose worker is gone as `failed`,
    /// `worker_error`, recoverable. Returns the runs it ended.
    pub fn reap_dead_runs(&self) -> Result<Vec<(TaskId, RunId)>, StoreError> {
        // The state first, then the locks (see the module docs).
        let active: Vec<(TaskId, RunId)> = self.read(|state| {
            state
                .tasks()
                .values()
                .filter_map(|task| task.active_run().map(|run| (task.id, run.id)))
                .collect()
        })?;
        let mut ended = Vec::new();
        for (task, run) in active {
            if worker_alive(self.root(), &task)? {
                continue;
            }
            let command = Command::EndRun {
                task,
                run,
                outcome: RunOutcome::Failed,
                reason: Some("worker_error".into()),
                failed_step: None,
                recoverable: true,
            };
            match self.execute(command) {
                Ok(events) if !events.is_empty() => ended.push((task, run)),
                // It ended on its own meanwhile.
                Ok(_) | Err(StoreError::Rejected(_)) => {}
                Err(error) => return Err(error),
            }
        }
        Ok(ended)
    }
}
