//! [`AskSpec::from_json`]: validation of the tool input by hand, over a
//! `serde_json::Value`.
//!
//! A serde derive would stop at the first problem and describe it in serde's
//! words; the agent that wrote the spec is better served by every problem at
//! once, each with its JSON path (`questions[2].options[1].value: duplicate
//! option value "Go"`). Validation runs to the end with placeholder values and
//! the spec is only built when nothing was reported.

use std::collections::HashMap;
use std::fmt;

use serde_json::{Map, Value};

use super::*;
use crate::json::{field_path, index_path, type_name};

/// One problem in a spec: where it is and what is wrong.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct FieldError {
    /// JSON path of the offending value, such as `questions[2].options[1].value`;
    /// `input` for the spec itself.
    pub path: String,
    /// What is wrong, lowercase, without a trailing period.
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Every problem found in a spec, in document order.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
pub struct SpecError {
    /// The problems; never empty.
    pub errors: Vec<FieldError>,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

/// Keys whose meaning depends on the question kind.
const KIND_KEYS: [&str; 5] = ["placeholder", "options", "min", "max", "step"];

#[derive(Default)]
struct Errors(Vec<FieldError>);

impl Errors {
    fn push(&mut self, path: &str, message: impl Into<String>) {
        let path = if path.is_empty() { "input" } else { path };
        self.0.push(FieldError {
            path: path.to_owned(),
            message: message.into(),
        });
    }

    fn into_result<T>(self, value: T) -> Result<T, SpecError> {
        if self.0.is_empty() {
            Ok(value)
        } else {
            Err(SpecError { errors: self.0 })
        }
    }
}

/// A JSON object being read: remembers which keys were looked at, so the
/// rest can be reported as unknown fields.
struct Object<'a> {
    path: String,
    map: &'a Map<String, Value>,
    used: Vec<&'static str>,
}

impl<'a> Object<'a> {
    fn open(value: &'a Value, path: String, errors: &mut Errors) -> Option<Self> {
        match value {
            Value::Object(map) => Some(Self {
                path,
                map,
                used: Vec::new(),
            }),
            other => {
                let got = type_name(other);
                errors.push(&path, format!("must be a JSON object (got {got})"));
                None
            }
        }
    }

    fn path(&self, key: &str) -> String {
        field_path(&self.path, key)
    }

    /// The value under `key`; `null` counts as absent, as agents often send it
    /// for optional fields.
    fn get(&mut self, key: &'static str) -> Option<&'a Value> {
        self.used.push(key);
        self.map.get(key).filter(|value| !value.is_null())
    }

    fn required(&mut self, key: &'static str, errors: &mut Errors) -> Option<&'a Value> {
        let value = self.get(key);
        if value.is_none() {
            errors.push(&self.path(key), "missing required field");
        }
        value
    }

    fn string(&self, key: &str, value: Option<&'a Value>, errors: &mut Errors) -> Option<&'a str> {
        match value? {
            Value::String(text) => Some(text),
            other => {
                let got = type_name(other);
                errors.push(&self.path(key), format!("must be a string (got {got})"));
                None
            }
        }
    }

    fn required_string(&mut self, key: &'static str, errors: &mut Errors) -> Option<&'a str> {
        let value = self.required(key, errors);
        self.string(key, value, errors)
    }

    fn optional_string(&mut self, key: &'static str, errors: &mut Errors) -> Option<&'a str> {
        let value = self.get(key);
        self.string(key, value, errors)
    }

    fn number(&self, key: &str, value: Option<&'a Value>, errors: &mut Errors) -> Option<f64> {
        match value? {
            Value::Number(number) => match number.as_f64().filter(|n| n.is_finite()) {
                Some(number) => Some(number),
                None => {
                    errors.push(&self.path(key), "must be a finite number");
                    None
                }
            },
            other => {
                let got = type_name(other);
                errors.push(&self.path(key), format!("must be a number (got {got})"));
                None
            }
        }
    }

    fn finish(self, errors: &mut Errors) {
        for key in self.map.keys() {
            if !self.used.contains(&key.as_str()) {
                errors.push(&self.path(key), "unknown field");
            }
        }
    }
}

fn not_blank(errors: &mut Errors, path: &str, text: &str) -> bool {
    let ok = !text.trim().is_empty();
    if !ok {
        errors.push(path, "must not be empty");
    }
    ok
}

fn chars_at_most(errors: &mut Errors, path: &str, text: &str, max: usize) -> bool {
    let actual = text.chars().count();
    let ok = actual <= max;
    if !ok {
        errors.push(
            path,
            format!("must be at most {max} characters (got {actual})"),
        );
    }
    ok
}

fn bytes_at_most(errors: &mut Errors, path: &str, text: &str, max: usize) -> bool {
    let actual = text.len();
    let ok = actual <= max;
    if !ok {
        errors.push(path, format!("must be at most {max} bytes (got {actual})"));
    }
    ok
}

fn kind_list() -> String {
    let quoted: Vec<String> = QuestionKind::NAMES
        .iter()
        .map(|k| format!("{k:?}"))
        .collect();
    quoted.join(", ")
}

impl AskSpec {
    /// Validates the `ask_user` tool input (without `sessionId`, which the
    /// tool layer removes) and builds the spec, or reports every problem with
    /// its JSON path.
    pub fn from_json(value: &Value) -> Result<AskSpec, SpecError> {
        let mut errors = Errors::default();
        // The whole first: a spec over it is refused before its parts are
        // read, whatever they are.
        let bytes = json_bytes(value);
        if bytes > SPEC_BYTES_MAX {
            errors.push(
                "questions",
                format!(
                    "the question spec is {bytes} bytes, over the limit of {SPEC_BYTES_MAX} bytes"
                ),
            );
            return Err(SpecError { errors: errors.0 });
        }
        let spec = parse_spec(value, &mut errors);
        errors.into_result(spec)
    }
}

/// The length of `value` written as compact JSON, counted, not kept.
fn json_bytes(value: &Value) -> usize {
    struct Counted(usize);
    impl std::io::Write for Counted {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counted = Counted(0);
    // Writing a `Value` to a writer that never fails cannot fail.
    let _ = serde_json::to_writer(&mut counted, value);
    counted.0
}

pub(super) fn question_from_json(value: &Value) -> Result<Question, SpecError> {
    let mut errors = Errors::default();
    let question = parse_question(value, String::new(), &mut errors);
    errors.into_result(question)
}

pub(super) fn choice_from_json(value: &Value) -> Result<Choice, SpecError> {
    let mut errors = Errors::default();
    let choice = parse_choice(value, String::new(), &mut errors);
    errors.into_result(choice)
}

fn parse_spec(value: &Value, errors: &mut Errors) -> AskSpec {
    let mut spec = AskSpec {
        title: String::new(),
        intro_title: None,
        intro: None,
        questions: Vec::new(),
    };
    let Some(mut obj) = Object::open(value, String::new(), errors) else {
        return spec;
    };
    if let Some(title) = obj.required_string("title", errors) {
        let path = obj.path("title");
        if not_blank(errors, &path, title) {
            chars_at_most(errors, &path, title, TITLE_CHARS_MAX);
        }
        spec.title = title.to_owned();
    }
    if let Some(intro_title) = obj.optional_string("introTitle", errors) {
        let path = obj.path("introTitle");
        if not_blank(errors, &path, intro_title) {
            chars_at_most(errors, &path, intro_title, INTRO_TITLE_CHARS_MAX);
        }
        spec.intro_title = Some(intro_title.to_owned());
    }
    if let Some(intro) = obj.optional_string("intro", errors) {
        bytes_at_most(errors, &obj.path("intro"), intro, INTRO_BYTES_MAX);
        spec.intro = Some(intro.to_owned());
    }
    let path = obj.path("questions");
    match obj.required("questions", errors) {
        Some(Value::Array(items)) => spec.questions = parse_questions(items, &path, errors),
        Some(other) => {
            let got = type_name(other);
            errors.push(&path, format!("must be an array (got {got})"));
        }
        None => {}
    }
    obj.finish(errors);
    spec
}

fn parse_questions(items: &[Value], path: &str, errors: &mut Errors) -> Vec<Question> {
    if items.is_empty() || items.len() > QUESTIONS_MAX {
        let got = items.len();
        errors.push(
            path,
            format!("must have between 1 and {QUESTIONS_MAX} questions (got {got})"),
        );
    }
    let mut first_use: HashMap<String, usize> = HashMap::new();
    let mut questions = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let item_path = index_path(path, index);
        let errors_before = errors.0.len();
        let question = parse_question(item, item_path.clone(), errors);
        let id_reported = errors.0[errors_before..]
            .iter()
            .any(|e| e.path == field_path(&item_path, "id"));
        if item.is_object() && !id_reported {
            if let Some(&first) = first_use.get(&question.id) {
                errors.push(
                    &field_path(&item_path, "id"),
                    format!(
                        "duplicate question id {:?} (also used by {})",
                        question.id,
                        index_path(path, first)
                    ),
                );
            } else {
                first_use.insert(question.id.clone(), index);
            }
        }
        questions.push(question);
    }
    questions
}

fn parse_question(value: &Value, path: String, errors: &mut Errors) -> Question {
    let mut question = Question {
        id: String::new(),
        label: String::new(),
        required: false,
        tab: None,
        kind: QuestionKind::Text { placeholder: None },
    };
    let Some(mut obj) = Object::open(value, path, errors) else {
        return question;
    };
    if let Some(id) = obj.required_string("id", errors) {
        check_question_id(errors, &obj.path("id"), id);
        question.id = id.to_owned();
    }
    if let Some(label) = obj.required_string("label", errors) {
        let path = obj.path("label");
        if not_blank(errors, &path, label) {
            chars_at_most(errors, &path, label, LABEL_CHARS_MAX);
        }
        question.label = label.to_owned();
    }
    match obj.get("required") {
        None => {}
        Some(Value::Bool(required)) => question.required = *required,
        Some(other) => {
            let got = type_name(other);
            errors.push(
                &obj.path("required"),
                format!("must be a boolean (got {got})"),
            );
        }
    }
    if let Some(tab) = obj.optional_string("tab", errors) {
        let path = obj.path("tab");
        if not_blank(errors, &path, tab) {
            chars_at_most(errors, &path, tab, TAB_CHARS_MAX);
        }
        question.tab = Some(tab.to_owned());
    }
    if let Some(kind) = parse_kind(&mut obj, errors) {
        question.kind = kind;
    }
    obj.finish(errors);
    question
}

fn check_question_id(errors: &mut Errors, path: &str, id: &str) {
    if id.is_empty() {
        errors.push(path, "must not be empty");
    } else if let Some(found) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
    {
        errors.push(
            path,
            format!("must contain only letters, digits, '_', '.' and '-' (found {found:?})"),
        );
    } else {
        chars_at_most(errors, path, id, QUESTION_ID_CHARS_MAX);
    }
}

/// Reads `kind` and the fields that belong to it, and reports fields that
/// belong to another kind. With a missing or unknown kind only the kind is
/// reported: guessing which other fields are wrong would be noise.
fn parse_kind(obj: &mut Object<'_>, errors: &mut Errors) -> Option<QuestionKind> {
    let kind_path = obj.path("kind");
    let name = match obj.get("kind") {
        None => {
            let kinds = kind_list();
            errors.push(
                &kind_path,
                format!("missing required field (one of {kinds})"),
            );
            None
        }
        value => obj.string("kind", value, errors),
    };
    let kind = match name {
        Some("text") => Some(QuestionKind::Text {
            placeholder: parse_placeholder(obj, errors),
        }),
        Some("longtext") => Some(QuestionKind::LongText {
            placeholder: parse_placeholder(obj, errors),
        }),
        Some("single") => Some(QuestionKind::Single {
            options: parse_options(obj, errors),
        }),
        Some("multi") => Some(QuestionKind::Multi {
            options: parse_options(obj, errors),
        }),
        Some("scale") => Some(parse_scale(obj, errors)),
        Some(other) => {
            let kinds = kind_list();
            errors.push(
                &kind_path,
                format!("unknown kind {other:?} (expected one of {kinds})"),
            );
            None
        }
        None => None,
    };
    for key in KIND_KEYS {
        if obj.used.contains(&key) {
            continue;
        }
        // Reading the key marks it as seen, so it is not also reported as
        // an unknown field.
        let present = obj.get(key).is_some();
        if let (true, Some(kind)) = (present, &kind) {
            let name = kind.name();
            errors.push(&obj.path(key), format!("not allowed for kind {name:?}"));
        }
    }
    kind
}

fn parse_placeholder(obj: &mut Object<'_>, errors: &mut Errors) -> Option<String> {
    let placeholder = obj.optional_string("placeholder", errors)?;
    chars_at_most(
        errors,
        &obj.path("placeholder"),
        placeholder,
        PLACEHOLDER_CHARS_MAX,
    );
    Some(placeholder.to_owned())
}

fn parse_options(obj: &mut Object<'_>, errors: &mut Errors) -> Vec<Choice> {
    let path = obj.path("options");
    let items = match obj.required("options", errors) {
        Some(Value::Array(items)) => items,
        Some(other) => {
            let got = type_name(other);
            errors.push(&path, format!("must be an array (got {got})"));
            return Vec::new();
        }
        None => return Vec::new(),
    };
    if items.is_empty() || items.len() > OPTIONS_MAX {
        let got = items.len();
        errors.push(
            &path,
            format!("must have between 1 and {OPTIONS_MAX} options (got {got})"),
        );
    }
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut choices = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let item_path = index_path(&path, index);
        let choice = parse_choice(item, item_path.clone(), errors);
        if !choice.value.is_empty() && seen.insert(choice.value.clone(), index).is_some() {
            errors.push(
                &field_path(&item_path, "value"),
                format!("duplicate option value {:?}", choice.value),
            );
        }
        choices.push(choice);
    }
    choices
}

fn parse_choice(value: &Value, path: String, errors: &mut Errors) -> Choice {
    let value_path = field_path(&path, "value");
    let (value, markdown) = match value {
        Value::String(text) => (Some(text.as_str()), None),
        Value::Object(_) => {
            let Some(mut obj) = Object::open(value, path, errors) else {
                return empty_choice();
            };
            let text = obj.required_string("value", errors);
            let markdown = obj.optional_string("markdown", errors);
            if let Some(markdown) = markdown {
                let path = obj.path("markdown");
                bytes_at_most(errors, &path, markdown, OPTION_MARKDOWN_BYTES_MAX);
            }
            obj.finish(errors);
            (text, markdown)
        }
        other => {
            let got = type_name(other);
            errors.push(
                &path,
                format!(
                    "must be a string or an object with \"value\" and optional \"markdown\" (got {got})"
                ),
            );
            return empty_choice();
        }
    };
    let Some(value) = value else {
        return empty_choice();
    };
    if not_blank(errors, &value_path, value) {
        chars_at_most(errors, &value_path, value, OPTION_VALUE_CHARS_MAX);
    }
    Choice {
        value: value.to_owned(),
        markdown: markdown.map(str::to_owned),
    }
}

fn empty_choice() -> Choice {
    Choice {
        value: String::new(),
        markdown: None,
    }
}

fn parse_scale(obj: &mut Object<'_>, errors: &mut Errors) -> QuestionKind {
    let min = obj.required("min", errors);
    let min = obj.number("min", min, errors);
    let max = obj.required("max", errors);
    let max = obj.number("max", max, errors);
    let step = obj.get("step");
    let step = obj.number("step", step, errors);
    let ordered = match (min, max) {
        (Some(min), Some(max)) if max <= min => {
            errors.push(
                &obj.path("max"),
                format!("must be greater than min ({min})"),
            );
            false
        }
        (Some(_), Some(_)) => true,
        _ => false,
    };
    if let Some(step) = step {
        if step <= 0.0 {
            errors.push(
                &obj.path("step"),
                format!("must be greater than 0 (got {step})"),
            );
        } else if let (true, Some(min), Some(max)) = (ordered, min, max) {
            let steps = (max - min) / step;
            if steps > SCALE_STEPS_MAX {
                errors.push(
                    &obj.path("step"),
                    format!("too small: (max - min) / step is {steps}, at most {SCALE_STEPS_MAX}"),
                );
            }
        }
    }
    QuestionKind::Scale {
        min: min.unwrap_or(0.0),
        max: max.unwrap_or(0.0),
        step,
    }
}
