//! The local callback server the forms talk to: `GET /ask`, `GET /spec`,
//! `POST /draft`, `POST /submit`, `GET /assets/…`.
//!
//! It binds 127.0.0.1 only and trusts nothing: every request must name the
//! loopback host and port (DNS rebinding), every state-changing request must come
//! from the form's own origin, bodies are capped, and every submission is
//! validated against its spec before anything is recorded. The sid in the URL is
//! the only credential: 256 random bits, one form each. Requests must arrive
//! within `planb_http`'s timeouts and connections are capped, so half-sent
//! requests cannot hold sockets until the process runs out of descriptors.

#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use planb_core::AnswerErrors;
use planb_http::{Limits, checks};

use planb_app::App;
use planb_ui::pages;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::registry::{FormInfo, Forms, ReviewOutcome, Reviews};

/// Largest request body accepted: 20 long answers of 100 000 characters fit.
pub const BODY_BYTES_MAX: usize = 8 << 20;

/// What the handlers share.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The write path.
    pub app: App,
    /// Open forms by sid.
    pub forms: Arc<Forms>,
    /// Open review pages by rid.
    pub reviews: Arc<Reviews>,
    /// The port the server listens on (for Host and Origin checks).
    pub port: u16,
}

/// The router; tests call it without a socket.
pub fn routes(state: AppState) -> Router {
    Router::new()
        .route("/ask", get(ask_page))
        .route("/spec", get(spec))
        .route("/draft", post(draft))
        .route("/submit", post(submit))
        .route("/review", get(review_page).post(review))
        .route("/assets/{*name}", get(asset))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(BODY_BYTES_MAX))
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state)
}

/// Binds the callback server on 127.0.0.1:`port` (0 = ephemeral) and serves it
/// in the background within [`Limits::DEFAULT`]. Returns the bound address.
pub async fn start(
    app: App,
    forms: Arc<Forms>,
    reviews: Arc<Reviews>,
    port: u16,
) -> std::io::Result<SocketAddr> {
    start_with(app, forms, reviews, port, Limits::DEFAULT).await
}

/// [`start`] within other limits (tests use short timeouts).
pub async fn start_with(
    app: App,
    forms: Arc<Forms>,
    reviews: Arc<Reviews>,
    port: u16,
    limits: Limits,
) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("cannot listen on 127.0.0.1:{port} (PLANB_PORT): {e}"),
            )
        })?;
    let address = listener.local_addr()?;
    let router = routes(AppState {
        app,
        forms,
        reviews,
        port: address.port(),
    });
    tokio::spawn(planb_http::serve(listener, router, limits));
    Ok(address)
}

/// A refusal: an HTTP status and a message, sent as `{"error": message}`. The one
/// place where errors become responses.
#[derive(Debug)]
struct ApiError {
    status: StatusCode,
    message: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(json!({ "error": self.message }))).into_response()
    }
}

fn refuse(status: StatusCode, message: impl Into<String>) -> ApiError {
    ApiError {
        status,
        message: message.into(),
    }
}

fn json_error(status: StatusCode, message: impl Into<String>) -> Response {
    refuse(status, message).into_response()
}

/// Refuses requests for another host (DNS rebinding) and state-changing
/// requests from another origin (cross-site form posts); every response,
/// refusals included, carries the security headers.
async fn guard(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let port = state.port;
    let mut checked = checks::loopback_host(request.headers(), request.uri(), port);
    if checked.is_ok() && request.method() != Method::GET && request.method() != Method::HEAD {
        checked = checks::same_origin(request.headers(), port);
    }
    let mut response = match checked {
        Ok(()) => next.run(request).await,
        Err(problem) => json_error(StatusCode::FORBIDDEN, problem.to_string()),
    };
    for (name, value) in pages::SECURITY_HEADERS {
        response
            .headers_mut()
            .insert(name, HeaderValue::from_static(value));
    }
    response
}

#[derive(Debug, Deserialize)]
struct SidQuery {
    sid: Option<String>,
}

/// The form behind a sid: one this process opened, or a pending ask in the
/// log whose form another (perhaps gone) process opened, adopted here.
async fn lookup(state: &AppState, sid: &str) -> Option<(FormInfo, bool)> {
    if let Some(found) = state.forms.get(sid) {
        return Some(found);
    }
    let (ask, spec) = state.app.asks().answerable(sid).await?;
    let form = FormInfo {
        ask,
        spec: Arc::new(spec),
    };
    state.forms.adopt(sid.to_owned(), form.clone());
    Some((form, false))
}

/// The form behind a sid, or the response to send instead.
async fn form_for(state: &AppState, sid: Option<&str>) -> Result<(String, FormInfo), ApiError> {
    let Some(sid) = sid.filter(|s| !s.is_empty()) else {
        return Err(refuse(StatusCode::BAD_REQUEST, "sid: required"));
    };
    match lookup(state, sid).await {
        None => Err(refuse(
            StatusCode::NOT_FOUND,
            "unknown form: the link is wrong, or the ask has ended",
        )),
        Some((_, true)) => Err(refuse(
            StatusCode::NOT_FOUND,
            "this form was already answered",
        )),
        Some((form, false)) => Ok((sid.to_string(), form)),
    }
}

fn html(status: StatusCode, markup: maud::Markup) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        markup.into_string(),
    )
        .into_response()
}

async fn ask_page(State(state): State<AppState>, Query(query): Query<SidQuery>) -> Response {
    let sid = query.sid.as_deref();
    let found = match sid {
        Some(sid) => lookup(&state, sid).await,
        None => None,
    };
    let (form, finished) = match found {
        Some(found) => found,
        None => {
            return html(
                StatusCode::NOT_FOUND,
                pages::message_page(
                    "Form not found",
                    "This link does not match an open form. The link may be incomplete, or the question has ended; ask the agent to ask again (it can collect an earlier question with its askId).",
                ),
            );
        }
    };
    if finished {
        return html(
            StatusCode::NOT_FOUND,
            pages::message_page(
                "Already answered",
                "This form was already submitted. Your answers were recorded; you can close this tab.",
            ),
        );
    }
    let ask = form.ask;
    let draft = state
        .app
        .store()
        .read(move |s| s.ask(&ask).and_then(|a| a.draft.clone()))
        .await
        .ok()
        .flatten();
    html(
        StatusCode::OK,
        pages::form_page(&form.spec, sid.unwrap_or_default(), draft.as_ref()),
    )
}

async fn spec(State(state): State<AppState>, Query(query): Query<SidQuery>) -> Response {
    match form_for(&state, query.sid.as_deref()).await {
        Ok((_, form)) => axum::Json(form.spec.to_json()).into_response(),
        Err(error) => error.into_response(),
    }
}

/// A `{sid, answers}` body, parsed by hand so errors name the field.
/// The request body as a JSON object; `shape` names the fields expected, for
/// the error message.
fn json_object(
    headers: &HeaderMap,
    body: &Bytes,
    shape: &str,
) -> Result<serde_json::Map<String, Value>, ApiError> {
    // The media type before any parameters: `application/json;
    // charset=utf-8` is JSON, `application/jsonp` is not.
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|c| c.to_str().ok())
        .and_then(|c| c.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"));
    if !is_json {
        return Err(refuse(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "body: must be application/json",
        ));
    }
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| refuse(StatusCode::BAD_REQUEST, format!("body: invalid JSON: {e}")))?;
    match value {
        Value::Object(object) => Ok(object),
        _ => Err(refuse(
            StatusCode::BAD_REQUEST,
            format!("body: must be an object {shape}"),
        )),
    }
}

fn parse_body(headers: &HeaderMap, body: &Bytes) -> Result<(String, Value), ApiError> {
    let mut object = json_object(headers, body, "{sid, answers}")?;
    let sid = match object.remove("sid") {
        Some(Value::String(sid)) => sid,
        _ => return Err(refuse(StatusCode::BAD_REQUEST, "sid: must be a string")),
    };
    let answers = object.remove("answers").unwrap_or(Value::Null);
    if let Some(key) = object.keys().next() {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            format!(
                "{}: unknown field (expected sid, answers)",
                planb_core::text::clip(key, 100)
            ),
        ));
    }
    Ok((sid, answers))
}

fn answer_errors(errors: &AnswerErrors) -> Response {
    let by_question: serde_json::Map<String, Value> = errors
        .questions
        .iter()
        .map(|(id, message)| (id.clone(), Value::String(message.clone())))
        .collect();
    (
        StatusCode::UNPROCESSABLE_ENTITY,
        axum::Json(json!({ "errors": by_question, "general": errors.general })),
    )
        .into_response()
}

/// A failure to record: a refusal is the page's to show with `refused`;
/// anything else is ours (planb-app has logged it).
fn record_failure(error: planb_app::Error, refused: StatusCode) -> Response {
    let status = match error.code {
        planb_app::ErrorCode::InternalError => StatusCode::INTERNAL_SERVER_ERROR,
        _ => refused,
    };
    json_error(status, error.message)
}

async fn draft(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let (sid, answers) = match parse_body(&headers, &body) {
        Ok(parsed) => parsed,
        Err(error) => return error.into_response(),
    };
    let form = match form_for(&state, Some(&sid)).await {
        Ok((_, form)) => form,
        Err(error) => return error.into_response(),
    };
    let answers = match form.spec.validate_draft(&answers) {
        Ok(answers) => answers,
        Err(errors) => return answer_errors(&errors),
    };
    match state.app.asks().save_draft(form.ask, answers).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(error) => record_failure(error, StatusCode::CONFLICT),
    }
}

async fn submit(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let (sid, answers) = match parse_body(&headers, &body) {
        Ok(parsed) => parsed,
        Err(error) => return error.into_response(),
    };
    let form = match form_for(&state, Some(&sid)).await {
        Ok((_, form)) => form,
        Err(error) => return error.into_response(),
    };
    let answers = match form.spec.validate_answers(&answers) {
        Ok(answers) => answers,
        Err(errors) => return answer_errors(&errors),
    };
    let asks = state.app.asks();
    match asks.submit(form.ask, answers.clone()).await {
        Ok(true) => {
            // The tool may have stopped waiting a moment ago; the answer is
            // in the log either way.
            state.forms.finish(&sid, answers);
            axum::Json(json!({ "status": "answered" })).into_response()
        }
        Ok(false) => {
            // A tool collecting this ask (`ask_user {askId}`) waits for it.
            state.forms.finish(&sid, answers);
            axum::Json(json!({ "status": "late" })).into_response()
        }
        Err(error) if error.details["already_answered"] == true => {
            state.forms.close(&sid);
            json_error(StatusCode::NOT_FOUND, "this form was already answered")
        }
        Err(error) => record_failure(error, StatusCode::CONFLICT),
    }
}

#[derive(Debug, Deserialize)]
struct RidQuery {
    rid: Option<String>,
}

async fn review_page(State(state): State<AppState>, Query(query): Query<RidQuery>) -> Response {
    let rid = query.rid.unwrap_or_default();
    match state.reviews.get(&rid) {
        None => html(
            StatusCode::NOT_FOUND,
            pages::message_page(
                "Review not found",
                "This link does not match an open review. The planb server that opened it may have restarted; ask the agent to submit the plan again.",
            ),
        ),
        Some((_, true)) => html(
            StatusCode::NOT_FOUND,
            pages::message_page(
                "Already reviewed",
                "This review was already sent to the agent. You can close this tab.",
            ),
        ),
        Some((info, false)) => html(
            StatusCode::OK,
            pages::review_page(&pages::ReviewView {
                plan_name: info.plan.name.as_str(),
                round: info.round,
                content: &info.content,
                previous: info.previous.as_deref(),
                rid: &rid,
                plan_path: &info.path,
            }),
        ),
    }
}

/// Parses `{rid, verdict, feedback?, comments?}`, naming the field at fault.
fn parse_review(headers: &HeaderMap, body: &Bytes) -> Result<(String, ReviewOutcome), ApiError> {
    let object = json_object(headers, body, "{rid, verdict, feedback?, comments?}")?;
    let unprocessable = |m: String| refuse(StatusCode::UNPROCESSABLE_ENTITY, m);
    let mut rid = None;
    let mut verdict = None;
    let mut feedback = None;
    let mut comments = Vec::new();
    for (key, value) in object {
        match (key.as_str(), value) {
            ("rid", Value::String(r)) => rid = Some(r),
            ("verdict", Value::String(v)) if v == "approve" => {
                verdict = Some(planb_core::Verdict::Approved)
            }
            ("verdict", Value::String(v)) if v == "changes" => {
                verdict = Some(planb_core::Verdict::ChangesRequested)
            }
            ("verdict", _) => {
                return Err(unprocessable(
                    "verdict: must be \"approve\" or \"changes\"".into(),
                ));
            }
            ("feedback", Value::String(f)) => feedback = Some(f).filter(|f| !f.trim().is_empty()),
            ("feedback", Value::Null) => {}
            ("comments", Value::Array(items)) => {
                for (i, item) in items.into_iter().enumerate() {
                    let quote = item.get("quote").and_then(Value::as_str);
                    let text = item.get("text").and_then(Value::as_str);
                    match (quote, text) {
                        (Some(quote), Some(text)) => comments.push(planb_core::ReviewComment {
                            quote: quote.to_string(),
                            text: text.to_string(),
                        }),
                        _ => {
                            return Err(unprocessable(format!(
                                "comments[{i}]: must be {{quote, text}} strings"
                            )));
                        }
                    }
                }
            }
            (other, _) => return Err(unprocessable(format!("{other}: unexpected field or type"))),
        }
    }
    let rid = rid.ok_or_else(|| refuse(StatusCode::BAD_REQUEST, "rid: must be a string"))?;
    let verdict = verdict.ok_or_else(|| unprocessable("verdict: required".into()))?;
    if verdict == planb_core::Verdict::ChangesRequested && feedback.is_none() && comments.is_empty()
    {
        return Err(unprocessable(
            "feedback: say what should change, or add a comment".into(),
        ));
    }
    Ok((
        rid,
        ReviewOutcome {
            verdict,
            feedback,
            comments,
        },
    ))
}

async fn review(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let (rid, outcome) = match parse_review(&headers, &body) {
        Ok(parsed) => parsed,
        Err(error) => return error.into_response(),
    };
    let info = match state.reviews.get(&rid) {
        None => {
            return json_error(
                StatusCode::NOT_FOUND,
                "unknown review: the server that opened it may have restarted",
            );
        }
        Some((_, true)) => {
            return json_error(StatusCode::NOT_FOUND, "this review was already sent");
        }
        Some((info, false)) => info,
    };
    let plans = state.app.named(PathBuf::from(&info.plan.dir));
    let channel = planb_core::ReviewChannel::Browser;
    match plans
        .record(&info.plan, info.round, &outcome, channel)
        .await
    {
        Ok(()) => {
            state.reviews.finish(&rid, outcome);
            axum::Json(json!({ "status": "recorded" })).into_response()
        }
        Err(error) if error.details["already_reviewed"] == true => {
            state.reviews.close(&rid);
            json_error(StatusCode::NOT_FOUND, "this review was already sent")
        }
        Err(error) => record_failure(error, StatusCode::UNPROCESSABLE_ENTITY),
    }
}

async fn asset(Path(name): Path<String>) -> Response {
    match pages::asset(&name) {
        Some(asset) => (
            [
                (header::CONTENT_TYPE, asset.content_type),
                (header::CACHE_CONTROL, "no-store"),
            ],
            asset.bytes,
        )
            .into_response(),
        None => json_error(StatusCode::NOT_FOUND, format!("no asset {name:?}")),
    }
}

async fn not_found() -> Response {
    json_error(StatusCode::NOT_FOUND, "not found")
}
