//! Pipelines as files: the JSON a user writes under `<root>/pipelines/`
//! (format in `docs/pipelines.md`), read into a checked [`Pipeline`]. Every
//! problem names its JSON path, as the tool arguments' errors do.

use serde_json::{Map, Value};

use super::{
    Action, DefinitionError, MODEL_ANSWERS, Pipeline, STEPS_MAX, StepDef, StepId, StepIdError,
};
use crate::json::{echo, field_path, index_path, type_name};

/// Largest pipeline file, in bytes.
pub const PIPELINE_FILE_BYTES_MAX: usize = 1 << 20;
/// Longest step title, in characters.
const TITLE_CHARS_MAX: usize = 200;
/// Longest prompt template or tool argument text, in bytes.
const TEXT_BYTES_MAX: usize = 64 * 1024;

/// Why a pipeline file was refused.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PipelineFileError {
    /// The file is over [`PIPELINE_FILE_BYTES_MAX`].
    #[error("the file is {0} bytes, over the {PIPELINE_FILE_BYTES_MAX}-byte limit")]
    TooLarge(usize),
    /// The text does not parse; the parser's words.
    #[error("not JSON: {0}")]
    NotJson(String),
    /// The file is JSON but not an object (the JSON type it is).
    #[error("must be an object {{name, version, steps}} (got {0})")]
    NotAnObject(&'static str),
    /// A field is wrong, named by its JSON path (`steps[2].needs[0]`).
    #[error("{at}: {problem}")]
    Field {
        /// The field's JSON path.
        at: String,
        /// What is wrong with it.
        problem: FieldProblem,
    },
    /// The steps read, but do not make a pipeline.
    #[error(transparent)]
    Definition(#[from] DefinitionError),
}

/// What is wrong with one field of a pipeline file.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FieldProblem {
    /// The field is missing.
    #[error("required")]
    Required,
    /// The field is of another JSON type.
    #[error("must be {expected} (got {got})")]
    Type {
        /// What it must be (`a string`).
        expected: &'static str,
        /// The JSON type it is.
        got: &'static str,
    },
    /// An object of another shape than the one shown.
    #[error("must be an object {0}")]
    Shape(&'static str),
    /// A field the format does not have.
    #[error("unknown field (expected {0})")]
    Unknown(String),
    /// A text over its limit in bytes.
    #[error("must be at most {max} bytes (got {got})")]
    TooLong {
        /// The limit.
        max: usize,
        /// The text's length.
        got: usize,
    },
    /// A title over its limit in characters.
    #[error("must be at most {TITLE_CHARS_MAX} characters")]
    TitleTooLong,
    /// A value outside its list (the list, and the value as written).
    #[error("must be one of {known} (got {got})")]
    NotOneOf {
        /// The values allowed.
        known: String,
        /// The value given.
        got: String,
    },
    /// A step with no action.
    #[error("needs one of model, tool, render")]
    NoAction,
    /// A step with more than one action (those it has).
    #[error("has {0}; a step does exactly one thing")]
    Actions(String),
    /// A step id that is not one.
    #[error(transparent)]
    StepId(#[from] StepIdError),
    /// The pipeline's name is not an id.
    #[error("{0:?} must be lowercase letters, digits, '-' and '_', starting with a letter")]
    Name(String),
    /// The version is not a whole number from 1.
    #[error("must be a whole number from 1")]
    Version,
    /// More steps than [`STEPS_MAX`] (how many).
    #[error("at most {STEPS_MAX} (got {0})")]
    TooManySteps(usize),
}

impl PipelineFileError {
    fn at(at: impl Into<String>, problem: impl Into<FieldProblem>) -> PipelineFileError {
        PipelineFileError::Field {
            at: at.into(),
            problem: problem.into(),
        }
    }
}

/// The problem of a field of JSON type `got` that must be `expected`.
fn wrong_type(expected: &'static str, got: &Value) -> FieldProblem {
    FieldProblem::Type {
        expected,
        got: type_name(got),
    }
}

fn string<'a>(
    object: &'a Map<String, Value>,
    parent: &str,
    key: &str,
) -> Result<&'a str, PipelineFileError> {
    let path = field_path(parent, key);
    match object.get(key) {
        Some(Value::String(text)) => Ok(text),
        Some(other) => Err(PipelineFileError::at(path, wrong_type("a string", other))),
        None => Err(PipelineFileError::at(path, FieldProblem::Required)),
    }
}

fn bounded(path: &str, text: &str, max: usize) -> Result<(), PipelineFileError> {
    if text.len() > max {
        return Err(PipelineFileError::at(
            path,
            FieldProblem::TooLong {
                max,
                got: text.len(),
            },
        ));
    }
    Ok(())
}

fn unknown_keys(
    object: &Map<String, Value>,
    parent: &str,
    known: &[&str],
) -> Result<(), PipelineFileError> {
    match object.keys().find(|k| !known.contains(&k.as_str())) {
        Some(key) => Err(PipelineFileError::at(
            field_path(parent, key),
            FieldProblem::Unknown(known.join(", ")),
        )),
        None => Ok(()),
    }
}

fn action(step: &Map<String, Value>, path: &str) -> Result<Action, PipelineFileError> {
    let kinds: Vec<&str> = ["model", "tool", "render"]
        .into_iter()
        .filter(|k| step.contains_key(*k))
        .collect();
    match kinds.as_slice() {
        ["model"] => model_action(step, path),
        ["tool"] => tool_action(step, path),
        ["render"] => Ok(Action::Render {
            what: string(step, path, "render")?.to_owned(),
        }),
        [] => Err(PipelineFileError::at(path, FieldProblem::NoAction)),
        _ => Err(PipelineFileError::at(
            path,
            FieldProblem::Actions(kinds.join(" and ")),
        )),
    }
}

/// A step's `model`: `{prompt, answer?}`.
fn model_action(step: &Map<String, Value>, path: &str) -> Result<Action, PipelineFileError> {
    let at = field_path(path, "model");
    let Some(Value::Object(model)) = step.get("model") else {
        return Err(PipelineFileError::at(
            at,
            FieldProblem::Shape("{prompt, answer?}"),
        ));
    };
    unknown_keys(model, &at, &["prompt", "answer"])?;
    let prompt = string(model, &at, "prompt")?;
    bounded(&field_path(&at, "prompt"), prompt, TEXT_BYTES_MAX)?;
    let answer = match model.get("answer") {
        None => None,
        Some(Value::String(kind)) if MODEL_ANSWERS.contains(&kind.as_str()) => Some(kind.clone()),
        Some(other) => {
            return Err(PipelineFileError::at(
                field_path(&at, "answer"),
                FieldProblem::NotOneOf {
                    known: MODEL_ANSWERS.join(", "),
                    got: echo(&other.to_string()),
                },
            ));
        }
    };
    Ok(Action::Model {
        prompt: prompt.to_owned(),
        answer,
    })
}

/// A step's `tool`: `{server, tool, args?}`, the arguments kept as JSON
/// text.
fn tool_action(step: &Map<String, Value>, path: &str) -> Result<Action, PipelineFileError> {
    let at = field_path(path, "tool");
    let Some(Value::Object(tool)) = step.get("tool") else {
        return Err(PipelineFileError::at(
            at,
            FieldProblem::Shape("{server, tool, args?}"),
        ));
    };
    unknown_keys(tool, &at, &["server", "tool", "args"])?;
    let args = match tool.get("args") {
        None => "{}".to_owned(),
        Some(args @ Value::Object(_)) => args.to_string(),
        Some(other) => {
            return Err(PipelineFileError::at(
                field_path(&at, "args"),
                wrong_type("an object", other),
            ));
        }
    };
    bounded(&field_path(&at, "args"), &args, TEXT_BYTES_MAX)?;
    Ok(Action::Tool {
        server: string(tool, &at, "server")?.to_owned(),
        tool: string(tool, &at, "tool")?.to_owned(),
        args,
    })
}

fn step(value: &Value, path: &str) -> Result<StepDef, PipelineFileError> {
    let Value::Object(step) = value else {
        return Err(PipelineFileError::at(path, wrong_type("an object", value)));
    };
    unknown_keys(
        step,
        path,
        &["id", "title", "needs", "model", "tool", "render"],
    )?;
    let id = string(step, path, "id")?;
    let id = StepId::parse(id).map_err(|e| PipelineFileError::at(field_path(path, "id"), e))?;
    let title = match step.get("title") {
        None => id.as_str().to_owned(),
        Some(Value::String(title)) if title.chars().count() <= TITLE_CHARS_MAX => title.clone(),
        Some(Value::String(_)) => {
            return Err(PipelineFileError::at(
                field_path(path, "title"),
                FieldProblem::TitleTooLong,
            ));
        }
        Some(other) => {
            return Err(PipelineFileError::at(
                field_path(path, "title"),
                wrong_type("a string", other),
            ));
        }
    };
    let needs_path = field_path(path, "needs");
    let needs = match step.get("needs") {
        None => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, need)| {
                let at = index_path(&needs_path, i);
                match need {
                    Value::String(text) => {
                        StepId::parse(text).map_err(|e| PipelineFileError::at(at, e))
                    }
                    other => Err(PipelineFileError::at(at, wrong_type("a step id", other))),
                }
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(PipelineFileError::at(
                needs_path,
                wrong_type("an array of step ids", other),
            ));
        }
    };
    Ok(StepDef {
        id,
        title,
        needs,
        action: action(step, path)?,
    })
}

/// Reads a pipeline file's text into a checked pipeline.
pub fn parse_pipeline(text: &str) -> Result<Pipeline, PipelineFileError> {
    if text.len() > PIPELINE_FILE_BYTES_MAX {
        return Err(PipelineFileError::TooLarge(text.len()));
    }
    let value: Value =
        serde_json::from_str(text).map_err(|e| PipelineFileError::NotJson(e.to_string()))?;
    let Value::Object(root) = value else {
        return Err(PipelineFileError::NotAnObject(type_name(&value)));
    };
    unknown_keys(&root, "", &["name", "version", "steps"])?;
    let name = string(&root, "", "name")?;
    if StepId::parse(name).is_err() {
        return Err(PipelineFileError::at(
            "name",
            FieldProblem::Name(echo(name)),
        ));
    }
    let version = match root.get("version") {
        Some(Value::Number(n)) => n
            .as_u64()
            .and_then(|v| u32::try_from(v).ok())
            .filter(|v| *v > 0)
            .ok_or(PipelineFileError::at("version", FieldProblem::Version))?,
        Some(other) => {
            return Err(PipelineFileError::at(
                "version",
                wrong_type("a number", other),
            ));
        }
        None => return Err(PipelineFileError::at("version", FieldProblem::Required)),
    };
    let steps = match root.get("steps") {
        Some(Value::Array(items)) if items.len() <= STEPS_MAX => items
            .iter()
            .enumerate()
            .map(|(i, item)| step(item, &index_path("steps", i)))
            .collect::<Result<Vec<_>, _>>()?,
        Some(Value::Array(items)) => {
            return Err(PipelineFileError::at(
                "steps",
                FieldProblem::TooManySteps(items.len()),
            ));
        }
        Some(other) => {
            return Err(PipelineFileError::at(
                "steps",
                wrong_type("an array", other),
            ));
        }
        None => return Err(PipelineFileError::at("steps", FieldProblem::Required)),
    };
    Ok(Pipeline::new(name, version, steps)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pipeline_file_reads_into_a_checked_pipeline() {
        let pipeline = parse_pipeline(
            r#"{"name": "small-plan", "version": 2, "steps": [
                {"id": "intake", "title": "Intake", "model": {"prompt": "Restate: {{prompt}}", "answer": "json"}},
                {"id": "search", "needs": ["intake"], "tool": {"server": "web", "tool": "search", "args": {"q": "${intake}"}}},
                {"id": "report", "needs": ["intake", "search"], "render": "report"}
            ]}"#,
        )
        .expect("valid");
        assert_eq!((pipeline.name(), pipeline.version()), ("small-plan", 2));
        let steps = pipeline.steps();
        assert_eq!(steps[1].title, "search", "the id is the default title");
        assert_eq!(
            steps[0].action,
            Action::Model {
                prompt: "Restate: {{prompt}}".into(),
                answer: Some("json".into())
            }
        );
        assert_eq!(
            steps[1].action,
            Action::Tool {
                server: "web".into(),
                tool: "search".into(),
                args: r#"{"q":"${intake}"}"#.into()
            }
        );
        assert_eq!(
            steps[2].action,
            Action::Render {
                what: "report".into()
            }
        );
    }

    #[test]
    fn every_problem_names_its_path() {
        let step_list =
            |steps: &str| format!(r#"{{"name": "p", "version": 1, "steps": [{steps}]}}"#);
        for (text, expected) in [
            (
                "[]".to_owned(),
                "must be an object {name, version, steps} (got array)",
            ),
            (
                r#"{"name": "p", "version": 0, "steps": []}"#.to_owned(),
                "version: must be a whole number from 1",
            ),
            (
                r#"{"name": "Bad Name", "version": 1, "steps": []}"#.to_owned(),
                "name: \"Bad Name\" must be lowercase",
            ),
            (
                r#"{"name": "p", "version": 1, "steps": [], "extra": 1}"#.to_owned(),
                "extra: unknown field (expected name, version, steps)",
            ),
            (
                step_list(r#"{"id": "a"}"#),
                "steps[0]: needs one of model, tool, render",
            ),
            (
                step_list(r#"{"id": "a", "render": "x", "model": {"prompt": "p"}}"#),
                "steps[0]: has model and render; a step does exactly one thing",
            ),
            (
                step_list(r#"{"id": "a", "model": {}}"#),
                "steps[0].model.prompt: required",
            ),
            (
                step_list(r#"{"id": "a", "model": {"prompt": 3}}"#),
                "steps[0].model.prompt: must be a string (got number)",
            ),
            (
                step_list(r#"{"id": "a", "model": {"prompt": "p", "answer": "yaml"}}"#),
                "steps[0].model.answer: must be one of json, schedule (got \"yaml\")",
            ),
            (
                step_list(r#"{"id": "a", "render": "x", "needs": ["b", 4]}"#),
                "steps[0].needs[1]: must be a step id (got number)",
            ),
            (
                step_list(r#"{"id": "a", "tool": {"server": "s", "tool": "t", "args": []}}"#),
                "steps[0].tool.args: must be an object (got array)",
            ),
            (
                step_list(r#"{"id": "A", "render": "x"}"#),
                "steps[0].id: \"A\" must start with a lowercase letter",
            ),
            (
                step_list(r#"{"id": "a", "render": "x", "needs": ["b"]}"#),
                "steps[0].needs: \"a\" needs \"b\", which no step defines",
            ),
            (
                step_list(
                    r#"{"id": "a", "render": "x", "needs": ["b"]}, {"id": "b", "render": "y", "needs": ["a"]}"#,
                ),
                "steps: needs form a cycle",
            ),
            ("{".to_owned(), "not JSON: "),
        ] {
            let error = parse_pipeline(&text).expect_err(&text).to_string();
            assert!(
                error.starts_with(expected),
                "{text}\n got: {error}\nwant: {expected}"
            );
        }
    }
}
