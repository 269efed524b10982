//! Rebuilding beside running servers and killed half-way, and a log that
//! lost its tail, with the real binaries.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::support::{Server, UrlAnswer, all_output, call, new_session, planb, start, text_of};
use serde_json::json;

async fn save(server: &Server, session: &str, plan: &str) -> Result<PathBuf, String> {
    let result = call(
        server,
        "save_plan",
        json!({"sessionId": session, "plan": plan}),
    )
    .await;
    let text = text_of(&result);
    if result.is_error == Some(true) {
        return Err(text);
    }
    let path = text
        .lines()
        .find_map(|l| l.strip_prefix("path: "))
        .unwrap_or_else(|| panic!("no path in {text}"));
    Ok(PathBuf::from(path))
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create copy");
    for entry in std::fs::read_dir(from).expect("list") {
        let entry = entry.expect("entry");
        std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copy");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebuild_beside_running_servers_loses_no_plan_file() {
    const SAVES: usize = 40;
    let dir = tempfile::tempdir().expect("tempdir");
    let servers = [
        Arc::new(start(dir.path(), UrlAnswer::NotSupported, &[]).await),
        Arc::new(start(dir.path(), UrlAnswer::NotSupported, &[]).await),
    ];
    let mut writers = Vec::new();
    for server in &servers {
        let server = Arc::clone(server);
        writers.push(tokio::spawn(async move {
            let session = new_session(&server).await;
            let mut saved = Vec::new();
            for n in 0..SAVES {
                let content = format!("# plan {session} {n}\n");
                let path = save(&server, &session, &content).await.expect("save_plan");
                saved.push((path, content));
            }
            saved
        }));
    }
    let root = dir.path().to_path_buf();
    let rebuilds = tokio::task::spawn_blocking(move || {
        (0..6)
            .map(|_| planb(&root, &["rebuild"]))
            .collect::<Vec<_>>()
    });
    for output in rebuilds.await.expect("rebuilds") {
        assert!(output.status.success(), "{}", all_output(&output));
    }
    for writer in writers {
        for (path, content) in writer.await.expect("writer") {
            assert_eq!(
                std::fs::read_to_string(&path).ok().as_deref(),
                Some(content.as_str()),
                "{} lost or wrong after rebuilds",
                path.display()
            );
        }
    }
    let check = planb(dir.path(), &["check"]);
    assert!(check.status.success(), "{}", all_output(&check));
    for server in servers {
        if let Ok(server) = Arc::try_unwrap(server) {
            server.client.cancel().await.expect("shutdown");
        }
    }
}

#[test]
fn check_notices_a_tree_that_claims_more_than_it_holds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let plan = runtime.block_on(async {
        let server = start(dir.path(), UrlAnswer::NotSupported, &[]).await;
        let session = new_session(&server).await;
        let plan = save(&server, &session, "# one\n").await.expect("save");
        server.client.cancel().await.expect("shutdown");
        plan
    });
    let ok = planb(dir.path(), &["check"]);
    assert!(ok.status.success(), "{}", all_output(&ok));
    std::fs::remove_file(&plan).expect("lose a projected file");
    let output = planb(dir.path(), &["check"]);
    let text = all_output(&output);
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert!(text.contains("PROJECTION WRONG"), "{text}");
    assert!(
        text.contains(&format!("missing: {}", plan.display())),
        "{text}"
    );
}

#[test]
fn a_log_that_lost_its_tail_is_noticed_and_nothing_is_overwritten() {
    let dir = tempfile::tempdir().expect("tempdir");
    let backup = tempfile::tempdir().expect("backup dir");
    let log = dir.path().join("log");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");

    // Cursors 1 (session), 2 and 3 (v1, v2) are in the backup; 4 (v3) is not.
    let (session, lost_v3) = runtime.block_on(async {
        let server = start(dir.path(), UrlAnswer::NotSupported, &[]).await;
        let session = new_session(&server).await;
        save(&server, &session, "# v1\n").await.expect("v1");
        save(&server, &session, "# v2\n").await.expect("v2");
        copy_dir(&log, &backup.path().join("log"));
        let v3 = save(&server, &session, "# v3, only on the lost tail\n")
            .await
            .expect("v3");
        server.client.cancel().await.expect("shutdown");
        (session, v3)
    });
    // The disk is rolled back: the log is restored from the backup.
    std::fs::remove_dir_all(&log).expect("remove log");
    copy_dir(&backup.path().join("log"), &log);

    let output = planb(dir.path(), &["check"]);
    let text = all_output(&output);
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert!(text.contains("LOST TAIL"), "{text}");
    assert!(text.contains("events 4..=4 are missing"), "{text}");

    // A window open through what follows, refusing until the loss is accepted.
    let open_window = runtime.block_on(async {
        let server = start(dir.path(), UrlAnswer::NotSupported, &[]).await;
        let refused = save(&server, &session, "# would reuse v3\n")
            .await
            .expect_err("writing on a log that lost its tail");
        assert!(refused.contains("events 4..=4 are missing"), "{refused}");
        assert!(refused.contains("planb-mcp accept-loss"), "{refused}");
        server
    });
    assert_eq!(
        std::fs::read_to_string(&lost_v3).expect("the only copy of v3"),
        "# v3, only on the lost tail\n"
    );

    let output = planb(dir.path(), &["rebuild"]);
    assert!(!output.status.success(), "rebuild must refuse");
    assert!(all_output(&output).contains("accept-loss"));
    assert!(lost_v3.exists(), "rebuild destroyed the only copy of v3");

    let output = planb(dir.path(), &["accept-loss"]);
    let text = all_output(&output);
    assert!(output.status.success(), "{text}");
    let kept = std::fs::read_dir(dir.path())
        .expect("list root")
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("lost-"))
        })
        .expect("a lost-<time> directory");
    let kept_v3 = kept.join(lost_v3.strip_prefix(dir.path()).expect("under the root"));
    assert_eq!(
        std::fs::read_to_string(&kept_v3).expect("v3 kept aside"),
        "# v3, only on the lost tail\n"
    );

    runtime.block_on(async {
        // The window that refused writes again, without a restart.
        let path = save(&open_window, &session, "# v3 again\n")
            .await
            .expect("writes resume in the window open since before");
        assert!(path.ends_with("plans/v3.md"), "{}", path.display());
        open_window.client.cancel().await.expect("shutdown");
        let server = start(dir.path(), UrlAnswer::NotSupported, &[]).await;
        let path = save(&server, &session, "# v4\n")
            .await
            .expect("writes in a new window");
        assert!(path.ends_with("plans/v4.md"), "{}", path.display());
        server.client.cancel().await.expect("shutdown");
    });
    let check = planb(dir.path(), &["check"]);
    assert!(check.status.success(), "{}", all_output(&check));
}

#[tokio::test]
async fn a_damaged_log_still_lets_the_server_start_and_every_tool_says_why_it_cannot_work() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = start(dir.path(), UrlAnswer::NotSupported, &[]).await;
    let session = new_session(&server).await;
    for n in 1..=3 {
        save(&server, &session, &format!("# v{n}\n"))
            .await
            .expect("save");
    }
    server.client.cancel().await.expect("shutdown");
    // Damage in the first record, with valid records after it: corruption,
    // never a tail to cut.
    let segment = std::fs::read_dir(dir.path().join("log"))
        .expect("log dir")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "seg"))
        .expect("a segment file");
    let mut bytes = std::fs::read(&segment).expect("read segment");
    bytes[32 + 32 + 8] ^= 0x40;
    std::fs::write(&segment, &bytes).expect("write segment");

    // The handshake does not wait for the log; the client learns what is
    // wrong from the first tool call instead of a server that exited.
    let server = start(dir.path(), UrlAnswer::NotSupported, &[]).await;
    let tools = server.client.list_all_tools().await.expect("tools/list");
    assert!(tools.iter().any(|t| t.name == "save_plan"));
    let result = call(
        &server,
        "save_plan",
        json!({"sessionId": session, "plan": "# v4\n"}),
    )
    .await;
    assert_eq!(result.is_error, Some(true));
    let text = text_of(&result);
    assert!(text.contains("open the data root"), "{text}");
    assert!(text.contains("offset"), "{text}");
    assert!(text.contains("cursor 1"), "{text}");
    server.client.cancel().await.expect("shutdown");
    assert_eq!(
        std::fs::read(&segment).expect("read segment"),
        bytes,
        "nothing rewritten"
    );
}

/// `planb-mcp rebuild` killed with SIGKILL at points over its run:
/// after each kill the data root still checks out (`check`), a server opens
/// it and writes, and a final rebuild completes and leaves nothing of the
/// interrupted ones behind.
#[test]
fn a_rebuild_killed_at_any_point_leaves_a_root_that_checks_and_rebuilds() {
    use planb_core::{Command, SessionId, Timestamp};
    use planb_projections::{DataRoot, FixedEnvironment, Store};
    const SESSIONS: u128 = 1_500;
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let env = Arc::new(FixedEnvironment::new(Timestamp(1_780_000_000_000), 1_000));
        let (store, _) = Store::open(DataRoot::new(dir.path()), env).expect("open");
        for n in 0..SESSIONS {
            let session = SessionId::from_uuid(uuid::Uuid::from_u128(0xfeed_0000 + n));
            store
                .execute(Command::CreateSession {
                    session,
                    title: Some(format!("session {n}")),
                    intent: None,
                    project_path: None,
                })
                .expect("create");
            for v in 0..3 {
                store
                    .execute(Command::SavePlan {
                        session,
                        title: None,
                        content: format!("# plan {n} v{v}\n{}", "text ".repeat(200)),
                    })
                    .expect("save");
            }
        }
    }
    // Kill points: once the rebuild has begun its work beside the live
    // projections (`rebuild.new` exists: found by watching the data root,
    // not by timing), then at fractions of a whole rebuild's duration. What
    // each kill must leave behind does not depend on where it lands.
    let started = std::time::Instant::now();
    let whole = planb(dir.path(), &["rebuild"]);
    assert!(whole.status.success(), "{}", all_output(&whole));
    let took = started.elapsed();
    let beside = dir.path().join("rebuild.new");
    for point in 0..8u32 {
        let mut rebuild = std::process::Command::new(env!("CARGO_BIN_EXE_planb-mcp"))
            .args(["--data-dir"])
            .arg(dir.path())
            .arg("rebuild")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start rebuild");
        if point == 0 {
            while !beside.exists() && rebuild.try_wait().expect("poll").is_none() {
                std::thread::yield_now();
            }
        } else {
            std::thread::sleep(took * point / 8);
        }
        rebuild.kill().expect("kill -9");
        rebuild.wait().expect("reap");
        let check = planb(dir.path(), &["check"]);
        assert!(
            check.status.success(),
            "after a rebuild killed at point {point}: {}",
            all_output(&check)
        );
    }
    // A server opens the root and writes on it.
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let server = start(dir.path(), UrlAnswer::NotSupported, &[]).await;
        let session = new_session(&server).await;
        save(&server, &session, "# after the kills\n")
            .await
            .expect("save_plan");
        server.client.cancel().await.expect("shutdown");
    });
    let last = planb(dir.path(), &["rebuild"]);
    assert!(last.status.success(), "{}", all_output(&last));
    let check = planb(dir.path(), &["check"]);
    assert!(check.status.success(), "{}", all_output(&check));
    for leftover in ["rebuild.new", "sessions.old"] {
        assert!(
            !dir.path().join(leftover).exists(),
            "{leftover} left behind"
        );
    }
    let sessions = std::fs::read_dir(dir.path().join("sessions"))
        .expect("sessions")
        .count();
    assert_eq!(sessions as u128, SESSIONS + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_leave_descriptors_for_saving_under_a_low_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        probe.local_addr().expect("addr").port()
    };
    let port_text = port.to_string();
    let server = start(
        dir.path(),
        UrlAnswer::NotSupported,
        &[("PLANB_PORT", &port_text)],
    )
    .await;
    // 128 descriptors, as some systems and containers give a process.
    let limited = std::process::Command::new("prlimit")
        .args(["--pid", &server.pid.to_string(), "--nofile=128:128"])
        .status()
        .expect("prlimit");
    assert!(limited.success());
    let session = new_session(&server).await;
    save(&server, &session, "# first\n")
        .await
        .expect("save_plan before the connections");
    // A question opens the form server.
    let asking = crate::support::call_in_background(
        &server,
        "ask_user",
        json!({"sessionId": session, "title": "Q", "questions": [{"id": "q", "kind": "text", "label": "Q"}]}),
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(std::time::Instant::now() < deadline, "no form server");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // 200 idle connections.
    let mut idle = Vec::new();
    for _ in 0..200 {
        match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
            Ok(stream) => idle.push(stream),
            Err(e) => panic!("connect: {e}"),
        }
    }
    // Give the server time to accept all it will.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    for n in 0..5 {
        let content = format!("# plan {n}\n");
        let path = save(&server, &session, &content)
            .await
            .unwrap_or_else(|e| panic!("save_plan {n} with 200 idle connections: {e}"));
        assert_eq!(std::fs::read_to_string(path).expect("plan file"), content);
    }
    drop(idle);
    asking.abort();
}
