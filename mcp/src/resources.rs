//! A task's outputs as MCP resources:
//! `planb://task/<id>/report` (the HTML report), `planb://task/<id>/zip`
//! (every artifact, the report and the run log) and
//! `planb://task/<id>/artifact/<name>` (one step's artifact, named as in
//! `tasks/<id>/`, e.g. `03-assumptions.md`, or by the step's id). Each
//! carries its mime type, size, SHA-256 and when it was made (in
//! `_meta.sha256` and `_meta.generated_at`). `planexe://task/…` names the
//! same resources, as the task interface writes them.
//!
//! The list pages through tasks newest first, [`PAGE`] resources at a time;
//! the cursor is the position of the next resource in that order. Reading
//! never writes: the zip is built in memory from the blobs.

use base64::Engine as _;
use planb_core::state::ContentHash;
use planb_core::{Task, TaskId};
use planb_engine::task_files;
use rmcp::ErrorData;
use rmcp::model::{
    ListResourcesResult, MetaObject, ReadResourceResult, Resource, ResourceContents,
    ResourceTemplate,
};
use serde_json::json;

use crate::server::PlanbServer;
use crate::tasks::pipeline_of;

/// Resources per page of `resources/list`.
pub(crate) const PAGE: usize = 100;
/// The scheme and authority every task resource starts with.
const PREFIX: &str = "planb://task/";
/// The same resources under the task interface's scheme.
const PLANEXE_PREFIX: &str = "planexe://task/";
/// The largest resource returned whole, the task interface's bound (a zip
/// of many large artifacts can exceed it; `task_download` writes it to a
/// file instead).
const READ_BYTES_MAX: usize = 10 << 20;

/// What a task resource URI names.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Report,
    Zip,
    Artifact(String),
}

/// Parses a task resource URI; the message names what is wrong with it.
fn parse(uri: &str) -> Result<(TaskId, Part), String> {
    let Some(rest) = uri
        .strip_prefix(PREFIX)
        .or_else(|| uri.strip_prefix(PLANEXE_PREFIX))
    else {
        return Err(format!(
            "uri: {uri:?} is not a planb task resource (planb://task/<task_id>/report, …/zip or …/artifact/<name>)"
        ));
    };
    let (id, part) = rest.split_once('/').unwrap_or((rest, ""));
    let task = TaskId::parse(id).map_err(|e| format!("uri: task id {id:?}: {e}"))?;
    let part = match part.split_once('/') {
        None if part == "report" => Part::Report,
        None if part == "zip" => Part::Zip,
        Some(("artifact", name)) if !name.is_empty() => Part::Artifact(name.to_owned()),
        _ => {
            return Err(format!(
                "uri: {part:?} after the task id is not report, zip or artifact/<name>"
            ));
        }
    };
    Ok((task, part))
}

fn meta_sha256(hash: &ContentHash) -> MetaObject {
    let mut meta = serde_json::Map::new();
    meta.insert("sha256".into(), json!(hash.to_hex()));
    MetaObject(meta)
}

/// A listed resource's `_meta`: its SHA-256, when there is one, and when
/// it was made.
fn meta_listed(hash: Option<&ContentHash>, at: planb_core::Timestamp) -> MetaObject {
    let mut meta = hash.map_or_else(serde_json::Map::new, |hash| meta_sha256(hash).0);
    meta.insert("generated_at".into(), json!(at.to_iso8601()));
    MetaObject(meta)
}

/// A step's artifact as listed: its task and pipeline, the step, the
/// artifact, its size and when it was made.
struct Made {
    task: TaskId,
    pipeline: String,
    step: String,
    hash: ContentHash,
    size: u64,
    at: planb_core::Timestamp,
}

/// One listed resource before its artifact's name is known.
enum Entry {
    /// The report: the target step's artifact.
    Report(Made),
    /// Task, when its newest artifact was made.
    Zip(TaskId, planb_core::Timestamp),
    /// One step's artifact.
    Artifact(Made),
}

/// When the newest artifact of `task` was made (its creation, before any).
fn newest(task: &Task) -> planb_core::Timestamp {
    task.successes
        .values()
        .map(|s| s.at)
        .max()
        .unwrap_or(task.created_at)
}

/// Every resource of the tasks, newest task first: report, zip, then the
/// artifacts in step-name order. Lazy: a page takes only what it shows.
fn entries<'s>(tasks: Vec<&'s Task>) -> impl Iterator<Item = Entry> + 's {
    tasks
        .into_iter()
        .filter(|task| !task.successes.is_empty())
        .flat_map(|task| {
            // Kept only if the target renders a report (`describe` checks).
            let made = |step: &String, success: &planb_core::state::tasks::StepSuccess| Made {
                task: task.id,
                pipeline: task.pipeline.clone(),
                step: step.clone(),
                hash: ContentHash(success.artifact),
                size: success.bytes,
                at: success.at,
            };
            let report = task
                .successes
                .get(&task.target)
                .map(|success| Entry::Report(made(&task.target, success)));
            let artifacts = task
                .successes
                .iter()
                .map(move |(step, success)| Entry::Artifact(made(step, success)));
            report
                .into_iter()
                .chain(std::iter::once(Entry::Zip(task.id, newest(task))))
                .chain(artifacts)
        })
}

fn not_found(message: String) -> ErrorData {
    ErrorData::resource_not_found(message, None)
}

fn contents(
    uri: &str,
    mime: &str,
    bytes: Vec<u8>,
    hash: &ContentHash,
    at: planb_core::Timestamp,
) -> ResourceContents {
    let meta = Some(meta_listed(Some(hash), at));
    let bytes = if mime == "application/zip" {
        bytes
    } else {
        match String::from_utf8(bytes) {
            Ok(text) => {
                return ResourceContents::TextResourceContents {
                    uri: uri.to_owned(),
                    mime_type: Some(mime.to_owned()),
                    text,
                    meta,
                };
            }
            Err(error) => error.into_bytes(),
        }
    };
    ResourceContents::BlobResourceContents {
        uri: uri.to_owned(),
        mime_type: Some(mime.to_owned()),
        blob: base64::engine::general_purpose::STANDARD.encode(bytes),
        meta,
    }
}

impl PlanbServer {
    /// One page of `resources/list`.
    pub(crate) async fn list_task_resources(
        &self,
        cursor: Option<String>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let from = match cursor.as_deref() {
            None => 0,
            Some(text) => text.parse::<usize>().map_err(|_| {
                ErrorData::invalid_params(
                    format!("cursor: {text:?} is not a cursor this server returned"),
                    None,
                )
            })?,
        };
        let page = self
            .read_state(move |s| {
                let mut tasks: Vec<&Task> = s.pipeline_tasks().collect();
                tasks.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id)));
                // One more than a page tells whether another follows.
                entries(tasks)
                    .skip(from)
                    .take(PAGE + 1)
                    .collect::<Vec<Entry>>()
            })
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let more = page.len() > PAGE;
        let page: Vec<Entry> = page.into_iter().take(PAGE).collect();
        let root = self.data_root();
        let resources = planb_app::store::off_thread(move || {
            page.into_iter()
                .filter_map(|entry| describe(&root, entry))
                .collect::<Vec<Resource>>()
        })
        .await
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let mut result = ListResourcesResult::with_all_items(resources);
        if more {
            result.next_cursor = Some(from.saturating_add(PAGE).to_string());
        }
        Ok(result)
    }

    /// `resources/read` of a task resource.
    pub(crate) async fn read_task_resource(
        &self,
        uri: String,
    ) -> Result<ReadResourceResult, ErrorData> {
        let (id, part) = parse(&uri).map_err(|m| ErrorData::invalid_params(m, None))?;
        let task = self
            .read_state(move |s| s.pipeline_task(&id).cloned())
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?
            .ok_or_else(|| not_found(format!("uri: no task {id} (task_list shows the tasks)")))?;
        let root = self.data_root();
        let read = planb_app::store::off_thread(move || read(&root, &task, part, &uri))
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        read.map(|contents| ReadResourceResult::new(vec![contents]))
    }
}

/// A listed resource with its name and mime type; `None` for a target
/// that renders no report, or an artifact whose blob cannot be read (logged).
fn describe(root: &planb_projections::DataRoot, entry: Entry) -> Option<Resource> {
    Some(match entry {
        Entry::Report(Made {
            task,
            pipeline,
            step: target,
            hash,
            size,
            at,
        }) => {
            let pipeline = pipeline_of(root, &pipeline).ok()?;
            let step = pipeline.step(&planb_core::dag::StepId::parse(&target).ok()?)?;
            if !matches!(step.action, planb_core::dag::Action::Render { .. }) {
                return None;
            }
            Resource::new(format!("{PREFIX}{task}/report"), format!("{task}-report"))
                .with_title("Report")
                .with_description(format!("The HTML report of task {task}."))
                .with_mime_type("text/html")
                .with_size(size)
                .with_meta(meta_listed(Some(&hash), at))
        }
        Entry::Zip(task, at) => Resource::new(format!("{PREFIX}{task}/zip"), format!("{task}-zip"))
            .with_title("Archive")
            .with_description(format!(
                "Every artifact of task {task}, its report and its run log."
            ))
            .with_mime_type("application/zip")
            .with_meta(meta_listed(None, at)),
        Entry::Artifact(Made {
            task,
            pipeline,
            step,
            hash,
            size,
            at,
        }) => {
            let pipeline = pipeline_of(root, &pipeline).ok()?;
            let found = root
                .blobs()
                .get(&hash.0)
                .inspect_err(|e| tracing::warn!("task {task}: artifact of {step}: {e}"))
                .ok()?;
            let id = planb_core::dag::StepId::parse(&step).ok()?;
            let name = task_files::artifact_name(&pipeline, &id, &found)?;
            Resource::new(
                format!("{PREFIX}{task}/artifact/{name}"),
                format!("{task}-{name}"),
            )
            .with_title(step.clone())
            .with_mime_type(task_files::content_type(&name))
            .with_size(size)
            .with_meta(meta_listed(Some(&hash), at))
        }
    })
}

fn too_large(uri: &str, size: usize) -> ErrorData {
    ErrorData::invalid_params(
        format!(
            "uri: {uri} is {size} bytes, over the {READ_BYTES_MAX}-byte limit of a resource read; use task_download with save_path"
        ),
        None,
    )
}

/// Reads one task resource from the blobs (the zip built in memory).
fn read(
    root: &planb_projections::DataRoot,
    task: &Task,
    part: Part,
    uri: &str,
) -> Result<ResourceContents, ErrorData> {
    let pipeline = pipeline_of(root, &task.pipeline)
        .map_err(|problem| ErrorData::internal_error(problem.message, None))?;
    let id = task.id;
    // When what is read was made: its step's artifact, or the newest one.
    let newest = newest(task);
    let mut at = newest;
    let (mime, bytes) = match part {
        Part::Report => {
            let bytes = task_files::report(root, &pipeline, task).ok_or_else(|| {
                not_found(format!(
                    "uri: task {id} has no report yet (it is written when the run reaches a report target)"
                ))
            })?;
            at = task.successes.get(&task.target).map_or(newest, |s| s.at);
            ("text/html", bytes)
        }
        Part::Zip => {
            if task.successes.is_empty() {
                return Err(not_found(format!("uri: task {id} has no artifacts yet")));
            }
            let bytes = task_files::zip(root, &pipeline, task)
                .map_err(|e| ErrorData::internal_error(format!("task {id}: zip: {e}"), None))?;
            ("application/zip", bytes)
        }
        Part::Artifact(name) => {
            let step = task_files::step_of_name(&pipeline, &name).ok_or_else(|| {
                ErrorData::invalid_params(
                    format!(
                        "uri: {name:?} names no artifact of this task (INVALID_ARTIFACT_URI: use a name from resources/list, like 01-intake.md, or a step id; no folders)"
                    ),
                    Some(json!({"code": "INVALID_ARTIFACT_URI"})),
                )
            })?;
            let success = task.successes.get(step.as_str()).ok_or_else(|| {
                not_found(format!("uri: step {step} of task {id} has no artifact yet"))
            })?;
            if success.bytes > READ_BYTES_MAX as u64 {
                return Err(too_large(uri, success.bytes as usize));
            }
            at = success.at;
            let bytes = root.blobs().get(&success.artifact).map_err(|e| {
                ErrorData::internal_error(format!("task {id}: artifact of {step}: {e}"), None)
            })?;
            let name = task_files::artifact_name(&pipeline, &step, &bytes)
                .unwrap_or_else(|| step.as_str().to_owned());
            (task_files::content_type(&name), bytes)
        }
    };
    if bytes.len() > READ_BYTES_MAX {
        return Err(too_large(uri, bytes.len()));
    }
    let hash = ContentHash::of_bytes(&bytes);
    Ok(contents(uri, mime, bytes, &hash, at))
}

impl PlanbServer {
    /// The resource templates: one per kind of task resource.
    pub(crate) fn resource_templates() -> Vec<ResourceTemplate> {
        vec![
            ResourceTemplate::new("planb://task/{task_id}/report", "task-report")
                .with_title("Task report")
                .with_description("A completed task's self-contained HTML report.")
                .with_mime_type("text/html"),
            ResourceTemplate::new("planb://task/{task_id}/zip", "task-zip")
                .with_title("Task archive")
                .with_description("Every artifact of a task, its report and its run log, as a zip.")
                .with_mime_type("application/zip"),
            ResourceTemplate::new("planb://task/{task_id}/artifact/{name}", "task-artifact")
                .with_title("Task artifact")
                .with_description(
                    "One step's artifact, named as in the task's folder (e.g. 03-assumptions.md) or by the step's id.",
                ),
        ]
    }
}
