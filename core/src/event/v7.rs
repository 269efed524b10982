//! Event schema version 7. FROZEN once released.
//!
//! Version 7 records the project a task or an execution plan is made for:
//! `TaskCreated` and `PlanCreated` carry `project_path` (version 6's say
//! none), so a team ships them, and the events of their runs, with that
//! project. Every other version 6 event keeps its shape and meaning.
//!
//! These types are the wire format of version 7, pinned byte for byte by
//! `fixtures/golden/events-v7.bin`; the small types they share with earlier
//! versions stay in [`super::v1`] and [`super::v3`]. A schema that only
//! adds variants starts from this one's with `body_after_v7!` and upcasts
//! with `same_as_v7!`.

use crate::answer::Answers;
use crate::id::{AskId, EventId, PlanName, RunId, SessionId, TaskId};
use crate::plan_edit::PlanEdit;
use crate::question::AskSpec;
use crate::time::Timestamp;

use super::v1::{DeclineAction, Delivery, ReviewChannel, ReviewComment, Verdict};
use super::v3::RunOutcome;

/// One fact recorded in the log: what happened, when, under which id.
///
/// `serde::Serialize` gives the JSON rendering SQL readers of a team store
/// see (hashes in hex, a blob's bytes by size); it plays no part in the
/// archived bytes.
#[derive(
    Clone, PartialEq, Debug, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, serde::Serialize,
)]
pub struct Event {
    /// Unique id of this event (a UUID v7 minted by the writer).
    pub id: EventId,
    /// When the writer recorded it.
    pub at: Timestamp,
    /// What happened.
    pub body: EventBody,
}

/// Version 7's event bodies, each variant with its docs, and after them
/// `$more` (see `body_after_v6!`).
macro_rules! body_after_v7 {
    ($($more:tt)*) => {
        /// What happened. Each variant is a fact, named in the past tense.
        #[derive(
            Clone, PartialEq, Debug, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, serde::Serialize,
        )]
        #[serde(tag = "kind", rename_all = "snake_case")]
        pub enum EventBody {
            /// `init_planb_session` created a session.
            SessionCreated {
                /// The new session.
                session: SessionId,
                /// Optional short title.
                title: Option<String>,
                /// Optional one-line description of what is being planned.
                intent: Option<String>,
                /// Optional project directory the session is about.
                project_path: Option<String>,
            },
            /// `ask_user` opened a form.
            AskOpened {
                /// The session the ask belongs to.
                session: SessionId,
                /// The new ask.
                ask: AskId,
                /// The validated questions.
                spec: AskSpec,
                /// How the form reached the person.
                delivery: Delivery,
                /// The form's address without its secret (`http://127.0.0.1:<port>/ask`).
                url: String,
                /// SHA-256 of the form's secret sid, so any planb process can tell a
                /// link to this form from others without the log holding the secret.
                #[serde(serialize_with = "crate::json::hex")]
                sid_sha256: [u8; 32],
            },
            /// The form autosaved a partial answer.
            AskDraftSaved {
                /// The ask being answered.
                ask: AskId,
                /// The validated draft.
                answers: Answers,
            },
            /// The person submitted the form while the tool was waiting.
            AskAnswered {
                /// The ask answered.
                ask: AskId,
                /// The validated answers returned to the agent.
                answers: Answers,
            },
            /// The tool stopped waiting (`ASK_ANSWER_TIMEOUT_MS` elapsed).
            AskTimedOut {
                /// The ask that timed out.
                ask: AskId,
            },
            /// The person declined or cancelled the URL elicitation.
            AskDeclined {
                /// The ask declined.
                ask: AskId,
                /// Which elicitation action the client reported.
                action: DeclineAction,
            },
            /// The form could not be delivered or the wait failed.
            AskFailed {
                /// The ask that failed.
                ask: AskId,
                /// What went wrong, for the person reading the history.
                detail: String,
            },
            /// The person submitted the form after the tool had already returned
            /// (timeout, decline or failure); kept so no answer is lost.
            AskLateAnswer {
                /// The ask answered late.
                ask: AskId,
                /// The validated answers.
                answers: Answers,
            },
            /// `save_plan` stored a new version of the session's plan.
            PlanVersionSaved {
                /// The session the plan belongs to.
                session: SessionId,
                /// 1 for the first version, then one more each time.
                version: u32,
                /// Optional title of this version.
                title: Option<String>,
                /// The plan (Markdown).
                content: String,
            },
            /// `write_plan` replaced a named plan's content (creating it if new).
            NamedPlanWritten {
                /// The plan's name.
                plan: PlanName,
                /// The absolute directory of the plan's file: with the name, what
                /// the plan is. Empty for plans recorded before version 2.
                plans_dir: String,
                /// The full new content.
                content: String,
                /// The session the writer was working in, when known.
                session: Option<SessionId>,
            },
            /// `edit_plan` applied string replacements to a named plan.
            NamedPlanEdited {
                /// The plan's name.
                plan: PlanName,
                /// The absolute directory of the plan's file: with the name, what
                /// the plan is. Empty for plans recorded before version 2.
                plans_dir: String,
                /// The edits, applied atomically to the previous content.
                edits: Vec<PlanEdit>,
                /// Length in bytes of the content after the edits, to check replays.
                content_len_after: u64,
            },
            /// The plan file was changed by something other than the tools; the
            /// content found on disk is recorded before the next write or edit.
            NamedPlanChangedOutside {
                /// The plan's name.
                plan: PlanName,
                /// The absolute directory of the plan's file: with the name, what
                /// the plan is. Empty for plans recorded before version 2.
                plans_dir: String,
                /// The content found on disk.
                content: String,
            },
            /// `submit_plan` asked for a review of the current content.
            NamedPlanSubmitted {
                /// The plan's name.
                plan: PlanName,
                /// The absolute directory of the plan's file: with the name, what
                /// the plan is. Empty for plans recorded before version 2.
                plans_dir: String,
                /// 1 for the first review round, then one more each time.
                round: u32,
            },
            /// A reviewer answered a submitted plan.
            NamedPlanReviewed {
                /// The plan's name.
                plan: PlanName,
                /// The absolute directory of the plan's file: with the name, what
                /// the plan is. Empty for plans recorded before version 2.
                plans_dir: String,
                /// The round this review answers.
                round: u32,
                /// Approved or not.
                verdict: Verdict,
                /// General feedback.
                feedback: Option<String>,
                /// Comments anchored to quoted passages of the plan.
                comments: Vec<ReviewComment>,
                /// How the review was collected.
                channel: ReviewChannel,
            },
            /// `task_create` created a long-running task: a pipeline and the
            /// immutable configuration every run of it uses.
            TaskCreated {
                /// The new task.
                task: TaskId,
                /// The pipeline's name.
                pipeline: String,
                /// The pipeline's version.
                pipeline_version: u32,
                /// What to plan.
                prompt: String,
                /// `ping`, `fast` or `all`.
                speed: String,
                /// The step the runs aim at.
                target: String,
                /// The model profile, when one was asked for.
                model_profile: Option<String>,
                /// The caller's idempotency key, when given.
                client_request_id: Option<String>,
                /// The project the task plans for (the folder the creator
                /// worked in), when known: a team ships it with that project.
                project_path: Option<String>,
            },
            /// A worker began a run of a task.
            RunStarted {
                /// The task.
                task: TaskId,
                /// The new run.
                run: RunId,
                /// The run this one resumes, if any.
                resumed_from: Option<RunId>,
                /// The worker's process id.
                owner_pid: u32,
                /// The worker's host name.
                host: String,
                /// An execution plan's call-time variables (a JSON object), which
                /// override the plan's own; `None` for a task's run.
                variables: Option<String>,
            },
            /// A step of a run started.
            StepStarted {
                /// The task.
                task: TaskId,
                /// The run.
                run: RunId,
                /// The step's id in the pipeline.
                step: String,
                /// 1 for the first attempt in this run, then one more each retry.
                attempt: u32,
                /// The hash of what the step reads (see `dag::Pipeline::input_hash`).
                #[serde(serialize_with = "crate::json::hex")]
                input: [u8; 32],
                /// For a tool step: the SHA-256 of the call as made (tool and
                /// resolved arguments, JSON) in the blob store.
                #[serde(serialize_with = "crate::json::hex_option")]
                call: Option<[u8; 32]>,
            },
            /// A step produced its artifact.
            StepSucceeded {
                /// The task.
                task: TaskId,
                /// The run.
                run: RunId,
                /// The step's id.
                step: String,
                /// The input hash it ran on.
                #[serde(serialize_with = "crate::json::hex")]
                input: [u8; 32],
                /// The SHA-256 of the artifact's bytes (in the blob store).
                #[serde(serialize_with = "crate::json::hex")]
                artifact: [u8; 32],
                /// The artifact's size in bytes.
                bytes: u64,
                /// How long the step took.
                duration_ms: u64,
                /// Model tokens read, when a model answered.
                tokens_in: u64,
                /// Model tokens written, when a model answered.
                tokens_out: u64,
            },
            /// A step failed.
            StepFailed {
                /// The task.
                task: TaskId,
                /// The run.
                run: RunId,
                /// The step's id.
                step: String,
                /// A short stable class, such as `model_timeout` or `bad_answer`.
                class: String,
                /// What went wrong, for people.
                message: String,
                /// Whether resuming may succeed.
                recoverable: bool,
            },
            /// A person (or a tool call) replaced a step's artifact; the steps
            /// downstream of it run again on resume.
            ArtifactEdited {
                /// The task.
                task: TaskId,
                /// The step whose artifact changed.
                step: String,
                /// The SHA-256 of the new bytes (in the blob store).
                #[serde(serialize_with = "crate::json::hex")]
                artifact: [u8; 32],
                /// Their size.
                bytes: u64,
                /// Who: `task_artifact_write`, or `hand edit` for a changed file.
                by: String,
            },
            /// `task_stop` asked the active run to stop.
            StopRequested {
                /// The task.
                task: TaskId,
                /// The run asked to stop.
                run: RunId,
            },
            /// A run ended.
            RunEnded {
                /// The task.
                task: TaskId,
                /// The run.
                run: RunId,
                /// How.
                outcome: RunOutcome,
                /// Why, for a failure: `worker_error`, `inactivity_timeout`, or the
                /// failed step's class.
                reason: Option<String>,
                /// The step that failed, if one did.
                failed_step: Option<String>,
                /// Whether resuming may succeed.
                recoverable: bool,
            },
            /// Lines of a run's log (bounded in number and length).
            RunLog {
                /// The task.
                task: TaskId,
                /// The run.
                run: RunId,
                /// The lines, oldest first.
                lines: Vec<String>,
            },
            /// An execution plan was created: a checked DAG of tool calls, run
            /// as a task of the DAG engine (its runs and steps are task events).
            PlanCreated {
                /// The plan's id (a task id).
                task: TaskId,
                /// Its title.
                title: String,
                /// The checked plan as compact JSON (`exec_plan::ExecPlan::to_json`).
                definition: String,
                /// The caller's idempotency key, when given.
                client_request_id: Option<String>,
                /// The project the plan was made for, when known.
                project_path: Option<String>,
            },
            /// An execution plan was deleted: no longer listed or run. Its history
            /// stays in the log.
            PlanDeleted {
                /// The plan.
                task: TaskId,
            },
            /// Bytes of the blob store small enough to be recorded in the log
            /// itself, ahead of the event that names them (by their SHA-256) in
            /// the same append: one durable write covers both. The blob file is
            /// then a copy, written before the append and not synced, and can be
            /// restored from this event.
            BlobStored {
                /// The task whose step made them.
                task: TaskId,
                /// The bytes.
                #[serde(rename = "size", serialize_with = "crate::json::byte_count")]
                bytes: Vec<u8>,
            },
            /// A task was archived: it stays readable (status, files, resources,
            /// history) but is never run, edited or stopped again, and leaves the
            /// default lists.
            TaskArchived {
                /// The task.
                task: TaskId,
            },
            /// A task was deleted: it leaves every list and its folder is removed;
            /// its history stays in the log.
            TaskDeleted {
                /// The task.
                task: TaskId,
            },
            $($more)*
        }
    };
}

// The archived twins rkyv derives beside the enum have no `Debug` (as
// with every schema); written inside a macro, the lint sees them.
#[allow(missing_debug_implementations)]
mod body {
    use super::*;
    body_after_v7! {}
}
pub use body::*;

/// `upcast_body!` from version 7's variants (see `same_as_v6!`).
#[allow(unused_macros)] // The next schema's.
macro_rules! same_as_v7 {
    (
        $body:expr, $old:ident => $new:ident
        $(, also { $($also:tt)* })?
        $(, $changed:pat => $into:expr)* $(,)?
    ) => {
        upcast_body!(
            $body, $old => $new,
            same {
                SessionCreated { session, title, intent, project_path },
                AskOpened { session, ask, spec, delivery, url, sid_sha256 },
                AskDraftSaved { ask, answers },
                AskAnswered { ask, answers },
                AskTimedOut { ask },
                AskDeclined { ask, action },
                AskFailed { ask, detail },
                AskLateAnswer { ask, answers },
                PlanVersionSaved { session, version, title, content },
                NamedPlanWritten { plan, plans_dir, content, session },
                NamedPlanEdited { plan, plans_dir, edits, content_len_after },
                NamedPlanChangedOutside { plan, plans_dir, content },
                NamedPlanSubmitted { plan, plans_dir, round },
                NamedPlanReviewed { plan, plans_dir, round, verdict, feedback, comments, channel },
                TaskCreated { task, pipeline, pipeline_version, prompt, speed, target, model_profile, client_request_id, project_path },
                RunStarted { task, run, resumed_from, owner_pid, host, variables },
                StepStarted { task, run, step, attempt, input, call },
                StepSucceeded { task, run, step, input, artifact, bytes, duration_ms, tokens_in, tokens_out },
                StepFailed { task, run, step, class, message, recoverable },
                ArtifactEdited { task, step, artifact, bytes, by },
                StopRequested { task, run },
                RunEnded { task, run, outcome, reason, failed_step, recoverable },
                RunLog { task, run, lines },
                PlanCreated { task, title, definition, client_request_id, project_path },
                PlanDeleted { task },
                BlobStored { task, bytes },
                TaskArchived { task },
                TaskDeleted { task },
                $($($also)*)?
            }
            $(, $changed => $into)*
        )
    };
}

upcast_through!(v6: v1, v2, v3, v4, v5);

impl From<super::v6::Event> for Event {
    fn from(event: super::v6::Event) -> Event {
        use super::v6::EventBody as V6;
        let body = upcast_body!(
            event.body, V6 => EventBody,
            same {
                SessionCreated { session, title, intent, project_path },
                AskOpened { session, ask, spec, delivery, url, sid_sha256 },
                AskDraftSaved { ask, answers },
                AskAnswered { ask, answers },
                AskTimedOut { ask },
                AskDeclined { ask, action },
                AskFailed { ask, detail },
                AskLateAnswer { ask, answers },
                PlanVersionSaved { session, version, title, content },
                NamedPlanWritten { plan, plans_dir, content, session },
                NamedPlanEdited { plan, plans_dir, edits, content_len_after },
                NamedPlanChangedOutside { plan, plans_dir, content },
                NamedPlanSubmitted { plan, plans_dir, round },
                NamedPlanReviewed { plan, plans_dir, round, verdict, feedback, comments, channel },
                RunStarted { task, run, resumed_from, owner_pid, host, variables },
                StepStarted { task, run, step, attempt, input, call },
                StepSucceeded { task, run, step, input, artifact, bytes, duration_ms, tokens_in, tokens_out },
                StepFailed { task, run, step, class, message, recoverable },
                ArtifactEdited { task, step, artifact, bytes, by },
                StopRequested { task, run },
                RunEnded { task, run, outcome, reason, failed_step, recoverable },
                RunLog { task, run, lines },
                PlanDeleted { task },
                BlobStored { task, bytes },
                TaskArchived { task },
                TaskDeleted { task },
            },
            // Version 6 recorded no project.
            V6::TaskCreated {
                task, pipeline, pipeline_version, prompt, speed, target, model_profile,
                client_request_id,
            } => EventBody::TaskCreated {
                task, pipeline, pipeline_version, prompt, speed, target, model_profile,
                client_request_id, project_path: None,
            },
            V6::PlanCreated { task, title, definition, client_request_id } => {
                EventBody::PlanCreated {
                    task, title, definition, client_request_id, project_path: None,
                }
            },
        );
        Event {
            id: event.id,
            at: event.at,
            body,
        }
    }
}
