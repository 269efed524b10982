//! The settle loop: how a run of any kind of step goes from its start to an
//! end. A task's run (model, render and tool steps on a pipeline's DAG) and
//! a plan's run (tool calls in Kahn batches) are each a [`StepKind`]; the
//! loop around them is this one.
//!
//! One turn of the loop: look for a stop (at least every `poll`, and at
//! once when a start was refused); give up when no step has started or
//! ended for the run's inactivity limit; ask the kind what starts next, up
//! to the concurrency limit; record the ends not yet recorded and those
//! starts in one append; launch what was recorded as started; wait for a
//! step to end (or `poll`) and take it with every other end already in.
//! A step's end is recorded with the next starts, or alone when none
//! follow; its large blob is synced in the blob store before it is named.
//!
//! On a stop, or when the run goes quiet, the steps in flight are dropped
//! (which cancels their calls); one that had ended keeps its end, each
//! other is recorded failed as the kind words it.

use std::collections::BTreeSet;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use futures_util::future::{BoxFuture, CatchUnwind};
use futures_util::stream::{FuturesUnordered, StreamExt};
use planb_core::{Command, INLINE_BLOB_BYTES_MAX, Rejection, RunState, StepStart, TaskErrorCode};
use planb_projections::StoreError;

use crate::host::{RunHost, WorkerError};

/// A step the kind wants started: its start as recorded, the blob the
/// start names (a plan's call), and the work to launch once it is.
pub(crate) struct Launch<W> {
    pub(crate) start: StepStart,
    pub(crate) blob: Option<Vec<u8>>,
    pub(crate) work: W,
}

/// A step's end as it will be recorded, with its artifact.
pub(crate) struct End {
    pub(crate) command: Command,
    pub(crate) blob: Option<Vec<u8>>,
}

/// What the kind says when asked what comes next.
pub(crate) enum Next<W, F> {
    /// These start now (none: wait for a step in flight to end).
    Start(Vec<Launch<W>>),
    /// The run is over: nothing is in flight and nothing more will start.
    Settle(Settled<F>),
}

/// How a run's steps settled.
#[derive(Debug)]
pub(crate) enum Settled<F> {
    /// Every step it had to settle did.
    Completed,
    /// A stop was asked for; the steps in flight were cancelled.
    Stopped,
    /// No step started or ended within the inactivity limit.
    Inactive,
    /// The kind's own failure.
    Failed(F),
    /// Another process recorded the run's end (it should not: this process
    /// holds the run lock); there is nothing left to record. Its state.
    EndedElsewhere(&'static str),
}

/// Why the steps in flight were cut short.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Cut {
    /// A stop was asked for.
    Stopped,
    /// No step progressed for this long.
    Inactive(Duration),
}

/// The loop's limits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pace {
    /// Most steps in flight.
    pub(crate) concurrency: usize,
    /// How often a stop is looked for.
    pub(crate) poll: Duration,
    /// The longest the run may go without a step starting or ending.
    pub(crate) inactivity: Option<Duration>,
}

/// One kind of step: what it starts, how a step's work runs and how its
/// outcome is recorded.
pub(crate) trait StepKind {
    /// A step's work, launched once its start is recorded.
    type Work: Send + 'static;
    /// A step's outcome.
    type Done: Send + 'static;
    /// How the kind fails a run.
    type Failure;

    /// What starts now, at most `room` steps; `idle` when nothing is in
    /// flight. When idle the kind starts something or settles.
    fn next(
        &mut self,
        room: usize,
        idle: bool,
    ) -> impl Future<Output = Result<Next<Self::Work, Self::Failure>, StoreError>> + Send;

    /// Does a step's work.
    fn launch(work: Self::Work) -> BoxFuture<'static, Self::Done>;

    /// The step `done` is the outcome of.
    fn step_of(done: &Self::Done) -> &str;

    /// The step `step` started (its start is recorded).
    fn started(&mut self, step: &str);

    /// A step ended: its end to record.
    fn ended(&mut self, done: Self::Done) -> End;

    /// The artifact of `step`'s end could not be stored: the end to record
    /// instead.
    fn unstored(&mut self, step: &str, error: &StoreError) -> Command;

    /// `step` was cut short: its end to record.
    fn cancelled(&mut self, step: &str, cut: Cut) -> Command;

    /// Ends were recorded: what follows them (files, telling a listener).
    fn recorded(&mut self) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// A step in flight: its work, a panic in it caught.
type Call<D> = CatchUnwind<AssertUnwindSafe<BoxFuture<'static, D>>>;

/// The steps in flight and their names.
struct Flight<D> {
    calls: FuturesUnordered<Call<D>>,
    running: BTreeSet<String>,
}

/// When the run last looked for a stop, and last progressed.
struct Clock {
    pace: Pace,
    last_look: Option<Instant>,
    last_progress: Instant,
}

impl Clock {
    fn look_due(&mut self) -> bool {
        let due = self
            .last_look
            .is_none_or(|at| at.elapsed() >= self.pace.poll);
        if due {
            self.last_look = Some(Instant::now());
        }
        due
    }

    fn quiet_for(&self) -> Option<Duration> {
        let limit = self.pace.inactivity?;
        (self.last_progress.elapsed() >= limit).then_some(limit)
    }

    fn wait(&self) -> Duration {
        match self.pace.inactivity {
            Some(limit) => self
                .pace
                .poll
                .min(limit.saturating_sub(self.last_progress.elapsed())),
            None => self.pace.poll,
        }
    }
}

/// Runs `kind`'s steps to an end, recording every start and end of the
/// run `host` names.
pub(crate) async fn settle<K: StepKind>(
    host: &RunHost,
    kind: &mut K,
    pace: Pace,
) -> Result<Settled<K::Failure>, WorkerError> {
    let mut flight = Flight {
        calls: FuturesUnordered::new(),
        running: BTreeSet::new(),
    };
    let mut clock = Clock {
        pace,
        last_look: None,
        last_progress: Instant::now(),
    };
    let mut ends: Vec<End> = Vec::new();
    let mut refused = false;
    loop {
        if (clock.look_due() || refused)
            && let Some(settled) = look(host, refused).await?
        {
            return cut_short(host, kind, flight, ends, settled, Cut::Stopped).await;
        }
        if let Some(limit) = clock.quiet_for() {
            let cut = Cut::Inactive(limit);
            return cut_short(host, kind, flight, ends, Settled::Inactive, cut).await;
        }
        let room = pace.concurrency.max(1).saturating_sub(flight.calls.len());
        let launches = match kind.next(room, flight.calls.is_empty()).await? {
            Next::Start(launches) => launches,
            Next::Settle(settled) => {
                debug_assert!(
                    flight.calls.is_empty(),
                    "a kind settles only with nothing in flight"
                );
                record_ends(host, kind, &mut ends).await?;
                return Ok(settled);
            }
        };
        debug_assert!(
            launches.len() <= room,
            "{} starts asked for with room for {room}",
            launches.len()
        );
        refused = launch(host, kind, &mut flight, &mut ends, launches, &mut clock).await?;
        if refused || flight.calls.is_empty() {
            continue;
        }
        collect(host, kind, &mut flight, &mut ends, &mut clock).await?;
    }
}

/// `None` while the run runs, else how it settles: a stop asked for (or a
/// start refused: the run no longer runs), or an end recorded elsewhere.
async fn look<F>(host: &RunHost, refused: bool) -> Result<Option<Settled<F>>, StoreError> {
    Ok(match host.state().await? {
        Some(RunState::Running) if refused => Some(Settled::Stopped),
        Some(RunState::Running) => None,
        Some(RunState::Stopping) => Some(Settled::Stopped),
        Some(other) => Some(Settled::EndedElsewhere(other.as_str())),
        None => Some(Settled::EndedElsewhere("gone")),
    })
}

/// Records the ends waiting and `launches`' starts in one append, and
/// launches the steps whose start was recorded. True when a start was
/// refused (the run is stopping, or no longer runs).
async fn launch<K: StepKind>(
    host: &RunHost,
    kind: &mut K,
    flight: &mut Flight<K::Done>,
    ends: &mut Vec<End>,
    launches: Vec<Launch<K::Work>>,
    clock: &mut Clock,
) -> Result<bool, WorkerError> {
    if launches.is_empty() && ends.is_empty() {
        return Ok(false);
    }
    let (mut blobs, commands) = drain(ends);
    let mut starts = Vec::new();
    let mut works = Vec::new();
    for one in launches {
        blobs.extend(one.blob);
        works.push((one.start.step.clone(), one.work));
        starts.push(one.start);
    }
    let started = match host.record(blobs, commands, starts).await {
        Ok(started) => started,
        Err(StoreError::Rejected(Rejection::Task {
            code: TaskErrorCode::RunNotActive,
            ..
        })) => return Ok(true),
        Err(error) => return Err(error.into()),
    };
    // What follows the ends (a listener told, files written) comes before
    // the steps they let start are launched.
    kind.recorded().await?;
    let mut refused = false;
    for (step, work) in works {
        if started.contains(&step) {
            kind.started(&step);
            let new = flight.running.insert(step);
            debug_assert!(new, "a step already in flight was started again");
            flight
                .calls
                .push(AssertUnwindSafe(K::launch(work)).catch_unwind());
            clock.last_progress = Instant::now();
        } else {
            refused = true;
        }
    }
    debug_assert_eq!(
        flight.running.len(),
        flight.calls.len(),
        "every call in flight is a step in flight"
    );
    Ok(refused)
}

/// Waits for a step to end (at most until a look or the inactivity limit
/// is due) and takes it, with every other end already in.
async fn collect<K: StepKind>(
    host: &RunHost,
    kind: &mut K,
    flight: &mut Flight<K::Done>,
    ends: &mut Vec<End>,
    clock: &mut Clock,
) -> Result<(), WorkerError> {
    let joined = tokio::select! {
        joined = flight.calls.next() => joined,
        () = tokio::time::sleep(clock.wait()) => None,
    };
    let Some(first) = joined else {
        return Ok(());
    };
    let mut done = vec![first];
    while let Some(Some(more)) = flight.calls.next().now_or_never() {
        done.push(more);
    }
    let mut panic = None;
    for one in done {
        let one = match one {
            Ok(one) => one,
            Err(said) => {
                panic.get_or_insert_with(|| panicked(&flight.running, said));
                continue;
            }
        };
        flight.running.remove(K::step_of(&one));
        clock.last_progress = Instant::now();
        let end = end_of(host, kind, one).await;
        ends.push(end);
    }
    match panic {
        // What the other calls did is recorded before the run fails.
        Some(panic) => {
            record_ends(host, kind, ends).await?;
            Err(panic)
        }
        None => {
            debug_assert_eq!(
                flight.running.len(),
                flight.calls.len(),
                "every step that ended left the flight"
            );
            Ok(())
        }
    }
}

/// The end of `done`, its large artifact synced in the blob store already;
/// one that cannot be is the step's failure instead.
async fn end_of<K: StepKind>(host: &RunHost, kind: &mut K, done: K::Done) -> End {
    let step = K::step_of(&done).to_owned();
    let end = kind.ended(done);
    let Some(blob) = end.blob else {
        return end;
    };
    if blob.len() <= INLINE_BLOB_BYTES_MAX {
        return End {
            command: end.command,
            blob: Some(blob),
        };
    }
    match host.put_blob(blob).await {
        Ok(_) => End {
            command: end.command,
            blob: None,
        },
        Err(error) => End {
            command: kind.unstored(&step, &error),
            blob: None,
        },
    }
}

fn panicked(running: &BTreeSet<String>, panic: Box<dyn std::any::Any + Send>) -> WorkerError {
    let said = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    let steps: Vec<&str> = running.iter().map(String::as_str).collect();
    WorkerError::Panicked(format!(
        "a call of one of steps {} panicked: {said}",
        steps.join(", ")
    ))
}

/// The ends waiting, taken: their blobs and their commands.
fn drain(ends: &mut Vec<End>) -> (Vec<Vec<u8>>, Vec<Command>) {
    let mut blobs = Vec::new();
    let mut commands = Vec::new();
    for end in ends.drain(..) {
        blobs.extend(end.blob);
        commands.push(end.command);
    }
    (blobs, commands)
}

/// Records the ends waiting, alone.
async fn record_ends<K: StepKind>(
    host: &RunHost,
    kind: &mut K,
    ends: &mut Vec<End>,
) -> Result<(), StoreError> {
    if ends.is_empty() {
        return Ok(());
    }
    let (blobs, commands) = drain(ends);
    host.record(blobs, commands, Vec::new()).await?;
    kind.recorded().await
}

/// Cuts the run short: the steps in flight are dropped (a call that had
/// ended keeps its end), each other is recorded as the kind words `cut`,
/// with the ends waiting, in one append. When the run was ended elsewhere
/// nothing more is accepted, and nothing is recorded.
async fn cut_short<K: StepKind>(
    host: &RunHost,
    kind: &mut K,
    mut flight: Flight<K::Done>,
    mut ends: Vec<End>,
    settled: Settled<K::Failure>,
    cut: Cut,
) -> Result<Settled<K::Failure>, WorkerError> {
    if matches!(settled, Settled::EndedElsewhere(_)) {
        return Ok(settled);
    }
    // A look may end before it has polled every call (the set yields after
    // a round), so there are as many looks as calls.
    for _ in 0..=flight.calls.len() {
        match flight.calls.next().now_or_never() {
            Some(Some(Ok(done))) => {
                flight.running.remove(K::step_of(&done));
                let end = end_of(host, kind, done).await;
                ends.push(end);
            }
            Some(None) => break,
            Some(Some(Err(_))) | None => {}
        }
    }
    flight.calls.clear();
    for step in std::mem::take(&mut flight.running) {
        let command = kind.cancelled(&step, cut);
        ends.push(End {
            command,
            blob: None,
        });
    }
    match record_ends(host, kind, &mut ends).await {
        Ok(())
        | Err(StoreError::Rejected(Rejection::Task {
            code: TaskErrorCode::RunNotActive,
            ..
        })) => Ok(settled),
        Err(error) => Err(error.into()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use planb_core::state::ContentHash;
    use planb_core::{RunId, TaskId};
    use planb_projections::{DataRoot, Store, SystemEnvironment};

    use super::*;

    /// Starts steps `a` and `b` together; `b`'s call panics.
    struct OnePanics {
        task: TaskId,
        run: RunId,
        started: bool,
    }

    impl StepKind for OnePanics {
        type Work = &'static str;
        type Done = &'static str;
        type Failure = ();

        async fn next(
            &mut self,
            _room: usize,
            _idle: bool,
        ) -> Result<Next<&'static str, ()>, StoreError> {
            let launch = |step: &'static str| Launch {
                start: StepStart {
                    step: step.into(),
                    input: [0; 32],
                    call: None,
                },
                blob: None,
                work: step,
            };
            let first = !std::mem::replace(&mut self.started, true);
            let launches = if first {
                vec![launch("a"), launch("b")]
            } else {
                Vec::new()
            };
            Ok(Next::Start(launches))
        }

        fn launch(work: &'static str) -> BoxFuture<'static, &'static str> {
            Box::pin(async move {
                assert_ne!(work, "b", "a bug in the call of step b");
                work
            })
        }

        fn step_of(done: &&'static str) -> &'static str {
            done
        }

        fn started(&mut self, _step: &str) {}

        fn ended(&mut self, done: &'static str) -> End {
            let artifact = b"done".to_vec();
            End {
                command: Command::SucceedStep {
                    task: self.task,
                    run: self.run,
                    step: done.into(),
                    input: [0; 32],
                    artifact: ContentHash::of_bytes(&artifact).0,
                    bytes: artifact.len() as u64,
                    duration_ms: 0,
                    tokens_in: 0,
                    tokens_out: 0,
                },
                blob: Some(artifact),
            }
        }

        fn unstored(&mut self, step: &str, error: &StoreError) -> Command {
            unreachable!("{step}: {error}")
        }

        fn cancelled(&mut self, step: &str, _cut: Cut) -> Command {
            unreachable!("{step} cut short")
        }

        async fn recorded(&mut self) -> Result<(), StoreError> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_call_that_panics_fails_the_run_after_what_the_others_did_is_recorded() {
        let dir = tempfile::tempdir().expect("root");
        let root = DataRoot::new(dir.path());
        let (store, _) = Store::open(root, Arc::new(SystemEnvironment)).expect("store");
        let store = Arc::new(store);
        let task = TaskId::from_uuid(uuid::Uuid::new_v4());
        let pipeline = planb_core::pipelines::project_plan();
        let create = Command::CreateTask {
            task,
            pipeline: pipeline.name().into(),
            pipeline_version: pipeline.version(),
            prompt: "Plan it".into(),
            speed: "fast".into(),
            target: "build_plan".into(),
            model_profile: None,
            client_request_id: None,
            project_path: None,
        };
        store.execute(create).expect("task");
        let host = RunHost::start(&store, task, None, None).await.expect("run");
        let mut kind = OnePanics {
            task,
            run: host.run,
            started: false,
        };
        let pace = Pace {
            concurrency: 4,
            poll: Duration::from_secs(60),
            inactivity: None,
        };
        let settled = settle(&host, &mut kind, pace).await;
        let failed = settled.expect_err("a panic fails the run");
        assert!(failed.to_string().contains("panicked"), "{failed}");
        let succeeded = store.read(|s| s.task(&task).map(|t| t.successes.contains_key("a")));
        assert_eq!(succeeded.expect("read"), Some(true), "a's success was lost");
    }
}
