//! Creating a task: its pipeline and target checked, the task recorded
//! once per `client_request_id` however many processes are asked at once.

use planb_core::dag::{Pipeline, StepId};
use planb_core::{Command, Task, TaskId};
use planb_engine::pipelines;
use planb_projections::DataRoot;
use serde_json::json;

use super::{Tasks, pipeline_of};
use crate::error::{Error, ErrorCode};

/// A task to create, its arguments checked for shape by the front door.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateRequest {
    /// What to plan.
    pub prompt: String,
    /// `ping`, `fast` or `all`.
    pub speed: String,
    /// The step the run settles toward.
    pub target: String,
    /// The pipeline's name.
    pub pipeline: String,
    /// The model profile, if any.
    pub profile: Option<String>,
    /// Makes the creation idempotent: the same id, the same task.
    pub request_id: Option<String>,
}

/// The pipeline `name`, once `target` is one of its steps
/// (`INVALID_TARGET` naming the standard targets otherwise).
pub fn checked_pipeline(root: &DataRoot, name: &str, target: &str) -> Result<Pipeline, Error> {
    let pipeline = pipeline_of(root, name)?;
    let target_ok = StepId::parse(target)
        .ok()
        .is_some_and(|t| pipeline.step(&t).is_some());
    if target_ok {
        return Ok(pipeline);
    }
    let finals: Vec<&str> = pipeline
        .steps()
        .iter()
        .map(|s| s.id.as_str())
        .filter(|id| pipelines::STANDARD_TARGETS.contains(id))
        .collect();
    Err(Error::with(
        ErrorCode::InvalidTarget,
        format!(
            "target: {target:?} is not a step of pipeline {name} (targets: {})",
            finals.join(", ")
        ),
        json!({"targets": finals}),
    ))
}

impl Tasks {
    /// The task (not deleted) a `client_request_id` created, if one did.
    pub async fn by_request(&self, key: String) -> Result<Option<Task>, Error> {
        self.read(move |s| {
            s.task_by_request(&key)
                .filter(|t| t.deleted_at.is_none())
                .cloned()
        })
        .await
    }

    /// Records the task `request` describes (checked against `pipeline`)
    /// and returns its id: the one of the task another process recorded
    /// meanwhile with the same `client_request_id`, if so.
    pub async fn create(
        &self,
        request: CreateRequest,
        pipeline: &Pipeline,
    ) -> Result<TaskId, Error> {
        let id = TaskId::from_uuid(self.shared.env().event_id());
        let key = request.request_id.clone();
        let command = Command::CreateTask {
            task: id,
            pipeline: request.pipeline,
            pipeline_version: pipeline.version(),
            prompt: request.prompt,
            speed: request.speed,
            target: request.target,
            model_profile: request.profile,
            client_request_id: request.request_id,
            project_path: self.shared.project.clone(),
        };
        if self.execute(command).await? > 0 {
            return Ok(id);
        }
        let not_recorded = || Error::new(ErrorCode::InternalError, "the task was not recorded");
        let key = key.ok_or_else(not_recorded)?;
        self.read(move |s| s.task_by_request(&key).map(|t| t.id))
            .await
            .ok()
            .flatten()
            .ok_or_else(not_recorded)
    }
}
