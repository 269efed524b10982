//! Test support: the real `planb-mcp` binary over stdio with rmcp's client, and
//! a raw HTTP/1.1 client (raw so tests can send any Host and Origin header).

#![allow(dead_code, reason = "each test file uses a different part")]

pub mod browser;

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, CustomNotification,
    ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationCapability,
    FormElicitationCapability, Implementation, JsonObject, ProgressNotificationParam,
    ProtocolVersion, UrlElicitationCapability,
};
use rmcp::service::{NotificationContext, RequestContext, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceExt};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{Mutex, mpsc};

/// `planb-mcp demo --auto` on the data root `dir`, its model steps answered
/// by the test model server at `model_spec`, no browser opened.
pub fn demo_auto(dir: &Path, model_spec: &str) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_planb-mcp"));
    command
        .args(["demo", "--auto", "--data-dir"])
        .arg(dir)
        .env("PLANB_MODEL", model_spec)
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY");
    command
}

/// How the test client answers URL elicitations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UrlAnswer {
    /// The client does not advertise URL elicitation (bare `elicitation: {}`).
    NotSupported,
    /// Advertise it and answer with this action.
    Answer(ElicitationAction),
}

/// What the client saw from the server.
#[derive(Debug)]
pub struct Seen {
    /// URLs of URL-mode elicitations.
    pub urls: mpsc::UnboundedReceiver<(String, String)>,
    /// `elicitationId`s of `notifications/elicitation/complete`.
    pub completions: mpsc::UnboundedReceiver<String>,
    /// Progress messages.
    pub progress: mpsc::UnboundedReceiver<String>,
    /// URLs the server printed on stderr (`opening browser directly: <url>`).
    pub stderr_urls: mpsc::UnboundedReceiver<String>,
    /// The prompts of `sampling/createMessage` requests, as answered.
    pub samples: mpsc::UnboundedReceiver<String>,
    /// Form-mode elicitation requests, as JSON.
    pub forms: mpsc::UnboundedReceiver<Value>,
    /// The reasons of `notifications/cancelled` the server sent.
    pub cancelled: mpsc::UnboundedReceiver<String>,
}

#[derive(Debug)]
pub struct TestClient {
    url_answer: UrlAnswer,
    /// How to answer form-mode elicitations (default: decline).
    form_reply: Option<(ElicitationAction, Option<Value>)>,
    urls: mpsc::UnboundedSender<(String, String)>,
    completions: mpsc::UnboundedSender<String>,
    progress: mpsc::UnboundedSender<String>,
    /// Answers sampling requests with this (declaring the capability).
    sampler: Option<Sampling>,
    samples: mpsc::UnboundedSender<String>,
    forms: mpsc::UnboundedSender<Value>,
    cancelled: mpsc::UnboundedSender<String>,
}

impl ClientHandler for TestClient {
    #[allow(deprecated, reason = "sampling, as 2025-11-25 sessions carry it")]
    async fn create_message(
        &self,
        params: rmcp::model::CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CreateMessageResult, ErrorData> {
        use rmcp::model::{SamplingMessage, SamplingMessageContentBlock};
        let Some((answer, delay)) = self.sampler else {
            return Err(ErrorData::method_not_found::<
                rmcp::model::CreateMessageRequestMethod,
            >());
        };
        let prompt: String = params
            .messages
            .into_iter()
            .flat_map(|m| m.content.into_vec())
            .filter_map(|block| match block {
                SamplingMessageContentBlock::Text(text) => Some(text.text),
                _ => None,
            })
            .collect();
        tokio::time::sleep(delay).await;
        let text = answer(&prompt);
        let _ = self.samples.send(prompt);
        Ok(rmcp::model::CreateMessageResult::new(
            SamplingMessage::assistant_text(text),
            "scripted".into(),
        ))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        match (request, &self.url_answer) {
            (
                ElicitRequestParams::UrlElicitationParams {
                    url,
                    elicitation_id,
                    ..
                },
                UrlAnswer::Answer(action),
            ) => {
                let _ = self.urls.send((url, elicitation_id));
                Ok(ElicitResult::new(action.clone()))
            }
            (form @ ElicitRequestParams::FormElicitationParams { .. }, _) => {
                // rmcp hands a request's `_meta` to the context, not the params.
                let mut seen = serde_json::to_value(&form).unwrap_or(Value::Null);
                seen["_meta"] = serde_json::to_value(&context.meta).unwrap_or(Value::Null);
                let _ = self.forms.send(seen);
                Ok(form_reply(self.form_reply.as_ref()))
            }
            _ => Ok(ElicitResult::new(ElicitationAction::Decline)),
        }
    }

    async fn on_cancelled(
        &self,
        params: rmcp::model::CancelledNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.cancelled.send(params.reason.unwrap_or_default());
    }

    async fn on_custom_notification(
        &self,
        notification: CustomNotification,
        _context: NotificationContext<RoleClient>,
    ) {
        if notification.method == "notifications/elicitation/complete" {
            let id = notification
                .params
                .as_ref()
                .and_then(|p| p.get("elicitationId"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let _ = self.completions.send(id);
        }
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.progress.send(params.message.unwrap_or_default());
    }

    fn get_info(&self) -> ClientConfig {
        let elicitation = match self.url_answer {
            UrlAnswer::NotSupported => ElicitationCapability::default(),
            UrlAnswer::Answer(_) => ElicitationCapability::new()
                .with_form(FormElicitationCapability::new())
                .with_url(UrlElicitationCapability::new()),
        };
        let mut capabilities = ClientCapabilities::builder()
            .enable_elicitation_with(elicitation)
            .build();
        if self.sampler.is_some() {
            capabilities.sampling = Some(Default::default());
        }
        ClientConfig::new(capabilities, Implementation::new("planb-tests", "0"))
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }
}

/// How the test client answers sampling: the answer to a prompt, and how
/// long it takes.
type Sampling = (fn(&str) -> String, Duration);

/// A running server and the client connected to it.
pub struct Server {
    pub client: RunningService<RoleClient, TestClient>,
    pub seen: Seen,
    /// Every stderr line the server printed.
    pub stderr: Arc<Mutex<Vec<String>>>,
    /// Ends when the server has closed its stderr (it exited).
    pub stderr_closed: tokio::task::JoinHandle<()>,
    /// The server's process id.
    pub pid: u32,
}

impl Server {
    /// Kills the server's process with SIGKILL: no chance to clean up.
    pub fn kill_9(&self) {
        let status = std::process::Command::new("kill")
            .args(["-9", &self.pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -9 {}", self.pid);
    }
}

/// Starts `planb-mcp` on `data_dir` with extra environment variables.
pub async fn start(data_dir: &Path, url_answer: UrlAnswer, env: &[(&str, &str)]) -> Server {
    start_with(data_dir, url_answer, None, env, &[]).await
}

/// [`start`] with a client that declares sampling and answers each
/// prompt with `answer`, `delay` after it came.
pub async fn start_sampling(
    data_dir: &Path,
    env: &[(&str, &str)],
    answer: fn(&str) -> String,
    delay: Duration,
) -> Server {
    let sampling = Some((answer, delay));
    launch(
        Binary::Built,
        data_dir,
        UrlAnswer::NotSupported,
        None,
        sampling,
        env,
        &[],
    )
    .await
}

/// [`start`] with a form-elicitation reply and extra command-line arguments.
pub async fn start_with(
    data_dir: &Path,
    url_answer: UrlAnswer,
    form_reply: Option<(ElicitationAction, Option<Value>)>,
    env: &[(&str, &str)],
    args: &[&str],
) -> Server {
    launch(
        Binary::Built,
        data_dir,
        url_answer,
        form_reply,
        None,
        env,
        args,
    )
    .await
}

/// Which planb-mcp a test server runs.
enum Binary<'a> {
    /// The one cargo built for the tests.
    Built,
    /// A copy of it elsewhere (one the test may remove while it runs).
    At(&'a Path),
}

/// [`start`] of the planb-mcp at `binary`.
pub async fn start_binary(binary: &Path, data_dir: &Path, env: &[(&str, &str)]) -> Server {
    let at = Binary::At(binary);
    launch(at, data_dir, UrlAnswer::NotSupported, None, None, env, &[]).await
}

async fn launch(
    binary: Binary<'_>,
    data_dir: &Path,
    url_answer: UrlAnswer,
    form_reply: Option<(ElicitationAction, Option<Value>)>,
    sampler: Option<Sampling>,
    env: &[(&str, &str)],
    args: &[&str],
) -> Server {
    let mut command = tokio::process::Command::new(match binary {
        Binary::Built => Path::new(env!("CARGO_BIN_EXE_planb-mcp")),
        Binary::At(path) => path,
    });
    command.args(args).current_dir(data_dir);
    command
        .env("PLANB_MCP_DATA_DIR", data_dir)
        .env("ASK_NO_OPEN", "1")
        .env_remove("PLANB_LOG")
        .env_remove("RUST_LOG")
        .env_remove("PLANB_PORT")
        .env_remove("ASK_ANSWER_TIMEOUT_MS")
        .env_remove("PLANB_MODEL")
        .env_remove("PLANB_TEAM_URL")
        .env_remove("PLANB_TEAM_PROJECTS");
    for (key, value) in env {
        command.env(key, value);
    }
    let (transport, stderr) = TokioChildProcess::builder(command)
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn planb-mcp");
    let pid = transport.id().expect("the child's pid");
    let (stderr_tx, stderr_urls) = mpsc::unbounded_channel();
    let lines = Arc::new(Mutex::new(Vec::new()));
    let stderr = stderr.expect("piped stderr");
    let stderr_closed = tokio::spawn({
        let lines = Arc::clone(&lines);
        async move {
            let mut reader = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                if let Some(rest) = line.split("opening browser directly: ").nth(1) {
                    let url = rest.split_whitespace().next().unwrap_or_default();
                    let _ = stderr_tx.send(url.to_string());
                }
                lines.lock().await.push(line);
            }
        }
    });
    let (urls_tx, urls) = mpsc::unbounded_channel();
    let (completions_tx, completions) = mpsc::unbounded_channel();
    let (progress_tx, progress) = mpsc::unbounded_channel();
    let (samples_tx, samples) = mpsc::unbounded_channel();
    let (forms_tx, forms) = mpsc::unbounded_channel();
    let (cancelled_tx, cancelled) = mpsc::unbounded_channel();
    let handler = TestClient {
        url_answer,
        form_reply,
        urls: urls_tx,
        completions: completions_tx,
        progress: progress_tx,
        sampler,
        samples: samples_tx,
        forms: forms_tx,
        cancelled: cancelled_tx,
    };
    let client = handler.serve(transport).await.expect("initialize");
    Server {
        client,
        seen: Seen {
            urls,
            completions,
            progress,
            stderr_urls,
            samples,
            forms,
            cancelled,
        },
        stderr: lines,
        stderr_closed,
        pid,
    }
}

/// Calls a tool with JSON arguments.
pub async fn call(server: &Server, tool: &'static str, arguments: Value) -> CallToolResult {
    let Value::Object(arguments) = arguments else {
        panic!("arguments must be an object")
    };
    server
        .client
        .call_tool(CallToolRequestParams::new(tool).with_arguments(arguments))
        .await
        .expect("tools/call")
}

/// The text of a tool result's first content block.
pub fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.clone())
        .unwrap_or_default()
}

/// Creates a session and returns its id.
pub async fn new_session(server: &Server) -> String {
    let result = call(
        server,
        "init_planb_session",
        serde_json::json!({"title": "t"}),
    )
    .await;
    let text = text_of(&result);
    text.lines()
        .next()
        .and_then(|l| l.strip_prefix("sessionId: "))
        .expect("first line is sessionId")
        .to_string()
}

/// Arguments of `ask_user` with every kind.
pub fn sample_ask(session: &str) -> JsonObject {
    let Value::Object(object) = serde_json::json!({
        "sessionId": session,
        "title": "Project kickoff",
        "intro": "A few questions.",
        "questions": [
            {"id": "name", "kind": "text", "label": "Project name", "required": true, "tab": "Workspace"},
            {"id": "summary", "kind": "longtext", "label": "Summary", "tab": "Workspace"},
            {"id": "language", "kind": "single", "label": "Language", "required": true,
             "options": [{"value": "Rust", "markdown": "**Rust**"}, "Go"], "tab": "Workspace"},
            {"id": "integrations", "kind": "multi", "label": "Integrations", "options": ["GitHub", "Slack"]},
            {"id": "priority", "kind": "scale", "label": "Priority", "min": 1, "max": 5, "step": 1, "required": true}
        ]
    }) else {
        unreachable!()
    };
    object
}

/// A raw HTTP response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Sends one HTTP/1.1 request to 127.0.0.1:`port` with exactly these headers.
pub async fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &str,
) -> Response {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let mut request = format!("{method} {path} HTTP/1.1\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    ));
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut raw))
        .await
        .expect("response in time")
        .expect("read");
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        .collect();
    Response {
        status,
        headers,
        body: body.to_string(),
    }
}

/// A URL's port and `sid`.
pub fn parse_form_url(url: &str) -> (u16, String) {
    let rest = url.strip_prefix("http://127.0.0.1:").expect("loopback url");
    let (port, rest) = rest.split_once('/').expect("path");
    let sid = rest.strip_prefix("ask?sid=").expect("sid").to_string();
    (port.parse().expect("port"), sid)
}

/// GET from the form's own host.
pub async fn get(port: u16, path: &str) -> Response {
    http(
        port,
        "GET",
        path,
        &[("Host", format!("127.0.0.1:{port}"))],
        "",
    )
    .await
}

/// POST JSON as the form itself would.
pub async fn post_json(port: u16, path: &str, body: &Value) -> Response {
    http(
        port,
        "POST",
        path,
        &[
            ("Host", format!("127.0.0.1:{port}")),
            ("Origin", format!("http://127.0.0.1:{port}")),
            ("Content-Type", "application/json".to_string()),
        ],
        &body.to_string(),
    )
    .await
}

/// Where kill tests kill: the seed (`PLANB_TEST_SEED`, else the clock;
/// printed, so a failure can be run again) and a generator of numbers below
/// a bound drawn from it (xorshift).
pub fn kill_points() -> (u64, impl FnMut(u64) -> u64) {
    let seed = std::env::var("PLANB_TEST_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
        | 1;
    eprintln!("kill points from PLANB_TEST_SEED={seed}");
    let mut random = seed;
    let below = move |n: u64| {
        random ^= random << 13;
        random ^= random >> 7;
        random ^= random << 17;
        random % n.max(1)
    };
    (seed, below)
}

/// The log of the data root at `root` folded into a state, with every event's
/// kind in order (read-only: nothing is recovered or written).
pub fn fold_log(root: &Path) -> (planb_core::State, Vec<&'static str>) {
    let mut reader =
        planb_log::read_dir(&root.join("log"), Default::default(), planb_log::Cursor(1))
            .expect("reader");
    let mut state = planb_core::State::default();
    let mut kinds = Vec::new();
    while let Some(record) = reader.next().expect("read") {
        let envelope = planb_core::decode(&record.payload, planb_core::Cursor(record.cursor.0))
            .expect("decode");
        kinds.push(envelope.event.body.kind_name());
        state.apply(&envelope);
    }
    (state, kinds)
}

/// The kinds of the events recorded in the data root at `root`, in order,
/// read after the server stopped (its store opened first, as the next
/// process would).
pub fn recorded_kinds(root: &Path) -> Vec<&'static str> {
    use planb_projections::{DataRoot, Store, SystemEnvironment};
    let (store, _) =
        Store::open(DataRoot::new(root), Arc::new(SystemEnvironment)).expect("open store");
    drop(store);
    planb_tests::logs::events(root)
        .iter()
        .map(planb_core::EventBody::kind_name)
        .collect()
}

/// Runs `planb-mcp --data-dir <root> <args>` (an admin command) to its end.
pub fn planb(root: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_planb-mcp"))
        .arg("--data-dir")
        .arg(root)
        .args(args)
        .env_remove("PLANB_TEAM_URL")
        .output()
        .expect("run planb-mcp")
}

/// An admin command's stdout and stderr, for assertions and their messages.
pub fn all_output(output: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The `downstream` example MCP server, built on first use.
pub fn downstream_binary() -> std::path::PathBuf {
    planb_tests::process::downstream_binary(env!("CARGO"))
}

/// A certificate authority made for one test and a certificate it signed
/// for `127.0.0.1` and `localhost`; nothing but a client given `ca_pem`
/// (`SSL_CERT_FILE`) trusts it.
pub struct Authority {
    /// The authority's certificate, PEM.
    pub ca_pem: String,
    /// The server's certificate.
    pub certificate: rcgen::Certificate,
    /// Its key.
    pub key: rcgen::KeyPair,
}

impl Authority {
    pub fn new() -> Authority {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, SanType};
        let ca_key = KeyPair::generate().expect("ca key");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "planb test authority");
        let ca = ca_params.self_signed(&ca_key).expect("ca");
        let issuer = Issuer::new(ca_params, ca_key);
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(vec!["localhost".to_owned()]).expect("params");
        params
            .subject_alt_names
            .push(SanType::IpAddress([127, 0, 0, 1].into()));
        let certificate = params.signed_by(&key, &issuer).expect("certificate");
        Authority {
            ca_pem: ca.pem(),
            certificate,
            key,
        }
    }
}

/// A TLS front on a loopback port before a plain local server, as a
/// reverse proxy would stand before it: each connection's TLS is
/// terminated with a certificate for `127.0.0.1` and `localhost` from a
/// certificate authority made for this front, and its bytes forwarded to
/// the backend port. `ca` is that authority's PEM file, for
/// `SSL_CERT_FILE`; nothing else trusts it.
pub struct TlsFront {
    pub port: u16,
    pub ca: std::path::PathBuf,
}

impl TlsFront {
    pub fn start(dir: &Path, backend: u16) -> TlsFront {
        use tokio_rustls::rustls;

        let Authority {
            ca_pem,
            certificate: leaf,
            key: leaf_key,
        } = Authority::new();
        let ca = dir.join(format!("ca-{backend}.pem"));
        std::fs::write(&ca, ca_pem).expect("ca file");

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(
                vec![leaf.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
            )
            .expect("server config");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("addr").port();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                loop {
                    let Ok((socket, _)) = listener.accept().await else {
                        return;
                    };
                    let acceptor = acceptor.clone();
                    tokio::spawn(async move {
                        // A client that refuses the certificate ends here,
                        // and the backend never sees it.
                        let Ok(mut tls) = acceptor.accept(socket).await else {
                            return;
                        };
                        let Ok(mut plain) =
                            tokio::net::TcpStream::connect(("127.0.0.1", backend)).await
                        else {
                            return;
                        };
                        let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                    });
                }
            });
        });
        TlsFront { port, ca }
    }
}

pub fn call_in_background(
    server: &Server,
    tool: &'static str,
    arguments: Value,
) -> tokio::task::JoinHandle<CallToolResult> {
    let peer = server.client.peer().clone();
    let Value::Object(arguments) = arguments else {
        panic!("object")
    };
    tokio::spawn(async move {
        peer.call_tool(CallToolRequestParams::new(tool).with_arguments(arguments))
            .await
            .expect("tools/call")
    })
}

/// The answer to a form-mode elicitation: `reply`, else a decline.
fn form_reply(reply: Option<&(ElicitationAction, Option<Value>)>) -> ElicitResult {
    match reply {
        Some((action, content)) => {
            let result = ElicitResult::new(action.clone());
            match content {
                Some(content) => result.with_content(content.clone()),
                None => result,
            }
        }
        None => ElicitResult::new(ElicitationAction::Decline),
    }
}
