//! Named plans: Markdown plans an agent writes and a person reviews, each
//! at `<plans-dir>/<name>-plan.md`, a projection of its events.
//!
//! Before every change the file is compared with the recorded content: if
//! a person edited it by hand, that content is recorded first (in the same
//! step, under the log's append lock), so their edit is a version of its
//! own and never overwritten. Approval only ever comes from a person; a
//! submit command's output is feedback, never an approval.

use std::path::{Path, PathBuf};

use planb_core::{
    Command, EventBody, PlanEdit, PlanKey, PlanName, Rejection, ReviewChannel, ReviewComment,
    SessionId, Verdict, apply_edits,
};
use planb_projections::{PlanFileChange, StoreError};

use crate::error::{Error, ErrorCode};

use crate::store::StoreHandle;

/// What a reviewer decided.
#[derive(Debug, Clone)]
pub struct ReviewOutcome {
    /// Approve or request changes.
    pub verdict: Verdict,
    /// General feedback.
    pub feedback: Option<String>,
    /// Comments on quoted passages.
    pub comments: Vec<ReviewComment>,
}

impl ReviewOutcome {
    /// The command that records this outcome as round `round`'s verdict.
    pub fn command(&self, plan: &PlanKey, round: u32, channel: ReviewChannel) -> Command {
        Command::ReviewPlan {
            plan: plan.clone(),
            round,
            verdict: self.verdict,
            feedback: self.feedback.clone(),
            comments: self.comments.clone(),
            channel,
        }
    }
}

/// A plan submitted for review.
#[derive(Debug)]
pub struct Submitted {
    /// The round the submission opened.
    pub round: u32,
    /// The content submitted.
    pub content: String,
    /// The previous round's content, if there was one.
    pub previous: Option<String>,
    /// The plan's file.
    pub path: PathBuf,
}

/// Why edits were not made.
#[derive(Debug, thiserror::Error)]
pub enum EditRefused {
    /// An edit does not apply to the plan as it is (the front door words
    /// it: [`planb_core::EditError::message`]).
    #[error("{}", .0.message(false))]
    Edit(planb_core::EditError),
    /// The store failed or refused otherwise.
    #[error(transparent)]
    Recording(#[from] Error),
}

/// Why a submission is not under review.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The store failed or refused.
    #[error(transparent)]
    Store(#[from] Error),
    /// The store recorded something other than a submission.
    #[error("unexpected event: {0}")]
    Unexpected(String),
    /// Nothing was recorded.
    #[error("planName: nothing was submitted")]
    Nothing,
}

/// Why a submit command gave no feedback.
#[derive(Debug, thiserror::Error)]
pub enum CommandReviewError {
    /// The command could not be started.
    #[error("the submit command {program:?} could not run: {source}")]
    NotRun {
        /// The program named.
        program: String,
        /// Why it did not start.
        source: std::io::Error,
    },
    /// The command exited unsuccessfully.
    #[error("the submit command failed ({status}): {stderr}")]
    Failed {
        /// Its exit status.
        status: std::process::ExitStatus,
        /// Its stderr, trimmed.
        stderr: String,
    },
    /// It printed more than feedback can hold.
    #[error(
        "the submit command printed more than {COMMAND_OUTPUT_BYTES_MAX} bytes; its feedback is at most {} characters",
        planb_core::state::REVIEW_FEEDBACK_CHARS_MAX
    )]
    TooLong,
    /// Its feedback could not be recorded.
    #[error(transparent)]
    Store(#[from] Error),
}

/// Most of a submit command's stdout read (feedback holds at most
/// `REVIEW_FEEDBACK_CHARS_MAX` characters of up to 4 bytes).
pub const COMMAND_OUTPUT_BYTES_MAX: usize = 4 * planb_core::state::REVIEW_FEEDBACK_CHARS_MAX;
/// Most of a failing submit command's stderr said.
const COMMAND_STDERR_BYTES_MAX: usize = 16 << 10;

/// At most `max` bytes of `pipe` and whether it held more; the rest is
/// read and dropped, so the command never waits on a full pipe.
async fn read_at_most(
    pipe: Option<impl tokio::io::AsyncRead + Unpin>,
    max: usize,
) -> std::io::Result<(Vec<u8>, bool)> {
    use tokio::io::AsyncReadExt;
    let Some(mut pipe) = pipe else {
        return Ok((Vec::new(), false));
    };
    let mut bytes = Vec::new();
    (&mut pipe).take(max as u64).read_to_end(&mut bytes).await?;
    let more = tokio::io::copy(&mut pipe, &mut tokio::io::sink()).await?;
    Ok((bytes, more > 0))
}

/// The named plans of one plans directory.
#[derive(Debug, Clone)]
pub struct NamedPlans {
    store: StoreHandle,
    dir: PathBuf,
}

impl NamedPlans {
    /// The plans of `dir` (absolute), recorded in `store`.
    pub(crate) fn new(store: StoreHandle, dir: PathBuf) -> NamedPlans {
        NamedPlans { store, dir }
    }

    /// The plan called `name` in this directory.
    pub fn key(&self, name: PlanName) -> PlanKey {
        PlanKey::new(self.dir.display().to_string(), name)
    }

    /// `<plans-dir>/<name>-plan.md`.
    pub fn path(plan: &PlanKey) -> PathBuf {
        Path::new(&plan.dir).join(format!("{}-plan.md", plan.name.as_str()))
    }

    /// Records a hand edit of the plan's file if there is one, runs
    /// `command`, and brings the file up to date, as one step.
    pub async fn on_file(
        &self,
        plan: &PlanKey,
        command: Option<Command>,
    ) -> Result<PlanFileChange, Error> {
        self.store
            .on_plan_file(plan.clone(), Self::path(plan), command)
            .await
            .map_err(Error::from)
    }

    /// Writes (creates or replaces) the plan.
    pub async fn write(
        &self,
        plan: &PlanKey,
        content: String,
        session: Option<SessionId>,
    ) -> Result<PlanFileChange, Error> {
        let command = Command::WritePlan {
            plan: plan.clone(),
            content,
            session,
        };
        self.on_file(plan, Some(command)).await
    }

    /// Applies `edits` to the plan: the file and how many replacements
    /// were made.
    pub async fn edit(
        &self,
        plan: &PlanKey,
        edits: Vec<PlanEdit>,
    ) -> Result<(PathBuf, usize), EditRefused> {
        let command = Command::EditPlan {
            plan: plan.clone(),
            edits: edits.clone(),
        };
        let change = self
            .store
            .on_plan_file(plan.clone(), Self::path(plan), Some(command));
        let change = match change.await {
            Ok(change) => change,
            Err(StoreError::Rejected(Rejection::Edit(error))) => {
                return Err(EditRefused::Edit(error));
            }
            Err(error) => return Err(EditRefused::Recording(error.into())),
        };
        let replacements = change
            .before
            .and_then(|before| apply_edits(&before, &edits).ok())
            .map_or(0, |(_, n)| n);
        Ok((change.path, replacements))
    }

    /// Submits the plan for review. A last round still open (no verdict)
    /// whose content the plan still holds is taken up, same number: its
    /// review page went with the process that showed it. Otherwise a new
    /// round opens. Either way `previous` is what the person last reviewed.
    pub async fn submit(&self, plan: &PlanKey) -> Result<Submitted, SubmitError> {
        if let Some((round, None)) = self.unchanged_round(plan).await? {
            let change = self.on_file(plan, None).await?;
            let previous = self.last_reviewed(plan, round).await?;
            return Ok(Submitted {
                round,
                content: change.content,
                previous,
                path: change.path,
            });
        }
        let command = Command::SubmitPlan { plan: plan.clone() };
        let change = self.on_file(plan, Some(command)).await?;
        let round = match change.events.last().map(|e| &e.event.body) {
            Some(EventBody::NamedPlanSubmitted { round, .. }) => *round,
            Some(other) => return Err(SubmitError::Unexpected(format!("{other:?}"))),
            None => return Err(SubmitError::Nothing),
        };
        // Rounds are found by number: other processes may submit meanwhile.
        let previous = self.last_reviewed(plan, round).await?;
        Ok(Submitted {
            round,
            content: change.content,
            previous,
            path: change.path,
        })
    }

    /// The content of the latest round of `plan` before `round` that was
    /// reviewed: what the person last read, if they did.
    async fn last_reviewed(&self, plan: &PlanKey, round: u32) -> Result<Option<String>, Error> {
        let plan = plan.clone();
        self.store
            .read(move |s| {
                let rounds = &s.named_plan(&plan)?.rounds;
                let found = rounds
                    .iter()
                    .rev()
                    .find(|r| r.round < round && r.verdict.is_some())?;
                Some(found.content_at_submit.clone())
            })
            .await
            .map_err(Error::from)
    }

    /// The plan's last round and its verdict if the plan is as it was
    /// submitted then (a hand edit, recorded first, changes it).
    pub async fn unchanged_round(
        &self,
        plan: &PlanKey,
    ) -> Result<Option<(u32, Option<Verdict>)>, Error> {
        let current = self.on_file(plan, None).await?.content;
        let plan = plan.clone();
        self.store
            .read(move |s| {
                let last = s.named_plan(&plan)?.rounds.last()?;
                (last.content_at_submit == current).then_some((last.round, last.verdict))
            })
            .await
            .map_err(Error::from)
    }

    /// Records `outcome` as round `round`'s verdict.
    pub async fn record(
        &self,
        plan: &PlanKey,
        round: u32,
        outcome: &ReviewOutcome,
        channel: ReviewChannel,
    ) -> Result<(), Error> {
        let command = outcome.command(plan, round, channel);
        match self.store.execute(command).await {
            Ok(_) => Ok(()),
            Err(StoreError::Rejected(rejection @ Rejection::AlreadyReviewed { .. })) => {
                Err(Error::with(
                    ErrorCode::Conflict,
                    rejection.to_string(),
                    serde_json::json!({"already_reviewed": true}),
                ))
            }
            Err(error) => Err(error.into()),
        }
    }

    /// Runs the submit command `command` with the plan's file appended and
    /// records its stdout as feedback (changes requested, never an
    /// approval).
    pub async fn review_by_command(
        &self,
        plan: &PlanKey,
        round: u32,
        path: &Path,
        command: &[String],
    ) -> Result<ReviewOutcome, CommandReviewError> {
        let (program, args) = command.split_first().ok_or_else(no_program)?;
        let not_run = |source| CommandReviewError::NotRun {
            program: program.clone(),
            source,
        };
        let mut child = tokio::process::Command::new(program)
            .args(args)
            .arg(path)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(not_run)?;
        let (stdout, stderr) = tokio::join!(
            read_at_most(child.stdout.take(), COMMAND_OUTPUT_BYTES_MAX),
            read_at_most(child.stderr.take(), COMMAND_STDERR_BYTES_MAX)
        );
        let status = child.wait().await.map_err(not_run)?;
        let ((stdout, too_long), (stderr, _)) =
            (stdout.map_err(not_run)?, stderr.map_err(not_run)?);
        if !status.success() {
            let stderr = String::from_utf8_lossy(&stderr).trim().to_owned();
            return Err(CommandReviewError::Failed { status, stderr });
        }
        if too_long {
            return Err(CommandReviewError::TooLong);
        }
        let stdout = String::from_utf8_lossy(&stdout).trim().to_string();
        let outcome = ReviewOutcome {
            verdict: Verdict::ChangesRequested,
            feedback: (!stdout.is_empty()).then_some(stdout),
            comments: Vec::new(),
        };
        self.record(plan, round, &outcome, ReviewChannel::ExternalCommand)
            .await?;
        Ok(outcome)
    }
}

/// The refusal of an empty submit command.
fn no_program() -> CommandReviewError {
    CommandReviewError::NotRun {
        program: String::new(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "no program"),
    }
}
