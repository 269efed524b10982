//! The command line's front door: what `planb-mcp <command>` does for a
//! person (`check`, `rebuild`, `accept-loss`, `export`, `import`, `log`,
//! `plan …`, `team …`, `demo`) and the detached task worker
//! (`planb-mcp worker`). Each command parses its input, calls planb-app or
//! the storage crates, and draws its answer as text on the writer it is
//! given; nothing here decides what a run, a plan or a task does.
//!
//! The binary that carries these commands is the MCP server's; it prints
//! on stdout only when running one of them, never while serving.

pub mod admin;
pub mod demo;
pub mod plan;
mod progress;
pub mod team;
pub mod worker;

pub use progress::stdout_is_live;
