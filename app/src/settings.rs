//! The `PLANB_*` settings a run reads from the environment, each checked
//! before anything is recorded; an error names the variable.

use std::time::Duration;

use planb_engine::backend::Backend;
use planb_engine::worker::Options;

/// A `PLANB_*` setting of the environment that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{variable}: {problem}")]
pub struct SettingError {
    /// The variable.
    pub variable: &'static str,
    /// What is wrong with its value.
    pub problem: String,
}

/// A duration in seconds from the environment: more than 0, at most a year.
pub fn env_seconds(name: &'static str) -> Result<Option<Duration>, SettingError> {
    let Ok(text) = std::env::var(name) else {
        return Ok(None);
    };
    let seconds = text.trim().parse::<f64>().ok();
    match seconds.and_then(|s| {
        (s > 0.0 && s <= 365.0 * 86_400.0)
            .then(|| Duration::try_from_secs_f64(s).ok())
            .flatten()
    }) {
        Some(duration) => Ok(Some(duration)),
        None => Err(SettingError {
            variable: name,
            problem: format!(
                "must be a number of seconds above 0 and at most a year (got {text:?})"
            ),
        }),
    }
}

/// A run's options on `backend`, with the limits the environment sets
/// (`PLANB_STEP_TIMEOUT_SEC`, `PLANB_INACTIVITY_SEC`, `PLANB_CONCURRENCY`).
pub fn worker_options(backend: Backend) -> Result<Options, SettingError> {
    let mut options = Options::new(backend);
    options.report = Some(planb_ui::pages::report::render);
    let limits = run_limits()?;
    if let Some(d) = limits.step_timeout {
        options.step_timeout = d;
    }
    if let Some(d) = limits.inactivity {
        options.inactivity = d;
    }
    if let Some(n) = limits.concurrency {
        options.concurrency = n;
    }
    Ok(options)
}

/// The limits of a task's run the environment sets, when it sets them.
#[derive(Debug)]
pub struct RunLimits {
    /// `PLANB_STEP_TIMEOUT_SEC`.
    pub step_timeout: Option<Duration>,
    /// `PLANB_INACTIVITY_SEC`.
    pub inactivity: Option<Duration>,
    /// `PLANB_CONCURRENCY`.
    pub concurrency: Option<usize>,
}

/// Reads `PLANB_STEP_TIMEOUT_SEC`, `PLANB_INACTIVITY_SEC` and
/// `PLANB_CONCURRENCY`; the error names the variable that is wrong.
pub fn run_limits() -> Result<RunLimits, SettingError> {
    let concurrency = match std::env::var("PLANB_CONCURRENCY") {
        Err(_) => None,
        Ok(text) => Some(
            text.trim()
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=64).contains(n))
                .ok_or_else(|| SettingError {
                    variable: "PLANB_CONCURRENCY",
                    problem: format!("must be a whole number from 1 to 64 (got {text:?})"),
                })?,
        ),
    };
    Ok(RunLimits {
        step_timeout: env_seconds("PLANB_STEP_TIMEOUT_SEC")?,
        inactivity: env_seconds("PLANB_INACTIVITY_SEC")?,
        concurrency,
    })
}
