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
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        Timestamp(millis)
    }

    fn event_id(&self) -> Uuid {
        Uuid::now_v7()
    }

    fn random_id(&self) -> Uuid {
        Uuid::new_v4()
    }
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
