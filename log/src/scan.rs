//! Reading records out of a segment and deciding what damaged bytes mean.
//!
//! The same code serves the writer's recovery, the tailing reader and `verify`,
//! so all three agree on what a valid record is and on the one rule that
//! separates a torn tail from corruption: damage with no valid record anywhere
//! after it, in the last segment, is a torn tail; anything else is corruption.

use std::io;

use crate::error::{Damage, LogError};
use crate::format::{
    HeaderProblem, RECORD_HEADER_LEN, RECORD_MAGIC, RecordHeader, SEGMENT_HEADER_LEN,
    SegmentHeader, parse_segment_name, segment_name,
};
use crate::storage::{Storage, StorageFile, read_full_at};

/// The most a buffered segment read fetches at once.
const READ_CHUNK_BYTES: usize = 1 << 20;

/// What the first read after [`SegmentFile::forget`] fetches: a reader at
/// the tail, with the segment's zeroed runway ahead of it, reads a page;
/// each further read in a row doubles, up to [`READ_CHUNK_BYTES`].
const FIRST_READ_BYTES: usize = 4 << 10;

/// A segment file with a read buffer in front of it.
///
/// Bytes are cached only as they were read; a request that reaches past the
/// buffer reads the file again, so a growing file is seen as it grows.
#[derive(Debug)]
pub(crate) struct SegmentFile {
    pub(crate) name: String,
    pub(crate) first_cursor: u64,
    pub(crate) file: std::sync::Arc<dyn StorageFile>,
    buf: Vec<u8>,
    buf_start: u64,
    /// What the next read that misses the buffer fetches.
    chunk: usize,
    /// Whether the last [`SegmentFile::bytes`] read the file (not the
    /// buffer).
    fresh: bool,
}

/// What lies at an offset of a segment.
#[derive(Debug)]
pub(crate) enum Parsed<'a> {
    /// A valid record.
    Record {
        cursor: u64,
        checksum: u32,
        payload: &'a [u8],
        next_offset: u64,
    },
    /// The records end here: the file ends, or the segment's zeroed
    /// runway begins (a record header is never all zeros).
    End,
    /// The bytes here are not a valid next record.
    Damaged(Damage),
}

impl SegmentFile {
    pub(crate) fn new(name: String, first_cursor: u64, file: Box<dyn StorageFile>) -> SegmentFile {
        let file = std::sync::Arc::from(file);
        SegmentFile {
            name,
            first_cursor,
            file,
            buf: Vec::new(),
            buf_start: 0,
            chunk: FIRST_READ_BYTES,
            fresh: false,
        }
    }

    /// Forgets cached bytes, so the next read sees the file as it is now.
    pub(crate) fn forget(&mut self) {
        self.buf.clear();
        self.buf_start = 0;
        self.chunk = FIRST_READ_BYTES;
    }

    /// Up to `len` bytes at `offset` (fewer at the end of the file).
    fn bytes(&mut self, offset: u64, len: usize) -> io::Result<&[u8]> {
        let buf_end = self.buf_start + self.buf.len() as u64;
        if offset < self.buf_start || offset + len as u64 > buf_end {
            // Size the read to what the file holds and to how far this
            // reading has gone, so a reader polling at the tail reads a page,
            // not the runway.
            let available = self.file.len()?.saturating_sub(offset);
            let want = (available.min(self.chunk as u64) as usize).max(len);
            self.chunk = (self.chunk * 2).min(READ_CHUNK_BYTES);
            self.buf.resize(want, 0);
            let got = read_full_at(self.file.as_ref(), offset, &mut self.buf)?;
            self.buf.truncate(got);
            self.buf_start = offset;
            self.fresh = true;
        } else {
            self.fresh = false;
        }
        let start = (offset - self.buf_start) as usize;
        let end = (start + len).min(self.buf.len());
        Ok(&self.buf[start..end])
    }

    /// Reads and validates the segment header.
    pub(crate) fn header(&mut self) -> io::Result<Result<SegmentHeader, Damage>> {
        let bytes = self.bytes(0, SEGMENT_HEADER_LEN)?;
        Ok(SegmentHeader::decode(bytes).map_err(Damage::SegmentHeader))
    }

    /// Whether the segment's zeroed runway begins at `offset`. Zeros kept
    /// from an earlier read may have become a record since: only zeros read
    /// now end the records, and they are not kept for the next look.
    fn runway_at(&mut self, offset: u64) -> io::Result<bool> {
        let zeros = |bytes: &[u8]| bytes.iter().all(|b| *b == 0);
        if !zeros(self.bytes(offset, RECORD_HEADER_LEN)?) {
            return Ok(false);
        }
        if !self.fresh {
            self.forget();
            if !zeros(self.bytes(offset, RECORD_HEADER_LEN)?) {
                return Ok(false);
            }
        }
        self.forget();
        Ok(true)
    }

    /// Parses the record at `offset`, which must be `expected_cursor` chained to `prev_checksum`.
    pub(crate) fn parse(
        &mut self,
        offset: u64,
        expected_cursor: u64,
        prev_checksum: u32,
        max_record_bytes: u32,
    ) -> io::Result<Parsed<'_>> {
        if self.runway_at(offset)? {
            return Ok(Parsed::End);
        }
        let head = self.bytes(offset, RECORD_HEADER_LEN)?;
        let present = head.len() as u64;
        let header = match RecordHeader::decode(head) {
            Ok(header) => header,
            Err(crate::format::HeaderProblem::Short) => {
                return Ok(Parsed::Damaged(Damage::Incomplete { present }));
            }
            Err(problem) => return Ok(Parsed::Damaged(Damage::RecordHeader(problem))),
        };
        if header.len > max_record_bytes {
            return Ok(Parsed::Damaged(Damage::Length {
                declared: header.len,
                max: max_record_bytes,
            }));
        }
        let total = RECORD_HEADER_LEN + header.len as usize;
        let bytes = self.bytes(offset, total)?;
        if bytes.len() < total {
            return Ok(Parsed::Damaged(Damage::Incomplete {
                present: bytes.len() as u64,
            }));
        }
        let start = (offset - self.buf_start) as usize;
        let payload = &self.buf[start + RECORD_HEADER_LEN..start + total];
        let computed = header.compute_checksum(payload);
        if computed != header.checksum {
            return Ok(Parsed::Damaged(Damage::Checksum {
                stored: header.checksum,
                computed,
            }));
        }
        if header.cursor != expected_cursor {
            return Ok(Parsed::Damaged(Damage::Cursor {
                expected: expected_cursor,
                found: header.cursor,
            }));
        }
        if header.prev_checksum != prev_checksum {
            return Ok(Parsed::Damaged(Damage::Chain {
                expected: prev_checksum,
                found: header.prev_checksum,
            }));
        }
        Ok(Parsed::Record {
            cursor: header.cursor,
            checksum: header.checksum,
            payload,
            next_offset: offset + total as u64,
        })
    }

    /// Offset of the first self-consistent record (magic, sane length, checksum)
    /// starting after `offset`, if any. Chain and cursor are not required: any record
    /// that validates on its own proves the damage is not at the end of the log.
    pub(crate) fn find_valid_after(
        &mut self,
        offset: u64,
        max_record_bytes: u32,
    ) -> io::Result<Option<u64>> {
        let len = self.file.len()?;
        if len <= offset + 1 {
            return Ok(None);
        }
        let mut rest = vec![0u8; (len - offset - 1) as usize];
        let got = read_full_at(self.file.as_ref(), offset + 1, &mut rest)?;
        rest.truncate(got);
        let mut at = 0;
        while let Some(found) = find_magic(&rest[at..]) {
            let start = at + found;
            if let Ok(header) = RecordHeader::decode(&rest[start..])
                && header.len <= max_record_bytes
            {
                let end = start + RECORD_HEADER_LEN + header.len as usize;
                if end <= rest.len()
                    && header.compute_checksum(&rest[start + RECORD_HEADER_LEN..end])
                        == header.checksum
                {
                    return Ok(Some(offset + 1 + start as u64));
                }
            }
            at = start + 1;
        }
        Ok(None)
    }
}

impl SegmentFile {
    /// The damage bytes other than the runway's zeros after the records'
    /// end at `offset` make: a torn record whose header never reached the
    /// disk, or worse (the caller classifies it). `None` when only zeros
    /// follow.
    pub(crate) fn damage_after_end(&self, offset: u64) -> io::Result<Option<Damage>> {
        let damaged = self.stray_end(offset)? > offset;
        Ok(damaged.then_some(Damage::RecordHeader(HeaderProblem::BadMagic)))
    }

    /// Where the bytes at and after `offset` stop holding anything but
    /// zeros: `offset` itself when only the runway (or nothing) follows.
    pub(crate) fn stray_end(&self, offset: u64) -> io::Result<u64> {
        let len = self.file.len()?;
        let mut end = offset;
        let mut at = offset;
        let rest = usize::try_from(len.saturating_sub(offset)).unwrap_or(usize::MAX);
        let mut chunk = vec![0u8; rest.min(READ_CHUNK_BYTES)];
        while at < len {
            let want = ((len - at) as usize).min(chunk.len());
            let got = read_full_at(self.file.as_ref(), at, &mut chunk[..want])?;
            if got == 0 {
                break;
            }
            if let Some(last) = chunk[..got].iter().rposition(|b| *b != 0) {
                end = at + last as u64 + 1;
            }
            at += got as u64;
        }
        Ok(end)
    }
}

fn find_magic(haystack: &[u8]) -> Option<usize> {
    haystack
        .windows(RECORD_MAGIC.len())
        .position(|w| w == RECORD_MAGIC)
}

/// The segments present, as (first cursor, name), sorted by cursor.
///
/// The log has no compaction, so the first segment must start at cursor 1: a
/// missing first segment (or a hand-made one at cursor 0) is corruption, not a
/// log that happens to start later.
pub(crate) fn list_segments(storage: &dyn Storage) -> Result<Vec<(u64, String)>, LogError> {
    let names = storage
        .list()
        .map_err(|e| LogError::io("list", storage.describe(""), e))?;
    let mut segments: Vec<(u64, String)> = names
        .into_iter()
        .filter_map(|name| parse_segment_name(&name).map(|cursor| (cursor, name)))
        .collect();
    segments.sort();
    if let Some((first, name)) = segments.first()
        && *first != 1
    {
        return Err(LogError::Corrupt {
            segment: storage.describe(name),
            offset: 0,
            cursor: 1,
            damage: Damage::SegmentGap {
                expected: 1,
                found: *first,
            },
            followed_by: "the segment's records; the segment holding cursor 1 is missing"
                .to_string(),
        });
    }
    Ok(segments)
}

/// Opens a segment by its first cursor.
pub(crate) fn open_segment(
    storage: &dyn Storage,
    first_cursor: u64,
    write: bool,
) -> Result<SegmentFile, LogError> {
    let name = segment_name(first_cursor);
    let file = storage
        .open(&name, write)
        .map_err(|e| LogError::io("open", storage.describe(&name), e))?;
    Ok(SegmentFile::new(name, first_cursor, file))
}

/// What damage at `offset` of `segment` means.
#[derive(Debug)]
pub(crate) enum Verdict {
    /// Nothing valid follows: a torn tail of `bytes` bytes.
    TornTail { bytes: u64 },
}

/// Classifies damage: a torn tail if the segment is the last one and no valid
/// record follows in it, otherwise [`LogError::Corrupt`].
pub(crate) fn classify(
    storage: &dyn Storage,
    segment: &mut SegmentFile,
    offset: u64,
    expected_cursor: u64,
    damage: Damage,
    max_record_bytes: u32,
) -> Result<Verdict, LogError> {
    let describe = storage.describe(&segment.name);
    if let Damage::RecordHeader(HeaderProblem::UnknownVersion(version))
    | Damage::SegmentHeader(HeaderProblem::UnknownVersion(version)) = damage
        && version != 0
    {
        // A torn write of this build's records is a prefix of correct bytes
        // over the runway's zeros, so it shows this version or 0, never
        // another: this is a newer build's data (or damage), and truncating
        // it could destroy acknowledged records.
        return Err(LogError::NewerFormat {
            segment: describe,
            offset,
            version,
        });
    }
    let corrupt = |followed_by: String| LogError::Corrupt {
        segment: describe.clone(),
        offset,
        cursor: expected_cursor,
        damage: damage.clone(),
        followed_by,
    };
    let later = list_segments(storage)?
        .into_iter()
        .find(|(first, _)| *first > segment.first_cursor);
    if let Some((_, name)) = later {
        return Err(corrupt(format!("segment {name}")));
    }
    let valid = segment
        .find_valid_after(offset, max_record_bytes)
        .map_err(|e| LogError::io("read", describe.clone(), e))?;
    if let Some(at) = valid {
        return Err(corrupt(format!("a valid record at byte offset {at}")));
    }
    let end = segment
        .stray_end(offset)
        .map_err(|e| LogError::io("read", describe.clone(), e))?;
    Ok(Verdict::TornTail {
        bytes: end.saturating_sub(offset),
    })
}
