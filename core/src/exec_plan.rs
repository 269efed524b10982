//! Execution plans: a DAG of tool calls on
//! downstream MCP servers, written once, inspected, dry-run, run in
//! parallel batches and resumed exactly.
//!
//! This module is the plan's pure half: the JSON format (and the shapes
//! plan generators emit, normalised on the way in), the checks made when a
//! plan is created (every error names its JSON path; a cycle is an error
//! naming it, never "forced" into an order), Kahn batches, `${var}`
//! resolution and the ASCII rendering. Running a plan (calls, the log,
//! resume) is the engine's job.
//!
//! Besides its declared `depends_on`, a step depends on every step whose
//! `result_variable` its arguments read: a plan cannot read a variable
//! before the step that binds it has run. Two steps may not bind the same
//! variable (which of them wins would depend on timing).

mod render;
mod runaway;
mod vars;

pub use render::{StepMark, render_dag};
pub use runaway::{Runaway, RunawayPattern, RunawayStop};
pub use vars::{TypedArg, referenced_names, resolve, resolve_args, typed_args, whole_reference};

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;

use serde_json::{Map, Value};

use crate::json::{echo, type_name};

/// Most steps in one plan.
pub const PLAN_STEPS_MAX: usize = 500;
/// Longest plan or step title, in characters.
pub const PLAN_TITLE_CHARS_MAX: usize = 500;
/// Longest plan description, in characters.
pub const PLAN_DESCRIPTION_CHARS_MAX: usize = 10_000;
/// Longest step index, in characters.
pub const STEP_INDEX_CHARS_MAX: usize = 32;
/// Longest tool name (`server__tool`), in characters.
pub const TOOL_NAME_CHARS_MAX: usize = 200;
/// Largest plan, as compact JSON.
pub const PLAN_JSON_BYTES_MAX: usize = 1024 * 1024;

/// A checked execution plan.
#[derive(Clone, PartialEq, Debug)]
pub struct ExecPlan {
    /// Shown to people.
    pub title: String,
    /// What it is for.
    pub description: Option<String>,
    /// Initial variables; call-time variables override them.
    pub variables: Map<String, Value>,
    /// The steps, in the order they were written.
    pub steps: Vec<PlanStep>,
    /// The failed run this plan revises, when it was made by re-planning.
    pub revises: Option<Revision>,
    /// Indexes (into `steps`) of each step's dependencies: the declared ones
    /// and those whose variables it reads, in definition order.
    needs: Vec<Vec<usize>>,
    /// Kahn layers of step positions, each sorted by index.
    batches: Vec<Vec<usize>>,
}

/// What a revised plan revises: the run of another plan that failed, and
/// the failure. Made by planb when it re-plans; the plan's `variables` are
/// every variable as the failed run left them.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Revision {
    /// The plan revised (its id).
    pub plan: String,
    /// Its run that failed (its id).
    pub run: String,
    /// Which revision of that run this is, from 1.
    pub number: u32,
    /// The step that failed (in the plan revised, or in its previous
    /// revision).
    pub step: String,
    /// Its error.
    pub error: String,
}

/// Longest failure kept in a [`Revision`], in characters.
pub const REVISION_ERROR_CHARS_MAX: usize = 2_000;

impl Revision {
    fn from_json(value: &Value) -> Result<Revision, PlanError> {
        let Value::Object(object) = value else {
            return Err(PlanError::at(
                "revises",
                format!("must be an object (got {})", type_name(value)),
            ));
        };
        let text = |key: &str, max: usize| {
            text_field(object, key, "revises", max, true).map(Option::unwrap_or_default)
        };
        let (plan, run) = (text("plan", 64)?, text("run", 64)?);
        let number = object.get("number").and_then(Value::as_u64);
        let number = number
            .and_then(|n| u32::try_from(n).ok())
            .filter(|&n| n > 0);
        let Some(number) = number else {
            return Err(PlanError::at(
                "revises.number",
                "must be a whole number from 1",
            ));
        };
        Ok(Revision {
            plan,
            run,
            number,
            step: text("step", STEP_INDEX_CHARS_MAX)?,
            error: text("error", REVISION_ERROR_CHARS_MAX)?,
        })
    }

    fn to_json(&self) -> Value {
        serde_json::json!({
            "plan": self.plan,
            "run": self.run,
            "number": self.number,
            "step": self.step,
            "error": self.error,
        })
    }
}

/// One tool call of a plan.
#[derive(Clone, PartialEq, Debug)]
pub struct PlanStep {
    /// Unique within the plan (`"1"`, `"2"`, …).
    pub index: String,
    /// Shown to people.
    pub title: String,
    /// `server__tool`, or a bare tool name unique across the servers.
    pub tool: String,
    /// The arguments, with `${var}` references.
    pub args: Map<String, Value>,
    /// Indexes of the steps that must succeed first, as written.
    pub depends_on: Vec<String>,
    /// The variable the step's result is bound to, on success.
    pub result_variable: Option<String>,
}

/// Why a plan was refused: the JSON path and what is wrong there.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct PlanError {
    /// Where (`steps[2].depends_on[0]`), or empty for the whole plan.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl PlanError {
    fn at(path: impl Into<String>, message: impl Into<String>) -> PlanError {
        PlanError {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for PlanError {}

/// Why a recorded definition does not read back as a plan.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DefinitionReadError {
    /// The text does not parse; the parser's words.
    #[error("not JSON: {0}")]
    NotJson(String),
    /// It parses, but is not a valid plan.
    #[error(transparent)]
    Invalid(#[from] PlanError),
}

/// Compares step indexes the way people count: numbers by value, before
/// other names, which compare as text (`"2"` before `"10"`).
pub fn index_order(a: &str, b: &str) -> Ordering {
    let number = |s: &str| -> Option<u128> {
        if !s.is_empty() && s.len() <= 38 && s.bytes().all(|c| c.is_ascii_digit()) {
            s.parse().ok()
        } else {
            None
        }
    };
    match (number(a), number(b)) {
        (Some(x), Some(y)) => x.cmp(&y).then_with(|| a.cmp(b)),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

fn text_field(
    object: &Map<String, Value>,
    key: &str,
    path: &str,
    max: usize,
    required: bool,
) -> Result<Option<String>, PlanError> {
    let here = if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    };
    match object.get(key) {
        None | Some(Value::Null) if required => Err(PlanError::at(here, format!("missing {key}"))),
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => {
            let trimmed = text.trim();
            if trimmed.is_empty() {
                if required {
                    return Err(PlanError::at(here, format!("missing {key}")));
                }
                return Ok(None);
            }
            let chars = trimmed.chars().count();
            if chars > max {
                return Err(PlanError::at(
                    here,
                    format!("must be at most {max} characters (got {chars})"),
                ));
            }
            Ok(Some(trimmed.to_owned()))
        }
        Some(other) => Err(PlanError::at(
            here,
            format!("must be a string (got {})", type_name(other)),
        )),
    }
}

/// A step index as written: a string, or an integer (which generators emit).
fn index_text(value: &Value, path: &str) -> Result<String, PlanError> {
    let text = match value {
        Value::String(s) => s.trim().to_owned(),
        Value::Number(n) if n.as_u64().is_some() => n.to_string(),
        other => {
            return Err(PlanError::at(
                path,
                format!(
                    "must be a step index, a string or a whole number (got {})",
                    type_name(other)
                ),
            ));
        }
    };
    check_index(&text, path)?;
    Ok(text)
}

/// Checks a step index (1 to 32 lowercase letters, digits, `-`, `_`).
/// The error names no path.
pub fn check_step_index(text: &str) -> Result<(), PlanError> {
    check_index(text, "")
}

fn check_index(text: &str, path: &str) -> Result<(), PlanError> {
    if text.is_empty() {
        return Err(PlanError::at(path, "must not be empty"));
    }
    if text.chars().count() > STEP_INDEX_CHARS_MAX {
        return Err(PlanError::at(
            path,
            format!("must be at most {STEP_INDEX_CHARS_MAX} characters"),
        ));
    }
    if let Some(c) = text
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-' || *c == '_'))
    {
        return Err(PlanError::at(
            path,
            format!(
                "{:?} may hold only lowercase letters, digits, '-' and '_' (found {c:?})",
                echo(text)
            ),
        ));
    }
    Ok(())
}

/// Checks call-time variables' names, as the plan's own are checked; the
/// path of a problem is `{path}["{name}"]`.
pub fn check_variable_names(variables: &Map<String, Value>, path: &str) -> Result<(), PlanError> {
    for name in variables.keys() {
        variable_name(name, &format!("{path}[{:?}]", echo(name)))?;
    }
    Ok(())
}

fn variable_name(text: &str, path: &str) -> Result<(), PlanError> {
    let valid = !text.is_empty()
        && text.len() <= 64
        && !text.starts_with(|c: char| c.is_ascii_digit())
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if valid {
        Ok(())
    } else {
        Err(PlanError::at(
            path,
            format!(
                "{:?} is not a variable name (1 to 64 letters, digits, '_' or '-', not starting with a digit)",
                echo(text)
            ),
        ))
    }
}

/// One step as written, before the plan-wide checks.
struct Written {
    index: Option<String>,
    title: String,
    tool: String,
    args: Map<String, Value>,
    depends_on: Vec<(String, bool)>,
    result_variable: Option<String>,
}

fn parse_step(value: &Value, path: &str) -> Result<Written, PlanError> {
    let Value::Object(object) = value else {
        return Err(PlanError::at(
            path,
            format!("must be an object (got {})", type_name(value)),
        ));
    };
    let index = match object.get("index") {
        None | Some(Value::Null) => None,
        Some(v) => Some(index_text(v, &format!("{path}.index"))?),
    };
    let title = text_field(object, "title", path, PLAN_TITLE_CHARS_MAX, true)?.unwrap_or_default();
    let (tool, args, args_path) = step_call(object, path)?;
    let args = step_args(args, args_path)?;
    let depends_on = step_depends_on(object, path)?;
    let result_variable = text_field(object, "result_variable", path, 64, false)?;
    if let Some(name) = &result_variable {
        variable_name(name, &format!("{path}.result_variable"))?;
    }
    Ok(Written {
        index,
        title,
        tool,
        args,
        depends_on,
        result_variable,
    })
}

/// A step's tool, its arguments as written and their JSON path: `tool` +
/// `args`, or the generators' `tool_calls: [{name, args}]`.
fn step_call(
    object: &Map<String, Value>,
    path: &str,
) -> Result<(String, Option<Value>, String), PlanError> {
    Ok(match (object.get("tool"), object.get("tool_calls")) {
        (Some(_), Some(_)) => {
            return Err(PlanError::at(
                path,
                "has both tool and tool_calls; give one",
            ));
        }
        (_, Some(Value::Array(calls))) => {
            let calls_path = format!("{path}.tool_calls");
            match calls.as_slice() {
                [Value::Object(call)] => {
                    let call_path = format!("{calls_path}[0]");
                    let name = text_field(call, "name", &call_path, TOOL_NAME_CHARS_MAX, true)?
                        .unwrap_or_default();
                    (name, call.get("args").cloned(), format!("{call_path}.args"))
                }
                [other] => {
                    return Err(PlanError::at(
                        format!("{calls_path}[0]"),
                        format!("must be an object (got {})", type_name(other)),
                    ));
                }
                [] => return Err(PlanError::at(calls_path, "missing tool call")),
                _ => {
                    return Err(PlanError::at(
                        calls_path,
                        format!(
                            "holds {} calls; a step makes one (split it into steps)",
                            calls.len()
                        ),
                    ));
                }
            }
        }
        (_, Some(other)) => {
            return Err(PlanError::at(
                format!("{path}.tool_calls"),
                format!("must be an array (got {})", type_name(other)),
            ));
        }
        (_, None) => {
            let tool =
                text_field(object, "tool", path, TOOL_NAME_CHARS_MAX, true)?.unwrap_or_default();
            (tool, object.get("args").cloned(), format!("{path}.args"))
        }
    })
}

/// A step's arguments: an object, or none.
fn step_args(args: Option<Value>, args_path: String) -> Result<Map<String, Value>, PlanError> {
    Ok(match args {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(args)) => args,
        Some(other) => {
            return Err(PlanError::at(
                args_path,
                format!("must be an object (got {})", type_name(&other)),
            ));
        }
    })
}

/// A step's `depends_on`: each entry's text and whether it was a number.
fn step_depends_on(
    object: &Map<String, Value>,
    path: &str,
) -> Result<Vec<(String, bool)>, PlanError> {
    Ok(match object.get("depends_on") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let at = format!("{path}.depends_on[{i}]");
                Ok((index_text(item, &at)?, item.is_number()))
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(PlanError::at(
                format!("{path}.depends_on"),
                format!("must be an array (got {})", type_name(other)),
            ));
        }
    })
}

impl ExecPlan {
    /// Reads a recorded definition (compact JSON, as [`ExecPlan::to_json`]
    /// wrote it) back into the plan, checked as at creation.
    pub fn from_definition(definition: &str) -> Result<ExecPlan, DefinitionReadError> {
        let value: Value = serde_json::from_str(definition)
            .map_err(|e| DefinitionReadError::NotJson(e.to_string()))?;
        Ok(ExecPlan::from_json(&value)?)
    }

    /// Reads and checks a plan: `{title, description?, variables?, steps}`
    /// (or `tool_calls` in place of `steps`). Steps without an `index` are
    /// numbered from 1 in order; when no step has one, whole-number
    /// `depends_on` entries are positions in the list counted from 0, as
    /// plan generators write them (text entries are indexes).
    /// Tools are not checked here: see [`ExecPlan::check_tools`].
    pub fn from_json(value: &Value) -> Result<ExecPlan, PlanError> {
        let Value::Object(object) = value else {
            return Err(PlanError::at(
                "",
                format!("a plan must be a JSON object (got {})", type_name(value)),
            ));
        };
        let title =
            text_field(object, "title", "", PLAN_TITLE_CHARS_MAX, true)?.unwrap_or_default();
        let description = text_field(object, "description", "", PLAN_DESCRIPTION_CHARS_MAX, false)?;
        let variables = plan_variables(object)?;
        let (key, written) = written_steps(object)?;
        let mut plan = normalise(title, description, variables, written, key)?;
        plan.revises = match object.get("revises") {
            None | Some(Value::Null) => None,
            Some(value) => Some(Revision::from_json(value)?),
        };
        let json = plan.to_json().to_string();
        if json.len() > PLAN_JSON_BYTES_MAX {
            return Err(PlanError::at(
                "",
                format!(
                    "the plan is {} bytes of JSON; at most {PLAN_JSON_BYTES_MAX} are accepted",
                    json.len()
                ),
            ));
        }
        Ok(plan)
    }

    /// The plan as JSON, in its recorded shape: what is recorded, listed and
    /// shown. [`ExecPlan::from_json`] reads it back to the same plan.
    pub fn to_json(&self) -> Value {
        let steps: Vec<Value> = self
            .steps
            .iter()
            .map(|step| {
                let mut out = Map::new();
                out.insert("index".into(), step.index.clone().into());
                out.insert("title".into(), step.title.clone().into());
                out.insert("tool".into(), step.tool.clone().into());
                out.insert("args".into(), Value::Object(step.args.clone()));
                out.insert(
                    "depends_on".into(),
                    step.depends_on.iter().cloned().map(Value::from).collect(),
                );
                if let Some(var) = &step.result_variable {
                    out.insert("result_variable".into(), var.clone().into());
                }
                Value::Object(out)
            })
            .collect();
        let mut out = Map::new();
        out.insert("title".into(), self.title.clone().into());
        if let Some(description) = &self.description {
            out.insert("description".into(), description.clone().into());
        }
        out.insert("variables".into(), Value::Object(self.variables.clone()));
        out.insert("steps".into(), Value::Array(steps));
        if let Some(revises) = &self.revises {
            out.insert("revises".into(), revises.to_json());
        }
        Value::Object(out)
    }

    /// Kahn layers of step positions: every step of a layer depends only on
    /// steps of earlier layers. Each layer is sorted by index.
    pub fn batches(&self) -> &[Vec<usize>] {
        &self.batches
    }

    /// The positions of the steps `step` waits for: its declared
    /// dependencies and the steps whose variables it reads.
    pub fn needs(&self, step: usize) -> &[usize] {
        &self.needs[step]
    }

    /// The position of the step with this index.
    pub fn position(&self, index: &str) -> Option<usize> {
        self.steps.iter().position(|s| s.index == index)
    }

    /// Checks every step's tool with `known`, which answers `None` for a
    /// tool that exists and otherwise the names it could have meant.
    /// The error says: `Unknown tool: X. Available: a, b`.
    pub fn check_tools(
        &self,
        known: impl Fn(&str) -> Result<(), Vec<String>>,
    ) -> Result<(), PlanError> {
        for (i, step) in self.steps.iter().enumerate() {
            if let Err(available) = known(&step.tool) {
                let list = if available.is_empty() {
                    "(no tools: no downstream server is configured)".to_owned()
                } else {
                    available.join(", ")
                };
                return Err(PlanError::at(
                    format!("steps[{i}].tool"),
                    format!("Unknown tool: {}. Available: {list}", echo(&step.tool)),
                ));
            }
        }
        Ok(())
    }
}

/// A plan's `variables`: an object of well-named variables, or none.
fn plan_variables(object: &Map<String, Value>) -> Result<Map<String, Value>, PlanError> {
    Ok(match object.get("variables") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(vars)) => {
            for name in vars.keys() {
                variable_name(name, &format!("variables.{}", echo(name)))?;
            }
            vars.clone()
        }
        Some(other) => {
            return Err(PlanError::at(
                "variables",
                format!("must be an object (got {})", type_name(other)),
            ));
        }
    })
}

/// A plan's steps as written, under `steps` or `tool_calls` (the key
/// returned, for the JSON paths of later errors).
fn written_steps(object: &Map<String, Value>) -> Result<(&'static str, Vec<Written>), PlanError> {
    let (key, steps_value) = match (object.get("steps"), object.get("tool_calls")) {
        (Some(steps), _) => ("steps", steps),
        (None, Some(calls)) => ("tool_calls", calls),
        (None, None) => return Err(PlanError::at("steps", "missing steps")),
    };
    let Value::Array(items) = steps_value else {
        return Err(PlanError::at(
            key,
            format!("must be an array (got {})", type_name(steps_value)),
        ));
    };
    if items.len() > PLAN_STEPS_MAX {
        return Err(PlanError::at(
            key,
            format!(
                "must hold at most {PLAN_STEPS_MAX} steps (got {})",
                items.len()
            ),
        ));
    }
    let mut written = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let path = format!("{key}[{i}]");
        // A top-level tool_calls entry is `{name, args, …}`.
        let step = if key == "tool_calls" {
            let mut item = item.clone();
            if let Value::Object(map) = &mut item
                && !map.contains_key("tool")
                && let Some(name) = map.remove("name")
            {
                map.insert("tool".into(), name);
                if !map.contains_key("title") {
                    let title = map.get("tool").cloned().unwrap_or(Value::Null);
                    map.insert("title".into(), title);
                }
            }
            parse_step(&item, &path)?
        } else {
            parse_step(item, &path)?
        };
        written.push(step);
    }
    Ok((key, written))
}

fn normalise(
    title: String,
    description: Option<String>,
    variables: Map<String, Value>,
    written: Vec<Written>,
    key: &str,
) -> Result<ExecPlan, PlanError> {
    let steps = numbered(written);
    let (by_index, by_variable) = step_lookups(&steps, key)?;
    let needs = step_needs(&steps, &by_index, &by_variable, key)?;
    let batches = layers(&steps, &needs).map_err(|cycle| {
        let names: Vec<&str> = cycle.iter().map(|&i| steps[i].index.as_str()).collect();
        PlanError::at(
            key,
            format!(
                "dependency cycle: {} (each step waits for the next; remove one of these dependencies)",
                names.join(" → ")
            ),
        )
    })?;
    Ok(ExecPlan {
        title,
        description,
        variables,
        steps,
        revises: None,
        needs,
        batches,
    })
}

/// The steps with their indexes: a step without one is numbered from 1 by
/// its position, and without indexes, numbers in `depends_on` are 0-based
/// positions.
fn numbered(written: Vec<Written>) -> Vec<PlanStep> {
    let zero_based = written.iter().all(|w| w.index.is_none());
    let mut steps = Vec::with_capacity(written.len());
    for (position, w) in written.into_iter().enumerate() {
        let index = w.index.unwrap_or_else(|| (position + 1).to_string());
        let depends_on = w
            .depends_on
            .into_iter()
            .map(
                |(text, number)| match (zero_based, number, text.parse::<usize>()) {
                    // A position past usize::MAX - 1 names no step; left as
                    // written, it is reported as an unknown dependency.
                    (true, true, Ok(n)) => n.checked_add(1).map_or(text, |n| n.to_string()),
                    _ => text,
                },
            )
            .collect();
        steps.push(PlanStep {
            index,
            title: w.title,
            tool: w.tool,
            args: w.args,
            depends_on,
            result_variable: w.result_variable,
        });
    }
    steps
}

/// Step positions by a name: an index, or a variable a step binds.
type Positions<'a> = BTreeMap<&'a str, usize>;

/// Each step's position by its index and by the variable it binds;
/// refuses an index or a variable given twice.
fn step_lookups<'a>(
    steps: &'a [PlanStep],
    key: &str,
) -> Result<(Positions<'a>, Positions<'a>), PlanError> {
    let mut by_index: Positions<'a> = BTreeMap::new();
    let mut by_variable: Positions<'a> = BTreeMap::new();
    for (i, step) in steps.iter().enumerate() {
        if let Some(first) = by_index.insert(&step.index, i) {
            return Err(PlanError::at(
                format!("{key}[{i}].index"),
                format!(
                    "duplicate index {:?}: {key}[{first}] has it too",
                    step.index
                ),
            ));
        }
        if let Some(var) = &step.result_variable
            && let Some(first) = by_variable.insert(var, i)
        {
            return Err(PlanError::at(
                format!("{key}[{i}].result_variable"),
                format!(
                    "{var:?} is already bound by step {} ({key}[{first}]); give each result its own variable",
                    steps[first].index
                ),
            ));
        }
    }
    Ok((by_index, by_variable))
}

/// The positions each step waits for, sorted: its declared dependencies,
/// each a known index other than its own, and the steps binding the
/// variables it reads.
fn step_needs(
    steps: &[PlanStep],
    by_index: &Positions<'_>,
    by_variable: &Positions<'_>,
    key: &str,
) -> Result<Vec<Vec<usize>>, PlanError> {
    let mut needs = Vec::with_capacity(steps.len());
    for (i, step) in steps.iter().enumerate() {
        let mut mine: Vec<usize> = Vec::new();
        for (d, dep) in step.depends_on.iter().enumerate() {
            let Some(&at) = by_index.get(dep.as_str()) else {
                return Err(PlanError::at(
                    format!("{key}[{i}].depends_on[{d}]"),
                    format!(
                        "step {} depends on {dep:?}, which no step has as its index",
                        step.index
                    ),
                ));
            };
            if at == i {
                return Err(PlanError::at(
                    format!("{key}[{i}].depends_on[{d}]"),
                    format!("step {} depends on itself", step.index),
                ));
            }
            if !mine.contains(&at) {
                mine.push(at);
            }
        }
        for name in referenced_names(&step.args) {
            if let Some(&at) = by_variable.get(name.as_str())
                && at != i
                && !mine.contains(&at)
            {
                mine.push(at);
            }
        }
        mine.sort_unstable();
        needs.push(mine);
    }
    Ok(needs)
}

/// Kahn layers, each sorted by index; on a cycle, one cycle (as positions,
/// each waiting for the next, the first repeated at the end).
fn layers(steps: &[PlanStep], needs: &[Vec<usize>]) -> Result<Vec<Vec<usize>>, Vec<usize>> {
    let mut waiting: Vec<usize> = needs.iter().map(Vec::len).collect();
    let mut dependents = vec![Vec::new(); steps.len()];
    for (i, mine) in needs.iter().enumerate() {
        for &n in mine {
            dependents[n].push(i);
        }
    }
    let mut ready: Vec<usize> = (0..steps.len()).filter(|&i| waiting[i] == 0).collect();
    let mut out = Vec::new();
    let mut placed = 0;
    while !ready.is_empty() {
        ready.sort_by(|&a, &b| index_order(&steps[a].index, &steps[b].index));
        let mut next = Vec::new();
        for &at in &ready {
            for &d in &dependents[at] {
                waiting[d] -= 1;
                if waiting[d] == 0 {
                    next.push(d);
                }
            }
        }
        placed += ready.len();
        out.push(std::mem::replace(&mut ready, next));
    }
    if placed == steps.len() {
        return Ok(out);
    }
    // Every step left waits for another step left.
    let stuck: Vec<usize> = (0..steps.len()).filter(|&i| waiting[i] > 0).collect();
    Err(crate::dag::find_cycle(needs, &stuck))
}

#[cfg(test)]
mod tests;
