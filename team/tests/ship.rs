//! The shipper against a private PostgreSQL server, in process: a batch the
//! database refuses halfway through a pass is read again from the mark by
//! the same shipper, so nothing is skipped.

use planb_projections::DataRoot;
use planb_team::{Projects, ShipError, Shipper, TeamSettings};

#[tokio::test]
#[ignore = "slow: starts PostgreSQL; scripts/test runs it"]
async fn a_batch_refused_midway_is_shipped_again_from_the_mark_with_no_gap() {
    let pg = planb_tests::postgres::Postgres::start();
    let dir = tempfile::tempdir().expect("root");
    let root = DataRoot::new(dir.path());
    planb_tests::logs::append_sessions(root.root(), 1_000, "/src/shop", 1);
    let projects = Projects::parse("/src", None).expect("projects");
    let settings = TeamSettings::new(&pg.url(), "ana", projects).expect("settings");
    let client = pg.client().await;
    let mut shipper = Shipper::new(root.clone(), settings).expect("shipper");
    // The first pass makes the schema; then the database refuses the
    // second batch of a pass while `refuse` holds a row.
    shipper
        .ship_to_end()
        .await
        .expect("the first pass makes the schema and ships everything");
    client
        .batch_execute(
            "DELETE FROM planb_events; UPDATE planb_origins SET shipped_to = 0, shipped_checksum = NULL;
             CREATE TABLE refuse (one int);
             INSERT INTO refuse VALUES (1);
             CREATE FUNCTION refuse_second_batch() RETURNS trigger AS $$
             BEGIN
               IF NEW.cursor > 2000 AND EXISTS (SELECT 1 FROM refuse) THEN
                 RAISE EXCEPTION 'refused for the test';
               END IF;
               RETURN NEW;
             END $$ LANGUAGE plpgsql;
             CREATE TRIGGER refuse BEFORE INSERT ON planb_events
               FOR EACH ROW EXECUTE FUNCTION refuse_second_batch();",
        )
        .await
        .expect("a database that refuses the second batch");
    let shipper_root = root.clone();
    let mut shipper = Shipper::new(shipper_root, shipper.settings().clone()).expect("shipper");
    let error = shipper
        .ship_to_end()
        .await
        .expect_err("the second batch is refused");
    assert!(matches!(error, ShipError::Db(_)), "{error}");
    assert!(
        error.to_string().contains("refused for the test"),
        "{error}"
    );
    let mark: i64 = client
        .query_one("SELECT shipped_to FROM planb_origins", &[])
        .await
        .expect("mark")
        .get(0);
    assert_eq!(mark, 2000, "the first batch landed");
    client
        .execute("DELETE FROM refuse", &[])
        .await
        .expect("allow");
    let pass = shipper.ship_to_end().await.expect("the rest");
    assert_eq!(pass.shipped, 4_000);
    let cursors: Vec<i64> = client
        .query("SELECT cursor FROM planb_events ORDER BY cursor", &[])
        .await
        .expect("rows")
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(
        cursors,
        (1..=6_000).collect::<Vec<i64>>(),
        "every event once, no gap"
    );
}

/// An idle pass asks nothing of the database (a shipper looks at the log
/// every few milliseconds): with its connection cut it still ends well,
/// and once the log grows the next passes reconnect and ship the rest.
#[tokio::test]
#[ignore = "slow: starts PostgreSQL; scripts/test runs it"]
async fn an_idle_pass_asks_nothing_of_the_database() {
    let pg = planb_tests::postgres::Postgres::start();
    let dir = tempfile::tempdir().expect("root");
    let root = DataRoot::new(dir.path());
    planb_tests::logs::append_sessions(root.root(), 3, "/src/shop", 1);
    let projects = Projects::parse("/src", None).expect("projects");
    let settings = TeamSettings::new(&pg.url(), "ana", projects).expect("settings");
    let mut shipper = Shipper::new(root.clone(), settings).expect("shipper");
    let first = shipper.ship_to_end().await.expect("the first pass");
    assert!(first.shipped > 0, "{first:?}");
    let client = pg.client().await;
    let cut = client
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE pid <> pg_backend_pid() AND datname = current_database()",
            &[],
        )
        .await
        .expect("cut the shipper's connection");
    assert_eq!(cut.len(), 1, "the shipper's one connection");
    let idle = shipper.ship_to_end().await.expect("an idle pass");
    assert_eq!((idle.shipped, idle.shipped_to), (0, first.shipped_to));

    let more = planb_tests::logs::append_sessions(root.root(), 2, "/src/shop", 2);
    let mut passes = 0;
    let shipped_to = loop {
        passes += 1;
        match shipper.ship_to_end().await {
            Ok(pass) => break pass.shipped_to,
            Err(ShipError::Db(_)) if passes < 3 => {}
            Err(error) => panic!("pass {passes}: {error}"),
        }
    };
    assert_eq!(shipped_to, first.shipped_to + more);
    let mark: i64 = client
        .query_one("SELECT shipped_to FROM planb_origins", &[])
        .await
        .expect("mark")
        .get(0);
    assert_eq!(u64::try_from(mark).expect("mark"), shipped_to);
}

/// A NUL in a title, a plan and an answer (which a jsonb value cannot
/// hold) ships: the archived bytes exactly, the JSON rendering with the
/// NUL shown as U+2400, and every event after it too.
#[tokio::test]
#[ignore = "slow: starts PostgreSQL; scripts/test runs it"]
async fn a_nul_in_a_plan_ships_and_reads_back_exactly() {
    use planb_core::{EventBody, SessionId};
    let pg = planb_tests::postgres::Postgres::start();
    let dir = tempfile::tempdir().expect("root");
    let root = DataRoot::new(dir.path());
    let session = SessionId::from_uuid(uuid::Uuid::now_v7());
    let (log, _) = planb_log::open_dir(&root.log_dir(), Default::default()).expect("log");
    planb_tests::logs::append(
        &log,
        vec![
            EventBody::SessionCreated {
                session,
                title: Some("a\0title".into()),
                intent: None,
                project_path: Some("/src/shop".into()),
            },
            EventBody::PlanVersionSaved {
                session,
                version: 1,
                title: Some("v\0 one".into()),
                content: "# Plan\n\n- a step\0 with a NUL\n".into(),
            },
        ],
    );
    drop(log);
    planb_tests::logs::append_sessions(root.root(), 2, "/src/shop", 1);
    let projects = Projects::parse("/src", None).expect("projects");
    let settings = TeamSettings::new(&pg.url(), "ana", projects).expect("settings");
    let pass = planb_team::push(root.clone(), settings)
        .await
        .expect("a NUL ships");
    assert_eq!((pass.shipped, pass.shipped_to), (14, 14), "{pass:?}");
    let client = pg.client().await;
    let rows = client
        .query(
            "SELECT cursor, payload, body::text FROM planb_events ORDER BY cursor",
            &[],
        )
        .await
        .expect("rows");
    let held: Vec<(i64, Vec<u8>)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(
        held,
        planb_tests::logs::records(root.root()),
        "the archived bytes, exactly"
    );
    let body: String = rows[1].get(2);
    assert!(body.contains("a step\u{2400} with a NUL"), "{body}");
    let envelope = planb_core::decode(&held[1].1, planb_core::Cursor(2)).expect("decode");
    let EventBody::PlanVersionSaved { content, .. } = envelope.event.body else {
        panic!("a plan version");
    };
    assert_eq!(content, "# Plan\n\n- a step\0 with a NUL\n");
}

/// An event the database refuses (here a constraint on its table) is
/// named, with its cursor and the database's reason, and every event after
/// it ships: one refusal holds nothing back, and no later push halts on it.
#[tokio::test]
#[ignore = "slow: starts PostgreSQL; scripts/test runs it"]
async fn an_event_the_database_refuses_is_named_and_the_rest_ship() {
    let pg = planb_tests::postgres::Postgres::start();
    let dir = tempfile::tempdir().expect("root");
    let root = DataRoot::new(dir.path());
    planb_tests::logs::append_sessions(root.root(), 3, "/src/shop", 1);
    let projects = Projects::parse("/src", None).expect("projects");
    let settings = TeamSettings::new(&pg.url(), "ana", projects).expect("settings");
    planb_team::db::connect(&settings).await.expect("schema");
    let client = pg.client().await;
    client
        .batch_execute("ALTER TABLE planb_events ADD CONSTRAINT not_four CHECK (cursor <> 4)")
        .await
        .expect("a constraint");
    let pass = planb_team::push(root.clone(), settings.clone())
        .await
        .expect("the others ship");
    assert_eq!((pass.shipped, pass.shipped_to), (17, 18), "{pass:?}");
    assert_eq!(pass.refused.len(), 1, "{pass:?}");
    let refused = &pass.refused[0];
    assert_eq!(refused.cursor, 4);
    assert!(refused.reason.contains("not_four"), "{refused:?}");
    let text = refused.to_string();
    assert!(
        text.contains("cursor 4") && text.contains("not_four"),
        "{text}"
    );
    let cursors: Vec<i64> = client
        .query("SELECT cursor FROM planb_events ORDER BY cursor", &[])
        .await
        .expect("rows")
        .iter()
        .map(|row| row.get(0))
        .collect();
    let expected: Vec<i64> = (1..=18).filter(|c| *c != 4).collect();
    assert_eq!(cursors, expected);
    let again = planb_team::push(root.clone(), settings.clone())
        .await
        .expect("no halt");
    assert_eq!((again.shipped, again.shipped_to), (0, 18));
    assert_eq!(again.refused, pass.refused, "still named");
    let origin = planb_team::local::origin(&root).expect("origin");
    let mark = planb_team::database_mark(&settings, origin)
        .await
        .expect("mark")
        .expect("shipped");
    assert_eq!((mark.events, mark.refused), (17, 1));
    let named: Vec<(i64, String)> = client
        .query("SELECT cursor, reason FROM planb_refused", &[])
        .await
        .expect("the refused are kept")
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    assert_eq!(named.len(), 1);
    assert_eq!(named[0].0, 4);
}

/// `push` tells how many events stay on this machine however many passes
/// examined them: a second push, or one after a server's shipper, says
/// the same as the first (it said 0), and a character class in a pattern
/// matches as a shell's does.
#[tokio::test]
#[ignore = "slow: starts PostgreSQL; scripts/test runs it"]
async fn a_push_counts_every_event_kept_on_this_machine() {
    let pg = planb_tests::postgres::Postgres::start();
    let dir = tempfile::tempdir().expect("root");
    let root = DataRoot::new(dir.path());
    planb_tests::logs::append_sessions(root.root(), 2, "/tmp/proj-a-1", 1);
    planb_tests::logs::append_sessions(root.root(), 1, "/tmp/proj-c-1", 2);
    let projects = Projects::parse("/tmp/proj-[ab]-*", None).expect("projects");
    let settings = TeamSettings::new(&pg.url(), "ana", projects).expect("settings");
    let first = planb_team::push(root.clone(), settings.clone())
        .await
        .expect("push");
    assert_eq!((first.shipped, first.withheld), (12, 6), "{first:?}");
    let second = planb_team::push(root, settings).await.expect("push again");
    assert_eq!((second.shipped, second.withheld), (0, 6), "{second:?}");
}
