//! Settings from the environment, read once at start-up. A malformed value is an
//! error naming the variable, so a typo never silently becomes a default.

use std::path::PathBuf;
use std::time::Duration;

/// How long `ask_user` waits for an answer unless `ASK_ANSWER_TIMEOUT_MS` says otherwise.
pub const DEFAULT_ANSWER_TIMEOUT: Duration = Duration::from_millis(86_400_000);
/// How often a waiting `ask_user` reports progress when the request carries a token.
pub const DEFAULT_PROGRESS_INTERVAL: Duration = Duration::from_secs(5);
/// How long a tool call without a progress token waits for the person before
/// it answers "still open": well inside the 60 s after which the MCP
/// Inspector gives up on a request (mcp-cli: 120 s).
pub const DEFAULT_HAND_BACK: Duration = Duration::from_secs(45);

/// The server's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// The data root (absolute).
    pub data_root: PathBuf,
    /// `ASK_ANSWER_TIMEOUT_MS`.
    pub answer_timeout: Duration,
    /// `ASK_NO_OPEN=1`: print the form's URL instead of launching a browser.
    pub no_open: bool,
    /// `PLANB_PORT`: a fixed port for the callback server (0 = ephemeral).
    pub port: u16,
    /// `PLANB_PROGRESS_INTERVAL_MS`.
    pub progress_interval: Duration,
    /// `PLANB_HAND_BACK_MS`: how long `ask_user` and `submit_plan` wait when
    /// the request carries no progress token (so nothing keeps the client's
    /// request timeout at bay) before returning a "still open" result.
    pub hand_back: Duration,
    /// `--plans-dir` (absolute): where named plans are written.
    pub plans_dir: PathBuf,
    /// `--review`: how `submit_plan` collects a verdict.
    pub review: ReviewMode,
    /// The command after `--`: reviews by running it with the plan's path appended.
    pub submit_command: Vec<String>,
    /// `--prompt-file`: replaces the built-in `plan` prompt (`$ARGUMENTS` substituted).
    pub prompt_template: Option<String>,
    /// Execution plans' downstream servers.
    pub servers: planb_app::plans::ServersSource,
    /// Why `--prompt-file` was not used, when it could not be read.
    pub prompt_problem: Option<String>,
    /// Whether `init_browser_plan_session` is listed (`BROWSER_PLAN_DATA_DIR`
    /// set, or `--browser-plan-names`).
    pub browser_plan_names: bool,
    /// The tool groups listed and served.
    pub tools: crate::groups::Selection,
    /// Fires when the client's connection closes.
    pub disconnect: crate::stdio::Disconnect,
}

/// How `submit_plan` collects a verdict when no submit command is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ReviewMode {
    /// The review page in the browser (URL elicitation or direct open).
    #[default]
    Browser,
    /// A form-mode elicitation with a decision and feedback.
    Form,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn millis(name: &str, default: Duration) -> anyhow::Result<Duration> {
    match var(name) {
        None => Ok(default),
        Some(text) => match text.trim().parse::<u64>() {
            Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
            _ => anyhow::bail!("{name}: expected a positive number of milliseconds, got {text:?}"),
        },
    }
}

impl Config {
    /// Reads the environment; `data_root` is resolved by the caller.
    pub fn from_env(data_root: PathBuf) -> anyhow::Result<Config> {
        let port = match var("PLANB_PORT") {
            None => 0,
            Some(text) => text.trim().parse::<u16>().map_err(|_| {
                anyhow::anyhow!("PLANB_PORT: expected a port number 0-65535, got {text:?}")
            })?,
        };
        let servers = planb_app::plans::ServersSource {
            file: planb_app::plans::servers_path(&data_root, None),
            project: None,
        };
        Ok(Config {
            data_root,
            answer_timeout: millis("ASK_ANSWER_TIMEOUT_MS", DEFAULT_ANSWER_TIMEOUT)?,
            no_open: var("ASK_NO_OPEN").is_some_and(|v| v.trim() != "0"),
            port,
            progress_interval: millis("PLANB_PROGRESS_INTERVAL_MS", DEFAULT_PROGRESS_INTERVAL)?,
            hand_back: millis("PLANB_HAND_BACK_MS", DEFAULT_HAND_BACK)?,
            plans_dir: PathBuf::from("docs/plans"),
            review: ReviewMode::Browser,
            submit_command: Vec::new(),
            prompt_template: None,
            servers,
            tools: crate::groups::Selection::default(),
            prompt_problem: None,
            browser_plan_names: var("BROWSER_PLAN_DATA_DIR").is_some(),
            disconnect: crate::stdio::Disconnect::never(),
        })
    }
}

/// "24 h", "90 s", "1.5 min": a duration as a person reads it.
pub fn human_duration(duration: Duration) -> String {
    let secs = duration.as_secs_f64();
    if secs >= 3600.0 {
        format!("{} h", trim(secs / 3600.0))
    } else if secs >= 60.0 {
        format!("{} min", trim(secs / 60.0))
    } else if secs >= 1.0 {
        format!("{} s", trim(secs))
    } else {
        format!("{} ms", duration.as_millis())
    }
}

fn trim(value: f64) -> String {
    let text = format!("{value:.1}");
    text.strip_suffix(".0").map_or(text.clone(), str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_naturally() {
        assert_eq!(human_duration(DEFAULT_ANSWER_TIMEOUT), "24 h");
        assert_eq!(human_duration(Duration::from_secs(90)), "1.5 min");
        assert_eq!(human_duration(Duration::from_millis(1500)), "1.5 s");
        assert_eq!(human_duration(Duration::from_millis(300)), "300 ms");
    }
}
