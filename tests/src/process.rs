//! Child processes listening on a free loopback port: chromedriver for the
//! browser tests, and the server a package's tests put under it.
//!
//! Each [`Process`] runs in its own process group with its output in a log
//! file, and dropping it kills the whole group, so a failing test leaves
//! nothing running. A port picked free can be taken before the child binds
//! it; [`start_listening`] then tries another.

use std::fs::File;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use crate::{POLL, WAIT};

/// Ports [`start_listening`] tries before it gives up.
const START_ATTEMPTS_MAX: usize = 3;

/// A free loopback port, free when this returns (nothing holds it after).
pub fn free_port() -> u16 {
    TcpListener::bind(("127.0.0.1", 0))
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}

fn read_log(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| format!("(unreadable: {e})"))
}

/// A child process in its own process group, with its output in a log file.
/// Dropping it kills the group, which is the child and whatever it started.
#[derive(Debug)]
pub struct Process {
    child: Child,
    log_path: PathBuf,
}

impl Process {
    /// Starts `command` in a new process group, its stdout and stderr going
    /// to a new file at `log_path`.
    pub fn spawn(command: &mut Command, log_path: PathBuf) -> Process {
        let log = File::create(&log_path).expect("create a process log");
        let child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone the process log"))
            .stderr(log)
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("start {command:?}: {e}"));
        Process { child, log_path }
    }

    /// Waits until `port` accepts connections; false once the process exited
    /// (most likely the port was taken between `free_port` and its bind).
    /// Panics, showing the log, if it neither listens nor exits in [`WAIT`].
    pub async fn wait_until_listening(&mut self, port: u16) -> bool {
        let deadline = Instant::now() + WAIT;
        loop {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return true;
            }
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            assert!(
                Instant::now() < deadline,
                "{:?} did not listen on port {port} within {WAIT:?}; its log: {}",
                self.child,
                self.log()
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// Everything the process has printed so far.
    pub fn log(&self) -> String {
        read_log(&self.log_path)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // The group id is the child's pid (`process_group(0)`); whatever it
        // started, such as Chromium under chromedriver, inherited it. Killing
        // the group, not a name, ends exactly the processes this test started.
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the command `configure` builds for a free port, logging to
/// `<dir>/<name>.log`, and waits until it listens there, retrying on another
/// port if it exits first. Panics, showing the log, after
/// `START_ATTEMPTS_MAX` attempts.
pub async fn start_listening(
    dir: &Path,
    name: &str,
    configure: impl Fn(u16) -> Command,
) -> (Process, u16) {
    let log_path = dir.join(format!("{name}.log"));
    for _ in 0..START_ATTEMPTS_MAX {
        let port = free_port();
        let mut process = Process::spawn(&mut configure(port), log_path.clone());
        if process.wait_until_listening(port).await {
            return (process, port);
        }
    }
    panic!(
        "{name} did not start in {START_ATTEMPTS_MAX} attempts; its log: {}",
        read_log(&log_path)
    );
}

/// `cargo` (the one running this test or bench) as a child command, without
/// the variables cargo sets for the running crate (`CARGO_PKG_*`,
/// `CARGO_MANIFEST_*`, …). Some build scripts (ring's) are rerun when those
/// differ from the last build, so a nested `cargo build` that kept them would
/// rebuild them and everything above them.
pub fn cargo(cargo: &str) -> Command {
    let mut command = Command::new(cargo);
    for (name, _) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        if name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_MANIFEST_")
            || name.starts_with("CARGO_BIN_")
            || matches!(
                name,
                "CARGO_CRATE_NAME" | "CARGO_PRIMARY_PACKAGE" | "CARGO_TARGET_TMPDIR" | "OUT_DIR"
            )
        {
            command.env_remove(name);
        }
    }
    command
}

/// planb-mcp's `downstream` example MCP server (a small one that tests start
/// as a real downstream server), built on first use with `cargo` (the
/// caller's `env!("CARGO")`): a test run of one file does not build
/// examples.
pub fn downstream_binary(cargo_path: &str) -> PathBuf {
    static BUILT: std::sync::Once = std::sync::Once::new();
    BUILT.call_once(|| {
        let status = cargo(cargo_path)
            .args(["build", "-p", "planb-mcp", "--example", "downstream"])
            .status()
            .expect("cargo build");
        assert!(status.success(), "building the downstream example failed");
    });
    target_dir().join("examples").join("downstream")
}

/// The target directory (`target/debug`) the running test was built in.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    // target/debug/deps/<test>
    exe.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .expect("target dir")
}
