//! Where time and fresh ids come from: the system in production, a script in tests.
//!
//! The core never reads a clock or draws random numbers; the store asks its
//! [`Environment`] and passes the values in, so tests can fix every id and time.

use std::fmt::Debug;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use planb_core::Timestamp;
use uuid::Uuid;

/// The source of time and ids.
pub trait Environment: Send + Sync + Debug {
    /// The current time.
    fn now(&self) -> Timestamp;
    /// A fresh time-ordered id for an event (UUID v7 in production).
    fn event_id(&self) -> Uuid;
    /// A fresh unguessable id for a session, ask or plan (UUID v4 in production).
    fn random_id(&self) -> Uuid;
}

/// The real clock and random ids.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemEnvironment;

impl Environment for SystemEnvironment {
    fn now(&self) -> Timestamp {
        Timestamp(i64::try_from(unix_millis()).unwrap_or(i64::MAX))
    }

    fn event_id(&self) -> Uuid {
        time_ordered_id(unix_millis())
    }

    fn random_id(&self) -> Uuid {
        Uuid::new_v4()
    }
}

/// Milliseconds since the Unix epoch by the system clock (0 before it).
fn unix_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A UUID v7 for `millis` whose 74 other bits come from a SplitMix64
/// sequence seeded once per process by the OS, not from a system call per
/// id (an append of a step's events drew four or five). Event and run ids
/// must be unique, not unguessable; the ids a person could guess at
/// (sessions, asks, plans) are v4, each drawn from the OS.
fn time_ordered_id(millis: u64) -> Uuid {
    use std::sync::atomic::{AtomicU64, Ordering};
    const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;
    static STATE: std::sync::OnceLock<AtomicU64> = std::sync::OnceLock::new();
    let state = STATE.get_or_init(|| {
        let mut seed = [0u8; 8];
        if getrandom::fill(&mut seed).is_err() {
            // Still a sequence of this process's own.
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            seed = (nanos ^ (u64::from(std::process::id()) << 40)).to_le_bytes();
        }
        AtomicU64::new(u64::from_le_bytes(seed))
    });
    let draw = || {
        let mut z = state
            .fetch_add(GAMMA, Ordering::Relaxed)
            .wrapping_add(GAMMA);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut bits = [0u8; 10];
    bits[..8].copy_from_slice(&draw().to_le_bytes());
    bits[8..].copy_from_slice(&draw().to_le_bytes()[..2]);
    uuid::Builder::from_unix_timestamp_millis(millis, &bits).into_uuid()
}

/// A scripted environment: time starts at `start` and moves `step_ms` per
/// reading; ids count up from 1. Deterministic, for tests and golden files.
#[derive(Debug)]
pub struct FixedEnvironment {
    state: Mutex<(i64, u128)>,
    step_ms: i64,
}

impl FixedEnvironment {
    /// Time starts at `start` and advances `step_ms` per reading.
    pub fn new(start: Timestamp, step_ms: i64) -> FixedEnvironment {
        FixedEnvironment {
            state: Mutex::new((start.0, 0)),
            step_ms,
        }
    }

    fn next_id(&self) -> Uuid {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.1 += 1;
        Uuid::from_u128(state.1)
    }
}

impl Environment for FixedEnvironment {
    fn now(&self) -> Timestamp {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = state.0;
        state.0 += self.step_ms;
        Timestamp(now)
    }

    fn event_id(&self) -> Uuid {
        self.next_id()
    }

    fn random_id(&self) -> Uuid {
        self.next_id()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_ids_are_v7_of_their_millisecond_and_never_repeat() {
        let ids: Vec<Uuid> = (0..100_000)
            .map(|n| time_ordered_id(1_700_000_000_000 + n / 1000))
            .collect();
        let distinct: std::collections::HashSet<Uuid> = ids.iter().copied().collect();
        assert_eq!(distinct.len(), ids.len());
        for (n, id) in ids.iter().enumerate() {
            assert_eq!(id.get_version(), Some(uuid::Version::SortRand));
            assert_eq!(id.get_variant(), uuid::Variant::RFC4122);
            let (secs, nanos) = id.get_timestamp().expect("v7 has a time").to_unix();
            assert_eq!(
                secs * 1000 + u64::from(nanos) / 1_000_000,
                1_700_000_000_000 + n as u64 / 1000
            );
        }
        // Ids of later milliseconds sort after earlier ones.
        assert!(ids[999] < ids[1000]);
        let system = SystemEnvironment.event_id();
        assert_eq!(system.get_version(), Some(uuid::Version::SortRand));
    }
}
