//! A thread that rewrites the large `session.json` files a projection left
//! behind once they are due (see `files/live.rs`), so a manifest lags its
//! session by at most about a second while its writer lives, even when no
//! further command comes.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;

/// The flusher thread and when it should next run.
#[derive(Debug)]
pub(crate) struct Flusher {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Debug, Default)]
struct Shared {
    due: Mutex<Due>,
    wake: Condvar,
}

#[derive(Debug, Default)]
struct Due {
    at: Option<Instant>,
    stop: bool,
}

impl Flusher {
    /// Starts the thread; `flush` runs whenever a scheduled time has come and
    /// returns when it should run next, if ever.
    pub(crate) fn start(mut flush: impl FnMut() -> Option<Instant> + Send + 'static) -> Flusher {
        let shared = Arc::new(Shared::default());
        let thread = std::thread::Builder::new()
            .name("planb-manifests".into())
            .spawn({
                let shared = Arc::clone(&shared);
                move || {
                    let mut due = lock(&shared.due);
                    loop {
                        if due.stop {
                            return;
                        }
                        let now = Instant::now();
                        match due.at {
                            None => due = shared.wake.wait(due).unwrap_or_else(|p| p.into_inner()),
                            Some(at) if at > now => {
                                due = shared
                                    .wake
                                    .wait_timeout(due, at - now)
                                    .unwrap_or_else(|p| p.into_inner())
                                    .0;
                            }
                            Some(_) => {
                                due.at = None;
                                drop(due);
                                let next = flush();
                                due = lock(&shared.due);
                                due.at = earliest(due.at, next);
                            }
                        }
                    }
                }
            });
        let thread = match thread {
            Ok(thread) => Some(thread),
            Err(error) => {
                // Manifests then catch up with the next command or at close.
                tracing::warn!("cannot start the manifest flusher: {error}");
                None
            }
        };
        Flusher { shared, thread }
    }

    /// Makes the thread run at `at` (or earlier, if it was due earlier).
    pub(crate) fn schedule(&self, at: Option<Instant>) {
        if at.is_none() {
            return;
        }
        let mut due = lock(&self.shared.due);
        due.at = earliest(due.at, at);
        self.shared.wake.notify_one();
    }

    /// Stops the thread and waits for it (a flush under way finishes).
    pub(crate) fn stop(&mut self) {
        lock(&self.shared.due).stop = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        self.stop();
    }
}

fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn lock(due: &Mutex<Due>) -> MutexGuard<'_, Due> {
    due.lock().unwrap_or_else(|p| p.into_inner())
}
