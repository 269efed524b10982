//! Whether a task's worker lives: the run lock.
//!
//! A worker takes `<root>/tasks/<task>/run.lock` (an exclusive `flock`)
//! before it records `RunStarted` and holds it until after `RunEnded`; the
//! kernel drops the lock when the process dies, however it dies. So a run
//! the log says is active, whose lock is free, lost its worker:
//! [`Store::end_dead_run`] ends it `failed` with `worker_error`,
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
    /// Ends `task`'s active run as `failed`, `worker_error`, recoverable
    /// when its worker is gone. Returns the run it ended, if any.
    pub fn end_dead_run(&self, task: TaskId) -> Result<Option<RunId>, StoreError> {
        // The state first, then the lock (see the module docs).
        let active = self.read(|state| state.task(&task).and_then(|t| t.active_run()).is_some())?;
        if !active || worker_alive(self.root(), &task)? {
            return Ok(None);
        }
        self.end_lost_run(task)
    }

    /// Ends `task`'s active run as `failed`, `worker_error`, recoverable,
    /// without looking at the lock: for the holder of the run lock, which
    /// knows that no worker runs it.
    pub fn end_lost_run(&self, task: TaskId) -> Result<Option<RunId>, StoreError> {
        let active = self.read(|state| {
            let run = state.task(&task)?.active_run()?;
            Some((run.id, run.running.iter().next().cloned()))
        })?;
        let Some((run, failed_step)) = active else {
            return Ok(None);
        };
        let command = Command::EndRun {
            task,
            run,
            outcome: RunOutcome::Failed,
            reason: Some(planb_core::RunEndReason::WorkerError(None).to_wire()),
            failed_step,
            recoverable: true,
        };
        match self.execute(command) {
            Ok(events) if !events.is_empty() => Ok(Some(run)),
            // It ended on its own meanwhile, or another process ended it.
            Ok(_) | Err(StoreError::Rejected(_)) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// [`end_dead_run`](Self::end_dead_run) for every task with an active
    /// run. Returns the runs it ended.
    pub fn reap_dead_runs(&self) -> Result<Vec<(TaskId, RunId)>, StoreError> {
        let active: Vec<TaskId> = self.read(|state| {
            state
                .tasks()
                .values()
                .filter(|task| task.active_run().is_some())
                .map(|task| task.id)
                .collect()
        })?;
        let mut ended = Vec::new();
        for task in active {
            if let Some(run) = self.end_dead_run(task)? {
                ended.push((task, run));
            }
        }
        Ok(ended)
    }
}
