//! The files of a data root: where each projection, lock and folder lives.
//! Only paths; what is in them is each module's.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// No data root can be found: none is named and `HOME` is not set.
#[derive(Debug, thiserror::Error)]
#[error("HOME is not set, so there is no ~/.planb-mcp: pass --data-dir or set PLANB_MCP_DATA_DIR")]
pub struct NoDataRoot;

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

    /// The data root every planb process on this machine uses unless its
    /// command line names one: `$PLANB_MCP_DATA_DIR`, else
    /// `$BROWSER_PLAN_DATA_DIR` (a setup written for browser-plan, planb's
    /// forerunner, keeps its root), else `~/.planb-mcp`. A blank variable
    /// counts as unset.
    pub fn locate() -> Result<DataRoot, NoDataRoot> {
        DataRoot::locate_with(&|name| std::env::var_os(name))
    }

    /// [`DataRoot::locate`] with the environment read through `var`.
    pub fn locate_with(var: &dyn Fn(&str) -> Option<OsString>) -> Result<DataRoot, NoDataRoot> {
        let set =
            |name| var(name).filter(|value: &OsString| !value.to_string_lossy().trim().is_empty());
        if let Some(dir) = set("PLANB_MCP_DATA_DIR").or_else(|| set("BROWSER_PLAN_DATA_DIR")) {
            return Ok(DataRoot::new(dir));
        }
        let home = set("HOME").ok_or(NoDataRoot)?;
        Ok(DataRoot::new(PathBuf::from(home).join(".planb-mcp")))
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

    /// Where `accept-loss` says which gap in the log it accepted, and when.
    pub fn accepted_loss_path(&self) -> PathBuf {
        self.root.join("loss.accepted")
    }

    /// Held while an import runs, so imports run one at a time.
    pub fn import_lock_path(&self) -> PathBuf {
        self.root.join("import.lock")
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

#[cfg(test)]
mod tests {
    use super::*;

    fn located(vars: &[(&str, &str)]) -> Option<PathBuf> {
        let var = |name: &str| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| OsString::from(v))
        };
        DataRoot::locate_with(&var)
            .ok()
            .map(|root| root.root().to_path_buf())
    }

    #[test]
    fn the_root_is_named_by_planb_then_by_the_forerunner_then_by_home() {
        let all = [
            ("PLANB_MCP_DATA_DIR", "/p"),
            ("BROWSER_PLAN_DATA_DIR", "/b"),
            ("HOME", "/h"),
        ];
        assert_eq!(located(&all), Some("/p".into()));
        assert_eq!(located(&all[1..]), Some("/b".into()));
        assert_eq!(
            located(&[("PLANB_MCP_DATA_DIR", ""), ("HOME", "/h")]),
            Some("/h/.planb-mcp".into())
        );
        assert_eq!(located(&[("BROWSER_PLAN_DATA_DIR", " ")]), None);
    }
}
