//! The database side: connecting, and the schema planb creates and
//! migrates itself.
//!
//! The schema's version is one row in `planb_schema`. Migrations run in
//! one transaction under a transaction-scoped advisory lock, so processes
//! starting together migrate once; a database whose schema is newer than
//! this build knows is refused, never written.

use std::time::Duration;

use tokio_postgres::{Client, NoTls};

use crate::settings::TeamSettings;

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i32 = 2;

/// Longest any one statement or round trip may take before the shipper
/// gives up on the connection and tries again later.
pub const STATEMENT_TIMEOUT: Duration = Duration::from_secs(60);

/// Key of the advisory lock migrations take (`planb` in ASCII).
const MIGRATION_LOCK: i64 = 0x0070_6c61_6e62;

/// Each migration, in order: `MIGRATIONS[n]` takes the schema from version
/// `n` to `n + 1`.
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE planb_origins (
    origin           uuid PRIMARY KEY,
    member           text NOT NULL,
    host             text NOT NULL,
    data_root        text NOT NULL,
    shipped_to       bigint NOT NULL DEFAULT 0,
    shipped_checksum bigint,
    scope            text NOT NULL DEFAULT '',
    first_seen       timestamptz NOT NULL DEFAULT now(),
    last_shipped_at  timestamptz
);
COMMENT ON COLUMN planb_origins.shipped_to IS
    'every record of the origin''s log up to this cursor was examined: shipped, or withheld by scope';
COMMENT ON COLUMN planb_origins.shipped_checksum IS
    'the checksum of the record at shipped_to, which chains every record before it';
COMMENT ON COLUMN planb_origins.scope IS
    'the projects shipped up to shipped_to; another scope examines the log again from its start';
CREATE TABLE planb_events (
    origin   uuid NOT NULL REFERENCES planb_origins,
    cursor   bigint NOT NULL,
    member   text NOT NULL,
    at       timestamptz NOT NULL,
    kind     text NOT NULL,
    project  text,
    checksum bigint NOT NULL,
    payload  bytea NOT NULL,
    body     jsonb NOT NULL,
    PRIMARY KEY (origin, cursor)
);
CREATE INDEX planb_events_at ON planb_events (at);
CREATE INDEX planb_events_project ON planb_events (project) WHERE project IS NOT NULL;
CREATE TABLE planb_blobs (
    hash  bytea PRIMARY KEY CHECK (length(hash) = 32),
    bytes bytea NOT NULL
);
"#,
    r#"
ALTER TABLE planb_events ADD COLUMN prev_checksum bigint, ADD COLUMN prev_cursor bigint;
COMMENT ON COLUMN planb_events.prev_checksum IS
    'the checksum of the record before this one in the origin''s log, which this record''s checksum covers';
COMMENT ON COLUMN planb_events.prev_cursor IS
    'the origin''s cursor before this one the database held or refused when this row was shipped';
ALTER TABLE planb_origins ADD COLUMN last_cursor bigint;
COMMENT ON COLUMN planb_origins.last_cursor IS
    'the highest cursor of the origin shipped or refused';
CREATE TABLE planb_refused (
    origin     uuid NOT NULL REFERENCES planb_origins,
    cursor     bigint NOT NULL,
    member     text NOT NULL,
    at         timestamptz NOT NULL,
    kind       text NOT NULL,
    checksum   bigint NOT NULL,
    reason     text NOT NULL,
    refused_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (origin, cursor)
);
"#,
];

/// Why the database could not be used.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// Connecting, or a statement, failed (down, refused, bad password, TLS,
    /// full disk …); said with its causes, the server's message included.
    #[error("database: {}", with_causes(.0))]
    Postgres(#[from] tokio_postgres::Error),
    /// TLS could not be set up on this machine (no usable roots).
    #[error("database: cannot set up TLS: {0}")]
    Tls(String),
    /// Too slow: no answer within the limit.
    #[error("database: no answer within {0:?} ({1})")]
    Timeout(Duration, &'static str),
    /// The schema was made by a newer planb.
    #[error(
        "database schema version {found} is newer than this planb knows ({SCHEMA_VERSION}): upgrade planb on this machine"
    )]
    SchemaTooNew {
        /// The version found.
        found: i32,
    },
    /// A reader found the schema of an older planb, which it does not
    /// migrate: the next shipper of this version does.
    #[error(
        "database schema version {found} is older than this planb reads ({SCHEMA_VERSION}): it is read once a shipper of this version has migrated it"
    )]
    SchemaTooOld {
        /// The version found.
        found: i32,
    },
}

/// `error` and each of its causes not already in the text, joined by `: `
/// (the client's own text names only the kind of failure, such as "db
/// error"; the server's message is its cause).
fn with_causes(error: &tokio_postgres::Error) -> String {
    let mut text = error.to_string();
    let mut cause = std::error::Error::source(error);
    while let Some(next) = cause {
        let said = next.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        cause = next.source();
    }
    text
}

/// Runs `future` with [`STATEMENT_TIMEOUT`].
pub async fn timed<T>(
    what: &'static str,
    future: impl std::future::Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, DbError> {
    match tokio::time::timeout(STATEMENT_TIMEOUT, future).await {
        Ok(result) => Ok(result?),
        Err(_) => Err(DbError::Timeout(STATEMENT_TIMEOUT, what)),
    }
}

/// Connects and brings the schema to [`SCHEMA_VERSION`]. The connection
/// runs on the current tokio runtime until the client is dropped. TLS is
/// used as `sslmode` says (libpq's default, `prefer`, when unset), with the
/// system's roots; `disable`, and a Unix socket, connect in the clear.
pub async fn connect(settings: &TeamSettings) -> Result<Client, DbError> {
    let client = open(settings).await?;
    migrate(&client).await?;
    Ok(client)
}

/// Connects to read: nothing is created or migrated. `Ok(None)` when no
/// planb has shipped to this database yet; a newer schema is an error.
pub async fn connect_reader(settings: &TeamSettings) -> Result<Option<Client>, DbError> {
    let client = open(settings).await?;
    match schema_version(&client).await? {
        None => Ok(None),
        Some(found) if found < SCHEMA_VERSION => Err(DbError::SchemaTooOld { found }),
        Some(_) => Ok(Some(client)),
    }
}

/// The channel each shipped batch is announced on (its payload: the
/// origin).
pub const CHANNEL: &str = "planb_events";

/// A connection that has run `LISTEN planb_events`: `notify` is woken
/// for each batch any shipper commits, until the client is dropped or the
/// connection breaks (then `notify` is woken once more, so the waiter
/// polls and reconnects).
pub async fn listen(
    settings: &TeamSettings,
    notify: std::sync::Arc<tokio::sync::Notify>,
) -> Result<Client, DbError> {
    let config = &settings.config;
    let client =
        if is_local(config) || config.get_ssl_mode() == tokio_postgres::config::SslMode::Disable {
            let (client, connection) = timed("connect", config.connect(NoTls)).await?;
            tokio::spawn(forward(connection, notify));
            client
        } else {
            let (client, connection) = timed("connect", config.connect(tls()?)).await?;
            tokio::spawn(forward(connection, notify));
            client
        };
    timed("listen", client.batch_execute(&format!("LISTEN {CHANNEL}"))).await?;
    Ok(client)
}

/// Drives `connection`, waking `notify` on each notification and at its
/// end.
async fn forward<S, T>(
    mut connection: tokio_postgres::Connection<S, T>,
    notify: std::sync::Arc<tokio::sync::Notify>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    loop {
        let message = std::future::poll_fn(|cx| connection.poll_message(cx)).await;
        match message {
            Some(Ok(tokio_postgres::AsyncMessage::Notification(_))) => notify.notify_one(),
            Some(Ok(_)) => {}
            Some(Err(error)) => {
                tracing::debug!(%error, "team database listener ended");
                break;
            }
            None => break,
        }
    }
    notify.notify_one();
}

/// Whether every host is a Unix socket, which never carries TLS.
fn is_local(config: &tokio_postgres::Config) -> bool {
    config
        .get_hosts()
        .iter()
        .all(|host| matches!(host, tokio_postgres::config::Host::Unix(_)))
}

/// A connection, TLS as `sslmode` says.
async fn open(settings: &TeamSettings) -> Result<Client, DbError> {
    let config = &settings.config;
    // A Unix socket never carries TLS (as with libpq).
    let client =
        if is_local(config) || config.get_ssl_mode() == tokio_postgres::config::SslMode::Disable {
            let (client, connection) = timed("connect", config.connect(NoTls)).await?;
            tokio::spawn(watch(connection));
            client
        } else {
            let (client, connection) = timed("connect", config.connect(tls()?)).await?;
            tokio::spawn(watch(connection));
            client
        };
    Ok(client)
}

async fn watch(connection: impl std::future::Future<Output = Result<(), tokio_postgres::Error>>) {
    if let Err(error) = connection.await {
        tracing::debug!(%error, "team database connection ended");
    }
}

/// The TLS connector: rustls over ring with the platform's verifier.
fn tls() -> Result<tokio_postgres_rustls::MakeRustlsConnect, DbError> {
    use rustls_platform_verifier::BuilderVerifierExt;
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|builder| builder.with_platform_verifier())
        .map_err(|e| DbError::Tls(e.to_string()))?
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

/// Applies the migrations this database lacks.
pub async fn migrate(client: &Client) -> Result<(), DbError> {
    let version = schema_version(client).await?;
    if version == Some(SCHEMA_VERSION) {
        return Ok(());
    }
    timed("migrate", async {
        client.batch_execute("BEGIN").await?;
        client
            .execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .await?;
        client
            .batch_execute("CREATE TABLE IF NOT EXISTS planb_schema (version integer NOT NULL)")
            .await?;
        Ok(())
    })
    .await?;
    let result = apply_missing(client).await;
    let end = if result.is_ok() { "COMMIT" } else { "ROLLBACK" };
    timed("migrate", client.batch_execute(end)).await?;
    result
}

async fn apply_missing(client: &Client) -> Result<(), DbError> {
    let found: i32 = timed(
        "migrate",
        client.query_one("SELECT coalesce(max(version), 0) FROM planb_schema", &[]),
    )
    .await?
    .get(0);
    if found > SCHEMA_VERSION {
        return Err(DbError::SchemaTooNew { found });
    }
    for (from, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        timed("migrate", client.batch_execute(sql)).await?;
        tracing::info!(to = from + 1, "team database schema migrated");
    }
    timed("migrate", async {
        client.execute("DELETE FROM planb_schema", &[]).await?;
        client
            .execute(
                "INSERT INTO planb_schema (version) VALUES ($1)",
                &[&SCHEMA_VERSION],
            )
            .await
    })
    .await?;
    Ok(())
}

/// The schema's version, `None` before planb made one; a newer one than
/// this build knows is an error.
pub async fn schema_version(client: &Client) -> Result<Option<i32>, DbError> {
    let rows = timed(
        "read the schema version",
        client.query("SELECT max(version) FROM planb_schema", &[]),
    )
    .await;
    let version = match rows {
        Ok(rows) => rows.first().and_then(|row| row.get::<_, Option<i32>>(0)),
        // The table does not exist yet.
        Err(DbError::Postgres(e))
            if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) =>
        {
            None
        }
        Err(e) => return Err(e),
    };
    match version {
        Some(found) if found > SCHEMA_VERSION => Err(DbError::SchemaTooNew { found }),
        other => Ok(other),
    }
}
