//! The redb indexes: a persistent projection of the log.
//!
//! **One owner.** Several processes share a data root, but the index is kept
//! by one of them at a time: the store that holds `index.lock` (see
//! `store.rs`) opens the database, in redb's single-process mode, and catches
//! it up; the others do not open it, and take over when the owner exits.
//!
//! **Commits need not be durable.** The index records the last cursor it
//! applied in the same transaction as the data, and everything in it is
//! derived from events that were durable first. So catch-up commits are not
//! synced one by one (they would cost the disk two to four syncs per event,
//! competing with the log's): a durable commit happens at most every
//! `durable_every`, and when the owner closes it. A crash rolls the index
//! back to its last durable commit, consistent with its applied cursor, and
//! the next catch-up redoes the rest from the log.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use planb_core::{Envelope, EventBody, decode};
use planb_log::{Cursor, LogOptions, LogReader, Storage};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction};

use crate::StoreError;

/// Bumped when the tables or their meaning change; a mismatch triggers a rebuild.
const INDEX_SCHEMA: u64 = 3;
/// Events applied per write transaction while catching up, so a long catch-up
/// neither holds the write lock for long nor builds a huge transaction.
const EVENTS_PER_TRANSACTION: usize = 20_000;

type Id = [u8; 16];

const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const SESSION_UPDATED: TableDefinition<Id, i64> = TableDefinition::new("session_updated");
const SESSIONS_BY_UPDATED: TableDefinition<(i64, Id), ()> =
    TableDefinition::new("sessions_by_updated");
const SESSIONS_BY_PROJECT: TableDefinition<(&str, Id), ()> =
    TableDefinition::new("sessions_by_project");
const ASK_INFO: TableDefinition<Id, (u8, Id)> = TableDefinition::new("ask_info");
const ASKS_BY_STATUS: TableDefinition<(u8, Id), Id> = TableDefinition::new("asks_by_status");
const PLAN_VERSIONS: TableDefinition<(Id, u32), u64> = TableDefinition::new("plan_versions");
/// (plans directory, plan name, cursor) → event kind: two projects' plans
/// of one name are two plans.
const NAMED_PLAN_EVENTS: TableDefinition<(&str, &str, u64), &str> =
    TableDefinition::new("named_plan_events");
const EVENTS_BY_SESSION: TableDefinition<(Id, u64), ()> = TableDefinition::new("events_by_session");
/// A task's (or execution plan's) state and creation time.
const TASK_INFO: TableDefinition<Id, (u8, i64)> = TableDefinition::new("task_info");
const TASKS_BY_STATE: TableDefinition<(u8, Id), ()> = TableDefinition::new("tasks_by_state");
const TASKS_BY_CREATED: TableDefinition<(i64, Id), ()> = TableDefinition::new("tasks_by_created");

const APPLIED_CURSOR: &str = "applied_cursor";
const SCHEMA: &str = "schema";

/// An ask's status as the index stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum IndexedAskStatus {
    /// Waiting for an answer.
    Pending = 0,
    /// Answered in time.
    Answered = 1,
    /// The tool stopped waiting.
    TimedOut = 2,
    /// Declined or cancelled.
    Declined = 3,
    /// Delivery or waiting failed.
    Failed = 4,
}

/// A task's state as the index stores it: its latest run's, or `Created`
/// before any run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum IndexedTaskState {
    /// No run yet.
    Created = 0,
    /// A run is going on.
    Running = 1,
    /// A stop was asked for; the run has not ended.
    Stopping = 2,
    /// The latest run completed.
    Completed = 3,
    /// The latest run failed.
    Failed = 4,
    /// The latest run stopped on request.
    Stopped = 5,
    /// An execution plan or a task deleted.
    Deleted = 6,
    /// A task archived.
    Archived = 7,
}

/// Every table's content, in key order: for tests and `planb-mcp` debugging.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IndexDump {
    /// Last applied cursor.
    pub applied_cursor: u64,
    /// (updated ms, session).
    pub sessions_by_updated: Vec<(i64, Id)>,
    /// (project path, session).
    pub sessions_by_project: Vec<(String, Id)>,
    /// (status, ask, session).
    pub asks_by_status: Vec<(u8, Id, Id)>,
    /// (session, version, cursor).
    pub plan_versions: Vec<(Id, u32, u64)>,
    /// (plans directory, plan name, cursor, event kind).
    pub named_plan_events: Vec<(String, String, u64, String)>,
    /// (session, cursor).
    pub events_by_session: Vec<(Id, u64)>,
    /// (state, task).
    pub tasks_by_state: Vec<(u8, Id)>,
    /// (created ms, task).
    pub tasks_by_created: Vec<(i64, Id)>,
}

/// The redb index file and a reader positioned where the index left off.
#[derive(Debug)]
pub struct Index {
    path: PathBuf,
    db: Database,
    storage: Arc<dyn Storage>,
    options: LogOptions,
    /// Read position in the log; only moved inside a write transaction.
    reader: Mutex<Option<LogReader>>,
    /// The file opened, as (device, inode): a rebuild swaps a new file in.
    identity: Option<(u64, u64)>,
    /// How long catch-up commits may stay non-durable.
    durable_every: Duration,
    /// When the last durable commit was made, and whether a non-durable
    /// one came after it.
    durability: Mutex<(Instant, bool)>,
}

/// The (device, inode) of the file at `path`.
fn file_identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

fn index_error<E: Into<redb::Error>>(
    path: &Path,
    op: &'static str,
) -> impl FnOnce(E) -> StoreError {
    let path = path.display().to_string();
    move |e| StoreError::Index {
        path,
        op,
        source: Box::new(e.into()),
    }
}

impl Index {
    /// Opens (creating if needed) the index at `path` over the log on `storage`.
    pub fn open(
        path: &Path,
        storage: Arc<dyn Storage>,
        options: LogOptions,
    ) -> Result<Index, StoreError> {
        let create = || Database::builder().create(path);
        let db = match create() {
            Ok(db) => db,
            // The index is derived: an unreadable file is dropped and rebuilt from
            // the log. Only a lock held elsewhere is an error worth reporting.
            Err(error @ redb::DatabaseError::DatabaseAlreadyOpen) => {
                return Err(index_error(path, "open")(error));
            }
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "index unreadable; rebuilding it from the log");
                std::fs::remove_file(path).map_err(|source| StoreError::Io {
                    op: "remove unreadable index",
                    path: path.display().to_string(),
                    source,
                })?;
                create().map_err(index_error(path, "create"))?
            }
        };
        let index = Index {
            path: path.to_path_buf(),
            identity: file_identity(path),
            db,
            storage,
            options,
            reader: Mutex::new(None),
            durable_every: Duration::ZERO,
            durability: Mutex::new((Instant::now(), false)),
        };
        index.ensure_schema()?;
        Ok(index)
    }

    /// Lets catch-up commits stay non-durable for up to `every` (the default,
    /// zero, makes every commit durable).
    pub fn set_durable_every(&mut self, every: Duration) {
        self.durable_every = every;
    }

    /// Whether the file at the index's path is no longer the one open (a
    /// rebuild swapped a new one in).
    pub fn is_replaced(&self) -> bool {
        file_identity(&self.path) != self.identity
    }

    /// Makes every commit so far durable, if one was not.
    pub fn flush(&self) -> Result<(), StoreError> {
        let mut durability = self.durability.lock().unwrap_or_else(|p| p.into_inner());
        if !durability.1 {
            return Ok(());
        }
        let txn = self.db.begin_write().map_err(self.err("begin write"))?;
        txn.commit().map_err(self.err("commit"))?;
        *durability = (Instant::now(), false);
        Ok(())
    }

    /// [`flush`](Self::flush) once the last durable commit is
    /// `durable_every` old.
    pub fn flush_if_due(&self) -> Result<(), StoreError> {
        let due = {
            let durability = self.durability.lock().unwrap_or_else(|p| p.into_inner());
            durability.1 && durability.0.elapsed() >= self.durable_every
        };
        if due { self.flush() } else { Ok(()) }
    }

    /// Sets the durability of a catch-up commit: durable when the last
    /// durable commit is `durable_every` old. Returns whether it is durable.
    fn choose_durability(&self, txn: &mut WriteTransaction) -> Result<bool, StoreError> {
        let durability = self.durability.lock().unwrap_or_else(|p| p.into_inner());
        let durable = durability.0.elapsed() >= self.durable_every;
        if !durable {
            txn.set_durability(redb::Durability::None)
                .map_err(self.err("set durability"))?;
        }
        Ok(durable)
    }

    fn committed(&self, durable: bool) {
        let mut durability = self.durability.lock().unwrap_or_else(|p| p.into_inner());
        *durability = if durable {
            (Instant::now(), false)
        } else {
            (durability.0, true)
        };
    }

    fn ensure_schema(&self) -> Result<(), StoreError> {
        let txn = self.db.begin_write().map_err(self.err("begin write"))?;
        {
            let meta = txn.open_table(META).map_err(self.err("open meta"))?;
            let schema = meta
                .get(SCHEMA)
                .map_err(self.err("read meta"))?
                .map(|v| v.value());
            if schema != Some(INDEX_SCHEMA) {
                drop(meta);
                clear(&txn).map_err(self.err("clear"))?;
                let mut meta = txn.open_table(META).map_err(self.err("open meta"))?;
                meta.insert(SCHEMA, INDEX_SCHEMA)
                    .map_err(self.err("write meta"))?;
                meta.insert(APPLIED_CURSOR, 0)
                    .map_err(self.err("write meta"))?;
            }
        }
        create_tables(&txn).map_err(self.err("create tables"))?;
        txn.commit().map_err(self.err("commit"))
    }

    fn err<E: Into<redb::Error>>(&self, op: &'static str) -> impl FnOnce(E) -> StoreError {
        index_error(&self.path, op)
    }

    /// The last cursor the index at `path` has applied; `None` when there is
    /// no readable index or another process owns it. Holds the ownership lock
    /// (`index.lock` beside it) while it reads, so no process starts owning
    /// the index meanwhile (one that tries waits for the next turn of its
    /// indexer); redb may repair a file its last owner did not close.
    pub fn peek_applied_cursor(path: &Path) -> Option<planb_core::Cursor> {
        if !path.is_file() {
            return None;
        }
        let lock = std::fs::File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path.with_file_name("index.lock"))
            .ok()?;
        lock.try_lock().ok()?;
        let db = Database::builder().open(path).ok()?;
        let txn = db.begin_read().ok()?;
        let meta = txn.open_table(META).ok()?;
        let applied = meta.get(APPLIED_CURSOR).ok()??.value();
        Some(planb_core::Cursor(applied))
    }

    /// The last cursor the index has applied.
    pub fn applied_cursor(&self) -> Result<Cursor, StoreError> {
        let txn = self.db.begin_read().map_err(self.err("begin read"))?;
        let meta = txn.open_table(META).map_err(self.err("open meta"))?;
        let applied = meta
            .get(APPLIED_CURSOR)
            .map_err(self.err("read meta"))?
            .map_or(0, |v| v.value());
        Ok(Cursor(applied))
    }

    /// Applies every event in the log after the index's last applied cursor.
    /// Returns how many were applied.
    pub fn catch_up(&self) -> Result<u64, StoreError> {
        self.catch_up_observing(|_, _| {})
    }

    /// [`Index::catch_up`], showing each applied event to `observe` as well, so a
    /// rebuild decodes the log once for every projection.
    pub(crate) fn catch_up_observing(
        &self,
        mut observe: impl FnMut(&Envelope, crate::snapshot::Anchor),
    ) -> Result<u64, StoreError> {
        let mut reader_slot = self.reader.lock().unwrap_or_else(|p| p.into_inner());
        let mut total = 0u64;
        loop {
            let mut txn = self.db.begin_write().map_err(self.err("begin write"))?;
            let durable = self.choose_durability(&mut txn)?;
            let applied = {
                let meta = txn.open_table(META).map_err(self.err("open meta"))?;
                meta.get(APPLIED_CURSOR)
                    .map_err(self.err("read meta"))?
                    .map_or(0, |v| v.value())
            };
            // Another process may have moved the index on (or rebuilt it): the
            // reader must stand at or before the first unapplied cursor.
            let reader = match reader_slot.take() {
                Some(reader) if reader.next_cursor().0 <= applied + 1 => reader,
                _ => LogReader::new(Arc::clone(&self.storage), self.options, Cursor(applied + 1)),
            };
            let reader = reader_slot.insert(reader);
            let mut last = applied;
            let mut count = 0usize;
            {
                let mut tables = Tables::open(&txn).map_err(self.err("open tables"))?;
                while count < EVENTS_PER_TRANSACTION {
                    let Some(record) = reader.next()? else { break };
                    if record.cursor.0 <= applied {
                        continue;
                    }
                    let envelope = decode(&record.payload, planb_core::Cursor(record.cursor.0))?;
                    apply(&mut tables, &envelope).map_err(self.err("apply"))?;
                    let anchor = crate::snapshot::Anchor {
                        position: record.position,
                        checksum: record.checksum,
                    };
                    observe(&envelope, anchor);
                    last = record.cursor.0;
                    count += 1;
                }
            }
            if count == 0 {
                drop(txn);
                return Ok(total);
            }
            {
                let mut meta = txn.open_table(META).map_err(self.err("open meta"))?;
                meta.insert(APPLIED_CURSOR, last)
                    .map_err(self.err("write meta"))?;
            }
            if durable {
                // Records read may not be durable yet (their writer syncs
                // after writing): a durable claim of them must not outlive
                // them in a power cut, which would read as a lost tail.
                reader.sync_read()?;
            }
            txn.commit().map_err(self.err("commit"))?;
            self.committed(durable);
            total += count as u64;
        }
    }

    /// Sessions, most recently updated first, at most `limit`.
    pub fn sessions_by_update(&self, limit: usize) -> Result<Vec<(i64, uuid::Uuid)>, StoreError> {
        let txn = self.db.begin_read().map_err(self.err("begin read"))?;
        let table = txn
            .open_table(SESSIONS_BY_UPDATED)
            .map_err(self.err("open table"))?;
        let mut out = Vec::new();
        for entry in table.iter().map_err(self.err("iterate"))?.rev().take(limit) {
            let (key, _) = entry.map_err(self.err("iterate"))?;
            let (updated, id) = key.value();
            out.push((updated, uuid::Uuid::from_bytes(id)));
        }
        Ok(out)
    }

    /// Asks with the given status, as (ask, session).
    pub fn asks_with_status(
        &self,
        status: IndexedAskStatus,
    ) -> Result<Vec<(uuid::Uuid, uuid::Uuid)>, StoreError> {
        let txn = self.db.begin_read().map_err(self.err("begin read"))?;
        let table = txn
            .open_table(ASKS_BY_STATUS)
            .map_err(self.err("open table"))?;
        let code = status as u8;
        let mut out = Vec::new();
        for entry in table
            .range((code, [0u8; 16])..=(code, [0xffu8; 16]))
            .map_err(self.err("iterate"))?
        {
            let (key, value) = entry.map_err(self.err("iterate"))?;
            out.push((
                uuid::Uuid::from_bytes(key.value().1),
                uuid::Uuid::from_bytes(value.value()),
            ));
        }
        Ok(out)
    }

    /// Tasks and execution plans, newest first, at most `limit`, as
    /// (created ms, task).
    pub fn tasks_by_created(&self, limit: usize) -> Result<Vec<(i64, uuid::Uuid)>, StoreError> {
        let txn = self.db.begin_read().map_err(self.err("begin read"))?;
        let table = txn
            .open_table(TASKS_BY_CREATED)
            .map_err(self.err("open table"))?;
        let mut out = Vec::new();
        for entry in table.iter().map_err(self.err("iterate"))?.rev().take(limit) {
            let (key, _) = entry.map_err(self.err("iterate"))?;
            let (created, id) = key.value();
            out.push((created, uuid::Uuid::from_bytes(id)));
        }
        Ok(out)
    }

    /// The tasks (and execution plans) in `state`.
    pub fn tasks_in_state(&self, state: IndexedTaskState) -> Result<Vec<uuid::Uuid>, StoreError> {
        let txn = self.db.begin_read().map_err(self.err("begin read"))?;
        let table = txn
            .open_table(TASKS_BY_STATE)
            .map_err(self.err("open table"))?;
        let code = state as u8;
        let mut out = Vec::new();
        for entry in table
            .range((code, [0u8; 16])..=(code, [0xffu8; 16]))
            .map_err(self.err("iterate"))?
        {
            let (key, _) = entry.map_err(self.err("iterate"))?;
            out.push(uuid::Uuid::from_bytes(key.value().1));
        }
        Ok(out)
    }

    /// Every table's content.
    pub fn dump(&self) -> Result<IndexDump, StoreError> {
        let txn = self.db.begin_read().map_err(self.err("begin read"))?;
        let mut dump = IndexDump {
            applied_cursor: self.applied_cursor()?.0,
            ..IndexDump::default()
        };
        macro_rules! collect {
            ($table:expr, |$k:ident, $v:ident| $row:expr, $into:expr) => {{
                let table = txn.open_table($table).map_err(self.err("open table"))?;
                for entry in table.iter().map_err(self.err("iterate"))? {
                    let (key, value) = entry.map_err(self.err("iterate"))?;
                    let ($k, $v) = (key.value(), value.value());
                    $into.push($row);
                }
            }};
        }
        collect!(SESSIONS_BY_UPDATED, |k, _v| k, dump.sessions_by_updated);
        collect!(
            SESSIONS_BY_PROJECT,
            |k, _v| (k.0.to_string(), k.1),
            dump.sessions_by_project
        );
        collect!(ASKS_BY_STATUS, |k, v| (k.0, k.1, v), dump.asks_by_status);
        collect!(PLAN_VERSIONS, |k, v| (k.0, k.1, v), dump.plan_versions);
        collect!(
            NAMED_PLAN_EVENTS,
            |k, v| (k.0.to_string(), k.1.to_string(), k.2, v.to_string()),
            dump.named_plan_events
        );
        collect!(EVENTS_BY_SESSION, |k, _v| k, dump.events_by_session);
        collect!(TASKS_BY_STATE, |k, _v| k, dump.tasks_by_state);
        collect!(TASKS_BY_CREATED, |k, _v| k, dump.tasks_by_created);
        Ok(dump)
    }
}

/// Creates every table, so readers never meet a missing one.
fn create_tables(txn: &WriteTransaction) -> Result<(), redb::Error> {
    txn.open_table(SESSION_UPDATED)?;
    txn.open_table(SESSIONS_BY_UPDATED)?;
    txn.open_table(SESSIONS_BY_PROJECT)?;
    txn.open_table(ASK_INFO)?;
    txn.open_table(ASKS_BY_STATUS)?;
    txn.open_table(PLAN_VERSIONS)?;
    txn.open_table(NAMED_PLAN_EVENTS)?;
    txn.open_table(EVENTS_BY_SESSION)?;
    txn.open_table(TASK_INFO)?;
    txn.open_table(TASKS_BY_STATE)?;
    txn.open_table(TASKS_BY_CREATED)?;
    Ok(())
}

/// Empties every table (used when the schema changes).
fn clear(txn: &WriteTransaction) -> Result<(), redb::Error> {
    macro_rules! drop_table {
        ($($table:expr),*) => {$(
            txn.delete_table($table)?;
        )*};
    }
    drop_table!(
        META,
        SESSION_UPDATED,
        SESSIONS_BY_UPDATED,
        SESSIONS_BY_PROJECT,
        ASK_INFO,
        ASKS_BY_STATUS,
        PLAN_VERSIONS,
        NAMED_PLAN_EVENTS,
        EVENTS_BY_SESSION,
        TASK_INFO,
        TASKS_BY_STATE,
        TASKS_BY_CREATED
    );
    Ok(())
}

/// Every table of one write transaction, opened once rather than per event.
struct Tables<'txn> {
    session_updated: redb::Table<'txn, Id, i64>,
    sessions_by_updated: redb::Table<'txn, (i64, Id), ()>,
    sessions_by_project: redb::Table<'txn, (&'static str, Id), ()>,
    ask_info: redb::Table<'txn, Id, (u8, Id)>,
    asks_by_status: redb::Table<'txn, (u8, Id), Id>,
    plan_versions: redb::Table<'txn, (Id, u32), u64>,
    named_plan_events: redb::Table<'txn, (&'static str, &'static str, u64), &'static str>,
    events_by_session: redb::Table<'txn, (Id, u64), ()>,
    task_info: redb::Table<'txn, Id, (u8, i64)>,
    tasks_by_state: redb::Table<'txn, (u8, Id), ()>,
    tasks_by_created: redb::Table<'txn, (i64, Id), ()>,
}

impl<'txn> Tables<'txn> {
    fn open(txn: &'txn WriteTransaction) -> Result<Tables<'txn>, redb::Error> {
        Ok(Tables {
            session_updated: txn.open_table(SESSION_UPDATED)?,
            sessions_by_updated: txn.open_table(SESSIONS_BY_UPDATED)?,
            sessions_by_project: txn.open_table(SESSIONS_BY_PROJECT)?,
            ask_info: txn.open_table(ASK_INFO)?,
            asks_by_status: txn.open_table(ASKS_BY_STATUS)?,
            plan_versions: txn.open_table(PLAN_VERSIONS)?,
            named_plan_events: txn.open_table(NAMED_PLAN_EVENTS)?,
            events_by_session: txn.open_table(EVENTS_BY_SESSION)?,
            task_info: txn.open_table(TASK_INFO)?,
            tasks_by_state: txn.open_table(TASKS_BY_STATE)?,
            tasks_by_created: txn.open_table(TASKS_BY_CREATED)?,
        })
    }
}

/// Folds one event into the tables. Deterministic: the same events in the same
/// order give the same tables however they are split into transactions.
fn apply(t: &mut Tables<'_>, envelope: &Envelope) -> Result<(), redb::Error> {
    let cursor = envelope.cursor.0;
    let at = envelope.event.at.0;
    let body = &envelope.event.body;
    let session = match body {
        EventBody::SessionCreated {
            session,
            project_path,
            ..
        } => {
            if let Some(project) = project_path {
                t.sessions_by_project
                    .insert((project.as_str(), bytes(session.as_uuid())), ())?;
            }
            Some(bytes(session.as_uuid()))
        }
        EventBody::AskOpened { .. }
        | EventBody::AskAnswered { .. }
        | EventBody::AskTimedOut { .. }
        | EventBody::AskDeclined { .. }
        | EventBody::AskFailed { .. }
        | EventBody::AskDraftSaved { .. }
        | EventBody::AskLateAnswer { .. } => apply_ask(t, body)?,
        EventBody::PlanVersionSaved {
            session, version, ..
        } => {
            let session = bytes(session.as_uuid());
            t.plan_versions.insert((session, *version), cursor)?;
            Some(session)
        }
        EventBody::NamedPlanWritten { session, .. } => {
            note_named_plan_event(t, body, cursor)?;
            session.map(|s| bytes(s.as_uuid()))
        }
        EventBody::TaskCreated { .. }
        | EventBody::PlanCreated { .. }
        | EventBody::RunStarted { .. }
        | EventBody::StopRequested { .. }
        | EventBody::RunEnded { .. }
        | EventBody::PlanDeleted { .. }
        | EventBody::TaskDeleted { .. }
        | EventBody::TaskArchived { .. } => {
            apply_task(t, body, at)?;
            None
        }
        other => {
            note_named_plan_event(t, other, cursor)?;
            None
        }
    };
    if let Some(session) = session {
        touch_session(t, session, at)?;
        t.events_by_session.insert((session, cursor), ())?;
    }
    Ok(())
}

/// Folds an event about an ask into the ask's status; returns its session.
fn apply_ask(t: &mut Tables<'_>, body: &EventBody) -> Result<Option<Id>, redb::Error> {
    Ok(match body {
        EventBody::AskOpened { session, ask, .. } => {
            let session = bytes(session.as_uuid());
            set_ask_status(
                t,
                bytes(ask.as_uuid()),
                Some(session),
                IndexedAskStatus::Pending,
            )?
        }
        EventBody::AskAnswered { ask, .. } => {
            set_ask_status(t, bytes(ask.as_uuid()), None, IndexedAskStatus::Answered)?
        }
        EventBody::AskTimedOut { ask } => {
            set_ask_status(t, bytes(ask.as_uuid()), None, IndexedAskStatus::TimedOut)?
        }
        EventBody::AskDeclined { ask, .. } => {
            set_ask_status(t, bytes(ask.as_uuid()), None, IndexedAskStatus::Declined)?
        }
        EventBody::AskFailed { ask, .. } => {
            set_ask_status(t, bytes(ask.as_uuid()), None, IndexedAskStatus::Failed)?
        }
        EventBody::AskDraftSaved { ask, .. } | EventBody::AskLateAnswer { ask, .. } => {
            t.ask_info.get(bytes(ask.as_uuid()))?.map(|v| v.value().1)
        }
        EventBody::SessionCreated { .. }
        | EventBody::PlanVersionSaved { .. }
        | EventBody::NamedPlanWritten { .. }
        | EventBody::NamedPlanEdited { .. }
        | EventBody::NamedPlanChangedOutside { .. }
        | EventBody::NamedPlanSubmitted { .. }
        | EventBody::NamedPlanReviewed { .. }
        | EventBody::TaskCreated { .. }
        | EventBody::RunStarted { .. }
        | EventBody::StepStarted { .. }
        | EventBody::StepSucceeded { .. }
        | EventBody::StepFailed { .. }
        | EventBody::ArtifactEdited { .. }
        | EventBody::StopRequested { .. }
        | EventBody::RunEnded { .. }
        | EventBody::RunLog { .. }
        | EventBody::PlanCreated { .. }
        | EventBody::PlanDeleted { .. }
        | EventBody::BlobStored { .. }
        | EventBody::TaskArchived { .. }
        | EventBody::TaskDeleted { .. } => None,
    })
}

/// Folds an event about a task or an execution plan into its state: a new
/// one is indexed as created, the first time only.
fn apply_task(t: &mut Tables<'_>, body: &EventBody, at: i64) -> Result<(), redb::Error> {
    let (task, state) = match body {
        EventBody::TaskCreated { task, .. } | EventBody::PlanCreated { task, .. } => {
            let task = bytes(task.as_uuid());
            if t.task_info.get(task)?.is_none() {
                t.task_info
                    .insert(task, (IndexedTaskState::Created as u8, at))?;
                t.tasks_by_state
                    .insert((IndexedTaskState::Created as u8, task), ())?;
                t.tasks_by_created.insert((at, task), ())?;
            }
            return Ok(());
        }
        EventBody::RunStarted { task, .. } => (task, IndexedTaskState::Running),
        EventBody::StopRequested { task, .. } => (task, IndexedTaskState::Stopping),
        EventBody::RunEnded { task, outcome, .. } => {
            let state = match outcome {
                planb_core::RunOutcome::Completed => IndexedTaskState::Completed,
                planb_core::RunOutcome::Failed => IndexedTaskState::Failed,
                planb_core::RunOutcome::Stopped => IndexedTaskState::Stopped,
            };
            (task, state)
        }
        EventBody::PlanDeleted { task } | EventBody::TaskDeleted { task } => {
            (task, IndexedTaskState::Deleted)
        }
        EventBody::TaskArchived { task } => (task, IndexedTaskState::Archived),
        EventBody::SessionCreated { .. }
        | EventBody::AskOpened { .. }
        | EventBody::AskDraftSaved { .. }
        | EventBody::AskAnswered { .. }
        | EventBody::AskTimedOut { .. }
        | EventBody::AskDeclined { .. }
        | EventBody::AskFailed { .. }
        | EventBody::AskLateAnswer { .. }
        | EventBody::PlanVersionSaved { .. }
        | EventBody::NamedPlanWritten { .. }
        | EventBody::NamedPlanEdited { .. }
        | EventBody::NamedPlanChangedOutside { .. }
        | EventBody::NamedPlanSubmitted { .. }
        | EventBody::NamedPlanReviewed { .. }
        | EventBody::StepStarted { .. }
        | EventBody::StepSucceeded { .. }
        | EventBody::StepFailed { .. }
        | EventBody::ArtifactEdited { .. }
        | EventBody::RunLog { .. }
        | EventBody::BlobStored { .. } => return Ok(()),
    };
    set_task_state(t, bytes(task.as_uuid()), state)
}

/// Notes an event about a named plan under the plan's directory and name.
fn note_named_plan_event(
    t: &mut Tables<'_>,
    body: &EventBody,
    cursor: u64,
) -> Result<(), redb::Error> {
    if let Some(plan) = body.plan_key() {
        t.named_plan_events.insert(
            (plan.dir.as_str(), plan.name.as_str(), cursor),
            body.kind_name(),
        )?;
    }
    Ok(())
}

/// Moves an ask to `status`; returns its session. `session` is given when the
/// ask is new and looked up otherwise.
fn set_ask_status(
    t: &mut Tables<'_>,
    ask: Id,
    session: Option<Id>,
    status: IndexedAskStatus,
) -> Result<Option<Id>, redb::Error> {
    let previous = t.ask_info.get(ask)?.map(|v| v.value());
    let session = match (previous, session) {
        (Some((old_status, old_session)), given) => {
            t.asks_by_status.remove((old_status, ask))?;
            given.unwrap_or(old_session)
        }
        (None, Some(given)) => given,
        // An ask event without its opening: nothing to index it under.
        (None, None) => return Ok(None),
    };
    t.ask_info.insert(ask, (status as u8, session))?;
    t.asks_by_status.insert((status as u8, ask), session)?;
    Ok(Some(session))
}

/// Moves a task to `state`; an event for a task the index never saw created
/// is left out, like an ask's.
fn set_task_state(
    t: &mut Tables<'_>,
    task: Id,
    state: IndexedTaskState,
) -> Result<(), redb::Error> {
    let Some((old, created)) = t.task_info.get(task)?.map(|v| v.value()) else {
        return Ok(());
    };
    t.tasks_by_state.remove((old, task))?;
    t.task_info.insert(task, (state as u8, created))?;
    t.tasks_by_state.insert((state as u8, task), ())?;
    Ok(())
}

fn touch_session(t: &mut Tables<'_>, session: Id, at: i64) -> Result<(), redb::Error> {
    let previous = t.session_updated.get(session)?.map(|v| v.value());
    // Clocks of different processes disagree a little; the index keeps the latest.
    let at = previous.map_or(at, |p| p.max(at));
    if let Some(previous) = previous {
        t.sessions_by_updated.remove((previous, session))?;
    }
    t.session_updated.insert(session, at)?;
    t.sessions_by_updated.insert((at, session), ())?;
    Ok(())
}

fn bytes(uuid: uuid::Uuid) -> Id {
    *uuid.as_bytes()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use planb_core::{Command, Timestamp};
    use planb_log::LogOptions;
    use redb::{Database, TableDefinition};

    use super::{Index, META, SCHEMA};
    use crate::{DataRoot, FixedEnvironment, Store};

    /// An index written by an older build (schema 1: named-plan events keyed
    /// by name alone) is emptied and filled again from the log on open.
    #[test]
    fn an_index_of_an_older_schema_is_rebuilt_from_the_log() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = DataRoot::new(dir.path());
        {
            let env = Arc::new(FixedEnvironment::new(Timestamp(1_780_000_000_000), 1_000));
            let (store, _) = Store::open(root.clone(), env).expect("open");
            store
                .execute(Command::WritePlan {
                    plan: planb_core::PlanKey::new(
                        "/app/docs/plans",
                        planb_core::PlanName::parse("auth").expect("name"),
                    ),
                    content: "# Auth\n".into(),
                    session: None,
                })
                .expect("write");
        }
        let path = dir.path().join("old-index.redb");
        {
            const OLD: TableDefinition<(&str, u64), &str> =
                TableDefinition::new("named_plan_events");
            let db = Database::create(&path).expect("create");
            let txn = db.begin_write().expect("txn");
            {
                let mut meta = txn.open_table(META).expect("meta");
                meta.insert(SCHEMA, 1).expect("schema");
                meta.insert(super::APPLIED_CURSOR, 1).expect("applied");
                let mut old = txn.open_table(OLD).expect("old table");
                old.insert(("auth", 1), "named_plan_written").expect("row");
            }
            txn.commit().expect("commit");
        }
        let (log, _) = planb_log::open_dir(&root.log_dir(), LogOptions::default()).expect("log");
        let index = Index::open(&path, Arc::clone(log.storage()), LogOptions::default())
            .expect("an old index opens");
        index.catch_up().expect("catch up");
        let dump = index.dump().expect("dump");
        assert_eq!(
            dump.named_plan_events,
            [(
                "/app/docs/plans".to_owned(),
                "auth".to_owned(),
                1,
                "named_plan_written".to_owned()
            )]
        );
    }
}
