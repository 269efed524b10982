//! [`review_page`]: the page on which a person reviews a named plan the agent
//! submitted.
//!
//! The server renders everything the person reads: the plan through
//! [`crate::markdown::render`], and, from the second round on, a line diff of
//! the Markdown source against the previously submitted version, computed
//! by [`super::diff`] so the browser only shows it. `review.js` adds the
//! interactive parts: the Plan / Changes tabs, comments anchored to quoted
//! passages, the general feedback, and the two verdicts, which it posts as
//! JSON to `POST /review` (see the script's header for the protocol).
//!
//! Like every page, this one holds no inline script or style and loads only
//! embedded assets. The shell's `<head>` belongs to the form, so the review's
//! own stylesheet and script are linked from the top and the end of the body:
//! a stylesheet link is allowed there, and the body's content after it waits
//! for it, so nothing is painted unstyled.

use maud::{Markup, PreEscaped, html};

use super::assets::{REVIEW_CSS, REVIEW_JS};
use super::diff::{Folds, LineDiff, lines};
use super::shell::{Libraries, check_icon, document};
use crate::markdown;

/// Most comments one review carries; the same limit the core enforces.
pub const REVIEW_COMMENTS_MAX: usize = planb_core::state::REVIEW_COMMENTS_MAX;
/// Longest quoted passage of a comment, in characters (Unicode scalar
/// values, as `str::chars` counts them).
pub const REVIEW_QUOTE_CHARS_MAX: usize = planb_core::state::REVIEW_QUOTE_CHARS_MAX;
/// Longest comment text, in characters.
pub const REVIEW_COMMENT_CHARS_MAX: usize = planb_core::state::REVIEW_COMMENT_CHARS_MAX;
/// Longest general feedback, in characters.
pub const REVIEW_FEEDBACK_CHARS_MAX: usize = planb_core::state::REVIEW_FEEDBACK_CHARS_MAX;

/// What the review page shows.
#[derive(Clone, Copy, Debug)]
pub struct ReviewView<'a> {
    /// The plan's name, e.g. `auth-refactor`.
    pub plan_name: &'a str,
    /// The review round: 1 for the first submission.
    pub round: u32,
    /// The plan Markdown under review.
    pub content: &'a str,
    /// The previously submitted version, if any; the page then has a
    /// "Changes" view.
    pub previous: Option<&'a str>,
    /// The secret review id, written only into the form's `data-rid`.
    pub rid: &'a str,
    /// Absolute path of the plan file, shown small under the name.
    pub plan_path: &'a str,
}

/// The complete HTML document of the review page.
pub fn review_page(review: &ReviewView<'_>) -> Markup {
    let plan_html = markdown::render(review.content);
    let libraries = Libraries::needed_by([plan_html.as_str()]);
    let diff = review
        .previous
        .map(|previous| LineDiff::new(previous, review.content));
    let body = html! {
        link rel="stylesheet" href=(REVIEW_CSS);
        main #main .card .review-card {
            (header(review, diff.as_ref()))
            noscript {
                p.banner.banner-error { "This page needs JavaScript to send your review." }
            }
            div #banner .banner role="alert" hidden {}
            form #review-form .review-form data-rid=(review.rid)
                data-comments-max=(REVIEW_COMMENTS_MAX)
                data-quote-chars-max=(REVIEW_QUOTE_CHARS_MAX)
                data-comment-chars-max=(REVIEW_COMMENT_CHARS_MAX)
                data-feedback-chars-max=(REVIEW_FEEDBACK_CHARS_MAX)
                novalidate autocomplete="off" {
                @if let Some(diff) = &diff {
                    (tab_strip(diff))
                }
                div.review-layout {
                    div.review-views {
                        (plan_panel(&plan_html, diff.is_some()))
                        @if let Some(diff) = &diff {
                            (changes_panel(review.round, diff))
                        }
                    }
                    (aside())
                }
                (footer())
            }
            (done_sections())
        }
        p.keyboard-hint aria-hidden="true" {
            "Select text and press " kbd { "C" } " to comment · "
            kbd { "↑" } " " kbd { "↓" } " move between the comment buttons beside the plan · "
            kbd { "Ctrl" } "+" kbd { "Enter" } " save a comment"
        }
        script src=(REVIEW_JS) defer {}
    };
    document(&format!("Review {}", review.plan_name), libraries, body)
}

fn header(review: &ReviewView<'_>, diff: Option<&LineDiff>) -> Markup {
    html! {
        header.card-header.review-header {
            div.review-heading {
                p.eyebrow { "Plan review" }
                h1.form-title.review-title { (review.plan_name) }
                p.plan-path title=(review.plan_path) {
                    (file_icon())
                    span.plan-path-text { (review.plan_path) }
                }
            }
            p.round-badge {
                span.round-number { "Round " (review.round) }
                span.round-detail {
                    @match diff {
                        None => "First submission",
                        Some(diff) if diff.is_unchanged() => "Unchanged since last round",
                        Some(_) => "Revised since last round",
                    }
                }
            }
        }
        p.review-lede {
            "Your agent submitted this plan and is waiting for your review. Comment on any passage, \
             then approve the plan or request changes."
        }
    }
}

fn tab_strip(diff: &LineDiff) -> Markup {
    html! {
        div.tabs.review-tabs role="tablist" aria-label="Views of this plan" {
            button.tab #tab-plan type="button" role="tab" aria-selected="true"
                aria-controls="panel-plan" tabindex="0" {
                span.tab-label { "Plan" }
            }
            button.tab #tab-changes type="button" role="tab" aria-selected="false"
                aria-controls="panel-changes" tabindex="-1" {
                span.tab-label { "Changes" }
                @if !diff.is_unchanged() {
                    span.tab-count aria-hidden="true" {
                        span.count-added { "+" (diff.added) }
                        " "
                        span.count-removed { "−" (diff.removed) }
                    }
                    span.visually-hidden { ", " (diff.summary()) }
                }
            }
        }
    }
}

fn plan_panel(plan_html: &str, tabbed: bool) -> Markup {
    html! {
        section.panel.review-panel #panel-plan role=[tabbed.then_some("tabpanel")]
            aria-labelledby=[tabbed.then_some("tab-plan")] aria-label=[(!tabbed).then_some("Plan")] {
            div.md.plan-doc #plan { (PreEscaped(plan_html)) }
            button #selection-comment .selection-comment type="button" aria-keyshortcuts="c" hidden {
                (comment_icon())
                span { "Add comment" }
                kbd aria-hidden="true" { "C" }
            }
        }
    }
}

fn changes_panel(round: u32, diff: &LineDiff) -> Markup {
    let since = if round > 1 {
        format!("round {}", round - 1)
    } else {
        "the last submission".to_owned()
    };
    html! {
        section.panel.review-panel.changes-panel #panel-changes role="tabpanel"
            aria-labelledby="tab-changes" hidden {
            @if diff.is_unchanged() {
                div.diff-none {
                    div.diff-none-icon aria-hidden="true" { (check_icon()) }
                    p { "No changes since " (since) ": this is the text you reviewed last time." }
                }
            } @else {
                p.diff-summary {
                    "Changes to the Markdown since " (since) ": "
                    span.count-added { (lines(diff.added)) " added" }
                    ", "
                    span.count-removed { (lines(diff.removed)) " removed" }
                    "."
                }
                (diff.rows(Folds::Expandable))
            }
        }
    }
}

fn aside() -> Markup {
    html! {
        aside.review-aside #review-aside aria-label="Your review" {
            section.comments aria-labelledby="comments-title" {
                h2.aside-title #comments-title tabindex="-1" {
                    "Comments "
                    span.comment-count #comment-count {}
                }
                section.composer #composer hidden aria-label="New comment" {
                    blockquote.quote.composer-quote #composer-quote {}
                    p.composer-note #composer-note hidden {
                        "The quote is shortened to its first "
                        (thousands(REVIEW_QUOTE_CHARS_MAX)) " characters."
                    }
                    label.visually-hidden for="composer-text" { "Your comment on this passage" }
                    textarea.text-input.text-area.composer-text #composer-text rows="4"
                        placeholder="What should change here?"
                        aria-describedby="composer-error composer-counter" {}
                    div.field-foot {
                        span.field-error #composer-error hidden {}
                        span.char-counter #composer-counter hidden {}
                    }
                    div.composer-actions {
                        button.btn.btn-ghost.btn-small #composer-cancel type="button" { "Cancel" }
                        button.btn.btn-primary.btn-small #composer-save type="button" { "Save comment" }
                    }
                }
                div.comments-empty #comments-empty {
                    (comment_icon())
                    p {
                        "Select text in the plan and choose " strong { "Add comment" }
                        ", or use the " (comment_icon()) " button beside a paragraph."
                    }
                }
                ol.comment-list #comment-list aria-labelledby="comments-title" {}
                p.comments-limit #comments-limit hidden {
                    "You have added " (REVIEW_COMMENTS_MAX) " comments, the most one review can carry. \
                     Put anything further in the overall feedback."
                }
            }
            section.feedback {
                label.aside-title for="feedback" { "Overall feedback" }
                p.field-hint #feedback-hint {
                    "Optional when you approve. To request changes, write here or add a comment."
                }
                textarea.text-input.text-area.feedback-text #feedback name="feedback" rows="5"
                    placeholder="Anything the agent should know about the plan as a whole"
                    aria-describedby="feedback-hint feedback-error feedback-counter" {}
                div.field-foot {
                    span.field-error #feedback-error hidden {}
                    span.char-counter #feedback-counter hidden {}
                }
            }
        }
    }
}

fn footer() -> Markup {
    html! {
        footer.form-footer.review-footer {
            div.footer-status {
                span.review-status #review-status { "No comments yet" }
                span.verdict-message #verdict-message role="status" aria-live="polite" {}
            }
            div.footer-actions {
                button.btn.btn-ghost #approve-cancel type="button" hidden { "Cancel" }
                button.btn.btn-secondary #request-changes type="button" {
                    span.btn-label { "Request changes" }
                }
                button.btn.btn-primary.btn-approve #approve type="button" aria-describedby="verdict-message" {
                    (check_icon())
                    span.btn-label { "Approve" }
                }
            }
        }
    }
}

/// The two confirmations; the script shows the one that matches the verdict
/// the server recorded.
fn done_sections() -> Markup {
    html! {
        section.done.review-done #done-approve hidden tabindex="-1" aria-labelledby="done-approve-title" {
            div.done-icon aria-hidden="true" { (check_icon()) }
            h2.done-title #done-approve-title { "Approved — the agent can proceed" }
            p.done-text { "Your approval was recorded. You can close this tab." }
        }
        section.done.review-done.is-changes #done-changes hidden tabindex="-1" aria-labelledby="done-changes-title" {
            div.done-icon aria-hidden="true" { (send_icon()) }
            h2.done-title #done-changes-title { "Changes requested — sent to the agent" }
            p.done-text {
                "The agent will revise the plan and may submit it again for review. You can close this tab."
            }
        }
    }
}

/// `2000` as `2 000`, the way the page writes numbers.
fn thousands(value: usize) -> String {
    let digits = value.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            out.push('\u{202f}');
        }
        out.push(digit);
    }
    out
}

fn file_icon() -> Markup {
    html! {
        svg.icon.icon-inline viewBox="0 0 24 24" aria-hidden="true" focusable="false" {
            path d="M14 3H7a2 2 0 0 0-2 2v14a2 2 0 0 0 2 2h10a2 2 0 0 0 2-2V8z" {}
            path d="M14 3v5h5" {}
        }
    }
}

fn comment_icon() -> Markup {
    html! {
        svg.icon.icon-comment viewBox="0 0 24 24" aria-hidden="true" focusable="false" {
            path d="M20 15a2 2 0 0 1-2 2H8l-4 4V6a2 2 0 0 1 2-2h12a2 2 0 0 1 2 2z" {}
        }
    }
}

fn send_icon() -> Markup {
    html! {
        svg.icon viewBox="0 0 24 24" aria-hidden="true" focusable="false" {
            path d="M21 3L10 14" {}
            path d="M21 3l-7 18-4-7-7-4z" {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_grouped_in_thousands() {
        assert_eq!(thousands(2_000), "2\u{202f}000");
        assert_eq!(thousands(100_000), "100\u{202f}000");
        assert_eq!(thousands(100), "100");
    }
}
