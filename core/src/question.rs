//! The validated `ask_user` question spec: [`AskSpec`] and its parts.
//!
//! A spec reaches the core as the JSON the agent sent; [`AskSpec::from_json`]
//! (in `question/parse.rs`) checks every rule and names the JSON path of every
//! problem, so the agent can fix its call in one go. Once built, a spec is
//! trusted: the form renders it, answers are validated against it, and it is
//! archived inside `AskOpened` events. [`AskSpec::to_json`] gives back the
//! tool-input shape (without `sessionId`) for the ask record on disk.

mod parse;
#[cfg(test)]
mod tests;

use serde::de::Error as _;
use serde_json::{Map, Value};

use crate::json::number_to_json;

pub use parse::{FieldError, SpecError};

/// Longest form title, in characters.
pub const TITLE_CHARS_MAX: usize = 200;
/// Longest intro tab title, in characters.
pub const INTRO_TITLE_CHARS_MAX: usize = 60;
/// Largest intro Markdown, in bytes.
pub const INTRO_BYTES_MAX: usize = 65_536;
/// Most questions in one ask.
pub const QUESTIONS_MAX: usize = 20;
/// Longest question id, in characters.
pub const QUESTION_ID_CHARS_MAX: usize = 64;
/// Longest question label, in characters.
pub const LABEL_CHARS_MAX: usize = 500;
/// Longest tab name, in characters.
pub const TAB_CHARS_MAX: usize = 60;
/// Longest text placeholder, in characters.
pub const PLACEHOLDER_CHARS_MAX: usize = 200;
/// Most options of a single or multi question.
pub const OPTIONS_MAX: usize = 50;
/// Longest option value, in characters.
pub const OPTION_VALUE_CHARS_MAX: usize = 200;
/// Largest option illustration Markdown, in bytes.
pub const OPTION_MARKDOWN_BYTES_MAX: usize = 16_384;
/// Largest question spec, its JSON in bytes: with the rest of the event
/// that opens its ask, it fits one log record (4 MiB).
pub const SPEC_BYTES_MAX: usize = 2 * 1024 * 1024;
/// Most steps a scale may have: `(max - min) / step`.
pub const SCALE_STEPS_MAX: f64 = 1000.0;
/// Name of the tab that holds questions without a `tab`.
pub const DEFAULT_TAB: &str = "Questions";

/// What the form asks: a title, an optional intro tab and 1 to 20 questions.
#[derive(Clone, PartialEq, Debug, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct AskSpec {
    /// Heading at the top of the form (plain text).
    pub title: String,
    /// Title of the intro tab; the form shows "Overview" when absent.
    pub intro_title: Option<String>,
    /// GitHub-flavoured Markdown for the intro tab.
    pub intro: Option<String>,
    /// The questions, in the order the form shows them.
    pub questions: Vec<Question>,
}

/// One question of the form.
#[derive(Clone, PartialEq, Debug, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct Question {
    /// Unique within the spec; the key of this question's answer.
    pub id: String,
    /// The question text (plain text).
    pub label: String,
    /// Whether the form refuses to submit without an answer.
    pub required: bool,
    /// The tab this question lives in; [`DEFAULT_TAB`] when absent.
    pub tab: Option<String>,
    /// The control and its settings.
    pub kind: QuestionKind,
}

/// The kind of control a question uses, with its kind-specific settings.
#[derive(Clone, PartialEq, Debug, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub enum QuestionKind {
    /// A single-line text input; the answer is a string.
    Text {
        /// Hint shown in the empty input.
        placeholder: Option<String>,
    },
    /// A multi-line text area; the answer is a string.
    LongText {
        /// Hint shown in the empty text area.
        placeholder: Option<String>,
    },
    /// A radio group; the answer is one option's value.
    Single {
        /// The choices, 1 to 50, with unique values.
        options: Vec<Choice>,
    },
    /// A checkbox group; the answer is a list of distinct option values.
    Multi {
        /// The choices, 1 to 50, with unique values.
        options: Vec<Choice>,
    },
    /// A range slider; the answer is a number in `[min, max]` on the step grid.
    Scale {
        /// Lowest value (finite).
        min: f64,
        /// Highest value (finite, greater than `min`).
        max: f64,
        /// Distance between allowed values, counted from `min`; any value in
        /// range is allowed when absent.
        step: Option<f64>,
    },
}

/// One option of a single or multi question.
#[derive(Clone, PartialEq, Eq, Debug, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct Choice {
    /// What the answer holds when this option is chosen.
    pub value: String,
    /// Illustration shown in the tab's side panel while the option has focus.
    pub markdown: Option<String>,
}

impl QuestionKind {
    /// The `kind` strings of the tool input, in the order the docs list them.
    pub const NAMES: [&'static str; 5] = ["text", "longtext", "single", "multi", "scale"];

    /// This kind's `kind` string in the tool input.
    pub fn name(&self) -> &'static str {
        match self {
            QuestionKind::Text { .. } => "text",
            QuestionKind::LongText { .. } => "longtext",
            QuestionKind::Single { .. } => "single",
            QuestionKind::Multi { .. } => "multi",
            QuestionKind::Scale { .. } => "scale",
        }
    }

    /// The options of a single or multi question; empty for other kinds.
    pub fn options(&self) -> &[Choice] {
        match self {
            QuestionKind::Single { options } | QuestionKind::Multi { options } => options,
            _ => &[],
        }
    }
}

impl Question {
    /// The tab this question is shown in.
    pub fn tab_name(&self) -> &str {
        self.tab.as_deref().unwrap_or(DEFAULT_TAB)
    }

    /// The tool-input JSON of this question.
    pub fn to_json(&self) -> Value {
        let mut map = Map::new();
        map.insert("id".into(), self.id.clone().into());
        map.insert("kind".into(), self.kind.name().into());
        map.insert("label".into(), self.label.clone().into());
        if self.required {
            map.insert("required".into(), true.into());
        }
        insert_some(&mut map, "tab", &self.tab);
        match &self.kind {
            QuestionKind::Text { placeholder } | QuestionKind::LongText { placeholder } => {
                insert_some(&mut map, "placeholder", placeholder);
            }
            QuestionKind::Single { options } | QuestionKind::Multi { options } => {
                let options = options.iter().map(Choice::to_json).collect();
                map.insert("options".into(), Value::Array(options));
            }
            QuestionKind::Scale { min, max, step } => {
                map.insert("min".into(), number_to_json(*min));
                map.insert("max".into(), number_to_json(*max));
                if let Some(step) = step {
                    map.insert("step".into(), number_to_json(*step));
                }
            }
        }
        Value::Object(map)
    }
}

impl Choice {
    /// A plain string when there is no Markdown, else `{value, markdown}`.
    pub fn to_json(&self) -> Value {
        match &self.markdown {
            None => Value::String(self.value.clone()),
            Some(markdown) => {
                let mut map = Map::new();
                map.insert("value".into(), self.value.clone().into());
                map.insert("markdown".into(), markdown.clone().into());
                Value::Object(map)
            }
        }
    }
}

impl AskSpec {
    /// The tool-input JSON of this spec (without `sessionId`);
    /// `AskSpec::from_json(&spec.to_json())` gives back `spec`.
    pub fn to_json(&self) -> Value {
        let mut map = Map::new();
        map.insert("title".into(), self.title.clone().into());
        insert_some(&mut map, "introTitle", &self.intro_title);
        insert_some(&mut map, "intro", &self.intro);
        let questions = self.questions.iter().map(Question::to_json).collect();
        map.insert("questions".into(), Value::Array(questions));
        Value::Object(map)
    }

    /// Tab names of the questions in first-appearance order; untagged
    /// questions share [`DEFAULT_TAB`]. The intro tab is not included.
    pub fn tabs(&self) -> Vec<&str> {
        let mut tabs: Vec<&str> = Vec::new();
        for question in &self.questions {
            let tab = question.tab_name();
            if !tabs.contains(&tab) {
                tabs.push(tab);
            }
        }
        tabs
    }

    /// The question with this id.
    pub fn question(&self, id: &str) -> Option<&Question> {
        self.questions.iter().find(|q| q.id == id)
    }
}

fn insert_some(map: &mut Map<String, Value>, key: &str, value: &Option<String>) {
    if let Some(value) = value {
        map.insert(key.into(), value.clone().into());
    }
}

impl serde::Serialize for AskSpec {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(serializer)
    }
}

impl<'de> serde::Deserialize<'de> for AskSpec {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        AskSpec::from_json(&value).map_err(D::Error::custom)
    }
}

impl serde::Serialize for Question {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(serializer)
    }
}

impl<'de> serde::Deserialize<'de> for Question {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        parse::question_from_json(&value).map_err(D::Error::custom)
    }
}

impl serde::Serialize for Choice {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(serializer)
    }
}

impl<'de> serde::Deserialize<'de> for Choice {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        parse::choice_from_json(&value).map_err(D::Error::custom)
    }
}
