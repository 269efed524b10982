//! A revised plan for a run that failed: the model is told what the plan
//! was for, the steps that completed with their results, the step that
//! failed and its error, the steps left and the variables as they are, and
//! asked for a plan of the remaining work. Its answer is checked exactly as
//! a generated plan is, and sent back with the reason when refused.

use std::time::Duration;

use planb_core::exec_plan::{ExecPlan, PlanStep};
use planb_core::text::clip;
use serde_json::{Map, Value};

use super::generate::{GenerateError, ask_until_valid, plan_format};
use super::run::StepReport;
use super::servers::ToolInfo;
use crate::backend::Backend;

/// Longest result or variable shown to the model, in characters.
const VALUE_CHARS_MAX: usize = 2_000;
/// Most completed steps and variables shown.
const SHOWN_MAX: usize = 100;

/// What a revision is asked from.
#[derive(Debug)]
pub struct Failure<'a> {
    /// The plan that failed.
    pub plan: &'a ExecPlan,
    /// The steps completed so far, with their results (of the plan, and of
    /// earlier revisions).
    pub completed: &'a [StepReport],
    /// The step that failed.
    pub failed: &'a StepReport,
    /// The plan's steps that have not completed, the failed one among them.
    pub remaining: Vec<&'a PlanStep>,
    /// Every variable as the run left it.
    pub variables: &'a Map<String, Value>,
}

fn shown(value: &Value) -> String {
    clip(&value.to_string(), VALUE_CHARS_MAX)
}

fn completed_lines(completed: &[StepReport]) -> String {
    let mut out = String::new();
    for step in completed.iter().take(SHOWN_MAX) {
        let result = step.result.as_ref().map_or_else(String::new, shown);
        out.push_str(&format!(
            "- step {} \"{}\" [{}] args {}: result {result}\n",
            step.index,
            step.title,
            step.tool,
            shown(&step.args)
        ));
    }
    if completed.is_empty() {
        out.push_str("(none)\n");
    }
    out
}

fn remaining_lines(remaining: &[&PlanStep]) -> String {
    let mut out = String::new();
    for step in remaining.iter().take(SHOWN_MAX) {
        let mut line = format!(
            "- step {} \"{}\" [{}] args {}",
            step.index,
            step.title,
            step.tool,
            shown(&Value::Object(step.args.clone()))
        );
        if !step.depends_on.is_empty() {
            line.push_str(&format!(" after {}", step.depends_on.join(", ")));
        }
        if let Some(var) = &step.result_variable {
            line.push_str(&format!(" -> ${{{var}}}"));
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

fn variable_lines(variables: &Map<String, Value>) -> String {
    let mut out = String::new();
    for (name, value) in variables.iter().take(SHOWN_MAX) {
        out.push_str(&format!("- {name} = {}\n", shown(value)));
    }
    if variables.is_empty() {
        out.push_str("(none)\n");
    }
    out
}

/// The prompt for a revision of `failure` over `tools`.
pub fn prompt(failure: &Failure<'_>, tools: &[ToolInfo]) -> String {
    let plan = failure.plan;
    let failed = failure.failed;
    let purpose = match &plan.description {
        Some(description) => format!("{}\n{description}", plan.title),
        None => plan.title.clone(),
    };
    format!(
        "An execution plan failed part way. Write a revised plan of the remaining work only.\n\
         \n\
         The plan was for:\n{purpose}\n\
         \n\
         Steps completed (do not repeat them; their results are in the variables):\n{}\n\
         The step that failed: step {} \"{}\" [{}] args {}\n\
         Its error: {}\n\
         \n\
         Steps not done yet (the failed one among them):\n{}\n\
         Variables available to the revised plan as \"${{name}}\":\n{}\n\
         The revised plan must reach what the remaining steps were for without repeating the failure.\n\
         \n\
         {}",
        completed_lines(failure.completed),
        failed.index,
        failed.title,
        failed.tool,
        shown(&failed.args),
        clip(
            failed.error.as_deref().unwrap_or("unknown error"),
            VALUE_CHARS_MAX
        ),
        remaining_lines(&failure.remaining),
        variable_lines(failure.variables),
        plan_format(tools)
    )
}

/// Asks `backend` for a revised plan for `failure` over `tools`, checked as
/// a generated plan is.
pub async fn revise(
    backend: &Backend,
    failure: &Failure<'_>,
    tools: &[ToolInfo],
    timeout: Duration,
) -> Result<ExecPlan, GenerateError> {
    ask_until_valid(backend, &prompt(failure, tools), tools, timeout, &|_| {}).await
}
