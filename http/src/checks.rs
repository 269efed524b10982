//! Who may talk to a loopback server: the checks both of planb's servers run
//! on every request before routing it.
//!
//! - [`loopback_host`]: the request names this server, `127.0.0.1:<port>` or
//!   `localhost:<port>`, in exactly one `Host` header and, when the request
//!   line is in absolute form (`GET http://host:port/path`), there too. A page
//!   on another name that resolves to 127.0.0.1 (DNS rebinding) is refused.
//! - [`same_origin`]: a request that changes something comes from this
//!   server's own pages. Browsers send `Origin` on every POST, so a foreign
//!   origin, `Origin: null` (sandboxed frames, `file:` pages) and a
//!   `Sec-Fetch-Site` other than `same-origin`/`none` are refused. A request
//!   with neither header comes from a program on this machine (curl, a test,
//!   a script), which could read the sid anyway; it is served.

use axum::http::{HeaderMap, HeaderName, Uri, header};

/// Why a request was refused, said to whoever sent it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// A header that must come once came more than once.
    #[error("{0}: sent more than once")]
    Repeated(HeaderName),
    /// A header's value is not visible ASCII.
    #[error("{0}: not visible ASCII")]
    NotAscii(HeaderName),
    /// The `Host` header names another server.
    #[error("host {host:?} is not this server; use http://127.0.0.1:{port}")]
    OtherHost {
        /// The host named.
        host: String,
        /// This server's port.
        port: u16,
    },
    /// An absolute request target names another server.
    #[error("request target {target:?} is not this server; use http://127.0.0.1:{port}")]
    OtherTarget {
        /// The authority named.
        target: String,
        /// This server's port.
        port: u16,
    },
    /// A browser said the request comes from another site.
    #[error("a {0} request may not post to this server (sec-fetch-site)")]
    CrossSite(String),
    /// The request's `Origin` is not this server.
    #[error("origin {0:?} may not post to this server")]
    OtherOrigin(String),
}

/// Whether `host` (a `Host` header value or a URI authority) is this loopback
/// server on `port`.
pub fn is_loopback_host(host: &str, port: u16) -> bool {
    host.strip_suffix(port.to_string().as_str())
        .and_then(|h| h.strip_suffix(':'))
        .is_some_and(|h| h == "127.0.0.1" || h == "localhost")
}

/// The one value of header `name`: `Ok(None)` when absent, an error naming
/// the header when it is repeated or not visible ASCII.
fn single<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Result<Option<&'a str>, Refused> {
    let mut values = headers.get_all(name).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(Refused::Repeated(name.clone()));
    }
    first
        .to_str()
        .map(Some)
        .map_err(|_| Refused::NotAscii(name.clone()))
}

/// Refuses a request that does not name this server (see the module docs).
pub fn loopback_host(headers: &HeaderMap, uri: &Uri, port: u16) -> Result<(), Refused> {
    let host = single(headers, &header::HOST)?.unwrap_or("");
    if !is_loopback_host(host, port) {
        let host = host.to_owned();
        return Err(Refused::OtherHost { host, port });
    }
    if let Some(authority) = uri.authority()
        && !is_loopback_host(authority.as_str(), port)
    {
        let target = authority.as_str().to_owned();
        return Err(Refused::OtherTarget { target, port });
    }
    Ok(())
}

/// Refuses a state-changing request from another origin (see the module docs).
pub fn same_origin(headers: &HeaderMap, port: u16) -> Result<(), Refused> {
    const SEC_FETCH_SITE: HeaderName = HeaderName::from_static("sec-fetch-site");
    if let Some(site) = single(headers, &SEC_FETCH_SITE)?
        && !matches!(site, "same-origin" | "none")
    {
        return Err(Refused::CrossSite(site.to_owned()));
    }
    match single(headers, &header::ORIGIN)? {
        None => Ok(()),
        Some(origin)
            if origin
                .strip_prefix("http://")
                .is_some_and(|host| is_loopback_host(host, port)) =>
        {
            Ok(())
        }
        Some(origin) => Err(Refused::OtherOrigin(origin.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn only_the_loopback_host_and_port_are_ours() {
        assert!(is_loopback_host("127.0.0.1:4317", 4317));
        assert!(is_loopback_host("localhost:4317", 4317));
        assert!(!is_loopback_host("127.0.0.1:4318", 4317));
        assert!(!is_loopback_host("evil.example:4317", 4317));
        assert!(!is_loopback_host("x127.0.0.1:4317", 4317));
        assert!(!is_loopback_host("127.0.0.1:14317", 4317));
        assert!(!is_loopback_host("", 4317));
    }

    #[test]
    fn one_host_header_naming_this_server_and_no_other_target() {
        let path: Uri = "/ask".parse().expect("uri");
        assert_eq!(
            loopback_host(&headers(&[("host", "127.0.0.1:80")]), &path, 80),
            Ok(())
        );
        let twice = loopback_host(
            &headers(&[("host", "127.0.0.1:80"), ("host", "evil.example:80")]),
            &path,
            80,
        );
        assert_eq!(twice, Err(Refused::Repeated(header::HOST)));
        assert_eq!(
            twice.expect_err("refused").to_string(),
            "host: sent more than once"
        );
        assert!(loopback_host(&headers(&[]), &path, 80).is_err());
        let absolute: Uri = "http://evil.example:80/ask".parse().expect("uri");
        let error = loopback_host(&headers(&[("host", "127.0.0.1:80")]), &absolute, 80)
            .expect_err("another host in the request line");
        let target = "evil.example:80".to_owned();
        assert_eq!(error, Refused::OtherTarget { target, port: 80 });
        let own: Uri = "http://localhost:80/ask".parse().expect("uri");
        assert_eq!(
            loopback_host(&headers(&[("host", "127.0.0.1:80")]), &own, 80),
            Ok(())
        );
    }

    #[test]
    fn posts_from_this_origin_or_from_no_browser_pass() {
        assert_eq!(same_origin(&headers(&[]), 80), Ok(()));
        assert_eq!(
            same_origin(&headers(&[("origin", "http://127.0.0.1:80")]), 80),
            Ok(())
        );
        assert_eq!(
            same_origin(
                &headers(&[
                    ("origin", "http://localhost:80"),
                    ("sec-fetch-site", "same-origin")
                ]),
                80
            ),
            Ok(())
        );
        for refused in [
            headers(&[("origin", "null")]),
            headers(&[("origin", "http://evil.example")]),
            headers(&[("origin", "https://127.0.0.1:80")]),
            headers(&[("origin", "http://127.0.0.1:81")]),
            headers(&[("sec-fetch-site", "cross-site")]),
            headers(&[("sec-fetch-site", "same-site")]),
            headers(&[
                ("origin", "http://127.0.0.1:80"),
                ("origin", "http://evil.example"),
            ]),
        ] {
            assert!(same_origin(&refused, 80).is_err(), "{refused:?}");
        }
    }
}
