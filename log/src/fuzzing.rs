//! The fuzz harness for recovery and reading, shared by the cargo-fuzz target
//! (`log/fuzz`) and its deterministic run in the normal test suite
//! (`log/tests/log/fuzz_smoke.rs`), so the two can never drift apart.
//!
//! An input is cut into one to three segment files, which go into a simulated
//! directory under proper segment names. Then the log is opened, read from
//! cursor 1 and verified. Nothing may panic, the reader's cursors are gapless,
//! the reader and `verify` agree, and a log that opens and reads cleanly takes
//! an append that continues it. Failed checks panic, which is what a fuzzer
//! reports.

use std::sync::Arc;

use crate::format::segment_name;
use crate::sim::SimStorage;
use crate::{Cursor, Log, LogError, LogOptions, LogReader, Record, verify};

/// Small limits, so that inputs of a few kilobytes span several segments and can
/// declare payload lengths over the limit.
pub const OPTIONS: LogOptions = LogOptions {
    max_record_bytes: 256,
    max_segment_bytes: 1024,
};

/// Reads an input front to back; bytes past its end read as zero.
#[derive(Debug)]
pub struct Input<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Input<'_> {
    fn u8(&mut self) -> u8 {
        let byte = self.bytes.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        byte
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    fn take(&mut self, len: usize) -> Vec<u8> {
        let start = self.at.min(self.bytes.len());
        let end = start.saturating_add(len).min(self.bytes.len());
        self.at = end;
        self.bytes[start..end].to_vec()
    }
}

/// Cuts an input into (first cursor, bytes) segment files.
///
/// ```text
/// byte 0             segment count: 1 + byte % 3
/// count × u16 LE     first-cursor deltas: the first segment starts at 1 plus its
///                    delta, each later one at the previous start plus its delta
/// (count-1) × u16 LE lengths of all segments but the last
/// rest               the segments' bytes back to back; the last takes what is left
/// ```
///
/// Lengths are cut to what the input holds, so every input is valid. The first
/// segment starts at cursor 1 or later (a later start is reported as corruption).
pub fn split_input(bytes: &[u8]) -> Vec<(u64, Vec<u8>)> {
    let mut input = Input { bytes, at: 0 };
    let count = 1 + usize::from(input.u8() % 3);
    let mut first_cursor = 1u64;
    let firsts: Vec<u64> = (0..count)
        .map(|_| {
            first_cursor += u64::from(input.u16());
            first_cursor
        })
        .collect();
    let lengths: Vec<u16> = (1..count).map(|_| input.u16()).collect();
    let mut segments: Vec<(u64, Vec<u8>)> = firsts[..count - 1]
        .iter()
        .zip(&lengths)
        .map(|(first, len)| (*first, input.take(usize::from(*len))))
        .collect();
    segments.push((firsts[count - 1], input.take(usize::MAX)));
    segments
}

/// Reads from cursor 1 until the end or the first error.
pub fn read_all(storage: &SimStorage) -> (Vec<Record>, Option<LogError>) {
    let mut reader = LogReader::new(Arc::new(storage.clone()), OPTIONS, Cursor(1));
    let mut records = Vec::new();
    loop {
        match reader.next() {
            Ok(Some(record)) => records.push(record),
            Ok(None) => return (records, None),
            Err(error) => return (records, Some(error)),
        }
    }
}

/// What [`open_and_read`] saw, for the checks that know which log was mutated.
#[derive(Debug)]
pub struct Outcome {
    /// Whether `Log::open` succeeded.
    pub opened: bool,
    /// Records read from cursor 1 before the end or an error.
    pub records: Vec<Record>,
    /// The error reading stopped at, if any.
    pub read_error: Option<LogError>,
}

/// Opens, reads and verifies the log an input describes, asserting what must hold
/// for any bytes at all.
pub fn open_and_read(input: &[u8]) -> Outcome {
    let storage = SimStorage::new();
    for (first_cursor, bytes) in split_input(input) {
        storage.set_file_bytes(&segment_name(first_cursor), bytes);
    }
    let opened = Log::open(Arc::new(storage.clone()), OPTIONS);
    let (records, read_error) = read_all(&storage);
    // The reader checks each record's cursor against its position, so gaps can
    // only come from a bug, whatever the bytes are.
    for pair in records.windows(2) {
        assert_eq!(pair[1].cursor.0, pair[0].cursor.0 + 1, "cursor gap");
    }
    let verified = verify(Arc::new(storage.clone()), OPTIONS);
    match (&read_error, &verified) {
        (None, Ok(report)) => {
            assert_eq!(report.records, records.len() as u64);
            assert_eq!(
                report.last_cursor,
                records.last().map_or(Cursor(0), |r| r.cursor)
            );
        }
        (Some(_), Err(_)) => {}
        (read_error, verified) => {
            panic!("reader and verify disagree: reader {read_error:?}, verify {verified:?}")
        }
    }
    if let (Ok((log, report)), None) = (&opened, &read_error) {
        if let Some(last) = records.last() {
            assert_eq!(report.next_cursor, Cursor(last.cursor.0 + 1));
        }
        // Recovery left a log that continues where reading ended.
        let range = log
            .append(&[b"after recovery"])
            .expect("a recovered log takes appends");
        let (again, error) = read_all(&storage);
        assert!(error.is_none(), "reading after an append: {error:?}");
        assert_eq!(again.len(), records.len() + 1);
        assert_eq!(again[..records.len()], records[..]);
        assert_eq!(again[records.len()].cursor, range.first);
    }
    Outcome {
        opened: opened.is_ok(),
        records,
        read_error,
    }
}
