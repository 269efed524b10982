//! `planb-retro`: the read-only web app in which a person replays how a
//! planning session unfolded.
//!
//! - [`Retro`] holds the [`planb_projections::Timeline`] (every event, the
//!   state at the end and periodic snapshots) and a follower that tails the
//!   log and announces new events.
//! - [`app`] is the axum router: the sessions index, a session's timeline
//!   with its time-travel scrubber, plan versions and diffs, and server-sent
//!   event streams. The pages themselves are rendered by
//!   `planb_ui::pages`.
//! - [`serve`] binds the loopback address and runs the router through
//!   `planb_http`, which bounds how long a request may take to arrive and
//!   how many connections are open.
//!
//! **Architecture invariant**: retro never writes to the log or the data
//! root. It opens the log with `planb_log::read_dir`, which takes no lock
//! and writes nothing, and it opens neither the index nor the session files.

mod app;
mod live;
mod tasks;
pub mod team;

pub use app::{AppState, PageError, TOKEN_CHARS_MIN, app, app_on, app_with_token};
pub use live::{Follower, POLL_INTERVAL, Retro};
pub use tasks::{CALLS_SHOWN, out_of_date};

use std::net::SocketAddr;

pub use planb_http::Limits;

/// The port used when `PORT` is not set.
pub const DEFAULT_PORT: u16 = 4317;

/// Binds 127.0.0.1:`port` (0 = ephemeral) and serves the replay in the
/// background within [`Limits::DEFAULT`]. Returns the bound address; the
/// error names the port.
pub async fn serve(retro: Retro, port: u16) -> std::io::Result<SocketAddr> {
    serve_with(retro, port, Limits::DEFAULT).await
}

/// [`serve`] within other limits (tests use short timeouts).
pub async fn serve_with(retro: Retro, port: u16, limits: Limits) -> std::io::Result<SocketAddr> {
    let address = SocketAddr::from(([127, 0, 0, 1], port));
    serve_on(retro, address, limits).await
}

/// Serves the replay on `address`, a loopback address (`127.0.0.2:4317`,
/// `[::1]:4317` …), without a token: requests must name it, or
/// `127.0.0.1`/`localhost` on its port, as their host. Returns the bound
/// address; the error names it.
pub async fn serve_on(
    retro: Retro,
    address: SocketAddr,
    limits: Limits,
) -> std::io::Result<SocketAddr> {
    if !address.ip().is_loopback() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{address} is not a loopback address: serving beyond it needs a token"),
        ));
    }
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!(
                    "cannot listen on {address}: {e}; is another planb-retro running? set PORT to use another port"
                ),
            )
        })?;
    let bound = listener.local_addr()?;
    let state = AppState {
        retro,
        port: bound.port(),
    };
    tokio::spawn(planb_http::serve(
        listener,
        app_on(state, bound.ip()),
        limits,
    ));
    Ok(bound)
}

/// Serves the replay on `address`, beyond loopback: every request must
/// present `token` ([`app_with_token`]). Returns the bound address.
pub async fn serve_with_token(
    retro: Retro,
    address: SocketAddr,
    token: &str,
) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot listen on {address}: {e}")))?;
    let bound = listener.local_addr()?;
    let router = app_with_token(
        AppState {
            retro,
            port: bound.port(),
        },
        token,
    );
    tokio::spawn(planb_http::serve(listener, router, Limits::DEFAULT));
    Ok(bound)
}
