//! The store as a long-lived front door holds it: opened on a thread of its
//! own while the front door starts (an MCP server's handshake goes on
//! meanwhile), and reached from async code through this module's calls,
//! which run the store's blocking work so a slow disk never stalls the
//! runtime's other tasks.
//!
//! Opening folds the log tail after the state snapshot, which after a long
//! absence or on a large history can take a while; a client gives a server
//! only so long to answer `initialize` and `tools/list`, which need none of
//! it. Calls made before the store is open wait (on tokio's blocking pool)
//! until it is, or get the reason it could not be opened. Once it is open,
//! a call on a multi-thread runtime runs in place (`block_in_place`), so
//! the caller's reply leaves from the same thread.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};

use planb_core::{Command, EventBody, PlanKey, State};
use planb_projections::{DataRoot, Environment, PlanFileChange, Store, StoreError};

/// The store, open or on its way.
#[derive(Debug, Clone)]
pub struct StoreHandle {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    root: PathBuf,
    env: Arc<dyn Environment>,
    slot: Mutex<Slot>,
    ready: Condvar,
}

#[derive(Debug)]
enum Slot {
    Opening,
    Open(Arc<Store>),
    Failed(String),
}

impl StoreHandle {
    /// Starts opening the store at `root` on its own thread.
    pub fn open(root: DataRoot, env: Arc<dyn Environment>) -> StoreHandle {
        let handle = StoreHandle::new(root.root().to_path_buf(), Arc::clone(&env), Slot::Opening);
        let inner = Arc::clone(&handle.inner);
        let spawned = std::thread::Builder::new()
            .name("planb-store-open".into())
            .spawn(move || {
                // A panic while opening (a bug) must not leave every tool
                // waiting for an open that never ends.
                let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    Store::open(root, env)
                }));
                let slot = match opened {
                    Ok(Ok((store, report))) => {
                        report_open(&inner.root, &report);
                        Slot::Open(Arc::new(store))
                    }
                    Ok(Err(error)) => {
                        tracing::error!(
                            "cannot open the data root {}: {error}",
                            inner.root.display()
                        );
                        Slot::Failed(error.to_string())
                    }
                    Err(_) => Slot::Failed("opening it panicked (a bug in planb)".into()),
                };
                *lock(&inner.slot) = slot;
                inner.ready.notify_all();
            });
        if let Err(error) = spawned {
            *lock(&handle.inner.slot) =
                Slot::Failed(format!("cannot start a thread to open it: {error}"));
        }
        handle
    }

    /// A handle on a store that is open already.
    pub fn ready(store: Arc<Store>) -> StoreHandle {
        let root = store.root().root().to_path_buf();
        let env = Arc::clone(store.env());
        StoreHandle::new(root, env, Slot::Open(store))
    }

    fn new(root: PathBuf, env: Arc<dyn Environment>, slot: Slot) -> StoreHandle {
        StoreHandle {
            inner: Arc::new(Inner {
                root,
                env,
                slot: Mutex::new(slot),
                ready: Condvar::new(),
            }),
        }
    }

    /// The data root the store is on.
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// The clock and id source (available before the store is open).
    pub fn env(&self) -> &Arc<dyn Environment> {
        &self.inner.env
    }

    /// The store, once open: blocks until then. Call it off the async
    /// runtime's worker threads.
    pub fn wait(&self) -> Result<Arc<Store>, StoreError> {
        let mut slot = lock(&self.inner.slot);
        loop {
            match &*slot {
                Slot::Opening => {
                    slot = self
                        .inner
                        .ready
                        .wait(slot)
                        .unwrap_or_else(|p| p.into_inner());
                }
                Slot::Open(store) => return Ok(Arc::clone(store)),
                Slot::Failed(reason) => {
                    return Err(StoreError::Io {
                        op: "open the data root",
                        path: self.inner.root.display().to_string(),
                        source: std::io::Error::other(reason.clone()),
                    });
                }
            }
        }
    }

    /// The store, once open, without blocking the caller's thread: at
    /// once when it is open already (no trip to the blocking pool).
    pub async fn opened(&self) -> Result<Arc<Store>, StoreError> {
        if let Some(store) = self.get() {
            return Ok(store);
        }
        let handle = self.clone();
        planb_engine::host::blocking(move || handle.wait()).await
    }

    /// The store if it is open by now.
    pub fn get(&self) -> Option<Arc<Store>> {
        match &*lock(&self.inner.slot) {
            Slot::Open(store) => Some(Arc::clone(store)),
            Slot::Opening | Slot::Failed(_) => None,
        }
    }
}

fn lock(slot: &Mutex<Slot>) -> std::sync::MutexGuard<'_, Slot> {
    slot.lock().unwrap_or_else(|p| p.into_inner())
}

fn report_open(root: &std::path::Path, report: &planb_projections::OpenReport) {
    for truncation in &report.recovery.truncations {
        tracing::warn!(
            "log recovery removed a torn tail: {} bytes at offset {} of {} ({})",
            truncation.bytes,
            truncation.offset,
            truncation.segment,
            truncation.damage
        );
    }
    match report.from_snapshot {
        Some(cursor) => tracing::info!(
            "data root {} open: state snapshot at cursor {cursor}, {} events after it",
            root.display(),
            report.events
        ),
        None => tracing::info!(
            "data root {} open: {} events folded",
            root.display(),
            report.events
        ),
    }
}

/// A store call that did not finish: the runtime is shutting down, or the
/// call panicked (a bug, already reported by the panic hook).
fn interrupted(join: tokio::task::JoinError) -> StoreError {
    StoreError::Interrupted(join.to_string())
}

/// Blocking work that did not finish: the runtime is shutting down, or it
/// panicked (a bug, already reported by the panic hook).
#[derive(Debug, thiserror::Error)]
#[error("interrupted: {0}")]
pub struct Interrupted(tokio::task::JoinError);

/// Runs `work` (file or store calls that block) off the async workers,
/// through the engine's bridge.
pub async fn off_thread<R: Send + 'static>(
    work: impl FnOnce() -> R + Send + 'static,
) -> Result<R, Interrupted> {
    planb_engine::host::off_workers(work)
        .await
        .map_err(Interrupted)
}

impl StoreHandle {
    /// Runs `work` on the open store. Once the store is open and the runtime
    /// has other workers to carry on its tasks, the work runs in place
    /// (`block_in_place`): the caller's reply leaves from this thread, without
    /// a hop to the blocking pool and back. Otherwise (still opening, a
    /// single-threaded runtime) it goes to the blocking pool.
    async fn on_store<R: Send + 'static>(
        &self,
        work: impl FnOnce(&planb_projections::Store) -> Result<R, StoreError> + Send + 'static,
    ) -> Result<R, StoreError> {
        let in_place = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if in_place && let Some(open) = self.get() {
            return tokio::task::block_in_place(|| work(&open));
        }
        let store = self.clone();
        tokio::task::spawn_blocking(move || store.wait().and_then(|open| work(&open)))
            .await
            .unwrap_or_else(|join| Err(interrupted(join)))
    }

    /// [`Store::execute`], returning the bodies of the recorded events.
    pub async fn execute(&self, command: Command) -> Result<Vec<EventBody>, StoreError> {
        self.on_store(move |store| store.execute(command))
            .await
            .map(|envelopes| envelopes.into_iter().map(|e| e.event.body).collect())
    }

    /// [`Store::read`]: `f` runs on the state after catching up on the log.
    pub async fn read<R: Send + 'static>(
        &self,
        f: impl FnOnce(&State) -> R + Send + 'static,
    ) -> Result<R, StoreError> {
        self.on_store(move |store| store.read(f)).await
    }

    /// [`Store::execute_on_plan_file`]: records a hand edit of the plan's file,
    /// runs `command` and brings the file up to date, as one step.
    pub async fn on_plan_file(
        &self,
        plan: PlanKey,
        path: PathBuf,
        command: Option<Command>,
    ) -> Result<PlanFileChange, StoreError> {
        let store = self.clone();
        tokio::task::spawn_blocking(move || {
            store.wait()?.execute_on_plan_file(&plan, &path, command)
        })
        .await
        .unwrap_or_else(|join| Err(interrupted(join)))
    }
}
