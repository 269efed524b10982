//! `planb-mcp team status|push`: the team store from the command line.

use std::io::Write;
use std::process::ExitCode;
use std::time::SystemTime;

use clap::Subcommand;
use planb_app::team::{Projects, Pushed, TeamStatus};
use planb_projections::DataRoot;

/// The team commands.
#[derive(Debug, Subcommand)]
pub enum TeamCommand {
    /// Where shipping stands: shipped up to which cursor, how far behind,
    /// the last error.
    Status,
    /// Ship everything the log holds now and exit (a running server ships
    /// in the background anyway).
    Push,
}

/// Runs one team command, writing its report to `out`.
pub fn main(
    root: &DataRoot,
    command: &TeamCommand,
    out: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    if !root.log_dir().exists() {
        anyhow::bail!("no log at {}: nothing to ship", root.log_dir().display());
    }
    match command {
        TeamCommand::Status => {
            let status = planb_app::team::status(root)?;
            out.write_all(status_text(&status).as_bytes())?;
            Ok(ExitCode::SUCCESS)
        }
        TeamCommand::Push => {
            let pushed = planb_app::team::push(root)?;
            writeln!(out, "{}", pushed_text(&pushed))?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn projects_text(projects: &Projects) -> String {
    if projects.ships_tasks() {
        "* (everything, tasks and execution plans included)".into()
    } else if projects.is_empty() {
        "none: nothing is shipped until PLANB_TEAM_PROJECTS names a project".into()
    } else {
        format!("{projects}")
    }
}

fn pushed_text(pushed: &Pushed) -> String {
    let mut text = format!(
        "shipped {} event(s) to {} (up to cursor {}); {} kept on this machine by PLANB_TEAM_PROJECTS ({})",
        pushed.pass.shipped,
        pushed.database,
        pushed.pass.shipped_to,
        pushed.pass.withheld,
        projects_text(&pushed.projects),
    );
    for refused in &pushed.pass.refused {
        text.push('\n');
        text.push_str(&refused.to_string());
    }
    text
}

fn ago(now: SystemTime, then: SystemTime) -> String {
    match now.duration_since(then) {
        Ok(d) if d.as_secs() < 120 => format!("{} s ago", d.as_secs()),
        Ok(d) if d.as_secs() < 7200 => format!("{} min ago", d.as_secs() / 60),
        Ok(d) => format!("{} h ago", d.as_secs() / 3600),
        Err(_) => "just now".into(),
    }
}

fn at_time(ms: i64) -> SystemTime {
    std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64)
}

/// The report of `team status`.
fn status_text(status: &TeamStatus) -> String {
    let mut lines = vec![
        format!("database    {}", status.database),
        format!("member      {}", status.member),
        format!("projects    {}", projects_text(&status.projects)),
        format!("origin      {}", status.origin),
        format!("local log   up to cursor {}", status.log_end),
    ];
    lines.push(match &status.database_mark {
        Ok(Some(mark)) => format!(
            "shipped     up to cursor {} ({} behind); {} event(s) in the database{}{}",
            mark.shipped_to,
            status.log_end.saturating_sub(mark.shipped_to),
            mark.events,
            match mark.refused {
                0 => String::new(),
                n => format!(", {n} refused by it (team push names them)"),
            },
            mark.last_shipped_at
                .map(|at| format!(", last batch {}", ago(status.now, at)))
                .unwrap_or_default()
        ),
        Ok(None) => format!("shipped     nothing yet ({} behind)", status.log_end),
        Err(error) => format!("shipped     unknown: {error}"),
    });
    match &status.shipper {
        Some(shipper) => {
            let updated = shipper
                .updated_at
                .map(|at| ago(status.now, at_time(at.unix_ms())))
                .unwrap_or_default();
            lines.push(format!(
                "shipper     pid {} (status written {updated}): up to cursor {}{}",
                shipper.pid,
                shipper.shipped_to,
                if shipper.halted {
                    ", HALTED until the error below is dealt with"
                } else {
                    ""
                }
            ));
            if let (Some(error), Some(at)) = (&shipper.last_error, shipper.last_error_at) {
                lines.push(format!(
                    "last error  {error} ({})",
                    ago(status.now, at_time(at.unix_ms()))
                ));
            }
        }
        None => lines.push("shipper     none has run on this data root".into()),
    }
    lines.join("\n") + "\n"
}
