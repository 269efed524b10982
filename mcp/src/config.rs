//! The server's settings: the environment's (read by planb-app's
//! `ServerSettings`, where a malformed value is an error naming the
//! variable) and the command line's.

use planb_app::settings::ServerSettings;
use std::path::PathBuf;

/// The server's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// The data root (absolute).
    pub data_root: PathBuf,
    /// The environment's settings: waits, the callback server's port,
    /// whether a browser is opened.
    pub env: ServerSettings,
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

impl Config {
    /// The server's settings: the environment's `env`, every command-line
    /// option at its default; `data_root` is resolved by the caller.
    pub fn new(data_root: PathBuf, env: ServerSettings) -> Config {
        let servers = planb_app::plans::ServersSource {
            file: planb_app::plans::servers_path(&data_root, None),
            project: None,
        };
        Config {
            data_root,
            env,
            plans_dir: PathBuf::from("docs/plans"),
            review: ReviewMode::Browser,
            submit_command: Vec::new(),
            prompt_template: None,
            servers,
            tools: crate::groups::Selection::default(),
            prompt_problem: None,
            disconnect: crate::stdio::Disconnect::never(),
        }
    }
}

/// "24 h", "90 s", "1.5 min": a duration as a person reads it.
pub fn human_duration(duration: std::time::Duration) -> String {
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
    use std::time::Duration;

    #[test]
    fn durations_read_naturally() {
        assert_eq!(
            human_duration(planb_app::settings::DEFAULT_ANSWER_TIMEOUT),
            "24 h"
        );
        assert_eq!(human_duration(Duration::from_secs(90)), "1.5 min");
        assert_eq!(human_duration(Duration::from_millis(1500)), "1.5 s");
        assert_eq!(human_duration(Duration::from_millis(300)), "300 ms");
    }
}
