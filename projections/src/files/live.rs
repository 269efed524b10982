//! Keeping the live tree of a data root current while several processes
//! append to one log.
//!
//! **Who writes.** Every projection of the live tree runs under the log's
//! append lock, on a state caught up to the end of the log. Lock holders
//! follow one another in log order, so a later projection always writes a
//! newer state and an older one can never overwrite it. The writer of an
//! event projects it before it answers (`Store::execute`): the files are
//! written while the log syncs the event (they need no sync of their own,
//! the log is the truth), so at the moment a tool replies every file of the
//! layout it changed is in place and agrees with the log. A process that
//! folds events another process appended projects them too when the
//! checkpoint shows nobody did (that process crashed between append and
//! projection, or failed to write).
//!
//! **The checkpoint.** `<root>/sessions.cursor` holds the cursor `c` such that
//! every event up to `c` is reflected in the tree, and the boot id of the
//! machine that wrote it. It is written after a projection that left no
//! gap and wrote every file, and only once the events it vouches for are
//! durable (a checkpoint past the durable log would be taken for a lost
//! tail after a power cut); a failed projection leaves it behind. Each
//! process keeps a [`Pending`] set: the sessions (and their asks and plan
//! versions) changed by the events it folded since it last projected. Under
//! the lock, with the checkpoint at `c` and the pending set covering events
//! after `after`:
//!
//! - `c` = end of the log: the tree is current, nothing to write;
//! - `after <= c < end`: write the pending parts, then set the checkpoint;
//! - otherwise (no checkpoint, `c < after` because a projection failed
//!   somewhere, `c` past the end because the log was replaced): write every
//!   session, then set the checkpoint.
//!
//! A checkpoint with more than its first line (earlier versions named
//! manifests left to follow on it) is not trusted: the next projection
//! rewrites every session.
//!
//! Files are not fsynced (see `files.rs`); a checkpoint written during an
//! earlier boot is therefore not trusted, since an unclean shutdown may have
//! lost files it vouches for. Deleting `sessions/` also voids it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, OnceLock};

use planb_core::{AskId, Cursor, Envelope, EventBody, SessionId, State};
use planb_log::Storage;

use super::{Parts, Writer, write_if_changed};
use crate::StoreError;
use crate::root::DataRoot;

/// What this process folded since it last projected.
#[derive(Debug)]
pub(crate) struct Pending {
    /// Every event after this cursor that the process folded is noted in
    /// `sessions` (unless `full`).
    after: Cursor,
    /// The next projection rewrites every session, so nothing is noted.
    full: bool,
    /// A projection of this process failed: the tree may lack events up to
    /// `after`, so the next one rewrites every session.
    failed: bool,
    /// Changed sessions, with the asks and plan versions whose files changed.
    sessions: BTreeMap<SessionId, (BTreeSet<AskId>, BTreeSet<u32>)>,
    /// The texts of the plan versions noted, up to [`PENDING_TEXT_BYTES_MAX`]
    /// in all; a version past that has its text read from the log.
    texts: HashMap<Cursor, String>,
    /// The bytes of `texts`.
    text_bytes: usize,
    /// The manifests' plan entries as this process rendered them.
    manifests: super::ManifestCache,
}

/// The most plan text a process keeps between folding events and writing
/// their files.
const PENDING_TEXT_BYTES_MAX: usize = 64 << 20;

impl Pending {
    /// For a process about to fold the log from `start` on (after a state
    /// snapshot, or from the beginning): events the checkpoint vouches for
    /// are not noted. Should the checkpoint lag behind `start`, the events in
    /// between were never noted, so the next projection rewrites everything.
    /// A checkpoint behind `start` still vouches for it when no event in
    /// between changed a session.
    pub(crate) fn at_open(root: &DataRoot, state: &State) -> Pending {
        let start = state.last_cursor();
        let after = read_checkpoint(root).and_then(|c| {
            if c >= start {
                Some(c)
            } else {
                (c >= state.last_session_cursor()).then_some(start)
            }
        });
        Pending {
            after: after.unwrap_or(Cursor::ZERO),
            full: after.is_none(),
            failed: false,
            sessions: BTreeMap::new(),
            texts: HashMap::new(),
            text_bytes: 0,
            manifests: super::ManifestCache::default(),
        }
    }

    /// Call once the log is folded at open: a checkpoint past the end of the
    /// log belongs to another log, and nothing it vouches for can be trusted.
    pub(crate) fn opened(&mut self, state: &State) {
        if self.after > state.last_cursor() {
            self.after = Cursor::ZERO;
            self.full = true;
        }
    }

    /// Notes the files `envelope` changed; call right after applying it to `state`.
    pub(crate) fn note(&mut self, state: &State, envelope: &Envelope) {
        if self.full || envelope.cursor <= self.after {
            return;
        }
        let ask_session = |ask: &AskId| state.ask(ask).map(|a| a.session);
        let (session, ask, plan) = match &envelope.event.body {
            EventBody::SessionCreated { session, .. } => (Some(*session), None, None),
            // A draft moves only the session's `updatedAt`; the ask file
            // does not show drafts.
            EventBody::AskDraftSaved { ask, .. } => (ask_session(ask), None, None),
            EventBody::AskOpened { ask, .. }
            | EventBody::AskAnswered { ask, .. }
            | EventBody::AskTimedOut { ask }
            | EventBody::AskDeclined { ask, .. }
            | EventBody::AskFailed { ask, .. }
            | EventBody::AskLateAnswer { ask, .. } => (ask_session(ask), Some(*ask), None),
            EventBody::PlanVersionSaved {
                session,
                version,
                content,
                ..
            } => {
                let saved = state
                    .latest_plan_version(session)
                    .is_some_and(|p| p.cursor == envelope.cursor);
                if saved && self.text_bytes + content.len() <= PENDING_TEXT_BYTES_MAX {
                    self.text_bytes += content.len();
                    self.texts.insert(envelope.cursor, content.clone());
                }
                (Some(*session), None, Some(*version))
            }
            // Named-plan events move the `updatedAt` of the plan's session.
            body => {
                let plan = body.plan_key().and_then(|key| state.named_plan(&key));
                (plan.and_then(|p| p.session), None, None)
            }
        };
        let Some(session) = session else {
            return;
        };
        let (asks, plans) = self.sessions.entry(session).or_default();
        asks.extend(ask);
        plans.extend(plan);
    }

    /// Whether the process folded events it has not projected (or vouched
    /// for) yet.
    pub(crate) fn is_empty(&self, state: &State) -> bool {
        !self.full && state.last_cursor() <= self.after
    }

    /// Notes that the tree may show events the log does not hold (they
    /// failed to become durable): the next projection rewrites everything.
    pub(crate) fn mark_failed(&mut self) {
        self.failed = true;
    }

    /// Forgets everything up to `end`: it is in the tree, or a failed
    /// projection set `failed` so that the next one rewrites every
    /// session.
    pub(crate) fn clear(&mut self, end: Cursor) {
        self.after = end;
        self.full = false;
        self.sessions.clear();
        self.texts.clear();
        self.text_bytes = 0;
    }
}

/// Whether the checkpoint vouches for every event up to `state`'s last. Read
/// without the lock: a stale answer only costs a projection that finds
/// nothing to do.
pub(crate) fn is_current(root: &DataRoot, state: &State) -> bool {
    read_checkpoint(root).is_some_and(|c| covers(c, state))
}

/// Whether a checkpoint at `c` vouches for every event up to `state`'s
/// last: it is there already, or every event after it is a task's (task
/// events change no session file, so they move no checkpoint).
fn covers(c: Cursor, state: &State) -> bool {
    c >= state.last_cursor() || c >= state.last_session_cursor()
}

/// What a projection leaves to do once the events it wrote are durable:
/// the checkpoint that vouches for them.
#[must_use = "the checkpoint is written by `settle`, once the events are durable"]
#[derive(Debug)]
pub(crate) enum Projected {
    /// Nothing to vouch for anew.
    Nothing,
    /// Every file up to this cursor is written.
    Files(Cursor),
    /// Only task events came since the checkpoint: move it over them if it
    /// still vouches for every session event.
    TaskEvents(Cursor),
}

impl Projected {
    /// Writes the checkpoint; call once the events up to it are durable.
    pub(crate) fn settle(self, root: &DataRoot, pending: &mut Pending) {
        match self {
            Projected::Nothing => {}
            Projected::Files(end) => {
                if let Err(error) = write_checkpoint(root, end) {
                    pending.failed = true;
                    tracing::warn!(
                        %error,
                        cursor = end.0,
                        "could not write the session files' checkpoint; the next change rewrites them"
                    );
                }
            }
            Projected::TaskEvents(end) => advance_over_task_events(root, end),
        }
    }
}

/// Brings the live tree up to `state` and empties `pending`, then writes
/// the checkpoint: for events durable already. Call under the log's append
/// lock with `state` at the end of the log.
pub(crate) fn project_locked(
    root: &DataRoot,
    log: &Arc<dyn Storage>,
    state: &State,
    pending: &mut Pending,
) {
    project_files(root, log, state, pending).settle(root, pending);
}

/// Brings the live tree's files up to `state` and empties `pending`; the
/// checkpoint is left to [`Projected::settle`]. Call under the log's append
/// lock with `state` at the end of the log. A failure is logged, not
/// returned: the events are durable (or about to be), the checkpoint stays
/// behind so the next projection rewrites everything, and `rebuild` can
/// always redo the tree.
pub(crate) fn project_files(
    root: &DataRoot,
    log: &Arc<dyn Storage>,
    state: &State,
    pending: &mut Pending,
) -> Projected {
    let end = state.last_cursor();
    // Only task events since the tree was last brought up to date (they
    // change no session file): nothing to write, and nothing to read.
    if !pending.full
        && !pending.failed
        && pending.sessions.is_empty()
        && state.last_session_cursor() <= pending.after
    {
        pending.clear(end);
        return Projected::TaskEvents(end);
    }
    let checkpoint = read_checkpoint(root);
    if let Some(cursor) = checkpoint
        && cursor <= end
        && covers(cursor, state)
    {
        pending.clear(end);
        return Projected::Nothing;
    }
    write_projection(root, log, state, pending, checkpoint)
}

/// Moves the checkpoint over task events, which change no session file,
/// when it vouches for every session event: then `sessions.cursor` shows
/// every process on the root how far the log went, and a lost tail made of
/// task events alone is found by any of them, not only the index's owner.
fn advance_over_task_events(root: &DataRoot, end: Cursor) {
    let Some(cursor) = read_checkpoint(root) else {
        return;
    };
    if cursor < end
        && let Err(error) = write_checkpoint(root, end)
    {
        tracing::debug!(%error, "the checkpoint was not moved over task events");
    }
}

/// Writes the session files `pending` notes (all of them, when the
/// `checkpoint` cannot vouch for the rest); says how it went in the
/// service log.
fn write_projection(
    root: &DataRoot,
    log: &Arc<dyn Storage>,
    state: &State,
    pending: &mut Pending,
    checkpoint: Option<Cursor>,
) -> Projected {
    let end = state.last_cursor();
    // Every session event up to `pending.after` is in the tree (this
    // process wrote it, or a checkpoint vouched for it) and every later one
    // is noted, so the noted files are all a checkpoint needs, wherever it
    // stands. A failed projection leaves `failed` set instead.
    let partial = checkpoint.is_some_and(|c| !pending.full && !pending.failed && c <= end);
    let mut writer = Writer {
        texts: std::mem::take(&mut pending.texts),
        manifests: std::mem::take(&mut pending.manifests),
        ..Writer::default()
    };
    let result = if partial {
        write_pending(&mut writer, root, state, pending)
    } else {
        write_all(&mut writer, root, state)
    };
    let result = result.and_then(|()| writer.finish(log));
    pending.manifests = std::mem::take(&mut writer.manifests);
    pending.clear(end);
    pending.failed = result.is_err();
    match result {
        Ok(()) => {
            tracing::debug!(
                cursor = end.0,
                full = !partial,
                written = writer.written,
                unchanged = writer.unchanged,
                "session files projected"
            );
            Projected::Files(end)
        }
        Err(error) => {
            tracing::warn!(
                %error,
                cursor = end.0,
                "could not write the session files; the next change rewrites them, or run `planb-mcp rebuild`"
            );
            Projected::Nothing
        }
    }
}

/// Writes the files of the sessions `pending` notes: each one's
/// `session.json` and the asks and plan versions that changed.
fn write_pending(
    writer: &mut Writer,
    root: &DataRoot,
    state: &State,
    pending: &Pending,
) -> Result<(), StoreError> {
    for (session, (asks, plans)) in &pending.sessions {
        let parts = Parts::Some {
            asks: asks.clone(),
            plans: plans.clone(),
        };
        writer.session(root.root(), state, session, &parts)?;
    }
    Ok(())
}

pub(crate) fn write_all(
    writer: &mut Writer,
    root: &DataRoot,
    state: &State,
) -> Result<(), StoreError> {
    for session in state.sessions().keys() {
        writer.session(root.root(), state, session, &Parts::All)?;
    }
    Ok(())
}

pub(crate) fn remove(path: &std::path::Path, dir: bool) -> Result<(), StoreError> {
    let result = if dir {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    };
    match result {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(StoreError::Io {
            op: "remove",
            path: path.display().to_string(),
            source,
        }),
    }
}

/// This boot of the machine, where the system says (Linux); empty elsewhere,
/// where checkpoints are trusted across reboots.
fn boot_id() -> &'static str {
    static BOOT_ID: OnceLock<String> = OnceLock::new();
    BOOT_ID.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|id| id.trim().to_owned())
            .unwrap_or_default()
    })
}

/// The checkpoint's length: one line, `<cursor> <boot id> <crc32>`, padded
/// with spaces, so that each checkpoint overwrites the last in place (no
/// temp file, no rename) and a reader that catches a write half done sees a
/// checksum that does not match instead of a wrong cursor.
const CHECKPOINT_BYTES: usize = 96;

/// What `sessions.cursor` says.
struct Checkpoint {
    cursor: Cursor,
    /// The boot it was written in.
    boot: String,
    /// False when further lines follow (what an earlier version left when
    /// a manifest lagged): the tree it describes is rewritten whole.
    whole: bool,
}

/// The checkpoint's line for `cursor`, written during this boot.
fn checkpoint_line(cursor: Cursor) -> Vec<u8> {
    let boot = match boot_id() {
        "" => "-",
        id => id,
    };
    let body = format!("{} {boot}", cursor.0);
    let mut line = format!("{body} {:08x}", crc32fast::hash(body.as_bytes())).into_bytes();
    line.resize(CHECKPOINT_BYTES - 1, b' ');
    line.push(b'\n');
    line
}

/// Reads and checks `sessions.cursor`: open, one read, close.
fn load_checkpoint(root: &DataRoot) -> Option<Checkpoint> {
    use std::io::Read;
    let mut file = std::fs::File::open(root.sessions_checkpoint_path()).ok()?;
    let mut buf = [0u8; 2 * CHECKPOINT_BYTES];
    let mut len = 0;
    while len < buf.len() {
        match file.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    // Only the first line must be text: a checkpoint of an earlier version
    // cut by the read inside a path's character still names its cursor.
    parse_checkpoint(&String::from_utf8_lossy(&buf[..len]))
}

fn parse_checkpoint(text: &str) -> Option<Checkpoint> {
    let mut lines = text.lines();
    let line = lines.next()?;
    let mut words = line.split_whitespace();
    let cursor = words.next()?.parse::<u64>().ok()?;
    let boot = words.next().unwrap_or("");
    if text.len() == CHECKPOINT_BYTES {
        // This version's line: its checksum must hold.
        let crc = u32::from_str_radix(words.next()?, 16).ok()?;
        if crc != crc32fast::hash(format!("{cursor} {boot}").as_bytes()) {
            return None;
        }
    }
    Some(Checkpoint {
        cursor: Cursor(cursor),
        boot: if boot == "-" {
            String::new()
        } else {
            boot.to_owned()
        },
        whole: lines.next().is_none(),
    })
}

/// The cursor the checkpoint claims, whichever boot wrote it: how far the
/// tree has seen the log, for noticing a log that lost its tail.
pub(crate) fn raw_checkpoint(root: &DataRoot) -> Option<Cursor> {
    load_checkpoint(root).map(|c| c.cursor)
}

/// The checkpoint, if there is a trustworthy one: one line, written during
/// this boot, its checksum intact.
pub(crate) fn read_checkpoint(root: &DataRoot) -> Option<Cursor> {
    if !root.sessions_dir().is_dir() {
        return None;
    }
    let checkpoint = load_checkpoint(root)?;
    (checkpoint.whole && checkpoint.boot == boot_id()).then_some(checkpoint.cursor)
}

/// Writes the checkpoint: in place over one of this version's (open, stat,
/// one write, close), otherwise through a temp file.
pub(crate) fn write_checkpoint(root: &DataRoot, cursor: Cursor) -> Result<(), StoreError> {
    use std::os::unix::fs::FileExt;
    let path = root.sessions_checkpoint_path();
    let line = checkpoint_line(cursor);
    if let Ok(file) = std::fs::OpenOptions::new().write(true).open(&path)
        && file
            .metadata()
            .is_ok_and(|m| m.len() == CHECKPOINT_BYTES as u64)
    {
        return file
            .write_all_at(&line, 0)
            .map_err(|source| StoreError::Io {
                op: "write",
                path: path.display().to_string(),
                source,
            });
    }
    let dir = root.sessions_dir();
    std::fs::create_dir_all(&dir).map_err(|source| StoreError::Io {
        op: "create directory",
        path: dir.display().to_string(),
        source,
    })?;
    write_if_changed(&path, &line).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_read_half_written_is_not_trusted() {
        let line = String::from_utf8(checkpoint_line(Cursor(199))).expect("utf-8");
        assert_eq!(line.len(), CHECKPOINT_BYTES);
        let read = parse_checkpoint(&line).expect("a whole line parses");
        assert_eq!((read.cursor, read.whole), (Cursor(199), true));
        // The digits of 199 and of 200 mixed, as a read racing the write
        // over it can see them: 299 with the checksum of 199.
        let torn = line.replacen("199", "299", 1);
        assert!(parse_checkpoint(&torn).is_none(), "{torn}");
        // What earlier versions wrote (no checksum, no padding) still reads.
        let older = format!("42 {}\n", boot_id());
        assert_eq!(parse_checkpoint(&older).map(|c| c.cursor), Some(Cursor(42)));
    }

    #[test]
    fn an_earlier_checkpoint_cut_inside_a_path_s_character_still_names_its_cursor() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = DataRoot::new(dir.path());
        std::fs::create_dir_all(root.sessions_dir()).expect("sessions dir");
        // Earlier versions wrote the manifests' lines after the cursor; the
        // read stops at 192 bytes, here in the middle of "é".
        let first = format!("42 {}\n", boot_id());
        let filler = "x".repeat(2 * CHECKPOINT_BYTES - 1 - first.len());
        let text = format!("{first}{filler}é/plan.md\n");
        assert!(!text.is_char_boundary(2 * CHECKPOINT_BYTES));
        std::fs::write(root.sessions_checkpoint_path(), text).expect("write");
        let read = load_checkpoint(&root).expect("the cursor is read");
        assert_eq!((read.cursor, read.whole), (Cursor(42), false));
    }
}
