//! Opening the person's default browser, or saying where to go when we must not.

use std::process::{Command, Stdio};

/// Opens `url` in the default browser unless `no_open`. When no browser was
/// opened (`no_open`, no opener, or the opener failed) a plain stderr line
/// `opening browser directly: <url>` tells a person on a headless or SSH
/// machine where to go; it is printed whatever the log level, because it is
/// the one line they need. Returns whether an opener was launched.
pub fn open(url: &str, no_open: bool) -> bool {
    if no_open {
        tell(url, "ASK_NO_OPEN is set");
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
            // Reap the opener in the background so it leaves no zombie; an
            // opener that fails (xdg-open with no desktop) opened nothing.
            let url = url.to_owned();
            std::thread::spawn(move || match child.wait() {
                Ok(status) if status.success() => {}
                Ok(status) => tell(&url, &format!("the browser opener failed ({status})")),
                Err(error) => tell(&url, &format!("the browser opener failed ({error})")),
            });
            true
        }
        Err(error) => {
            tell(url, &format!("could not launch a browser ({error})"));
            false
        }
    }
}

/// The line a person reads when no browser opened: plain, no log prefix.
fn tell(url: &str, why: &str) {
    eprintln!("opening browser directly: {url} ({why}; open it by hand)");
}
