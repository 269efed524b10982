//! `planb-mcp`: the planb MCP server (stdio), and the binary that carries
//! planb's command line (planb-cli).
//!
//! stdout belongs to JSON-RPC when the server runs; logs always go to stderr.
//! The commands (`check`, `rebuild`, `log`, `plan`, …) are for people and
//! print their reports on stdout.

mod args;
mod ask;
mod collect;
mod config;
mod deliver;
mod groups;
mod plan_tools;
mod plans;
mod reply;
mod resources;
mod schema;
mod server;
mod stdio;
mod tasks;
mod terminal;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use planb_app::models::keeper;
use planb_app::settings::ServerSettings;

/// planb: a planning companion for AI coding agents.
#[derive(Debug, Parser)]
#[command(name = "planb-mcp", version, about)]
struct Cli {
    /// Data root (default: $PLANB_MCP_DATA_DIR, else $BROWSER_PLAN_DATA_DIR,
    /// else ~/.planb-mcp).
    #[arg(long, global = true, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Where named plans are written (relative to the working directory).
    #[arg(long, value_name = "DIR", default_value = "docs/plans")]
    plans_dir: PathBuf,
    /// How submit_plan collects a verdict: the browser review page, or a form elicitation.
    #[arg(long, value_enum, default_value_t = config::ReviewMode::Browser)]
    review: config::ReviewMode,
    /// The downstream MCP servers of execution plans (default:
    /// $PLANB_SERVERS, else <data-dir>/servers.json).
    #[arg(long, global = true, value_name = "FILE")]
    servers: Option<PathBuf>,
    /// Also use the servers of the project's `.mcp.json` (in the working
    /// directory) for execution plans; planb itself is left out.
    #[arg(long, global = true)]
    project_servers: bool,
    /// The tool groups to list and serve, comma-separated: sessions,
    /// review, tasks, plans, or all (default: $PLANB_TOOLS, else all).
    #[arg(long, value_name = "GROUPS")]
    tools: Option<String>,
    /// Also list `init_browser_plan_session`, the name skills written for
    /// browser-plan call (listed anyway when BROWSER_PLAN_DATA_DIR is set).
    #[arg(long)]
    browser_plan_names: bool,
    /// Replaces the built-in `plan` prompt; `$ARGUMENTS` is substituted.
    #[arg(long, value_name = "FILE")]
    prompt_file: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<planb_cli::Command>,
    /// A submit command (after planb's own options, with or without `--`):
    /// submit_plan runs it with the plan's absolute path appended; its
    /// stdout comes back as feedback.
    #[arg(last = true, value_name = "SUBMIT_COMMAND")]
    submit_command: Vec<String>,
}

fn data_root(cli: &Cli) -> anyhow::Result<PathBuf> {
    match &cli.data_dir {
        Some(dir) => Ok(dir.clone()),
        None => Ok(planb_projections::DataRoot::locate()?.root().to_path_buf()),
    }
}

/// Where execution plans' downstream servers are configured.
fn servers_source(
    root: &planb_projections::DataRoot,
    cli: &Cli,
) -> anyhow::Result<planb_app::plans::ServersSource> {
    let project = if cli.project_servers {
        Some(std::env::current_dir()?.join(".mcp.json"))
    } else {
        None
    };
    Ok(planb_app::plans::ServersSource {
        file: planb_app::plans::servers_path(root.root(), cli.servers.as_deref()),
        project,
    })
}

/// `args` with `--` before the first word that is neither one of planb's
/// options (or an option's value) nor a subcommand: the words from there on
/// are the submit command, as they are for other plan servers, which take
/// it without `--`. A first word naming a subcommand stays the subcommand.
fn with_submit_separator(mut args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    use clap::CommandFactory;
    let command = Cli::command();
    let takes_value = |long: &str| {
        command.get_arguments().any(|a| {
            a.get_long() == Some(long) && a.get_action().takes_values() && !a.is_positional()
        })
    };
    let subcommand = |word: &str| {
        word == "help"
            || command
                .get_subcommands()
                .any(|s| s.get_name() == word || s.get_all_aliases().any(|a| a == word))
    };
    let mut at = 1;
    while at < args.len() {
        let word = args[at].to_string_lossy().into_owned();
        if word == "--" || subcommand(&word) {
            return args;
        }
        match word.strip_prefix("--") {
            Some(long) if !long.contains('=') && takes_value(long) => at += 2,
            Some(_) => at += 1,
            None if word.starts_with('-') && word.len() > 1 => at += 1,
            None => {
                args.insert(at, "--".into());
                return args;
            }
        }
    }
    args
}

/// The tool groups `--tools`, else `PLANB_TOOLS`, names; all when neither
/// does, or when the one given cannot be read (said on stderr, so a client's
/// server still starts).
fn tool_selection(flag: Option<&str>, variable: Option<&str>) -> groups::Selection {
    let (source, text) = match (flag, variable) {
        (Some(text), _) => ("--tools", text),
        (None, Some(text)) => ("PLANB_TOOLS", text),
        _ => return groups::Selection::default(),
    };
    groups::Selection::parse(text).unwrap_or_else(|problem| {
        tracing::warn!("{source}: {problem}; serving every tool");
        groups::Selection::default()
    })
}

/// The text of a `--prompt-file`, at most `PROMPT_FILE_BYTES_MAX` bytes.
fn prompt_file(file: &std::path::Path) -> std::io::Result<String> {
    let max = plans::PROMPT_FILE_BYTES_MAX;
    match planb_projections::bounded::read(file, max)? {
        Ok(bytes) => String::from_utf8(bytes)
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text")),
        Err(over) => Err(std::io::Error::other(format!(
            "{} bytes, over the {max}-byte limit",
            over.0
        ))),
    }
}

/// The server's settings: the environment's, then the command line's.
fn server_config(root: &Path, cli: &Cli) -> anyhow::Result<config::Config> {
    let mut config = config::Config::new(root.to_path_buf(), ServerSettings::from_env()?);
    // One spelling of the folder, so that windows started with `docs/plans`
    // and `./docs/plans/` key their plans alike.
    config.plans_dir = std::env::current_dir()?
        .join(&cli.plans_dir)
        .components()
        .collect();
    config.review = cli.review;
    config.submit_command = cli.submit_command.clone();
    config.tools = tool_selection(cli.tools.as_deref(), config.env.tools.as_deref());
    config.env.browser_plan_names |= cli.browser_plan_names;
    config.servers = servers_source(&planb_projections::DataRoot::new(root), cli)?;
    if let Some(file) = &cli.prompt_file {
        // A prompt file that cannot be read leaves the built-in prompt, and
        // says why: a server that does not start shows the person nothing.
        match prompt_file(file) {
            Ok(text) => config.prompt_template = Some(text),
            Err(e) => {
                let problem = format!("--prompt-file {}: {e}", file.display());
                tracing::warn!("{problem}; the built-in plan prompt is used");
                config.prompt_problem = Some(problem);
            }
        }
    }
    Ok(config)
}

/// Runs the MCP server on stdin/stdout until the client closes the connection.
fn serve(root: PathBuf, cli: &Cli) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(&root)
        .map_err(|e| anyhow::anyhow!("cannot create the data root {}: {e}", root.display()))?;
    let root = root.canonicalize()?;
    let mut config = server_config(&root, cli)?;
    // The store opens beside the handshake: `initialize` does not wait for
    // the log to be folded (see `planb_app::store`).
    // The folder the server was started in is the project its tasks and
    // plans are made for.
    let project = std::env::current_dir()
        .ok()
        .map(|d| d.display().to_string());
    let app = planb_app::App::open(
        planb_projections::DataRoot::new(&root),
        std::sync::Arc::new(planb_projections::SystemEnvironment),
        config.servers.clone(),
    )
    .in_project(project);
    // Shipping to a team database, when one is set, runs on its own thread
    // and never in a tool call's way.
    let _team = planb_app::team::start_shipping(planb_projections::DataRoot::new(&root));
    tracing::info!(
        "planb-mcp {} serving on stdio; data root {}",
        env!("CARGO_PKG_VERSION"),
        root.display()
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let served = runtime.block_on({
        let app = app.clone();
        async move {
            use rmcp::ServiceExt;
            let (input, output, disconnect) = stdio::start();
            config.disconnect = disconnect;
            let server = server::PlanbServer::new(app, config);
            tokio::spawn({
                let server = server.clone();
                async move { server.serve_answerable_forms().await }
            });
            let transport = rmcp::transport::async_rw::AsyncRwTransport::new_server(input, output)
                .with_max_line_length(stdio::RMCP_LINE_BYTES_MAX);
            let service = server.serve(transport).await?;
            service.waiting().await?;
            anyhow::Ok(())
        }
    });
    // Waits that outlived the connection have recorded how they ended; what
    // is left (idle blocking threads, the callback server) may just stop.
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    // Plan runs still under way end with their downstream servers.
    planb_app::shutdown();
    // What this process leaves: its runs ended, the session files written,
    // the snapshot brought up to date for the next process on the root.
    app.close();
    served?;
    Ok(ExitCode::SUCCESS)
}

/// `error` and its causes in one line. Many errors print their cause as part
/// of their own message and also return it as their source; such a cause
/// is not repeated.
fn describe(error: &anyhow::Error) -> String {
    let mut message = error.to_string();
    for cause in error.chain().skip(1) {
        let cause = cause.to_string();
        if !message.contains(&cause) {
            message.push_str(": ");
            message.push_str(&cause);
        }
    }
    message
}

/// What reaches stderr: planb's warnings and errors unless `PLANB_LOG` (else
/// `RUST_LOG`) asks for more. Clients such as Claude Code show every stderr
/// line of a server as an error, so a healthy server is silent; the one line a
/// person needs, the URL of a form no browser was opened for, is printed
/// plainly (see `planb_forms::browser`).
fn log_filter() -> tracing_subscriber::EnvFilter {
    use tracing_subscriber::EnvFilter;
    for variable in ["PLANB_LOG", "RUST_LOG"] {
        let Some(directives) = std::env::var(variable)
            .ok()
            .filter(|d| !d.trim().is_empty())
        else {
            continue;
        };
        match EnvFilter::try_new(&directives) {
            Ok(filter) => return filter,
            Err(error) => eprintln!(
                "planb-mcp: {variable}={directives:?} is not a log filter ({error}); logging warnings only"
            ),
        }
        break;
    }
    // planb reports a server that fails (its name, the cause) itself; the
    // libraries' own lines about it would say the same thing less clearly.
    EnvFilter::new("warn,rustls_platform_verifier=off,rmcp::transport::worker=off")
}

fn main() -> ExitCode {
    // A model command's keeper: not a command anyone types.
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some(keeper::KEEPER_ARG)
        && argv.get(2).map(String::as_str) == Some("--")
    {
        let code = keeper::keeper_main(&argv[3..]);
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    if let Ok(me) = keeper::this_program() {
        keeper::keep_commands_with(me);
    }
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(log_filter())
        .init();
    let cli = Cli::parse_from(with_submit_separator(std::env::args_os().collect()));
    let result = data_root(&cli).and_then(|root| {
        let root = planb_projections::DataRoot::new(root);
        // Only the admin commands and the demo print; the server must not even
        // hold the stdout lock, which rmcp's writer needs.
        let mut out = std::io::stdout();
        match &cli.command {
            Some(command) => command.run(&root, || servers_source(&root, &cli), &mut out),
            None => {
                terminal::check_submit_command(&cli.submit_command)?;
                terminal::greet_at_terminal();
                serve(root.root().to_path_buf(), &cli)
            }
        }
    });
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("planb-mcp: {}", describe(&error));
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{describe, with_submit_separator};

    #[test]
    fn words_after_planb_s_options_are_the_submit_command_unless_a_subcommand() {
        let split = |words: &str| -> String {
            let args = std::iter::once("planb-mcp")
                .chain(words.split(' '))
                .map(Into::into)
                .collect();
            with_submit_separator(args)
                .iter()
                .skip(1)
                .map(|w| w.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        };
        let cases = [
            (
                "contextbridge plan --project aether",
                "-- contextbridge plan --project aether",
            ),
            (
                "--plans-dir p reviewer --project x",
                "--plans-dir p -- reviewer --project x",
            ),
            (
                "--review=form --project-servers lint",
                "--review=form --project-servers -- lint",
            ),
            ("--data-dir d plan list", "--data-dir d plan list"),
            ("--servers s.json check", "--servers s.json check"),
            ("-- plan", "-- plan"),
            ("--tools sessions", "--tools sessions"),
        ];
        for (given, expected) in cases {
            assert_eq!(split(given), expected, "{given}");
        }
    }

    /// An error that prints its cause and also returns it as its source, as
    /// the store's and the log's errors do.
    #[derive(Debug)]
    struct Open(std::io::Error);

    impl std::fmt::Display for Open {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "open /data/log: {}", self.0)
        }
    }

    impl std::error::Error for Open {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let error = anyhow::Error::new(Open(std::io::Error::other(
            "Read-only file system (os error 30)",
        )))
        .context("rebuild");
        assert_eq!(
            describe(&error),
            "rebuild: open /data/log: Read-only file system (os error 30)"
        );
    }
}
