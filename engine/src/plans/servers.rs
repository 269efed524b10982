//! Downstream MCP servers: the servers file and the connections to them.
//!
//! The file is the one MCP clients already use:
//!
//! ```json
//! {"mcpServers": {"fs": {"command": "fs-server", "args": ["/tmp"], "env": {"K": "v"}},
//!                 "web": {"url": "http://127.0.0.1:9000/mcp",
//!                         "headers": {"Authorization": "Bearer ${WEB_TOKEN}"}}}}
//! ```
//!
//! A `url` server speaks streamable HTTP; `headers` go with every request,
//! each `${NAME}` in a value replaced by that environment variable. `type`
//! (`stdio`, `http`, `streamable-http`) may say which kind an entry is, as
//! other clients' files do; the older SSE transport (`"type": "sse"`) is
//! refused with a message. `https://` is verified against the system's
//! roots (see [`crate::web`]).
//!
//! A server is started when a plan first needs it (its tools are listed
//! then) and kept for the life of the process; one that dies, hangs on a
//! call or keeps silent when started is dealt with as [`keep`] says. Tools
//! are addressed `server__tool`, or by their bare name when exactly one
//! server has it. A server that fails to start is an error naming it with
//! the end of what it wrote to stderr.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

use super::framing;
use crate::backend::keeper::GroupKill;
use keep::{Mute, Slot, StartFailure};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Map, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt};

mod keep;

/// Largest servers file read.
pub const SERVERS_FILE_BYTES_MAX: u64 = 1024 * 1024;
/// Most servers in one file.
pub const SERVERS_MAX: usize = 64;
/// Lines of a server's stderr kept for error messages.
const STDERR_LINES: usize = 20;
/// Most bytes of one stderr line read into memory.
const STDERR_LINE_BYTES_MAX: u64 = 64 * 1024;

/// How to reach one server.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum ServerSpec {
    /// A child process speaking MCP on stdio.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Extra environment variables.
        env: BTreeMap<String, String>,
    },
    /// A streamable HTTP endpoint.
    Url {
        /// `http://…`.
        url: String,
        /// Headers sent with every request (`${NAME}` in a value read from
        /// the environment when the file is read).
        headers: BTreeMap<String, String>,
    },
}

/// The servers file, read and checked.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Servers {
    /// Where it was read from (for messages).
    pub path: Option<PathBuf>,
    /// The servers by name.
    pub servers: BTreeMap<String, ServerSpec>,
    /// What the file holds that planb does not use (unknown fields, a name
    /// given twice), said on stderr when the file is read.
    pub notes: Vec<String>,
}

/// Why a servers file, or a url server's headers, were refused.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ServersError {
    /// The file, when the problem was found reading one.
    pub file: Option<PathBuf>,
    /// The field (`mcpServers.fs.args[0]`, `header Authorization`); empty
    /// for the file as a whole.
    pub at: String,
    /// What is wrong there.
    pub problem: ServersProblem,
}

impl ServersError {
    fn at(at: impl Into<String>, problem: ServersProblem) -> ServersError {
        ServersError {
            file: None,
            at: at.into(),
            problem,
        }
    }

    fn of_file(file: &Path, problem: ServersProblem) -> ServersError {
        ServersError {
            file: Some(file.to_owned()),
            at: String::new(),
            problem,
        }
    }
}

impl std::fmt::Display for ServersError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{}: ", file.display())?;
        }
        if !self.at.is_empty() {
            write!(f, "{}: ", self.at)?;
        }
        write!(f, "{}", self.problem)
    }
}

impl std::error::Error for ServersError {}

/// What is wrong with a servers file or one of its fields.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServersProblem {
    /// The file cannot be read (the system's words).
    #[error("cannot read: {0}")]
    Unreadable(String),
    /// The file is over [`SERVERS_FILE_BYTES_MAX`] (its size).
    #[error("{0} bytes; a servers file may hold at most {SERVERS_FILE_BYTES_MAX}")]
    TooLarge(u64),
    /// The file does not parse (the parser's words).
    #[error("not JSON: {0}")]
    NotJson(String),
    /// No `mcpServers`.
    #[error("missing (the file is {{\"mcpServers\": {{name: {{command, args, env}} | {{url}}}}}})")]
    Missing,
    /// `mcpServers` is not an object.
    #[error("must be an object of servers by name")]
    NotByName,
    /// More than [`SERVERS_MAX`] servers (how many).
    #[error("at most {SERVERS_MAX} servers (got {0})")]
    TooManyServers(usize),
    /// A server name that is not one.
    #[error(
        "a server name is 1 to 64 letters, digits, '-' or '_', without \"__\" (which separates server and tool)"
    )]
    Name,
    /// An entry that is not an object.
    #[error("must be an object")]
    NotAnObject,
    /// `"type": "sse"`.
    #[error(
        "\"sse\" (the older HTTP+SSE transport) is not supported; give the server's streamable HTTP endpoint as url"
    )]
    Sse,
    /// Another `type`.
    #[error("must be \"stdio\", \"http\" or \"streamable-http\"")]
    Type,
    /// A value that must be a string.
    #[error("must be a string")]
    NotAString,
    /// `args` that is not an array of strings.
    #[error("must be an array of strings")]
    NotStrings,
    /// `env` or `headers` that is not an object.
    #[error("must be an object of strings")]
    NotStringsByName,
    /// More than [`HEADERS_MAX`] headers.
    #[error("at most {HEADERS_MAX} headers")]
    TooManyHeaders,
    /// A header name HTTP does not allow.
    #[error("not a valid HTTP header name")]
    HeaderName,
    /// A header value HTTP does not allow.
    #[error("not a valid HTTP header value (control characters or non-ASCII)")]
    HeaderValue,
    /// Both `command` and `url`.
    #[error("give command or url, not both")]
    CommandAndUrl,
    /// A `command` that is not a non-empty string.
    #[error("must be a non-empty string")]
    Command,
    /// A `url` that is not an http(s) URL or is too long.
    #[error("must be an http:// or https:// URL of at most {URL_BYTES_MAX} bytes")]
    Url,
    /// Neither `command` nor `url`.
    #[error("needs command (stdio) or url")]
    NoCommandOrUrl,
    /// `${` without its `}`.
    #[error("\"${{\" without a closing \"}}\"")]
    Unclosed,
    /// `${…}` holding no variable name (what it holds).
    #[error("${{{0}}} does not name an environment variable")]
    VariableName(String),
    /// A variable that is not set (its name).
    #[error("the environment variable {0} is not set")]
    Unset(String),
}

/// The fields of a server entry planb reads.
const ENTRY_FIELDS: [&str; 6] = ["type", "command", "args", "env", "url", "headers"];

/// The server names `mcpServers` gives more than once in `text` (JSON
/// keeps the last silently).
fn repeated_names(text: &str) -> Vec<String> {
    struct Names(Vec<String>);
    impl<'de> serde::de::Visitor<'de> for Names {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            mut self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            while let Some(key) = map.next_key::<String>()? {
                map.next_value::<serde::de::IgnoredAny>()?;
                self.0.push(key);
            }
            Ok(self.0)
        }
    }
    struct Keys(Vec<String>);
    impl<'de> serde::Deserialize<'de> for Keys {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Keys, D::Error> {
            d.deserialize_map(Names(Vec::new())).map(Keys)
        }
    }
    #[derive(serde::Deserialize)]
    struct File {
        #[serde(rename = "mcpServers")]
        servers: Option<Keys>,
    }
    let Ok(File {
        servers: Some(Keys(names)),
    }) = serde_json::from_str::<File>(text)
    else {
        return Vec::new();
    };
    let mut seen = BTreeSet::new();
    let mut repeated: Vec<String> = names
        .into_iter()
        .filter(|n| !seen.insert(n.clone()))
        .collect();
    repeated.dedup();
    repeated
}

fn strings(value: Option<&Value>, path: &str) -> Result<Vec<String>, ServersError> {
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_str().map(str::to_owned).ok_or_else(|| {
                    ServersError::at(format!("{path}[{i}]"), ServersProblem::NotAString)
                })
            })
            .collect(),
        Some(_) => Err(ServersError::at(path, ServersProblem::NotStrings)),
    }
}

/// Longest server URL.
const URL_BYTES_MAX: usize = 2048;
/// Most headers of one url server.
const HEADERS_MAX: usize = 32;

/// A url server's `headers`: names HTTP allows, values kept as written
/// (their `${NAME}`s are read when the server starts).
fn headers(value: Option<&Value>, at: &str) -> Result<BTreeMap<String, String>, ServersError> {
    let map = match value {
        None | Some(Value::Null) => return Ok(BTreeMap::new()),
        Some(Value::Object(map)) => map,
        Some(_) => {
            return Err(ServersError::at(
                format!("{at}.headers"),
                ServersProblem::NotStringsByName,
            ));
        }
    };
    if map.len() > HEADERS_MAX {
        return Err(ServersError::at(
            format!("{at}.headers"),
            ServersProblem::TooManyHeaders,
        ));
    }
    let mut headers = BTreeMap::new();
    for (name, value) in map {
        let field = format!("{at}.headers.{name}");
        let Some(value) = value.as_str() else {
            return Err(ServersError::at(field, ServersProblem::NotAString));
        };
        if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(ServersError::at(field, ServersProblem::HeaderName));
        }
        headers.insert(name.clone(), value.to_owned());
    }
    Ok(headers)
}

/// rmcp's transport errors name the transport's Rust type
/// (`Transport [rmcp::…<reqwest::…>] error: …`): the part after it is what a
/// person needs.
fn without_transport_type(detail: String) -> String {
    match detail.split_once("] error: ") {
        Some((_, rest)) => rest.to_owned(),
        None => detail,
    }
}

/// The headers of a url server as sent: each `${NAME}` in a value read from
/// the environment now.
fn url_headers(
    headers: &BTreeMap<String, String>,
) -> Result<std::collections::HashMap<http::HeaderName, http::HeaderValue>, ServersError> {
    headers
        .iter()
        .map(|(name, value)| {
            let at = || format!("header {name}");
            let value = expand_env(value).map_err(|e| ServersError::at(at(), e))?;
            let header_name = http::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| ServersError::at(at(), ServersProblem::HeaderName))?;
            let header_value = http::HeaderValue::from_str(&value)
                .map_err(|_| ServersError::at(at(), ServersProblem::HeaderValue))?;
            Ok((header_name, header_value))
        })
        .collect()
}

/// `text` with each `${NAME}` replaced by the environment variable `NAME`.
fn expand_env(text: &str) -> Result<String, ServersProblem> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err(ServersProblem::Unclosed);
        };
        let name = &after[..end];
        let valid = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(ServersProblem::VariableName(name.to_owned()));
        }
        match std::env::var(name) {
            Ok(value) => out.push_str(&value),
            Err(_) => return Err(ServersProblem::Unset(name.to_owned())),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

impl Servers {
    /// Reads a servers file. A file that does not exist is no servers.
    pub fn load(path: &Path) -> Result<Servers, ServersError> {
        let unreadable = |e: std::io::Error| {
            ServersError::of_file(path, ServersProblem::Unreadable(e.to_string()))
        };
        let max = usize::try_from(SERVERS_FILE_BYTES_MAX).unwrap_or(usize::MAX);
        let bytes = match planb_projections::bounded::read(path, max) {
            Ok(Ok(bytes)) => bytes,
            Ok(Err(over)) => {
                let size = over.0 as u64;
                return Err(ServersError::of_file(path, ServersProblem::TooLarge(size)));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Servers {
                    path: Some(path.to_owned()),
                    servers: BTreeMap::new(),
                    notes: Vec::new(),
                });
            }
            Err(e) => return Err(unreadable(e)),
        };
        let text = String::from_utf8(bytes).map_err(|_| {
            unreadable(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "stream did not contain valid UTF-8",
            ))
        })?;
        let value: Value = serde_json::from_str(&text)
            .map_err(|e| ServersError::of_file(path, ServersProblem::NotJson(e.to_string())))?;
        let mut servers = Servers::parse(&value).map_err(|e| ServersError {
            file: Some(path.to_owned()),
            ..e
        })?;
        servers.path = Some(path.to_owned());
        for name in repeated_names(&text) {
            servers.notes.push(format!(
                "mcpServers.{name}: given more than once; the last entry is used"
            ));
        }
        let shown = path.display();
        for note in &mut servers.notes {
            *note = format!("{shown}: {note}");
            tracing::warn!("{note}");
        }
        Ok(servers)
    }

    /// Checks the `{"mcpServers": {...}}` object.
    pub fn parse(value: &Value) -> Result<Servers, ServersError> {
        let Some(all) = value.get("mcpServers") else {
            return Err(ServersError::at("mcpServers", ServersProblem::Missing));
        };
        let Value::Object(all) = all else {
            return Err(ServersError::at("mcpServers", ServersProblem::NotByName));
        };
        if all.len() > SERVERS_MAX {
            return Err(ServersError::at(
                "mcpServers",
                ServersProblem::TooManyServers(all.len()),
            ));
        }
        let mut servers = BTreeMap::new();
        let mut notes = Vec::new();
        for (name, spec) in all {
            servers.insert(name.clone(), server_entry(name, spec, &mut notes)?);
        }
        Ok(Servers {
            path: None,
            servers,
            notes,
        })
    }
}

/// One entry of `mcpServers`, checked; the fields planb does not use are
/// noted in `notes`.
fn server_entry(
    name: &str,
    spec: &Value,
    notes: &mut Vec<String>,
) -> Result<ServerSpec, ServersError> {
    let at = format!("mcpServers.{name}");
    let valid = !name.is_empty()
        && name.len() <= 64
        && !name.contains("__")
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !valid {
        return Err(ServersError::at(at, ServersProblem::Name));
    }
    let Value::Object(spec) = spec else {
        return Err(ServersError::at(at, ServersProblem::NotAnObject));
    };
    for key in spec.keys().filter(|k| !ENTRY_FIELDS.contains(&k.as_str())) {
        notes.push(format!(
            "{at}.{key}: not used by planb, ignored (an entry has {})",
            ENTRY_FIELDS.join(", ")
        ));
    }
    entry_type(spec, &at)?;
    match (spec.get("command"), spec.get("url")) {
        (Some(Value::String(command)), None) if !command.trim().is_empty() => {
            Ok(ServerSpec::Stdio {
                command: command.clone(),
                args: strings(spec.get("args"), &format!("{at}.args"))?,
                env: entry_env(spec.get("env"), &at)?,
            })
        }
        (None, Some(Value::String(url)))
            if (url.starts_with("http://") || url.starts_with("https://"))
                && url.len() <= URL_BYTES_MAX =>
        {
            Ok(ServerSpec::Url {
                url: url.clone(),
                headers: headers(spec.get("headers"), &at)?,
            })
        }
        (Some(_), Some(_)) => Err(ServersError::at(at, ServersProblem::CommandAndUrl)),
        (Some(_), None) => Err(ServersError::at(
            format!("{at}.command"),
            ServersProblem::Command,
        )),
        (None, Some(_)) => Err(ServersError::at(format!("{at}.url"), ServersProblem::Url)),
        (None, None) => Err(ServersError::at(at, ServersProblem::NoCommandOrUrl)),
    }
}

/// Refuses an entry's `type` unless it names a transport planb speaks.
fn entry_type(spec: &Map<String, Value>, at: &str) -> Result<(), ServersError> {
    match spec.get("type") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(kind))
            if ["stdio", "http", "streamable-http", "streamableHttp"].contains(&kind.as_str()) =>
        {
            Ok(())
        }
        Some(Value::String(kind)) if kind == "sse" => {
            Err(ServersError::at(format!("{at}.type"), ServersProblem::Sse))
        }
        Some(_) => Err(ServersError::at(format!("{at}.type"), ServersProblem::Type)),
    }
}

/// A stdio entry's `env`: strings by name.
fn entry_env(value: Option<&Value>, at: &str) -> Result<BTreeMap<String, String>, ServersError> {
    match value {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::Object(env)) => env
            .iter()
            .map(|(k, v)| {
                v.as_str()
                    .map(|v| (k.clone(), v.to_owned()))
                    .ok_or_else(|| {
                        ServersError::at(format!("{at}.env.{k}"), ServersProblem::NotAString)
                    })
            })
            .collect(),
        Some(_) => Err(ServersError::at(
            format!("{at}.env"),
            ServersProblem::NotStringsByName,
        )),
    }
}

/// A downstream tool.
#[derive(Clone, PartialEq, Debug)]
pub struct ToolInfo {
    /// The server's name.
    pub server: String,
    /// The tool's name on it.
    pub name: String,
    /// Its description.
    pub description: String,
    /// The JSON Schema of its arguments.
    pub input_schema: Value,
    /// Whether its output schema wraps a primitive result as `{"result":
    /// value}` (see [`super::binding`]).
    pub wraps_result: bool,
}

/// A tool's answer, with what reading its value needs.
#[derive(Clone, Debug)]
pub struct ToolAnswer {
    /// The result as the server sent it.
    pub result: CallToolResult,
    /// Whether the tool's output schema wraps a primitive result.
    pub wraps_result: bool,
}

impl ToolAnswer {
    /// The value it binds; an error answer is its text.
    pub fn value(&self) -> Result<Value, super::binding::ErrorAnswer> {
        super::binding::bound_value(&self.result, self.wraps_result)
    }
}

impl ToolInfo {
    /// `server__tool`.
    pub fn qualified(&self) -> String {
        format!("{}__{}", self.server, self.name)
    }
}

/// Why a downstream call or connection failed.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct DownstreamError {
    /// For people: names the server and, for a start failure, its stderr.
    pub message: String,
    /// A stable class: `server_start`, `server_closed` (the server went
    /// away during the call), `server_error` (it answered the call with an
    /// error), `tool_timeout`.
    pub class: &'static str,
}

struct Connection {
    client: RunningService<RoleClient, ClientConfig>,
    tools: Vec<ToolInfo>,
    /// The end of a child's stderr; none for a url server.
    stderr: Option<Arc<Mutex<VecDeque<String>>>>,
    /// Its slot's count of deaths, which an answer clears without taking
    /// the slot's lock.
    deaths: Arc<AtomicU32>,
    /// The server's process group, killed when the connection is dropped
    /// or the server is stopped; none for a url server.
    group: Option<GroupKill>,
    /// The server's process, the group's leader; none for a url server.
    _child: Option<tokio::process::Child>,
}

/// The transport to a stdio server: its answers through the relay, its
/// stdin.
type StdioTransport =
    AsyncRwTransport<RoleClient, tokio::io::DuplexStream, tokio::process::ChildStdin>;

/// Why a server's handshake failed.
enum Handshake {
    /// No answer to this request (`initialize`, `tools/list`) in time.
    Silent(&'static str),
    /// An error (the words of its chain).
    Failed(String),
}

/// How long servers still starting are waited for once a plan's bare tool
/// names have resolved among those that answered: servers started together
/// answer within it unless one hangs.
pub const STRAGGLER_GRACE: Duration = Duration::from_secs(5);

/// The tools a plan's steps can use, and the servers not waited for.
#[derive(Debug, Default)]
pub struct PlanTools {
    /// The tools of the servers that answered.
    pub tools: Vec<ToolInfo>,
    /// Servers still starting when every name had resolved without them,
    /// and those remembered as mute (see [`Downstream`]).
    pub silent: Vec<String>,
}

/// The downstream servers of one process: connected when first needed,
/// kept, started again after a death, a hang or a silent start (see
/// [`keep`]).
pub struct Downstream {
    servers: Servers,
    start_timeout: Duration,
    /// One slot per server: a slow start holds up the calls to that server
    /// alone.
    connections: Mutex<BTreeMap<String, Slot>>,
    /// Where connections are made, so that their tasks live there: the
    /// engine thread of a server process; `None`, the caller's runtime.
    home: Option<tokio::runtime::Handle>,
}

impl Connection {
    /// Whether calls can still reach the server: a child that exited closes
    /// the transport without cancelling the service.
    fn alive(&self) -> bool {
        !self.client.is_closed() && !self.client.peer().is_transport_closed()
    }

    /// Stops the server: its process group is killed (whether it had one
    /// is returned) and the session ended, so that calls in flight fail.
    fn stop(&self) -> bool {
        if let Some(group) = &self.group {
            group.kill();
        }
        self.client.cancellation_token().cancel();
        self.group.is_some()
    }
}

impl std::fmt::Debug for Downstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Downstream")
            .field("servers", &self.servers)
            .finish_non_exhaustive()
    }
}

fn tail(lines: &Mutex<VecDeque<String>>) -> String {
    let lines = lines
        .lock()
        .map(|l| l.iter().cloned().collect::<Vec<_>>())
        .unwrap_or_default();
    if lines.is_empty() {
        "(nothing on stderr)".into()
    } else {
        lines.join("\n")
    }
}

impl Downstream {
    /// The servers of `servers`, none started yet.
    pub fn new(servers: Servers, start_timeout: Duration) -> Downstream {
        Downstream {
            servers,
            start_timeout,
            connections: Mutex::new(BTreeMap::new()),
            home: None,
        }
    }

    /// These servers, each connected on `home` (its reader and writer tasks
    /// run there), whichever runtime first needs it.
    pub fn homed(self, home: tokio::runtime::Handle) -> Downstream {
        Downstream {
            home: Some(home),
            ..self
        }
    }

    /// The configured server names.
    pub fn names(&self) -> Vec<String> {
        self.servers.servers.keys().cloned().collect()
    }

    /// The connections to `names`, started at once rather than one after
    /// another, in the order given.
    async fn connections<'n>(
        &self,
        names: impl IntoIterator<Item = &'n str>,
    ) -> Vec<Result<Arc<Connection>, DownstreamError>> {
        futures_util::future::join_all(names.into_iter().map(|name| self.connection(name))).await
    }

    /// Starts server `name` and lists its tools within `start_timeout`. A
    /// child runs in a process group of its own; one that keeps silent
    /// that long is stopped.
    async fn start(
        name: &str,
        spec: &ServerSpec,
        start_timeout: Duration,
    ) -> Result<Connection, StartFailure> {
        let (command, args, env) = match spec {
            ServerSpec::Stdio { command, args, env } => (command, args, env),
            ServerSpec::Url { url, headers } => {
                return Downstream::start_url(name, url, headers, start_timeout).await;
            }
        };
        let failed = |detail: String, stderr: &Mutex<VecDeque<String>>| {
            StartFailure::Failed(DownstreamError {
                message: format!(
                    "downstream server {name:?} did not start: {detail}; its stderr ends with:\n{}",
                    tail(stderr)
                ),
                class: "server_start",
            })
        };
        let stderr_lines = Arc::new(Mutex::new(VecDeque::new()));
        let (child, group, transport) = Downstream::spawn(name, command, args, env, &stderr_lines)
            .map_err(|detail| failed(detail.to_string(), &stderr_lines))?;
        let (client, tools) = match Downstream::handshake(transport, start_timeout).await {
            Ok(found) => found,
            Err(failure) => {
                // Give the reader a moment to collect the last words.
                tokio::time::sleep(Duration::from_millis(50)).await;
                return Err(match failure {
                    Handshake::Silent(stage) => StartFailure::Silent(Mute::new(
                        stage,
                        start_timeout,
                        format!("; its stderr ends with:\n{}", tail(&stderr_lines)),
                    )),
                    Handshake::Failed(detail) => failed(detail, &stderr_lines),
                });
            }
        };
        Ok(Connection {
            client,
            tools: tool_infos(name, tools),
            stderr: Some(stderr_lines),
            deaths: Arc::default(),
            group: Some(group),
            _child: Some(child),
        })
    }

    /// Runs a stdio server's `command` in a process group of its own, its
    /// stderr's end kept in `stderr_lines`: the child, the group (killed
    /// when dropped, so what it started ends with a start that fails) and
    /// the transport to it. Else what went wrong.
    fn spawn(
        name: &str,
        command: &str,
        args: &[String],
        env: &BTreeMap<String, String>,
        stderr_lines: &Arc<Mutex<VecDeque<String>>>,
    ) -> Result<(tokio::process::Child, GroupKill, StdioTransport), SpawnFailure> {
        let mut child = tokio::process::Command::new(command)
            .args(args)
            .envs(env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| SpawnFailure::CannotRun {
                command: command.to_owned(),
                source,
            })?;
        let group = GroupKill::new(child.id());
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(SpawnFailure::NoPipes);
        };
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(keep_stderr_tail(stderr, Arc::clone(stderr_lines)));
        }
        // Its answers pass through a relay that keeps each whole up to a
        // limit and turns a longer one into an error for its call.
        let (answers, relayed) = tokio::io::duplex(1 << 20);
        tokio::spawn(framing::relay(
            stdout,
            relayed,
            framing::ANSWER_BYTES_MAX,
            name.to_owned(),
        ));
        let transport = AsyncRwTransport::new_client(answers, stdin)
            .with_max_line_length(framing::ANSWER_BYTES_MAX + 1);
        Ok((child, group, transport))
    }

    /// Connects to a url server over streamable HTTP, its headers' `${NAME}`s
    /// read now.
    async fn start_url(
        name: &str,
        url: &str,
        headers: &BTreeMap<String, String>,
        start_timeout: Duration,
    ) -> Result<Connection, StartFailure> {
        let failed = |detail: String| {
            StartFailure::Failed(DownstreamError {
                message: format!("downstream server {name:?} ({url}) did not start: {detail}"),
                class: "server_start",
            })
        };
        let custom = url_headers(headers).map_err(|e| failed(e.to_string()))?;
        let config = StreamableHttpClientTransportConfig::with_uri(url).custom_headers(custom);
        let http = crate::web::client().map_err(|e| failed(e.to_string()))?;
        let transport = StreamableHttpClientTransport::with_client(http, config);
        let (client, tools) = Downstream::handshake(transport, start_timeout)
            .await
            .map_err(|failure| match failure {
                Handshake::Silent(stage) => {
                    StartFailure::Silent(Mute::new(stage, start_timeout, format!("; at {url}")))
                }
                Handshake::Failed(detail) => failed(without_transport_type(detail)),
            })?;
        Ok(Connection {
            client,
            tools: tool_infos(name, tools),
            stderr: None,
            deaths: Arc::default(),
            group: None,
            _child: None,
        })
    }

    /// Initializes a session over `transport` and lists its tools, within
    /// the start timeout.
    async fn handshake<T, E, A>(
        transport: T,
        start_timeout: Duration,
    ) -> Result<
        (
            RunningService<RoleClient, ClientConfig>,
            Vec<rmcp::model::Tool>,
        ),
        Handshake,
    >
    where
        T: rmcp::transport::IntoTransport<RoleClient, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let info = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("planb-mcp", env!("CARGO_PKG_VERSION")),
        );
        let deadline = tokio::time::Instant::now() + start_timeout;
        let client = match tokio::time::timeout_at(deadline, info.serve(transport)).await {
            Err(_) => return Err(Handshake::Silent("initialize")),
            Ok(Err(e)) => return Err(Handshake::Failed(crate::web::chain(&e))),
            Ok(Ok(client)) => client,
        };
        match tokio::time::timeout_at(deadline, client.list_all_tools()).await {
            Err(_) => Err(Handshake::Silent("tools/list")),
            Ok(Err(e)) => Err(Handshake::Failed(crate::web::chain(&e))),
            Ok(Ok(tools)) => Ok((client, tools)),
        }
    }

    /// Every tool of every server that starts, and the failures of those
    /// that do not.
    pub async fn available_tools(&self) -> (Vec<ToolInfo>, Vec<DownstreamError>) {
        let mut all = Vec::new();
        let mut failed = Vec::new();
        let names = self.names();
        for started in self.connections(names.iter().map(String::as_str)).await {
            match started {
                Ok(connection) => all.extend(connection.tools.iter().cloned()),
                Err(error) => failed.push(error),
            }
        }
        (all, failed)
    }

    /// The tools `names` (as a plan writes them) can resolve to, starting
    /// only the servers they need: a `server__tool` needs its server, which
    /// must start; a bare name needs the other servers, started at once.
    /// Once every bare name resolves to one tool among those that answered,
    /// the rest have [`STRAGGLER_GRACE`] more to answer (one with the same
    /// tool name makes it ambiguous, whatever order the servers answer in);
    /// a server still silent then is not waited for, nor one remembered as
    /// mute (each is named in [`PlanTools::silent`] and on stderr). One that
    /// does not start is an error only when a bare name is left unresolved.
    /// So a server no plan step uses (one reached by url, one that is broken
    /// or hangs) does not hold up a plan for its whole start limit.
    pub async fn tools_for<'a>(
        &self,
        names: impl IntoIterator<Item = &'a str>,
    ) -> Result<PlanTools, DownstreamError> {
        let servers = self.names();
        let mut needed: BTreeSet<&str> = BTreeSet::new();
        let mut bare: Vec<&str> = Vec::new();
        for name in names {
            match name.split_once("__") {
                Some((server, _)) if servers.iter().any(|s| s == server) => {
                    needed.insert(server);
                }
                _ => bare.push(name),
            }
        }
        let mut found = PlanTools::default();
        for started in self.connections(needed.iter().copied()).await {
            found.tools.extend(started?.tools.iter().cloned());
        }
        // A bare name is looked up among every server, even when the
        // servers named so far have it: another may have it too.
        if bare.is_empty() {
            return Ok(found);
        }
        let others = servers
            .iter()
            .map(String::as_str)
            .filter(|s| !needed.contains(s))
            .collect();
        self.look_up_bare(others, &bare, found).await
    }

    /// [`Downstream::tools_for`]'s bare names, looked up among `waiting`
    /// (the servers no `server__tool` named), added to `found`.
    async fn look_up_bare(
        &self,
        mut waiting: BTreeSet<&str>,
        bare: &[&str],
        mut found: PlanTools,
    ) -> Result<PlanTools, DownstreamError> {
        let resolved =
            |tools: &[ToolInfo]| bare.iter().all(|n| Downstream::resolve(tools, n).is_ok());
        let mut starts: futures_util::stream::FuturesUnordered<_> = waiting
            .iter()
            .map(|&name| async move { (name, self.connection(name).await) })
            .collect();
        let (mut failed, mut mute) = (Vec::new(), Vec::new());
        let mut grace = None;
        loop {
            let next = match grace {
                None => starts.next().await,
                Some(until) => match tokio::time::timeout_at(until, starts.next()).await {
                    Ok(next) => next,
                    Err(_) => break,
                },
            };
            let Some((name, started)) = next else { break };
            waiting.remove(name);
            match started {
                Ok(connection) => found.tools.extend(connection.tools.iter().cloned()),
                Err(error) => {
                    if self.is_mute(name).await {
                        tracing::warn!("{}", error.message);
                        mute.push(name.to_owned());
                    }
                    failed.push(error.message);
                }
            }
            if grace.is_none() && resolved(&found.tools) {
                grace = Some(tokio::time::Instant::now() + STRAGGLER_GRACE.min(self.start_timeout));
            }
        }
        if !resolved(&found.tools) && !failed.is_empty() {
            return Err(DownstreamError {
                message: failed.join("\n"),
                class: "server_start",
            });
        }
        for name in &waiting {
            tracing::warn!(
                "downstream server {name:?} had not answered when the plan's tool names resolved without it; not waited for"
            );
        }
        found.silent = waiting.into_iter().map(str::to_owned).chain(mute).collect();
        found.silent.sort();
        // In the servers' order, whichever answered first: the names offered
        // for an ambiguous or unknown tool read the same every time.
        found.tools.sort_by(|a, b| a.server.cmp(&b.server));
        Ok(found)
    }

    /// Resolves a plan's tool name against `tools`: `server__tool`, or a
    /// bare name exactly one server has. Otherwise the names it could be.
    pub fn resolve(tools: &[ToolInfo], name: &str) -> Result<ToolInfo, Vec<String>> {
        let qualified = |t: &ToolInfo| {
            name.strip_prefix(t.server.as_str())
                .and_then(|rest| rest.strip_prefix("__"))
                == Some(t.name.as_str())
        };
        if let Some(found) = tools.iter().find(|t| qualified(t)) {
            return Ok(found.clone());
        }
        let bare: Vec<&ToolInfo> = tools.iter().filter(|t| t.name == name).collect();
        match bare.as_slice() {
            [one] => Ok((*one).clone()),
            [] => Err(available(tools)),
            many => Err(many.iter().map(|t| t.qualified()).collect()),
        }
    }

    /// Calls `tool` on `server` with `args`, within `timeout`. A server
    /// that does not answer in time is pinged, and stopped and started again
    /// for the next call when it does not answer that either (so at most
    /// [`keep::PING_LIMIT`] more).
    pub async fn call(
        &self,
        server: &str,
        tool: &str,
        args: Map<String, Value>,
        timeout: Duration,
    ) -> Result<ToolAnswer, DownstreamError> {
        let connection = self.connection(server).await?;
        let wraps_result = connection
            .tools
            .iter()
            .any(|t| t.name == tool && t.wraps_result);
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(args);
        match tokio::time::timeout(timeout, connection.client.call_tool(params)).await {
            Ok(Ok(result)) => {
                // It answers: its deaths are forgotten.
                if connection.deaths.load(Ordering::Relaxed) != 0 {
                    connection.deaths.store(0, Ordering::Relaxed);
                }
                Ok(ToolAnswer {
                    result,
                    wraps_result,
                })
            }
            Ok(Err(e)) => Err(self.failed_call(server, tool, &connection, e).await),
            Err(_) => Err(self.timed_out(server, tool, &connection, timeout).await),
        }
    }

    /// The error of a call `e` failed: a server that closed names its
    /// stderr's end, and its connection is dropped (unless another call has
    /// started it again meanwhile) so that the next use starts it again.
    async fn failed_call(
        &self,
        server: &str,
        tool: &str,
        connection: &Arc<Connection>,
        e: rmcp::ServiceError,
    ) -> DownstreamError {
        let closed = matches!(
            e,
            rmcp::ServiceError::TransportClosed | rmcp::ServiceError::TransportSend(_)
        ) || !connection.alive();
        if closed {
            // Give the stderr reader a moment to collect the last words.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let error = DownstreamError {
            message: if closed {
                match &connection.stderr {
                    Some(stderr) => format!(
                        "downstream server {server:?} closed during {tool}: {e}; its stderr ends with:\n{}",
                        tail(stderr)
                    ),
                    None => {
                        format!("downstream server {server:?} closed during {tool}: {e}")
                    }
                }
            } else {
                format!("{server}__{tool}: {e}")
            },
            class: if closed {
                "server_closed"
            } else {
                "server_error"
            },
        };
        if closed {
            self.forget(server, connection, &error.message).await;
        }
        error
    }

    /// `name`'s slot, made when first asked for.
    fn slot(&self, name: &str) -> Slot {
        let mut slots = self
            .connections
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Looked up first: every call asks, and a new name is rare.
        if let Some(slot) = slots.get(name) {
            return Arc::clone(slot);
        }
        Arc::clone(slots.entry(name.to_owned()).or_default())
    }
}

/// Reads a server's stderr to the end, whatever it writes (a full pipe
/// would block the server), keeping its last [`STDERR_LINES`] lines in
/// `sink`: bytes that are not UTF-8 are replaced, and a line is kept to its
/// first 500 characters.
async fn keep_stderr_tail(stderr: tokio::process::ChildStderr, sink: Arc<Mutex<VecDeque<String>>>) {
    let mut reader = tokio::io::BufReader::new(stderr);
    let mut line = Vec::new();
    let mut rest = Vec::new();
    loop {
        line.clear();
        match AsyncReadExt::take(&mut reader, STDERR_LINE_BYTES_MAX)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        // The rest of an overlong line is read and dropped.
        let mut ended = line.last() == Some(&b'\n');
        while !ended {
            rest.clear();
            match AsyncReadExt::take(&mut reader, STDERR_LINE_BYTES_MAX)
                .read_until(b'\n', &mut rest)
                .await
            {
                Ok(0) | Err(_) => ended = true,
                Ok(_) => ended = rest.last() == Some(&b'\n'),
            }
        }
        let text = String::from_utf8_lossy(&line);
        if let Ok(mut kept) = sink.lock() {
            if kept.len() == STDERR_LINES {
                kept.pop_front();
            }
            kept.push_back(text.trim_end().chars().take(500).collect());
        }
    }
}

fn tool_infos(server: &str, tools: Vec<rmcp::model::Tool>) -> Vec<ToolInfo> {
    tools
        .into_iter()
        .map(|tool| ToolInfo {
            server: server.to_owned(),
            name: tool.name.to_string(),
            description: tool.description.map(|d| d.to_string()).unwrap_or_default(),
            input_schema: Value::Object((*tool.input_schema).clone()),
            wraps_result: super::binding::wraps_primitive(tool.output_schema.as_deref()),
        })
        .collect()
}

/// The names a plan may use: every `server__tool`, and each bare name one
/// server alone has.
pub fn available(tools: &[ToolInfo]) -> Vec<String> {
    let mut names: Vec<String> = tools.iter().map(ToolInfo::qualified).collect();
    for tool in tools {
        if tools.iter().filter(|t| t.name == tool.name).count() == 1 {
            names.push(tool.name.clone());
        }
    }
    names.sort();
    names.dedup();
    names
}

/// Why a stdio server's process could not be started.
#[derive(Debug, thiserror::Error)]
enum SpawnFailure {
    /// The command cannot be run.
    #[error("cannot run {command:?}: {source}")]
    CannotRun {
        command: String,
        source: std::io::Error,
    },
    /// Its standard input or output was not given to planb.
    #[error("its pipes were not opened")]
    NoPipes,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(servers: Value) -> Result<Servers, ServersError> {
        Servers::parse(&json!({ "mcpServers": servers }))
    }

    #[test]
    fn unknown_fields_and_a_name_given_twice_are_said() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("servers.json");
        std::fs::write(
            &path,
            r#"{"mcpServers": {"a": {"command": "x", "cwd": "/tmp"}, "b": {"command": "y"}, "a": {"command": "z"}}}"#,
        )
        .expect("write");
        let servers = Servers::load(&path).expect("load");
        assert_eq!(servers.servers.len(), 2);
        assert_eq!(servers.notes.len(), 1, "{:?}", servers.notes);
        assert!(
            servers.notes[0]
                .ends_with("mcpServers.a: given more than once; the last entry is used")
        );
        std::fs::write(
            &path,
            r#"{"mcpServers": {"a": {"command": "x", "cwd": "/tmp"}}}"#,
        )
        .expect("write");
        let servers = Servers::load(&path).expect("load");
        assert_eq!(servers.notes.len(), 1, "{:?}", servers.notes);
        assert!(servers.notes[0].contains("mcpServers.a.cwd: not used by planb, ignored"));
    }

    #[test]
    fn a_tool_resolves_by_its_qualified_name_or_a_bare_name_only_one_server_has() {
        let tool = |server: &str, name: &str| ToolInfo {
            server: server.into(),
            name: name.into(),
            description: String::new(),
            input_schema: json!({"type": "object"}),
            wraps_result: false,
        };
        let tools = [
            tool("files", "read"),
            tool("web", "read"),
            tool("web", "fetch"),
            tool("a__b", "c"),
        ];
        let found = |name: &str| Downstream::resolve(&tools, name).map(|t| t.qualified());
        assert_eq!(found("web__read"), Ok("web__read".to_owned()));
        assert_eq!(found("files__read"), Ok("files__read".to_owned()));
        assert_eq!(found("fetch"), Ok("web__fetch".to_owned()));
        assert_eq!(found("a__b__c"), Ok("a__b__c".to_owned()));
        assert_eq!(
            found("read"),
            Err(vec!["files__read".to_owned(), "web__read".to_owned()])
        );
        // A server's name alone, or with a tool it lacks, is no tool.
        assert!(found("web").is_err());
        assert!(found("web__").is_err());
        assert!(found("files__fetch").is_err());
    }

    #[test]
    fn url_entries_keep_their_headers_and_name_what_is_wrong() {
        let parsed = parse(
            json!({"web": {"type": "http", "url": "http://127.0.0.1:9/mcp",
            "headers": {"Authorization": "Bearer ${TOKEN}"}}}),
        )
        .expect("valid");
        assert_eq!(
            parsed.servers["web"],
            ServerSpec::Url {
                url: "http://127.0.0.1:9/mcp".into(),
                headers: BTreeMap::from([("Authorization".into(), "Bearer ${TOKEN}".into())]),
            }
        );
        let cases = [
            (
                json!({"web": {"type": "sse", "url": "http://h/sse"}}),
                "mcpServers.web.type: \"sse\"",
            ),
            (
                json!({"web": {"type": "carrier-pigeon", "command": "x"}}),
                "mcpServers.web.type: must be",
            ),
            (
                json!({"web": {"url": "ftp://h/mcp"}}),
                "mcpServers.web.url: must be an http:// or https:// URL",
            ),
            (
                json!({"web": {"url": "http://h/mcp", "headers": {"bad name": "x"}}}),
                "mcpServers.web.headers.bad name: not a valid HTTP header name",
            ),
            (
                json!({"web": {"url": "http://h/mcp", "headers": {"X-N": 1}}}),
                "mcpServers.web.headers.X-N: must be a string",
            ),
            (
                json!({"web": {"url": "http://h/mcp", "command": "x"}}),
                "mcpServers.web: give command or url, not both",
            ),
        ];
        for (servers, expected) in cases {
            let error = parse(servers.clone()).expect_err("refused").to_string();
            assert!(error.starts_with(expected), "{servers}: {error}");
        }
    }

    #[test]
    fn header_values_read_the_environment_when_sent() {
        // PATH is set in every test environment; the other name never is.
        let path = std::env::var("PATH").expect("PATH");
        assert_eq!(expand_env("a ${PATH} b"), Ok(format!("a {path} b")));
        assert_eq!(expand_env("no variables"), Ok("no variables".into()));
        assert_eq!(
            expand_env("${PLANB_SURELY_UNSET_VARIABLE}"),
            Err(ServersProblem::Unset("PLANB_SURELY_UNSET_VARIABLE".into()))
        );
        assert_eq!(
            expand_env("${not-a-name}")
                .expect_err("not a name")
                .to_string(),
            "${not-a-name} does not name an environment variable"
        );
        assert_eq!(
            expand_env("${PLANB_SURELY_UNSET_VARIABLE}")
                .expect_err("unset")
                .to_string(),
            "the environment variable PLANB_SURELY_UNSET_VARIABLE is not set"
        );
        assert!(expand_env("${OPEN").is_err());
        let headers = BTreeMap::from([("X-Line".to_string(), "a\nb".to_string())]);
        let error = url_headers(&headers)
            .expect_err("a newline cannot be sent")
            .to_string();
        assert!(
            error.starts_with("header X-Line: not a valid HTTP header value"),
            "{error}"
        );
    }
}
