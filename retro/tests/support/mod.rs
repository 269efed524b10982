//! Browser test support: the real `planb-retro` binary on a free loopback
//! port, and Debian's headless Chromium driven through its chromedriver with
//! fantoccini.
//!
//! A compact version of `mcp/tests/support/browser.rs`, which cannot be
//! shared without a crate of its own: only what the replay page needs. Every
//! process started here is killed when its owner drops, by its own id or its
//! own process group, so a failing test leaves nothing running. Nothing
//! sleeps for a fixed time to let the page settle: every wait polls a
//! condition and fails with a message after [`WAIT`].

use std::fs::File;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::actions::{InputSource, KeyAction, KeyActions};
use fantoccini::key::Key;
use fantoccini::{Client, ClientBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The Debian `chromium` package's browser.
const CHROMIUM: &str = "/usr/bin/chromium";
/// The Debian `chromium-driver` package's WebDriver server.
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// Longest wait for any condition: a process to listen, the page to change.
pub const WAIT: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(50);
/// A port picked free can be taken before the child binds it.
const START_ATTEMPTS_MAX: usize = 3;

const CHROMIUM_ARGS: [&str; 9] = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1280,1000",
];

fn free_port() -> u16 {
    TcpListener::bind(("127.0.0.1", 0))
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}

fn read_log(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| format!("(unreadable: {e})"))
}

/// A child process in its own process group, with its output in a log file.
/// Dropping it kills the group, which is the child and whatever it started.
struct Process {
    child: Child,
    log_path: PathBuf,
}

impl Process {
    fn spawn(command: &mut Command, log_path: PathBuf) -> Process {
        let log = File::create(&log_path).expect("create a process log");
        let child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone the process log"))
            .stderr(log)
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("start {command:?}: {e}"));
        Process { child, log_path }
    }

    /// Waits until `port` accepts connections; false once the process exited
    /// (most likely the port was taken between `free_port` and its bind).
    async fn wait_until_listening(&mut self, port: u16) -> bool {
        let deadline = Instant::now() + WAIT;
        loop {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return true;
            }
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            assert!(
                Instant::now() < deadline,
                "{:?} did not listen on port {port} within {WAIT:?}; its log: {}",
                self.child,
                self.log()
            );
            tokio::time::sleep(POLL).await;
        }
    }

    fn log(&self) -> String {
        read_log(&self.log_path)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // The group id is the child's pid (`process_group(0)`); Chromium and
        // its helpers inherited chromedriver's. Killing the group, not a
        // name, ends exactly the processes this test started.
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the command `configure` builds for a free port and waits until it
/// listens there, retrying on another port if it exits first.
async fn start_listening(
    dir: &Path,
    name: &str,
    configure: impl Fn(u16) -> Command,
) -> (Process, u16) {
    let log_path = dir.join(format!("{name}.log"));
    for _ in 0..START_ATTEMPTS_MAX {
        let port = free_port();
        let mut process = Process::spawn(&mut configure(port), log_path.clone());
        if process.wait_until_listening(port).await {
            return (process, port);
        }
    }
    panic!(
        "{name} did not start in {START_ATTEMPTS_MAX} attempts; its log: {}",
        read_log(&log_path)
    );
}

/// The real `planb-retro` binary replaying a data root.
pub struct RetroServer {
    process: Process,
    port: u16,
    /// Holds the server's log; removed after the process is killed.
    _logs: TempDir,
}

impl RetroServer {
    /// Starts `planb-retro` on `data_root` and waits until it serves pages.
    pub async fn start(data_root: &Path) -> RetroServer {
        let logs = tempfile::tempdir().expect("tempdir for the server log");
        let (process, port) = start_listening(logs.path(), "planb-retro", |port| {
            let mut command = Command::new(env!("CARGO_BIN_EXE_planb-retro"));
            command
                .env("PORT", port.to_string())
                .env("PLANB_MCP_DATA_DIR", data_root)
                .env_remove("RUST_LOG");
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

/// A headless Chromium session and the chromedriver that runs it.
pub struct Browser {
    client: Client,
    driver: Process,
    /// Holds the driver's log and Chromium's profile; removed after the
    /// processes are killed (fields drop in declaration order).
    _dir: TempDir,
}

impl Browser {
    /// Starts chromedriver and a Chromium session with a fresh profile.
    /// Panics, naming the packages to install, if either binary is missing:
    /// the browser tests must fail rather than pass without a browser.
    pub async fn start() -> Browser {
        for binary in [CHROMIUM, CHROMEDRIVER] {
            assert!(
                Path::new(binary).exists(),
                "{binary} is missing: the browser tests need Debian's `chromium` and \
                 `chromium-driver` packages (`sudo apt-get install -y chromium chromium-driver`)"
            );
        }
        let dir = tempfile::tempdir().expect("tempdir for chromedriver");
        let (driver, port) = start_listening(dir.path(), "chromedriver", |port| {
            let mut command = Command::new(CHROMEDRIVER);
            command.arg(format!("--port={port}"));
            command
        })
        .await;
        let mut args: Vec<String> = CHROMIUM_ARGS.iter().map(|a| a.to_string()).collect();
        args.push(format!(
            "--user-data-dir={}",
            dir.path().join("profile").display()
        ));
        let Value::Object(capabilities) = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
        }) else {
            unreachable!("a JSON object literal")
        };
        let client = ClientBuilder::new(HttpConnector::new())
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "chromedriver could not start {CHROMIUM}: {e}; its log: {}",
                    driver.log()
                )
            });
        Browser {
            client,
            driver,
            _dir: dir,
        }
    }

    /// Loads `url` and waits for the load event, by which time the page's
    /// deferred scripts have run.
    pub async fn open(&self, url: &str) {
        self.client
            .goto(url)
            .await
            .unwrap_or_else(|e| panic!("load {url}: {e}"));
    }

    /// The value of the JavaScript `expression`.
    pub async fn eval(&self, expression: &str) -> Value {
        let script = format!("return ({expression});");
        self.client
            .execute(&script, Vec::new())
            .await
            .unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    /// The string value of the JavaScript `expression` ("" if not a string).
    pub async fn string(&self, expression: &str) -> String {
        self.eval(expression)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Waits until the JavaScript `expression` is true; panics naming `what`
    /// and showing `context` (an expression describing the page) after
    /// [`WAIT`].
    pub async fn wait_until(&self, what: &str, expression: &str, context: &str) {
        let deadline = Instant::now() + WAIT;
        while self.eval(expression).await != Value::Bool(true) {
            if Instant::now() >= deadline {
                let seen = self.eval(context).await;
                panic!(
                    "timed out after {WAIT:?} waiting for {what} ({expression}); the page: {seen}"
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The id of the focused element ("" for the body).
    pub async fn focused_id(&self) -> String {
        self.string("document.activeElement ? document.activeElement.id : ''")
            .await
    }

    /// Presses and releases `key` on whatever has the focus, as a person at
    /// the keyboard would (WebDriver actions, not element commands).
    pub async fn press(&self, key: Key) {
        let keys = KeyActions::new("keyboard".to_owned())
            .then(KeyAction::Down { value: key.into() })
            .then(KeyAction::Up { value: key.into() });
        self.client
            .perform_actions(keys)
            .await
            .unwrap_or_else(|e| panic!("press {key:?}: {e}"));
    }

    /// Presses Tab until the element with `id` has the focus; panics after
    /// `presses_max` presses.
    pub async fn tab_to(&self, id: &str, presses_max: usize) {
        for _ in 0..presses_max {
            if self.focused_id().await == id {
                return;
            }
            self.press(Key::Tab).await;
        }
        assert_eq!(
            self.focused_id().await,
            id,
            "Tab did not reach #{id} in {presses_max} presses"
        );
    }

    /// Ends the session, which quits Chromium, then stops chromedriver.
    pub async fn close(self) {
        let Browser {
            client,
            driver,
            _dir,
        } = self;
        let _ = client.close().await;
        drop(driver);
    }
}
