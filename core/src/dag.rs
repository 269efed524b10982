//! The DAG engine's pure core: pipeline definitions and what to run next.
//!
//! A [`Pipeline`] is a named, versioned DAG of [`StepDef`]s. It is checked
//! when it is defined (duplicate or malformed ids, unknown needs, cycles are
//! errors naming the step), never at run time. A run asks a [`Schedule`]
//! which steps to settle next: every step of the target's closure whose needs
//! are settled is either *fresh* (it succeeded before on exactly the inputs
//! it would read now, so it is not run again) or must *run* with the input
//! hash returned here. The input hash covers the run's context (the task's
//! prompt and settings), the step's definition and every input artifact, so
//! editing an artifact makes exactly the steps downstream of it run again,
//! and a step upstream that re-runs but produces the same artifact does not
//! disturb what comes after it.
//!
//! Recording starts, results and failures is the callers' job (events in the
//! log); this module decides, from what was recorded, and does nothing else.

mod file;

pub use file::{FieldProblem, PIPELINE_FILE_BYTES_MAX, PipelineFileError, parse_pipeline};

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use sha2::{Digest, Sha256};

use crate::hash::ContentHash;

/// Longest step id, in characters.
pub const STEP_ID_CHARS_MAX: usize = 64;
/// Most steps in one pipeline.
pub const STEPS_MAX: usize = 500;

/// A step's id within its pipeline: lowercase ASCII letters, digits, `-`
/// and `_`, starting with a letter (it names files and shows in URLs).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct StepId(String);

impl StepId {
    /// Validates and wraps a step id.
    pub fn parse(text: &str) -> Result<StepId, StepIdError> {
        if text.is_empty() {
            return Err(StepIdError::Empty);
        }
        if text.chars().count() > STEP_ID_CHARS_MAX {
            return Err(StepIdError::TooLong);
        }
        if !text.starts_with(|c: char| c.is_ascii_lowercase()) {
            return Err(StepIdError::FirstNotALetter(text.to_owned()));
        }
        if let Some(found) = text
            .chars()
            .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-' || *c == '_'))
        {
            return Err(StepIdError::Character {
                id: text.to_owned(),
                found,
            });
        }
        Ok(StepId(text.to_owned()))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for StepId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why a text is not a step id.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StepIdError {
    /// The text is empty.
    #[error("must not be empty")]
    Empty,
    /// Longer than [`STEP_ID_CHARS_MAX`].
    #[error("must be at most {STEP_ID_CHARS_MAX} characters")]
    TooLong,
    /// It starts with something other than a lowercase letter.
    #[error("{0:?} must start with a lowercase letter")]
    FirstNotALetter(String),
    /// It holds a character ids may not.
    #[error("{id:?} may hold only lowercase letters, digits, '-' and '_' (found {found:?})")]
    Character {
        /// The text.
        id: String,
        /// The first character refused.
        found: char,
    },
}

/// What a `model` step's answer may be required to be: `json` a JSON
/// value (a Markdown code fence around it is taken off), `schedule` the
/// schedule the report draws as a Gantt chart (`{"tasks": [{id, name,
/// duration_days, depends_on}]}`, every dependency known, no cycle).
pub const MODEL_ANSWERS: [&str; 2] = ["json", "schedule"];

/// What a step does. Each variant's fields are part of the step's input
/// hash, so changing a prompt re-runs the step.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum Action {
    /// A prompt template filled from the task's prompt and the step's
    /// inputs, answered by a model backend.
    Model {
        /// The template.
        prompt: String,
        /// What the answer must be (one of [`MODEL_ANSWERS`]); `None` is
        /// any text that is not empty.
        answer: Option<String>,
    },
    /// A tool call on a downstream MCP server, arguments as JSON text with
    /// `${var}` bindings.
    Tool {
        /// The server's name in the servers file.
        server: String,
        /// The tool.
        tool: String,
        /// The arguments (JSON text).
        args: String,
    },
    /// A built-in deterministic step (the report, the zip, a chart).
    Render {
        /// Which one.
        what: String,
    },
}

/// One step of a pipeline.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct StepDef {
    /// Unique within the pipeline.
    pub id: StepId,
    /// Shown to people.
    pub title: String,
    /// Steps whose artifacts this one reads, in the order it reads them.
    pub needs: Vec<StepId>,
    /// What it does.
    pub action: Action,
}

/// Why a pipeline definition was refused; each names the step.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DefinitionError {
    /// The pipeline has no steps, or too many.
    #[error("steps: must hold 1 to {STEPS_MAX} steps (got {0})")]
    StepCount(usize),
    /// Two steps share an id.
    #[error("steps[{index}].id: {id:?} is already the id of steps[{first}]")]
    DuplicateId {
        /// The later step.
        index: usize,
        /// The shared id.
        id: String,
        /// The earlier step.
        first: usize,
    },
    /// A step needs a step that does not exist.
    #[error("steps[{index}].needs: {id:?} needs {need:?}, which no step defines")]
    UnknownNeed {
        /// The step.
        index: usize,
        /// Its id.
        id: String,
        /// The missing step.
        need: String,
    },
    /// A step names the same need twice, or itself.
    #[error("steps[{index}].needs: {id:?} {problem}")]
    BadNeed {
        /// The step.
        index: usize,
        /// Its id.
        id: String,
        /// What is wrong.
        problem: String,
    },
    /// The needs form a cycle.
    #[error("steps: needs form a cycle (each needs the next): {}", cycle.join(" -> "))]
    Cycle {
        /// The ids around the cycle, each needing the next, the first
        /// repeated at the end.
        cycle: Vec<String>,
    },
}

/// A checked DAG of steps.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Pipeline {
    name: String,
    version: u32,
    steps: Vec<StepDef>,
    /// Indexes of each step's needs.
    needs: Vec<Vec<usize>>,
    /// Indexes of the steps that need each step.
    dependents: Vec<Vec<usize>>,
    /// A topological order (needs first; ties in definition order).
    order: Vec<usize>,
    by_id: BTreeMap<StepId, usize>,
}

impl Pipeline {
    /// Checks `steps` and builds the pipeline.
    pub fn new(
        name: impl Into<String>,
        version: u32,
        steps: Vec<StepDef>,
    ) -> Result<Pipeline, DefinitionError> {
        if steps.is_empty() || steps.len() > STEPS_MAX {
            return Err(DefinitionError::StepCount(steps.len()));
        }
        let mut by_id = BTreeMap::new();
        for (index, step) in steps.iter().enumerate() {
            if let Some(first) = by_id.insert(step.id.clone(), index) {
                return Err(DefinitionError::DuplicateId {
                    index,
                    id: step.id.0.clone(),
                    first,
                });
            }
        }
        let mut needs = Vec::with_capacity(steps.len());
        let mut dependents = vec![Vec::new(); steps.len()];
        for (index, step) in steps.iter().enumerate() {
            let mut mine = Vec::with_capacity(step.needs.len());
            for need in &step.needs {
                let Some(&at) = by_id.get(need) else {
                    return Err(DefinitionError::UnknownNeed {
                        index,
                        id: step.id.0.clone(),
                        need: need.0.clone(),
                    });
                };
                let problem = if at == index {
                    Some("needs itself".to_owned())
                } else if mine.contains(&at) {
                    Some(format!("needs {:?} twice", need.as_str()))
                } else {
                    None
                };
                if let Some(problem) = problem {
                    return Err(DefinitionError::BadNeed {
                        index,
                        id: step.id.0.clone(),
                        problem,
                    });
                }
                mine.push(at);
                dependents[at].push(index);
            }
            needs.push(mine);
        }
        let order =
            topological_order(&needs, &dependents).map_err(|stuck| DefinitionError::Cycle {
                cycle: find_cycle(&needs, &stuck)
                    .into_iter()
                    .map(|i| steps[i].id.0.clone())
                    .collect(),
            })?;
        Ok(Pipeline {
            name: name.into(),
            version,
            steps,
            needs,
            dependents,
            order,
            by_id,
        })
    }

    /// The pipeline's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its version.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Its steps, in definition order.
    pub fn steps(&self) -> &[StepDef] {
        &self.steps
    }

    /// The step with this id.
    pub fn step(&self, id: &StepId) -> Option<&StepDef> {
        self.by_id.get(id).map(|&i| &self.steps[i])
    }

    fn index(&self, id: &StepId) -> Option<usize> {
        self.by_id.get(id).copied()
    }

    /// `target` and every step it needs, directly or not, in topological
    /// order: what a run toward `target` settles.
    pub fn closure(&self, target: &StepId) -> Option<Vec<StepId>> {
        let start = self.index(target)?;
        let mut inside = vec![false; self.steps.len()];
        let mut stack = vec![start];
        while let Some(at) = stack.pop() {
            if !std::mem::replace(&mut inside[at], true) {
                stack.extend(&self.needs[at]);
            }
        }
        Some(self.ordered(&inside))
    }

    /// Every step, in topological order.
    pub fn in_order(&self) -> Vec<StepId> {
        self.ordered(&vec![true; self.steps.len()])
    }

    /// `step` and every step that needs it, directly or not, in topological
    /// order: what an edit of `step`'s artifact can make run again.
    pub fn downstream(&self, step: &StepId) -> Option<Vec<StepId>> {
        let start = self.index(step)?;
        let mut inside = vec![false; self.steps.len()];
        let mut stack = vec![start];
        while let Some(at) = stack.pop() {
            if !std::mem::replace(&mut inside[at], true) {
                stack.extend(&self.dependents[at]);
            }
        }
        Some(self.ordered(&inside))
    }

    /// Kahn's layers of `target`'s closure: every step of a layer needs only
    /// steps of earlier layers, so a layer may run at once (up to the
    /// concurrency bound).
    pub fn batches(&self, target: &StepId) -> Option<Vec<Vec<StepId>>> {
        let closure: BTreeSet<usize> = self
            .closure(target)?
            .iter()
            .filter_map(|id| self.index(id))
            .collect();
        let mut depth = vec![0usize; self.steps.len()];
        let mut layers: Vec<Vec<StepId>> = Vec::new();
        for &at in self.order.iter().filter(|i| closure.contains(i)) {
            let d = self.needs[at]
                .iter()
                .map(|&n| depth[n] + 1)
                .max()
                .unwrap_or(0);
            depth[at] = d;
            if layers.len() <= d {
                layers.resize_with(d + 1, Vec::new);
            }
            layers[d].push(self.steps[at].id.clone());
        }
        Some(layers)
    }

    fn ordered(&self, inside: &[bool]) -> Vec<StepId> {
        self.order
            .iter()
            .filter(|&&i| inside[i])
            .map(|&i| self.steps[i].id.clone())
            .collect()
    }

    /// The hash of what `step` reads: the run's `context` (the task's prompt
    /// and settings), the pipeline's name, the step's definition and, in
    /// `needs` order, each need's id and artifact hash.
    pub fn input_hash(
        &self,
        context: &[u8],
        step: &StepId,
        artifacts: &BTreeMap<StepId, ContentHash>,
    ) -> Option<ContentHash> {
        let def = self.step(step)?;
        let mut hash = Sha256::new();
        let mut field = |bytes: &[u8]| {
            hash.update((bytes.len() as u64).to_le_bytes());
            hash.update(bytes);
        };
        field(context);
        field(self.name.as_bytes());
        field(def.id.0.as_bytes());
        match &def.action {
            Action::Model { prompt, answer } => {
                field(b"model");
                field(prompt.as_bytes());
                // Absent from the hash when unset, so steps written before
                // answers were checked keep their hashes.
                if let Some(answer) = answer {
                    field(b"answer");
                    field(answer.as_bytes());
                }
            }
            Action::Tool { server, tool, args } => {
                field(b"tool");
                field(server.as_bytes());
                field(tool.as_bytes());
                field(args.as_bytes());
            }
            Action::Render { what } => {
                field(b"render");
                field(what.as_bytes());
            }
        }
        for need in &def.needs {
            field(need.0.as_bytes());
            field(&artifacts.get(need)?.0);
        }
        Some(ContentHash(hash.finalize().into()))
    }
}

/// Kahn's algorithm with ties in definition order; on a cycle, the steps
/// that never became ready.
fn topological_order(
    needs: &[Vec<usize>],
    dependents: &[Vec<usize>],
) -> Result<Vec<usize>, Vec<usize>> {
    let mut waiting: Vec<usize> = needs.iter().map(Vec::len).collect();
    let mut ready: BTreeSet<usize> = (0..needs.len()).filter(|&i| waiting[i] == 0).collect();
    let mut order = Vec::with_capacity(needs.len());
    while let Some(at) = ready.pop_first() {
        order.push(at);
        for &next in &dependents[at] {
            waiting[next] -= 1;
            if waiting[next] == 0 {
                ready.insert(next);
            }
        }
    }
    if order.len() == needs.len() {
        Ok(order)
    } else {
        Err((0..needs.len()).filter(|&i| waiting[i] > 0).collect())
    }
}

/// One cycle among `stuck` (steps Kahn could not order), as indexes with
/// the first repeated at the end. Every stuck step has a stuck need, so
/// following needs from any of them must come back around.
pub(crate) fn find_cycle(needs: &[Vec<usize>], stuck: &[usize]) -> Vec<usize> {
    let stuck_set: BTreeSet<usize> = stuck.iter().copied().collect();
    let mut path = Vec::new();
    let mut seen = BTreeMap::new();
    let mut at = stuck[0];
    loop {
        if let Some(&position) = seen.get(&at) {
            let mut cycle: Vec<usize> = path[position..].to_vec();
            cycle.push(at);
            return cycle;
        }
        seen.insert(at, path.len());
        path.push(at);
        match needs[at].iter().find(|n| stuck_set.contains(n)) {
            Some(&next) => at = next,
            None => return vec![at, at],
        }
    }
}

/// A step that succeeded: on which inputs, with which artifact.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Success {
    /// The input hash it ran on.
    pub input: ContentHash,
    /// The artifact it produced (or the one a person put in its place).
    pub artifact: ContentHash,
}

/// What to do with a step whose needs are all settled.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Decision {
    /// It succeeded before on exactly these inputs: keep its artifact.
    Fresh(StepId),
    /// Run it; record this input hash with its result.
    Run(StepId, ContentHash),
}

/// Which steps of a target's closure to settle next, from what is recorded.
#[derive(Debug)]
pub struct Schedule<'a> {
    pipeline: &'a Pipeline,
    context: &'a [u8],
    closure: Vec<StepId>,
}

impl<'a> Schedule<'a> {
    /// The schedule of a run toward `target` with the run's `context`.
    pub fn new(pipeline: &'a Pipeline, context: &'a [u8], target: &StepId) -> Option<Schedule<'a>> {
        Some(Schedule {
            pipeline,
            context,
            closure: pipeline.closure(target)?,
        })
    }

    /// The steps this run settles, in topological order.
    pub fn steps(&self) -> &[StepId] {
        &self.closure
    }

    /// Decisions for every unsettled step whose needs are settled.
    ///
    /// `settled` holds the artifact of each step settled in this run (fresh,
    /// or succeeded); `recorded` the latest success of each step in any
    /// earlier run of the task; `running` the steps started and not ended.
    /// A step is fresh when its recorded success ran on the input hash it
    /// would read now.
    pub fn next(
        &self,
        settled: &BTreeMap<StepId, ContentHash>,
        recorded: &BTreeMap<StepId, Success>,
        running: &BTreeSet<StepId>,
    ) -> Vec<Decision> {
        self.closure
            .iter()
            .filter(|id| !settled.contains_key(*id) && !running.contains(*id))
            .filter_map(|id| {
                let input = self.pipeline.input_hash(self.context, id, settled)?;
                Some(match recorded.get(id) {
                    Some(success) if success.input == input => Decision::Fresh(id.clone()),
                    _ => Decision::Run(id.clone(), input),
                })
            })
            .collect()
    }

    /// Completed steps of the closure over its size, in percent.
    pub fn progress(&self, settled: &BTreeMap<StepId, ContentHash>) -> f64 {
        let done = self
            .closure
            .iter()
            .filter(|id| settled.contains_key(*id))
            .count();
        100.0 * done as f64 / self.closure.len() as f64
    }
}

#[cfg(test)]
mod tests;
