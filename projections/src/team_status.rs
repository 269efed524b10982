//! `<root>/team/status.json`: what the data root's team shipper last saw
//! (how far it shipped, the last error). The shipper writes it; `team
//! status` and planb-retro read it, so a person sees why shipping is behind
//! without asking the database. It is a report, not a projection: the
//! database holds the truth of what was shipped.

use std::fs::File;
use std::path::Path;

use planb_core::time::Timestamp;
use serde::{Deserialize, Serialize};

use crate::DataRoot;

/// Longest status file read, in bytes.
const STATUS_BYTES_MAX: u64 = 64 * 1024;

/// What the last shipper of a root saw.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TeamStatus {
    /// The database, without a password.
    pub database: String,
    /// The origin id.
    pub origin: String,
    /// The member name shipped under.
    pub member: String,
    /// Every record up to this cursor is in the database (or kept back).
    pub shipped_to: u64,
    /// The local log's last cursor when last looked at.
    pub log_end: u64,
    /// Events this shipper wrote since it started.
    pub shipped: u64,
    /// Events kept back by the projects' scope since it started.
    pub withheld: u64,
    /// When the database last took a batch (or was found up to date).
    pub last_success: Option<Timestamp>,
    /// Why the last try failed, when it did.
    pub last_error: Option<String>,
    /// When it failed.
    pub last_error_at: Option<Timestamp>,
    /// Shipping cannot go on until a person acts (divergence, damage, a
    /// newer schema).
    pub halted: bool,
    /// The shipping process.
    pub pid: u32,
    /// When this file was written.
    pub updated_at: Option<Timestamp>,
}

/// Writes `status` (temp name and rename).
pub fn write_team_status(root: &DataRoot, status: &TeamStatus) -> std::io::Result<()> {
    let dir = root.team_dir();
    std::fs::create_dir_all(&dir)?;
    let temp = dir.join(format!("status.json.{}.tmp", std::process::id()));
    std::fs::write(&temp, serde_json::to_vec_pretty(status).unwrap_or_default())?;
    std::fs::rename(&temp, dir.join("status.json"))
}

/// The last status written, `None` when no shipper has run.
pub fn read_team_status(root: &DataRoot) -> std::io::Result<Option<TeamStatus>> {
    read(&root.team_dir().join("status.json"))
}

fn read(path: &Path) -> std::io::Result<Option<TeamStatus>> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    serde_json::from_reader(std::io::Read::take(file, STATUS_BYTES_MAX))
        .map(Some)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}
