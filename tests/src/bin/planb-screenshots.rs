//! `planb-screenshots <planb-mcp> <dir>`: the README's pictures, taken from
//! the real thing. Runs `planb-mcp demo` on a fresh data root as a person
//! on a machine without a display would, opens each page it names in
//! headless Chromium at 1200 × 900, and saves `form.png` (the question
//! form), `review.png` (the plan review page, round 2, with its changes)
//! and `replay.png` (the session's replay) in `dir`. The form and the
//! reviews are answered as the page would send them. `scripts/screenshots`
//! builds and runs it.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use planb_tests::browser::Browser;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The next line of the demo's transcript holding `marker`, trimmed.
fn next_line(lines: &mut impl BufRead, marker: &str) -> String {
    loop {
        let mut line = String::new();
        let read = lines.read_line(&mut line).expect("read the demo's output");
        assert!(read > 0, "the demo ended before saying {marker:?}");
        eprint!("{line}");
        if line.contains(marker) {
            return line.trim().to_owned();
        }
    }
}

/// A page address's port and the value of `key` in its query.
fn page_key(url: &str, key: &str) -> (u16, String) {
    let rest = url
        .strip_prefix("http://127.0.0.1:")
        .expect("a loopback page");
    let (port, rest) = rest.split_once('/').expect("a path");
    let value = rest.split_once(&format!("{key}=")).expect("the key").1;
    (port.parse().expect("a port"), value.to_owned())
}

/// POSTs `body` to `path` at 127.0.0.1:`port` as the page itself would.
async fn post(port: u16, path: &str, body: &Value) {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect to the page server");
    let body = body.to_string();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nOrigin: http://127.0.0.1:{port}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.expect("send");
    stream.write_all(body.as_bytes()).await.expect("send");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.expect("answer");
    assert!(answer.starts_with("HTTP/1.1 200"), "POST {path}: {answer}");
}

/// Opens `url`, lets its scripts settle, and saves the window as `file`.
async fn shoot(browser: &Browser, url: &str, file: &Path) {
    browser.open(url).await;
    browser
        .wait_until("the page to be ready", "document.readyState === 'complete'")
        .await;
    // Diagrams and highlighting are drawn by deferred scripts.
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    let png = browser.client().screenshot().await.expect("screenshot");
    std::fs::write(file, png).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    eprintln!("saved {}", file.display());
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let [planb, out] = args.as_slice() else {
        eprintln!("usage: planb-screenshots <planb-mcp> <dir>");
        return ExitCode::from(2);
    };
    std::fs::create_dir_all(out).expect("the pictures' folder");
    let root = tempfile::tempdir().expect("a data root");
    let mut demo = Command::new(planb)
        .arg("--data-dir")
        .arg(root.path())
        .arg("demo")
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .env_remove("PLANB_MODEL")
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the demo");
    let mut lines = std::io::BufReader::new(demo.stdout.take().expect("stdout"));
    let browser = Browser::start().await;
    browser.resize(1200, 900).await;

    let form = next_line(&mut lines, "/ask?sid=");
    shoot(&browser, &form, &out.join("form.png")).await;
    let (port, sid) = page_key(&form, "sid");
    let answers = json!({"name": "tidy", "purpose": "Sort a downloads folder into dated subfolders",
        "language": "Rust", "features": ["Config file", "JSON output"], "effort": 3});
    post(port, "/submit", &json!({"sid": sid, "answers": answers})).await;
    let first = next_line(&mut lines, "/review?rid=");
    let (port, rid) = page_key(&first, "rid");
    let changes = json!({"rid": rid, "verdict": "changes", "feedback": "Say how we roll back.",
        "comments": [{"quote": "To be decided.", "text": "We need a real rollback before we ship."}]});
    post(port, "/review", &changes).await;
    let second = next_line(&mut lines, "/review?rid=");
    shoot(
        &browser,
        &format!("{second}#changes"),
        &out.join("review.png"),
    )
    .await;
    let (port, rid) = page_key(&second, "rid");
    post(port, "/review", &json!({"rid": rid, "verdict": "approve"})).await;
    let serving = next_line(&mut lines, "serving http://");
    let replay = serving.trim_start_matches("serving ").trim_end_matches('/');
    browser.open(&format!("{replay}/")).await;
    let session = browser
        .string("document.querySelector('#sessions a.retro-session-title').getAttribute('href')")
        .await;
    shoot(
        &browser,
        &format!("{replay}{session}"),
        &out.join("replay.png"),
    )
    .await;
    browser.close().await;
    let _ = Command::new("kill")
        .args(["-INT", &demo.id().to_string()])
        .status();
    let _ = demo.wait();
    ExitCode::SUCCESS
}
