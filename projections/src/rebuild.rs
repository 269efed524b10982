//! Dropping and rebuilding every projection from the log.

use std::sync::Arc;
use std::time::{Duration, Instant};

use planb_core::State;
use planb_log::{FsStorage, LogOptions};

use crate::StoreError;
use crate::index::Index;
use crate::store::DataRoot;

/// What a rebuild did.
#[derive(Debug, Clone)]
pub struct RebuildReport {
    /// Events folded.
    pub events: u64,
    /// Sessions in the rebuilt state.
    pub sessions: usize,
    /// Time the rebuild took.
    pub elapsed: Duration,
}

/// Deletes the redb index and rebuilds it, folding the whole log into a fresh
/// state on the way (which also proves every event decodes), then deletes and
/// rewrites the `sessions/` file tree from that state. The log is only read.
pub fn rebuild(root: &DataRoot) -> Result<(State, RebuildReport), StoreError> {
    let options = LogOptions::default();
    let log_dir = root.log_dir();
    let storage: Arc<dyn planb_log::Storage> = Arc::new(
        FsStorage::open_read_only(&log_dir).map_err(|source| StoreError::Io {
            op: "open log",
            path: log_dir.display().to_string(),
            source,
        })?,
    );

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
    // One pass over the log: each event is decoded once and applied to both the
    // redb index and the in-memory state.
    let index = Index::open(&index_path, storage, options)?;
    let mut state = State::default();
    let events = index.catch_up_observing(|envelope| state.apply(envelope))?;
    crate::files::rebuild_tree(root, &state)?;
    let elapsed = start.elapsed();
    let sessions = state.sessions().len();
    Ok((
        state,
        RebuildReport {
            events,
            sessions,
            elapsed,
        },
    ))
}
