//! A plan from a goal: the model is shown the downstream tools that exist
//! and asked for a plan in the plan JSON; the answer is checked exactly as
//! a written plan is (structure, dependencies, cycles, every tool against
//! the servers). A rejected answer is sent back with the reason, a bounded
//! number of times.

use std::time::Duration;

use planb_core::exec_plan::{ExecPlan, PlanError};
use planb_core::text::clip;
use serde_json::Value;

use super::servers::{Downstream, ToolInfo, available};
use crate::backend::{Backend, BackendError};

/// How many answers the model may give before generation fails.
pub const ATTEMPTS: u32 = 3;
/// The longest goal accepted.
pub const GOAL_BYTES_MAX: usize = 16 * 1024;
/// Most tools described to the model.
const TOOLS_SHOWN_MAX: usize = 200;
/// Longest description and schema shown per tool.
const DESCRIPTION_CHARS_MAX: usize = 400;
const SCHEMA_CHARS_MAX: usize = 1_500;

/// Why no plan came of a goal.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GenerateError {
    /// The goal is empty or too long.
    #[error("{0}")]
    Goal(String),
    /// The backend failed (not configured, timed out, errored).
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// Every answer was refused; the last reason.
    #[error("Failed to generate a valid plan: {0}")]
    Invalid(String),
}

/// What asking for a plan tells as it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// The model is asked for answer `answer` (of [`ATTEMPTS`]).
    Asking {
        /// The answer asked for, from 1.
        answer: u32,
    },
    /// Answer `answer` was refused; the next is asked with the reason.
    Refused {
        /// The answer refused, from 1.
        answer: u32,
        /// Why.
        reason: String,
    },
}

/// Told of each [`Attempt`].
pub type Tell<'a> = &'a (dyn Fn(&Attempt) + Send + Sync);

/// Why a model's answer is not a plan that can run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AnswerError {
    /// No `{…}` in the answer.
    #[error("the answer holds no JSON object")]
    NoObject,
    /// The object does not parse (the parser's words).
    #[error("the answer's JSON does not parse: {0}")]
    Json(String),
    /// It is not a valid plan, or names a tool no server has.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// A plan of no steps.
    #[error("the plan has no steps")]
    NoSteps,
}

/// The prompt for `goal` over `tools`.
pub fn prompt(goal: &str, tools: &[ToolInfo]) -> String {
    format!(
        "You turn a goal into an execution plan: a small graph of tool calls that a program will run.\n\
         \n\
         Goal:\n{goal}\n\
         \n\
         {}",
        plan_format(tools)
    )
}

/// The tools a plan may call and the plan JSON's shape and rules: the end
/// of every prompt that asks for a plan.
pub(crate) fn plan_format(tools: &[ToolInfo]) -> String {
    let names = available(tools);
    let mut listing = String::new();
    for tool in tools.iter().take(TOOLS_SHOWN_MAX) {
        let name = if names.contains(&tool.name) {
            tool.name.clone()
        } else {
            tool.qualified()
        };
        let schema = clip(&tool.input_schema.to_string(), SCHEMA_CHARS_MAX);
        listing.push_str(&format!(
            "- {name}: {}\n  arguments schema: {schema}\n",
            clip(tool.description.trim(), DESCRIPTION_CHARS_MAX)
        ));
    }
    if tools.len() > TOOLS_SHOWN_MAX {
        listing.push_str(&format!(
            "(and {} more tools not listed)\n",
            tools.len() - TOOLS_SHOWN_MAX
        ));
    }
    format!(
        "Tools you may use (use these names exactly; no other tool exists):\n{listing}\n\
         Answer with one JSON object and nothing else:\n\
         {{\"title\": \"short title\", \"variables\": {{}}, \"steps\": [\n\
         \x20 {{\"index\": \"1\", \"title\": \"what this step does\", \"tool\": \"tool name\", \"args\": {{}}, \"depends_on\": [], \"result_variable\": \"name\"}}\n\
         ]}}\n\
         \n\
         Rules:\n\
         - index is \"1\", \"2\", ... in order; depends_on lists the indexes a step must wait for.\n\
         - Steps that do not depend on each other run at the same time.\n\
         - result_variable (optional) names the step's result; a later step uses it in args as \"${{name}}\" \
         (the value itself) or \"${{name.field}}\" (a field of it), and must list that step in depends_on.\n\
         - args must match the tool's arguments schema.\n\
         - Use as few steps as the goal needs."
    )
}

/// The JSON object in a model's answer: the whole answer, or the text
/// between the first `{` and the last `}` (answers often come fenced or
/// with a sentence around them).
fn json_of(answer: &str) -> Result<Value, AnswerError> {
    let trimmed = answer.trim();
    if let Ok(value) = serde_json::from_str::<Value>(trimmed) {
        return Ok(value);
    }
    let (Some(start), Some(end)) = (trimmed.find('{'), trimmed.rfind('}')) else {
        return Err(AnswerError::NoObject);
    };
    if end < start {
        return Err(AnswerError::NoObject);
    }
    serde_json::from_str(&trimmed[start..=end]).map_err(|e| AnswerError::Json(e.to_string()))
}

/// Checks one answer: a plan whose every tool exists.
pub fn check_answer(answer: &str, tools: &[ToolInfo]) -> Result<(ExecPlan, Value), AnswerError> {
    let value = json_of(answer)?;
    let plan = ExecPlan::from_json(&value)?;
    if plan.steps.is_empty() {
        return Err(AnswerError::NoSteps);
    }
    plan.check_tools(|name| Downstream::resolve(tools, name).map(|_| ()))?;
    Ok((plan, value))
}

/// Asks `backend` for a plan for `goal` over `tools`, at most
/// [`ATTEMPTS`] times, each retry told why the previous answer was refused.
pub async fn generate(
    backend: &Backend,
    goal: &str,
    tools: &[ToolInfo],
    timeout: Duration,
    tell: Tell<'_>,
) -> Result<ExecPlan, GenerateError> {
    let goal = goal.trim();
    if goal.is_empty() {
        return Err(GenerateError::Goal("Goal description is required.".into()));
    }
    if goal.len() > GOAL_BYTES_MAX {
        return Err(GenerateError::Goal(format!(
            "goal: {} bytes; at most {GOAL_BYTES_MAX}",
            goal.len()
        )));
    }
    ask_until_valid(backend, &prompt(goal, tools), tools, timeout, tell).await
}

/// Asks `backend` with `first` for a plan over `tools` until an answer is
/// a plan that can run, at most [`ATTEMPTS`] times, each retry told why the
/// previous answer was refused.
pub(crate) async fn ask_until_valid(
    backend: &Backend,
    first: &str,
    tools: &[ToolInfo],
    timeout: Duration,
    tell: Tell<'_>,
) -> Result<ExecPlan, GenerateError> {
    let mut asked = first.to_owned();
    let mut last = String::new();
    for attempt in 1..=ATTEMPTS {
        tell(&Attempt::Asking { answer: attempt });
        let answer = backend.ask(&asked, timeout).await?;
        match check_answer(&answer.text, tools) {
            Ok((plan, _)) => return Ok(plan),
            Err(problem) => {
                tracing::info!(
                    "generated plan refused (answer {attempt} of {ATTEMPTS}): {problem}"
                );
                tell(&Attempt::Refused {
                    answer: attempt,
                    reason: problem.to_string(),
                });
                asked = format!(
                    "{first}\n\nYour previous answer was refused: {problem}\nAnswer again with the corrected JSON object only."
                );
                last = problem.to_string();
            }
        }
    }
    Err(GenerateError::Invalid(last))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tools() -> Vec<ToolInfo> {
        vec![
            ToolInfo {
                server: "alpha".into(),
                name: "echo".into(),
                description: "Echoes".into(),
                input_schema: json!({"type": "object"}),
                wraps_result: false,
            },
            ToolInfo {
                server: "beta".into(),
                name: "echo".into(),
                description: "Echoes too".into(),
                input_schema: json!({"type": "object"}),
                wraps_result: false,
            },
            ToolInfo {
                server: "alpha".into(),
                name: "add".into(),
                description: "Adds".into(),
                input_schema: json!({"type": "object", "properties": {"a": {"type": "number"}}}),
                wraps_result: false,
            },
        ]
    }

    #[test]
    fn the_prompt_names_each_tool_as_a_plan_may_write_it() {
        let text = prompt("add two numbers", &tools());
        assert!(text.contains("- add: Adds"), "{text}");
        assert!(text.contains("- alpha__echo: Echoes"), "{text}");
        assert!(text.contains("- beta__echo: Echoes too"), "{text}");
        assert!(text.contains("add two numbers"));
    }

    #[test]
    fn a_fenced_answer_is_read_and_checked() {
        let answer = "Here you go:\n```json\n{\"title\": \"Sum\", \"steps\": [{\"index\": \"1\", \"title\": \"add\", \"tool\": \"add\", \"args\": {\"a\": 1}}]}\n```";
        let (plan, _) = check_answer(answer, &tools()).expect("valid");
        assert_eq!(plan.title, "Sum");
    }

    #[test]
    fn answers_that_are_not_plans_are_refused_with_the_reason() {
        let t = tools();
        assert!(
            check_answer("no idea", &t)
                .expect_err("refused")
                .to_string()
                .contains("no JSON object")
        );
        assert!(
            check_answer("{\"title\": \"x\", \"steps\": []}", &t)
                .expect_err("refused")
                .to_string()
                .contains("no steps")
        );
        let unknown = "{\"title\": \"x\", \"steps\": [{\"title\": \"a\", \"tool\": \"rm\"}]}";
        assert!(
            check_answer(unknown, &t)
                .expect_err("refused")
                .to_string()
                .contains("Unknown tool: rm. Available:")
        );
        let ambiguous = "{\"title\": \"x\", \"steps\": [{\"title\": \"a\", \"tool\": \"echo\"}]}";
        assert!(
            check_answer(ambiguous, &t)
                .expect_err("refused")
                .to_string()
                .contains("alpha__echo")
        );
        let cycle = "{\"title\": \"x\", \"steps\": [{\"index\": \"1\", \"title\": \"a\", \"tool\": \"add\", \"depends_on\": [\"2\"]}, {\"index\": \"2\", \"title\": \"b\", \"tool\": \"add\", \"depends_on\": [\"1\"]}]}";
        assert!(
            check_answer(cycle, &t)
                .expect_err("refused")
                .to_string()
                .contains("cycle")
        );
    }
}
