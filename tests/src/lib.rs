//! planb-tests: the end-to-end, crash and multi-process tests in `tests/`,
//! the `planb-test-appender` helper binary they drive, and the support other
//! packages' end-to-end tests share.
//!
//! The shared support is test code, so it panics with a message instead of
//! returning errors: a failure in it is a failed test. [`process`] runs a
//! child on a free loopback port and kills its whole process group on drop;
//! [`browser`] drives Debian's headless Chromium through chromedriver with
//! fantoccini; [`postgres`] starts a private PostgreSQL server; [`model`]
//! is a scripted OpenAI-compatible model server; [`plans`] writes
//! execution-plan steps and reads the calls downstream servers noted;
//! [`net`] holds raw loopback connections; [`fixtures`] and [`logs`] are
//! the state and the log tests start from and read back.
//! Nothing here sleeps for a fixed time to let something settle: every
//! wait polls a condition and fails with a message after [`WAIT`].

pub mod browser;
pub mod fixtures;
pub mod logs;
pub mod model;
pub mod net;
pub mod plans;
pub mod postgres;
pub mod process;

use std::time::Duration;

/// Longest wait for any condition: a process to listen, a page to change.
pub const WAIT: Duration = Duration::from_secs(20);
/// How often a wait checks its condition again.
const POLL: Duration = Duration::from_millis(50);
