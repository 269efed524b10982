//! `planb-retro --team`: the replay of a whole team, read from its
//! database instead of a local log.
//!
//! Every origin's shipped events are merged into one timeline: the first
//! load in the order they happened (`at`, then origin, then cursor), later
//! ones as they arrive. Each event gets a team cursor, its place in that
//! merged order, which is what the pages' scrubbers move along; ids of
//! sessions, asks and tasks are UUIDs, so the pages' addresses are the same
//! as a member's own replay. An origin is read only up to its mark, which
//! its shipper moves in the same transaction as the rows, so no event is
//! skipped. The blobs the events name are copied into a cache folder (a data
//! root holding only `blobs/`), where the task pages read them as they do
//! from a member's own root.

use planb_team::db::timed;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use planb_core::{Cursor, Envelope, EventBody, SessionId, TaskId, decode};
use planb_projections::{BlobHash, Blobs};
use planb_team::TeamSettings;
use tokio_postgres::Client;
use uuid::Uuid;

/// Most events read from the database in one poll.
const POLL_EVENTS_MAX: i64 = 50_000;

/// The longest wait for a notification before polling anyway (a
/// notification lost with a broken listener, a shipper of another build).
pub const WAIT_MAX: Duration = Duration::from_secs(2);

/// Who shipped an origin's events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// Its id.
    pub id: Uuid,
    /// The member's name.
    pub member: String,
    /// The machine it ships from.
    pub host: String,
    /// Events of it in the replay.
    pub events: u64,
}

/// Who is who in a team replay: the origins, and the member each session
/// and task came from.
#[derive(Debug, Clone, Default)]
pub struct Members {
    /// Every origin read, by id.
    pub origins: BTreeMap<Uuid, Origin>,
    /// The origin of each session.
    pub sessions: HashMap<SessionId, Uuid>,
    /// The origin of each task and execution plan.
    pub tasks: HashMap<TaskId, Uuid>,
}

impl Members {
    /// The member a session came from.
    pub fn of_session(&self, session: &SessionId) -> Option<&str> {
        let origin = self.sessions.get(session)?;
        Some(self.origins.get(origin)?.member.as_str())
    }

    /// The member a task came from.
    pub fn of_task(&self, task: &TaskId) -> Option<&str> {
        let origin = self.tasks.get(task)?;
        Some(self.origins.get(origin)?.member.as_str())
    }

    /// The members' names, each once, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.origins.values().map(|o| o.member.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        names
    }
}

/// One row read, before it has its team cursor.
struct Row {
    origin: Uuid,
    cursor: i64,
    at: std::time::SystemTime,
    payload: Vec<u8>,
}

/// Reads a team database forward.
pub struct TeamSource {
    settings: TeamSettings,
    /// The client's own runtime (the follower polls from a thread of its
    /// own); always `Some` until dropped.
    runtime: Option<tokio::runtime::Runtime>,
    client: Option<Client>,
    /// The connection that has run `LISTEN planb_events`.
    listener: Option<Client>,
    /// Woken by each notification.
    notified: Arc<tokio::sync::Notify>,
    /// The last cursor read of each origin.
    read_to: HashMap<Uuid, i64>,
    /// The team cursor the next event gets.
    next: u64,
    /// Where the blobs the events name are copied.
    blobs: Blobs,
    /// Each origin's latest `at` merged so far: its events keep their own
    /// order whatever times they carry (an import stamps old ones).
    merged_at: HashMap<Uuid, std::time::SystemTime>,
    /// Blobs that could not be copied yet (the database or the cache
    /// failed): tried again on each poll, at most [`RETRIES_PER_POLL`].
    uncopied: std::collections::BTreeSet<BlobHash>,
    members: Members,
}

/// Most uncopied blobs tried again in one poll.
const RETRIES_PER_POLL: usize = 64;

impl Drop for TeamSource {
    /// Ends the runtime without waiting, so a source may be dropped from
    /// async code too.
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl std::fmt::Debug for TeamSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TeamSource")
            .field("database", &self.settings.database())
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

/// What one poll brought.
#[derive(Debug, Default)]
pub struct Polled {
    /// New events, in team-cursor order.
    pub events: Vec<Envelope>,
    /// An event this build cannot read: the replay stops before it.
    pub incomplete: Option<planb_projections::timeline::Incomplete>,
    /// Who is who, when it changed.
    pub members: Option<Members>,
}

impl TeamSource {
    /// A source reading `settings`' database, copying blobs under `blobs`.
    pub fn new(settings: TeamSettings, blobs: Blobs) -> std::io::Result<TeamSource> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(TeamSource {
            settings,
            runtime: Some(runtime),
            client: None,
            listener: None,
            notified: Arc::new(tokio::sync::Notify::new()),
            read_to: HashMap::new(),
            next: 1,
            blobs,
            uncopied: std::collections::BTreeSet::new(),
            merged_at: HashMap::new(),
            members: Members::default(),
        })
    }

    fn runtime(&self) -> &tokio::runtime::Runtime {
        self.runtime.as_ref().expect("kept until dropped")
    }

    /// Waits until a shipper announces a batch, or `longest` (at most
    /// [`WAIT_MAX`]) passes; listening starts (again) on the first call
    /// after it broke.
    pub fn wait(&mut self, longest: Duration) {
        if self.listener.as_ref().is_none_or(Client::is_closed) {
            let listening = self.runtime().block_on(planb_team::db::listen(
                &self.settings,
                self.notified.clone(),
            ));
            self.listener = listening.ok();
        }
        let notified = self.notified.clone();
        let longest = longest.min(WAIT_MAX);
        self.runtime().block_on(async move {
            let _ = tokio::time::timeout(longest, notified.notified()).await;
        });
    }

    /// The database, without a password.
    pub fn database(&self) -> String {
        self.settings.database()
    }

    /// Reads every event shipped since the last poll. The error says why
    /// the database cannot be read now (the next poll tries again).
    pub fn poll(&mut self) -> Result<Polled, String> {
        let result = self
            .runtime
            .as_ref()
            .expect("kept until dropped")
            .block_on(Self::read(&self.settings, &mut self.client, &self.read_to));
        let (origins, rows) = match result {
            Ok(Some(read)) => read,
            Ok(None) => return Ok(Polled::default()),
            Err(error) => {
                self.client = None;
                return Err(error);
            }
        };
        self.take(origins, rows)
    }

    /// The origins and the rows past what was read, up to each mark.
    async fn read(
        settings: &TeamSettings,
        client: &mut Option<Client>,
        read_to: &HashMap<Uuid, i64>,
    ) -> Result<Option<(Vec<(Uuid, String, String, i64)>, Vec<Row>)>, String> {
        if client.is_none() {
            match planb_team::db::connect_reader(settings).await {
                Ok(Some(connected)) => *client = Some(connected),
                Ok(None) => return Ok(None),
                Err(error) => return Err(error.to_string()),
            }
        }
        let client = client.as_ref().expect("connected above");
        let origins: Vec<(Uuid, String, String, i64)> = timed(
            "read the origins",
            client.query(
                "SELECT origin, member, host, shipped_to FROM planb_origins ORDER BY origin",
                &[],
            ),
        )
        .await
        .map_err(|e| format!("database: {e}"))?
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2), row.get(3)))
        .collect();
        let mut rows = Vec::new();
        for (origin, _, _, mark) in &origins {
            let from = read_to.get(origin).copied().unwrap_or(0);
            if *mark <= from {
                continue;
            }
            let read = timed(
                "read the events",
                client.query(
                    "SELECT cursor, at, payload FROM planb_events \
                     WHERE origin = $1 AND cursor > $2 AND cursor <= $3 ORDER BY cursor LIMIT $4",
                    &[origin, &from, mark, &POLL_EVENTS_MAX],
                ),
            )
            .await
            .map_err(|e| format!("database: {e}"))?;
            rows.extend(read.iter().map(|row| Row {
                origin: *origin,
                cursor: row.get(0),
                at: row.get(1),
                payload: row.get(2),
            }));
        }
        Ok(Some((origins, rows)))
    }

    /// Gives `rows` their team cursors, decodes them and copies the blobs
    /// they name.
    fn take(
        &mut self,
        origins: Vec<(Uuid, String, String, i64)>,
        mut rows: Vec<Row>,
    ) -> Result<Polled, String> {
        let mut changed = false;
        for (id, member, host, _) in origins {
            let known = self.members.origins.get(&id);
            if known.is_none_or(|o| o.member != member || o.host != host) {
                let events = known.map_or(0, |o| o.events);
                self.members.origins.insert(
                    id,
                    Origin {
                        id,
                        member,
                        host,
                        events,
                    },
                );
                changed = true;
            }
        }
        self.copy_uncopied();
        self.merge(&mut rows);
        let mut events = Vec::with_capacity(rows.len());
        for row in rows {
            let cursor = Cursor(self.next);
            let envelope = match decode(&row.payload, cursor) {
                Ok(envelope) => envelope,
                Err(error) => {
                    let member = self
                        .members
                        .origins
                        .get(&row.origin)
                        .map_or("?", |o| o.member.as_str());
                    let reason = format!(
                        "event {} of origin {} ({member}): {error}",
                        row.cursor, row.origin
                    );
                    return Ok(Polled {
                        events,
                        incomplete: Some(planb_projections::timeline::Incomplete {
                            cursor,
                            reason,
                        }),
                        members: Some(self.members.clone()),
                    });
                }
            };
            self.next += 1;
            self.read_to.insert(row.origin, row.cursor);
            self.note(row.origin, &envelope.event.body);
            changed = true;
            events.push(envelope);
        }
        Ok(Polled {
            events,
            incomplete: None,
            members: changed.then(|| self.members.clone()),
        })
    }

    /// Remembers whose `body` is and copies the blobs it names. A blob
    /// that cannot be copied now is tried again later: the event is taken
    /// either way, since what was read is not read again.
    fn note(&mut self, origin: Uuid, body: &EventBody) {
        if let Some(o) = self.members.origins.get_mut(&origin) {
            o.events += 1;
        }
        if let EventBody::SessionCreated { session, .. } = body {
            self.members.sessions.insert(*session, origin);
        }
        if let Some(task) = body.task() {
            self.members.tasks.entry(task).or_insert(origin);
        }
        if let EventBody::BlobStored { bytes, .. } = body
            && let Err(error) = self.blobs.put(bytes)
        {
            tracing::warn!("team replay: a blob in the log was not kept: {error}");
        }
        if let Some(hash) = body.named_blob()
            && let Err(error) = self.copy_blob(hash)
        {
            if self.uncopied.is_empty() {
                tracing::warn!("team replay: blobs not copied yet: {error}");
            }
            self.uncopied.insert(*hash);
        }
    }

    /// Orders `rows` by when they happened, then origin, then cursor, each
    /// at the latest time its origin reached by then: an event that says it
    /// happened before one its origin recorded earlier (an import, a clock
    /// set back) comes after that one, as it does in its own log.
    fn merge(&mut self, rows: &mut [Row]) {
        rows.sort_by_key(|row| (row.origin, row.cursor));
        for row in rows.iter_mut() {
            let latest = self.merged_at.entry(row.origin).or_insert(row.at);
            *latest = (*latest).max(row.at);
            row.at = *latest;
        }
        rows.sort_by_key(|row| (row.at, row.origin, row.cursor));
    }

    /// Tries again the blobs that could not be copied.
    fn copy_uncopied(&mut self) {
        let tried: Vec<BlobHash> = self
            .uncopied
            .iter()
            .take(RETRIES_PER_POLL)
            .copied()
            .collect();
        for hash in tried {
            if self.copy_blob(&hash).is_ok() {
                self.uncopied.remove(&hash);
            }
        }
    }

    /// Copies one blob from the database into the cache, once.
    fn copy_blob(&mut self, hash: &BlobHash) -> Result<(), String> {
        if self.blobs.read_file(hash).is_ok() {
            return Ok(());
        }
        let Some(client) = self.client.as_ref() else {
            return Ok(());
        };
        let row = self
            .runtime()
            .block_on(timed(
                "read a blob",
                client.query_opt(
                    "SELECT bytes FROM planb_blobs WHERE hash = $1",
                    &[&hash.as_slice()],
                ),
            ))
            .map_err(|e| format!("database: {e}"))?;
        if let Some(row) = row {
            let bytes: Vec<u8> = row.get(0);
            self.blobs.put(&bytes).map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}
