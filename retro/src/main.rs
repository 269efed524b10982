//! `planb-retro`: serves the read-only replay of the planb log on
//! 127.0.0.1:4317 (`--port`, else `PORT`), from `--data-dir`, else
//! `PLANB_MCP_DATA_DIR` (default `~/.planb-mcp`). Glue only: read the
//! command line and the environment, open, serve.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Parser;
use planb_projections::DataRoot;
use planb_retro::{DEFAULT_PORT, POLL_INTERVAL, Retro, serve};

/// The replay of planb's log in the browser: every planning session, plan
/// review and task as it unfolded, with time-travel scrubbing.
#[derive(Debug, Parser)]
#[command(name = "planb-retro", version, about)]
struct Cli {
    /// Data root (default: $PLANB_MCP_DATA_DIR, else ~/.planb-mcp).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Port on 127.0.0.1 (default: $PORT, else 4317).
    #[arg(long, value_name = "PORT")]
    port: Option<u16>,
}

fn data_root(cli: &Cli) -> anyhow::Result<DataRoot> {
    if let Some(dir) = &cli.data_dir {
        return Ok(DataRoot::new(dir.clone()));
    }
    if let Some(dir) = std::env::var_os("PLANB_MCP_DATA_DIR").filter(|d| !d.is_empty()) {
        return Ok(DataRoot::new(PathBuf::from(dir)));
    }
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .context("neither PLANB_MCP_DATA_DIR nor HOME is set; set PLANB_MCP_DATA_DIR")?;
    Ok(DataRoot::new(PathBuf::from(home).join(".planb-mcp")))
}

fn port(cli: &Cli) -> anyhow::Result<u16> {
    if let Some(port) = cli.port {
        return Ok(port);
    }
    match std::env::var("PORT") {
        Ok(text) if !text.is_empty() => match text.parse() {
            Ok(port) => Ok(port),
            Err(_) => bail!("PORT: {text:?} is not a port number (1-65535)"),
        },
        _ => Ok(DEFAULT_PORT),
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let root = data_root(&cli)?;
    let port = port(&cli)?;
    let (retro, follower) = Retro::open(&root);
    if let Some(problem) = retro.problem() {
        eprintln!("planb-retro: {problem}");
    }
    if let Some(incomplete) = retro.timeline().incomplete() {
        eprintln!(
            "planb-retro: history incomplete from event #{}: {}",
            incomplete.cursor, incomplete.reason
        );
    }
    retro.follow(follower, POLL_INTERVAL);
    let address = serve(retro, port).await?;
    eprintln!(
        "planb-retro: replaying {} on http://{address}",
        root.root().display()
    );
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    Ok(())
}

fn main() -> ExitCode {
    // `--help`, `--version` and an unknown argument end here, before anything
    // is served.
    let cli = Cli::parse();
    // Prompts kept out of everything but the log itself.
    planb_ui::pages::redact_prompts(
        std::env::var("PLANB_REDACT_PROMPTS").is_ok_and(|v| v.trim() == "1"),
    );
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("planb-retro: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("planb-retro: {error:#}");
            ExitCode::FAILURE
        }
    }
}
