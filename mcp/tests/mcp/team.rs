//! The team store against a real PostgreSQL server (a private one per
//! test): `planb-mcp team push` and the server's background shipper, with
//! several processes on one root, processes killed mid-batch, a database
//! that goes away, an older copy of a root, and the projects' scope. What
//! the database holds is read back with SQL and compared with the logs
//! byte for byte.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{UrlAnswer, all_output, call, new_session, start, text_of};
use planb_core::{EventBody, TaskId};
use planb_tests::logs::{append, append_sessions, records};
use planb_tests::postgres::Postgres;
use serde_json::json;

/// Longest wait for the database to catch up.
const WAIT: Duration = Duration::from_secs(30);

/// `planb-mcp --data-dir <root> team <args>` against `url`, shipping
/// `projects`.
fn team(root: &Path, url: &str, projects: &str, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_planb-mcp"));
    command
        .arg("--data-dir")
        .arg(root)
        .arg("team")
        .args(args)
        .env("PLANB_TEAM_URL", url)
        .env("PLANB_TEAM_PROJECTS", projects)
        .env("PLANB_TEAM_MEMBER", "ana")
        .stdin(Stdio::null());
    command
}

fn push(root: &Path, url: &str, projects: &str) -> std::process::Output {
    team(root, url, projects, &["push"])
        .output()
        .expect("run team push")
}

fn push_ok(root: &Path, url: &str, projects: &str) -> String {
    let output = push(root, url, projects);
    assert!(
        output.status.success(),
        "team push failed: {}",
        all_output(&output)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The root's origin id; the nil id before any shipper made one.
fn origin(root: &Path) -> uuid::Uuid {
    match std::fs::read_to_string(root.join("team/origin")) {
        Ok(text) => uuid::Uuid::parse_str(text.trim()).expect("origin id"),
        Err(_) => uuid::Uuid::nil(),
    }
}

/// What the database holds from `origin`: cursor and payload, in order.
async fn shipped(client: &tokio_postgres::Client, origin: uuid::Uuid) -> Vec<(i64, Vec<u8>)> {
    let rows = match client
        .query(
            "SELECT cursor, payload FROM planb_events WHERE origin = $1 ORDER BY cursor",
            &[&origin],
        )
        .await
    {
        Ok(rows) => rows,
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) => Vec::new(),
        Err(e) => panic!("select: {e}"),
    };
    rows.iter().map(|row| (row.get(0), row.get(1))).collect()
}

/// The database's mark for `origin`; `None` before planb made its tables
/// or the origin's row.
async fn mark(client: &tokio_postgres::Client, origin: uuid::Uuid) -> Option<i64> {
    match client
        .query_opt(
            "SELECT shipped_to FROM planb_origins WHERE origin = $1",
            &[&origin],
        )
        .await
    {
        Ok(row) => row.map(|row| row.get(0)),
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) => None,
        Err(e) => panic!("select: {e}"),
    }
}

/// Waits until the database's mark for `root` is its log's end.
async fn wait_for_end(client: &tokio_postgres::Client, root: &Path) {
    let deadline = Instant::now() + WAIT;
    loop {
        let end = records(root).last().map(|r| r.0);
        if end.is_some() && mark(client, origin(root)).await == end {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not shipped to the log's end {end:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Asserts the database holds every record of `root`'s log once, byte
/// equal, and nothing else of its origin.
async fn assert_all_shipped(client: &tokio_postgres::Client, root: &Path) {
    let local = records(root);
    let remote = shipped(client, origin(root)).await;
    assert_eq!(remote.len(), local.len(), "events shipped vs in the log");
    for (l, r) in local.iter().zip(&remote) {
        assert_eq!(l.0, r.0, "cursors in order, no gap");
        assert!(l.1 == r.1, "the bytes at cursor {} differ", l.0);
    }
    assert_eq!(mark(client, origin(root)).await, local.last().map(|r| r.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow: starts PostgreSQL; scripts/test runs it"]
async fn two_data_roots_ship_at_once_and_the_database_holds_each_event_once_byte_equal() {
    let pg = Postgres::start();
    let url = pg.url();
    let a = tempfile::tempdir().expect("root a");
    let b = tempfile::tempdir().expect("root b");
    append_sessions(a.path(), 400, "/src/shop", 1);
    append_sessions(b.path(), 400, "/src/shop", 2);
    // A server on root a ships in the background while two pushes run on
    // a and one on b: three processes racing on one origin, one on another.
    let server = start(
        a.path(),
        UrlAnswer::NotSupported,
        &[("PLANB_TEAM_URL", &url), ("PLANB_TEAM_PROJECTS", "*")],
    )
    .await;
    let pushes: Vec<Child> = [a.path(), a.path(), b.path()]
        .iter()
        .map(|root| {
            team(root, &url, "*", &["push"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn push")
        })
        .collect();
    for child in pushes {
        let output = child.wait_with_output().expect("wait");
        assert!(output.status.success(), "{}", all_output(&output));
    }
    // More events on both while the server keeps shipping a.
    let session = new_session(&server).await;
    let saved = call(
        &server,
        "save_plan",
        json!({"sessionId": session, "plan": "# after"}),
    )
    .await;
    assert!(!saved.is_error.unwrap_or(false), "{}", text_of(&saved));
    append_sessions(b.path(), 20, "/src/shop", 3);
    push_ok(b.path(), &url, "*");
    let client = pg.client().await;
    let a_end = records(a.path()).last().expect("events").0;
    let deadline = Instant::now() + WAIT;
    while mark(&client, origin(a.path())).await != Some(a_end) {
        assert!(
            Instant::now() < deadline,
            "the server did not ship root a to cursor {a_end}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_all_shipped(&client, a.path()).await;
    assert_all_shipped(&client, b.path()).await;
    let total: i64 = client
        .query_one("SELECT count(*) FROM planb_events", &[])
        .await
        .expect("count")
        .get(0);
    let local = records(a.path()).len() + records(b.path()).len();
    assert_eq!(total as usize, local, "no event twice");
    let status = team(a.path(), &url, "*", &["status"])
        .output()
        .expect("status");
    let status = all_output(&status);
    assert!(
        status.contains(&format!("up to cursor {a_end} (0 behind)")),
        "{status}"
    );
    assert!(status.contains("member      ana"), "{status}");
    drop(server);
}

/// A small deterministic generator for the kill points (SplitMix64).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n.max(1)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow: starts PostgreSQL; scripts/test runs it"]
async fn a_shipper_killed_at_random_points_leaves_no_gap_and_no_duplicate() {
    let pg = Postgres::start();
    let url = pg.url();
    let root = tempfile::tempdir().expect("root");
    append_sessions(root.path(), 4_000, "/src/shop", 1);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64);
    eprintln!("kill points drawn with seed {seed}");
    let mut rng = Rng(seed);
    let client = pg.client().await;
    let mut cut_short = 0;
    // `PLANB_KILL9_PUSHES` soaks it with more.
    let pushes: u32 = std::env::var("PLANB_KILL9_PUSHES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(24);
    for iteration in 0..pushes {
        let mut child = team(root.path(), &url, "*", &["push"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn push");
        std::thread::sleep(Duration::from_millis(rng.below(300)));
        let _ = child.kill();
        let _ = child.wait();
        let end = records(root.path()).last().expect("events").0;
        let reached = mark(&client, origin(root.path())).await.unwrap_or(0);
        eprintln!("push {iteration}: killed at cursor {reached} of {end}");
        if reached < end {
            cut_short += 1;
        }
        // Whatever landed is a prefix of the log, byte equal.
        let local = records(root.path());
        let remote = shipped(&client, origin(root.path())).await;
        assert!(remote.len() <= local.len());
        assert!(
            local.iter().zip(&remote).all(|(l, r)| l == r),
            "iteration {iteration}: not a prefix"
        );
        // New work for the next push, more than one batch of it.
        append_sessions(root.path(), 400, "/src/shop", 100 + iteration);
    }
    eprintln!("{cut_short} of {pushes} pushes were killed before they had shipped everything");
    push_ok(root.path(), &url, "*");
    assert_all_shipped(&client, root.path()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow: starts PostgreSQL; scripts/test runs it"]
async fn tool_calls_are_answered_while_the_database_is_down_and_all_shipped_after() {
    let pg = Postgres::start();
    let url = pg.url();
    let root = tempfile::tempdir().expect("root");
    let server = start(
        root.path(),
        UrlAnswer::NotSupported,
        &[("PLANB_TEAM_URL", &url), ("PLANB_TEAM_PROJECTS", "*")],
    )
    .await;
    let session = new_session(&server).await;
    let client = pg.client().await;
    wait_for_end(&client, root.path()).await;
    drop(client);
    pg.stop();
    for n in 0..5 {
        let saved = call(
            &server,
            "save_plan",
            json!({"sessionId": session, "plan": format!("# Plan while the database is down {n}")}),
        )
        .await;
        assert!(!saved.is_error.unwrap_or(false), "{}", text_of(&saved));
    }
    // The shipper says why it is behind.
    let deadline = Instant::now() + WAIT;
    loop {
        let status = all_output(
            &team(root.path(), &url, "*", &["status"])
                .output()
                .expect("status"),
        );
        if status.contains("last error  database") {
            assert!(status.contains("shipped     unknown: database"), "{status}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no error in the status: {status}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    pg.start_again();
    let client = pg.client().await;
    wait_for_end(&client, root.path()).await;
    assert_all_shipped(&client, root.path()).await;
    let down: i64 = client
        .query_one(
            "SELECT count(*) FROM planb_events WHERE kind = 'plan_version_saved' \
             AND body->'body'->>'content' LIKE '# Plan while the database is down %'",
            &[],
        )
        .await
        .expect("count")
        .get(0);
    assert_eq!(down, 5);
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow: starts PostgreSQL; scripts/test runs it"]
async fn an_older_copy_of_a_data_root_is_refused_as_divergence_and_nothing_is_overwritten() {
    let pg = Postgres::start();
    let url = pg.url();
    let dir = tempfile::tempdir().expect("dir");
    let root = dir.path().join("root");
    let backup = dir.path().join("backup");
    append_sessions(&root, 10, "/src/shop", 1);
    push_ok(&root, &url, "*");
    copy_dir(&root, &backup);
    append_sessions(&root, 10, "/src/shop", 2);
    push_ok(&root, &url, "*");
    let client = pg.client().await;
    let before = shipped(&client, origin(&root)).await;
    // The backup is restored: the same origin, an older log.
    std::fs::remove_dir_all(&root).expect("remove");
    copy_dir(&backup, &root);
    let output = push(&root, &url, "*");
    assert!(!output.status.success());
    let text = all_output(&output);
    assert!(
        text.contains("divergence at cursor") && text.contains("local log ends at 60"),
        "{text}"
    );
    // It writes on with other events under the cursors already shipped.
    append_sessions(&root, 12, "/src/elsewhere", 3);
    let output = push(&root, &url, "*");
    let text = all_output(&output);
    assert!(!output.status.success(), "{text}");
    assert!(
        text.contains("divergence at cursor 120") && text.contains("nothing was overwritten"),
        "{text}"
    );
    assert_eq!(
        shipped(&client, origin(&root)).await,
        before,
        "the database is unchanged"
    );
    // A database whose schema a newer planb made is refused, never written.
    client
        .execute("UPDATE planb_schema SET version = 99", &[])
        .await
        .expect("update");
    let output = push(&backup, &url, "*");
    let text = all_output(&output);
    assert!(
        text.contains("schema version 99 is newer than this planb knows"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow: starts PostgreSQL; scripts/test runs it"]
async fn only_the_projects_named_leave_the_machine() {
    let pg = Postgres::start();
    let url = pg.url();
    let root = tempfile::tempdir().expect("root");
    append_sessions(root.path(), 3, "/src/shop", 1);
    append_sessions(root.path(), 2, "/src/secret-project", 2);
    let (log, _) = planb_log::open_dir(&root.path().join("log"), Default::default()).expect("log");
    // A task of no project, and one made in the shop, archived since.
    let task = |prompt: &str, project: Option<&str>| EventBody::TaskCreated {
        task: TaskId::from_uuid(uuid::Uuid::now_v7()),
        pipeline: "project-plan".into(),
        pipeline_version: 1,
        prompt: prompt.into(),
        speed: "fast".into(),
        target: "report".into(),
        model_profile: None,
        client_request_id: None,
        project_path: project.map(Into::into),
    };
    let shop_task = task("a shop task", Some("/src/shop"));
    let archived = EventBody::TaskArchived {
        task: shop_task.task().expect("a task"),
    };
    append(&log, vec![task("a secret task", None), shop_task, archived]);
    drop(log);
    // The URL alone ships nothing, and says so.
    let none = push_ok(root.path(), &url, "");
    assert!(
        none.contains("shipped 0 event(s)") && none.contains("nothing is shipped"),
        "{none}"
    );
    let client = pg.client().await;
    assert_eq!(
        mark(&client, origin(root.path())).await,
        None,
        "not even the origin is known"
    );
    let out = push_ok(root.path(), &url, "/src/shop:/src/other/**");
    assert!(
        out.contains("shipped 20 event(s)") && out.contains("13 kept on this machine"),
        "{out}"
    );
    let rows = client
        .query(
            "SELECT project, body::text FROM planb_events WHERE origin = $1",
            &[&origin(root.path())],
        )
        .await
        .expect("select");
    assert_eq!(rows.len(), 20);
    for row in &rows {
        assert_eq!(
            row.get::<_, Option<String>>(0).as_deref(),
            Some("/src/shop")
        );
        let body: String = row.get(1);
        assert!(!body.contains("secret"), "{body}");
    }
    // A wider scope examines the log again: what was kept back goes now,
    // what went already stays as it is.
    let out = push_ok(root.path(), &url, "*");
    assert!(
        out.contains("shipped 13 event(s)") && out.contains("0 kept"),
        "{out}"
    );
    assert_all_shipped(&client, root.path()).await;
}

fn copy_dir(from: &Path, to: &Path) {
    let status = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .expect("cp");
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow: starts PostgreSQL; scripts/test runs it"]
async fn sslmode_require_ships_over_tls_once_the_server_s_authority_is_trusted() {
    let authority = crate::support::Authority::new();
    let pg = Postgres::start_with_tls(&authority.certificate.pem(), &authority.key.serialize_pem());
    let ca = authority.ca_pem;
    let url = format!("{}?sslmode=require", pg.tcp_url());
    let root = tempfile::tempdir().expect("root");
    append_sessions(root.path(), 2, "/src/shop", 1);
    let output = push(root.path(), &url, "*");
    let text = all_output(&output);
    assert!(
        !output.status.success(),
        "an unknown authority is refused: {text}"
    );
    assert!(text.to_lowercase().contains("certificate"), "{text}");
    let ca_file = root.path().join("ca.pem");
    std::fs::write(&ca_file, ca).expect("ca file");
    let output = team(root.path(), &url, "*", &["push"])
        .env("SSL_CERT_FILE", &ca_file)
        .output()
        .expect("push");
    let text = all_output(&output);
    assert!(
        output.status.success() && text.contains("shipped 12 event(s)"),
        "{text}"
    );
    // The rows went over the socket; TLS was the only way in over TCP.
    let client = pg.client().await;
    assert_all_shipped(&client, root.path()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow: starts PostgreSQL; scripts/test runs it"]
async fn a_damaged_log_is_shipped_up_to_the_damage_and_the_damage_is_named() {
    let pg = Postgres::start();
    let url = pg.url();
    let root = tempfile::tempdir().expect("root");
    append_sessions(root.path(), 10, "/src/shop", 1);
    let segment = std::fs::read_dir(root.path().join("log"))
        .expect("log")
        .map(|e| e.expect("entry").path())
        .find(|p| p.extension().is_some_and(|e| e == "seg"))
        .expect("a segment");
    let mut bytes = std::fs::read(&segment).expect("read");
    // The middle of the records, not of the zeroed runway after them.
    let end = bytes.iter().rposition(|b| *b != 0).expect("records") + 1;
    let middle = end / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&segment, bytes).expect("damage");
    // What a reader finds: records up to the damage, then an error there.
    let mut reader = planb_log::read_dir(
        &root.path().join("log"),
        Default::default(),
        planb_log::Cursor(1),
    )
    .expect("read");
    let mut before = Vec::new();
    let damaged_at = loop {
        let cursor = reader.next_cursor().0;
        match reader.next() {
            Ok(Some(record)) => before.push((record.cursor.0 as i64, record.payload)),
            Ok(None) => panic!("the damage was not found"),
            Err(_) => break cursor,
        }
    };
    assert!(!before.is_empty() && damaged_at > 1);
    let output = push(root.path(), &url, "*");
    let text = all_output(&output);
    assert!(!output.status.success(), "{text}");
    assert!(
        text.contains(&format!("the local log is damaged at cursor {damaged_at}")),
        "{text}"
    );
    let client = pg.client().await;
    assert_eq!(
        shipped(&client, origin(root.path())).await,
        before,
        "shipped up to the damage"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow: starts PostgreSQL; scripts/test runs it"]
async fn the_blobs_shipped_events_name_are_shipped_once_by_their_hash() {
    let pg = Postgres::start();
    let url = pg.url();
    let root = tempfile::tempdir().expect("root");
    let task = TaskId::from_uuid(uuid::Uuid::now_v7());
    let run = planb_core::RunId::from_uuid(uuid::Uuid::now_v7());
    // A small artifact travels in the log; a large one only in blobs/.
    let small = b"# Intake\n\nA bakery in Lyon.\n".to_vec();
    let large = "a long artifact line\n".repeat(4_000).into_bytes();
    let large_hash = planb_projections::Blobs::new(root.path().join("blobs"))
        .put(&large)
        .expect("put the large blob");
    let small_hash = planb_core::ContentHash::of_bytes(&small).0;
    let (log, _) = planb_log::open_dir(&root.path().join("log"), Default::default()).expect("log");
    let succeeded = |artifact: [u8; 32], bytes: usize| EventBody::StepSucceeded {
        task,
        run,
        step: "intake".into(),
        input: [7; 32],
        artifact,
        bytes: bytes as u64,
        duration_ms: 5,
        tokens_in: 0,
        tokens_out: 0,
    };
    append(
        &log,
        vec![
            EventBody::BlobStored {
                task,
                bytes: small.clone(),
            },
            succeeded(small_hash, small.len()),
        ],
    );
    append(&log, vec![succeeded(large_hash, large.len())]);
    append(&log, vec![succeeded(large_hash, large.len())]);
    drop(log);
    push_ok(root.path(), &url, "*");
    let client = pg.client().await;
    let blobs: Vec<(Vec<u8>, Vec<u8>)> = client
        .query(
            "SELECT hash, bytes FROM planb_blobs ORDER BY length(bytes)",
            &[],
        )
        .await
        .expect("blobs")
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    assert_eq!(
        blobs,
        vec![(small_hash.to_vec(), small), (large_hash.to_vec(), large)],
        "each blob once, by its hash, byte-equal"
    );
    assert_all_shipped(&client, root.path()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow: starts PostgreSQL; scripts/test runs it"]
async fn when_the_window_that_ships_is_killed_another_on_the_root_takes_over() {
    let pg = Postgres::start();
    let url = pg.url();
    let root = tempfile::tempdir().expect("root");
    let env = [
        ("PLANB_TEAM_URL", url.as_str()),
        ("PLANB_TEAM_PROJECTS", "*"),
    ];
    let first = start(root.path(), UrlAnswer::NotSupported, &env).await;
    let second = start(root.path(), UrlAnswer::NotSupported, &env).await;
    new_session(&first).await;
    let client = pg.client().await;
    wait_for_end(&client, root.path()).await;
    let data_root = planb_projections::DataRoot::new(root.path());
    let shipper = || {
        planb_projections::read_team_status(&data_root)
            .expect("status")
            .map(|s| s.pid)
    };
    // The shipper writes its status after the pass the database already
    // shows.
    let deadline = Instant::now() + WAIT;
    let holder = loop {
        if let Some(pid) = shipper() {
            break pid;
        }
        assert!(Instant::now() < deadline, "no shipper wrote its status");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let (killed, survivor) = if holder == first.pid {
        (first, second)
    } else {
        assert_eq!(holder, second.pid, "one of the two windows ships");
        (second, first)
    };
    killed.kill_9();
    let session = new_session(&survivor).await;
    let saved = call(
        &survivor,
        "save_plan",
        json!({"sessionId": session, "plan": "# after the shipping window died"}),
    )
    .await;
    assert!(!saved.is_error.unwrap_or(false), "{}", text_of(&saved));
    wait_for_end(&client, root.path()).await;
    assert_all_shipped(&client, root.path()).await;
    // Its status follows each pass it makes.
    let deadline = Instant::now() + WAIT;
    while shipper() != Some(survivor.pid) {
        assert!(
            Instant::now() < deadline,
            "the survivor did not take the role"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
