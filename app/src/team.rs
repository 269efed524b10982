//! The team store as the front doors use it: shipping in the background of
//! a long-lived process, shipping now (`team push`), and where shipping
//! stands (`team status`), as plain data.

use std::time::SystemTime;

use planb_projections::DataRoot;
pub use planb_team::{Background, DatabaseMark, Pass, Projects, Status, TeamSettings};

/// Starts the background shipper when `PLANB_TEAM_URL` is set. A setting
/// that cannot be used is said on stderr and ships nothing: the process
/// itself works on.
pub fn start_shipping(root: DataRoot) -> Option<Background> {
    let settings = match TeamSettings::from_env() {
        Ok(Some(settings)) => settings,
        Ok(None) => return None,
        Err(error) => {
            tracing::warn!("{error}; team shipping is off");
            return None;
        }
    };
    match planb_team::background::start(settings, root) {
        Ok(background) => Some(background),
        Err(error) => {
            tracing::warn!(%error, "team shipping not started");
            None
        }
    }
}

/// Why a team command could not run.
#[derive(Debug, thiserror::Error)]
pub enum TeamError {
    /// `PLANB_TEAM_URL` is not set.
    #[error(
        "no team: PLANB_TEAM_URL is not set (a libpq URL such as postgres://planb@db.internal/planb)"
    )]
    NoTeam,
    /// A setting is unusable.
    #[error(transparent)]
    Settings(#[from] planb_team::SettingsError),
    /// Shipping failed.
    #[error(transparent)]
    Ship(#[from] planb_team::ShipError),
    /// The log could not be read.
    #[error(transparent)]
    Log(#[from] planb_log::LogError),
    /// A team file could not be read.
    #[error(transparent)]
    Local(#[from] planb_team::local::LocalError),
    /// No runtime for the database client.
    #[error("cannot start the database client: {0}")]
    Runtime(std::io::Error),
}

fn settings() -> Result<TeamSettings, TeamError> {
    TeamSettings::from_env()?.ok_or(TeamError::NoTeam)
}

fn runtime() -> Result<tokio::runtime::Runtime, TeamError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(TeamError::Runtime)
}

/// What `team push` did.
#[derive(Debug, Clone)]
pub struct Pushed {
    /// The database, without a password.
    pub database: String,
    /// The pass's figures.
    pub pass: Pass,
    /// The projects shipped.
    pub projects: Projects,
}

/// Ships everything the log holds now, and returns when it is in.
pub fn push(root: &DataRoot) -> Result<Pushed, TeamError> {
    let settings = settings()?;
    let database = settings.database();
    let projects = settings.projects.clone();
    let pass = runtime()?.block_on(planb_team::push(root.clone(), settings))?;
    Ok(Pushed {
        database,
        pass,
        projects,
    })
}

/// Where shipping stands for one data root.
#[derive(Debug)]
pub struct TeamStatus {
    /// The database, without a password.
    pub database: String,
    /// Who the events are from.
    pub member: String,
    /// The projects shipped.
    pub projects: Projects,
    /// This root's origin id.
    pub origin: String,
    /// The local log's last cursor.
    pub log_end: u64,
    /// The database's mark (`Err`: it could not be asked, and why).
    pub database_mark: Result<Option<DatabaseMark>, planb_team::db::DbError>,
    /// What the last background shipper wrote.
    pub shipper: Option<Status>,
    /// When this was read.
    pub now: SystemTime,
}

/// Reads the local log's end, the last shipper's status file and the
/// database's mark (which may fail: the status says why).
pub fn status(root: &DataRoot) -> Result<TeamStatus, TeamError> {
    let settings = settings()?;
    let origin = planb_team::local::origin(root)?;
    let log_end = log_end(root)?;
    let database_mark = runtime()?.block_on(planb_team::database_mark(&settings, origin));
    Ok(TeamStatus {
        database: settings.database(),
        member: settings.member.clone(),
        projects: settings.projects.clone(),
        origin: origin.to_string(),
        log_end,
        database_mark,
        shipper: planb_team::local::read_status(root)?,
        now: SystemTime::now(),
    })
}

/// The last cursor of `root`'s log (0 when empty), read through.
fn log_end(root: &DataRoot) -> Result<u64, planb_log::LogError> {
    let mut reader = planb_log::read_dir(
        &root.log_dir(),
        Default::default(),
        planb_log::Cursor(u64::MAX),
    )?;
    while reader.next()?.is_some() {}
    Ok(reader.passed_to().0.saturating_sub(1))
}
