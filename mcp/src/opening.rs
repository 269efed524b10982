//! The store opens on a thread of its own while the MCP handshake goes on.
//!
//! Opening folds the log tail after the state snapshot, which after a long
//! absence or on a large history can take a while; `initialize` and
//! `tools/list` need none of it, and a client gives a server only so long to
//! answer them. Tool calls and form requests reach the store through a
//! [`StoreHandle`]; they wait (on tokio's blocking pool, see `blocking.rs`)
//! until the store is open, or get the reason it could not be opened.

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};

use planb_projections::{DataRoot, Environment, Store, StoreError};

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
    #[cfg(test)]
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
