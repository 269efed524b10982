//! String-replacement edits of a named plan ([`apply_edits`]).
//!
//! All edits are matched against the original text, not against the result
//! of the previous edit, and either all apply or none does. That makes a batch
//! order-independent and lets the agent write each `oldString` from the plan
//! it last read.

use std::ops::Range;

/// One replacement: `old` becomes `new`.
#[derive(
    Clone,
    PartialEq,
    Eq,
    Debug,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PlanEdit {
    /// The exact text to replace; must occur in the plan.
    #[serde(rename = "oldString")]
    pub old: String,
    /// The replacement text.
    #[serde(rename = "newString")]
    pub new: String,
    /// Replace every occurrence instead of requiring exactly one.
    #[serde(default)]
    pub replace_all: bool,
}

/// Why a batch of edits was refused; nothing was applied.
///
/// Its `Display` names fields as in the `edits: [...]` form of `edit_plan`;
/// [`EditError::message`] can name them as in the single-edit form.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum EditError {
    /// The batch was empty.
    NoEdits,
    /// An edit's `oldString` was empty, which would match everywhere.
    EmptyOld {
        /// Position of the edit in the batch.
        index: usize,
    },
    /// An edit's `oldString` does not occur in the plan.
    NotFound {
        /// Position of the edit in the batch.
        index: usize,
        /// The `oldString`, quoted and shortened for the message.
        quote: String,
    },
    /// An edit's `oldString` occurs several times and `replaceAll` is off.
    Ambiguous {
        /// Position of the edit in the batch.
        index: usize,
        /// How many non-overlapping occurrences there are.
        matches: usize,
        /// The `oldString`, quoted and shortened for the message.
        quote: String,
    },
    /// Two edits would rewrite overlapping text.
    Overlap {
        /// The later edit of the pair, by position in the batch.
        index: usize,
        /// The earlier edit of the pair.
        other: usize,
    },
}

/// Longest part of an `oldString` a message quotes, in characters.
const QUOTE_CHARS_MAX: usize = 200;

/// `text` as a quoted string literal (newlines and quotes escaped), cut to
/// [`QUOTE_CHARS_MAX`] characters with a note of how much was left out.
fn quote(text: &str) -> String {
    let total = text.chars().count();
    if total <= QUOTE_CHARS_MAX {
        return format!("{text:?}");
    }
    let kept: String = text.chars().take(QUOTE_CHARS_MAX).collect();
    format!("{kept:?}… ({} more characters)", total - QUOTE_CHARS_MAX)
}

impl EditError {
    /// The message, naming fields as the caller sent them: `oldString` when
    /// `single` (the one-edit form of `edit_plan`), else `edits[i].oldString`.
    pub fn message(&self, single: bool) -> String {
        let at = |index: &usize| {
            if single {
                String::new()
            } else {
                format!("edits[{index}].")
            }
        };
        match self {
            EditError::NoEdits => "edits: must contain at least one edit".to_owned(),
            EditError::EmptyOld { index } => format!("{}oldString: must not be empty", at(index)),
            EditError::NotFound { index, quote } => format!(
                "{}oldString: not found in the plan: {quote} (copy the text exactly, \
                 whitespace and line breaks included, from the plan as it is now)",
                at(index)
            ),
            EditError::Ambiguous {
                index,
                matches,
                quote,
            } => format!(
                "{}oldString: {quote} matches {matches} places; pass replaceAll or add \
                 surrounding text so it matches one",
                at(index)
            ),
            EditError::Overlap { index, other } => {
                format!("edits[{index}] overlaps edits[{other}]")
            }
        }
    }
}

impl std::fmt::Display for EditError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message(false))
    }
}

impl std::error::Error for EditError {}

/// Applies `edits` to `original` atomically and returns the new text and
/// the number of replacements made.
pub fn apply_edits(original: &str, edits: &[PlanEdit]) -> Result<(String, usize), EditError> {
    if edits.is_empty() {
        return Err(EditError::NoEdits);
    }
    // (matched range in `original`, edit index)
    let mut matches: Vec<(Range<usize>, usize)> = Vec::new();
    for (index, edit) in edits.iter().enumerate() {
        if edit.old.is_empty() {
            return Err(EditError::EmptyOld { index });
        }
        let found: Vec<Range<usize>> = original
            .match_indices(edit.old.as_str())
            .map(|(start, text)| start..start + text.len())
            .collect();
        match found.len() {
            0 => {
                return Err(EditError::NotFound {
                    index,
                    quote: quote(&edit.old),
                });
            }
            1 => {}
            n if !edit.replace_all => {
                return Err(EditError::Ambiguous {
                    index,
                    matches: n,
                    quote: quote(&edit.old),
                });
            }
            _ => {}
        }
        matches.extend(found.into_iter().map(|range| (range, index)));
    }
    matches.sort_by_key(|(range, index)| (range.start, *index));
    for pair in matches.windows(2) {
        let [(first, first_index), (second, second_index)] = pair else {
            continue;
        };
        if second.start < first.end {
            return Err(EditError::Overlap {
                index: *first_index.max(second_index),
                other: *first_index.min(second_index),
            });
        }
    }
    let mut result = String::with_capacity(original.len());
    let mut copied_up_to = 0;
    for (range, index) in &matches {
        result.push_str(&original[copied_up_to..range.start]);
        result.push_str(&edits[*index].new);
        copied_up_to = range.end;
    }
    result.push_str(&original[copied_up_to..]);
    Ok((result, matches.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edit(old: &str, new: &str, replace_all: bool) -> PlanEdit {
        PlanEdit {
            old: old.into(),
            new: new.into(),
            replace_all,
        }
    }

    fn check(original: &str, edits: &[PlanEdit], expected: Result<(&str, usize), &str>) {
        let actual = apply_edits(original, edits).map_err(|e| e.to_string());
        let expected = expected
            .map(|(text, n)| (text.to_owned(), n))
            .map_err(str::to_owned);
        assert_eq!(actual, expected);
    }

    #[test]
    fn single_edit_replaces_its_match() {
        check(
            "# Plan\n- step one\n",
            &[edit("one", "1", false)],
            Ok(("# Plan\n- step 1\n", 1)),
        );
    }

    #[test]
    fn replace_all_counts_every_match() {
        check("a b a b a", &[edit("a", "x", true)], Ok(("x b x b x", 3)));
    }

    #[test]
    fn edits_apply_to_the_original_not_to_each_other() {
        // The second edit's old text only exists after the first ran; it
        // must not be found.
        check(
            "alpha beta",
            &[edit("alpha", "gamma", false), edit("gamma", "delta", false)],
            Err(
                "edits[1].oldString: not found in the plan: \"gamma\" (copy the text exactly, \
                 whitespace and line breaks included, from the plan as it is now)",
            ),
        );
        // Swapping two words works because both match the original.
        check(
            "left right",
            &[edit("left", "right", false), edit("right", "left", false)],
            Ok(("right left", 2)),
        );
    }

    #[test]
    fn adjacent_edits_are_not_overlaps() {
        check(
            "abcd",
            &[edit("cd", "3", false), edit("ab", "1", false)],
            Ok(("13", 2)),
        );
    }

    #[test]
    fn a_single_edit_is_named_as_sent_and_long_text_is_cut() {
        let error = apply_edits("abc", &[edit("line one\nline \"two\"", "x", false)])
            .expect_err("not found");
        assert_eq!(
            error.message(true),
            "oldString: not found in the plan: \"line one\\nline \\\"two\\\"\" (copy the text \
             exactly, whitespace and line breaks included, from the plan as it is now)"
        );
        let long = "é".repeat(250);
        let error = apply_edits("abc", &[edit(&long, "x", false)]).expect_err("not found");
        let quoted = format!("{:?}… (50 more characters)", "é".repeat(200));
        assert!(error.message(true).contains(&quoted), "{error}");
    }

    #[test]
    fn errors_name_the_edit() {
        check("x", &[], Err("edits: must contain at least one edit"));
        check(
            "x",
            &[edit("x", "y", false), edit("", "y", false)],
            Err("edits[1].oldString: must not be empty"),
        );
        check(
            "one two one one",
            &[edit("two", "2", false), edit("one", "1", false)],
            Err(
                "edits[1].oldString: \"one\" matches 3 places; pass replaceAll or add \
                 surrounding text so it matches one",
            ),
        );
        check(
            "the quick brown fox",
            &[
                edit("quick brown", "slow", false),
                edit("fox", "dog", false),
                edit("brown fox", "cat", false),
            ],
            Err("edits[2] overlaps edits[0]"),
        );
    }

    #[test]
    fn serde_uses_the_tool_field_names() {
        let parsed: PlanEdit =
            serde_json::from_str(r#"{"oldString":"a","newString":"b"}"#).unwrap();
        assert_eq!(parsed, edit("a", "b", false));
        let parsed: PlanEdit =
            serde_json::from_str(r#"{"oldString":"a","newString":"b","replaceAll":true}"#).unwrap();
        assert_eq!(parsed, edit("a", "b", true));
        assert!(serde_json::from_str::<PlanEdit>(r#"{"old":"a","newString":"b"}"#).is_err());
    }
}
