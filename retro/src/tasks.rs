//! What the task pages need beyond the timeline: which artifacts are out of
//! date, a step's prompt rebuilt from the pipeline and the inputs it read,
//! and every version of a step's artifact, read from the blob store.

use std::collections::{BTreeMap, BTreeSet};

use planb_core::dag::{Action, Pipeline, StepDef, StepId};
use planb_core::pipelines;
use planb_core::state::ContentHash;
use planb_core::{Cursor, EventBody, Task};
use planb_projections::{DataRoot, TaskAt, Timeline};
use planb_ui::pages::{ArtifactVersion, CallEnd, NotShown, PlanCall, PromptView};

/// Each step's artifact as `task` holds it: what a step starting then read.
fn artifacts(task: &Task) -> BTreeMap<StepId, ContentHash> {
    task.successes
        .iter()
        .filter_map(|(step, success)| {
            Some((StepId::parse(step).ok()?, ContentHash(success.artifact)))
        })
        .collect()
}

/// The steps with an artifact the next run does again (an upstream edit or
/// re-run changed what they read): the recorded successes the worker's
/// freshness rule (`planb_core::progress::settled`) does not settle.
pub fn out_of_date(pipeline: &Pipeline, task: &Task) -> BTreeSet<String> {
    // A run under way settles what it does; once runs have ended, what the
    // next one would do again is the question.
    let settled =
        planb_core::progress::settled(pipeline, task, &pipeline.in_order(), task.active_run());
    task.successes
        .keys()
        .filter(|step| {
            StepId::parse(step)
                .is_ok_and(|id| pipeline.step(&id).is_some() && !settled.contains_key(&id))
        })
        .cloned()
        .collect()
}

fn read_text(root: &DataRoot, hash: &[u8; 32]) -> Result<String, NotShown> {
    root.blobs()
        .reading_only()
        .get(hash)
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .map_err(|e| NotShown::Unreadable {
            what: "artifact",
            why: e.to_string(),
        })
}

/// `step`'s prompt at its latest start at or before the page's cursor:
/// the pipeline's template filled with the artifacts its needs had then,
/// checked against the input hash the start recorded. `None` if it had not
/// started.
pub fn prompt(
    timeline: &Timeline,
    root: &DataRoot,
    pipeline: &Pipeline,
    at: &TaskAt<'_>,
    step: &StepDef,
) -> Option<Result<PromptView, NotShown>> {
    let (cursor, input) = at.events.iter().rev().find_map(|e| match &e.event.body {
        EventBody::StepStarted {
            step: started,
            input,
            ..
        } if started == step.id.as_str() => Some((e.cursor, *input)),
        _ => None,
    })?;
    let Action::Model {
        prompt: template, ..
    } = &step.action
    else {
        return Some(Err(NotShown::NoModel));
    };
    let then = timeline.task_at(&at.task.id, cursor)?;
    let mut inputs = BTreeMap::new();
    for need in &step.needs {
        let Some(success) = then.task.successes.get(need.as_str()) else {
            return Some(Err(NotShown::NoArtifact(need.to_string())));
        };
        match read_text(root, &success.artifact) {
            Ok(text) => inputs.insert(need.clone(), text),
            Err(why) => {
                let (need, why) = (need.to_string(), Box::new(why));
                return Some(Err(NotShown::Input { need, why }));
            }
        };
    }
    let verified = pipeline
        .input_hash(
            &planb_core::progress::context(&then.task),
            &step.id,
            &artifacts(&then.task),
        )
        .is_some_and(|hash| hash.0 == input);
    let titles: BTreeMap<StepId, String> = pipeline
        .steps()
        .iter()
        .map(|s| (s.id.clone(), s.title.clone()))
        .collect();
    Some(Ok(PromptView {
        cursor,
        text: pipelines::fill(template, &then.task, step, &titles, &inputs),
        verified,
    }))
}

/// Every artifact `step` had up to the page's cursor, oldest first: each
/// success and each edit.
pub fn versions(root: &DataRoot, at: &TaskAt<'_>, step: &StepId) -> Vec<ArtifactVersion> {
    at.events
        .iter()
        .filter_map(|e| {
            let (artifact, by) = match &e.event.body {
                EventBody::StepSucceeded {
                    step: done,
                    artifact,
                    run,
                    duration_ms,
                    ..
                } if done == step.as_str() => {
                    let run: String = run.to_string().chars().take(8).collect();
                    (artifact, format!("run {run}, {duration_ms} ms"))
                }
                EventBody::ArtifactEdited {
                    step: edited,
                    artifact,
                    by,
                    ..
                } if edited == step.as_str() => (artifact, format!("edited: {by}")),
                _ => return None,
            };
            Some(ArtifactVersion {
                cursor: e.cursor,
                at: e.event.at,
                by,
                text: read_text(root, artifact),
            })
        })
        .collect()
}

/// Longest call or result shown on a page, in characters.
const SHOWN_CHARS_MAX: usize = 200_000;

/// A recorded JSON blob as indented text, cut at [`SHOWN_CHARS_MAX`].
fn pretty_blob(root: &DataRoot, hash: &[u8; 32], what: &'static str) -> Result<String, NotShown> {
    let bytes = root
        .blobs()
        .reading_only()
        .get(hash)
        .map_err(|e| NotShown::Unreadable {
            what,
            why: e.to_string(),
        })?;
    let text = match serde_json::from_slice::<serde_json::Value>(&bytes) {
        Ok(value) => serde_json::to_string_pretty(&value).unwrap_or_default(),
        Err(_) => String::from_utf8_lossy(&bytes).into_owned(),
    };
    if let Some((cut, _)) = text.char_indices().nth(SHOWN_CHARS_MAX) {
        let shown = &text[..cut];
        // A small blob has no file: it is in the log.
        let path = root.blobs().path(hash);
        let whole = if path.exists() {
            format!("the whole {what} is {}", path.display())
        } else {
            format!("the whole {what} is in the log")
        };
        Ok(format!(
            "{shown}\n… ({} bytes in all; {whole})",
            bytes.len()
        ))
    } else {
        Ok(text)
    }
}

/// Calls of one plan step a page shows: the latest, by the page's cursor.
pub const CALLS_SHOWN: usize = 20;

/// A call as the log records it, before its blobs are read.
struct Recorded<'e> {
    cursor: Cursor,
    at: planb_core::Timestamp,
    run: planb_core::RunId,
    call: Option<&'e [u8; 32]>,
    end: Option<RecordedEnd<'e>>,
}

enum RecordedEnd<'e> {
    Succeeded {
        cursor: Cursor,
        duration_ms: u64,
        artifact: &'e [u8; 32],
    },
    Failed {
        cursor: Cursor,
        class: &'e str,
        message: &'e str,
    },
}

/// The latest [`CALLS_SHOWN`] calls made for the plan step `index` up to
/// the page's cursor, oldest first, each with the arguments as sent and its
/// result or failure; and how many earlier calls there were. Only the
/// calls shown have their blobs read.
pub fn plan_calls(root: &DataRoot, at: &TaskAt<'_>, index: &str) -> (Vec<PlanCall>, usize) {
    let recorded = recorded_calls(at, index);
    let earlier = recorded.len().saturating_sub(CALLS_SHOWN);
    let calls = recorded
        .into_iter()
        .skip(earlier)
        .map(|one| one.read(root))
        .collect();
    (calls, earlier)
}

/// Every call made for the plan step `index` up to the page's cursor, oldest
/// first, each with its end when one is recorded.
fn recorded_calls<'e>(at: &'e TaskAt<'_>, index: &str) -> Vec<Recorded<'e>> {
    let mut recorded: Vec<Recorded<'_>> = Vec::new();
    for envelope in &at.events {
        match &envelope.event.body {
            EventBody::StepStarted {
                step, run, call, ..
            } if step == index => recorded.push(Recorded {
                cursor: envelope.cursor,
                at: envelope.event.at,
                run: *run,
                call: call.as_ref(),
                end: None,
            }),
            EventBody::StepSucceeded {
                step,
                run,
                artifact,
                duration_ms,
                ..
            } if step == index => {
                if let Some(last) = recorded
                    .last_mut()
                    .filter(|c| c.run == *run && c.end.is_none())
                {
                    last.end = Some(RecordedEnd::Succeeded {
                        cursor: envelope.cursor,
                        duration_ms: *duration_ms,
                        artifact,
                    });
                }
            }
            EventBody::StepFailed {
                step,
                run,
                class,
                message,
                ..
            } if step == index => {
                if let Some(last) = recorded
                    .last_mut()
                    .filter(|c| c.run == *run && c.end.is_none())
                {
                    last.end = Some(RecordedEnd::Failed {
                        cursor: envelope.cursor,
                        class,
                        message,
                    });
                }
            }
            _ => {}
        }
    }
    recorded
}

impl Recorded<'_> {
    /// The call as shown, its blobs read.
    fn read(self, root: &DataRoot) -> PlanCall {
        PlanCall {
            cursor: self.cursor,
            at: self.at,
            run: self.run,
            call: match self.call {
                Some(hash) => pretty_blob(root, hash, "call"),
                None => Err(NotShown::NotRecorded),
            },
            end: self.end.map(|end| match end {
                RecordedEnd::Succeeded {
                    cursor,
                    duration_ms,
                    artifact,
                } => CallEnd::Succeeded {
                    cursor,
                    duration_ms,
                    result: pretty_blob(root, artifact, "result"),
                },
                RecordedEnd::Failed {
                    cursor,
                    class,
                    message,
                } => CallEnd::Failed {
                    cursor,
                    class: class.to_owned(),
                    message: message.to_owned(),
                },
            }),
        }
    }
}
