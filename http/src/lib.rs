//! `planb-http`: the accept loop of planb's two loopback servers, the form
//! and review server of `planb-mcp` and the replay of `planb-retro`.
//!
//! `axum::serve` waits as long as a client likes for a request's headers and
//! body, and accepts every connection it is offered. A client that sends half
//! a request therefore holds a socket for good, and enough of them use up the
//! process's file descriptors, after which the log, the index and every page
//! fail with "Too many open files". [`serve`] bounds all three:
//!
//! - **headers** must arrive within [`Limits::header_read_timeout`] of the
//!   server starting to wait for them, which also closes keep-alive
//!   connections left idle that long;
//! - a **request body** must arrive within [`Limits::body_read_timeout`] of
//!   its headers; past that, reading it fails, the handler answers with an
//!   error and the connection closes, since the rest of the body never came;
//! - at most [`Limits::connections_max`] **connections** are open at once,
//!   and never more than half the process's descriptor limit
//!   ([`connections_allowed`]), so the rest stays for its store.
//!   The loop accepts only while it holds a permit, so further connections
//!   wait in the kernel's accept backlog, costing this process no
//!   descriptor, until an open one closes.
//!
//! Responses are not bounded: a server-sent event stream is a response that
//! lasts as long as the page is open, not a slow request.
//!
//! **Architecture invariant**: this crate knows nothing of planb's pages,
//! events or data; it serves any axum `Router` over HTTP/1.1.

pub mod checks;

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::Request;
use axum::response::Response;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::time::Sleep;

/// How long a request may take to arrive, and how many connections may be
/// open at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// From the moment the server waits for a request (a new connection, or
    /// a kept-alive one after its last response) until its headers are in.
    pub header_read_timeout: Duration,
    /// From the moment the headers are in until the whole body is.
    pub body_read_timeout: Duration,
    /// Connections open at once, long-lived event streams included.
    pub connections_max: usize,
}

impl Limits {
    /// Generous for a browser on the same machine, which sends a request in
    /// microseconds; the body bound leaves room for the largest body the
    /// form server accepts (8 MiB) even on a loaded machine. 256 connections
    /// are far more than the pages of one person need, and far below the
    /// usual limit of 1024 descriptors a process starts with.
    pub const DEFAULT: Limits = Limits {
        header_read_timeout: Duration::from_secs(10),
        body_read_timeout: Duration::from_secs(30),
        connections_max: 256,
    };
}

impl Default for Limits {
    fn default() -> Limits {
        Limits::DEFAULT
    }
}

/// The connections a process may hold open given its descriptor limit:
/// half of it, so the other half stays for its store (log segments,
/// indexes, blobs, pipes), and at least 4.
pub fn connections_allowed() -> usize {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    limit.map_or(usize::MAX, |soft| {
        usize::try_from(soft / 2).unwrap_or(usize::MAX).max(4)
    })
}

/// How long the loop pauses when accepting fails for want of a resource
/// (descriptors, memory): retrying at once would only spin.
const ACCEPT_RETRY_DELAY: Duration = Duration::from_millis(250);

/// Serves `router` on `listener` within `limits`, one task per connection.
/// Runs until the runtime stops; accept errors are logged and retried, never
/// returned, so the server outlives a burst of "Too many open files".
pub async fn serve(listener: TcpListener, router: Router, limits: Limits) {
    assert!(
        limits.connections_max > 0,
        "connections_max must be positive"
    );
    // Never more than the descriptor limit leaves room for.
    let cap = limits.connections_max.min(connections_allowed());
    if cap < limits.connections_max {
        tracing::info!(
            "at most {cap} connections at once: half of this process's descriptor limit"
        );
    }
    let permits = Arc::new(Semaphore::new(cap));
    loop {
        // Taken before accepting, so a connection past the limit stays in
        // the backlog instead of holding one of our descriptors.
        let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
            // The semaphore is never closed.
            return;
        };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                if !is_per_connection(&error) {
                    tracing::warn!("cannot accept a connection: {error}; retrying");
                    tokio::time::sleep(ACCEPT_RETRY_DELAY).await;
                }
                continue;
            }
        };
        let router = router.clone();
        tokio::spawn(async move {
            serve_connection(stream, router, limits).await;
            drop(permit);
        });
    }
}

/// Errors that concern only the connection being accepted (the client gave
/// up during the handshake), after which the next accept can succeed at once.
fn is_per_connection(error: &std::io::Error) -> bool {
    use std::io::ErrorKind;
    matches!(
        error.kind(),
        ErrorKind::ConnectionAborted
            | ErrorKind::ConnectionRefused
            | ErrorKind::ConnectionReset
            | ErrorKind::Interrupted
    )
}

async fn serve_connection(stream: tokio::net::TcpStream, router: Router, limits: Limits) {
    let body_read_timeout = limits.body_read_timeout;
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let request = request.map(|body| Body::new(TimedBody::new(body, body_read_timeout)));
        call(router.clone(), request)
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    if let Err(error) = builder
        .serve_connection(TokioIo::new(stream), service)
        .await
    {
        // Timeouts and clients hanging up land here; neither is the
        // server's fault, and a person would not act on them.
        tracing::debug!("connection closed: {error}");
    }
}

fn call(
    mut router: Router,
    request: Request<Body>,
) -> impl Future<Output = Result<Response, Infallible>> {
    tower_service::Service::call(&mut router, request)
}

/// A request body that fails once its deadline passes before it ends.
struct TimedBody {
    inner: Incoming,
    /// Boxed so the body stays `Unpin`; one allocation per request.
    deadline: Pin<Box<Sleep>>,
    timeout: Duration,
}

impl TimedBody {
    fn new(inner: Incoming, timeout: Duration) -> TimedBody {
        TimedBody {
            inner,
            deadline: Box::pin(tokio::time::sleep(timeout)),
            timeout,
        }
    }
}

/// Why a request body could not be read.
#[derive(Debug)]
pub enum BodyError {
    /// The connection failed or the client sent a malformed body.
    Read(hyper::Error),
    /// The body did not arrive within [`Limits::body_read_timeout`].
    TimedOut(Duration),
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BodyError::Read(error) => write!(f, "request body: {error}"),
            BodyError::TimedOut(timeout) => write!(
                f,
                "request body: not received within {} ms (body_read_timeout)",
                timeout.as_millis()
            ),
        }
    }
}

impl std::error::Error for BodyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BodyError::Read(error) => Some(error),
            BodyError::TimedOut(_) => None,
        }
    }
}

impl http_body::Body for TimedBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|frame| frame.map_err(BodyError::Read)));
        }
        if this.deadline.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(BodyError::TimedOut(this.timeout))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
