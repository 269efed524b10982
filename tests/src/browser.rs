//! Debian's headless Chromium driven through its chromedriver with
//! fantoccini, and the page helpers every package's browser tests use.
//!
//! Each [`Browser`] owns one chromedriver [`Process`], started in its own
//! process group on a free loopback port, and one Chromium profile in a fresh
//! temporary directory. Dropping it kills the whole group, so a failing test
//! leaves no browser behind; [`Browser::close`] ends the session politely
//! first. What a page needs beyond these helpers (its own markup, its own
//! server) stays in the package that serves it.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use fantoccini::actions::{InputSource, KeyAction, KeyActions};
use fantoccini::key::Key;
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};
use tempfile::TempDir;

use crate::process::{Process, start_listening};
use crate::{POLL, WAIT};

/// The Debian `chromium` package's browser.
pub const CHROMIUM: &str = "/usr/bin/chromium";
/// The Debian `chromium-driver` package's WebDriver server.
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

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

/// A headless Chromium session and the chromedriver that runs it. Chromium
/// runs as chromedriver's child, in the same process group (except crashpad's
/// handler, which leaves it and exits with the browser).
#[derive(Debug)]
pub struct Browser {
    client: Client,
    driver: Process,
    /// Holds the driver's log and Chromium's profile; removed after the
    /// processes are killed (fields drop in declaration order).
    _dir: TempDir,
}

impl Browser {
    /// Starts chromedriver and a Chromium session with a fresh profile.
    pub async fn start() -> Browser {
        require_binaries();
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

    /// The WebDriver client, for what the helpers here do not cover.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Sets the window to `width` × `height` CSS pixels (a laptop, a phone).
    pub async fn resize(&self, width: u32, height: u32) {
        self.client
            .set_window_size(width, height)
            .await
            .unwrap_or_else(|e| panic!("window size {width}x{height}: {e}"));
    }

    /// Loads `url` and waits for the load event, by which time the page's
    /// deferred scripts have run.
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

    /// The string value of the JavaScript `expression` ("" if not a string).
    pub async fn string(&self, expression: &str) -> String {
        self.eval(expression)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Waits until the JavaScript `expression` is true; panics naming `what`
    /// after [`WAIT`].
    pub async fn wait_until(&self, what: &str, expression: &str) {
        self.wait(what, expression, None).await;
    }

    /// [`Browser::wait_until`] that on timeout also shows the value of
    /// `context`, an expression describing the page.
    pub async fn wait_until_or_show(&self, what: &str, expression: &str, context: &str) {
        self.wait(what, expression, Some(context)).await;
    }

    async fn wait(&self, what: &str, expression: &str, context: Option<&str>) {
        let deadline = Instant::now() + WAIT;
        while !self.check(expression).await {
            if Instant::now() >= deadline {
                let seen = match context {
                    Some(context) => format!("; the page: {}", self.eval(context).await),
                    None => String::new(),
                };
                panic!("timed out after {WAIT:?} waiting for {what} ({expression}){seen}");
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
        self.perform(keys, &format!("press {key:?}")).await;
    }

    /// Shift + `key`.
    pub async fn press_shifted(&self, key: Key) {
        let shift: char = Key::Shift.into();
        let keys = KeyActions::new("keyboard".to_owned())
            .then(KeyAction::Down { value: shift })
            .then(KeyAction::Down { value: key.into() })
            .then(KeyAction::Up { value: key.into() })
            .then(KeyAction::Up { value: shift });
        self.perform(keys, &format!("press Shift+{key:?}")).await;
    }

    /// Types `text` into whatever has the focus, one key at a time.
    pub async fn type_text(&self, text: &str) {
        let mut keys = KeyActions::new("keyboard".to_owned());
        for character in text.chars() {
            keys = keys
                .then(KeyAction::Down { value: character })
                .then(KeyAction::Up { value: character });
        }
        self.perform(keys, &format!("type {text:?}")).await;
    }

    /// Performs `keys`; `what` names them if WebDriver fails.
    async fn perform(&self, keys: KeyActions, what: &str) {
        self.client
            .perform_actions(keys)
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
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
        assert_eq!(
            self.focused_id().await,
            id,
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

    /// Clicks the label of option `index` of question `question` on a
    /// planb form: the input itself is visually replaced by a styled mark.
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
        self.string(&format!(
            "(document.querySelector({css}) || {{ innerText: '' }}).innerText"
        ))
        .await
    }

    /// The `textContent` of the element `css` selects, which unlike the
    /// rendered text ignores CSS (`text-transform`, hidden parts).
    pub async fn text_content(&self, css: &str) -> String {
        let css = serde_json::to_string(css).expect("a string");
        self.string(&format!(
            "(document.querySelector({css}) || {{ textContent: '' }}).textContent"
        ))
        .await
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
        let Browser {
            client,
            driver,
            _dir,
        } = self;
        let _ = client.close().await;
        drop(driver);
    }
}
