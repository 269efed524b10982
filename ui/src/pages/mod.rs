//! The browser pages of `ask_user`: the form, the message pages, and the
//! static assets they load.
//!
//! Pages are rendered on the server with maud; all agent-written Markdown
//! goes through [`crate::markdown::render`] first. The pages talk to the
//! callback server only through relative URLs: `POST /draft` and
//! `POST /submit` with `{sid, answers}`, and `GET /assets/…` for the files
//! [`asset`] serves.
//!
//! **Invariant**: a page holds no inline script and no `style` attribute,
//! and loads nothing from another origin, so it works under
//! [`CONTENT_SECURITY_POLICY`] and fully offline. Data the script needs lives
//! in `data-*` attributes.

mod assets;
mod dag_graph;
mod diff;
mod form;
mod question;
pub mod report;
mod retro;
mod retro_entry;
mod retro_frame;
mod retro_index;
mod retro_named;
mod retro_task;
pub mod review;
pub use retro_entry::EntryCache;
mod shell;

pub use assets::{ASSETS_PREFIX, Asset, asset, asset_paths};
pub use form::{DEFAULT_INTRO_TITLE, form_page};
pub use retro::{
    ENTRIES_WINDOW, EntriesBeyond, TeamLine, retro_diff_page, retro_entries_after,
    retro_entries_fragment, retro_message_page, retro_plan_page, retro_session_page,
    retro_state_fragment,
};
pub use retro_frame::{RetroFilter, TeamIndex};
pub use retro_index::retro_index_page;
pub use retro_named::{NAMED_EVENTS_SHOWN, retro_named_page};
pub use retro_task::{
    ArtifactVersion, CallEnd, NotShown, PlanCall, PlanStepView, PromptView, RUNS_SHOWN,
    RevisionLink, StepView, Steps, TaskView, redact_prompts, retro_plan_step_page, retro_step_page,
    retro_task_page,
};
pub use review::{ReviewView, review_page};
pub use shell::message_page;

/// The Content-Security-Policy header value to send with every page.
///
/// Scripts, styles, fonts and fetches are limited to the page's own origin;
/// no inline script, no eval, no inline style, no framing, no `<base>`, and
/// forms may only post back. Mermaid's diagrams carry a `<style>` element
/// and `style` attributes; the form's script moves those into constructed
/// stylesheets and CSSOM properties, which this policy does not restrict,
/// so `'unsafe-inline'` is not needed.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; font-src 'self'; \
     base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// The headers every response of planb's local servers carries (the form and
/// review server in `planb-mcp`, and `planb-retro`), as (name, value).
pub const SECURITY_HEADERS: [(&str, &str); 5] = [
    ("cache-control", "no-store"),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("content-security-policy", CONTENT_SECURITY_POLICY),
    ("x-frame-options", "DENY"),
];
