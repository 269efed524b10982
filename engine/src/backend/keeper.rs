//! Model commands run in a process group of their own, so that the program
//! and everything it starts end together: the group is killed when the call
//! times out, is cancelled, answers too much, or ends (stragglers), and,
//! through a keeper, when the process that started it dies.
//!
//! The keeper is this product's own binary, run as `KEEPER_ARG -- program
//! args…` at the head of the group: it starts the program (sharing its
//! stdin, stdout and stderr), exits with its status, and kills the whole
//! group if its parent goes away first (a `kill -9`ed worker cannot clean
//! up). Without a keeper set ([`keep_commands_with`]), the program heads its
//! group itself: everything but the parent's death is still covered.

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use rustix::process::{Pid, Signal};

/// The argument that makes the binary a keeper.
pub const KEEPER_ARG: &str = "model-keeper";

/// How often the keeper looks at its program and its parent.
const KEEPER_POLL: Duration = Duration::from_millis(50);

static KEEPER: OnceLock<PathBuf> = OnceLock::new();

/// The program this process runs, to start again (a task worker, a
/// keeper, the demo's server): `/proc/self/exe` where there is one, which
/// names the running program even once its file was replaced or removed
/// (planb upgraded while a server runs); else the path it was started as.
pub fn this_program() -> std::io::Result<PathBuf> {
    let running = PathBuf::from("/proc/self/exe");
    if running.exists() {
        Ok(running)
    } else {
        std::env::current_exe()
    }
}

/// Model commands of this process start under `binary KEEPER_ARG -- …`.
pub fn keep_commands_with(binary: PathBuf) {
    let _ = KEEPER.set(binary);
}

/// The program and arguments to start for `argv`.
pub(crate) fn launch(argv: &[String]) -> (PathBuf, Vec<String>) {
    match KEEPER.get() {
        Some(binary) => {
            let mut args = vec![KEEPER_ARG.to_owned(), "--".to_owned()];
            args.extend(argv.iter().cloned());
            (binary.clone(), args)
        }
        None => (
            PathBuf::from(&argv[0]),
            argv.iter().skip(1).cloned().collect(),
        ),
    }
}

/// Kills the process group `leader` heads when dropped.
pub(crate) struct GroupKill(Option<Pid>);

impl GroupKill {
    pub(crate) fn new(leader: Option<u32>) -> GroupKill {
        GroupKill(leader.and_then(|pid| Pid::from_raw(i32::try_from(pid).ok()?)))
    }

    /// Kills the group now (what is still in it).
    pub(crate) fn kill(&self) {
        if let Some(group) = self.0 {
            let _ = rustix::process::kill_process_group(group, Signal::KILL);
        }
    }
}

impl Drop for GroupKill {
    fn drop(&mut self) {
        if let Some(group) = self.0 {
            // Gone already is fine.
            let _ = rustix::process::kill_process_group(group, Signal::KILL);
        }
    }
}

/// The keeper's life: runs `command`, returns its exit code, and kills its
/// own group (the program's) if its parent dies first.
pub fn keeper_main(command: &[String]) -> i32 {
    let Some((program, args)) = command.split_first() else {
        eprintln!("{KEEPER_ARG}: no program given");
        return 2;
    };
    let parent = std::os::unix::process::parent_id();
    let child = match std::process::Command::new(program).args(args).spawn() {
        Ok(child) => child,
        Err(e) => {
            eprintln!("model command {program:?} could not start: {e}");
            return 127;
        }
    };
    // The program's end is seen at once; the parent is looked at between.
    let (ended, status) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut child = child;
        let _ = ended.send(child.wait());
    });
    loop {
        match status.recv_timeout(KEEPER_POLL) {
            Ok(Ok(status)) => {
                return status
                    .code()
                    .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
            }
            Ok(Err(e)) => {
                eprintln!("{KEEPER_ARG}: cannot wait for {program:?}: {e}");
                return 125;
            }
            Err(_) => {}
        }
        if std::os::unix::process::parent_id() != parent {
            // The group: this keeper, the program and what it started.
            let _ = rustix::process::kill_current_process_group(Signal::KILL);
            return 137;
        }
    }
}
