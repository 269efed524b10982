//! The run host: what every run of a task or a plan does around its steps.
//! It takes the task's run lock (and ends the run a dead process left
//! active), records the new run, reads the run's state, records ends and
//! starts in one append, and is the one bridge from async code to the
//! store's blocking calls ([`blocking`], [`off_workers`]).
//!
//! The run lock is held for the run's whole life: that lock is how every
//! other process tells a live run from a dead one, and why at most one run
//! of a task is active across processes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use planb_core::{
    Command, EventBody, INLINE_BLOB_BYTES_MAX, INLINE_BLOBS_BYTES_MAX, RunId, RunState, StepStart,
    Task, TaskId,
};
use planb_projections::{DataRoot, RunLock, RunLockError, Store, StoreError};

/// Why a run could not be hosted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    /// Another live worker runs the task.
    #[error("another worker runs task {0}")]
    Busy(TaskId),
    /// The store failed or refused.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The task does not exist.
    #[error("no task {0}")]
    NoTask(TaskId),
    /// A run of the task began after this one was asked for.
    #[error("run {run} of task {task} started after this run was asked for")]
    StartedMeanwhile {
        /// The task.
        task: TaskId,
        /// The run that began meanwhile.
        run: RunId,
    },
    /// A step's work panicked: the run cannot go on.
    #[error("a step of the run panicked: {0}")]
    Panicked(String),
    /// The run lock could not be taken for another reason.
    #[error(transparent)]
    RunLock(RunLockError),
}

impl From<RunLockError> for WorkerError {
    fn from(error: RunLockError) -> WorkerError {
        match error {
            RunLockError::Held(task) => WorkerError::Busy(task),
            RunLockError::Store(error) => WorkerError::Store(error),
            other => WorkerError::RunLock(other),
        }
    }
}

/// This machine's name, as a run records it with its owner's pid.
pub(crate) fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// Runs `f`, which may wait on the disk, off the async workers: on the
/// blocking pool under a multi-thread runtime, inline on a current-thread
/// one (see [`blocking`]).
pub async fn off_workers<R: Send + 'static>(
    f: impl FnOnce() -> R + Send + 'static,
) -> Result<R, tokio::task::JoinError> {
    if tokio::runtime::Handle::current().runtime_flavor()
        == tokio::runtime::RuntimeFlavor::CurrentThread
    {
        return Ok(f());
    }
    tokio::task::spawn_blocking(f).await
}

/// Runs the store call `f` (which may sync to disk) off the async workers:
/// on the blocking pool under a multi-thread runtime (whose workers serve
/// other requests), inline on a current-thread one (the engine thread, a
/// worker process, a command-line run), where the hand-off to the pool and
/// back would cost more than the call and the caller waits for it anyway.
pub async fn blocking<R: Send + 'static>(
    f: impl FnOnce() -> Result<R, StoreError> + Send + 'static,
) -> Result<R, StoreError> {
    off_workers(f)
        .await
        .map_err(|e| StoreError::Interrupted(e.to_string()))?
}

/// How long a run keeps trying for a run lock another process holds: a
/// liveness check (`worker_alive`) holds it for an instant.
const LOCK_PATIENCE: Duration = Duration::from_secs(2);

/// Takes `task`'s run lock, waiting out a brief hold (a liveness check, a
/// deletion).
pub async fn take_run_lock(root: &DataRoot, task: TaskId) -> Result<RunLock, WorkerError> {
    let started = Instant::now();
    loop {
        let root = root.clone();
        // A try: a lock held elsewhere is `Held` at once.
        let taken = off_workers(move || RunLock::acquire(&root, &task))
            .await
            .map_err(|e| StoreError::Interrupted(format!("taking the run lock of {task}: {e}")))?;
        match taken {
            Ok(lock) => return Ok(lock),
            Err(RunLockError::Held(_)) if started.elapsed() < LOCK_PATIENCE => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(error) => return Err(error.into()),
        }
    }
}

/// Takes `task`'s run lock, ends the run still active (it lost its process:
/// this one holds the lock now) and reads the task as recorded: how a task
/// worker and a plan's runner begin.
pub(crate) async fn hold_task(
    store: &Arc<Store>,
    task: TaskId,
) -> Result<(RunLock, Option<Task>), WorkerError> {
    let lock = take_run_lock(store.root(), task).await?;
    let held = Arc::clone(store);
    let found = blocking(move || {
        held.end_lost_run(task)?;
        held.read(|s| s.task(&task).cloned())
    })
    .await?;
    Ok((lock, found))
}

/// One run being hosted: the store, the task and the run.
#[derive(Clone)]
pub(crate) struct RunHost {
    pub(crate) store: Arc<Store>,
    pub(crate) task: TaskId,
    pub(crate) run: RunId,
}

impl RunHost {
    /// Records a new run of `task`, owned by this process (which holds the
    /// task's run lock).
    pub(crate) async fn start(
        store: &Arc<Store>,
        task: TaskId,
        resumed_from: Option<RunId>,
        variables: Option<String>,
    ) -> Result<RunHost, StoreError> {
        let run = RunId::from_uuid(store.env().event_id());
        RunHost::start_as(store, task, run, resumed_from, variables).await
    }

    /// Records the new run `run` of `task` (an id made before, told to
    /// whoever waits for the run to be recorded).
    pub(crate) async fn start_as(
        store: &Arc<Store>,
        task: TaskId,
        run: RunId,
        resumed_from: Option<RunId>,
        variables: Option<String>,
    ) -> Result<RunHost, StoreError> {
        let start = Command::StartRun {
            task,
            run,
            resumed_from,
            owner_pid: std::process::id(),
            host: host(),
            variables,
        };
        let held = Arc::clone(store);
        blocking(move || held.execute(start).map(|_| ())).await?;
        Ok(RunHost {
            store: Arc::clone(store),
            task,
            run,
        })
    }

    /// Executes `command` through the store.
    pub(crate) async fn execute(&self, command: Command) -> Result<(), StoreError> {
        let store = Arc::clone(&self.store);
        blocking(move || store.execute(command).map(|_| ())).await
    }

    /// The task as recorded now.
    pub(crate) async fn task(&self) -> Result<Option<Task>, StoreError> {
        let store = Arc::clone(&self.store);
        let id = self.task;
        blocking(move || store.read(|s| s.task(&id).cloned())).await
    }

    /// The run's state as recorded now; `None` when it is not recorded.
    pub(crate) async fn state(&self) -> Result<Option<RunState>, StoreError> {
        let store = Arc::clone(&self.store);
        let (task, run) = (self.task, self.run);
        blocking(move || {
            store.read(|s| {
                s.task(&task)
                    .and_then(|t| t.runs.iter().rev().find(|r| r.id == run))
                    .map(|r| r.state)
            })
        })
        .await
    }

    /// Stores `bytes` in the blob store (synced) and returns its hash.
    pub(crate) async fn put_blob(&self, bytes: Vec<u8>) -> Result<[u8; 32], StoreError> {
        let blobs = self.store.root().blobs();
        blocking(move || blobs.put(&bytes).map_err(blob_error)).await
    }

    /// Records `ends` and `starts` in one append, with the blobs they name:
    /// one durable write (and, off the engine thread, one trip to the
    /// blocking pool). A small blob goes in the log ahead of them (and has
    /// no file) while one append can hold it; the rest are synced in the
    /// blob store first. Returns the steps whose start was recorded: none
    /// of them while the run is stopping.
    pub(crate) async fn record(
        &self,
        blobs: Vec<Vec<u8>>,
        ends: Vec<Command>,
        starts: Vec<StepStart>,
    ) -> Result<Vec<String>, StoreError> {
        if ends.is_empty() && starts.is_empty() {
            return Ok(Vec::new());
        }
        let store = Arc::clone(&self.store);
        let (task, run) = (self.task, self.run);
        blocking(move || {
            let inline = inline_or_put(&store, blobs)?;
            let envelopes = store.execute(Command::SettleAndStart {
                task,
                run,
                ends,
                starts,
                inline,
            })?;
            Ok(envelopes
                .into_iter()
                .filter_map(|e| match e.event.body {
                    EventBody::StepStarted { step, .. } => Some(step),
                    _ => None,
                })
                .collect())
        })
        .await
    }
}

/// The blobs one append carries in the log; the others are put in the
/// blob store (synced) here.
fn inline_or_put(store: &Store, blobs: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, StoreError> {
    let mut inline = Vec::new();
    let mut inlined = 0;
    for bytes in blobs {
        if bytes.len() <= INLINE_BLOB_BYTES_MAX && inlined + bytes.len() <= INLINE_BLOBS_BYTES_MAX {
            inlined += bytes.len();
            inline.push(bytes);
        } else {
            store.root().blobs().put(&bytes).map_err(blob_error)?;
        }
    }
    Ok(inline)
}

/// A blob store failure as a store error.
pub(crate) fn blob_error(error: planb_projections::BlobError) -> StoreError {
    StoreError::Blob(Box::new(error))
}
