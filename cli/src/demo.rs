//! `planb-mcp demo`: a guided planning session against the real server.
//!
//! Starts this very binary as an MCP server over stdio with rmcp's client (as an
//! agent would), opens a real form for the person at the keyboard (or prints its
//! URL on a headless machine), saves two plan versions built from the answers,
//! and prints where everything is. The demo is a client, so it may print to its
//! own stdout; the server it starts keeps stdout for JSON-RPC.

use std::io::Write;
use std::path::Path;
use std::process::{ExitCode, Stdio};

use anyhow::Context;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
    ProtocolVersion,
};
use rmcp::service::{Peer, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

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

fn ask_arguments(session: &str) -> Value {
    json!({
        "sessionId": session,
        "title": "Plan a small CLI tool with planb",
        "introTitle": "Welcome",
        "intro": "This is **planb**'s question form. An agent asks you structured questions; \
                  your answers go straight back to it and are recorded in planb's event log.\n\n\
                  | Kind | Control | Answer |\n|---|---|---|\n| text | one line | string |\n\
                  | longtext | paragraph | string |\n| single | radio group | string |\n\
                  | multi | checkboxes | string[] |\n| scale | slider | number |\n\n\
                  ```mermaid\nflowchart LR\n  Agent -- ask_user --> planb -- form --> You\n  You -- answers --> planb -- JSON --> Agent\n```\n\n\
                  Use the arrow keys to move between tabs and options.",
        "questions": [
            {"id": "name", "kind": "text", "label": "What should the tool be called?", "placeholder": "e.g. tidy", "required": true, "tab": "Basics"},
            {"id": "purpose", "kind": "longtext", "label": "What should it do?", "placeholder": "One paragraph is plenty", "tab": "Basics"},
            {"id": "language", "kind": "single", "label": "Language", "required": true, "tab": "Design", "options": [
                {"value": "Rust", "markdown": "### Rust\nFast, a single static binary.\n\n```rust\nfn main() {\n    println!(\"hello\");\n}\n```"},
                {"value": "Go", "markdown": "### Go\nQuick to write, simple cross-compilation."},
                {"value": "Python", "markdown": "### Python\nThe fastest to prototype; needs an interpreter."}
            ]},
            {"id": "features", "kind": "multi", "label": "Which features belong in the first version?", "tab": "Design",
             "options": ["Config file", "Colour output", "Shell completions", "JSON output"]},
            {"id": "effort", "kind": "scale", "label": "How much time for version 1 (days)?", "min": 1, "max": 10, "step": 1, "required": true, "tab": "Design"}
        ]
    })
}

fn plan_from(answers: &Value, revision: u32) -> String {
    let name = answers["name"].as_str().unwrap_or("the tool");
    let language = answers["language"].as_str().unwrap_or("Rust");
    let features: Vec<&str> = answers["features"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let effort = answers["effort"].as_f64().unwrap_or(3.0);
    let mut plan = format!(
        "# Plan: {name}\n\n## Goal\n{}\n\n## Decisions\n- Language: {language}\n- Time box: {effort} day(s)\n\n## Steps\n1. Scaffold the {language} project and its CI.\n2. Implement the core command.\n",
        answers["purpose"]
            .as_str()
            .filter(|p| !p.is_empty())
            .unwrap_or("(not given)")
    );
    for (i, feature) in features.iter().enumerate() {
        plan.push_str(&format!("{}. Add: {feature}.\n", i + 3));
    }
    if revision > 1 {
        plan.push_str("\n## Verification\n- End-to-end test of every command.\n- A release build on each target platform.\n");
    }
    plan
}

/// Runs the demo against `data_root`.
pub fn run(data_root: &Path, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(demo(data_root, out))
}

async fn demo(data_root: &Path, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let headless = !has_display();
    let (client, mut url_rx) = start_server(data_root, headless).await?;
    writeln!(
        out,
        "planb demo: the real server, driven over MCP stdio as an agent would."
    )?;
    let call = |name: &'static str, arguments: Value| call(client.peer().clone(), name, arguments);

    let project = std::env::current_dir()?.display().to_string();
    let created = call(
        "init_planb_session",
        json!({"title": "planb demo", "intent": "try planb end to end", "projectPath": project}),
    )
    .await?;
    let session = created
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("sessionId: "))
        .context("no sessionId in the reply")?
        .to_string();
    writeln!(out, "1. init_planb_session -> sessionId {session}")?;

    let ask = tokio::spawn(call("ask_user", ask_arguments(&session)));
    let url = url_rx
        .recv()
        .await
        .context("the server did not open a form")?;
    if headless {
        writeln!(
            out,
            "2. ask_user: no display here; open this form in a browser:\n   {url}"
        )?;
    } else {
        writeln!(
            out,
            "2. ask_user: a form opened in your browser (if not, open {url})"
        )?;
    }
    writeln!(out, "   waiting for your answers...")?;
    out.flush()?;
    let answers_text = ask.await.context("ask_user task")??;
    let answers: Value = match serde_json::from_str(&answers_text) {
        Ok(answers) => answers,
        Err(_) => {
            writeln!(out, "   {answers_text}")?;
            client.cancel().await.ok();
            return Ok(ExitCode::FAILURE);
        }
    };
    writeln!(out, "   answers: {answers}")?;

    for revision in 1..=2 {
        let saved = call(
            "save_plan",
            json!({"sessionId": session, "plan": plan_from(&answers, revision), "title": format!("revision {revision}")}),
        )
        .await?;
        writeln!(
            out,
            "{}. save_plan -> {}",
            revision + 2,
            saved.replace('\n', "\n   ")
        )?;
    }
    client.cancel().await.ok();
    recorded_at(data_root, &session, out)?;
    Ok(ExitCode::SUCCESS)
}

/// This binary started as an MCP server on `data_root` and initialized, and
/// the form URLs it says on stderr that it opens.
async fn start_server(
    data_root: &Path,
    headless: bool,
) -> anyhow::Result<(
    RunningService<RoleClient, ClientConfig>,
    tokio::sync::mpsc::UnboundedReceiver<String>,
)> {
    let exe = planb_engine::backend::keeper::this_program()
        .context("cannot find the planb-mcp binary")?;
    let mut command = tokio::process::Command::new(exe);
    command
        .env("PLANB_MCP_DATA_DIR", data_root)
        .env("PLANB_LOG", "info");
    // The person's own server settings (a tool selection, a fixed port, a
    // team database, shorter waits) are not the demo's.
    for own in [
        "ASK_ANSWER_TIMEOUT_MS",
        "PLANB_HAND_BACK_MS",
        "PLANB_PORT",
        "PLANB_PROGRESS_INTERVAL_MS",
        "PLANB_TEAM_URL",
        "PLANB_TOOLS",
    ] {
        command.env_remove(own);
    }
    if headless {
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
    peer: Peer<RoleClient>,
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

/// Says where the session's events and files are, and how to replay them.
fn recorded_at(data_root: &Path, session: &str, out: &mut dyn Write) -> anyhow::Result<()> {
    let session_dir = data_root.join("sessions").join(session);
    writeln!(out, "\nEverything is recorded:")?;
    writeln!(out, "  event log      {}", data_root.join("log").display())?;
    writeln!(out, "  session files  {}", session_dir.display())?;
    writeln!(
        out,
        "  replay it      planb-mcp log dump --data-dir {}",
        data_root.display()
    )?;
    Ok(())
}
