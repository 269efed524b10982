//! Tool arguments: parsed by hand from the raw JSON object so every problem
//! becomes a tool error naming the field (`sessionId: not a uuid: "x"`), never
//! a JSON-RPC protocol error. The schemas clients are shown are `schema`'s.

use planb_core::SessionId;
use rmcp::model::JsonObject;
use serde_json::Value;

/// Most unknown fields named one by one in an error.
const UNKNOWN_SHOWN: usize = 10;

/// Problems with a tool's arguments, one message per field.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ArgErrors(pub Vec<String>);

impl ArgErrors {
    /// One problem: the field (its path) and what is wrong with it.
    pub fn one(message: impl Into<String>) -> ArgErrors {
        ArgErrors(vec![message.into()])
    }
}

impl std::error::Error for ArgErrors {}

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
        let unknown: Vec<&String> = (self.object.keys())
            .filter(|key| !self.known.contains(&key.as_str()))
            .collect();
        for key in unknown.iter().take(UNKNOWN_SHOWN) {
            let key = planb_core::text::clip(key, 100);
            self.errors.0.push(if self.known.is_empty() {
                format!("{key}: unknown field (this tool takes no arguments)")
            } else {
                format!(
                    "{key}: unknown field (expected one of: {})",
                    self.known.join(", ")
                )
            });
        }
        if unknown.len() > UNKNOWN_SHOWN {
            let more = unknown.len() - UNKNOWN_SHOWN;
            self.errors
                .0
                .push(format!("and {more} more unknown fields"));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_fields_are_named_ten_at_most_and_cut_short() {
        let mut object = JsonObject::new();
        for n in 0..12 {
            object.insert(format!("extra{n:02}"), Value::Null);
        }
        object.insert("a".repeat(500), Value::Null);
        let mut args = Args::new(&object);
        args.optional_bool("known");
        let errors = args.finish().expect_err("unknown fields").0;
        assert_eq!(errors.len(), 11, "{errors:?}");
        assert_eq!(errors[10], "and 3 more unknown fields");
        assert!(errors.iter().all(|e| e.len() < 200), "{errors:?}");
    }
}
