//! The planb-mcp file layout as a projection of the state:
//!
//! ```text
//! <root>/sessions/<sessionId>/session.json
//! <root>/sessions/<sessionId>/asks/<utcTs>-<askId>.json
//! <root>/sessions/<sessionId>/plans/v<N>.md   plans/v<N>.json
//! ```
//!
//! The bytes are meant to equal what the Node tool wrote, so its readers
//! (and people's scripts) keep working on a planb data root. JSON is written
//! the way the Node tool writes it, `JSON.stringify(value, null, 2) + "\n"`:
//! two-space indentation, `"key": value` with one space, `[]`/`{}` for empty
//! containers, and a trailing newline. `serde_json`'s pretty printer with
//! `preserve_order` produces exactly that for the values written here (keys
//! stay in insertion order; strings escape the same characters; integers
//! print without a fraction). The known divergence is the spelling of some
//! extreme floats (beyond 2^53 or below about 1e-5), where JavaScript and
//! ryu pick different forms; only scale settings and scale answers could
//! hold such a number.
//!
//! Every write is atomic (a temporary file in the same directory, then a
//! rename), and a file whose bytes are already right is not touched, so
//! projecting a session again is cheap and changes nothing. Files are not
//! fsynced: they are derived, `rebuild` rewrites them, and after an
//! unclean reboot the live tree is re-checked (see `files/live.rs`).

mod live;
mod manifest;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use planb_core::{
    Ask, AskId, AskStatus, Cursor, DeclineAction, PlanVersion, Session, SessionId, State,
};
use planb_log::Storage;
use serde_json::{Map, Value};

use crate::StoreError;

pub(crate) use live::{
    Pending, is_current, project_files, project_locked, raw_checkpoint, read_checkpoint, remove,
    write_all, write_checkpoint,
};
pub(crate) use manifest::ManifestCache;

/// The `schemaVersion` of every JSON file of the layout.
pub const FILES_SCHEMA_VERSION: u64 = 1;

/// What an [`export`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExportReport {
    /// Sessions exported.
    pub sessions: usize,
    /// Files created or replaced because their bytes differed.
    pub files_written: usize,
    /// Files that already held the right bytes and were left alone.
    pub files_unchanged: usize,
}

/// Writes the files of every session of `store`'s state under `<to>/sessions/`,
/// creating directories as needed (plan texts are read from the log). Files
/// already in `to` that belong to no session of the state are left alone, so
/// export into an empty directory to get exactly the state's tree.
pub fn export(store: &crate::Store, to: &Path) -> Result<ExportReport, StoreError> {
    let state = store.snapshot()?;
    let mut writer = Writer::default();
    for id in state.sessions().keys() {
        writer.session(to, &state, id, &Parts::All)?;
    }
    writer.finish(store.log_storage())?;
    Ok(ExportReport {
        sessions: state.sessions().len(),
        files_written: writer.written,
        files_unchanged: writer.unchanged,
    })
}

/// Which files of a session to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Parts {
    /// Every ask and plan file, and `session.json`.
    All,
    /// Only these asks' files and these plan versions' files, and
    /// `session.json`.
    Some {
        /// Asks whose record changed.
        asks: BTreeSet<AskId>,
        /// Plan versions that were saved.
        plans: BTreeSet<u32>,
    },
}

/// Writes files and counts what it did; or, when `verify_only`, writes
/// nothing and lists the files that are missing or differ.
#[derive(Debug, Default)]
pub(crate) struct Writer {
    /// Files created or replaced.
    pub(crate) written: usize,
    /// Files already right.
    pub(crate) unchanged: usize,
    /// Compare instead of writing.
    pub(crate) verify_only: bool,
    /// With `verify_only`: the files that are missing or hold other bytes.
    pub(crate) wrong: Vec<(PathBuf, &'static str)>,
    /// Plan texts at hand, by the cursor of the event that saved them (the
    /// events just folded); the state holds only their length and hash.
    pub(crate) texts: HashMap<Cursor, String>,
    /// Plan files that need a text not at hand, by the cursor of the event
    /// that holds it: [`Writer::finish`] reads them from the log.
    pub(crate) deferred: BTreeMap<Cursor, PathBuf>,
    /// The manifests' plan entries as rendered before.
    pub(crate) manifests: ManifestCache,
}

impl Writer {
    /// Writes `session.json` and the requested `parts` of one session.
    pub(crate) fn session(
        &mut self,
        root: &Path,
        state: &State,
        id: &SessionId,
        parts: &Parts,
    ) -> Result<(), StoreError> {
        let Some(session) = state.session(id) else {
            return Ok(());
        };
        let dir = session_dir(root, id);
        let asks: Vec<&Ask> = session.asks.iter().filter_map(|a| state.ask(a)).collect();
        let wanted_ask = |ask: &Ask| match parts {
            Parts::All => true,
            Parts::Some { asks, .. } => asks.contains(&ask.id),
        };
        let wanted_plan = |plan: &PlanVersion| match parts {
            Parts::All => true,
            Parts::Some { plans, .. } => plans.contains(&plan.version),
        };
        for ask in asks.iter().copied().filter(|a| wanted_ask(a)) {
            let path = dir.join("asks").join(ask_file_name(ask));
            self.put(&path, &pretty(&ask_json(ask)))?;
        }
        for plan in session.plans.iter().filter(|p| wanted_plan(p)) {
            let plans = dir.join("plans");
            let (md, json) = plan_file_names(plan.version);
            self.put_plan_text(&plans.join(&md), plan)?;
            self.put(&plans.join(json), &pretty(&plan_json(session.id, plan)))?;
        }
        // Last, so a reader that finds an ask or plan in the manifest finds its file.
        let manifest = self.manifests.render(session, &asks);
        self.put(&dir.join("session.json"), &manifest)
    }

    /// A plan version's Markdown: written from the text at hand, else left
    /// alone when the file already holds the version's text (length and
    /// hash), else deferred to [`Writer::finish`].
    fn put_plan_text(&mut self, path: &Path, plan: &PlanVersion) -> Result<(), StoreError> {
        if let Some(text) = self.texts.remove(&plan.cursor) {
            debug_assert!(plan.is_content(text.as_bytes()));
            return self.put(path, text.as_bytes());
        }
        let holds = match read_if_length(path, plan.bytes)? {
            Existing::Missing => None,
            Existing::OtherLength => Some(false),
            Existing::Bytes(existing) => Some(plan.is_content(&existing)),
        };
        match (holds, self.verify_only) {
            (Some(true), _) => self.unchanged += 1,
            (Some(false), true) => self.wrong.push((path.to_path_buf(), "differs")),
            (None, true) => self.wrong.push((path.to_path_buf(), "missing")),
            (_, false) => {
                self.deferred.insert(plan.cursor, path.to_path_buf());
            }
        }
        Ok(())
    }

    /// Writes the plan files whose texts were not at hand, reading them from
    /// the log in one pass from the earliest.
    pub(crate) fn finish(&mut self, log: &Arc<dyn Storage>) -> Result<(), StoreError> {
        let deferred = std::mem::take(&mut self.deferred);
        let wanted: BTreeSet<Cursor> = deferred.keys().copied().collect();
        crate::plan_texts::read(log, &wanted, |cursor, text| {
            if let Some(path) = deferred.get(&cursor) {
                self.put(path, text.as_bytes())?;
            }
            Ok(())
        })
    }

    fn put(&mut self, path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
        if self.verify_only {
            match std::fs::read(path) {
                Ok(existing) if existing == bytes => self.unchanged += 1,
                Ok(_) => self.wrong.push((path.to_path_buf(), "differs")),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    self.wrong.push((path.to_path_buf(), "missing"));
                }
                Err(source) => return Err(io_error("read", path)(source)),
            }
            return Ok(());
        }
        if write_if_changed(path, bytes)? {
            self.written += 1;
        } else {
            self.unchanged += 1;
        }
        Ok(())
    }
}

/// `<root>/sessions/<id>`: the directory of one session's files.
pub fn session_dir(root: &Path, id: &SessionId) -> PathBuf {
    root.join("sessions").join(id.to_string())
}

/// `<root>/sessions/<id>/plans/v<N>.md`: where a plan version's Markdown lives
/// (what `save_plan` reports to the agent).
pub fn plan_file(root: &Path, id: &SessionId, version: u32) -> PathBuf {
    session_dir(root, id)
        .join("plans")
        .join(plan_file_names(version).0)
}

/// `<utcTs>-<askId>.json`, with the compact form of the ask's creation time.
pub fn ask_file_name(ask: &Ask) -> String {
    format!("{}-{}.json", ask.created_at.to_compact(), ask.id)
}

fn plan_file_names(version: u32) -> (String, String) {
    (format!("v{version}.md"), format!("v{version}.json"))
}

/// The layout's status word for an ask.
fn status_name(status: AskStatus) -> &'static str {
    match status {
        AskStatus::Pending => "pending",
        AskStatus::Answered => "answered",
        AskStatus::TimedOut => "timeout",
        AskStatus::Declined => "declined",
        AskStatus::Failed => "error",
    }
}

/// The answers to show in the files and when they arrived.
///
/// The Node tool had no late answers: an ask that timed out, was declined or
/// failed kept `answers: null` forever. planb records answers that arrive
/// after the tool returned (`AskLateAnswer`), and the files must not lose
/// them either, so such an ask keeps its status and outcome (what the agent
/// was told) while `answers` and `answeredAt` show the late answers and when
/// they came. Only one late answer is ever accepted; should a foreign log
/// hold more, the first is shown, matching what the core treats as the answer.
fn shown_answers(ask: &Ask) -> Option<(planb_core::Timestamp, &planb_core::Answers)> {
    match (&ask.answers, ask.answered_at) {
        (Some(answers), Some(at)) => Some((at, answers)),
        _ => ask.late_answers.first().map(|(at, answers)| (*at, answers)),
    }
}

fn iso_or_null(at: Option<planb_core::Timestamp>) -> Value {
    at.map_or(Value::Null, |t| Value::String(t.to_iso8601()))
}

fn insert_some(map: &mut Map<String, Value>, key: &str, value: Option<&str>) {
    if let Some(value) = value {
        map.insert(key.into(), value.into());
    }
}

/// `session.json` without its plan entries (`"plans": []`, its last key):
/// [`ManifestCache::render`] puts them in.
pub(crate) fn session_json_head(session: &Session, asks: &[&Ask]) -> Value {
    let mut map = Map::new();
    map.insert("schemaVersion".into(), FILES_SCHEMA_VERSION.into());
    map.insert("sessionId".into(), session.id.to_string().into());
    insert_some(&mut map, "projectPath", session.project_path.as_deref());
    insert_some(&mut map, "title", session.title.as_deref());
    insert_some(&mut map, "intent", session.intent.as_deref());
    map.insert("createdAt".into(), session.created_at.to_iso8601().into());
    map.insert("updatedAt".into(), session.updated_at.to_iso8601().into());
    let latest = session.plans.last().map(|p| p.version);
    map.insert(
        "latestPlanVersion".into(),
        latest.map_or(Value::Null, Value::from),
    );
    map.insert("planCount".into(), session.plans.len().into());
    map.insert("askCount".into(), asks.len().into());
    let ask_entries = asks.iter().map(|ask| {
        let mut entry = Map::new();
        entry.insert("askId".into(), ask.id.to_string().into());
        entry.insert("file".into(), format!("asks/{}", ask_file_name(ask)).into());
        entry.insert("title".into(), ask.spec.title.clone().into());
        entry.insert("status".into(), status_name(ask.status).into());
        entry.insert("createdAt".into(), ask.created_at.to_iso8601().into());
        entry.insert(
            "answeredAt".into(),
            iso_or_null(shown_answers(ask).map(|(at, _)| at)),
        );
        Value::Object(entry)
    });
    map.insert("asks".into(), Value::Array(ask_entries.collect()));
    map.insert("plans".into(), Value::Array(Vec::new()));
    Value::Object(map)
}

/// A plan version's entry in `session.json`'s `plans`.
pub(crate) fn plan_entry_json(plan: &PlanVersion) -> Value {
    let mut entry = Map::new();
    entry.insert("version".into(), plan.version.into());
    insert_some(&mut entry, "title", plan.title.as_deref());
    entry.insert("file".into(), format!("plans/v{}.md", plan.version).into());
    entry.insert("createdAt".into(), plan.created_at.to_iso8601().into());
    Value::Object(entry)
}

/// `asks/<utcTs>-<askId>.json`.
pub(crate) fn ask_json(ask: &Ask) -> Value {
    let shown = shown_answers(ask);
    let mut map = Map::new();
    map.insert("schemaVersion".into(), FILES_SCHEMA_VERSION.into());
    map.insert("askId".into(), ask.id.to_string().into());
    map.insert("sessionId".into(), ask.session.to_string().into());
    map.insert("status".into(), status_name(ask.status).into());
    map.insert("createdAt".into(), ask.created_at.to_iso8601().into());
    map.insert("answeredAt".into(), iso_or_null(shown.map(|(at, _)| at)));
    map.insert("title".into(), ask.spec.title.clone().into());
    map.insert("input".into(), ask.spec.to_json());
    let answers = shown.map_or(Value::Null, |(_, answers)| answers.to_json());
    map.insert("answers".into(), answers);
    map.insert("outcome".into(), outcome_json(ask));
    Value::Object(map)
}

fn outcome_json(ask: &Ask) -> Value {
    let mut map = Map::new();
    match ask.status {
        AskStatus::Pending | AskStatus::Answered => return Value::Null,
        AskStatus::TimedOut => {
            map.insert("type".into(), "timeout".into());
        }
        AskStatus::Declined => {
            map.insert("type".into(), "decline".into());
            if let Some(action) = ask.decline_action {
                let action = match action {
                    DeclineAction::Decline => "decline",
                    DeclineAction::Cancel => "cancel",
                };
                map.insert("action".into(), action.into());
            }
        }
        AskStatus::Failed => {
            map.insert("type".into(), "error".into());
            insert_some(&mut map, "detail", ask.failure_detail.as_deref());
        }
    }
    Value::Object(map)
}

/// `plans/v<N>.json`.
pub(crate) fn plan_json(session: SessionId, plan: &PlanVersion) -> Value {
    let mut map = Map::new();
    map.insert("schemaVersion".into(), FILES_SCHEMA_VERSION.into());
    map.insert("sessionId".into(), session.to_string().into());
    map.insert("version".into(), plan.version.into());
    insert_some(&mut map, "title", plan.title.as_deref());
    map.insert("createdAt".into(), plan.created_at.to_iso8601().into());
    map.insert("file".into(), format!("v{}.md", plan.version).into());
    map.insert("bytes".into(), plan.bytes.into());
    Value::Object(map)
}

/// `JSON.stringify(value, null, 2) + "\n"`.
pub(crate) fn pretty(value: &Value) -> Vec<u8> {
    // Serializing fails only for maps with non-string keys, which a `Value`
    // cannot have: this is an assertion, not an operating error.
    let mut bytes = serde_json::to_vec_pretty(value).expect("a json value serializes");
    bytes.push(b'\n');
    bytes
}

fn io_error(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> StoreError {
    let path = path.display().to_string();
    move |source| StoreError::Io { op, path, source }
}

/// Replaces `path` with `bytes` atomically unless it holds them already.
/// Returns whether it wrote.
pub(crate) fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<bool, StoreError> {
    if let Existing::Bytes(existing) = read_if_length(path, bytes.len() as u64)?
        && existing == bytes
    {
        return Ok(false);
    }
    replace_file(path, |file| std::io::Write::write_all(file, bytes))?;
    Ok(true)
}

/// What a file holds, as far as a comparison with bytes of a known length
/// needs to know.
enum Existing {
    Missing,
    OtherLength,
    Bytes(Vec<u8>),
}

/// Reads `path` if it is `len` bytes long: comparing lengths first spares
/// reading a large plan that changed.
fn read_if_length(path: &Path, len: u64) -> Result<Existing, StoreError> {
    let missing = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
    match std::fs::metadata(path) {
        Ok(meta) if meta.len() != len => Ok(Existing::OtherLength),
        Ok(_) => match std::fs::read(path) {
            Ok(bytes) => Ok(Existing::Bytes(bytes)),
            Err(e) if missing(&e) => Ok(Existing::Missing),
            Err(source) => Err(io_error("read", path)(source)),
        },
        Err(e) if missing(&e) => Ok(Existing::Missing),
        Err(source) => Err(io_error("stat", path)(source)),
    }
}

/// Replaces `path` (creating its directory) with what `write` puts into a
/// temp file beside it, then a rename: readers see the old file or the new
/// one, never a part. Not fsynced: every caller writes a projection.
///
/// The directory is created only when the temp file cannot be, and a file
/// that exists is swapped with the temp file (`renameat2` with
/// `RENAME_EXCHANGE` on Linux) and the old one, now under the temp name,
/// removed: ext4 flushes the data of a file renamed over another at once
/// (its `auto_da_alloc` heuristic), which cost a projection a block write
/// for every `session.json` and checkpoint it replaced.
pub(crate) fn replace_file(
    path: &Path,
    write: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
) -> Result<(), StoreError> {
    let tmp = temp_path(path);
    let file = match std::fs::File::create(&tmp) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let dir = path.parent().unwrap_or(Path::new("."));
            std::fs::create_dir_all(dir).map_err(io_error("create directory", dir))?;
            std::fs::File::create(&tmp)
        }
        created => created,
    };
    let written = file.and_then(|mut file| write(&mut file));
    if let Err(source) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(io_error("write", &tmp)(source));
    }
    if exchange(&tmp, path) {
        let _ = std::fs::remove_file(&tmp);
        return Ok(());
    }
    if let Err(source) = std::fs::rename(&tmp, path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(io_error("rename into", path)(source));
    }
    Ok(())
}

/// Swaps the files `a` and `b` atomically; false when it could not (`b`
/// does not exist, or the system or file system cannot swap).
#[cfg(target_os = "linux")]
fn exchange(a: &Path, b: &Path) -> bool {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    renameat_with(CWD, a, CWD, b, RenameFlags::EXCHANGE).is_ok()
}

#[cfg(not(target_os = "linux"))]
fn exchange(_a: &Path, _b: &Path) -> bool {
    false
}

/// Removes the temp files [`replace_file`] leaves directly in `dir` when its
/// process is killed between create and rename: those untouched for an hour
/// (a live writer renames within seconds).
pub(crate) fn remove_stale_temps(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let stale = |entry: &std::fs::DirEntry| {
        entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|modified| modified.elapsed().ok())
            .is_some_and(|age| age > std::time::Duration::from_secs(3600))
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') && name.ends_with(".tmp") && stale(&entry) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// A name beside `path` no other writer uses: the process id tells processes
/// apart, the counter threads and calls. It starts with a dot and does not
/// end in `.json` or `.md`, so readers listing the directory skip it.
fn temp_path(path: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = path
        .file_name()
        .map_or_else(|| "file".into(), |name| name.to_string_lossy().into_owned());
    static PID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    let pid = PID.get_or_init(std::process::id);
    path.with_file_name(format!(".{name}.{pid}.{n}.tmp"))
}
