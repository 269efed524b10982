//! Keeping a process's downstream servers usable: each server's slot holds
//! its connection, the start under way, or what is known of it.
//!
//! A start runs in a task of its own that records its outcome in the slot,
//! so a caller that stops waiting (a server not waited for) leaves it to
//! end, and calls made meanwhile wait for that same start.
//!
//! A server that does not answer `initialize` (or `tools/list`) within the
//! start limit is remembered as mute: a use fails at once, naming it, while
//! it is started again in the background ([`MUTE_RETRY_FIRST`] between
//! tries, doubling up to [`RESTART_BACKOFF_MAX`]; one process at a time);
//! once it answers, the next use has it. Each process keeps its own memory.
//!
//! A server that exits is started again on its next use, after a wait if it
//! keeps dying. A call that times out is followed by a `ping` within
//! [`PING_LIMIT`]: a server that does not answer that either is stopped (its
//! process group) and started again for the next call.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use rmcp::model::{ClientRequest, PingRequest};
use tokio::sync::watch;
use tokio::time::Instant;

use super::{Connection, Downstream, DownstreamError, ServerSpec};

/// A server's slot: locked only for a moment, never across a start.
pub(super) type Slot = Arc<tokio::sync::Mutex<SlotState>>;

/// The longest wait before a server that keeps dying, or keeps silent, is
/// started again.
const RESTART_BACKOFF_MAX: Duration = Duration::from_secs(30);
/// The pause before a mute server is first started again.
const MUTE_RETRY_FIRST: Duration = Duration::from_secs(1);
/// How long a server whose call timed out has to answer `ping`.
pub const PING_LIMIT: Duration = Duration::from_secs(5);

/// A start's outcome, as every caller waiting for it gets it.
type Started = Result<Arc<Connection>, DownstreamError>;

#[derive(Default)]
pub(super) struct SlotState {
    phase: Phase,
    /// Deaths (exits mid-call, failed starts, stops after a hang) since it
    /// last answered, shared with the live connection.
    deaths: Arc<AtomicU32>,
    /// No start before this, after a death.
    retry_at: Option<Instant>,
    /// What its last death said (with its last stderr lines).
    last_words: String,
    /// Starts begun, numbering them.
    starts: u64,
}

#[derive(Default)]
enum Phase {
    /// Not started, or dropped after a death.
    #[default]
    Idle,
    /// A start under way; its outcome is sent once.
    Starting {
        number: u64,
        outcome: watch::Receiver<Option<Started>>,
    },
    /// Connected.
    Up(Arc<Connection>),
    /// It did not answer its start within the limit; started again in the
    /// background.
    Mute(Mute),
}

/// A server that kept silent when started.
#[derive(Debug)]
pub(super) struct Mute {
    /// What it did not answer: `initialize` or `tools/list`.
    stage: &'static str,
    /// The start limit it had.
    limit: Duration,
    /// The end of its stderr, as said in messages (empty for a url server).
    words: String,
    /// Starts it kept silent in, in a row.
    tries: u32,
}

impl Mute {
    pub(super) fn new(stage: &'static str, limit: Duration, words: String) -> Mute {
        Mute {
            stage,
            limit,
            words,
            tries: 1,
        }
    }

    /// Why a use of server `name` fails at once.
    fn error(&self, name: &str) -> DownstreamError {
        DownstreamError {
            message: format!(
                "downstream server {name:?} did not answer {} within {} s; retried in the background ({} {} so far){}",
                self.stage,
                self.limit.as_secs_f64(),
                self.tries,
                if self.tries == 1 { "try" } else { "tries" },
                self.words
            ),
            class: "server_start",
        }
    }
}

/// Why a server did not start.
#[derive(Debug)]
pub(super) enum StartFailure {
    /// It did not answer within the limit (and was stopped).
    Silent(Mute),
    /// It could not run, exited, or refused.
    Failed(DownstreamError),
}

/// What a use of a server finds in its slot.
enum Look {
    Ready(Arc<Connection>),
    Wait(u64, watch::Receiver<Option<Started>>),
    Start,
}

impl SlotState {
    /// Notes a death: the connection is dropped and the next start waits
    /// 0 s after the first death, then 0.5 s, 1 s, 2 s, … up to
    /// [`RESTART_BACKOFF_MAX`].
    fn died(&mut self, words: &str) {
        self.phase = Phase::Idle;
        let deaths = self.deaths.load(Ordering::Relaxed).saturating_add(1);
        self.deaths.store(deaths, Ordering::Relaxed);
        let wait = match deaths {
            0 | 1 => Duration::ZERO,
            n => Duration::from_millis(250)
                .saturating_mul(1 << (n - 1).min(16))
                .min(RESTART_BACKOFF_MAX),
        };
        self.retry_at = Some(Instant::now() + wait);
        words.clone_into(&mut self.last_words);
    }

    /// Keeps `started` as the connection.
    fn up(&mut self, started: Connection) -> Arc<Connection> {
        let connection = Arc::new(Connection {
            deaths: Arc::clone(&self.deaths),
            ..started
        });
        self.phase = Phase::Up(Arc::clone(&connection));
        connection
    }

    /// What a use of server `name` does now: use its connection, wait for
    /// the start under way, start it, or fail at once (mute, or waiting
    /// after deaths).
    fn look(&mut self, name: &str) -> Result<Look, DownstreamError> {
        if let Phase::Up(found) = &self.phase {
            if found.alive() {
                return Ok(Look::Ready(Arc::clone(found)));
            }
            self.died(&format!("downstream server {name:?} exited"));
        }
        match &self.phase {
            Phase::Mute(mute) => return Err(mute.error(name)),
            Phase::Starting { number, outcome } => return Ok(Look::Wait(*number, outcome.clone())),
            Phase::Idle | Phase::Up(_) => {}
        }
        if let Some(at) = self.retry_at
            && at > Instant::now()
        {
            return Err(DownstreamError {
                message: format!(
                    "downstream server {name:?} died {} times in a row; it is started again in {:.1} s. Its last failure: {}",
                    self.deaths.load(Ordering::Relaxed),
                    (at - Instant::now()).as_secs_f64(),
                    self.last_words
                ),
                class: "server_start",
            });
        }
        Ok(Look::Start)
    }
}

impl Downstream {
    /// The connection to server `name`: the one kept, the start under way,
    /// or a start begun now.
    pub(super) async fn connection(&self, name: &str) -> Result<Arc<Connection>, DownstreamError> {
        let Some(spec) = self.servers.servers.get(name) else {
            return Err(DownstreamError {
                message: format!("no downstream server {name:?} is configured"),
                class: "server_start",
            });
        };
        let slot = self.slot(name);
        let (number, mut outcome) = {
            let mut state = slot.lock().await;
            match state.look(name)? {
                Look::Ready(connection) => return Ok(connection),
                Look::Wait(number, outcome) => (number, outcome),
                Look::Start => self.begin(&slot, &mut state, name, spec),
            }
        };
        let seen = outcome.wait_for(Option::is_some).await.map(|s| s.clone());
        if let Ok(Some(started)) = seen {
            return started;
        }
        // The start's task was dropped with its runtime.
        let mut state = slot.lock().await;
        if matches!(state.phase, Phase::Starting { number: n, .. } if n == number) {
            state.phase = Phase::Idle;
        }
        Err(DownstreamError {
            message: format!("downstream server {name:?} did not start: its start was abandoned"),
            class: "server_start",
        })
    }

    /// Begins a start of server `name` in a task of its own (on the home
    /// runtime, if any): its number and where its outcome is sent.
    fn begin(
        &self,
        slot: &Slot,
        state: &mut SlotState,
        name: &str,
        spec: &ServerSpec,
    ) -> (u64, watch::Receiver<Option<Started>>) {
        state.starts += 1;
        let number = state.starts;
        let (sender, outcome) = watch::channel(None);
        state.phase = Phase::Starting {
            number,
            outcome: outcome.clone(),
        };
        let start = first_start(
            Arc::clone(slot),
            name.to_owned(),
            spec.clone(),
            self.start_timeout,
            sender,
        );
        // The task ends on its own: within the start limit.
        drop(match &self.home {
            Some(home) => home.spawn(start),
            None => tokio::spawn(start),
        });
        (number, outcome)
    }

    /// Whether server `name` is remembered as mute.
    pub(super) async fn is_mute(&self, name: &str) -> bool {
        matches!(self.slot(name).lock().await.phase, Phase::Mute(_))
    }

    /// Notes that `connection` of server `name` died (`words` say how),
    /// unless it is no longer the slot's.
    pub(super) async fn forget(&self, name: &str, connection: &Arc<Connection>, words: &str) {
        let slot = self.slot(name);
        let mut state = slot.lock().await;
        if matches!(&state.phase, Phase::Up(kept) if Arc::ptr_eq(kept, connection)) {
            state.died(words);
        }
    }

    /// The error of `server__tool` not answering within `timeout`: the
    /// server is pinged and, when it does not answer that either within
    /// [`PING_LIMIT`], stopped and started again for the next call.
    pub(super) async fn timed_out(
        &self,
        server: &str,
        tool: &str,
        connection: &Arc<Connection>,
        timeout: Duration,
    ) -> DownstreamError {
        let late = format!(
            "{server}__{tool} did not answer within {} s",
            timeout.as_secs_f64()
        );
        let ping = ClientRequest::PingRequest(PingRequest {
            method: Default::default(),
            extensions: Default::default(),
        });
        let answered = tokio::time::timeout(PING_LIMIT, connection.client.send_request(ping))
            .await
            .is_ok_and(|answer| answer.is_ok());
        let message = if answered {
            format!("{late}; the server answers ping, so it is kept")
        } else {
            let how = if connection.stop() {
                "was stopped (its process group) and is started again"
            } else {
                "was disconnected and is connected again"
            };
            let message = format!(
                "{late}; it did not answer ping within {} s either, so downstream server {server:?} {how} for the next call",
                PING_LIMIT.as_secs()
            );
            tracing::warn!("{message}");
            self.forget(server, connection, &message).await;
            message
        };
        DownstreamError {
            message,
            class: "tool_timeout",
        }
    }
}

/// A start begun by a use: records its outcome in the slot, then sends it
/// to whoever waits. A server that kept silent is remembered as mute and
/// started again in the background.
async fn first_start(
    slot: Slot,
    name: String,
    spec: ServerSpec,
    limit: Duration,
    sender: watch::Sender<Option<Started>>,
) {
    let outcome = Downstream::start(&name, &spec, limit).await;
    let mut state = slot.lock().await;
    let started = match outcome {
        Ok(connection) => Ok(state.up(connection)),
        Err(StartFailure::Failed(error)) => {
            state.died(&error.message);
            Err(error)
        }
        Err(StartFailure::Silent(mute)) => {
            let error = mute.error(&name);
            tracing::warn!("{error}");
            state.phase = Phase::Mute(mute);
            drop(tokio::spawn(retry_mute(
                Arc::downgrade(&slot),
                name,
                spec,
                limit,
            )));
            Err(error)
        }
    };
    drop(state);
    // Nobody waiting any more is fine: the slot has it.
    let _ = sender.send(Some(started));
}

/// Starts a mute server again, one try at a time with a growing pause
/// between, until it answers or fails otherwise, or its servers are
/// dropped (the servers file changed, the process ends).
async fn retry_mute(
    slot: Weak<tokio::sync::Mutex<SlotState>>,
    name: String,
    spec: ServerSpec,
    limit: Duration,
) {
    let mut pause = MUTE_RETRY_FIRST;
    loop {
        tokio::time::sleep(pause).await;
        pause = pause.saturating_mul(2).min(RESTART_BACKOFF_MAX);
        if slot.strong_count() == 0 {
            return;
        }
        let outcome = Downstream::start(&name, &spec, limit).await;
        let Some(slot) = slot.upgrade() else { return };
        let mut state = slot.lock().await;
        if !matches!(state.phase, Phase::Mute(_)) {
            return;
        }
        match outcome {
            Err(StartFailure::Silent(again)) => {
                if let Phase::Mute(mute) = &mut state.phase {
                    mute.tries = mute.tries.saturating_add(1);
                    mute.words = again.words;
                }
            }
            Ok(connection) => {
                state.deaths.store(0, Ordering::Relaxed);
                state.retry_at = None;
                state.up(connection);
                tracing::info!("downstream server {name:?} answered at last; it is used again");
                return;
            }
            Err(StartFailure::Failed(error)) => {
                state.died(&error.message);
                return;
            }
        }
    }
}
