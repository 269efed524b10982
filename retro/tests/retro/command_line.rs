//! `planb-retro`'s command line, through the real binary: help and version
//! print and exit, an unknown argument is refused with the usage (nothing is
//! served), and `--data-dir`/`--port` choose what is served where.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn retro() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_planb-retro"));
    command
        .env_remove("PORT")
        .env_remove("PLANB_MCP_DATA_DIR")
        .env_remove("BROWSER_PLAN_DATA_DIR");
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

/// GETs `path` from a `planb-retro` on `port`, waiting for it to listen.
fn get(port: u16, path: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            stream
                .write_all(
                    format!(
                        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
                    )
                    .as_bytes(),
                )
                .expect("request");
            let mut page = String::new();
            stream.read_to_string(&mut page).expect("response");
            return page;
        }
        assert!(Instant::now() < deadline, "nothing served on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A data root at `dir` holding one task whose prompt is `prompt`.
fn root_with_task(dir: &std::path::Path, prompt: &str) -> planb_core::TaskId {
    use planb_core::{Command, TaskId, Timestamp};
    use planb_projections::{DataRoot, FixedEnvironment, Store};
    let root = DataRoot::new(dir);
    let env = std::sync::Arc::new(FixedEnvironment::new(Timestamp(1_700_000_000_000), 1_000));
    let (store, _) = Store::open(root, env).expect("open store");
    let task = TaskId::from_uuid(uuid::Uuid::new_v4());
    let pipeline = planb_core::pipelines::project_plan();
    store
        .execute(Command::CreateTask {
            task,
            pipeline: pipeline.name().into(),
            pipeline_version: pipeline.version(),
            prompt: prompt.into(),
            speed: "fast".into(),
            target: "build_plan".into(),
            model_profile: None,
            client_request_id: None,
            project_path: None,
        })
        .expect("create");
    task
}

/// Without `--data-dir`, the replay reads the root `planb-mcp` writes to
/// under the same environment: `PLANB_MCP_DATA_DIR`, else a forerunner's
/// `BROWSER_PLAN_DATA_DIR`, else `~/.planb-mcp`.
#[test]
fn without_a_data_dir_the_replay_reads_the_root_planb_mcp_writes() {
    let home = tempfile::tempdir().expect("tempdir");
    let chosen = tempfile::tempdir().expect("tempdir");
    let other = tempfile::tempdir().expect("tempdir");
    let home_root = home.path().join(".planb-mcp");
    let cases: [(&[(&str, &std::path::Path)], &std::path::Path); 3] = [
        (
            &[
                ("PLANB_MCP_DATA_DIR", chosen.path()),
                ("BROWSER_PLAN_DATA_DIR", other.path()),
            ],
            chosen.path(),
        ),
        (&[("BROWSER_PLAN_DATA_DIR", chosen.path())], chosen.path()),
        (&[], &home_root),
    ];
    for (n, (vars, served)) in cases.into_iter().enumerate() {
        let prompt = format!("The root of case {n}");
        root_with_task(served, &prompt);
        let port = planb_tests::process::free_port();
        let mut command = retro();
        command.env("HOME", home.path());
        for (name, value) in vars {
            command.env(name, value);
        }
        let mut child = command
            .args(["--port", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        let page = get(port, "/");
        let _ = child.kill();
        let _ = child.wait();
        assert!(page.contains(&prompt), "case {n} ({vars:?}): {page}");
    }
}

#[test]
fn with_prompts_redacted_no_page_shows_a_task_s_prompt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let task = root_with_task(dir.path(), "Secret merger of Acme and Globex");
    for (redact, shown) in [("1", false), ("0", true)] {
        let port = planb_tests::process::free_port();
        let mut child = retro()
            .args(["--data-dir", dir.path().to_str().expect("utf8")])
            .args(["--port", &port.to_string()])
            .env("PLANB_REDACT_PROMPTS", redact)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        for path in ["/".to_owned(), format!("/tasks/{task}")] {
            let page = get(port, &path);
            assert!(page.starts_with("HTTP/1.1 200"), "{path}: {page}");
            assert_eq!(
                page.contains("Secret merger"),
                shown,
                "{path} (redact={redact})"
            );
        }
        let _ = child.kill();
        let _ = child.wait();
    }
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
