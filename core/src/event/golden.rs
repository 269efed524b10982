//! The golden logs of every released event schema:
//! `fixtures/golden/events-v1.bin` to `events-v7.bin` each
//! hold one fixed event of every variant. The tests prove the current code decodes each file
//! to exactly those events (older versions upcast to the current one), and that each
//! version's types still encode to exactly those bytes. Run with
//! `PLANB_BLESS=1` to write a file, and only ever for a schema version that
//! has not been released.

use std::path::PathBuf;

use uuid::Uuid;

use super::*;
use crate::answer::{AnswerValue, Answers};
use crate::id::{RunId, TaskId};
use crate::plan_edit::PlanEdit;
use crate::question::{AskSpec, Choice, Question, QuestionKind};
use crate::time::Timestamp;

fn golden_path(version: u16) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../fixtures/golden/events-v{version}.bin"))
}

fn session() -> SessionId {
    SessionId::from_uuid(Uuid::from_u128(0x0190_f5a2_7c1e_7d3b_9a4f_1c2d_3e4f_5a6b))
}

fn ask() -> AskId {
    AskId::from_uuid(Uuid::from_u128(0x0190_f5a2_8000_7000_8000_0000_0000_0001))
}

fn plan() -> PlanName {
    PlanName::parse("auth-refactor").unwrap()
}

fn spec() -> AskSpec {
    let question = |id: &str, tab: Option<&str>, required: bool, kind| Question {
        id: id.into(),
        label: format!("Label of {id}"),
        required,
        tab: tab.map(Into::into),
        kind,
    };
    let choice = |value: &str| Choice {
        value: value.into(),
        markdown: None,
    };
    AskSpec {
        title: "Project kickoff preferences".into(),
        intro_title: Some("Kickoff".into()),
        intro: Some("A few quick questions.\n\n| a | b |\n|---|---|\n| 1 | 2 |".into()),
        questions: vec![
            question(
                "project_name",
                Some("Workspace"),
                true,
                QuestionKind::Text {
                    placeholder: Some("e.g. Aurora".into()),
                },
            ),
            question(
                "summary",
                Some("Workspace"),
                false,
                QuestionKind::LongText { placeholder: None },
            ),
            question(
                "language",
                Some("Workspace"),
                true,
                QuestionKind::Single {
                    options: vec![
                        Choice {
                            value: "TypeScript".into(),
                            markdown: Some("### TypeScript\n\nStrong typing.".into()),
                        },
                        choice("Go"),
                        choice("Rust"),
                    ],
                },
            ),
            question(
                "integrations",
                None,
                false,
                QuestionKind::Multi {
                    options: vec![choice("GitHub"), choice("Slack"), choice("Linear")],
                },
            ),
            question(
                "priority",
                Some("Priority"),
                true,
                QuestionKind::Scale {
                    min: 1.0,
                    max: 5.0,
                    step: Some(0.5),
                },
            ),
        ],
    }
}

fn answers(project: &str) -> Answers {
    Answers(vec![
        ("project_name".into(), AnswerValue::Text(project.into())),
        (
            "summary".into(),
            AnswerValue::Text("A realtime collaboration tool. ✓".into()),
        ),
        ("language".into(), AnswerValue::Choice("Rust".into())),
        (
            "integrations".into(),
            AnswerValue::Choices(vec!["GitHub".into(), "Slack".into()]),
        ),
        ("priority".into(), AnswerValue::Number(4.5)),
    ])
}

/// One event of every version 1 variant, in declaration order, with fixed
/// ids and times one second apart.
pub(crate) fn fixed_events_v1() -> Vec<v1::Event> {
    use v1::EventBody as B;
    let bodies = vec![
        B::SessionCreated {
            session: session(),
            title: Some("Auth refactor".into()),
            intent: Some("Plan the move to passkeys".into()),
            project_path: Some("/home/ada/src/app".into()),
        },
        B::AskOpened {
            session: session(),
            ask: ask(),
            spec: spec(),
            delivery: Delivery::BrowserOpened,
            url: "http://127.0.0.1:49152/ask?sid=4f1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e".into(),
        },
        B::AskDraftSaved {
            ask: ask(),
            answers: Answers(vec![(
                "project_name".into(),
                AnswerValue::Text("Aur".into()),
            )]),
        },
        B::AskAnswered {
            ask: ask(),
            answers: answers("Aurora"),
        },
        B::AskTimedOut { ask: ask() },
        B::AskDeclined {
            ask: ask(),
            action: DeclineAction::Cancel,
        },
        B::AskFailed {
            ask: ask(),
            detail: "could not open the browser: no display".into(),
        },
        B::AskLateAnswer {
            ask: ask(),
            answers: answers("Borealis"),
        },
        B::PlanVersionSaved {
            session: session(),
            version: 3,
            title: Some("Draft".into()),
            content: "# Plan\n\n1. Add passkeys\n2. Remove passwords\n".into(),
        },
        B::NamedPlanWritten {
            plan: plan(),
            content: "# Auth refactor\n\n- step one\n".into(),
            session: Some(session()),
        },
        B::NamedPlanEdited {
            plan: plan(),
            edits: vec![
                PlanEdit {
                    old: "step one".into(),
                    new: "add passkeys".into(),
                    replace_all: false,
                },
                PlanEdit {
                    old: "Auth".into(),
                    new: "Login".into(),
                    replace_all: true,
                },
            ],
            content_len_after: 33,
        },
        B::NamedPlanChangedOutside {
            plan: plan(),
            content: "# Login refactor\n\n- add passkeys\n- hand edit\n".into(),
        },
        B::NamedPlanSubmitted {
            plan: plan(),
            round: 1,
        },
        B::NamedPlanReviewed {
            plan: plan(),
            round: 1,
            verdict: Verdict::ChangesRequested,
            feedback: Some("Say how recovery works.".into()),
            comments: vec![ReviewComment {
                quote: "hand edit".into(),
                text: "What is this?".into(),
            }],
            channel: ReviewChannel::Browser,
        },
    ];
    bodies
        .into_iter()
        .zip(1u128..)
        .map(|(body, n)| v1::Event {
            id: EventId::from_uuid(Uuid::from_u128(
                0x0190_f5a2_9000_7000_8000_0000_0000_0000 + n,
            )),
            at: Timestamp(1_780_856_470_123 + 1000 * n as i64),
            body,
        })
        .collect()
}

/// The plans directory of the version 2 golden plan.
const PLANS_DIR: &str = "/home/ada/src/app/docs/plans";

/// One event of every version 2 variant: the version 1 events, upcast, with
/// the named plan in a plans directory.
pub(crate) fn fixed_events_v2() -> Vec<v2::Event> {
    fixed_events_v1()
        .into_iter()
        .map(|event| {
            let mut event = v2::Event::from(event);
            match &mut event.body {
                v2::EventBody::NamedPlanWritten { plans_dir, .. }
                | v2::EventBody::NamedPlanEdited { plans_dir, .. }
                | v2::EventBody::NamedPlanChangedOutside { plans_dir, .. }
                | v2::EventBody::NamedPlanSubmitted { plans_dir, .. }
                | v2::EventBody::NamedPlanReviewed { plans_dir, .. } => {
                    *plans_dir = PLANS_DIR.into();
                }
                _ => {}
            }
            event
        })
        .collect()
}

fn task() -> TaskId {
    TaskId::from_uuid(Uuid::from_u128(0x0190_f5a2_9000_7000_8000_0000_0000_00a1))
}

fn run(n: u128) -> RunId {
    RunId::from_uuid(Uuid::from_u128(
        0x0190_f5a2_9000_7000_8000_0000_0000_0b00 + n,
    ))
}

fn sha(text: &str) -> [u8; 32] {
    crate::hash::ContentHash::of(text).0
}

/// One event of every version 3 variant: the version 2 events, upcast, then
/// one task's life: created, run, a step failed and one succeeded, an
/// artifact edited, a stop, the run ended, its log, and a resumed run.
pub(crate) fn fixed_events_v3() -> Vec<v3::Event> {
    let at = |n: i64| Timestamp(1_780_856_500_000 + n);
    let id = |n: u128| {
        EventId::from_uuid(Uuid::from_u128(
            0x0190_f5a2_9100_7000_8000_0000_0000_0000 + n,
        ))
    };
    let bodies = vec![
        v3::EventBody::TaskCreated {
            task: task(),
            pipeline: "project-plan".into(),
            pipeline_version: 1,
            prompt: "Open a bakery in Lisbon".into(),
            speed: "fast".into(),
            target: "report".into(),
            model_profile: Some("baseline".into()),
            client_request_id: Some("req-7".into()),
        },
        v3::EventBody::RunStarted {
            task: task(),
            run: run(1),
            resumed_from: None,
            owner_pid: 4242,
            host: "ada-laptop".into(),
        },
        v3::EventBody::StepStarted {
            task: task(),
            run: run(1),
            step: "intake".into(),
            attempt: 1,
            input: sha("intake input"),
        },
        v3::EventBody::StepFailed {
            task: task(),
            run: run(1),
            step: "intake".into(),
            class: "model_timeout".into(),
            message: "the model did not answer within 120 s".into(),
            recoverable: true,
        },
        v3::EventBody::StepSucceeded {
            task: task(),
            run: run(1),
            step: "intake".into(),
            input: sha("intake input"),
            artifact: sha("# Intake"),
            bytes: 8,
            duration_ms: 1_234,
            tokens_in: 900,
            tokens_out: 350,
        },
        v3::EventBody::ArtifactEdited {
            task: task(),
            step: "intake".into(),
            artifact: sha("# Intake, edited"),
            bytes: 16,
            by: "task_artifact_write".into(),
        },
        v3::EventBody::StopRequested {
            task: task(),
            run: run(1),
        },
        v3::EventBody::RunLog {
            task: task(),
            run: run(1),
            lines: vec!["intake: done".into(), "stopping".into()],
        },
        v3::EventBody::RunEnded {
            task: task(),
            run: run(1),
            outcome: v3::RunOutcome::Stopped,
            reason: None,
            failed_step: None,
            recoverable: true,
        },
        v3::EventBody::RunStarted {
            task: task(),
            run: run(2),
            resumed_from: Some(run(1)),
            owner_pid: 4343,
            host: "ada-laptop".into(),
        },
        v3::EventBody::RunEnded {
            task: task(),
            run: run(2),
            outcome: v3::RunOutcome::Failed,
            reason: Some("worker_error".into()),
            failed_step: Some("risks".into()),
            recoverable: true,
        },
    ];
    let mut events: Vec<v3::Event> = fixed_events_v2().into_iter().map(v3::Event::from).collect();
    events.extend(bodies.into_iter().enumerate().map(|(n, body)| v3::Event {
        id: id(n as u128),
        at: at(n as i64),
        body,
    }));
    events
}

/// One event of every version 4 variant: the version 3 events, upcast, then
/// an execution plan's life: created, a run with call-time variables, a
/// tool step started with its call, succeeded, the run ended, the plan
/// deleted.
pub(crate) fn fixed_events_v4() -> Vec<v4::Event> {
    use v4::{Event, EventBody};
    let at = |n: i64| Timestamp(1_780_856_600_000 + n);
    let id = |n: u128| {
        EventId::from_uuid(Uuid::from_u128(
            0x0190_f5a2_9200_7000_8000_0000_0000_0000 + n,
        ))
    };
    let plan = TaskId::from_uuid(Uuid::from_u128(0x0190_f5a2_9200_7000_8000_0000_0000_0fff));
    let bodies = vec![
        EventBody::PlanCreated {
            task: plan,
            title: "Refactor Auth Module".into(),
            definition: r#"{"title":"Refactor Auth Module","variables":{},"steps":[{"index":"1","title":"Read","tool":"fs__read_file","args":{"path":"a.py"},"depends_on":[],"result_variable":"code"}]}"#.into(),
            client_request_id: Some("req-9".into()),
        },
        EventBody::RunStarted {
            task: plan,
            run: run(3),
            resumed_from: None,
            owner_pid: 4444,
            host: "ada-laptop".into(),
            variables: Some(r#"{"module_path":"src/auth.py"}"#.into()),
        },
        EventBody::StepStarted {
            task: plan,
            run: run(3),
            step: "1".into(),
            attempt: 1,
            input: sha("call 1"),
            call: Some(sha(r#"{"tool":"fs__read_file","args":{"path":"a.py"}}"#)),
        },
        EventBody::StepSucceeded {
            task: plan,
            run: run(3),
            step: "1".into(),
            input: sha("call 1"),
            artifact: sha("def handle(): pass"),
            bytes: 18,
            duration_ms: 12,
            tokens_in: 0,
            tokens_out: 0,
        },
        EventBody::RunEnded {
            task: plan,
            run: run(3),
            outcome: RunOutcome::Completed,
            reason: None,
            failed_step: None,
            recoverable: false,
        },
        EventBody::PlanDeleted { task: plan },
    ];
    let mut events: Vec<Event> = fixed_events_v3().into_iter().map(Event::from).collect();
    events.extend(bodies.into_iter().enumerate().map(|(n, body)| Event {
        id: id(n as u128),
        at: at(n as i64),
        body,
    }));
    events
}

/// One event of every version 5 variant: the version 4 events, upcast,
/// then a small blob recorded in the log.
pub(crate) fn fixed_events_v5() -> Vec<v5::Event> {
    use v5::{Event, EventBody};
    let plan = TaskId::from_uuid(Uuid::from_u128(0x0190_f5a2_9200_7000_8000_0000_0000_0fff));
    let mut events: Vec<Event> = fixed_events_v4().into_iter().map(Event::from).collect();
    events.push(Event {
        id: EventId::from_uuid(Uuid::from_u128(0x0190_f5a2_9300_7000_8000_0000_0000_0001)),
        at: Timestamp(1_780_856_700_000),
        body: EventBody::BlobStored {
            task: plan,
            bytes: br#"{"tool":"fs__read_file","args":{"path":"a.py"}}"#.to_vec(),
        },
    });
    events
}

/// One event of every version 6 variant: the version 5 events, upcast,
/// then the task of version 3 archived and deleted.
pub(crate) fn fixed_events_v6() -> Vec<v6::Event> {
    use v6::{Event, EventBody};
    let mut events: Vec<Event> = fixed_events_v5().into_iter().map(Event::from).collect();
    let id = |n: u128| {
        EventId::from_uuid(Uuid::from_u128(
            0x0190_f5a2_9400_7000_8000_0000_0000_0000 + n,
        ))
    };
    events.push(Event {
        id: id(1),
        at: Timestamp(1_780_856_800_000),
        body: EventBody::TaskArchived { task: task() },
    });
    events.push(Event {
        id: id(2),
        at: Timestamp(1_780_856_800_001),
        body: EventBody::TaskDeleted { task: task() },
    });
    events
}

/// One event of every version 7 variant: the version 6 events, upcast
/// (no project), then a task and an execution plan made in a project.
pub(crate) fn fixed_events() -> Vec<Event> {
    let mut events: Vec<Event> = fixed_events_v6().into_iter().map(Event::from).collect();
    let id = |n: u128| {
        EventId::from_uuid(Uuid::from_u128(
            0x0190_f5a2_9500_7000_8000_0000_0000_0000 + n,
        ))
    };
    let new = |n: u128| {
        TaskId::from_uuid(Uuid::from_u128(
            0x0190_f5a2_9500_7000_8000_0000_0000_0f00 + n,
        ))
    };
    events.push(Event {
        id: id(1),
        at: Timestamp(1_780_856_900_000),
        body: EventBody::TaskCreated {
            task: new(1),
            pipeline: "project-plan".into(),
            pipeline_version: 1,
            prompt: "Open a bakery".into(),
            speed: "fast".into(),
            target: "build_plan".into(),
            model_profile: None,
            client_request_id: None,
            project_path: Some("/work/bakery".into()),
        },
    });
    events.push(Event {
        id: id(2),
        at: Timestamp(1_780_856_900_001),
        body: EventBody::PlanCreated {
            task: new(2),
            title: "Lint".into(),
            definition: r#"{"title":"Lint","steps":[]}"#.into(),
            client_request_id: Some("lint-1".into()),
            project_path: Some("/work/bakery".into()),
        },
    });
    events
}

/// A payload of an older schema `version`, as planb wrote it then.
fn encode_old<E>(event: &E, version: u16) -> Vec<u8>
where
    E: for<'a> rkyv::Serialize<
            rkyv::api::high::HighSerializer<
                rkyv::util::AlignedVec,
                rkyv::ser::allocator::ArenaHandle<'a>,
                rkyv::rancor::Error,
            >,
        >,
{
    let archive = rkyv::to_bytes::<rkyv::rancor::Error>(event).unwrap();
    let mut payload = MAGIC.to_vec();
    payload.extend_from_slice(&version.to_le_bytes());
    payload.extend_from_slice(&archive);
    payload
}

/// The log-like framing of the golden file: (u32 little-endian length,
/// payload) records.
fn frame(payloads: &[Vec<u8>]) -> Vec<u8> {
    let mut file = Vec::new();
    for payload in payloads {
        let len = u32::try_from(payload.len()).unwrap();
        file.extend_from_slice(&len.to_le_bytes());
        file.extend_from_slice(payload);
    }
    file
}

fn unframe(mut file: &[u8]) -> Vec<&[u8]> {
    let mut payloads = Vec::new();
    while !file.is_empty() {
        let (len, rest) = file.split_first_chunk::<4>().expect("truncated length");
        let len = u32::from_le_bytes(*len) as usize;
        assert!(rest.len() >= len, "truncated record");
        let (payload, rest) = rest.split_at(len);
        payloads.push(payload);
        file = rest;
    }
    payloads
}

/// Reads the golden file of `version`, writing `payloads` to it first with
/// `PLANB_BLESS=1`, and checks it decodes to `expected` and equals `payloads`.
fn check_golden(version: u16, payloads: &[Vec<u8>], expected: &[Event]) {
    let path = golden_path(version);
    if std::env::var_os("PLANB_BLESS").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, frame(payloads)).unwrap();
    }
    let file = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with PLANB_BLESS=1 to create it)",
            path.display()
        )
    });
    let records = unframe(&file);
    assert_eq!(records.len(), expected.len(), "number of golden records");
    for (index, (record, expected)) in records.iter().zip(expected).enumerate() {
        let cursor = Cursor(index as u64 + 1);
        let decoded = decode(record, cursor).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(decoded.event, *expected, "golden record {cursor}");
    }
    assert!(
        file == frame(payloads),
        "encoding the fixed events no longer gives the bytes of {}: the v{version} wire format changed",
        path.display()
    );
}

#[test]
fn golden_log_v1_still_decodes_and_encodes_byte_for_byte() {
    let events = fixed_events_v1();
    let payloads: Vec<Vec<u8>> = events.iter().map(|e| encode_old(e, 1)).collect();
    let upcast: Vec<Event> = events.into_iter().map(Event::from).collect();
    check_golden(1, &payloads, &upcast);
}

#[test]
fn golden_log_v2_still_decodes_and_encodes_byte_for_byte() {
    let events = fixed_events_v2();
    let payloads: Vec<Vec<u8>> = events.iter().map(|e| encode_old(e, 2)).collect();
    let upcast: Vec<Event> = events.into_iter().map(Event::from).collect();
    check_golden(2, &payloads, &upcast);
}

#[test]
fn golden_log_v3_still_decodes_and_encodes_byte_for_byte() {
    let events = fixed_events_v3();
    let payloads: Vec<Vec<u8>> = events.iter().map(|e| encode_old(e, 3)).collect();
    let upcast: Vec<Event> = events.into_iter().map(Event::from).collect();
    check_golden(3, &payloads, &upcast);
}

#[test]
fn golden_log_v4_still_decodes_and_encodes_byte_for_byte() {
    let events = fixed_events_v4();
    let payloads: Vec<Vec<u8>> = events.iter().map(|e| encode_old(e, 4)).collect();
    let upcast: Vec<Event> = events.into_iter().map(Event::from).collect();
    check_golden(4, &payloads, &upcast);
}

#[test]
fn golden_log_v5_still_decodes_and_encodes_byte_for_byte() {
    let events = fixed_events_v5();
    let payloads: Vec<Vec<u8>> = events.iter().map(|e| encode_old(e, 5)).collect();
    let upcast: Vec<Event> = events.into_iter().map(Event::from).collect();
    check_golden(5, &payloads, &upcast);
}

#[test]
fn golden_log_v6_still_decodes_and_encodes_byte_for_byte() {
    let events = fixed_events_v6();
    let payloads: Vec<Vec<u8>> = events.iter().map(|e| encode_old(e, 6)).collect();
    let upcast: Vec<Event> = events.into_iter().map(Event::from).collect();
    check_golden(6, &payloads, &upcast);
}

#[test]
fn golden_log_v7_still_decodes_and_encodes_byte_for_byte() {
    let events = fixed_events();
    let payloads: Vec<Vec<u8>> = events.iter().map(|e| encode(e).unwrap()).collect();
    check_golden(7, &payloads, &events);
}

/// The golden edit applies to the golden plan's content and gives the
/// length its event records.
#[test]
fn golden_edit_event_is_consistent() {
    let events = fixed_events();
    let EventBody::NamedPlanEdited {
        edits,
        content_len_after,
        ..
    } = &events[10].body
    else {
        panic!("event 10 is not the edit");
    };
    let (after, _) =
        crate::plan_edit::apply_edits("# Auth refactor\n\n- step one\n", edits).unwrap();
    assert_eq!(after.len() as u64, *content_len_after, "{after:?}");
}
