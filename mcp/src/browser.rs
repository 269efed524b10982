//! Opening the person's default browser, or saying where to go when we must not.

use std::process::{Command, Stdio};

/// Opens `url` in the default browser unless `no_open`; either way logs a line
/// containing `opening browser directly: <url>` so a person on a headless or SSH
/// machine can open it by hand. Returns whether a browser was launched.
pub fn open(url: &str, no_open: bool) -> bool {
    if no_open {
        tracing::info!("opening browser directly: {url} (ASK_NO_OPEN is set: open it by hand)");
        return false;
    }
    tracing::info!("opening browser directly: {url}");
    let mut command = if cfg!(target_os = "macos") {
        let mut c = Command::new("open");
        c.arg(url);
        c
    } else if cfg!(windows) {
        let mut c = Command::new("cmd");
        c.args(["/C", "start", ""]).arg(url);
        c
    } else {
        let mut c = Command::new("xdg-open");
        c.arg(url);
        c
    };
    // The opener must never touch stdout: that is the JSON-RPC channel.
    let spawned = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    match spawned {
        Ok(mut child) => {
            // Reap the opener in the background so it leaves no zombie.
            std::thread::spawn(move || {
                let _ = child.wait();
            });
            true
        }
        Err(error) => {
            tracing::warn!("could not launch a browser ({error}); open {url} by hand");
            false
        }
    }
}
