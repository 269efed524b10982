//! The approval a run of an execution plan may wait for: a form showing
//! the person the DAG, the call-time variables and the first batch's
//! calls with the arguments as they will be sent, then asking whether to
//! run it. The form and its answer are in the log like any ask; nothing is
//! called before the answer is [`APPROVE`].

use planb_core::exec_plan::{ExecPlan, StepMark, render_dag};
use planb_core::question::SpecError;
use planb_core::text::{clip, counted};
use planb_core::{AskSpec, TaskId};
use planb_engine::plans;
use serde_json::{Map, Value, json};

/// The answer that lets the run start.
pub const APPROVE: &str = "Run it";
/// The answer that refuses it.
pub const REJECT: &str = "Do not run it";
/// Most characters of one call's arguments (or of the variables) shown.
const ARGS_CHARS_MAX: usize = 4_000;
/// Past this many bytes of introduction, no more calls are shown.
const INTRO_BYTES_MAX: usize = 50_000;

/// Whether the form's answers approve the run.
pub fn approved(answers: &Value) -> bool {
    answers["decision"] == APPROVE
}

/// The form for a run of `plan` (the task `id`) with the call-time
/// variables `call`: approve or reject, with an optional note.
pub fn form(id: TaskId, plan: &ExecPlan, call: &Map<String, Value>) -> Result<AskSpec, SpecError> {
    let traced = plans::dry_run(plan, id, call);
    let batches = plan.batches();
    let first = batches.first().map_or(0, Vec::len);
    let mut intro = format!(
        "**{}**: {} in {}.\n\n",
        plan.title,
        counted(plan.steps.len(), "step", "steps"),
        counted(batches.len(), "batch", "batches")
    );
    if let Some(description) = plan.description.as_deref().filter(|d| !d.trim().is_empty()) {
        intro.push_str(&format!("{}\n\n", clip(description, 2_000)));
    }
    intro.push_str(&format!(
        "```text\n{}\n```\n\n",
        render_dag(plan, |_| StepMark::Pending)
    ));
    if !call.is_empty() {
        let shown = serde_json::to_string_pretty(call).unwrap_or_default();
        intro.push_str(&format!(
            "Variables given for this run:\n\n```json\n{}\n```\n\n",
            clip(&shown, ARGS_CHARS_MAX)
        ));
    }
    intro.push_str("The first batch calls, with the arguments as they will be sent:\n\n");
    for step in traced.steps.iter().take(first) {
        let args = serde_json::to_string_pretty(&step.args).unwrap_or_default();
        intro.push_str(&format!(
            "- Step {}: {} (`{}`)\n\n```json\n{}\n```\n\n",
            step.index,
            step.title,
            step.tool,
            clip(&args, ARGS_CHARS_MAX)
        ));
        if intro.len() > INTRO_BYTES_MAX {
            intro.push_str("(more calls not shown)\n");
            break;
        }
    }
    AskSpec::from_json(&json!({
        "title": clip(&format!("Run execution plan \"{}\"?", plan.title), 200),
        "introTitle": "The plan",
        "intro": intro,
        "questions": [
            {"id": "decision", "kind": "single", "label": "Run this plan now?", "required": true,
             "options": [APPROVE, REJECT]},
            {"id": "feedback", "kind": "longtext", "label": "A note for the agent (optional)"}
        ]
    }))
}
