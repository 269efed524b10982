//! Identifiers: the UUID newtypes that name sessions, asks, events, tasks and
//! runs, and the validated [`PlanName`].
//!
//! Every id is minted by the caller (the core has no randomness) and stored as
//! raw bytes so rkyv can archive it without an adapter. The text form is the
//! lowercase hyphenated UUID, both for `Display` and for serde, because that is
//! what agents see and pass back.

use std::fmt;

use serde::de::Error as _;
use uuid::Uuid;

use crate::json::echo;

/// Why an identifier could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdError {
    /// The text is not a hyphenated UUID such as `0190f5a2-7c1e-7d3b-9a4f-1c2d3e4f5a6b`.
    #[error("not a uuid: {input:?}")]
    NotUuid {
        /// The rejected text, shortened to at most 64 characters.
        input: String,
    },
    /// A plan name was empty.
    #[error("planName: must not be empty")]
    PlanNameEmpty,
    /// A plan name was longer than [`PlanName::CHARS_MAX`].
    #[error("planName: must be at most {max} characters (got {actual})", max = PlanName::CHARS_MAX)]
    PlanNameTooLong {
        /// Length of the rejected name, in characters.
        actual: usize,
    },
    /// A plan name held a character other than ASCII letters, digits, `-` and `_`.
    #[error("planName: must contain only letters, digits, '-' and '_' (found {found:?})")]
    PlanNameInvalidChar {
        /// The first offending character.
        found: char,
    },
    /// A new plan name began or ended with `-` or `_`.
    #[error("planName: must begin and end with a letter or digit (got {name:?})")]
    PlanNameEdge {
        /// The rejected name.
        name: String,
    },
}

/// Parses hyphenated UUID text only: the 36-character form is the one every
/// tool prints, and refusing the braced, URN and simple forms keeps one
/// spelling per id in logs and file names.
fn parse_uuid(text: &str) -> Result<Uuid, IdError> {
    let not_uuid = || IdError::NotUuid { input: echo(text) };
    if text.len() != 36 {
        return Err(not_uuid());
    }
    Uuid::try_parse(text).map_err(|_| not_uuid())
}

/// The methods and trait impls every UUID id shares. The structs themselves
/// are written out below: generated inside a `macro_rules!`, rkyv's resolver
/// types would trip the `missing_debug_implementations` lint.
macro_rules! uuid_newtype_impls {
    ($name:ident) => {
        impl $name {
            /// Wraps a UUID minted by the caller.
            pub fn from_uuid(uuid: Uuid) -> Self {
                Self(uuid.into_bytes())
            }

            /// The UUID this id wraps.
            pub fn as_uuid(&self) -> Uuid {
                Uuid::from_bytes(self.0)
            }

            /// Parses hyphenated UUID text (either case).
            pub fn parse(text: &str) -> Result<Self, IdError> {
                parse_uuid(text).map(Self::from_uuid)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.as_uuid().hyphenated(), f)
            }
        }

        impl std::str::FromStr for $name {
            type Err = IdError;

            fn from_str(text: &str) -> Result<Self, IdError> {
                Self::parse(text)
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_str(self)
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
                Self::parse(&text).map_err(D::Error::custom)
            }
        }
    };
}

/// Names a planning session (minted by `init_planb_session`).
#[derive(
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Debug,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
#[rkyv(derive(PartialEq, Eq, PartialOrd, Ord))]
pub struct SessionId([u8; 16]);
uuid_newtype_impls!(SessionId);

/// Names one `ask_user` round.
#[derive(
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Debug,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
#[rkyv(derive(PartialEq, Eq, PartialOrd, Ord))]
pub struct AskId([u8; 16]);
uuid_newtype_impls!(AskId);

/// Names one event in the log (a UUID v7 minted when the event is appended).
#[derive(
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Debug,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
pub struct EventId([u8; 16]);
uuid_newtype_impls!(EventId);

/// Names a task of the DAG engine.
#[derive(
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Debug,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
#[rkyv(derive(PartialEq, Eq, PartialOrd, Ord))]
pub struct TaskId([u8; 16]);
uuid_newtype_impls!(TaskId);

/// Names one run of a task.
#[derive(
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Debug,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
#[rkyv(derive(PartialEq, Eq, PartialOrd, Ord))]
pub struct RunId([u8; 16]);
uuid_newtype_impls!(RunId);

/// The name of a named plan: 1 to 100 ASCII letters, digits, `-` and `_`.
///
/// The restriction exists because the name becomes part of a file name
/// (`<plans-dir>/<planName>-plan.md`), so it must not carry path separators,
/// dots or anything a file system treats specially.
#[derive(
    Clone,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Debug,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
#[rkyv(derive(PartialEq, Eq, PartialOrd, Ord))]
pub struct PlanName(String);

impl PlanName {
    /// Longest accepted name, in characters.
    pub const CHARS_MAX: usize = 100;

    /// Validates and wraps a new plan name: ASCII letters, digits, `-` and
    /// `_`, beginning and ending with a letter or digit.
    pub fn parse(text: &str) -> Result<Self, IdError> {
        let name = Self::parse_recorded(text)?;
        let edge = |c: Option<char>| c.is_some_and(|c| c == '-' || c == '_');
        if edge(text.chars().next()) || edge(text.chars().last()) {
            return Err(IdError::PlanNameEdge {
                name: text.to_owned(),
            });
        }
        Ok(name)
    }

    /// Validates a name read back from the log: the rule that keeps it a
    /// safe file name, without the edge rule [`PlanName::parse`] added
    /// later, so plans recorded before it stay readable.
    pub fn parse_recorded(text: &str) -> Result<Self, IdError> {
        if text.is_empty() {
            return Err(IdError::PlanNameEmpty);
        }
        if let Some(found) = text
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
        {
            return Err(IdError::PlanNameInvalidChar { found });
        }
        // Only ASCII is left, so bytes and characters agree.
        if text.len() > Self::CHARS_MAX {
            return Err(IdError::PlanNameTooLong { actual: text.len() });
        }
        Ok(Self(text.to_owned()))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PlanName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for PlanName {
    type Err = IdError;

    fn from_str(text: &str) -> Result<Self, IdError> {
        Self::parse(text)
    }
}

impl serde::Serialize for PlanName {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for PlanName {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Stored names: the file-name rule only (see `parse_recorded`).
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Self::parse_recorded(&text).map_err(D::Error::custom)
    }
}

/// What names a named plan: the absolute directory of its file and its name,
/// so two projects may each have an `auth-refactor`. The directory is empty
/// for plans recorded before event schema 2, when names were global.
#[derive(
    Clone,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Debug,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
#[rkyv(derive(PartialEq, Eq, PartialOrd, Ord))]
pub struct PlanKey {
    /// The plans directory (`--plans-dir`, absolute).
    pub dir: String,
    /// The plan's name.
    pub name: PlanName,
}

impl PlanKey {
    /// The plan `name` in the directory `dir`.
    pub fn new(dir: impl Into<String>, name: PlanName) -> PlanKey {
        PlanKey {
            dir: dir.into(),
            name,
        }
    }
}

impl std::fmt::Display for PlanKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_id(text: &str, expected: Result<&str, &str>) {
        let actual = SessionId::parse(text)
            .map(|id| id.to_string())
            .map_err(|e| e.to_string());
        let expected = expected.map(str::to_owned).map_err(str::to_owned);
        assert_eq!(actual, expected, "input {text:?}");
    }

    #[test]
    fn id_accepts_hyphenated_text_and_prints_lowercase() {
        check_id(
            "0190F5A2-7C1E-7D3B-9A4F-1C2D3E4F5A6B",
            Ok("0190f5a2-7c1e-7d3b-9a4f-1c2d3e4f5a6b"),
        );
    }

    #[test]
    fn id_rejects_other_spellings() {
        check_id("abc", Err(r#"not a uuid: "abc""#));
        check_id(
            "0190f5a27c1e7d3b9a4f1c2d3e4f5a6b",
            Err(r#"not a uuid: "0190f5a27c1e7d3b9a4f1c2d3e4f5a6b""#),
        );
        check_id(
            "{0190f5a2-7c1e-7d3b-9a4f-1c2d3e4f5a6b}",
            Err(r#"not a uuid: "{0190f5a2-7c1e-7d3b-9a4f-1c2d3e4f5a6b}""#),
        );
        check_id(
            "0190f5a2-7c1e-7d3b-9a4f-1c2d3e4f5a6g",
            Err(r#"not a uuid: "0190f5a2-7c1e-7d3b-9a4f-1c2d3e4f5a6g""#),
        );
    }

    #[test]
    fn id_error_shortens_long_input() {
        let long = "x".repeat(500);
        let message = SessionId::parse(&long).unwrap_err().to_string();
        assert_eq!(message, format!("not a uuid: \"{}…\"", "x".repeat(64)));
    }

    #[test]
    fn id_serde_uses_the_text_form() {
        let id = AskId::parse("0190f5a2-7c1e-7d3b-9a4f-1c2d3e4f5a6b").unwrap();
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(json, r#""0190f5a2-7c1e-7d3b-9a4f-1c2d3e4f5a6b""#);
        assert_eq!(serde_json::from_str::<AskId>(&json).unwrap(), id);
        let bad = serde_json::from_str::<AskId>(r#""nope""#).unwrap_err();
        assert_eq!(bad.to_string(), r#"not a uuid: "nope""#);
    }

    fn check_plan_name(text: &str, expected: Result<(), &str>) {
        let actual = PlanName::parse(text)
            .map(|name| assert_eq!(name.as_str(), text))
            .map_err(|e| e.to_string());
        assert_eq!(actual, expected.map_err(str::to_owned), "input {text:?}");
    }

    #[test]
    fn plan_name_rules() {
        check_plan_name("auth-refactor_2", Ok(()));
        check_plan_name("a", Ok(()));
        for edge in ["-auth", "auth-", "_auth", "auth_", "-", "_"] {
            check_plan_name(
                edge,
                Err(&format!(
                    "planName: must begin and end with a letter or digit (got {edge:?})"
                )),
            );
            assert!(PlanName::parse_recorded(edge).is_ok(), "{edge}");
        }
        check_plan_name(&"a".repeat(100), Ok(()));
        check_plan_name("", Err("planName: must not be empty"));
        check_plan_name(
            &"a".repeat(101),
            Err("planName: must be at most 100 characters (got 101)"),
        );
        check_plan_name(
            "../etc",
            Err("planName: must contain only letters, digits, '-' and '_' (found '.')"),
        );
        check_plan_name(
            "plan name",
            Err("planName: must contain only letters, digits, '-' and '_' (found ' ')"),
        );
        check_plan_name(
            "plän",
            Err("planName: must contain only letters, digits, '-' and '_' (found 'ä')"),
        );
    }

    #[test]
    fn plan_name_serde_validates() {
        let err = serde_json::from_str::<PlanName>(r#""a/b""#).unwrap_err();
        assert_eq!(
            err.to_string(),
            "planName: must contain only letters, digits, '-' and '_' (found '/')"
        );
        let name: PlanName = serde_json::from_str(r#""ok""#).unwrap();
        assert_eq!(serde_json::to_string(&name).unwrap(), r#""ok""#);
    }
}
