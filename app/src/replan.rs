//! Re-planning. When a run of an execution plan fails and the request
//! allows it (`replan: N`), the model is told what completed (with the
//! results), the step that failed and its error, the steps left and the
//! variables, and asked for a revised plan of the remaining work, checked
//! as a generated plan is.
//!
//! The revised plan is recorded as a plan of its own: its `revises` names
//! the plan, the failed run and the failure, and its variables are every
//! variable as the failed run left them, so it runs (and resumes) like any
//! plan. It is never re-planned itself: when it fails, the next revision
//! (up to N) is again of the original plan's remaining work. The result
//! merges the steps completed before with the last revision's, and lists
//! the revisions.
//!
//! A resume of a plan whose latest run was revised continues the latest
//! revision (its own recorded successes reused), so nothing recorded runs
//! again after a crash in the middle of a revision.

use std::sync::Arc;
use std::time::{Duration, Instant};

use planb_core::exec_plan::{ExecPlan, PLAN_TITLE_CHARS_MAX, REVISION_ERROR_CHARS_MAX, Revision};
use planb_core::text::clip;
use planb_core::{RunId, Task, TaskId};
use planb_engine::backend::{Backend, BackendError};
use planb_engine::plans::revise::{self, Failure};
use planb_engine::plans::{
    self, Downstream, PlanOutcome, PlanRunError, Progress, Revised, RevisionReport, RunOptions,
    RunRequest, StepReport,
};
use planb_projections::Store;

/// Runs the plan `request` names as [`plans::run_plan`] does, and re-plans
/// when it fails as `request.options.replan` allows.
pub async fn run(
    store: Arc<Store>,
    downstream: Arc<Downstream>,
    mut request: RunRequest,
) -> Result<PlanOutcome, PlanRunError> {
    let started = Instant::now();
    let limit = request.options.replan;
    let planner = match limit {
        0 => None,
        _ => Some(planner(request.planner.take())?),
    };
    let replanning = Replanning {
        store,
        downstream,
        planner,
        options: RunOptions {
            replan: 0,
            ..request.options.clone()
        },
        progress: request.progress.clone(),
        limit,
    };
    let chain = match request.resume {
        true => revised_chain(&replanning.store, request.task)?,
        false => None,
    };
    let mut outcome = match chain {
        Some(chain) => replanning.resume_chain(chain).await?,
        None if limit == 0 => {
            plans::run_plan(replanning.store, replanning.downstream, request).await?
        }
        None => {
            let store = Arc::clone(&replanning.store);
            let ran = plans::run_plan(store, Arc::clone(&replanning.downstream), request).await?;
            replanning.after(ran).await?
        }
    };
    outcome.duration = started.elapsed();
    Ok(outcome)
}

/// The model re-planning asks: the one configured for planning, else the
/// one `given` (the client's, through sampling).
fn planner(given: Option<Backend>) -> Result<Backend, PlanRunError> {
    let configured = Backend::configured(Some("planner"), &|n| std::env::var(n).ok());
    match (configured, given) {
        (Ok(backend), _) => Ok(backend),
        (Err(BackendError::NotConfigured), Some(given)) => Ok(given),
        (Err(e), _) => Err(PlanRunError::Invalid(format!(
            "replan: re-planning asks a model for revised plans, and {e}"
        ))),
    }
}

/// What a re-planning run shares.
struct Replanning {
    store: Arc<Store>,
    downstream: Arc<Downstream>,
    planner: Option<Backend>,
    /// How revised plans run.
    options: RunOptions,
    progress: Option<plans::run::ProgressFn>,
    /// Revisions allowed.
    limit: u32,
}

/// A failed run and what came of it so far.
struct Merged {
    /// The plan that failed, and its id.
    plan: Arc<ExecPlan>,
    plan_id: TaskId,
    /// Its run that failed.
    run: RunId,
    /// Steps completed before the latest outcome's (the plan's, then earlier
    /// revisions').
    kept: Vec<StepReport>,
    /// The latest run's outcome: the plan's, or the last revision's.
    latest: PlanOutcome,
    revisions: Vec<RevisionReport>,
    /// Why re-planning stopped short, when it did.
    note: Option<String>,
}

impl Merged {
    /// Every step completed so far.
    fn completed(&self) -> Vec<StepReport> {
        let latest = self.latest.steps.iter().filter(|s| s.success).cloned();
        self.kept.iter().cloned().chain(latest).collect()
    }

    /// The step the latest run failed on.
    fn failed(&self) -> Option<StepReport> {
        self.latest.steps.iter().find(|s| !s.success).cloned()
    }

    /// Takes the outcome of revision `report` as the latest.
    fn absorb(&mut self, mut report: RevisionReport, mut outcome: PlanOutcome) {
        for step in &mut outcome.steps {
            step.revision = report.number;
        }
        report.run = outcome.run;
        report.success = outcome.success;
        self.kept = self.completed();
        self.revisions.push(report);
        self.latest = outcome;
    }

    /// The run's result: the plan's id and run, the steps completed before
    /// and the last run's, its success and variables.
    fn finish(self) -> PlanOutcome {
        let Merged {
            plan,
            plan_id,
            run,
            kept,
            latest,
            revisions,
            note,
        } = self;
        let kept_count = kept.len();
        let mut steps = kept;
        steps.extend(latest.steps);
        let error = match (latest.error, note) {
            (Some(error), Some(note)) => Some(format!("{error}; {note}")),
            (error, None) => error,
            (None, Some(note)) => Some(note),
        };
        PlanOutcome {
            plan_id,
            title: plan.title.clone(),
            run: Some(run),
            success: latest.success,
            stopped: latest.stopped,
            duration: Duration::ZERO,
            steps,
            steps_in_plan: kept_count + latest.steps_in_plan,
            variables: latest.variables,
            error,
            called_again: latest.called_again,
            servers_not_answering: latest.servers_not_answering,
            revisions,
        }
    }
}

impl Replanning {
    fn tell(&self, progress: Progress) {
        if let Some(tell) = &self.progress {
            tell(&progress);
        }
    }

    /// After the plan's run `outcome`: revised plans while it fails and
    /// revisions are left.
    async fn after(&self, outcome: PlanOutcome) -> Result<PlanOutcome, PlanRunError> {
        let (false, false, Some(run)) = (outcome.success, outcome.stopped, outcome.run) else {
            return Ok(outcome);
        };
        let plan = load(&self.store, outcome.plan_id)?;
        let merged = Merged {
            plan,
            plan_id: outcome.plan_id,
            run,
            kept: Vec::new(),
            latest: outcome,
            revisions: Vec::new(),
            note: None,
        };
        self.revise_from(merged, 1).await
    }

    /// Asks for revision `number` and on while the latest run fails.
    async fn revise_from(
        &self,
        mut merged: Merged,
        mut number: u32,
    ) -> Result<PlanOutcome, PlanRunError> {
        // Revisions are made for the project their plan was.
        let plan_id = merged.plan_id;
        let project =
            (self.store).read(|s| s.task(&plan_id).and_then(|t| t.project_path.clone()))?;
        while number <= self.limit && !merged.latest.success && !merged.latest.stopped {
            let Some(failed) = merged.failed() else {
                break;
            };
            let error = failed.error.clone().unwrap_or_default();
            self.tell(Progress::Replanning {
                number,
                step: failed.index.clone(),
                error: error.clone(),
            });
            let plan = match self.ask(&merged, &failed, number).await {
                Ok(plan) => plan,
                Err(why) => {
                    merged.note = Some(format!("re-planning failed: {why}"));
                    break;
                }
            };
            let steps = plan.steps.len();
            let record_as = crate::plans::RecordAs {
                client_request_id: None,
                project: project.clone(),
            };
            let (id, plan, _) = crate::plans::record(&self.store, plan, record_as)
                .await
                .map_err(|e| PlanRunError::Invalid(e.message))?;
            let plan = Arc::new(plan);
            self.tell(Progress::Revised(Box::new(Revised {
                number,
                plan_id: id,
                plan: Arc::clone(&plan),
            })));
            let outcome = self.run_revision(id, false).await?;
            let report = RevisionReport {
                number,
                plan_id: id,
                run: None,
                step: failed.index.clone(),
                error,
                steps,
                success: false,
            };
            merged.absorb(report, outcome);
            number += 1;
        }
        Ok(merged.finish())
    }

    /// Runs (or resumes) the revised plan `id`.
    async fn run_revision(&self, id: TaskId, resume: bool) -> Result<PlanOutcome, PlanRunError> {
        let request = RunRequest {
            task: id,
            variables: None,
            resume,
            options: self.options.clone(),
            progress: self.progress.clone(),
            planner: None,
        };
        plans::run_plan(
            Arc::clone(&self.store),
            Arc::clone(&self.downstream),
            request,
        )
        .await
    }

    /// Revision `number` of `merged`'s plan after `failed`, made
    /// self-contained: its variables are the run's, and it names what it
    /// revises.
    async fn ask(
        &self,
        merged: &Merged,
        failed: &StepReport,
        number: u32,
    ) -> Result<ExecPlan, ReplanFailure> {
        let Some(planner) = &self.planner else {
            return Err(ReplanFailure::NoModel);
        };
        let (tools, unavailable) = self.downstream.available_tools().await;
        for error in &unavailable {
            tracing::warn!("re-planning without a server: {error}");
        }
        if tools.is_empty() {
            return Err(ReplanFailure::NoTools);
        }
        let completed = merged.completed();
        let done: Vec<&str> = completed
            .iter()
            .filter(|s| s.revision == 0)
            .map(|s| s.index.as_str())
            .collect();
        let remaining = merged
            .plan
            .steps
            .iter()
            .filter(|s| !done.contains(&s.index.as_str()))
            .collect();
        let failure = Failure {
            plan: &merged.plan,
            completed: &completed,
            failed,
            remaining,
            variables: &merged.latest.variables,
        };
        let timeout = crate::settings::step_timeout()?.unwrap_or(Duration::from_secs(600));
        let plan = revise::revise(planner, &failure, &tools, timeout).await?;
        self_contained(plan, merged, failed, number)
    }

    /// Continues the revisions recorded of the plan's latest run: resumes
    /// (or starts) the last, then revises on as the limit allows.
    async fn resume_chain(&self, chain: Chain) -> Result<PlanOutcome, PlanRunError> {
        let Chain {
            plan,
            task,
            revisions,
        } = chain;
        let Some(run) = task.runs.last() else {
            return Err(PlanRunError::Invalid(format!(
                "plan {} has not run",
                task.id
            )));
        };
        let mut merged = Merged {
            kept: recorded_steps(&task, &plan, run.id, 0),
            plan,
            plan_id: task.id,
            run: run.id,
            latest: nothing_yet(task.id),
            revisions: Vec::new(),
            note: None,
        };
        let last = revisions.len();
        for (at, (revised, revision)) in revisions.into_iter().enumerate() {
            let steps = load(&self.store, revised.id)?.steps.len();
            let report = RevisionReport {
                number: revision.number,
                plan_id: revised.id,
                run: None,
                step: revision.step.clone(),
                error: revision.error.clone(),
                steps,
                success: false,
            };
            if at + 1 < last {
                let ran = revised.runs.last().map(|r| r.id);
                let plan = load(&self.store, revised.id)?;
                let done = ran.map_or_else(Vec::new, |r| {
                    recorded_steps(&revised, &plan, r, revision.number)
                });
                merged.kept.extend(done);
                merged.revisions.push(RevisionReport { run: ran, ..report });
                continue;
            }
            self.tell(Progress::Revised(Box::new(Revised {
                number: revision.number,
                plan_id: revised.id,
                plan: load(&self.store, revised.id)?,
            })));
            let outcome = self
                .run_revision(revised.id, !revised.runs.is_empty())
                .await?;
            merged.absorb(report, outcome);
            let next = revision.number + 1;
            return self.revise_from(merged, next).await;
        }
        Ok(merged.finish())
    }
}

/// `plan`, the model's revision `number` of `merged`'s plan after
/// `failed`, as it is recorded: titled after the plan, carrying every
/// variable of the run, naming what it revises, and readable back.
fn self_contained(
    mut plan: ExecPlan,
    merged: &Merged,
    failed: &StepReport,
    number: u32,
) -> Result<ExecPlan, ReplanFailure> {
    let original = &merged.plan;
    plan.title = clip(
        &format!("{} (revised plan {number})", original.title),
        PLAN_TITLE_CHARS_MAX,
    );
    if plan
        .description
        .as_deref()
        .is_none_or(|d| d.trim().is_empty())
    {
        plan.description = Some(format!(
            "The remaining work of plan {} after step {} failed.",
            merged.plan_id, failed.index
        ));
    }
    for (name, value) in &merged.latest.variables {
        plan.variables.insert(name.clone(), value.clone());
    }
    plan.revises = Some(Revision {
        plan: merged.plan_id.to_string(),
        run: merged.run.to_string(),
        number,
        step: failed.index.clone(),
        error: clip(
            failed.error.as_deref().unwrap_or_default(),
            REVISION_ERROR_CHARS_MAX,
        ),
    });
    ExecPlan::from_json(&plan.to_json()).map_err(ReplanFailure::Unrecordable)
}

/// Why no revised plan came of a failed run.
#[derive(Debug, thiserror::Error)]
enum ReplanFailure {
    /// No model is configured and the client offers none.
    #[error("no model to ask")]
    NoModel,
    /// No downstream server starts.
    #[error("no downstream server offers a tool")]
    NoTools,
    /// The step timeout setting cannot be used.
    #[error(transparent)]
    Setting(#[from] crate::settings::SettingError),
    /// The model gave no plan that checks.
    #[error(transparent)]
    Model(#[from] planb_engine::plans::generate::GenerateError),
    /// The revision cannot be recorded as it is.
    #[error("the revised plan, with the run's variables, cannot be recorded: {0}")]
    Unrecordable(planb_core::exec_plan::PlanError),
}

/// The plan's task and the revised plans recorded of its latest run, in
/// order.
struct Chain {
    plan: Arc<ExecPlan>,
    task: Task,
    revisions: Vec<(Task, Revision)>,
}

/// The revisions of plan `id`'s latest run, when it has any.
fn revised_chain(store: &Store, id: TaskId) -> Result<Option<Chain>, PlanRunError> {
    let Some(task) = store.read(|s| s.task(&id).cloned())? else {
        return Ok(None);
    };
    let Some(run) = task.runs.last().map(|r| r.id) else {
        return Ok(None);
    };
    let revisions = revisions_of(store, id, Some(run))?;
    if revisions.is_empty() {
        return Ok(None);
    }
    let plan = plans::load(&task)?;
    Ok(Some(Chain {
        plan,
        task,
        revisions,
    }))
}

/// The revised plans recorded of plan `id` (of its run `run`, when given),
/// in the order they were made.
pub fn revisions_of(
    store: &Store,
    id: TaskId,
    run: Option<RunId>,
) -> Result<Vec<(Task, Revision)>, PlanRunError> {
    let (plan_text, run_text) = (id.to_string(), run.map(|r| r.to_string()));
    let candidates: Vec<Task> = store.read(|s| {
        s.exec_plans()
            .filter(|t| {
                t.plan.as_ref().is_some_and(|p| {
                    p.definition.contains("\"revises\"") && p.definition.contains(&plan_text)
                })
            })
            .cloned()
            .collect()
    })?;
    let mut found: Vec<(Task, Revision)> = candidates
        .into_iter()
        .filter_map(|task| {
            let revision = plans::load(&task).ok()?.revises.clone()?;
            let ours =
                revision.plan == plan_text && run_text.as_ref().is_none_or(|r| *r == revision.run);
            ours.then_some((task, revision))
        })
        .collect();
    found.sort_by_key(|(task, revision)| (revision.number, task.created_at, task.id));
    Ok(found)
}

/// The steps of `plan` that succeeded in run `run` of `task` (or in the
/// runs it resumed), as a result lists them: their results are in the
/// variables.
fn recorded_steps(task: &Task, plan: &ExecPlan, run: RunId, revision: u32) -> Vec<StepReport> {
    let done = task.resumable_successes(Some(run));
    plan.steps
        .iter()
        .filter(|s| done.contains_key(&s.index))
        .map(|s| StepReport {
            index: s.index.clone(),
            title: s.title.clone(),
            tool: s.tool.clone(),
            args: serde_json::Value::Object(s.args.clone()),
            success: true,
            result: None,
            error: None,
            duration_ms: 0,
            reused: true,
            code: None,
            typed: Vec::new(),
            revision,
        })
        .collect()
}

/// The outcome of a run that has not happened: the place of the latest
/// outcome until a revision runs.
fn nothing_yet(id: TaskId) -> PlanOutcome {
    PlanOutcome {
        plan_id: id,
        title: String::new(),
        run: None,
        success: false,
        stopped: false,
        duration: Duration::ZERO,
        steps: Vec::new(),
        steps_in_plan: 0,
        variables: serde_json::Map::new(),
        error: None,
        called_again: Vec::new(),
        servers_not_answering: Vec::new(),
        revisions: Vec::new(),
    }
}

/// The plan `id` holds.
fn load(store: &Store, id: TaskId) -> Result<Arc<ExecPlan>, PlanRunError> {
    let task = store.read(|s| s.task(&id).cloned())?;
    let task = task.ok_or_else(|| PlanRunError::NotFound(id.to_string()))?;
    plans::load(&task)
}

/// A revised plan as the plan it revises shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    /// Which revision, from 1.
    pub number: u32,
    /// The revised plan.
    pub plan_id: TaskId,
    /// Its steps.
    pub steps: usize,
    /// The run it revises, the step that failed there and its error.
    pub run: String,
    pub step: String,
    pub error: String,
    /// Its last run's state (`completed`, `failed`, …), or `not run`.
    pub state: &'static str,
}

/// The revised plans made of `task`'s runs, oldest first.
pub fn seen(store: &Store, task: &Task) -> Result<Vec<Seen>, crate::Error> {
    let found = revisions_of(store, task.id, None).map_err(crate::Error::internal)?;
    Ok(found
        .into_iter()
        .map(|(revised, revision)| Seen {
            number: revision.number,
            plan_id: revised.id,
            steps: plans::load(&revised).map_or(0, |p| p.steps.len()),
            run: revision.run,
            step: revision.step,
            error: revision.error,
            state: revised.runs.last().map_or("not run", |r| r.state.as_str()),
        })
        .collect())
}
