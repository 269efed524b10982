//! [`form_page`]: the `ask_user` form as one server-rendered document.
//!
//! The page is complete without its script: every tab, question, option
//! illustration and draft value is in the HTML, and the script only moves
//! between tabs, keeps the dots and the Submit button current, saves drafts
//! and submits. The tab layout: an optional intro tab,
//! then one tab per distinct question `tab` in first-appearance order; with
//! a single tab there is no tab strip at all.

use maud::{Markup, PreEscaped, html};
use planb_core::{AnswerValue, Answers, AskSpec, Question};

use super::question::{illustration_html, illustration_id, is_answered, question_block};
use super::shell::{Libraries, check_icon, document, lock_icon};
use crate::markdown;

/// Title of the intro tab when the spec gives none.
pub const DEFAULT_INTRO_TITLE: &str = "Overview";

/// One tab of the form.
struct Tab<'a> {
    name: &'a str,
    body: TabBody<'a>,
}

enum TabBody<'a> {
    /// The rendered intro Markdown.
    Intro(String),
    /// The tab's questions with their 1-based number in the form, and the
    /// rendered illustrations of their options (empty when none has one).
    Questions {
        questions: Vec<(usize, &'a Question)>,
        illustrations: Vec<(String, String)>,
    },
}

/// The complete HTML document of the form for `spec`.
///
/// `sid` is written once, into the form's `data-sid` attribute, for the
/// script to send back with drafts and the submission. `draft`, when the
/// person already started, pre-fills every control it answers.
pub fn form_page(spec: &AskSpec, sid: &str, draft: Option<&Answers>) -> Markup {
    let tabs = tabs(spec);
    let libraries = Libraries::needed_by(tabs.iter().flat_map(|tab| {
        match &tab.body {
            TabBody::Intro(html) => vec![html.as_str()],
            TabBody::Questions { illustrations, .. } => illustrations
                .iter()
                .map(|(_, html)| html.as_str())
                .collect(),
        }
    }));
    let answer = |question: &Question| draft.and_then(|draft| draft.get(&question.id));
    let missing = |tab: &Tab<'_>| match &tab.body {
        TabBody::Intro(_) => false,
        TabBody::Questions { questions, .. } => questions
            .iter()
            .any(|(_, q)| q.required && !is_answered(q, answer(q))),
    };
    let required_total = spec.questions.iter().filter(|q| q.required).count();
    let required_answered = spec
        .questions
        .iter()
        .filter(|q| q.required && is_answered(q, answer(q)))
        .count();
    let single_tab = tabs.len() == 1;
    let body = html! {
        main #main .card {
            (form_header(spec))
            noscript {
                p.banner.banner-error { "This form needs JavaScript to save and send your answers." }
            }
            div #banner .banner role="alert" hidden {}
            form #ask-form .ask-form data-sid=(sid) novalidate autocomplete="off" {
                @if !single_tab { (tab_strip(&tabs, missing)) }
                @for (index, tab) in tabs.iter().enumerate() {
                    (panel(index, tab, single_tab, &answer))
                }
                (form_footer(required_answered, required_total, single_tab))
            }
            section #done .done hidden tabindex="-1" aria-labelledby="done-title" {
                div.done-icon aria-hidden="true" { (check_icon()) }
                h2 #done-title .done-title { "Thanks — your answers were sent" }
                p #done-text .done-text { "You can close this tab." }
            }
        }
        p.keyboard-hint aria-hidden="true" {
            @if !single_tab { kbd { "←" } " " kbd { "→" } " switch sections · " }
            kbd { "↑" } " " kbd { "↓" } " move between options · "
            kbd { "Space" } " choose"
        }
    };
    document(&spec.title, libraries, body)
}

/// The form's header: its title, and that it is for non-sensitive input.
fn form_header(spec: &AskSpec) -> Markup {
    html! {
        header.card-header {
            p.eyebrow { "Your agent is asking" }
            h1.form-title { (spec.title) }
            p.sensitive-note {
                (lock_icon())
                span {
                    strong { "For non-sensitive input only." }
                    " Please do not enter passwords, API keys, tokens or payment details."
                }
            }
        }
    }
}

/// The strip of tabs, each marked when it has unanswered required
/// questions (`missing`).
fn tab_strip(tabs: &[Tab<'_>], missing: impl Fn(&Tab<'_>) -> bool) -> Markup {
    html! {
        div.tabs role="tablist" aria-label="Sections of this form" {
            @for (index, tab) in tabs.iter().enumerate() {
                button.tab.has-missing[missing(tab)] #{"tab-" (index)} type="button" role="tab"
                    aria-selected=(index == 0) aria-controls={"panel-" (index)}
                    tabindex=(if index == 0 { "0" } else { "-1" }) {
                    span.tab-label { (tab.name) }
                    span.tab-dot aria-hidden="true" {}
                    span.tab-missing-text.visually-hidden { ", has unanswered required questions" }
                    span.tab-error-text.visually-hidden { ", has problems to fix" }
                }
            }
        }
    }
}

/// The form's footer: the progress line, the save status and the buttons.
fn form_footer(required_answered: usize, required_total: usize, single_tab: bool) -> Markup {
    html! {
        footer.form-footer {
            div.footer-status {
                span #progress .progress data-required-total=(required_total) {
                    (progress_text(required_answered, required_total))
                }
                span #save-status .save-status role="status" aria-live="polite" {}
            }
            div.footer-actions {
                button #back .btn .btn-ghost type="button" hidden { "‹ Back" }
                button #next .btn .btn-primary type="button" hidden[single_tab] { "Next ›" }
                button #submit .btn .btn-primary type="submit"
                    hidden[!single_tab] disabled[required_answered < required_total] {
                    span.btn-label { "Submit" }
                }
            }
        }
    }
}

/// The footer's progress line; the script keeps it in the same words.
fn progress_text(answered: usize, total: usize) -> String {
    if total == 0 {
        "All questions are optional".to_owned()
    } else {
        format!("{answered} of {total} required answered")
    }
}

/// The tabs of `spec` in display order, with their questions numbered in
/// that order and every Markdown fragment rendered.
fn tabs(spec: &AskSpec) -> Vec<Tab<'_>> {
    let mut tabs = Vec::new();
    if let Some(intro) = spec.intro.as_deref().filter(|i| !i.trim().is_empty()) {
        tabs.push(Tab {
            name: spec.intro_title.as_deref().unwrap_or(DEFAULT_INTRO_TITLE),
            body: TabBody::Intro(markdown::render(intro)),
        });
    }
    let mut number = 0;
    for name in spec.tabs() {
        let mut questions = Vec::new();
        let mut illustrations = Vec::new();
        for question in spec.questions.iter().filter(|q| q.tab_name() == name) {
            number += 1;
            questions.push((number, question));
            for (index, choice) in question.kind.options().iter().enumerate() {
                if let Some(markdown) = &choice.markdown {
                    let html = illustration_html(markdown).into_string();
                    illustrations.push((illustration_id(question, index), html));
                }
            }
        }
        tabs.push(Tab {
            name,
            body: TabBody::Questions {
                questions,
                illustrations,
            },
        });
    }
    tabs
}

fn panel<'a>(
    index: usize,
    tab: &Tab<'a>,
    single_tab: bool,
    answer: &dyn Fn(&Question) -> Option<&'a AnswerValue>,
) -> Markup {
    let (role, labelled_by) = if single_tab {
        (None, None)
    } else {
        (Some("tabpanel"), Some(format!("tab-{index}")))
    };
    let with_aside =
        matches!(&tab.body, TabBody::Questions { illustrations, .. } if !illustrations.is_empty());
    html! {
        section.panel.panel-with-aside[with_aside] #{"panel-" (index)} role=[role]
            aria-labelledby=[labelled_by] data-tab-name=(tab.name) hidden[index != 0] {
            @match &tab.body {
                TabBody::Intro(html) => {
                    div.md.intro tabindex="0" { (PreEscaped(html)) }
                }
                TabBody::Questions { questions, illustrations } => {
                    div.questions {
                        @for (number, question) in questions {
                            (question_block(question, *number, answer(question)))
                        }
                    }
                    @if with_aside {
                        aside.illustrations aria-label="Option details" {
                            div.illustrations-inner {
                                p.illustration-caption hidden {}
                                p.illustration-empty {
                                    "Move through the options to see their details here."
                                }
                                p.illustration-none hidden {
                                    "No details for "
                                    span.illustration-none-name {}
                                    "."
                                }
                                @for (id, html) in illustrations {
                                    div.illustration.md #(id) hidden { (PreEscaped(html)) }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
