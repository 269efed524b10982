//! `planb-forms`: the person's front door. A loopback callback server
//! serves the pages a person answers while an agent's tool waits (question
//! forms, plan reviews), records what they submit through planb-app, and
//! hands it to the waiting tool through the registry of the pages this
//! process has open.
//!
//! [`Callback`] is one process's server: started on the first page asked
//! for, on a fixed port or any free one. A page is registered under a
//! secret id ([`NewPage`]) before its link is given out; its answer is
//! recorded in the log whether or not a tool still waits for it.
//!
//! **Architecture invariant**: knows nothing of MCP. Which page to open,
//! how to put it in front of the person and what to tell the agent are the
//! caller's.

pub mod browser;
pub mod registry;
pub mod server;

use std::net::SocketAddr;
use std::sync::Arc;

use planb_app::App;
use tokio::sync::OnceCell;

pub use registry::{FormInfo, Forms, ReviewInfo, ReviewOutcome, Reviews, TooManyPages};

/// A kind of page the callback server serves a person: its path, the
/// name of its secret id in the link, and what messages call it.
#[derive(Debug, Clone, Copy)]
pub struct PageKind(&'static str, &'static str, &'static str);

impl PageKind {
    /// A question form: `/ask?sid=…`.
    pub const FORM: PageKind = PageKind("ask", "sid", "the form");
    /// A plan review: `/review?rid=…`.
    pub const REVIEW: PageKind = PageKind("review", "rid", "the review page");
}

/// A page cannot be served: the callback server could not start, or no
/// secret id could be drawn.
#[derive(Debug, thiserror::Error)]
#[error("{what} could not be opened: {cause}")]
pub struct PageUnavailable {
    what: &'static str,
    cause: String,
}

/// A page about to be served: its address and its new secret id.
#[derive(Debug)]
pub struct NewPage {
    /// `http://127.0.0.1:<port>/ask`: what the log records of the link.
    pub address: String,
    /// The secret id (256 random bits), the page's only credential.
    pub id: String,
    kind: PageKind,
}

impl NewPage {
    /// The link the person opens.
    pub fn url(&self) -> String {
        format!("{}?{}={}", self.address, self.kind.1, self.id)
    }
}

/// One process's callback server and the pages it has open.
#[derive(Debug)]
pub struct Callback {
    app: App,
    /// `PLANB_PORT`; 0 for any free port.
    port: u16,
    forms: Arc<Forms>,
    reviews: Arc<Reviews>,
    /// Where it listens, once started.
    address: OnceCell<SocketAddr>,
}

impl Callback {
    /// A server for the asks and reviews of `app`, not started yet.
    pub fn new(app: App, port: u16) -> Callback {
        Callback {
            app,
            port,
            forms: Arc::default(),
            reviews: Arc::default(),
            address: OnceCell::new(),
        }
    }

    /// The question forms it serves, by sid.
    pub fn forms(&self) -> &Forms {
        &self.forms
    }

    /// The review pages it serves, by rid.
    pub fn reviews(&self) -> &Reviews {
        &self.reviews
    }

    /// The port it was asked to listen on (0: any).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Where it listens: started on the first call.
    pub async fn address(&self) -> std::io::Result<SocketAddr> {
        let start = || {
            let forms = Arc::clone(&self.forms);
            let reviews = Arc::clone(&self.reviews);
            server::start(self.app.clone(), forms, reviews, self.port)
        };
        self.address.get_or_try_init(start).await.copied()
    }

    /// A new page of `kind`: the server started if it was not, and a
    /// fresh secret id.
    pub async fn new_page(&self, kind: PageKind) -> Result<NewPage, PageUnavailable> {
        let address = self.page_address(kind).await?;
        let id = new_secret().map_err(|error| PageUnavailable {
            what: kind.2,
            cause: format!("no randomness: {error}"),
        })?;
        Ok(NewPage { address, id, kind })
    }

    /// The link of the page of `kind` registered here as `id`.
    pub async fn page_url(&self, kind: PageKind, id: &str) -> Result<String, PageUnavailable> {
        let address = self.page_address(kind).await?;
        Ok(format!("{address}?{}={id}", kind.1))
    }

    async fn page_address(&self, kind: PageKind) -> Result<String, PageUnavailable> {
        match self.address().await {
            Ok(address) => Ok(format!("http://127.0.0.1:{}/{}", address.port(), kind.0)),
            Err(error) => {
                tracing::error!("callback server: {error}");
                Err(PageUnavailable {
                    what: kind.2,
                    cause: error.to_string(),
                })
            }
        }
    }
}

/// 256 random bits, hex: a page's only credential.
fn new_secret() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
