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

/// `task`'s active run and a step it was running, if any.
fn active_run(state: &planb_core::State, task: TaskId) -> Option<(RunId, Option<String>)> {
    let run = state.task(&task)?.active_run()?;
    Some((run.id, run.running.iter().next().cloned()))
}

impl Store {
    /// Ends `task`'s active run as `failed`, `worker_error`, recoverable
    /// when its worker is gone. Returns the run it ended, if any.
    pub fn end_dead_run(&self, task: TaskId) -> Result<Option<RunId>, StoreError> {
        // The state first, then the lock (see the module docs); only the run
        // read then is ended: a run begun since, by a worker that took the
        // lock after the look at it, is that worker's.
        let Some((run, failed_step)) = self.read(|state| active_run(state, task))? else {
            return Ok(None);
        };
        if worker_alive(self.root(), &task)? {
            return Ok(None);
        }
        self.end_as_lost(task, run, failed_step)
    }

    /// Ends `task`'s active run as `failed`, `worker_error`, recoverable,
    /// without looking at the lock: for the holder of the run lock, which
    /// knows that no worker runs it.
    pub fn end_lost_run(&self, task: TaskId) -> Result<Option<RunId>, StoreError> {
        let Some((run, failed_step)) = self.read(|state| active_run(state, task))? else {
            return Ok(None);
        };
        self.end_as_lost(task, run, failed_step)
    }

    /// Ends `run` of `task` as lost, unless it is no longer the active run.
    fn end_as_lost(
        &self,
        task: TaskId,
        run: RunId,
        failed_step: Option<String>,
    ) -> Result<Option<RunId>, StoreError> {
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use planb_core::{Command, RunId, RunOutcome, TaskId, Timestamp};

    use crate::{DataRoot, FixedEnvironment, Store};

    fn start(store: &Store, task: TaskId) -> RunId {
        let run = RunId::from_uuid(uuid::Uuid::now_v7());
        let start = Command::StartRun {
            task,
            run,
            resumed_from: None,
            owner_pid: 1,
            host: "test".into(),
            variables: None,
        };
        store.execute(start).expect("start run");
        run
    }

    /// A run read as active, whose worker was then found gone, is ended
    /// only while it is still the active run: one begun since is not.
    #[test]
    fn a_lost_run_read_earlier_ends_no_run_begun_since() {
        let dir = tempfile::tempdir().expect("tempdir");
        let env = Arc::new(FixedEnvironment::new(Timestamp(1_700_000_000_000), 1_000));
        let (store, _) = Store::open(DataRoot::new(dir.path()), env).expect("open");
        let task = TaskId::from_uuid(uuid::Uuid::now_v7());
        let create = Command::CreateTask {
            task,
            pipeline: "project-plan".into(),
            pipeline_version: 2,
            prompt: "A bakery".into(),
            speed: "fast".into(),
            target: "build_plan".into(),
            model_profile: None,
            client_request_id: None,
            project_path: None,
        };
        store.execute(create).expect("create task");
        let first = start(&store, task);
        let end = Command::EndRun {
            task,
            run: first,
            outcome: RunOutcome::Stopped,
            reason: None,
            failed_step: None,
            recoverable: true,
        };
        store.execute(end).expect("end the first run");
        let second = start(&store, task);
        let ended = store
            .end_as_lost(task, first, None)
            .expect("no store error");
        assert_eq!(ended, None);
        let active = store.read(|s| s.task(&task).and_then(|t| t.active_run()).map(|r| r.id));
        assert_eq!(active.expect("read"), Some(second));
    }
}
