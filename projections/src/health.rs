//! Whether the projections agree with the log: a log that lost its tail, and a
//! file tree that claims more than it holds.
//!
//! **A lost tail.** The log's torn-tail recovery cannot see records that are
//! gone at a record boundary: a disk rolled back, a backup restored, the last
//! segment deleted. The projections can: `sessions.cursor` and the index both
//! remember the last cursor they applied. When one of them has seen a cursor
//! the log no longer holds, writing on would hand out those cursors (and plan
//! version numbers) a second time, and rebuilding would overwrite files that
//! may hold the only copy of the lost events. So the store refuses to write
//! until a person restores the log or runs `accept_loss` (beside the
//! rebuild it ends with), which moves the
//! projections aside, never deleting them. It leaves `loss.accepted`
//! behind ([`Accepted`]), so a process that was refusing since before
//! writes again without a restart.

use std::path::PathBuf;

use planb_core::{Cursor, State, Timestamp, decode};
use planb_log::LogOptions;

use crate::StoreError;
use crate::files::{self, Writer};
use crate::root::DataRoot;

/// The log ends before a cursor a projection has seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostTail {
    /// The data root.
    pub root: PathBuf,
    /// The last cursor in the log.
    pub log_end: Cursor,
    /// The highest cursor a projection has seen.
    pub seen: Cursor,
    /// Which projection saw it (`sessions.cursor`, `index.redb` or
    /// `state.snapshot`).
    pub witness: &'static str,
}

impl std::fmt::Display for LostTail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the log ends at cursor {end}, but {witness} has seen cursor {seen}: events {first}..={seen} \
             are missing from {log} (a disk rolled back, a backup restored, or a segment deleted). \
             planb records nothing until this is resolved: put back the log files that hold them, \
             or run `planb-mcp accept-loss` to go on from cursor {end}; it moves index.redb, \
             sessions/, sessions.cursor and state.snapshot to {root}/lost-<time>/ (the files there may hold the \
             only copy of the missing events) and rebuilds them from the log; planb processes already \
             open on this root record again once it is done",
            end = self.log_end.0,
            witness = self.witness,
            seen = self.seen.0,
            first = self.log_end.0 + 1,
            log = self.root.join("log").display(),
            root = self.root.display(),
        )
    }
}

impl std::error::Error for LostTail {}

impl LostTail {
    /// Whether `now` is an acceptance made since this process found the
    /// gap (when `loss.accepted` said `at_open`) of the log ending where it
    /// found it or later (a process unaware of the gap may have appended
    /// meanwhile): then it may write again.
    pub(crate) fn accepted(&self, at_open: Option<Accepted>, now: Option<Accepted>) -> bool {
        now.is_some_and(|a| a.log_end >= self.log_end && Some(a) != at_open)
    }
}

/// What `accept_loss` leaves in `loss.accepted`: the end of the log it
/// went on from, and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Accepted {
    pub log_end: Cursor,
    pub at: Timestamp,
}

/// Records `accepted` (temp name and rename), once the projections are
/// rebuilt.
pub(crate) fn write_accepted(root: &DataRoot, accepted: Accepted) -> Result<(), StoreError> {
    let path = root.accepted_loss_path();
    let temp = path.with_extension("tmp");
    let text = format!("{} {}\n", accepted.log_end.0, accepted.at.0);
    std::fs::write(&temp, text)
        .and_then(|()| std::fs::rename(&temp, &path))
        .map_err(|source| StoreError::Io {
            op: "write",
            path: path.display().to_string(),
            source,
        })
}

/// The last acceptance recorded in `loss.accepted`, if it can be read.
pub(crate) fn read_accepted(root: &DataRoot) -> Option<Accepted> {
    let bytes = crate::bounded::read(&root.accepted_loss_path(), 64)
        .ok()?
        .ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (end, at) = text.trim().split_once(' ')?;
    Some(Accepted {
        log_end: Cursor(end.parse().ok()?),
        at: Timestamp(at.parse().ok()?),
    })
}

/// Whether a projection has seen more of the log than it holds, given the
/// log's last cursor, the index's applied cursor (if known) and the cursor
/// `state.snapshot` claims (if it is readable; `None` as well when the
/// caller already found it inside the log).
pub(crate) fn lost_tail(
    root: &DataRoot,
    log_end: Cursor,
    index_applied: Option<Cursor>,
    snapshot_claims: Option<Cursor>,
) -> Option<LostTail> {
    let witnesses = [
        ("sessions.cursor", files::raw_checkpoint(root)),
        ("index.redb", index_applied),
        ("state.snapshot", snapshot_claims),
    ];
    witnesses
        .into_iter()
        .filter_map(|(witness, seen)| seen.map(|seen| (witness, seen)))
        .filter(|(_, seen)| *seen > log_end)
        .max_by_key(|(_, seen)| *seen)
        .map(|(witness, seen)| LostTail {
            root: root.root().to_path_buf(),
            log_end,
            seen,
            witness,
        })
}

/// What [`check_tree`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TreeCheck {
    /// No checkpoint, or one from an earlier boot: the tree vouches for
    /// nothing, and the next server rewrites it.
    Unclaimed,
    /// Every file the checkpoint vouches for is there with the right bytes.
    Holds {
        /// The checkpoint's cursor.
        checkpoint: Cursor,
        /// Files compared.
        files: usize,
    },
    /// The checkpoint claims files that are missing or differ.
    Wrong {
        /// The checkpoint's cursor.
        checkpoint: Cursor,
        /// Up to 20 of the wrong files, with what is wrong.
        examples: Vec<(PathBuf, &'static str)>,
        /// How many files are wrong.
        count: usize,
    },
    /// The checkpoint names a cursor past the end of the log.
    LostTail(LostTail),
}

/// Compares the `sessions/` tree with what the log says it holds as of the
/// cursor its checkpoint claims. Takes the log's append lock (the `LOCK` file,
/// read-only) so no writer moves the tree meanwhile; writes nothing.
pub fn check_tree(root: &DataRoot) -> Result<TreeCheck, StoreError> {
    let lock_path = root.log_dir().join(planb_log::LOCK_FILE);
    let lock = std::fs::File::open(&lock_path).map_err(|source| StoreError::Io {
        op: "open",
        path: lock_path.display().to_string(),
        source,
    })?;
    lock.lock().map_err(|source| StoreError::Io {
        op: "lock",
        path: lock_path.display().to_string(),
        source,
    })?;
    // Even a checkpoint of an earlier boot shows how far the log once went.
    let Some(checkpoint) = files::raw_checkpoint(root) else {
        return Ok(TreeCheck::Unclaimed);
    };
    let options = LogOptions::default();
    let mut reader = planb_log::read_dir(&root.log_dir(), options, planb_log::Cursor(1))?;
    let mut state = State::default();
    while state.last_cursor() < checkpoint {
        let Some(record) = reader.next()? else { break };
        let envelope = decode(&record.payload, Cursor(record.cursor.0))?;
        state.apply(&envelope);
    }
    if state.last_cursor() < checkpoint {
        return Ok(TreeCheck::LostTail(LostTail {
            root: root.root().to_path_buf(),
            log_end: state.last_cursor(),
            seen: checkpoint,
            witness: "sessions.cursor",
        }));
    }
    if files::read_checkpoint(root) != Some(checkpoint) {
        return Ok(TreeCheck::Unclaimed);
    }
    let mut writer = Writer {
        verify_only: true,
        ..Writer::default()
    };
    files::write_all(&mut writer, root, &state)?;
    drop(lock);
    let count = writer.wrong.len();
    if count == 0 {
        return Ok(TreeCheck::Holds {
            checkpoint,
            files: writer.unchanged,
        });
    }
    writer.wrong.truncate(20);
    Ok(TreeCheck::Wrong {
        checkpoint,
        examples: writer.wrong,
        count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_acceptance_made_since_the_open_of_the_log_as_long_clears_a_lost_tail() {
        let lost = LostTail {
            root: PathBuf::from("/data"),
            log_end: Cursor(3),
            seen: Cursor(4),
            witness: "sessions.cursor",
        };
        let accepted = |end, at| {
            Some(Accepted {
                log_end: Cursor(end),
                at: Timestamp(at),
            })
        };
        let at_open = accepted(3, 500);
        assert!(lost.accepted(at_open, accepted(3, 2_000)));
        assert!(lost.accepted(None, accepted(3, 2_000)));
        assert!(!lost.accepted(at_open, None), "nothing accepted");
        assert!(
            !lost.accepted(at_open, accepted(2, 2_000)),
            "a log shorter still"
        );
        assert!(
            lost.accepted(at_open, accepted(5, 2_000)),
            "appended to since"
        );
        assert!(
            !lost.accepted(at_open, at_open),
            "accepted before this open"
        );
    }
}
