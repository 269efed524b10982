//! `planb-app`: the application layer every front door calls (the MCP
//! tools, the `plan` command line, the forms, the detached worker) through
//! one handle, [`App`]: sessions, asks, named plans, tasks, execution plans
//! and their runs, the worker's entry and the end of a process's own runs
//! at exit, the `PLANB_*` run settings and the error codes. Plain data in
//! and out; the JSON shapes and wording of the tools stay with the front
//! doors.

pub mod asks;
pub mod error;
pub mod execution;
mod handle;
pub mod import;
pub mod launch;
pub mod models;
pub mod named;
pub mod plans;
pub mod replan;
pub mod runs;
pub mod sessions;
pub mod settings;
mod shared;
pub mod store;
pub mod tasks;
pub mod team;
pub mod worker;

pub use error::{Error, ErrorCode};
pub use handle::App;

/// Ends the engine thread (and the downstream servers it holds), waiting a
/// short while; call it once, last, as the process exits.
pub fn shutdown() {
    planb_engine::runtime::shutdown();
}
