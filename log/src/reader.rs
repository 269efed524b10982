//! Reading the log from any cursor and following its tail as others append.
//!
//! A reader never writes or locks. Damage at the very end of the log may be a
//! record another process is writing right now, so the reader reports "nothing
//! more yet" and looks again on the next call; damage with valid data after it
//! is corruption and an error.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Damage, LogError};
use crate::format::SEGMENT_HEADER_LEN;
use crate::scan::{Parsed, SegmentFile, classify, list_segments, open_segment};
use crate::storage::Storage;
use crate::{Cursor, LogOptions};

/// One record read from the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The record's cursor.
    pub cursor: Cursor,
    /// Its payload, as appended.
    pub payload: Vec<u8>,
    /// Its checksum (which the next record's header repeats).
    pub checksum: u32,
    /// Where it begins: a reader started there with [`LogReader::at`] reads
    /// it again (and its checksum can be compared with one kept), then the
    /// records after it.
    pub position: ReadPosition,
}

/// Where a record begins: enough to start another reader there later
/// without reading what lies before it (a state snapshot keeps the position
/// of the last record it reflects).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadPosition {
    /// The first cursor of the segment, which names its file.
    pub segment: u64,
    /// Byte offset of the next record in that segment.
    pub offset: u64,
    /// Cursor of the next record.
    pub cursor: Cursor,
    /// Checksum of the record before it, which the next record must repeat.
    pub prev_checksum: u32,
}

/// A position in the log that reads forward, record by record.
#[derive(Debug)]
pub struct LogReader {
    storage: Arc<dyn Storage>,
    options: LogOptions,
    segment: Option<SegmentFile>,
    offset: u64,
    next_cursor: u64,
    prev_checksum: u32,
    /// Records before this cursor are validated but not returned.
    from: u64,
    /// When the reader last listed the log's segments at the end of one and
    /// found no next segment.
    listed_empty_at: Option<Instant>,
}

/// How long a reader at the end of a segment trusts that no other segment
/// but the one named after its next cursor can follow (see
/// [`LogReader::enter_next_segment`]).
pub(crate) const RELIST_AFTER: Duration = Duration::from_secs(1);

impl LogReader {
    /// A reader that returns records from cursor `from` on (cursor 1 is the first record).
    pub fn new(storage: Arc<dyn Storage>, options: LogOptions, from: Cursor) -> LogReader {
        LogReader {
            storage,
            options,
            segment: None,
            offset: 0,
            next_cursor: 1,
            prev_checksum: 0,
            from: from.0.max(1),
            listed_empty_at: None,
        }
    }

    /// A reader that continues from `position`, a [`Record::position`]
    /// taken earlier from a reader on the same log. Only the
    /// segment's header is checked here; the first record read must have the
    /// position's cursor and continue its checksum, so a position that does
    /// not belong to this log shows up as damage on the first
    /// [`LogReader::next`] (callers that keep positions across restarts should
    /// also check that record's checksum against one they kept).
    pub fn at(
        storage: Arc<dyn Storage>,
        options: LogOptions,
        position: ReadPosition,
    ) -> Result<LogReader, LogError> {
        let mut reader = LogReader::new(storage, options, position.cursor);
        let refused = |reader: &LogReader, kind, message: String| {
            LogError::io(
                "read",
                reader
                    .storage
                    .describe(&crate::format::segment_name(position.segment)),
                std::io::Error::new(kind, message),
            )
        };
        if !reader.enter(position.segment, None)? {
            return Err(refused(
                &reader,
                std::io::ErrorKind::InvalidData,
                "the segment's header is damaged or incomplete".into(),
            ));
        }
        let header_end = SEGMENT_HEADER_LEN as u64;
        if position.offset < header_end || position.cursor.0 < position.segment {
            return Err(refused(
                &reader,
                std::io::ErrorKind::InvalidInput,
                format!(
                    "position at offset {} for cursor {} lies outside the segment",
                    position.offset, position.cursor.0
                ),
            ));
        }
        reader.offset = position.offset;
        reader.next_cursor = position.cursor.0;
        reader.prev_checksum = position.prev_checksum;
        Ok(reader)
    }

    /// Whether the next record this reader reads begins at `position` (in a
    /// segment it has entered).
    pub fn stands_at(&self, position: ReadPosition) -> bool {
        self.segment.as_ref().is_some_and(|segment| {
            segment.first_cursor == position.segment
                && self.offset == position.offset
                && self.next_cursor == position.cursor.0
                && self.prev_checksum == position.prev_checksum
        })
    }

    /// Moves past the records of `placed`, an append this process just made,
    /// without reading them back: only when this reader stands where they
    /// begin and they all lie in that one segment. Says whether it moved.
    pub fn pass(&mut self, placed: &crate::Placed) -> bool {
        let (Some(from), Some(end)) = (placed.from, placed.end) else {
            return false;
        };
        if !self.stands_at(from) || end.segment != from.segment {
            return false;
        }
        self.offset = end.offset;
        self.next_cursor = end.cursor.0;
        self.prev_checksum = end.prev_checksum;
        true
    }

    /// The cursor of the record the next successful [`LogReader::next`] returns.
    pub fn next_cursor(&self) -> Cursor {
        Cursor(self.next_cursor.max(self.from))
    }

    /// The cursor after the last record read or passed over on the way to
    /// the first one asked for: at the end of a log shorter than that, its
    /// end plus one.
    pub fn passed_to(&self) -> Cursor {
        Cursor(self.next_cursor)
    }

    /// The next record, or `None` if the reader is at the end of the log for now.
    #[allow(
        clippy::should_implement_trait,
        reason = "not an Iterator: None means 'nothing yet' and a later call may return more"
    )]
    pub fn next(&mut self) -> Result<Option<Record>, LogError> {
        loop {
            if self.segment.is_none() && !self.enter_first_segment()? {
                return Ok(None);
            }
            let segment = self.segment.as_mut().expect("entered a segment above");
            let describe = self.storage.describe(&segment.name);
            let segment_first = segment.first_cursor;
            let parsed = segment
                .parse(
                    self.offset,
                    self.next_cursor,
                    self.prev_checksum,
                    self.options.max_record_bytes,
                )
                .map_err(|e| LogError::io("read", describe.clone(), e))?;
            match parsed {
                Parsed::Record {
                    cursor,
                    checksum,
                    payload,
                    next_offset,
                } => {
                    let record = (cursor >= self.from).then(|| Record {
                        cursor: Cursor(cursor),
                        payload: payload.to_vec(),
                        checksum,
                        position: ReadPosition {
                            segment: segment_first,
                            offset: self.offset,
                            cursor: Cursor(cursor),
                            prev_checksum: self.prev_checksum,
                        },
                    });
                    self.offset = next_offset;
                    self.next_cursor = self.next_cursor.saturating_add(1);
                    self.prev_checksum = checksum;
                    if record.is_some() {
                        return Ok(record);
                    }
                }
                Parsed::End => {
                    if !self.enter_next_segment()? {
                        return Ok(None);
                    }
                }
                Parsed::Damaged(damage) => {
                    if self.completed_since(damage, &describe)? {
                        continue;
                    }
                    // Possibly a record being written right now: look again later.
                    return Ok(None);
                }
            }
        }
    }

    /// Whether to read on after `damage` at the reader's position: false for
    /// damage at the very end (possibly a record being written right now),
    /// true when a writer has completed the record since; corruption is an
    /// error.
    fn completed_since(&mut self, damage: Damage, describe: &str) -> Result<bool, LogError> {
        let segment = self
            .segment
            .as_mut()
            .expect("damage is found in an entered segment");
        let verdict = classify(
            self.storage.as_ref(),
            segment,
            self.offset,
            self.next_cursor,
            damage,
            self.options.max_record_bytes,
        );
        segment.forget();
        let Err(error) = verdict else {
            return Ok(false);
        };
        // A writer may have completed the record (or replaced a torn
        // tail) between the two reads: valid data found after the
        // damage is only corruption if the damage is still there.
        let again = segment
            .parse(
                self.offset,
                self.next_cursor,
                self.prev_checksum,
                self.options.max_record_bytes,
            )
            .map_err(|e| LogError::io("read", describe.to_owned(), e))?;
        if matches!(again, Parsed::Damaged(_)) {
            return Err(error);
        }
        Ok(true)
    }

    /// Positions the reader at the start of the last segment that begins at or
    /// before `from`. Returns false if the log has no segment yet.
    fn enter_first_segment(&mut self) -> Result<bool, LogError> {
        let segments = list_segments(self.storage.as_ref())?;
        let Some((first, _)) = segments
            .iter()
            .rev()
            .find(|(first, _)| *first <= self.from)
            .or(segments.first())
        else {
            return Ok(false);
        };
        self.enter(*first, None)
    }

    /// At the end of the current segment: moves into the segment that starts at
    /// `next_cursor` if it exists. Returns false if there is none (yet).
    ///
    /// A writer names a new segment after its first cursor, so that name is
    /// tried first and following the tail costs no directory listing. The
    /// segments are listed (which finds a later segment that leaves a gap: a
    /// damaged log) when that name is missing, at most once per
    /// [`RELIST_AFTER`] while it stays missing. A segment that ends short
    /// enough that no writer can have closed it has no successor to try.
    fn enter_next_segment(&mut self) -> Result<bool, LogError> {
        let current = self.segment.as_ref().map_or(0, |s| s.first_cursor);
        let next = crate::format::segment_name(self.next_cursor);
        // An empty segment is named after the next cursor itself.
        let opened = if self.next_cursor > current && self.options.may_have_rolled_at(self.offset) {
            self.storage.open(&next, false)
        } else {
            Err(std::io::ErrorKind::NotFound.into())
        };
        match opened {
            Ok(_) => {
                self.listed_empty_at = None;
                return self.enter(self.next_cursor, Some(self.prev_checksum));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if self
                    .listed_empty_at
                    .is_some_and(|at| at.elapsed() < RELIST_AFTER)
                {
                    return Ok(false);
                }
            }
            Err(_) => {}
        }
        let segments = list_segments(self.storage.as_ref())?;
        match segments.iter().find(|(first, _)| *first > current) {
            None => {
                self.listed_empty_at = Some(Instant::now());
                Ok(false)
            }
            Some((first, name)) if *first != self.next_cursor => Err(LogError::Corrupt {
                segment: self.storage.describe(name),
                offset: 0,
                cursor: self.next_cursor,
                damage: Damage::SegmentGap {
                    expected: self.next_cursor,
                    found: *first,
                },
                followed_by: "the segment's records".to_string(),
            }),
            Some((first, _)) => self.enter(*first, Some(self.prev_checksum)),
        }
    }

    /// Opens the segment starting at `first` and checks its header. `chain` is the
    /// checksum it must continue, when the previous segment was read.
    fn enter(&mut self, first: u64, chain: Option<u32>) -> Result<bool, LogError> {
        let mut segment = open_segment(self.storage.as_ref(), first, false)?;
        let describe = self.storage.describe(&segment.name);
        let header = segment
            .header()
            .map_err(|e| LogError::io("read", describe.clone(), e))?;
        let header = match header {
            Ok(header) => header,
            Err(damage) => {
                // A segment being created right now, or torn by a crash while rolling
                // over; corruption only if anything valid follows it.
                classify(
                    self.storage.as_ref(),
                    &mut segment,
                    0,
                    first,
                    damage,
                    self.options.max_record_bytes,
                )?;
                return Ok(false);
            }
        };
        let corrupt = |damage| LogError::Corrupt {
            segment: describe.clone(),
            offset: 0,
            cursor: first,
            damage,
            followed_by: "the segment's records".to_string(),
        };
        if header.first_cursor != first {
            return Err(corrupt(Damage::SegmentGap {
                expected: first,
                found: header.first_cursor,
            }));
        }
        if let Some(expected) = chain
            && header.prev_checksum != expected
        {
            return Err(corrupt(Damage::Chain {
                expected,
                found: header.prev_checksum,
            }));
        }
        self.segment = Some(segment);
        self.offset = SEGMENT_HEADER_LEN as u64;
        self.next_cursor = header.first_cursor;
        self.prev_checksum = header.prev_checksum;
        Ok(true)
    }

    /// Makes durable what the reader has read of the segment it stands in,
    /// whoever wrote it. A writer syncs its records before it acknowledges
    /// them, but a reader may read them in between: whatever records how
    /// far it read, durably, must call this first, or a power cut could
    /// leave it claiming records the log lost. Earlier segments were synced
    /// by their writers before the next one began.
    pub fn sync_read(&self) -> Result<(), LogError> {
        let Some(segment) = &self.segment else {
            return Ok(());
        };
        segment
            .file
            .sync_data()
            .map_err(|e| LogError::io("fdatasync", self.storage.describe(&segment.name), e))
    }

    /// Where the reader stands: segment name and byte offset (for reports).
    pub fn position(&self) -> Option<(String, u64)> {
        self.segment
            .as_ref()
            .map(|s| (self.storage.describe(&s.name), self.offset))
    }
}
