//! `planb-test-mcp-server [--mute-while FILE] [--child-pid FILE]`: a
//! downstream MCP server on stdio (newline-delimited JSON-RPC, one request
//! at a time) that misbehaves on purpose, for the execution-plan tests.
//!
//! - `--mute-while FILE`: while FILE exists, nothing is read or answered
//!   (`initialize` included); the pipes stay open. Once it is removed, the
//!   server answers as any other.
//! - `--child-pid FILE`: starts `sleep 3600` in the server's process group
//!   and writes its process id to FILE, so a test can see the group end.
//!
//! Tools: `echo {text}` returns its text; `pid {}` the server's process id;
//! `hang {}` never answers, and from then on the server reads and answers
//! nothing (`ping` included), its pipes open.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::{Value, json};

/// How often a muted server looks at its file again.
const POLL: Duration = Duration::from_millis(50);

struct Options {
    mute_while: Option<PathBuf>,
    child_pid: Option<PathBuf>,
}

fn options() -> anyhow::Result<Options> {
    let mut options = Options {
        mute_while: None,
        child_pid: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let slot = match arg.as_str() {
            "--mute-while" => &mut options.mute_while,
            "--child-pid" => &mut options.child_pid,
            other => return Err(anyhow::anyhow!("unknown argument {other:?}")),
        };
        let value = args
            .next()
            .ok_or_else(|| anyhow::anyhow!("{arg} needs a file"))?;
        *slot = Some(PathBuf::from(value));
    }
    Ok(options)
}

fn tools() -> Value {
    let object = |properties: Value| json!({"type": "object", "properties": properties});
    json!([
        {"name": "echo", "description": "Returns its text.",
         "inputSchema": object(json!({"text": {"type": "string"}}))},
        {"name": "pid", "description": "Returns the server's process id.",
         "inputSchema": object(json!({}))},
        {"name": "hang", "description": "Never answers; the server answers nothing after it.",
         "inputSchema": object(json!({}))},
    ])
}

/// A tool call's result, or `None` for `hang`.
fn call(params: &Value) -> Option<Value> {
    let text =
        |text: String| json!({"content": [{"type": "text", "text": text}], "isError": false});
    match params["name"].as_str() {
        Some("echo") => Some(text(
            params["arguments"]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        )),
        Some("pid") => Some(text(std::process::id().to_string())),
        Some("hang") => None,
        other => Some(json!({
            "content": [{"type": "text", "text": format!("no tool {other:?}")}],
            "isError": true,
        })),
    }
}

/// The answer to one request; `None` for `hang`.
fn answer(method: &str, params: &Value) -> Option<Result<Value, (i64, String)>> {
    Some(match method {
        "initialize" => Ok(json!({
            "protocolVersion": params["protocolVersion"].as_str().unwrap_or("2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "planb-test-mcp-server", "version": "1"},
        })),
        "ping" => Ok(json!({})),
        "tools/list" => Ok(json!({"tools": tools()})),
        "tools/call" => Ok(call(params)?),
        other => Err((-32601, format!("method {other:?} not found"))),
    })
}

fn start_child(pid_file: &PathBuf) -> anyhow::Result<std::process::Child> {
    let child = std::process::Command::new("sleep")
        .arg("3600")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| anyhow::anyhow!("cannot start sleep: {e}"))?;
    std::fs::write(pid_file, child.id().to_string())
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", pid_file.display()))?;
    Ok(child)
}

/// A child killed when the server ends on its own.
struct Ended(std::process::Child);

impl Drop for Ended {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve() -> anyhow::Result<()> {
    let options = options()?;
    // Ended with the server when its stdin closes.
    let _child = match &options.child_pid {
        Some(file) => Some(Ended(start_child(file)?)),
        None => None,
    };
    if let Some(file) = &options.mute_while {
        while file.exists() {
            std::thread::sleep(POLL);
        }
    }
    let mut out = std::io::stdout().lock();
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| anyhow::anyhow!("stdin: {e}"))?;
        let Ok(message) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let (Some(id), Some(method)) = (message.get("id"), message["method"].as_str()) else {
            // A notification or an answer: nothing to say.
            continue;
        };
        let reply = match answer(method, &message["params"]) {
            None => loop {
                // Hung: nothing is read or answered any more.
                std::thread::sleep(Duration::from_secs(3600));
            },
            Some(Ok(result)) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Some(Err((code, text))) => {
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": text}})
            }
        };
        writeln!(out, "{reply}")
            .and_then(|()| out.flush())
            .map_err(|e| anyhow::anyhow!("stdout: {e}"))?;
    }
    Ok(())
}

fn main() -> ExitCode {
    match serve() {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("planb-test-mcp-server: {message}");
            ExitCode::from(2)
        }
    }
}
