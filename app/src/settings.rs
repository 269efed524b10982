//! The settings planb reads from the environment, in one place and each
//! checked before anything is recorded; an error names the variable.
//! [`Settings::from_env`] holds those of runs and tasks, which every process
//! reads; [`ServerSettings::from_env`] those of the MCP server's waits and
//! forms. The model's variables (`PLANB_MODEL`, …) are read by the engine's
//! `Backend::configured`, the team's by `planb-team`, where the data root is
//! by `DataRoot::locate`.

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

    /// Reads every setting through `var`; a blank value counts as unset.
    pub fn from_vars(var: &dyn Fn(&str) -> Option<String>) -> Result<Settings, SettingError> {
        let var = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        let var: &dyn Fn(&str) -> Option<String> = &var;
        Ok(Settings {
            step_timeout: seconds(var, "PLANB_STEP_TIMEOUT_SEC")?,
            inactivity: seconds(var, "PLANB_INACTIVITY_SEC")?,
            concurrency: concurrency(var)?,
            server_start: seconds(var, "PLANB_SERVER_START_SEC")?,
            redact_prompts: redacted(var),
        })
    }
}

/// How long `ask_user` waits for an answer unless `ASK_ANSWER_TIMEOUT_MS`
/// says otherwise.
pub const DEFAULT_ANSWER_TIMEOUT: Duration = Duration::from_millis(86_400_000);
/// How often a waiting tool reports progress when the request carries a
/// token, unless `PLANB_PROGRESS_INTERVAL_MS` says otherwise.
pub const DEFAULT_PROGRESS_INTERVAL: Duration = Duration::from_secs(5);
/// How long a tool call without a progress token waits for the person before
/// it answers "still open": well inside the 60 s after which the MCP
/// Inspector gives up on a request (mcp-cli: 120 s).
pub const DEFAULT_HAND_BACK: Duration = Duration::from_secs(45);

/// The MCP server's own settings, each at its default when its variable is
/// not set (or blank).
#[derive(Debug, Clone, PartialEq)]
pub struct ServerSettings {
    /// `ASK_ANSWER_TIMEOUT_MS`: how long a question waits for its answer.
    pub answer_timeout: Duration,
    /// `ASK_NO_OPEN` (anything but `0`): print a form's URL instead of
    /// launching a browser.
    pub no_open: bool,
    /// `PLANB_PORT`: a fixed port for the callback server (0 = any free one).
    pub port: u16,
    /// `PLANB_PROGRESS_INTERVAL_MS`: how often a wait reports progress.
    pub progress_interval: Duration,
    /// `PLANB_HAND_BACK_MS`: how long a call without a progress token waits
    /// for the person before answering "still open".
    pub hand_back: Duration,
    /// `PLANB_TOOLS`: the tool groups to serve, as written.
    pub tools: Option<String>,
    /// `BROWSER_PLAN_DATA_DIR` is set: list the forerunner's tool names too
    /// (the server's `--browser-plan-names` sets it as well).
    pub browser_plan_names: bool,
}

impl ServerSettings {
    /// Reads every server setting from the environment.
    pub fn from_env() -> Result<ServerSettings, SettingError> {
        ServerSettings::from_vars(&|name| std::env::var(name).ok())
    }

    /// Reads every server setting through `var`.
    pub fn from_vars(var: &dyn Fn(&str) -> Option<String>) -> Result<ServerSettings, SettingError> {
        let var = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        let port = match var("PLANB_PORT") {
            None => 0,
            Some(text) => text.trim().parse::<u16>().map_err(|_| SettingError {
                variable: "PLANB_PORT",
                problem: format!("expected a port number 0-65535, got {text:?}"),
            })?,
        };
        Ok(ServerSettings {
            answer_timeout: millis(&var, "ASK_ANSWER_TIMEOUT_MS", DEFAULT_ANSWER_TIMEOUT)?,
            no_open: var("ASK_NO_OPEN").is_some_and(|v| v.trim() != "0"),
            port,
            progress_interval: millis(
                &var,
                "PLANB_PROGRESS_INTERVAL_MS",
                DEFAULT_PROGRESS_INTERVAL,
            )?,
            hand_back: millis(&var, "PLANB_HAND_BACK_MS", DEFAULT_HAND_BACK)?,
            tools: var("PLANB_TOOLS"),
            browser_plan_names: var("BROWSER_PLAN_DATA_DIR").is_some(),
        })
    }
}

/// A positive number of milliseconds, `default` when unset.
fn millis(
    var: &dyn Fn(&str) -> Option<String>,
    name: &'static str,
    default: Duration,
) -> Result<Duration, SettingError> {
    match var(name) {
        None => Ok(default),
        Some(text) => match text.trim().parse::<u64>() {
            Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
            _ => Err(SettingError {
                variable: name,
                problem: format!("expected a positive number of milliseconds, got {text:?}"),
            }),
        },
    }
}

/// `PLANB_SERVER_START_SEC` alone, for what needs no other setting (an
/// execution plan's downstream servers).
pub fn server_start() -> Result<Option<Duration>, SettingError> {
    seconds(&env_var, "PLANB_SERVER_START_SEC")
}

/// `PLANB_STEP_TIMEOUT_SEC` alone, for what needs no other setting (a plan
/// a model writes).
pub fn step_timeout() -> Result<Option<Duration>, SettingError> {
    seconds(&env_var, "PLANB_STEP_TIMEOUT_SEC")
}

/// A variable of the environment; blank counts as unset.
fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
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
        let blank = read(&[("PLANB_CONCURRENCY", " "), ("PLANB_STEP_TIMEOUT_SEC", "")]);
        assert_eq!(blank.expect("blank is unset"), Settings::default());
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

    #[test]
    fn the_server_settings_default_and_a_bad_one_is_named() {
        let read = |pairs: &[(&str, &str)]| {
            let owned: Vec<(String, String)> = pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            ServerSettings::from_vars(&move |name| {
                owned
                    .iter()
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| v.clone())
            })
        };
        let none = read(&[("PLANB_TOOLS", " ")]).expect("none set");
        assert_eq!(none.answer_timeout, DEFAULT_ANSWER_TIMEOUT);
        assert_eq!((none.port, none.no_open, none.tools), (0, false, None));
        let set = read(&[
            ("PLANB_PORT", "4999"),
            ("ASK_NO_OPEN", "1"),
            ("PLANB_HAND_BACK_MS", "250"),
            ("BROWSER_PLAN_DATA_DIR", "/b"),
        ])
        .expect("set");
        assert_eq!((set.port, set.no_open), (4999, true));
        assert_eq!(set.hand_back, Duration::from_millis(250));
        assert!(set.browser_plan_names);
        for (name, value) in [
            ("PLANB_PORT", "70000"),
            ("ASK_ANSWER_TIMEOUT_MS", "0"),
            ("PLANB_PROGRESS_INTERVAL_MS", "soon"),
        ] {
            let error = read(&[(name, value)]).expect_err(name);
            assert_eq!(error.variable, name);
            assert!(error.to_string().contains(value), "{error}");
        }
    }
}
