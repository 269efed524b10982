//! Reading a user's pipeline from the data root:
//! `<data-root>/pipelines/<name>.json`, checked as the built-in one is.

use std::path::PathBuf;

use planb_core::dag::{PIPELINE_FILE_BYTES_MAX, Pipeline, PipelineFileError, parse_pipeline};
use planb_core::pipelines::{PROJECT_PLAN, UnknownRenderer, check_runnable, project_plan};

use crate::DataRoot;

/// Where a user's pipeline `name` lives.
pub fn user_pipeline_path(root: &DataRoot, name: &str) -> PathBuf {
    root.root().join("pipelines").join(format!("{name}.json"))
}

/// Why a pipeline cannot be used; each problem names the file (and, in
/// its JSON, the path) where there is one.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// The name cannot be a pipeline's.
    #[error(
        "pipeline: {0:?} is not a pipeline name (lowercase letters, digits, - and _, starting with a letter)"
    )]
    BadName(String),
    /// No file of that name.
    #[error(
        "pipeline: no pipeline {name:?} (the built-in one is {PROJECT_PLAN}; a user's lives at {})",
        path.display()
    )]
    Missing {
        /// The name asked for.
        name: String,
        /// Where its file would be.
        path: PathBuf,
    },
    /// The file is over the limit.
    #[error("{}: {bytes} bytes, over the {PIPELINE_FILE_BYTES_MAX}-byte limit", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        bytes: usize,
    },
    /// The file is not UTF-8.
    #[error("{}: not UTF-8 text", .0.display())]
    NotText(PathBuf),
    /// The file cannot be read.
    #[error("{}: {source}", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a pipeline.
    #[error("{}: {source}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Where in its JSON and what.
        source: PipelineFileError,
    },
    /// The file's name and the name inside it differ.
    #[error("{}: name: {inside:?} does not match the file's name {name:?}", path.display())]
    Misnamed {
        /// The file.
        path: PathBuf,
        /// The name inside it.
        inside: String,
        /// The name asked for.
        name: String,
    },
    /// A render step names a renderer planb does not have.
    #[error("{}: {source}", path.display())]
    NotRunnable {
        /// The file.
        path: PathBuf,
        /// Which step and renderer.
        source: UnknownRenderer,
    },
}

/// The pipeline `name`: the built-in, or a user's file.
pub fn resolve(root: &DataRoot, name: &str) -> Result<Pipeline, PipelineError> {
    if name == PROJECT_PLAN {
        return Ok(project_plan());
    }
    let valid = !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if !valid {
        return Err(PipelineError::BadName(name.to_owned()));
    }
    let path = user_pipeline_path(root, name);
    let text = match crate::bounded::read(&path, PIPELINE_FILE_BYTES_MAX) {
        Ok(Err(crate::bounded::Over(bytes))) => {
            return Err(PipelineError::TooLarge { path, bytes });
        }
        Ok(Ok(bytes)) => match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(_) => return Err(PipelineError::NotText(path)),
        },
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let name = name.to_owned();
            return Err(PipelineError::Missing { name, path });
        }
        Err(source) => return Err(PipelineError::Unreadable { path, source }),
    };
    let pipeline = match parse_pipeline(&text) {
        Ok(pipeline) => pipeline,
        Err(source) => return Err(PipelineError::Invalid { path, source }),
    };
    if pipeline.name() != name {
        let (inside, name) = (pipeline.name().to_owned(), name.to_owned());
        return Err(PipelineError::Misnamed { path, inside, name });
    }
    if let Err(source) = check_runnable(&pipeline) {
        return Err(PipelineError::NotRunnable { path, source });
    }
    Ok(pipeline)
}
