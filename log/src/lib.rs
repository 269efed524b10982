//! `planb-log`: the append-only, checksummed, chained log that is planb's ground truth.
//!
//! The log stores opaque payloads as records with gapless, monotonic cursors (the
//! first record is cursor 1) in segment files. It knows nothing of events, JSON,
//! MCP or redb. The byte layout and every crash window are drawn in
//! `docs/log-format.md`.
//!
//! - [`Log::open`] recovers: a torn tail is truncated and reported in a
//!   [`RecoveryReport`]; damage followed by valid data is [`LogError::Corrupt`]
//!   and nothing is written or dropped.
//! - [`Log::append`] returns only once the records are durable (fdatasync; the
//!   directory is fsynced when a segment is created). Concurrent callers share one
//!   sync (group commit). Several processes may append to one directory: a file
//!   lock serialises them and each catches up on the others' records first.
//! - [`Log::lock`] gives exclusive, caught-up access for decide-then-append.
//! - [`LogReader`] reads from any cursor and follows the tail as others append.
//! - [`verify`] checks every record and the whole chain.
//!
//! All file access goes through [`Storage`]; [`sim::SimStorage`] simulates power
//! loss for crash tests.

mod error;
pub mod format;
pub mod fuzzing;
mod reader;
mod scan;
pub mod sim;
mod storage;
mod verify;
mod writer;

use std::path::Path;
use std::sync::Arc;

pub use error::{Damage, LogError};
pub use reader::{LogReader, ReadPosition, Record};
pub use storage::{FsStorage, LOCK_FILE, Storage, StorageFile, StorageLock};
pub use verify::{VerifyReport, verify};
pub use writer::{AppendGuard, Log, Placed};

/// The position of a record: 1 for the first record, then one more per record, in
/// one total order across all processes appending to the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Cursor(pub u64);

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// The cursors given to one append: `count` consecutive cursors from `first`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CursorRange {
    /// Cursor of the first record appended.
    pub first: Cursor,
    /// Number of records appended.
    pub count: u64,
}

impl CursorRange {
    /// Cursor of the last record appended (meaningless when `count` is 0).
    pub fn last(&self) -> Cursor {
        Cursor(self.first.0 + self.count.saturating_sub(1))
    }
}

/// Limits of a log. Every reader and writer of one directory must use the same
/// limits: a larger declared length than `max_record_bytes` is treated as
/// damage, and a writer trusts that no other writer closes a segment before
/// the next record would take it past `max_segment_bytes` (so it does not
/// look for a newer segment while the largest record still fits; it lists
/// the directory at least once a second regardless). A version that changes
/// either must not share a data root with one that does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogOptions {
    /// Largest payload accepted, in bytes.
    pub max_record_bytes: u32,
    /// A segment is closed once the next record would take it past this size.
    pub max_segment_bytes: u64,
}

impl LogOptions {
    /// Largest payload by default: 4 MiB. Larger artifacts belong in a blob store
    /// referenced by hash.
    pub const DEFAULT_MAX_RECORD_BYTES: u32 = 4 << 20;
    /// Segment size by default: 16 MiB, so recovery scans at most that much.
    pub const DEFAULT_MAX_SEGMENT_BYTES: u64 = 16 << 20;

    /// Whether a segment `len` bytes long can have been closed. A writer
    /// rolls over only when the next record would take the segment past
    /// `max_segment_bytes`; while the largest record still fits after `len`,
    /// no writer using these limits has, so no newer segment needs to be
    /// looked for.
    pub(crate) fn may_have_rolled_at(&self, len: u64) -> bool {
        len + format::RECORD_HEADER_LEN as u64 + u64::from(self.max_record_bytes)
            > self.max_segment_bytes
    }

    fn check(&self) {
        assert!(
            self.max_segment_bytes
                >= (format::SEGMENT_HEADER_LEN + format::RECORD_HEADER_LEN) as u64
                    + u64::from(self.max_record_bytes),
            "a segment must fit the largest record: {self:?}"
        );
    }
}

impl Default for LogOptions {
    fn default() -> LogOptions {
        LogOptions {
            max_record_bytes: LogOptions::DEFAULT_MAX_RECORD_BYTES,
            max_segment_bytes: LogOptions::DEFAULT_MAX_SEGMENT_BYTES,
        }
    }
}

/// A torn tail that recovery removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncation {
    /// The segment file.
    pub segment: String,
    /// Byte offset where the valid records ended.
    pub offset: u64,
    /// Bytes removed.
    pub bytes: u64,
    /// The cursor the first removed record would have had.
    pub cursor: Cursor,
    /// What was wrong with the first removed bytes.
    pub damage: Damage,
}

/// What [`Log::open`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Segment files after recovery.
    pub segments: usize,
    /// The cursor the next record will get.
    pub next_cursor: Cursor,
    /// Torn tails removed (at most one per crash).
    pub truncations: Vec<Truncation>,
}

/// Opens the log in `dir` for appending, creating the directory if needed.
pub fn open_dir(dir: &Path, options: LogOptions) -> Result<(Log, RecoveryReport), LogError> {
    let storage = FsStorage::open_writable(dir)
        .map_err(|e| LogError::io("open", dir.display().to_string(), e))?;
    Log::open(Arc::new(storage), options)
}

/// A reader over the log in `dir` that continues from `position` (see
/// [`LogReader::at`]); it creates, locks and writes nothing.
pub fn read_dir_at(
    dir: &Path,
    options: LogOptions,
    position: ReadPosition,
) -> Result<LogReader, LogError> {
    let storage = FsStorage::open_read_only(dir)
        .map_err(|e| LogError::io("open", dir.display().to_string(), e))?;
    LogReader::at(Arc::new(storage), options, position)
}

/// A reader over the log in `dir` that creates, locks and writes nothing.
pub fn read_dir(dir: &Path, options: LogOptions, from: Cursor) -> Result<LogReader, LogError> {
    let storage = FsStorage::open_read_only(dir)
        .map_err(|e| LogError::io("open", dir.display().to_string(), e))?;
    Ok(LogReader::new(Arc::new(storage), options, from))
}
