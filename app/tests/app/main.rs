//! planb-app's tests in process: a real store in a temporary data root,
//! real downstream MCP servers and a real OpenAI-compatible model server,
//! every answer read back as plain data. One test binary with a module per
//! subject.

mod asks;
mod execute;
mod plans;
mod replan;
mod runs;
mod sessions;
mod task_records;
mod tasks;
