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
//! skipped. Each row is checked first: its bytes against its checksum,
//! the event it follows still held, its size; one that cannot be trusted
//! (altered, deleted, too large, unreadable, refused when shipped) is left
//! out and named, and the others are replayed. The blobs the events name
//! are copied into a cache folder (a data root holding only `blobs/`),
//! where the task pages read them as they do from a member's own root.

use planb_team::db::{DbError, timed};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use planb_core::{Cursor, Envelope, EventBody, SessionId, TaskId, decode};
use planb_log::format::RecordHeader;
use planb_projections::{BlobHash, Blobs};
use planb_team::TeamSettings;
use tokio_postgres::Client;
use uuid::Uuid;

/// Most events of one origin read from the database in one poll.
const POLL_EVENTS_MAX: i64 = 50_000;
/// Most payload bytes of one origin read in one poll, past its first row.
const POLL_BYTES_MAX: i64 = 32 << 20;
/// Largest payload read: what one record of a log may hold.
pub const PAYLOAD_BYTES_MAX: i64 = planb_log::LogOptions::DEFAULT_MAX_RECORD_BYTES as i64;
/// Most origins read; the others (by id) are left out, and said.
pub const ORIGINS_MAX: i64 = 1_000;
/// Longest member name read, in characters (what a shipper sends).
pub const MEMBER_CHARS_MAX: i32 = 200;
/// Longest host name read, in characters.
pub const HOST_CHARS_MAX: i32 = 255;
/// Largest blob copied, in bytes: what a data root's blob may hold.
const BLOB_BYTES_MAX: i64 = planb_projections::BLOB_BYTES_MAX as i64;
/// Most refused events of one origin named in one poll.
const REFUSED_READ_MAX: i64 = 200;

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

/// What the database says of one origin.
struct OriginRow {
    id: Uuid,
    member: String,
    host: String,
    /// The member's or host's name was longer than is read.
    cut: bool,
    shipped_to: i64,
    /// The origin's highest cursor shipped or refused, when the database
    /// no longer holds it (deleted).
    last_missing: Option<i64>,
}

/// One origin's rows read in a poll.
#[derive(Default)]
struct OriginRead {
    origin: Uuid,
    rows: Vec<Row>,
    /// What cannot be trusted, named.
    skipped: Vec<Skipped>,
    /// The last cursor read.
    read_to: i64,
    /// The poll's bounds stopped before the origin's mark.
    more: bool,
}

/// An event of the team database the replay leaves out, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The origin whose event it is.
    pub origin: Uuid,
    /// Its cursor in that origin's log.
    pub cursor: i64,
    /// Why it cannot be trusted.
    pub why: String,
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
    /// That origins past [`ORIGINS_MAX`] are left out was said.
    origins_cut: bool,
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
    /// What the database holds that cannot be trusted, each said once:
    /// the events left out (origin, cursor, why), names cut to the limit.
    pub untrusted: Vec<String>,
    /// Who is who, when it changed.
    pub members: Option<Members>,
    /// The poll's bounds left events to read: poll again now.
    pub more: bool,
    /// Events left out as untrusted (each also said in `untrusted`).
    pub left_out: u64,
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
            origins_cut: false,
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

    /// Reads the events shipped since the last poll (within the poll's
    /// bounds: `more` says when some are left). The error says why the
    /// database cannot be read now (the next poll tries again).
    pub fn poll(&mut self) -> Result<Polled, DbError> {
        let result = self
            .runtime
            .as_ref()
            .expect("kept until dropped")
            .block_on(Self::read(&self.settings, &mut self.client, &self.read_to));
        match result {
            Ok(Some((origins, reads))) => Ok(self.take(origins, reads)),
            Ok(None) => Ok(Polled::default()),
            Err(error) => {
                self.client = None;
                Err(error)
            }
        }
    }

    /// The origins and, of each, the rows past what was read, up to its
    /// mark and within the poll's bounds.
    async fn read(
        settings: &TeamSettings,
        client: &mut Option<Client>,
        read_to: &HashMap<Uuid, i64>,
    ) -> Result<Option<(Vec<OriginRow>, Vec<OriginRead>)>, DbError> {
        if client.is_none() {
            match planb_team::db::connect_reader(settings).await {
                Ok(Some(connected)) => *client = Some(connected),
                Ok(None) => return Ok(None),
                Err(error) => return Err(error),
            }
        }
        let client = client.as_ref().expect("connected above");
        let origins = read_origins(client).await?;
        let mut reads = Vec::new();
        for origin in origins.iter().take(ORIGINS_MAX as usize) {
            let from = read_to.get(&origin.id).copied().unwrap_or(0);
            if origin.shipped_to > from {
                reads.push(read_origin(client, origin, from).await?);
            }
        }
        Ok(Some((origins, reads)))
    }

    /// Takes in what a poll read: the origins' names, the rows given their
    /// team cursors and decoded, the blobs they name copied; what cannot
    /// be trusted is left out and said.
    fn take(&mut self, origins: Vec<OriginRow>, reads: Vec<OriginRead>) -> Polled {
        let mut untrusted = Vec::new();
        let changed = self.take_origins(origins, &mut untrusted);
        self.copy_uncopied();
        let more = reads.iter().any(|r| r.more);
        let mut rows = Vec::new();
        let mut skipped = Vec::new();
        for read in reads {
            self.read_to.insert(read.origin, read.read_to);
            rows.extend(read.rows);
            skipped.extend(read.skipped);
        }
        self.merge(&mut rows);
        let mut events = Vec::with_capacity(rows.len());
        for row in rows {
            match decode(&row.payload, Cursor(row.cursor.max(0) as u64)) {
                Ok(mut envelope) => {
                    envelope.cursor = Cursor(self.next);
                    self.next += 1;
                    self.note(row.origin, &envelope.event.body);
                    events.push(envelope);
                }
                Err(error) => skipped.push(Skipped {
                    origin: row.origin,
                    cursor: row.cursor,
                    why: format!("this build cannot read it: {error}"),
                }),
            }
        }
        untrusted.extend(skipped.iter().map(|s| self.said(s)));
        Polled {
            members: (changed || !events.is_empty()).then(|| self.members.clone()),
            events,
            untrusted,
            more,
            left_out: skipped.len() as u64,
        }
    }

    /// `skipped` said with its member's name.
    fn said(&self, skipped: &Skipped) -> String {
        let member = self
            .members
            .origins
            .get(&skipped.origin)
            .map_or("?", |o| o.member.as_str());
        format!(
            "event {} of origin {} ({member}): {}",
            skipped.cursor, skipped.origin, skipped.why
        )
    }

    /// Takes in the origins' names and hosts; whether any changed. A name
    /// cut to the limit, and origins past [`ORIGINS_MAX`], are said once.
    fn take_origins(&mut self, mut origins: Vec<OriginRow>, untrusted: &mut Vec<String>) -> bool {
        if origins.len() as i64 > ORIGINS_MAX {
            origins.truncate(ORIGINS_MAX as usize);
            if !std::mem::replace(&mut self.origins_cut, true) {
                untrusted.push(format!(
                    "the database names more than {ORIGINS_MAX} origins: the first {ORIGINS_MAX} by id are replayed, the others left out"
                ));
            }
        }
        let mut changed = false;
        for row in origins {
            let id = row.id;
            let known = self.members.origins.get(&id);
            if known.is_some_and(|o| o.member == row.member && o.host == row.host) {
                continue;
            }
            if row.cut {
                untrusted.push(format!(
                    "origin {id}: its member name is over the {MEMBER_CHARS_MAX} characters read, or its host over {HOST_CHARS_MAX}: cut"
                ));
            }
            let events = known.map_or(0, |o| o.events);
            let origin = Origin {
                id,
                member: row.member,
                host: row.host,
                events,
            };
            self.members.origins.insert(id, origin);
            changed = true;
        }
        changed
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
    fn copy_blob(&mut self, hash: &BlobHash) -> Result<(), BlobCopyError> {
        if self.blobs.read_file(hash).is_ok() {
            return Ok(());
        }
        let Some(client) = self.client.as_ref() else {
            return Ok(());
        };
        let row = self.runtime().block_on(timed(
            "read a blob",
            client.query_opt(
                "SELECT CASE WHEN length(bytes) <= $2::bigint THEN bytes END, length(bytes) \
                     FROM planb_blobs WHERE hash = $1",
                &[&hash.as_slice(), &BLOB_BYTES_MAX],
            ),
        ))?;
        let name = planb_core::ContentHash(*hash).to_hex();
        let Some(row) = row else {
            return Ok(());
        };
        let Some(bytes) = row.get::<_, Option<Vec<u8>>>(0) else {
            let length: i32 = row.get(1);
            return Err(BlobCopyError::TooLarge { name, length });
        };
        let stored = self.blobs.put(&bytes)?;
        if &stored != hash {
            return Err(BlobCopyError::Altered { name });
        }
        Ok(())
    }
}

/// Why a blob could not be copied from the database into the cache.
#[derive(Debug, thiserror::Error)]
enum BlobCopyError {
    /// The database could not be read.
    #[error(transparent)]
    Database(#[from] DbError),
    /// The blob is larger than any blob may be.
    #[error("blob {name} is {length} bytes, over the {BLOB_BYTES_MAX} bytes a blob may hold")]
    TooLarge {
        /// Its hash, in hex.
        name: String,
        /// Its length in the database.
        length: i32,
    },
    /// Its bytes do not hash to its name.
    #[error(
        "blob {name}: its bytes in the database do not have that hash (altered in the database?)"
    )]
    Altered {
        /// Its hash, in hex.
        name: String,
    },
    /// The cache could not keep it.
    #[error(transparent)]
    Cache(#[from] planb_projections::BlobError),
}

/// The origins, each name cut to its limit; past [`ORIGINS_MAX`], the
/// rest are left out.
async fn read_origins(client: &Client) -> Result<Vec<OriginRow>, DbError> {
    let rows = timed(
        "read the origins",
        client.query(
            "SELECT o.origin, left(o.member, $1), left(o.host, $2), \
             char_length(o.member) > $1 OR char_length(o.host) > $2, o.shipped_to, o.last_cursor, \
             o.last_cursor IS NULL OR o.last_cursor > o.shipped_to \
             OR EXISTS (SELECT 1 FROM planb_events e WHERE e.origin = o.origin AND e.cursor = o.last_cursor) \
             OR EXISTS (SELECT 1 FROM planb_refused r WHERE r.origin = o.origin AND r.cursor = o.last_cursor) \
             FROM planb_origins o ORDER BY o.origin LIMIT $3",
            &[&MEMBER_CHARS_MAX, &HOST_CHARS_MAX, &(ORIGINS_MAX + 1)],
        ),
    )
    .await
    ?;
    Ok(rows
        .iter()
        .map(|row| OriginRow {
            id: row.get(0),
            member: row.get(1),
            host: row.get(2),
            cut: row.get(3),
            shipped_to: row.get(4),
            last_missing: (!row.get::<_, bool>(6))
                .then(|| row.get::<_, Option<i64>>(5))
                .flatten(),
        })
        .collect())
}

/// One origin's rows past `from`, up to its mark, within the poll's
/// bounds, each checked: its bytes against its checksum, the event it
/// follows still held, its size within a log record's.
async fn read_origin(
    client: &Client,
    origin: &OriginRow,
    from: i64,
) -> Result<OriginRead, DbError> {
    let rows = timed(
        "read the events",
        client.query(
            "SELECT e.cursor, e.at, CASE WHEN length(e.payload) <= $5::bigint THEN e.payload END, \
             length(e.payload), e.checksum, e.prev_checksum, e.prev_cursor, \
             e.prev_cursor IS NULL OR e.prev_cursor = 0 OR p.cursor IS NOT NULL OR EXISTS \
             (SELECT 1 FROM planb_refused r WHERE r.origin = e.origin AND r.cursor = e.prev_cursor), p.checksum \
             FROM (SELECT cursor, sum(length(payload)) OVER (ORDER BY cursor) - length(payload) AS before \
             FROM planb_events WHERE origin = $1 AND cursor > $2 AND cursor <= $3 ORDER BY cursor LIMIT $4) w \
             JOIN planb_events e ON e.origin = $1 AND e.cursor = w.cursor \
             LEFT JOIN planb_events p ON p.origin = e.origin AND p.cursor = e.prev_cursor \
             WHERE w.before < $6::bigint ORDER BY e.cursor",
            &[&origin.id, &from, &origin.shipped_to, &POLL_EVENTS_MAX, &PAYLOAD_BYTES_MAX, &POLL_BYTES_MAX],
        ),
    )
    .await
    ?;
    let mut read = OriginRead {
        origin: origin.id,
        read_to: from,
        ..OriginRead::default()
    };
    for row in &rows {
        read.read_to = row.get(0);
        checked(origin.id, row, &mut read);
    }
    // Rows may lie between the last one read and the mark (the bounds
    // stopped the read): the next poll, at once, says.
    read.more = !rows.is_empty() && read.read_to < origin.shipped_to;
    if !read.more {
        read.read_to = origin.shipped_to;
        if let Some(last) = origin.last_missing.filter(|last| *last > from) {
            read.skipped.push(missing(origin.id, last));
        }
    }
    read.skipped
        .extend(refused(client, origin.id, from, read.read_to).await?);
    Ok(read)
}

/// Sorts one row read into `read`: trusted, or left out and named.
fn checked(origin: Uuid, row: &tokio_postgres::Row, read: &mut OriginRead) {
    let cursor: i64 = row.get(0);
    let payload: Option<Vec<u8>> = row.get(2);
    let length: i32 = row.get(3);
    let checksum: i64 = row.get(4);
    let prev_checksum: Option<i64> = row.get(5);
    let prev_cursor: Option<i64> = row.get(6);
    let prev_held: bool = row.get(7);
    let prev_row_checksum: Option<i64> = row.get(8);
    let skip = |why: String| Skipped {
        origin,
        cursor,
        why,
    };
    if let Some(prev) = prev_cursor.filter(|_| !prev_held) {
        read.skipped.push(missing(origin, prev));
    }
    let Some(payload) = payload else {
        read.skipped.push(skip(format!(
            "it is {length} bytes, over the {PAYLOAD_BYTES_MAX} bytes a log record may hold"
        )));
        return;
    };
    if let Some(prev) = prev_checksum {
        let computed = RecordHeader::new(&payload, cursor.max(0) as u64, prev as u32).checksum;
        if i64::from(computed) != checksum {
            read.skipped.push(skip(
                "its bytes do not match the checksum shipped with them (altered in the database?)"
                    .into(),
            ));
            return;
        }
        let follows =
            prev_cursor != Some(cursor - 1) || prev_row_checksum.is_none_or(|c| c == prev);
        if !follows {
            read.skipped.push(skip(format!(
                "it does not follow event {} as its origin's log did (altered in the database?)",
                cursor - 1
            )));
            return;
        }
    }
    read.rows.push(Row {
        origin,
        cursor,
        at: row.get(1),
        payload,
    });
}

fn missing(origin: Uuid, cursor: i64) -> Skipped {
    Skipped {
        origin,
        cursor,
        why: "it was shipped but is missing from the database (deleted?)".into(),
    }
}

/// The origin's events in `(from, to]` the database refused when they
/// were shipped, with its reason.
async fn refused(
    client: &Client,
    origin: Uuid,
    from: i64,
    to: i64,
) -> Result<Vec<Skipped>, DbError> {
    let rows = timed(
        "read the refused events",
        client.query(
            "SELECT r.cursor, left(r.kind, 64), left(r.reason, 500) FROM planb_refused r WHERE r.origin = $1 \
             AND r.cursor > $2 AND r.cursor <= $3 AND NOT EXISTS (SELECT 1 FROM planb_events e \
             WHERE e.origin = r.origin AND e.cursor = r.cursor) ORDER BY r.cursor LIMIT $4",
            &[&origin, &from, &to, &REFUSED_READ_MAX],
        ),
    )
    .await
    ?;
    Ok(rows
        .iter()
        .map(|row| Skipped {
            origin,
            cursor: row.get(0),
            why: format!(
                "the database refused it when it was shipped ({}): {}",
                row.get::<_, String>(1),
                row.get::<_, String>(2)
            ),
        })
        .collect())
}
