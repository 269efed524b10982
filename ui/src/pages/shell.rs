//! The document around every page: head, top bar, lightbox, and the simple
//! [`message_page`].
//!
//! Everything the page loads is one of the embedded assets; nothing is inline
//! (no `<script>` body, no `style=` attribute), so the strict
//! [`CONTENT_SECURITY_POLICY`](super::CONTENT_SECURITY_POLICY) holds.

use maud::{DOCTYPE, Markup, html};

use super::assets::{
    FAVICON, FORM_CSS, FORM_JS, HIGHLIGHT_DARK_CSS, HIGHLIGHT_JS, HIGHLIGHT_LIGHT_CSS, MARKDOWN_JS,
    MERMAID_JS,
};

/// Which scripts beyond `form.js` a page needs. Mermaid alone is several
/// megabytes of script to parse, so it is only loaded for pages with a
/// diagram, and highlight.js only for pages with a fenced code block.
#[derive(Clone, Copy, Default, Debug)]
pub(super) struct Libraries {
    /// `markdown.js` and the diagram lightbox: the page shows Markdown.
    pub(super) markdown: bool,
    pub(super) highlight: bool,
    pub(super) mermaid: bool,
}

impl Libraries {
    /// What the rendered Markdown fragments call for.
    pub(super) fn needed_by<'a>(fragments: impl IntoIterator<Item = &'a str>) -> Self {
        let mut libraries = Libraries::default();
        for html in fragments {
            libraries.markdown = true;
            libraries.highlight |= html.contains("<code class=\"language-");
            libraries.mermaid |= html.contains("<pre class=\"mermaid\">");
        }
        libraries
    }
}

/// A complete HTML document with the shared head and top bar.
pub(super) fn document(title: &str, libraries: Libraries, body: Markup) -> Markup {
    document_with(
        title,
        libraries,
        body,
        "planb · answers go only to the agent running on this computer",
    )
}

/// [`document`] with its own footer line.
pub(super) fn document_with(
    title: &str,
    libraries: Libraries,
    body: Markup,
    footer: &str,
) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="color-scheme" content="light dark";
                meta name="referrer" content="no-referrer";
                meta name="robots" content="noindex, nofollow";
                title { (title) " · planb" }
                link rel="icon" type="image/svg+xml" href=(FAVICON);
                link rel="stylesheet" href=(FORM_CSS);
                @if libraries.highlight {
                    // The script switches `media` when the person picks a
                    // theme; the defaults follow the system.
                    link #hljs-light rel="stylesheet" href=(HIGHLIGHT_LIGHT_CSS)
                        media="(prefers-color-scheme: light)";
                    link #hljs-dark rel="stylesheet" href=(HIGHLIGHT_DARK_CSS)
                        media="(prefers-color-scheme: dark)";
                }
                // Not deferred: it applies the remembered theme before the
                // first paint. The deferred scripts run in this order once
                // the document is parsed, markdown.js after its libraries.
                script src=(FORM_JS) {}
                @if libraries.highlight {
                    script src=(HIGHLIGHT_JS) defer {}
                }
                @if libraries.mermaid {
                    script src=(MERMAID_JS) defer {}
                }
                @if libraries.markdown {
                    script src=(MARKDOWN_JS) defer {}
                }
            }
            body {
                a.skip-link href="#main" { "Skip to content" }
                div.shell {
                    (top_bar())
                    (body)
                    footer.page-footer { (footer) }
                }
                @if libraries.markdown {
                    (lightbox())
                }
            }
        }
    }
}

fn top_bar() -> Markup {
    html! {
        header.topbar {
            div.brand {
                (logo())
                span.brand-name { "planb" }
            }
            button #theme-toggle .icon-button type="button" aria-label="Dark theme"
                aria-pressed="false" title="Toggle dark theme" {
                (sun_icon())
                (moon_icon())
            }
        }
    }
}

fn lightbox() -> Markup {
    html! {
        dialog #lightbox .lightbox aria-label="Diagram" {
            div.lightbox-frame {
                button.lightbox-close type="button" aria-label="Close diagram" { "×" }
                div.lightbox-content {}
            }
        }
    }
}

/// A page that only says something: the form was already answered, is
/// unknown, or has closed.
pub fn message_page(title: &str, message: &str) -> Markup {
    message_page_with(title, message, html! {})
}

/// A [`message_page`] with more below the message.
pub(super) fn message_page_with(title: &str, message: &str, more: Markup) -> Markup {
    let body = html! {
        main #main .card .message-card {
            div.message-icon aria-hidden="true" { (info_icon()) }
            h1.message-title { (title) }
            p.message-text { (message) }
            (more)
        }
    };
    document(title, Libraries::default(), body)
}

pub(super) fn logo() -> Markup {
    html! {
        svg.logo viewBox="0 0 32 32" aria-hidden="true" focusable="false" {
            rect.logo-bg width="32" height="32" rx="8" {}
            path.logo-main d="M11 25V17a5 5 0 0 1 5-5h6" {}
            path.logo-alt d="M11 17V7" {}
            circle.logo-main-dot cx="11" cy="25" r="2.6" {}
            circle.logo-alt-dot cx="11" cy="7" r="2.6" {}
            circle.logo-main-dot cx="22" cy="12" r="2.6" {}
        }
    }
}

fn sun_icon() -> Markup {
    html! {
        svg.icon.icon-sun viewBox="0 0 24 24" aria-hidden="true" focusable="false" {
            circle cx="12" cy="12" r="4" {}
            path d="M12 2v2M12 20v2M4.93 4.93l1.41 1.41M17.66 17.66l1.41 1.41M2 12h2M20 12h2M4.93 19.07l1.41-1.41M17.66 6.34l1.41-1.41" {}
        }
    }
}

fn moon_icon() -> Markup {
    html! {
        svg.icon.icon-moon viewBox="0 0 24 24" aria-hidden="true" focusable="false" {
            path d="M21 12.8A9 9 0 1 1 11.2 3a7 7 0 0 0 9.8 9.8z" {}
        }
    }
}

pub(super) fn lock_icon() -> Markup {
    html! {
        svg.icon.icon-inline viewBox="0 0 24 24" aria-hidden="true" focusable="false" {
            rect x="4" y="11" width="16" height="10" rx="2" {}
            path d="M8 11V7a4 4 0 0 1 8 0v4" {}
        }
    }
}

pub(super) fn check_icon() -> Markup {
    html! {
        svg.icon viewBox="0 0 24 24" aria-hidden="true" focusable="false" {
            path d="M5 12.5l4.5 4.5L19 7.5" {}
        }
    }
}

fn info_icon() -> Markup {
    html! {
        svg.icon viewBox="0 0 24 24" aria-hidden="true" focusable="false" {
            circle cx="12" cy="12" r="9" {}
            path d="M12 11v6M12 7.5v.01" {}
        }
    }
}
