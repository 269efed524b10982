//! One question's control, label, error slot and pre-filled draft value.
//!
//! Element ids derive from the question id (which the core restricts to
//! letters, digits, `_`, `.` and `-`) with a prefix per role, so they never
//! collide with each other or with the page's own ids: `q-` the question's
//! block, `input-` its control, `label-` its label, `error-` its message slot,
//! `ill-` an option's illustration. The script finds questions by
//! `data-question` and reads `data-kind` and `data-required`.

use maud::{Markup, PreEscaped, html};
use planb_core::answer::{LONGTEXT_ANSWER_CHARS_MAX, TEXT_ANSWER_CHARS_MAX};
use planb_core::{AnswerValue, Choice, Question, QuestionKind};

use crate::markdown;

/// Most ticks drawn under a scale; past this only the ends are labelled.
const SCALE_TICKS_MAX: usize = 11;

/// Whether `value` answers `question` (the same rule as the script's and,
/// for required questions, the server's: blank text and an empty selection
/// do not count).
pub(super) fn is_answered(question: &Question, value: Option<&AnswerValue>) -> bool {
    match (&question.kind, value) {
        (
            QuestionKind::Text { .. } | QuestionKind::LongText { .. },
            Some(AnswerValue::Text(text)),
        ) => !text.trim().is_empty(),
        (QuestionKind::Single { options }, Some(AnswerValue::Choice(chosen))) => {
            options.iter().any(|c| &c.value == chosen)
        }
        (QuestionKind::Multi { options }, Some(AnswerValue::Choices(chosen))) => chosen
            .iter()
            .any(|value| options.iter().any(|c| &c.value == value)),
        (QuestionKind::Scale { .. }, Some(AnswerValue::Number(_))) => true,
        _ => false,
    }
}

/// The id of the illustration container of option `index` of `question`.
pub(super) fn illustration_id(question: &Question, index: usize) -> String {
    format!("ill-{}-{index}", question.id)
}

/// The block for `question`, numbered `number` in the form, pre-filled from
/// `draft`.
pub(super) fn question_block(
    question: &Question,
    number: usize,
    draft: Option<&AnswerValue>,
) -> Markup {
    let id = &question.id;
    let required = question.required.then_some("true");
    let kind = question.kind.name();
    match &question.kind {
        QuestionKind::Text { placeholder } => html! {
            div.question #{"q-" (id)} data-question=(id) data-kind=(kind) data-required=(question.required) {
                (label(question, number, true))
                input.text-input #{"input-" (id)} type="text" name=(id)
                    placeholder=[placeholder] maxlength=(TEXT_ANSWER_CHARS_MAX)
                    value=[text_draft(draft)] aria-required=[required]
                    aria-describedby={"error-" (id)} autocomplete="off" spellcheck="true";
                (error_slot(question))
            }
        },
        QuestionKind::LongText { placeholder } => html! {
            div.question #{"q-" (id)} data-question=(id) data-kind=(kind) data-required=(question.required) {
                (label(question, number, true))
                textarea.text-input.text-area #{"input-" (id)} name=(id) rows="5"
                    placeholder=[placeholder] maxlength=(LONGTEXT_ANSWER_CHARS_MAX)
                    aria-required=[required] aria-describedby={"error-" (id)} spellcheck="true" {
                    (text_draft(draft).unwrap_or_default())
                }
                (error_slot(question))
            }
        },
        QuestionKind::Single { options } | QuestionKind::Multi { options } => {
            options_block(question, number, options, draft)
        }
        QuestionKind::Scale { min, max, step } => {
            scale_block(question, number, (*min, *max, *step), draft)
        }
    }
}

/// The question's label: a `<label for>` for text controls, a `<legend>` for
/// option groups (`for_control` false).
fn label(question: &Question, number: usize, for_control: bool) -> Markup {
    let id = &question.id;
    let content = html! {
        span.question-number aria-hidden="true" { (number) }
        span.question-text {
            (question.label)
            @if question.required {
                " "
                span.required-badge aria-hidden="true" { "Required" }
            }
        }
    };
    if for_control {
        html! { label.question-label #{"label-" (id)} for={"input-" (id)} { (content) } }
    } else {
        html! { legend.question-label #{"label-" (id)} { (content) } }
    }
}

fn error_slot(question: &Question) -> Markup {
    html! { p.question-error #{"error-" (question.id)} hidden {} }
}

fn text_draft(draft: Option<&AnswerValue>) -> Option<&str> {
    match draft {
        Some(AnswerValue::Text(text)) => Some(text),
        _ => None,
    }
}

fn options_block(
    question: &Question,
    number: usize,
    options: &[Choice],
    draft: Option<&AnswerValue>,
) -> Markup {
    let id = &question.id;
    let single = matches!(question.kind, QuestionKind::Single { .. });
    let chosen = |value: &str| match draft {
        Some(AnswerValue::Choice(chosen)) => chosen == value,
        Some(AnswerValue::Choices(chosen)) => chosen.iter().any(|c| c == value),
        _ => false,
    };
    // A radiogroup takes aria-required; a group of checkboxes cannot, so
    // its legend says it in words for screen readers.
    let (role, aria_required) = if single {
        ("radiogroup", question.required.then_some("true"))
    } else {
        ("group", None)
    };
    let control = if single { "radio" } else { "checkbox" };
    html! {
        fieldset.question.question-options #{"q-" (id)} data-question=(id)
            data-kind=(question.kind.name()) data-required=(question.required)
            role=(role) aria-required=[aria_required] aria-labelledby={"label-" (id)}
            aria-describedby={"error-" (id)} {
            (label(question, number, false))
            @if !single {
                p.question-hint {
                    "Choose any that apply."
                    @if question.required { span.visually-hidden { " At least one is required." } }
                }
            }
            div.options {
                @for (index, choice) in options.iter().enumerate() {
                    @let illustration = choice.markdown.as_ref().map(|_| illustration_id(question, index));
                    label.option data-illustration=[illustration.as_deref()] {
                        input.option-input #{"input-" (id) "-" (index)} type=(control) name=(id)
                            value=(choice.value) checked[chosen(&choice.value)]
                            aria-describedby=[illustration.as_deref()];
                        span.option-mark.{"option-mark-" (control)} aria-hidden="true" {}
                        span.option-text { (choice.value) }
                        @if illustration.is_some() {
                            span.option-details-mark aria-hidden="true" title="Has details" {}
                        }
                    }
                }
            }
            @if single && !question.required {
                button.clear-answer type="button" data-clear=(id) hidden { "Clear choice" }
            }
            (error_slot(question))
        }
    }
}

fn scale_block(
    question: &Question,
    number: usize,
    (min, max, step): (f64, f64, Option<f64>),
    draft: Option<&AnswerValue>,
) -> Markup {
    let id = &question.id;
    let value = match draft {
        Some(AnswerValue::Number(value)) => Some(*value),
        _ => None,
    };
    let decimals = [Some(min), Some(max), step]
        .into_iter()
        .flatten()
        .map(decimals_of)
        .max()
        .unwrap_or(0);
    let step_attribute = step.map_or_else(|| "any".to_owned(), |s| s.to_string());
    let shown = value.map_or_else(|| "Not set".to_owned(), |v| format_number(v, decimals));
    html! {
        div.question.question-scale #{"q-" (id)} data-question=(id) data-kind="scale"
            data-required=(question.required) data-unset=(value.is_none())
            data-decimals=(decimals) {
            div.scale-head {
                (label(question, number, true))
                output.scale-value #{"value-" (id)} for={"input-" (id)} aria-hidden="true" { (shown) }
            }
            @if question.required {
                span.visually-hidden { "Required." }
            }
            div.scale {
                input.scale-input #{"input-" (id)} type="range" name=(id) min=(min) max=(max)
                    step=(step_attribute) value=[value]
                    aria-valuetext=[value.is_none().then_some("not set")]
                    aria-describedby={"hint-" (id) " error-" (id)};
                div.scale-ticks aria-hidden="true" {
                    @for tick in ticks(min, max, step) {
                        span.scale-tick { (format_number(tick, decimals)) }
                    }
                }
            }
            div.scale-foot {
                p.scale-hint #{"hint-" (id)} {
                    "Not set yet: drag the slider or use the arrow keys."
                }
                @if !question.required {
                    button.clear-answer type="button" data-clear=(id) hidden { "Clear value" }
                }
            }
            (error_slot(question))
        }
    }
}

/// The values labelled under a scale: every step when there are few, else
/// just the ends.
fn ticks(min: f64, max: f64, step: Option<f64>) -> Vec<f64> {
    if let Some(step) = step {
        let count = ((max - min) / step).floor();
        let lands_on_max = ((min + count * step) - max).abs() <= step * 1e-9;
        if count >= 1.0 && count < SCALE_TICKS_MAX as f64 && lands_on_max {
            // `count` is small and positive: the cast is exact.
            let count = count as usize;
            return (0..=count).map(|i| min + i as f64 * step).collect();
        }
    }
    vec![min, max]
}

/// How many decimals `value` shows in its shortest form (`0.25` → 2).
fn decimals_of(value: f64) -> usize {
    let text = value.to_string();
    text.split_once('.')
        .map_or(0, |(_, fraction)| fraction.len())
}

/// `value` with `decimals` decimals, which absorbs the float noise of
/// `min + i * step`.
fn format_number(value: f64, decimals: usize) -> String {
    let text = format!("{value:.decimals$}");
    match text.strip_prefix('-') {
        Some(unsigned) if unsigned.chars().all(|c| c == '0' || c == '.') => unsigned.to_owned(),
        _ => text,
    }
}

/// The sanitised HTML of an option's illustration.
pub(super) fn illustration_html(markdown_source: &str) -> PreEscaped<String> {
    PreEscaped(markdown::render(markdown_source))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_cover_small_grids_and_fall_back_to_the_ends() {
        assert_eq!(ticks(1.0, 5.0, Some(1.0)), [1.0, 2.0, 3.0, 4.0, 5.0]);
        assert_eq!(ticks(0.0, 100.0, Some(1.0)), [0.0, 100.0]);
        assert_eq!(ticks(0.0, 10.0, Some(3.0)), [0.0, 10.0]);
        assert_eq!(ticks(0.0, 1.0, None), [0.0, 1.0]);
    }

    #[test]
    fn numbers_show_the_decimals_of_the_grid() {
        assert_eq!(decimals_of(0.25), 2);
        assert_eq!(decimals_of(5.0), 0);
        assert_eq!(format_number(0.1 + 0.2, 1), "0.3");
        assert_eq!(format_number(4.0, 0), "4");
        assert_eq!(format_number(-0.0001, 2), "0.00");
        assert_eq!(format_number(-1.5, 1), "-1.5");
    }
}
