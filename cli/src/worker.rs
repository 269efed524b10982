//! `planb-mcp worker <task>`: one run of a task, in a process of its own.

use std::path::Path;
use std::process::ExitCode;

use planb_app::launch::Start;
use planb_app::plans::ServersSource;
use planb_projections::DataRoot;

/// Runs one run of the task, then exits; why it could not run is its exit
/// status ([`planb_app::ErrorCode::exit_status`]) and a line on its stderr,
/// the task's `worker.log`.
pub fn main(
    root: &Path,
    servers: &ServersSource,
    task: &str,
    runs_seen: Option<usize>,
    start: Start,
) -> ExitCode {
    // A run may outlive every server on the root: its worker ships too,
    // when it can take the shipper's role.
    let _team = planb_app::team::start_shipping(DataRoot::new(root));
    match planb_app::worker::run(root, servers, task, runs_seen, start) {
        Ok(ended) => {
            eprintln!(
                "task {task}: run {} ended {:?}{}",
                ended.run,
                ended.outcome,
                ended.reason.map(|r| format!(" ({r})")).unwrap_or_default()
            );
            ExitCode::SUCCESS
        }
        Err(failure) => {
            eprintln!("task {task}: {failure}");
            ExitCode::from(failure.code.exit_status())
        }
    }
}
