//! Execution plans on the DAG engine: downstream
//! servers ([`servers`]) and the run of a plan ([`run`]).
//!
//! A plan is a task whose steps are tool calls. A run records, through the
//! store, its start (with the call-time variables), each step's start (with
//! the call as made, in the blob store), its result (the whole result, in
//! the blob store) or failure, and its end; the log is the checkpoint, so a
//! resume calls no step that succeeded before on the same arguments and
//! restores every variable exactly.

pub mod binding;
pub mod framing;
pub mod generate;
pub mod revise;
pub mod run;
pub mod servers;

pub use run::{
    ForeignRun, GUARD_BLOCKED, Guards, PlanOutcome, PlanRunError, Progress, Revised,
    RevisionReport, RunOptions, RunRequest, StepReport, check_request, dry_run, load,
    record_foreign_run, run_plan,
};
pub use servers::{
    Downstream, DownstreamError, PlanTools, ServerSpec, Servers, ToolAnswer, ToolInfo, available,
};
