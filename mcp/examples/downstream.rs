//! A small downstream MCP server for execution-plan tests and trials:
//! `downstream NAME [TOOL…]` speaks MCP on stdio; `downstream NAME --http
//! ADDR [TOOL…]` serves streamable HTTP at `http://ADDR/mcp` instead (port
//! 0 picks one) and prints that URL as its first line on stdout. With tools
//! named, only those are offered. With `DOWNSTREAM_TOKEN` set, HTTP requests
//! must carry `Authorization: Bearer <token>` (others get 401). Tools: `echo {text}`, `add {a, b}`, `sleep {ms, text?}`,
//! `fail {message}`, `big {bytes}` (a string of that many bytes),
//! `noise {bytes}` (bytes that are not UTF-8, on stderr), `crash {}` (the
//! process exits during the call). With
//! `DOWNSTREAM_CALLS=<file>`, each call is appended to the file as a JSON
//! line `{"server", "tool", "args"}` before it runs.

use std::io::Write;
use std::os::fd::AsFd;
use std::sync::Arc;

use axum::response::IntoResponse;
use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock as Content,
    Implementation, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
    Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::{ErrorData, RoleServer, ServiceExt};
use serde_json::{Map, Value, json};
use tokio::net::unix::pipe;

#[derive(Clone, Debug)]
struct Downstream {
    name: String,
    only: Vec<String>,
}

fn schema(properties: Value) -> Arc<Map<String, Value>> {
    let value = json!({"type": "object", "properties": properties});
    Arc::new(value.as_object().cloned().unwrap_or_default())
}

fn tools() -> Vec<Tool> {
    vec![
        Tool::new("echo", "Returns its text.", schema(json!({"text": {}}))),
        Tool::new(
            "add",
            "Adds a and b.",
            schema(json!({"a": {"type": "number"}, "b": {"type": "number"}})),
        ),
        Tool::new(
            "sleep",
            "Waits ms milliseconds, then returns text.",
            schema(json!({"ms": {"type": "integer"}, "text": {}})),
        ),
        Tool::new(
            "fail",
            "Always fails with its message.",
            schema(json!({"message": {"type": "string"}})),
        ),
        Tool::new(
            "big",
            "Returns a string of `bytes` bytes.",
            schema(json!({"bytes": {"type": "integer"}})),
        ),
        Tool::new(
            "noise",
            "Writes `bytes` bytes that are not UTF-8 to stderr, then returns \"quiet\".",
            schema(json!({"bytes": {"type": "integer"}})),
        ),
        Tool::new(
            "crash",
            "Exits the process during the call.",
            schema(json!({})),
        ),
    ]
}

fn record(server: &str, tool: &str, args: &Map<String, Value>) {
    let Some(path) = std::env::var_os("DOWNSTREAM_CALLS") else {
        return;
    };
    // One write per line, so lines of servers writing at once never mix.
    let line = format!(
        "{}\n",
        json!({"server": server, "tool": tool, "args": args})
    );
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = file.write_all(line.as_bytes());
        let _ = file.sync_all();
    }
}

impl ServerHandler for Downstream {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(self.name.clone(), "0.1.0"))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let offered = tools()
            .into_iter()
            .filter(|t| self.only.is_empty() || self.only.iter().any(|o| *o == t.name))
            .collect();
        Ok(ListToolsResult::with_all_items(offered))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        record(&self.name, &request.name, &args);
        let text = |v: &Value| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let result = match request.name.as_ref() {
            "echo" => CallToolResult::success(vec![Content::text(
                args.get("text").map(text).unwrap_or_default(),
            )]),
            "add" => {
                let n = |k: &str| args.get(k).and_then(Value::as_f64).unwrap_or(0.0);
                CallToolResult::structured(json!({"sum": n("a") + n("b")}))
            }
            "sleep" => {
                let ms = args.get("ms").and_then(Value::as_u64).unwrap_or(100);
                tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                CallToolResult::success(vec![Content::text(
                    args.get("text")
                        .map(text)
                        .unwrap_or_else(|| format!("slept {ms} ms")),
                )])
            }
            "fail" => CallToolResult::error(vec![Content::text(
                args.get("message")
                    .map(text)
                    .unwrap_or_else(|| "failed".into()),
            )]),
            "big" => {
                let bytes = args.get("bytes").and_then(Value::as_u64).unwrap_or(1000);
                let body: String = (0..bytes)
                    .map(|i| char::from(b'a' + (i % 26) as u8))
                    .collect();
                CallToolResult::success(vec![Content::text(body)])
            }
            "noise" => {
                let bytes = args.get("bytes").and_then(Value::as_u64).unwrap_or(1000);
                let noise: Vec<u8> = (0..bytes)
                    .map(|i| if i % 100 == 99 { b'\n' } else { 0xff })
                    .collect();
                let mut stderr = std::io::stderr().lock();
                let _ = stderr.write_all(&noise);
                let _ = stderr.flush();
                CallToolResult::success(vec![Content::text("quiet")])
            }
            "crash" => {
                eprintln!("{}: crashing on purpose", self.name);
                std::process::exit(7);
            }
            other => {
                return Err(ErrorData::invalid_params(format!("no tool {other}"), None));
            }
        };
        Ok(result.into())
    }
}

/// Stdin and stdout as non-blocking pipes, read and written on this thread,
/// when they are pipes (as a client starting a server makes them). Tokio's
/// stdin and stdout hand each read and write to a thread of its blocking
/// pool and back: on two cores that costs more than the tools do, and a
/// client calling several tools at once waits on it.
fn pipes() -> Option<(pipe::Receiver, pipe::Sender)> {
    let input = std::io::stdin().as_fd().try_clone_to_owned().ok()?;
    let output = std::io::stdout().as_fd().try_clone_to_owned().ok()?;
    Some((
        pipe::Receiver::from_owned_fd(input).ok()?,
        pipe::Sender::from_owned_fd(output).ok()?,
    ))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let name = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "downstream".into());
    let mut rest: Vec<String> = std::env::args().skip(2).collect();
    if rest.first().map(String::as_str) == Some("--http") {
        let addr = rest.get(1).cloned().ok_or("--http needs an address")?;
        let only = rest.split_off(2);
        return serve_http(Downstream { name, only }, &addr).await;
    }
    eprintln!("{name}: ready");
    let server = Downstream { name, only: rest };
    let service = match pipes() {
        // Requests carrying large results are taken whole.
        Some((input, output)) => {
            let transport =
                AsyncRwTransport::new_server(input, output).with_max_line_length(usize::MAX);
            server.serve(transport).await?
        }
        None => server.serve(rmcp::transport::stdio()).await?,
    };
    service.waiting().await?;
    Ok(())
}

async fn serve_http(server: Downstream, addr: &str) -> Result<(), Box<dyn std::error::Error>> {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
    let name = server.name.clone();
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let token = std::env::var("DOWNSTREAM_TOKEN").ok();
    let router =
        axum::Router::new()
            .nest_service("/mcp", service)
            .layer(axum::middleware::from_fn(
                move |request: axum::extract::Request, next: axum::middleware::Next| {
                    let expected = token.as_ref().map(|t| format!("Bearer {t}"));
                    async move {
                        let given = request
                            .headers()
                            .get("authorization")
                            .and_then(|v| v.to_str().ok());
                        match expected {
                            Some(expected) if given != Some(expected.as_str()) => {
                                axum::http::StatusCode::UNAUTHORIZED.into_response()
                            }
                            _ => next.run(request).await,
                        }
                    }
                },
            ));
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let url = format!("http://{}/mcp", listener.local_addr()?);
    eprintln!("{name}: ready at {url}");
    let mut stdout = std::io::stdout();
    writeln!(stdout, "{url}")?;
    stdout.flush()?;
    axum::serve(listener, router).await?;
    Ok(())
}
