//! The one outgoing HTTP client of a process: reqwest over rustls (ring),
//! trusting the system's roots (`SSL_CERT_FILE` / `SSL_CERT_DIR` name
//! others). Model servers and streamable HTTP downstream servers share it,
//! so its connection pool and the roots read from disk are reused.

use std::sync::OnceLock;
use std::time::Duration;

/// How long a TCP + TLS connection may take before the attempt fails.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Why the process's client could not be built (for example, no usable
/// root certificates): the error with its causes.
#[derive(Clone, Debug, thiserror::Error)]
#[error("cannot set up HTTPS: {causes}")]
pub struct NoClient {
    /// The builder's error and its causes, as [`chain`] says them.
    pub causes: String,
}

/// The process's client, built on first use.
pub fn client() -> Result<reqwest::Client, NoClient> {
    static CLIENT: OnceLock<Result<reqwest::Client, NoClient>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            // Another part of the process may have installed one first;
            // either is fine.
            let _ = rustls::crypto::ring::default_provider().install_default();
            reqwest::Client::builder()
                .connect_timeout(CONNECT_TIMEOUT)
                .user_agent(concat!("planb/", env!("CARGO_PKG_VERSION")))
                .build()
                .map_err(|e| NoClient { causes: chain(&e) })
        })
        .clone()
}

/// An error with its causes, outermost first, each said once, and a hint
/// when the cause is a certificate the system does not trust.
pub fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut next = cause(error);
    while let Some(error) = next {
        let said = error.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        next = cause(error);
    }
    if text.contains("invalid peer certificate") {
        text.push_str(
            " (the system does not trust this server's certificate; \
             SSL_CERT_FILE or SSL_CERT_DIR can name the authority that does)",
        );
    }
    text
}

/// What caused `error`. Two of rmcp's errors hold their cause without
/// naming it as their source (a failed initialize holds the transport's
/// error; the streamable HTTP client's holds reqwest's); they are followed
/// all the same.
fn cause<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> Option<&'a (dyn std::error::Error + 'static)> {
    use rmcp::service::ClientInitializeError;
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    if let Some(ClientInitializeError::TransportError { error, .. }) = error.downcast_ref() {
        return Some(error);
    }
    if let Some(StreamableHttpError::Client(inner)) =
        error.downcast_ref::<StreamableHttpError<reqwest::Error>>()
    {
        return Some(inner);
    }
    error.source()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn causes_are_said_once_each_with_a_hint_for_certificates() {
        let error = Outer(std::io::Error::other(
            "invalid peer certificate: UnknownIssuer",
        ));
        let text = chain(&error);
        assert!(
            text.starts_with("outer: invalid peer certificate: UnknownIssuer (the system"),
            "{text}"
        );
        let plain = Outer(std::io::Error::other("outer"));
        assert_eq!(chain(&plain), "outer");
    }
}
