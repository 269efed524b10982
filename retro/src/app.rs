//! The HTTP surface: routes, the Host guard, and the one place where a
//! refusal becomes a page. Handlers parse the URL, read the timeline and call
//! a renderer from `planb_ui::pages`; they hold no replay logic.

use std::convert::Infallible;
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures_util::Stream;
use maud::Markup;
use planb_core::dag::StepId;
use planb_core::exec_plan::ExecPlan;
use planb_core::{Cursor, SessionId, TaskId};
use planb_http::checks;
use planb_projections::{DataRoot, TaskAt, Timeline};
use planb_ui::pages::{self, EntriesBeyond, RetroFilter};
use serde::Deserialize;
use tokio::sync::broadcast::error::RecvError;

use crate::{Retro, tasks};

/// What the handlers share.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The replay.
    pub retro: Retro,
    /// The port the server listens on, for the Host check.
    pub port: u16,
}

/// Who may read the replay.
#[derive(Debug, Clone)]
enum Access {
    /// Whoever reaches the loopback port, naming it as the host (a page of
    /// another site cannot, by DNS rebinding): `127.0.0.1` or `localhost`,
    /// or the other loopback address it listens on.
    Loopback(Option<std::net::IpAddr>),
    /// Whoever presents this token: once in the address (`?token=`), which
    /// sets a cookie, or in an `Authorization: Bearer` header.
    Token(std::sync::Arc<str>),
}

/// Shortest token a replay served beyond loopback takes.
pub const TOKEN_CHARS_MIN: usize = 20;
/// The cookie the token is kept in.
const TOKEN_COOKIE: &str = "planb_retro_token";

/// The router; tests call it without a socket.
pub fn app(state: AppState) -> Router {
    router(state, Access::Loopback(None))
}

/// [`app`] listening on the loopback address `ip` (`127.0.0.2` …), which
/// requests may name as their host too.
pub fn app_on(state: AppState, ip: std::net::IpAddr) -> Router {
    router(state, Access::Loopback(Some(ip)))
}

/// The router for a replay served beyond loopback: every request must
/// present `token` (see [`Access::Token`]); the Host check no longer
/// applies.
pub fn app_with_token(state: AppState, token: &str) -> Router {
    router(state, Access::Token(token.into()))
}

fn router(state: AppState, access: Access) -> Router {
    let guarded = (state.clone(), access);
    Router::new()
        .route("/", get(index))
        .route("/events", get(all_events))
        .route("/sessions/{id}", get(session))
        .route("/sessions/{id}/at/{cursor}", get(state_at))
        .route("/sessions/{id}/entries", get(entries))
        .route("/sessions/{id}/events", get(session_events))
        .route("/sessions/{id}/plans/{version}", get(plan))
        .route("/sessions/{id}/plans/{from}/diff/{to}", get(diff))
        .route("/named", get(named))
        .route("/tasks/{id}", get(task))
        .route("/tasks/{id}/steps/{step}", get(step))
        .route("/assets/{*name}", get(asset))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(guarded, guard))
        .with_state(state)
}

/// A refusal, shown as a message page with its status.
#[derive(Debug)]
pub struct PageError {
    status: StatusCode,
    title: &'static str,
    message: String,
}

impl PageError {
    fn new(status: StatusCode, title: &'static str, message: impl Into<String>) -> PageError {
        PageError {
            status,
            title,
            message: message.into(),
        }
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        html(self.status, pages::message_page(self.title, &self.message))
    }
}

/// A page, or the refusal in its place, which also says when the history is
/// incomplete: a session or version missing from the replay may lie past
/// damage in the log.
fn respond(retro: &Retro, page: Result<Response, PageError>) -> Response {
    page.unwrap_or_else(|error| {
        let timeline = retro.timeline();
        html(
            error.status,
            pages::retro_message_page(&timeline, error.title, &error.message),
        )
    })
}

fn html(status: StatusCode, markup: Markup) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        markup.into_string(),
    )
        .into_response()
}

/// Refuses requests naming another host (DNS rebinding), or without the
/// token when one is set, and sets the security headers every response
/// carries, refusals included.
async fn guard(
    State((state, access)): State<(AppState, Access)>,
    request: Request,
    next: Next,
) -> Response {
    let mut response = match &access {
        Access::Loopback(ip) => match checks::loopback_host(request.headers(), request.uri(), state.port) {
            Ok(()) => next.run(request).await,
            Err(_) if names(&request, *ip, state.port) => next.run(request).await,
            Err(problem) => {
                PageError::new(StatusCode::FORBIDDEN, "Wrong host", problem.to_string()).into_response()
            }
        },
        Access::Token(token) => match presented(&request, token) {
            Presented::Kept => next.run(request).await,
            Presented::InAddress => keep_token(&request, token),
            Presented::No => PageError::new(
                StatusCode::UNAUTHORIZED,
                "Token needed",
                "this team replay is served beyond this computer: open the link you were given, which carries ?token=…",
            )
            .into_response(),
        },
    };
    for (name, value) in pages::SECURITY_HEADERS {
        response
            .headers_mut()
            .insert(name, HeaderValue::from_static(value));
    }
    response
}

/// Whether `request` names `ip`:`port` as its host (and as its target's
/// authority when it has one).
fn names(request: &Request, ip: Option<std::net::IpAddr>, port: u16) -> bool {
    let Some(ip) = ip else {
        return false;
    };
    let expected = std::net::SocketAddr::new(ip, port).to_string();
    let mut hosts = request.headers().get_all(header::HOST).iter();
    let host = hosts.next().and_then(|h| h.to_str().ok());
    host == Some(expected.as_str())
        && hosts.next().is_none()
        && request
            .uri()
            .authority()
            .is_none_or(|a| a.as_str() == expected)
}

/// How a request shows the token, if it does.
enum Presented {
    /// In its cookie or `Authorization` header.
    Kept,
    /// In the address: to be moved into the cookie.
    InAddress,
    No,
}

fn presented(request: &Request, token: &str) -> Presented {
    let headers = request.headers();
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let cookie = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().strip_prefix(TOKEN_COOKIE)?.strip_prefix('='))
        .next();
    if [bearer, cookie]
        .into_iter()
        .flatten()
        .any(|given| same(given, token))
    {
        return Presented::Kept;
    }
    let in_address = request
        .uri()
        .query()
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter_map(|pair| pair.strip_prefix("token="))
        .any(|given| same(given, token));
    if in_address {
        Presented::InAddress
    } else {
        Presented::No
    }
}

/// Compares without stopping at the first difference.
fn same(given: &str, token: &str) -> bool {
    given.len() == token.len()
        && given
            .bytes()
            .zip(token.bytes())
            .fold(0u8, |diff, (a, b)| diff | (a ^ b))
            == 0
}

/// Sets the token's cookie and sends the browser to the same address
/// without it, so it leaves the address bar and the history.
fn keep_token(request: &Request, token: &str) -> Response {
    // One leading slash: `//host/` or `/\host/` would send the browser to
    // another site.
    let path = format!("/{}", request.uri().path().trim_start_matches(['/', '\\']));
    let rest: Vec<&str> = request
        .uri()
        .query()
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter(|pair| !pair.starts_with("token="))
        .collect();
    let location = if rest.is_empty() {
        path
    } else {
        format!("{path}?{}", rest.join("&"))
    };
    let cookie = format!("{TOKEN_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict");
    let mut response = (StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

fn session_id(text: &str) -> Result<SessionId, PageError> {
    SessionId::parse(text).map_err(|e| {
        PageError::new(
            StatusCode::BAD_REQUEST,
            "Bad session id",
            format!("session id {text:?} is malformed: {e}"),
        )
    })
}

fn number<T: std::str::FromStr>(field: &str, text: &str) -> Result<T, PageError> {
    text.parse().map_err(|_| {
        PageError::new(
            StatusCode::BAD_REQUEST,
            "Bad address",
            format!("{field}: {text:?} is not a number"),
        )
    })
}

fn unknown_session(id: &SessionId) -> PageError {
    PageError::new(
        StatusCode::NOT_FOUND,
        "Session not found",
        format!("no session {id} in the log"),
    )
}

/// A cursor at or before the end of the log.
fn within_log(retro: &Retro, cursor: u64) -> Result<Cursor, PageError> {
    let last = retro.timeline().last_cursor();
    if cursor > last.0 {
        return Err(PageError::new(
            StatusCode::NOT_FOUND,
            "Beyond the end",
            format!("cursor {cursor} is past the end of the log; the last cursor is {last}"),
        ));
    }
    Ok(Cursor(cursor))
}

#[derive(Debug, Deserialize)]
struct IndexQuery {
    project: Option<String>,
    q: Option<String>,
    member: Option<String>,
}

async fn index(State(state): State<AppState>, Query(query): Query<IndexQuery>) -> Response {
    let problem = match (state.retro.problem(), state.retro.untrusted()) {
        (Some(problem), Some(untrusted)) => Some(format!("{problem} {untrusted}")),
        (problem, untrusted) => problem.or(untrusted),
    };
    let timeline = state.retro.timeline();
    if timeline.is_empty()
        && let Some(problem) = &problem
    {
        return html(
            StatusCode::OK,
            pages::message_page("Nothing to replay yet", problem),
        );
    }
    let filter = RetroFilter {
        project: query.project.as_deref().filter(|p| !p.is_empty()),
        query: query.q.as_deref().map(str::trim).filter(|q| !q.is_empty()),
        member: query.member.as_deref().filter(|m| !m.is_empty()),
    };
    let team = team_line(state.retro.root());
    let members = state.retro.members();
    let member_of = |session: &planb_core::SessionId| members.as_deref()?.of_session(session);
    let task_member_of = |task: &TaskId| members.as_deref()?.of_task(task);
    let team_index = members.as_deref().map(|m| pages::TeamIndex {
        origins: m
            .origins
            .values()
            .map(|o| (o.member.as_str(), o.host.as_str(), o.events))
            .collect(),
        member_of: &member_of,
        task_member_of: &task_member_of,
    });
    html(
        StatusCode::OK,
        pages::retro_index_page(
            &timeline,
            filter,
            problem.as_deref(),
            team.as_ref(),
            team_index.as_ref(),
        ),
    )
}

/// What the data root's team shipper last said, when one has run.
fn team_line(root: &planb_projections::DataRoot) -> Option<pages::TeamLine> {
    let status = match planb_projections::read_team_status(root) {
        Ok(status) => status?,
        Err(error) => {
            return Some(pages::TeamLine {
                text: format!("Team database: the shipper's status cannot be read ({error})"),
                failing: true,
            });
        }
    };
    let behind = status.log_end.saturating_sub(status.shipped_to);
    let text = match (&status.last_error, status.last_error_at) {
        (Some(error), Some(at)) => format!(
            "Team database {}: not shipping since {} ({} event(s) behind{}): {error}",
            status.database,
            at.to_iso8601(),
            behind,
            if status.halted {
                ", halted until a person acts"
            } else {
                ""
            }
        ),
        _ => format!(
            "Team database {}: shipped as {} to cursor {}{}",
            status.database,
            status.member,
            status.shipped_to,
            status
                .updated_at
                .map(|at| format!(" (as of {})", at.to_iso8601()))
                .unwrap_or_default()
        ),
    };
    Some(pages::TeamLine {
        text,
        failing: status.last_error.is_some(),
    })
}

#[derive(Debug, Deserialize)]
struct AtQuery {
    at: Option<String>,
    /// On a task's page: the position of one of the task's events (0 for
    /// its first), which the page redirects to the cursor of; the scrubber
    /// moves by position, so the page need not carry every cursor.
    pos: Option<String>,
}

async fn session(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<AtQuery>,
) -> Response {
    respond(&state.retro, session_page(&state, &id, &query))
}

fn session_page(state: &AppState, id: &str, query: &AtQuery) -> Result<Response, PageError> {
    let id = session_id(id)?;
    let at = match query.at.as_deref() {
        Some(at) => Some(within_log(&state.retro, number("at", at)?)?),
        None => None,
    };
    let timeline = state.retro.timeline();
    let at = at.unwrap_or_else(|| timeline.last_cursor());
    let page = pages::retro_session_page(&timeline, state.retro.entries(), &id, at)
        .ok_or_else(|| unknown_session(&id))?;
    Ok(html(StatusCode::OK, page))
}

/// Which named plan: its plans directory and name.
#[derive(Debug, Deserialize)]
struct NamedQuery {
    dir: Option<String>,
    name: Option<String>,
}

async fn named(State(state): State<AppState>, Query(query): Query<NamedQuery>) -> Response {
    respond(&state.retro, named_page(&state, &query))
}

fn named_page(state: &AppState, query: &NamedQuery) -> Result<Response, PageError> {
    let bad = |message: String| PageError::new(StatusCode::BAD_REQUEST, "Bad address", message);
    let name = query
        .name
        .as_deref()
        .ok_or_else(|| bad("name: missing (the named plan's name)".into()))?;
    let name = planb_core::PlanName::parse_recorded(name).map_err(|e| bad(format!("name: {e}")))?;
    let key = planb_core::PlanKey::new(query.dir.clone().unwrap_or_default(), name);
    let timeline = state.retro.timeline();
    let page =
        pages::retro_named_page(&timeline, state.retro.entries(), &key).ok_or_else(|| {
            PageError::new(
                StatusCode::NOT_FOUND,
                "Named plan not found",
                format!("no named plan {} in {:?} in the log", key.name, key.dir),
            )
        })?;
    Ok(html(StatusCode::OK, page))
}

async fn state_at(
    State(state): State<AppState>,
    Path((id, cursor)): Path<(String, String)>,
) -> Response {
    respond(&state.retro, state_fragment(&state, &id, &cursor))
}

fn state_fragment(state: &AppState, id: &str, cursor: &str) -> Result<Response, PageError> {
    let id = session_id(id)?;
    let at = within_log(&state.retro, number("cursor", cursor)?)?;
    let timeline = state.retro.timeline();
    if timeline.state().session(&id).is_none() {
        return Err(unknown_session(&id));
    }
    Ok(html(
        StatusCode::OK,
        pages::retro_state_fragment(&timeline, &id, at),
    ))
}

#[derive(Debug, Deserialize)]
struct EntriesQuery {
    before: Option<String>,
    after: Option<String>,
}

/// The timeline entries just before or after a cursor, for "Show earlier"
/// and "Show later".
async fn entries(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<EntriesQuery>,
) -> Response {
    respond(&state.retro, entries_fragment(&state, &id, &query))
}

fn entries_fragment(
    state: &AppState,
    id: &str,
    query: &EntriesQuery,
) -> Result<Response, PageError> {
    let id = session_id(id)?;
    let beyond = match (query.before.as_deref(), query.after.as_deref()) {
        (Some(before), None) => EntriesBeyond::Before(Cursor(number("before", before)?)),
        (None, Some(after)) => EntriesBeyond::After(Cursor(number("after", after)?)),
        _ => {
            return Err(PageError::new(
                StatusCode::BAD_REQUEST,
                "Bad address",
                "before, after: give exactly one",
            ));
        }
    };
    let timeline = state.retro.timeline();
    if timeline.state().session(&id).is_none() {
        return Err(unknown_session(&id));
    }
    Ok(html(
        StatusCode::OK,
        pages::retro_entries_fragment(&timeline, state.retro.entries(), &id, beyond),
    ))
}

async fn plan(
    State(state): State<AppState>,
    Path((id, version)): Path<(String, String)>,
) -> Response {
    respond(&state.retro, plan_page(&state, &id, &version))
}

fn plan_page(state: &AppState, id: &str, version: &str) -> Result<Response, PageError> {
    let id = session_id(id)?;
    let version: u32 = number("version", version)?;
    let timeline = state.retro.timeline();
    if timeline.state().session(&id).is_none() {
        return Err(unknown_session(&id));
    }
    let page = pages::retro_plan_page(&timeline, &id, version).ok_or_else(|| {
        PageError::new(
            StatusCode::NOT_FOUND,
            "Plan version not found",
            format!("session {id} has no plan version {version}"),
        )
    })?;
    Ok(html(StatusCode::OK, page))
}

async fn diff(
    State(state): State<AppState>,
    Path((id, from, to)): Path<(String, String, String)>,
) -> Response {
    respond(&state.retro, diff_page(&state, &id, &from, &to))
}

fn diff_page(state: &AppState, id: &str, from: &str, to: &str) -> Result<Response, PageError> {
    let id = session_id(id)?;
    let from: u32 = number("from", from)?;
    let to: u32 = number("to", to)?;
    let timeline = state.retro.timeline();
    if timeline.state().session(&id).is_none() {
        return Err(unknown_session(&id));
    }
    let page = pages::retro_diff_page(&timeline, &id, from, to).ok_or_else(|| {
        PageError::new(
            StatusCode::NOT_FOUND,
            "Plan version not found",
            format!("session {id} has no plan version {from} or {to}"),
        )
    })?;
    Ok(html(StatusCode::OK, page))
}

#[derive(Debug, Deserialize)]
struct AfterQuery {
    after: Option<String>,
}

/// New timeline entries of one session as `entry` events carrying
/// `{cursor, html}`, starting with any after `?after=`.
async fn session_events(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<AfterQuery>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, PageError> {
    let id = session_id(&id)?;
    let after = match query.after.as_deref() {
        Some(after) => Cursor(number("after", after)?),
        None => state.retro.timeline().last_cursor(),
    };
    // Subscribe before the first look, so nothing appended in between is missed.
    let receiver = state.retro.subscribe();
    let retro = state.retro.clone();
    let pending: std::collections::VecDeque<Event> = std::collections::VecDeque::new();
    let stream = futures_util::stream::unfold(
        (retro, receiver, after, pending),
        move |(retro, mut receiver, mut after, mut pending)| async move {
            loop {
                if let Some(event) = pending.pop_front() {
                    return Some((Ok(event), (retro, receiver, after, pending)));
                }
                let entries =
                    pages::retro_entries_after(&retro.timeline(), retro.entries(), &id, after);
                if let Some((last, _)) = entries.last() {
                    after = *last;
                    for (cursor, html) in entries {
                        let data = serde_json::json!({ "cursor": cursor.0, "html": html });
                        pending.push_back(Event::default().event("entry").data(data.to_string()));
                    }
                    continue;
                }
                match receiver.recv().await {
                    Ok(_) | Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => return None,
                }
            }
        },
    );
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

/// `append` events carrying the new last cursor, whenever the log grows.
async fn all_events(
    State(state): State<AppState>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let receiver = state.retro.subscribe();
    let stream = futures_util::stream::unfold(receiver, |mut receiver| async move {
        loop {
            match receiver.recv().await {
                Ok(cursor) => {
                    let event = Event::default().event("append").data(cursor.to_string());
                    return Some((Ok(event), receiver));
                }
                Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return None,
            }
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

fn task_id(text: &str) -> Result<TaskId, PageError> {
    TaskId::parse(text).map_err(|e| {
        PageError::new(
            StatusCode::BAD_REQUEST,
            "Bad task id",
            format!("task id {text:?} is malformed: {e}"),
        )
    })
}

fn unknown_task(id: &TaskId) -> PageError {
    PageError::new(
        StatusCode::NOT_FOUND,
        "Task not found",
        format!("no task {id} in the log"),
    )
}

/// The cursor a task page shows: `?at=`, or the end of the log.
fn task_cursor(state: &AppState, query: &AtQuery) -> Result<Cursor, PageError> {
    match query.at.as_deref() {
        Some(at) => within_log(&state.retro, number("at", at)?),
        None => Ok(state.retro.timeline().last_cursor()),
    }
}

async fn task(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<AtQuery>,
) -> Response {
    off_the_runtime(state, move |state| task_page(state, &id, &query)).await
}

/// Renders a page that reads files (blobs, pipeline files) on the blocking
/// pool, with the usual refusal page in its place.
async fn off_the_runtime(
    state: AppState,
    render: impl FnOnce(&AppState) -> Result<Response, PageError> + Send + 'static,
) -> Response {
    let page = tokio::task::spawn_blocking(move || respond(&state.retro, render(&state)));
    match page.await {
        Ok(page) => page,
        Err(error) => PageError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Page failed",
            error.to_string(),
        )
        .into_response(),
    }
}

fn task_page(state: &AppState, id: &str, query: &AtQuery) -> Result<Response, PageError> {
    let id = task_id(id)?;
    let cursor = task_cursor(state, query)?;
    let timeline = state.retro.timeline();
    let cursors = timeline.task_cursors(&id);
    if cursors.is_empty() {
        return Err(unknown_task(&id));
    }
    if let Some(pos) = query.pos.as_deref() {
        let pos: usize = number("pos", pos)?;
        let cursor = cursors[pos.min(cursors.len() - 1)];
        return Ok((
            StatusCode::SEE_OTHER,
            [(header::LOCATION, format!("/tasks/{id}?at={cursor}"))],
        )
            .into_response());
    }
    // Before the task existed, show it as it was created.
    let cursor = cursor.max(cursors[0]);
    let at = timeline
        .task_at(&id, cursor)
        .ok_or_else(|| unknown_task(&id))?;
    let root = state.retro.root();
    let plan = state.retro.plan(&at.task);
    let resolved;
    let steps = match &plan {
        Some(plan) => pages::Steps::Plan(plan.as_ref().as_ref().map_err(|e| e as _)),
        None => {
            resolved = planb_projections::pipelines::resolve(root, &at.task.pipeline);
            pages::Steps::Pipeline(resolved.as_ref().map_err(|e| e as _))
        }
    };
    let out_of_date = match steps {
        pages::Steps::Pipeline(Ok(pipeline)) => tasks::out_of_date(pipeline, &at.task),
        _ => Default::default(),
    };
    let revisions = revisions_of(state, &timeline, id);
    let view = pages::TaskView {
        at: &at,
        steps,
        out_of_date: &out_of_date,
        cursors: &cursors,
        cursor,
        revisions: &revisions,
    };
    Ok(html(
        StatusCode::OK,
        pages::retro_task_page(&timeline, &view),
    ))
}

/// The revised plans made of plan `id`'s failed runs, as the log holds
/// them now, oldest first.
fn revisions_of(state: &AppState, timeline: &Timeline, id: TaskId) -> Vec<pages::RevisionLink> {
    let text = id.to_string();
    let mut found: Vec<(pages::RevisionLink, planb_core::Timestamp)> = timeline
        .state()
        .exec_plans()
        .filter(|t| {
            t.plan.as_ref().is_some_and(|p| {
                p.definition.contains("\"revises\"") && p.definition.contains(&text)
            })
        })
        .filter_map(|task| {
            let plan = state.retro.plan(task)?;
            let revises = plan.as_ref().as_ref().ok()?.revises.clone()?;
            (revises.plan == text).then(|| {
                let link = pages::RevisionLink {
                    plan: task.id,
                    number: revises.number,
                    step: revises.step,
                    error: revises.error,
                    state: task.runs.last().map_or("not run", |r| r.state.as_str()),
                };
                (link, task.created_at)
            })
        })
        .collect();
    found.sort_by_key(|(link, created)| (*created, link.number));
    found.into_iter().map(|(link, _)| link).collect()
}

async fn step(
    State(state): State<AppState>,
    Path((id, step)): Path<(String, String)>,
    Query(query): Query<AtQuery>,
) -> Response {
    off_the_runtime(state, move |state| step_page(state, &id, &step, &query)).await
}

fn step_page(
    state: &AppState,
    id: &str,
    step: &str,
    query: &AtQuery,
) -> Result<Response, PageError> {
    let id = task_id(id)?;
    let cursor = task_cursor(state, query)?;
    let timeline = state.retro.timeline();
    let at = timeline
        .task_at(&id, cursor)
        .ok_or_else(|| unknown_task(&id))?;
    let root = state.retro.root();
    if let Some(plan) = state.retro.plan(&at.task) {
        let plan = plan.as_ref().as_ref().map_err(|problem| {
            PageError::new(
                StatusCode::NOT_FOUND,
                "Plan not readable",
                format!("plan {id}: {problem}"),
            )
        })?;
        return plan_step_page(&timeline, root, &at, plan, step, cursor);
    }
    let pipeline =
        planb_projections::pipelines::resolve(root, &at.task.pipeline).map_err(|problem| {
            PageError::new(
                StatusCode::NOT_FOUND,
                "Pipeline not readable",
                format!("pipeline {} of task {id}: {problem}", at.task.pipeline),
            )
        })?;
    let def = StepId::parse(step)
        .ok()
        .and_then(|s| pipeline.step(&s))
        .ok_or_else(|| {
            PageError::new(
                StatusCode::NOT_FOUND,
                "Step not found",
                format!("step {step:?} is not in pipeline {}", pipeline.name()),
            )
        })?;
    let view = pages::StepView {
        prompt: tasks::prompt(&timeline, root, &pipeline, &at, def),
        versions: tasks::versions(root, &at, &def.id),
        at: &at,
        step: def,
        cursor,
    };
    Ok(html(
        StatusCode::OK,
        pages::retro_step_page(&timeline, &view),
    ))
}

/// The page of a plan's step `step` (its index), with its latest calls.
fn plan_step_page(
    timeline: &Timeline,
    root: &DataRoot,
    at: &TaskAt<'_>,
    plan: &ExecPlan,
    step: &str,
    cursor: Cursor,
) -> Result<Response, PageError> {
    let position = plan.position(step).ok_or_else(|| {
        PageError::new(
            StatusCode::NOT_FOUND,
            "Step not found",
            format!("step {step:?} is not in plan {}", at.task.id),
        )
    })?;
    let (calls, earlier) = tasks::plan_calls(root, at, step);
    let view = pages::PlanStepView {
        calls,
        earlier,
        at,
        plan_title: &plan.title,
        step: &plan.steps[position],
        needs: plan
            .needs(position)
            .iter()
            .map(|&n| plan.steps[n].index.as_str())
            .collect(),
        cursor,
    };
    Ok(html(
        StatusCode::OK,
        pages::retro_plan_step_page(timeline, &view),
    ))
}

async fn asset(Path(name): Path<String>) -> Response {
    match pages::asset(&name) {
        Some(asset) => ([(header::CONTENT_TYPE, asset.content_type)], asset.bytes).into_response(),
        None => not_found().await,
    }
}

async fn not_found() -> Response {
    PageError::new(
        StatusCode::NOT_FOUND,
        "Not found",
        "there is no page at this address",
    )
    .into_response()
}
