//! Pipelines as files: the JSON a user writes under `<root>/pipelines/`
//! (format in `docs/pipelines.md`), read into a checked [`Pipeline`]. Every
//! problem names its JSON path, as the tool arguments' errors do.

use serde_json::{Map, Value};

use super::{Action, MODEL_ANSWERS, Pipeline, STEPS_MAX, StepDef, StepId};
use crate::json::{echo, field_path, index_path, type_name};

/// Largest pipeline file, in bytes.
pub const PIPELINE_FILE_BYTES_MAX: usize = 1 << 20;
/// Longest step title, in characters.
const TITLE_CHARS_MAX: usize = 200;
/// Longest prompt template or tool argument text, in bytes.
const TEXT_BYTES_MAX: usize = 64 * 1024;

fn string<'a>(object: &'a Map<String, Value>, parent: &str, key: &str) -> Result<&'a str, String> {
    let path = field_path(parent, key);
    match object.get(key) {
        Some(Value::String(text)) => Ok(text),
        Some(other) => Err(format!(
            "{path}: must be a string (got {})",
            type_name(other)
        )),
        None => Err(format!("{path}: required")),
    }
}

fn bounded(path: &str, text: &str, max: usize) -> Result<(), String> {
    if text.len() > max {
        return Err(format!(
            "{path}: must be at most {max} bytes (got {})",
            text.len()
        ));
    }
    Ok(())
}

fn unknown_keys(object: &Map<String, Value>, parent: &str, known: &[&str]) -> Result<(), String> {
    match object.keys().find(|k| !known.contains(&k.as_str())) {
        Some(key) => Err(format!(
            "{}: unknown field (expected {})",
            field_path(parent, key),
            known.join(", ")
        )),
        None => Ok(()),
    }
}

fn action(step: &Map<String, Value>, path: &str) -> Result<Action, String> {
    let kinds: Vec<&str> = ["model", "tool", "render"]
        .into_iter()
        .filter(|k| step.contains_key(*k))
        .collect();
    match kinds.as_slice() {
        ["model"] => {
            let at = field_path(path, "model");
            let Some(Value::Object(model)) = step.get("model") else {
                return Err(format!("{at}: must be an object {{prompt, answer?}}"));
            };
            unknown_keys(model, &at, &["prompt", "answer"])?;
            let prompt = string(model, &at, "prompt")?;
            bounded(&field_path(&at, "prompt"), prompt, TEXT_BYTES_MAX)?;
            let answer = match model.get("answer") {
                None => None,
                Some(Value::String(kind)) if MODEL_ANSWERS.contains(&kind.as_str()) => {
                    Some(kind.clone())
                }
                Some(other) => {
                    return Err(format!(
                        "{}: must be one of {} (got {})",
                        field_path(&at, "answer"),
                        MODEL_ANSWERS.join(", "),
                        echo(&other.to_string())
                    ));
                }
            };
            Ok(Action::Model {
                prompt: prompt.to_owned(),
                answer,
            })
        }
        ["tool"] => {
            let at = field_path(path, "tool");
            let Some(Value::Object(tool)) = step.get("tool") else {
                return Err(format!("{at}: must be an object {{server, tool, args?}}"));
            };
            unknown_keys(tool, &at, &["server", "tool", "args"])?;
            let args = match tool.get("args") {
                None => "{}".to_owned(),
                Some(args @ Value::Object(_)) => args.to_string(),
                Some(other) => {
                    return Err(format!(
                        "{}: must be an object (got {})",
                        field_path(&at, "args"),
                        type_name(other)
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
        ["render"] => Ok(Action::Render {
            what: string(step, path, "render")?.to_owned(),
        }),
        [] => Err(format!("{path}: needs one of model, tool, render")),
        _ => Err(format!(
            "{path}: has {}; a step does exactly one thing",
            kinds.join(" and ")
        )),
    }
}

fn step(value: &Value, path: &str) -> Result<StepDef, String> {
    let Value::Object(step) = value else {
        return Err(format!(
            "{path}: must be an object (got {})",
            type_name(value)
        ));
    };
    unknown_keys(
        step,
        path,
        &["id", "title", "needs", "model", "tool", "render"],
    )?;
    let id = string(step, path, "id")?;
    let id = StepId::parse(id).map_err(|e| format!("{}: {e}", field_path(path, "id")))?;
    let title = match step.get("title") {
        None => id.as_str().to_owned(),
        Some(Value::String(title)) if title.chars().count() <= TITLE_CHARS_MAX => title.clone(),
        Some(Value::String(_)) => {
            return Err(format!(
                "{}: must be at most {TITLE_CHARS_MAX} characters",
                field_path(path, "title")
            ));
        }
        Some(other) => {
            return Err(format!(
                "{}: must be a string (got {})",
                field_path(path, "title"),
                type_name(other)
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
                    Value::String(text) => StepId::parse(text).map_err(|e| format!("{at}: {e}")),
                    other => Err(format!(
                        "{at}: must be a step id (got {})",
                        type_name(other)
                    )),
                }
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(format!(
                "{needs_path}: must be an array of step ids (got {})",
                type_name(other)
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
pub fn parse_pipeline(text: &str) -> Result<Pipeline, String> {
    if text.len() > PIPELINE_FILE_BYTES_MAX {
        return Err(format!(
            "the file is {} bytes, over the {PIPELINE_FILE_BYTES_MAX}-byte limit",
            text.len()
        ));
    }
    let value: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let Value::Object(root) = value else {
        return Err(format!(
            "must be an object {{name, version, steps}} (got {})",
            type_name(&value)
        ));
    };
    unknown_keys(&root, "", &["name", "version", "steps"])?;
    let name = string(&root, "", "name")?;
    if StepId::parse(name).is_err() {
        return Err(format!(
            "name: {:?} must be lowercase letters, digits, '-' and '_', starting with a letter",
            echo(name)
        ));
    }
    let version = match root.get("version") {
        Some(Value::Number(n)) => n
            .as_u64()
            .and_then(|v| u32::try_from(v).ok())
            .filter(|v| *v > 0)
            .ok_or("version: must be a whole number from 1")?,
        Some(other) => {
            return Err(format!(
                "version: must be a number (got {})",
                type_name(other)
            ));
        }
        None => return Err("version: required".into()),
    };
    let steps = match root.get("steps") {
        Some(Value::Array(items)) if items.len() <= STEPS_MAX => items
            .iter()
            .enumerate()
            .map(|(i, item)| step(item, &index_path("steps", i)))
            .collect::<Result<Vec<_>, _>>()?,
        Some(Value::Array(items)) => {
            return Err(format!("steps: at most {STEPS_MAX} (got {})", items.len()));
        }
        Some(other) => {
            return Err(format!(
                "steps: must be an array (got {})",
                type_name(other)
            ));
        }
        None => return Err("steps: required".into()),
    };
    Pipeline::new(name, version, steps).map_err(|e| e.to_string())
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
            let error = parse_pipeline(&text).expect_err(&text);
            assert!(
                error.starts_with(expected),
                "{text}\n got: {error}\nwant: {expected}"
            );
        }
    }
}
