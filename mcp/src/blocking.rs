//! The store does blocking file I/O (it fdatasyncs before it returns); async
//! handlers reach it, and every other blocking file work, only through this
//! module, which runs it so a slow disk never stalls the runtime's other
//! tasks: in place on a worker that hands its other tasks over
//! (`block_in_place`), or on tokio's blocking pool.

use std::path::PathBuf;

use planb_core::{Command, EventBody, PlanKey, State};
use planb_projections::{PlanFileChange, StoreError};

use crate::opening::StoreHandle;

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

/// Runs `work` (file or store calls that block) on the blocking pool.
pub async fn off_thread<R: Send + 'static>(
    work: impl FnOnce() -> R + Send + 'static,
) -> Result<R, Interrupted> {
    tokio::task::spawn_blocking(work).await.map_err(Interrupted)
}

/// [`Store::execute_then_project`]: returns once the events are durable and
/// a saved plan version's Markdown file is written; the other session files
/// follow off the caller's path.
pub async fn execute_then_project(
    store: &StoreHandle,
    command: Command,
) -> Result<Vec<EventBody>, StoreError> {
    on_store(store, move |store| store.execute_then_project(command))
        .await
        .map(|envelopes| envelopes.into_iter().map(|e| e.event.body).collect())
}

/// Runs `work` on the open store. Once the store is open and the runtime
/// has other workers to carry on its tasks, the work runs in place
/// (`block_in_place`): the caller's reply leaves from this thread, without
/// a hop to the blocking pool and back. Otherwise (still opening, a
/// single-threaded runtime) it goes to the blocking pool.
async fn on_store<R: Send + 'static>(
    store: &StoreHandle,
    work: impl FnOnce(&planb_projections::Store) -> Result<R, StoreError> + Send + 'static,
) -> Result<R, StoreError> {
    let in_place = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if in_place && let Some(open) = store.get() {
        return tokio::task::block_in_place(|| work(&open));
    }
    let store = store.clone();
    tokio::task::spawn_blocking(move || store.wait().and_then(|open| work(&open)))
        .await
        .unwrap_or_else(|join| Err(interrupted(join)))
}

/// [`Store::execute`], returning the bodies of the recorded events.
pub async fn execute(store: &StoreHandle, command: Command) -> Result<Vec<EventBody>, StoreError> {
    on_store(store, move |store| store.execute(command))
        .await
        .map(|envelopes| envelopes.into_iter().map(|e| e.event.body).collect())
}

/// [`Store::read`]: `f` runs on the state after catching up on the log.
pub async fn read<R: Send + 'static>(
    store: &StoreHandle,
    f: impl FnOnce(&State) -> R + Send + 'static,
) -> Result<R, StoreError> {
    on_store(store, move |store| store.read(f)).await
}

/// [`Store::execute_on_plan_file`]: records a hand edit of the plan's file,
/// runs `command` and brings the file up to date, as one step.
pub async fn on_plan_file(
    store: &StoreHandle,
    plan: PlanKey,
    path: PathBuf,
    command: Option<Command>,
) -> Result<PlanFileChange, StoreError> {
    let store = store.clone();
    tokio::task::spawn_blocking(move || store.wait()?.execute_on_plan_file(&plan, &path, command))
        .await
        .unwrap_or_else(|join| Err(interrupted(join)))
}
