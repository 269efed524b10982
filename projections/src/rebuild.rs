//! Dropping and rebuilding every projection from the log.

use std::sync::Arc;
use std::time::{Duration, Instant};

use planb_core::{Cursor, State, decode};
use planb_log::{FsStorage, LogOptions, LogReader};

use crate::index::Index;
use crate::store::DataRoot;
use crate::StoreError;

/// What a rebuild did.
#[derive(Debug, Clone)]
pub struct RebuildReport {
    /// Events folded.
    pub events: u64,
    /// Sessions in the rebuilt state.
    pub sessions: usize,
    /// Time spent folding the in-memory state.
    pub state_time: Duration,
    /// Time spent rebuilding the redb index.
    pub index_time: Duration,
}

/// Deletes the redb index and rebuilds it, and folds the whole log into a fresh
/// state to check every event decodes. The log is only read.
pub fn rebuild(root: &DataRoot) -> Result<(State, RebuildReport), StoreError> {
    let options = LogOptions::default();
    let log_dir = root.log_dir();
    let storage: Arc<dyn planb_log::Storage> =
        Arc::new(FsStorage::open_read_only(&log_dir).map_err(|source| StoreError::Io {
            op: "open log",
            path: log_dir.display().to_string(),
            source,
        })?);

    let start = Instant::now();
    let mut state = State::default();
    let mut reader = LogReader::new(Arc::clone(&storage), options, planb_log::Cursor(1));
    let mut events = 0u64;
    while let Some(record) = reader.next()? {
        state.apply(&decode(&record.payload, Cursor(record.cursor.0))?);
        events += 1;
    }
    let state_time = start.elapsed();

    let start = Instant::now();
    let index_path = root.index_path();
    match std::fs::remove_file(&index_path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(StoreError::Io {
                op: "remove index",
                path: index_path.display().to_string(),
                source,
            });
        }
    }
    let index = Index::open(&index_path, storage, options)?;
    index.catch_up()?;
    let index_time = start.elapsed();
    let sessions = state.sessions().len();
    Ok((
        state,
        RebuildReport {
            events,
            sessions,
            state_time,
            index_time,
        },
    ))
}
