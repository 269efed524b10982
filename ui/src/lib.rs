//! `planb-ui`: every page planb shows in a browser, rendered on the server.
//!
//! - [`pages`]: the question form, the plan review page, planb-retro's
//!   sessions index and session timeline, their shared diff model, and the
//!   assets they load (compiled in; vendored libraries with their licences).
//! - [`markdown`]: GitHub-flavoured Markdown rendered and sanitised on the
//!   server against an allow-list.
//!
//! **Architecture invariant**: renders what it is given. No IO, no log, no
//! redb, no clock: callers pass the state, timeline or view to draw, and the
//! binaries serve the HTML. It reads `planb-projections` only for its read
//! models (`Timeline`).

pub mod markdown;
pub mod pages;

#[cfg(test)]
#[allow(
    dead_code,
    reason = "shared with the integration tests, which use the rest"
)]
mod html_scan;
