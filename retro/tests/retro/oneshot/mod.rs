//! Requests to planb-retro's router in the test process, as a browser on
//! the loopback port would send them.

#![allow(dead_code, reason = "each test file uses a different part")]

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use tower::ServiceExt;

/// The port the router believes it serves (for the Host check).
pub const PORT: u16 = 4317;

/// GET `path` with this `Host` header: the status and the body.
pub async fn get_with_host(router: &axum::Router, path: &str, host: &str) -> (StatusCode, String) {
    let request = Request::get(path)
        .header("host", host)
        .body(Body::empty())
        .expect("request");
    let response = router.clone().oneshot(request).await.expect("response");
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// GET `path` from the loopback address: the status and the body.
pub async fn get(router: &axum::Router, path: &str) -> (StatusCode, String) {
    get_with_host(router, path, &format!("127.0.0.1:{PORT}")).await
}

/// GETs `path`, asserts the status and that every snippet is in the body,
/// and returns the body.
pub async fn check(
    router: &axum::Router,
    path: &str,
    status: StatusCode,
    snippets: &[&str],
) -> String {
    let (actual, body) = get(router, path).await;
    assert_eq!(actual, status, "GET {path}: {body}");
    for snippet in snippets {
        assert!(
            body.contains(snippet),
            "GET {path}: no {snippet:?} in {body}"
        );
    }
    body
}

/// GETs `path` and returns where it redirects, asserting `303 See Other`.
pub async fn redirect(router: &axum::Router, path: &str) -> String {
    let request = Request::get(path)
        .header("host", format!("127.0.0.1:{PORT}"))
        .body(Body::empty())
        .expect("request");
    let response = router.clone().oneshot(request).await.expect("response");
    assert_eq!(response.status(), StatusCode::SEE_OTHER, "GET {path}");
    response
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .expect("a Location header")
        .to_owned()
}
