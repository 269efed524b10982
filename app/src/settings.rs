//! The `PLANB_*` settings of the application layer, read in one place
//! ([`Settings::from_env`]) and each checked before anything is recorded;
//! an error names the variable. The model's variables (`PLANB_MODEL`, …)
//! are read by the engine's `Backend::configured`, the team's by
//! `planb-team`, a front door's own (port, tool list) by that front door.

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

/// The settings, each `None` (or `false`) when its variable is not set.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Settings {
    /// `PLANB_STEP_TIMEOUT_SEC`: the longest one step (a model call, a
    /// generated plan) may take.
    pub step_timeout: Option<Duration>,
    /// `PLANB_INACTIVITY_SEC`: the longest a task's run may go without a
    /// step starting or ending.
    pub inactivity: Option<Duration>,
    /// `PLANB_CONCURRENCY`: most steps of a task's run at once (1 to 64).
    pub concurrency: Option<usize>,
    /// `PLANB_SERVER_START_SEC`: the longest a downstream server may take
    /// to start and list its tools.
    pub server_start: Option<Duration>,
    /// `PLANB_REDACT_PROMPTS=1`: prompts are kept out of lists and replays.
    pub redact_prompts: bool,
}

impl Settings {
    /// Reads every setting from the environment.
    pub fn from_env() -> Result<Settings, SettingError> {
        Settings::from_vars(&|name| std::env::var(name).ok())
    }

    /// Reads every setting through `var`.
    pub fn from_vars(var: &dyn Fn(&str) -> Option<String>) -> Result<Settings, SettingError> {
        Ok(Settings {
            step_timeout: seconds(var, "PLANB_STEP_TIMEOUT_SEC")?,
            inactivity: seconds(var, "PLANB_INACTIVITY_SEC")?,
            concurrency: concurrency(var)?,
            server_start: seconds(var, "PLANB_SERVER_START_SEC")?,
            redact_prompts: redacted(var),
        })
    }
}

/// Whether prompts are kept out of lists and replays
/// (`PLANB_REDACT_PROMPTS=1`); read alone, since it never fails.
pub fn redact_prompts() -> bool {
    redacted(&|name| std::env::var(name).ok())
}

fn redacted(var: &dyn Fn(&str) -> Option<String>) -> bool {
    var("PLANB_REDACT_PROMPTS").is_some_and(|v| v.trim() == "1")
}

/// A duration in seconds: more than 0, at most a year.
fn seconds(
    var: &dyn Fn(&str) -> Option<String>,
    name: &'static str,
) -> Result<Option<Duration>, SettingError> {
    let Some(text) = var(name) else {
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

fn concurrency(var: &dyn Fn(&str) -> Option<String>) -> Result<Option<usize>, SettingError> {
    let Some(text) = var("PLANB_CONCURRENCY") else {
        return Ok(None);
    };
    let n = text
        .trim()
        .parse::<usize>()
        .ok()
        .filter(|n| (1..=64).contains(n));
    n.map(Some).ok_or_else(|| SettingError {
        variable: "PLANB_CONCURRENCY",
        problem: format!("must be a whole number from 1 to 64 (got {text:?})"),
    })
}

/// A task run's options on `backend`, with the limits the environment
/// sets.
pub fn worker_options(backend: Backend) -> Result<Options, SettingError> {
    let mut options = Options::new(backend);
    options.report = Some(planb_ui::pages::report::render);
    let settings = Settings::from_env()?;
    if let Some(d) = settings.step_timeout {
        options.step_timeout = d;
    }
    if let Some(d) = settings.inactivity {
        options.inactivity = d;
    }
    if let Some(n) = settings.concurrency {
        options.concurrency = n;
    }
    Ok(options)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(pairs: &[(&str, &str)]) -> Result<Settings, SettingError> {
        let owned: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Settings::from_vars(&move |name| {
            owned
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn every_setting_is_read_and_a_bad_one_is_named() {
        assert_eq!(read(&[]).expect("none set"), Settings::default());
        let set = read(&[
            ("PLANB_STEP_TIMEOUT_SEC", "1.5"),
            ("PLANB_INACTIVITY_SEC", "60"),
            ("PLANB_CONCURRENCY", "3"),
            ("PLANB_SERVER_START_SEC", "2"),
            ("PLANB_REDACT_PROMPTS", " 1 "),
        ])
        .expect("all set");
        assert_eq!(set.step_timeout, Some(Duration::from_millis(1500)));
        assert_eq!(set.inactivity, Some(Duration::from_secs(60)));
        assert_eq!(set.concurrency, Some(3));
        assert_eq!(set.server_start, Some(Duration::from_secs(2)));
        assert!(set.redact_prompts);
        for (name, value) in [
            ("PLANB_STEP_TIMEOUT_SEC", "0"),
            ("PLANB_INACTIVITY_SEC", "1e300"),
            ("PLANB_CONCURRENCY", "65"),
            ("PLANB_SERVER_START_SEC", "soon"),
        ] {
            let error = read(&[(name, value)]).expect_err(name);
            assert_eq!(error.variable, name);
            assert!(error.to_string().contains(value), "{error}");
        }
        assert!(
            !read(&[("PLANB_REDACT_PROMPTS", "yes")])
                .expect("ok")
                .redact_prompts
        );
    }
}
