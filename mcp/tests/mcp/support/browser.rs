//! Browser test support for planb-mcp's pages: an `ask_user` call waiting
//! in the background for the form a browser fills.
//!
//! Starting chromedriver and Chromium, cleaning up their process group and
//! the page helpers every package needs live in [`planb_tests::browser`];
//! this file adds only what is specific to planb-mcp.

use rmcp::model::{CallToolRequestParams, CallToolResult};
use serde_json::Value;
use tempfile::TempDir;
use tokio::task::JoinHandle;

pub use planb_tests::WAIT;

use super::{Server, UrlAnswer, new_session, start, text_of};

/// An `ask_user` call waiting in the background on a fresh server and data
/// root, and the form URL the server printed.
pub struct Asked {
    pub server: Server,
    pub pending: JoinHandle<CallToolResult>,
    pub url: String,
    /// The data root; kept until the test has read the log.
    pub dir: TempDir,
}

/// Starts a server on a fresh data root with `env`, creates a session and
/// calls `ask_user` with `spec` (the session id is added).
pub async fn ask(spec: Value, env: &[(&str, &str)]) -> Asked {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = start(dir.path(), UrlAnswer::NotSupported, env).await;
    let session = new_session(&server).await;
    let Value::Object(mut arguments) = spec else {
        panic!("the spec must be a JSON object")
    };
    arguments.insert("sessionId".to_owned(), Value::String(session));
    let peer = server.client.peer().clone();
    let pending = tokio::spawn(async move {
        peer.call_tool(CallToolRequestParams::new("ask_user").with_arguments(arguments))
            .await
            .expect("ask_user call")
    });
    let url = tokio::time::timeout(WAIT, server.seen.stderr_urls.recv())
        .await
        .expect("the server printed the form URL in time")
        .expect("stderr open");
    Asked {
        server,
        pending,
        url,
        dir,
    }
}

impl Asked {
    /// The tool result the agent got, waiting at most [`WAIT`] for it.
    pub async fn result(&mut self) -> CallToolResult {
        tokio::time::timeout(WAIT, &mut self.pending)
            .await
            .expect("the ask_user call returned in time")
            .expect("the ask_user task")
    }

    /// The answers JSON of the tool result.
    pub async fn answers(&mut self) -> Value {
        let result = self.result().await;
        let text = text_of(&result);
        assert_eq!(result.is_error, Some(false), "{text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not answers JSON: {e}: {text:?}"))
    }

    /// Stops the server; its data root stays for inspection.
    pub async fn stop(self) -> TempDir {
        self.server.client.cancel().await.expect("shutdown");
        self.dir
    }
}
