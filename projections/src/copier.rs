//! Writes the files of the small blobs the log holds (`BlobStored`), off
//! the append's path and in batches. A file created between two syncs of
//! the log is carried by the next one (the filesystem's journal orders it
//! before the log's), so a file per step written on the way would cost
//! every step about a second sync. Until its file is written, a blob is
//! read from the log ([`Blobs::get`]); a process killed before writing them
//! loses only copies.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::Blobs;

/// How long the copier gathers blobs before writing them.
const BATCH: Duration = Duration::from_millis(100);

/// The copier thread.
#[derive(Debug)]
pub(crate) struct Copier {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Debug, Default)]
struct Shared {
    queue: Mutex<Queue>,
    /// Signalled when the queue stops being empty, and at close.
    wake: Condvar,
}

#[derive(Debug, Default)]
struct Queue {
    blobs: Vec<Vec<u8>>,
    closed: bool,
}

fn lock(shared: &Shared) -> MutexGuard<'_, Queue> {
    shared.queue.lock().unwrap_or_else(|p| p.into_inner())
}

impl Copier {
    /// Starts the thread writing into `blobs`.
    pub(crate) fn start(blobs: Blobs) -> Copier {
        let shared = Arc::new(Shared::default());
        let thread = std::thread::Builder::new()
            .name("planb-blob-copies".into())
            .spawn({
                let shared = Arc::clone(&shared);
                move || copy_until_closed(&blobs, &shared)
            });
        let thread = match thread {
            Ok(thread) => Some(thread),
            Err(error) => {
                // The blobs are then read from the log until a reader
                // restores their files.
                tracing::warn!("cannot start the blob copier: {error}");
                None
            }
        };
        Copier { shared, thread }
    }

    /// Has a copy of `bytes` written within about [`BATCH`]. Only the first
    /// blob of a batch wakes the thread.
    pub(crate) fn copy(&self, bytes: Vec<u8>) {
        if self.thread.is_none() {
            return;
        }
        let mut queue = lock(&self.shared);
        queue.blobs.push(bytes);
        if queue.blobs.len() == 1 {
            self.shared.wake.notify_one();
        }
    }
}

impl Drop for Copier {
    /// Writes what is pending, then ends the thread.
    fn drop(&mut self) {
        lock(&self.shared).closed = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn copy_until_closed(blobs: &Blobs, shared: &Shared) {
    let mut queue = lock(shared);
    loop {
        while queue.blobs.is_empty() && !queue.closed {
            queue = shared.wake.wait(queue).unwrap_or_else(|p| p.into_inner());
        }
        // Gather for a while (a close cuts it short).
        let until = Instant::now() + BATCH;
        while !queue.closed {
            let now = Instant::now();
            if now >= until {
                break;
            }
            queue = shared
                .wake
                .wait_timeout(queue, until - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        let batch = std::mem::take(&mut queue.blobs);
        let closed = queue.closed;
        drop(queue);
        for bytes in &batch {
            if let Err(error) = blobs.put_copy(bytes) {
                tracing::warn!("a blob's file was not written (the log holds it): {error}");
            }
        }
        if closed {
            return;
        }
        queue = lock(shared);
    }
}
