//! `planb-retro`'s command line, through the real binary: help and version
//! print and exit, an unknown argument is refused with the usage (nothing is
//! served), and `--data-dir`/`--port` choose what is served where.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn retro() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_planb-retro"));
    command.env_remove("PORT").env_remove("PLANB_MCP_DATA_DIR");
    command
}

#[test]
fn help_version_and_unknown_arguments_end_before_anything_is_served() {
    let help = retro().arg("--help").output().expect("run");
    assert!(help.status.success());
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(
        text.contains("Usage: planb-retro")
            && text.contains("--data-dir")
            && text.contains("--port"),
        "{text}"
    );
    let version = retro().arg("--version").output().expect("run");
    assert!(version.status.success());
    assert!(String::from_utf8_lossy(&version.stdout).starts_with("planb-retro "));
    let refused = retro().arg("--bogus").output().expect("run");
    assert_eq!(refused.status.code(), Some(2));
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("--bogus") && said.contains("Usage"), "{said}");
}

#[test]
fn data_dir_and_port_choose_what_is_served_where() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        probe.local_addr().expect("addr").port()
    };
    let mut child = retro()
        .args(["--data-dir", dir.path().to_str().expect("utf8")])
        .args(["--port", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(60);
    let page = loop {
        if let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            stream
                .write_all(
                    format!(
                        "GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
                    )
                    .as_bytes(),
                )
                .expect("request");
            let mut page = String::new();
            stream.read_to_string(&mut page).expect("response");
            break page;
        }
        assert!(Instant::now() < deadline, "nothing served on {port}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    let _ = child.kill();
    let output = child.wait_with_output().expect("wait");
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(said.contains(&dir.path().display().to_string()), "{said}");
}
