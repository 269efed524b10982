//! [`Retro`]: the timeline shared by the request handlers, and the follower
//! that keeps it current by tailing the log read-only.
//!
//! The follower owns a [`LogReader`] opened with `planb_log::read_dir`, which
//! never writes nor takes the append lock, so `planb-mcp` processes keep
//! appending while retro reads. Each poll decodes the records appended since
//! the last one, pushes them onto the [`Timeline`] under its write lock (held
//! only for the pushes, never while decoding or reading), and announces the
//! new last cursor on a broadcast channel for the server-sent event streams.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, Weak};
use std::time::Duration;

use planb_core::exec_plan::ExecPlan;
use planb_core::state::tasks::UnreadablePlan;
use planb_core::{Cursor, Envelope, Task, TaskId, decode};
use planb_log::{LogError, LogOptions, LogReader};
use planb_projections::timeline::Incomplete;
use planb_projections::{DataRoot, Timeline};
use planb_ui::pages::EntryCache;

use crate::team::{Members, TeamSource};
use tokio::sync::broadcast;

/// How often the follower looks for new events.
pub const POLL_INTERVAL: Duration = Duration::from_millis(200);
/// Notifications a slow event-stream client may fall behind by; past that it
/// skips ahead, which is harmless since each notification only says "look".
const NOTIFICATIONS_MAX: usize = 64;

/// The replay's shared state; cheap to clone.
#[derive(Debug, Clone)]
pub struct Retro {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Written only by the follower; read by every request.
    timeline: RwLock<Timeline>,
    /// Why the log cannot be read right now (missing, unreadable), for the
    /// index page. Damage that ends the history for good is not a problem
    /// but part of the timeline: [`Timeline::incomplete`].
    problem: RwLock<Option<String>>,
    /// The last cursor after each batch of new events.
    appended: broadcast::Sender<Cursor>,
    log_dir: PathBuf,
    /// The data root, for the blobs a task's artifacts are in (read only).
    root: DataRoot,
    /// Rendered timeline entries, kept for the life of the server.
    entries: EntryCache,
    /// Each execution plan read back once (a plan's definition never
    /// changes after it is created), by task.
    plans: Mutex<HashMap<TaskId, Arc<Result<ExecPlan, UnreadablePlan>>>>,
    /// A team replay's members and origins; `None` for a local log.
    members: RwLock<Option<Arc<Members>>>,
    /// What a team database holds that cannot be trusted: events left
    /// out (origin, cursor, why), names cut.
    untrusted: RwLock<Untrusted>,
}

/// Most untrusted rows named; past it they are counted.
pub const UNTRUSTED_NAMED_MAX: usize = 200;

/// What cannot be trusted, the first [`UNTRUSTED_NAMED_MAX`] named.
#[derive(Debug, Default)]
struct Untrusted {
    named: Vec<String>,
    more: u64,
}

/// Reads the log forward from where the timeline ends.
#[derive(Debug)]
pub struct Follower {
    reader: Option<LogReader>,
    /// A team replay reads its database instead of a log.
    team: Option<TeamSource>,
    /// Set when a record cannot be read or decoded: following on would skip
    /// events and show wrong states, so the follower stops and the timeline
    /// says why ([`Timeline::incomplete`]).
    stopped: bool,
    /// The last poll of a team database left events to read.
    more: bool,
}

impl Retro {
    /// A replay of the log under `root`, loaded as far as the log goes now.
    /// A missing or unreadable log is not an error: the pages say so and
    /// the follower keeps trying.
    pub fn open(root: &DataRoot) -> (Retro, Follower) {
        let retro = Retro::empty(root);
        let mut follower = Follower {
            reader: None,
            team: None,
            stopped: false,
            more: false,
        };
        follower.poll(&retro);
        (retro, follower)
    }

    /// A replay of every origin shipped to a team database, loaded as far
    /// as the database goes now; the blobs its events name are copied into
    /// `cache` (a data root holding only `blobs/`).
    pub fn open_team(source: TeamSource, cache: &DataRoot) -> (Retro, Follower) {
        let retro = Retro::empty(cache);
        *retro
            .inner
            .members
            .write()
            .unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(Members::default()));
        let mut follower = Follower {
            reader: None,
            team: Some(source),
            stopped: false,
            more: false,
        };
        follower.poll(&retro);
        while follower.more {
            follower.poll(&retro);
        }
        (retro, follower)
    }

    /// A team replay's members and origins; `None` for a local log.
    pub fn members(&self) -> Option<Arc<Members>> {
        self.inner
            .members
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn empty(root: &DataRoot) -> Retro {
        let (appended, _) = broadcast::channel(NOTIFICATIONS_MAX);
        Retro {
            inner: Arc::new(Inner {
                timeline: RwLock::new(Timeline::default()),
                problem: RwLock::new(None),
                appended,
                log_dir: root.log_dir(),
                root: root.clone(),
                entries: EntryCache::default(),
                plans: Mutex::default(),
                members: RwLock::new(None),
                untrusted: RwLock::default(),
            }),
        }
    }

    /// The timeline, for reading. Never hold it across an `.await`.
    pub fn timeline(&self) -> RwLockReadGuard<'_, Timeline> {
        self.inner
            .timeline
            .read()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// The data root the replay reads.
    pub fn root(&self) -> &DataRoot {
        &self.inner.root
    }

    /// The cache of rendered timeline entries.
    pub fn entries(&self) -> &EntryCache {
        &self.inner.entries
    }

    /// The execution plan `task` holds (a deleted one too: the log keeps
    /// it), or why it cannot be read; `None` for a pipeline task.
    pub fn plan(&self, task: &Task) -> Option<Arc<Result<ExecPlan, UnreadablePlan>>> {
        let info = task.plan.as_ref()?;
        let mut plans = self.inner.plans.lock().unwrap_or_else(|p| p.into_inner());
        Some(Arc::clone(
            plans
                .entry(task.id)
                .or_insert_with(|| Arc::new(info.exec_plan())),
        ))
    }

    /// Why the log cannot be read, if it cannot.
    pub fn problem(&self) -> Option<String> {
        self.inner
            .problem
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// What the team database holds that cannot be trusted, said in one
    /// text: the events left out (origin, cursor, why) and names cut;
    /// `None` when all is well (and for a local log).
    pub fn untrusted(&self) -> Option<String> {
        let untrusted = self
            .inner
            .untrusted
            .read()
            .unwrap_or_else(|p| p.into_inner());
        if untrusted.named.is_empty() {
            return None;
        }
        let more = match untrusted.more {
            0 => String::new(),
            n => format!("; and {n} more"),
        };
        Some(format!(
            "The team database holds what this replay cannot trust, left out or cut: {}{more}.",
            untrusted.named.join("; ")
        ))
    }

    fn add_untrusted(&self, said: Vec<String>) {
        if said.is_empty() {
            return;
        }
        let mut untrusted = self
            .inner
            .untrusted
            .write()
            .unwrap_or_else(|p| p.into_inner());
        for text in said {
            tracing::warn!("team replay: {text}");
            if untrusted.named.len() < UNTRUSTED_NAMED_MAX {
                untrusted.named.push(text);
            } else {
                untrusted.more += 1;
            }
        }
    }

    /// Notifications of the last cursor after each batch of new events.
    pub fn subscribe(&self) -> broadcast::Receiver<Cursor> {
        self.inner.appended.subscribe()
    }

    fn set_problem(&self, problem: Option<String>) {
        *self
            .inner
            .problem
            .write()
            .unwrap_or_else(|p| p.into_inner()) = problem;
    }

    /// Polls the log every `interval` on a thread of its own until every
    /// clone of this `Retro` is dropped.
    pub fn follow(&self, mut follower: Follower, interval: Duration) {
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        let spawned = std::thread::Builder::new()
            .name("planb-retro-follower".into())
            .spawn(move || {
                while let Some(inner) = weak.upgrade() {
                    follower.poll(&Retro { inner });
                    follower.wait(interval);
                }
            });
        if let Err(error) = spawned {
            self.set_problem(Some(format!(
                "cannot start the thread that follows the log ({error}); restart planb-retro to see new events"
            )));
        }
    }
}

impl Follower {
    /// Waits before the next poll: `interval` for a log; for a team
    /// database, until a shipper announces a batch (at most
    /// [`crate::team::WAIT_MAX`]).
    pub fn wait(&mut self, interval: Duration) {
        if self.more {
            return;
        }
        match self.team.as_mut() {
            Some(source) => source.wait(crate::team::WAIT_MAX),
            None => std::thread::sleep(interval),
        }
    }

    /// Pushes every event appended since the last poll; returns how many.
    pub fn poll(&mut self, retro: &Retro) -> usize {
        if self.stopped {
            return 0;
        }
        if let Some(source) = self.team.as_mut() {
            return poll_team(source, retro, &mut self.more);
        }
        let log_dir = &retro.inner.log_dir;
        if self.reader.is_none() {
            let from = retro.timeline().last_cursor().next();
            match planb_log::read_dir(log_dir, LogOptions::default(), planb_log::Cursor(from.0)) {
                Ok(reader) => {
                    self.reader = Some(reader);
                    retro.set_problem(None);
                }
                Err(_) if !log_dir.exists() => {
                    let root = log_dir.parent().unwrap_or(log_dir);
                    retro.set_problem(Some(format!(
                        "Nothing is recorded in {} yet. Run `planb-mcp demo` (or let an agent use planb-mcp) and what it records shows here as it happens; another data root is named by PLANB_MCP_DATA_DIR.",
                        root.display()
                    )));
                    return 0;
                }
                Err(error) => {
                    retro.set_problem(Some(format!(
                        "the log cannot be read: {error}; PLANB_MCP_DATA_DIR names the data root planb-mcp uses"
                    )));
                    return 0;
                }
            }
        }
        let (batch, incomplete, failure) = self.read_batch(log_dir);
        // Past damage or an event this build cannot decode, following on
        // would skip events and show wrong states; writers refuse to append
        // to a damaged log anyway. The pages say where it stopped.
        self.stopped = incomplete.is_some();
        let count = batch.len();
        retro.append(batch, incomplete);
        retro.set_problem(failure);
        count
    }

    /// The events appended since the last read, where the history stops
    /// when it does (damage, an event this build cannot decode), and why
    /// the log could not be read (the reader is then opened again).
    fn read_batch(
        &mut self,
        log_dir: &std::path::Path,
    ) -> (Vec<Envelope>, Option<Incomplete>, Option<String>) {
        let mut batch: Vec<Envelope> = Vec::new();
        let mut failure = None;
        let mut incomplete = None;
        if let Some(reader) = self.reader.as_mut() {
            loop {
                match reader.next() {
                    Ok(Some(record)) => match decode(&record.payload, Cursor(record.cursor.0)) {
                        Ok(envelope) => batch.push(envelope),
                        Err(error) => {
                            incomplete = Some(Incomplete {
                                cursor: Cursor(record.cursor.0),
                                reason: error.to_string(),
                            });
                            break;
                        }
                    },
                    Ok(None) => break,
                    Err(error @ (LogError::Corrupt { .. } | LogError::NewerFormat { .. })) => {
                        let cursor = match &error {
                            LogError::Corrupt { cursor, .. } => Cursor(*cursor),
                            _ => Cursor(reader.next_cursor().0),
                        };
                        incomplete = Some(Incomplete {
                            cursor,
                            reason: error.to_string(),
                        });
                        break;
                    }
                    Err(error) => {
                        self.reader = None;
                        failure = Some(format!(
                            "cannot read the log at {}: {error}; retrying",
                            log_dir.display()
                        ));
                        break;
                    }
                }
            }
        }
        (batch, incomplete, failure)
    }
}

impl Retro {
    /// Pushes `events` (and where the history stops, if it does) onto the
    /// timeline and announces its new end.
    fn append(&self, events: Vec<Envelope>, incomplete: Option<Incomplete>) {
        if events.is_empty() && incomplete.is_none() {
            return;
        }
        let last = {
            let mut timeline = self
                .inner
                .timeline
                .write()
                .unwrap_or_else(|p| p.into_inner());
            for envelope in events {
                timeline.push(envelope);
            }
            if let Some(incomplete) = incomplete {
                timeline.mark_incomplete(incomplete);
            }
            timeline.last_cursor()
        };
        // No subscriber is fine: nobody is watching.
        let _ = self.inner.appended.send(last);
    }
}

/// One poll of a team database: the new events pushed, the members
/// updated, what cannot be trusted and a failure said on the index page.
/// An event left out does not stop the replay: the others go on.
fn poll_team(source: &mut TeamSource, retro: &Retro, more: &mut bool) -> usize {
    let polled = match source.poll() {
        Ok(polled) => polled,
        Err(error) => {
            *more = false;
            retro.set_problem(Some(format!(
                "cannot read the team database {}: {error}; retrying",
                source.database()
            )));
            return 0;
        }
    };
    retro.set_problem(None);
    *more = polled.more;
    if let Some(members) = polled.members {
        *retro
            .inner
            .members
            .write()
            .unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(members));
    }
    retro.add_untrusted(polled.untrusted);
    if polled.left_out > 0 {
        retro
            .inner
            .timeline
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .note_left_out(polled.left_out);
    }
    let count = polled.events.len();
    retro.append(polled.events, None);
    count
}
