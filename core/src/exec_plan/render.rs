//! The plan as ASCII art, in this format:
//!
//! ```text
//!   ○ 1. Read auth module                    [read_file] ∥
//!   ○ 2. Find all usages                     [search_code] ∥
//!
//!   ○ 3. Write refactored module             [write_file]  ← after: 1, 2
//! ```
//!
//! One line per step in the order written: a status mark (○ pending,
//! ◉ running, ● completed, ✗ failed), the index, the title cut and padded
//! to 35 characters, the tool, what it waits for, and ∥ when its batch
//! holds more than one step; a blank line where the batch changes.

use super::ExecPlan;

/// Title characters shown.
const TITLE_CHARS: usize = 35;

/// A step's state, as the rendering marks it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum StepMark {
    /// Not started.
    Pending,
    /// Started, not ended.
    Running,
    /// Succeeded.
    Completed,
    /// Failed.
    Failed,
}

impl StepMark {
    /// The mark's character.
    pub fn symbol(self) -> char {
        match self {
            StepMark::Pending => '○',
            StepMark::Running => '◉',
            StepMark::Completed => '●',
            StepMark::Failed => '✗',
        }
    }
}

/// Renders `plan` with each step's mark from `mark` (called with the
/// step's position).
pub fn render_dag(plan: &ExecPlan, mark: impl Fn(usize) -> StepMark) -> String {
    if plan.steps.is_empty() {
        return "  (empty plan)".to_owned();
    }
    let mut batch_of = vec![0usize; plan.steps.len()];
    for (b, batch) in plan.batches().iter().enumerate() {
        for &at in batch {
            batch_of[at] = b;
        }
    }
    let mut lines: Vec<String> = Vec::with_capacity(plan.steps.len() * 2);
    let mut current = None;
    for (at, step) in plan.steps.iter().enumerate() {
        let batch = batch_of[at];
        if current.is_some_and(|c| c != batch) {
            lines.push(String::new());
        }
        current = Some(batch);
        let title: String = crate::text::visible(&step.title, false)
            .chars()
            .take(TITLE_CHARS)
            .collect();
        let after = if plan.needs(at).is_empty() {
            String::new()
        } else {
            let list: Vec<&str> = plan
                .needs(at)
                .iter()
                .map(|&n| plan.steps[n].index.as_str())
                .collect();
            format!("  ← after: {}", list.join(", "))
        };
        let parallel = if plan.batches()[batch].len() > 1 {
            " ∥"
        } else {
            ""
        };
        lines.push(format!(
            "  {} {}. {title:<TITLE_CHARS$} [{}]{after}{parallel}",
            mark(at).symbol(),
            step.index,
            crate::text::visible(&step.tool, false)
        ));
    }
    lines.join("\n")
}
