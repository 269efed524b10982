//! The time-travel properties: the state at any cursor equals a fresh fold
//! of the events up to it, and a session's state at any cursor agrees with
//! that fold on the session, its asks and the named plans tied to it.

use planb_core::{
    Answers, Ask, AskId, AskSpec, Command, Cursor, DeclineAction, Delivery, Envelope, Event,
    EventId, NamedPlan, PlanKey, PlanName, PlanVersion, Question, QuestionKind, ReviewChannel,
    SessionId, State, Timestamp, Verdict,
};
use proptest::prelude::*;
use uuid::Uuid;

use super::{SessionAt, Timeline};

/// What a generated step does; indexes pick among what exists so far, so
/// most steps are accepted and the rest are rejections that append nothing.
#[derive(Clone, Debug)]
enum Step {
    CreateSession,
    OpenAsk(usize),
    Answer(usize),
    TimeOut(usize),
    Decline(usize),
    SavePlan(usize, u8),
    WritePlan(u8, usize, u8),
    EditPlan(u8),
    SubmitPlan(u8),
    ReviewPlan(u8, u32, bool),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        1 => Just(Step::CreateSession),
        2 => any::<usize>().prop_map(Step::OpenAsk),
        2 => any::<usize>().prop_map(Step::Answer),
        1 => any::<usize>().prop_map(Step::TimeOut),
        1 => any::<usize>().prop_map(Step::Decline),
        3 => (any::<usize>(), any::<u8>()).prop_map(|(s, c)| Step::SavePlan(s, c)),
        2 => (0..3u8, any::<usize>(), any::<u8>()).prop_map(|(p, s, c)| Step::WritePlan(p, s, c)),
        1 => (0..3u8).prop_map(Step::EditPlan),
        1 => (0..3u8).prop_map(Step::SubmitPlan),
        1 => (0..3u8, 1..4u32, any::<bool>()).prop_map(|(p, r, ok)| Step::ReviewPlan(p, r, ok)),
    ]
}

fn spec() -> AskSpec {
    AskSpec {
        title: "Which way?".into(),
        intro_title: None,
        intro: None,
        questions: vec![Question {
            id: "way".into(),
            label: "Pick one".into(),
            required: true,
            tab: None,
            kind: QuestionKind::Text { placeholder: None },
        }],
    }
}

/// Plans in two directories, so one name can mean two plans.
fn plan_name(index: u8) -> PlanKey {
    let name = PlanName::parse(&format!("plan-{}", index / 2)).expect("a valid plan name");
    PlanKey::new(format!("/project-{}/docs/plans", index % 2), name)
}

/// Runs the steps through `decide` and `apply` and returns the events, with
/// cursors from 1, as the log would hold them.
fn events(steps: &[Step]) -> Vec<Envelope> {
    let mut state = State::default();
    let mut sessions: Vec<SessionId> = Vec::new();
    let mut asks: Vec<AskId> = Vec::new();
    let mut envelopes = Vec::new();
    let mut ids = 0u128;
    let mut mint = || {
        ids += 1;
        Uuid::from_u128(ids)
    };
    for step in steps {
        let pick = |n: usize, len: usize| (len > 0).then(|| n % len);
        let command = match step {
            Step::CreateSession => {
                let session = SessionId::from_uuid(mint());
                sessions.push(session);
                Some(Command::CreateSession {
                    session,
                    title: Some(format!("session {}", sessions.len())),
                    intent: None,
                    project_path: Some("/work/p".into()),
                })
            }
            Step::OpenAsk(n) => pick(*n, sessions.len()).map(|i| {
                let ask = AskId::from_uuid(mint());
                asks.push(ask);
                Command::OpenAsk {
                    session: sessions[i],
                    ask,
                    spec: spec(),
                    delivery: Delivery::BrowserOpened,
                    url: "http://127.0.0.1:1/ask".into(),
                    sid: "x".into(),
                }
            }),
            Step::Answer(n) => pick(*n, asks.len()).map(|i| Command::SubmitAnswers {
                ask: asks[i],
                answers: Answers(vec![(
                    "way".into(),
                    planb_core::AnswerValue::Text("left".into()),
                )]),
            }),
            Step::TimeOut(n) => pick(*n, asks.len()).map(|i| Command::TimeOut { ask: asks[i] }),
            Step::Decline(n) => pick(*n, asks.len()).map(|i| Command::Decline {
                ask: asks[i],
                action: DeclineAction::Cancel,
            }),
            Step::SavePlan(n, c) => pick(*n, sessions.len()).map(|i| Command::SavePlan {
                session: sessions[i],
                title: None,
                content: format!("# Plan\n\nstep {c}\n"),
            }),
            Step::WritePlan(p, n, c) => Some(Command::WritePlan {
                plan: plan_name(*p),
                content: format!("# Named\n\nbody {c}\n"),
                session: pick(*n, sessions.len()).map(|i| sessions[i]),
            }),
            Step::EditPlan(p) => Some(Command::EditPlan {
                plan: plan_name(*p),
                edits: vec![planb_core::PlanEdit {
                    old: "body".into(),
                    new: "text".into(),
                    replace_all: false,
                }],
            }),
            Step::SubmitPlan(p) => Some(Command::SubmitPlan {
                plan: plan_name(*p),
            }),
            Step::ReviewPlan(p, round, ok) => Some(Command::ReviewPlan {
                plan: plan_name(*p),
                round: *round,
                verdict: if *ok {
                    Verdict::Approved
                } else {
                    Verdict::ChangesRequested
                },
                feedback: Some("fine".into()),
                comments: Vec::new(),
                channel: ReviewChannel::Browser,
            }),
        };
        let Some(command) = command else { continue };
        let Ok(bodies) = state.decide(command) else {
            continue;
        };
        for body in bodies {
            let cursor = Cursor(envelopes.len() as u64 + 1);
            let envelope = Envelope {
                cursor,
                event: Event {
                    id: EventId::from_uuid(mint()),
                    at: Timestamp(1_700_000_000_000 + cursor.0 as i64 * 1_000),
                    body,
                },
            };
            state.apply(&envelope);
            envelopes.push(envelope);
        }
    }
    envelopes
}

fn timeline(events: &[Envelope]) -> Timeline {
    let mut timeline = Timeline::new();
    for envelope in events {
        assert!(timeline.push(envelope.clone()));
    }
    timeline
}

/// Checks `state_at` against a fresh fold at every cursor, one past the end
/// included.
fn check_time_travel(events: &[Envelope]) {
    let timeline = timeline(events);
    let mut fresh = State::default();
    assert_eq!(*timeline.state_at(Cursor::ZERO), fresh);
    for envelope in events {
        fresh.apply(envelope);
        assert_eq!(
            *timeline.state_at(envelope.cursor),
            fresh,
            "state at cursor {}",
            envelope.cursor
        );
    }
    assert_eq!(*timeline.state_at(timeline.last_cursor().next()), fresh);
    assert_eq!(timeline.state(), &fresh);
}

/// What a session's replay shows: whether it exists, its asks, its latest
/// plan version and the named plans tied to it.
type SessionView = (bool, Vec<Ask>, Option<PlanVersion>, Vec<NamedPlan>);

fn fresh_view(state: &State, session: &SessionId) -> SessionView {
    let found = state.session(session);
    let asks = found
        .iter()
        .flat_map(|s| s.asks.iter())
        .filter_map(|id| state.ask(id).cloned())
        .collect();
    let plans = state
        .named_plans()
        .values()
        .filter(|p| p.session.as_ref() == Some(session))
        .cloned()
        .collect();
    let latest = state.latest_plan_version(session).cloned();
    (found.is_some(), asks, latest, plans)
}

fn timeline_view(at: &SessionAt<'_>) -> SessionView {
    (
        at.exists(),
        at.asks().into_iter().cloned().collect(),
        at.latest_plan().cloned(),
        at.named_plans().cloned().collect(),
    )
}

/// Checks `session_at` for every session against a fresh fold at every
/// cursor.
fn check_session_time_travel(events: &[Envelope]) {
    let timeline = timeline(events);
    let sessions: Vec<SessionId> = timeline.state().sessions().keys().copied().collect();
    let mut fresh = State::default();
    for cursor in (0..=events.len() as u64 + 1).map(Cursor) {
        if let Some(envelope) = events.get(cursor.0.wrapping_sub(1) as usize) {
            fresh.apply(envelope);
        }
        for session in &sessions {
            assert_eq!(
                timeline_view(&timeline.session_at(session, cursor)),
                fresh_view(&fresh, session),
                "session {session} at cursor {cursor}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn state_at_any_cursor_equals_a_fresh_fold(
        steps in proptest::collection::vec(step(), 0..80),
    ) {
        check_time_travel(&events(&steps));
    }

    #[test]
    fn a_session_at_any_cursor_equals_it_in_a_fresh_fold(
        steps in proptest::collection::vec(step(), 0..80),
    ) {
        check_session_time_travel(&events(&steps));
    }
}

#[test]
fn a_named_plan_moved_to_another_session_leaves_the_first() {
    let events = events(&[
        Step::CreateSession,
        Step::CreateSession,
        Step::WritePlan(0, 0, 1),
        Step::SubmitPlan(0),
        Step::WritePlan(0, 1, 2),
        Step::EditPlan(0),
    ]);
    check_session_time_travel(&events);
}

#[test]
fn events_are_given_back_whole() {
    let events = events(&[
        Step::CreateSession,
        Step::SavePlan(0, 1),
        Step::OpenAsk(0),
        Step::SavePlan(0, 2),
        Step::Answer(0),
        Step::WritePlan(0, 0, 3),
        Step::EditPlan(0),
    ]);
    let timeline = timeline(&events);
    for envelope in &events {
        assert_eq!(
            timeline.event(envelope.cursor).as_deref(),
            Some(envelope),
            "event at cursor {}",
            envelope.cursor
        );
    }
    let session = *timeline
        .state()
        .sessions()
        .keys()
        .next()
        .expect("a session");
    let all: Vec<Envelope> = timeline
        .session_events(&session, 0..usize::MAX)
        .map(|e| e.into_owned())
        .collect();
    assert_eq!(all, events);
}

#[test]
fn events_already_seen_are_not_pushed_twice() {
    let events = events(&[Step::CreateSession, Step::SavePlan(0, 1)]);
    let mut timeline = timeline(&events);
    assert!(!timeline.push(events[0].clone()));
    assert_eq!(timeline.len(), 2);
}

#[test]
fn session_events_include_its_asks_and_tied_named_plans() {
    let events = events(&[
        Step::CreateSession,
        Step::CreateSession,
        Step::OpenAsk(0),
        Step::Answer(0),
        Step::WritePlan(0, 0, 1),
        Step::EditPlan(0),
        Step::SavePlan(1, 2),
    ]);
    let timeline = timeline(&events);
    let first = *timeline
        .state()
        .sessions()
        .keys()
        .find(|id| timeline.state().sessions()[*id].title.as_deref() == Some("session 1"))
        .expect("session 1");
    let kinds: Vec<&str> = timeline
        .session_events(&first, 0..usize::MAX)
        .map(|e| e.event.body.kind_name())
        .collect();
    assert_eq!(
        kinds,
        [
            "session_created",
            "ask_opened",
            "ask_answered",
            "named_plan_written",
            "named_plan_edited"
        ]
    );
    let edit = *timeline.session_cursors(&first).last().expect("an edit");
    assert_eq!(
        timeline.plan_content_after(edit),
        Some("# Named\n\ntext 1\n")
    );
}

#[test]
fn a_task_at_any_cursor_equals_it_in_a_fresh_fold_with_each_steps_mark() {
    use planb_core::{RunId, RunOutcome, TaskId};

    use super::StepMark;
    let task = TaskId::from_uuid(Uuid::from_u128(0x7a5c));
    let run = |n: u128| RunId::from_uuid(Uuid::from_u128(0x0b00 + n));
    let start_step = |n: u128, step: &str| Command::StartStep {
        task,
        run: run(n),
        step: step.into(),
        input: [1; 32],
        call: None,
    };
    let succeed = |n: u128, step: &str, artifact: u8| Command::SucceedStep {
        task,
        run: run(n),
        step: step.into(),
        input: [1; 32],
        artifact: [artifact; 32],
        bytes: 10,
        duration_ms: 5,
        tokens_in: 1,
        tokens_out: 2,
    };
    let commands = vec![
        Command::CreateTask {
            task,
            pipeline: "project-plan".into(),
            pipeline_version: 1,
            prompt: "Open a bakery in Lisbon".into(),
            speed: "fast".into(),
            target: "report".into(),
            model_profile: None,
            client_request_id: None,
            project_path: None,
        },
        Command::StartRun {
            task,
            run: run(1),
            resumed_from: None,
            owner_pid: 7,
            host: "h".into(),
            variables: None,
        },
        start_step(1, "intake"),
        start_step(1, "risks"),
        succeed(1, "intake", 3),
        // The worker dies: its run is ended with risks still running.
        Command::EndRun {
            task,
            run: run(1),
            outcome: RunOutcome::Failed,
            reason: Some("worker_error".into()),
            failed_step: None,
            recoverable: true,
        },
        Command::EditArtifact {
            task,
            step: "intake".into(),
            artifact: [4; 32],
            bytes: 11,
            by: "hand edit of 01-intake.md".into(),
        },
    ];
    let mut state = State::default();
    let mut events = Vec::new();
    for command in commands {
        for body in state.decide(command).expect("accepted") {
            let cursor = Cursor(events.len() as u64 + 1);
            let envelope = Envelope {
                cursor,
                event: Event {
                    id: EventId::from_uuid(Uuid::from_u128(u128::from(cursor.0))),
                    at: Timestamp(1_700_000_000_000 + cursor.0 as i64),
                    body,
                },
            };
            state.apply(&envelope);
            events.push(envelope);
        }
    }
    let timeline = timeline(&events);
    assert_eq!(timeline.task_cursors(&task).len(), events.len());
    let mut fresh = State::default();
    assert!(timeline.task_at(&task, Cursor::ZERO).is_none());
    for envelope in &events {
        fresh.apply(envelope);
        let at = timeline.task_at(&task, envelope.cursor).expect("the task");
        assert_eq!(Some(&at.task), fresh.task(&task), "at {}", envelope.cursor);
        assert_eq!(at.events.len() as u64, envelope.cursor.0);
    }
    let before_end = timeline.task_at(&task, Cursor(5)).expect("task");
    assert!(matches!(
        before_end.steps.get("risks"),
        Some(StepMark::Running { attempt: 1, .. })
    ));
    let end = timeline
        .task_at(&task, timeline.last_cursor())
        .expect("task");
    assert_eq!(
        end.steps.get("risks"),
        Some(&StepMark::Interrupted { run: run(1) })
    );
    assert_eq!(
        end.steps.get("intake"),
        Some(&StepMark::Edited {
            by: "hand edit of 01-intake.md".into()
        })
    );
}
