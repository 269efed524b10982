//! Answers to an ask: [`Answers`], and their validation against the spec
//! ([`AskSpec::validate_answers`] for a submission, [`AskSpec::validate_draft`]
//! for an autosaved draft).
//!
//! The browser is not trusted: the form enforces the same rules, but the
//! callback server validates every submission here, so invalid answers never
//! reach the agent or the log. Messages are per question so the form can show
//! each next to its field.

#[cfg(test)]
mod tests;

use std::fmt;

use serde::ser::SerializeMap as _;
use serde_json::{Map, Value};

use crate::json::{echo, number_to_json, type_name};
use crate::question::{AskSpec, Question, QuestionKind};

/// Longest answer to a `text` question, in characters.
pub const TEXT_ANSWER_CHARS_MAX: usize = 10_000;
/// Longest answer to a `longtext` question, in characters.
pub const LONGTEXT_ANSWER_CHARS_MAX: usize = 100_000;
/// Most bytes (UTF-8) of text in all the answers of one form together. Each
/// answer within its own limit can still add up to more than one log record
/// holds (4 MiB): twenty long answers in a script of three-byte characters
/// reach 6 MB. Half the record limit leaves room for the rest of the event.
pub const ANSWERS_BYTES_MAX: usize = 2 * 1024 * 1024;
/// How far off the step grid a scale answer may be, as a fraction of the
/// step: absorbs float noise such as `0.1 + 0.2`.
pub const SCALE_STEP_TOLERANCE: f64 = 1e-9;

/// The answer to one question.
#[derive(Clone, PartialEq, Debug, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub enum AnswerValue {
    /// Answer to a `text` or `longtext` question.
    Text(String),
    /// The chosen option value of a `single` question.
    Choice(String),
    /// The chosen option values of a `multi` question, in the order given.
    Choices(Vec<String>),
    /// The value of a `scale` question.
    Number(f64),
}

impl AnswerValue {
    /// Bytes of text the answer holds (a number counts as eight).
    pub fn text_bytes(&self) -> usize {
        match self {
            AnswerValue::Text(text) | AnswerValue::Choice(text) => text.len(),
            AnswerValue::Choices(values) => values.iter().map(String::len).sum(),
            AnswerValue::Number(_) => 8,
        }
    }
}

/// Answers keyed by question id, in spec order; unanswered optional
/// questions are absent.
#[derive(Clone, PartialEq, Debug, Default, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct Answers(pub Vec<(String, AnswerValue)>);

impl AnswerValue {
    /// A string, an array of strings, or a number (`4`, not `4.0`).
    pub fn to_json(&self) -> Value {
        match self {
            AnswerValue::Text(text) | AnswerValue::Choice(text) => Value::String(text.clone()),
            AnswerValue::Choices(values) => {
                Value::Array(values.iter().cloned().map(Value::String).collect())
            }
            AnswerValue::Number(number) => number_to_json(*number),
        }
    }
}

impl Answers {
    /// The answers JSON returned to the agent: `{ [questionId]: value }`.
    ///
    /// A `Value` object orders keys by serde_json's map (sorted unless its
    /// `preserve_order` feature is on); serialize `Answers` directly to keep
    /// spec order in text.
    pub fn to_json(&self) -> Value {
        let map: Map<String, Value> = self
            .0
            .iter()
            .map(|(id, value)| (id.clone(), value.to_json()))
            .collect();
        Value::Object(map)
    }

    /// The answer to the question with this id.
    pub fn get(&self, question_id: &str) -> Option<&AnswerValue> {
        self.0
            .iter()
            .find(|(id, _)| id == question_id)
            .map(|(_, value)| value)
    }

    /// The answers in spec order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &AnswerValue)> {
        self.0.iter().map(|(id, value)| (id.as_str(), value))
    }

    /// How many questions have an answer.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no question has an answer.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl serde::Serialize for AnswerValue {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(serializer)
    }
}

/// Serializes as the answers object with keys in spec order.
impl serde::Serialize for Answers {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (id, value) in &self.0 {
            map.serialize_entry(id, value)?;
        }
        map.end()
    }
}

/// Why a submission or draft was refused.
#[derive(Clone, PartialEq, Eq, Debug, Default, thiserror::Error)]
pub struct AnswerErrors {
    /// `(question id, message)`, in spec order, at most one per question.
    pub questions: Vec<(String, String)>,
    /// Problems not tied to a question of the spec (the payload is not an
    /// object, an id matches no question), each naming its path.
    pub general: Vec<String>,
}

impl fmt::Display for AnswerErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let per_question = self.questions.iter().map(|(id, m)| format!("{id}: {m}"));
        let all: Vec<String> = self.general.iter().cloned().chain(per_question).collect();
        f.write_str(&all.join("; "))
    }
}

/// Whether a missing or empty answer is an error.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Final,
    Draft,
}

impl AskSpec {
    /// Validates a final submission: a JSON object of question id → answer.
    /// Required questions must be answered (text non-blank, multi non-empty).
    pub fn validate_answers(&self, answers: &Value) -> Result<Answers, AnswerErrors> {
        validate(self, answers, Mode::Final)
    }

    /// Validates an autosaved draft: like [`validate_answers`](Self::validate_answers)
    /// but partial, so required questions may be missing and values empty.
    pub fn validate_draft(&self, answers: &Value) -> Result<Answers, AnswerErrors> {
        validate(self, answers, Mode::Draft)
    }
}

fn validate(spec: &AskSpec, answers: &Value, mode: Mode) -> Result<Answers, AnswerErrors> {
    let mut errors = AnswerErrors::default();
    let Value::Object(map) = answers else {
        let got = type_name(answers);
        errors
            .general
            .push(format!("answers: must be a JSON object (got {got})"));
        return Err(errors);
    };
    for key in map.keys() {
        if spec.question(key).is_none() {
            let key = echo(key);
            errors
                .general
                .push(format!("answers: unknown question id {key:?}"));
        }
    }
    let mut valid = Vec::new();
    for question in &spec.questions {
        let value = map.get(&question.id).filter(|v| !v.is_null());
        match check_answer(question, value, mode) {
            Ok(Some(answer)) => valid.push((question.id.clone(), answer)),
            Ok(None) => {}
            Err(problem) => (errors.questions).push((question.id.clone(), problem.to_string())),
        }
    }
    let bytes: usize = valid.iter().map(|(_, answer)| answer.text_bytes()).sum();
    if bytes > ANSWERS_BYTES_MAX {
        errors.general.push(format!(
            "answers: {bytes} bytes in all is over the limit of {ANSWERS_BYTES_MAX} bytes (2 MiB) for one form; shorten the longest answers"
        ));
    }
    if errors.questions.is_empty() && errors.general.is_empty() {
        Ok(Answers(valid))
    } else {
        Err(errors)
    }
}

/// What is wrong with one answer, said after its question's id.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AnswerProblem {
    /// A required question has no answer (or a blank one).
    #[error("an answer is required")]
    Required,
    /// Not a string where one is needed.
    #[error("must be a string (got {0})")]
    NotString(&'static str),
    /// A text over its limit.
    #[error("must be at most {max} characters (got {got})")]
    TooLong {
        /// The limit.
        max: usize,
        /// The answer's length.
        got: usize,
    },
    /// A choice that is none of the options (echoed, cut).
    #[error("{0:?} is not one of the options")]
    NotAnOption(String),
    /// Not an array where the choices are needed.
    #[error("must be an array of strings (got {0})")]
    NotArray(&'static str),
    /// One of the choices is not a string.
    #[error("item {index} must be a string (got {got})")]
    ItemNotString {
        /// Its place in the array.
        index: usize,
        /// What it is.
        got: &'static str,
    },
    /// A choice given twice (echoed, cut).
    #[error("{0:?} is chosen more than once")]
    ChosenTwice(String),
    /// Not a number where one is needed.
    #[error("must be a number (got {0})")]
    NotNumber(&'static str),
    /// A number off the scale.
    #[error("must be between {min} and {max} (got {got})")]
    OffScale {
        /// The scale's least value.
        min: f64,
        /// Its greatest.
        max: f64,
        /// The answer.
        got: f64,
    },
    /// A number between the scale's steps.
    #[error("must be {min} plus a multiple of {step} (got {got})")]
    OffStep {
        /// The scale's least value.
        min: f64,
        /// Its step.
        step: f64,
        /// The answer.
        got: f64,
    },
}

/// The checked answer, `None` when there is none (allowed), or what is
/// wrong with it.
fn check_answer(
    question: &Question,
    value: Option<&Value>,
    mode: Mode,
) -> Result<Option<AnswerValue>, AnswerProblem> {
    let enforce_required = mode == Mode::Final && question.required;
    let Some(value) = value else {
        return if enforce_required {
            Err(AnswerProblem::Required)
        } else {
            Ok(None)
        };
    };
    let answer = match &question.kind {
        QuestionKind::Text { .. } => check_text(value, TEXT_ANSWER_CHARS_MAX)?,
        QuestionKind::LongText { .. } => check_text(value, LONGTEXT_ANSWER_CHARS_MAX)?,
        QuestionKind::Single { .. } => {
            let text = expect_string(value)?;
            if text.is_empty() && mode == Mode::Draft {
                // An empty choice in a draft means nothing is selected yet.
                return Ok(None);
            }
            check_known(question, text)?;
            AnswerValue::Choice(text.to_owned())
        }
        QuestionKind::Multi { .. } => check_multi(question, value)?,
        QuestionKind::Scale { min, max, step } => check_scale(value, *min, *max, *step)?,
    };
    let empty = match &answer {
        AnswerValue::Text(text) => text.trim().is_empty(),
        AnswerValue::Choice(_) | AnswerValue::Number(_) => false,
        AnswerValue::Choices(values) => values.is_empty(),
    };
    if empty && enforce_required {
        return Err(AnswerProblem::Required);
    }
    Ok(Some(answer))
}

fn expect_string(value: &Value) -> Result<&str, AnswerProblem> {
    (value.as_str()).ok_or_else(|| AnswerProblem::NotString(type_name(value)))
}

fn check_text(value: &Value, chars_max: usize) -> Result<AnswerValue, AnswerProblem> {
    let text = expect_string(value)?;
    let chars = text.chars().count();
    if chars > chars_max {
        return Err(AnswerProblem::TooLong {
            max: chars_max,
            got: chars,
        });
    }
    Ok(AnswerValue::Text(text.to_owned()))
}

fn check_known(question: &Question, text: &str) -> Result<(), AnswerProblem> {
    if question.kind.options().iter().any(|c| c.value == text) {
        Ok(())
    } else {
        Err(AnswerProblem::NotAnOption(echo(text)))
    }
}

fn check_multi(question: &Question, value: &Value) -> Result<AnswerValue, AnswerProblem> {
    let Value::Array(items) = value else {
        return Err(AnswerProblem::NotArray(type_name(value)));
    };
    let mut chosen: Vec<String> = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let Some(text) = item.as_str() else {
            let got = type_name(item);
            return Err(AnswerProblem::ItemNotString { index, got });
        };
        check_known(question, text)?;
        if chosen.iter().any(|c| c == text) {
            return Err(AnswerProblem::ChosenTwice(echo(text)));
        }
        chosen.push(text.to_owned());
    }
    Ok(AnswerValue::Choices(chosen))
}

fn check_scale(
    value: &Value,
    min: f64,
    max: f64,
    step: Option<f64>,
) -> Result<AnswerValue, AnswerProblem> {
    let Some(got) = value.as_f64() else {
        return Err(AnswerProblem::NotNumber(type_name(value)));
    };
    if !(min..=max).contains(&got) {
        return Err(AnswerProblem::OffScale { min, max, got });
    }
    if let Some(step) = step {
        let nearest = min + ((got - min) / step).round() * step;
        if (got - nearest).abs() > SCALE_STEP_TOLERANCE * step {
            return Err(AnswerProblem::OffStep { min, step, got });
        }
    }
    Ok(AnswerValue::Number(got))
}
