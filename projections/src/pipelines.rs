//! Reading a user's pipeline from the data root:
//! `<data-root>/pipelines/<name>.json`, checked as the built-in one is.

use std::path::PathBuf;

use planb_core::dag::{Pipeline, parse_pipeline};
use planb_core::pipelines::{PROJECT_PLAN, check_runnable, project_plan};

use crate::DataRoot;

/// Where a user's pipeline `name` lives.
pub fn user_pipeline_path(root: &DataRoot, name: &str) -> PathBuf {
    root.root().join("pipelines").join(format!("{name}.json"))
}

/// The pipeline `name`: the built-in, or a user's file. Every problem is a
/// message naming the file and the JSON path.
pub fn resolve(root: &DataRoot, name: &str) -> Result<Pipeline, String> {
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
        return Err(format!(
            "pipeline: {name:?} is not a pipeline name (lowercase letters, digits, - and _, starting with a letter)"
        ));
    }
    let path = user_pipeline_path(root, name);
    let text = match crate::bounded::read(&path, planb_core::dag::PIPELINE_FILE_BYTES_MAX) {
        Ok(Err(crate::bounded::Over(bytes))) => {
            return Err(format!(
                "{}: {bytes} bytes, over the {}-byte limit",
                path.display(),
                planb_core::dag::PIPELINE_FILE_BYTES_MAX
            ));
        }
        Ok(Ok(bytes)) => {
            String::from_utf8(bytes).map_err(|_| format!("{}: not UTF-8 text", path.display()))?
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!(
                "pipeline: no pipeline {name:?} (the built-in one is {PROJECT_PLAN}; a user's lives at {})",
                path.display()
            ));
        }
        Err(error) => return Err(format!("{}: {error}", path.display())),
    };
    let pipeline = parse_pipeline(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    if pipeline.name() != name {
        return Err(format!(
            "{}: name: {:?} does not match the file's name {name:?}",
            path.display(),
            pipeline.name()
        ));
    }
    check_runnable(&pipeline).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(pipeline)
}
