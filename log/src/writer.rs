//! The writer: recovery on open, catch-up under the lock, durable appends and group commit.
//!
//! Appends from one process are serialised by the group-commit state (`Group.busy`);
//! appends from several processes by the storage lock. Whoever holds both first
//! catches up on whatever other processes appended (validating it, and truncating a
//! torn tail a crashed process left), then writes, then syncs. Concurrent callers in
//! one process queue up while a sync is in flight and the next leader writes all of
//! their records with one write and one sync.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use crate::error::LogError;
use crate::format::{SEGMENT_HEADER_LEN, SegmentHeader, frame, segment_name};
use crate::reader::{RELIST_AFTER, ReadPosition};
use crate::scan::{Parsed, SegmentFile, Verdict, classify, list_segments, open_segment};
use crate::storage::{Storage, StorageLock};
use crate::{Cursor, CursorRange, LogOptions, RecoveryReport, Truncation};

/// What the writer knows about the end of the log. Only valid while the storage
/// lock is held and after [`Tail::catch_up`]; between appends other processes move it.
#[derive(Debug)]
pub(crate) struct Tail {
    /// The last segment, if any exists.
    segment: Option<SegmentFile>,
    /// Bytes of `segment` known to be valid records (the append position).
    len: u64,
    /// How long `segment`'s file was last seen: records up to `len`, then
    /// zeros (the runway later records are written into).
    allocated: u64,
    /// Set on open: the first catch-up checks that nothing but zeros
    /// follows the last record (a power cut can leave a torn record whose
    /// header never reached the disk).
    check_after_end: bool,
    /// Cursor the next record will get.
    next_cursor: u64,
    /// Checksum of the last record, which the next record chains to.
    last_checksum: u32,
    /// Set when a write or sync failed; no append is attempted after that.
    poisoned: Option<String>,
    /// The last record written through this tail: where it begins, and its
    /// checksum.
    last_written: Option<(ReadPosition, u32)>,
    /// Where each record of the last write began, in order.
    written: Vec<ReadPosition>,
    /// When the log's segments were last listed and none followed
    /// `segment`.
    listed_at: Option<Instant>,
}

impl Tail {
    fn empty() -> Tail {
        Tail {
            segment: None,
            len: 0,
            allocated: 0,
            check_after_end: false,
            next_cursor: 1,
            last_checksum: 0,
            poisoned: None,
            last_written: None,
            written: Vec::new(),
            listed_at: None,
        }
    }

    /// The tail recovery on open catches up from. Every header must be valid
    /// except possibly the last (a crash while rolling over). Catch-up starts
    /// at the second-to-last valid one, so it validates that segment's records
    /// and that the last one continues its cursors and chain. Must run under
    /// the storage lock.
    fn recovering(storage: &dyn Storage) -> Result<Tail, LogError> {
        let mut tail = Tail::empty();
        tail.check_after_end = true;
        let segments = list_segments(storage)?;
        let mut previous_start = None;
        for (index, (first, name)) in segments.iter().enumerate() {
            let mut segment = open_segment(storage, *first, true)?;
            let header = segment
                .header()
                .map_err(|e| LogError::io("read", storage.describe(name), e))?;
            match header {
                Ok(header) if header.first_cursor == *first => {
                    if let Some(previous) = tail.segment.take() {
                        previous_start = Some((previous, tail.next_cursor, tail.last_checksum));
                    }
                    tail.segment = Some(segment);
                    tail.len = SEGMENT_HEADER_LEN as u64;
                    tail.next_cursor = header.first_cursor;
                    tail.last_checksum = header.prev_checksum;
                }
                Ok(header) => {
                    return Err(LogError::Corrupt {
                        segment: storage.describe(name),
                        offset: 0,
                        cursor: *first,
                        damage: crate::Damage::SegmentGap {
                            expected: *first,
                            found: header.first_cursor,
                        },
                        followed_by: "the segment's records".to_string(),
                    });
                }
                Err(damage) if index + 1 < segments.len() => {
                    return Err(LogError::Corrupt {
                        segment: storage.describe(name),
                        offset: 0,
                        cursor: *first,
                        damage,
                        followed_by: format!("segment {}", segments[index + 1].1),
                    });
                }
                Err(_) => {}
            }
        }
        if let Some((segment, next_cursor, last_checksum)) = previous_start {
            tail.segment = Some(segment);
            tail.len = SEGMENT_HEADER_LEN as u64;
            tail.next_cursor = next_cursor;
            tail.last_checksum = last_checksum;
        }
        Ok(tail)
    }

    /// Where the next record will begin; `None` before the first segment.
    fn position(&self) -> Option<ReadPosition> {
        self.segment.as_ref().map(|segment| ReadPosition {
            segment: segment.first_cursor,
            offset: self.len,
            cursor: Cursor(self.next_cursor),
            prev_checksum: self.last_checksum,
        })
    }

    /// The segment a roll-over after `segment` would have made, if there is
    /// one. Another writer rolls over only once it is at the end of
    /// `segment`, which this tail has caught up on, so only the segment
    /// named after the next cursor can follow; a full listing, at most every
    /// [`RELIST_AFTER`], also finds one that breaks the chain (damage).
    /// While the segment is short enough that no writer can have closed it,
    /// that name is not even tried.
    fn following(
        &mut self,
        storage: &dyn Storage,
        options: &LogOptions,
    ) -> Result<Option<(u64, String)>, LogError> {
        let current_first = self.segment.as_ref().map(|s| s.first_cursor);
        if let Some(current) = current_first
            && self.listed_at.is_some_and(|at| at.elapsed() < RELIST_AFTER)
        {
            if self.next_cursor <= current || !options.may_have_rolled_at(self.len) {
                return Ok(None);
            }
            let name = segment_name(self.next_cursor);
            return match storage.open(&name, false) {
                Ok(_) => Ok(Some((self.next_cursor, name))),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(LogError::io("open", storage.describe(&name), e)),
            };
        }
        let next = list_segments(storage)?
            .into_iter()
            .find(|(first, _)| current_first.is_none_or(|c| *first > c));
        self.listed_at = next.is_none().then(Instant::now);
        Ok(next)
    }

    /// Reads everything appended since this tail was last current, validating each
    /// record and truncating a torn tail. Must run under the storage lock.
    fn catch_up(
        &mut self,
        storage: &dyn Storage,
        options: &LogOptions,
        truncations: &mut Vec<Truncation>,
    ) -> Result<(), LogError> {
        loop {
            self.catch_up_segment(storage, options, truncations)?;
            // A newer segment means another process rolled over; continue there.
            let Some((first, name)) = self.following(storage, options)? else {
                self.check_after_end = false;
                return Ok(());
            };
            if !self.enter_segment(storage, options, first, &name, truncations)? {
                return Ok(());
            }
        }
    }

    /// Catches up on the current segment: refuses one shorter than what is
    /// known durable, and reads whatever it holds beyond that.
    fn catch_up_segment(
        &mut self,
        storage: &dyn Storage,
        options: &LogOptions,
        truncations: &mut Vec<Truncation>,
    ) -> Result<(), LogError> {
        let Some(segment) = self.segment.as_mut() else {
            return Ok(());
        };
        let describe = storage.describe(&segment.name);
        let file_len = segment
            .file
            .len()
            .map_err(|e| LogError::io("stat", describe.clone(), e))?;
        if file_len < self.len {
            return Err(LogError::Corrupt {
                segment: describe,
                offset: file_len,
                cursor: self.next_cursor,
                damage: crate::Damage::Shrunk {
                    known: self.len,
                    now: file_len,
                },
                followed_by: "bytes already acknowledged as durable".to_string(),
            });
        }
        self.allocated = file_len;
        if file_len > self.len {
            segment.forget();
            self.read_appended(storage, options, &describe, truncations)?;
        }
        Ok(())
    }

    /// Reads the records after `len` in the current segment (`describe`d),
    /// each continuing the cursors and the checksum chain, up to its end or
    /// a torn tail, which is truncated.
    fn read_appended(
        &mut self,
        storage: &dyn Storage,
        options: &LogOptions,
        describe: &str,
        truncations: &mut Vec<Truncation>,
    ) -> Result<(), LogError> {
        let Some(segment) = self.segment.as_mut() else {
            return Ok(());
        };
        loop {
            let parsed = segment
                .parse(
                    self.len,
                    self.next_cursor,
                    self.last_checksum,
                    options.max_record_bytes,
                )
                .map_err(|e| LogError::io("read", describe.to_owned(), e))?;
            let damage = match parsed {
                Parsed::Record {
                    checksum,
                    next_offset,
                    ..
                } => {
                    self.len = next_offset;
                    self.next_cursor = self.next_cursor.saturating_add(1);
                    self.last_checksum = checksum;
                    continue;
                }
                Parsed::End if !self.check_after_end => return Ok(()),
                Parsed::End => match segment.damage_after_end(self.len) {
                    Ok(None) => return Ok(()),
                    Ok(Some(damage)) => damage,
                    Err(e) => return Err(LogError::io("read", describe.to_owned(), e)),
                },
                Parsed::Damaged(damage) => damage,
            };
            return self.truncate_torn_tail(storage, options, describe, damage, truncations);
        }
    }

    /// Zeroes the current segment after `len` when the damage found there is
    /// a torn tail (a crashed writer's unfinished record), durably, and
    /// reports it; other damage is an error. The zeros stay, as runway.
    fn truncate_torn_tail(
        &mut self,
        storage: &dyn Storage,
        options: &LogOptions,
        describe: &str,
        damage: crate::Damage,
        truncations: &mut Vec<Truncation>,
    ) -> Result<(), LogError> {
        let segment = self
            .segment
            .as_mut()
            .expect("a segment exists while catching up on it");
        let Verdict::TornTail { bytes } = classify(
            storage,
            segment,
            self.len,
            self.next_cursor,
            damage.clone(),
            options.max_record_bytes,
        )?;
        let zeros = vec![0u8; bytes as usize];
        if let Err(e) = segment
            .file
            .write_all_at(self.len, &zeros)
            .and_then(|()| segment.file.sync_data())
        {
            let error = LogError::io("truncate", describe.to_owned(), e);
            return Err(self.poison(&error));
        }
        segment.forget();
        truncations.push(Truncation {
            segment: describe.to_owned(),
            offset: self.len,
            bytes,
            cursor: Cursor(self.next_cursor),
            damage,
        });
        Ok(())
    }

    /// Moves on to the segment `name` that follows the current one, when its
    /// header continues the cursors and the chain; whether to read on. A
    /// segment whose header is torn is removed and ends the catch-up.
    fn enter_segment(
        &mut self,
        storage: &dyn Storage,
        options: &LogOptions,
        first: u64,
        name: &str,
        truncations: &mut Vec<Truncation>,
    ) -> Result<bool, LogError> {
        let mut segment = open_segment(storage, first, true)?;
        match segment
            .header()
            .map_err(|e| LogError::io("read", storage.describe(name), e))?
        {
            Ok(header)
                if header.first_cursor == self.next_cursor
                    && first == self.next_cursor
                    && header.prev_checksum == self.last_checksum =>
            {
                self.segment = Some(segment);
                self.len = SEGMENT_HEADER_LEN as u64;
                self.allocated = 0;
                Ok(true)
            }
            Ok(header) => Err(LogError::Corrupt {
                segment: storage.describe(name),
                offset: 0,
                cursor: self.next_cursor,
                damage: if header.first_cursor != self.next_cursor {
                    crate::Damage::SegmentGap {
                        expected: self.next_cursor,
                        found: header.first_cursor,
                    }
                } else {
                    crate::Damage::Chain {
                        expected: self.last_checksum,
                        found: header.prev_checksum,
                    }
                },
                followed_by: "the segment's records".to_string(),
            }),
            Err(damage) => {
                self.remove_torn_segment(
                    storage,
                    options,
                    &mut segment,
                    name,
                    damage,
                    truncations,
                )?;
                Ok(false)
            }
        }
    }

    /// Removes a segment whose header never became durable (a crash while
    /// rolling over: it can only be the last one and hold no records), and
    /// reports it.
    fn remove_torn_segment(
        &mut self,
        storage: &dyn Storage,
        options: &LogOptions,
        segment: &mut SegmentFile,
        name: &str,
        damage: crate::Damage,
        truncations: &mut Vec<Truncation>,
    ) -> Result<(), LogError> {
        let Verdict::TornTail { bytes } = classify(
            storage,
            segment,
            0,
            self.next_cursor,
            damage.clone(),
            options.max_record_bytes,
        )?;
        if let Err(e) = storage.remove(name).and_then(|()| storage.sync_dir()) {
            let error = LogError::io("remove", storage.describe(name), e);
            return Err(self.poison(&error));
        }
        truncations.push(Truncation {
            segment: storage.describe(name),
            offset: 0,
            bytes,
            cursor: Cursor(self.next_cursor),
            damage,
        });
        Ok(())
    }

    /// Writes `batches` (each a caller's list of payloads) durably: one write per
    /// segment touched and one sync at the end. Returns each batch's cursor range.
    fn write(
        &mut self,
        storage: &dyn Storage,
        options: &LogOptions,
        batches: &[Vec<Vec<u8>>],
    ) -> Result<Vec<CursorRange>, LogError> {
        self.write_then(storage, options, batches, SyncWhen::Now)
    }

    /// [`write`](Self::write), with the last segment's sync `when` asked:
    /// [`SyncWhen::Later`] leaves it to [`Tail::sync_last`] (segments filled on
    /// the way are synced at once, as they are rolled over).
    fn write_then(
        &mut self,
        storage: &dyn Storage,
        options: &LogOptions,
        batches: &[Vec<Vec<u8>>],
        when: SyncWhen,
    ) -> Result<Vec<CursorRange>, LogError> {
        if let Some(reason) = &self.poisoned {
            return Err(LogError::Poisoned {
                reason: reason.clone(),
            });
        }
        match self.write_unpoisoned(storage, options, batches, when) {
            Err(error @ LogError::Io { .. }) => {
                // Bytes may have reached the file and the kernel may have dropped dirty
                // pages after a failed sync: neither the tail nor a retry can be trusted.
                Err(self.poison(&error))
            }
            result => result,
        }
    }

    /// Stops this writer for good after `error`, and says so.
    fn poison(&mut self, error: &LogError) -> LogError {
        let reason = error.to_string();
        self.poisoned = Some(reason.clone());
        LogError::Poisoned { reason }
    }

    fn write_unpoisoned(
        &mut self,
        storage: &dyn Storage,
        options: &LogOptions,
        batches: &[Vec<Vec<u8>>],
        when: SyncWhen,
    ) -> Result<Vec<CursorRange>, LogError> {
        if self.segment.is_none() {
            self.roll(storage, options)?;
        }
        let mut ranges = Vec::with_capacity(batches.len());
        self.written.clear();
        let mut buf = Vec::new();
        let mut buf_start = self.len;
        for batch in batches {
            let first = self.next_cursor;
            for payload in batch {
                let record_len = (crate::format::RECORD_HEADER_LEN + payload.len()) as u64;
                let planned = buf_start + buf.len() as u64;
                if planned + record_len > options.max_segment_bytes
                    && planned > SEGMENT_HEADER_LEN as u64
                {
                    self.flush(storage, options, &buf, buf_start)?;
                    buf.clear();
                    self.roll(storage, options)?;
                    buf_start = self.len;
                }
                let at = ReadPosition {
                    segment: self.segment.as_ref().map_or(0, |s| s.first_cursor),
                    offset: buf_start + buf.len() as u64,
                    cursor: Cursor(self.next_cursor),
                    prev_checksum: self.last_checksum,
                };
                self.last_checksum = frame(&mut buf, payload, self.next_cursor, self.last_checksum);
                self.last_written = Some((at, self.last_checksum));
                self.written.push(at);
                self.next_cursor = self.next_cursor.saturating_add(1);
            }
            ranges.push(CursorRange {
                first: Cursor(first),
                count: batch.len() as u64,
            });
        }
        match when {
            SyncWhen::Now => self.flush(storage, options, &buf, buf_start)?,
            SyncWhen::Later => self.put(storage, options, &buf, buf_start)?,
        }
        Ok(ranges)
    }

    /// Writes `buf` at `offset` of the current segment and syncs it.
    fn flush(
        &mut self,
        storage: &dyn Storage,
        options: &LogOptions,
        buf: &[u8],
        offset: u64,
    ) -> Result<(), LogError> {
        self.put(storage, options, buf, offset)?;
        self.sync_last(storage)
    }

    /// Writes `buf` at `offset` of the current segment, unsynced: the bytes
    /// are in the page cache, where every process reads them, and survive
    /// the writer's death but not a power cut until [`Tail::sync_last`].
    ///
    /// Records land in the segment's runway of zeros, so their sync changes
    /// no file metadata (no journal commit); when the runway is used up the
    /// same write lays a new one after them.
    fn put(
        &mut self,
        storage: &dyn Storage,
        options: &LogOptions,
        buf: &[u8],
        offset: u64,
    ) -> Result<(), LogError> {
        let segment = self
            .segment
            .as_ref()
            .expect("a segment exists while writing");
        let end = offset + buf.len() as u64;
        let written = if end <= self.allocated {
            segment.file.write_all_at(offset, buf)
        } else {
            let allocated = runway_end(end, options);
            let mut with_runway = Vec::with_capacity((allocated - offset) as usize);
            with_runway.extend_from_slice(buf);
            with_runway.resize((allocated - offset) as usize, 0);
            let written = segment.file.write_all_at(offset, &with_runway);
            if written.is_ok() {
                self.allocated = allocated;
            }
            written
        };
        written.map_err(|e| LogError::io("write", storage.describe(&segment.name), e))?;
        self.len = end;
        Ok(())
    }

    /// Makes what was written to the current segment durable.
    fn sync_last(&self, storage: &dyn Storage) -> Result<(), LogError> {
        let segment = self
            .segment
            .as_ref()
            .expect("a segment exists while writing");
        segment
            .file
            .sync_data()
            .map_err(|e| LogError::io("fdatasync", storage.describe(&segment.name), e))
    }

    /// Starts a new segment at `next_cursor`, durably (file and directory
    /// entry), its header followed by a runway of zeros.
    fn roll(&mut self, storage: &dyn Storage, options: &LogOptions) -> Result<(), LogError> {
        let name = segment_name(self.next_cursor);
        let describe = storage.describe(&name);
        let file = storage
            .create_new(&name)
            .map_err(|e| LogError::io("create", describe.clone(), e))?;
        let header = SegmentHeader {
            first_cursor: self.next_cursor,
            prev_checksum: self.last_checksum,
        };
        let allocated = runway_end(SEGMENT_HEADER_LEN as u64, options);
        let mut bytes = header.encode().to_vec();
        bytes.resize(allocated as usize, 0);
        file.write_all_at(0, &bytes)
            .and_then(|()| file.sync_data())
            .map_err(|e| LogError::io("write segment header", describe.clone(), e))?;
        storage
            .sync_dir()
            .map_err(|e| LogError::io("fsync directory", describe, e))?;
        self.segment = Some(SegmentFile::new(name, self.next_cursor, file));
        self.len = SEGMENT_HEADER_LEN as u64;
        self.allocated = allocated;
        Ok(())
    }
}

/// How many zeros a segment keeps ahead of its last record: records written
/// into them change no file metadata, so their `fdatasync` is one data
/// write, not a journal commit. A new runway costs one such commit per this
/// many bytes of records.
pub(crate) const RUNWAY_BYTES: u64 = 1 << 20;

/// Where a segment's runway ends once bytes up to `end` are written: a
/// runway's length past `end`, within the segment's limit.
fn runway_end(end: u64, options: &LogOptions) -> u64 {
    (end + RUNWAY_BYTES).min(options.max_segment_bytes).max(end)
}

/// The thread that syncs a segment while its appender does other work
/// ([`AppendGuard::append_placed_overlapping`]): started on first use, it
/// ends with the log. One sync at a time, since appends take turns.
#[derive(Debug)]
struct Syncer {
    files: std::sync::mpsc::Sender<Arc<dyn crate::storage::StorageFile>>,
    done: std::sync::mpsc::Receiver<std::io::Result<()>>,
}

impl Syncer {
    fn start() -> std::io::Result<Syncer> {
        let (files, to_sync) = std::sync::mpsc::channel::<Arc<dyn crate::storage::StorageFile>>();
        let (synced, done) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("planb-log-sync".into())
            .spawn(move || {
                for file in to_sync {
                    if synced.send(file.sync_data()).is_err() {
                        return;
                    }
                }
            })?;
        Ok(Syncer { files, done })
    }

    /// Hands `file` to the thread (started if need be) and returns it to
    /// wait on; `None` when no thread can be had.
    fn send(
        slot: &mut Option<Syncer>,
        file: Arc<dyn crate::storage::StorageFile>,
    ) -> Option<&Syncer> {
        if slot.is_none() {
            *slot = Syncer::start().ok();
        }
        let sent = slot.as_ref()?.files.send(file).is_ok();
        if !sent {
            // Its thread is gone: start anew next time.
            *slot = None;
        }
        slot.as_ref()
    }
}

/// When [`Tail::write_then`] syncs the last segment it wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SyncWhen {
    /// Before it returns.
    Now,
    /// When the caller calls [`Tail::sync_last`].
    Later,
}

/// Appends waiting for a leader, and who holds the right to write.
#[derive(Debug, Default)]
struct Group {
    /// A leader (or an [`AppendGuard`]) holds the right to write. Appenders that
    /// find it set queue up and sleep on their own [`Waiter`].
    busy: bool,
    queue: Vec<Pending>,
    /// Threads waiting in [`Log::lock`]; a leader yields to them between rounds.
    guard_waiters: usize,
}

#[derive(Debug)]
struct Pending {
    waiter: Arc<Waiter>,
    payloads: Vec<Vec<u8>>,
}

/// Where one appender sleeps: only its own result, or being made the next
/// leader, wakes it. Waking only the threads that have something to do keeps
/// group commit efficient when there are many more writers than cores.
#[derive(Debug, Default)]
struct Waiter {
    slot: Mutex<Slot>,
    wake: Condvar,
}

#[derive(Debug, Default)]
enum Slot {
    #[default]
    Waiting,
    /// Leadership was handed over: take the queue and write it.
    Lead,
    Done(Result<CursorRange, LogError>),
}

impl Waiter {
    fn set(&self, slot: Slot) {
        *lock(&self.slot) = slot;
        self.wake.notify_one();
    }
}

/// A leader writes at most this many consecutive batches before handing the
/// role to a queued appender, so no caller waits behind other callers' work
/// for long.
const ROUNDS_PER_LEADER: usize = 4;

#[derive(Debug)]
struct Inner {
    storage: Arc<dyn Storage>,
    options: LogOptions,
    group: Mutex<Group>,
    group_changed: Condvar,
    /// Touched only by the holder of `Group.busy`, so never contended.
    tail: Mutex<Tail>,
    truncations: Mutex<Vec<Truncation>>,
    /// Syncs overlapping appends' segments.
    syncer: Mutex<Option<Syncer>>,
}

/// An open log that can be appended to; cheap to clone and share between threads.
#[derive(Debug, Clone)]
pub struct Log {
    inner: Arc<Inner>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks is a bug elsewhere; the data they
    // guard stays consistent because every update is a plain assignment.
    mutex.lock().unwrap_or_else(|poison| poison.into_inner())
}

impl Log {
    /// Opens (creating if needed) the log on `storage`, recovering from a crash:
    /// a torn tail is truncated and reported, corruption is an error.
    pub fn open(
        storage: Arc<dyn Storage>,
        options: LogOptions,
    ) -> Result<(Log, RecoveryReport), LogError> {
        options.check();
        let mut truncations = Vec::new();
        let tail = {
            let _lock = storage
                .lock()
                .map_err(|e| LogError::io("lock", storage.describe(crate::LOCK_FILE), e))?;
            let mut tail = Tail::recovering(storage.as_ref())?;
            tail.catch_up(storage.as_ref(), &options, &mut truncations)?;
            tail
        };
        let report = RecoveryReport {
            segments: list_segments(storage.as_ref())?.len(),
            next_cursor: Cursor(tail.next_cursor),
            truncations: truncations.clone(),
        };
        let log = Log {
            inner: Arc::new(Inner {
                storage,
                options,
                group: Mutex::new(Group::default()),
                group_changed: Condvar::new(),
                tail: Mutex::new(tail),
                truncations: Mutex::new(Vec::new()),
                syncer: Mutex::new(None),
            }),
        };
        Ok((log, report))
    }

    /// The storage this log lives on.
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.inner.storage
    }

    /// The options the log was opened with.
    pub fn options(&self) -> &LogOptions {
        &self.inner.options
    }

    /// Torn tails left by other processes and truncated during catch-up since the
    /// last call; recovery at open reports its own in [`RecoveryReport`].
    pub fn take_truncations(&self) -> Vec<Truncation> {
        std::mem::take(&mut *lock(&self.inner.truncations))
    }

    /// Appends `payloads` as consecutive records and returns once they are durable.
    /// Concurrent callers share one sync.
    pub fn append(&self, payloads: &[&[u8]]) -> Result<CursorRange, LogError> {
        self.check_sizes(payloads)?;
        let waiter = Arc::new(Waiter::default());
        let lead_now = {
            let mut group = lock(&self.inner.group);
            group.queue.push(Pending {
                waiter: Arc::clone(&waiter),
                payloads: payloads.iter().map(|p| p.to_vec()).collect(),
            });
            !std::mem::replace(&mut group.busy, true)
        };
        if !lead_now {
            let mut slot = lock(&waiter.slot);
            loop {
                match std::mem::take(&mut *slot) {
                    Slot::Waiting => {
                        slot = waiter
                            .wake
                            .wait(slot)
                            .unwrap_or_else(|poison| poison.into_inner());
                    }
                    Slot::Done(result) => return result,
                    Slot::Lead => break,
                }
            }
        }
        self.lead_rounds();
        match std::mem::take(&mut *lock(&waiter.slot)) {
            Slot::Done(result) => result,
            // The leader's own request is in the queue it takes first.
            other => unreachable!("a leader's request is answered in its first round: {other:?}"),
        }
    }

    /// Writes queued batches until the queue is empty, then releases the right
    /// to write or hands it to a queued appender.
    fn lead_rounds(&self) {
        for round in 0.. {
            let batch = {
                let mut group = lock(&self.inner.group);
                let yield_to_guard = round > 0 && group.guard_waiters > 0;
                if group.queue.is_empty() || round >= ROUNDS_PER_LEADER || yield_to_guard {
                    self.release(&mut group);
                    return;
                }
                std::mem::take(&mut group.queue)
            };
            let (waiters, payloads): (Vec<_>, Vec<_>) =
                batch.into_iter().map(|p| (p.waiter, p.payloads)).unzip();
            for (waiter, result) in waiters.iter().zip(self.lead(&payloads)) {
                waiter.set(Slot::Done(result));
            }
        }
    }

    /// Gives up the right to write: to the first queued appender if nobody waits
    /// for a guard, otherwise to whoever takes it next.
    fn release(&self, group: &mut Group) {
        if group.guard_waiters == 0
            && let Some(next) = group.queue.first()
        {
            next.waiter.set(Slot::Lead);
        } else {
            group.busy = false;
            // Only a guard waits on this (counted under the same lock): with
            // none, the wake would be a system call for nobody.
            if group.guard_waiters > 0 {
                self.inner.group_changed.notify_all();
            }
        }
    }

    /// Runs one group commit for `queued`; one result per queued request.
    fn lead(&self, batches: &[Vec<Vec<u8>>]) -> Vec<Result<CursorRange, LogError>> {
        let outcome = (|| {
            let mut tail = lock(&self.inner.tail);
            let _lock = self.storage_lock()?;
            self.catch_up(&mut tail)?;
            tail.write(self.inner.storage.as_ref(), &self.inner.options, batches)
        })();
        match outcome {
            Ok(ranges) => ranges.into_iter().map(Ok).collect(),
            Err(error) => batches.iter().map(|_| Err(error.clone())).collect(),
        }
    }

    fn storage_lock(&self) -> Result<Box<dyn StorageLock>, LogError> {
        let storage = &self.inner.storage;
        storage
            .lock()
            .map_err(|e| LogError::io("lock", storage.describe(crate::LOCK_FILE), e))
    }

    fn catch_up(&self, tail: &mut Tail) -> Result<(), LogError> {
        if let Some(reason) = &tail.poisoned {
            return Err(LogError::Poisoned {
                reason: reason.clone(),
            });
        }
        let mut truncations = Vec::new();
        let result = tail.catch_up(
            self.inner.storage.as_ref(),
            &self.inner.options,
            &mut truncations,
        );
        lock(&self.inner.truncations).extend(truncations);
        result
    }

    fn check_sizes(&self, payloads: &[&[u8]]) -> Result<(), LogError> {
        let max = self.inner.options.max_record_bytes;
        for payload in payloads {
            if payload.len() > max as usize {
                return Err(LogError::RecordTooLarge {
                    len: payload.len(),
                    max,
                });
            }
        }
        Ok(())
    }

    /// Takes the exclusive right to append, across threads and processes, with the
    /// log caught up: the caller can read up to [`AppendGuard::next_cursor`], decide,
    /// and append knowing nothing else was appended in between.
    pub fn lock(&self) -> Result<AppendGuard<'_>, LogError> {
        let inner = &self.inner;
        let mut group = lock(&inner.group);
        group.guard_waiters += 1;
        while group.busy {
            group = inner
                .group_changed
                .wait(group)
                .unwrap_or_else(|poison| poison.into_inner());
        }
        group.guard_waiters -= 1;
        group.busy = true;
        drop(group);
        let mut guard = AppendGuard {
            log: self,
            tail: lock(&inner.tail),
            storage_lock: None,
        };
        guard.storage_lock = Some(self.storage_lock()?);
        self.catch_up(&mut guard.tail)?;
        Ok(guard)
    }

    /// The cursor the next appended record would get, as last seen by this process.
    pub fn next_cursor(&self) -> Cursor {
        Cursor(lock(&self.inner.tail).next_cursor)
    }
}

/// Where an append's records went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    /// Their cursors.
    pub range: CursorRange,
    /// Where the first began (`None` when the log had no segment yet).
    pub from: Option<ReadPosition>,
    /// Where the last began, and its checksum.
    pub last: Option<(ReadPosition, u32)>,
    /// Where the next record will begin.
    pub end: Option<ReadPosition>,
    /// Where each record began, in order (a batch may start a new segment
    /// part way through): a reader started at one with
    /// [`crate::read_dir_at`] reads that record first.
    pub records: Vec<ReadPosition>,
}

/// Exclusive, caught-up access to the end of the log; see [`Log::lock`].
#[derive(Debug)]
pub struct AppendGuard<'a> {
    log: &'a Log,
    tail: MutexGuard<'a, Tail>,
    storage_lock: Option<Box<dyn StorageLock>>,
}

impl AppendGuard<'_> {
    /// The cursor the next record will get: everything before it is in the log.
    pub fn next_cursor(&self) -> Cursor {
        Cursor(self.tail.next_cursor)
    }

    /// Where the next record will begin (`None` before the first segment):
    /// a reader that [stands there](crate::LogReader::stands_at) has read
    /// the whole log.
    pub fn position(&self) -> Option<ReadPosition> {
        self.tail.position()
    }

    /// Appends `payloads` durably while holding the lock.
    pub fn append(&mut self, payloads: &[&[u8]]) -> Result<CursorRange, LogError> {
        self.append_placed(payloads).map(|placed| placed.range)
    }

    /// [`append`](Self::append), saying where the records went, so that a
    /// reader of this process at the end of the log can move past them
    /// without reading them back ([`crate::LogReader::pass`]).
    pub fn append_placed(&mut self, payloads: &[&[u8]]) -> Result<Placed, LogError> {
        self.write_placed(payloads, SyncWhen::Now)
    }

    /// [`append_placed`](Self::append_placed), running `during` while the
    /// records are made durable: once they are written (readable by every
    /// process, and kept should this one die) and while `fdatasync` runs on
    /// another thread. Returns once both are done, so work that needs the
    /// records placed but not durable costs no time of its own. A failed
    /// sync poisons the log as any failed append does; `during` has run by
    /// then, and its result is dropped.
    pub fn append_placed_overlapping<R>(
        &mut self,
        payloads: &[&[u8]],
        during: impl FnOnce(&Placed) -> R,
    ) -> Result<(Placed, R), LogError> {
        let placed = self.write_placed(payloads, SyncWhen::Later)?;
        let segment = self.tail.segment.as_ref().expect("a segment was written");
        let (file, name) = (Arc::clone(&segment.file), segment.name.clone());
        let mut syncer = lock(&self.log.inner.syncer);
        let syncing = Syncer::send(&mut syncer, Arc::clone(&file));
        let result = during(&placed);
        let synced = match syncing {
            Some(syncer) => syncer
                .done
                .recv()
                .unwrap_or_else(|_| Err(std::io::Error::other("the thread syncing the log ended"))),
            // No thread to be had: sync here, after `during`.
            None => file.sync_data(),
        };
        drop(syncer);
        let storage = self.log.inner.storage.as_ref();
        match synced {
            Ok(()) => Ok((placed, result)),
            Err(e) => {
                let error = LogError::io("fdatasync", storage.describe(&name), e);
                Err(self.tail.poison(&error))
            }
        }
    }

    fn write_placed(&mut self, payloads: &[&[u8]], when: SyncWhen) -> Result<Placed, LogError> {
        self.log.check_sizes(payloads)?;
        let batch = vec![payloads.iter().map(|p| p.to_vec()).collect()];
        let inner = &self.log.inner;
        let from = self.tail.position();
        let ranges = self
            .tail
            .write_then(inner.storage.as_ref(), &inner.options, &batch, when)?;
        Ok(Placed {
            range: ranges[0],
            from,
            last: self.tail.last_written,
            end: self.tail.position(),
            records: std::mem::take(&mut self.tail.written),
        })
    }
}

impl Drop for AppendGuard<'_> {
    fn drop(&mut self) {
        self.storage_lock = None;
        let mut group = lock(&self.log.inner.group);
        self.log.release(&mut group);
    }
}
