//! The shipper against a private PostgreSQL server, in process: a batch the
//! database refuses halfway through a pass is read again from the mark by
//! the same shipper, so nothing is skipped.

use planb_projections::DataRoot;
use planb_team::{Projects, ShipError, Shipper, TeamSettings};

#[tokio::test]
async fn a_batch_refused_midway_is_shipped_again_from_the_mark_with_no_gap() {
    let pg = planb_tests::postgres::Postgres::start();
    let dir = tempfile::tempdir().expect("root");
    let root = DataRoot::new(dir.path());
    planb_tests::logs::append_sessions(root.root(), 1_000, "/src/shop", 1);
    let projects = Projects::parse("/src", None).expect("projects");
    let settings = TeamSettings::new(&pg.url(), "ana", projects).expect("settings");
    let (client, connection) = tokio_postgres::connect(&pg.url(), tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
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
    let (client, connection) = tokio_postgres::connect(&pg.url(), tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
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
