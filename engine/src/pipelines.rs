//! Which pipeline a task runs and how a `model` step's prompt is built: the
//! rules are core's (`planb_core::pipelines`), reading a user's file is the
//! data root's (`planb_projections::pipelines`); both are named here for the
//! engine's callers.

pub use planb_core::pipelines::*;
pub use planb_core::progress::{context, run_target};
pub use planb_projections::pipelines::{resolve, user_pipeline_path};
