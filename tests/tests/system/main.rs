//! The cross-crate tests with real processes: the golden log, several
//! processes on one log, the run lock, the toolchain's version. One test
//! binary with a module per subject; the tidy test stays a binary of its
//! own, to be run by name.

mod golden_log;
mod log_processes;
mod run_lock;
mod rust_version;
