//! Browser test support: Debian's headless Chromium driven through its
//! chromedriver with fantoccini, and an `ask_user` call waiting in the
//! background for the form the browser fills.
//!
//! Each [`Browser`] owns one chromedriver process, started in its own process
//! group on a free loopback port, and one Chromium profile in a fresh
//! temporary directory. Dropping it kills the whole group, so a failing test
//! leaves no browser behind; [`Browser::close`] ends the session politely
//! first. Nothing here sleeps for a fixed time to let the page settle: every
//! wait polls a condition and fails with a message after [`WAIT`].

use std::fs::File;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::actions::{InputSource, KeyAction, KeyActions};
use fantoccini::key::Key;
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::task::JoinHandle;

use super::{Server, UrlAnswer, new_session, start, text_of};

/// The Debian `chromium` package's browser.
pub const CHROMIUM: &str = "/usr/bin/chromium";
/// The Debian `chromium-driver` package's WebDriver server.
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// Longest wait for any condition in the page, for chromedriver to listen,
/// and for the agent's call to return once it should have.
pub const WAIT: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(50);
/// A port picked free can be taken before chromedriver binds it.
const DRIVER_ATTEMPTS_MAX: usize = 3;

/// Chromium's flags; the profile directory is added per browser.
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

/// Panics, naming the packages to install, unless both binaries exist. The
/// browser tests must fail rather than pass without a browser.
fn require_binaries() {
    for binary in [CHROMIUM, CHROMEDRIVER] {
        assert!(
            Path::new(binary).exists(),
            "{binary} is missing: the browser tests need Debian's `chromium` and \
             `chromium-driver` packages (`sudo apt-get install -y chromium chromium-driver`, \
             or run scripts/test, which installs them)"
        );
    }
}

/// A chromedriver process and the directory holding its log and Chromium's
/// profile. Chromium runs as chromedriver's child, in the same process group
/// (except crashpad's handler, which leaves it and exits with the browser).
struct Driver {
    child: Child,
    port: u16,
    /// Removed after the processes are killed (fields drop after `drop`).
    dir: TempDir,
}

impl Driver {
    async fn start() -> Driver {
        let mut dir = tempfile::tempdir().expect("tempdir for chromedriver");
        let log_path = dir.path().join("chromedriver.log");
        for _ in 0..DRIVER_ATTEMPTS_MAX {
            let port = free_port();
            let log = File::create(&log_path).expect("driver log");
            let child = Command::new(CHROMEDRIVER)
                .arg(format!("--port={port}"))
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("driver log"))
                .stderr(log)
                .process_group(0)
                .spawn()
                .unwrap_or_else(|e| panic!("start {CHROMEDRIVER}: {e}"));
            let mut driver = Driver { child, port, dir };
            if driver.wait_until_listening().await {
                return driver;
            }
            // It exited before listening, most likely because the port was
            // taken between `free_port` and its bind: try another.
            dir = driver.into_dir();
        }
        panic!(
            "chromedriver did not start in {DRIVER_ATTEMPTS_MAX} attempts; its log: {}",
            read_log(&log_path)
        );
    }

    /// Whether chromedriver accepts connections; false once it has exited.
    async fn wait_until_listening(&mut self) -> bool {
        let deadline = Instant::now() + WAIT;
        loop {
            if tokio::net::TcpStream::connect(("127.0.0.1", self.port))
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
                "chromedriver did not listen on port {} within {WAIT:?}; its log: {}",
                self.port,
                self.log()
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// Ends the processes and keeps the directory.
    fn into_dir(mut self) -> TempDir {
        let placeholder = tempfile::tempdir().expect("tempdir");
        std::mem::replace(&mut self.dir, placeholder)
    }

    fn log(&self) -> String {
        read_log(&self.dir.path().join("chromedriver.log"))
    }

    fn profile_dir(&self) -> PathBuf {
        self.dir.path().join("profile")
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // The group id is chromedriver's pid (`process_group(0)`); Chromium
        // and its helpers inherited it. Killing the group, not a name, ends
        // exactly the processes this driver started.
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind(("127.0.0.1", 0))
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}

fn read_log(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| format!("(unreadable: {e})"))
}

/// A headless Chromium session.
pub struct Browser {
    client: Client,
    driver: Driver,
}

impl Browser {
    /// Starts chromedriver and a Chromium session with a fresh profile.
    pub async fn start() -> Browser {
        require_binaries();
        let driver = Driver::start().await;
        let mut args: Vec<String> = CHROMIUM_ARGS.iter().map(|a| a.to_string()).collect();
        args.push(format!(
            "--user-data-dir={}",
            driver.profile_dir().display()
        ));
        let Value::Object(capabilities) = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
        }) else {
            unreachable!("a JSON object literal")
        };
        let client = ClientBuilder::new(HttpConnector::new())
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{}", driver.port))
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "chromedriver could not start {CHROMIUM}: {e}; its log: {}",
                    driver.log()
                )
            });
        Browser { client, driver }
    }

    /// The WebDriver client, for what the helpers here do not cover.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Loads `url` and waits for the load event.
    pub async fn open(&self, url: &str) {
        self.client
            .goto(url)
            .await
            .unwrap_or_else(|e| panic!("load {url}: {e}"));
    }

    /// Runs `script` (a function body; use `return`) in the page.
    pub async fn js(&self, script: &str) -> Value {
        self.client
            .execute(script, Vec::new())
            .await
            .unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    /// The value of the JavaScript `expression`.
    pub async fn eval(&self, expression: &str) -> Value {
        self.js(&format!("return ({expression});")).await
    }

    /// Whether the JavaScript `expression` is true.
    pub async fn check(&self, expression: &str) -> bool {
        self.eval(expression).await == Value::Bool(true)
    }

    /// Waits until the JavaScript `expression` is true; panics naming `what`
    /// after [`WAIT`].
    pub async fn wait_until(&self, what: &str, expression: &str) {
        let deadline = Instant::now() + WAIT;
        while !self.check(expression).await {
            assert!(
                Instant::now() < deadline,
                "timed out after {WAIT:?} waiting for {what} ({expression})"
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// The id of the focused element ("" for the body).
    pub async fn focused_id(&self) -> String {
        self.eval("document.activeElement ? document.activeElement.id : ''")
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Presses and releases `key` on whatever has the focus, as a person at
    /// the keyboard would (WebDriver actions, not element commands).
    pub async fn press(&self, key: Key) {
        let keys = KeyActions::new("keyboard".to_owned())
            .then(KeyAction::Down { value: key.into() })
            .then(KeyAction::Up { value: key.into() });
        self.perform(keys).await;
    }

    /// Shift + `key`.
    pub async fn press_shifted(&self, key: Key) {
        let shift: char = Key::Shift.into();
        let keys = KeyActions::new("keyboard".to_owned())
            .then(KeyAction::Down { value: shift })
            .then(KeyAction::Down { value: key.into() })
            .then(KeyAction::Up { value: key.into() })
            .then(KeyAction::Up { value: shift });
        self.perform(keys).await;
    }

    /// Types `text` into whatever has the focus, one key at a time.
    pub async fn type_text(&self, text: &str) {
        let mut keys = KeyActions::new("keyboard".to_owned());
        for character in text.chars() {
            keys = keys
                .then(KeyAction::Down { value: character })
                .then(KeyAction::Up { value: character });
        }
        self.perform(keys).await;
    }

    async fn perform(&self, keys: KeyActions) {
        self.client
            .perform_actions(keys)
            .await
            .unwrap_or_else(|e| panic!("key actions: {e}"));
    }

    /// Presses Tab (or Shift+Tab when `backwards`) until the element with
    /// `id` has the focus; panics after `presses_max` presses.
    pub async fn tab_to(&self, id: &str, backwards: bool, presses_max: usize) {
        for _ in 0..presses_max {
            if self.focused_id().await == id {
                return;
            }
            if backwards {
                self.press_shifted(Key::Tab).await;
            } else {
                self.press(Key::Tab).await;
            }
        }
        let focused = self.focused_id().await;
        assert_eq!(
            focused, id,
            "Tab did not reach #{id} in {presses_max} presses"
        );
    }

    /// Clicks the element `css` selects.
    pub async fn click(&self, css: &str) {
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("find {css}: {e}"))
            .click()
            .await
            .unwrap_or_else(|e| panic!("click {css}: {e}"));
    }

    /// Clicks the label of option `index` of question `question`: the input
    /// itself is visually replaced by a styled mark.
    pub async fn click_option(&self, question: &str, index: usize) {
        let xpath = format!("//input[@id='input-{question}-{index}']/ancestor::label[1]");
        self.client
            .find(Locator::XPath(&xpath))
            .await
            .unwrap_or_else(|e| panic!("find option {question}[{index}]: {e}"))
            .click()
            .await
            .unwrap_or_else(|e| panic!("click option {question}[{index}]: {e}"));
    }

    /// Sends keys to the element `css` selects (WebDriver focuses it first).
    pub async fn send_keys(&self, css: &str, text: &str) {
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("find {css}: {e}"))
            .send_keys(text)
            .await
            .unwrap_or_else(|e| panic!("send keys to {css}: {e}"));
    }

    /// Whether the element `css` selects exists and is rendered.
    pub async fn is_visible(&self, css: &str) -> bool {
        let css = serde_json::to_string(css).expect("a string");
        self.check(&format!(
            "(() => {{ const e = document.querySelector({css}); \
             return e !== null && e.getClientRects().length > 0 \
             && getComputedStyle(e).visibility !== 'hidden'; }})()"
        ))
        .await
    }

    /// The rendered text of the element `css` selects ("" when absent).
    pub async fn text(&self, css: &str) -> String {
        let css = serde_json::to_string(css).expect("a string");
        self.eval(&format!(
            "(document.querySelector({css}) || {{ innerText: '' }}).innerText"
        ))
        .await
        .as_str()
        .unwrap_or_default()
        .to_owned()
    }

    /// The `textContent` of the element `css` selects, which unlike the
    /// rendered text ignores CSS (`text-transform`, hidden parts).
    pub async fn text_content(&self, css: &str) -> String {
        let css = serde_json::to_string(css).expect("a string");
        self.eval(&format!(
            "(document.querySelector({css}) || {{ textContent: '' }}).textContent"
        ))
        .await
        .as_str()
        .unwrap_or_default()
        .to_owned()
    }

    /// The scripts and stylesheets the page refers to that its server does
    /// not serve, each with its HTTP status.
    pub async fn missing_assets(&self) -> Vec<String> {
        let script = "const done = arguments[0]; \
            const urls = [...document.querySelectorAll('script[src], link[href]')] \
                .map(e => e.src || e.href); \
            Promise.all(urls.map(u => fetch(u).then(r => [u, r.status], e => [u, String(e)]))) \
                .then(all => done(all.filter(([, s]) => s !== 200).map(([u, s]) => `${u}: ${s}`)));";
        let missing = self
            .client
            .execute_async(script, Vec::new())
            .await
            .unwrap_or_else(|e| panic!("fetch the page's assets: {e}"));
        serde_json::from_value(missing).expect("a list of strings")
    }

    /// Ends the session, which quits Chromium, then stops chromedriver.
    pub async fn close(self) {
        let Browser { client, driver } = self;
        let _ = client.close().await;
        drop(driver);
    }
}

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
