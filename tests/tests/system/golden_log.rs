//! The golden log: a real planb-log directory (segment format 1, record format 1)
//! holding every v1 event of `fixtures/golden/events-v1.bin`. The current code
//! must read it byte for byte, and writing the same events must produce the same
//! bytes. `PLANB_BLESS=1` regenerates it (review the diff: a released format
//! never changes).

use std::path::PathBuf;
use std::sync::Arc;

use planb_core::{Cursor, decode};
use planb_log::{FsStorage, LogOptions, LogReader, verify};

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/golden")
}

fn golden_payloads() -> Vec<Vec<u8>> {
    let bytes = std::fs::read(golden_dir().join("events-v1.bin")).expect("read events-v1.bin");
    let mut payloads = Vec::new();
    let mut rest = bytes.as_slice();
    while !rest.is_empty() {
        let (len, tail) = rest.split_at(4);
        let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
        let (payload, tail) = tail.split_at(len);
        payloads.push(payload.to_vec());
        rest = tail;
    }
    payloads
}

/// Writes `payloads` as a fresh log in `dir`, one append per payload, and
/// returns the segment file's bytes.
fn write_log(dir: &std::path::Path, payloads: &[Vec<u8>]) -> Vec<u8> {
    let (log, _) = planb_log::open_dir(dir, LogOptions::default()).expect("open");
    for payload in payloads {
        log.append(&[payload]).expect("append");
    }
    std::fs::read(dir.join("00000000000000000001.seg")).expect("read segment")
}

#[test]
fn golden_log_v1_reads_and_writes_byte_for_byte() {
    let payloads = golden_payloads();
    assert_eq!(payloads.len(), 14, "one event of every v1 variant");
    let fixture = golden_dir().join("log-v1").join("00000000000000000001.seg");
    if std::env::var_os("PLANB_BLESS").is_some() {
        let scratch = tempfile::tempdir().expect("tempdir");
        let mut bytes = write_log(scratch.path(), &payloads);
        // The fixture holds the header and the records, not the runway.
        bytes.truncate(32 + payloads.iter().map(|p| 32 + p.len()).sum::<usize>());
        std::fs::create_dir_all(fixture.parent().expect("parent")).expect("mkdir");
        std::fs::write(&fixture, bytes).expect("write golden log");
        return;
    }
    let golden = std::fs::read(&fixture).expect("read golden log (bless with PLANB_BLESS=1)");

    // Reading: every record validates, carries the golden payload, and decodes.
    let copy = tempfile::tempdir().expect("tempdir");
    std::fs::write(copy.path().join("00000000000000000001.seg"), &golden).expect("copy");
    let storage = Arc::new(FsStorage::open_read_only(copy.path()).expect("open"));
    let report = verify(storage.clone(), LogOptions::default()).expect("verify");
    assert_eq!(report.records, payloads.len() as u64);
    assert_eq!(report.torn_tail, None);
    let mut reader = LogReader::new(storage, LogOptions::default(), planb_log::Cursor(1));
    for (i, expected) in payloads.iter().enumerate() {
        let record = reader.next().expect("read").expect("a record");
        assert_eq!(record.cursor.0, i as u64 + 1);
        assert_eq!(&record.payload, expected, "payload {i} differs");
        let envelope = decode(&record.payload, Cursor(record.cursor.0)).expect("decode");
        assert_eq!(envelope.cursor, Cursor(i as u64 + 1));
    }
    assert_eq!(reader.next().expect("read"), None);

    // Writing: the same events give the same bytes, then the zeroed runway.
    let fresh = tempfile::tempdir().expect("tempdir");
    let written = write_log(fresh.path(), &payloads);
    assert!(written.len() > golden.len(), "the segment keeps a runway");
    let (records, runway) = written.split_at(golden.len());
    assert_eq!(records, golden.as_slice(), "the log format changed");
    assert!(
        runway.iter().all(|b| *b == 0),
        "the runway holds only zeros"
    );
}
