//! planb-projections' tests: the store over a real log, the session files,
//! the manifests and the state snapshot. One test binary with a module per
//! subject.

mod files;
mod manifests;
mod plan_file_race;
mod power_cut;
mod snapshot;
mod store;
