//! A [`State`] as bytes, so a process can start from a saved state and fold
//! only the events after it instead of the whole log.
//!
//! ```text
//! offset  size  field
//! 0       4     magic  b"PBST" (planb state)
//! 4       4     SNAPSHOT_VERSION, u32 little-endian
//! 8       n     rkyv archive of the `State`
//! ```
//!
//! Unlike events, snapshots are not kept forever: a snapshot of another
//! version is refused, and the caller folds the log from the start (and may
//! write a new one). So the version must change whenever the `State` types or
//! the meaning of [`State::apply`] change; a stale snapshot would otherwise
//! give a state no fold of the log gives. Integrity (a checksum) and where
//! the snapshot stands in the log are the caller's framing.

use rkyv::rancor;
use rkyv::util::AlignedVec;

use super::State;

/// First four bytes of an encoded state.
const MAGIC: [u8; 4] = *b"PBST";

/// The version of the `State` types and of `apply` that
/// [`State::encode_snapshot`] writes and [`State::decode_snapshot`] accepts.
/// Version 2 added the DAG engine's tasks; version 3 their run-log tails
/// and when each artifact last changed; version 4 keeps a session plan
/// version's length and hash instead of its text; version 6 no longer
/// keeps each run's tool calls (the log and the retro timeline have them);
/// version 7 keeps the cursor of the newest event that is not a task's;
/// version 8 a task's archive and deletion; version 9 the project a
/// task or an execution plan was made for.
pub const SNAPSHOT_VERSION: u32 = 9;

const HEADER_LEN: usize = 8;

/// Why bytes are not a state snapshot this version can use.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// Not a state snapshot at all.
    #[error("not a planb state snapshot (bad magic or shorter than {HEADER_LEN} bytes)")]
    NotASnapshot,
    /// A snapshot of another version of the state.
    #[error("state snapshot version {found}, this planb reads version {SNAPSHOT_VERSION}")]
    Version {
        /// The version the bytes carry.
        found: u32,
    },
    /// The archive does not validate or could not be written.
    #[error("state snapshot archive: {0}")]
    Archive(String),
}

impl State {
    /// The state as snapshot bytes (see the module docs).
    pub fn encode_snapshot(&self) -> Result<Vec<u8>, SnapshotError> {
        let archive = rkyv::to_bytes::<rancor::Error>(self)
            .map_err(|e| SnapshotError::Archive(e.to_string()))?;
        let mut bytes = Vec::with_capacity(HEADER_LEN + archive.len());
        bytes.extend_from_slice(&MAGIC);
        bytes.extend_from_slice(&SNAPSHOT_VERSION.to_le_bytes());
        bytes.extend_from_slice(&archive);
        Ok(bytes)
    }

    /// The state `bytes` hold, validated before anything is deserialized, so
    /// damaged bytes give an error, never a panic.
    pub fn decode_snapshot(bytes: &[u8]) -> Result<State, SnapshotError> {
        if bytes.len() < HEADER_LEN || bytes[..4] != MAGIC {
            return Err(SnapshotError::NotASnapshot);
        }
        let found = u32::from_le_bytes(bytes[4..8].try_into().expect("four bytes"));
        if found != SNAPSHOT_VERSION {
            return Err(SnapshotError::Version { found });
        }
        let mut aligned = AlignedVec::<16>::with_capacity(bytes.len() - HEADER_LEN);
        aligned.extend_from_slice(&bytes[HEADER_LEN..]);
        rkyv::from_bytes::<State, rancor::Error>(&aligned)
            .map_err(|e| SnapshotError::Archive(e.to_string()))
    }
}
