//! The line diff of two versions of a plan's Markdown source, shared by the
//! review page's "Changes" view and the retro pages: [`LineDiff`] computes
//! it with `similar` (histogram line diff, word emphasis inside changed
//! lines, unchanged runs folded outside the context, a cap on lines and on
//! time), and [`LineDiff::rows`] renders it as the `div.diff` both pages
//! show, styled by `review.css`. Each page writes its own summary around
//! the rows; this module owns the model and the rows only.

use std::time::{Duration, Instant};

use maud::{Markup, html};
use similar::{Algorithm, ChangeTag, DiffTag, InlineChangeOptions, TextDiff};

/// Unchanged lines shown before and after each change in the diff; longer
/// unchanged runs are folded.
pub(super) const DIFF_CONTEXT_LINES: usize = 3;
/// An unchanged run is folded only if that hides at least this many lines:
/// a fold that hides one line costs as much room as the line.
const DIFF_FOLD_LINES_MIN: usize = 4;
/// Most diff lines put on the page; a plan may be megabytes, the page stays
/// readable and bounded.
const DIFF_LINES_MAX: usize = 20_000;
/// Time allowed to compute the line diff and its word-level refinement; past
/// it `similar` settles for a coarser but still correct diff.
///
/// The review page's 500 ms, not the 200 ms retro had: the review diff is
/// what a person decides on, so a finer diff is worth the wait there. On
/// ordinary plans the diff takes microseconds and the limit is never
/// reached; when it is, a retro timeline pays it once per entry, because
/// `EntryCache` keeps each entry's rendered markup.
const DIFF_TIME_MAX: Duration = Duration::from_millis(500);

/// How [`LineDiff::rows`] draws a folded unchanged run.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Folds {
    /// A "Show N unchanged lines" toggle with the lines inside it.
    Expandable,
    /// Only the count: a retro timeline with hundreds of versions would
    /// otherwise carry every plan hundreds of times.
    CountOnly,
}

/// A line diff of a plan's Markdown source, ready to render: changed lines
/// with their word-level emphasis, and unchanged runs cut to
/// [`DIFF_CONTEXT_LINES`] around each change with the rest folded.
#[derive(Debug)]
pub(super) struct LineDiff {
    rows: Vec<Row>,
    /// Lines added, counted over the whole diff, shown or not.
    pub(super) added: usize,
    /// Lines removed, counted over the whole diff, shown or not.
    pub(super) removed: usize,
    /// Diff lines past [`DIFF_LINES_MAX`], left off the page.
    omitted_lines: usize,
}

#[derive(Debug)]
enum Row {
    Line(Line),
    /// Unchanged lines hidden behind a "Show N unchanged lines" toggle.
    Fold(Vec<Line>),
}

#[derive(Debug)]
struct Line {
    kind: LineKind,
    /// 1-based line number in the previous version, if the line is in it.
    old: Option<usize>,
    /// 1-based line number in the current version, if the line is in it.
    new: Option<usize>,
    /// The text without its line break, in runs; `true` marks the words
    /// that changed within a changed line.
    segments: Vec<(bool, String)>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum LineKind {
    Unchanged,
    Added,
    Removed,
}

impl LineKind {
    fn name(self) -> &'static str {
        match self {
            LineKind::Unchanged => "unchanged",
            LineKind::Added => "added",
            LineKind::Removed => "removed",
        }
    }

    fn sign(self) -> &'static str {
        match self {
            LineKind::Unchanged => " ",
            LineKind::Added => "+",
            LineKind::Removed => "−",
        }
    }
}

impl LineDiff {
    /// Compares `previous` with `current` line by line. Line endings are
    /// normalised first (CRLF to LF, a final line break added), so a file
    /// saved by another editor does not show every line as changed.
    pub(super) fn new(previous: &str, current: &str) -> Self {
        let old = normalise_lines(previous);
        let new = normalise_lines(current);
        let deadline = Instant::now() + DIFF_TIME_MAX;
        let diff = TextDiff::configure()
            .algorithm(Algorithm::Histogram)
            .deadline(deadline)
            .diff_lines(old.as_str(), new.as_str());
        let mut inline = InlineChangeOptions::new();
        inline.semantic_cleanup(true);
        let ops = diff.ops();
        let mut builder = Builder::default();
        for (index, op) in ops.iter().enumerate() {
            if op.tag() == DiffTag::Equal {
                let lines: Vec<Line> = diff
                    .iter_changes(op)
                    .map(|change| Line {
                        kind: LineKind::Unchanged,
                        old: change.old_index().map(|i| i + 1),
                        new: change.new_index().map(|i| i + 1),
                        segments: vec![(false, without_line_break(change.value()).to_owned())],
                    })
                    .collect();
                builder.unchanged(lines, index == 0, index + 1 == ops.len());
                continue;
            }
            for change in diff.iter_inline_changes_with_options_deadline(op, inline, Some(deadline))
            {
                let kind = match change.tag() {
                    ChangeTag::Insert => LineKind::Added,
                    ChangeTag::Delete => LineKind::Removed,
                    ChangeTag::Equal => LineKind::Unchanged,
                };
                let mut segments: Vec<(bool, String)> = change
                    .values()
                    .iter()
                    .map(|(emphasised, text)| (*emphasised, (*text).to_owned()))
                    .collect();
                if let Some((_, last)) = segments.last_mut() {
                    let kept = without_line_break(last).len();
                    last.truncate(kept);
                }
                segments.retain(|(_, text)| !text.is_empty());
                builder.push(Line {
                    kind,
                    old: change.old_index().map(|i| i + 1),
                    new: change.new_index().map(|i| i + 1),
                    segments,
                });
            }
        }
        builder.finish()
    }

    /// True when the two versions hold the same lines.
    pub(super) fn is_unchanged(&self) -> bool {
        self.added == 0 && self.removed == 0
    }

    /// "3 lines added, 1 removed", for a screen-reader label.
    pub(super) fn summary(&self) -> String {
        format!("{} added, {} removed", lines(self.added), self.removed)
    }

    /// The rows as a `div.diff`, followed by a note when the line cap left
    /// some off. Added and removed lines are `ins` and `del` with a
    /// visually hidden "Added: " or "Removed: ", since the sign and colour
    /// are hidden from screen readers.
    pub(super) fn rows(&self, folds: Folds) -> Markup {
        html! {
            div.diff {
                @for row in &self.rows {
                    @match row {
                        Row::Line(line) => (line_row(line)),
                        Row::Fold(folded) => (fold_row(folded, folds)),
                    }
                }
            }
            @if self.omitted_lines > 0 {
                p.diff-truncated {
                    "The remaining " (lines(self.omitted_lines)) " of the diff are too long to show."
                }
            }
        }
    }
}

/// "1 line", "3 lines".
pub(super) fn lines(count: usize) -> String {
    if count == 1 {
        "1 line".to_owned()
    } else {
        format!("{count} lines")
    }
}

fn line_row(line: &Line) -> Markup {
    let text = html! {
        @for (emphasised, segment) in &line.segments {
            @if *emphasised { span.diff-word { (segment) } } @else { (segment) }
        }
    };
    html! {
        div class={ "diff-line diff-" (line.kind.name()) } {
            span.diff-num aria-hidden="true" { @if let Some(n) = line.old { (n) } }
            span.diff-num aria-hidden="true" { @if let Some(n) = line.new { (n) } }
            span.diff-sign aria-hidden="true" { (line.kind.sign()) }
            @match line.kind {
                LineKind::Added => ins.diff-text { span.visually-hidden { "Added: " } (text) },
                LineKind::Removed => del.diff-text { span.visually-hidden { "Removed: " } (text) },
                LineKind::Unchanged => span.diff-text { (text) },
            }
        }
    }
}

fn fold_row(folded: &[Line], folds: Folds) -> Markup {
    let count = match folded.len() {
        1 => "1 unchanged line".to_owned(),
        n => format!("{n} unchanged lines"),
    };
    match folds {
        Folds::CountOnly => html! {
            p.diff-fold-summary.retro-muted { "⋯ " (count) }
        },
        Folds::Expandable => html! {
            details.diff-fold {
                summary.diff-fold-summary {
                    span.fold-show { "Show " (count) }
                    span.fold-hide { "Hide " (count) }
                }
                @for line in folded { (line_row(line)) }
            }
        },
    }
}

/// Collects rows while counting the changes and keeping to
/// [`DIFF_LINES_MAX`]: once a line does not fit, nothing after it is shown,
/// so the page never skips a stretch and then carries on. Folded lines
/// count against the cap even when only their count is drawn, so a diff
/// keeps the same rows in both [`Folds`] styles.
#[derive(Default)]
struct Builder {
    rows: Vec<Row>,
    /// Lines in `rows`, folded ones included.
    shown: usize,
    /// Set once the cap is reached.
    full: bool,
    added: usize,
    removed: usize,
    omitted: usize,
}

impl Builder {
    fn push(&mut self, line: Line) {
        match line.kind {
            LineKind::Added => self.added += 1,
            LineKind::Removed => self.removed += 1,
            LineKind::Unchanged => {}
        }
        if !self.full && self.shown < DIFF_LINES_MAX {
            self.shown += 1;
            self.rows.push(Row::Line(line));
        } else {
            self.full = true;
            self.omitted += 1;
        }
    }

    /// Adds an unchanged run: context next to the changes before and after
    /// it (none before the first change or after the last), the middle
    /// folded when that hides enough lines.
    fn unchanged(&mut self, mut lines: Vec<Line>, first: bool, last: bool) {
        let before = if first { 0 } else { DIFF_CONTEXT_LINES };
        let after = if last { 0 } else { DIFF_CONTEXT_LINES };
        if lines.len() < before + after + DIFF_FOLD_LINES_MIN {
            for line in lines {
                self.push(line);
            }
            return;
        }
        let tail = lines.split_off(lines.len() - after);
        let folded = lines.split_off(before);
        for line in lines {
            self.push(line);
        }
        if !self.full && self.shown + folded.len() <= DIFF_LINES_MAX {
            self.shown += folded.len();
            self.rows.push(Row::Fold(folded));
        } else {
            self.full = true;
            self.omitted += folded.len();
        }
        for line in tail {
            self.push(line);
        }
    }

    fn finish(self) -> LineDiff {
        LineDiff {
            rows: self.rows,
            added: self.added,
            removed: self.removed,
            omitted_lines: self.omitted,
        }
    }
}

fn normalise_lines(text: &str) -> String {
    let mut text = text.replace("\r\n", "\n");
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text
}

fn without_line_break(line: &str) -> &str {
    line.strip_suffix('\n').unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The diff as `(sign, old, new, text)` rows, folds marked `~` with the
    /// number of lines they hide.
    fn check(previous: &str, current: &str, expected: &[&str]) {
        let diff = LineDiff::new(previous, current);
        let mut actual = Vec::new();
        let describe = |line: &Line| {
            let text: String = line
                .segments
                .iter()
                .map(|(emphasised, text)| {
                    if *emphasised {
                        format!("[{text}]")
                    } else {
                        text.clone()
                    }
                })
                .collect();
            let number = |n: Option<usize>| n.map_or("-".to_owned(), |n| n.to_string());
            format!(
                "{}{} {} {}",
                line.kind.sign(),
                number(line.old),
                number(line.new),
                text
            )
        };
        for row in &diff.rows {
            match row {
                Row::Line(line) => actual.push(describe(line)),
                Row::Fold(lines) => actual.push(format!("~{}", lines.len())),
            }
        }
        assert_eq!(actual, expected);
    }

    #[test]
    fn changed_words_are_emphasised_within_their_line() {
        check(
            "# Plan\nWrite tests\n",
            "# Plan\nWrite more tests\n",
            &[" 1 1 # Plan", "−2 - Write tests", "+- 2 Write [more ]tests"],
        );
    }

    #[test]
    fn long_unchanged_runs_fold_outside_the_context() {
        let old: String = (1..=20).map(|n| format!("line {n}\n")).collect();
        let new = old.replace("line 10\n", "line ten\n");
        check(
            &old,
            &new,
            &[
                "~6",
                " 7 7 line 7",
                " 8 8 line 8",
                " 9 9 line 9",
                "−10 - line [10]",
                "+- 10 line [ten]",
                " 11 11 line 11",
                " 12 12 line 12",
                " 13 13 line 13",
                "~7",
            ],
        );
    }

    #[test]
    fn short_unchanged_runs_are_not_folded() {
        check(
            "a\nb\nc\nd\ne\n",
            "a\nb\nc\nd\nE\n",
            &[
                " 1 1 a",
                " 2 2 b",
                " 3 3 c",
                " 4 4 d",
                "−5 - [e]",
                "+- 5 [E]",
            ],
        );
    }

    #[test]
    fn oversized_diffs_stop_at_the_line_cap() {
        let current: String = (0..DIFF_LINES_MAX + 5).map(|n| format!("{n}\n")).collect();
        let diff = LineDiff::new("", &current);
        assert_eq!(diff.rows.len(), DIFF_LINES_MAX);
        assert_eq!(diff.omitted_lines, 5);
        assert_eq!(
            diff.added,
            DIFF_LINES_MAX + 5,
            "the counts cover every line"
        );
    }

    #[test]
    fn line_endings_do_not_count_as_changes() {
        let diff = LineDiff::new("a\r\nb\r\n", "a\nb");
        assert!(diff.is_unchanged(), "{diff:?}");
    }

    #[test]
    fn count_only_folds_leave_the_folded_lines_out() {
        let old: String = (1..=20).map(|n| format!("line {n}\n")).collect();
        let new = old.replace("line 10\n", "line ten\n");
        let diff = LineDiff::new(&old, &new);
        let compact = diff.rows(Folds::CountOnly).into_string();
        assert!(compact.contains("⋯ 6 unchanged lines"), "{compact}");
        assert!(!compact.contains("line 2<"), "{compact}");
        assert!(!compact.contains("<details"), "{compact}");
        let full = diff.rows(Folds::Expandable).into_string();
        assert!(full.contains("Show 6 unchanged lines"), "{full}");
        assert!(full.contains("line 2<"), "{full}");
    }
}
