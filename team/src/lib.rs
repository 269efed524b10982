//! `planb-team`: a team store on PostgreSQL. Each data root's log is
//! shipped, exactly once and in order, into one database that a team
//! shares (`ship`), by one process per root in the background (`background`)
//! or on demand (`push`); what leaves the machine is decided by the
//! projects a person named (`scope`). The database's schema is planb's own
//! and versioned (`db`). No tool call waits for any of it.

pub mod background;
pub mod db;
pub mod local;
pub mod scope;
pub mod settings;
pub mod ship;

use planb_projections::DataRoot;

pub use background::Background;
pub use db::{DbError, SCHEMA_VERSION};
pub use local::Status;
pub use scope::{Place, Placer, Projects};
pub use settings::{SettingsError, TeamSettings};
pub use ship::{Pass, Refused, ShipError, Shipper};

/// Most passes `push` makes when other shippers of the same root keep
/// moving the mark under it.
const PUSH_PASSES_MAX: u32 = 100;

/// Ships everything up to the log's end now: the events shipped, the mark
/// at the end, and, of the whole log up to it, how many events are kept on
/// this machine and which ones the database refused (the first
/// [`ship::REFUSED_NAMED_MAX`]).
pub async fn push(root: DataRoot, settings: TeamSettings) -> Result<Pass, ShipError> {
    let mut shipper = Shipper::new(root, settings)?;
    let mut total = Pass::default();
    for _ in 0..PUSH_PASSES_MAX {
        match shipper.ship_to_end().await {
            Ok(pass) => {
                total.shipped += pass.shipped;
                total.shipped_to = pass.shipped_to;
                // What is kept here and refused there, over the whole log.
                shipper.tally(&mut total).await?;
                return Ok(total);
            }
            Err(ShipError::Raced) => tokio::time::sleep(background::POLL).await,
            Err(error) => return Err(error),
        }
    }
    Err(ShipError::Raced)
}

/// What the database holds for one origin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatabaseMark {
    /// Every record up to this cursor is shipped (or withheld).
    pub shipped_to: u64,
    /// Events the database holds from this origin.
    pub events: u64,
    /// Events of this origin the database refused (named by `team push`).
    pub refused: u64,
    /// When the last batch landed.
    pub last_shipped_at: Option<std::time::SystemTime>,
}

/// The database's mark for `origin`, `None` when it has never shipped.
pub async fn database_mark(
    settings: &TeamSettings,
    origin: uuid::Uuid,
) -> Result<Option<DatabaseMark>, DbError> {
    let client = db::connect(settings).await?;
    let row = db::timed(
        "read the origin's mark",
        client.query_opt(
            "SELECT o.shipped_to, (SELECT count(*) FROM planb_events e WHERE e.origin = o.origin), \
             o.last_shipped_at, (SELECT count(*) FROM planb_refused r WHERE r.origin = o.origin \
             AND NOT EXISTS (SELECT 1 FROM planb_events e WHERE e.origin = r.origin AND e.cursor = r.cursor)) \
             FROM planb_origins o WHERE o.origin = $1",
            &[&origin],
        ),
    )
    .await?;
    Ok(row.map(|row| DatabaseMark {
        shipped_to: row.get::<_, i64>(0).max(0) as u64,
        events: row.get::<_, i64>(1).max(0) as u64,
        last_shipped_at: row.get(2),
        refused: row.get::<_, i64>(3).max(0) as u64,
    }))
}
