//! A session longer than the page's window of timeline entries: the page
//! shows the latest [`ENTRIES_WINDOW`], or a window around an older `?at=`,
//! and the entries fragment hands out the rest before or after a cursor;
//! in Chromium, "Show earlier" puts them in place. The browser test needs
//! Debian's `chromium` and `chromium-driver`.

use crate::oneshot::{PORT, get};
#[allow(dead_code, reason = "the support module serves several test files")]
use axum::http::StatusCode;
use planb_core::{Event, EventBody, EventId, SessionId, Timestamp, encode};
use planb_log::LogOptions;
use planb_projections::DataRoot;
use planb_retro::{AppState, Retro, app};
use planb_ui::pages::ENTRIES_WINDOW;
use tempfile::TempDir;
use uuid::Uuid;

/// Entries of the session: created, then plan versions 1 to `ENTRIES - 1`.
const ENTRIES: usize = 450;

struct Long {
    dir: TempDir,
    router: axum::Router,
    session: SessionId,
}

/// One session with [`ENTRIES`] events at cursors 1 to `ENTRIES`, written
/// straight to the log (a store would fsync each one).
fn long() -> Long {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = DataRoot::new(dir.path());
    let session = SessionId::from_uuid(Uuid::new_v4());
    let bodies = std::iter::once(EventBody::SessionCreated {
        session,
        title: Some("Long".into()),
        intent: None,
        project_path: None,
    })
    .chain(
        (1..ENTRIES as u32).map(|version| EventBody::PlanVersionSaved {
            session,
            version,
            title: None,
            content: format!("# Plan\n\nstep one\n\nrevision {version}\n"),
        }),
    );
    let payloads: Vec<Vec<u8>> = bodies
        .enumerate()
        .map(|(index, body)| {
            let event = Event {
                id: EventId::from_uuid(Uuid::now_v7()),
                at: Timestamp(1_700_000_000_000 + index as i64 * 1_000),
                body,
            };
            encode(&event).expect("encode")
        })
        .collect();
    let (log, _) = planb_log::open_dir(&root.log_dir(), LogOptions::default()).expect("open log");
    let slices: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
    log.append(&slices).expect("append");
    drop(log);
    let (retro, mut follower) = Retro::open(&root);
    follower.poll(&retro);
    Long {
        dir,
        router: app(AppState { retro, port: PORT }),
        session,
    }
}

/// The cursors of the timeline entries in `html`, in order.
fn entry_cursors(html: &str) -> Vec<u64> {
    html.split("id=\"ev-")
        .skip(1)
        .map(|rest| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().expect("a cursor")
        })
        .collect()
}

fn range(first: u64, last: u64) -> Vec<u64> {
    (first..=last).collect()
}

#[tokio::test]
async fn the_page_shows_the_latest_window_and_links_to_the_rest() {
    let long = long();
    let id = long.session;
    let (status, page) = get(&long.router, &format!("/sessions/{id}")).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let first_shown = (ENTRIES - ENTRIES_WINDOW + 1) as u64;
    assert_eq!(entry_cursors(&page), range(first_shown, ENTRIES as u64));
    assert!(
        page.contains(&format!(
            "data-src=\"/sessions/{id}/entries?before={first_shown}\""
        )),
        "no fetch of earlier entries: {page}"
    );
    assert!(
        page.contains(&format!("Show earlier events ({} more)", first_shown - 1)),
        "{page}"
    );
    assert!(!page.contains("Show later"), "{page}");
    // The scrubber still spans every entry.
    assert!(
        page.contains(&format!("Event {ENTRIES} of {ENTRIES}")),
        "{page}"
    );
}

#[tokio::test]
async fn earlier_entries_come_a_window_at_a_time() {
    let long = long();
    let id = long.session;
    let first_shown = (ENTRIES - ENTRIES_WINDOW + 1) as u64;
    let path = format!("/sessions/{id}/entries?before={first_shown}");
    let (status, fragment) = get(&long.router, &path).await;
    assert_eq!(status, StatusCode::OK, "{fragment}");
    let next = first_shown - ENTRIES_WINDOW as u64;
    assert_eq!(entry_cursors(&fragment), range(next, first_shown - 1));
    assert!(
        fragment.contains(&format!("entries?before={next}")),
        "no control for the entries before {next}"
    );
    assert!(
        !fragment.contains("Show later"),
        "earlier entries come with a control for later ones the page already shows"
    );
    let (_, last) = get(
        &long.router,
        &format!("/sessions/{id}/entries?before={next}"),
    )
    .await;
    assert_eq!(entry_cursors(&last), range(1, next - 1));
    assert!(
        !last.contains("retro-more"),
        "a control where nothing is left to show"
    );
}

#[tokio::test]
async fn an_older_position_opens_a_window_around_it_with_later_ones_to_fetch() {
    let long = long();
    let id = long.session;
    let (status, page) = get(&long.router, &format!("/sessions/{id}?at=100")).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let shown = entry_cursors(&page);
    assert_eq!(shown.len(), ENTRIES_WINDOW);
    assert!(shown.contains(&100), "the entry at ?at= is shown");
    assert!(shown[0] < 100, "entries leading up to it are shown");
    let last_shown = *shown.last().expect("entries");
    assert!(
        page.contains(&format!("entries?after={last_shown}")),
        "{page}"
    );
    let (_, later) = get(
        &long.router,
        &format!("/sessions/{id}/entries?after={last_shown}"),
    )
    .await;
    let fetched = entry_cursors(&later);
    assert_eq!(fetched.first(), Some(&(last_shown + 1)));
    assert!(fetched.len() <= ENTRIES_WINDOW);
}

#[tokio::test]
async fn the_entries_fragment_refuses_bad_requests() {
    let long = long();
    let id = long.session;
    let unknown = SessionId::from_uuid(Uuid::new_v4());
    for (path, status, snippet) in [
        (
            format!("/sessions/{id}/entries"),
            StatusCode::BAD_REQUEST,
            "give exactly one",
        ),
        (
            format!("/sessions/{id}/entries?before=3&after=2"),
            StatusCode::BAD_REQUEST,
            "give exactly one",
        ),
        (
            format!("/sessions/{id}/entries?before=x"),
            StatusCode::BAD_REQUEST,
            "before: &quot;x&quot; is not a number",
        ),
        (
            format!("/sessions/{unknown}/entries?before=3"),
            StatusCode::NOT_FOUND,
            "no session",
        ),
    ] {
        let (actual, body) = get(&long.router, &path).await;
        assert_eq!(actual, status, "GET {path}: {body}");
        assert!(
            body.contains(snippet),
            "GET {path}: no {snippet:?} in {body}"
        );
    }
}

#[tokio::test]
async fn an_entries_fragment_beyond_either_end_of_the_session_is_empty() {
    let long = long();
    let id = long.session;
    for path in [
        format!("/sessions/{id}/entries?before=0"),
        format!("/sessions/{id}/entries?before=1"),
        format!("/sessions/{id}/entries?after=999999999"),
        format!("/sessions/{id}/entries?after={}", u64::MAX),
    ] {
        let (actual, body) = get(&long.router, &path).await;
        assert_eq!(actual, StatusCode::OK, "GET {path}: {body}");
        assert!(!body.contains("retro-entry"), "GET {path}: {body}");
        assert!(!body.contains("retro-more"), "GET {path}: {body}");
    }
}

/// The cursors of the timeline's entries on the page, in order.
const ENTRIES_SHOWN: &str =
    "[...document.querySelectorAll('#timeline .retro-entry')].map(e => Number(e.dataset.cursor))";

#[tokio::test]
#[ignore = "slow: drives Chromium; scripts/test runs it"]
async fn show_earlier_puts_the_left_out_entries_in_place() {
    let long = long();
    let server = crate::support::RetroServer::start(long.dir.path()).await;
    let browser = planb_tests::browser::Browser::start().await;
    browser
        .open(&server.url(&format!("/sessions/{}", long.session)))
        .await;
    let shown = browser.eval(ENTRIES_SHOWN).await;
    let first_shown = ENTRIES - ENTRIES_WINDOW + 1;
    assert_eq!(
        shown,
        serde_json::json!(range(first_shown as u64, ENTRIES as u64))
    );
    for expected_first in [first_shown - ENTRIES_WINDOW, 1] {
        browser.click("#timeline .retro-more a").await;
        browser
            .wait_until_or_show(
                &format!("entries from #{expected_first} on"),
                &format!("{ENTRIES_SHOWN}[0] === {expected_first}"),
                ENTRIES_SHOWN,
            )
            .await;
    }
    let shown = browser.eval(ENTRIES_SHOWN).await;
    assert_eq!(shown, serde_json::json!(range(1, ENTRIES as u64)));
    assert!(
        browser
            .check("document.querySelector('#timeline .retro-more') === null")
            .await,
        "a control is left with nothing more to show"
    );
    // The scrubber still marks the entries, old and fetched alike.
    assert!(
        browser
            .check(&format!(
                "document.querySelector('#timeline .is-current').dataset.cursor === '{ENTRIES}'"
            ))
            .await
    );
    browser.close().await;
}
