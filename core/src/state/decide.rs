//! [`State::decide`]: what a command means given the current state.
//!
//! Deciding is separate from applying so the Store can decide under the
//! append lock after catching up on the log, append the resulting events,
//! and only then apply them. A rejected command appends nothing.

use crate::answer::Answers;
use crate::event::{DeclineAction, Delivery, EventBody, ReviewChannel, ReviewComment, Verdict};
use crate::id::PlanName;
use crate::id::{AskId, SessionId};
use crate::plan_edit::{EditError, PlanEdit};
use crate::question::AskSpec;
use crate::state::PlanKey;

use super::{AskStatus, State};

/// Longest session title and plan version title, in characters.
pub const SESSION_TITLE_CHARS_MAX: usize = 200;
/// Longest session intent, in characters.
pub const INTENT_CHARS_MAX: usize = 2_000;
/// Longest project path, in bytes (a common `PATH_MAX`).
pub const PROJECT_PATH_BYTES_MAX: usize = 4_096;
/// Room kept in a log record (at most 4 MiB) for everything of an event
/// besides its plan text: ids, titles, the plans directory.
pub const EVENT_ROOM_BYTES: usize = 64 * 1024;
/// Largest blob recorded in the log itself (see [`Command::SettleAndStart`]);
/// a larger one is only in the blob store.
pub const INLINE_BLOB_BYTES_MAX: usize = 32 * 1024;
/// Most bytes of blobs one [`Command::SettleAndStart`] records in the log.
pub const INLINE_BLOBS_BYTES_MAX: usize = 1024 * 1024;
/// Largest saved plan, in bytes: 4 MiB less [`EVENT_ROOM_BYTES`], so a plan
/// within it always fits its event in one log record and a larger one is
/// refused by name, never by the log.
pub const PLAN_CONTENT_BYTES_MAX: usize = 4 * 1024 * 1024 - EVENT_ROOM_BYTES;

/// A step to start in a [`Command::SettleAndStart`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepStart {
    /// The step's id.
    pub step: String,
    /// The hash of what it reads.
    pub input: [u8; 32],
    /// For a tool step: the SHA-256 of its call in the blob store.
    pub call: Option<[u8; 32]>,
}

/// A request to change the state. Ids are minted by the caller; specs and
/// answers are already validated ([`AskSpec::from_json`],
/// [`AskSpec::validate_answers`]).
#[derive(Clone, PartialEq, Debug)]
#[non_exhaustive]
pub enum Command {
    /// `init_planb_session`.
    CreateSession {
        /// The freshly minted id.
        session: SessionId,
        /// Optional title (at most 200 characters).
        title: Option<String>,
        /// Optional intent (at most 2000 characters).
        intent: Option<String>,
        /// Optional project path (at most 4096 bytes).
        project_path: Option<String>,
    },
    /// `ask_user` is about to show a form.
    OpenAsk {
        /// The session named by the agent.
        session: SessionId,
        /// The freshly minted ask id.
        ask: AskId,
        /// The validated questions.
        spec: AskSpec,
        /// How the form reaches the person.
        delivery: Delivery,
        /// The form's address, without the secret.
        url: String,
        /// The form's secret sid; only its hash is recorded.
        sid: String,
    },
    /// The form autosaved.
    SaveDraft {
        /// The ask.
        ask: AskId,
        /// The validated draft.
        answers: Answers,
    },
    /// The form was submitted.
    SubmitAnswers {
        /// The ask.
        ask: AskId,
        /// The validated answers.
        answers: Answers,
    },
    /// The tool stopped waiting.
    TimeOut {
        /// The ask.
        ask: AskId,
    },
    /// The elicitation was declined or cancelled.
    Decline {
        /// The ask.
        ask: AskId,
        /// Which action the client reported.
        action: DeclineAction,
    },
    /// Delivery or waiting failed.
    Fail {
        /// The ask.
        ask: AskId,
        /// What went wrong.
        detail: String,
    },
    /// `write_plan`: replace a named plan's content, creating it if new.
    WritePlan {
        /// The plan: its directory and name.
        plan: PlanKey,
        /// The full new content (at most 4 MiB).
        content: String,
        /// The planb session to tie the plan to, if any.
        session: Option<SessionId>,
    },
    /// `edit_plan`: string replacements applied atomically to the current content.
    EditPlan {
        /// The plan: its directory and name.
        plan: PlanKey,
        /// The edits, all matched against the content before any applies.
        edits: Vec<PlanEdit>,
    },
    /// The plan's file was changed by hand since planb last wrote it.
    RecordOutsideChange {
        /// The plan: its directory and name.
        plan: PlanKey,
        /// What the file holds now.
        content: String,
    },
    /// `submit_plan`: open a review round on the current content.
    SubmitPlan {
        /// The plan: its directory and name.
        plan: PlanKey,
    },
    /// A person's verdict on a review round.
    ReviewPlan {
        /// The plan: its directory and name.
        plan: PlanKey,
        /// The round reviewed.
        round: u32,
        /// Approve or request changes.
        verdict: Verdict,
        /// General feedback.
        feedback: Option<String>,
        /// Comments on quoted passages.
        comments: Vec<ReviewComment>,
        /// Where the verdict came from.
        channel: ReviewChannel,
    },
    /// `save_plan`.
    SavePlan {
        /// The session named by the agent.
        session: SessionId,
        /// Optional title of the version (at most 200 characters).
        title: Option<String>,
        /// The plan (at most 4 MiB).
        content: String,
    },
    /// `task_create`: a task with its immutable configuration. With a
    /// `client_request_id` already used, nothing is recorded (the caller
    /// returns that task).
    CreateTask {
        /// The freshly minted id.
        task: crate::id::TaskId,
        /// The pipeline's name.
        pipeline: String,
        /// Its version.
        pipeline_version: u32,
        /// What to plan.
        prompt: String,
        /// `ping`, `fast` or `all`.
        speed: String,
        /// The step the runs aim at.
        target: String,
        /// The model profile asked for.
        model_profile: Option<String>,
        /// The caller's idempotency key.
        client_request_id: Option<String>,
        /// The project it plans for, when the front door knows it.
        project_path: Option<String>,
    },
    /// A worker starts a run (`task_create`, `task_resume`).
    StartRun {
        /// The task.
        task: crate::id::TaskId,
        /// The freshly minted run id.
        run: crate::id::RunId,
        /// The run it resumes.
        resumed_from: Option<crate::id::RunId>,
        /// The worker's process id.
        owner_pid: u32,
        /// The worker's host.
        host: String,
        /// An execution plan's call-time variables (a JSON object).
        variables: Option<String>,
    },
    /// A step of the active, running run starts.
    StartStep {
        /// The task.
        task: crate::id::TaskId,
        /// The run.
        run: crate::id::RunId,
        /// The step's id.
        step: String,
        /// The hash of what it reads.
        input: [u8; 32],
        /// A tool step's call as made (already in the blob store).
        call: Option<[u8; 32]>,
    },
    /// A running step produced its artifact (already in the blob store).
    SucceedStep {
        /// The task.
        task: crate::id::TaskId,
        /// The run.
        run: crate::id::RunId,
        /// The step's id.
        step: String,
        /// The input hash it ran on.
        input: [u8; 32],
        /// The artifact's SHA-256.
        artifact: [u8; 32],
        /// Its size.
        bytes: u64,
        /// How long it took.
        duration_ms: u64,
        /// Model tokens read.
        tokens_in: u64,
        /// Model tokens written.
        tokens_out: u64,
    },
    /// Steps of one run ended and started in one append (one durable write
    /// where each took one): each end is checked as the
    /// [`Command::SucceedStep`] or [`Command::FailStep`] it must be, each
    /// start as a [`Command::StartStep`] once the ended steps no longer run.
    /// While the run is stopping the starts are left out and the ends alone
    /// are recorded.
    SettleAndStart {
        /// The task.
        task: crate::id::TaskId,
        /// The run.
        run: crate::id::RunId,
        /// `SucceedStep`s and `FailStep`s of this run, one per step.
        ends: Vec<Command>,
        /// The steps to start.
        starts: Vec<StepStart>,
        /// Blobs the ends and starts name that are small enough to be
        /// recorded in the log, ahead of them (`EventBody::BlobStored`):
        /// each at most [`INLINE_BLOB_BYTES_MAX`], at most
        /// [`INLINE_BLOBS_BYTES_MAX`] in all.
        inline: Vec<Vec<u8>>,
    },
    /// A running step failed.
    FailStep {
        /// The task.
        task: crate::id::TaskId,
        /// The run.
        run: crate::id::RunId,
        /// The step's id.
        step: String,
        /// A short stable class.
        class: String,
        /// What went wrong.
        message: String,
        /// Whether resuming may succeed.
        recoverable: bool,
    },
    /// `task_artifact_write` or a hand edit found at resume.
    EditArtifact {
        /// The task.
        task: crate::id::TaskId,
        /// The step whose artifact changes.
        step: String,
        /// The new bytes' SHA-256 (already in the blob store).
        artifact: [u8; 32],
        /// Their size.
        bytes: u64,
        /// Who.
        by: String,
    },
    /// `plan_create`: a checked execution plan. With a `client_request_id`
    /// already used, nothing is recorded.
    CreatePlan {
        /// The freshly minted id.
        task: crate::id::TaskId,
        /// The checked plan as compact JSON (its title is the plan's).
        definition: String,
        /// The caller's idempotency key.
        client_request_id: Option<String>,
        /// The project it is made for, when the front door knows it.
        project_path: Option<String>,
    },
    /// `plan delete`: refused while a run of the plan is active.
    DeletePlan {
        /// The plan.
        task: crate::id::TaskId,
    },
    /// `task_archive`: freezes a task, refused while a run is active.
    ArchiveTask {
        /// The task.
        task: crate::id::TaskId,
    },
    /// `task_delete`: refused while a run is active.
    DeleteTask {
        /// The task.
        task: crate::id::TaskId,
    },
    /// `task_stop`.
    RequestStop {
        /// The task.
        task: crate::id::TaskId,
    },
    /// The worker ends its run.
    EndRun {
        /// The task.
        task: crate::id::TaskId,
        /// The run.
        run: crate::id::RunId,
        /// How it ended.
        outcome: crate::event::RunOutcome,
        /// Why, for a failure.
        reason: Option<String>,
        /// The step that failed.
        failed_step: Option<String>,
        /// Whether resuming may succeed.
        recoverable: bool,
    },
    /// Lines for the run's log.
    AppendRunLog {
        /// The task.
        task: crate::id::TaskId,
        /// The run.
        run: crate::id::RunId,
        /// The lines.
        lines: Vec<String>,
    },
}

/// Why a command was refused. Messages are meant for the agent (through
/// the MCP layer) or the form, and say what to do where there is something
/// to do.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Rejection {
    /// The session was never created.
    #[error(
        "sessionId: unknown session {session}; call init_planb_session first and pass the sessionId it returns"
    )]
    UnknownSession {
        /// The id the caller named.
        session: SessionId,
    },
    /// A session with this id already exists (the caller reused an id).
    #[error("session {session} already exists")]
    SessionExists {
        /// The id the caller named.
        session: SessionId,
    },
    /// The ask was never opened.
    #[error("unknown ask {ask}")]
    UnknownAsk {
        /// The id the caller named.
        ask: AskId,
    },
    /// An ask with this id already exists (the caller reused an id).
    #[error("ask {ask} already exists")]
    AskExists {
        /// The id the caller named.
        ask: AskId,
    },
    /// The ask already has its answers (on time or late); a form is
    /// answered once.
    #[error("ask {ask} was already answered")]
    AlreadyAnswered {
        /// The ask.
        ask: AskId,
    },
    /// The command needs a pending ask and this one has ended.
    #[error("ask {ask} is {status}, not pending")]
    NotPending {
        /// The ask.
        ask: AskId,
        /// Its current status.
        status: AskStatus,
    },
    /// A text field is over its limit.
    #[error("{field}: must be at most {max} {unit} (got {actual})")]
    TooLong {
        /// The tool argument, such as `plan` or `projectPath`.
        field: &'static str,
        /// The limit.
        max: usize,
        /// The length given.
        actual: usize,
        /// `characters` or `bytes`.
        unit: &'static str,
    },
    /// A text that must say something was empty or only whitespace.
    #[error("{field}: must not be empty; give {what}")]
    Empty {
        /// The tool argument, such as `plan` or `content`.
        field: &'static str,
        /// What belongs there.
        what: &'static str,
    },
    /// Edits would make a named plan larger than its limit.
    #[error(
        "edits: the plan would be {actual} bytes after these edits, over the limit of {max} bytes; \
         move parts into another plan"
    )]
    EditedTooLarge {
        /// The limit.
        max: usize,
        /// The size the edits would give.
        actual: usize,
    },
    /// A task command the task rules refuse, with its error code.
    #[error("{code}: {message}")]
    Task {
        /// `TASK_NOT_FOUND`, `RUN_ALREADY_ACTIVE`, ….
        code: TaskErrorCode,
        /// What is wrong, for the caller.
        message: String,
    },
    /// No plan of that name was ever written.
    #[error(
        "planName: no plan named {plan} in this plans directory; create it with write_plan first"
    )]
    UnknownPlan {
        /// The name.
        plan: PlanName,
    },
    /// The edits do not apply.
    #[error("{0}")]
    Edit(#[from] EditError),
    /// The content did not change.
    #[error("planName: plan {plan} already holds exactly this content")]
    Unchanged {
        /// The name.
        plan: PlanName,
    },
    /// The review names a round that does not exist.
    #[error("plan {plan} has no review round {round}")]
    UnknownRound {
        /// The name.
        plan: PlanName,
        /// The round named.
        round: u32,
    },
    /// The round already has its verdict.
    #[error("review round {round} of plan {plan} was already reviewed")]
    AlreadyReviewed {
        /// The name.
        plan: PlanName,
        /// The round.
        round: u32,
    },
    /// The session has `u32::MAX` plan versions already.
    #[error("session {session} has too many plan versions")]
    TooManyPlanVersions {
        /// The session.
        session: SessionId,
    },
}

pub(super) fn chars_at_most(
    field: &'static str,
    text: Option<&str>,
    max: usize,
) -> Result<(), Rejection> {
    let actual = text.map_or(0, |t| t.chars().count());
    if actual > max {
        return Err(Rejection::TooLong {
            field,
            max,
            actual,
            unit: "characters",
        });
    }
    Ok(())
}

pub(super) fn bytes_at_most(
    field: &'static str,
    text: Option<&str>,
    max: usize,
) -> Result<(), Rejection> {
    let actual = text.map_or(0, str::len);
    if actual > max {
        return Err(Rejection::TooLong {
            field,
            max,
            actual,
            unit: "bytes",
        });
    }
    Ok(())
}

impl State {
    /// Decides what `command` means now: the events to append, or why not.
    pub fn decide(&self, command: Command) -> Result<Vec<EventBody>, Rejection> {
        let body = match command {
            Command::CreateSession {
                session,
                title,
                intent,
                project_path,
            } => self.decide_create_session(session, title, intent, project_path)?,
            Command::OpenAsk { .. }
            | Command::SaveDraft { .. }
            | Command::SubmitAnswers { .. }
            | Command::TimeOut { .. }
            | Command::Decline { .. }
            | Command::Fail { .. } => self.decide_ask(command)?,
            // Writing what a plan already holds records nothing, so
            // `write_plan` is idempotent. (Such content passed every check
            // when it was recorded, unless a hand edit emptied the file.)
            Command::WritePlan {
                ref plan,
                ref content,
                session,
            } if !content.trim().is_empty()
                && self.write_changes_nothing(plan, content, session) =>
            {
                return Ok(Vec::new());
            }
            Command::WritePlan { .. }
            | Command::EditPlan { .. }
            | Command::RecordOutsideChange { .. }
            | Command::SubmitPlan { .. }
            | Command::ReviewPlan { .. } => self.decide_named(command)?,
            Command::CreateTask { .. }
            | Command::CreatePlan { .. }
            | Command::DeletePlan { .. }
            | Command::ArchiveTask { .. }
            | Command::DeleteTask { .. }
            | Command::StartRun { .. }
            | Command::StartStep { .. }
            | Command::SucceedStep { .. }
            | Command::FailStep { .. }
            | Command::EditArtifact { .. }
            | Command::RequestStop { .. }
            | Command::EndRun { .. }
            | Command::AppendRunLog { .. } => match self.decide_task(command)? {
                Some(body) => body,
                None => return Ok(Vec::new()),
            },
            Command::SettleAndStart {
                task,
                run,
                ends,
                starts,
                inline,
            } => {
                return self.decide_settle_and_start(task, run, ends, starts, inline);
            }
            Command::SavePlan {
                session,
                title,
                content,
            } => self.decide_save_plan(session, title, content)?,
        };
        Ok(vec![body])
    }

    /// Decides a command about an ask: its form opened, a draft, the
    /// answers, or how waiting for them ended.
    fn decide_ask(&self, command: Command) -> Result<EventBody, Rejection> {
        match command {
            Command::OpenAsk {
                session,
                ask,
                spec,
                delivery,
                url,
                sid,
            } => self.decide_open_ask(session, ask, spec, delivery, url, &sid),
            Command::SaveDraft { ask, answers } => {
                // A draft is kept whenever a submission would still be: the person
                // may keep typing after the tool stopped waiting, and a late answer
                // is recorded, so the draft leading to it is worth keeping too.
                self.submit(ask, Answers::default())?;
                Ok(EventBody::AskDraftSaved { ask, answers })
            }
            Command::SubmitAnswers { ask, answers } => self.submit(ask, answers),
            Command::TimeOut { ask } => {
                self.pending(ask)?;
                Ok(EventBody::AskTimedOut { ask })
            }
            Command::Decline { ask, action } => {
                self.pending(ask)?;
                Ok(EventBody::AskDeclined { ask, action })
            }
            Command::Fail { ask, detail } => {
                self.pending(ask)?;
                Ok(EventBody::AskFailed { ask, detail })
            }
            other => unreachable!("decide_ask is only called for ask commands: {other:?}"),
        }
    }

    /// `init_planb_session`: a new session, its texts within their limits.
    fn decide_create_session(
        &self,
        session: SessionId,
        title: Option<String>,
        intent: Option<String>,
        project_path: Option<String>,
    ) -> Result<EventBody, Rejection> {
        chars_at_most("title", title.as_deref(), SESSION_TITLE_CHARS_MAX)?;
        chars_at_most("intent", intent.as_deref(), INTENT_CHARS_MAX)?;
        bytes_at_most(
            "projectPath",
            project_path.as_deref(),
            PROJECT_PATH_BYTES_MAX,
        )?;
        if self.sessions.contains_key(&session) {
            return Err(Rejection::SessionExists { session });
        }
        Ok(EventBody::SessionCreated {
            session,
            title,
            intent,
            project_path,
        })
    }

    /// A form about to be shown, in a known session under a fresh ask id.
    fn decide_open_ask(
        &self,
        session: SessionId,
        ask: AskId,
        spec: AskSpec,
        delivery: Delivery,
        url: String,
        sid: &str,
    ) -> Result<EventBody, Rejection> {
        self.known_session(session)?;
        if self.asks.contains_key(&ask) {
            return Err(Rejection::AskExists { ask });
        }
        Ok(EventBody::AskOpened {
            session,
            ask,
            spec,
            delivery,
            url,
            // No sid (an imported ask) records zeros, which no sid hashes to.
            sid_sha256: if sid.is_empty() {
                [0; 32]
            } else {
                super::sid_sha256(sid)
            },
        })
    }

    /// A session's next plan version, numbered one past its latest.
    fn decide_save_plan(
        &self,
        session: SessionId,
        title: Option<String>,
        content: String,
    ) -> Result<EventBody, Rejection> {
        chars_at_most("title", title.as_deref(), SESSION_TITLE_CHARS_MAX)?;
        bytes_at_most("plan", Some(&content), PLAN_CONTENT_BYTES_MAX)?;
        if content.trim().is_empty() {
            return Err(Rejection::Empty {
                field: "plan",
                what: "the plan's Markdown",
            });
        }
        self.known_session(session)?;
        let latest = self.latest_plan_version(&session).map_or(0, |p| p.version);
        let version = latest
            .checked_add(1)
            .ok_or(Rejection::TooManyPlanVersions { session })?;
        Ok(EventBody::PlanVersionSaved {
            session,
            version,
            title,
            content,
        })
    }

    pub(super) fn known_session(&self, session: SessionId) -> Result<(), Rejection> {
        if self.sessions.contains_key(&session) {
            Ok(())
        } else {
            Err(Rejection::UnknownSession { session })
        }
    }

    fn pending(&self, ask: AskId) -> Result<(), Rejection> {
        let status = self.ask(&ask).ok_or(Rejection::UnknownAsk { ask })?.status;
        if status == AskStatus::Pending {
            Ok(())
        } else {
            Err(Rejection::NotPending { ask, status })
        }
    }

    /// A submission answers a pending ask; after a timeout, decline or
    /// failure it is still recorded, as a late answer, so nothing the person
    /// typed is lost. Either way a form is answered once.
    fn submit(&self, ask: AskId, answers: Answers) -> Result<EventBody, Rejection> {
        let current = self.ask(&ask).ok_or(Rejection::UnknownAsk { ask })?;
        if !current.accepts_answer() {
            return Err(Rejection::AlreadyAnswered { ask });
        }
        Ok(match current.status {
            AskStatus::Pending => EventBody::AskAnswered { ask, answers },
            _ => EventBody::AskLateAnswer { ask, answers },
        })
    }
}

/// The error codes the task rules produce, as the task tools return them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum TaskErrorCode {
    /// No task of that id.
    TaskNotFound,
    /// No run of that id in the task.
    RunNotFound,
    /// The task has an active run already.
    RunAlreadyActive,
    /// The run is not active (or not running, for a new step).
    RunNotActive,
    /// A step, target or setting that does not exist (a well-formed name).
    InvalidTarget,
    /// A malformed argument: empty, too long, not one of the allowed values.
    InvalidArgument,
    /// An artifact that does not exist.
    InvalidArtifactUri,
    /// The change contradicts what is recorded.
    Conflict,
    /// An artifact cannot change while a run is active.
    RunningReadonly,
}

impl TaskErrorCode {
    /// `TASK_NOT_FOUND`, … as the tools return it.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskErrorCode::TaskNotFound => "TASK_NOT_FOUND",
            TaskErrorCode::RunNotFound => "RUN_NOT_FOUND",
            TaskErrorCode::RunAlreadyActive => "RUN_ALREADY_ACTIVE",
            TaskErrorCode::RunNotActive => "RUN_NOT_ACTIVE",
            TaskErrorCode::InvalidTarget => "INVALID_TARGET",
            TaskErrorCode::InvalidArgument => "INVALID_ARGUMENT",
            TaskErrorCode::InvalidArtifactUri => "INVALID_ARTIFACT_URI",
            TaskErrorCode::Conflict => "CONFLICT",
            TaskErrorCode::RunningReadonly => "RUNNING_READONLY",
        }
    }
}

impl std::fmt::Display for TaskErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
