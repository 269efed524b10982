//! The team: the local replay says where shipping to a team database
//! stands (a quiet line while it works, an alert naming the error when it
//! does not), and `--team` replays every member from the database with the
//! same pages each member's own replay shows.

use std::sync::Arc;

use crate::oneshot::{PORT, check, get};
use axum::http::StatusCode;
use planb_core::{Command, SessionId, Timestamp};
use planb_projections::{DataRoot, FixedEnvironment, Store, TeamStatus, write_team_status};
use planb_retro::{AppState, Retro, app};

#[tokio::test]
async fn the_index_says_how_far_the_team_shipper_got_and_why_it_stopped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = DataRoot::new(dir.path());
    let env = Arc::new(FixedEnvironment::new(Timestamp(1_700_000_000_000), 1_000));
    let (store, _) = Store::open(root.clone(), env).expect("open store");
    store
        .execute(Command::CreateSession {
            session: SessionId::from_uuid(uuid::Uuid::new_v4()),
            title: Some("Shipped".into()),
            intent: None,
            project_path: None,
        })
        .expect("create");
    drop(store);
    let (retro, mut follower) = Retro::open(&root);
    follower.poll(&retro);
    let router = app(AppState { retro, port: PORT });
    let body = check(&router, "/", StatusCode::OK, &["Shipped"]).await;
    assert!(!body.contains("team-status"), "no shipper, no line: {body}");

    let mut status = TeamStatus {
        database: "planb@db.internal:5432/planb".into(),
        member: "ana".into(),
        shipped_to: 1,
        log_end: 1,
        updated_at: Some(Timestamp(1_700_000_001_000)),
        ..TeamStatus::default()
    };
    write_team_status(&root, &status).expect("write");
    let body = check(
        &router,
        "/",
        StatusCode::OK,
        &["Team database planb@db.internal:5432/planb: shipped as ana to cursor 1"],
    )
    .await;
    assert!(
        !body.contains("role=\"alert\""),
        "a working shipper is no alert: {body}"
    );

    status.last_error = Some("divergence at cursor 1: the local log ends at 0".into());
    status.last_error_at = Some(Timestamp(1_700_000_002_000));
    status.halted = true;
    write_team_status(&root, &status).expect("write");
    check(
        &router,
        "/",
        StatusCode::OK,
        &[
            "role=\"alert\"",
            "not shipping since 2023-11-14T22:13:22.000Z",
            "halted until a person acts): divergence at cursor 1",
        ],
    )
    .await;
}

/// Two sessions with three plan versions each, in a fresh root.
/// Ships `root` whole as the member ana; the settings to read it back.
async fn shipped_as_ana(
    pg: &planb_tests::postgres::Postgres,
    root: DataRoot,
) -> planb_team::TeamSettings {
    let everything = planb_team::Projects::everything();
    let settings = planb_team::TeamSettings::new(&pg.url(), "ana", everything).expect("settings");
    planb_team::push(root, settings.clone())
        .await
        .expect("push");
    settings
}

fn member_root(title: &str, at: i64) -> (tempfile::TempDir, Vec<SessionId>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = DataRoot::new(dir.path());
    let env = Arc::new(FixedEnvironment::new(Timestamp(at), 1_000));
    let (store, _) = Store::open(root, env).expect("open store");
    let mut sessions = Vec::new();
    for n in 0..2 {
        let session = SessionId::from_uuid(uuid::Uuid::new_v4());
        store
            .execute(Command::CreateSession {
                session,
                title: Some(format!("{title} {n}")),
                intent: Some("ship it".into()),
                project_path: Some(format!("/src/{title}")),
            })
            .expect("create");
        for version in 1..=3 {
            store
                .execute(Command::SavePlan {
                    session,
                    title: Some(format!("v{version}")),
                    content: format!("# {title} {n}\n\n- step {version}\n- another step\n"),
                })
                .expect("save");
        }
        sessions.push(session);
    }
    let pipeline = planb_core::pipelines::project_plan();
    store
        .execute(Command::CreateTask {
            task: planb_core::TaskId::from_uuid(uuid::Uuid::new_v4()),
            pipeline: pipeline.name().into(),
            pipeline_version: pipeline.version(),
            prompt: format!("Plan the {title} move"),
            speed: "fast".into(),
            target: "build_plan".into(),
            model_profile: None,
            client_request_id: None,
            project_path: None,
        })
        .expect("task");
    (dir, sessions)
}

/// Asserts two pages are equal, showing where they first differ.
fn assert_same(mine: &str, theirs: &str, path: &str) {
    if mine == theirs {
        return;
    }
    let at = mine
        .char_indices()
        .zip(theirs.chars())
        .find(|((_, a), b)| a != b)
        .map_or(mine.len().min(theirs.len()), |((i, _), _)| i);
    let around = |text: &str| {
        let (mut start, mut end) = (at.saturating_sub(150), (at + 150).min(text.len()));
        while !text.is_char_boundary(start) {
            start -= 1;
        }
        while !text.is_char_boundary(end) {
            end += 1;
        }
        text[start..end].to_string()
    };
    panic!(
        "{path}: the pages differ\nmember's: {}\nteam's:   {}",
        around(mine),
        around(theirs)
    );
}

/// `html` with every cursor (the log's, or the team's merged one) written
/// `N`: what differs between a member's replay and the team's.
fn without_cursors(html: &str) -> String {
    let markers = [
        "data-cursors=\"",
        "data-cursor=\"",
        "at=",
        "after=",
        "id=\"ev-",
        "#",
        "log cursor ",
        "Log cursor ",
    ];
    let mut out = String::with_capacity(html.len());
    let mut rest = html;
    'outer: while !rest.is_empty() {
        for marker in markers {
            if let Some(after) = rest.strip_prefix(marker) {
                let digits = after
                    .find(|c: char| !c.is_ascii_digit() && c != ',')
                    .unwrap_or(after.len());
                if digits > 0 {
                    out.push_str(marker);
                    out.push('N');
                    rest = &after[digits..];
                    continue 'outer;
                }
            }
        }
        let next = rest.chars().next().expect("not empty");
        out.push(next);
        rest = &rest[next.len_utf8()..];
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow: starts PostgreSQL; scripts/test runs it"]
async fn the_team_replay_shows_each_member_s_pages_as_their_own_replay_does() {
    let pg = planb_tests::postgres::Postgres::start();
    let (ana, ana_sessions) = member_root("shop", 1_700_000_000_000);
    let (bo, bo_sessions) = member_root("depot", 1_700_000_000_500);
    for (root, member) in [(&ana, "ana"), (&bo, "bo")] {
        let settings =
            planb_team::TeamSettings::new(&pg.url(), member, planb_team::Projects::everything())
                .expect("settings");
        planb_team::push(DataRoot::new(root.path()), settings)
            .await
            .expect("push");
    }
    let settings =
        planb_team::TeamSettings::new(&pg.url(), "lead", planb_team::Projects::default())
            .expect("settings");
    let cache = tempfile::tempdir().expect("cache");
    let cache = DataRoot::new(cache.path());
    let (team, follower) = tokio::task::spawn_blocking(move || {
        let source = planb_retro::team::TeamSource::new(settings, cache.blobs()).expect("source");
        let (retro, mut follower) = Retro::open_team(source, &cache);
        // Waiting for the next batch listens for the shippers' notices.
        follower.wait(std::time::Duration::from_millis(10));
        (retro, follower)
    })
    .await
    .expect("load");
    let client = pg.client().await;
    let listening: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE query = 'LISTEN planb_events'",
            &[],
        )
        .await
        .expect("activity")
        .get(0);
    assert_eq!(listening, 1, "the replay listens for new batches");
    drop(follower);
    let team = app(AppState {
        retro: team,
        port: PORT,
    });
    for (root, sessions) in [(&ana, &ana_sessions), (&bo, &bo_sessions)] {
        let (local, mut follower) = Retro::open(&DataRoot::new(root.path()));
        follower.poll(&local);
        let local = app(AppState {
            retro: local,
            port: PORT,
        });
        for session in sessions {
            let third = |page: &str| {
                let start = page.find("data-cursors=\"").expect("cursors") + 14;
                let list = &page[start..start + page[start..].find('"').expect("end")];
                list.split(',').nth(2).expect("a third event").to_string()
            };
            let (_, mine) = get(&local, &format!("/sessions/{session}")).await;
            let (_, theirs) = get(&team, &format!("/sessions/{session}")).await;
            // The session as of its third event, in each one's cursors.
            let (mine_at, theirs_at) = (third(&mine), third(&theirs));
            for (path, team_path) in [
                (format!("/sessions/{session}"), None),
                (format!("/sessions/{session}/plans/2"), None),
                (format!("/sessions/{session}/plans/1/diff/3"), None),
                (
                    format!("/sessions/{session}?at={mine_at}"),
                    Some(format!("/sessions/{session}?at={theirs_at}")),
                ),
            ] {
                let (status, mine) = get(&local, &path).await;
                assert_eq!(status, StatusCode::OK, "{path}");
                let team_path = team_path.unwrap_or_else(|| path.clone());
                let (status, theirs) = get(&team, &team_path).await;
                assert_eq!(status, StatusCode::OK, "{team_path}");
                assert_same(&without_cursors(&mine), &without_cursors(&theirs), &path);
            }
        }
    }
    // The index names both machines, and filters by member.
    let index = check(
        &team,
        "/",
        StatusCode::OK,
        &[
            "ana",
            "bo",
            "shop 0",
            "depot 1",
            "by bo",
            "Plan the shop move",
        ],
    )
    .await;
    assert!(index.contains("id=\"filter-member\""), "{index}");
    let only_bo = check(
        &team,
        "/?member=bo",
        StatusCode::OK,
        &["depot 0", "depot 1", "Plan the depot move"],
    )
    .await;
    assert!(
        !only_bo.contains("shop 0") && !only_bo.contains("Plan the shop move"),
        "sessions and tasks of bo only: {only_bo}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow: starts PostgreSQL; scripts/test runs it"]
async fn in_a_browser_the_team_replay_filters_by_member_scrubs_and_shows_new_events_live() {
    let pg = planb_tests::postgres::Postgres::start();
    let (ana, ana_sessions) = member_root("shop", 1_700_000_000_000);
    let (bo, _) = member_root("depot", 1_700_000_000_500);
    let push = |root: &tempfile::TempDir, member: &str| {
        let settings =
            planb_team::TeamSettings::new(&pg.url(), member, planb_team::Projects::everything())
                .expect("settings");
        planb_team::push(DataRoot::new(root.path()), settings)
    };
    push(&ana, "ana").await.expect("push");
    push(&bo, "bo").await.expect("push");
    let cache = tempfile::tempdir().expect("cache");
    let server = crate::support::RetroServer::start_team(&pg.url(), cache.path()).await;
    let browser = planb_tests::browser::Browser::start().await;
    browser.open(&server.url("/")).await;
    let context = "document.querySelector('main').innerText.slice(0, 600)";
    browser
        .wait_until_or_show(
            "both machines",
            "document.querySelector('#team').innerText.includes('bo')",
            context,
        )
        .await;
    browser.open(&server.url("/?member=ana")).await;
    browser
        .wait_until_or_show(
            "ana's sessions only",
            "document.querySelector('#sessions').innerText.includes('shop 1') && !document.querySelector('#sessions').innerText.includes('depot')",
            context,
        )
        .await;
    // A session of ana's, scrubbed back one event with the keyboard.
    let session = ana_sessions[1];
    browser
        .open(&server.url(&format!("/sessions/{session}")))
        .await;
    browser
        .wait_until_or_show(
            "the last plan version",
            "document.querySelector('#scrub-label').innerText.startsWith('Event 4 of 4')",
            context,
        )
        .await;
    browser.tab_to("scrub", false, 40).await;
    browser.press(fantoccini::key::Key::Left).await;
    browser
        .wait_until_or_show(
            "one event back",
            "document.querySelector('#scrub-label').innerText.startsWith('Event 3 of 4')",
            context,
        )
        .await;
    // Ana saves another version; once shipped, the open page shows it.
    browser
        .open(&server.url(&format!("/sessions/{session}")))
        .await;
    {
        let env = Arc::new(FixedEnvironment::new(Timestamp(1_700_000_100_000), 1_000));
        let (store, _) = Store::open(DataRoot::new(ana.path()), env).expect("open store");
        store
            .execute(Command::SavePlan {
                session,
                title: Some("v4".into()),
                content: "# shop 1\n\n- step 4\n".into(),
            })
            .expect("save");
    }
    push(&ana, "ana").await.expect("push");
    browser
        .wait_until_or_show(
            "the new version without a reload",
            "document.querySelector('#scrub-label').innerText.startsWith('Event 5 of 5')",
            context,
        )
        .await;
    browser.close().await;
}

/// GET `path` from `host` with extra headers: status, headers, body.
async fn get_as(
    router: &axum::Router,
    path: &str,
    host: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, axum::http::HeaderMap, String) {
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    let mut request = axum::http::Request::get(path).header("host", host);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = router
        .clone()
        .oneshot(request.body(axum::body::Body::empty()).expect("request"))
        .await
        .expect("response");
    let (parts, body) = response.into_parts();
    let body = body.collect().await.expect("body").to_bytes();
    (
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

#[tokio::test]
async fn beyond_loopback_every_request_presents_the_token_once_given_in_the_link() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = DataRoot::new(dir.path());
    let (retro, _) = Retro::open(&root);
    let token = "k3y-for-the-team_replay.0123";
    let router = planb_retro::app_with_token(
        AppState {
            retro: retro.clone(),
            port: PORT,
        },
        token,
    );
    let host = "team.internal:4317";
    let (status, _, body) = get_as(&router, "/", host, &[]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(body.contains("?token="), "{body}");
    let (status, _, _) = get_as(&router, "/?token=k3y-for-the-team_replay.0124", host, &[]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "a wrong token");
    let (status, headers, _) =
        get_as(&router, &format!("/?member=bo&token={token}"), host, &[]).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(
        headers["location"], "/?member=bo",
        "the token leaves the address"
    );
    let cookie = headers["set-cookie"].to_str().expect("cookie");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let kept = cookie.split(';').next().expect("name=value");
    let (status, _, body) = get_as(&router, "/?member=bo", host, &[("cookie", kept)]).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let bearer = format!("Bearer {token}");
    let (status, _, _) = get_as(&router, "/", host, &[("authorization", &bearer)]).await;
    assert_eq!(status, StatusCode::OK);
    // Served on loopback, the same host is refused: no token, no other host.
    let loopback = app(AppState { retro, port: PORT });
    let (status, _, _) = get_as(&loopback, "/", host, &[]).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

/// The team replay reads the database `PLANB_TEAM_URL` names and nothing
/// of what this machine would ship: a projects list it could not use (a
/// relative path) does not stop it.
#[test]
#[ignore = "slow: starts PostgreSQL; scripts/test runs it"]
fn the_team_replay_starts_whatever_this_machine_would_ship() {
    use std::io::{Read, Write};
    let pg = planb_tests::postgres::Postgres::start();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|probe| probe.local_addr())
        .expect("a free port")
        .port();
    let cache = tempfile::tempdir().expect("cache");
    let mut retro = std::process::Command::new(env!("CARGO_BIN_EXE_planb-retro"))
        .args(["--team", "--port", &port.to_string()])
        .env("PLANB_TEAM_URL", pg.url())
        .env("PLANB_TEAM_PROJECTS", "src/shop")
        .env("XDG_CACHE_HOME", cache.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run planb-retro");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let page = loop {
        if let Ok(Some(status)) = retro.try_wait() {
            let mut said = String::new();
            let _ = retro
                .stderr
                .take()
                .expect("stderr")
                .read_to_string(&mut said);
            panic!("planb-retro --team exited ({status}): {said}");
        }
        if let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            let request =
                format!("GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
            stream.write_all(request.as_bytes()).expect("request");
            let mut page = String::new();
            stream.read_to_string(&mut page).expect("response");
            break page;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "nothing served on {port}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let _ = retro.kill();
    let _ = retro.wait();
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
}

#[test]
fn listening_beyond_loopback_without_a_token_is_refused_naming_the_variable() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_planb-retro"))
        .args(["--listen", "0.0.0.0:0"])
        .env_remove("PLANB_RETRO_TOKEN")
        .env("PLANB_MCP_DATA_DIR", std::env::temp_dir())
        .output()
        .expect("run planb-retro");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("PLANB_RETRO_TOKEN") && stderr.contains("at least 20"),
        "{stderr}"
    );
}

/// Rows the team replay cannot trust are left out and named, origin,
/// cursor and why, and every other event is replayed: one altered in the
/// database (its bytes no longer match its checksum), one deleted (the
/// next one names it), one larger than a log record may be, one this build
/// cannot read; a member's name over the limit is cut and said.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow: starts PostgreSQL; scripts/test runs it"]
async fn rows_that_cannot_be_trusted_are_named_and_the_rest_replayed() {
    let pg = planb_tests::postgres::Postgres::start();
    let (ana, ana_sessions) = member_root("shop", 1_700_000_000_000);
    let settings = shipped_as_ana(&pg, DataRoot::new(ana.path())).await;
    let (bo, _) = member_root("web", 1_700_000_100_000);
    let bo_settings =
        planb_team::TeamSettings::new(&pg.url(), "bo", planb_team::Projects::everything())
            .expect("settings");
    planb_team::push(DataRoot::new(bo.path()), bo_settings)
        .await
        .expect("push");
    let client = pg.client().await;
    let ana_is = "(SELECT origin FROM planb_origins WHERE member = 'ana')";
    // The last event as a newer planb would have written it, its checksum
    // made to match.
    let newer = b"PEc\0".to_vec();
    let prev: i64 = client
        .query_one(
            &format!(
                "SELECT prev_checksum FROM planb_events WHERE cursor = 9 AND origin = {ana_is}"
            ),
            &[],
        )
        .await
        .expect("prev")
        .get(0);
    let checksum = planb_log::format::RecordHeader::new(&newer, 9, prev as u32).checksum;
    client
        .execute(
            &format!("UPDATE planb_events SET payload = $1, checksum = $2 WHERE cursor = 9 AND origin = {ana_is}"),
            &[&newer, &i64::from(checksum)],
        )
        .await
        .expect("a newer event");
    client
        .batch_execute(&format!(
            "UPDATE planb_events SET payload = '\\x50456300'::bytea WHERE cursor = 3 AND origin = {ana_is};
             UPDATE planb_events SET payload = payload || decode(repeat('00', 5 * 1024 * 1024), 'hex') \
               WHERE cursor = 2 AND origin = {ana_is};
             DELETE FROM planb_events WHERE cursor = 7 AND origin = {ana_is};
             UPDATE planb_origins SET member = repeat('b', 300) WHERE member = 'bo';"
        ))
        .await
        .expect("rows altered and deleted");
    let cache = tempfile::tempdir().expect("cache");
    let cache = DataRoot::new(cache.path());
    let (retro, follower) = tokio::task::spawn_blocking(move || {
        let source = planb_retro::team::TeamSource::new(settings, cache.blobs()).expect("source");
        Retro::open_team(source, &cache)
    })
    .await
    .expect("load");
    assert_eq!(
        retro.timeline().len(),
        14,
        "ana's 1, 4, 5, 6 and 8, bo's nine: {:?} {:?}",
        retro.problem(),
        retro.timeline().incomplete()
    );
    assert!(retro.timeline().incomplete().is_none());
    let router = app(AppState { retro, port: PORT });
    check(
        &router,
        "/",
        StatusCode::OK,
        &[
            "web 1",
            "shop 1",
            "event 3 of origin",
            "(ana): its bytes do not match the checksum shipped with them",
            "event 2 of origin",
            "over the 4194304 bytes a log record may hold",
            "event 7 of origin",
            "missing from the database",
            "event 9 of origin",
            "unknown schema version 99",
            "member name is over the 200 characters read",
        ],
    )
    .await;
    let session = ana_sessions[0];
    check(
        &router,
        &format!("/sessions/{session}"),
        StatusCode::OK,
        &[
            "Events left out.",
            "4 event(s) of the team database cannot be trusted",
        ],
    )
    .await;
    drop(follower);
}

/// A blob the database cannot hand over now (here its table is gone for a
/// moment) costs the replay nothing it read: every event is taken, and the
/// blob is copied by a later poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow: starts PostgreSQL; scripts/test runs it"]
async fn a_blob_not_copied_now_keeps_its_event_and_is_copied_later() {
    let pg = planb_tests::postgres::Postgres::start();
    let (ana, _) = member_root("shop", 1_700_000_000_000);
    let root = DataRoot::new(ana.path());
    let artifact = root
        .blobs()
        .put(b"# Intake, edited by hand\n")
        .expect("blob");
    let (log, _) = planb_log::open_dir(&root.log_dir(), Default::default()).expect("log");
    let task = planb_core::TaskId::from_uuid(uuid::Uuid::new_v4());
    let edited = planb_core::EventBody::ArtifactEdited {
        task,
        step: "intake".into(),
        artifact,
        bytes: 25,
        by: "test".into(),
    };
    let shipped = planb_tests::logs::append(&log, vec![edited]) + 9;
    drop(log);
    let settings = shipped_as_ana(&pg, root).await;
    let client = pg.client().await;
    let rename = |from: &str, to: &str| format!("ALTER TABLE {from} RENAME TO {to}");
    let gone = rename("planb_blobs", "planb_blobs_away");
    client.batch_execute(&gone).await.expect("hide the blobs");
    let cache = tempfile::tempdir().expect("cache");
    let blobs = DataRoot::new(cache.path()).blobs();
    let (mut source, first) = tokio::task::spawn_blocking(move || {
        let mut source = planb_retro::team::TeamSource::new(settings, blobs).expect("source");
        let first = source.poll();
        (source, first)
    })
    .await
    .expect("first poll");
    let first = first.expect("a poll whose blob cannot be copied");
    assert_eq!(first.events.len() as u64, shipped, "every event is taken");
    let cached = || DataRoot::new(cache.path()).blobs().read_file(&artifact);
    assert!(cached().is_err(), "the blob could not be copied yet");
    let back = rename("planb_blobs_away", "planb_blobs");
    client
        .batch_execute(&back)
        .await
        .expect("the blobs are back");
    let again = tokio::task::spawn_blocking(move || (source.poll(), source))
        .await
        .expect("second poll");
    assert!(again.0.expect("a later poll").events.is_empty());
    assert_eq!(
        cached().expect("copied by the later poll"),
        b"# Intake, edited by hand\n"
    );
}

/// A member's events keep their own order in the team timeline whatever
/// times they carry: an imported plan version, stamped before the session
/// it belongs to was recorded, still comes after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow: starts PostgreSQL; scripts/test runs it"]
async fn a_member_s_events_keep_their_order_whatever_times_they_carry() {
    use planb_core::{Event, EventBody, EventId, encode};
    let pg = planb_tests::postgres::Postgres::start();
    let dir = tempfile::tempdir().expect("root");
    let root = DataRoot::new(dir.path());
    let session = SessionId::from_uuid(uuid::Uuid::new_v4());
    let events = [
        (
            2_000_000_000_000,
            EventBody::SessionCreated {
                session,
                title: Some("imported".into()),
                intent: None,
                project_path: Some("/src/shop".into()),
            },
        ),
        (
            1_000_000_000_000,
            EventBody::PlanVersionSaved {
                session,
                version: 1,
                title: None,
                content: "# Written long before it was imported\n".into(),
            },
        ),
    ];
    let payloads: Vec<Vec<u8>> = events
        .into_iter()
        .map(|(at, body)| {
            let id = EventId::from_uuid(uuid::Uuid::now_v7());
            encode(&Event {
                id,
                at: Timestamp(at),
                body,
            })
            .expect("encode")
        })
        .collect();
    let (log, _) = planb_log::open_dir(&root.log_dir(), Default::default()).expect("log");
    let refs: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
    log.append(&refs).expect("append");
    drop(log);
    let settings = shipped_as_ana(&pg, root).await;
    let cache = tempfile::tempdir().expect("cache");
    let blobs = DataRoot::new(cache.path()).blobs();
    let polled = tokio::task::spawn_blocking(move || {
        let mut source = planb_retro::team::TeamSource::new(settings, blobs).expect("source");
        source.poll()
    })
    .await
    .expect("poll")
    .expect("polled");
    let kinds: Vec<&str> = polled
        .events
        .iter()
        .map(|e| e.event.body.kind_name())
        .collect();
    assert_eq!(kinds, ["session_created", "plan_version_saved"]);
}

/// The address a token link sends the browser to stays on this server:
/// a path starting `//` or `/\\` would name another host.
#[tokio::test]
async fn a_token_link_never_sends_the_browser_to_another_site() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (retro, _) = Retro::open(&DataRoot::new(dir.path()));
    let token = "k3y-for-the-team_replay.0123";
    let router = planb_retro::app_with_token(AppState { retro, port: PORT }, token);
    for (path, to) in [
        ("//evil.example/", "/evil.example/"),
        ("/%2F/evil.example/", "/%2F/evil.example/"),
        ("/\\evil.example/x?member=bo", "/evil.example/x?member=bo"),
        ("///evil.example", "/evil.example"),
    ] {
        let separator = if path.contains('?') { '&' } else { '?' };
        let (status, headers, body) = get_as(
            &router,
            &format!("{path}{separator}token={token}"),
            "team.internal:4317",
            &[],
        )
        .await;
        assert_eq!(status, StatusCode::SEE_OTHER, "{path}: {body}");
        assert_eq!(headers["location"], to, "{path}");
    }
}

/// `--listen` on a loopback address other than 127.0.0.1 serves there
/// (and takes that address as the Host), without a token.
#[test]
fn listening_on_another_loopback_address_serves_there() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().expect("root");
    let port = std::net::TcpListener::bind("127.0.0.2:0")
        .and_then(|probe| probe.local_addr())
        .expect("a free port")
        .port();
    let mut retro = std::process::Command::new(env!("CARGO_BIN_EXE_planb-retro"))
        .args(["--listen", &format!("127.0.0.2:{port}")])
        .arg("--data-dir")
        .arg(dir.path())
        .env_remove("PLANB_RETRO_TOKEN")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run planb-retro");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let page = loop {
        if let Ok(Some(status)) = retro.try_wait() {
            let mut said = String::new();
            let _ = retro
                .stderr
                .take()
                .expect("stderr")
                .read_to_string(&mut said);
            panic!("planb-retro exited ({status}): {said}");
        }
        if let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.2", port)) {
            let request =
                format!("GET / HTTP/1.1\r\nHost: 127.0.0.2:{port}\r\nConnection: close\r\n\r\n");
            stream.write_all(request.as_bytes()).expect("request");
            let mut page = String::new();
            stream.read_to_string(&mut page).expect("response");
            break page;
        }
        if std::time::Instant::now() > deadline {
            let _ = retro.kill();
            let mut said = String::new();
            let _ = retro
                .stderr
                .take()
                .expect("stderr")
                .read_to_string(&mut said);
            panic!("nothing served on 127.0.0.2:{port}: {said}");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let _ = retro.kill();
    let _ = retro.wait();
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
}

/// Rows shipped before the database's schema knew the checksum of the
/// record before each one (version 1) are replayed as they are, with no
/// word against them, beside the rows shipped after the migration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow: starts PostgreSQL; scripts/test runs it"]
async fn rows_of_a_database_migrated_from_version_1_are_replayed() {
    let pg = planb_tests::postgres::Postgres::start();
    let (ana, _) = member_root("shop", 1_700_000_000_000);
    let root = DataRoot::new(ana.path());
    let settings = shipped_as_ana(&pg, root.clone()).await;
    pg.client()
        .await
        .batch_execute(
            "ALTER TABLE planb_events DROP COLUMN prev_checksum, DROP COLUMN prev_cursor;
             ALTER TABLE planb_origins DROP COLUMN last_cursor;
             DROP TABLE planb_refused;
             UPDATE planb_schema SET version = 1;",
        )
        .await
        .expect("the schema as version 1 made it");
    let more = planb_tests::logs::append_sessions(root.root(), 1, "/src/shop", 7);
    shipped_as_ana(&pg, root).await;
    let cache = tempfile::tempdir().expect("cache");
    let blobs = DataRoot::new(cache.path()).blobs();
    let polled = tokio::task::spawn_blocking(move || {
        let mut source = planb_retro::team::TeamSource::new(settings, blobs).expect("source");
        source.poll()
    })
    .await
    .expect("poll")
    .expect("polled");
    assert_eq!(polled.events.len() as u64, 9 + more);
    assert_eq!(polled.untrusted, Vec::<String>::new());
}

/// An event the database refused when it was shipped is named by the team
/// replay with the database's reason, once, and the events after it are
/// replayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow: starts PostgreSQL; scripts/test runs it"]
async fn an_event_refused_when_shipped_is_named_once_and_the_rest_replayed() {
    let pg = planb_tests::postgres::Postgres::start();
    let (ana, _) = member_root("shop", 1_700_000_000_000);
    let settings =
        planb_team::TeamSettings::new(&pg.url(), "ana", planb_team::Projects::everything())
            .expect("settings");
    planb_team::db::connect(&settings).await.expect("schema");
    pg.client()
        .await
        .batch_execute("ALTER TABLE planb_events ADD CONSTRAINT not_four CHECK (cursor <> 4)")
        .await
        .expect("a constraint");
    let pass = planb_team::push(DataRoot::new(ana.path()), settings.clone())
        .await
        .expect("push");
    assert_eq!(pass.refused.len(), 1);
    let cache = tempfile::tempdir().expect("cache");
    let blobs = DataRoot::new(cache.path()).blobs();
    let polled = tokio::task::spawn_blocking(move || {
        let mut source = planb_retro::team::TeamSource::new(settings, blobs).expect("source");
        source.poll()
    })
    .await
    .expect("poll")
    .expect("polled");
    assert_eq!(polled.events.len(), 8, "all but the fourth");
    assert_eq!(polled.untrusted.len(), 1, "{:?}", polled.untrusted);
    let said = &polled.untrusted[0];
    assert!(
        said.contains("event 4 of origin")
            && said.contains(
                "(ana): the database refused it when it was shipped (plan_version_saved)"
            )
            && said.contains("not_four"),
        "{said}"
    );
}

/// A database naming more origins than are read has the rest left out,
/// and says so once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow: starts PostgreSQL; scripts/test runs it"]
async fn origins_past_the_limit_are_left_out_and_said_once() {
    let pg = planb_tests::postgres::Postgres::start();
    let (ana, _) = member_root("shop", 1_700_000_000_000);
    let settings = shipped_as_ana(&pg, DataRoot::new(ana.path())).await;
    pg.client()
        .await
        .batch_execute(
            "INSERT INTO planb_origins (origin, member, host, data_root) \
             SELECT gen_random_uuid(), 'm' || n, 'h', '/' FROM generate_series(1, 1000) AS n",
        )
        .await
        .expect("origins");
    let cache = tempfile::tempdir().expect("cache");
    let blobs = DataRoot::new(cache.path()).blobs();
    let (first, second) = tokio::task::spawn_blocking(move || {
        let mut source = planb_retro::team::TeamSource::new(settings, blobs).expect("source");
        (source.poll(), source.poll())
    })
    .await
    .expect("polls");
    let first = first.expect("first poll");
    let members = first.members.expect("members");
    assert_eq!(members.origins.len() as i64, planb_retro::team::ORIGINS_MAX);
    assert_eq!(first.untrusted.len(), 1, "{:?}", first.untrusted);
    assert!(first.untrusted[0].contains("more than 1000 origins"));
    assert!(
        second.expect("second poll").untrusted.is_empty(),
        "said once"
    );
}
