//! The replay page in headless Chromium, served by the real `planb-retro`
//! binary over a data root written through `planb_projections::Store`: the
//! scrubber moved with the keyboard alone shows the state as of each cursor
//! and keeps the address a permalink, and events appended by another writer
//! while the page is open appear without a reload. Needs Debian's `chromium`
//! and `chromium-driver`; without them every test here fails.

use std::sync::Arc;

use crate::support::RetroServer;
use fantoccini::key::Key;
use planb_core::{AnswerValue, Answers, AskId, Command, Cursor, Delivery, SessionId, Timestamp};
use planb_projections::{DataRoot, FixedEnvironment, Store};
use planb_tests::browser::Browser;
use planb_tests::fixtures::one_question;
use serde_json::Value;
use tempfile::TempDir;
use uuid::Uuid;

/// The text each plan version carries, to tell them apart on the page.
const PLAN_TEXTS: [&str; 4] = [
    "Alpha: keep the cookies",
    "Beta: move to tokens",
    "Gamma: tokens stored in Postgres",
    "Delta: tokens with a rollback week",
];

/// A data root with one session: plan v1, a question, plan v2, the answer,
/// plan v3. The store stays open so a test can append as another writer
/// while `planb-retro` follows the log.
struct Fixture {
    dir: TempDir,
    store: Store,
    session: SessionId,
    /// The cursors of the session's events, in order.
    cursors: Vec<Cursor>,
}

fn plan(version: usize) -> String {
    format!("# Plan\n\n{}\n", PLAN_TEXTS[version - 1])
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let env = Arc::new(FixedEnvironment::new(Timestamp(1_700_000_000_000), 1_000));
        let (store, _) = Store::open(DataRoot::new(dir.path()), env).expect("open store");
        let session = SessionId::from_uuid(Uuid::new_v4());
        let ask = AskId::from_uuid(Uuid::new_v4());
        let mut fixture = Fixture {
            dir,
            store,
            session,
            cursors: Vec::new(),
        };
        fixture.append(Command::CreateSession {
            session,
            title: Some("Auth refactor".into()),
            intent: Some("Move sessions to tokens".into()),
            project_path: Some("/work/app".into()),
        });
        fixture.save_plan(1);
        fixture.open_ask(ask, "Storage choice");
        fixture.save_plan(2);
        fixture.append(Command::SubmitAnswers {
            ask,
            answers: Answers(vec![("db".into(), AnswerValue::Text("Postgres".into()))]),
        });
        fixture.save_plan(3);
        fixture
    }

    /// Executes `command` and returns the cursor of its last event.
    fn append(&mut self, command: Command) -> Cursor {
        let events = self.store.execute(command).expect("command accepted");
        let last = events.last().expect("the command recorded an event").cursor;
        self.cursors.extend(events.iter().map(|e| e.cursor));
        last
    }

    fn save_plan(&mut self, version: usize) -> Cursor {
        self.append(Command::SavePlan {
            session: self.session,
            title: Some(format!("Version {version}")),
            content: plan(version),
        })
    }

    fn open_ask(&mut self, ask: AskId, title: &str) -> Cursor {
        self.append(Command::OpenAsk {
            session: self.session,
            ask,
            spec: one_question(title),
            delivery: Delivery::BrowserOpened,
            url: "http://127.0.0.1:9/ask".into(),
            sid: "a".into(),
        })
    }

    fn session_path(&self) -> String {
        format!("/sessions/{}", self.session)
    }
}

/// Everything the test reads off the session page, in one script call so it
/// is one consistent moment of the page.
const SNAPSHOT: &str = "(() => {
    const state = document.getElementById('state');
    const plan = document.getElementById('current-plan');
    const range = document.getElementById('scrub');
    return {
        cursor: state ? state.dataset.cursor : null,
        loading: document.getElementById('state-panel').classList.contains('is-loading'),
        planVersion: plan ? plan.dataset.version : null,
        planText: plan ? plan.innerText : '',
        asks: state ? [...state.querySelectorAll('.retro-ask')].map(a => ({
            status: a.dataset.status,
            answers: [...a.querySelectorAll('.retro-answers dd')].map(d => d.innerText),
        })) : [],
        position: range.value,
        max: range.max,
        label: document.getElementById('scrub-label').textContent,
        search: location.search,
        permalink: document.getElementById('permalink').getAttribute('href'),
        current: [...document.querySelectorAll('#timeline .is-current')].map(e => e.dataset.cursor),
        future: [...document.querySelectorAll('#timeline .is-future')].map(e => e.dataset.cursor),
        entries: [...document.querySelectorAll('#timeline .retro-entry')].map(e => e.dataset.cursor),
    };
})()";

/// What the page should show at one scrubber position.
struct Expected<'a> {
    /// Index into the session's cursors.
    position: usize,
    /// The plan version shown as current (0 for none).
    plan_version: usize,
    /// Each question's status and its answers, in order.
    asks: &'a [(&'a str, &'a [&'a str])],
}

/// Waits until the state panel shows the cursor at `expected.position` and
/// has finished loading, then checks the plan, the questions, the scrubber,
/// the timeline marks and the address.
async fn assert_shows(browser: &Browser, cursors: &[Cursor], expected: Expected<'_>) {
    let cursor = cursors[expected.position];
    browser
        .wait_until_or_show(
            &format!("the state as of #{cursor}"),
            &format!(
                "document.getElementById('state').dataset.cursor === '{cursor}' \
                 && !document.getElementById('state-panel').classList.contains('is-loading')"
            ),
            SNAPSHOT,
        )
        .await;
    let seen = browser.eval(SNAPSHOT).await;
    let context = format!("at position {} (#{cursor}): {seen:#}", expected.position);
    assert_eq!(
        seen["planVersion"],
        expected.plan_version.to_string(),
        "{context}"
    );
    let plan_text = seen["planText"].as_str().unwrap_or_default();
    for (index, text) in PLAN_TEXTS.iter().enumerate() {
        assert_eq!(
            plan_text.contains(text),
            index + 1 == expected.plan_version,
            "plan text {text:?}: {context}"
        );
    }
    let asks: Vec<(String, Vec<String>)> = seen["asks"]
        .as_array()
        .expect("asks")
        .iter()
        .map(|ask| {
            let answers = ask["answers"].as_array().expect("answers").iter();
            (
                ask["status"].as_str().unwrap_or_default().to_owned(),
                answers
                    .map(|a| a.as_str().unwrap_or_default().to_owned())
                    .collect(),
            )
        })
        .collect();
    let expected_asks: Vec<(String, Vec<String>)> = expected
        .asks
        .iter()
        .map(|(status, answers)| {
            (
                status.to_string(),
                answers.iter().map(|a| a.to_string()).collect(),
            )
        })
        .collect();
    assert_eq!(asks, expected_asks, "questions: {context}");
    assert_eq!(seen["position"], expected.position.to_string(), "{context}");
    assert_eq!(
        seen["label"],
        format!(
            "Event {} of {} · log cursor {cursor}",
            expected.position + 1,
            cursors.len()
        ),
        "{context}"
    );
    let at = format!("?at={cursor}");
    assert_eq!(seen["search"], at, "the address: {context}");
    assert_eq!(seen["permalink"], at, "the permalink: {context}");
    assert_eq!(
        seen["current"],
        Value::from(vec![cursor.to_string()]),
        "{context}"
    );
    let later: Vec<String> = cursors
        .iter()
        .filter(|c| **c > cursor)
        .map(|c| c.to_string())
        .collect();
    assert_eq!(
        seen["future"],
        Value::from(later),
        "dimmed entries: {context}"
    );
}

#[tokio::test]
#[ignore = "slow: starts PostgreSQL; scripts/test runs it"]
async fn keyboard_scrubbing_shows_plan_and_answers_as_of_each_cursor() {
    let fixture = Fixture::new();
    let cursors = fixture.cursors.clone();
    assert_eq!(cursors.len(), 6, "the fixture's events");
    let server = RetroServer::start(fixture.dir.path()).await;
    let browser = Browser::start().await;
    browser.open(&server.url(&fixture.session_path())).await;

    // The range is a native slider: once focused, Home, End, Left and Right
    // move it, and the page follows.
    browser.tab_to("scrub", false, 12).await;
    browser.press(Key::Home).await;
    assert_shows(
        &browser,
        &cursors,
        Expected {
            position: 0,
            plan_version: 0,
            asks: &[],
        },
    )
    .await;
    browser.press(Key::Right).await;
    assert_shows(
        &browser,
        &cursors,
        Expected {
            position: 1,
            plan_version: 1,
            asks: &[],
        },
    )
    .await;
    browser.press(Key::Right).await;
    assert_shows(
        &browser,
        &cursors,
        Expected {
            position: 2,
            plan_version: 1,
            asks: &[("pending", &[])],
        },
    )
    .await;
    browser.press(Key::Right).await;
    assert_shows(
        &browser,
        &cursors,
        Expected {
            position: 3,
            plan_version: 2,
            asks: &[("pending", &[])],
        },
    )
    .await;
    browser.press(Key::Right).await;
    assert_shows(
        &browser,
        &cursors,
        Expected {
            position: 4,
            plan_version: 2,
            asks: &[("answered", &["Postgres"])],
        },
    )
    .await;
    browser.press(Key::Home).await;
    assert_shows(
        &browser,
        &cursors,
        Expected {
            position: 0,
            plan_version: 0,
            asks: &[],
        },
    )
    .await;
    browser.press(Key::End).await;
    assert_shows(
        &browser,
        &cursors,
        Expected {
            position: 5,
            plan_version: 3,
            asks: &[("answered", &["Postgres"])],
        },
    )
    .await;
    browser.press(Key::Left).await;
    let v2_answered = Expected {
        position: 4,
        plan_version: 2,
        asks: &[("answered", &["Postgres"])],
    };
    assert_shows(&browser, &cursors, v2_answered).await;

    // Off the slider, Left and Right still step, as Prev and Next announce
    // with aria-keyshortcuts; Enter on Next steps forward.
    browser.press(Key::Tab).await;
    assert_eq!(browser.focused_id().await, "scrub-next", "Tab after #scrub");
    browser.press(Key::Left).await;
    let v2_pending = Expected {
        position: 3,
        plan_version: 2,
        asks: &[("pending", &[])],
    };
    assert_shows(&browser, &cursors, v2_pending).await;
    browser.press(Key::Enter).await;
    let v2_answered = Expected {
        position: 4,
        plan_version: 2,
        asks: &[("answered", &["Postgres"])],
    };
    assert_shows(&browser, &cursors, v2_answered).await;

    // The address is a permalink: loading it shows the same point.
    let address = browser.string("location.href").await;
    assert!(
        address.ends_with(&format!("?at={}", cursors[4])),
        "{address}"
    );
    browser.open(&address).await;
    let v2_answered = Expected {
        position: 4,
        plan_version: 2,
        asks: &[("answered", &["Postgres"])],
    };
    assert_shows(&browser, &cursors, v2_answered).await;

    browser.close().await;
    drop(server);
}

/// Marks the page so a reload would show: a reload loses the mark.
const MARK: &str = "window.planbNotReloaded = true";
const NOT_RELOADED: &str = "window.planbNotReloaded === true";

#[tokio::test]
#[ignore = "slow: starts PostgreSQL; scripts/test runs it"]
async fn events_appended_by_another_writer_appear_live_without_a_reload() {
    let mut fixture = Fixture::new();
    let server = RetroServer::start(fixture.dir.path()).await;
    let browser = Browser::start().await;
    browser.open(&server.url(&fixture.session_path())).await;
    browser.eval(MARK).await;

    // At the end, the scrubber follows the new event.
    let v4 = fixture.save_plan(4);
    browser
        .wait_until_or_show(
            "the new plan version in the timeline",
            &format!("document.querySelector('#timeline [data-cursor=\"{v4}\"]') !== null"),
            SNAPSHOT,
        )
        .await;
    let cursors = fixture.cursors.clone();
    let mut v4_answered = Expected {
        position: 6,
        plan_version: 4,
        asks: &[("answered", &["Postgres"])],
    };
    // Loaded without ?at=, the page means "the latest": the address
    // gains no position while it follows.
    browser
        .wait_until_or_show(
            &format!("the state as of #{v4}"),
            &format!("document.getElementById('state').dataset.cursor === '{v4}'"),
            SNAPSHOT,
        )
        .await;
    let seen = browser.eval(SNAPSHOT).await;
    assert_eq!(seen["max"], "6", "{seen:#}");
    assert_eq!(seen["search"], "", "{seen:#}");
    assert_eq!(
        seen["entries"],
        Value::from(cursors.iter().map(|c| c.to_string()).collect::<Vec<_>>()),
        "{seen:#}"
    );
    assert!(browser.eval(NOT_RELOADED).await == Value::Bool(true));

    // Behind the end, the position stays and the new entry is dimmed.
    browser.press(Key::Left).await;
    v4_answered.position = 5;
    v4_answered.plan_version = 3;
    assert_shows(&browser, &cursors, v4_answered).await;
    let second_ask = AskId::from_uuid(Uuid::new_v4());
    let asked = fixture.open_ask(second_ask, "Ship it?");
    browser
        .wait_until_or_show(
            "the new question in the timeline",
            &format!("document.querySelector('#timeline [data-cursor=\"{asked}\"]') !== null"),
            SNAPSHOT,
        )
        .await;
    let cursors = fixture.cursors.clone();
    assert_shows(
        &browser,
        &cursors,
        Expected {
            position: 5,
            plan_version: 3,
            asks: &[("answered", &["Postgres"])],
        },
    )
    .await;
    assert_eq!(browser.eval(SNAPSHOT).await["max"], "7");

    // Scrubbed back to the end, the page follows again and keeps the
    // address in step with what it shows.
    browser.press(Key::Right).await;
    browser.press(Key::Right).await;
    assert_shows(
        &browser,
        &cursors,
        Expected {
            position: 7,
            plan_version: 4,
            asks: &[("answered", &["Postgres"]), ("pending", &[])],
        },
    )
    .await;
    let answered = fixture.append(Command::SubmitAnswers {
        ask: second_ask,
        answers: Answers(vec![("db".into(), AnswerValue::Text("SQLite".into()))]),
    });
    let cursors = fixture.cursors.clone();
    assert_eq!(cursors.last(), Some(&answered));
    assert_shows(
        &browser,
        &cursors,
        Expected {
            position: 8,
            plan_version: 4,
            asks: &[("answered", &["Postgres"]), ("answered", &["SQLite"])],
        },
    )
    .await;
    assert!(browser.eval(NOT_RELOADED).await == Value::Bool(true));

    // The index follows the whole log: a new session shows up unasked.
    browser.open(&server.url("/")).await;
    browser.eval(MARK).await;
    let other = SessionId::from_uuid(Uuid::new_v4());
    fixture.append(Command::CreateSession {
        session: other,
        title: Some("Billing export".into()),
        intent: None,
        project_path: None,
    });
    browser
        .wait_until_or_show(
            "the new session on the index",
            &format!("document.querySelector('#sessions a[href=\"/sessions/{other}\"]') !== null"),
            "document.getElementById('sessions').innerText",
        )
        .await;
    assert!(browser.eval(NOT_RELOADED).await == Value::Bool(true));

    browser.close().await;
    drop(server);
}
