//! `planb-mcp plan import [DIR]`: mcp-cli's saved plans (`<id>.json`, by
//! default in `~/.mcp-cli/plans`) and their checkpoints (`<id>_state.json`)
//! brought into the log.
//!
//! A plan keeps its title, description, variables and steps (mcp-cli writes
//! `tool_calls[{name, args}]` and 1-based string `depends_on`, or none). It
//! is recorded under the idempotency key `mcp-cli:<id>`, so importing the
//! same directory again changes nothing. A checkpoint becomes a planb run of
//! the plan: each completed step whose result mcp-cli kept whole is
//! recorded with its call, so `plan resume` calls it no more. mcp-cli keeps
//! results only as variables, cutting strings at 1,000 characters and
//! replacing larger objects with a `"[dict, N chars]"` placeholder: a step
//! whose value was cut is not recorded, and the resume calls it again
//! (mcp-cli's own resume would pass the cut value on). A completed step
//! without a `result_variable` has no result on record: it is recorded
//! with `null`.
//!
//! Imports run one at a time on a data root ([`ImportLock`]). A plan
//! imported before whose checkpoint is not on record (the import that
//! recorded the plan ended before it got there, or the checkpoint came
//! later) gets it on the next import, as long as the plan has never run.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use planb_core::TaskId;
use planb_core::exec_plan::ExecPlan;
use planb_engine::plans::{self, Downstream, ForeignRun};
use planb_projections::{ImportLock, Store};
use serde_json::{Map, Value, json};

use crate::error::{Error, ErrorCode};

/// Largest plan or checkpoint file read.
const FILE_BYTES_MAX: u64 = 16 * 1024 * 1024;
/// Most plans imported in one call.
const PLANS_MAX: usize = 10_000;
/// mcp-cli's cut: strings longer than this are cut to it plus a marker.
const CUT_CHARS: usize = 1000;
const CUT_MARKER: &str = "... [truncated]";

/// The idempotency key of an imported plan: this, then mcp-cli's id. The
/// plan answers to that id too.
pub use crate::plans::IMPORTED_KEY_PREFIX as KEY_PREFIX;

/// One saved mcp-cli plan.
#[derive(Debug)]
pub struct Saved {
    /// mcp-cli's id (the file's stem).
    pub id: String,
    /// The plan file.
    pub path: PathBuf,
    /// Its checkpoint, when there is one.
    pub checkpoint: Option<PathBuf>,
}

/// The plans in `dir`, by id; `INVALID_ARGUMENT` naming the file when the
/// directory or a plan in it cannot be read.
pub fn saved(dir: &Path) -> Result<Vec<Saved>, Error> {
    saved_in(dir)
}

fn saved_in(dir: &Path) -> Result<Vec<Saved>, Error> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| Error::invalid(format!("{}: {e}", dir.display())))?;
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::invalid(format!("{}: {e}", dir.display())))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(id) = name.strip_suffix(".json") else {
            continue;
        };
        if id.ends_with("_state") || id.is_empty() {
            continue;
        }
        let checkpoint = dir.join(format!("{id}_state.json"));
        found.push(Saved {
            id: id.to_owned(),
            path: entry.path(),
            checkpoint: checkpoint.is_file().then_some(checkpoint),
        });
        if found.len() > PLANS_MAX {
            return Err(Error::invalid(format!(
                "{}: more than {PLANS_MAX} plans; import them a part at a time",
                dir.display()
            )));
        }
    }
    found.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(found)
}

fn read_json(path: &Path) -> Result<Value, Error> {
    let shown = path.display();
    let max = usize::try_from(FILE_BYTES_MAX).unwrap_or(usize::MAX);
    let bytes = planb_projections::bounded::read(path, max)
        .map_err(|e| Error::invalid(format!("{shown}: {e}")))?
        .map_err(|over| {
            Error::invalid(format!(
                "{shown}: {} bytes; at most {FILE_BYTES_MAX} are read",
                over.0
            ))
        })?;
    serde_json::from_slice(&bytes).map_err(|e| Error::invalid(format!("{shown}: not JSON: {e}")))
}

/// mcp-cli's plan file as a planb plan; `INVALID_ARGUMENT` naming the
/// field that cannot be converted.
pub fn convert(raw: &Value) -> Result<Value, Error> {
    converted(raw)
}

fn converted(raw: &Value) -> Result<Value, Error> {
    let Value::Object(raw) = raw else {
        return Err(Error::invalid("not a JSON object"));
    };
    let steps = match raw.get("steps") {
        Some(Value::Array(steps)) => steps,
        _ => return Err(Error::invalid("steps: missing or not an array")),
    };
    let mut converted = Vec::new();
    for (at, step) in steps.iter().enumerate() {
        let field = format!("steps[{at}]");
        let Value::Object(step) = step else {
            return Err(Error::invalid(format!("{field}: not an object")));
        };
        let (tool, args) = match step.get("tool_calls") {
            Some(Value::Array(calls)) if calls.len() == 1 => {
                (calls[0].get("name").cloned(), calls[0].get("args").cloned())
            }
            Some(Value::Array(calls)) if calls.len() > 1 => {
                return Err(Error::invalid(format!(
                    "{field}.tool_calls: {} calls; a step makes one",
                    calls.len()
                )));
            }
            _ => (step.get("tool").cloned(), step.get("args").cloned()),
        };
        let mut out = Map::new();
        for key in ["index", "title", "result_variable"] {
            if let Some(value) = step.get(key).filter(|v| !v.is_null()) {
                out.insert(key.into(), value.clone());
            }
        }
        out.insert("tool".into(), tool.unwrap_or(Value::Null));
        out.insert("args".into(), args.unwrap_or_else(|| json!({})));
        out.insert(
            "depends_on".into(),
            step.get("depends_on").cloned().unwrap_or_else(|| json!([])),
        );
        converted.push(Value::Object(out));
    }
    let mut plan = Map::new();
    for key in ["title", "description", "variables"] {
        if let Some(value) = raw.get(key).filter(|v| !v.is_null()) {
            plan.insert(key.into(), value.clone());
        }
    }
    plan.insert("steps".into(), Value::Array(converted));
    Ok(Value::Object(plan))
}

/// Whether mcp-cli cut `value` when it saved it.
fn was_cut(value: &Value) -> bool {
    let Value::String(text) = value else {
        return false;
    };
    if text.ends_with(CUT_MARKER) && text.chars().count() == CUT_CHARS + CUT_MARKER.len() {
        return true;
    }
    // "[dict, 1901 chars]" / "[list, 52 chars]"
    text.strip_prefix('[')
        .and_then(|t| t.strip_suffix(" chars]"))
        .and_then(|t| t.split_once(", "))
        .is_some_and(|(kind, n)| {
            (kind == "dict" || kind == "list") && n.chars().all(|c| c.is_ascii_digit())
        })
}

/// What a checkpoint says, as a run of `plan`; and the steps left out, with
/// why.
pub fn foreign_run(
    checkpoint: &Value,
    plan: &ExecPlan,
) -> Result<(ForeignRun, Vec<String>), Error> {
    checkpoint_run(checkpoint, plan)
}

fn checkpoint_run(checkpoint: &Value, plan: &ExecPlan) -> Result<(ForeignRun, Vec<String>), Error> {
    let status = checkpoint
        .get("status")
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    let completed: Vec<String> = match checkpoint.get("completed_steps") {
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect(),
        _ => return Err(Error::invalid("completed_steps: missing or not an array")),
    };
    let variables = match checkpoint.get("variables") {
        Some(Value::Object(vars)) => vars.clone(),
        None | Some(Value::Null) => Map::new(),
        Some(_) => return Err(Error::invalid("variables: not an object")),
    };
    let call_variables = call_variables(plan, &variables);
    let (done, left) = kept_results(plan, &completed, &variables);
    let finished = status == "completed" && done.len() == plan.steps.len();
    let reason = (!finished).then(|| match status {
        "completed" => {
            "imported from mcp-cli: completed there, but not every result was kept".to_owned()
        }
        "failed" => "imported from mcp-cli: the run failed there".to_owned(),
        "running" => "imported from mcp-cli: the run was interrupted there".to_owned(),
        other => format!("imported from mcp-cli: its status was {other:?}"),
    });
    Ok((
        ForeignRun {
            call_variables,
            variables,
            completed: done,
            finished,
            reason,
        },
        left,
    ))
}

/// What the run was given over the plan: variables that are no step's
/// result and differ from the plan's (or are not in it), unless mcp-cli
/// cut them.
fn call_variables(plan: &ExecPlan, variables: &Map<String, Value>) -> Map<String, Value> {
    let results: Vec<&str> = plan
        .steps
        .iter()
        .filter_map(|s| s.result_variable.as_deref())
        .collect();
    variables
        .iter()
        .filter(|(name, value)| {
            !results.contains(&name.as_str()) && plan.variables.get(*name) != Some(value)
        })
        .filter(|(_, value)| !was_cut(value))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The completed steps whose results the checkpoint kept whole, each with
/// its result; and the others, each with why it runs again.
fn kept_results(
    plan: &ExecPlan,
    completed: &[String],
    variables: &Map<String, Value>,
) -> (Vec<(String, Value)>, Vec<String>) {
    let mut done = Vec::new();
    let mut left = Vec::new();
    for step in &plan.steps {
        if !completed.contains(&step.index) {
            continue;
        }
        match &step.result_variable {
            None => done.push((step.index.clone(), Value::Null)),
            Some(var) => match variables.get(var) {
                Some(value) if !was_cut(value) => done.push((step.index.clone(), value.clone())),
                Some(_) => left.push(format!(
                    "step {}: mcp-cli cut its result ({var}); it runs again on resume",
                    step.index
                )),
                None => left.push(format!(
                    "step {}: its result ({var}) is not in the checkpoint; it runs again on resume",
                    step.index
                )),
            },
        }
    }
    (done, left)
}

/// How one plan's import went, for people.
#[derive(Debug)]
pub enum Imported {
    /// Recorded now: the new id, what its checkpoint gave, and warnings.
    New {
        task: TaskId,
        title: String,
        steps: usize,
        run: Option<String>,
        notes: Vec<String>,
    },
    /// Imported before: the id it has; what its checkpoint gave, when it is
    /// recorded now (it was not then), and notes.
    Already {
        task: TaskId,
        run: Option<String>,
        notes: Vec<String>,
    },
}

/// Imports one saved plan (and its checkpoint), while `_lock` keeps other
/// imports out.
pub async fn import(
    store: &Arc<Store>,
    downstream: &Arc<Downstream>,
    saved: &Saved,
    _lock: &ImportLock,
    project: Option<String>,
) -> Result<Imported, Error> {
    let key = format!("{KEY_PREFIX}{}", saved.id);
    let existing = store
        .read(|s| s.task_by_request(&key).cloned())
        .map_err(Error::internal)?;
    if let Some(task) = existing {
        if task.plan.as_ref().is_some_and(|p| p.deleted) {
            return Err(Error::new(
                ErrorCode::Conflict,
                format!(
                    "imported before as plan {}, since deleted (its history stays in the log); it is not imported again",
                    task.id
                ),
            ));
        }
        return owed_checkpoint(store, downstream, saved, &task).await;
    }
    let shown = saved.path.display();
    let raw = read_json(&saved.path)?;
    let value = converted(&raw).map_err(|e| Error::invalid(format!("{shown}: {}", e.message)))?;
    let plan = ExecPlan::from_json(&value).map_err(|e| Error::invalid(format!("{shown}: {e}")))?;
    let record_as = crate::plans::RecordAs {
        client_request_id: Some(key),
        project,
    };
    let (task, plan, created) = crate::plans::record(store, plan, record_as).await?;
    if !created {
        // Recorded under its key since the look above, though not by an
        // import: a plan created with that key as its client request id.
        let (run, notes) = (None, Vec::new());
        return Ok(Imported::Already { task, run, notes });
    }
    let (run, notes) = checkpoint(store, downstream, saved, task, &plan).await;
    Ok(Imported::New {
        task,
        title: plan.title.clone(),
        steps: plan.steps.len(),
        run,
        notes,
    })
}

/// A plan imported before: its checkpoint is recorded now if the plan has
/// never run (no other import is under way to be recording it) and mcp-cli's
/// plan is still the one imported.
async fn owed_checkpoint(
    store: &Arc<Store>,
    downstream: &Arc<Downstream>,
    saved: &Saved,
    task: &planb_core::Task,
) -> Result<Imported, Error> {
    let already = |run, notes| {
        Ok(Imported::Already {
            task: task.id,
            run,
            notes,
        })
    };
    if saved.checkpoint.is_none() || !task.runs.is_empty() {
        return already(None, Vec::new());
    }
    let plan = match plans::load(task) {
        Ok(plan) => plan,
        Err(e) => return already(None, vec![format!("its checkpoint was not imported: {e}")]),
    };
    let now = read_json(&saved.path)
        .and_then(|raw| converted(&raw))
        .and_then(|value| ExecPlan::from_json(&value).map_err(Error::invalid));
    if now.ok().as_ref() != Some(&*plan) {
        let note = format!(
            "its checkpoint was not imported: {} is no longer the plan imported; import it into another data root, or create it anew",
            saved.path.display()
        );
        return already(None, vec![note]);
    }
    let (run, notes) = checkpoint(store, downstream, saved, task.id, &plan).await;
    already(run, notes)
}

/// Records `saved`'s checkpoint, if it has one, as a run of `task`: what it
/// gave, and notes on what it left out or why it was not imported.
async fn checkpoint(
    store: &Arc<Store>,
    downstream: &Arc<Downstream>,
    saved: &Saved,
    task: TaskId,
    plan: &ExecPlan,
) -> (Option<String>, Vec<String>) {
    let mut notes = Vec::new();
    let Some(path) = &saved.checkpoint else {
        return (None, notes);
    };
    let recorded = match read_json(path)
        .and_then(|checkpoint| checkpoint_run(&checkpoint, plan))
        .map_err(|e| format!("{}: {}", path.display(), e.message))
    {
        Ok((foreign, left)) => {
            notes.extend(left);
            let summary = format!(
                "{} of {} done{}",
                foreign.completed.len(),
                planb_core::text::counted(plan.steps.len(), "step", "steps"),
                if foreign.finished { ", completed" } else { "" }
            );
            plans::record_foreign_run(Arc::clone(store), Arc::clone(downstream), task, foreign)
                .await
                .map(|_| summary)
                .map_err(|e| e.to_string())
        }
        Err(e) => Err(e),
    };
    match recorded {
        Ok(summary) => (Some(summary), notes),
        Err(e) => {
            notes.push(format!("its checkpoint was not imported: {e}"));
            (None, notes)
        }
    }
}

/// mcp-cli's plans directory: `~/.mcp-cli/plans`.
pub fn default_dir() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|home| PathBuf::from(home).join(".mcp-cli").join("plans"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_values_are_recognised() {
        let cut = format!("{}{CUT_MARKER}", "x".repeat(CUT_CHARS));
        assert!(was_cut(&json!(cut)));
        assert!(was_cut(&json!("[dict, 1901 chars]")));
        assert!(was_cut(&json!("[list, 52 chars]")));
        assert!(!was_cut(&json!("x".repeat(CUT_CHARS))));
        assert!(!was_cut(&json!("[dict, many chars]")));
        assert!(!was_cut(&json!({"a": 1})));
    }

    #[test]
    fn tool_calls_and_missing_dependencies_are_normalised() {
        let raw = json!({"id": "p", "title": "T", "description": "D", "tags": [], "metadata": {},
        "variables": {"v": 1},
        "steps": [
            {"id": "s1", "index": "1", "title": "A",
             "tool_calls": [{"id": "c1", "name": "echo", "args": {"text": "${v}"}}],
             "result_variable": null},
            {"id": "s2", "index": "2", "title": "B",
             "tool_calls": [{"id": "c2", "name": "add", "args": {"a": 1}}],
             "result_variable": "s", "depends_on": ["1"]}
        ]});
        let plan = convert(&raw).expect("converted");
        assert_eq!(
            plan,
            json!({"title": "T", "description": "D", "variables": {"v": 1}, "steps": [
                {"index": "1", "title": "A", "tool": "echo", "args": {"text": "${v}"}, "depends_on": []},
                {"index": "2", "title": "B", "result_variable": "s", "tool": "add", "args": {"a": 1},
                 "depends_on": ["1"]}
            ]})
        );
        let two = json!({"steps": [{"index": "1", "title": "A",
            "tool_calls": [{"name": "a", "args": {}}, {"name": "b", "args": {}}]}]});
        let refused = convert(&two).expect_err("two calls");
        assert_eq!(refused.code, crate::ErrorCode::InvalidArgument);
        assert_eq!(
            refused.message,
            "steps[0].tool_calls: 2 calls; a step makes one"
        );
    }
}
