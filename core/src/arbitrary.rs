//! proptest strategies for the core's types, shared by the crate's tests.
//!
//! They generate structurally arbitrary values, not necessarily valid ones
//! (a spec may have duplicate ids): the codec must carry whatever it is
//! given, and `apply` must cope with whatever the log holds.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::strategy::Union;
use uuid::Uuid;

use crate::answer::{AnswerValue, Answers};
use crate::event::{
    DeclineAction, Delivery, Event, EventBody, ReviewChannel, ReviewComment, Verdict,
};
use crate::id::{AskId, EventId, PlanName, SessionId};
use crate::plan_edit::PlanEdit;
use crate::question::{AskSpec, Choice, Question, QuestionKind};
use crate::time::Timestamp;

fn text() -> impl Strategy<Value = String> {
    ".{0,12}"
}

fn opt_text() -> impl Strategy<Value = Option<String>> {
    proptest::option::of(text())
}

/// Any float but NaN, which is never equal to itself and so cannot be
/// compared after a round trip.
fn number() -> impl Strategy<Value = f64> {
    any::<f64>().prop_filter("NaN", |n| !n.is_nan())
}

pub(crate) fn session_id() -> impl Strategy<Value = SessionId> {
    any::<u128>().prop_map(|n| SessionId::from_uuid(Uuid::from_u128(n)))
}

pub(crate) fn ask_id() -> impl Strategy<Value = AskId> {
    any::<u128>().prop_map(|n| AskId::from_uuid(Uuid::from_u128(n)))
}

fn event_id() -> impl Strategy<Value = EventId> {
    any::<u128>().prop_map(|n| EventId::from_uuid(Uuid::from_u128(n)))
}

fn plan_name() -> impl Strategy<Value = PlanName> {
    "[A-Za-z0-9_-]{1,16}".prop_filter_map("valid plan name", |s| PlanName::parse(&s).ok())
}

/// A plan name with a plans directory (empty, as upcast from version 1, or a path).
fn plan_key() -> impl Strategy<Value = (PlanName, String)> {
    let dir = prop_oneof![
        Just(String::new()),
        Just("/home/ada/app/docs/plans".to_owned()),
        Just("/srv/other/plans".to_owned()),
    ];
    (plan_name(), dir)
}

fn choice() -> impl Strategy<Value = Choice> {
    (text(), opt_text()).prop_map(|(value, markdown)| Choice { value, markdown })
}

fn question_kind() -> impl Strategy<Value = QuestionKind> {
    prop_oneof![
        opt_text().prop_map(|placeholder| QuestionKind::Text { placeholder }),
        opt_text().prop_map(|placeholder| QuestionKind::LongText { placeholder }),
        vec(choice(), 0..4).prop_map(|options| QuestionKind::Single { options }),
        vec(choice(), 0..4).prop_map(|options| QuestionKind::Multi { options }),
        (number(), number(), proptest::option::of(number()))
            .prop_map(|(min, max, step)| QuestionKind::Scale { min, max, step }),
    ]
}

fn question() -> impl Strategy<Value = Question> {
    (text(), text(), any::<bool>(), opt_text(), question_kind()).prop_map(
        |(id, label, required, tab, kind)| Question {
            id,
            label,
            required,
            tab,
            kind,
        },
    )
}

pub(crate) fn ask_spec() -> impl Strategy<Value = AskSpec> {
    (text(), opt_text(), opt_text(), vec(question(), 0..4)).prop_map(
        |(title, intro_title, intro, questions)| AskSpec {
            title,
            intro_title,
            intro,
            questions,
        },
    )
}

fn answer_value() -> impl Strategy<Value = AnswerValue> {
    prop_oneof![
        text().prop_map(AnswerValue::Text),
        text().prop_map(AnswerValue::Choice),
        vec(text(), 0..4).prop_map(AnswerValue::Choices),
        number().prop_map(AnswerValue::Number),
    ]
}

pub(crate) fn answers() -> impl Strategy<Value = Answers> {
    vec((text(), answer_value()), 0..4).prop_map(Answers)
}

fn plan_edit() -> impl Strategy<Value = PlanEdit> {
    (text(), text(), any::<bool>()).prop_map(|(old, new, replace_all)| PlanEdit {
        old,
        new,
        replace_all,
    })
}

fn delivery() -> impl Strategy<Value = Delivery> {
    prop_oneof![
        Just(Delivery::UrlElicitation),
        Just(Delivery::BrowserOpened),
        Just(Delivery::BrowserNotOpened),
    ]
}

fn decline_action() -> impl Strategy<Value = DeclineAction> {
    prop_oneof![Just(DeclineAction::Decline), Just(DeclineAction::Cancel)]
}

fn verdict() -> impl Strategy<Value = Verdict> {
    prop_oneof![Just(Verdict::Approved), Just(Verdict::ChangesRequested)]
}

fn review_channel() -> impl Strategy<Value = ReviewChannel> {
    prop_oneof![
        Just(ReviewChannel::Browser),
        Just(ReviewChannel::FormElicitation),
        Just(ReviewChannel::ExternalCommand),
    ]
}

fn review_comment() -> impl Strategy<Value = ReviewComment> {
    (text(), text()).prop_map(|(quote, text)| ReviewComment { quote, text })
}

/// Every variant of [`EventBody`], equally likely.
pub(crate) fn event_body() -> impl Strategy<Value = EventBody> {
    use EventBody as B;
    Union::new([
        (session_id(), opt_text(), opt_text(), opt_text())
            .prop_map(|(session, title, intent, project_path)| B::SessionCreated {
                session,
                title,
                intent,
                project_path,
            })
            .boxed(),
        (
            session_id(),
            ask_id(),
            ask_spec(),
            delivery(),
            text(),
            any::<[u8; 32]>(),
        )
            .prop_map(
                |(session, ask, spec, delivery, url, sid_sha256)| B::AskOpened {
                    session,
                    ask,
                    spec,
                    delivery,
                    url,
                    sid_sha256,
                },
            )
            .boxed(),
        (ask_id(), answers())
            .prop_map(|(ask, answers)| B::AskDraftSaved { ask, answers })
            .boxed(),
        (ask_id(), answers())
            .prop_map(|(ask, answers)| B::AskAnswered { ask, answers })
            .boxed(),
        ask_id().prop_map(|ask| B::AskTimedOut { ask }).boxed(),
        (ask_id(), decline_action())
            .prop_map(|(ask, action)| B::AskDeclined { ask, action })
            .boxed(),
        (ask_id(), text())
            .prop_map(|(ask, detail)| B::AskFailed { ask, detail })
            .boxed(),
        (ask_id(), answers())
            .prop_map(|(ask, answers)| B::AskLateAnswer { ask, answers })
            .boxed(),
        (session_id(), any::<u32>(), opt_text(), text())
            .prop_map(|(session, version, title, content)| B::PlanVersionSaved {
                session,
                version,
                title,
                content,
            })
            .boxed(),
        (plan_key(), text(), proptest::option::of(session_id()))
            .prop_map(
                |((plan, plans_dir), content, session)| B::NamedPlanWritten {
                    plan,
                    plans_dir,
                    content,
                    session,
                },
            )
            .boxed(),
        (plan_key(), vec(plan_edit(), 0..3), any::<u64>())
            .prop_map(
                |((plan, plans_dir), edits, content_len_after)| B::NamedPlanEdited {
                    plan,
                    plans_dir,
                    edits,
                    content_len_after,
                },
            )
            .boxed(),
        (plan_key(), text())
            .prop_map(|((plan, plans_dir), content)| B::NamedPlanChangedOutside {
                plan,
                plans_dir,
                content,
            })
            .boxed(),
        (plan_key(), any::<u32>())
            .prop_map(|((plan, plans_dir), round)| B::NamedPlanSubmitted {
                plan,
                plans_dir,
                round,
            })
            .boxed(),
        (
            plan_key(),
            any::<u32>(),
            verdict(),
            opt_text(),
            vec(review_comment(), 0..3),
            review_channel(),
        )
            .prop_map(
                |((plan, plans_dir), round, verdict, feedback, comments, channel)| {
                    B::NamedPlanReviewed {
                        plan,
                        plans_dir,
                        round,
                        verdict,
                        feedback,
                        comments,
                        channel,
                    }
                },
            )
            .boxed(),
        (
            task_id(),
            (text(), any::<u32>(), text(), text(), text()),
            opt_text(),
            opt_text(),
            opt_text(),
        )
            .prop_map(
                |(
                    task,
                    (pipeline, pipeline_version, prompt, speed, target),
                    model_profile,
                    client_request_id,
                    project_path,
                )| {
                    B::TaskCreated {
                        task,
                        pipeline,
                        pipeline_version,
                        prompt,
                        speed,
                        target,
                        model_profile,
                        client_request_id,
                        project_path,
                    }
                },
            )
            .boxed(),
        (
            task_id(),
            run_id(),
            proptest::option::of(run_id()),
            any::<u32>(),
            text(),
            proptest::option::of(text()),
        )
            .prop_map(
                |(task, run, resumed_from, owner_pid, host, variables)| B::RunStarted {
                    task,
                    run,
                    resumed_from,
                    owner_pid,
                    host,
                    variables,
                },
            )
            .boxed(),
        (
            task_id(),
            run_id(),
            text(),
            any::<u32>(),
            any::<[u8; 32]>(),
            proptest::option::of(any::<[u8; 32]>()),
        )
            .prop_map(|(task, run, step, attempt, input, call)| B::StepStarted {
                task,
                run,
                step,
                attempt,
                input,
                call,
            })
            .boxed(),
        (task_id(), text(), text(), opt_text(), opt_text())
            .prop_map(
                |(task, title, definition, client_request_id, project_path)| B::PlanCreated {
                    task,
                    title,
                    definition,
                    client_request_id,
                    project_path,
                },
            )
            .boxed(),
        task_id().prop_map(|task| B::PlanDeleted { task }).boxed(),
        task_id().prop_map(|task| B::TaskArchived { task }).boxed(),
        task_id().prop_map(|task| B::TaskDeleted { task }).boxed(),
        (
            (task_id(), run_id(), text()),
            (any::<[u8; 32]>(), any::<[u8; 32]>()),
            (any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>()),
        )
            .prop_map(
                |(
                    (task, run, step),
                    (input, artifact),
                    (bytes, duration_ms, tokens_in, tokens_out),
                )| {
                    B::StepSucceeded {
                        task,
                        run,
                        step,
                        input,
                        artifact,
                        bytes,
                        duration_ms,
                        tokens_in,
                        tokens_out,
                    }
                },
            )
            .boxed(),
        (task_id(), run_id(), text(), text(), text(), any::<bool>())
            .prop_map(
                |(task, run, step, class, message, recoverable)| B::StepFailed {
                    task,
                    run,
                    step,
                    class,
                    message,
                    recoverable,
                },
            )
            .boxed(),
        (task_id(), text(), any::<[u8; 32]>(), any::<u64>(), text())
            .prop_map(|(task, step, artifact, bytes, by)| B::ArtifactEdited {
                task,
                step,
                artifact,
                bytes,
                by,
            })
            .boxed(),
        (task_id(), run_id())
            .prop_map(|(task, run)| B::StopRequested { task, run })
            .boxed(),
        (
            task_id(),
            run_id(),
            prop_oneof![
                Just(crate::event::RunOutcome::Completed),
                Just(crate::event::RunOutcome::Stopped),
                Just(crate::event::RunOutcome::Failed)
            ],
            opt_text(),
            opt_text(),
            any::<bool>(),
        )
            .prop_map(
                |(task, run, outcome, reason, failed_step, recoverable)| B::RunEnded {
                    task,
                    run,
                    outcome,
                    reason,
                    failed_step,
                    recoverable,
                },
            )
            .boxed(),
        (task_id(), run_id(), vec(text(), 0..4))
            .prop_map(|(task, run, lines)| B::RunLog { task, run, lines })
            .boxed(),
    ])
}

fn task_id() -> impl Strategy<Value = crate::id::TaskId> {
    any::<u128>().prop_map(|n| crate::id::TaskId::from_uuid(Uuid::from_u128(n)))
}

fn run_id() -> impl Strategy<Value = crate::id::RunId> {
    any::<u128>().prop_map(|n| crate::id::RunId::from_uuid(Uuid::from_u128(n)))
}

/// An event with any id, any timestamp and any body.
pub(crate) fn event() -> impl Strategy<Value = Event> {
    (event_id(), any::<i64>(), event_body()).prop_map(|(id, at, body)| Event {
        id,
        at: Timestamp(at),
        body,
    })
}
