//! The `Store`: the one write path (catch up, decide, append, apply) and the read side.
//!
//! Every process keeps the whole [`State`] in memory, folded from the log. To
//! change anything it takes the log's append lock (shared by all processes),
//! reads whatever other processes appended since it last looked, lets the core
//! decide on that up-to-date state, appends the resulting events durably, and
//! applies them. So two processes can never both create "plan v3" or both answer
//! one ask. The `sessions/` files the new events change are rewritten before
//! the lock is released (see `files/live.rs`). The redb index is brought up to
//! date by a background thread after each change, off the write path: it is
//! derived, so a command never waits for it.

use std::sync::{Arc, Mutex, MutexGuard};

use planb_core::{
    Command, Cursor, Envelope, Event, EventBody, EventId, SessionId, State, Timestamp, decode,
    encode,
};
use planb_log::{Log, LogOptions, LogReader, RecoveryReport, Storage};

use crate::StoreError;
use crate::env::Environment;
use crate::files::{self, Pending};
use crate::health::LostTail;
use crate::index::Index;
use crate::indexer::{IndexSlot, Indexer};
use crate::root::DataRoot;
use crate::snapshot::{self, Anchor};

/// A process that folded at least this many events past the newest state
/// snapshot saves a new one (after opening, and when it closes).
pub const SNAPSHOT_AFTER_EVENTS: u64 = 1024;

/// What opening a store found.
#[derive(Debug, Clone)]
pub struct OpenReport {
    /// The log's recovery report (torn tails truncated).
    pub recovery: RecoveryReport,
    /// Events folded into the in-memory state at open: the whole log, or
    /// only those after the state snapshot.
    pub events: u64,
    /// The cursor of the state snapshot the fold started from, if one was
    /// usable.
    pub from_snapshot: Option<Cursor>,
    /// Events the index was behind the log at open (caught up in the
    /// background); 0 when another process owns the index.
    pub indexed: u64,
}

/// In-memory state and the log position it reflects.
#[derive(Debug)]
struct Folded {
    state: State,
    /// Positioned at `state.last_cursor() + 1`.
    reader: LogReader,
    /// The session files the folded events changed and this process has not
    /// projected yet.
    pending: Pending,
    /// The last record the reader read (the state's last record, once the
    /// reader has caught up with what this process appended).
    anchor: Option<Anchor>,
    /// The cursor of the newest state snapshot this process read or wrote.
    snapshot_cursor: Cursor,
}

impl Folded {
    /// The state an open starts from, not yet caught up: the newest state
    /// snapshot when it can be used, else the empty state at the start of
    /// the log.
    fn at_open(root: &DataRoot, storage: &Arc<dyn Storage>, options: LogOptions) -> Folded {
        let (state, reader, anchor) = match snapshot::load(root, storage, options) {
            Ok(loaded) => (loaded.state, loaded.reader, Some(loaded.anchor)),
            Err(why) => {
                if !matches!(why, snapshot::SnapshotProblem::None) {
                    tracing::info!(
                        "state snapshot not used: {why}; folding the log from the start"
                    );
                }
                let reader = LogReader::new(Arc::clone(storage), options, planb_log::Cursor(1));
                (State::default(), reader, None)
            }
        };
        let start = state.last_cursor();
        let pending = Pending::at_open(root, &state);
        Folded {
            state,
            reader,
            pending,
            anchor,
            snapshot_cursor: start,
        }
    }

    /// Applies every event after the state's last cursor that is in the log
    /// now, noting the session files they change.
    fn catch_up(&mut self) -> Result<u64, StoreError> {
        let mut count = 0;
        while let Some(record) = self.reader.next()? {
            let cursor = Cursor(record.cursor.0);
            self.anchor = Some(Anchor {
                position: record.position,
                checksum: record.checksum,
            });
            if cursor <= self.state.last_cursor() {
                continue;
            }
            let envelope = decode(&record.payload, cursor)?;
            self.state.apply(&envelope);
            self.pending.note(&self.state, &envelope);
            count += 1;
        }
        Ok(count)
    }
}

/// The append lock held, with the state caught up to the end of the log.
pub(crate) struct Locked<'s, 'g> {
    store: &'s Store,
    guard: &'g mut planb_log::AppendGuard<'s>,
    folded: &'g mut Folded,
}

impl Locked<'_, '_> {
    /// The state as of the end of the log.
    pub(crate) fn state(&self) -> &State {
        &self.folded.state
    }

    /// Lets the core decide `command`, appends the events durably and applies
    /// them. A rejection records nothing.
    pub(crate) fn decide_and_append(
        &mut self,
        command: Command,
        at: Option<Timestamp>,
    ) -> Result<Vec<Envelope>, StoreError> {
        let Some((events, payloads)) = self.decide(command, at)? else {
            return Ok(Vec::new());
        };
        let refs: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
        let placed = self.guard.append_placed(&refs)?;
        Ok(applied(self.store, self.folded, events, &placed))
    }

    /// [`decide_and_append`](Self::decide_and_append), then the session
    /// files brought up to date: written while the log syncs the events,
    /// the checkpoint once they are durable. When it returns, every file
    /// of the layout the events change is in place.
    pub(crate) fn decide_append_project(
        &mut self,
        command: Command,
        at: Option<Timestamp>,
    ) -> Result<Vec<Envelope>, StoreError> {
        let Some((events, payloads)) = self.decide(command, at)? else {
            return Ok(Vec::new());
        };
        let refs: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
        let (store, folded) = (self.store, &mut *self.folded);
        let mut applied_here = false;
        let outcome = self.guard.append_placed_overlapping(&refs, |placed| {
            applied_here = true;
            let envelopes = applied(store, folded, events, placed);
            let projected = files::project_files(
                &store.root,
                store.log.storage(),
                &folded.state,
                &mut folded.pending,
            );
            (envelopes, projected)
        });
        match outcome {
            Ok((_, (envelopes, projected))) => {
                projected.settle(&self.store.root, &mut self.folded.pending);
                Ok(envelopes)
            }
            Err(error) => {
                // A sync that failed after the events were applied: they
                // are in this process's state and maybe in the files, but
                // not durable; the log refuses every later append of this
                // process, and its next projection rewrites the tree. A
                // write refused before (a record over the limit) changed
                // nothing.
                if applied_here {
                    self.folded.pending.mark_failed();
                }
                Err(error.into())
            }
        }
    }

    /// The events `command` decides on the state, stamped and encoded;
    /// `None` when it decides none.
    fn decide(
        &self,
        command: Command,
        at: Option<Timestamp>,
    ) -> Result<Option<Decided>, StoreError> {
        let bodies = self.folded.state.decide(command)?;
        if bodies.is_empty() {
            return Ok(None);
        }
        let at = at.unwrap_or_else(|| self.store.env.now());
        let events: Vec<Event> = bodies
            .into_iter()
            .map(|body| Event {
                id: EventId::from_uuid(self.store.env.event_id()),
                at,
                body,
            })
            .collect();
        let payloads = events.iter().map(encode).collect::<Result<Vec<_>, _>>()?;
        Ok(Some((events, payloads)))
    }

    /// Rewrites the session files the applied events changed.
    pub(crate) fn project(&mut self) {
        let folded = &mut *self.folded;
        files::project_locked(
            &self.store.root,
            self.store.log.storage(),
            &folded.state,
            &mut folded.pending,
        );
    }
}

/// Events decided and stamped, and their encodings.
type Decided = (Vec<Event>, Vec<Vec<u8>>);

/// Applies `events`, appended where `placed` says, to the folded state and
/// notes what they change; returns them with their cursors.
fn applied(
    store: &Store,
    folded: &mut Folded,
    events: Vec<Event>,
    placed: &planb_log::Placed,
) -> Vec<Envelope> {
    let range = placed.range;
    let envelopes: Vec<Envelope> = events
        .into_iter()
        .enumerate()
        .map(|(i, event)| Envelope {
            cursor: Cursor(range.first.0 + i as u64),
            event,
        })
        .collect();
    for (envelope, at) in envelopes.iter().zip(&placed.records) {
        if let EventBody::BlobStored { bytes, .. } = &envelope.event.body {
            store.places.note(bytes.clone(), *at);
        }
    }
    for envelope in &envelopes {
        folded.state.apply(envelope);
        folded.pending.note(&folded.state, envelope);
    }
    // Applied already: the reader need not read them back.
    if folded.reader.pass(placed)
        && let Some((position, checksum)) = placed.last
    {
        folded.anchor = Some(Anchor { position, checksum });
    }
    envelopes
}

/// The store over one data root.
#[derive(Debug)]
pub struct Store {
    root: DataRoot,
    log: Arc<Log>,
    env: Arc<dyn Environment>,
    /// Lock order: the log's append lock first, then this.
    folded: Arc<Mutex<Folded>>,
    indexer: Indexer,
    /// Notes where the log holds the small blobs this process records.
    places: crate::blob_places::PlacesWriter,
    /// Set at open when a projection has seen cursors the log no longer
    /// holds: then nothing is appended or projected (see `health.rs`),
    /// until the loss is accepted.
    lost_tail: Mutex<Option<Box<LostTail>>>,
    /// What `loss.accepted` said at open (whether an acceptance came after).
    accepted_at_open: Option<crate::health::Accepted>,
}

/// How far the index has applied the log, as an open reads it. Only the
/// process that owns the index reads it; the others have `sessions.cursor`
/// as the witness of how far the log once went. The index catches up on the
/// indexer thread, never on the way to a finished open: after a long absence
/// it may be far behind. The index is derived: one that cannot be opened or
/// read costs this process its ownership (the indexer tries again), never
/// the open.
fn index_applied(slot: &mut IndexSlot) -> Option<Cursor> {
    match slot
        .index()
        .and_then(|i| i.map(Index::applied_cursor).transpose())
    {
        Ok(applied) => applied.map(|a| Cursor(a.0)),
        Err(error) => {
            tracing::warn!(%error, "the index cannot be read now; carrying on without it");
            None
        }
    }
}

/// Whether a projection has seen cursors the log no longer holds, as an
/// open finds it (`start`: the cursor of the snapshot it folded from), and
/// said in the service log.
fn lost_tail_at_open(
    root: &DataRoot,
    log: &Log,
    folded: &mut Folded,
    index_applied: Option<Cursor>,
    start: Cursor,
) -> Result<Option<Box<LostTail>>, StoreError> {
    // A snapshot that was used stands inside the log; one that was not
    // may be a witness of a lost tail (read again only then: it is large).
    let snapshot_claims = match start {
        Cursor::ZERO => snapshot::claimed_cursor(root),
        _ => None,
    };
    let mut lost_tail = crate::health::lost_tail(
        root,
        folded.state.last_cursor(),
        index_applied,
        snapshot_claims,
    );
    if lost_tail.is_some() {
        // Another process may have appended (and projected, or saved a
        // snapshot) since the fold: look again at the end of the log
        // under the append lock, where nobody appends.
        let _guard = log.lock()?;
        folded.catch_up()?;
        lost_tail = crate::health::lost_tail(
            root,
            folded.state.last_cursor(),
            index_applied,
            snapshot_claims,
        );
    }
    let lost_tail = lost_tail.map(Box::new);
    if let Some(lost) = &lost_tail {
        tracing::error!("{lost}");
    }
    Ok(lost_tail)
}

impl Store {
    /// Opens the store at `root`, recovering the log and folding it into memory.
    pub fn open(
        root: DataRoot,
        env: Arc<dyn Environment>,
    ) -> Result<(Store, OpenReport), StoreError> {
        std::fs::create_dir_all(root.root()).map_err(|source| StoreError::Io {
            op: "create data root",
            path: root.root().display().to_string(),
            source,
        })?;
        let options = LogOptions::default();
        let (log, recovery) = planb_log::open_dir(&root.log_dir(), options)?;
        let storage = Arc::clone(log.storage());
        files::remove_stale_temps(root.root());
        let mut folded = Folded::at_open(&root, &storage, options);
        let start = folded.state.last_cursor();
        let events = folded.catch_up()?;
        crate::plan_temps::remove_dead_writers_temps(&folded.state);
        folded.pending.opened(&folded.state);
        let mut slot = IndexSlot::new(root.clone(), Arc::clone(log.storage()), options);
        let index_applied = index_applied(&mut slot);
        let indexed = index_applied.map_or(0, |applied| {
            folded.state.last_cursor().0.saturating_sub(applied.0)
        });
        // Read before the look for a lost tail: an acceptance made after
        // it, however soon, lifts the refusal.
        let accepted_at_open = crate::health::read_accepted(&root);
        let lost_tail = lost_tail_at_open(&root, &log, &mut folded, index_applied, start)?;
        let log = Arc::new(log);
        let folded = Arc::new(Mutex::new(folded));
        let places = crate::blob_places::PlacesWriter::start(root.blobs_dir());
        let store = Store {
            log,
            folded,
            indexer: Indexer::start(slot),
            places,
            lost_tail: Mutex::new(lost_tail),
            accepted_at_open,
            root,
            env,
        };
        store.indexer.wake();
        let report = OpenReport {
            recovery,
            events,
            from_snapshot: (start > Cursor::ZERO).then_some(start),
            indexed,
        };
        store.settle_after_open(events);
        Ok((store, report))
    }

    /// The last steps of an open: a new state snapshot after folding many
    /// events, and the session files brought up to date (unless the log
    /// lost its tail).
    fn settle_after_open(&self, events: u64) {
        if events >= SNAPSHOT_AFTER_EVENTS {
            self.save_snapshot();
        }
        let current = self.files_current(&mut self.folded());
        if !self.is_lost() && !current {
            self.project_if_behind();
        }
    }

    /// The data root.
    pub fn root(&self) -> &DataRoot {
        &self.root
    }

    /// Set when a projection has seen cursors the log no longer holds; every
    /// write is then refused with [`StoreError::LostTail`].
    pub fn lost_tail(&self) -> Option<LostTail> {
        let lost = self.lost_tail.lock().unwrap_or_else(|p| p.into_inner());
        lost.as_deref().cloned()
    }

    /// Whether writes (and projections) are refused for a lost tail.
    fn is_lost(&self) -> bool {
        self.refusal().is_some()
    }

    /// Why a write is refused: the lost tail found at open, unless
    /// `accept-loss` has accepted that very gap since (then it is cleared).
    fn refusal(&self) -> Option<Box<LostTail>> {
        let mut lost = self.lost_tail.lock().unwrap_or_else(|p| p.into_inner());
        let found = lost.as_ref()?;
        let accepted = crate::health::read_accepted(&self.root);
        if !found.accepted(self.accepted_at_open, accepted) {
            return Some(found.clone());
        }
        tracing::warn!(
            "events after cursor {} were accepted as lost (planb-mcp accept-loss); recording again",
            found.log_end.0
        );
        *lost = None;
        None
    }

    /// The environment (clock and ids).
    pub fn env(&self) -> &Arc<dyn Environment> {
        &self.env
    }

    /// Runs `f` on the redb index if this process owns it (see
    /// `indexer.rs`); `None` while another process does.
    pub fn with_index<R>(&self, f: impl FnOnce(&Index) -> R) -> Result<Option<R>, StoreError> {
        self.indexer.with_index(f)
    }

    fn folded(&self) -> MutexGuard<'_, Folded> {
        lock_folded(&self.folded)
    }

    /// Decides `command` on the state as of the end of the log (including other
    /// processes' events), appends the resulting events durably and applies them.
    /// Returns the recorded events; a rejection records nothing.
    ///
    /// The session files the events change are written while the log syncs
    /// the events, and their checkpoint once the events are durable, before
    /// the append lock is released: when it returns, every file of the
    /// layout the events change is in place. Failing to write them is
    /// logged, not returned (`rebuild` rewrites the files).
    pub fn execute(&self, command: Command) -> Result<Vec<Envelope>, StoreError> {
        self.execute_stamped(command, None)
    }

    /// [`execute`](Self::execute) with the events stamped `at` instead of the
    /// environment's clock: for importing history recorded elsewhere.
    pub fn execute_at(&self, command: Command, at: Timestamp) -> Result<Vec<Envelope>, StoreError> {
        self.execute_stamped(command, Some(at))
    }

    fn execute_stamped(
        &self,
        command: Command,
        at: Option<Timestamp>,
    ) -> Result<Vec<Envelope>, StoreError> {
        self.locked(|locked| locked.decide_append_project(command, at))
    }

    /// Runs `f` under the log's append lock on the state caught up to the end
    /// of the log; whatever `f` appends through [`Locked`] is durable and
    /// applied when it returns. The indexer is woken afterwards.
    pub(crate) fn locked<R>(
        &self,
        f: impl FnOnce(&mut Locked<'_, '_>) -> Result<R, StoreError>,
    ) -> Result<R, StoreError> {
        if let Some(lost) = self.refusal() {
            return Err(StoreError::LostTail(lost));
        }
        let result = {
            let mut guard = self.log.lock()?;
            let mut folded = self.folded();
            // A reader where the log ends (nobody else appended since this
            // process did) has nothing to read.
            if !guard
                .position()
                .is_some_and(|end| folded.reader.stands_at(end))
            {
                folded.catch_up()?;
            }
            let end = guard.next_cursor().0 - 1;
            assert_eq!(
                folded.state.last_cursor().0,
                end,
                "under the append lock the state must reach the end of the log"
            );
            let mut locked = Locked {
                store: self,
                guard: &mut guard,
                folded: &mut folded,
            };
            f(&mut locked)
        };
        self.indexer.wake();
        result
    }

    /// Folds in whatever other processes appended, then runs `f` on the state.
    /// Should the session files not show those events yet, they are written
    /// first (failures are logged, as in [`execute`](Self::execute)).
    pub fn read<R>(&self, f: impl FnOnce(&State) -> R) -> Result<R, StoreError> {
        let mut folded = self.folded();
        folded.catch_up()?;
        if !self.is_lost() && !self.files_current(&mut folded) {
            drop(folded);
            self.project_if_behind();
            folded = self.folded();
        }
        Ok(f(&folded.state))
    }

    /// Whether the session files show every event folded so far: nothing is
    /// pending, or the checkpoint shows another process projected it (the
    /// usual case for other processes' events).
    fn files_current(&self, folded: &mut Folded) -> bool {
        if folded.pending.is_empty(&folded.state) {
            return true;
        }
        let cursor = folded.state.last_cursor();
        let current = files::is_current(&self.root, &folded.state);
        if current {
            folded.pending.clear(cursor);
        }
        current
    }

    /// Projects what this process folded and nobody projected yet, under the
    /// append lock (lock order: the log first, then `folded`).
    fn project_if_behind(&self) {
        let result = self
            .log
            .lock()
            .map_err(StoreError::from)
            .and_then(|_guard| {
                let mut folded = self.folded();
                folded.catch_up()?;
                if !folded.pending.is_empty(&folded.state) {
                    let folded = &mut *folded;
                    files::project_locked(
                        &self.root,
                        self.log.storage(),
                        &folded.state,
                        &mut folded.pending,
                    );
                }
                Ok(())
            });
        if let Err(error) = result {
            tracing::warn!(%error, "could not bring the session files up to date");
        }
    }

    /// The log's storage, for reading what the state does not hold.
    pub(crate) fn log_storage(&self) -> &Arc<dyn planb_log::Storage> {
        self.log.storage()
    }

    /// The text of `session`'s plan version `version`, read from the event
    /// that saved it (the state holds only its length and hash); `None` when
    /// there is no such version.
    pub fn plan_text(
        &self,
        session: &SessionId,
        version: u32,
    ) -> Result<Option<String>, StoreError> {
        let plan = self.read(|state| {
            state
                .session(session)
                .and_then(|s| s.plans.iter().find(|p| p.version == version).cloned())
        })?;
        let Some(plan) = plan else {
            return Ok(None);
        };
        let text = crate::plan_texts::read_one(self.log.storage(), plan.cursor)?;
        if !plan.is_content(text.as_bytes()) {
            return Err(StoreError::PlanTextMissing {
                cursor: plan.cursor.0,
            });
        }
        Ok(Some(text))
    }

    /// A copy of the current state (after catching up).
    pub fn snapshot(&self) -> Result<State, StoreError> {
        self.read(State::clone)
    }

    /// Writes now the session files of events this process folded and
    /// nobody projected yet: what a store does when it closes, for a
    /// process that exits without dropping it.
    pub fn finish_projection(&self) {
        let behind = {
            let folded = self.folded();
            !folded.pending.is_empty(&folded.state)
        };
        if !self.is_lost() && behind {
            self.project_if_behind();
        }
    }

    /// [`save_snapshot`](Self::save_snapshot) when this process folded at
    /// least [`SNAPSHOT_AFTER_EVENTS`] events past the newest snapshot it
    /// read or wrote: what a store does when it closes.
    pub fn save_snapshot_if_behind(&self) {
        let behind = {
            let folded = self.folded();
            folded.state.last_cursor().0 - folded.snapshot_cursor.0
        };
        if behind >= SNAPSHOT_AFTER_EVENTS {
            self.save_snapshot();
        }
    }

    /// Saves the folded state as the data root's state snapshot, so the next
    /// process to open folds only what comes after it. Failures are logged:
    /// the snapshot is an optimisation. Nothing is saved while the log has
    /// lost its tail, since the snapshot there may hold the only trace of
    /// the lost events.
    pub fn save_snapshot(&self) {
        if self.is_lost() {
            return;
        }
        let mut folded = self.folded();
        if let Err(error) = folded.catch_up() {
            tracing::warn!(%error, "state snapshot not saved");
            return;
        }
        let cursor = folded.state.last_cursor();
        let Some(anchor) = folded.anchor.filter(|a| a.position.cursor.0 == cursor.0) else {
            return;
        };
        if cursor <= folded.snapshot_cursor {
            return;
        }
        // The snapshot claims every record up to `cursor`: make sure a
        // power cut cannot take one of them from the log (another process
        // may still be syncing what it wrote).
        if let Err(error) = folded.reader.sync_read() {
            tracing::warn!(%error, "state snapshot not saved");
            return;
        }
        let started = std::time::Instant::now();
        match snapshot::save(&self.root, &folded.state, anchor) {
            Ok(bytes) => {
                folded.snapshot_cursor = cursor;
                tracing::debug!(
                    cursor = cursor.0,
                    bytes,
                    ms = started.elapsed().as_millis() as u64,
                    "state snapshot saved"
                );
            }
            Err(error) => tracing::warn!("state snapshot not saved: {error}"),
        }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        self.finish_projection();
        self.save_snapshot_if_behind();
    }
}

fn lock_folded(folded: &Mutex<Folded>) -> MutexGuard<'_, Folded> {
    folded.lock().unwrap_or_else(|p| p.into_inner())
}
