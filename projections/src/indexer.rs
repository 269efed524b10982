//! Who keeps the redb index, and the thread that catches it up.
//!
//! redb keeps a database to one process, so the processes on a data root
//! take turns: whoever holds an `flock` on `<root>/index.lock` owns the index.
//! The owner catches it up on a background thread after each change (once
//! no change came for 20 ms, at most 500 ms after the first, so that a
//! burst of changes costs one transaction), off the write path, with non-durable commits made durable about once a second and when
//! the owner closes. Every other process tries to take the lock when it
//! wakes its thread, so when the owner exits (or is killed, which releases the
//! lock) the next one carries on from the index's applied cursor.
//!
//! A rebuild swaps a new index file in while the owner holds the old one
//! open; the owner notices (the path names another inode) and reopens.

use std::fs::File;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use planb_log::{LogOptions, Storage};

use crate::StoreError;
use crate::index::Index;
use crate::root::DataRoot;

/// How long index commits may stay non-durable.
const DURABLE_EVERY: Duration = Duration::from_secs(1);

/// How long the log must be quiet after a wake before the indexer catches up.
const SETTLE: Duration = Duration::from_millis(20);

/// The longest a catch-up waits for a busy log to be quiet (a plan's steps
/// append every fraction of a millisecond): its appends are then indexed in
/// a transaction or two a second, not one every [`SETTLE`], and the
/// indexer's work stays off the cores the run needs.
const SETTLE_MAX: Duration = Duration::from_millis(500);

/// The index, when this process owns it.
#[derive(Debug)]
pub(crate) struct IndexSlot {
    root: DataRoot,
    storage: Arc<dyn Storage>,
    options: LogOptions,
    /// Held (locked) for as long as this process owns the index.
    lock: Option<File>,
    index: Option<Index>,
}

impl IndexSlot {
    pub(crate) fn new(root: DataRoot, storage: Arc<dyn Storage>, options: LogOptions) -> IndexSlot {
        IndexSlot {
            root,
            storage,
            options,
            lock: None,
            index: None,
        }
    }

    /// The index, taking ownership of it first if nobody else has it, and
    /// reopening it if a rebuild replaced the file. `None` while another
    /// process owns it.
    pub(crate) fn index(&mut self) -> Result<Option<&Index>, StoreError> {
        if self.lock.is_none() {
            let path = self.root.root().join("index.lock");
            let io = |op| {
                let path = path.display().to_string();
                move |source| StoreError::Io { op, path, source }
            };
            let file = File::options()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
                .map_err(io("open"))?;
            match file.try_lock() {
                Ok(()) => self.lock = Some(file),
                Err(std::fs::TryLockError::WouldBlock) => return Ok(None),
                Err(std::fs::TryLockError::Error(source)) => return Err(io("lock")(source)),
            }
        }
        if self.index.as_ref().is_some_and(Index::is_replaced)
            && let Some(old) = self.index.take()
        {
            // The old file is no longer anyone's index; nothing to keep.
            drop(old);
        }
        if self.index.is_none() {
            let mut index = Index::open(
                &self.root.index_path(),
                Arc::clone(&self.storage),
                self.options,
            )?;
            index.set_durable_every(DURABLE_EVERY);
            self.index = Some(index);
        }
        Ok(self.index.as_ref())
    }

    /// Catches the index up if this process owns it (or can take it over).
    fn catch_up(&mut self) -> Result<(), StoreError> {
        if let Some(index) = self.index()? {
            index.catch_up()?;
            index.flush_if_due()?;
        }
        Ok(())
    }

    /// Makes every commit durable and gives up ownership.
    fn close(&mut self) {
        if let Some(index) = self.index.take()
            && let Err(error) = index.catch_up().and_then(|_| index.flush())
        {
            tracing::warn!("closing the index: {error} (the next owner catches up)");
        }
        self.lock = None;
    }
}

/// The thread that catches the index up after changes. Dropping it lets the
/// thread finish its last catch-up, make it durable and release the index.
#[derive(Debug)]
pub(crate) struct Indexer {
    slot: Arc<Mutex<IndexSlot>>,
    wake: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn lock_slot(slot: &Mutex<IndexSlot>) -> MutexGuard<'_, IndexSlot> {
    slot.lock().unwrap_or_else(|p| p.into_inner())
}

impl Indexer {
    pub(crate) fn start(slot: IndexSlot) -> Indexer {
        let slot = Arc::new(Mutex::new(slot));
        let (wake, woken) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("planb-indexer".into())
            .spawn({
                let slot = Arc::clone(&slot);
                move || {
                    loop {
                        match woken.recv_timeout(DURABLE_EVERY) {
                            Ok(()) => {
                                // Let a burst of appends (a plan's steps) come in
                                // and be indexed in one transaction; meanwhile their
                                // wakes find this thread asleep, not waiting.
                                let first = Instant::now();
                                loop {
                                    std::thread::sleep(SETTLE);
                                    // Many changes may have queued up: one catch-up covers them all.
                                    let mut more = false;
                                    while woken.try_recv().is_ok() {
                                        more = true;
                                    }
                                    if !more || first.elapsed() >= SETTLE_MAX {
                                        break;
                                    }
                                }
                            }
                            Err(RecvTimeoutError::Timeout) => {}
                            Err(RecvTimeoutError::Disconnected) => break,
                        }
                        if let Err(error) = lock_slot(&slot).catch_up() {
                            tracing::warn!("index catch-up failed (rebuild repairs it): {error}");
                        }
                    }
                    lock_slot(&slot).close();
                }
            });
        match thread {
            Ok(thread) => Indexer {
                slot,
                wake: Some(wake),
                thread: Some(thread),
            },
            Err(error) => {
                tracing::warn!("no indexer thread ({error}); the index catches up on open");
                Indexer {
                    slot,
                    wake: None,
                    thread: None,
                }
            }
        }
    }

    pub(crate) fn wake(&self) {
        if let Some(wake) = &self.wake {
            let _ = wake.send(());
        }
    }

    /// Runs `f` on the index if this process owns it.
    pub(crate) fn with_index<R>(
        &self,
        f: impl FnOnce(&Index) -> R,
    ) -> Result<Option<R>, StoreError> {
        let mut slot = lock_slot(&self.slot);
        Ok(slot.index()?.map(f))
    }
}

impl Drop for Indexer {
    fn drop(&mut self) {
        self.wake = None;
        match self.thread.take() {
            Some(thread) => {
                let _ = thread.join();
            }
            None => lock_slot(&self.slot).close(),
        }
    }
}
