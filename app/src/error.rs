//! The error codes every front door answers with, in one enum: the strings
//! the tools return (`TASK_NOT_FOUND`, …) and the exit status a detached
//! worker tells its starter why it could not run with.

use planb_core::{Rejection, TaskErrorCode};
use planb_projections::StoreError;

/// What went wrong, as the tools name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorCode {
    /// No task (or plan) of that id.
    TaskNotFound,
    /// The task has a run already, or one began after the caller looked.
    RunAlreadyActive,
    /// No model is configured (or its setting cannot be read).
    ModelNotConfigured,
    /// The model failed in a way no retry helps.
    ModelError,
    /// A `PLANB_*` setting that cannot be used.
    InvalidConfiguration,
    /// A malformed argument.
    InvalidArgument,
    /// Anything else: a store that failed, a process that could not start.
    InternalError,
    /// No run of that id in the task.
    RunNotFound,
    /// The run is not active (stopped, ended) where one must be.
    RunNotActive,
    /// The target (or pipeline) cannot be run.
    InvalidTarget,
    /// The artifact named is none of the task's.
    InvalidArtifactUri,
    /// The request conflicts with what is recorded (an existing file, a
    /// state that refuses it).
    Conflict,
    /// A running task's files cannot be edited.
    RunningReadonly,
    /// A path the caller may not write.
    PermissionDenied,
}

/// Every code, in the order of their exit statuses (a new code goes last:
/// the statuses of the others stay).
const ALL: [ErrorCode; 14] = [
    ErrorCode::TaskNotFound,
    ErrorCode::RunAlreadyActive,
    ErrorCode::ModelNotConfigured,
    ErrorCode::ModelError,
    ErrorCode::InvalidConfiguration,
    ErrorCode::InvalidArgument,
    ErrorCode::InternalError,
    ErrorCode::RunNotFound,
    ErrorCode::RunNotActive,
    ErrorCode::InvalidTarget,
    ErrorCode::InvalidArtifactUri,
    ErrorCode::Conflict,
    ErrorCode::RunningReadonly,
    ErrorCode::PermissionDenied,
];

/// The first exit status a code is told by (below it: the usual 0, 1, 2).
const FIRST_EXIT_STATUS: u8 = 70;

impl ErrorCode {
    /// `TASK_NOT_FOUND`, … as the tools return it.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::TaskNotFound => "TASK_NOT_FOUND",
            ErrorCode::RunAlreadyActive => "RUN_ALREADY_ACTIVE",
            ErrorCode::ModelNotConfigured => "MODEL_NOT_CONFIGURED",
            ErrorCode::ModelError => "MODEL_ERROR",
            ErrorCode::InvalidConfiguration => "INVALID_CONFIGURATION",
            ErrorCode::InvalidArgument => "INVALID_ARGUMENT",
            ErrorCode::InternalError => "INTERNAL_ERROR",
            ErrorCode::RunNotFound => "RUN_NOT_FOUND",
            ErrorCode::RunNotActive => "RUN_NOT_ACTIVE",
            ErrorCode::InvalidTarget => "INVALID_TARGET",
            ErrorCode::InvalidArtifactUri => "INVALID_ARTIFACT_URI",
            ErrorCode::Conflict => "CONFLICT",
            ErrorCode::RunningReadonly => "RUNNING_READONLY",
            ErrorCode::PermissionDenied => "PERMISSION_DENIED",
        }
    }

    /// The code of a run that could not go on.
    pub fn of_run(error: &planb_engine::host::WorkerError) -> ErrorCode {
        use planb_engine::host::WorkerError;
        match error {
            WorkerError::Busy(_) | WorkerError::StartedMeanwhile { .. } => {
                ErrorCode::RunAlreadyActive
            }
            WorkerError::NoTask(_) => ErrorCode::TaskNotFound,
            _ => ErrorCode::InternalError,
        }
    }

    /// The exit status a worker that could not run for this reason exits
    /// with.
    pub fn exit_status(self) -> u8 {
        let at = ALL.iter().position(|c| *c == self).unwrap_or(ALL.len() - 1);
        FIRST_EXIT_STATUS + u8::try_from(at).unwrap_or(0)
    }

    /// The code a worker's exit status tells, if it tells one.
    pub fn from_exit_status(status: i32) -> Option<ErrorCode> {
        let at = usize::try_from(status.checked_sub(i32::from(FIRST_EXIT_STATUS))?).ok()?;
        ALL.get(at).copied()
    }
}

/// A refusal or failure as the front doors answer it: the code, what
/// happened, and details a caller can act on (plain JSON).
#[derive(Debug, thiserror::Error)]
#[error("{code}: {message}")]
pub struct Error {
    /// What kind.
    pub code: ErrorCode,
    /// What happened, naming the field or setting.
    pub message: String,
    /// Machine-readable particulars (`{}` when none).
    pub details: serde_json::Value,
}

impl Error {
    /// An error without details.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Error {
        Error::with(code, message, serde_json::json!({}))
    }

    /// `INTERNAL_ERROR`: a failure of the store, a file or a server, said
    /// whole.
    pub fn internal(failure: impl std::fmt::Display) -> Error {
        Error::new(ErrorCode::InternalError, failure.to_string())
    }

    /// `INVALID_ARGUMENT`: what was given cannot be used, and why.
    pub fn invalid(problem: impl std::fmt::Display) -> Error {
        Error::new(ErrorCode::InvalidArgument, problem.to_string())
    }

    /// An error with `details`.
    pub fn with(code: ErrorCode, message: impl Into<String>, details: serde_json::Value) -> Error {
        Error {
            code,
            message: message.into(),
            details,
        }
    }
}

impl From<TaskErrorCode> for ErrorCode {
    fn from(code: TaskErrorCode) -> ErrorCode {
        match code {
            TaskErrorCode::TaskNotFound => ErrorCode::TaskNotFound,
            TaskErrorCode::RunNotFound => ErrorCode::RunNotFound,
            TaskErrorCode::RunAlreadyActive => ErrorCode::RunAlreadyActive,
            TaskErrorCode::RunNotActive => ErrorCode::RunNotActive,
            TaskErrorCode::InvalidTarget => ErrorCode::InvalidTarget,
            TaskErrorCode::InvalidArgument => ErrorCode::InvalidArgument,
            TaskErrorCode::InvalidArtifactUri => ErrorCode::InvalidArtifactUri,
            TaskErrorCode::Conflict => ErrorCode::Conflict,
            TaskErrorCode::RunningReadonly => ErrorCode::RunningReadonly,
        }
    }
}

impl From<Rejection> for Error {
    fn from(rejection: Rejection) -> Error {
        match rejection {
            Rejection::Task { code, message } => Error::new(code.into(), message),
            other => Error::new(ErrorCode::Conflict, other.to_string()),
        }
    }
}

impl From<StoreError> for Error {
    /// A refusal keeps its code; any other failure is logged and answered
    /// `INTERNAL_ERROR`.
    fn from(failure: StoreError) -> Error {
        match failure {
            StoreError::Rejected(rejection) => rejection.into(),
            // A plan file that cannot be used as it is: the caller's to fix.
            StoreError::PlanFile(problem) => Error::invalid(problem),
            other => {
                tracing::error!("store failure: {other}");
                Error::new(
                    ErrorCode::InternalError,
                    format!("planb could not record this: {other}"),
                )
            }
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_through_its_exit_status_and_no_other_does() {
        for code in ALL {
            assert_eq!(
                ErrorCode::from_exit_status(code.exit_status().into()),
                Some(code)
            );
        }
        for status in [0, 1, 2, 69, 84, 255, -1] {
            assert_eq!(ErrorCode::from_exit_status(status), None, "{status}");
        }
    }
}
