//! What the services of one [`crate::App`] share: the store (open or on
//! its way), where the downstream servers are configured, and the plan
//! runs the process executes with their downstream connections.

use std::sync::Arc;

use planb_engine::plans::Downstream;
use planb_projections::{DataRoot, Environment, Store};

use crate::error::Error;
use crate::plans::ServersSource;
use crate::runs::PlanRuns;
use crate::store::StoreHandle;

/// The parts every service of an application holds (cheap to clone).
#[derive(Debug, Clone)]
pub(crate) struct Shared {
    pub(crate) store: StoreHandle,
    pub(crate) servers: ServersSource,
    pub(crate) runs: Arc<PlanRuns>,
    /// The project the front door works in: the tasks and plans it
    /// creates record it.
    pub(crate) project: Option<String>,
}

impl Shared {
    /// The store once it is open (at once when it is).
    pub(crate) async fn opened(&self) -> Result<Arc<Store>, Error> {
        (self.store.opened().await)
            .map_err(|e| Error::internal(format!("planb could not open its store: {e}")))
    }

    /// The data root.
    pub(crate) fn root(&self) -> DataRoot {
        DataRoot::new(self.store.root())
    }

    /// The downstream servers, as configured now. A long-lived process
    /// (a multi-thread runtime) keeps its connections between calls, on
    /// the engine thread; a one-shot command on one thread (the `plan`
    /// command line) connects for itself and starts no engine thread.
    pub(crate) fn downstream(&self) -> Result<Arc<Downstream>, Error> {
        let one_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread);
        if one_thread {
            return crate::plans::downstream(&self.servers);
        }
        self.runs.downstream.get(&self.servers)
    }

    /// The clock and id source.
    pub(crate) fn env(&self) -> &Arc<dyn Environment> {
        self.store.env()
    }
}
