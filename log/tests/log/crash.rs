//! Power loss at every sync: every acknowledged append survives, nothing is
//! invented, and the log opens and takes appends again.
//!
//! The simulated storage cuts power at the Nth sync (file or directory) while
//! several threads append; the reboot keeps, drops, cuts or garbles the unsynced
//! bytes of each file according to a seed.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use planb_log::sim::SimStorage;
use planb_log::{Cursor, Log, LogOptions, LogReader, verify};

fn small() -> LogOptions {
    LogOptions {
        max_record_bytes: 128,
        max_segment_bytes: 600,
    }
}

/// Runs `threads` appenders until the power is cut at sync `crash_at`.
/// Returns (acknowledged cursor → payload, every payload attempted).
fn run_until_crash(
    storage: &SimStorage,
    crash_at: u64,
    threads: usize,
    run: &str,
) -> (HashMap<u64, Vec<u8>>, HashSet<Vec<u8>>) {
    let (log, _) = Log::open(Arc::new(storage.clone()), small()).expect("open");
    storage.crash_at_sync(crash_at);
    let acknowledged = Mutex::new(HashMap::new());
    let attempted = Mutex::new(HashSet::new());
    std::thread::scope(|scope| {
        for t in 0..threads {
            let log = log.clone();
            let acknowledged = &acknowledged;
            let attempted = &attempted;
            scope.spawn(move || {
                for i in 0..10_000 {
                    // Batches of one to three records, of varying size.
                    let batch: Vec<Vec<u8>> = (0..=(i % 3))
                        .map(|j| {
                            format!("{run}-t{t}-i{i}-j{j}-{}", "p".repeat(i % 40)).into_bytes()
                        })
                        .collect();
                    attempted
                        .lock()
                        .expect("lock")
                        .extend(batch.iter().cloned());
                    let refs: Vec<&[u8]> = batch.iter().map(Vec::as_slice).collect();
                    match log.append(&refs) {
                        Ok(range) => {
                            let mut acked = acknowledged.lock().expect("lock");
                            for (k, payload) in batch.into_iter().enumerate() {
                                acked.insert(range.first.0 + k as u64, payload);
                            }
                        }
                        Err(_) => return,
                    }
                }
            });
        }
    });
    assert!(storage.has_crashed(), "the power cut never happened");
    (
        acknowledged.into_inner().expect("lock"),
        attempted.into_inner().expect("lock"),
    )
}

fn check_after_reboot(
    storage: &SimStorage,
    acknowledged: &HashMap<u64, Vec<u8>>,
    attempted: &HashSet<Vec<u8>>,
) {
    let (log, report) = Log::open(Arc::new(storage.clone()), small())
        .unwrap_or_else(|e| panic!("reopen after crash failed: {e}"));
    let mut reader = LogReader::new(Arc::new(storage.clone()), small(), Cursor(1));
    let mut seen = HashSet::new();
    let mut count = 0u64;
    while let Some(record) = reader.next().expect("read after crash") {
        count += 1;
        assert_eq!(record.cursor.0, count, "cursor gap");
        assert!(attempted.contains(&record.payload), "invented record");
        assert!(seen.insert(record.payload.clone()), "duplicated record");
        if let Some(expected) = acknowledged.get(&record.cursor.0) {
            assert_eq!(&record.payload, expected, "acknowledged record changed");
        }
    }
    assert_eq!(report.next_cursor, Cursor(count + 1));
    let lost: Vec<&u64> = acknowledged.keys().filter(|c| **c > count).collect();
    assert!(lost.is_empty(), "acknowledged records lost: {lost:?}");
    log.append(&[b"after reboot"]).expect("append after reboot");
    let report = verify(Arc::new(storage.clone()), small()).expect("verify");
    assert_eq!(report.records, count + 1);
    assert_eq!(report.torn_tail, None);
}

#[test]
fn acknowledged_appends_survive_power_loss_at_every_sync() {
    for crash_at in 1..=60 {
        for seed in 0..6 {
            let storage = SimStorage::new();
            let (acknowledged, attempted) = run_until_crash(&storage, crash_at, 3, "a");
            let rebooted = storage.after_crash(crash_at * 1000 + seed);
            check_after_reboot(&rebooted, &acknowledged, &attempted);
        }
    }
}

#[test]
fn a_second_crash_during_recovery_appends_is_survived_too() {
    for crash_at in 1..=20 {
        let storage = SimStorage::new();
        let (mut acknowledged, mut attempted) = run_until_crash(&storage, crash_at, 2, "a");
        let rebooted = storage.after_crash(crash_at);
        let (more_acked, more_attempted) = run_until_crash(&rebooted, 3, 2, "b");
        acknowledged.extend(more_acked);
        attempted.extend(more_attempted);
        check_after_reboot(
            &rebooted.after_crash(crash_at + 7),
            &acknowledged,
            &attempted,
        );
    }
}
