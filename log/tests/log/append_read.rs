//! Appending, reading back, rolling segments, reopening, tailing and locking.

use std::sync::Arc;

use planb_log::sim::SimStorage;
use planb_log::{Cursor, Log, LogError, LogOptions, LogReader, Storage, verify};

fn small() -> LogOptions {
    LogOptions {
        max_record_bytes: 256,
        max_segment_bytes: 1024,
    }
}

fn open(storage: &SimStorage, options: LogOptions) -> Log {
    let (log, report) = Log::open(Arc::new(storage.clone()), options).expect("open");
    assert!(report.truncations.is_empty(), "{report:?}");
    log
}

fn read_all(storage: &SimStorage, options: LogOptions, from: u64) -> Vec<(u64, Vec<u8>)> {
    let mut reader = LogReader::new(Arc::new(storage.clone()), options, Cursor(from));
    let mut out = Vec::new();
    while let Some(record) = reader.next().expect("read") {
        out.push((record.cursor.0, record.payload));
    }
    out
}

fn payload(i: u64) -> Vec<u8> {
    format!("record-{i}-{}", "x".repeat((i % 50) as usize)).into_bytes()
}

#[test]
fn appended_records_read_back_in_order_across_segments() {
    let storage = SimStorage::new();
    let log = open(&storage, small());
    for i in 1..=100 {
        let range = log.append(&[&payload(i)]).expect("append");
        assert_eq!(range.first, Cursor(i));
    }
    let records = read_all(&storage, small(), 1);
    assert_eq!(records.len(), 100);
    for (i, (cursor, bytes)) in records.iter().enumerate() {
        assert_eq!(*cursor, i as u64 + 1);
        assert_eq!(bytes, &payload(i as u64 + 1));
    }
    let segments = storage.list().expect("list").len();
    assert!(segments > 5, "expected rolling, got {segments} files");
    let report = verify(Arc::new(storage.clone()), small()).expect("verify");
    assert_eq!(report.records, 100);
    assert_eq!(report.last_cursor, Cursor(100));
    assert_eq!(report.torn_tail, None);
}

#[test]
fn reading_from_a_cursor_skips_earlier_records() {
    let storage = SimStorage::new();
    let log = open(&storage, small());
    for i in 1..=60 {
        log.append(&[&payload(i)]).expect("append");
    }
    let records = read_all(&storage, small(), 37);
    assert_eq!(records.first().map(|r| r.0), Some(37));
    assert_eq!(records.len(), 24);
    assert!(read_all(&storage, small(), 61).is_empty());
}

#[test]
fn reopening_continues_the_cursor_sequence_and_chain() {
    let storage = SimStorage::new();
    {
        let log = open(&storage, small());
        log.append(&[b"a", b"b", b"c"]).expect("append");
    }
    let (log, report) = Log::open(Arc::new(storage.clone()), small()).expect("reopen");
    assert_eq!(report.next_cursor, Cursor(4));
    assert_eq!(log.append(&[b"d"]).expect("append").first, Cursor(4));
    let payloads: Vec<Vec<u8>> = read_all(&storage, small(), 1)
        .into_iter()
        .map(|r| r.1)
        .collect();
    assert_eq!(
        payloads,
        vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec(), b"d".to_vec()]
    );
}

#[test]
fn a_reader_follows_the_tail_as_records_arrive() {
    let storage = SimStorage::new();
    let log = open(&storage, small());
    let mut reader = LogReader::new(Arc::new(storage.clone()), small(), Cursor(1));
    assert_eq!(reader.next().expect("read"), None);
    for i in 1..=40 {
        log.append(&[&payload(i)]).expect("append");
        let record = reader.next().expect("read").expect("a new record");
        assert_eq!(record.cursor, Cursor(i));
        assert_eq!(reader.next().expect("read"), None);
    }
}

#[test]
fn two_logs_on_one_directory_interleave_in_one_gapless_order() {
    // Two `Log` values stand for two processes: each must catch up on the other's
    // records before appending.
    let storage = SimStorage::new();
    let first = open(&storage, small());
    let second = open(&storage, small());
    for i in 1..=30 {
        let log = if i % 3 == 0 { &second } else { &first };
        assert_eq!(log.append(&[&payload(i)]).expect("append").first, Cursor(i));
    }
    assert_eq!(read_all(&storage, small(), 1).len(), 30);
    verify(Arc::new(storage.clone()), small()).expect("verify");
}

#[test]
fn writers_find_every_roll_over_however_full_the_segment_it_closed_was() {
    // Three writers (three processes) append records of every size up to
    // the largest, so segments close at every length a writer can leave
    // them: each must find the segment another rolled on to, whether the
    // one it knew was just past the point where a roll becomes possible or
    // nearly full. A reader follows all along.
    let storage = SimStorage::new();
    let options = small();
    let writers: Vec<Log> = (0..3).map(|_| open(&storage, options)).collect();
    let mut reader = LogReader::new(Arc::new(storage.clone()), options, Cursor(1));
    let mut written: Vec<Vec<u8>> = Vec::new();
    let mut read = 0;
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        state >> 33
    };
    for i in 0..600u64 {
        let len = (next() % u64::from(options.max_record_bytes)) as usize + 1;
        let body = vec![b'a' + (i % 26) as u8; len];
        let writer = &writers[(next() % 3) as usize];
        let range = writer.append(&[&body]).expect("append");
        written.push(body);
        assert_eq!(range.first, Cursor(written.len() as u64), "append {i}");
        if next() % 4 == 0 {
            while let Some(record) = reader.next().expect("read") {
                read += 1;
                assert_eq!(record.cursor, Cursor(read));
                assert_eq!(record.payload, written[read as usize - 1]);
            }
            assert_eq!(read, written.len() as u64);
        }
    }
    let all = read_all(&storage, options, 1);
    assert_eq!(all.len(), written.len());
    for ((cursor, payload), body) in all.iter().zip(&written) {
        assert_eq!(payload, body, "record {cursor}");
    }
    let segments = storage
        .list()
        .expect("list")
        .iter()
        .filter(|n| n.ends_with(".seg"))
        .count();
    assert!(
        segments > 50,
        "only {segments} segments: too few roll-overs"
    );
    verify(Arc::new(storage.clone()), options).expect("verify");
}

#[test]
fn a_reader_passes_its_own_append_and_still_reads_what_another_writer_rolls_on_to() {
    // `mine` and `other` stand for two processes; `reader` is `mine`'s.
    let storage = SimStorage::new();
    let mine = open(&storage, small());
    let other = open(&storage, small());
    let mut reader = LogReader::new(Arc::new(storage.clone()), small(), Cursor(1));
    mine.append(&[&payload(1), &payload(2)]).expect("append");
    while reader.next().expect("read").is_some() {}
    let mut cursor = 3;
    let (mut passed, mut refused) = (0, 0);
    for round in 0..40 {
        let mut guard = mine.lock().expect("lock");
        if !guard.position().is_some_and(|p| reader.stands_at(p)) {
            // Another writer appended: read it, in order, before appending.
            while let Some(record) = reader.next().expect("read") {
                assert_eq!(record.cursor, Cursor(cursor));
                assert_eq!(record.payload, payload(cursor));
                cursor += 1;
            }
            assert!(reader.stands_at(guard.position().expect("a segment")));
        }
        let placed = guard.append_placed(&[&payload(cursor)]).expect("append");
        assert_eq!(placed.range.first, Cursor(cursor));
        let (last, _) = placed.last.expect("a record written");
        assert_eq!(last.cursor, Cursor(cursor));
        let rolled = placed.from.map(|p| p.segment) != placed.end.map(|p| p.segment);
        drop(guard);
        if reader.pass(&placed) {
            assert!(!rolled, "passed an append that rolled over");
            passed += 1;
            cursor += 1;
        } else {
            assert!(
                rolled,
                "round {round}: refused to pass an append in one segment"
            );
            let record = reader
                .next()
                .expect("read")
                .expect("the record just written");
            assert_eq!(record.cursor, Cursor(cursor));
            refused += 1;
            cursor += 1;
        }
        assert!(
            reader.next().expect("read").is_none(),
            "nothing after the pass"
        );
        if round % 3 == 0 {
            // The other writer appends enough to roll over, more than once.
            for _ in 0..(round % 4 + 1) {
                let mut guard = other.lock().expect("lock");
                let next = guard.next_cursor();
                guard.append(&[&payload(next.0)]).expect("append");
            }
        }
    }
    assert!(
        passed > 0 && refused > 0,
        "passed {passed}, refused {refused}"
    );
    let report = verify(Arc::new(storage.clone()), small()).expect("verify");
    assert_eq!(report.torn_tail, None);
    assert_eq!(
        report.last_cursor,
        Cursor(cursor - 1 + stray(&storage, cursor))
    );
}

/// How many records from `cursor` on the log holds.
fn stray(storage: &SimStorage, cursor: u64) -> u64 {
    read_all(storage, small(), cursor).len() as u64
}

#[test]
fn concurrent_appenders_lose_nothing_and_keep_their_own_order() {
    let storage = SimStorage::new();
    let log = open(&storage, LogOptions::default());
    let threads = 8;
    let per_thread = 200;
    std::thread::scope(|scope| {
        for t in 0..threads {
            let log = log.clone();
            scope.spawn(move || {
                for i in 0..per_thread {
                    log.append(&[format!("{t}:{i}").as_bytes()])
                        .expect("append");
                }
            });
        }
    });
    let records = read_all(&storage, LogOptions::default(), 1);
    assert_eq!(records.len(), threads * per_thread);
    let mut last_seen = vec![-1i64; threads];
    for (_, bytes) in &records {
        let text = String::from_utf8(bytes.clone()).expect("utf8");
        let (t, i) = text.split_once(':').expect("tagged");
        let (t, i): (usize, i64) = (t.parse().expect("t"), i.parse().expect("i"));
        assert_eq!(i, last_seen[t] + 1, "thread {t} out of order");
        last_seen[t] = i;
    }
}

#[test]
fn oversized_records_are_refused_and_nothing_is_written() {
    let storage = SimStorage::new();
    let log = open(&storage, small());
    let big = vec![0u8; 257];
    match log.append(&[b"ok", &big]) {
        Err(LogError::RecordTooLarge { len: 257, max: 256 }) => {}
        other => panic!("expected RecordTooLarge, got {other:?}"),
    }
    assert!(read_all(&storage, small(), 1).is_empty());
}

#[test]
fn the_guard_sees_every_earlier_append_and_excludes_others() {
    let storage = SimStorage::new();
    let first = open(&storage, small());
    let second = open(&storage, small());
    first.append(&[b"one", b"two"]).expect("append");
    let mut guard = second.lock().expect("lock");
    assert_eq!(guard.next_cursor(), Cursor(3));
    let range = guard.append(&[b"three"]).expect("append");
    assert_eq!(range.first, Cursor(3));
    drop(guard);
    assert_eq!(first.append(&[b"four"]).expect("append").first, Cursor(4));
}

#[test]
fn a_failed_sync_stops_the_writer_for_good() {
    let storage = SimStorage::new();
    let log = open(&storage, small());
    log.append(&[b"durable"]).expect("append");
    storage.crash_at_sync(1);
    // The failure itself already says the writer stopped, and why.
    let failed = log.append(&[b"lost"]).expect_err("the sync fails");
    assert!(
        matches!(&failed, LogError::Poisoned { reason } if reason.contains("sync")),
        "{failed:?}"
    );
    assert!(failed.to_string().contains("restart"), "{failed}");
    assert!(matches!(
        log.append(&[b"after"]),
        Err(LogError::Poisoned { .. })
    ));
}

/// An append whose sync overlaps other work: the work sees the records
/// placed, the append returns once they are durable, and a failed sync
/// stops the writer as any failed append does.
#[test]
fn an_overlapping_append_is_durable_when_it_returns_and_its_failed_sync_stops_the_writer() {
    let storage = SimStorage::new();
    let log = open(&storage, small());
    for i in 1..=40u64 {
        let mut guard = log.lock().expect("lock");
        let syncs = storage.syncs();
        let (placed, seen) = guard
            .append_placed_overlapping(&[&payload(i)], |placed| placed.range.first)
            .expect("append");
        assert_eq!(placed.range.first, seen);
        assert_eq!(placed.range.first, Cursor(i));
        assert!(storage.syncs() > syncs, "synced before it returned");
    }
    // Every record so far survives a power cut.
    let after = storage.after_crash(7);
    let reopened = open(&after, small());
    assert_eq!(reopened.next_cursor(), Cursor(41));
    storage.crash_at_sync(1);
    let mut guard = log.lock().expect("lock");
    let failed = guard
        .append_placed_overlapping(&[b"lost"], |_| ())
        .expect_err("the sync fails");
    assert!(
        matches!(&failed, LogError::Poisoned { reason } if reason.contains("sync")),
        "{failed:?}"
    );
    drop(guard);
    assert!(matches!(
        log.append(&[b"after"]),
        Err(LogError::Poisoned { .. })
    ));
}

#[test]
fn a_reader_resumes_at_any_record_position_including_segment_starts() {
    let storage = SimStorage::new();
    let log = open(&storage, small());
    for i in 1..=80 {
        log.append(&[&payload(i)]).expect("append");
    }
    let storage_arc: Arc<dyn Storage> = Arc::new(storage.clone());
    let mut reader = LogReader::new(Arc::clone(&storage_arc), small(), Cursor(1));
    let mut records = Vec::new();
    while let Some(record) = reader.next().expect("read") {
        assert_eq!(record.position.cursor, record.cursor);
        records.push(record);
    }
    let segments: std::collections::BTreeSet<u64> =
        records.iter().map(|r| r.position.segment).collect();
    assert!(segments.len() > 5, "positions in several segments");
    // Every position, the first record of each segment included, reads that
    // record again, then the rest, and later appends follow.
    for i in 81..=90 {
        log.append(&[&payload(i)]).expect("append");
    }
    for record in &records {
        let mut resumed =
            LogReader::at(Arc::clone(&storage_arc), small(), record.position).expect("resume");
        assert_eq!(resumed.next().expect("read").as_ref(), Some(record));
        let mut rest = Vec::new();
        while let Some(next) = resumed.next().expect("read") {
            rest.push(next.cursor.0);
        }
        let expected: Vec<u64> = (record.cursor.0 + 1..=90).collect();
        assert_eq!(rest, expected, "resumed at {:?}", record.position);
    }
}

#[test]
fn a_position_from_another_log_is_damage_not_a_silent_end() {
    let storage = SimStorage::new();
    let log = open(&storage, small());
    for i in 1..=20 {
        log.append(&[&payload(i)]).expect("append");
    }
    let storage_arc: Arc<dyn Storage> = Arc::new(storage.clone());
    let mut reader = LogReader::new(Arc::clone(&storage_arc), small(), Cursor(1));
    for _ in 0..3 {
        reader.next().expect("read").expect("a record");
    }
    let position = reader.next().expect("read").expect("a record").position;
    let mut wrong = position;
    wrong.prev_checksum ^= 1;
    let mut resumed = LogReader::at(Arc::clone(&storage_arc), small(), wrong).expect("resume");
    let error = resumed.next().expect_err("the chain does not continue");
    assert!(matches!(error, LogError::Corrupt { .. }), "{error}");
    let mut missing = position;
    missing.segment = 999_999;
    assert!(LogReader::at(storage_arc, small(), missing).is_err());
}
