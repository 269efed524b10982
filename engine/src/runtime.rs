//! The engine thread of a long-lived process (`planb-mcp` serving stdio):
//! one current-thread tokio runtime where plan runs and the connections to
//! downstream servers live.
//!
//! A chain step is a call to a downstream server, its result recorded and
//! the next call sent. On a multi-thread runtime every one of those moves
//! is a hand-off between threads (a worker wakes another, a store call goes
//! to the blocking pool and back, a connection's reader wakes the run); on
//! this thread they are turns of one loop. Store calls made from here run
//! inline ([`crate::host::blocking`]): a step's durable append is on
//! its critical path anyway, and a run's other tasks wait at most that long.
//!
//! A command-line run or a task worker builds its own current-thread
//! runtime and needs none of this.

use std::future::Future;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

struct Engine {
    handle: Handle,
    /// Ends the thread's loop, once; the receiver hears when it has ended.
    stop: Mutex<Option<(oneshot::Sender<()>, std::sync::mpsc::Receiver<()>)>>,
}

static ENGINE: OnceLock<Option<Engine>> = OnceLock::new();

/// How long [`shutdown`] waits for the thread to end. Its tasks are dropped
/// as soon as it sees the stop; it may not see it sooner than a store call
/// it is making returns (one waiting on the log's lock while another
/// process rebuilds), and the process does not wait for that.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(3);

fn start() -> Option<Engine> {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::warn!(
                "the engine thread's runtime did not start ({error}); plan runs share the server's"
            );
            return None;
        }
    };
    let handle = runtime.handle().clone();
    let (stop, stopped) = oneshot::channel::<()>();
    let (ended_tx, ended) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("planb-engine".into())
        .spawn(move || {
            // A dropped sender (the process ending) stops it too.
            let _ = runtime.block_on(stopped);
            // Drops every task (and a downstream server's child with its
            // connection); blocking-pool threads are not waited for.
            runtime.shutdown_background();
            let _ = ended_tx.send(());
        });
    match thread {
        Ok(_) => Some(Engine {
            handle,
            stop: Mutex::new(Some((stop, ended))),
        }),
        Err(error) => {
            tracing::warn!(
                "the engine thread did not start ({error}); plan runs share the server's"
            );
            None
        }
    }
}

/// The engine thread's runtime, started on first use; `None` when it
/// could not start (its work then runs where it is asked for).
pub fn handle() -> Option<Handle> {
    ENGINE
        .get_or_init(start)
        .as_ref()
        .map(|engine| engine.handle.clone())
}

/// Runs `future` on the engine thread (or, when it could not start, on the
/// caller's runtime).
pub fn spawn<F>(future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    match handle() {
        Some(handle) => handle.spawn(future),
        None => tokio::spawn(future),
    }
}

/// Stops the engine thread, if it was started: what still runs there is
/// dropped (a downstream server's child process with it), waiting at most
/// [`SHUTDOWN_WAIT`]. Later calls to [`spawn`] run nowhere; call it once,
/// last.
pub fn shutdown() {
    let Some(Some(engine)) = ENGINE.get() else {
        return;
    };
    let taken = engine
        .stop
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    if let Some((stop, ended)) = taken {
        let _ = stop.send(());
        if ended.recv_timeout(SHUTDOWN_WAIT).is_err() {
            tracing::warn!(
                "the engine thread did not stop within {} s; its runs end with the process",
                SHUTDOWN_WAIT.as_secs()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_on_its_own_thread_with_a_current_thread_runtime() {
        let outside = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let (name, flavor) = outside
            .block_on(spawn(async {
                (
                    std::thread::current().name().map(str::to_owned),
                    Handle::current().runtime_flavor(),
                )
            }))
            .expect("joined");
        assert_eq!(name.as_deref(), Some("planb-engine"));
        assert_eq!(flavor, tokio::runtime::RuntimeFlavor::CurrentThread);
    }
}
