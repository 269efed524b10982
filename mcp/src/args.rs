//! Tool arguments: parsed by hand from the raw JSON object so every problem
//! becomes a tool error naming the field (`sessionId: not a uuid: "x"`), never
//! a JSON-RPC protocol error. The typed structs below only describe the input
//! schemas clients show; they are not used to parse.

use std::sync::Arc;

use planb_core::SessionId;
use rmcp::model::JsonObject;
use schemars::JsonSchema;
use serde_json::Value;

/// Problems with a tool's arguments, one message per field.
#[derive(Debug, Default)]
pub struct ArgErrors(pub Vec<String>);

impl std::fmt::Display for ArgErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.join("; "))
    }
}

/// Reads fields out of a tool's argument object, collecting every problem.
#[derive(Debug)]
pub struct Args<'a> {
    object: &'a JsonObject,
    known: Vec<&'static str>,
    errors: ArgErrors,
}

impl<'a> Args<'a> {
    pub fn new(object: &'a JsonObject) -> Args<'a> {
        Args {
            object,
            known: Vec::new(),
            errors: ArgErrors::default(),
        }
    }

    /// An optional string of at most `max_chars` characters; `null` counts as absent.
    pub fn optional_string(&mut self, name: &'static str, max_chars: usize) -> Option<String> {
        self.known.push(name);
        match self.object.get(name) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.chars().count() > max_chars => {
                self.errors.0.push(format!(
                    "{name}: must be at most {max_chars} characters (got {})",
                    s.chars().count()
                ));
                None
            }
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                self.errors
                    .0
                    .push(format!("{name}: must be a string, got {}", kind(other)));
                None
            }
        }
    }

    /// A required string (empty allowed) of at most `max_bytes` bytes.
    pub fn string(&mut self, name: &'static str, max_bytes: usize) -> Option<String> {
        self.known.push(name);
        match self.object.get(name) {
            None | Some(Value::Null) => {
                self.errors.0.push(format!("{name}: required"));
                None
            }
            Some(Value::String(s)) if s.len() > max_bytes => {
                self.errors.0.push(format!(
                    "{name}: must be at most {max_bytes} bytes (got {})",
                    s.len()
                ));
                None
            }
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                self.errors
                    .0
                    .push(format!("{name}: must be a string, got {}", kind(other)));
                None
            }
        }
    }

    /// The required `sessionId`, a UUID.
    pub fn session_id(&mut self) -> Option<SessionId> {
        let id = self.optional_session_id();
        if matches!(self.object.get("sessionId"), None | Some(Value::Null)) {
            self.errors.0.push(
                "sessionId: required; call init_planb_session first and pass the sessionId it returns"
                    .into(),
            );
        }
        id
    }

    /// The optional `sessionId`, a UUID.
    pub fn optional_session_id(&mut self) -> Option<SessionId> {
        let text = self.optional_string("sessionId", 100)?;
        match SessionId::parse(text.trim()) {
            Ok(id) => Some(id),
            Err(error) => {
                self.errors.0.push(format!(
                    "sessionId: {error}; pass the sessionId that init_planb_session returned"
                ));
                None
            }
        }
    }

    /// An optional number within `min..=max`; `null` counts as absent.
    pub fn optional_number(&mut self, name: &'static str, min: f64, max: f64) -> Option<f64> {
        self.known.push(name);
        match self.object.get(name) {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) => match n.as_f64() {
                Some(v) if (min..=max).contains(&v) => Some(v),
                _ => {
                    self.errors.0.push(format!(
                        "{name}: must be a number from {min} to {max} (got {n})"
                    ));
                    None
                }
            },
            Some(other) => {
                self.errors
                    .0
                    .push(format!("{name}: must be a number, got {}", kind(other)));
                None
            }
        }
    }

    /// An optional whole number within `min..=max`; `null` counts as absent.
    pub fn optional_integer(&mut self, name: &'static str, min: u64, max: u64) -> Option<u64> {
        self.known.push(name);
        match self.object.get(name) {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) => match n.as_u64() {
                Some(v) if (min..=max).contains(&v) => Some(v),
                _ => {
                    self.errors.0.push(format!(
                        "{name}: must be a whole number from {min} to {max} (got {n})"
                    ));
                    None
                }
            },
            Some(other) => {
                self.errors.0.push(format!(
                    "{name}: must be a whole number, got {}",
                    kind(other)
                ));
                None
            }
        }
    }

    /// An optional boolean; `null` counts as absent.
    pub fn optional_bool(&mut self, name: &'static str) -> Option<bool> {
        self.known.push(name);
        match self.object.get(name) {
            None | Some(Value::Null) => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(other) => {
                self.errors.0.push(format!(
                    "{name}: must be true or false, got {}",
                    kind(other)
                ));
                None
            }
        }
    }

    /// An optional JSON object; `null` counts as absent.
    pub fn optional_object(&mut self, name: &'static str) -> Option<&'a JsonObject> {
        self.known.push(name);
        match self.object.get(name) {
            None | Some(Value::Null) => None,
            Some(Value::Object(map)) => Some(map),
            Some(other) => {
                self.errors
                    .0
                    .push(format!("{name}: must be an object, got {}", kind(other)));
                None
            }
        }
    }

    /// The raw value of a field the caller checks itself.
    pub fn raw(&mut self, name: &'static str) -> Option<&'a Value> {
        self.known.push(name);
        self.object.get(name).filter(|v| !v.is_null())
    }

    /// Adds a problem found by the caller.
    pub fn push(&mut self, message: String) {
        self.errors.0.push(message);
    }

    /// Every problem found so far, leaving the fields not read to the caller
    /// (`ask_user` hands them to the question-spec parser).
    pub fn finish_partial(self) -> Result<(), ArgErrors> {
        if self.errors.0.is_empty() {
            Ok(())
        } else {
            Err(self.errors)
        }
    }

    /// Fails on fields the tool does not take, then returns every problem found.
    pub fn finish(mut self) -> Result<(), ArgErrors> {
        for key in self.object.keys() {
            if !self.known.contains(&key.as_str()) {
                self.errors.0.push(if self.known.is_empty() {
                    format!("{key}: unknown field (this tool takes no arguments)")
                } else {
                    format!(
                        "{key}: unknown field (expected one of: {})",
                        self.known.join(", ")
                    )
                });
            }
        }
        if self.errors.0.is_empty() {
            Ok(())
        } else {
            Err(self.errors)
        }
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Input of `init_planb_session`.
#[derive(Debug, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code, reason = "describes the input schema only")]
pub struct InitSessionInput {
    /// At most 200 characters.
    title: Option<String>,
    /// What is being planned, one line (at most 2000 characters).
    intent: Option<String>,
    /// The project's absolute path.
    project_path: Option<String>,
}

/// Input of `save_plan`.
#[derive(Debug, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code, reason = "describes the input schema only")]
pub struct SavePlanInput {
    /// From init_planb_session.
    session_id: String,
    /// The whole plan, Markdown (at most 4 MiB); each call saves a version.
    plan: String,
    title: Option<String>,
}

/// An option: its value, or {value, markdown} with Markdown shown beside
/// the question when the option is focused.
#[derive(Debug, JsonSchema)]
#[serde(untagged)]
#[allow(dead_code, reason = "describes the input schema only")]
#[allow(missing_docs, reason = "described by the enum's own text")]
pub enum OptionInput {
    Plain(String),
    Illustrated {
        value: String,
        markdown: Option<String>,
    },
}

// The kind of a question: text and longtext (a line, several lines; the
// answer is a string), single (radio buttons; the chosen option's value),
// multi (checkboxes; an array of option values), scale (a slider; a
// number). Said in the tool's description, so not documented per variant
// here: each variant's text would be listed to every agent again.
#[derive(Debug, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code, reason = "describes the input schema only")]
#[allow(missing_docs, reason = "described in ask_user's description")]
pub enum KindInput {
    Text,
    Longtext,
    Single,
    Multi,
    Scale,
}

/// One question of the form.
#[derive(Debug, JsonSchema)]
#[allow(dead_code, reason = "describes the input schema only")]
pub struct QuestionInput {
    /// The key of its answer (letters, digits, `_`, `-`, `.`).
    id: String,
    /// The question, plain text.
    label: String,
    kind: KindInput,
    required: Option<bool>,
    /// A tab's name (tabs appear in first-use order).
    tab: Option<String>,
    placeholder: Option<String>,
    /// 1 to 50, unique values (single and multi).
    options: Option<Vec<OptionInput>>,
    min: Option<f64>,
    max: Option<f64>,
    step: Option<f64>,
}

/// Input of `ask_user`.
#[derive(Debug, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code, reason = "describes the input schema only")]
pub struct AskUserInput {
    /// From init_planb_session (required unless askId).
    session_id: Option<String>,
    /// The form's heading, plain text (required unless askId).
    title: Option<String>,
    /// The intro tab's title (default "Overview").
    intro_title: Option<String>,
    /// Markdown shown first.
    intro: Option<String>,
    /// Required unless askId.
    #[schemars(length(min = 1, max = 20))]
    questions: Option<Vec<QuestionInput>>,
    /// An earlier ask's id, alone: collect its answers or keep waiting.
    ask_id: Option<String>,
}

/// How an `ask_user` call ended.
#[derive(Debug, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code, reason = "describes the output schema only")]
pub enum AskStatusOutput {
    /// The person submitted the form; `answers` holds their answers.
    Answered,
    /// Not answered yet; the form stays open at `url`. Call ask_user with
    /// {askId} to keep waiting.
    Waiting,
    /// The wait timed out; the form stays open at `url` and a later answer is kept.
    TimedOut,
    /// The person dismissed the form.
    Cancelled,
}

/// Structured result of `ask_user` (its text is the answers JSON, or a message).
#[derive(Debug, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code, reason = "describes the output schema only")]
pub struct AskUserOutput {
    /// How the call ended.
    status: AskStatusOutput,
    /// The ask, for ask_user {askId}.
    ask_id: String,
    /// {questionId: value}, when answered.
    answers: Option<serde_json::Map<String, serde_json::Value>>,
    /// Where the form is open, when waiting or timed out.
    url: Option<String>,
}

/// Structured result of `write_plan`.
#[derive(Debug, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code, reason = "describes the output schema only")]
pub struct WritePlanOutput {
    /// The plan's name.
    plan_name: String,
    /// Absolute path of the plan's file.
    plan_path: String,
    /// Size of the plan's content, in bytes.
    bytes_written: u64,
}

/// Structured result of `edit_plan`.
#[derive(Debug, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code, reason = "describes the output schema only")]
pub struct EditPlanOutput {
    /// The plan's name.
    plan_name: String,
    /// Absolute path of the plan's file.
    plan_path: String,
    /// How many replacements the edits made.
    replacements_made: u64,
}

/// Structured result of `submit_plan`.
#[derive(Debug, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code, reason = "describes the output schema only")]
pub struct SubmitPlanOutput {
    /// Whether a person approved the plan.
    approved: bool,
    /// What to change (feedback and comments on quoted passages), or why there is no verdict.
    feedback: Option<String>,
    /// True when nobody has reviewed it yet and the review stays open: call
    /// submit_plan with the same planName to keep waiting.
    pending: Option<bool>,
    /// The review round waited on, when pending.
    round: Option<u32>,
    /// Where the review page is open, when pending.
    review_url: Option<String>,
}

/// Input of `write_plan`.
#[derive(Debug, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code, reason = "describes the input schema only")]
pub struct WritePlanInput {
    /// Letters, digits, `-`, `_`; the file is `<planName>-plan.md`.
    plan_name: String,
    /// The whole plan, Markdown (at most 4 MiB).
    content: String,
    /// A session to replay the plan with.
    session_id: Option<String>,
}

/// One string replacement.
#[derive(Debug, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code, reason = "describes the input schema only")]
pub struct EditInput {
    /// Must match exactly once unless replaceAll.
    old_string: String,
    new_string: String,
    replace_all: Option<bool>,
}

/// Input of `edit_plan`: one edit, or `edits`.
#[derive(Debug, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code, reason = "describes the input schema only")]
pub struct EditPlanInput {
    plan_name: String,
    /// One edit: must match exactly once unless replaceAll.
    old_string: Option<String>,
    new_string: Option<String>,
    replace_all: Option<bool>,
    /// Several edits, applied together against the text before any.
    edits: Option<Vec<EditInput>>,
}

/// Input of `submit_plan`.
#[derive(Debug, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code, reason = "describes the input schema only")]
pub struct SubmitPlanInput {
    /// The plan's name.
    plan_name: String,
}

/// The JSON schema of `T`, as rmcp publishes input schemas, without the
/// number formats schemars adds (`uint64`, `double`, …): they are not JSON
/// Schema formats, and clients that validate with Ajv (the MCP Inspector,
/// Claude Code) print a warning for each one on every start.
pub fn schema<T: JsonSchema + 'static>() -> Arc<JsonObject> {
    let mut schema = (*rmcp::handler::server::common::schema_for_type::<T>()).clone();
    strip_number_formats(&mut schema);
    Arc::new(schema)
}

fn strip_number_formats(object: &mut JsonObject) {
    let numeric = matches!(
        object.get("format").and_then(Value::as_str),
        Some(
            "int8"
                | "int16"
                | "int32"
                | "int64"
                | "uint8"
                | "uint16"
                | "uint32"
                | "uint64"
                | "uint"
                | "int"
                | "float"
                | "double"
        )
    );
    if numeric {
        object.remove("format");
    }
    for value in object.values_mut() {
        strip_in(value);
    }
}

fn strip_in(value: &mut Value) {
    match value {
        Value::Object(object) => strip_number_formats(object),
        Value::Array(items) => items.iter_mut().for_each(strip_in),
        _ => {}
    }
}
