//! Browser test support: the real `planb-retro` binary on a free loopback
//! port, for planb-tests' headless Chromium to load.
//!
//! Starting processes on free ports, killing their process groups on drop,
//! chromedriver and Chromium live in [`planb_tests`]; this file adds only
//! what is specific to planb-retro.

use std::path::Path;
use std::process::Command;

use planb_tests::WAIT;
use planb_tests::process::{Process, start_listening};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The real `planb-retro` binary replaying a data root.
pub struct RetroServer {
    process: Process,
    port: u16,
    /// Holds the server's log; removed after the process is killed.
    _logs: TempDir,
}

impl RetroServer {
    /// Starts `planb-retro` on `data_root` and waits until it serves pages.
    #[allow(dead_code, reason = "the team tests start only --team")]
    pub async fn start(data_root: &Path) -> RetroServer {
        RetroServer::start_with(|command| {
            command.env("PLANB_MCP_DATA_DIR", data_root);
        })
        .await
    }

    /// Starts `planb-retro --team` on the database at `url`, its blob
    /// cache under `cache`, and waits until it serves pages.
    #[allow(dead_code, reason = "the team tests use it")]
    pub async fn start_team(url: &str, cache: &Path) -> RetroServer {
        RetroServer::start_with(|command| {
            command
                .arg("--team")
                .env("PLANB_TEAM_URL", url)
                .env("XDG_CACHE_HOME", cache);
        })
        .await
    }

    async fn start_with(setup: impl Fn(&mut Command)) -> RetroServer {
        let logs = tempfile::tempdir().expect("tempdir for the server log");
        let (process, port) = start_listening(logs.path(), "planb-retro", |port| {
            let mut command = Command::new(env!("CARGO_BIN_EXE_planb-retro"));
            command
                .env("PORT", port.to_string())
                .env_remove("PLANB_TEAM_URL")
                .env_remove("RUST_LOG");
            setup(&mut command);
            command
        })
        .await;
        let server = RetroServer {
            process,
            port,
            _logs: logs,
        };
        let status = server.status_of("/").await;
        assert_eq!(
            status,
            200,
            "planb-retro answered GET / with {status}; its log: {}",
            server.process.log()
        );
        server
    }

    /// The absolute URL of `path` on this server.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// The HTTP status of a plain GET of `path`.
    async fn status_of(&self, path: &str) -> u16 {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .expect("connect to planb-retro");
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n",
            self.port
        );
        stream
            .write_all(request.as_bytes())
            .await
            .expect("send a request to planb-retro");
        let mut response = Vec::new();
        tokio::time::timeout(WAIT, stream.read_to_end(&mut response))
            .await
            .expect("planb-retro answered in time")
            .expect("read planb-retro's answer");
        let response = String::from_utf8_lossy(&response);
        response
            .split(' ')
            .nth(1)
            .and_then(|status| status.parse().ok())
            .unwrap_or_else(|| panic!("not an HTTP response: {response:?}"))
    }
}
