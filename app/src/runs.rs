//! The execution-plan runs of one long-lived process (a server): a plan
//! runs at most once here however many calls ask for it (a second call
//! joins the first run), and a call may stop waiting before the run ends
//! (hand back) — the result then waits for the next call of that plan.
//!
//! Runs go on the engine thread, where the downstream connections live;
//! what they come to is plain data ([`Finished`]), which the front doors
//! shape.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use planb_core::exec_plan::ExecPlan;
use planb_core::{AskId, TaskId};
use planb_engine::plans::{self, PlanOutcome, PlanRunError, Progress, RunRequest};
use planb_engine::worker::WorkerError;
use planb_projections::Store;
use tokio::sync::{broadcast, watch};

use crate::error::Error;
use crate::plans::{DownstreamCache, ServersSource, rendered};

/// What a run came to: its outcome and its DAG drawn with each step's
/// mark, or why it could not run.
pub type Finished = Result<Arc<RunEnd>, RunFailure>;

/// Why a run came to no outcome. Each front door says what the caller can
/// do about it in its own words (which tool, which command).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunFailure {
    /// The run's task ended before the run returned (this process is
    /// stopping); the plan can be resumed.
    #[error("plan {plan}'s run ended without a result ({why})")]
    Interrupted {
        /// The plan.
        plan: TaskId,
        /// What ended it.
        why: String,
    },
    /// Another planb process runs the plan.
    #[error("plan {plan} is running in another planb process")]
    RunningElsewhere {
        /// The plan.
        plan: TaskId,
    },
    /// A run of the plan began between this call's look and its start:
    /// running as well would do the plan's work twice.
    #[error("{0}")]
    StartedMeanwhile(String),
    /// The run could not start or failed on the way, as said.
    #[error("{0}")]
    Failed(String),
}

/// A run's outcome and its DAG as it ended.
#[derive(Debug, Clone, PartialEq)]
pub struct RunEnd {
    /// The outcome.
    pub outcome: PlanOutcome,
    /// The DAG with each step's mark, when the plan could be read back.
    pub dag: Option<String>,
}

/// What a follower of a run hears: the steps settled so far, and a step's
/// start or end.
pub type Follower = broadcast::Receiver<(usize, Progress)>;

/// A run this process executes, as a call follows it.
#[derive(Debug, Clone)]
pub struct Attached {
    done: watch::Receiver<Option<Finished>>,
    /// Steps settled so far with what happened, as it happens.
    progress: broadcast::Sender<(usize, Progress)>,
    settled: Arc<AtomicUsize>,
    steps_total: usize,
    /// Set when a call handed back before the run ended: its result is then
    /// kept for the next call of the plan.
    handed_back: Arc<AtomicBool>,
    /// What the call that started it asked for.
    asked: Arc<Asked>,
}

/// What a call asked of a run: its variables and whether it resumes. A
/// later call that asks the same, or names neither, is after that run.
#[derive(Debug, Clone, PartialEq)]
struct Asked {
    variables: Option<serde_json::Map<String, serde_json::Value>>,
    resume: bool,
}

impl Asked {
    /// What `request` asks; no variables and `{}` are the same.
    fn of(request: &RunRequest) -> Asked {
        Asked {
            variables: request.variables.clone().filter(|v| !v.is_empty()),
            resume: request.resume,
        }
    }

    /// Whether `request` is after the run this was asked of.
    fn taken_by(&self, request: &RunRequest) -> bool {
        let asked = Asked::of(request);
        let names_nothing = asked.variables.is_none() && !asked.resume;
        names_nothing || *self == asked
    }
}

/// What a call of a plan finds of the plan's runs in this process.
#[derive(Debug)]
pub enum Found {
    /// A run under way that the call joins, with a follower when asked.
    Running(Attached, Option<Follower>),
    /// The result of a run whose call handed back, taken by this call.
    Ended(Finished),
    /// Neither: the call may start a run.
    Nothing,
}

/// What a call waiting on a run hears next.
#[derive(Debug)]
pub enum Heard {
    /// The run ended.
    Ended(Finished),
    /// A step started or settled; the steps settled so far.
    Step(usize, Progress),
    /// The run ended without a result: the process is shutting down.
    Lost,
    /// Nothing before the deadline.
    Nothing,
}

/// What a call that waits with a limit gets.
#[derive(Debug)]
pub enum Waited {
    /// The run ended.
    Ended(Finished),
    /// A step started or settled; the steps settled so far.
    Step(usize, Progress),
    /// The limit came first: the call hands back, and the result waits for
    /// the plan's next call.
    StillRunning {
        /// Steps settled so far.
        settled: usize,
        /// Steps in the plan.
        total: usize,
    },
    /// The run ended without a result: the process is shutting down.
    Lost,
}

impl Attached {
    /// The result, once the run has ended.
    pub fn result(&self) -> Option<Finished> {
        self.done.borrow().clone()
    }

    /// Steps settled so far.
    pub fn settled(&self) -> usize {
        self.settled.load(Ordering::Relaxed)
    }

    /// Steps in the plan.
    pub fn steps_total(&self) -> usize {
        self.steps_total
    }

    /// Follows the run's steps from now on (a call that tells its caller
    /// of each); [`PlanRuns::start`] makes one that hears them all.
    pub fn follow(&self) -> Follower {
        self.progress.subscribe()
    }

    /// Waits until the run ends, a step is told on `follow`, or `until`.
    pub async fn next(&mut self, follow: Option<&mut Follower>, until: Option<Instant>) -> Heard {
        let sleep = async {
            match until {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        let told = async {
            match follow {
                Some(follow) => follow.recv().await.ok(),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            changed = self.done.changed() => match (changed, self.result()) {
                (_, Some(finished)) => Heard::Ended(finished),
                (Err(_), None) => Heard::Lost,
                (Ok(()), None) => Heard::Nothing,
            },
            told = told => match told {
                Some((n, progress)) => Heard::Step(n, progress),
                None => Heard::Nothing,
            },
            () = sleep => Heard::Nothing,
        }
    }
}

/// `attached`, joined by the call `request` asks, with a follower when
/// asked; refused when the call asks for another run than that one.
fn joined(
    attached: &Attached,
    request: &RunRequest,
    follow: bool,
) -> Result<(Attached, Option<Follower>), Error> {
    if !attached.asked.taken_by(request) {
        return Err(Error::with(
            crate::error::ErrorCode::RunAlreadyActive,
            format!(
                "plan {} is running in this process with other variables or resume",
                request.task
            ),
            serde_json::json!({ "plan_id": request.task.to_string() }),
        ));
    }
    Ok((attached.clone(), follow.then(|| attached.follow())))
}

/// Most results of runs whose call handed back kept for a later call; past
/// it the oldest is forgotten (the run's outcome stays in the log).
pub const UNCLAIMED_MAX: usize = 64;
/// Most undecided approval forms kept for a later call; past it the oldest
/// is forgotten (the form stays answerable, and a later call asks anew).
pub const APPROVALS_MAX: usize = 256;

/// Values by plan, oldest first, at most a limit of them.
#[derive(Debug)]
struct Newest<V>(VecDeque<(TaskId, V)>);

impl<V> Default for Newest<V> {
    fn default() -> Self {
        Newest(VecDeque::new())
    }
}

impl<V> Newest<V> {
    /// Keeps `value` for `id` (replacing one it had), forgetting the oldest
    /// past `max`.
    fn keep(&mut self, id: TaskId, value: V, max: usize) {
        self.take(id);
        self.0.push_back((id, value));
        while self.0.len() > max {
            self.0.pop_front();
        }
    }

    /// The value kept for `id`, left in place.
    fn peek(&self, id: TaskId) -> Option<&V> {
        self.0
            .iter()
            .find(|(kept, _)| *kept == id)
            .map(|(_, value)| value)
    }

    /// The value kept for `id`, taken.
    fn take(&mut self, id: TaskId) -> Option<V> {
        let at = self.0.iter().position(|(kept, _)| *kept == id)?;
        self.0.remove(at).map(|(_, value)| value)
    }
}

/// The plan runs of one process and its downstream connections.
#[derive(Debug, Default)]
pub struct PlanRuns {
    /// The downstream servers, connected once per configuration.
    pub downstream: DownstreamCache,
    active: Mutex<HashMap<TaskId, Attached>>,
    /// Results of runs that ended after their call handed back, until the
    /// next call of the plan collects them.
    unclaimed: Mutex<Newest<(Finished, Arc<Asked>)>>,
    /// The approval forms (`plans::approval`) the person has not decided
    /// yet, by plan, until the next call that asks for a review waits on it.
    approvals: Mutex<Newest<AskId>>,
}

impl PlanRuns {
    /// The approval form of a run of plan `id` that the person had not
    /// decided when its call handed back, taken: this call waits on it
    /// rather than asking again.
    pub fn take_approval(&self, id: TaskId) -> Option<AskId> {
        self.approvals.lock().ok()?.take(id)
    }

    /// Keeps `ask`, the approval form of a run of plan `id`, for the next
    /// call: the person has not decided yet.
    pub fn approval_pending(&self, id: TaskId, ask: AskId) {
        if let Ok(mut approvals) = self.approvals.lock() {
            approvals.keep(id, ask, APPROVALS_MAX);
        }
    }

    /// Whether this process runs plan `id` now.
    pub fn running_here(&self, id: TaskId) -> bool {
        self.active.lock().is_ok_and(|a| a.contains_key(&id))
    }

    /// What `request` finds of its plan's runs here, in one look (under
    /// the locks a run's end takes, in the same order): the run under way,
    /// joined; else the result of one whose call handed back, once; else
    /// nothing. A call naming other variables (or a resume) than the run it
    /// finds is not after it: a run under way refuses it, a kept result is
    /// left for a call that is (until a run the call starts takes its
    /// place: the call may yet be refused by its check or its review).
    pub fn find(&self, request: &RunRequest, follow: bool) -> Result<Found, Error> {
        let poisoned = || Error::internal("the plan runs' table is poisoned");
        let active = self.active.lock().map_err(|_| poisoned())?;
        let mut unclaimed = self.unclaimed.lock().map_err(|_| poisoned())?;
        let id = request.task;
        if let Some(attached) = active.get(&id) {
            let joined = joined(attached, request, follow)?;
            return Ok(Found::Running(joined.0, joined.1));
        }
        let after_it = unclaimed
            .peek(id)
            .is_some_and(|(_, asked)| asked.taken_by(request));
        if !after_it {
            return Ok(Found::Nothing);
        }
        Ok(unclaimed
            .take(id)
            .map_or(Found::Nothing, |(done, _)| Found::Ended(done)))
    }

    /// Starts the run `request` asks for in the background, or joins the
    /// one this process already runs of that plan. With `follow`, also a
    /// follower of its steps, made before the run starts: it hears every
    /// step of a run it started, and what comes after it joined one.
    pub fn start(
        self: &Arc<Self>,
        store: &Arc<Store>,
        servers: &ServersSource,
        plan: &Arc<ExecPlan>,
        mut request: RunRequest,
        follow: bool,
    ) -> Result<(Attached, Option<Follower>), Error> {
        let id = request.task;
        let mut active = self
            .active
            .lock()
            .map_err(|_| Error::internal("the plan runs' table is poisoned"))?;
        if let Some(attached) = active.get(&id) {
            return joined(attached, &request, follow);
        }
        let downstream = self.downstream.get(servers)?;
        let (done_tx, done) = watch::channel(None);
        let attached = Attached {
            done,
            progress: broadcast::channel(1024).0,
            settled: Arc::default(),
            steps_total: plan.steps.len(),
            handed_back: Arc::default(),
            asked: Arc::new(Asked::of(&request)),
        };
        active.insert(id, attached.clone());
        // A new run of the plan takes the place of a result kept from an
        // earlier one (its outcome stays in the log).
        if let Ok(mut unclaimed) = self.unclaimed.lock() {
            unclaimed.take(id);
        }
        drop(active);
        let follower = follow.then(|| attached.follow());
        request.progress = Some(teller(&attached));
        let run = planb_engine::runtime::spawn(crate::replan::run(
            Arc::clone(store),
            downstream,
            request,
        ));
        let (runs, store, plan) = (Arc::clone(self), Arc::clone(store), Arc::clone(plan));
        let handed_back = Arc::clone(&attached.handed_back);
        let asked = Arc::clone(&attached.asked);
        tokio::spawn(async move {
            let finished = match run.await {
                Err(stopped) => Err(RunFailure::Interrupted {
                    plan: id,
                    why: stopped.to_string(),
                }),
                Ok(ended) => finished(&store, &plan, id, ended),
            };
            runs.ended(id, &handed_back, (finished, asked), &done_tx);
        });
        Ok((attached, follower))
    }

    /// Takes the ended run of `id` out of the table, keeping its result for
    /// the next call when the call that started it handed back. Both under
    /// one lock order, so a call in between finds it in one or the other.
    /// The result is told to the calls waiting under the same lock
    /// [`PlanRuns::hand_back`] takes: a call handing back either sees it, or
    /// has said so before this looks.
    fn ended(
        &self,
        id: TaskId,
        handed_back: &AtomicBool,
        ended: (Finished, Arc<Asked>),
        done: &watch::Sender<Option<Finished>>,
    ) {
        let (finished, asked) = ended;
        let (Ok(mut active), Ok(mut unclaimed)) = (self.active.lock(), self.unclaimed.lock())
        else {
            let _ = done.send(Some(finished));
            return;
        };
        active.remove(&id);
        let _ = done.send(Some(finished.clone()));
        if handed_back.load(Ordering::SeqCst) {
            unclaimed.keep(id, (finished, asked), UNCLAIMED_MAX);
        }
    }

    /// Waits on `attached`, the run of plan `id`, until it ends, a step is
    /// told on `follow`, or `until`; then the call hands back
    /// ([`Waited::StillRunning`]), unless the run ended just now.
    pub async fn wait(
        &self,
        attached: &mut Attached,
        mut follow: Option<&mut Follower>,
        id: TaskId,
        until: Option<Instant>,
    ) -> Waited {
        loop {
            if let Some(done) = attached.result() {
                return Waited::Ended(done);
            }
            if until.is_some_and(|at| Instant::now() >= at) {
                return match self.hand_back(attached, id) {
                    Some(done) => Waited::Ended(done),
                    None => Waited::StillRunning {
                        settled: attached.settled(),
                        total: attached.steps_total(),
                    },
                };
            }
            match attached.next(follow.as_deref_mut(), until).await {
                Heard::Ended(done) => return Waited::Ended(done),
                Heard::Step(n, event) => return Waited::Step(n, event),
                Heard::Lost => return Waited::Lost,
                Heard::Nothing => {}
            }
        }
    }

    /// The call following `attached` stops waiting: the result will wait
    /// for the next call, unless the run ended just now (then it is this
    /// call's).
    pub fn hand_back(&self, attached: &Attached, id: TaskId) -> Option<Finished> {
        // Under the lock the run's end takes to tell its result: either the
        // result is here now, or the end keeps it for the next call.
        let mut unclaimed = self.unclaimed.lock().ok();
        attached.handed_back.store(true, Ordering::SeqCst);
        let finished = attached.result()?;
        if let Some(unclaimed) = unclaimed.as_mut() {
            unclaimed.take(id);
        }
        Some(finished)
    }
}

/// Counts the steps settled and tells them to whoever follows.
fn teller(attached: &Attached) -> plans::run::ProgressFn {
    let (progress, settled) = (attached.progress.clone(), Arc::clone(&attached.settled));
    Arc::new(move |event: &Progress| {
        let n = match event {
            Progress::Ended(_) => settled.fetch_add(1, Ordering::Relaxed) + 1,
            Progress::Started { .. } | Progress::Replanning { .. } | Progress::Revised(_) => {
                settled.load(Ordering::Relaxed)
            }
        };
        // Nobody follows the steps: only the count is kept.
        if progress.receiver_count() > 0 {
            let _ = progress.send((n, event.clone()));
        }
    })
}

/// What a run that returned came to.
fn finished(
    store: &Store,
    plan: &ExecPlan,
    id: TaskId,
    ended: Result<PlanOutcome, PlanRunError>,
) -> Finished {
    match ended {
        Ok(outcome) => {
            let dag = store
                .read(|s| s.task(&id).map(|after| rendered(after, plan)))
                .ok()
                .flatten();
            Ok(Arc::new(RunEnd { outcome, dag }))
        }
        Err(PlanRunError::Worker(WorkerError::Busy(_))) => {
            Err(RunFailure::RunningElsewhere { plan: id })
        }
        Err(
            error @ (PlanRunError::StartedMeanwhile { .. }
            | PlanRunError::Worker(WorkerError::StartedMeanwhile { .. })),
        ) => Err(RunFailure::StartedMeanwhile(error.to_string())),
        Err(error) => Err(RunFailure::Failed(error.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_its_limit_the_oldest_kept_value_is_forgotten() {
        let ids: Vec<TaskId> = (0..4)
            .map(|n| TaskId::parse(&format!("01890000-0000-7000-8000-00000000000{n}")).expect("id"))
            .collect();
        let mut kept = Newest::default();
        for (n, id) in ids.iter().enumerate() {
            kept.keep(*id, n, 3);
        }
        assert_eq!(kept.take(ids[0]), None, "the oldest is forgotten");
        // Kept again, a value is the newest.
        kept.keep(ids[1], 10, 3);
        kept.keep(ids[0], 0, 3);
        assert_eq!(kept.take(ids[2]), None);
        assert_eq!(
            (kept.take(ids[1]), kept.take(ids[3]), kept.take(ids[0])),
            (Some(10), Some(3), Some(0))
        );
        assert_eq!(kept.take(ids[1]), None, "taken once");
    }
}
