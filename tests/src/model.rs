//! A scripted OpenAI-compatible chat completions server on loopback, for
//! the tests of model steps: each answer is a function of its prompt alone
//! (two runs on the same inputs produce the same artifacts); it counts the
//! requests, can answer slowly, and can fail the first requests with 503.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How a server answers a prompt.
pub type Answer = Arc<dyn Fn(&str) -> String + Send + Sync>;

/// A scripted OpenAI-compatible chat completions server.
#[derive(Debug)]
pub struct ModelServer {
    /// Its loopback port.
    pub port: u16,
    requests: Arc<AtomicU64>,
}

/// How the server answers.
#[derive(Clone, Copy, Debug)]
pub struct Script {
    /// How long each answer takes.
    pub delay: Duration,
    /// Requests answered 503 before the first real answer.
    pub fail_first: u64,
}

/// The answer to a prompt: a function of the prompt alone, so two runs on
/// the same inputs produce the same artifacts.
pub fn scripted_answer(prompt: &str) -> String {
    if prompt.contains("Answer with JSON only") {
        return r#"{"tasks": [{"id": "1", "name": "Prepare", "duration_days": 5, "depends_on": []}, {"id": "2", "name": "Build", "duration_days": 10, "depends_on": ["1"]}, {"id": "3", "name": "Launch", "duration_days": 2, "depends_on": ["2"]}]}"#.into();
    }
    let hash = prompt.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let first = prompt
        .lines()
        .next()
        .unwrap_or("")
        .chars()
        .take(60)
        .collect::<String>();
    format!("## Draft\n\nAnswer {hash:016x} to: {first}\n\n- point one\n- point two\n")
}

impl Script {
    /// Every answer at once, none failed.
    pub const INSTANT: Script = Script {
        delay: Duration::ZERO,
        fail_first: 0,
    };
}

impl ModelServer {
    /// Starts the server on a free loopback port, on the current runtime.
    pub async fn start(script: Script) -> ModelServer {
        ModelServer::answering(script, Arc::new(scripted_answer)).await
    }

    /// Starts a server whose answer to a prompt is `answer`'s.
    pub async fn answering(script: Script, answer: Answer) -> ModelServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let requests = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&requests);
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let (counter, answer) = (Arc::clone(&counter), Arc::clone(&answer));
                tokio::spawn(serve_one(socket, counter, script, answer));
            }
        });
        ModelServer { port, requests }
    }

    /// The `PLANB_MODEL` value that names it.
    pub fn spec(&self) -> String {
        format!("openai:http://127.0.0.1:{}/v1", self.port)
    }

    /// Requests received so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::SeqCst)
    }
}

/// The JSON body of the one request `socket` carries, once whole.
async fn read_request(socket: &mut tokio::net::TcpStream) -> Option<Value> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let (head_end, length) = loop {
        let n = socket.read(&mut chunk).await.ok().filter(|&n| n > 0)?;
        buffer.extend_from_slice(&chunk[..n]);
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            break (end + 4, length);
        }
    };
    while buffer.len() < head_end + length {
        let n = socket.read(&mut chunk).await.ok().filter(|&n| n > 0)?;
        buffer.extend_from_slice(&chunk[..n]);
    }
    Some(serde_json::from_slice(&buffer[head_end..head_end + length]).unwrap_or(Value::Null))
}

/// Answers the one request on `socket`: 503 while `script` fails the first
/// ones, else `answer` to its prompt as a chat completion.
async fn serve_one(
    mut socket: tokio::net::TcpStream,
    counter: Arc<AtomicU64>,
    script: Script,
    answer: Answer,
) {
    let Some(request) = read_request(&mut socket).await else {
        return;
    };
    let number = counter.fetch_add(1, Ordering::SeqCst) + 1;
    let (status, body) = if number <= script.fail_first {
        ("503 Service Unavailable", json!({"error": "warming up"}))
    } else {
        tokio::time::sleep(script.delay).await;
        let prompt = request["messages"][0]["content"].as_str().unwrap_or("");
        (
            "200 OK",
            json!({
                "id": format!("c{number}"),
                "object": "chat.completion",
                "model": request["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": answer(prompt)}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": prompt.len() / 4, "completion_tokens": 20}
            }),
        )
    };
    let body = body.to_string();
    let response = format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = socket.write_all(response.as_bytes()).await;
    let _ = socket.shutdown().await;
}
