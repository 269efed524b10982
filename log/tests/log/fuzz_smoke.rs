//! The fuzz target `log/fuzz/fuzz_targets/open_and_read.rs`, run deterministically
//! in the normal test suite: arbitrary and damaged segment files never make
//! opening, reading or verifying panic, and what is read is never invented.
//!
//! The harness is `planb_log::fuzzing`, the fuzz target's own. It runs on
//! inputs from a fixed-seed generator and on valid logs damaged in ways a disk,
//! a bad copy or a stale file can damage them, where everything read must be a
//! prefix of what was appended and must stop before the first damaged record.

use std::sync::Arc;

use planb_log::format::{
    RECORD_HEADER_LEN, SEGMENT_HEADER_LEN, SegmentHeader, frame, parse_segment_name,
};
use planb_log::fuzzing::{OPTIONS, open_and_read, split_input};
use planb_log::sim::{SimStorage, SplitMix};
use planb_log::{Cursor, Log, LogError, Storage};

/// Segments an input may describe; [`split_input`] makes one to three.
const MAX_SEGMENTS: usize = 3;

/// Segment files as (first cursor, bytes), in cursor order.
type Segments = Vec<(u64, Vec<u8>)>;

/// The input [`split_input`] cuts back into `segments`.
fn join_input(segments: &[(u64, Vec<u8>)]) -> Vec<u8> {
    assert!((1..=MAX_SEGMENTS).contains(&segments.len()));
    let mut input = vec![(segments.len() - 1) as u8];
    let mut previous = 1u64;
    for (first_cursor, _) in segments {
        let delta = u16::try_from(first_cursor - previous).expect("cursor delta fits u16");
        input.extend_from_slice(&delta.to_le_bytes());
        previous = *first_cursor;
    }
    for (_, bytes) in &segments[..segments.len() - 1] {
        let len = u16::try_from(bytes.len()).expect("segment length fits u16");
        input.extend_from_slice(&len.to_le_bytes());
    }
    for (_, bytes) in segments {
        input.extend_from_slice(bytes);
    }
    input
}

/// The damage generator: SplitMix64 (deterministic, so a failure reproduces
/// from the seed alone) with the draws the mutations need.
#[derive(Debug)]
struct Rng(SplitMix);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    fn below(&mut self, n: usize) -> usize {
        self.0.below(n)
    }

    fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
}

/// A log that is mostly well formed, with a few wrong cursors, broken chains,
/// over-long records, mismatched headers and damaged tails, so that random inputs
/// reach past the magic bytes into every check of the decoder.
fn random_segments(rng: &mut Rng) -> Segments {
    let count = 1 + rng.below(MAX_SEGMENTS);
    let mut first_cursor = if rng.one_in(8) {
        2 + rng.below(3) as u64
    } else {
        1
    };
    let mut prev_checksum = 0u32;
    let mut segments = Vec::new();
    for _ in 0..count {
        let mut cursor = first_cursor;
        let mut bytes = Vec::new();
        if rng.one_in(6) {
            let len = rng.below(200);
            bytes = rng.bytes(len);
        } else {
            let header = SegmentHeader {
                first_cursor: if rng.one_in(12) {
                    cursor + 1 + rng.below(2) as u64
                } else {
                    cursor
                },
                prev_checksum: if rng.one_in(12) {
                    rng.next() as u32
                } else {
                    prev_checksum
                },
            };
            bytes.extend_from_slice(&header.encode());
            for _ in 0..rng.below(12) {
                let len = if rng.one_in(25) {
                    257 + rng.below(40)
                } else {
                    rng.below(40)
                };
                let payload = rng.bytes(len);
                let record_cursor = if rng.one_in(25) {
                    cursor.wrapping_add(rng.below(5) as u64).wrapping_sub(2)
                } else {
                    cursor
                };
                let chain = if rng.one_in(25) {
                    rng.next() as u32
                } else {
                    prev_checksum
                };
                prev_checksum = frame(&mut bytes, &payload, record_cursor, chain);
                cursor += 1;
            }
            match rng.below(8) {
                0 => {
                    let at = rng.below(bytes.len());
                    bytes[at] ^= 1 << rng.below(8);
                }
                1 => {
                    let len = rng.below(bytes.len() + 1);
                    bytes.truncate(len);
                }
                2 => {
                    let len = 1 + rng.below(40);
                    bytes.extend(rng.bytes(len));
                }
                _ => {}
            }
        }
        segments.push((first_cursor, bytes));
        first_cursor = cursor + u64::from(rng.one_in(10));
    }
    segments
}

#[test]
fn random_inputs_never_panic_and_read_gapless_cursors() {
    let mut rng = Rng(SplitMix(0x5eed_0001));
    let mut opened_with_records = 0;
    let mut refused_as_corrupt = 0;
    for _ in 0..2000 {
        let input = if rng.one_in(4) {
            let len = rng.below(2000);
            rng.bytes(len)
        } else {
            let segments = random_segments(&mut rng);
            let input = join_input(&segments);
            assert_eq!(
                split_input(&input),
                segments,
                "join_input inverts split_input"
            );
            input
        };
        let outcome = open_and_read(&input);
        if outcome.opened && !outcome.records.is_empty() {
            opened_with_records += 1;
        }
        if matches!(outcome.read_error, Some(LogError::Corrupt { .. })) {
            refused_as_corrupt += 1;
        }
    }
    // The generator must reach both sides of the decoder, or the run proves little.
    assert!(
        opened_with_records >= 200,
        "{opened_with_records} logs opened with records"
    );
    assert!(
        refused_as_corrupt >= 200,
        "{refused_as_corrupt} logs read as corrupt"
    );
}

/// Byte range of one record within its segment.
#[derive(Debug, Clone, Copy)]
struct Span {
    segment: usize,
    start: usize,
    end: usize,
}

/// A valid log of a few records appended in small batches, as segment files,
/// with each payload; cursor `i + 1` holds `payloads[i]`.
fn write_log(rng: &mut Rng) -> (Segments, Vec<Vec<u8>>) {
    let storage = SimStorage::new();
    let (log, _) = Log::open(Arc::new(storage.clone()), OPTIONS).expect("open an empty log");
    // At most 45 records of at most 56 bytes fit in three 1024-byte segments.
    let count = 5 + rng.below(41);
    let payloads: Vec<Vec<u8>> = (0..count)
        .map(|i| {
            let mut payload = format!("{i}:").into_bytes();
            let len = rng.below(20);
            payload.extend(rng.bytes(len));
            payload
        })
        .collect();
    let mut appended = 0;
    while appended < count {
        let batch_len = (1 + rng.below(3)).min(count - appended);
        let batch: Vec<&[u8]> = payloads[appended..appended + batch_len]
            .iter()
            .map(Vec::as_slice)
            .collect();
        let range = log.append(&batch).expect("append");
        assert_eq!(range.first, Cursor(appended as u64 + 1));
        appended += batch_len;
    }
    let mut segments: Segments = storage
        .list()
        .expect("list")
        .into_iter()
        .filter_map(|name| {
            let first_cursor = parse_segment_name(&name)?;
            let bytes = storage.file_bytes(&name).expect("segment bytes");
            Some((first_cursor, without_runway(bytes)))
        })
        .collect();
    segments.sort();
    assert!(
        segments.len() <= MAX_SEGMENTS,
        "{} segments",
        segments.len()
    );
    (segments, payloads)
}

/// A segment's bytes up to the end of its records: the zeroed runway after
/// them cut off.
fn without_runway(mut bytes: Vec<u8>) -> Vec<u8> {
    let mut start = SEGMENT_HEADER_LEN;
    while start + RECORD_HEADER_LEN <= bytes.len()
        && bytes[start..start + RECORD_HEADER_LEN]
            .iter()
            .any(|b| *b != 0)
    {
        let len = u32::from_le_bytes(bytes[start + 8..start + 12].try_into().expect("4 bytes"));
        start += RECORD_HEADER_LEN + len as usize;
    }
    bytes.truncate(start.min(bytes.len()));
    bytes
}

/// Where each record lies, by walking the segments' framing.
fn record_spans(segments: &[(u64, Vec<u8>)]) -> Vec<Span> {
    let mut spans = Vec::new();
    for (segment, (_, bytes)) in segments.iter().enumerate() {
        let mut start = SEGMENT_HEADER_LEN;
        while start < bytes.len() {
            let len = u32::from_le_bytes(bytes[start + 8..start + 12].try_into().expect("4 bytes"));
            let end = start + RECORD_HEADER_LEN + len as usize;
            spans.push(Span {
                segment,
                start,
                end,
            });
            start = end;
        }
        assert_eq!(start, bytes.len(), "records end where the segment ends");
    }
    spans
}

/// The ways a log is damaged; each is applied to one valid log at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mutation {
    /// One bit of any segment flipped.
    FlipBit,
    /// One to eight bytes of any segment overwritten with random bytes.
    OverwriteBytes,
    /// A segment cut short, mostly the last one.
    Truncate,
    /// A run of records repeated right after itself.
    DuplicateRange,
    /// Two records of one segment exchanged.
    SwapRecords,
    /// A valid record from another position put in place of record `index`.
    MisplacedCopy { index: usize },
    /// A record with the right cursor from another history (a stale file) put in
    /// place of record `index`: only the chain tells it apart.
    StaleRecord { index: usize },
}

/// Damages `segments` in one of the ways of [`Mutation`].
fn mutate(rng: &mut Rng, segments: &mut [(u64, Vec<u8>)], spans: &[Span]) -> Mutation {
    let pick = |rng: &mut Rng| spans[rng.below(spans.len())];
    match rng.below(7) {
        0 => {
            let bytes = &mut segments[rng.below(segments.len())].1;
            let at = rng.below(bytes.len());
            bytes[at] ^= 1 << rng.below(8);
            Mutation::FlipBit
        }
        1 => {
            let bytes = &mut segments[rng.below(segments.len())].1;
            let at = rng.below(bytes.len());
            let len = (1 + rng.below(8)).min(bytes.len() - at);
            let garbage = rng.bytes(len);
            bytes[at..at + len].copy_from_slice(&garbage);
            Mutation::OverwriteBytes
        }
        2 => {
            // Mostly the last segment, where a cut is a torn tail.
            let segment = if rng.one_in(4) {
                rng.below(segments.len())
            } else {
                segments.len() - 1
            };
            let bytes = &mut segments[segment].1;
            let len = rng.below(bytes.len());
            bytes.truncate(len);
            Mutation::Truncate
        }
        3 => {
            // One to three consecutive records of one segment, repeated right after
            // themselves, as a write replayed at the wrong offset would leave them.
            let first = rng.below(spans.len());
            let mut last = first;
            for _ in 0..rng.below(3) {
                if spans
                    .get(last + 1)
                    .is_some_and(|s| s.segment == spans[first].segment)
                {
                    last += 1;
                }
            }
            let (first, last) = (spans[first], spans[last]);
            let bytes = &mut segments[first.segment].1;
            let copy = bytes[first.start..last.end].to_vec();
            bytes.splice(last.end..last.end, copy);
            Mutation::DuplicateRange
        }
        4 => {
            let a = pick(rng);
            let Some(b) = spans
                .iter()
                .filter(|s| s.segment == a.segment && s.start > a.start)
                .nth(rng.below(4))
                .copied()
            else {
                return mutate(rng, segments, spans);
            };
            let bytes = &mut segments[a.segment].1;
            let mut swapped = bytes[..a.start].to_vec();
            swapped.extend_from_slice(&bytes[b.start..b.end]);
            swapped.extend_from_slice(&bytes[a.end..b.start]);
            swapped.extend_from_slice(&bytes[a.start..a.end]);
            swapped.extend_from_slice(&bytes[b.end..]);
            *bytes = swapped;
            Mutation::SwapRecords
        }
        5 => {
            let index = rng.below(spans.len());
            let mut source = rng.below(spans.len() - 1);
            if source >= index {
                source += 1;
            }
            let (from, to) = (spans[source], spans[index]);
            let copy = segments[from.segment].1[from.start..from.end].to_vec();
            segments[to.segment].1.splice(to.start..to.end, copy);
            Mutation::MisplacedCopy { index }
        }
        _ => {
            let index = rng.below(spans.len());
            let to = spans[index];
            let bytes = &segments[to.segment].1;
            let prev_checksum = u32::from_le_bytes(
                bytes[to.start + 20..to.start + 24]
                    .try_into()
                    .expect("4 bytes"),
            );
            let other_chain = prev_checksum ^ (1 + rng.below(u32::MAX as usize) as u32);
            let payload = if rng.one_in(2) {
                bytes[to.start + RECORD_HEADER_LEN..to.end].to_vec()
            } else {
                let len = rng.below(24);
                rng.bytes(len)
            };
            let mut stale = Vec::new();
            frame(&mut stale, &payload, index as u64 + 1, other_chain);
            segments[to.segment].1.splice(to.start..to.end, stale);
            Mutation::StaleRecord { index }
        }
    }
}

/// Index of the first record whose bytes `mutated` changed: no reader may return
/// it or anything after it. A change to a segment header or after a segment's
/// last record counts against the next record in cursor order.
fn first_damaged_record(
    original: &[(u64, Vec<u8>)],
    mutated: &[(u64, Vec<u8>)],
    spans: &[Span],
) -> usize {
    let mut first = spans.len();
    for (segment, ((_, before), (_, after))) in original.iter().zip(mutated).enumerate() {
        let Some(at) = (0..before.len().max(after.len())).find(|&i| before.get(i) != after.get(i))
        else {
            continue;
        };
        let damaged = spans
            .iter()
            .position(|s| s.segment > segment || (s.segment == segment && s.end > at))
            .unwrap_or(spans.len());
        first = first.min(damaged);
    }
    first
}

#[test]
fn mutated_logs_read_only_a_prefix_and_never_a_misplaced_record() {
    let mut rng = Rng(SplitMix(0x5eed_0002));
    let mut applied = std::collections::HashMap::new();
    let (mut original, mut payloads) = (Vec::new(), Vec::new());
    for round in 0..2000 {
        // A fresh valid log every twenty mutations varies sizes and segment counts.
        if round % 20 == 0 {
            (original, payloads) = write_log(&mut rng);
            let intact = open_and_read(&join_input(&original));
            assert!(intact.opened && intact.read_error.is_none(), "{intact:?}");
            assert_eq!(
                intact.records.len(),
                payloads.len(),
                "the intact log reads fully"
            );
        }
        let spans = record_spans(&original);
        assert_eq!(spans.len(), payloads.len());
        let mut mutated = original.clone();
        let mutation = mutate(&mut rng, &mut mutated, &spans);
        *applied
            .entry(std::mem::discriminant(&mutation))
            .or_insert(0) += 1;
        let damaged = first_damaged_record(&original, &mutated, &spans);
        let outcome = open_and_read(&join_input(&mutated));

        let context = || format!("round {round}: {mutation:?}, first damaged record {damaged}");
        for (index, record) in outcome.records.iter().enumerate() {
            assert_eq!(record.cursor, Cursor(index as u64 + 1), "{}", context());
            assert_eq!(
                record.payload,
                payloads[index],
                "{}: invented payload",
                context()
            );
        }
        assert!(
            outcome.records.len() <= damaged,
            "{}: read {} records, past the damage",
            context(),
            outcome.records.len()
        );
        match mutation {
            Mutation::MisplacedCopy { index } | Mutation::StaleRecord { index } => {
                assert!(
                    outcome.records.len() <= index,
                    "{}: the record at cursor {} was returned",
                    context(),
                    index + 1
                );
            }
            Mutation::Truncate
                if mutated.last().map(|s| s.1.len()) < original.last().map(|s| s.1.len()) =>
            {
                // A cut at the end is a torn tail: recovery keeps every whole record.
                assert!(outcome.opened, "{}: a torn tail did not open", context());
                assert!(
                    outcome.read_error.is_none(),
                    "{}: {:?}",
                    context(),
                    outcome.read_error
                );
                assert_eq!(outcome.records.len(), damaged, "{}", context());
            }
            _ => {}
        }
    }
    assert_eq!(applied.len(), 7, "every kind of mutation ran");
    assert!(applied.values().all(|&n| n >= 150), "{applied:?}");
}
