//! `planb-retro`: serves the read-only replay of the planb log on
//! 127.0.0.1:4317 (`--port`, else `PORT`), from `--data-dir`, else
//! the root `planb-mcp` uses (`DataRoot::locate`). Glue only: read the
//! command line and the environment, open, serve.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Parser;
use planb_projections::DataRoot;
use planb_retro::{DEFAULT_PORT, POLL_INTERVAL, Retro, serve_on};

/// The replay of planb's log in the browser: every planning session, plan
/// review and task as it unfolded, with time-travel scrubbing.
#[derive(Debug, Parser)]
#[command(name = "planb-retro", version, about)]
struct Cli {
    /// Data root (default: $PLANB_MCP_DATA_DIR, else $BROWSER_PLAN_DATA_DIR,
    /// else ~/.planb-mcp).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Port on 127.0.0.1 (default: $PORT, else 4317).
    #[arg(long, value_name = "PORT")]
    port: Option<u16>,
    /// Replay the whole team from its database (PLANB_TEAM_URL) instead of
    /// this machine's log.
    #[arg(long)]
    team: bool,
    /// Listen on this address instead of 127.0.0.1:PORT. Another loopback
    /// address (127.0.0.2:PORT, [::1]:PORT) serves this computer as the
    /// default does; any other serves others and needs PLANB_RETRO_TOKEN
    /// (at least 20 characters), which every reader presents (the link
    /// `http://ADDR/?token=…`).
    #[arg(long, value_name = "ADDR:PORT")]
    listen: Option<std::net::SocketAddr>,
}

/// The token a replay served beyond loopback takes; the error says what to
/// set.
fn token() -> anyhow::Result<String> {
    let token = std::env::var("PLANB_RETRO_TOKEN").unwrap_or_default();
    let token = token.trim();
    if token.chars().count() < planb_retro::TOKEN_CHARS_MIN
        || !token
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.~".contains(c))
    {
        bail!(
            "--listen serves the replay beyond this computer, so it needs PLANB_RETRO_TOKEN: at least {} letters, digits or -_.~ (for example from `head -c 24 /dev/urandom | base64 | tr '+/' '-_'`)",
            planb_retro::TOKEN_CHARS_MIN
        );
    }
    Ok(token.to_string())
}

fn data_root(cli: &Cli) -> anyhow::Result<DataRoot> {
    match &cli.data_dir {
        Some(dir) => Ok(DataRoot::new(dir.clone())),
        None => Ok(DataRoot::locate()?),
    }
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

/// Where a team replay copies the blobs it shows: `$XDG_CACHE_HOME`, else
/// `~/.cache`, then `planb-retro/<database>`.
fn team_cache(database: &str) -> anyhow::Result<DataRoot> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .context("neither XDG_CACHE_HOME nor HOME is set")?;
    let name: String = database
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    Ok(DataRoot::new(base.join("planb-retro").join(name)))
}

/// The replay of `--team` or of the data root.
fn open(cli: &Cli) -> anyhow::Result<(Retro, planb_retro::Follower, String)> {
    if !cli.team {
        let root = data_root(cli)?;
        let (retro, follower) = Retro::open(&root);
        return Ok((retro, follower, root.root().display().to_string()));
    }
    let settings = planb_team::TeamSettings::reader_from_env()?
        .context("--team reads the team database named by PLANB_TEAM_URL, which is not set")?;
    let database = settings.database();
    let cache = team_cache(&database)?;
    let source = planb_retro::team::TeamSource::new(settings, cache.blobs())
        .context("starting the database client")?;
    let (retro, follower) = Retro::open_team(source, &cache);
    Ok((retro, follower, format!("the team database {database}")))
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let port = port(&cli)?;
    let token = match cli.listen {
        Some(address) if !address.ip().is_loopback() => Some(token()?),
        _ => None,
    };
    // A team replay's first load blocks on its own client: off the
    // runtime's threads.
    let (retro, follower, what) = tokio::task::block_in_place(|| open(&cli))?;
    if let Some(problem) = retro.problem() {
        eprintln!("planb-retro: {problem}");
    }
    if let Some(untrusted) = retro.untrusted() {
        eprintln!("planb-retro: {untrusted}");
    }
    if let Some(incomplete) = retro.timeline().incomplete() {
        eprintln!(
            "planb-retro: history incomplete from event #{}: {}",
            incomplete.cursor, incomplete.reason
        );
    }
    retro.follow(follower, POLL_INTERVAL);
    match (cli.listen, &token) {
        (Some(address), Some(token)) => {
            let bound = planb_retro::serve_with_token(retro, address, token).await?;
            eprintln!("planb-retro: replaying {what} on http://{bound}/ to those given ?token=…");
        }
        (listen, _) => {
            let address =
                listen.unwrap_or_else(|| std::net::SocketAddr::from(([127, 0, 0, 1], port)));
            let address = serve_on(retro, address, planb_retro::Limits::DEFAULT).await?;
            eprintln!("planb-retro: replaying {what} on http://{address}");
        }
    }
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
