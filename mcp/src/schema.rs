//! The schemas of the tools' arguments and results, as clients are shown
//! them: written as JSON ([`schema`]) or described by a Rust type
//! ([`of`]; the types below only describe, nothing is parsed into them),
//! and made lean for listing (`groups::lean`).

use std::sync::Arc;

use rmcp::model::JsonObject;
use schemars::JsonSchema;
use serde_json::{Map, Value};

/// `value`, a JSON object, as a schema (an empty one otherwise).
pub fn schema(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}

/// The JSON schema of `T`, as rmcp publishes input schemas, without the
/// number formats schemars adds (`uint64`, `double`, …): they are not JSON
/// Schema formats, and clients that validate with Ajv (the MCP Inspector,
/// Claude Code) print a warning for each one on every start.
pub fn of<T: JsonSchema + 'static>() -> Arc<JsonObject> {
    let mut schema =
        Value::Object((*rmcp::handler::server::common::schema_for_type::<T>()).clone());
    each_object(&mut schema, &mut |object| {
        let numeric = object
            .get("format")
            .and_then(Value::as_str)
            .is_some_and(|f| {
                matches!(
                    f,
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
            });
        if numeric {
            object.remove("format");
        }
    });
    self::schema(schema)
}

/// Calls `visit` on every object in `value`, outer ones first.
fn each_object(value: &mut Value, visit: &mut impl FnMut(&mut JsonObject)) {
    match value {
        Value::Object(object) => {
            visit(object);
            object.values_mut().for_each(|v| each_object(v, visit));
        }
        Value::Array(items) => items.iter_mut().for_each(|v| each_object(v, visit)),
        _ => {}
    }
}

/// Property schemas without their descriptions, nested ones included.
pub fn without_descriptions(properties: Map<String, Value>) -> Map<String, Value> {
    let mut value = Value::Object(properties);
    each_object(&mut value, &mut |object| {
        if object.get("description").is_some_and(Value::is_string) {
            object.remove("description");
        }
    });
    match value {
        Value::Object(properties) => properties,
        _ => Map::new(),
    }
}

/// `"type": ["string", "null"]` as `"type": "string"` throughout an input
/// schema: an optional argument is one left out (a null is taken as left
/// out all the same).
pub fn optional_not_null(schema: &mut Value) {
    each_object(schema, &mut |object| {
        if let Some(Value::Array(types)) = object.get("type")
            && types.len() == 2
            && types.iter().any(|t| t == "null")
            && let Some(kept) = types.iter().find(|t| *t != "null").cloned()
        {
            object.insert("type".into(), kept);
        }
    });
}

/// Removes the `$schema`, `title` and `description` keywords from a schema
/// and its subschemas (a property that happens to be named so, whose schema
/// is an object, is kept).
pub fn strip_prose(schema: &mut Value) {
    each_object(schema, &mut |object| {
        for key in ["$schema", "title", "description"] {
            if !object.get(key).is_some_and(Value::is_object) {
                object.remove(key);
            }
        }
    });
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
