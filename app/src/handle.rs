//! [`App`]: the one handle a front door holds. It carries the store (open
//! or on its way), where the downstream servers are configured, and what a
//! long-lived process keeps between calls (its plan runs, the connections
//! to the downstream servers, the answers it waits on). Every operation is
//! reached from it as an async call answering [`crate::Error`]:
//! `app.tasks().find(id).await`, `app.plans().execute(…).await`.

use std::path::Path;
use std::sync::Arc;

use planb_projections::{DataRoot, Environment, Store};

use crate::asks::{AnswerWatch, Asks};
use crate::execution::Plans;
use crate::named::NamedPlans;
use crate::plans::ServersSource;
use crate::runs::PlanRuns;
use crate::sessions::Sessions;
use crate::shared::Shared;
use crate::store::StoreHandle;
use crate::tasks::Tasks;

/// The application, as every front door holds it. Cheap to clone: clones
/// share the store and what the process keeps.
#[derive(Debug, Clone)]
pub struct App {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    shared: Shared,
    answers: Arc<AnswerWatch>,
}

impl App {
    /// Starts opening the store at `root` on a thread of its own; calls
    /// made meanwhile wait until it is open.
    pub fn open(root: DataRoot, env: Arc<dyn Environment>, servers: ServersSource) -> App {
        App::on(StoreHandle::open(root, env), servers)
    }

    /// The application over a store that is open already.
    pub fn ready(store: Arc<Store>, servers: ServersSource) -> App {
        App::on(StoreHandle::ready(store), servers)
    }

    fn on(store: StoreHandle, servers: ServersSource) -> App {
        App {
            inner: Arc::new(Inner {
                shared: Shared {
                    store,
                    servers,
                    runs: Arc::default(),
                    project: None,
                },
                answers: Arc::default(),
            }),
        }
    }

    /// This application, recording `project` (the folder its front door
    /// works in) as the project of the tasks and plans it creates, so a
    /// team ships them with that project. Shares what this one keeps.
    pub fn in_project(&self, project: Option<String>) -> App {
        let shared = Shared {
            project,
            ..self.inner.shared.clone()
        };
        let answers = Arc::clone(&self.inner.answers);
        App {
            inner: Arc::new(Inner { shared, answers }),
        }
    }

    /// The project the tasks and plans it creates record.
    pub fn project(&self) -> Option<&str> {
        self.inner.shared.project.as_deref()
    }

    /// The store, open or on its way.
    pub fn store(&self) -> &StoreHandle {
        &self.inner.shared.store
    }

    /// The data root.
    pub fn root(&self) -> &Path {
        self.inner.shared.store.root()
    }

    /// The clock and id source.
    pub fn env(&self) -> &Arc<dyn Environment> {
        self.inner.shared.store.env()
    }

    /// Where the downstream servers are configured.
    pub fn servers(&self) -> &ServersSource {
        &self.inner.shared.servers
    }

    /// Planning sessions and their plan versions.
    pub fn sessions(&self) -> Sessions {
        Sessions::new(self.inner.shared.store.clone())
    }

    /// Questions put to the person.
    pub fn asks(&self) -> Asks {
        Asks::new(self.inner.shared.store.clone())
    }

    /// The answers this process waits on, whoever records them.
    pub fn answer_watch(&self) -> &Arc<AnswerWatch> {
        &self.inner.answers
    }

    /// Resolves once the log holds an answer to `ask`, recorded by any
    /// process. Dropping the future stops the wait.
    pub async fn answered(&self, ask: planb_core::AskId) -> planb_core::Answers {
        (self.inner.answers)
            .answered(&self.inner.shared.store, ask)
            .await
    }

    /// Ends what this process leaves behind as it exits, if its store
    /// opened: its runs still under way are recorded ended (failed,
    /// recoverable) and their locks freed, the session files its last
    /// saves left to follow are written, and the state snapshot is brought
    /// up to where it stands for the next process on the root.
    pub fn close(&self) {
        let Some(store) = self.inner.shared.store.get() else {
            return;
        };
        crate::worker::end_own_runs(&store);
        store.finish_projection();
        store.save_snapshot_if_behind();
    }

    /// The named plans of the plans directory `dir` (absolute).
    pub fn named(&self, dir: std::path::PathBuf) -> NamedPlans {
        NamedPlans::new(self.inner.shared.store.clone(), dir)
    }

    /// Plan-generation tasks.
    pub fn tasks(&self) -> Tasks {
        Tasks::new(self.inner.shared.clone())
    }

    /// Execution plans and their runs.
    pub fn plans(&self) -> Plans {
        Plans::new(self.inner.shared.clone())
    }

    /// The plan runs this process executes.
    pub fn runs(&self) -> &Arc<PlanRuns> {
        &self.inner.shared.runs
    }
}
