//! The shipper a long-lived process runs beside its work: its own thread
//! and tokio runtime, so a database that is down, slow or refusing never
//! touches a tool call. One process per data root ships (the shipper
//! lock); the others look for the role now and then and take it over when
//! its holder exits or is killed. Errors back off (one second, doubling to
//! a minute), are written to `team/status.json`, and are logged at warn
//! level once per change.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use planb_core::time::Timestamp;
use planb_projections::DataRoot;

use crate::local::{self, Status};
use crate::settings::TeamSettings;
use crate::ship::{Pass, ShipError, Shipper};

/// How often an idle shipper looks at the log's end: a read of the last
/// segment's length when nothing is new, and nothing asked of the database.
pub const POLL: Duration = Duration::from_millis(20);
/// How often a process without the role tries to take it.
pub const ROLE_RETRY: Duration = Duration::from_secs(2);
/// The first wait after a failure.
pub const BACKOFF_FIRST: Duration = Duration::from_secs(1);
/// The longest wait after failures.
pub const BACKOFF_MAX: Duration = Duration::from_secs(60);

/// A running background shipper; dropping it asks the thread to stop.
#[derive(Debug)]
pub struct Background {
    stop: Arc<AtomicBool>,
}

impl Drop for Background {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Starts shipping `root` in the background.
pub fn start(settings: TeamSettings, root: DataRoot) -> std::io::Result<Background> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    std::thread::Builder::new()
        .name("planb-team-shipper".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(error) => {
                    tracing::warn!(%error, "team shipping not started");
                    return;
                }
            };
            runtime.block_on(run(root, settings, &flag));
        })?;
    Ok(Background { stop })
}

async fn run(root: DataRoot, settings: TeamSettings, stop: &AtomicBool) {
    if settings.projects.is_empty() {
        // Nor is the shipper's role taken, which another process on the
        // root, told what to ship, may need.
        tracing::warn!(
            "PLANB_TEAM_URL is set but PLANB_TEAM_PROJECTS names no project: nothing is shipped"
        );
        return;
    }
    let _lock = loop {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        match local::try_shipper_lock(&root) {
            Ok(Some(lock)) => break lock,
            Ok(None) => {}
            Err(error) => tracing::warn!(%error, "team shipping: cannot take the shipper role"),
        }
        tokio::time::sleep(ROLE_RETRY).await;
    };
    let mut shipper = match Shipper::new(root, settings) {
        Ok(shipper) => shipper,
        Err(error) => {
            tracing::warn!(%error, "team shipping not started");
            return;
        }
    };
    let mut tracker = Tracker::new(&shipper);
    let mut backoff = BACKOFF_FIRST;
    while !stop.load(Ordering::Relaxed) {
        let result = shipper.ship_to_end().await;
        let wait = match &result {
            Ok(pass) if pass.shipped + pass.withheld > 0 => Duration::ZERO,
            Ok(_) => POLL,
            Err(ShipError::Raced) => POLL,
            Err(_) => backoff,
        };
        backoff = match result {
            Ok(_) | Err(ShipError::Raced) => BACKOFF_FIRST,
            Err(_) => (backoff * 2).min(BACKOFF_MAX),
        };
        tracker.record(&shipper, result);
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

/// Keeps the status file and says each new error once.
struct Tracker {
    root: DataRoot,
    status: Status,
    written: Option<Status>,
}

impl Tracker {
    fn new(shipper: &Shipper) -> Tracker {
        Tracker {
            root: shipper.root().clone(),
            status: Status {
                database: shipper.settings().database(),
                origin: shipper.origin().to_string(),
                member: shipper.settings().member.clone(),
                pid: std::process::id(),
                ..Status::default()
            },
            written: None,
        }
    }

    fn record(&mut self, shipper: &Shipper, result: Result<Pass, ShipError>) {
        let now = now();
        self.status.log_end = self.status.log_end.max(shipper.log_end());
        match result {
            Ok(pass) => {
                for refused in &pass.refused {
                    tracing::warn!("team shipping: {refused}");
                }
                if self.status.last_error.is_some() {
                    tracing::warn!("team shipping: the database takes events again");
                }
                self.status.shipped += pass.shipped;
                self.status.withheld += pass.withheld;
                self.status.shipped_to = pass.shipped_to;
                self.status.log_end = self.status.log_end.max(pass.shipped_to);
                self.status.last_success = Some(now);
                self.status.last_error = None;
                self.status.last_error_at = None;
                self.status.halted = false;
            }
            Err(ShipError::Raced) => {}
            Err(error) => {
                let text = error.to_string();
                if self.status.last_error.as_deref() != Some(&text) {
                    tracing::warn!(error = %text, "team shipping: will try again");
                }
                self.status.halted = error.halts();
                self.status.last_error = Some(text);
                self.status.last_error_at = Some(now);
            }
        }
        self.write(now);
    }

    /// Writes the file when something other than the times changed, or a
    /// second after the last write.
    fn write(&mut self, now: Timestamp) {
        let changed = self.written.as_ref().is_none_or(|written| {
            let mut same = written.clone();
            same.updated_at = self.status.updated_at;
            same.last_success = self.status.last_success;
            same != self.status
                || written
                    .updated_at
                    .is_none_or(|at| now.unix_ms() - at.unix_ms() >= 1000)
        });
        if changed {
            self.status.updated_at = Some(now);
            if let Err(error) = local::write_status(&self.root, &self.status) {
                tracing::debug!(%error, "team status not written");
            }
            self.written = Some(self.status.clone());
        }
    }
}

/// The wall clock as a [`Timestamp`].
pub fn now() -> Timestamp {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    Timestamp(i64::try_from(ms).unwrap_or(i64::MAX))
}
