//! The pipelines a task can run, and how a `model` step's prompt is built.
//!
//! The built-in `project-plan` pipeline is written in the same file format
//! users write theirs in (`docs/pipelines.md`): `pipelines/project-plan.json`
//! in this crate, compiled in. A user's pipeline is read from the data root
//! (`planb_projections::pipelines::resolve`); a file may not take a
//! built-in's name.

use std::collections::BTreeMap;

use crate::Task;
use crate::dag::{Action, Pipeline, StepDef, StepId, parse_pipeline};

/// The built-in pipeline's name.
pub const PROJECT_PLAN: &str = "project-plan";
/// The target a task aims at unless told otherwise.
pub const DEFAULT_TARGET: &str = "build_plan";
/// The targets every planning pipeline offers.
pub const STANDARD_TARGETS: [&str; 3] = ["build_plan", "validate_plan", "build_plan_and_validate"];
/// The built-in renderers a `render` step may name.
pub const RENDERERS: [&str; 1] = ["report"];

const PROJECT_PLAN_JSON: &str = include_str!("../pipelines/project-plan.json");

/// The built-in `project-plan` pipeline.
pub fn project_plan() -> Pipeline {
    // Checked by a test; a broken built-in cannot ship.
    #[allow(clippy::expect_used)]
    parse_pipeline(PROJECT_PLAN_JSON).expect("the built-in pipeline is valid")
}

/// A `render` step naming no built-in renderer.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
#[error("steps[{index}].render: {what:?} is not a renderer (known: {})", RENDERERS.join(", "))]
pub struct UnknownRenderer {
    /// The step's position.
    pub index: usize,
    /// The renderer it names.
    pub what: String,
}

/// Refuses steps no runner can run: unknown renderers.
pub fn check_runnable(pipeline: &Pipeline) -> Result<(), UnknownRenderer> {
    for (index, step) in pipeline.steps().iter().enumerate() {
        if let Action::Render { what } = &step.action
            && !RENDERERS.contains(&what.as_str())
        {
            return Err(UnknownRenderer {
                index,
                what: what.clone(),
            });
        }
    }
    Ok(())
}

/// The `{{detail}}` text for a speed.
pub fn detail(speed: &str) -> &'static str {
    match speed {
        "all" => {
            "Be thorough and specific: name numbers, dates, places and owners wherever the material allows."
        }
        _ => "Be brief: at most about 150 words, essentials only.",
    }
}

/// A `model` step's prompt: the template with `{{prompt}}`, `{{detail}}`
/// and `{{<need>}}` filled in, then every input the template did not name,
/// each under its step's title.
pub fn fill(
    template: &str,
    task: &Task,
    step: &StepDef,
    titles: &BTreeMap<StepId, String>,
    inputs: &BTreeMap<StepId, String>,
) -> String {
    let mut text = String::with_capacity(template.len() + 1024);
    let mut named = std::collections::BTreeSet::new();
    let mut rest = template;
    while let Some(open) = rest.find("{{") {
        text.push_str(&rest[..open]);
        let after = &rest[open + 2..];
        let Some(close) = after.find("}}") else {
            text.push_str(&rest[open..]);
            rest = "";
            break;
        };
        let key = after[..close].trim();
        match key {
            "prompt" => text.push_str(&task.prompt),
            "detail" => text.push_str(detail(&task.speed)),
            other => match StepId::parse(other)
                .ok()
                .and_then(|id| inputs.get_key_value(&id))
            {
                Some((id, value)) => {
                    named.insert(id.clone());
                    text.push_str(value);
                }
                None => text.push_str(&rest[open..open + 2 + close + 2]),
            },
        }
        rest = &after[close + 2..];
    }
    text.push_str(rest);
    let unnamed: Vec<&StepId> = step.needs.iter().filter(|n| !named.contains(*n)).collect();
    if !unnamed.is_empty() {
        text.push_str("\n\n# Material from earlier steps\n");
        for need in unnamed {
            let title = titles.get(need).map_or(need.as_str(), String::as_str);
            text.push_str(&format!("\n## {title}\n\n"));
            text.push_str(inputs.get(need).map_or("", String::as_str).trim());
            text.push('\n');
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_pipeline_is_valid_and_offers_the_standard_targets() {
        let pipeline = project_plan();
        assert_eq!(pipeline.name(), PROJECT_PLAN);
        check_runnable(&pipeline).expect("runnable");
        for target in STANDARD_TARGETS {
            let id = StepId::parse(target).expect("an id");
            assert!(pipeline.step(&id).is_some(), "{target}");
        }
        let steps = pipeline.steps().len();
        assert!((25..=40).contains(&steps), "{steps} steps");
        let all = StepId::parse("build_plan_and_validate").expect("id");
        assert_eq!(
            pipeline.closure(&all).expect("closure").len(),
            steps - 2,
            "the full target reads every step but the two other targets"
        );
    }

    #[test]
    fn a_template_names_inputs_and_the_rest_are_appended() {
        let task = Task {
            id: crate::TaskId::parse("00000000-0000-4000-8000-000000000000").expect("id"),
            created_at: crate::Timestamp(0),
            updated_at: crate::Timestamp(0),
            pipeline: PROJECT_PLAN.into(),
            pipeline_version: 1,
            prompt: "Open a bakery".into(),
            speed: "fast".into(),
            target: DEFAULT_TARGET.into(),
            model_profile: None,
            client_request_id: None,
            project_path: None,
            runs: crate::Runs::default(),
            successes: BTreeMap::new(),
            log_tail: Default::default(),
            log_lines: 0,
            plan: None,
            archived_at: None,
            deleted_at: None,
        };
        let id = |s: &str| StepId::parse(s).expect("id");
        let step = StepDef {
            id: id("c"),
            title: "C".into(),
            needs: vec![id("a"), id("b")],
            action: Action::Model {
                prompt: String::new(),
                answer: None,
            },
        };
        let titles = BTreeMap::from([(id("a"), "Alpha".into()), (id("b"), "Beta".into())]);
        let inputs = BTreeMap::from([(id("a"), "AAA".into()), (id("b"), "BBB".into())]);
        let text = fill(
            "Goal: {{prompt}}. Use {{a}}. {{detail}} {{unknown}} {{",
            &task,
            &step,
            &titles,
            &inputs,
        );
        assert!(
            text.starts_with("Goal: Open a bakery. Use AAA. Be brief"),
            "{text}"
        );
        assert!(text.contains("{{unknown}} {{"), "{text}");
        assert!(text.ends_with("## Beta\n\nBBB\n"), "{text}");
        assert!(!text.contains("## Alpha"), "{text}");
    }
}
