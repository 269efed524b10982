//! The log's error type: every variant carries what a person needs to find the problem.

use std::io;
use std::sync::Arc;

use crate::format::HeaderProblem;

/// Why a record or segment failed validation.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Damage {
    /// The segment header is invalid.
    SegmentHeader(HeaderProblem),
    /// The record header is invalid.
    RecordHeader(HeaderProblem),
    /// The record's declared length exceeds the limit.
    Length {
        /// Declared payload length.
        declared: u32,
        /// The limit in force.
        max: u32,
    },
    /// The record's checksum does not match its bytes.
    Checksum {
        /// Checksum stored in the record.
        stored: u32,
        /// Checksum computed over header and payload.
        computed: u32,
    },
    /// The record carries a different cursor than its position implies.
    Cursor {
        /// The cursor this position must hold.
        expected: u64,
        /// The cursor the record carries.
        found: u64,
    },
    /// The record does not chain to the record before it.
    Chain {
        /// Checksum of the previous record.
        expected: u32,
        /// Previous checksum the record carries.
        found: u32,
    },
    /// Bytes end in the middle of a record.
    Incomplete {
        /// Bytes present from the record's start.
        present: u64,
    },
    /// A file is shorter than bytes already read from it as valid.
    Shrunk {
        /// Length known to be valid.
        known: u64,
        /// Length now.
        now: u64,
    },
    /// A segment does not start where the previous one ended.
    SegmentGap {
        /// The first cursor the segment should have.
        expected: u64,
        /// The first cursor its header or name declares.
        found: u64,
    },
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Damage::SegmentHeader(p) => write!(f, "segment header: {p}"),
            Damage::RecordHeader(p) => write!(f, "record header: {p}"),
            Damage::Length { declared, max } => {
                write!(f, "declared length {declared} exceeds the limit {max}")
            }
            Damage::Checksum { stored, computed } => write!(
                f,
                "checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
            ),
            Damage::Cursor { expected, found } => {
                write!(f, "cursor {found} where {expected} was expected")
            }
            Damage::Chain { expected, found } => write!(
                f,
                "chain broken: previous checksum {found:#010x}, expected {expected:#010x}"
            ),
            Damage::Incomplete { present } => {
                write!(f, "record incomplete: only {present} bytes present")
            }
            Damage::Shrunk { known, now } => {
                write!(f, "file shrank from {known} to {now} bytes")
            }
            Damage::SegmentGap { expected, found } => write!(
                f,
                "segment starts at cursor {found} where {expected} was expected"
            ),
        }
    }
}

/// Errors of the log.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// An operating-system error.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory involved.
        path: String,
        /// The underlying error.
        source: Arc<io::Error>,
    },
    /// A damaged record with valid records after it: nothing may be written until a
    /// person looks. Every byte is kept.
    #[error(
        "log corrupt in {segment} at byte offset {offset} (cursor {cursor}): {damage}; \
         valid data follows ({followed_by}), so this is not a torn tail; nothing was dropped"
    )]
    Corrupt {
        /// The segment file.
        segment: String,
        /// Byte offset of the damaged record within the segment.
        offset: u64,
        /// The cursor the damaged record should hold.
        cursor: u64,
        /// What is wrong.
        damage: Damage,
        /// Where the valid data after the damage is, in words.
        followed_by: String,
    },
    /// A segment or record header with a format version this build does not read:
    /// written by a newer planb, or damaged. Either way it is never truncated or
    /// skipped.
    #[error(
        "{segment} at byte offset {offset} has log format version {version}, which this build does not read \
         (written by a newer planb, or damaged); nothing was changed"
    )]
    NewerFormat {
        /// The segment file.
        segment: String,
        /// Byte offset of the header.
        offset: u64,
        /// The version found.
        version: u16,
    },
    /// A payload over the record size limit.
    #[error("record of {len} bytes exceeds the limit of {max} bytes")]
    RecordTooLarge {
        /// Payload length.
        len: usize,
        /// The limit in force.
        max: u32,
    },
    /// A write or sync failed (now or earlier); the writer refuses all
    /// further appends, because the kernel may have dropped the unsynced pages
    /// and a retry could report success falsely. Reopening the log (a new
    /// process) recovers: it truncates whatever was not acknowledged.
    #[error(
        "the log stopped taking writes after a failed write or sync ({reason}); nothing more \
         is recorded until planb restarts: fix the cause, then restart it (in Claude Code: \
         /mcp, reconnect planb); everything recorded before the failure is kept"
    )]
    Poisoned {
        /// The original failure.
        reason: String,
    },
    /// Appends were attempted on a read-only log.
    #[error("log opened read-only")]
    ReadOnly,
}

impl LogError {
    pub(crate) fn io(op: &'static str, path: String, source: io::Error) -> LogError {
        LogError::Io {
            op,
            path,
            source: Arc::new(source),
        }
    }
}
