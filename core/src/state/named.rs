//! Decisions about named plans: write, edit, changes found on disk, submission
//! and review. Every version is an event, so no content is ever lost; an
//! approval is only ever recorded from a review command, which only a person's
//! action produces.

use super::PlanKey;
use super::decide::{Command, Rejection, bytes_at_most, chars_at_most};
use super::{NamedPlan, State};
use crate::event::{EventBody, ReviewChannel, ReviewComment, Verdict};
use crate::id::SessionId;
use crate::plan_edit::{PlanEdit, apply_edits};

/// Largest named plan, in bytes: as large as a saved plan (4 MiB less room
/// for the rest of its event).
pub const NAMED_PLAN_BYTES_MAX: usize = super::decide::PLAN_CONTENT_BYTES_MAX;
/// Most bytes of `oldString` and `newString` in one `edit_plan` call, so its
/// event fits one log record.
pub const EDITS_BYTES_MAX: usize = NAMED_PLAN_BYTES_MAX;
/// Most comments on one review.
pub const REVIEW_COMMENTS_MAX: usize = 100;
/// Longest quoted passage of a comment, in characters.
pub const REVIEW_QUOTE_CHARS_MAX: usize = 2_000;
/// Longest comment, in characters.
pub const REVIEW_COMMENT_CHARS_MAX: usize = 10_000;
/// Longest general feedback, in characters.
pub const REVIEW_FEEDBACK_CHARS_MAX: usize = 100_000;
/// Most edits in one `edit_plan` call.
pub const EDITS_MAX: usize = 100;

impl State {
    /// Whether writing `content` to `plan` would record nothing new: the
    /// plan (under exactly this key, not one recorded before plans had
    /// directories) holds that content already, and `session`, if given, is
    /// the one it is tied to. Such a write appends no event.
    pub(super) fn write_changes_nothing(
        &self,
        plan: &PlanKey,
        content: &str,
        session: Option<SessionId>,
    ) -> bool {
        self.named_plans.get(plan).is_some_and(|current| {
            current.content == content && session.is_none_or(|s| current.session == Some(s))
        })
    }

    fn known_plan(&self, plan: &PlanKey) -> Result<&NamedPlan, Rejection> {
        self.named_plan(plan).ok_or_else(|| Rejection::UnknownPlan {
            plan: plan.name.clone(),
        })
    }

    pub(super) fn decide_named(&self, command: Command) -> Result<EventBody, Rejection> {
        match command {
            Command::WritePlan {
                plan,
                content,
                session,
            } => self.decide_write_plan(plan, content, session),
            Command::EditPlan { plan, edits } => self.decide_edit_plan(plan, edits),
            Command::RecordOutsideChange { plan, content } => {
                self.decide_outside_change(plan, content)
            }
            Command::SubmitPlan { plan } => self.decide_submit_plan(plan),
            Command::ReviewPlan {
                plan,
                round,
                verdict,
                feedback,
                comments,
                channel,
            } => self.decide_review_plan(plan, round, verdict, feedback, comments, channel),
            other => unreachable!("decide_named is only called for named-plan commands: {other:?}"),
        }
    }

    /// `write_plan`: the whole new content, not empty and within its limit.
    fn decide_write_plan(
        &self,
        plan: PlanKey,
        content: String,
        session: Option<SessionId>,
    ) -> Result<EventBody, Rejection> {
        bytes_at_most("content", Some(&content), NAMED_PLAN_BYTES_MAX)?;
        if content.trim().is_empty() {
            return Err(Rejection::Empty {
                field: "content",
                what: "the plan's Markdown",
            });
        }
        if let Some(session) = session {
            self.known_session(session)?;
        }
        Ok(EventBody::NamedPlanWritten {
            plan: plan.name,
            plans_dir: plan.dir,
            content,
            session,
        })
    }

    /// `edit_plan`: edits within their limits that apply to the current
    /// content and leave it within its limit.
    fn decide_edit_plan(
        &self,
        plan: PlanKey,
        edits: Vec<PlanEdit>,
    ) -> Result<EventBody, Rejection> {
        let current = self.known_plan(&plan)?;
        if edits.len() > EDITS_MAX {
            return Err(Rejection::TooLong {
                field: "edits",
                max: EDITS_MAX,
                actual: edits.len(),
                unit: "edits",
            });
        }
        let edit_bytes: usize = edits.iter().map(|e| e.old.len() + e.new.len()).sum();
        if edit_bytes > EDITS_BYTES_MAX {
            return Err(Rejection::TooLong {
                field: "edits",
                max: EDITS_BYTES_MAX,
                actual: edit_bytes,
                unit: "bytes of oldString and newString",
            });
        }
        let (content, _) = apply_edits(&current.content, &edits)?;
        if content.len() > NAMED_PLAN_BYTES_MAX {
            return Err(Rejection::EditedTooLarge {
                max: NAMED_PLAN_BYTES_MAX,
                actual: content.len(),
            });
        }
        Ok(EventBody::NamedPlanEdited {
            plan: plan.name,
            plans_dir: plan.dir,
            edits,
            content_len_after: content.len() as u64,
        })
    }

    /// A change found on disk, recorded only when it differs from the plan.
    fn decide_outside_change(
        &self,
        plan: PlanKey,
        content: String,
    ) -> Result<EventBody, Rejection> {
        bytes_at_most("content", Some(&content), NAMED_PLAN_BYTES_MAX)?;
        if self.named_plan(&plan).is_some_and(|p| p.content == content) {
            return Err(Rejection::Unchanged { plan: plan.name });
        }
        Ok(EventBody::NamedPlanChangedOutside {
            plan: plan.name,
            plans_dir: plan.dir,
            content,
        })
    }

    /// A submission opens the plan's next review round.
    fn decide_submit_plan(&self, plan: PlanKey) -> Result<EventBody, Rejection> {
        let current = self.known_plan(&plan)?;
        let round = u32::try_from(current.rounds.len() + 1).unwrap_or(u32::MAX);
        Ok(EventBody::NamedPlanSubmitted {
            plan: plan.name,
            plans_dir: plan.dir,
            round,
        })
    }

    /// A verdict on a round not yet reviewed, its texts within their limits.
    fn decide_review_plan(
        &self,
        plan: PlanKey,
        round: u32,
        verdict: Verdict,
        feedback: Option<String>,
        comments: Vec<ReviewComment>,
        channel: ReviewChannel,
    ) -> Result<EventBody, Rejection> {
        let current = self.known_plan(&plan)?;
        let reviewed = current
            .rounds
            .iter()
            .find(|r| r.round == round)
            .ok_or_else(|| Rejection::UnknownRound {
                plan: plan.name.clone(),
                round,
            })?;
        if reviewed.verdict.is_some() {
            return Err(Rejection::AlreadyReviewed {
                plan: plan.name,
                round,
            });
        }
        review_texts_fit(feedback.as_deref(), &comments)?;
        Ok(EventBody::NamedPlanReviewed {
            plan: plan.name,
            plans_dir: plan.dir,
            round,
            verdict,
            feedback,
            comments,
            channel,
        })
    }
}

/// A review's feedback and comments within their limits.
fn review_texts_fit(feedback: Option<&str>, comments: &[ReviewComment]) -> Result<(), Rejection> {
    chars_at_most("feedback", feedback, REVIEW_FEEDBACK_CHARS_MAX)?;
    if comments.len() > REVIEW_COMMENTS_MAX {
        return Err(Rejection::TooLong {
            field: "comments",
            max: REVIEW_COMMENTS_MAX,
            actual: comments.len(),
            unit: "comments",
        });
    }
    for comment in comments {
        chars_at_most(
            "comments[].quote",
            Some(&comment.quote),
            REVIEW_QUOTE_CHARS_MAX,
        )?;
        chars_at_most(
            "comments[].text",
            Some(&comment.text),
            REVIEW_COMMENT_CHARS_MAX,
        )?;
    }
    Ok(())
}
