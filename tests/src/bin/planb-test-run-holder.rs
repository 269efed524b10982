//! `planb-test-run-holder <data-root> <task-id>`: a separate process that
//! takes a task's run lock as a worker does, prints `held` once it has it,
//! and keeps it until killed or until its stdin closes. For
//! `tests/tests/system/run_lock.rs`.

use std::io::{Read, Write};
use std::process::ExitCode;

use planb_core::TaskId;
use planb_projections::{DataRoot, RunLock};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [root, task] = args.as_slice() else {
        eprintln!("usage: planb-test-run-holder <data-root> <task-id>");
        return ExitCode::from(2);
    };
    let task = match TaskId::parse(task) {
        Ok(task) => task,
        Err(error) => {
            eprintln!("task-id: {error}");
            return ExitCode::from(2);
        }
    };
    let _lock = match RunLock::acquire(&DataRoot::new(root), &task) {
        Ok(lock) => lock,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::FAILURE;
        }
    };
    let mut stdout = std::io::stdout();
    if writeln!(stdout, "held")
        .and_then(|()| stdout.flush())
        .is_err()
    {
        return ExitCode::FAILURE;
    }
    let mut rest = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut rest);
    ExitCode::SUCCESS
}
