//! Full verification: every record's checksum, cursor and chain link, in every segment.

use std::sync::Arc;

use crate::reader::LogReader;
use crate::scan::{Verdict, classify, list_segments, open_segment};
use crate::storage::Storage;
use crate::{Cursor, LogError, LogOptions};

/// What [`verify`] found in a log that is not corrupt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// Segment files.
    pub segments: usize,
    /// Valid records.
    pub records: u64,
    /// Cursor of the last valid record (0 for an empty log).
    pub last_cursor: Cursor,
    /// Payload bytes in valid records.
    pub payload_bytes: u64,
    /// Bytes after the last valid record that a writer would truncate as a torn
    /// tail: (file, byte offset, length).
    pub torn_tail: Option<(String, u64, u64)>,
}

/// Reads the whole log once and checks everything; corruption is an error naming
/// the segment, offset and cursor. Writes nothing.
pub fn verify(storage: Arc<dyn Storage>, options: LogOptions) -> Result<VerifyReport, LogError> {
    let segments = list_segments(storage.as_ref())?;
    let mut reader = LogReader::new(Arc::clone(&storage), options, Cursor(1));
    let mut records = 0u64;
    let mut payload_bytes = 0u64;
    let mut last_cursor = Cursor(0);
    while let Some(record) = reader.next()? {
        records += 1;
        payload_bytes += record.payload.len() as u64;
        last_cursor = record.cursor;
    }
    let mut torn_tail = None;
    if let Some((name, offset)) = reader.position() {
        let current = segments
            .iter()
            .find(|(_, n)| storage.describe(n) == name)
            .map(|(first, _)| *first);
        if let Some(first) = current {
            let mut segment = open_segment(storage.as_ref(), first, false)?;
            let damage = segment
                .damage_after_end(offset)
                .map_err(|e| LogError::io("read", name.clone(), e))?;
            if let Some(damage) = damage {
                // Bytes after the records that are not the zeroed runway: a
                // torn tail, unless a valid record follows them.
                let Verdict::TornTail { bytes } = classify(
                    storage.as_ref(),
                    &mut segment,
                    offset,
                    last_cursor.0 + 1,
                    damage,
                    options.max_record_bytes,
                )?;
                torn_tail = Some((name.clone(), offset, bytes));
            } else if let Some((_, torn)) = segments.iter().find(|(f, _)| *f > first) {
                let file = storage
                    .open(torn, false)
                    .map_err(|e| LogError::io("open", storage.describe(torn), e))?;
                let len = file
                    .len()
                    .map_err(|e| LogError::io("stat", storage.describe(torn), e))?;
                torn_tail = Some((storage.describe(torn), 0, len));
            }
        }
    } else if let Some((_, torn)) = segments.first() {
        let file = storage
            .open(torn, false)
            .map_err(|e| LogError::io("open", storage.describe(torn), e))?;
        let len = file
            .len()
            .map_err(|e| LogError::io("stat", storage.describe(torn), e))?;
        torn_tail = Some((storage.describe(torn), 0, len));
    }
    Ok(VerifyReport {
        segments: segments.len(),
        records,
        last_cursor,
        payload_bytes,
        torn_tail,
    })
}
