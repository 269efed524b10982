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
//! the cursor is the position of the next resource in that order. What a
//! task's outputs are and how they are read is planb-app's
//! (`tasks::outputs`); here they become resources and their errors.

use base64::Engine as _;
use planb_app::tasks::outputs::{Listed, OUTPUT_BYTES_MAX, Output, Read, ReadError};
use planb_core::TaskId;
use planb_core::state::ContentHash;
use rmcp::ErrorData;
use rmcp::model::{
    ListResourcesResult, MetaObject, ReadResourceResult, Resource, ResourceContents,
    ResourceTemplate,
};
use serde_json::json;

use crate::args::ArgErrors;
use crate::server::PlanbServer;

/// Resources per page of `resources/list`.
pub(crate) const PAGE: usize = 100;
/// The scheme and authority every task resource starts with.
const PREFIX: &str = "planb://task/";
/// The same resources under the task interface's scheme.
const PLANEXE_PREFIX: &str = "planexe://task/";

/// Parses a task resource URI; the message names what is wrong with it.
fn parse(uri: &str) -> Result<(TaskId, Output), ArgErrors> {
    let Some(rest) = uri
        .strip_prefix(PREFIX)
        .or_else(|| uri.strip_prefix(PLANEXE_PREFIX))
    else {
        return Err(ArgErrors::one(format!(
            "uri: {uri:?} is not a planb task resource (planb://task/<task_id>/report, …/zip or …/artifact/<name>)"
        )));
    };
    let (id, part) = rest.split_once('/').unwrap_or((rest, ""));
    let task =
        TaskId::parse(id).map_err(|e| ArgErrors::one(format!("uri: task id {id:?}: {e}")))?;
    let part = match part.split_once('/') {
        None if part == "report" => Output::Report,
        None if part == "zip" => Output::Zip,
        Some(("artifact", name)) if !name.is_empty() => Output::Artifact(name.to_owned()),
        _ => {
            return Err(ArgErrors::one(format!(
                "uri: {part:?} after the task id is not report, zip or artifact/<name>"
            )));
        }
    };
    Ok((task, part))
}

/// A resource's `_meta`: its SHA-256, when there is one, and when it was
/// made.
fn meta(hash: Option<&ContentHash>, at: planb_core::Timestamp) -> MetaObject {
    let mut meta = serde_json::Map::new();
    if let Some(hash) = hash {
        meta.insert("sha256".into(), json!(hash.to_hex()));
    }
    meta.insert("generated_at".into(), json!(at.to_iso8601()));
    MetaObject(meta)
}

fn not_found(message: String) -> ErrorData {
    ErrorData::resource_not_found(message, None)
}

fn internal(message: impl ToString) -> ErrorData {
    ErrorData::internal_error(message.to_string(), None)
}

/// A read output as resource contents: text when it is (a zip never is).
fn contents(uri: &str, read: Read) -> ResourceContents {
    let meta = Some(meta(Some(&read.sha256), read.at));
    let mime = read.content_type;
    let bytes = if mime == "application/zip" {
        read.bytes
    } else {
        match String::from_utf8(read.bytes) {
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

/// Why `uri` could not be read, as the client is told.
fn read_error(uri: &str, error: ReadError) -> ErrorData {
    match error {
        ReadError::NoTask(id) => {
            not_found(format!("uri: no task {id} (task_list shows the tasks)"))
        }
        ReadError::NoReport(id) => not_found(format!(
            "uri: task {id} has no report yet (it is written when the run reaches a report target)"
        )),
        ReadError::NoArtifacts(id) => not_found(format!("uri: task {id} has no artifacts yet")),
        ReadError::UnknownName(name) => ErrorData::invalid_params(
            format!(
                "uri: {name:?} names no artifact of this task (INVALID_ARTIFACT_URI: use a name from resources/list, like 01-intake.md, or a step id; no folders)"
            ),
            Some(json!({"code": "INVALID_ARTIFACT_URI"})),
        ),
        ReadError::NotYet { task, step } => not_found(format!(
            "uri: step {step} of task {task} has no artifact yet"
        )),
        ReadError::TooLarge(size) => ErrorData::invalid_params(
            format!(
                "uri: {uri} is {size} bytes, over the {OUTPUT_BYTES_MAX}-byte limit of a resource read; use task_download with save_path"
            ),
            None,
        ),
        ReadError::Internal(message) => internal(message),
    }
}

/// A listed output as a resource.
fn resource(listed: Listed) -> Resource {
    let task = listed.task;
    let meta = meta(listed.sha256.as_ref(), listed.at);
    let resource = match listed.output {
        Output::Report => Resource::new(format!("{PREFIX}{task}/report"), format!("{task}-report"))
            .with_title("Report")
            .with_description(format!("The HTML report of task {task}."))
            .with_mime_type("text/html"),
        Output::Zip => Resource::new(format!("{PREFIX}{task}/zip"), format!("{task}-zip"))
            .with_title("Archive")
            .with_description(format!(
                "Every artifact of task {task}, its report and its run log."
            ))
            .with_mime_type("application/zip"),
        Output::Artifact(name) => Resource::new(
            format!("{PREFIX}{task}/artifact/{name}"),
            format!("{task}-{name}"),
        )
        .with_title(listed.step.unwrap_or_default())
        .with_mime_type(planb_app::tasks::content_type(&name)),
    };
    let resource = match listed.size {
        Some(size) => resource.with_size(size),
        None => resource,
    };
    resource.with_meta(meta)
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
        let tasks = self.app().tasks();
        let (page, more) = tasks
            .outputs(from, PAGE)
            .await
            .map_err(|e| internal(e.message))?;
        let resources = page.into_iter().map(resource).collect();
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
        let (id, output) =
            parse(&uri).map_err(|m| ErrorData::invalid_params(m.to_string(), None))?;
        let tasks = self.app().tasks();
        let read = tasks.read_output(id, output).await;
        let read = read.map_err(|error| read_error(&uri, error))?;
        Ok(ReadResourceResult::new(vec![contents(&uri, read)]))
    }
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
