//! `planb-projections`: everything derived from the log, and the write path.
//!
//! - [`Store`] is the one way to change anything: under the log's append lock
//!   it catches up on the log, lets the core decide, appends the events durably
//!   and applies them to the in-memory [`planb_core::State`].
//! - [`Index`] keeps the redb indexes (sessions by update time and project, asks
//!   by status, plan versions, events by session) up to date from the log; one
//!   process at a time owns it, and it can be dropped and rebuilt at any time.
//! - [`Timeline`] is the read model of planb-retro's replay.
//! - [`rebuild`] rebuilds every projection from the log, beside running servers.
//!
//! **Architecture invariant**: nothing here is ground truth. Every file this
//! crate writes can be deleted and rebuilt from the log; the only bytes that
//! cannot are the log's, which only [`Store::execute`] appends to. It renders
//! no HTML: the pages live in `planb-ui`.

mod blob_places;
mod blobs;
pub mod bounded;
mod env;
mod error;
pub mod files;
mod health;
mod import;
mod index;
mod indexer;
pub mod pipelines;
mod plan_file;
mod plan_temps;
mod plan_texts;
mod rebuild;
mod root;
mod runs;
mod snapshot;
mod store;
mod team_status;
pub mod timeline;

pub use blobs::{BLOB_BYTES_MAX, BlobError, BlobHash, Blobs};
pub use env::{Environment, FixedEnvironment, SystemEnvironment};
pub use error::StoreError;
pub use files::{ExportReport, export};
pub use health::{LostTail, TreeCheck, check_tree};
pub use import::{
    IMPORTED_ASK_URL, ImportLock, ImportProblem, ImportReport, Imported, Skipped, import,
};
pub use index::{Index, IndexDump, IndexedAskStatus, IndexedTaskState};
pub use plan_file::{PLAN_FILE_BYTES_MAX, PlanFileChange, PlanFileError};
pub use rebuild::{AcceptedLoss, RebuildReport, accept_loss, rebuild};
pub use root::{DataRoot, NoDataRoot};
pub use runs::{RunLock, RunLockError, worker_alive};
pub use snapshot::{SnapshotCheck, check_snapshot};
pub use store::{OpenReport, SNAPSHOT_AFTER_EVENTS, Store};
pub use team_status::{TeamStatus, read_team_status, write_team_status};
pub use timeline::{StepMark, TaskAt, Timeline};
