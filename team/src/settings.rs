//! The team settings a process reads from its environment:
//! `PLANB_TEAM_URL`, `PLANB_TEAM_MEMBER` and `PLANB_TEAM_PROJECTS`, each
//! checked when read, the error naming the variable.

use std::path::PathBuf;
use std::str::FromStr;

use crate::scope::{Projects, ProjectsError};

/// Longest member name kept, in characters.
pub const MEMBER_CHARS_MAX: usize = 200;
/// Longest `PLANB_TEAM_URL` read, in bytes.
pub const URL_BYTES_MAX: usize = 4096;

/// Where and as whom this data root ships, and what.
#[derive(Clone)]
pub struct TeamSettings {
    /// The database, as libpq's URL or key=value form.
    pub url: String,
    /// The parsed connection settings (password included: never printed).
    pub config: tokio_postgres::Config,
    /// Who the events are from.
    pub member: String,
    /// Which projects' events leave the machine.
    pub projects: Projects,
}

impl std::fmt::Debug for TeamSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TeamSettings")
            .field("database", &self.database())
            .field("member", &self.member)
            .field("projects", &self.projects)
            .finish()
    }
}

/// A team setting of the environment that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    /// `PLANB_TEAM_URL` does not parse (the URL itself is not repeated: it
    /// may hold a password).
    #[error("PLANB_TEAM_URL: {0}")]
    Url(String),
    /// `PLANB_TEAM_MEMBER` is unusable.
    #[error("PLANB_TEAM_MEMBER: {0}")]
    Member(&'static str),
    /// An entry of `PLANB_TEAM_PROJECTS` is unusable.
    #[error(transparent)]
    Projects(#[from] ProjectsError),
}

impl TeamSettings {
    /// The settings of this process's environment; `None` when
    /// `PLANB_TEAM_URL` is unset or empty (no team).
    pub fn from_env() -> Result<Option<TeamSettings>, SettingsError> {
        let Some(url) = var("PLANB_TEAM_URL") else {
            return Ok(None);
        };
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let projects = Projects::parse(
            &var("PLANB_TEAM_PROJECTS").unwrap_or_default(),
            home.as_deref(),
        )?;
        let member = match var("PLANB_TEAM_MEMBER") {
            Some(member) => member,
            None => default_member(),
        };
        TeamSettings::new(&url, &member, projects).map(Some)
    }

    /// What a reader of the team database needs (the team replay):
    /// `PLANB_TEAM_URL` alone. What this process would ship, and as whom,
    /// is not read, so a shipping setting a reader cannot use does not stop
    /// it. `None` when the URL is unset or empty.
    pub fn reader_from_env() -> Result<Option<TeamSettings>, SettingsError> {
        let Some(url) = var("PLANB_TEAM_URL") else {
            return Ok(None);
        };
        TeamSettings::new(&url, READER, Projects::default()).map(Some)
    }

    /// Settings from values: the URL parsed, the member checked.
    pub fn new(url: &str, member: &str, projects: Projects) -> Result<TeamSettings, SettingsError> {
        if url.len() > URL_BYTES_MAX {
            return Err(SettingsError::Url("longer than 4 KiB".into()));
        }
        let mut config = tokio_postgres::Config::from_str(&libpq_sslmode(url.trim()))
            .map_err(|e| SettingsError::Url(format!("not a PostgreSQL connection URL: {e}")))?;
        if config.get_hosts().is_empty() {
            return Err(SettingsError::Url("names no host".into()));
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(std::time::Duration::from_secs(10));
        }
        config.application_name("planb");
        if config.get_password().is_none()
            && let Some(password) = password_from_env_or_pgpass(&config)
        {
            config.password(password);
        }
        let member = member.trim();
        if member.is_empty() {
            return Err(SettingsError::Member("is empty"));
        }
        if member.chars().count() > MEMBER_CHARS_MAX || member.chars().any(char::is_control) {
            return Err(SettingsError::Member(
                "is over 200 characters or holds a control character",
            ));
        }
        Ok(TeamSettings {
            url: url.trim().to_string(),
            config,
            member: member.to_string(),
            projects,
        })
    }

    /// The database as `user@host:port/dbname`, without the password.
    pub fn database(&self) -> String {
        let host = match self.config.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
            Some(tokio_postgres::config::Host::Unix(path)) => path.display().to_string(),
            None => String::new(),
        };
        let port = self.config.get_ports().first().copied().unwrap_or(5432);
        format!(
            "{}@{host}:{port}/{}",
            self.config.get_user().unwrap_or("?"),
            self.config.get_dbname().unwrap_or("?")
        )
    }
}

/// The password libpq would use when the URL has none: `PGPASSWORD`, else
/// the first matching line of `PGPASSFILE` or `~/.pgpass` (ignored, as by
/// libpq, when others may read it).
fn password_from_env_or_pgpass(config: &tokio_postgres::Config) -> Option<String> {
    if let Ok(password) = std::env::var("PGPASSWORD") {
        return Some(password);
    }
    let path = std::env::var_os("PGPASSFILE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pgpass")))?;
    // No file is the usual case; one that cannot be read is said.
    let meta = match std::fs::metadata(&path) {
        Ok(meta) => meta,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return None,
        Err(error) => {
            tracing::warn!("{}: {error}: no password read from it", path.display());
            return None;
        }
    };
    if std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o077 != 0
        || meta.len() > 1 << 20
    {
        tracing::warn!(
            "{} is readable by others (or over 1 MiB): not used",
            path.display()
        );
        return None;
    }
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(error) => {
            tracing::warn!("{}: {error}: no password read from it", path.display());
            return None;
        }
    };
    let host = match config.get_hosts().first()? {
        tokio_postgres::config::Host::Tcp(host) => host.clone(),
        tokio_postgres::config::Host::Unix(_) => "localhost".into(),
    };
    let port = config
        .get_ports()
        .first()
        .copied()
        .unwrap_or(5432)
        .to_string();
    let user = config.get_user().unwrap_or_default();
    let db = config.get_dbname().unwrap_or(user);
    pgpass_lookup(&text, [&host, &port, db, user])
}

/// The password of the first line of a `.pgpass` text matching `want`
/// (host, port, database, user); `*` matches anything, `\` escapes.
fn pgpass_lookup(text: &str, want: [&str; 4]) -> Option<String> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            let fields = pgpass_fields(line);
            let [host, port, db, user, password] = fields.as_slice() else {
                return None;
            };
            let matches = [host, port, db, user]
                .iter()
                .zip(want)
                .all(|(field, want)| field.as_str() == "*" || field.as_str() == want);
            matches.then(|| password.clone())
        })
}

fn pgpass_fields(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => fields.last_mut().expect("one field").extend(chars.next()),
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => fields.last_mut().expect("one field").push(c),
        }
    }
    fields
}

/// The member a reader's settings name: a reader ships nothing, so it is
/// never recorded.
const READER: &str = "reader";

/// A variable of the environment; blank counts as unset.
fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// `git config user.name`, else `$USER`, else `unknown`.
fn default_member() -> String {
    let git = std::process::Command::new("git")
        .args(["config", "--get", "user.name"])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output();
    if let Ok(output) = git
        && output.status.success()
    {
        let name = String::from_utf8_lossy(&output.stdout).trim().to_string();
        if !name.is_empty() {
            return name;
        }
    }
    std::env::var("USER").unwrap_or_else(|_| "unknown".into())
}

/// `url` with the `sslmode` values libpq takes and tokio-postgres does
/// not written as the ones that mean as much here: the server's certificate
/// chain and host name are always checked (rustls), so `verify-ca` and
/// `verify-full` are `require`; `allow` is `prefer`.
fn libpq_sslmode(url: &str) -> String {
    let libpq = |pair: &str| match pair.strip_prefix("sslmode=") {
        Some("verify-ca" | "verify-full") => "sslmode=require".to_owned(),
        Some("allow") => "sslmode=prefer".to_owned(),
        _ => pair.to_owned(),
    };
    match url.split_once('?') {
        Some((base, query)) if url.contains("://") => {
            let query: Vec<String> = query.split('&').map(libpq).collect();
            format!("{base}?{}", query.join("&"))
        }
        None if !url.contains("://") => {
            let pairs: Vec<String> = url.split(' ').map(libpq).collect();
            pairs.join(" ")
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libpq_s_certificate_checking_modes_are_taken() {
        use tokio_postgres::config::SslMode;
        let mode = |url: &str| {
            let settings = TeamSettings::new(url, "ana", Projects::default());
            settings.expect("parses").config.get_ssl_mode()
        };
        let url = "postgres://planb@db.example/team?connect_timeout=5&sslmode=verify-full";
        assert_eq!(mode(url), SslMode::Require);
        assert_eq!(
            mode("host=db.example sslmode=verify-ca dbname=team"),
            SslMode::Require
        );
        assert_eq!(
            mode("postgres://db.example/team?sslmode=allow"),
            SslMode::Prefer
        );
        assert_eq!(
            mode("postgres://db.example/team?sslmode=disable"),
            SslMode::Disable
        );
        let odd = TeamSettings::new(
            "postgres://db.example/t?sslmode=sometimes",
            "ana",
            Projects::default(),
        );
        assert!(odd.is_err(), "an sslmode libpq does not take either");
    }

    #[test]
    fn a_url_is_shown_without_its_password() {
        let settings = TeamSettings::new(
            "postgres://planb:secret@db.internal:6543/team?sslmode=disable",
            "ana",
            Projects::default(),
        )
        .expect("parses");
        assert_eq!(settings.database(), "planb@db.internal:6543/team");
        assert!(!format!("{settings:?}").contains("secret"));
    }

    #[test]
    fn a_pgpass_line_matches_by_field_with_stars_and_escapes() {
        let text = "# comment\ndb.internal:5432:other:planb:no\n*:5432:team:planb:p\\:w\\\\d\n";
        assert_eq!(
            pgpass_lookup(text, ["db.internal", "5432", "team", "planb"]).as_deref(),
            Some("p:w\\d")
        );
        assert_eq!(
            pgpass_lookup(text, ["db.internal", "5433", "team", "planb"]),
            None
        );
    }

    #[test]
    fn a_bad_url_or_member_names_the_variable() {
        let error = TeamSettings::new("mysql://x", "ana", Projects::default()).expect_err("bad");
        assert!(error.to_string().starts_with("PLANB_TEAM_URL:"), "{error}");
        let error =
            TeamSettings::new("postgres://h/db", " ", Projects::default()).expect_err("bad");
        assert!(
            error.to_string().starts_with("PLANB_TEAM_MEMBER:"),
            "{error}"
        );
    }
}
