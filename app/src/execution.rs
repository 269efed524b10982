//! [`Plans`]: the execution-plan operations a front door calls, each
//! answering [`Error`] (async where the store or a server is reached; the
//! store's blocking work goes off the async workers), and a plan's run
//! path ([`run`]).

mod run;

pub use run::{Execution, Review, RunAsk, Unreviewed};

use std::sync::Arc;

use planb_core::exec_plan::ExecPlan;
use planb_core::{Task, TaskId};
use planb_projections::Store;
use serde_json::Value;

use crate::error::{Error, ErrorCode};
use crate::models::Sampler;
use crate::plans::{self, Created, PlanSummary, Stop};
use crate::replan::Seen;
use crate::shared::Shared;

/// The execution plans of an application ([`crate::App::plans`]).
#[derive(Debug, Clone)]
pub struct Plans {
    shared: Shared,
}

impl Plans {
    pub(crate) fn new(shared: Shared) -> Plans {
        Plans { shared }
    }

    /// The store, once open.
    async fn store(&self) -> Result<Arc<Store>, Error> {
        self.shared.opened().await
    }

    /// How a plan this application creates is recorded.
    fn record_as(&self, client_request_id: Option<String>) -> plans::RecordAs {
        plans::RecordAs {
            client_request_id,
            project: self.shared.project.clone(),
        }
    }

    /// Runs `work` on the open store, off the async workers.
    async fn on_store<R: Send + 'static>(
        &self,
        work: impl FnOnce(&Store) -> Result<R, Error> + Send + 'static,
    ) -> Result<R, Error> {
        let store = self.store().await?;
        crate::store::off_thread(move || work(&store))
            .await
            .map_err(Error::internal)?
    }

    /// The plan named by `text`: its whole id or a prefix only it has (or,
    /// imported from mcp-cli, mcp-cli's id or a prefix of it); a run whose
    /// process died is ended first. `TASK_NOT_FOUND` when none is,
    /// `INVALID_ARGUMENT` when the text is empty or the start of several.
    pub async fn find(&self, text: &str) -> Result<Task, Error> {
        let text = text.to_owned();
        self.on_store(move |store| plans::find(store, &text)).await
    }

    /// The plan of id `id` as recorded now.
    pub async fn get(&self, id: TaskId) -> Result<Task, Error> {
        let found = self
            .on_store(move |store| {
                store
                    .read(|s| s.exec_plan(&id).cloned())
                    .map_err(Error::internal)
            })
            .await?;
        found.ok_or_else(|| Error::new(ErrorCode::TaskNotFound, format!("Plan not found: {id}")))
    }

    /// Every plan, newest first.
    pub async fn list(&self) -> Result<Vec<PlanSummary>, Error> {
        self.on_store(plans::list).await
    }

    /// Deletes the plan named by `text` (its history stays in the log);
    /// the deleted plan's id.
    pub async fn delete(&self, text: &str) -> Result<TaskId, Error> {
        let text = text.to_owned();
        self.on_store(move |store| plans::delete(store, &text))
            .await
    }

    /// Asks the run of plan `id` to stop, whichever process runs it;
    /// `RUN_NOT_ACTIVE` when none runs.
    pub async fn stop(&self, id: TaskId) -> Result<Stop, Error> {
        self.on_store(move |store| plans::stop(store, id).map_err(Error::from))
            .await
    }

    /// Checks `value` as a plan and every tool it names against the
    /// downstream servers, then records it; with `client_request_id` used
    /// before, the plan that request created.
    pub async fn create(
        &self,
        value: &Value,
        client_request_id: Option<String>,
    ) -> Result<Created, Error> {
        let store = self.store().await?;
        let downstream = self.shared.downstream()?;
        plans::create(
            &store,
            &downstream,
            value,
            self.record_as(client_request_id),
        )
        .await
    }

    /// Asks the configured model, else the client's through `sampler`, for
    /// a plan for `goal` over the servers' tools, checks and records it;
    /// each answer asked for and refused is told to `tell`.
    pub async fn create_from_goal(
        &self,
        goal: &str,
        client_request_id: Option<String>,
        sampler: Option<Sampler>,
        tell: plans::Tell<'_>,
    ) -> Result<Created, Error> {
        let store = self.store().await?;
        let servers = &self.shared.servers;
        let downstream = self.shared.downstream()?;
        plans::create_from_goal(
            &store,
            &downstream,
            servers,
            goal,
            self.record_as(client_request_id),
            sampler,
            tell,
        )
        .await
    }

    /// The plan `task` holds, read back.
    pub fn load(&self, task: &Task) -> Result<Arc<ExecPlan>, Error> {
        plans::load(task)
    }

    /// The revised plans made of `task`'s failed runs, oldest first.
    pub async fn revisions(&self, task: &Task) -> Result<Vec<Seen>, Error> {
        let task = task.clone();
        self.on_store(move |store| crate::replan::seen(store, &task))
            .await
    }

    /// Imports mcp-cli's saved plans (and their checkpoints), one at a
    /// time, while no other import runs on the data root (`waiting` is
    /// called when one does); what came of each, in order, told to `each`
    /// as it comes and returned.
    pub async fn import(
        &self,
        saved: &[crate::import::Saved],
        waiting: impl Fn() + Send + 'static,
        mut each: impl FnMut(&crate::import::Saved, &Result<crate::import::Imported, Error>),
    ) -> Result<Vec<Result<crate::import::Imported, Error>>, Error> {
        let store = self.store().await?;
        let downstream = self.shared.downstream()?;
        let root = store.root().clone();
        let lock =
            crate::store::off_thread(move || planb_projections::ImportLock::take(&root, waiting))
                .await
                .map_err(Error::internal)?
                .map_err(Error::internal)?;
        let mut done = Vec::with_capacity(saved.len());
        for plan in saved {
            let project = self.shared.project.clone();
            let imported = crate::import::import(&store, &downstream, plan, &lock, project);
            let imported = imported.await;
            each(plan, &imported);
            done.push(imported);
        }
        Ok(done)
    }
}
