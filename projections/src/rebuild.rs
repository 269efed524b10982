//! Rebuilding every projection from the log, safely beside running servers.
//!
//! A rebuild holds the log's append lock from start to end, so no server
//! appends or projects meanwhile (they wait, then catch up). It builds the new
//! index and `sessions/` tree beside the live ones, in `<root>/rebuild.new/`,
//! and swaps them in with renames, so at no point are acknowledged files
//! missing while a checkpoint vouches for them. Crash windows:
//!
//! - before the swap: `rebuild.new/` is left over and removed by the next
//!   rebuild; the live projections are untouched;
//! - between the renames of the tree: `sessions/` may be missing, or the old
//!   tree may sit in `sessions.old/`; the checkpoint was removed first, so the
//!   next server rewrites the whole tree, and the next rebuild carries over any
//!   session directory in `sessions.old/` the log does not know before
//!   removing it.
//!
//! A session directory the log does not know (a Node planb-mcp tree not
//! imported yet) is carried into the new tree, never deleted: a rebuild must
//! not destroy what it cannot write again. A rebuild refuses to run when a
//! projection has seen cursors the log no longer holds (see `health.rs`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use planb_core::{Cursor, SessionId, State};
use planb_log::{AppendGuard, Log, LogOptions};

use crate::StoreError;
use crate::files::{self, Writer};
use crate::health;
use crate::index::Index;
use crate::root::DataRoot;

/// What a rebuild did.
#[derive(Debug, Clone)]
pub struct RebuildReport {
    /// Events folded.
    pub events: u64,
    /// Sessions in the rebuilt state.
    pub sessions: usize,
    /// Session directories the log does not know, carried over untouched.
    pub kept_unknown: Vec<String>,
    /// Blobs the log holds, whose places file was written again.
    pub blobs_in_log: usize,
    /// Files of blobs the log holds (copies kept by earlier versions),
    /// removed.
    pub blob_copies_removed: usize,
    /// Time the rebuild took.
    pub elapsed: Duration,
}

/// Rebuilds the redb index and the `sessions/` tree from the log, folding it
/// once into a fresh state (which also proves every event decodes). Safe
/// while servers run: it holds the append lock and swaps the new projections
/// in. Refuses with [`StoreError::LostTail`] when a projection has seen
/// cursors the log no longer holds.
pub fn rebuild(root: &DataRoot) -> Result<(State, RebuildReport), StoreError> {
    let (log, _recovery) = planb_log::open_dir(&root.log_dir(), LogOptions::default())?;
    let guard = log.lock()?;
    let end = Cursor(guard.next_cursor().0 - 1);
    let index_applied = Index::peek_applied_cursor(&root.index_path());
    let snapshot_claims = crate::snapshot::claimed_cursor(root);
    if let Some(lost) = health::lost_tail(root, end, index_applied, snapshot_claims) {
        return Err(StoreError::LostTail(Box::new(lost)));
    }
    rebuild_locked(root, &log, &guard)
}

/// [`rebuild`] with the append lock already held.
pub(crate) fn rebuild_locked(
    root: &DataRoot,
    log: &Log,
    _guard: &AppendGuard<'_>,
) -> Result<(State, RebuildReport), StoreError> {
    let start = Instant::now();
    let beside = DataRoot::new(root.root().join("rebuild.new"));
    files::remove(&root.sessions_checkpoint_path(), false)?;
    // Rebuilt from the log as well, below; until then no snapshot stands.
    files::remove(&root.state_snapshot_path(), false)?;
    files::remove(beside.root(), true)?;
    create_dir(beside.root())?;

    let Folded {
        state,
        anchor,
        places,
        events,
    } = fold_beside(&beside, log)?;
    let (blobs_in_log, blob_copies_removed) = place_blobs(root, &places);
    let mut writer = Writer::default();
    files::write_all(&mut writer, &beside, &state)?;
    writer.finish(log.storage())?;
    create_dir(&beside.sessions_dir())?;

    let kept_unknown = swap_in(root, &beside, &state)?;
    files::write_checkpoint(root, state.last_cursor())?;
    files::remove(beside.root(), true)?;
    // The next process starts from the rebuilt state instead of folding the
    // whole log again. A snapshot that cannot be written only costs time.
    if let Some(anchor) = anchor
        && events >= crate::store::SNAPSHOT_AFTER_EVENTS
        && let Err(error) = crate::snapshot::save(root, &state, anchor)
    {
        tracing::warn!("rebuild could not write the state snapshot: {error}");
    }
    if !kept_unknown.is_empty() {
        tracing::warn!(
            ?kept_unknown,
            "rebuild kept session directories the log does not know; `planb-mcp import` brings them in"
        );
    }
    let sessions = state.sessions().len();
    Ok((
        state,
        RebuildReport {
            events,
            sessions,
            kept_unknown,
            blobs_in_log,
            blob_copies_removed,
            elapsed: start.elapsed(),
        },
    ))
}

/// What one pass over the log gives a rebuild.
struct Folded {
    /// The state at the end of the log.
    state: State,
    /// The last record read, if any.
    anchor: Option<crate::snapshot::Anchor>,
    /// Where the log holds each blob recorded in it.
    places: Vec<crate::blob_places::Place>,
    /// Events folded.
    events: u64,
}

/// One pass over the log: each event is decoded once and applied to both
/// the new index, beside the live one, and the state.
fn fold_beside(beside: &DataRoot, log: &Log) -> Result<Folded, StoreError> {
    let index = Index::open(
        &beside.index_path(),
        std::sync::Arc::clone(log.storage()),
        LogOptions::default(),
    )?;
    let mut state = State::default();
    let mut anchor = None;
    let mut places = Vec::new();
    let events = index.catch_up_observing(|envelope, at| {
        state.apply(envelope);
        if let planb_core::EventBody::BlobStored { bytes, .. } = &envelope.event.body {
            places.push(crate::blob_places::Place {
                hash: planb_core::ContentHash::of_bytes(bytes).0,
                at: at.position,
            });
        }
        anchor = Some(at);
    })?;
    drop(index);
    Ok(Folded {
        state,
        anchor,
        places,
        events,
    })
}

/// Swaps the tree and the index built `beside` for the live ones, carrying
/// over the session directories the log does not know (returned).
fn swap_in(root: &DataRoot, beside: &DataRoot, state: &State) -> Result<Vec<String>, StoreError> {
    let old_tree = root.root().join("sessions.old");
    let live_tree = root.sessions_dir();
    // An earlier rebuild may have stopped between its renames.
    let mut kept_unknown = carry_unknown(&old_tree, &beside.sessions_dir(), state)?;
    files::remove(&old_tree, true)?;
    if live_tree.exists() {
        rename(&live_tree, &old_tree)?;
    }
    rename(&beside.sessions_dir(), &live_tree)?;
    kept_unknown.extend(carry_unknown(&old_tree, &live_tree, state)?);
    files::remove(&old_tree, true)?;
    rename(&beside.index_path(), &root.index_path())?;
    Ok(kept_unknown)
}

/// Writes the places file anew from `places` (every blob the log holds)
/// and removes the files of those blobs, copies earlier versions kept.
/// Returns how many blobs the log holds and how many copies went. Neither
/// step loses anything: the log holds every byte, and a place a server
/// notes in between, lost with the old file, is found in the log again.
fn place_blobs(root: &DataRoot, places: &[crate::blob_places::Place]) -> (usize, usize) {
    let dir = root.blobs_dir();
    if places.is_empty() {
        return (0, 0);
    }
    if let Err(error) = crate::blob_places::replace(&dir, places) {
        tracing::warn!("rebuild could not write the blobs' places: {error}");
    }
    let blobs = root.blobs();
    let mut removed = 0;
    let mut seen = std::collections::HashSet::new();
    for place in places {
        if seen.insert(place.hash) && std::fs::remove_file(blobs.path(&place.hash)).is_ok() {
            removed += 1;
        }
    }
    (seen.len(), removed)
}

/// Moves the session directories in `from` that the log does not know into
/// `to` (unless `to` has one of that name). Returns their names.
fn carry_unknown(from: &Path, to: &Path, state: &State) -> Result<Vec<String>, StoreError> {
    let entries = match std::fs::read_dir(from) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(StoreError::Io {
                op: "list",
                path: from.display().to_string(),
                source,
            });
        }
    };
    let mut carried = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let unknown = SessionId::parse(&name).is_ok_and(|id| state.session(&id).is_none());
        let target = to.join(&name);
        if unknown && entry.path().is_dir() && !target.exists() {
            rename(&entry.path(), &target)?;
            carried.push(name);
        }
    }
    Ok(carried)
}

fn create_dir(path: &Path) -> Result<(), StoreError> {
    std::fs::create_dir_all(path).map_err(|source| StoreError::Io {
        op: "create directory",
        path: path.display().to_string(),
        source,
    })
}

fn rename(from: &Path, to: &Path) -> Result<(), StoreError> {
    std::fs::rename(from, to).map_err(|source| StoreError::Io {
        op: "rename",
        path: format!("{} to {}", from.display(), to.display()),
        source,
    })
}
/// What [`accept_loss`] did.
#[derive(Debug, Clone)]
pub struct AcceptedLoss {
    /// `<root>/lost-<time>/`, holding what was moved.
    pub kept_in: PathBuf,
    /// The names moved there.
    pub moved: Vec<String>,
    /// The rebuild from the log as it is.
    pub rebuilt: crate::RebuildReport,
}

/// Goes on from the log as it is after a lost tail: moves `index.redb`,
/// `sessions/` and `sessions.cursor` into `<root>/lost-<time>/` (nothing is
/// deleted), then rebuilds them from the log, all under the append lock.
pub fn accept_loss(
    root: &DataRoot,
    now: planb_core::Timestamp,
) -> Result<AcceptedLoss, StoreError> {
    let (log, _recovery) = planb_log::open_dir(&root.log_dir(), LogOptions::default())?;
    let guard = log.lock()?;
    let stamp: String = now
        .to_iso8601()
        .chars()
        .filter(|c| !matches!(c, '-' | ':' | '.'))
        .collect();
    let kept_in = root.root().join(format!("lost-{stamp}"));
    std::fs::create_dir_all(&kept_in).map_err(|source| StoreError::Io {
        op: "create directory",
        path: kept_in.display().to_string(),
        source,
    })?;
    let mut moved = Vec::new();
    for name in [
        "index.redb",
        "sessions",
        "sessions.cursor",
        "state.snapshot",
    ] {
        let from = root.root().join(name);
        if !from.exists() {
            continue;
        }
        let to = kept_in.join(name);
        std::fs::rename(&from, &to).map_err(|source| StoreError::Io {
            op: "move aside",
            path: from.display().to_string(),
            source,
        })?;
        moved.push(name.to_owned());
    }
    let (state, rebuilt) = rebuild_locked(root, &log, &guard)?;
    // Processes that refused over this gap since before now write again.
    let log_end = state.last_cursor();
    health::write_accepted(root, health::Accepted { log_end, at: now })?;
    Ok(AcceptedLoss {
        kept_in,
        moved,
        rebuilt,
    })
}
