//! The `openai:<base-url>` backend: an OpenAI-compatible chat completions
//! server (Ollama, llama.cpp's server, vLLM, LM Studio, or a proxy in front
//! hosted API such as OpenAI or OpenRouter), over HTTP or HTTPS through the
//! process's client ([`crate::web`]).
//!
//! One request per prompt (`POST <base>/chat/completions`, one user
//! message, no streaming). Connection failures, 429 and 5xx answers are
//! retried with a doubling backoff while the step's time lasts; any other
//! answer is final. The body read is bounded.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{ANSWER_BYTES_MAX, Answer, BackendError};

/// Attempts per prompt, the first included.
pub const ATTEMPTS: u32 = 4;
/// The wait before the first retry; it doubles each time.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);

/// Why an `openai:` backend's settings were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OpenAiSpecError {
    /// The base URL is not http(s).
    #[error(
        "the base URL must start with http:// or https:// (for example \
         openai:http://127.0.0.1:11434/v1 or openai:https://api.openai.com/v1)"
    )]
    Scheme,
    /// Nothing between the scheme and the path.
    #[error("the base URL names no host")]
    NoHost,
    /// The URL does not parse (the parser's words).
    #[error("the base URL is not a URL: {0}")]
    NotAUrl(String),
    /// A query or fragment, which the endpoints' paths would follow.
    #[error("the base URL has a query or fragment; give the path up to /v1")]
    QueryOrFragment,
    /// The model name is blank.
    #[error("the model name is empty (set PLANB_MODEL_NAME)")]
    NoModel,
}

/// Where and how to reach the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenAi {
    /// `http(s)://host:port/v1` (no trailing slash).
    pub base: String,
    /// The `model` field of each request.
    pub model: String,
    /// The bearer token, when the server wants one.
    pub key: Option<String>,
}

impl OpenAi {
    /// Reads `openai:<base-url>` (after the prefix), the model name and the
    /// key.
    pub fn parse(
        base: &str,
        model: String,
        key: Option<String>,
    ) -> Result<OpenAi, OpenAiSpecError> {
        let base = base.trim().trim_end_matches('/');
        let Some(rest) = base
            .strip_prefix("http://")
            .or_else(|| base.strip_prefix("https://"))
        else {
            return Err(OpenAiSpecError::Scheme);
        };
        if rest.is_empty() || rest.starts_with('/') {
            return Err(OpenAiSpecError::NoHost);
        }
        let url = reqwest::Url::parse(base).map_err(|e| OpenAiSpecError::NotAUrl(e.to_string()))?;
        if url.query().is_some() || url.fragment().is_some() {
            return Err(OpenAiSpecError::QueryOrFragment);
        }
        if model.trim().is_empty() {
            return Err(OpenAiSpecError::NoModel);
        }
        Ok(OpenAi {
            base: base.to_owned(),
            model,
            key,
        })
    }

    /// Asks `prompt`, retrying transient failures, all within `timeout`.
    pub async fn ask(&self, prompt: &str, timeout: Duration) -> Result<Answer, BackendError> {
        let started = Instant::now();
        let deadline = started + timeout;
        let client =
            crate::web::client().map_err(|problem| http_error(&self.base, problem.to_string()))?;
        let body = json!({
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "stream": false,
        })
        .to_string();
        let mut backoff = FIRST_BACKOFF;
        let mut attempt = 1;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let tried = tokio::time::timeout(left, self.once(&client, &body)).await;
            let error = match tried {
                Err(_) => return Err(BackendError::Timeout(timeout)),
                Ok(Ok(mut answer)) => {
                    answer.duration = started.elapsed();
                    return Ok(answer);
                }
                Ok(Err(error)) => error,
            };
            let (error, asked) = match error {
                Final(error) => return Err(error),
                Transient(error, asked) => (error, asked),
            };
            // The server's Retry-After, when it said one, else the back-off.
            let wait = asked.unwrap_or(backoff);
            if attempt >= ATTEMPTS {
                return Err(error);
            }
            if Instant::now() + wait >= deadline {
                return Err(match asked {
                    Some(asked) => BackendError::Server {
                        url: self.base.clone(),
                        problem: format!(
                            "{error}; it asked to retry after {} s, past the step's time ({} s left)",
                            asked.as_secs(),
                            deadline.saturating_duration_since(Instant::now()).as_secs()
                        ),
                    },
                    None => error,
                });
            }
            tracing::info!("model server: {error}; retrying in {wait:?}");
            tokio::time::sleep(wait).await;
            backoff *= 2;
            attempt += 1;
        }
    }

    async fn once(&self, client: &reqwest::Client, body: &str) -> Result<Answer, Retry> {
        let url = format!("{}/chat/completions", self.base);
        let mut request = client
            .post(url.as_str())
            .header("content-type", "application/json")
            .header("accept", "application/json")
            .body(body.to_owned());
        if let Some(key) = &self.key {
            request = request.bearer_auth(key);
        }
        let mut response = request.send().await.map_err(|e| {
            let problem = format!("cannot reach the server: {}", crate::web::chain(&e));
            // A certificate the system does not trust will not become
            // trusted by asking again.
            if e.is_connect() && problem.contains("certificate") {
                Final(http_error(&url, problem))
            } else {
                Transient(http_error(&url, problem), None)
            }
        })?;
        let status = response.status();
        let asked = retry_after(response.headers());
        let mut bytes = Vec::new();
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    if bytes.len() + chunk.len() > 2 * ANSWER_BYTES_MAX {
                        return Err(Final(BackendError::TooLarge));
                    }
                    bytes.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(e) => {
                    return Err(Transient(
                        http_error(
                            &url,
                            format!("reading the answer: {}", crate::web::chain(&e)),
                        ),
                        None,
                    ));
                }
            }
        }
        if !status.is_success() {
            let text = String::from_utf8_lossy(&bytes);
            let excerpt: String = text.chars().take(500).collect();
            let error = http_error(&url, format!("HTTP {status}: {}", excerpt.trim()));
            return Err(if status.as_u16() == 429 || status.is_server_error() {
                Transient(error, asked)
            } else {
                Final(error)
            });
        }
        parse_completion(&bytes).map_err(|problem| Final(http_error(&url, problem.to_string())))
    }
}

fn http_error(url: &str, problem: String) -> BackendError {
    BackendError::Server {
        url: url.to_owned(),
        problem,
    }
}

/// A failed attempt: worth retrying (after the wait the server asked for,
/// if it did) or not.
enum Retry {
    Transient(BackendError, Option<Duration>),
    Final(BackendError),
}
use Retry::{Final, Transient};

/// The wait a `Retry-After` header asks for: seconds, or an HTTP date.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(
        at.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// Why a chat completion's answer cannot be taken.
#[derive(Debug, thiserror::Error)]
enum CompletionProblem {
    #[error("the answer is not JSON: {0}")]
    NotJson(serde_json::Error),
    #[error("the answer has no choices[0].message.content string")]
    NoContent,
    #[error("the answer passed {ANSWER_BYTES_MAX} bytes")]
    TooLong,
    /// Stopped at its token limit: not the whole answer, so not taken as
    /// the step's result.
    #[error(
        "the answer was cut off at the server's token limit (finish_reason \"length\"); raise the limit the server allows"
    )]
    CutOff,
}

/// The answer's text and token counts from a chat completion.
fn parse_completion(bytes: &[u8]) -> Result<Answer, CompletionProblem> {
    let value: Value = serde_json::from_slice(bytes).map_err(CompletionProblem::NotJson)?;
    let content = value
        .pointer("/choices/0/message/content")
        .and_then(Value::as_str)
        .ok_or(CompletionProblem::NoContent)?;
    if content.len() > ANSWER_BYTES_MAX {
        return Err(CompletionProblem::TooLong);
    }
    // An answer the server stopped at its token limit is not the whole
    // answer: taken, it would be recorded as the step's result.
    if value
        .pointer("/choices/0/finish_reason")
        .and_then(Value::as_str)
        == Some("length")
    {
        return Err(CompletionProblem::CutOff);
    }
    let tokens = |field: &str| {
        value
            .pointer(&format!("/usage/{field}"))
            .and_then(Value::as_u64)
    };
    Ok(Answer {
        text: content.to_owned(),
        duration: Duration::ZERO,
        tokens_in: tokens("prompt_tokens"),
        tokens_out: tokens("completion_tokens"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_completion_gives_its_text_and_usage() {
        let answer = parse_completion(
            br#"{"choices":[{"message":{"role":"assistant","content":"hi"}}],"usage":{"prompt_tokens":3,"completion_tokens":1}}"#,
        )
        .expect("parsed");
        assert_eq!(answer.text, "hi");
        assert_eq!((answer.tokens_in, answer.tokens_out), (Some(3), Some(1)));
        assert!(parse_completion(b"{}").is_err());
        let cut =
            br#"{"choices":[{"message":{"content":"Intake: the go"},"finish_reason":"length"}]}"#;
        let refused = parse_completion(cut).expect_err("a cut-off answer");
        assert!(matches!(refused, CompletionProblem::CutOff), "{refused}");
        assert!(parse_completion(b"<html>").is_err());
    }

    #[test]
    fn http_and_https_base_urls_are_taken() {
        let ok = OpenAi::parse("http://127.0.0.1:8080/v1/", "m".into(), None).expect("ok");
        assert_eq!(ok.base, "http://127.0.0.1:8080/v1");
        let ok = OpenAi::parse("https://api.openai.com/v1", "m".into(), None).expect("ok");
        assert_eq!(ok.base, "https://api.openai.com/v1");
        for bad in [
            "https://",
            "http://h/v1?x=1",
            "ftp://x",
            "http://",
            "127.0.0.1:80",
        ] {
            assert!(OpenAi::parse(bad, "m".into(), None).is_err(), "{bad}");
        }
        assert!(OpenAi::parse("http://h/v1", " ".into(), None).is_err());
    }
}
