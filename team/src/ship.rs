//! Shipping one data root's log into the team database, exactly once.
//!
//! The database keeps, per origin, how far the log was examined
//! (`shipped_to`) and the checksum of the record there. Since each record's
//! checksum covers the one before it, an equal checksum at `shipped_to`
//! means the same history up to it. A pass reads the database's mark,
//! checks the local record there, then ships the records after it in
//! batches, each one transaction: the mark is compared and moved in the
//! same transaction as the rows, so a batch lands whole or not at all, and
//! a shipper killed anywhere leaves neither a gap nor a duplicate. A row
//! already present with other bytes is divergence (an older copy of the
//! root writing on), refused and reported; it is never overwritten.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use planb_core::event::{self, EventBody};
use planb_core::time::Cursor;
use planb_log::{LogOptions, LogReader, ReadPosition, Record};
use planb_projections::{BlobHash, DataRoot};
use sha2::Digest;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Transaction};
use uuid::Uuid;

use crate::db::{self, DbError, timed};
use crate::local::{self, LocalError};
use crate::scope::{Place, Placer};
use crate::settings::TeamSettings;

/// Most records in one batch.
pub const BATCH_RECORDS_MAX: usize = 2_000;
/// Most bytes (payloads and blobs) in one batch, past its first record.
pub const BATCH_BYTES_MAX: usize = 8 << 20;

/// Why a pass stopped short.
#[derive(Debug, thiserror::Error)]
pub enum ShipError {
    /// The database is down, slow, refusing or out of space; try later.
    #[error(transparent)]
    Db(#[from] DbError),
    /// A team file of the root.
    #[error(transparent)]
    Local(#[from] LocalError),
    /// The local log is damaged at `cursor`: everything before it is
    /// shipped.
    #[error(
        "the local log is damaged at cursor {cursor}: shipped up to it, not past it ({detail})"
    )]
    Damaged {
        /// The first record not shipped.
        cursor: u64,
        /// What is wrong there.
        detail: String,
    },
    /// The database holds other events under this origin's cursors.
    #[error("divergence at cursor {cursor}: {detail}; nothing was overwritten")]
    Divergence {
        /// The first cursor whose record differs.
        cursor: u64,
        /// What differs.
        detail: String,
    },
    /// The store could not be read.
    /// Another shipper of this origin moved its mark meanwhile.
    #[error("another process shipped this origin meanwhile")]
    Raced,
    /// The reader does not stand just past the mark (a defect): nothing
    /// was written; the next pass reads from the mark again.
    #[error("the batch read starts at cursor {found}, not just past the mark {mark}: read again")]
    OutOfStep {
        /// The mark.
        mark: u64,
        /// The batch's first cursor.
        found: u64,
    },
}

impl ShipError {
    /// Whether trying again cannot help until a person acts.
    pub fn halts(&self) -> bool {
        matches!(
            self,
            ShipError::Damaged { .. }
                | ShipError::Divergence { .. }
                | ShipError::Db(DbError::SchemaTooNew { .. })
        )
    }
}

/// What a pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pass {
    /// Events written to the database.
    pub shipped: u64,
    /// Events kept on this machine by scope.
    pub withheld: u64,
    /// The mark after the pass.
    pub shipped_to: u64,
    /// Events the database would not take (the ones after them shipped).
    pub refused: Vec<Refused>,
}

/// An event the database would not take (a value it cannot hold, a rule
/// of its own): named in `planb_refused`, and passed over, so the events
/// after it ship.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the database refused the event at cursor {cursor} ({kind}) of origin {origin}: {reason}; the events after it are shipped"
)]
pub struct Refused {
    /// The origin whose event it is.
    pub origin: Uuid,
    /// Its cursor in that origin's log.
    pub cursor: u64,
    /// Its kind (`plan_version_saved` …).
    pub kind: String,
    /// The database's reason.
    pub reason: String,
}

/// Longest reason kept for a refused event, in characters.
const REASON_CHARS_MAX: usize = 500;
/// Most refused events a push names.
pub const REFUSED_NAMED_MAX: i64 = 100;

/// The database's mark for an origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mark {
    to: u64,
    checksum: Option<u32>,
}

/// A reader standing just past the mark, and what placing the events
/// after it needs to know of those before.
#[derive(Debug)]
struct Position {
    reader: LogReader,
    mark: Mark,
    /// Where the mark's record begins (`None` while the mark is 0): a batch
    /// the database did not take is read again from there, without reading
    /// the log from its start.
    at_mark: Option<ReadPosition>,
    placer: Placer,
    /// The record read past the mark to learn the log had grown.
    ahead: Option<Record>,
}

/// Ships one data root.
#[derive(Debug)]
pub struct Shipper {
    root: DataRoot,
    settings: TeamSettings,
    origin: Uuid,
    client: Option<Client>,
    position: Option<Position>,
}

/// One event as the database stores it.
struct Row {
    cursor: i64,
    at: SystemTime,
    kind: &'static str,
    project: Option<String>,
    checksum: i64,
    /// The checksum of the record before it, which its own covers.
    prev_checksum: i64,
    payload: Vec<u8>,
    body: serde_json::Value,
}

/// A batch ready to commit.
#[derive(Default)]
struct Batch {
    rows: Vec<Row>,
    blobs: BTreeMap<BlobHash, Vec<u8>>,
    withheld: u64,
    /// The cursor of its first record.
    first: Option<u64>,
    last: Option<Mark>,
    /// Where its last record begins.
    last_at: Option<ReadPosition>,
}

impl Shipper {
    /// A shipper for `root` (its origin id made on first use).
    pub fn new(root: DataRoot, settings: TeamSettings) -> Result<Shipper, ShipError> {
        let origin = local::origin(&root)?;
        Ok(Shipper {
            root,
            settings,
            origin,
            client: None,
            position: None,
        })
    }

    /// This root's origin id.
    pub fn origin(&self) -> Uuid {
        self.origin
    }

    /// The data root shipped.
    pub fn root(&self) -> &DataRoot {
        &self.root
    }

    /// The settings shipped under.
    pub fn settings(&self) -> &TeamSettings {
        &self.settings
    }

    /// The local log's last cursor as far as this shipper has read it.
    pub fn log_end(&self) -> u64 {
        self.position
            .as_ref()
            .map_or(0, |p| p.reader.next_cursor().0.saturating_sub(1))
    }

    /// Ships every record up to the end of the log as it stands.
    pub async fn ship_to_end(&mut self) -> Result<Pass, ShipError> {
        let result = self.pass().await;
        if matches!(result, Err(ShipError::Db(_))) {
            self.client = None;
        }
        match &result {
            Ok(_) => {}
            // The database did not take the last batch: read it again.
            Err(ShipError::Db(_)) => {
                self.position = self.position.take().and_then(|p| self.rewound(p));
            }
            Err(_) => self.position = None,
        }
        result
    }

    /// `position` with its reader back at its mark, its placer kept
    /// (placing the same events again decides the same); `None` when the
    /// record there is not the one expected.
    fn rewound(&self, position: Position) -> Option<Position> {
        let dir = self.root.log_dir();
        let Some(at) = position.at_mark else {
            let reader =
                planb_log::read_dir(&dir, LogOptions::default(), planb_log::Cursor(1)).ok()?;
            return Some(Position {
                reader,
                placer: Placer::new(self.settings.projects.clone()),
                ahead: None,
                ..position
            });
        };
        let mut reader = planb_log::read_dir_at(&dir, LogOptions::default(), at).ok()?;
        let record = reader.next().ok()??;
        let same =
            record.cursor.0 == position.mark.to && Some(record.checksum) == position.mark.checksum;
        same.then_some(Position {
            reader,
            ahead: None,
            ..position
        })
    }

    async fn pass(&mut self) -> Result<Pass, ShipError> {
        if self.settings.projects.is_empty() {
            // Nothing may leave: not even the origin is made known.
            return Ok(Pass::default());
        }
        if let Some(shipped_to) = self.idle() {
            return Ok(Pass {
                shipped_to,
                ..Pass::default()
            });
        }
        if self.client.is_none() {
            self.client = Some(db::connect(&self.settings).await?);
        }
        let mut mark = self.register().await?;
        self.stand_at(mark)?;
        let mut pass = Pass::default();
        loop {
            let (batch, damage) = self.next_batch()?;
            if let Some(last) = batch.last {
                let first = batch.first.unwrap_or(0);
                if first != mark.to + 1 {
                    return Err(ShipError::OutOfStep {
                        mark: mark.to,
                        found: first,
                    });
                }
                let (shipped, refused) = self.commit(mark, &batch).await?;
                pass.shipped += shipped;
                pass.refused.extend(refused);
                pass.withheld += batch.withheld;
                mark = last;
                if let Some(position) = &mut self.position {
                    position.mark = last;
                    position.at_mark = batch.last_at;
                }
            }
            if let Some(damage) = damage {
                return Err(damage);
            }
            if batch.last.is_none() {
                pass.shipped_to = mark.to;
                return Ok(pass);
            }
        }
    }

    /// The mark, when the log holds nothing past what this shipper shipped
    /// last: then the database is not asked (an idle shipper looks often).
    /// A record found past it is kept for the pass.
    fn idle(&mut self) -> Option<u64> {
        let position = self.position.as_mut()?;
        if position.ahead.is_some() {
            return None;
        }
        match position.reader.next() {
            Ok(None) => Some(position.mark.to),
            Ok(Some(record)) => {
                position.ahead = Some(record);
                None
            }
            Err(_) => {
                // Read again from the mark by the pass, which says what is wrong.
                self.position = None;
                None
            }
        }
    }

    fn client(&mut self) -> &mut Client {
        self.client
            .as_mut()
            .expect("connected at the start of the pass")
    }

    /// Makes the origin's row if it is new; its mark. A mark made under
    /// another scope is reset, so the log is examined again from its start
    /// (what was shipped already compares equal and stays).
    async fn register(&mut self) -> Result<Mark, ShipError> {
        let origin = self.origin;
        let member = self.settings.member.clone();
        let scope = self.settings.projects.key();
        let root = self.root.root().display().to_string();
        let host = host_name();
        let client = self.client();
        timed(
            "register the origin",
            client.execute(
                "INSERT INTO planb_origins (origin, member, host, data_root, scope) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (origin) DO NOTHING",
                &[&origin, &member, &host, &root, &scope],
            ),
        )
        .await?;
        timed(
            "reset the mark of another scope",
            client.execute(
                "UPDATE planb_origins SET shipped_to = 0, shipped_checksum = NULL, scope = $2 \
                 WHERE origin = $1 AND scope <> $2",
                &[&origin, &scope],
            ),
        )
        .await?;
        let row = timed(
            "read the origin's mark",
            client.query_one(
                "SELECT shipped_to, shipped_checksum FROM planb_origins WHERE origin = $1",
                &[&origin],
            ),
        )
        .await?;
        Ok(mark_of(row.get(0), row.get(1)))
    }

    /// Puts a reader just past `mark`, after checking the local record
    /// there is the one the database has. When the scope needs them, the
    /// events before the mark are read to place the ones after it.
    fn stand_at(&mut self, mark: Mark) -> Result<(), ShipError> {
        if self.position.as_ref().is_some_and(|p| p.mark == mark) {
            return Ok(());
        }
        self.position = None;
        let mut placer = Placer::new(self.settings.projects.clone());
        let from = if placer.needs_history() {
            1
        } else {
            mark.to.max(1)
        };
        let dir = self.root.log_dir();
        let mut reader = planb_log::read_dir(&dir, LogOptions::default(), planb_log::Cursor(from))
            .map_err(|e| damaged(from, &e))?;
        let at_mark = if mark.to > 0 {
            Some(self.read_through(&mut reader, &mut placer, mark)?)
        } else {
            None
        };
        self.position = Some(Position {
            reader,
            mark,
            at_mark,
            placer,
            ahead: None,
        });
        Ok(())
    }

    /// Reads `reader` up to the record at `mark` (placing each event when
    /// the scope needs them) and checks that record is the database's.
    fn read_through(
        &self,
        reader: &mut LogReader,
        placer: &mut Placer,
        mark: Mark,
    ) -> Result<ReadPosition, ShipError> {
        loop {
            let cursor = reader.next_cursor().0;
            let Some(record) = reader.next().map_err(|e| damaged(cursor, &e))? else {
                let end = reader.passed_to().0.saturating_sub(1);
                return Err(self.diverged(mark, &format!("the local log ends at {end}")));
            };
            if placer.needs_history() {
                placer.place(&decoded(&record)?.event.body);
            }
            if record.cursor.0 == mark.to {
                return if Some(record.checksum) == mark.checksum {
                    Ok(record.position)
                } else {
                    Err(self.diverged(
                        mark,
                        "the local record there is not the one the database has",
                    ))
                };
            }
        }
    }

    fn diverged(&self, mark: Mark, local: &str) -> ShipError {
        ShipError::Divergence {
            cursor: mark.to,
            detail: format!(
                "the database has origin {} shipped to cursor {}, but {local}: this data root's log is not the one shipped before (an older copy restored?)",
                self.origin, mark.to
            ),
        }
    }

    /// Reads the next batch; damage met after some records is returned
    /// beside them, so they are shipped first.
    fn next_batch(&mut self) -> Result<(Batch, Option<ShipError>), ShipError> {
        let blobs = self.root.blobs();
        let position = self.position.as_mut().expect("placed by stand_at");
        let mut read = Vec::new();
        let mut bytes = 0;
        let mut damage = None;
        let mut ahead = position.ahead.take();
        while read.len() < BATCH_RECORDS_MAX && bytes < BATCH_BYTES_MAX {
            let cursor = position.reader.next_cursor().0;
            let next = match ahead.take() {
                Some(record) => Ok(Some(record)),
                None => position.reader.next(),
            };
            let record = match next {
                Ok(Some(record)) => record,
                Ok(None) => break,
                Err(e) => {
                    damage = Some(damaged(cursor, &e));
                    break;
                }
            };
            // A record that does not decode ends the batch before it (the
            // ones before it are shipped) and is its damage.
            match decoded(&record) {
                Ok(envelope) => {
                    bytes += record.payload.len() + blob_bytes(&blobs, &envelope.event.body);
                    read.push((record, envelope));
                }
                Err(undecodable) => {
                    damage = Some(undecodable);
                    break;
                }
            }
        }
        if !read.is_empty() {
            // What leaves the machine must not outlive the log in a power
            // cut: the records read may still await their writer's sync.
            position.reader.sync_read().map_err(|e| LocalError {
                action: "sync the log segment read before shipping it",
                path: self.root.log_dir().display().to_string(),
                source: std::io::Error::other(e.to_string()),
            })?;
        }
        Ok((self.batch_of(read)?, damage))
    }

    /// Places each of the decoded `read` by scope and gathers the blobs the
    /// shipped ones name.
    fn batch_of(&mut self, read: Vec<(Record, event::Envelope)>) -> Result<Batch, ShipError> {
        let mut batch = Batch::default();
        let Some((last, _)) = read.last() else {
            return Ok(batch);
        };
        batch.last = Some(Mark {
            to: last.cursor.0,
            checksum: Some(last.checksum),
        });
        batch.last_at = Some(last.position);
        batch.first = read.first().map(|(r, _)| r.cursor.0);
        let position = self.position.as_mut().expect("placed by stand_at");
        let mut prev_checksum = position.mark.checksum.unwrap_or(0);
        let mut wanted = BTreeSet::new();
        for (record, envelope) in read {
            let prev = std::mem::replace(&mut prev_checksum, record.checksum);
            let Place::Ship { project } = position.placer.place(&envelope.event.body) else {
                batch.withheld += 1;
                continue;
            };
            collect_blobs(&envelope.event.body, &mut batch.blobs, &mut wanted);
            batch
                .rows
                .push(row_of(record, prev, &envelope.event, project));
        }
        let blobs = self.root.blobs();
        for hash in wanted {
            if batch.blobs.contains_key(&hash) {
                continue;
            }
            let bytes = blobs.get(&hash).map_err(|e| ShipError::Damaged {
                cursor: batch.rows.first().map_or(0, |r| r.cursor as u64),
                detail: format!(
                    "blob {} named by an event: {e}",
                    planb_core::ContentHash(hash).to_hex()
                ),
            })?;
            batch.blobs.insert(hash, bytes);
        }
        Ok(batch)
    }

    /// Writes `batch` and moves the mark from `from`, in one transaction;
    /// how many events were new to the database, and the ones it refused.
    async fn commit(
        &mut self,
        from: Mark,
        batch: &Batch,
    ) -> Result<(u64, Vec<Refused>), ShipError> {
        let origin = self.origin;
        let member = self.settings.member.clone();
        let last = batch.last.expect("a batch with records");
        let client = self.client();
        let tx = timed("begin", client.transaction()).await?;
        let row = timed(
            "lock the origin",
            tx.query_one(
                "SELECT shipped_to, shipped_checksum FROM planb_origins WHERE origin = $1 FOR UPDATE",
                &[&origin],
            ),
        )
        .await?;
        if mark_of(row.get(0), row.get(1)) != from {
            return Err(ShipError::Raced);
        }
        insert_blobs(&tx, &batch.blobs).await?;
        let rows = Rows {
            origin,
            member: &member,
            rows: &batch.rows,
        };
        let (inserted, refused) = rows.insert(&tx).await?;
        let last_cursor = batch.rows.last().map(|r| r.cursor);
        timed(
            "move the mark",
            tx.execute(
                "UPDATE planb_origins SET shipped_to = $2, shipped_checksum = $3, member = $4, \
                 last_shipped_at = now(), last_cursor = greatest(last_cursor, $5) WHERE origin = $1",
                &[
                    &origin,
                    &(last.to as i64),
                    &last.checksum.map(i64::from),
                    &member,
                    &last_cursor,
                ],
            ),
        )
        .await?;
        if inserted > 0 {
            timed(
                "notify",
                tx.execute(
                    "SELECT pg_notify('planb_events', $1)",
                    &[&origin.to_string()],
                ),
            )
            .await?;
        }
        timed("commit", tx.commit()).await?;
        Ok((inserted, refused))
    }

    /// `pass` told for the whole log up to its mark: the events the
    /// database does not hold are the ones kept on this machine (a second
    /// push, or one after a server's shipper, examines nothing new), but
    /// for those it refused, which are named.
    pub(crate) async fn tally(&mut self, pass: &mut Pass) -> Result<(), ShipError> {
        if self.client.is_none() {
            return Ok(());
        }
        let origin = self.origin;
        let to = pass.shipped_to as i64;
        let client = self.client();
        let held: i64 = timed(
            "count the events held",
            client.query_one(
                "SELECT count(*) FROM planb_events WHERE origin = $1 AND cursor <= $2",
                &[&origin, &to],
            ),
        )
        .await?
        .get(0);
        let refused_count: i64 = timed(
            "count the refused events",
            client.query_one(
                "SELECT count(*) FROM planb_refused r WHERE r.origin = $1 AND r.cursor <= $2 \
                 AND NOT EXISTS (SELECT 1 FROM planb_events e \
                 WHERE e.origin = r.origin AND e.cursor = r.cursor)",
                &[&origin, &to],
            ),
        )
        .await?
        .get(0);
        let refused = timed(
            "read the refused events",
            client.query(
                "SELECT r.cursor, r.kind, r.reason FROM planb_refused r WHERE r.origin = $1 \
                 AND r.cursor <= $2 AND NOT EXISTS (SELECT 1 FROM planb_events e \
                 WHERE e.origin = r.origin AND e.cursor = r.cursor) ORDER BY r.cursor LIMIT $3",
                &[&origin, &to, &REFUSED_NAMED_MAX],
            ),
        )
        .await?;
        pass.refused = refused
            .iter()
            .map(|row| Refused {
                origin,
                cursor: row.get::<_, i64>(0).max(0) as u64,
                kind: row.get(1),
                reason: row.get(2),
            })
            .collect();
        // Every refused event counts, not only the ones named.
        let kept = to - held - refused_count;
        pass.withheld = kept.max(0) as u64;
        Ok(())
    }
}

/// Stores the blobs the database lacks (each once by its hash).
async fn insert_blobs(
    tx: &tokio_postgres::Transaction<'_>,
    blobs: &BTreeMap<BlobHash, Vec<u8>>,
) -> Result<(), ShipError> {
    if blobs.is_empty() {
        return Ok(());
    }
    let hashes: Vec<&[u8]> = blobs.keys().map(|h| h.as_slice()).collect();
    let present: BTreeSet<Vec<u8>> = timed(
        "look up blobs",
        tx.query(
            "SELECT hash FROM planb_blobs WHERE hash = ANY($1)",
            &[&hashes],
        ),
    )
    .await?
    .iter()
    .map(|row| row.get(0))
    .collect();
    let (hashes, bytes): (Vec<&[u8]>, Vec<&[u8]>) = blobs
        .iter()
        .filter(|(hash, _)| !present.contains(hash.as_slice()))
        .map(|(hash, bytes)| (hash.as_slice(), bytes.as_slice()))
        .unzip();
    if hashes.is_empty() {
        return Ok(());
    }
    timed(
        "store blobs",
        tx.execute(
            "INSERT INTO planb_blobs (hash, bytes) SELECT * FROM unnest($1::bytea[], $2::bytea[]) \
             ON CONFLICT (hash) DO NOTHING",
            &[&hashes, &bytes],
        ),
    )
    .await?;
    Ok(())
}

/// A batch's rows of one origin, to insert.
struct Rows<'a> {
    origin: Uuid,
    member: &'a str,
    rows: &'a [Row],
}

impl Rows<'_> {
    /// Inserts the rows; a row already there must hold the same bytes.
    /// When the database refuses the batch for what a row holds, each row
    /// is offered alone, and the ones refused are named in
    /// `planb_refused`. How many were new, and the refused.
    async fn insert(&self, tx: &Transaction<'_>) -> Result<(u64, Vec<Refused>), ShipError> {
        if self.rows.is_empty() {
            return Ok((0, Vec::new()));
        }
        let prev = self.prev_cursor(tx).await?;
        timed("savepoint", tx.batch_execute("SAVEPOINT rows")).await?;
        // The usual case past the mark: no row of the batch is there yet,
        // and one binary COPY stores them all. Any failure (a row already
        // there, a value the database refuses) undoes it, and the rows go
        // the way that compares and names each.
        match self.copy_all(tx, prev).await {
            Ok(count) => {
                timed("release", tx.batch_execute("RELEASE SAVEPOINT rows")).await?;
                return Ok((count, Vec::new()));
            }
            // A row already there, or a value the database refuses.
            Err(error) if refusal(&error).is_some() => {
                tracing::debug!("copying the batch was refused, inserting it row by row: {error}");
                timed("roll back", tx.batch_execute("ROLLBACK TO SAVEPOINT rows")).await?;
            }
            Err(error) => return Err(error.into()),
        }
        match self.insert_some(tx, self.rows, prev).await {
            Ok(count) => {
                timed("release", tx.batch_execute("RELEASE SAVEPOINT rows")).await?;
                Ok((count, Vec::new()))
            }
            Err(ShipError::Db(error)) if refusal(&error).is_some() => {
                timed("roll back", tx.batch_execute("ROLLBACK TO SAVEPOINT rows")).await?;
                self.insert_each(tx, prev).await
            }
            Err(error) => Err(error),
        }
    }

    /// Stores every row with one binary `COPY` (the first following
    /// `prev`); fails when any of them is in the database already.
    async fn copy_all(&self, tx: &Transaction<'_>, prev: Option<i64>) -> Result<u64, DbError> {
        const TYPES: [Type; 11] = [
            Type::UUID,
            Type::INT8,
            Type::TEXT,
            Type::TIMESTAMPTZ,
            Type::TEXT,
            Type::TEXT,
            Type::INT8,
            Type::BYTEA,
            Type::JSONB,
            Type::INT8,
            Type::INT8,
        ];
        let copy = async {
            let sink = tx
                .copy_in(
                    "COPY planb_events (origin, cursor, member, at, kind, project, checksum, \
                     payload, body, prev_checksum, prev_cursor) FROM STDIN BINARY",
                )
                .await?;
            let writer = BinaryCopyInWriter::new(sink, &TYPES);
            let mut writer = std::pin::pin!(writer);
            let mut prev = prev;
            for row in self.rows {
                let fields: [&(dyn ToSql + Sync); 11] = [
                    &self.origin,
                    &row.cursor,
                    &self.member,
                    &row.at,
                    &row.kind,
                    &row.project,
                    &row.checksum,
                    &row.payload,
                    &row.body,
                    &row.prev_checksum,
                    &prev,
                ];
                writer.as_mut().write(&fields).await?;
                prev = Some(row.cursor);
            }
            writer.finish().await
        };
        timed("copy events", copy).await
    }

    /// Each row alone, under a savepoint of its own.
    async fn insert_each(
        &self,
        tx: &Transaction<'_>,
        mut prev: Option<i64>,
    ) -> Result<(u64, Vec<Refused>), ShipError> {
        let (mut count, mut refused) = (0, Vec::new());
        for (n, row) in self.rows.iter().enumerate() {
            timed("savepoint", tx.batch_execute("SAVEPOINT one")).await?;
            match self.insert_some(tx, &self.rows[n..=n], prev).await {
                Ok(new) => {
                    timed("release", tx.batch_execute("RELEASE SAVEPOINT one")).await?;
                    count += new;
                }
                Err(ShipError::Db(error)) => {
                    let Some(reason) = refusal(&error) else {
                        return Err(ShipError::Db(error));
                    };
                    timed("roll back", tx.batch_execute("ROLLBACK TO SAVEPOINT one")).await?;
                    refused.push((row, reason));
                }
                Err(error) => return Err(error),
            }
            prev = Some(row.cursor);
        }
        self.store_refused(tx, &refused).await?;
        let refused = refused
            .into_iter()
            .map(|(row, reason)| Refused {
                origin: self.origin,
                cursor: row.cursor.max(0) as u64,
                kind: row.kind.to_string(),
                reason,
            })
            .collect();
        Ok((count, refused))
    }

    /// The origin's greatest cursor before the first row that the database
    /// holds or refused: what the first row follows.
    async fn prev_cursor(&self, tx: &Transaction<'_>) -> Result<Option<i64>, ShipError> {
        let first = self.rows.first().map_or(0, |r| r.cursor);
        let row = timed(
            "read the cursor before the batch",
            tx.query_one(
                "SELECT greatest((SELECT max(cursor) FROM planb_events WHERE origin = $1 AND cursor < $2), \
                 (SELECT max(cursor) FROM planb_refused WHERE origin = $1 AND cursor < $2))",
                &[&self.origin, &first],
            ),
        )
        .await?;
        Ok(row.get(0))
    }

    /// Names the refused rows in `planb_refused`.
    async fn store_refused(
        &self,
        tx: &Transaction<'_>,
        refused: &[(&Row, String)],
    ) -> Result<(), ShipError> {
        if refused.is_empty() {
            return Ok(());
        }
        let cursors: Vec<i64> = refused.iter().map(|(r, _)| r.cursor).collect();
        let ats: Vec<SystemTime> = refused.iter().map(|(r, _)| r.at).collect();
        let kinds: Vec<&str> = refused.iter().map(|(r, _)| r.kind).collect();
        let checksums: Vec<i64> = refused.iter().map(|(r, _)| r.checksum).collect();
        let reasons: Vec<&str> = refused.iter().map(|(_, why)| why.as_str()).collect();
        timed(
            "name the refused events",
            tx.execute(
                "INSERT INTO planb_refused (origin, cursor, member, at, kind, checksum, reason) \
                 SELECT $1, c, $2, a, k, s, r FROM unnest($3::bigint[], $4::timestamptz[], \
                 $5::text[], $6::bigint[], $7::text[]) AS t(c, a, k, s, r) \
                 ON CONFLICT (origin, cursor) DO UPDATE SET reason = EXCLUDED.reason, refused_at = now()",
                &[&self.origin, &self.member, &cursors, &ats, &kinds, &checksums, &reasons],
            ),
        )
        .await?;
        Ok(())
    }

    /// Inserts `rows` (the first following `prev`); a row already there must
    /// hold the same bytes. How many were new.
    async fn insert_some(
        &self,
        tx: &Transaction<'_>,
        rows: &[Row],
        prev: Option<i64>,
    ) -> Result<u64, ShipError> {
        let cursors: Vec<i64> = rows.iter().map(|r| r.cursor).collect();
        let prevs: Vec<Option<i64>> = std::iter::once(prev)
            .chain(cursors.iter().copied().map(Some))
            .take(rows.len())
            .collect();
        let ats: Vec<SystemTime> = rows.iter().map(|r| r.at).collect();
        let kinds: Vec<&str> = rows.iter().map(|r| r.kind).collect();
        let projects: Vec<Option<&str>> = rows.iter().map(|r| r.project.as_deref()).collect();
        let checksums: Vec<i64> = rows.iter().map(|r| r.checksum).collect();
        let prev_checksums: Vec<i64> = rows.iter().map(|r| r.prev_checksum).collect();
        let payloads: Vec<&[u8]> = rows.iter().map(|r| r.payload.as_slice()).collect();
        let bodies: Vec<&serde_json::Value> = rows.iter().map(|r| &r.body).collect();
        let inserted = timed(
            "store events",
            tx.query(
                "INSERT INTO planb_events (origin, cursor, member, at, kind, project, checksum, payload, body, \
                 prev_checksum, prev_cursor) \
                 SELECT $1, c, $2, a, k, p, s, b, j, ps, pc FROM unnest($3::bigint[], $4::timestamptz[], $5::text[], \
                 $6::text[], $7::bigint[], $8::bytea[], $9::jsonb[], $10::bigint[], $11::bigint[]) \
                 AS t(c, a, k, p, s, b, j, ps, pc) \
                 ON CONFLICT (origin, cursor) DO NOTHING RETURNING cursor",
                &[
                    &self.origin, &self.member, &cursors, &ats, &kinds, &projects, &checksums,
                    &payloads, &bodies, &prev_checksums, &prevs,
                ],
            ),
        )
        .await?;
        let count = inserted.len() as u64;
        if inserted.len() < rows.len() {
            let inserted: BTreeSet<i64> = inserted.iter().map(|row| row.get(0)).collect();
            compare(tx, self.origin, rows, &inserted).await?;
        }
        Ok(count)
    }
}

/// The rows of `rows` not `inserted` are already in the database: each
/// must hold the same bytes, else the origin's history diverged.
async fn compare(
    tx: &Transaction<'_>,
    origin: Uuid,
    rows: &[Row],
    inserted: &BTreeSet<i64>,
) -> Result<(), ShipError> {
    let present: Vec<i64> = rows
        .iter()
        .map(|r| r.cursor)
        .filter(|c| !inserted.contains(c))
        .collect();
    let held = timed(
        "compare events",
        tx.query(
            "SELECT cursor, payload FROM planb_events WHERE origin = $1 AND cursor = ANY($2) ORDER BY cursor",
            &[&origin, &present],
        ),
    )
    .await?;
    for row in held {
        let cursor: i64 = row.get(0);
        let payload: &[u8] = row.get(1);
        let ours = rows
            .iter()
            .find(|r| r.cursor == cursor)
            .map(|r| r.payload.as_slice());
        if ours != Some(payload) {
            return Err(ShipError::Divergence {
                cursor: cursor as u64,
                detail: format!(
                    "the database already holds another event of origin {origin} at cursor {cursor}"
                ),
            });
        }
    }
    Ok(())
}

/// The database's reason when `error` is its refusal of what a row
/// holds (a value it cannot store, a constraint, a size limit), which
/// offering the row again cannot change; `None` for anything else (the
/// database down, slow, full), which a later pass tries again.
fn refusal(error: &DbError) -> Option<String> {
    let DbError::Postgres(error) = error else {
        return None;
    };
    let server = error.as_db_error()?;
    let code = server.code().code();
    if !["22", "23", "54"]
        .iter()
        .any(|class| code.starts_with(class))
    {
        return None;
    }
    let mut reason = server.message().to_string();
    // A failing row's detail repeats the row itself.
    if let Some(detail) = server
        .detail()
        .filter(|d| !d.starts_with("Failing row contains"))
    {
        reason.push_str(": ");
        reason.push_str(detail);
    }
    reason.push_str(&format!(" (SQLSTATE {code})"));
    Some(
        reason
            .chars()
            .filter(|c| *c != '\0')
            .take(REASON_CHARS_MAX)
            .collect(),
    )
}

fn mark_of(to: i64, checksum: Option<i64>) -> Mark {
    Mark {
        to: to.max(0) as u64,
        checksum: checksum.and_then(|c| u32::try_from(c).ok()),
    }
}

fn row_of(
    record: Record,
    prev_checksum: u32,
    event: &planb_core::event::Event,
    project: Option<String>,
) -> Row {
    let ms = event.at.unix_ms();
    let at = if ms >= 0 {
        UNIX_EPOCH + Duration::from_millis(ms as u64)
    } else {
        UNIX_EPOCH - Duration::from_millis(ms.unsigned_abs())
    };
    Row {
        cursor: record.cursor.0 as i64,
        at,
        kind: event.body.kind_name(),
        project,
        checksum: i64::from(record.checksum),
        prev_checksum: i64::from(prev_checksum),
        body: rendering(event),
        payload: record.payload,
    }
}

/// What SQL readers see of an event: its JSON, each NUL (which jsonb
/// cannot hold) shown as U+2400 (␀). The archived bytes beside it are
/// exact.
fn rendering(event: &planb_core::event::Event) -> serde_json::Value {
    let mut value = serde_json::to_value(event).unwrap_or(serde_json::Value::Null);
    without_nul(&mut value);
    value
}

fn without_nul(value: &mut serde_json::Value) {
    use serde_json::Value;
    let replaced = |text: &str| text.replace('\0', "\u{2400}");
    match value {
        Value::String(text) if text.contains('\0') => *text = replaced(text),
        Value::Array(items) => items.iter_mut().for_each(without_nul),
        Value::Object(map) => {
            if map.keys().any(|k| k.contains('\0')) {
                let entries = std::mem::take(map);
                map.extend(entries.into_iter().map(|(k, v)| (replaced(&k), v)));
            }
            map.values_mut().for_each(without_nul);
        }
        _ => {}
    }
}

/// The blobs `body` names: bytes it carries into `have`, hashes it only
/// names into `wanted`.
fn collect_blobs(
    body: &EventBody,
    have: &mut BTreeMap<BlobHash, Vec<u8>>,
    wanted: &mut BTreeSet<BlobHash>,
) {
    if let EventBody::BlobStored { bytes, .. } = body {
        have.insert(sha2::Sha256::digest(bytes).into(), bytes.clone());
    }
    wanted.extend(body.named_blob().copied());
}

/// The bytes of the stored blob `body` names, as its file says (a blob
/// small enough to be in the log counts as nothing more): a batch is
/// bounded with the blobs it carries.
fn blob_bytes(blobs: &planb_projections::Blobs, body: &EventBody) -> usize {
    let on_disk = |hash: &BlobHash| std::fs::metadata(blobs.path(hash)).map_or(0, |m| m.len());
    let total = body.named_blob().map_or(0, on_disk);
    usize::try_from(total).unwrap_or(usize::MAX)
}

fn decoded(record: &Record) -> Result<event::Envelope, ShipError> {
    event::decode(&record.payload, Cursor(record.cursor.0)).map_err(|e| ShipError::Damaged {
        cursor: record.cursor.0,
        detail: e.to_string(),
    })
}

fn damaged(cursor: u64, error: &planb_log::LogError) -> ShipError {
    ShipError::Damaged {
        cursor,
        detail: error.to_string(),
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Projects;

    /// The first batch a shipper of `root` reads (no database needed).
    fn first_batch(root: DataRoot) -> (Batch, Option<ShipError>) {
        let projects = Projects::parse("/src", None).expect("projects");
        let settings = TeamSettings::new("postgres://localhost/team", "ana", projects);
        let mut shipper = Shipper::new(root, settings.expect("settings")).expect("shipper");
        let start = Mark {
            to: 0,
            checksum: None,
        };
        shipper.stand_at(start).expect("at the start");
        shipper.next_batch().expect("a batch")
    }

    /// A record that does not decode: the batch ends before it, with the
    /// records before it, and the damage names its cursor.
    #[test]
    fn a_batch_ships_up_to_a_record_that_does_not_decode() {
        let dir = tempfile::tempdir().expect("root");
        let root = DataRoot::new(dir.path());
        planb_tests::logs::append_sessions(root.root(), 1, "/src/shop", 1);
        let (log, _) = planb_log::open_dir(&root.log_dir(), LogOptions::default()).expect("log");
        log.append(&[b"not an event".as_slice()]).expect("append");
        drop(log);
        let (batch, damage) = first_batch(root);
        assert_eq!(batch.last.map(|m| m.to), Some(6), "the six good records");
        assert_eq!(batch.rows.len(), 6);
        let damage = damage.expect("the damage after them");
        assert!(
            matches!(damage, ShipError::Damaged { cursor: 7, .. }),
            "{damage}"
        );
    }

    /// Three events, each naming a 5 MiB blob: the batch stops once its
    /// blobs pass the budget, not after every record of the log.
    #[test]
    fn a_batch_is_bounded_by_the_blobs_it_carries() {
        let dir = tempfile::tempdir().expect("root");
        let root = DataRoot::new(dir.path());
        let blobs = root.blobs();
        let (log, _) = planb_log::open_dir(&root.log_dir(), LogOptions::default()).expect("log");
        let task = planb_core::TaskId::from_uuid(Uuid::now_v7());
        let bodies = (0..3u8)
            .map(|n| {
                let artifact = blobs.put(&vec![n; 5 << 20]).expect("blob");
                EventBody::ArtifactEdited {
                    task,
                    step: format!("step-{n}"),
                    artifact,
                    bytes: 5 << 20,
                    by: "test".into(),
                }
            })
            .collect();
        planb_tests::logs::append(&log, bodies);
        let (batch, damage) = first_batch(root);
        assert!(damage.is_none());
        assert_eq!((batch.first, batch.last.map(|m| m.to)), (Some(1), Some(2)));
    }
}
