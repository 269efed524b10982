//! Projections that durably record how far they read the log never claim
//! records a power cut takes from it: a writer syncs its records after
//! writing them, and a reader may read them in between.

use std::sync::Arc;

use planb_core::{Event, EventBody, EventId, SessionId, Timestamp, encode};
use planb_log::format::{frame, segment_name};
use planb_log::sim::SimStorage;
use planb_log::{Log, LogOptions, Storage};
use planb_projections::Index;

fn session_created(n: u128) -> Vec<u8> {
    let event = Event {
        id: EventId::from_uuid(uuid::Uuid::from_u128(n)),
        at: Timestamp(1_780_000_000_000),
        body: EventBody::SessionCreated {
            session: SessionId::from_uuid(uuid::Uuid::from_u128(n)),
            title: Some(format!("session {n}")),
            intent: None,
            project_path: None,
        },
    };
    encode(&event).expect("encode")
}

/// A log of two durable records, and a third written after them and not
/// synced: what a reader finds while the third's writer is between its
/// write and its fdatasync.
fn log_with_an_unsynced_record() -> SimStorage {
    let sim = SimStorage::new();
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    let (log, _) = Log::open(Arc::clone(&storage), LogOptions::default()).expect("open log");
    let mut guard = log.lock().expect("lock");
    let placed = guard
        .append_placed(&[&session_created(1), &session_created(2)])
        .expect("append");
    let end = placed.end.expect("a segment");
    let mut record = Vec::new();
    frame(
        &mut record,
        &session_created(3),
        end.cursor.0,
        end.prev_checksum,
    );
    storage
        .open(&segment_name(end.segment), true)
        .expect("open segment")
        .write_all_at(end.offset, &record)
        .expect("write");
    sim
}

#[test]
fn a_durable_index_commit_never_claims_a_record_the_power_cut_took() {
    for seed in 0..16 {
        let sim = log_with_an_unsynced_record();
        let dir = tempfile::tempdir().expect("tempdir");
        let storage: Arc<dyn Storage> = Arc::new(sim.clone());
        let index = Index::open(
            &dir.path().join("index.redb"),
            storage,
            LogOptions::default(),
        )
        .expect("open index");
        index.catch_up().expect("catch up");
        let applied = index.applied_cursor().expect("applied");
        // After the reboot: what the log holds must cover what the index
        // committed durably (every commit is durable by default).
        let rebooted: Arc<dyn Storage> = Arc::new(sim.after_crash(seed));
        let (_, recovery) = Log::open(rebooted, LogOptions::default()).expect("reopen");
        let log_end = recovery.next_cursor.0 - 1;
        assert!(
            applied.0 <= log_end,
            "seed {seed}: the index claims cursor {} but the log ends at {log_end}",
            applied.0
        );
    }
}
