//! The command line's front door: what `planb-mcp <command>` does for a
//! person (`check`, `rebuild`, `accept-loss`, `export`, `import`, `log`,
//! `plan …`, `team …`, `demo`) and the detached task worker
//! (`planb-mcp worker`). Each command parses its input, calls planb-app or
//! the storage crates, and draws its answer as text on the writer it is
//! given; nothing here decides what a run, a plan or a task does.
//!
//! The binary that carries these commands is the MCP server's; it prints
//! on stdout only when running one of them, never while serving.

pub mod admin;
pub mod demo;
pub mod plan;
mod progress;
pub mod team;
pub mod worker;

pub use progress::stdout_is_live;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use planb_app::launch::Start;
use planb_app::plans::ServersSource;
use planb_projections::DataRoot;

/// The commands, as `planb-mcp <command>` takes them.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Verify every record, checksum and chain link of the log and decode every
    /// event; exits non-zero if the log is corrupt.
    Check,
    /// Rebuild every projection (the redb index, sessions/) from the log; safe
    /// while servers run.
    Rebuild,
    /// After events were lost at the end of the log (a disk rolled back, a
    /// backup restored): move the projections that saw them to
    /// <data-dir>/lost-<time>/ and rebuild from the log as it is.
    AcceptLoss,
    /// A tour of planb against the real server: a question form, a plan you
    /// review, an execution plan, a task (with a model configured) and the
    /// replay of it all.
    Demo {
        /// Answer the forms and reviews without a person (as a browser
        /// would), and end once the replay answers.
        #[arg(long)]
        auto: bool,
    },
    /// The small MCP server the demo's execution plan calls (stdio).
    #[command(hide = true)]
    DemoTools,
    /// Write every session in the planb-mcp file layout under DIR.
    Export {
        /// Where to write `sessions/<id>/…`.
        #[arg(long = "to", value_name = "DIR")]
        to: PathBuf,
    },
    /// Turn an existing data root of the Node planb-mcp or of browser-plan
    /// into log events; importing twice changes nothing.
    Import {
        /// The data root (or its `sessions/` folder) to import; by default
        /// browser-plan's ($BROWSER_PLAN_DATA_DIR, else ~/.browser-plan).
        #[arg(value_name = "DIR")]
        from: Option<PathBuf>,
    },
    /// Run one run of a task to its end (task_create and task_resume start
    /// this detached; it is not meant to be typed).
    Worker {
        /// The task's id.
        #[arg(value_name = "TASK_ID")]
        task: String,
        /// The runs the task had when this run was asked for: if another
        /// began since, this one is refused.
        #[arg(long, value_name = "N")]
        runs_seen: Option<usize>,
        /// Begin at the first step, reusing nothing (task_retry).
        #[arg(long)]
        retry: bool,
        /// A project's `.mcp.json` whose servers join the servers file's, as
        /// they do for the server that starts the worker.
        #[arg(long, value_name = "FILE", hide = true)]
        project_servers_file: Option<std::path::PathBuf>,
    },
    /// Execution plans: DAGs of tool calls on downstream MCP servers.
    Plan {
        #[command(subcommand)]
        command: plan::PlanCommand,
    },
    /// Show the log's events in human-readable form.
    Log {
        #[command(subcommand)]
        command: LogCommand,
    },
    /// The team store: this data root's log shipped to PostgreSQL
    /// (PLANB_TEAM_URL, PLANB_TEAM_MEMBER, PLANB_TEAM_PROJECTS).
    Team {
        #[command(subcommand)]
        command: team::TeamCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum LogCommand {
    /// Print events from a cursor on.
    Dump {
        /// First cursor to print.
        #[arg(long, default_value_t = 1)]
        from: u64,
        /// Print at most this many events.
        #[arg(long)]
        limit: Option<u64>,
    },
    /// Print the last events, then follow the log as events arrive (Ctrl-C stops).
    Tail {
        /// How many existing events to print first.
        #[arg(short = 'n', long, default_value_t = 10)]
        lines: u64,
        /// Print the existing events and stop instead of following.
        #[arg(long)]
        no_follow: bool,
    },
}

impl Command {
    /// Runs the command on the data root `root`, printing on `out`;
    /// `servers` says where execution plans' servers are configured.
    pub fn run(
        &self,
        root: &DataRoot,
        servers: impl FnOnce() -> anyhow::Result<ServersSource>,
        out: &mut dyn Write,
    ) -> anyhow::Result<ExitCode> {
        match self {
            Command::Check => admin::check(root, out),
            Command::Rebuild => admin::rebuild(root, out),
            Command::AcceptLoss => admin::accept_loss(root, out),
            Command::Export { to } => admin::export(root, to, out),
            Command::Import { from } => {
                let from = match from {
                    Some(from) => from.clone(),
                    None => admin::browser_plan_root(root)?,
                };
                admin::import(root, &from, out)
            }
            Command::Worker {
                task,
                runs_seen,
                retry,
                project_servers_file,
            } => {
                let start = if *retry { Start::Retry } else { Start::Resume };
                let mut servers = servers()?;
                if let Some(project) = project_servers_file {
                    servers.project = Some(project.clone());
                }
                Ok(worker::main(root.root(), &servers, task, *runs_seen, start))
            }
            Command::Plan { command } => {
                plan::main(root, &servers()?, command, stdout_is_live(), out)
            }
            Command::Demo { auto } => {
                std::fs::create_dir_all(root.root())?;
                demo::run(&root.root().canonicalize()?, *auto, out)
            }
            Command::DemoTools => demo::tools::serve(),
            Command::Log {
                command: LogCommand::Dump { from, limit },
            } => admin::dump(root, *from, *limit, out),
            Command::Log {
                command: LogCommand::Tail { lines, no_follow },
            } => admin::tail(root, *lines, !no_follow, out),
            Command::Team { command } => team::main(root, command, out),
        }
    }
}
