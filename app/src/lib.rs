//! `planb-app`: the application layer every front door calls (the MCP
//! tools, the `plan` command line, the detached worker): execution plans
//! (find, create, list, import), the worker's entry and the end of a
//! process's own runs at exit, the `PLANB_*` run settings and the error
//! codes. Plain data in and out; the JSON shapes and wording of the tools
//! stay with the front doors.

pub mod asks;
pub mod error;
pub mod import;
pub mod launch;
pub mod named;
pub mod plans;
pub mod replan;
pub mod runs;
pub mod sessions;
pub mod settings;
pub mod store;
pub mod tasks;
pub mod team;
pub mod worker;

pub use error::{Error, ErrorCode};
