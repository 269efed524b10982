//! Reading one session directory of a planb-mcp data root into plain values,
//! liberally: optional fields may be missing, unknown fields are ignored,
//! `asks`/`plans` in `session.json` are not needed (the files are listed),
//! and a plan without its `v<N>.json` sidecar takes its metadata from the
//! manifest or, failing that, from the Markdown file's modification time.
//! What cannot be read is reported with its path and left out.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use planb_core::{Answers, AskId, AskSpec, DeclineAction, SessionId, Timestamp};
use serde_json::{Map, Value};

use super::ImportProblem;

/// A session as the files describe it.
#[derive(Debug)]
pub(super) struct SessionFiles {
    pub(super) manifest: PathBuf,
    pub(super) id: SessionId,
    pub(super) created_at: Timestamp,
    pub(super) title: Option<String>,
    pub(super) intent: Option<String>,
    pub(super) project_path: Option<String>,
    /// In creation order.
    pub(super) asks: Vec<AskFile>,
    /// Versions 1, 2, … without gaps.
    pub(super) plans: Vec<PlanFile>,
}

/// How an ask ended, as its record says.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Outcome {
    Pending,
    Answered,
    TimedOut,
    Declined(DeclineAction),
    Failed(String),
}

/// One `asks/<utcTs>-<askId>.json`.
#[derive(Debug)]
pub(super) struct AskFile {
    pub(super) path: PathBuf,
    pub(super) id: AskId,
    pub(super) created_at: Timestamp,
    pub(super) spec: AskSpec,
    pub(super) outcome: Outcome,
    /// The answers and when they came: on time for `Answered`, late otherwise.
    pub(super) answers: Option<(Timestamp, Answers)>,
}

/// One `plans/v<N>.md` with its metadata.
#[derive(Debug)]
pub(super) struct PlanFile {
    pub(super) path: PathBuf,
    pub(super) version: u32,
    pub(super) title: Option<String>,
    pub(super) created_at: Timestamp,
    pub(super) content: String,
}

/// A JSON object read from `path`, whose field problems are reported against it.
struct Object<'a> {
    map: Map<String, Value>,
    path: &'a Path,
}

impl Object<'_> {
    fn problem(&self, problems: &mut Vec<ImportProblem>, message: String) {
        problems.push(ImportProblem::new(self.path, message));
    }

    /// A string field; `null` counts as absent. A value of another type is
    /// reported and treated as absent.
    fn string(&self, key: &str, problems: &mut Vec<ImportProblem>) -> Option<String> {
        match self.map.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::String(text)) => Some(text.clone()),
            Some(_) => {
                self.problem(problems, format!("{key}: must be a string; ignored"));
                None
            }
        }
    }

    /// A timestamp field: `Ok(None)` when absent, `Err` (reported) when unreadable.
    fn time(&self, key: &str, problems: &mut Vec<ImportProblem>) -> Result<Option<Timestamp>, ()> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(text)) => Timestamp::parse_iso8601(text).map(Some).map_err(|e| {
                self.problem(problems, format!("{key}: {e}"));
            }),
            Some(_) => {
                self.problem(problems, format!("{key}: must be an iso-8601 string"));
                Err(())
            }
        }
    }
}

/// Largest JSON file (a session's or an ask's) an import reads.
const JSON_BYTES_MAX: usize = 16 << 20;

/// Reads a JSON object, or reports why not.
fn read_object<'a>(path: &'a Path, problems: &mut Vec<ImportProblem>) -> Option<Object<'a>> {
    let bytes = match crate::bounded::read(path, JSON_BYTES_MAX) {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(over)) => {
            let message = format!("{} bytes, over the {JSON_BYTES_MAX}-byte limit", over.0);
            problems.push(ImportProblem::new(path, message));
            return None;
        }
        Err(e) => {
            problems.push(ImportProblem::new(path, format!("cannot read: {e}")));
            return None;
        }
    };
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(map)) => Some(Object { map, path }),
        Ok(_) => {
            problems.push(ImportProblem::new(path, "must be a json object".into()));
            None
        }
        Err(e) => {
            problems.push(ImportProblem::new(path, format!("malformed json: {e}")));
            None
        }
    }
}

/// File names in `dir`, sorted; none when it does not exist.
fn list(dir: &Path, problems: &mut Vec<ImportProblem>) -> Vec<String> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            problems.push(ImportProblem::new(dir, format!("cannot list: {e}")));
            return Vec::new();
        }
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter(|name| !name.starts_with('.'))
        .collect();
    names.sort();
    names
}

/// Reads the session in `dir`, or reports why it cannot be imported.
pub(super) fn session(dir: &Path, problems: &mut Vec<ImportProblem>) -> Option<SessionFiles> {
    let manifest_path = dir.join("session.json");
    if !manifest_path.is_file() {
        problems.push(ImportProblem::new(&manifest_path, "missing".into()));
        return None;
    }
    let manifest = read_object(&manifest_path, problems)?;
    let from_dir = dir
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| SessionId::parse(n).ok());
    let from_json = match manifest
        .string("sessionId", problems)
        .map(|t| SessionId::parse(&t))
    {
        None => None,
        Some(Ok(id)) => Some(id),
        Some(Err(e)) => {
            manifest.problem(problems, format!("sessionId: {e}"));
            return None;
        }
    };
    let id = match (from_json, from_dir) {
        (Some(json), Some(dir)) if json != dir => {
            let message = format!("sessionId: {json} differs from the directory name {dir}");
            manifest.problem(problems, message);
            return None;
        }
        (Some(id), _) | (None, Some(id)) => id,
        (None, None) => {
            let message = "sessionId: missing, and the directory name is no session id".into();
            manifest.problem(problems, message);
            return None;
        }
    };
    let Some(created_at) = manifest.time("createdAt", problems).ok()? else {
        manifest.problem(problems, "createdAt: missing".into());
        return None;
    };
    let asks = asks(dir, id, problems);
    let plans = plans(dir, &manifest, created_at, problems);
    Some(SessionFiles {
        manifest: manifest_path.clone(),
        id,
        created_at,
        title: manifest.string("title", problems),
        intent: manifest.string("intent", problems),
        project_path: manifest.string("projectPath", problems),
        asks,
        plans,
    })
}

fn asks(dir: &Path, session: SessionId, problems: &mut Vec<ImportProblem>) -> Vec<AskFile> {
    let asks_dir = dir.join("asks");
    let mut asks: Vec<AskFile> = list(&asks_dir, problems)
        .into_iter()
        .filter(|name| name.ends_with(".json"))
        .filter_map(|name| ask(&asks_dir.join(name), session, problems))
        .collect();
    asks.sort_by_key(|a| a.created_at);
    asks
}

/// `20260607T182110123Z` back to a timestamp.
fn parse_compact(text: &str) -> Option<Timestamp> {
    let b = text.as_bytes();
    // ASCII only, so the byte ranges below fall on character boundaries.
    if !text.is_ascii() || b.len() != 19 || b[8] != b'T' || b[18] != b'Z' {
        return None;
    }
    let iso = format!(
        "{}-{}-{}T{}:{}:{}.{}Z",
        &text[0..4],
        &text[4..6],
        &text[6..8],
        &text[9..11],
        &text[11..13],
        &text[13..15],
        &text[15..18]
    );
    Timestamp::parse_iso8601(&iso).ok()
}

fn ask(path: &Path, session: SessionId, problems: &mut Vec<ImportProblem>) -> Option<AskFile> {
    let record = read_object(path, problems)?;
    // The name is `<utcTs>-<askId>.json`; it stands in for missing fields.
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let (name_time, name_id) = stem.split_once('-').unwrap_or(("", ""));
    let id = match record.string("askId", problems) {
        Some(text) => AskId::parse(&text).map_err(|e| format!("askId: {e}")),
        None => AskId::parse(name_id).map_err(|_| "askId: missing".to_owned()),
    };
    let id = id
        .map_err(|message| record.problem(problems, message))
        .ok()?;
    let named = record.string("sessionId", problems);
    if let Some(other) = named.filter(|o| SessionId::parse(o).ok() != Some(session)) {
        let message = format!("sessionId: {other} is not the session {session} it is filed under");
        record.problem(problems, message);
        return None;
    }
    let created_at = match record.time("createdAt", problems).ok()? {
        Some(at) => at,
        None => {
            let Some(at) = parse_compact(name_time) else {
                record.problem(problems, "createdAt: missing".into());
                return None;
            };
            at
        }
    };
    let spec = spec(&record, problems)?;
    let answered_at = record.time("answeredAt", problems).ok()?;
    let answers = match record.map.get("answers") {
        None | Some(Value::Null) => None,
        Some(value) => match spec.validate_answers(value) {
            Ok(answers) => Some((answered_at.unwrap_or(created_at), answers)),
            Err(errors) => {
                record.problem(problems, format!("answers: {errors}"));
                return None;
            }
        },
    };
    let outcome = outcome(&record, answers.is_some(), problems)?;
    if outcome == Outcome::Answered && answers.is_none() {
        record.problem(problems, "answers: missing for an answered ask".into());
        return None;
    }
    Some(AskFile {
        path: path.to_owned(),
        id,
        created_at,
        spec,
        outcome,
        answers,
    })
}

fn spec(record: &Object<'_>, problems: &mut Vec<ImportProblem>) -> Option<AskSpec> {
    let Some(mut input) = record.map.get("input").cloned() else {
        record.problem(problems, "input: missing".into());
        return None;
    };
    // The layout stores the input without `sessionId`; accept files that kept it.
    if let Value::Object(map) = &mut input {
        map.shift_remove("sessionId");
    }
    AskSpec::from_json(&input)
        .map_err(|e| {
            let paths: Vec<String> = e.errors.iter().map(|f| format!("input.{f}")).collect();
            record.problem(problems, paths.join("; "));
        })
        .ok()
}

/// The status, or when it is missing, what `outcome` and `answers` imply.
fn outcome(
    record: &Object<'_>,
    has_answers: bool,
    problems: &mut Vec<ImportProblem>,
) -> Option<Outcome> {
    let outcome = match record.map.get("outcome") {
        Some(Value::Object(map)) => Some(map),
        _ => None,
    };
    let field = |key: &str| outcome.and_then(|o| o.get(key)).and_then(Value::as_str);
    let status = record.string("status", problems);
    let status = status.as_deref().or(match field("type") {
        Some("decline") => Some("declined"),
        Some("error") => Some("error"),
        other => other,
    });
    Some(match status {
        Some("pending") => Outcome::Pending,
        Some("answered") => Outcome::Answered,
        Some("timeout") => Outcome::TimedOut,
        Some("declined") => Outcome::Declined(match field("action") {
            Some("cancel") => DeclineAction::Cancel,
            _ => DeclineAction::Decline,
        }),
        Some("error") => Outcome::Failed(
            field("detail")
                .unwrap_or("no detail recorded (imported)")
                .to_owned(),
        ),
        None if has_answers => Outcome::Answered,
        None => Outcome::Pending,
        Some(other) => {
            let message = format!(
                "status: unknown status {other:?} (expected pending, answered, timeout, declined or error)"
            );
            record.problem(problems, message);
            return None;
        }
    })
}

/// What is known of one plan version before its Markdown is read.
#[derive(Debug, Default)]
struct PlanMeta {
    title: Option<String>,
    created_at: Option<Timestamp>,
}

fn plans(
    dir: &Path,
    manifest: &Object<'_>,
    session_created: Timestamp,
    problems: &mut Vec<ImportProblem>,
) -> Vec<PlanFile> {
    let plans_dir = dir.join("plans");
    // The manifest first; a sidecar overrides it.
    let mut meta = manifest_plan_meta(manifest);
    let markdown = plan_files(&plans_dir, &mut meta, problems);
    let last = markdown
        .keys()
        .chain(meta.keys())
        .copied()
        .max()
        .unwrap_or(0);
    let mut plans = Vec::new();
    for version in 1..=last {
        let Some(path) = markdown.get(&version) else {
            let path = plans_dir.join(format!("v{version}.md"));
            let message = format!(
                "missing; plan versions are numbered in order, so v{version} to v{last} are not imported"
            );
            problems.push(ImportProblem::new(&path, message));
            break;
        };
        let max = planb_core::state::PLAN_CONTENT_BYTES_MAX;
        let content = match crate::bounded::read(path, max).map(|read| read.map(String::from_utf8))
        {
            Ok(Ok(Ok(content))) => content,
            Ok(Ok(Err(_))) => {
                let message = format!("not UTF-8 text; v{version} to v{last} are not imported");
                problems.push(ImportProblem::new(path, message));
                break;
            }
            Ok(Err(over)) => {
                let message = format!(
                    "{} bytes, over the {max}-byte plan limit; v{version} to v{last} are not imported",
                    over.0
                );
                problems.push(ImportProblem::new(path, message));
                break;
            }
            Err(e) => {
                let message = format!("cannot read: {e}; v{version} to v{last} are not imported");
                problems.push(ImportProblem::new(path, message));
                break;
            }
        };
        let meta = meta.remove(&version).unwrap_or_default();
        let created_at = meta
            .created_at
            .unwrap_or_else(|| modified(path, session_created));
        plans.push(PlanFile {
            path: path.clone(),
            version,
            title: meta.title,
            created_at,
            content,
        });
    }
    plans
}

/// What the manifest's `plans` list says of each version.
fn manifest_plan_meta(manifest: &Object<'_>) -> BTreeMap<u32, PlanMeta> {
    let mut meta: BTreeMap<u32, PlanMeta> = BTreeMap::new();
    if let Some(Value::Array(entries)) = manifest.map.get("plans") {
        for entry in entries.iter().filter_map(Value::as_object) {
            let version = entry.get("version").and_then(Value::as_u64);
            let Some(version) = version.and_then(|v| u32::try_from(v).ok()) else {
                continue;
            };
            let at = entry.get("createdAt").and_then(Value::as_str);
            meta.insert(
                version,
                PlanMeta {
                    title: entry
                        .get("title")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    created_at: at.and_then(|t| Timestamp::parse_iso8601(t).ok()),
                },
            );
        }
    }
    meta
}

/// The Markdown file of each version in `plans_dir` (`v<n>.md`); what a
/// sidecar (`v<n>.json`) says of a version overrides `meta`.
fn plan_files(
    plans_dir: &Path,
    meta: &mut BTreeMap<u32, PlanMeta>,
    problems: &mut Vec<ImportProblem>,
) -> BTreeMap<u32, PathBuf> {
    let mut markdown: BTreeMap<u32, PathBuf> = BTreeMap::new();
    for name in list(plans_dir, problems) {
        let Some((number, extension)) = name.strip_prefix('v').and_then(|n| n.split_once('.'))
        else {
            continue;
        };
        let Ok(version) = number.parse::<u32>() else {
            continue;
        };
        let path = plans_dir.join(&name);
        match extension {
            "md" => {
                markdown.insert(version, path);
            }
            "json" => {
                let Some(sidecar) = read_object(&path, problems) else {
                    continue;
                };
                let entry = meta.entry(version).or_default();
                if let Some(title) = sidecar.string("title", problems) {
                    entry.title = Some(title);
                }
                if let Ok(Some(at)) = sidecar.time("createdAt", problems) {
                    entry.created_at = Some(at);
                }
            }
            _ => {}
        }
    }
    markdown
}

/// When the file was last modified, for a plan nothing else dates.
fn modified(path: &Path, fallback: Timestamp) -> Timestamp {
    let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let since_epoch = modified.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
    since_epoch
        .and_then(|d| i64::try_from(d.as_millis()).ok())
        .map_or(fallback, Timestamp)
}
