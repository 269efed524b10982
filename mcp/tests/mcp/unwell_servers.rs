//! Downstream servers that misbehave, through the real binary with a real
//! MCP client: one that never answers `initialize` costs only the first
//! call of a process its start limit, and one that hangs on a call is
//! stopped and started again for the next. The servers are
//! `planb-test-mcp-server` processes, started by planb over stdio.

use planb_tests::plans::step;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::{Server, UrlAnswer, call, start};
use serde_json::{Value, json};

/// The `planb-test-mcp-server` helper, built on first use: a test run of
/// planb-mcp does not build another package's binaries.
fn test_server() -> PathBuf {
    static BUILT: std::sync::Once = std::sync::Once::new();
    BUILT.call_once(|| {
        let status = planb_tests::process::cargo(env!("CARGO"))
            .args([
                "build",
                "-p",
                "planb-tests",
                "--bin",
                "planb-test-mcp-server",
            ])
            .status()
            .expect("cargo build");
        assert!(status.success(), "building planb-test-mcp-server failed");
    });
    // target/debug/deps/<this test> → target/debug
    let exe = std::env::current_exe().expect("the test's path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target dir")
        .join("planb-test-mcp-server")
}

fn write_servers(dir: &Path, servers: Value) -> PathBuf {
    let path = dir.join("servers.json");
    std::fs::write(&path, json!({ "mcpServers": servers }).to_string()).expect("servers");
    path
}

/// A tool call's structured result, and whether it is an error.
async fn structured(server: &Server, tool: &'static str, arguments: Value) -> (Value, bool) {
    let result = call(server, tool, arguments).await;
    let value = result.structured_content.clone().unwrap_or_else(|| {
        panic!(
            "no structured content: {}",
            crate::support::text_of(&result)
        )
    });
    (value, result.is_error == Some(true))
}

/// `plan_execute` of `id`: its result and how long it took.
async fn execute(server: &Server, id: &str, step_timeout: u64) -> (Value, Duration) {
    let began = Instant::now();
    let (value, _) = structured(
        server,
        "plan_execute",
        json!({"plan_id": id, "step_timeout_sec": step_timeout}),
    )
    .await;
    (value, began.elapsed())
}

/// What a failed call or run says.
fn said(value: &Value) -> String {
    value["error"]
        .as_str()
        .map_or_else(|| value.to_string(), str::to_owned)
}

/// A start limit far longer than a call that does not wait for it takes.
const START_LIMIT_SEC: u64 = 20;

#[tokio::test]
async fn a_server_that_never_answers_initialize_costs_only_the_first_call_its_start_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let flag = dir.path().join("mute");
    let servers = write_servers(
        dir.path(),
        json!({"quiet": {"command": test_server(), "args": ["--mute-while", &flag]}}),
    );
    // Another process, which the server answers, records the plan.
    let plan = json!({"title": "Quiet", "steps": [
        step("1", "quiet__echo", json!({"text": "heard"}), &[], Some("said")),
    ]});
    let id = create_elsewhere(dir.path(), &servers, &plan);

    // Now the server keeps silent.
    std::fs::write(&flag, "").expect("flag");
    let limit = START_LIMIT_SEC.to_string();
    let server = start(
        dir.path(),
        UrlAnswer::NotSupported,
        &[
            ("PLANB_SERVERS", servers.to_str().expect("path")),
            ("PLANB_SERVER_START_SEC", &limit),
        ],
    )
    .await;
    let (first, _) = execute(&server, &id, 30).await;
    let (second, took) = execute(&server, &id, 30).await;
    assert!(
        took < Duration::from_secs(START_LIMIT_SEC / 2),
        "the second call waited {took:?} (the start limit is {START_LIMIT_SEC} s): {}",
        said(&second)
    );
    let expected = format!(
        "downstream server \"quiet\" did not answer initialize within {START_LIMIT_SEC} s; retried in the background"
    );
    for value in [&first, &second] {
        assert_ne!(value["success"], true, "{value}");
        assert!(said(value).contains(&expected), "{value}");
    }
    // A plan made now is refused at once too, naming the server.
    let began = Instant::now();
    let (refused, is_error) = structured(
        &server,
        "plan_create",
        json!({"title": "Again", "steps": [step("1", "quiet__echo", json!({"text": "x"}), &[], None)]}),
    )
    .await;
    assert!(is_error, "{refused}");
    assert!(said(&refused).contains(&expected), "{refused}");
    assert!(began.elapsed() < Duration::from_secs(START_LIMIT_SEC / 2));

    // Once it answers, the next calls use it.
    std::fs::remove_file(&flag).expect("unflag");
    let deadline = Instant::now() + Duration::from_secs(3 * START_LIMIT_SEC);
    loop {
        let (ran, _) = execute(&server, &id, 30).await;
        if ran["success"] == true {
            assert_eq!(ran["results"]["said"], "heard", "{ran}");
            break;
        }
        assert!(said(&ran).contains(&expected), "{ran}");
        assert!(Instant::now() < deadline, "never used again: {ran}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    server.client.cancel().await.expect("close");
}

/// Records `plan` with a `plan create` of its own process; returns its id.
fn create_elsewhere(dir: &Path, servers: &Path, plan: &Value) -> String {
    let file = dir.join("plan.json");
    std::fs::write(&file, plan.to_string()).expect("plan file");
    let output = crate::support::planb(
        dir,
        &[
            "plan",
            "--servers",
            servers.to_str().expect("path"),
            "create",
            file.to_str().expect("path"),
        ],
    );
    let out = crate::support::all_output(&output);
    assert!(output.status.success(), "{out}");
    out.lines()
        .find_map(|l| l.strip_prefix("Plan saved: "))
        .unwrap_or_else(|| panic!("no plan id: {out}"))
        .trim()
        .to_owned()
}

/// Whether process `pid` has ended (gone, or a zombie left to be reaped).
fn ended(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

#[tokio::test]
async fn a_server_hung_on_a_call_is_stopped_with_its_group_and_started_again_for_the_next() {
    let dir = tempfile::tempdir().expect("tempdir");
    let child_pid = dir.path().join("child-pid");
    let servers = write_servers(
        dir.path(),
        json!({
            "stuck": {"command": test_server(), "args": ["--child-pid", &child_pid]},
            "slow": {"command": crate::support::downstream_binary(), "args": ["slow", "sleep"]},
        }),
    );
    let server = start(
        dir.path(),
        UrlAnswer::NotSupported,
        &[("PLANB_SERVERS", servers.to_str().expect("path"))],
    )
    .await;
    let create = |title: &str, tool: &str| {
        let args = json!({"ms": 60_000});
        json!({"title": title, "steps": [step("1", tool, args, &[], Some("out"))]})
    };
    let mut ids = Vec::new();
    for (title, tool) in [
        ("Pid", "stuck__pid"),
        ("Hang", "stuck__hang"),
        ("Slow", "slow__sleep"),
    ] {
        let (created, is_error) = structured(&server, "plan_create", create(title, tool)).await;
        assert!(!is_error, "{created}");
        ids.push(created["plan_id"].as_str().expect("plan_id").to_owned());
    }
    let (pid, hang, slow) = (&ids[0], &ids[1], &ids[2]);
    let (ran, _) = execute(&server, pid, 30).await;
    assert_eq!(ran["success"], true, "{ran}");
    let first_pid = ran["results"]["out"].to_string();
    let first_child = std::fs::read_to_string(&child_pid).expect("child pid");

    let (hung, _) = execute(&server, hang, 2).await;
    assert_eq!(hung["success"], false, "{hung}");
    // The next call is answered by a new process, not left to time out.
    let (ran, _) = execute(&server, pid, 10).await;
    assert_eq!(ran["success"], true, "{ran}");
    assert_ne!(ran["results"]["out"].to_string(), first_pid, "{ran}");
    let error = said(&hung);
    assert!(error.contains("did not answer within 2 s"), "{error}");
    assert!(
        error.contains("did not answer ping") && error.contains("started again"),
        "the error says the server was stopped: {error}"
    );
    // The old server's whole group went, the child it started included.
    let deadline = Instant::now() + planb_tests::WAIT;
    while !(ended(&first_child) && ended(first_pid.trim_matches('"'))) {
        assert!(
            Instant::now() < deadline,
            "the stopped server's group is still running"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A server that is slow but answers ping is kept.
    let (late, _) = execute(&server, slow, 1).await;
    assert_eq!(late["success"], false, "{late}");
    assert!(
        said(&late).contains("answers ping, so it is kept"),
        "{late}"
    );
    server.client.cancel().await.expect("close");
}
