//! planb-app's tests in process: a real store in a temporary data root,
//! real downstream MCP servers and a real OpenAI-compatible model server,
//! every answer read back as plain data. One test binary with a module per
//! subject.

mod approval;
mod execute;
mod handle;
mod import;
mod named;
mod plans;
mod questions;
mod replan;
mod runs;
mod sessions;
mod settings;
mod task_records;
mod tasks;
