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
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EditError {
    /// The batch was empty.
    #[error("edits: must contain at least one edit")]
    NoEdits,
    /// An edit's `oldString` was empty, which would match everywhere.
    #[error("edits[{index}].oldString: must not be empty")]
    EmptyOld {
        /// Position of the edit in the batch.
        index: usize,
    },
    /// An edit's `oldString` does not occur in the plan.
    #[error("edits[{index}].oldString: not found in the plan")]
    NotFound {
        /// Position of the edit in the batch.
        index: usize,
    },
    /// An edit's `oldString` occurs several times and `replaceAll` is off.
    #[error("edits[{index}].oldString: matches {matches} places; pass replaceAll or add context")]
    Ambiguous {
        /// Position of the edit in the batch.
        index: usize,
        /// How many non-overlapping occurrences there are.
        matches: usize,
    },
    /// Two edits would rewrite overlapping text.
    #[error("edits[{index}] overlaps edits[{other}]")]
    Overlap {
        /// The later edit of the pair, by position in the batch.
        index: usize,
        /// The earlier edit of the pair.
        other: usize,
    },
}

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
            0 => return Err(EditError::NotFound { index }),
            1 => {}
            n if !edit.replace_all => return Err(EditError::Ambiguous { index, matches: n }),
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
            Err("edits[1].oldString: not found in the plan"),
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
            Err("edits[1].oldString: matches 3 places; pass replaceAll or add context"),
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
