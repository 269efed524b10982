//! After any truncation or single bit flip, opening and reading the log yields a
//! prefix of what was written or a corruption error: never an invented, reordered
//! or silently dropped record, and a corrupt log is never rewritten.

use std::sync::Arc;

use planb_log::sim::SimStorage;
use planb_log::{Cursor, Log, LogError, LogOptions, LogReader, Storage};
use proptest::prelude::*;

fn small() -> LogOptions {
    LogOptions {
        max_record_bytes: 256,
        max_segment_bytes: 1024,
    }
}

fn write(payloads: &[Vec<u8>]) -> SimStorage {
    let storage = SimStorage::new();
    let (log, _) = Log::open(Arc::new(storage.clone()), small()).expect("open");
    for payload in payloads {
        log.append(&[payload]).expect("append");
    }
    storage
}

fn segments(storage: &SimStorage) -> Vec<String> {
    let mut names: Vec<String> = storage
        .list()
        .expect("list")
        .into_iter()
        .filter(|n| n.ends_with(".seg"))
        .collect();
    names.sort();
    names
}

fn snapshot(storage: &SimStorage) -> Vec<(String, Vec<u8>)> {
    segments(storage)
        .into_iter()
        .map(|n| {
            let bytes = storage.file_bytes(&n).expect("bytes");
            (n, bytes)
        })
        .collect()
}

/// Reads records from cursor 1 until the end or an error.
fn read_prefix(storage: &SimStorage) -> (Vec<Vec<u8>>, Option<LogError>) {
    let mut reader = LogReader::new(Arc::new(storage.clone()), small(), Cursor(1));
    let mut out = Vec::new();
    loop {
        match reader.next() {
            Ok(Some(record)) => {
                assert_eq!(record.cursor.0, out.len() as u64 + 1, "cursor gap");
                out.push(record.payload);
            }
            Ok(None) => return (out, None),
            Err(error) => return (out, Some(error)),
        }
    }
}

fn assert_prefix(read: &[Vec<u8>], written: &[Vec<u8>]) {
    assert!(read.len() <= written.len(), "more records than written");
    assert_eq!(
        read,
        &written[..read.len()],
        "not a prefix of what was written"
    );
}

#[derive(Debug, Clone)]
enum Mutation {
    /// Cut the last segment to this fraction of its length.
    Truncate(f64),
    /// Flip one bit: segment index (mod count), byte position fraction, bit.
    Flip(usize, f64, u8),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (0.0..1.0f64).prop_map(Mutation::Truncate),
        (any::<usize>(), 0.0..1.0f64, 0u8..8).prop_map(|(s, p, b)| Mutation::Flip(s, p, b)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn recovery_yields_a_prefix_or_a_corruption_error(
        payloads in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..120), 1..40),
        mutation in mutation(),
    ) {
        let storage = write(&payloads);
        let names = segments(&storage);
        let mut torn_at_end = false;
        let mut damaged_last_segment = true;
        match mutation {
            Mutation::Truncate(fraction) => {
                let name = names.last().expect("a segment");
                let mut bytes = storage.file_bytes(name).expect("bytes");
                bytes.truncate((bytes.len() as f64 * fraction) as usize);
                storage.set_file_bytes(name, bytes);
                torn_at_end = true;
            }
            Mutation::Flip(segment, position, bit) => {
                let name = &names[segment % names.len()];
                damaged_last_segment = Some(name) == names.last();
                let mut bytes = storage.file_bytes(name).expect("bytes");
                let at = ((bytes.len() as f64 * position) as usize).min(bytes.len() - 1);
                bytes[at] ^= 1 << bit;
                storage.set_file_bytes(name, bytes);
            }
        }
        let before = snapshot(&storage);

        // A reader never changes anything and sees a prefix.
        let (read, _) = read_prefix(&storage);
        assert_prefix(&read, &payloads);
        prop_assert_eq!(&snapshot(&storage), &before);

        match Log::open(Arc::new(storage.clone()), small()) {
            Ok((log, report)) => {
                let (read, error) = read_prefix(&storage);
                assert_prefix(&read, &payloads);
                if let Some(error) = error {
                    // Opening scans only the last segment; damage in an older,
                    // sealed segment is found by whoever reads it (and by `verify`).
                    prop_assert!(!damaged_last_segment, "open missed damage: {}", error);
                    let is_corrupt =
                        matches!(error, LogError::Corrupt { .. } | LogError::NewerFormat { .. });
                    prop_assert!(is_corrupt, "unexpected error: {}", error);
                    prop_assert_eq!(&snapshot(&storage), &before);
                    return Ok(());
                }
                prop_assert_eq!(report.next_cursor, Cursor(read.len() as u64 + 1));
                // The log takes appends again, continuing the chain.
                log.append(&[b"after recovery"]).expect("append after recovery");
                let (again, error) = read_prefix(&storage);
                prop_assert!(error.is_none());
                prop_assert_eq!(again.len(), read.len() + 1);
            }
            Err(LogError::Corrupt { .. } | LogError::NewerFormat { .. }) => {
                prop_assert!(!torn_at_end, "a cut at the end must be a torn tail");
                prop_assert_eq!(&snapshot(&storage), &before, "a corrupt log was rewritten");
            }
            Err(other) => prop_assert!(false, "unexpected error {other}"),
        }
    }
}

#[test]
fn a_flip_in_an_early_record_is_corruption_naming_cursor_and_offset() {
    let payloads: Vec<Vec<u8>> = (0..5).map(|i| vec![i as u8; 10]).collect();
    let storage = write(&payloads);
    let name = segments(&storage)[0].clone();
    let mut bytes = storage.file_bytes(&name).expect("bytes");
    // Segment header is 32 bytes, each record 32 + 10: flip a payload byte of record 2.
    let record_two = 32 + 42;
    bytes[record_two + 35] ^= 0x01;
    storage.set_file_bytes(&name, bytes.clone());
    match Log::open(Arc::new(storage.clone()), small()) {
        Err(LogError::Corrupt { offset, cursor, .. }) => {
            assert_eq!(offset, record_two as u64);
            assert_eq!(cursor, 2);
        }
        other => panic!("expected corruption, got {other:?}"),
    }
    assert_eq!(storage.file_bytes(&name), Some(bytes), "bytes changed");
}

#[test]
fn a_torn_last_record_is_truncated_and_reported() {
    let payloads: Vec<Vec<u8>> = (0..5).map(|i| vec![i as u8; 10]).collect();
    let storage = write(&payloads);
    let name = segments(&storage)[0].clone();
    let mut bytes = storage.file_bytes(&name).expect("bytes");
    // The records end at 32 + 5 * 42; a file cut 3 bytes short of that.
    bytes.truncate(32 + 5 * 42 - 3);
    storage.set_file_bytes(&name, bytes);
    let (_, report) = Log::open(Arc::new(storage.clone()), small()).expect("open");
    assert_eq!(report.truncations.len(), 1);
    let truncation = &report.truncations[0];
    assert_eq!(truncation.cursor, Cursor(5));
    assert_eq!(truncation.offset, 32 + 4 * 42);
    assert_eq!(truncation.bytes, 39);
    assert_eq!(read_prefix(&storage).0, payloads[..4].to_vec());
}

#[test]
fn a_torn_record_in_the_runway_is_zeroed_and_reported() {
    let payloads: Vec<Vec<u8>> = (0..5).map(|i| vec![i as u8 + 1; 10]).collect();
    let storage = write(&payloads);
    let name = segments(&storage)[0].clone();
    let mut bytes = storage.file_bytes(&name).expect("bytes");
    let end = 32 + 5 * 42;
    assert!(
        bytes.len() > end,
        "the segment keeps zeros after its records"
    );
    assert!(bytes[end..].iter().all(|b| *b == 0));
    // The last record's final sector never reached the disk: its last three
    // bytes read as the runway's zeros.
    bytes[end - 3..end].fill(0);
    storage.set_file_bytes(&name, bytes.clone());
    let (log, report) = Log::open(Arc::new(storage.clone()), small()).expect("open");
    let truncation = &report.truncations[0];
    assert_eq!(truncation.cursor, Cursor(5));
    assert_eq!((truncation.offset, truncation.bytes), (32 + 4 * 42, 39));
    let after = storage.file_bytes(&name).expect("bytes");
    assert_eq!(after.len(), bytes.len(), "the runway stays");
    assert!(
        after[32 + 4 * 42..].iter().all(|b| *b == 0),
        "the torn record is zeroed"
    );
    log.append(&[b"again"]).expect("append");
    let (read, _) = read_prefix(&storage);
    assert_eq!(read.len(), 5);
    assert_eq!(read[4], b"again".to_vec());
}

#[test]
fn a_record_header_torn_after_its_magic_is_a_torn_tail_not_a_newer_format() {
    let payloads: Vec<Vec<u8>> = (0..3).map(|i| vec![i as u8 + 1; 10]).collect();
    let storage = write(&payloads);
    let name = segments(&storage)[0].clone();
    let mut bytes = storage.file_bytes(&name).expect("bytes");
    // Only the magic of the third record's header reached the disk.
    let third = 32 + 2 * 42;
    bytes[third + 4..third + 42].fill(0);
    storage.set_file_bytes(&name, bytes);
    let (_, report) = Log::open(Arc::new(storage.clone()), small()).expect("open");
    assert_eq!(report.truncations.len(), 1);
    assert_eq!(report.truncations[0].offset, third as u64);
    assert_eq!(read_prefix(&storage).0, payloads[..2].to_vec());
}

#[test]
fn a_valid_record_after_zeros_in_the_last_segment_is_corruption() {
    let payloads: Vec<Vec<u8>> = (0..4).map(|i| vec![i as u8 + 1; 10]).collect();
    let storage = write(&payloads);
    let name = segments(&storage)[0].clone();
    let mut bytes = storage.file_bytes(&name).expect("bytes");
    // The third record's header zeroed: the fourth, whole, still follows.
    let third = 32 + 2 * 42;
    bytes[third..third + 32].fill(0);
    storage.set_file_bytes(&name, bytes.clone());
    match Log::open(Arc::new(storage.clone()), small()) {
        Err(LogError::Corrupt { offset, cursor, .. }) => {
            assert_eq!((offset, cursor), (third as u64, 3));
        }
        other => panic!("expected corruption, got {other:?}"),
    }
    assert_eq!(storage.file_bytes(&name), Some(bytes), "bytes changed");
}

#[test]
fn a_missing_first_segment_is_corruption_not_a_later_start() {
    let payloads: Vec<Vec<u8>> = (0..30).map(|i| vec![i as u8; 40]).collect();
    let storage = write(&payloads);
    let names = segments(&storage);
    assert!(names.len() > 2, "{names:?}");
    let first = storage.file_bytes(&names[0]).expect("bytes");
    // A copy of the log without its first segment file.
    let rest = SimStorage::new();
    for name in &names[1..] {
        rest.set_file_bytes(name, storage.file_bytes(name).expect("bytes"));
    }
    assert!(!first.is_empty());
    match Log::open(Arc::new(rest.clone()), small()) {
        Err(LogError::Corrupt { cursor: 1, .. }) => {}
        other => panic!("expected corruption at cursor 1, got {other:?}"),
    }
    let (read, error) = read_prefix(&rest);
    assert!(read.is_empty());
    assert!(matches!(error, Some(LogError::Corrupt { .. })), "{error:?}");
}

#[test]
fn a_gap_between_the_last_two_segments_is_found_on_open() {
    let payloads: Vec<Vec<u8>> = (0..40).map(|i| vec![i as u8; 40]).collect();
    let storage = write(&payloads);
    let names = segments(&storage);
    assert!(names.len() > 3, "{names:?}");
    // Drop the second-to-last segment: the last one no longer continues the log.
    let gapped = SimStorage::new();
    for (i, name) in names.iter().enumerate() {
        if i != names.len() - 2 {
            gapped.set_file_bytes(name, storage.file_bytes(name).expect("bytes"));
        }
    }
    match Log::open(Arc::new(gapped), small()) {
        Err(LogError::Corrupt { damage, .. }) => {
            assert!(
                matches!(damage, planb_log::Damage::SegmentGap { .. }),
                "{damage:?}"
            )
        }
        other => panic!("expected a segment gap, got {other:?}"),
    }
}

#[test]
fn a_record_of_an_unknown_format_version_is_refused_not_truncated() {
    let payloads: Vec<Vec<u8>> = (0..3).map(|i| vec![i as u8; 10]).collect();
    let storage = write(&payloads);
    let name = segments(&storage)[0].clone();
    let mut bytes = storage.file_bytes(&name).expect("bytes");
    // The version field (bytes 4..6) of the last record, as a newer build would write it.
    let last = 32 + 2 * 42;
    bytes[last + 4] = 2;
    storage.set_file_bytes(&name, bytes.clone());
    match Log::open(Arc::new(storage.clone()), small()) {
        Err(LogError::NewerFormat {
            offset, version, ..
        }) => {
            assert_eq!(offset, last as u64);
            assert_eq!(version, 2);
        }
        other => panic!("expected NewerFormat, got {other:?}"),
    }
    assert_eq!(storage.file_bytes(&name), Some(bytes), "bytes changed");
}
