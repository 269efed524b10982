//! planb-retro over a damaged log: a record in the middle fails validation
//! and valid records follow, so the events from it on cannot be read. Every
//! page must say the history it shows is incomplete and where the damage is,
//! instead of passing a partial history off as the whole.

use std::path::PathBuf;
use std::sync::Arc;

use crate::oneshot::{PORT, get};
use axum::http::StatusCode;
use planb_core::{Command, SessionId, Timestamp};
use planb_projections::{DataRoot, FixedEnvironment, Store};
use planb_retro::{AppState, Retro, app};
use tempfile::TempDir;
use uuid::Uuid;

struct Damaged {
    _dir: TempDir,
    router: axum::Router,
    /// Readable: created before the damage.
    session: SessionId,
    /// Created after the damage, so unreadable.
    hidden: SessionId,
    segment: String,
    offset: u64,
    cursor: u64,
}

fn save_plan(session: SessionId, content: &str) -> Command {
    Command::SavePlan {
        session,
        title: None,
        content: content.into(),
    }
}

fn segment_file(root: &DataRoot) -> PathBuf {
    let mut segments: Vec<PathBuf> = std::fs::read_dir(root.log_dir())
        .expect("list the log")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "seg"))
        .collect();
    assert_eq!(segments.len(), 1, "one segment: {segments:?}");
    segments.remove(0)
}

/// Where the log's records end (the segment's zeroed runway follows).
fn records_end(root: &DataRoot) -> u64 {
    let mut reader = planb_log::read_dir(&root.log_dir(), Default::default(), planb_log::Cursor(1))
        .expect("read the log");
    while reader.next().expect("read").is_some() {}
    reader.position().expect("a segment").1
}

/// A session with plan versions 1 and 2 (cursors 1–3), then a damaged
/// record (cursor 4, version 3), then a second session and version 4.
fn damaged() -> Damaged {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = DataRoot::new(dir.path());
    let env = Arc::new(FixedEnvironment::new(Timestamp(1_700_000_000_000), 1_000));
    let (store, _) = Store::open(root.clone(), env).expect("open store");
    let session = SessionId::from_uuid(Uuid::new_v4());
    let hidden = SessionId::from_uuid(Uuid::new_v4());
    let run = |command| {
        store.execute(command).expect("command accepted");
    };
    run(Command::CreateSession {
        session,
        title: Some("Readable".into()),
        intent: None,
        project_path: None,
    });
    run(save_plan(session, "# Plan\n\nfirst\n"));
    run(save_plan(session, "# Plan\n\nsecond\n"));
    let segment = segment_file(&root);
    let offset = records_end(&root);
    run(save_plan(session, "# Plan\n\nthird, damaged\n"));
    run(Command::CreateSession {
        session: hidden,
        title: Some("Hidden".into()),
        intent: None,
        project_path: None,
    });
    run(save_plan(session, "# Plan\n\nfourth\n"));
    drop(store);
    let mut bytes = std::fs::read(&segment).expect("read the segment");
    // A byte inside the fourth record; every byte of a record is covered by
    // its checksum.
    let inside = usize::try_from(offset).expect("offset") + 30;
    bytes[inside] ^= 0x40;
    std::fs::write(&segment, bytes).expect("damage the segment");
    let (retro, mut follower) = Retro::open(&root);
    follower.poll(&retro);
    let router = app(AppState { retro, port: PORT });
    let segment = segment
        .file_name()
        .expect("file name")
        .to_string_lossy()
        .into_owned();
    Damaged {
        _dir: dir,
        router,
        session,
        hidden,
        segment,
        offset,
        cursor: 4,
    }
}

/// Asserts `path` answers `status` and says the history is incomplete,
/// naming the segment, the byte offset and the cursor of the damage.
async fn check_incomplete(d: &Damaged, path: &str, status: StatusCode) -> String {
    let (actual, body) = get(&d.router, path).await;
    assert_eq!(actual, status, "GET {path}: {body}");
    for snippet in [
        "History incomplete".to_string(),
        d.segment.clone(),
        format!("byte offset {}", d.offset),
        format!("cursor {}", d.cursor),
    ] {
        assert!(
            body.contains(&snippet),
            "GET {path}: no {snippet:?} in {body}"
        );
    }
    body
}

#[tokio::test]
async fn every_page_says_the_history_is_incomplete_and_where() {
    let d = damaged();
    let id = d.session;
    let index = check_incomplete(&d, "/", StatusCode::OK).await;
    assert!(index.contains("Readable"), "{index}");
    assert!(!index.contains("Hidden"), "{index}");
    let page = check_incomplete(&d, &format!("/sessions/{id}"), StatusCode::OK).await;
    assert!(page.contains("second"), "{page}");
    assert!(!page.contains("fourth"), "{page}");
    check_incomplete(&d, &format!("/sessions/{id}?at=2"), StatusCode::OK).await;
    check_incomplete(&d, &format!("/sessions/{id}/at/2"), StatusCode::OK).await;
    check_incomplete(&d, &format!("/sessions/{id}/plans/2"), StatusCode::OK).await;
    check_incomplete(
        &d,
        &format!("/sessions/{id}/plans/1/diff/2"),
        StatusCode::OK,
    )
    .await;
}

#[tokio::test]
async fn pages_past_the_damage_say_why_they_are_missing() {
    let d = damaged();
    let id = d.session;
    check_incomplete(
        &d,
        &format!("/sessions/{}", d.hidden),
        StatusCode::NOT_FOUND,
    )
    .await;
    check_incomplete(
        &d,
        &format!("/sessions/{id}/plans/3"),
        StatusCode::NOT_FOUND,
    )
    .await;
    check_incomplete(&d, &format!("/sessions/{id}?at=6"), StatusCode::NOT_FOUND).await;
}

#[tokio::test]
async fn an_event_this_build_cannot_decode_ends_the_history_too() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = DataRoot::new(dir.path());
    let env = Arc::new(FixedEnvironment::new(Timestamp(1_700_000_000_000), 1_000));
    let (store, _) = Store::open(root.clone(), env).expect("open store");
    let session = SessionId::from_uuid(Uuid::new_v4());
    store
        .execute(Command::CreateSession {
            session,
            title: Some("Before".into()),
            intent: None,
            project_path: None,
        })
        .expect("session created");
    drop(store);
    // A record the log validates but whose payload is no planb event.
    let (log, _) = planb_log::open_dir(&root.log_dir(), planb_log::LogOptions::default())
        .expect("open the log");
    log.append(&[b"not an event".as_slice()])
        .expect("append a foreign record");
    drop(log);
    let (retro, mut follower) = Retro::open(&root);
    follower.poll(&retro);
    let router = app(AppState { retro, port: PORT });
    for path in ["/".to_string(), format!("/sessions/{session}")] {
        let (status, body) = get(&router, &path).await;
        assert_eq!(status, StatusCode::OK, "GET {path}: {body}");
        for snippet in ["History incomplete", "from event #2", "event at cursor 2"] {
            assert!(
                body.contains(snippet),
                "GET {path}: no {snippet:?} in {body}"
            );
        }
    }
}
