//! The on-disk byte layout of segments and records (drawn in `docs/log-format.md`).
//!
//! Everything here is pure: it turns headers into bytes and back and computes
//! checksums. Whether a byte range is a torn tail or corruption is decided by
//! the scanner, which knows what comes after it.

/// Magic bytes that open every segment file.
pub const SEGMENT_MAGIC: [u8; 8] = *b"PLANBLOG";
/// Magic bytes that open every record.
pub const RECORD_MAGIC: [u8; 4] = *b"PLBR";
/// The segment header format this code writes and the only one it reads.
pub const SEGMENT_VERSION: u16 = 1;
/// The record header format this code writes and the only one it reads.
pub const RECORD_VERSION: u16 = 1;
/// Size of the segment header in bytes.
pub const SEGMENT_HEADER_LEN: usize = 32;
/// Size of the record header in bytes.
pub const RECORD_HEADER_LEN: usize = 32;

// The layouts drawn below fill their headers exactly, field by field, the
// crc32 last; a field widened without its header is a compile error.
const _: () = assert!(
    SEGMENT_MAGIC.len()
        + size_of::<u16>() // version
        + 6 // reserved
        + size_of::<u64>() // first cursor
        + size_of::<u32>() // previous checksum
        + size_of::<u32>() // crc32
        == SEGMENT_HEADER_LEN
);
const _: () = assert!(
    RECORD_MAGIC.len()
        + size_of::<u16>() // version
        + size_of::<u16>() // flags
        + size_of::<u32>() // payload length
        + size_of::<u64>() // cursor
        + size_of::<u32>() // previous checksum
        + 4 // reserved
        + size_of::<u32>() // crc32
        == RECORD_HEADER_LEN
);

/// The header at offset 0 of every segment file.
///
/// ```text
/// 0..8   magic "PLANBLOG"
/// 8..10  segment format version, u16 LE
/// 10..16 reserved, zero
/// 16..24 cursor of the first record in this segment, u64 LE
/// 24..28 checksum of the last record of the previous segment (0 for the first), u32 LE
/// 28..32 crc32 of bytes 0..28, u32 LE
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Cursor of the first record the segment holds (or will hold).
    pub first_cursor: u64,
    /// Checksum of the record just before `first_cursor`, continuing the chain.
    pub prev_checksum: u32,
}

/// Why a header failed to validate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderProblem {
    /// Fewer bytes than a header needs.
    Short,
    /// The magic bytes are wrong.
    BadMagic,
    /// A format version this code does not know.
    UnknownVersion(u16),
    /// Reserved bytes are not zero.
    Reserved,
    /// The stored checksum does not match the bytes.
    Checksum {
        /// Checksum stored in the header.
        stored: u32,
        /// Checksum computed over the bytes.
        computed: u32,
    },
}

impl std::fmt::Display for HeaderProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeaderProblem::Short => write!(f, "header is incomplete"),
            HeaderProblem::BadMagic => write!(f, "bad magic"),
            HeaderProblem::UnknownVersion(v) => write!(f, "unknown format version {v}"),
            HeaderProblem::Reserved => write!(f, "reserved bytes are not zero"),
            HeaderProblem::Checksum { stored, computed } => write!(
                f,
                "checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
            ),
        }
    }
}

impl SegmentHeader {
    /// Encodes the header, checksum included.
    pub fn encode(&self) -> [u8; SEGMENT_HEADER_LEN] {
        let mut b = [0u8; SEGMENT_HEADER_LEN];
        b[0..8].copy_from_slice(&SEGMENT_MAGIC);
        b[8..10].copy_from_slice(&SEGMENT_VERSION.to_le_bytes());
        b[16..24].copy_from_slice(&self.first_cursor.to_le_bytes());
        b[24..28].copy_from_slice(&self.prev_checksum.to_le_bytes());
        let crc = crc32fast::hash(&b[0..28]);
        b[28..32].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes and validates a header.
    pub fn decode(bytes: &[u8]) -> Result<SegmentHeader, HeaderProblem> {
        let b = bytes
            .get(..SEGMENT_HEADER_LEN)
            .ok_or(HeaderProblem::Short)?;
        if b[0..8] != SEGMENT_MAGIC {
            return Err(HeaderProblem::BadMagic);
        }
        let stored = le_u32(&b[28..32]);
        let computed = crc32fast::hash(&b[0..28]);
        if stored != computed {
            return Err(HeaderProblem::Checksum { stored, computed });
        }
        let version = le_u16(&b[8..10]);
        if version != SEGMENT_VERSION {
            return Err(HeaderProblem::UnknownVersion(version));
        }
        if b[10..16].iter().any(|&x| x != 0) {
            return Err(HeaderProblem::Reserved);
        }
        Ok(SegmentHeader {
            first_cursor: le_u64(&b[16..24]),
            prev_checksum: le_u32(&b[24..28]),
        })
    }
}

/// The header in front of every record's payload.
///
/// ```text
/// 0..4   magic "PLBR"
/// 4..6   record format version, u16 LE
/// 6..8   flags, u16 LE, zero
/// 8..12  payload length in bytes, u32 LE
/// 12..20 cursor, u64 LE
/// 20..24 checksum of the previous record (the chain), u32 LE
/// 24..28 reserved, zero
/// 28..32 crc32 of bytes 0..28 followed by the payload, u32 LE
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    /// Payload length in bytes.
    pub len: u32,
    /// Cursor of this record.
    pub cursor: u64,
    /// Checksum of the record before this one.
    pub prev_checksum: u32,
    /// Checksum of this record, covering header and payload.
    pub checksum: u32,
}

impl RecordHeader {
    /// Builds the header for `payload` at `cursor`, computing its checksum.
    pub fn new(payload: &[u8], cursor: u64, prev_checksum: u32) -> RecordHeader {
        // The caller enforces the record size limit, far below u32::MAX.
        let len = u32::try_from(payload.len()).expect("payload length checked against the limit");
        let mut header = RecordHeader {
            len,
            cursor,
            prev_checksum,
            checksum: 0,
        };
        header.checksum = header.compute_checksum(payload);
        header
    }

    fn unsealed_bytes(&self) -> [u8; 28] {
        let mut b = [0u8; 28];
        b[0..4].copy_from_slice(&RECORD_MAGIC);
        b[4..6].copy_from_slice(&RECORD_VERSION.to_le_bytes());
        b[8..12].copy_from_slice(&self.len.to_le_bytes());
        b[12..20].copy_from_slice(&self.cursor.to_le_bytes());
        b[20..24].copy_from_slice(&self.prev_checksum.to_le_bytes());
        b
    }

    /// The checksum the header and `payload` should carry.
    pub fn compute_checksum(&self, payload: &[u8]) -> u32 {
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&self.unsealed_bytes());
        hasher.update(payload);
        hasher.finalize()
    }

    /// Encodes the header, with the checksum stored in `self`.
    pub fn encode(&self) -> [u8; RECORD_HEADER_LEN] {
        let mut b = [0u8; RECORD_HEADER_LEN];
        b[0..28].copy_from_slice(&self.unsealed_bytes());
        b[28..32].copy_from_slice(&self.checksum.to_le_bytes());
        b
    }

    /// Decodes the header fields; the checksum is verified later, against the payload.
    pub fn decode(bytes: &[u8]) -> Result<RecordHeader, HeaderProblem> {
        let b = bytes.get(..RECORD_HEADER_LEN).ok_or(HeaderProblem::Short)?;
        if b[0..4] != RECORD_MAGIC {
            return Err(HeaderProblem::BadMagic);
        }
        let version = le_u16(&b[4..6]);
        if version != RECORD_VERSION {
            return Err(HeaderProblem::UnknownVersion(version));
        }
        if b[6..8] != [0, 0] || b[24..28] != [0, 0, 0, 0] {
            return Err(HeaderProblem::Reserved);
        }
        Ok(RecordHeader {
            len: le_u32(&b[8..12]),
            cursor: le_u64(&b[12..20]),
            prev_checksum: le_u32(&b[20..24]),
            checksum: le_u32(&b[28..32]),
        })
    }
}

/// Appends one framed record to `out`, returning its checksum.
pub fn frame(out: &mut Vec<u8>, payload: &[u8], cursor: u64, prev_checksum: u32) -> u32 {
    let start = out.len();
    let header = RecordHeader::new(payload, cursor, prev_checksum);
    out.extend_from_slice(&header.encode());
    out.extend_from_slice(payload);
    // Paired with the reader: what it will decode from these bytes is the
    // header meant, and the payload follows it whole.
    assert_eq!(RecordHeader::decode(&out[start..]), Ok(header));
    assert_eq!(out.len() - start, RECORD_HEADER_LEN + payload.len());
    header.checksum
}

/// The file name of the segment whose first record has `first_cursor`.
pub fn segment_name(first_cursor: u64) -> String {
    format!("{first_cursor:020}.seg")
}

/// Parses a segment file name back into its first cursor.
pub fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".seg")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn le_u16(b: &[u8]) -> u16 {
    u16::from_le_bytes([b[0], b[1]])
}

fn le_u32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

fn le_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_header_round_trips_and_detects_flips() {
        let header = SegmentHeader {
            first_cursor: 42,
            prev_checksum: 0xdead_beef,
        };
        let bytes = header.encode();
        assert_eq!(SegmentHeader::decode(&bytes), Ok(header));
        for bit in 0..SEGMENT_HEADER_LEN * 8 {
            let mut flipped = bytes;
            flipped[bit / 8] ^= 1 << (bit % 8);
            assert!(SegmentHeader::decode(&flipped).is_err(), "bit {bit}");
        }
    }

    #[test]
    fn record_checksum_covers_header_and_payload() {
        let mut out = Vec::new();
        let checksum = frame(&mut out, b"hello", 7, 99);
        let header = RecordHeader::decode(&out).expect("valid header");
        assert_eq!(header.len, 5);
        assert_eq!(header.cursor, 7);
        assert_eq!(header.prev_checksum, 99);
        assert_eq!(header.checksum, checksum);
        assert_eq!(header.compute_checksum(b"hello"), checksum);
        assert_ne!(header.compute_checksum(b"hellp"), checksum);
    }

    #[test]
    fn segment_names_sort_by_cursor() {
        assert_eq!(segment_name(1), "00000000000000000001.seg");
        assert_eq!(parse_segment_name(&segment_name(123_456)), Some(123_456));
        assert_eq!(parse_segment_name("1.seg"), None);
        assert_eq!(parse_segment_name("LOCK"), None);
        assert!(segment_name(9) < segment_name(10));
    }
}
