//! Model backends: where a `model` step's prompt goes and its answer comes
//! from.
//!
//! A backend is named by a spec (`PLANB_MODEL`, or `PLANB_MODEL_<PROFILE>`):
//! - `command:<argv>`: a program that reads the prompt on stdin and writes
//!   the answer on stdout (`command:claude -p`, `command:llm -m gpt-4o`).
//!   The argv is split like a shell does (quotes and backslashes), without
//!   running a shell.
//! - `openai:<base-url>`: an OpenAI-compatible chat completions server
//!   over HTTP or HTTPS ([`openai`]); the model name comes from
//!   `PLANB_MODEL_NAME`, the bearer key from the variable that
//!   `PLANB_MODEL_KEY_ENV` names (default `OPENAI_API_KEY`).
//!
//! - MCP sampling ([`sampling`]): when nothing is configured and the
//!   client of planb-mcp declares sampling, its model answers; the run then
//!   executes in that planb-mcp process.
//!
//! Model profiles (`baseline`, `premium`, `frontier`) pick
//! `PLANB_MODEL_<PROFILE>` when it is set, else `PLANB_MODEL`.
//!
//! Every call is bounded: a timeout (the program is killed when it passes)
//! and a largest answer (the program is killed when its stdout passes it).

use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Largest answer read from a backend, in bytes.
pub const ANSWER_BYTES_MAX: usize = 4 << 20;
/// Most of a failing program's stderr kept for the message, in bytes.
const STDERR_TAIL_BYTES: usize = 2_000;

/// Why no backend, or a call to one, worked. `code` gives the error code the
/// task tools return.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// Nothing configured.
    #[error(
        "no model is configured: set PLANB_MODEL in planb-mcp's environment, for example \
         PLANB_MODEL='command:claude -p' (a program that reads the prompt on stdin and answers on \
         stdout) or PLANB_MODEL='openai:http://127.0.0.1:11434/v1' (an OpenAI-compatible server), \
         or connect from a client that supports MCP sampling (its model then answers)"
    )]
    NotConfigured,
    /// The spec cannot be read.
    #[error("model spec {spec:?}: {problem}")]
    BadSpec {
        /// The spec given.
        spec: String,
        /// What is wrong.
        problem: String,
    },
    /// The program could not be started.
    #[error("model command {program:?} could not start: {source}")]
    Spawn {
        /// argv[0].
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// No answer within the timeout; the program was killed.
    #[error("the model did not answer within {} s", .0.as_secs_f64())]
    Timeout(Duration),
    /// The answer passed [`ANSWER_BYTES_MAX`]; the program was killed.
    #[error("the model's answer passed {ANSWER_BYTES_MAX} bytes; it was cut off and refused")]
    TooLarge,
    /// The program failed.
    #[error("model command exited with {status}: {stderr}")]
    Failed {
        /// Its exit status.
        status: std::process::ExitStatus,
        /// The end of its stderr.
        stderr: String,
    },
    /// The answer is not UTF-8 text.
    #[error("the model's answer is not UTF-8 text")]
    NotText,
    /// Reading or writing the program's pipes failed.
    #[error("talking to the model command: {0}")]
    Io(#[from] std::io::Error),
    /// The client's model (MCP sampling) refused, failed or answered no text.
    #[error("the client's model (MCP sampling): {0}")]
    Sampling(String),
    /// An OpenAI-compatible server failed or answered something unusable.
    #[error("model server {url}: {problem}")]
    Server {
        /// The URL asked.
        url: String,
        /// What went wrong.
        problem: String,
    },
}

impl BackendError {
    /// `MODEL_NOT_CONFIGURED` for a missing or unusable configuration, else
    /// `MODEL_ERROR`.
    pub fn code(&self) -> &'static str {
        match self {
            BackendError::NotConfigured | BackendError::BadSpec { .. } => "MODEL_NOT_CONFIGURED",
            _ => "MODEL_ERROR",
        }
    }

    /// A short stable class for a failed step: `timeout`, `too_large`, …
    pub fn class(&self) -> &'static str {
        match self {
            BackendError::NotConfigured | BackendError::BadSpec { .. } => "model_not_configured",
            BackendError::Timeout(_) => "model_timeout",
            BackendError::TooLarge => "model_answer_too_large",
            BackendError::NotText => "model_answer_not_text",
            BackendError::Spawn { .. }
            | BackendError::Failed { .. }
            | BackendError::Io(_)
            | BackendError::Sampling(_)
            | BackendError::Server { .. } => "model_error",
        }
    }
}

/// The model profiles a task may ask for.
pub const PROFILES: [&str; 3] = ["baseline", "premium", "frontier"];

/// A configured backend.
#[derive(Debug, Clone)]
pub enum Backend {
    /// A program: argv, prompt on stdin, answer on stdout.
    Command(Vec<String>),
    /// An OpenAI-compatible server.
    OpenAi(openai::OpenAi),
    /// The model of the MCP client planb-mcp serves (sampling).
    Sampling(sampling::Sampler),
}

/// A backend's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The text.
    pub text: String,
    /// How long it took.
    pub duration: Duration,
    /// Prompt tokens, when the backend says.
    pub tokens_in: Option<u64>,
    /// Answer tokens, when the backend says.
    pub tokens_out: Option<u64>,
}

impl Backend {
    /// The backend a spec names; `None` (nothing configured) is
    /// [`BackendError::NotConfigured`].
    pub fn from_spec(spec: Option<&str>) -> Result<Backend, BackendError> {
        Backend::from_spec_with(spec, &|name| std::env::var(name).ok())
    }

    /// The backend for `profile` (or the default) from the environment
    /// `var` reads: `PLANB_MODEL_<PROFILE>`, else `PLANB_MODEL`.
    pub fn configured(
        profile: Option<&str>,
        var: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Backend, BackendError> {
        let by_profile = profile
            .and_then(|p| var(&format!("PLANB_MODEL_{}", p.to_ascii_uppercase())))
            .filter(|s| !s.trim().is_empty());
        let spec = by_profile.or_else(|| var("PLANB_MODEL"));
        Backend::from_spec_with(spec.as_deref(), var)
    }

    /// [`from_spec`](Self::from_spec) with the environment `var` reads.
    pub fn from_spec_with(
        spec: Option<&str>,
        var: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Backend, BackendError> {
        let spec = spec.map(str::trim).filter(|s| !s.is_empty());
        let Some(spec) = spec else {
            return Err(BackendError::NotConfigured);
        };
        let bad = |problem: &str| BackendError::BadSpec {
            spec: spec.to_owned(),
            problem: problem.to_owned(),
        };
        if let Some(command) = spec.strip_prefix("command:") {
            let argv = split_argv(command).map_err(|p| bad(&p.to_string()))?;
            if argv.is_empty() {
                return Err(bad("names no program after command:"));
            }
            Ok(Backend::Command(argv))
        } else if let Some(base) = spec.strip_prefix("openai:") {
            let model = var("PLANB_MODEL_NAME")
                .filter(|m| !m.trim().is_empty())
                .unwrap_or_else(|| "default".to_owned());
            let key_var = var("PLANB_MODEL_KEY_ENV")
                .filter(|k| !k.trim().is_empty())
                .unwrap_or_else(|| "OPENAI_API_KEY".to_owned());
            let key = var(&key_var).filter(|k| !k.is_empty());
            let server =
                openai::OpenAi::parse(base, model, key).map_err(|p| bad(&p.to_string()))?;
            Ok(Backend::OpenAi(server))
        } else {
            Err(bad("must start with command: or openai:"))
        }
    }

    /// Asks `prompt` and returns the answer, within `timeout`.
    pub async fn ask(&self, prompt: &str, timeout: Duration) -> Result<Answer, BackendError> {
        match self {
            Backend::Command(argv) => ask_command(argv, prompt, timeout).await,
            Backend::OpenAi(server) => server.ask(prompt, timeout).await,
            Backend::Sampling(client) => client.ask(prompt, timeout).await,
        }
    }
}

/// Why a `command:` line does not split into words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ArgvError {
    /// A `'` without its closing one.
    #[error("a single quote is not closed")]
    SingleQuote,
    /// A `"` without its closing one.
    #[error("a double quote is not closed")]
    DoubleQuote,
    /// A `\` with nothing after it.
    #[error("a backslash ends the command")]
    TrailingBackslash,
}

/// Splits `text` into words like a POSIX shell: whitespace separates words,
/// single quotes keep everything literal, double quotes keep whitespace and
/// honour `\"` and `\\`, a backslash outside quotes escapes the next character.
pub fn split_argv(text: &str) -> Result<Vec<String>, ArgvError> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err(ArgvError::SingleQuote),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\')) => word.push(c),
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => return Err(ArgvError::DoubleQuote),
                        },
                        Some(c) => word.push(c),
                        None => return Err(ArgvError::DoubleQuote),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(c) => word.push(c),
                    None => return Err(ArgvError::TrailingBackslash),
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

async fn ask_command(
    argv: &[String],
    prompt: &str,
    timeout: Duration,
) -> Result<Answer, BackendError> {
    let started = Instant::now();
    let Some(program) = argv.first() else {
        return Err(BackendError::BadSpec {
            spec: "command:".into(),
            problem: "names no program after command:".into(),
        });
    };
    let (launched, launch_args) = keeper::launch(argv);
    let mut child = tokio::process::Command::new(launched)
        .args(launch_args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| BackendError::Spawn {
            program: program.clone(),
            source,
        })?;
    // However the call ends (an answer, a timeout, too much output, the
    // caller giving up), the program's whole group goes with it.
    let _group = keeper::GroupKill::new(child.id());
    let pipes = Pipes::of(&mut child)?;
    let talk = talk(child, pipes, prompt.as_bytes().to_vec());
    let (status, answer, errors) = match tokio::time::timeout(timeout, talk).await {
        Ok(result) => result?,
        // Dropping the future kills the program (kill_on_drop).
        Err(_) => return Err(BackendError::Timeout(timeout)),
    };
    if !status.success() {
        return Err(BackendError::Failed {
            status,
            stderr: stderr_tail(&errors),
        });
    }
    let text = String::from_utf8(answer).map_err(|_| BackendError::NotText)?;
    Ok(Answer {
        text,
        duration: started.elapsed(),
        tokens_in: None,
        tokens_out: None,
    })
}

/// A command backend's three pipes.
struct Pipes {
    stdin: tokio::process::ChildStdin,
    stdout: tokio::process::ChildStdout,
    stderr: tokio::process::ChildStderr,
}

impl Pipes {
    fn of(child: &mut tokio::process::Child) -> Result<Pipes, BackendError> {
        let not_a_pipe = |which: &str| {
            BackendError::Io(std::io::Error::other(format!(
                "the program's {which} is not a pipe"
            )))
        };
        Ok(Pipes {
            stdin: child.stdin.take().ok_or_else(|| not_a_pipe("stdin"))?,
            stdout: child.stdout.take().ok_or_else(|| not_a_pipe("stdout"))?,
            stderr: child.stderr.take().ok_or_else(|| not_a_pipe("stderr"))?,
        })
    }
}

/// How long a program's pipes may stay open after it exited: something it
/// started in the background may hold them (`sleep 600 &`), and the answer
/// is whole once the program itself has ended.
const PIPES_GRACE: Duration = Duration::from_secs(2);

/// Writes the prompt while reading the answer and stderr's end, and waits
/// for the program: its status, its answer and that end. Once the program
/// has ended, its pipes have [`PIPES_GRACE`] to close before its group is
/// killed. Dropped, it kills the program (kill_on_drop).
async fn talk(
    mut child: tokio::process::Child,
    pipes: Pipes,
    prompt: Vec<u8>,
) -> Result<(std::process::ExitStatus, Vec<u8>, Vec<u8>), BackendError> {
    let group = keeper::GroupKill::new(child.id());
    let reading = read_and_write(pipes, prompt);
    tokio::pin!(reading);
    let status = tokio::select! {
        read = &mut reading => {
            let (answer, errors) = read?;
            return Ok((child.wait().await?, answer, errors));
        }
        status = child.wait() => status?,
    };
    if let Ok(read) = tokio::time::timeout(PIPES_GRACE, &mut reading).await {
        let (answer, errors) = read?;
        return Ok((status, answer, errors));
    }
    // What the program left behind holds its pipes: it goes, and they close.
    group.kill();
    let (answer, errors) = reading.await?;
    Ok((status, answer, errors))
}

/// Writes the prompt while reading the answer and stderr's end.
async fn read_and_write(pipes: Pipes, prompt: Vec<u8>) -> Result<(Vec<u8>, Vec<u8>), BackendError> {
    let Pipes {
        mut stdin,
        stdout,
        stderr,
    } = pipes;
    // Writing and reading at once: a program may answer before it has
    // read the whole prompt, and a full pipe would stall both sides.
    let write = async move {
        // A program that exits without reading its stdin is not an error.
        let _ = stdin.write_all(&prompt).await;
        drop(stdin);
        Ok::<(), BackendError>(())
    };
    // An oversized answer ends the talk at once; the program is then
    // killed when `child` is dropped (kill_on_drop).
    let ((), answer, errors) = tokio::try_join!(write, read_answer(stdout), read_tail(stderr))?;
    Ok((answer, errors))
}

/// The program's stdout, refused once it passes [`ANSWER_BYTES_MAX`].
async fn read_answer(mut stdout: tokio::process::ChildStdout) -> Result<Vec<u8>, BackendError> {
    let mut answer = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = stdout.read(&mut chunk).await?;
        if n == 0 {
            return Ok(answer);
        }
        if answer.len() + n > ANSWER_BYTES_MAX {
            return Err(BackendError::TooLarge);
        }
        answer.extend_from_slice(&chunk[..n]);
    }
}

/// The program's stderr read to the end, however much, keeping only the
/// tail: a program blocked on a full stderr pipe would never finish.
async fn read_tail(mut stderr: tokio::process::ChildStderr) -> Result<Vec<u8>, BackendError> {
    let mut tail = Vec::new();
    let mut chunk = vec![0u8; 8 * 1024];
    while let Ok(n) = stderr.read(&mut chunk).await {
        if n == 0 {
            break;
        }
        tail.extend_from_slice(&chunk[..n]);
        if tail.len() > 4 * STDERR_TAIL_BYTES {
            tail.drain(..tail.len() - 2 * STDERR_TAIL_BYTES);
        }
    }
    Ok(tail)
}

/// The last [`STDERR_TAIL_BYTES`] characters of what a failed program
/// wrote to stderr, trimmed.
fn stderr_tail(errors: &[u8]) -> String {
    let text = String::from_utf8_lossy(errors);
    let tail: String = text
        .chars()
        .rev()
        .take(STDERR_TAIL_BYTES)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    tail.trim().to_owned()
}

pub mod keeper;
pub mod openai;
pub mod sampling;

#[cfg(test)]
mod tests;
