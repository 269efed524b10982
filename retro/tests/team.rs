//! The replay says where shipping to a team database stands: a quiet line
//! while it works, an alert naming the error when it does not.

mod oneshot;

use std::sync::Arc;

use axum::http::StatusCode;
use oneshot::{PORT, check};
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
