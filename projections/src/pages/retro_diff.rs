//! The line diff of two plan versions for the retro pages, in the markup and
//! classes of the review page's "Changes" view (`review.css` styles both).
//!
//! The review page's `LineDiff` is private to `review.rs`; this is the same
//! approach (histogram line diff with `similar`, word emphasis inside changed
//! lines, unchanged runs folded outside the context) kept to what a read-only
//! page needs.

use std::time::{Duration, Instant};

use maud::{Markup, html};
use similar::{Algorithm, ChangeTag, DiffTag, InlineChangeOptions, TextDiff};

use super::review::DIFF_CONTEXT_LINES;

/// Most diff lines put on one page.
const DIFF_LINES_MAX: usize = 20_000;
/// Time allowed for one diff; past it `similar` settles for a coarser one.
const DIFF_TIME_MAX: Duration = Duration::from_millis(200);
/// A fold must hide at least this many lines to be worth its own row.
const FOLD_LINES_MIN: usize = 4;

struct Line {
    sign: &'static str,
    class: &'static str,
    old: Option<usize>,
    new: Option<usize>,
    segments: Vec<(bool, String)>,
}

enum Row {
    Line(Line),
    Fold(Vec<Line>),
}

/// The diff of `previous` against `current` as a `div.diff`, with a one-line
/// summary above it, or a note when nothing changed. `compact` leaves the
/// folded unchanged lines out (only their count is shown): a timeline with
/// hundreds of versions would otherwise carry every plan hundreds of times.
pub(super) fn diff_view(previous: &str, current: &str, compact: bool) -> Markup {
    let old = normalise(previous);
    let new = normalise(current);
    let deadline = Instant::now() + DIFF_TIME_MAX;
    let diff = TextDiff::configure()
        .algorithm(Algorithm::Histogram)
        .deadline(deadline)
        .diff_lines(old.as_str(), new.as_str());
    let mut inline = InlineChangeOptions::new();
    inline.semantic_cleanup(true);
    let ops = diff.ops();
    let (mut added, mut removed) = (0usize, 0usize);
    let mut rows: Vec<Row> = Vec::new();
    for (index, op) in ops.iter().enumerate() {
        if op.tag() == DiffTag::Equal {
            let mut lines: Vec<Line> = diff
                .iter_changes(op)
                .map(|change| Line {
                    sign: " ",
                    class: "diff-line diff-unchanged",
                    old: change.old_index().map(|i| i + 1),
                    new: change.new_index().map(|i| i + 1),
                    segments: vec![(false, strip(change.value()).to_owned())],
                })
                .collect();
            let before = if index == 0 { 0 } else { DIFF_CONTEXT_LINES };
            let after = if index + 1 == ops.len() {
                0
            } else {
                DIFF_CONTEXT_LINES
            };
            if lines.len() >= before + after + FOLD_LINES_MIN {
                let tail = lines.split_off(lines.len() - after);
                let folded = lines.split_off(before);
                rows.extend(lines.into_iter().map(Row::Line));
                rows.push(Row::Fold(folded));
                rows.extend(tail.into_iter().map(Row::Line));
            } else {
                rows.extend(lines.into_iter().map(Row::Line));
            }
            continue;
        }
        for change in diff.iter_inline_changes_with_options_deadline(op, inline, Some(deadline)) {
            let (sign, class) = match change.tag() {
                ChangeTag::Insert => {
                    added += 1;
                    ("+", "diff-line diff-added")
                }
                ChangeTag::Delete => {
                    removed += 1;
                    ("−", "diff-line diff-removed")
                }
                ChangeTag::Equal => (" ", "diff-line diff-unchanged"),
            };
            let mut segments: Vec<(bool, String)> = change
                .values()
                .iter()
                .map(|(emphasised, text)| (*emphasised, (*text).to_owned()))
                .collect();
            if let Some((_, last)) = segments.last_mut() {
                let kept = strip(last).len();
                last.truncate(kept);
            }
            segments.retain(|(_, text)| !text.is_empty());
            rows.push(Row::Line(Line {
                sign,
                class,
                old: change.old_index().map(|i| i + 1),
                new: change.new_index().map(|i| i + 1),
                segments,
            }));
        }
    }
    let omitted = rows.len().saturating_sub(DIFF_LINES_MAX);
    rows.truncate(DIFF_LINES_MAX);
    html! {
        @if added == 0 && removed == 0 {
            p.diff-none.retro-diff-none { "No changes to the Markdown." }
        } @else {
            p.diff-summary {
                span.count-added { "+" (added) " added" }
                ", "
                span.count-removed { "−" (removed) " removed" }
            }
            div.diff {
                @for row in &rows {
                    @match row {
                        Row::Line(line) => (line_row(line)),
                        Row::Fold(lines) if compact => {
                            p.diff-fold-summary.retro-muted { "⋯ " (lines.len()) " unchanged lines" }
                        }
                        Row::Fold(lines) => {
                            details.diff-fold {
                                summary.diff-fold-summary {
                                    span.fold-show { "Show " (lines.len()) " unchanged lines" }
                                    span.fold-hide { "Hide " (lines.len()) " unchanged lines" }
                                }
                                @for line in lines { (line_row(line)) }
                            }
                        }
                    }
                }
            }
            @if omitted > 0 {
                p.diff-truncated { "The remaining " (omitted) " rows of the diff are too long to show." }
            }
        }
    }
}

fn line_row(line: &Line) -> Markup {
    html! {
        div class=(line.class) {
            span.diff-num aria-hidden="true" { @if let Some(n) = line.old { (n) } }
            span.diff-num aria-hidden="true" { @if let Some(n) = line.new { (n) } }
            span.diff-sign aria-hidden="true" { (line.sign) }
            span.diff-text {
                @for (emphasised, segment) in &line.segments {
                    @if *emphasised { span.diff-word { (segment) } } @else { (segment) }
                }
            }
        }
    }
}

fn normalise(text: &str) -> String {
    let mut text = text.replace("\r\n", "\n");
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text
}

fn strip(line: &str) -> &str {
    line.strip_suffix('\n').unwrap_or(line)
}
