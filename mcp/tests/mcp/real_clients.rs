//! planb driven by the MCP clients people use, installed by `scripts/test`
//! into `clients/` at pinned versions: Claude Code's `mcp` commands, the MCP
//! Inspector's CLI and the official MCP Python SDK.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

fn clients() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients")
}

/// A client program from `clients/`, or a failure that says how to get it.
fn client(relative: &str) -> PathBuf {
    let path = clients().join(relative);
    assert!(
        path.exists(),
        "{} is missing: run scripts/test, which installs the MCP clients the tests drive \
         (npm ci --prefix clients; python3 -m venv clients/.venv; \
         clients/.venv/bin/pip install -r clients/requirements.txt)",
        path.display()
    );
    path
}

fn planb() -> &'static str {
    env!("CARGO_BIN_EXE_planb-mcp")
}

fn text(output: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Claude Code, as a new user runs it: `claude mcp add --scope user` in one
/// directory, `claude mcp list` in another project. Its health check needs
/// no login. Every stderr line of a server lands in Claude Code's MCP log as
/// an error, so the log must hold none.
#[test]
#[ignore = "slow: drives the pinned MCP clients; scripts/test runs it"]
fn claude_code_lists_planb_connected_from_another_project_with_a_clean_log() {
    let claude = client("node_modules/.bin/claude");
    let home = tempfile::tempdir().expect("home");
    let data = tempfile::tempdir().expect("data root");
    let checkout = home.path().join("checkout");
    let project = home.path().join("project");
    std::fs::create_dir_all(&checkout).expect("checkout");
    std::fs::create_dir_all(&project).expect("project");
    let run = |dir: &Path, args: &[&str]| {
        Command::new(&claude)
            .args(args)
            .current_dir(dir)
            .env("HOME", home.path())
            .env("PLANB_MCP_DATA_DIR", data.path())
            .env("DISABLE_TELEMETRY", "1")
            .env("DISABLE_ERROR_REPORTING", "1")
            .env("DISABLE_AUTOUPDATER", "1")
            .env_remove("PLANB_LOG")
            .env_remove("RUST_LOG")
            .env_remove("ANTHROPIC_API_KEY")
            .stdin(Stdio::null())
            .output()
            .expect("run claude")
    };
    let added = run(
        &checkout,
        &["mcp", "add", "--scope", "user", "planb", "--", planb()],
    );
    assert!(added.status.success(), "{}", text(&added));
    let listed = run(&project, &["mcp", "list"]);
    assert!(listed.status.success(), "{}", text(&listed));
    let stdout = String::from_utf8_lossy(&listed.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("planb:"))
        .unwrap_or_else(|| panic!("planb not listed from another project: {}", text(&listed)));
    assert!(line.contains("Connected"), "{line}");
    assert!(
        !text(&listed).contains("unknown format"),
        "schema warnings: {}",
        text(&listed)
    );
    // Claude Code's log of the connection: one JSON object per line.
    let logs = home.path().join(".cache/claude-cli-nodejs");
    let mut lines = Vec::new();
    for project in std::fs::read_dir(&logs).expect("Claude Code's log folder") {
        let dir = project.expect("entry").path().join("mcp-logs-planb");
        for file in std::fs::read_dir(&dir).into_iter().flatten() {
            let file = file.expect("log file").path();
            let content = std::fs::read_to_string(&file).expect("log");
            lines.extend(content.lines().map(str::to_owned));
        }
    }
    assert!(
        lines.iter().any(|l| l.contains("Successfully connected")),
        "{lines:#?}"
    );
    let errors: Vec<&String> = lines
        .iter()
        .filter(|l| serde_json::from_str::<Value>(l).map_or(true, |v| v.get("error").is_some()))
        .collect();
    assert!(errors.is_empty(), "Claude Code logged errors: {errors:#?}");
}

/// The MCP Inspector's CLI: one planb process per call, each a new
/// connection without progress support. Titles and output schemas are
/// listed; structured results pass the Inspector's own validation; an
/// `ask_user` handed back "still open" is answered later through its link
/// (a fixed `PLANB_PORT`, so the next process serves it) and collected by
/// the next call.
#[test]
#[ignore = "slow: drives the pinned MCP clients; scripts/test runs it"]
fn the_inspector_cli_lists_the_tools_and_completes_an_ask_answered_later() {
    let inspector = client("node_modules/.bin/mcp-inspector");
    let data = tempfile::tempdir().expect("data root");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let call = |method: &str, extra: &[String]| {
        let mut command = Command::new(&inspector);
        command
            .args(["--cli", "--cwd"])
            .arg(data.path())
            .args([
                "-e",
                &format!("PLANB_MCP_DATA_DIR={}", data.path().display()),
            ])
            .args(["-e", "ASK_NO_OPEN=1"])
            .args(["-e", &format!("PLANB_PORT={port}")])
            .args(["-e", "PLANB_HAND_BACK_MS=1000"])
            .arg(planb())
            .args(["--method", method])
            .args(extra)
            .stdin(Stdio::null());
        command
    };
    let run = |mut command: Command| -> (Value, String) {
        let output = command.output().expect("run the inspector");
        assert!(
            !text(&output).contains("unknown format"),
            "schema warnings: {}",
            text(&output)
        );
        let result: Value = serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", text(&output)));
        // The CLI exits non-zero for a tool error result.
        assert_eq!(
            output.status.success(),
            result["isError"] != true,
            "{}",
            text(&output)
        );
        (result, String::from_utf8_lossy(&output.stderr).into_owned())
    };
    let done = |command: Command| run(command).0;
    let tool = |name: &str, args: &[&str]| {
        let mut extra = vec!["--tool-name".to_owned(), name.to_owned()];
        if !args.is_empty() {
            extra.push("--tool-arg".into());
            extra.extend(args.iter().map(|a| (*a).to_owned()));
        }
        call("tools/call", &extra)
    };

    let listed = done(call("tools/list", &[]));
    let tools = listed["tools"].as_array().expect("tools");
    assert_eq!(tools.len(), 27, "{listed}");
    for tool in tools {
        assert!(tool["title"].is_string(), "{tool}");
    }
    let written = done(tool(
        "write_plan",
        &["planName=auth", "content=# Auth\n- step one\n"],
    ));
    assert_eq!(
        written["structuredContent"]["planName"], "auth",
        "{written}"
    );
    let missed = done(tool(
        "edit_plan",
        &["planName=auth", "oldString=step two", "newString=x"],
    ));
    assert_eq!(missed["isError"], true, "{missed}");
    assert_eq!(
        missed["content"][0]["text"]
            .as_str()
            .map(|t| t.starts_with("oldString: not found in the plan: \"step two\"")),
        Some(true),
        "{missed}"
    );

    let created = done(tool("init_planb_session", &[]));
    let session = created["content"][0]["text"]
        .as_str()
        .and_then(|t| t.lines().next())
        .and_then(|l| l.strip_prefix("sessionId: "))
        .expect("sessionId")
        .to_owned();
    let questions = json!([{"id": "db", "kind": "text", "label": "Which database?"}]).to_string();
    let first = done(tool(
        "ask_user",
        &[
            &format!("sessionId={session}"),
            "title=Storage",
            &format!("questions={questions}"),
        ],
    ));
    let waiting = &first["structuredContent"];
    assert_eq!(waiting["status"], "waiting", "{first}");
    let url = waiting["url"].as_str().expect("url").to_owned();
    let ask = waiting["askId"].as_str().expect("askId").to_owned();
    // The process that opened the form is gone; the person answers later,
    // while the next call (a new process on the same port) waits.
    let collecting = tool("ask_user", &[&format!("askId={ask}")]);
    let collecting = std::thread::spawn(move || run(collecting));
    let (form_port, sid) = crate::support::parse_form_url(&url);
    assert_eq!(form_port, port);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let answered = runtime.block_on(async {
        for _ in 0..300 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            let response = crate::support::post_json(
                port,
                "/submit",
                &json!({"sid": sid, "answers": {"db": "SQLite"}}),
            )
            .await;
            if response.status == 200 {
                return response;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the form's link never came back");
    });
    assert_eq!(answered.json()["status"], "answered", "{}", answered.body);
    let (mut collected, stderr) = collecting.join().expect("the collecting call");
    // It waited on the link the person already had: no new page.
    assert!(
        !stderr.contains("opening browser directly"),
        "a second page was opened: {stderr}"
    );
    // A call that handed back before the answer came is repeated, as an
    // agent would.
    while collected["structuredContent"]["status"] == "waiting" {
        collected = done(tool("ask_user", &[&format!("askId={ask}")]));
    }
    assert_eq!(
        collected["structuredContent"]["status"], "answered",
        "{collected}"
    );
    assert_eq!(
        collected["content"][0]["text"], r#"{"db":"SQLite"}"#,
        "{collected}"
    );
}

/// An agent on the official MCP Python SDK, which sends no progress token,
/// with a request timeout (scaled down from the Inspector's 60 s). The
/// person answers well after that timeout; the agent keeps calling
/// `ask_user {askId}` as the "still open" results tell it, and gets the
/// answer. The SDK checks every structured result against the tool's
/// declared output schema.
#[test]
#[ignore = "slow: drives the pinned MCP clients; scripts/test runs it"]
fn the_python_sdk_without_progress_gets_an_answer_given_after_its_timeout() {
    use std::io::{BufRead, BufReader};
    let python = client(".venv/bin/python");
    let data = tempfile::tempdir().expect("data root");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/python_no_progress.py");
    let mut agent = Command::new(python)
        .arg(script)
        .arg(planb())
        .arg(data.path())
        .arg("3")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the Python agent");
    let mut lines = BufReader::new(agent.stdout.take().expect("stdout")).lines();
    let mut next = || -> Value {
        let line = lines.next().expect("a line from the agent").expect("read");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    };
    let waiting = next();
    let url = waiting["waiting"]
        .as_str()
        .expect("the form's url")
        .to_owned();
    // Longer than the agent's request timeout.
    std::thread::sleep(Duration::from_secs(4));
    let (port, sid) = crate::support::parse_form_url(&url);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    // A plain POST without Origin, as a program (or the original
    // planb-mcp's smoke test) sends it.
    let answered = runtime.block_on(crate::support::http(
        port,
        "POST",
        "/submit",
        &[
            ("Host", format!("127.0.0.1:{port}")),
            ("Content-Type", "application/json".into()),
        ],
        &json!({"sid": sid, "answers": {"db": "SQLite"}}).to_string(),
    ));
    assert_eq!(answered.status, 200, "{}", answered.body);
    let result = next();
    assert_eq!(result["answers"], json!({"db": "SQLite"}), "{result}");
    assert_eq!(result["structured"]["status"], "answered", "{result}");
    assert!(result["calls"].as_u64().expect("calls") >= 2, "{result}");
    assert!(agent.wait().expect("the agent exits").success());
}
