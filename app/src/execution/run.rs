//! A run of an execution plan as a front door asks for it, the whole path:
//! the plan loaded, a dry run traced (nothing called), the request checked,
//! the person's review asked for through the front door ([`Review`]), and
//! the run started — in this process's background, where later calls join
//! it ([`Plans::execute`]), or on the caller's task with its progress told
//! as it goes ([`Plans::run_here`]).

use std::future::Future;
use std::sync::Arc;

use planb_core::Task;
use planb_core::exec_plan::ExecPlan;
use planb_engine::plans::{PlanOutcome, RunOptions, RunRequest, check_request, dry_run};
use serde_json::{Map, Value};

use super::Plans;
use crate::error::Error;
use crate::models::Backend;
use crate::plans;
use crate::runs::{Attached, Finished, Follower, Found};

/// What a caller asks of a plan's run.
#[derive(Debug, Default)]
pub struct RunAsk {
    /// Call-time variables; they override the plan's. A resume without
    /// them uses those of the run it resumes.
    pub variables: Option<Map<String, Value>>,
    /// Continue the latest run, reusing what it completed.
    pub resume: bool,
    /// Trace the plan with its arguments resolved; call nothing.
    pub dry_run: bool,
    /// Run only once the person approves ([`Review`]).
    pub review: bool,
    /// Concurrency, timeouts, guards, re-planning.
    pub options: RunOptions,
    /// The model re-planning asks when none is configured (the client's).
    pub planner: Option<Backend>,
}

/// How a front door puts a run in front of the person before it starts.
pub trait Review {
    /// What the front door answers when the person does not approve (or
    /// has not decided yet).
    type Refused;

    /// `Ok` once the person approves running `plan` (of `task`) with
    /// `variables`; otherwise the answer to give.
    fn review(
        &self,
        task: &Task,
        plan: &Arc<ExecPlan>,
        variables: Option<&Map<String, Value>>,
    ) -> impl Future<Output = Result<(), Self::Refused>> + Send;
}

/// No review: a caller that never asks for one.
#[derive(Debug, Clone, Copy)]
pub struct Unreviewed;

impl Review for Unreviewed {
    type Refused = std::convert::Infallible;

    async fn review(
        &self,
        _: &Task,
        _: &Arc<ExecPlan>,
        _: Option<&Map<String, Value>>,
    ) -> Result<(), Self::Refused> {
        Ok(())
    }
}

/// What a call of a plan came to.
#[derive(Debug)]
pub enum Execution<R> {
    /// A dry run: the trace; nothing was called.
    DryRun {
        /// The plan.
        plan: Arc<ExecPlan>,
        /// The steps with their arguments resolved.
        outcome: Box<PlanOutcome>,
    },
    /// The result of a run whose earlier call handed back.
    Ended(Finished),
    /// A run under way, started by this call or joined.
    Running {
        /// The run, to wait on.
        attached: Attached,
        /// Its steps as they start and settle, when followed.
        follower: Option<Follower>,
        /// The plan.
        plan: Arc<ExecPlan>,
    },
    /// The person did not approve: the front door's answer.
    Refused(R),
}

impl Plans {
    /// Runs (or dry runs) `task`'s plan as `ask` says, in this process's
    /// background: a run of the plan already under way here is joined, a
    /// result kept from a call that handed back is collected, else the
    /// request is checked, reviewed when asked, and the run started. With
    /// `follow`, a follower of its steps comes with it.
    pub async fn execute<V: Review>(
        &self,
        task: Task,
        ask: RunAsk,
        follow: bool,
        reviewer: &V,
    ) -> Result<Execution<V::Refused>, Error> {
        let plan = plans::load(&task)?;
        if ask.dry_run {
            let variables = ask.variables.unwrap_or_default();
            let outcome = dry_run(&plan, task.id, &variables);
            let outcome = Box::new(outcome);
            return Ok(Execution::DryRun { plan, outcome });
        }
        let review = ask.review;
        let request = request(&task, ask);
        let runs = &self.shared.runs;
        match runs.find(&request, follow)? {
            Found::Ended(done) => return Ok(Execution::Ended(done)),
            Found::Running(attached, follower) => {
                return Ok(Execution::Running {
                    attached,
                    follower,
                    plan,
                });
            }
            Found::Nothing => {}
        }
        // Nothing is asked of the person for a run that would be refused.
        check_request(&task, &plan, &request).map_err(Error::invalid)?;
        if review
            && let Err(refused) = reviewer
                .review(&task, &plan, request.variables.as_ref())
                .await
        {
            return Ok(Execution::Refused(refused));
        }
        // No copy of the task is held while its run goes on: the run list
        // it shares would be copied whole.
        drop(task);
        let store = self.store().await?;
        let (attached, follower) =
            runs.start(&store, &self.shared.servers, &plan, request, follow)?;
        Ok(Execution::Running {
            attached,
            follower,
            plan,
        })
    }

    /// Runs `task`'s plan on the caller's task (re-planning as `ask`
    /// allows), telling each step to `progress` as it starts and settles;
    /// its outcome once it ends.
    pub async fn run_here(
        &self,
        task: &Task,
        ask: RunAsk,
        progress: plans::ProgressFn,
    ) -> Result<PlanOutcome, Error> {
        let plan = plans::load(task)?;
        let mut request = request(task, ask);
        check_request(task, &plan, &request).map_err(Error::invalid)?;
        request.progress = Some(progress);
        let store = self.store().await?;
        let downstream = self.shared.downstream()?;
        crate::replan::run(store, downstream, request)
            .await
            .map_err(plans::run_error)
    }
}

/// The engine's request for `ask` of `task`.
fn request(task: &Task, ask: RunAsk) -> RunRequest {
    RunRequest {
        task: task.id,
        variables: ask.variables,
        resume: ask.resume,
        options: ask.options,
        progress: None,
        planner: ask.planner,
    }
}
