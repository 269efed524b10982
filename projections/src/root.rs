//! The files of a data root: where each projection, lock and folder lives.
//! Only paths; what is in them is each module's.

use std::path::{Path, PathBuf};

/// The files of a data root.
#[derive(Debug, Clone)]
pub struct DataRoot {
    root: PathBuf,
}

impl DataRoot {
    /// The data root at `root` (usually `$PLANB_MCP_DATA_DIR` or `~/.planb-mcp`).
    pub fn new(root: impl Into<PathBuf>) -> DataRoot {
        DataRoot { root: root.into() }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The log directory: the ground truth.
    pub fn log_dir(&self) -> PathBuf {
        self.root.join("log")
    }

    /// The redb index: derived.
    pub fn index_path(&self) -> PathBuf {
        self.root.join("index.redb")
    }

    /// The planb-mcp file layout, `sessions/<id>/…`: derived.
    pub fn sessions_dir(&self) -> PathBuf {
        self.root.join("sessions")
    }

    /// The cursor up to which `sessions/` is known to be current.
    pub fn sessions_checkpoint_path(&self) -> PathBuf {
        self.root.join("sessions.cursor")
    }

    /// The folded state saved with its place in the log: derived.
    pub fn state_snapshot_path(&self) -> PathBuf {
        self.root.join("state.snapshot")
    }

    /// The team files: this root's origin id in a team database, the
    /// shipper's lock and its status (`docs/team.md`).
    pub fn team_dir(&self) -> PathBuf {
        self.root.join("team")
    }

    /// The blob store: artifact bytes the log names by hash. Ground truth,
    /// like the log, for blobs too large to be in the log.
    pub fn blobs_dir(&self) -> PathBuf {
        self.root.join("blobs")
    }

    /// The blob store of this root (small blobs restored from its log).
    pub fn blobs(&self) -> crate::Blobs {
        crate::Blobs::with_log(self.blobs_dir(), self.log_dir())
    }
}
