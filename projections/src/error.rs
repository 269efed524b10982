//! The projections' error type.

use planb_core::{DecodeError, EncodeError, Rejection};
use planb_log::LogError;

/// Errors of the store and its projections.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The command was refused by the domain rules; nothing was recorded.
    #[error(transparent)]
    Rejected(#[from] Rejection),
    /// The log failed (I/O, corruption, a previous failed sync).
    #[error(transparent)]
    Log(#[from] LogError),
    /// A record in the log is not an event this version understands.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// An event could not be encoded.
    #[error(transparent)]
    Encode(#[from] EncodeError),
    /// The redb index failed.
    #[error("index {path}: {op}: {source}")]
    Index {
        /// The index file.
        path: String,
        /// What was being done.
        op: &'static str,
        /// redb's error.
        source: Box<redb::Error>,
    },
    /// A projection has seen cursors the log no longer holds: nothing is
    /// written until a person resolves it.
    #[error(transparent)]
    LostTail(Box<crate::health::LostTail>),
    /// A named plan's file could not be read or written.
    #[error(transparent)]
    PlanFile(#[from] crate::plan_file::PlanFileError),
    /// A session plan version's event is not in the log where the state
    /// says it is (the log was replaced under a running process).
    #[error("the log holds no saved plan at cursor {cursor}")]
    PlanTextMissing {
        /// The cursor the state names.
        cursor: u64,
    },
    /// A store call handed to another thread did not finish: the runtime
    /// is shutting down, or the call panicked (a bug).
    #[error("a store call did not finish: {0}")]
    Interrupted(String),
    /// A blob could not be stored or read back.
    #[error(transparent)]
    Blob(Box<crate::blobs::BlobError>),
    /// A file-system operation on a projection failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The path involved.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
}
