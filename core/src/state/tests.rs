use proptest::prelude::*;
use serde_json::json;
use uuid::Uuid;

use super::*;
use crate::answer::AnswerValue;
use crate::event::Event;
use crate::id::EventId;

/// Drives a `State` the way the Store does: decide, then apply each event
/// at the next cursor, one second after the previous one.
struct Harness {
    state: State,
    clock_ms: i64,
}

impl Harness {
    fn new() -> Self {
        Self {
            state: State::default(),
            clock_ms: 1_780_856_470_000,
        }
    }

    fn now(&self) -> Timestamp {
        Timestamp(self.clock_ms)
    }

    fn apply(&mut self, body: EventBody) {
        self.clock_ms += 1000;
        let cursor = self.state.last_cursor().next();
        let event = Event {
            id: EventId::from_uuid(Uuid::from_u128(u128::from(cursor.get()))),
            at: self.now(),
            body,
        };
        self.state.apply(&Envelope { cursor, event });
    }

    fn run(&mut self, command: Command) -> Result<Vec<&'static str>, Rejection> {
        let bodies = self.state.decide(command)?;
        let names = bodies.iter().map(EventBody::kind_name).collect();
        for body in bodies {
            self.apply(body);
        }
        Ok(names)
    }

    fn create_session(&mut self, session: SessionId) {
        let result = self.run(Command::CreateSession {
            session,
            title: Some("Title".into()),
            intent: None,
            project_path: None,
        });
        assert_eq!(result, Ok(vec!["session_created"]));
    }

    fn open_ask(&mut self, session: SessionId, ask: AskId) {
        let result = self.run(Command::OpenAsk {
            session,
            ask,
            spec: spec(),
            delivery: Delivery::BrowserOpened,
            url: "http://127.0.0.1:1/ask".into(),
            sid: "x".into(),
        });
        assert_eq!(result, Ok(vec!["ask_opened"]));
    }

    fn status(&self, ask: AskId) -> AskStatus {
        self.state.ask(&ask).unwrap().status
    }
}

fn session_id(n: u128) -> SessionId {
    SessionId::from_uuid(Uuid::from_u128(n))
}

fn ask_id(n: u128) -> AskId {
    AskId::from_uuid(Uuid::from_u128(n))
}

fn spec() -> AskSpec {
    AskSpec::from_json(&json!({
        "title": "T",
        "questions": [{ "id": "q", "kind": "text", "label": "Q", "required": true }]
    }))
    .unwrap()
}

fn answers(text: &str) -> Answers {
    Answers(vec![("q".into(), AnswerValue::Text(text.into()))])
}

#[test]
fn ask_answered_while_pending() {
    let mut h = Harness::new();
    let (s, a) = (session_id(1), ask_id(1));
    h.create_session(s);
    h.open_ask(s, a);
    assert_eq!(h.status(a), AskStatus::Pending);
    assert_eq!(
        h.state.pending_asks().map(|a| a.id).collect::<Vec<_>>(),
        [a]
    );

    let draft = h.run(Command::SaveDraft {
        ask: a,
        answers: answers("dra"),
    });
    assert_eq!(draft, Ok(vec!["ask_draft_saved"]));
    let submitted = h.run(Command::SubmitAnswers {
        ask: a,
        answers: answers("done"),
    });
    assert_eq!(submitted, Ok(vec!["ask_answered"]));

    let ask = h.state.ask(&a).unwrap();
    assert_eq!(ask.status, AskStatus::Answered);
    assert_eq!(ask.answers, Some(answers("done")));
    assert_eq!(ask.draft, Some(answers("dra")));
    assert_eq!(ask.answered_at, Some(h.now()));
    assert_eq!(ask.closed_at, Some(h.now()));
    assert_eq!(h.state.pending_asks().count(), 0);
    let session = h.state.session(&s).unwrap();
    assert_eq!(session.asks, [a]);
    assert_eq!(session.updated_at, h.now());
    assert_eq!(h.state.last_cursor(), Cursor(4));
}

#[test]
fn second_submit_is_rejected() {
    let mut h = Harness::new();
    let (s, a) = (session_id(1), ask_id(1));
    h.create_session(s);
    h.open_ask(s, a);
    h.run(Command::SubmitAnswers {
        ask: a,
        answers: answers("one"),
    })
    .unwrap();
    let again = h.run(Command::SubmitAnswers {
        ask: a,
        answers: answers("two"),
    });
    assert_eq!(again, Err(Rejection::AlreadyAnswered { ask: a }));
    assert_eq!(h.state.ask(&a).unwrap().answers, Some(answers("one")));
}

#[test]
fn timeout_then_late_answer_is_kept() {
    let mut h = Harness::new();
    let (s, a) = (session_id(1), ask_id(1));
    h.create_session(s);
    h.open_ask(s, a);
    assert_eq!(
        h.run(Command::TimeOut { ask: a }),
        Ok(vec!["ask_timed_out"])
    );
    let closed_at = h.now();

    // The person may keep typing after the tool gave up: the draft is kept.
    let draft = h.run(Command::SaveDraft {
        ask: a,
        answers: answers("x"),
    });
    assert_eq!(draft, Ok(vec!["ask_draft_saved"]));
    let late = h.run(Command::SubmitAnswers {
        ask: a,
        answers: answers("late"),
    });
    assert_eq!(late, Ok(vec!["ask_late_answer"]));
    let ask = h.state.ask(&a).unwrap();
    assert_eq!(ask.status, AskStatus::TimedOut);
    assert_eq!(ask.closed_at, Some(closed_at));
    assert_eq!(ask.answers, None);
    assert_eq!(ask.late_answers, [(h.now(), answers("late"))]);

    let again = h.run(Command::SubmitAnswers {
        ask: a,
        answers: answers("again"),
    });
    assert_eq!(again, Err(Rejection::AlreadyAnswered { ask: a }));
    let draft = h.run(Command::SaveDraft {
        ask: a,
        answers: answers("after"),
    });
    assert_eq!(draft, Err(Rejection::AlreadyAnswered { ask: a }));
}

#[test]
fn decline_and_fail_end_a_pending_ask_only() {
    let mut h = Harness::new();
    let s = session_id(1);
    h.create_session(s);
    let (declined, failed) = (ask_id(1), ask_id(2));
    h.open_ask(s, declined);
    h.open_ask(s, failed);
    let decline = h.run(Command::Decline {
        ask: declined,
        action: DeclineAction::Cancel,
    });
    assert_eq!(decline, Ok(vec!["ask_declined"]));
    let fail = h.run(Command::Fail {
        ask: failed,
        detail: "no browser".into(),
    });
    assert_eq!(fail, Ok(vec!["ask_failed"]));
    assert_eq!(h.status(declined), AskStatus::Declined);
    let declined_ask = h.state.ask(&declined).unwrap();
    assert_eq!(declined_ask.decline_action, Some(DeclineAction::Cancel));
    assert_eq!(
        h.state.ask(&failed).unwrap().failure_detail.as_deref(),
        Some("no browser")
    );

    let timeout = h.run(Command::TimeOut { ask: declined });
    let rejection = timeout.unwrap_err();
    assert_eq!(
        rejection.to_string(),
        format!("ask {declined} is declined, not pending")
    );
    let unknown = h.run(Command::TimeOut { ask: ask_id(9) });
    assert_eq!(unknown, Err(Rejection::UnknownAsk { ask: ask_id(9) }));
}

#[test]
fn unknown_session_is_rejected_with_a_hint() {
    let mut h = Harness::new();
    let s = session_id(7);
    let result = h.run(Command::OpenAsk {
        session: s,
        ask: ask_id(1),
        spec: spec(),
        delivery: Delivery::UrlElicitation,
        url: String::new(),
        sid: String::new(),
    });
    let rejection = result.unwrap_err();
    assert_eq!(rejection, Rejection::UnknownSession { session: s });
    assert_eq!(
        rejection.to_string(),
        format!(
            "sessionId: unknown session {s}; call init_planb_session first and pass the sessionId it returns"
        )
    );
    let plan = h.run(Command::SavePlan {
        session: s,
        title: None,
        content: "x".into(),
    });
    assert_eq!(plan, Err(Rejection::UnknownSession { session: s }));
    assert_eq!(h.state, State::default(), "a rejection changes nothing");
}

#[test]
fn duplicate_ids_are_rejected() {
    let mut h = Harness::new();
    let (s, a) = (session_id(1), ask_id(1));
    h.create_session(s);
    let again = h.run(Command::CreateSession {
        session: s,
        title: None,
        intent: None,
        project_path: None,
    });
    assert_eq!(again, Err(Rejection::SessionExists { session: s }));
    h.open_ask(s, a);
    let again = h.run(Command::OpenAsk {
        session: s,
        ask: a,
        spec: spec(),
        delivery: Delivery::BrowserOpened,
        url: String::new(),
        sid: String::new(),
    });
    assert_eq!(again, Err(Rejection::AskExists { ask: a }));
}

#[test]
fn plan_versions_count_from_one() {
    let mut h = Harness::new();
    let s = session_id(1);
    h.create_session(s);
    assert_eq!(h.state.latest_plan_version(&s), None);
    for n in 1..=3 {
        let bodies = h
            .state
            .decide(Command::SavePlan {
                session: s,
                title: Some(format!("v{n}")),
                content: format!("plan {n}"),
            })
            .unwrap();
        let [EventBody::PlanVersionSaved { version, .. }] = bodies.as_slice() else {
            panic!("unexpected events {bodies:?}");
        };
        assert_eq!(*version, n);
        h.apply(bodies[0].clone());
    }
    let plans = &h.state.session(&s).unwrap().plans;
    let versions: Vec<u32> = plans.iter().map(|p| p.version).collect();
    assert_eq!(versions, [1, 2, 3]);
    for (plan, text) in plans.iter().zip(["plan 1", "plan 2", "plan 3"]) {
        assert!(plan.is_content(text.as_bytes()), "v{}", plan.version);
        assert_eq!(plan.bytes, 6);
        assert!(!plan.is_content(b"plan 0"));
    }
    let latest = h.state.latest_plan_version(&s).unwrap();
    assert_eq!((latest.version, latest.cursor), (3, Cursor(4)));
}

#[test]
fn limits_name_the_field() {
    let h = Harness::new();
    let check = |command: Command, expected: &str| {
        let rejection = h.state.decide(command).unwrap_err();
        assert_eq!(rejection.to_string(), expected);
    };
    let create = |title: usize, intent: usize, path: usize| Command::CreateSession {
        session: session_id(1),
        title: Some("t".repeat(title)),
        intent: Some("i".repeat(intent)),
        project_path: Some("p".repeat(path)),
    };
    check(
        create(201, 0, 0),
        "title: must be at most 200 characters (got 201)",
    );
    check(
        create(0, 2001, 0),
        "intent: must be at most 2000 characters (got 2001)",
    );
    check(
        create(0, 0, 4097),
        "projectPath: must be at most 4096 bytes (got 4097)",
    );
    check(
        Command::SavePlan {
            session: session_id(1),
            title: None,
            content: "x".repeat(4 * 1024 * 1024 + 1),
        },
        "plan: must be at most 4128768 bytes (got 4194305)",
    );
    check(
        Command::SavePlan {
            session: session_id(1),
            title: None,
            content: " \n\t".into(),
        },
        "plan: must not be empty; give the plan's Markdown",
    );
}

#[test]
fn named_plan_events_build_versions_and_rounds() {
    let mut h = Harness::new();
    let golden = crate::event::golden_events_for_tests();
    let s = golden[0].body.session().unwrap();
    for event in golden {
        if event.body.plan().is_some() || event.body.kind_name() == "session_created" {
            h.apply(event.body);
        }
    }
    let key = crate::state::PlanKey::new(
        "/home/ada/src/app/docs/plans",
        PlanName::parse("auth-refactor").unwrap(),
    );
    let plan = h.state.named_plan(&key).unwrap();
    let sources: Vec<PlanSource> = plan.versions.iter().map(|v| v.source).collect();
    assert_eq!(
        sources,
        [
            PlanSource::Written,
            PlanSource::Edited,
            PlanSource::ChangedOutside
        ]
    );
    assert_eq!(
        plan.content,
        "# Login refactor\n\n- add passkeys\n- hand edit\n"
    );
    assert_eq!(plan.rounds.len(), 1);
    let round = &plan.rounds[0];
    assert_eq!(round.content_at_submit, plan.content);
    assert_eq!(round.verdict, Some(Verdict::ChangesRequested));
    assert_eq!(round.channel, Some(ReviewChannel::Browser));
    assert_eq!(round.comments.len(), 1);
    assert_eq!(plan.session, Some(s));
    assert_eq!(h.state.session(&s).unwrap().updated_at, h.now());
}

#[test]
fn edit_that_no_longer_applies_is_ignored() {
    let mut h = Harness::new();
    let plan = crate::state::PlanKey::new("/p", PlanName::parse("p").unwrap());
    h.apply(EventBody::NamedPlanWritten {
        plan: plan.name.clone(),
        plans_dir: plan.dir.clone(),
        content: "abc".into(),
        session: None,
    });
    h.apply(EventBody::NamedPlanEdited {
        plan: plan.name.clone(),
        plans_dir: plan.dir.clone(),
        edits: vec![crate::plan_edit::PlanEdit {
            old: "zzz".into(),
            new: "y".into(),
            replace_all: false,
        }],
        content_len_after: 1,
    });
    let state = h.state.named_plan(&plan).unwrap();
    assert_eq!((state.content.as_str(), state.versions.len()), ("abc", 1));
}

#[test]
fn a_plan_recorded_before_plans_had_directories_goes_on_in_the_first_directory_that_names_it() {
    let mut h = Harness::new();
    let name = PlanName::parse("auth-refactor").unwrap();
    // As a version 1 event decodes: no directory.
    h.apply(EventBody::NamedPlanWritten {
        plan: name.clone(),
        plans_dir: String::new(),
        content: "# Auth\n\n- passkeys\n".into(),
        session: None,
    });
    let here = crate::state::PlanKey::new("/src/app/docs/plans", name.clone());
    assert!(
        h.state.named_plan(&here).is_some(),
        "found from any directory"
    );
    assert_eq!(
        h.run(Command::EditPlan {
            plan: here.clone(),
            edits: vec![edit("passkeys", "passkeys and TOTP")],
        }),
        Ok(vec!["named_plan_edited"])
    );
    let plan = h.state.named_plan(&here).unwrap();
    assert_eq!(plan.content, "# Auth\n\n- passkeys and TOTP\n");
    assert_eq!(plan.versions.len(), 2, "the history goes on");
    assert_eq!(h.state.named_plans().len(), 1);
    // Adopted: another project's plan of that name starts its own history.
    let there = crate::state::PlanKey::new("/src/other/docs/plans", name);
    assert!(h.state.named_plan(&there).is_none());
    assert_eq!(
        h.run(Command::EditPlan {
            plan: there,
            edits: vec![edit("a", "b")],
        }),
        Err(Rejection::UnknownPlan {
            plan: PlanName::parse("auth-refactor").unwrap()
        })
    );
}

/// Events over a handful of ids, so that they interact: asks of known
/// and unknown sessions, answers to asks in every status, repeated and
/// out-of-order plan versions.
fn interacting_event() -> impl Strategy<Value = EventBody> {
    let session = (0u128..3).prop_map(session_id);
    let ask = (0u128..4).prop_map(ask_id);
    let plan = prop_oneof![Just("a"), Just("b")].prop_map(|n| PlanName::parse(n).unwrap());
    prop_oneof![
        session
            .clone()
            .prop_map(|session| EventBody::SessionCreated {
                session,
                title: None,
                intent: None,
                project_path: None,
            }),
        (session.clone(), ask.clone()).prop_map(|(session, ask)| EventBody::AskOpened {
            session,
            ask,
            spec: spec(),
            delivery: Delivery::BrowserOpened,
            url: String::new(),
            sid_sha256: [0; 32],
        }),
        ask.clone().prop_map(|ask| EventBody::AskDraftSaved {
            ask,
            answers: answers("d")
        }),
        ask.clone().prop_map(|ask| EventBody::AskAnswered {
            ask,
            answers: answers("a")
        }),
        ask.clone().prop_map(|ask| EventBody::AskTimedOut { ask }),
        ask.clone().prop_map(|ask| EventBody::AskDeclined {
            ask,
            action: DeclineAction::Decline
        }),
        ask.clone().prop_map(|ask| EventBody::AskFailed {
            ask,
            detail: String::new()
        }),
        ask.prop_map(|ask| EventBody::AskLateAnswer {
            ask,
            answers: answers("l")
        }),
        (session.clone(), 0u32..4).prop_map(|(session, version)| EventBody::PlanVersionSaved {
            session,
            version,
            title: None,
            content: String::new(),
        }),
        (plan.clone(), proptest::option::of(session)).prop_map(|(plan, session)| {
            EventBody::NamedPlanWritten {
                plan,
                plans_dir: String::new(),
                content: "x y".into(),
                session,
            }
        }),
        (plan.clone(), 0u32..3).prop_map(|(plan, round)| EventBody::NamedPlanSubmitted {
            plan,
            plans_dir: String::new(),
            round
        }),
        (plan, 0u32..3).prop_map(|(plan, round)| EventBody::NamedPlanReviewed {
            plan,
            plans_dir: String::new(),
            round,
            verdict: Verdict::Approved,
            feedback: None,
            comments: Vec::new(),
            channel: ReviewChannel::ExternalCommand,
        }),
    ]
}

proptest! {
    /// The log is input: `apply` takes any sequence of events without
    /// panicking and keeps the state's invariants.
    #[test]
    fn apply_keeps_invariants(bodies in proptest::collection::vec(interacting_event(), 0..40)) {
        let mut h = Harness::new();
        for body in bodies {
            h.apply(body);
        }
        let state = &h.state;
        for ask in state.asks().values() {
            let session = state.session(&ask.session);
            prop_assert!(session.is_some_and(|s| s.asks.contains(&ask.id)));
            prop_assert_eq!(ask.status == AskStatus::Pending, ask.closed_at.is_none());
            prop_assert_eq!(ask.status == AskStatus::Answered, ask.answers.is_some());
        }
        for session in state.sessions().values() {
            prop_assert!(session.asks.iter().all(|a| state.ask(a).is_some_and(|a| a.session == session.id)));
            prop_assert!(session.plans.windows(2).all(|w| w[0].version < w[1].version));
            prop_assert!(session.created_at <= session.updated_at);
        }
    }

    /// Arbitrary events (mostly unrelated ids, any field values) never
    /// make `apply` panic.
    #[test]
    fn apply_accepts_arbitrary_events(
        events in proptest::collection::vec(crate::arbitrary::event(), 0..30)
    ) {
        let mut state = State::default();
        let count = events.len() as u64;
        for (index, event) in events.into_iter().enumerate() {
            state.apply(&Envelope { cursor: Cursor(index as u64 + 1), event });
        }
        prop_assert_eq!(state.last_cursor(), Cursor(count));
    }

    /// A state saved as a snapshot at any cursor, read back and folded on
    /// with the rest of the log equals the state folded from the start; the
    /// snapshot itself reads back equal.
    #[test]
    fn snapshot_and_tail_fold_equal_a_full_fold_at_every_cursor(
        bodies in proptest::collection::vec(interacting_event(), 0..40)
    ) {
        let mut full = State::default();
        let mut envelopes = Vec::new();
        for (index, body) in bodies.into_iter().enumerate() {
            let cursor = Cursor(index as u64 + 1);
            let event = Event {
                id: EventId::from_uuid(Uuid::from_u128(u128::from(cursor.get()))),
                at: Timestamp(1_780_856_470_000 + 1000 * index as i64),
                body,
            };
            let envelope = Envelope { cursor, event };
            full.apply(&envelope);
            envelopes.push(envelope);
        }
        let mut prefix = State::default();
        for split in 0..=envelopes.len() {
            if split > 0 {
                prefix.apply(&envelopes[split - 1]);
            }
            let bytes = prefix.encode_snapshot().expect("encode");
            let mut resumed = State::decode_snapshot(&bytes).expect("decode");
            prop_assert_eq!(&resumed, &prefix);
            for envelope in &envelopes[split..] {
                resumed.apply(envelope);
            }
            prop_assert_eq!(&resumed, &full, "split at cursor {}", split);
        }
    }
}

#[test]
fn a_damaged_or_foreign_snapshot_is_refused() {
    let mut h = Harness::new();
    h.create_session(session_id(1));
    h.open_ask(session_id(1), ask_id(1));
    let bytes = h.state.encode_snapshot().expect("encode");
    assert_eq!(State::decode_snapshot(&bytes).expect("decode"), h.state);
    assert_eq!(
        State::decode_snapshot(b"nope"),
        Err(crate::state::SnapshotError::NotASnapshot)
    );
    let mut other_version = bytes.clone();
    other_version[4] ^= 0xff;
    assert!(matches!(
        State::decode_snapshot(&other_version),
        Err(crate::state::SnapshotError::Version { .. })
    ));
    // Every cut and every single-byte change either fails validation or
    // decodes to some state; it never panics. (Telling a damaged snapshot
    // from a sound one is the checksum's job, in the caller's framing.)
    for len in 0..bytes.len() {
        let _ = State::decode_snapshot(&bytes[..len]);
    }
    for index in 8..bytes.len() {
        let mut flipped = bytes.clone();
        flipped[index] ^= 0x5a;
        let _ = State::decode_snapshot(&flipped);
    }
}

fn plan_name(name: &str) -> PlanName {
    PlanName::parse(name).expect("valid plan name")
}

fn edit(old: &str, new: &str) -> crate::plan_edit::PlanEdit {
    crate::plan_edit::PlanEdit {
        old: old.into(),
        new: new.into(),
        replace_all: false,
    }
}

#[test]
fn named_plans_keep_every_version_and_reviews_happen_once_per_round() {
    let mut h = Harness::new();
    let plan = crate::state::PlanKey::new("/app/docs/plans", plan_name("auth"));
    let name = plan.name.clone();
    assert_eq!(
        h.run(Command::EditPlan {
            plan: plan.clone(),
            edits: vec![edit("a", "b")]
        }),
        Err(Rejection::UnknownPlan { plan: name.clone() })
    );
    h.run(Command::WritePlan {
        plan: plan.clone(),
        content: "# Auth\n- step one\n".into(),
        session: None,
    })
    .expect("write");
    h.run(Command::EditPlan {
        plan: plan.clone(),
        edits: vec![edit("step one", "step 1")],
    })
    .expect("edit");
    assert!(matches!(
        h.run(Command::EditPlan {
            plan: plan.clone(),
            edits: vec![edit("missing", "x")]
        }),
        Err(Rejection::Edit(_))
    ));
    // A hand edit is recorded as its own version, then edited further.
    h.run(Command::RecordOutsideChange {
        plan: plan.clone(),
        content: "# Auth\n- step 1\n- by hand\n".into(),
    })
    .expect("outside change");
    assert_eq!(
        h.run(Command::RecordOutsideChange {
            plan: plan.clone(),
            content: "# Auth\n- step 1\n- by hand\n".into(),
        }),
        Err(Rejection::Unchanged { plan: name.clone() })
    );
    let named = h.state.named_plan(&plan).expect("plan");
    assert_eq!(named.content, "# Auth\n- step 1\n- by hand\n");
    assert_eq!(
        named.versions.iter().map(|v| v.source).collect::<Vec<_>>(),
        [
            PlanSource::Written,
            PlanSource::Edited,
            PlanSource::ChangedOutside
        ]
    );

    assert_eq!(
        h.run(Command::SubmitPlan { plan: plan.clone() }),
        Ok(vec!["named_plan_submitted"])
    );
    let review = |round, verdict| Command::ReviewPlan {
        plan: plan.clone(),
        round,
        verdict,
        feedback: Some("looks fine".into()),
        comments: Vec::new(),
        channel: ReviewChannel::Browser,
    };
    assert_eq!(
        h.run(review(2, Verdict::Approved)),
        Err(Rejection::UnknownRound {
            plan: name.clone(),
            round: 2
        })
    );
    h.run(review(1, Verdict::ChangesRequested)).expect("review");
    assert_eq!(
        h.run(review(1, Verdict::Approved)),
        Err(Rejection::AlreadyReviewed {
            plan: name.clone(),
            round: 1
        })
    );
    h.run(Command::SubmitPlan { plan: plan.clone() })
        .expect("resubmit");
    h.run(review(2, Verdict::Approved)).expect("approve");
    let rounds = &h.state.named_plan(&plan).expect("plan").rounds;
    assert_eq!(rounds.len(), 2);
    assert_eq!(rounds[0].verdict, Some(Verdict::ChangesRequested));
    assert_eq!(rounds[1].verdict, Some(Verdict::Approved));
    assert_eq!(rounds[1].content_at_submit, "# Auth\n- step 1\n- by hand\n");
}

#[test]
fn a_plan_tied_to_an_unknown_session_is_refused() {
    let mut h = Harness::new();
    let session = session_id(9);
    assert_eq!(
        h.run(Command::WritePlan {
            plan: crate::state::PlanKey::new("/p", plan_name("x")),
            content: "x".into(),
            session: Some(session),
        }),
        Err(Rejection::UnknownSession { session })
    );
}

#[test]
fn plans_of_one_name_in_two_directories_keep_two_histories() {
    let mut h = Harness::new();
    let first = crate::state::PlanKey::new("/src/app/docs/plans", plan_name("auth-refactor"));
    let second = crate::state::PlanKey::new("/src/lib/docs/plans", plan_name("auth-refactor"));
    for (plan, content) in [
        (
            &first,
            "# App auth
",
        ),
        (
            &second,
            "# Lib auth
",
        ),
    ] {
        h.run(Command::WritePlan {
            plan: plan.clone(),
            content: content.into(),
            session: None,
        })
        .expect("write");
    }
    h.run(Command::EditPlan {
        plan: second.clone(),
        edits: vec![edit("Lib", "Library")],
    })
    .expect("edit");
    let app = h.state.named_plan(&first).expect("app plan");
    let lib = h.state.named_plan(&second).expect("lib plan");
    assert_eq!(
        app.content,
        "# App auth
"
    );
    assert_eq!(
        lib.content,
        "# Library auth
"
    );
    assert_eq!((app.versions.len(), lib.versions.len()), (1, 2));
    assert!(
        !lib.has_held(
            "# App auth
"
        ),
        "one plan never vouches for the other's file"
    );
}

#[test]
fn the_log_holds_a_hash_of_the_form_secret_never_the_secret() {
    let secret = "4f1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e";
    let (address, hash) = split_form_url(&format!("http://127.0.0.1:9/ask?sid={secret}"));
    assert_eq!(address, "http://127.0.0.1:9/ask");
    assert_eq!(hash, sid_sha256(secret));
    assert_eq!(split_form_url(""), (String::new(), [0; 32]));

    let mut h = Harness::new();
    let (s, a) = (session_id(1), ask_id(1));
    h.create_session(s);
    let bodies = h
        .state
        .decide(Command::OpenAsk {
            session: s,
            ask: a,
            spec: spec(),
            delivery: Delivery::BrowserOpened,
            url: "http://127.0.0.1:9/ask".into(),
            sid: secret.into(),
        })
        .expect("open");
    let event = Event {
        id: EventId::from_uuid(Uuid::from_u128(1)),
        at: Timestamp(0),
        body: bodies[0].clone(),
    };
    let payload = crate::event::encode(&event).expect("encode");
    assert!(
        !payload
            .windows(secret.len())
            .any(|w| w == secret.as_bytes()),
        "the secret is in the event"
    );
    h.apply(bodies[0].clone());
    let ask = h.state.ask(&a).expect("ask");
    assert!(ask.has_sid(secret));
    assert!(!ask.has_sid("4f1c2d3e4f5a6b7c8d9e0f1a2b3c4d5f"));
    assert!(!ask.has_sid(""));
}

#[test]
fn named_plan_limits_name_the_field_and_fit_one_log_record() {
    use crate::state::{EDITS_BYTES_MAX, EVENT_ROOM_BYTES, NAMED_PLAN_BYTES_MAX};
    assert_eq!(NAMED_PLAN_BYTES_MAX + EVENT_ROOM_BYTES, 4 << 20);
    let mut h = Harness::new();
    let plan = crate::state::PlanKey::new("/app/docs/plans", plan_name("auth"));
    let write = |content: String| Command::WritePlan {
        plan: plan.clone(),
        content,
        session: None,
    };
    assert_eq!(
        h.run(write(" \n".into())).unwrap_err().to_string(),
        "content: must not be empty; give the plan's Markdown"
    );
    assert_eq!(
        h.run(write("x".repeat(NAMED_PLAN_BYTES_MAX + 1)))
            .unwrap_err()
            .to_string(),
        format!(
            "content: must be at most {NAMED_PLAN_BYTES_MAX} bytes (got {})",
            NAMED_PLAN_BYTES_MAX + 1
        )
    );
    // The largest plan, with the longest plans directory, still fits.
    let largest = crate::event::EventBody::NamedPlanWritten {
        plan: plan.name.clone(),
        plans_dir: "d".repeat(4_096),
        content: "x".repeat(NAMED_PLAN_BYTES_MAX),
        session: Some(session_id(1)),
    };
    h.run(write("x".repeat(NAMED_PLAN_BYTES_MAX - 2) + "ab"))
        .expect("the largest plan is accepted");
    let envelope = crate::event::Event {
        id: crate::id::EventId::from_uuid(uuid::Uuid::nil()),
        at: h.now(),
        body: largest,
    };
    let encoded = crate::event::encode(&envelope).expect("encode");
    assert!(encoded.len() <= 4 << 20, "{} bytes", encoded.len());
    assert_eq!(
        h.run(Command::EditPlan {
            plan: plan.clone(),
            edits: vec![edit("ab", "abc")],
        })
        .unwrap_err()
        .to_string(),
        format!(
            "edits: the plan would be {} bytes after these edits, over the limit of \
             {NAMED_PLAN_BYTES_MAX} bytes; move parts into another plan",
            NAMED_PLAN_BYTES_MAX + 1
        )
    );
    let huge = "y".repeat(EDITS_BYTES_MAX);
    assert_eq!(
        h.run(Command::EditPlan {
            plan: plan.clone(),
            edits: vec![edit("ab", &huge)],
        })
        .unwrap_err()
        .to_string(),
        format!(
            "edits: must be at most {EDITS_BYTES_MAX} bytes of oldString and newString (got {})",
            EDITS_BYTES_MAX + 2
        )
    );
}

#[test]
fn writing_what_a_plan_holds_records_nothing() {
    let mut h = Harness::new();
    let session = session_id(7);
    h.create_session(session);
    let plan = crate::state::PlanKey::new("/app/docs/plans", plan_name("auth"));
    let write = |content: &str, session: Option<SessionId>| Command::WritePlan {
        plan: plan.clone(),
        content: content.into(),
        session,
    };
    assert_eq!(
        h.run(write("# Auth\n", None)).expect("first write"),
        ["named_plan_written"]
    );
    assert_eq!(
        h.run(write("# Auth\n", None)).expect("same again"),
        Vec::<&str>::new()
    );
    // Tying the plan to a session is a change; repeating that is not.
    assert_eq!(
        h.run(write("# Auth\n", Some(session))).expect("tie"),
        ["named_plan_written"]
    );
    assert_eq!(
        h.run(write("# Auth\n", Some(session))).expect("same again"),
        Vec::<&str>::new()
    );
    assert_eq!(
        h.run(write("# Auth\n", None)).expect("no session given"),
        Vec::<&str>::new()
    );
    assert_eq!(
        h.run(write("# Auth v2\n", None)).expect("new content"),
        ["named_plan_written"]
    );
    // The same name in another directory is another plan.
    let other = crate::state::PlanKey::new("/other/docs/plans", plan_name("auth"));
    assert_eq!(
        h.run(Command::WritePlan {
            plan: other,
            content: "# Auth v2\n".into(),
            session: None,
        })
        .expect("other directory"),
        ["named_plan_written"]
    );
}

mod tasks {
    use super::*;
    use crate::event::RunOutcome;
    use crate::id::{RunId, TaskId};
    use crate::state::tasks::{RunState, TaskErrorCode};

    fn task_id() -> TaskId {
        TaskId::from_uuid(uuid::Uuid::from_u128(0x7a5c))
    }

    fn run_id(n: u128) -> RunId {
        RunId::from_uuid(uuid::Uuid::from_u128(0x0b00 + n))
    }

    fn create(client_request_id: Option<&str>) -> Command {
        Command::CreateTask {
            task: task_id(),
            pipeline: "project-plan".into(),
            pipeline_version: 1,
            prompt: "Open a bakery in Lisbon".into(),
            speed: "fast".into(),
            target: "report".into(),
            model_profile: None,
            client_request_id: client_request_id.map(Into::into),
            project_path: None,
        }
    }

    fn start(n: u128, resumed_from: Option<u128>) -> Command {
        Command::StartRun {
            task: task_id(),
            run: run_id(n),
            resumed_from: resumed_from.map(run_id),
            owner_pid: 7,
            host: "h".into(),
            variables: None,
        }
    }

    fn step(n: u128, name: &str) -> Command {
        Command::StartStep {
            task: task_id(),
            run: run_id(n),
            step: name.into(),
            input: [1; 32],
            call: None,
        }
    }

    fn succeed(n: u128, name: &str, artifact: u8) -> Command {
        Command::SucceedStep {
            task: task_id(),
            run: run_id(n),
            step: name.into(),
            input: [1; 32],
            artifact: [artifact; 32],
            bytes: 10,
            duration_ms: 5,
            tokens_in: 1,
            tokens_out: 2,
        }
    }

    fn end(n: u128, outcome: RunOutcome) -> Command {
        Command::EndRun {
            task: task_id(),
            run: run_id(n),
            outcome,
            reason: None,
            failed_step: None,
            recoverable: true,
        }
    }

    fn code(h: &mut Harness, command: Command) -> TaskErrorCode {
        match h.run(command) {
            Err(Rejection::Task { code, .. }) => code,
            other => panic!("expected a task rejection, got {other:?}"),
        }
    }

    #[test]
    fn step_ends_and_the_starts_they_allow_are_one_decision() {
        let mut h = Harness::new();
        h.run(create(None)).expect("create");
        h.run(start(1, None)).expect("run");
        h.run(step(1, "intake")).expect("intake starts");
        h.run(step(1, "risks")).expect("risks starts");
        let then = |end: Command, starts: &[&str]| Command::SettleAndStart {
            task: task_id(),
            run: run_id(1),
            inline: Vec::new(),
            ends: vec![end],
            starts: starts
                .iter()
                .map(|s| StepStart {
                    step: (*s).to_owned(),
                    input: [2; 32],
                    call: None,
                })
                .collect(),
        };
        // A start of a step still running, or twice in one list, is refused,
        // and nothing is recorded.
        assert_eq!(
            code(&mut h, then(succeed(1, "intake", 9), &["risks"])),
            TaskErrorCode::Conflict
        );
        assert_eq!(
            code(&mut h, then(succeed(1, "intake", 9), &["team", "team"])),
            TaskErrorCode::Conflict
        );
        assert_eq!(
            code(&mut h, then(step(1, "team"), &[])),
            TaskErrorCode::Conflict
        );
        assert_eq!(
            h.run(then(succeed(1, "intake", 9), &["team", "scenarios"])),
            Ok(vec!["step_succeeded", "step_started", "step_started"])
        );
        let run = &h.state.task(&task_id()).expect("task").runs[0];
        assert_eq!(
            run.running.iter().map(String::as_str).collect::<Vec<_>>(),
            ["risks", "scenarios", "team"]
        );
        // Several ends (a success, a failure) and a retry of the failed step
        // in one decision; an end of another run, or one step ending twice,
        // is refused.
        let fail = |name: &str| Command::FailStep {
            task: task_id(),
            run: run_id(1),
            step: name.into(),
            class: "tool_error".into(),
            message: "no".into(),
            recoverable: true,
        };
        let mut two = then(succeed(1, "scenarios", 7), &["team"]);
        if let Command::SettleAndStart { ends, .. } = &mut two {
            ends.push(fail("team"));
        }
        assert_eq!(
            h.run(two),
            Ok(vec!["step_succeeded", "step_failed", "step_started"])
        );
        let run = &h.state.task(&task_id()).expect("task").runs[0];
        assert_eq!(
            run.running.iter().map(String::as_str).collect::<Vec<_>>(),
            ["risks", "team"]
        );
        assert_eq!(
            code(&mut h, then(succeed(2, "team", 9), &[])),
            TaskErrorCode::Conflict
        );
        let mut twice = then(succeed(1, "team", 9), &[]);
        if let Command::SettleAndStart { ends, .. } = &mut twice {
            ends.push(fail("team"));
        }
        assert_eq!(code(&mut h, twice), TaskErrorCode::Conflict);
        // Small blobs go in the log ahead of what names them; a blob over
        // the limit is refused.
        let mut with_blob = then(succeed(1, "team", 6), &[]);
        if let Command::SettleAndStart { inline, .. } = &mut with_blob {
            inline.push(b"{\"ok\":true}".to_vec());
        }
        assert_eq!(h.run(with_blob), Ok(vec!["blob_stored", "step_succeeded"]));
        let mut too_big = then(succeed(1, "risks", 6), &[]);
        if let Command::SettleAndStart { inline, .. } = &mut too_big {
            inline.push(vec![b'x'; INLINE_BLOB_BYTES_MAX + 1]);
        }
        assert_eq!(code(&mut h, too_big), TaskErrorCode::Conflict);
        // Stopping: the success is kept, the starts are left out.
        h.run(Command::RequestStop { task: task_id() })
            .expect("stop");
        assert_eq!(
            h.run(then(succeed(1, "risks", 8), &["swot"])),
            Ok(vec!["step_succeeded"])
        );
    }

    #[test]
    fn run_end_reasons_keep_the_texts_the_log_holds() {
        use crate::state::tasks::RunEndReason as R;
        let cases = [
            (R::WorkerError(None), "worker_error"),
            (
                R::WorkerError(Some("disk full".into())),
                "worker_error: disk full",
            ),
            (R::InactivityTimeout, "inactivity_timeout"),
            (
                R::PipelineError("no such file".into()),
                "pipeline_error: no such file",
            ),
            (R::InvalidTarget(None), "INVALID_TARGET"),
            (
                R::InvalidTarget(Some("target: \"x\"".into())),
                "INVALID_TARGET: target: \"x\"",
            ),
            (R::StepFailed, "step_failed"),
            (R::Step("model_timeout".into()), "model_timeout"),
        ];
        for (reason, wire) in cases {
            assert_eq!(reason.to_wire(), wire);
            assert_eq!(R::parse(wire), reason, "{wire}");
        }
        assert!(R::parse("worker_error").is_lost());
        assert!(!R::parse("worker_error: disk full").is_lost());
    }

    #[test]
    fn a_retry_starts_from_the_first_step_and_an_archived_or_deleted_task_runs_no_more() {
        use crate::state::tasks::Lifecycle;
        let mut h = Harness::new();
        h.run(create(None)).expect("create");
        let lifecycle = |h: &Harness| h.state.task(&task_id()).expect("task").lifecycle();
        assert_eq!(lifecycle(&h), Lifecycle::Created);
        h.run(start(1, None)).expect("run");
        h.run(step(1, "intake")).expect("intake");
        h.run(succeed(1, "intake", 3)).expect("intake done");
        assert_eq!(
            code(&mut h, Command::ArchiveTask { task: task_id() }),
            TaskErrorCode::RunAlreadyActive
        );
        assert_eq!(
            code(&mut h, Command::DeleteTask { task: task_id() }),
            TaskErrorCode::RunAlreadyActive
        );
        h.run(end(1, RunOutcome::Failed)).expect("failed");
        assert_eq!(lifecycle(&h), Lifecycle::Active);
        // A resume keeps what succeeded; a retry (resuming nothing) does not.
        h.run(start(2, Some(1))).expect("resume");
        let successes = |h: &Harness| h.state.task(&task_id()).expect("task").successes.len();
        assert_eq!(successes(&h), 1);
        h.run(end(2, RunOutcome::Failed)).expect("failed again");
        h.run(start(3, None)).expect("retry");
        assert_eq!(successes(&h), 0);
        assert_eq!(h.state.task(&task_id()).expect("task").runs.len(), 3);
        h.run(end(3, RunOutcome::Stopped)).expect("stopped");
        assert_eq!(
            h.run(Command::ArchiveTask { task: task_id() }),
            Ok(vec!["task_archived"])
        );
        assert_eq!(h.run(Command::ArchiveTask { task: task_id() }), Ok(vec![]));
        assert_eq!(lifecycle(&h), Lifecycle::Archived);
        assert_eq!(code(&mut h, start(4, Some(3))), TaskErrorCode::Conflict);
        assert_eq!(
            code(&mut h, Command::RequestStop { task: task_id() }),
            TaskErrorCode::Conflict
        );
        assert!(h.state.pipeline_task(&task_id()).is_some());
        assert_eq!(
            h.run(Command::DeleteTask { task: task_id() }),
            Ok(vec!["task_deleted"])
        );
        assert_eq!(lifecycle(&h), Lifecycle::Deleted);
        assert!(h.state.pipeline_task(&task_id()).is_none());
        assert_eq!(h.state.pipeline_tasks().count(), 0);
        for again in [
            start(4, None),
            Command::DeleteTask { task: task_id() },
            Command::ArchiveTask { task: task_id() },
        ] {
            assert_eq!(code(&mut h, again), TaskErrorCode::TaskNotFound);
        }
        // The key of a deleted task's create is not handed out again.
        let mut h = Harness::new();
        h.run(create(Some("key-1"))).expect("create");
        h.run(Command::DeleteTask { task: task_id() })
            .expect("delete");
        assert_eq!(code(&mut h, create(Some("key-1"))), TaskErrorCode::Conflict);
    }

    #[test]
    fn a_plan_is_recorded_only_as_a_valid_definition_and_runs_again_but_not_once_deleted() {
        let mut h = Harness::new();
        let definition = serde_json::json!({"title": "Diamond", "steps": [
            {"index": "1", "title": "a", "tool": "t"},
            {"index": "2", "title": "b", "tool": "t", "depends_on": ["1"]}]})
        .to_string();
        let create = |definition: &str| Command::CreatePlan {
            task: task_id(),
            definition: definition.into(),
            client_request_id: None,
            project_path: None,
        };
        let refused = |h: &mut Harness, command: Command| match h.run(command) {
            Err(Rejection::Task { code, message }) => (code, message),
            other => panic!("expected a rejection, got {other:?}"),
        };
        assert_eq!(
            refused(&mut h, create("{")).1,
            "definition: not JSON: EOF while parsing an object at line 1 column 1"
        );
        let cyclic = definition.replace(r#""tool":"t"}"#, r#""tool":"t","depends_on":["2"]}"#);
        assert!(
            refused(&mut h, create(&cyclic))
                .1
                .starts_with("definition: steps: dependency cycle: "),
        );
        assert_eq!(h.run(create(&definition)), Ok(vec!["plan_created"]));
        for n in 1..=2 {
            assert_eq!(h.run(start(n, None)), Ok(vec!["run_started"]));
            assert_eq!(h.run(step(n, "1")), Ok(vec!["step_started"]));
            assert_eq!(h.run(succeed(n, "1", 3)), Ok(vec!["step_succeeded"]));
            assert_eq!(h.run(step(n, "2")), Ok(vec!["step_started"]));
            assert_eq!(h.run(succeed(n, "2", 4)), Ok(vec!["step_succeeded"]));
            assert_eq!(h.run(end(n, RunOutcome::Completed)), Ok(vec!["run_ended"]));
        }
        assert_eq!(
            h.run(Command::DeletePlan { task: task_id() }),
            Ok(vec!["plan_deleted"])
        );
        assert_eq!(code(&mut h, start(3, None)), TaskErrorCode::TaskNotFound);
    }

    #[test]
    fn a_resume_reuses_only_what_its_own_chain_of_runs_completed() {
        let mut h = Harness::new();
        let definition = serde_json::json!({"title": "Chain", "steps": [
            {"index": "1", "title": "a", "tool": "t"},
            {"index": "2", "title": "b", "tool": "t", "depends_on": ["1"]}]})
        .to_string();
        let create = Command::CreatePlan {
            task: task_id(),
            definition,
            client_request_id: None,
            project_path: None,
        };
        h.run(create).expect("plan");
        let reusable = |h: &Harness, from: Option<u128>| -> Vec<String> {
            let task = h.state.task(&task_id()).expect("task");
            task.resumable_successes(from.map(run_id))
                .into_keys()
                .collect()
        };
        // Run 1 completes every step.
        h.run(start(1, None)).expect("run 1");
        for name in ["1", "2"] {
            h.run(step(1, name)).expect("start");
            h.run(succeed(1, name, 3)).expect("succeed");
        }
        h.run(end(1, RunOutcome::Completed)).expect("end 1");
        assert_eq!(reusable(&h, Some(1)), ["1", "2"]);
        // Run 2 runs the plan again and stops after step 1: resuming it
        // reuses step 1 alone, whatever run 1 did with the same call.
        h.run(start(2, None)).expect("run 2");
        h.run(step(2, "1")).expect("start");
        h.run(succeed(2, "1", 3)).expect("succeed");
        h.run(step(2, "2")).expect("start");
        h.run(end(2, RunOutcome::Failed)).expect("end 2");
        assert_eq!(reusable(&h, Some(2)), ["1"]);
        assert!(reusable(&h, None).is_empty(), "a fresh run reuses nothing");
        // Run 3 resumes run 2 and completes step 2; a resume of run 3 sees
        // both, through the run it resumed.
        h.run(start(3, Some(2))).expect("run 3");
        h.run(step(3, "2")).expect("start");
        h.run(succeed(3, "2", 4)).expect("succeed");
        h.run(end(3, RunOutcome::Failed)).expect("end 3");
        assert_eq!(reusable(&h, Some(3)), ["1", "2"]);
        // A run that is not the latest is no chain to resume.
        assert!(reusable(&h, Some(1)).is_empty());
    }

    #[test]
    fn an_idempotency_key_repeats_only_a_create_of_the_same_kind() {
        let mut h = Harness::new();
        assert_eq!(h.run(create(Some("key-1"))), Ok(vec!["task_created"]));
        let plan = Command::CreatePlan {
            task: TaskId::from_uuid(uuid::Uuid::from_u128(0x9999)),
            definition: serde_json::json!({"title": "P", "steps": [
                {"index": "1", "title": "a", "tool": "t"}]})
            .to_string(),
            client_request_id: Some("key-1".into()),
            project_path: None,
        };
        match h.run(plan) {
            Err(Rejection::Task { code, message }) => {
                assert_eq!(code, TaskErrorCode::Conflict);
                assert!(
                    message.starts_with("client_request_id: \"key-1\" was used for task "),
                    "{message}"
                );
            }
            other => panic!("a plan reused a task's key: {other:?}"),
        }
    }

    #[test]
    fn a_task_runs_stops_resumes_and_completes_with_the_seed_codes_for_illegal_moves() {
        let mut h = Harness::new();
        assert_eq!(code(&mut h, start(1, None)), TaskErrorCode::TaskNotFound);
        assert_eq!(h.run(create(Some("req-1"))), Ok(vec!["task_created"]));
        // The same idempotency key records nothing.
        assert_eq!(h.run(create(Some("req-1"))), Ok(vec![]));
        assert_eq!(h.run(start(1, None)), Ok(vec!["run_started"]));
        assert_eq!(
            code(&mut h, start(2, None)),
            TaskErrorCode::RunAlreadyActive
        );
        assert_eq!(h.run(step(1, "intake")), Ok(vec!["step_started"]));
        assert_eq!(code(&mut h, step(1, "intake")), TaskErrorCode::Conflict);
        assert_eq!(
            code(&mut h, step(1, "Bad Step")),
            TaskErrorCode::InvalidArgument
        );
        assert_eq!(
            code(&mut h, succeed(1, "risks", 9)),
            TaskErrorCode::Conflict
        );
        assert_eq!(
            code(&mut h, end(1, RunOutcome::Completed)),
            TaskErrorCode::Conflict,
            "a run completes with no step running"
        );
        assert_eq!(h.run(succeed(1, "intake", 3)), Ok(vec!["step_succeeded"]));
        // Artifacts are read-only while a run is active.
        let edit = |artifact: u8| Command::EditArtifact {
            task: task_id(),
            step: "intake".into(),
            artifact: [artifact; 32],
            bytes: 11,
            by: "test".into(),
        };
        assert_eq!(code(&mut h, edit(4)), TaskErrorCode::RunningReadonly);
        let stop = Command::RequestStop { task: task_id() };
        assert_eq!(h.run(stop.clone()), Ok(vec!["stop_requested"]));
        assert_eq!(
            h.run(stop.clone()),
            Ok(vec![]),
            "a second stop changes nothing"
        );
        assert_eq!(code(&mut h, step(1, "risks")), TaskErrorCode::RunNotActive);
        assert_eq!(h.run(end(1, RunOutcome::Stopped)), Ok(vec!["run_ended"]));
        assert_eq!(code(&mut h, stop), TaskErrorCode::RunNotActive);
        assert_eq!(
            code(&mut h, end(1, RunOutcome::Failed)),
            TaskErrorCode::RunNotActive
        );
        // Stopped: the artifact may change, and a resume starts a new run.
        assert_eq!(h.run(edit(4)), Ok(vec!["artifact_edited"]));
        assert_eq!(
            h.run(edit(4)),
            Ok(vec![]),
            "the same artifact again changes nothing"
        );
        let unknown = Command::EditArtifact {
            task: task_id(),
            step: "risks".into(),
            artifact: [5; 32],
            bytes: 1,
            by: "test".into(),
        };
        assert_eq!(code(&mut h, unknown), TaskErrorCode::InvalidArtifactUri);
        assert_eq!(code(&mut h, start(2, Some(9))), TaskErrorCode::RunNotFound);
        assert_eq!(h.run(start(2, Some(1))), Ok(vec!["run_started"]));
        assert_eq!(h.run(step(2, "risks")), Ok(vec!["step_started"]));
        assert_eq!(h.run(succeed(2, "risks", 6)), Ok(vec!["step_succeeded"]));
        assert_eq!(h.run(end(2, RunOutcome::Completed)), Ok(vec!["run_ended"]));
        // A completed task is not run again.
        assert_eq!(code(&mut h, start(3, Some(2))), TaskErrorCode::Conflict);

        let task = h.state.task(&task_id()).expect("task");
        let states: Vec<RunState> = task.runs.iter().map(|r| r.state).collect();
        assert_eq!(states, [RunState::Stopped, RunState::Completed]);
        assert_eq!(task.runs[1].resumed_from, Some(run_id(1)));
        let intake = task.successes["intake"];
        assert_eq!((intake.artifact, intake.edited), ([4; 32], true));
        assert_eq!(task.successes["risks"].artifact, [6; 32]);
        assert_eq!(
            h.state.task_by_request("req-1").map(|t| t.id),
            Some(task_id())
        );
    }

    #[test]
    fn a_copy_of_a_task_keeps_its_runs_as_they_were_while_the_state_moves_on() {
        let mut h = Harness::new();
        h.run(create(None)).expect("create");
        h.run(start(1, None)).expect("start");
        h.run(step(1, "intake")).expect("step");
        let copy = h.state.task(&task_id()).expect("task").clone();
        h.run(succeed(1, "intake", 4)).expect("succeed");
        h.run(end(1, RunOutcome::Stopped)).expect("end");
        h.run(start(2, Some(1))).expect("resume");

        // The copy still sees the run as it was when copied.
        assert_eq!(copy.runs.len(), 1);
        assert_eq!(copy.runs[0].state, RunState::Running);
        assert!(copy.runs[0].running.contains("intake"));
        assert!(copy.runs[0].succeeded.is_empty());
        // The state has the change, in the run it touched only.
        let task = h.state.task(&task_id()).expect("task");
        assert_eq!(task.runs.len(), 2);
        assert_eq!(task.runs[0].state, RunState::Stopped);
        assert!(task.runs[0].succeeded.contains("intake"));
        assert!(task.runs[0].running.is_empty());
        // A run nothing touched since the copy is shared, not copied.
        let again = task.clone();
        h.run(step(2, "risks")).expect("step");
        assert!(std::sync::Arc::ptr_eq(
            &again.runs[0],
            &h.state.task(&task_id()).expect("task").runs[0]
        ));
        assert!(!std::sync::Arc::ptr_eq(
            &again.runs[1],
            &h.state.task(&task_id()).expect("task").runs[1]
        ));
        assert!(again.runs[1].running.is_empty());
    }

    #[test]
    fn a_retried_step_counts_its_attempts_and_bad_settings_are_refused() {
        let mut h = Harness::new();
        h.run(create(None)).expect("create");
        h.run(start(1, None)).expect("start");
        for attempt in 1..=3u32 {
            let started = h.state.decide(step(1, "intake")).expect("start step");
            assert!(
                matches!(&started[0], EventBody::StepStarted { attempt: a, .. } if *a == attempt),
                "{started:?}"
            );
            for body in started {
                h.apply(body);
            }
            h.run(Command::FailStep {
                task: task_id(),
                run: run_id(1),
                step: "intake".into(),
                class: "model_timeout".into(),
                message: "no answer".into(),
                recoverable: true,
            })
            .expect("fail");
        }
        assert_eq!(h.state.task(&task_id()).expect("task").runs[0].failures, 3);
        let mut bad = create(None);
        if let Command::CreateTask { task, speed, .. } = &mut bad {
            *task = TaskId::from_uuid(uuid::Uuid::from_u128(1));
            *speed = "slow".into();
        }
        let Err(Rejection::Task { code, message }) = h.state.decide(bad) else {
            panic!("a bad speed is refused");
        };
        assert_eq!(code, TaskErrorCode::InvalidArgument);
        assert_eq!(
            message,
            "speed_vs_detail: \"slow\" is not one of ping, fast, all"
        );
    }
}

/// The snapshot of the state every golden event folds into, byte for byte:
/// a change of the `State` types or of `apply` changes these bytes, and the
/// test then asks for `SNAPSHOT_VERSION` to change with them (an old
/// snapshot read as the new types would give a state no fold gives).
#[test]
fn the_golden_state_snapshot_pins_the_snapshot_version() {
    let mut state = State::default();
    for (at, event) in crate::event::golden_events_for_tests()
        .into_iter()
        .enumerate()
    {
        let cursor = Cursor(at as u64 + 1);
        state.apply(&Envelope { cursor, event });
    }
    let bytes = state.encode_snapshot().expect("encode");
    let name = format!("state-v{}.bin", crate::state::SNAPSHOT_VERSION);
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/golden")
        .join(&name);
    if std::env::var_os("PLANB_WRITE_GOLDEN_STATE").is_some() && !path.exists() {
        std::fs::write(&path, &bytes).expect("write the golden state");
    }
    let golden = std::fs::read(&path).unwrap_or_else(|e| {
        panic!("fixtures/golden/{name}: {e}; a new SNAPSHOT_VERSION writes its file once with PLANB_WRITE_GOLDEN_STATE=1")
    });
    assert!(
        bytes == golden,
        "the state snapshot is not fixtures/golden/{name} any more: the State types or apply changed; \
         bump SNAPSHOT_VERSION (core/src/state/snapshot.rs) and write its golden file with PLANB_WRITE_GOLDEN_STATE=1"
    );
    assert_eq!(State::decode_snapshot(&golden).expect("decode"), state);
}
