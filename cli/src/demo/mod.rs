//! `planb-mcp demo`: a tour of planb against the real server.
//!
//! Starts this very binary as an MCP server over stdio with rmcp's client (as
//! an agent would) and walks through what planb does, a stage at a time: a
//! session with a question form, a named plan reviewed in the browser (a
//! change requested, then approved), an execution plan over a small MCP
//! server this binary also is (`demo-tools`), a `fast` task when a model is
//! configured, and the replay of it all in planb-retro's pages, served here.
//! With `--auto` the demo answers the forms and reviews itself, through the
//! same pages a person's browser uses. The demo is a client, so it may print
//! to its own stdout; the server it starts keeps stdout for JSON-RPC.

mod stages;
pub mod tools;
mod web;

use std::io::Write;
use std::path::Path;
use std::process::{ExitCode, Stdio};

use anyhow::Context;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
    ProtocolVersion,
};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;
use tokio::io::AsyncBufReadExt;
use tokio::sync::mpsc::UnboundedReceiver;

fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.clone())
        .unwrap_or_default()
}

/// Whether a browser can be opened here: a desktop session, or macOS/Windows.
fn has_display() -> bool {
    cfg!(any(target_os = "macos", windows))
        || std::env::var_os("DISPLAY").is_some_and(|d| !d.is_empty())
        || std::env::var_os("WAYLAND_DISPLAY").is_some_and(|d| !d.is_empty())
}

/// A running tour: the server it drives, the pages it opened, where it
/// writes.
pub(crate) struct Demo<'o> {
    client: RunningService<RoleClient, ClientConfig>,
    /// The address of each page the server opened (a form, a review), in
    /// order.
    pages: UnboundedReceiver<String>,
    /// The demo answers its pages itself.
    auto: bool,
    /// No browser can be opened here.
    headless: bool,
    data_root: &'o Path,
    out: &'o mut dyn Write,
}

impl Demo<'_> {
    /// Prints a line of the tour.
    fn say(&mut self, text: impl AsRef<str>) -> anyhow::Result<()> {
        writeln!(self.out, "{}", text.as_ref())?;
        self.out.flush()?;
        Ok(())
    }

    /// Calls the tool `name`; its text, or an error when it answers with one.
    async fn call(&self, name: &'static str, arguments: Value) -> anyhow::Result<String> {
        call(self.client.peer().clone(), name, arguments).await
    }

    /// The next page the server opened, said to the person: opened in the
    /// browser, or its address on a machine without one.
    async fn next_page(&mut self, what: &str) -> anyhow::Result<String> {
        let url = self
            .pages
            .recv()
            .await
            .with_context(|| format!("the server did not open the {what}"))?;
        let line = match (self.auto, self.headless) {
            (true, _) => format!("   the {what} is at {url}; --auto answers it"),
            (false, true) => format!(
                "   no display here: open the {what} in a browser:\n   {url}\n   (from another machine: start with PLANB_PORT=8765 and forward it, ssh -L 8765:127.0.0.1:8765 <this host>)"
            ),
            (false, false) => format!("   the {what} opened in your browser (if not, open {url})"),
        };
        self.say(line)?;
        Ok(url)
    }
}

/// Runs the tour against `data_root`; with `auto`, answering its own pages.
pub fn run(data_root: &Path, auto: bool, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let headless = !has_display();
        let servers = stages::servers_file(data_root)?;
        let (client, pages) = start_server(data_root, &servers, headless || auto).await?;
        let mut demo = Demo {
            client,
            pages,
            auto,
            headless,
            data_root,
            out,
        };
        let code = stages::tour(&mut demo).await;
        demo.client.cancel().await.ok();
        code
    })
}

/// This binary started as an MCP server on `data_root` with the servers
/// file `servers` and initialized, and the addresses of the pages it says
/// on stderr that it opens. With `no_open`, it opens no browser.
async fn start_server(
    data_root: &Path,
    servers: &Path,
    no_open: bool,
) -> anyhow::Result<(
    RunningService<RoleClient, ClientConfig>,
    UnboundedReceiver<String>,
)> {
    let exe =
        planb_app::models::keeper::this_program().context("cannot find the planb-mcp binary")?;
    let mut command = tokio::process::Command::new(exe);
    // Named plans are the demo's, in its own folder, not the project's.
    command
        .arg("--plans-dir")
        .arg(data_root.join("demo").join("plans"))
        .env("PLANB_MCP_DATA_DIR", data_root)
        .env("PLANB_SERVERS", servers)
        .env("PLANB_LOG", "info");
    // The person's own server settings (a tool selection, a team database,
    // shorter waits) are not the demo's; a fixed port is kept, for a form
    // reached through ssh -L.
    for own in [
        "ASK_ANSWER_TIMEOUT_MS",
        "PLANB_HAND_BACK_MS",
        "PLANB_PROGRESS_INTERVAL_MS",
        "PLANB_TEAM_URL",
        "PLANB_TOOLS",
    ] {
        command.env_remove(own);
    }
    if no_open {
        command.env("ASK_NO_OPEN", "1");
    }
    let (transport, stderr) = TokioChildProcess::builder(command)
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot start the server")?;
    let (url_tx, url_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    if let Some(stderr) = stderr {
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(rest) = line.split("opening browser directly: ").nth(1) {
                    let url = rest.split_whitespace().next().unwrap_or_default();
                    let _ = url_tx.send(url.to_string());
                }
            }
        });
    }
    let client_info = ClientConfig::new(
        ClientCapabilities::builder().enable_elicitation().build(),
        Implementation::new("planb-demo", env!("CARGO_PKG_VERSION")),
    )
    .with_protocol_version(ProtocolVersion::V_2025_11_25);
    let client = client_info.serve(transport).await.context("initialize")?;
    Ok((client, url_rx))
}

/// Calls the tool `name`; its text, or an error when it answers with one.
async fn call(
    peer: rmcp::service::Peer<RoleClient>,
    name: &'static str,
    arguments: Value,
) -> anyhow::Result<String> {
    let Value::Object(arguments) = arguments else {
        anyhow::bail!("arguments must be an object")
    };
    let result = peer
        .call_tool(CallToolRequestParams::new(name).with_arguments(arguments))
        .await
        .with_context(|| format!("{name} failed"))?;
    if result.is_error == Some(true) {
        anyhow::bail!("{name}: {}", text_of(&result));
    }
    Ok(text_of(&result))
}
