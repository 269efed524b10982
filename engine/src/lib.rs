//! `planb-engine`: what runs the DAG engine's steps. Decisions
//! stay in `planb-core` (`dag`, `state::tasks`); effects are recorded through
//! `planb-projections`.
//!
//! - [`backend`]: where a `model` step's prompt goes (`command:`, `openai:`);
//! - [`pipelines`]: the built-in `project-plan` pipeline, users' pipeline
//!   files, and how a step's prompt is filled;
//! - [`host`]: the run lock, a run's start and appends, and the one bridge
//!   from async code to the store's blocking calls;
//! - `settle`: the settle loop both runners share, generic over a step kind;
//! - [`worker`]: runs one run of a task to its end, holding the run lock;
//! - [`zip`]: the run's zip (the report page is `planb-ui`'s, handed to
//!   the worker in its [`worker::Options`]);
//! - [`task_files`]: `tasks/<task>/` as files;
//! - [`web`]: the process's outgoing HTTP(S) client;
//! - [`runtime`]: the engine thread where a server process runs plans.
//!
//! **Architecture invariant**: nothing here decides what a run may do; every
//! change goes through `Store::execute`, so the core's rules refuse what
//! they refuse whoever asks.

pub mod backend;
pub mod host;
pub mod pipelines;
pub mod plans;
pub mod runtime;
mod settle;
pub mod task_files;
pub mod web;
pub mod worker;
pub mod zip;
