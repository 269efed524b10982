//! `planb-engine`: what runs the DAG engine's steps (DESIGN 6.6). Decisions
//! stay in `planb-core` (`dag`, `state::tasks`); effects are recorded through
//! `planb-projections`.
//!
//! So far: [`backend`], the model backends a `model` step asks. The
//! detached worker and the downstream MCP clients are still to come.
//!
//! **Architecture invariant**: nothing here appends to the log or decides
//! what a run may do; it performs effects and reports what happened.

pub mod backend;
