//! `planb-mcp` run by hand: at a terminal it says what it is and what to
//! run, and serves all the same; a first word that is neither a command nor
//! a program is refused with the same words (with or without `--`), while
//! a real submit command still serves.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{UrlAnswer, new_session, planb, start_with};

#[test]
fn a_word_that_is_neither_a_command_nor_a_program_is_refused_with_what_to_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    for args in [&["retro"][..], &["--", "retro"]] {
        let output = planb(dir.path(), args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(output.stdout.is_empty(), "stdout belongs to JSON-RPC");
        let said = String::from_utf8_lossy(&output.stderr);
        for words in [
            "`retro` is neither",
            "planb-mcp demo",
            "planb-retro",
            "--help",
        ] {
            assert!(said.contains(words), "{args:?}: {said}");
        }
    }
}

#[tokio::test]
async fn a_submit_command_that_is_a_program_still_serves() {
    let dir = tempfile::tempdir().expect("tempdir");
    for args in [&["true"][..], &["--", "cat"]] {
        let server = start_with(dir.path(), UrlAnswer::NotSupported, None, &[], args).await;
        assert!(!new_session(&server).await.is_empty());
        server.client.cancel().await.expect("shutdown");
    }
}

#[test]
fn at_a_terminal_it_says_what_it_is_and_serves_until_ctrl_d() {
    let dir = tempfile::tempdir().expect("tempdir");
    let command = format!(
        "{} --data-dir {}",
        env!("CARGO_BIN_EXE_planb-mcp"),
        dir.path().display()
    );
    // `script` gives the server a terminal; what it writes comes back on
    // script's stdout, and what is written to script's stdin is typed.
    let mut script = Command::new("script")
        .args(["-q", "-e", "-c", &command, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("script (util-linux)");
    let mut stdout = script.stdout.take().expect("stdout");
    let seen = std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = stdout.read_to_end(&mut text);
        String::from_utf8_lossy(&text).into_owned()
    });
    std::thread::sleep(Duration::from_millis(500));
    let mut typing = script.stdin.take().expect("stdin");
    typing.write_all(b"\x04").expect("Ctrl-D");
    let deadline = Instant::now() + Duration::from_secs(30);
    while script.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = script.kill();
            panic!("planb-mcp did not end at Ctrl-D");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(typing);
    let said = seen.join().expect("reader");
    for words in [
        "planb-mcp is an MCP server",
        "planb-mcp demo",
        "planb-retro",
        "Ctrl-D",
    ] {
        assert!(said.contains(words), "{said}");
    }
}
