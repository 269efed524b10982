//! The store does blocking file I/O (it fdatasyncs before it returns); async
//! handlers reach it only through these two functions, which run it on tokio's
//! blocking pool so a slow disk never stalls the runtime's worker threads.

use std::sync::Arc;

use std::path::PathBuf;

use planb_core::{Command, EventBody, PlanName, State};
use planb_projections::{PlanFileChange, Store, StoreError};

/// [`Store::execute`], returning the bodies of the recorded events.
pub async fn execute(store: &Arc<Store>, command: Command) -> Result<Vec<EventBody>, StoreError> {
    let store = Arc::clone(store);
    tokio::task::spawn_blocking(move || store.execute(command))
        .await
        .unwrap_or_else(|join| panic!("store task panicked: {join}"))
        .map(|envelopes| envelopes.into_iter().map(|e| e.event.body).collect())
}

/// [`Store::read`]: `f` runs on the state after catching up on the log.
pub async fn read<R: Send + 'static>(
    store: &Arc<Store>,
    f: impl FnOnce(&State) -> R + Send + 'static,
) -> Result<R, StoreError> {
    let store = Arc::clone(store);
    tokio::task::spawn_blocking(move || store.read(f))
        .await
        .unwrap_or_else(|join| panic!("store task panicked: {join}"))
}

/// [`Store::execute_on_plan_file`]: records a hand edit of the plan's file,
/// runs `command` and brings the file up to date, as one step.
pub async fn on_plan_file(
    store: &Arc<Store>,
    plan: PlanName,
    path: PathBuf,
    command: Option<Command>,
) -> Result<PlanFileChange, StoreError> {
    let store = Arc::clone(store);
    tokio::task::spawn_blocking(move || store.execute_on_plan_file(&plan, &path, command))
        .await
        .unwrap_or_else(|join| panic!("store task panicked: {join}"))
}
