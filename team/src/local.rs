//! The team files of a data root, under `<root>/team/`: `origin` (this
//! log's identity in the database, made once and never changed; a copy of
//! the root carries it, which is how a restored backup is recognised),
//! `shipper.lock` (an exclusive `flock`: the one process shipping this
//! root) and `status.json` (what the last shipper saw: how far, the last
//! error), which `team status` reads.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::Write;
use std::path::Path;

use planb_projections::DataRoot;
use uuid::Uuid;

/// A team file could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("{action} {path}: {source}")]
pub struct LocalError {
    /// What was being done.
    pub action: &'static str,
    /// The file.
    pub path: String,
    /// The error.
    pub source: std::io::Error,
}

fn local_error(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> LocalError {
    let path = path.display().to_string();
    move |source| LocalError {
        action,
        path,
        source,
    }
}

/// This root's origin id, made (random, written and synced) on first use.
pub fn origin(root: &DataRoot) -> Result<Uuid, LocalError> {
    let dir = root.team_dir();
    let path = dir.join("origin");
    if let Some(id) = read_origin(&path)? {
        return Ok(id);
    }
    std::fs::create_dir_all(&dir).map_err(local_error("create", &dir))?;
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| LocalError {
        action: "draw an origin id for",
        path: path.display().to_string(),
        source: std::io::Error::other(e.to_string()),
    })?;
    let id = uuid::Builder::from_random_bytes(bytes).into_uuid();
    let temp = dir.join(format!("origin.{}.tmp", std::process::id()));
    let mut file = File::create(&temp).map_err(local_error("create", &temp))?;
    file.write_all(format!("{id}\n").as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(local_error("write", &temp))?;
    // Two processes starting at once: the first link wins, both read it.
    match std::fs::hard_link(&temp, &path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(local_error("write", &path)(e)),
    }
    let _ = std::fs::remove_file(&temp);
    File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(local_error("sync", &dir))?;
    read_origin(&path)?
        .ok_or_else(|| local_error("read", &path)(std::io::ErrorKind::NotFound.into()))
}

fn read_origin(path: &Path) -> Result<Option<Uuid>, LocalError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Uuid::parse_str(text.trim())
            .map(Some)
            .map_err(|e| LocalError {
                action: "read",
                path: path.display().to_string(),
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("not an origin id: {e}"),
                ),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(local_error("read", path)(e)),
    }
}

/// The shipper's role, held while the file stays open.
#[derive(Debug)]
pub struct ShipperLock {
    _file: File,
}

/// Takes the shipper's role for `root` if no other process holds it.
pub fn try_shipper_lock(root: &DataRoot) -> Result<Option<ShipperLock>, LocalError> {
    let dir = root.team_dir();
    std::fs::create_dir_all(&dir).map_err(local_error("create", &dir))?;
    let path = dir.join("shipper.lock");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(local_error("open", &path))?;
    match file.try_lock() {
        Ok(()) => Ok(Some(ShipperLock { _file: file })),
        Err(TryLockError::WouldBlock) => Ok(None),
        Err(TryLockError::Error(e)) => Err(local_error("lock", &path)(e)),
    }
}

/// What the last shipper of a root saw (the file's format is the data
/// root's, so planb-retro reads it without this crate).
pub use planb_projections::TeamStatus as Status;

/// Writes `status` (temp name and rename).
pub fn write_status(root: &DataRoot, status: &Status) -> Result<(), LocalError> {
    planb_projections::write_team_status(root, status)
        .map_err(local_error("write", &root.team_dir().join("status.json")))
}

/// The last status written, `None` when no shipper has run.
pub fn read_status(root: &DataRoot) -> Result<Option<Status>, LocalError> {
    planb_projections::read_team_status(root)
        .map_err(local_error("read", &root.team_dir().join("status.json")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_origin_is_made_once_and_kept() {
        let dir = tempfile::tempdir().expect("temp");
        let root = DataRoot::new(dir.path());
        let first = origin(&root).expect("made");
        assert_eq!(origin(&root).expect("read"), first);
        std::fs::write(root.team_dir().join("origin"), "junk").expect("write");
        assert!(
            origin(&root)
                .expect_err("junk")
                .to_string()
                .contains("not an origin id")
        );
    }

    #[test]
    fn one_process_at_a_time_holds_the_shipper_role() {
        let dir = tempfile::tempdir().expect("temp");
        let root = DataRoot::new(dir.path());
        let held = try_shipper_lock(&root).expect("lock").expect("free");
        assert!(try_shipper_lock(&root).expect("lock").is_none());
        drop(held);
        assert!(try_shipper_lock(&root).expect("lock").is_some());
    }
}
