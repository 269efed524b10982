//! `state.snapshot`: the folded [`State`] saved with where it stands in the
//! log, so opening a store folds only the events after it.
//!
//! ```text
//! offset  size  field (integers little-endian)
//! 0       4     magic b"PBSF" (planb state file)
//! 4       4     file format version (1)
//! 8       8     cursor c: the state's last cursor
//! 16      8     segment: first cursor of the segment holding record c
//! 24      8     offset of record c in that segment
//! 32      4     checksum of the record before c (the chain c continues)
//! 36      4     checksum of record c
//! 40      8     n: length of the state bytes
//! 48      4     crc32 of bytes 0..48 (this field zeroed) and the state bytes
//! 52      n     the state (`State::encode_snapshot`)
//! ```
//!
//! Opening reads record c again at the kept position and requires its
//! checksum; only then is the state used and the log read on from there. A
//! snapshot that fails any check (damaged, cut, written by another version,
//! of another log, past the end of this one) is ignored and the log folded
//! from the start — a snapshot is a projection like the others: it can be
//! deleted at any time, and is not fsynced. It is replaced through a temp
//! name and a rename (`files::replace_file`), so readers see a whole file or none; several
//! processes may each replace it, the last rename wins, and an older one
//! only means a longer tail to fold.

use std::io::Write;
use std::sync::Arc;

use planb_core::{Cursor, State};
use planb_log::{LogOptions, LogReader, ReadPosition, Storage};

use crate::root::DataRoot;

const MAGIC: [u8; 4] = *b"PBSF";
const FORMAT: u32 = 1;
const HEADER_LEN: usize = 52;
const CRC_AT: usize = 48;

/// Where a state stands in the log: its last record, and how to find it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Anchor {
    /// Where record `c` (the state's last) begins.
    pub(crate) position: ReadPosition,
    /// Its checksum.
    pub(crate) checksum: u32,
}

/// A state read from its snapshot, and a reader positioned after it.
pub(crate) struct Loaded {
    pub(crate) state: State,
    pub(crate) reader: LogReader,
    pub(crate) anchor: Anchor,
}

/// The snapshot's cursor as its header claims it, checksum verified, or
/// `None` without a readable snapshot. (A projection's witness of how far the
/// log once went, like `sessions.cursor`.)
pub(crate) fn claimed_cursor(root: &DataRoot) -> Option<Cursor> {
    let bytes = std::fs::read(root.state_snapshot_path()).ok()?;
    parse(&bytes)
        .ok()
        .map(|(anchor, _)| anchor.position.cursor.0)
        .map(Cursor)
}

/// Why the snapshot is not used (or could not be written).
#[derive(Debug, thiserror::Error)]
pub(crate) enum SnapshotProblem {
    /// The data root has none.
    #[error("no snapshot")]
    None,
    /// It cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Unreadable {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("shorter than its header")]
    Short,
    #[error("not a planb state file")]
    NotStateFile,
    #[error("file format {0}, this planb reads {FORMAT}")]
    Format(u32),
    #[error("holds {held} state bytes, its header says {said}")]
    Length { held: u64, said: u64 },
    #[error("checksum mismatch")]
    Checksum,
    /// Its anchor is no record of this log.
    #[error("its position is not in this log: {0}")]
    NotInLog(planb_log::LogError),
    #[error("the log holds another record at its cursor")]
    OtherRecord,
    #[error("the log ends before its cursor")]
    LogEndsBefore,
    /// The state does not decode, or cannot be encoded.
    #[error(transparent)]
    State(#[from] planb_core::state::SnapshotError),
    #[error("the state ends at cursor {state}, the header says {header}")]
    CursorMismatch {
        state: Cursor,
        header: planb_log::Cursor,
    },
    /// It could not be written.
    #[error(transparent)]
    Write(Box<crate::StoreError>),
}

/// Reads the snapshot and checks it against the log, or says why not.
pub(crate) fn load(
    root: &DataRoot,
    storage: &Arc<dyn Storage>,
    options: LogOptions,
) -> Result<Loaded, SnapshotProblem> {
    let path = root.state_snapshot_path();
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Err(SnapshotProblem::None);
        }
        Err(source) => return Err(SnapshotProblem::Unreadable { path, source }),
    };
    let (anchor, body) = parse(&bytes)?;
    let mut reader = LogReader::at(Arc::clone(storage), options, anchor.position)
        .map_err(SnapshotProblem::NotInLog)?;
    match reader.next() {
        Ok(Some(record)) if record.checksum == anchor.checksum => {}
        Ok(Some(_)) => return Err(SnapshotProblem::OtherRecord),
        Ok(None) => return Err(SnapshotProblem::LogEndsBefore),
        Err(error) => return Err(SnapshotProblem::NotInLog(error)),
    }
    let state = State::decode_snapshot(body)?;
    if state.last_cursor().0 != anchor.position.cursor.0 {
        return Err(SnapshotProblem::CursorMismatch {
            state: state.last_cursor(),
            header: anchor.position.cursor,
        });
    }
    Ok(Loaded {
        state,
        reader,
        anchor,
    })
}

/// Writes `state`, whose last record is `anchor`, as the data root's
/// snapshot. Returns the bytes written.
pub(crate) fn save(root: &DataRoot, state: &State, anchor: Anchor) -> Result<u64, SnapshotProblem> {
    debug_assert_eq!(state.last_cursor().0, anchor.position.cursor.0);
    let body = state.encode_snapshot()?;
    let mut header = [0u8; HEADER_LEN];
    header[0..4].copy_from_slice(&MAGIC);
    header[4..8].copy_from_slice(&FORMAT.to_le_bytes());
    header[8..16].copy_from_slice(&anchor.position.cursor.0.to_le_bytes());
    header[16..24].copy_from_slice(&anchor.position.segment.to_le_bytes());
    header[24..32].copy_from_slice(&anchor.position.offset.to_le_bytes());
    header[32..36].copy_from_slice(&anchor.position.prev_checksum.to_le_bytes());
    header[36..40].copy_from_slice(&anchor.checksum.to_le_bytes());
    header[40..48].copy_from_slice(&(body.len() as u64).to_le_bytes());
    let crc = checksum(&header, &body);
    header[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
    crate::files::replace_file(&root.state_snapshot_path(), |file| {
        file.write_all(&header)?;
        file.write_all(&body)
    })
    .map_err(|e| SnapshotProblem::Write(Box::new(e)))?;
    Ok((HEADER_LEN + body.len()) as u64)
}

fn checksum(header: &[u8; HEADER_LEN], body: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&header[..CRC_AT]);
    hasher.update(&[0; 4]);
    hasher.update(body);
    hasher.finalize()
}

fn parse(bytes: &[u8]) -> Result<(Anchor, &[u8]), SnapshotProblem> {
    let header: &[u8; HEADER_LEN] = bytes
        .get(..HEADER_LEN)
        .and_then(|h| h.try_into().ok())
        .ok_or(SnapshotProblem::Short)?;
    let u64_at = |at: usize| u64::from_le_bytes(header[at..at + 8].try_into().expect("8 bytes"));
    let u32_at = |at: usize| u32::from_le_bytes(header[at..at + 4].try_into().expect("4 bytes"));
    if header[0..4] != MAGIC {
        return Err(SnapshotProblem::NotStateFile);
    }
    if u32_at(4) != FORMAT {
        return Err(SnapshotProblem::Format(u32_at(4)));
    }
    let len = u64_at(40);
    let body = &bytes[HEADER_LEN..];
    if body.len() as u64 != len {
        let held = body.len() as u64;
        return Err(SnapshotProblem::Length { held, said: len });
    }
    if checksum(header, body) != u32_at(CRC_AT) {
        return Err(SnapshotProblem::Checksum);
    }
    let anchor = Anchor {
        position: ReadPosition {
            segment: u64_at(16),
            offset: u64_at(24),
            cursor: planb_log::Cursor(u64_at(8)),
            prev_checksum: u32_at(32),
        },
        checksum: u32_at(36),
    };
    Ok((anchor, body))
}

/// What [`check_snapshot`] found.
#[derive(Debug, Clone, PartialEq)]
pub enum SnapshotCheck {
    /// There is no `state.snapshot`.
    Absent,
    /// It matches the log and equals the fold of the log up to its cursor.
    Holds {
        /// The cursor it stands at.
        cursor: Cursor,
        /// Its size in bytes.
        bytes: u64,
    },
    /// It cannot be used (damaged, another format or version, another log):
    /// the next store to open ignores it and folds the whole log.
    Unusable {
        /// Why.
        reason: String,
    },
    /// It stands past the end of the log: a witness of a lost tail.
    PastEnd {
        /// The cursor it stands at.
        cursor: Cursor,
    },
    /// It matches the log, but its state is not what folding the log up to
    /// its cursor gives.
    Differs {
        /// The cursor it stands at.
        cursor: Cursor,
    },
}

/// Checks `state.snapshot` against a fold of the log (which ends at
/// `log_end`) up to its cursor. Writes nothing.
pub fn check_snapshot(
    root: &DataRoot,
    storage: &Arc<dyn Storage>,
    log_end: Cursor,
) -> Result<SnapshotCheck, crate::StoreError> {
    let path = root.state_snapshot_path();
    let bytes = match std::fs::metadata(&path) {
        Ok(meta) => meta.len(),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Ok(SnapshotCheck::Absent);
        }
        Err(source) => {
            return Err(crate::StoreError::Io {
                op: "read",
                path: path.display().to_string(),
                source,
            });
        }
    };
    let options = LogOptions::default();
    let loaded = match load(root, storage, options) {
        Ok(loaded) => loaded,
        Err(reason) => {
            return Ok(match claimed_cursor(root) {
                Some(cursor) if cursor > log_end => SnapshotCheck::PastEnd { cursor },
                _ => SnapshotCheck::Unusable {
                    reason: reason.to_string(),
                },
            });
        }
    };
    let cursor = loaded.state.last_cursor();
    let mut reader = LogReader::new(Arc::clone(storage), options, planb_log::Cursor(1));
    let mut folded = State::default();
    while folded.last_cursor() < cursor {
        let Some(record) = reader.next()? else { break };
        let envelope = planb_core::decode(&record.payload, Cursor(record.cursor.0))?;
        folded.apply(&envelope);
    }
    Ok(if folded == loaded.state {
        SnapshotCheck::Holds { cursor, bytes }
    } else {
        SnapshotCheck::Differs { cursor }
    })
}
