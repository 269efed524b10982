use std::time::Duration;

use super::*;

const LONG: Duration = Duration::from_secs(30);

/// The argv of a `command:` backend.
fn argv(backend: Backend) -> Vec<String> {
    match backend {
        Backend::Command(argv) => argv,
        other => panic!("not a command backend: {other:?}"),
    }
}

/// A shell script as a backend: `command:sh -c <script>`.
fn script(body: &str) -> Backend {
    Backend::Command(vec!["sh".into(), "-c".into(), body.into()])
}

#[test]
fn specs_name_a_backend_or_say_how_to_configure_one() {
    let missing = Backend::from_spec(None).expect_err("an error");
    assert_eq!(missing.code(), "MODEL_NOT_CONFIGURED");
    assert!(
        missing
            .to_string()
            .contains("PLANB_MODEL='command:claude -p'"),
        "{missing}"
    );
    assert!(matches!(
        Backend::from_spec(Some("  ")),
        Err(BackendError::NotConfigured)
    ));
    assert_eq!(
        argv(
            Backend::from_spec(Some("command:llm -m 'gpt 4o' --system \"be brief\"")).expect("ok")
        ),
        ["llm", "-m", "gpt 4o", "--system", "be brief"]
    );
    for (spec, problem) in [
        ("command:", "names no program after command:"),
        ("command:llm 'open", "a single quote is not closed"),
        ("ollama", "must start with command: or openai:"),
        (
            "openai:127.0.0.1:11434",
            "must start with http:// or https://",
        ),
    ] {
        let error = Backend::from_spec(Some(spec)).expect_err("an error");
        assert_eq!(error.code(), "MODEL_NOT_CONFIGURED");
        assert!(error.to_string().contains(problem), "{spec}: {error}");
    }
}

#[test]
fn profiles_and_the_openai_settings_come_from_the_environment() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    };
    let vars = env(&[
        ("PLANB_MODEL", "command:cheap"),
        ("PLANB_MODEL_PREMIUM", "openai:http://127.0.0.1:8080/v1"),
        ("PLANB_MODEL_NAME", "qwen"),
        ("PLANB_MODEL_KEY_ENV", "MY_KEY"),
        ("MY_KEY", "sekrit"),
    ]);
    assert_eq!(
        argv(Backend::configured(None, &vars).expect("default")),
        ["cheap"]
    );
    assert_eq!(
        argv(Backend::configured(Some("baseline"), &vars).expect("falls back")),
        ["cheap"]
    );
    let Backend::OpenAi(server) = Backend::configured(Some("premium"), &vars).expect("premium")
    else {
        panic!("not an OpenAI-compatible backend");
    };
    assert_eq!(server.base, "http://127.0.0.1:8080/v1");
    assert_eq!(server.model, "qwen");
    assert_eq!(server.key.as_deref(), Some("sekrit"));
    let nothing = env(&[]);
    assert!(matches!(
        Backend::configured(Some("frontier"), &nothing),
        Err(BackendError::NotConfigured)
    ));
}

#[test]
fn argv_splits_like_a_shell_without_one() {
    assert_eq!(split_argv("  a  b\tc ").expect("ok"), ["a", "b", "c"]);
    assert_eq!(
        split_argv(r#"a\ b "c\"d" 'e\f' """#).expect("ok"),
        ["a b", "c\"d", "e\\f", ""]
    );
    assert!(split_argv("a\\").is_err());
    assert!(split_argv("\"a").is_err());
}

#[tokio::test]
async fn a_command_reads_the_prompt_on_stdin_and_answers_on_stdout() {
    let backend = script("printf 'answer to: '; cat");
    let answer = backend.ask("the prompt", LONG).await.expect("answer");
    assert_eq!(answer.text, "answer to: the prompt");
    // A large prompt does not deadlock a program that answers as it reads.
    let big = "x".repeat(1 << 20);
    let echoed = script("cat").ask(&big, LONG).await.expect("echo");
    assert_eq!(echoed.text.len(), big.len());
}

#[tokio::test]
async fn failures_timeouts_and_oversized_answers_are_errors_with_a_reason() {
    let failed = script("echo thinking >&2; echo 'no quota left' >&2; exit 3")
        .ask("p", LONG)
        .await
        .expect_err("an error");
    assert_eq!(failed.code(), "MODEL_ERROR");
    let message = failed.to_string();
    assert!(
        message.contains("exit status: 3") && message.ends_with("thinking\nno quota left"),
        "{message}"
    );

    // A program that floods stderr before failing is still heard out.
    let noisy = script("head -c 3000000 /dev/zero | tr '\\0' e >&2; echo done >&2; exit 1")
        .ask("p", LONG)
        .await
        .expect_err("an error");
    assert!(
        noisy.to_string().ends_with("eedone"),
        "{}",
        &noisy.to_string()[..60]
    );

    let slow = script("sleep 30")
        .ask("p", Duration::from_millis(300))
        .await
        .expect_err("an error");
    assert!(matches!(slow, BackendError::Timeout(_)), "{slow}");

    let flood = script("yes answer")
        .ask("p", LONG)
        .await
        .expect_err("an error");
    assert!(matches!(flood, BackendError::TooLarge), "{flood}");

    let binary = script("printf '\\377\\376'")
        .ask("p", LONG)
        .await
        .expect_err("an error");
    assert!(matches!(binary, BackendError::NotText), "{binary}");

    let empty = Backend::Command(Vec::new())
        .ask("p", LONG)
        .await
        .expect_err("no program");
    assert_eq!(empty.code(), "MODEL_NOT_CONFIGURED");

    let missing = Backend::Command(vec!["/nonexistent/model".into()])
        .ask("p", LONG)
        .await
        .expect_err("an error");
    assert!(
        missing
            .to_string()
            .starts_with("model command \"/nonexistent/model\" could not start"),
        "{missing}"
    );
}

/// A model server on a loopback port answering its requests in turn with
/// `answers` (status line and extra headers; the last repeats), noting when
/// each request came.
async fn model_server(
    answers: Vec<(&'static str, &'static str)>,
) -> (
    u16,
    std::sync::Arc<std::sync::Mutex<Vec<std::time::Instant>>>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let noted = std::sync::Arc::clone(&seen);
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let mut request = Vec::new();
            let mut chunk = [0u8; 4096];
            // The request ends with its JSON body's closing brace.
            while !request.ends_with(b"}") {
                match socket.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&chunk[..n]),
                }
            }
            let number = {
                let mut seen = noted.lock().expect("lock");
                seen.push(std::time::Instant::now());
                seen.len()
            };
            let (status, headers) = answers[(number - 1).min(answers.len() - 1)];
            let body = if status.starts_with("200") {
                r#"{"choices":[{"message":{"role":"assistant","content":"ok"}}]}"#
            } else {
                r#"{"error":"slow down"}"#
            };
            let response = format!(
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\n{headers}content-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = socket.write_all(response.as_bytes()).await;
        }
    });
    (port, seen)
}

fn openai_at(port: u16) -> Backend {
    let spec = format!("openai:http://127.0.0.1:{port}/v1");
    let env = move |name: &str| match name {
        "PLANB_MODEL" => Some(spec.clone()),
        "PLANB_MODEL_NAME" => Some("m".to_owned()),
        _ => None,
    };
    Backend::configured(None, &env).expect("backend")
}

#[tokio::test]
async fn a_retry_after_is_waited_for_or_said_when_it_passes_the_step_s_time() {
    let (port, seen) = model_server(vec![
        ("429 Too Many Requests", "retry-after: 2\r\n"),
        ("200 OK", ""),
    ])
    .await;
    let answer = openai_at(port).ask("hi", LONG).await.expect("answer");
    assert_eq!(answer.text, "ok");
    let times = seen.lock().expect("lock").clone();
    assert_eq!(times.len(), 2);
    // Never earlier than asked (the back-off alone would wait 0.25 s).
    assert!(times[1] - times[0] >= Duration::from_secs(2), "{times:?}");

    let (port, seen) =
        model_server(vec![("503 Service Unavailable", "retry-after: 600\r\n")]).await;
    let error = openai_at(port)
        .ask("hi", Duration::from_secs(20))
        .await
        .expect_err("refused");
    assert!(
        error.to_string().contains("asked to retry after 600 s"),
        "{error}"
    );
    assert_eq!(
        seen.lock().expect("lock").len(),
        1,
        "no retry past the step's time"
    );
}
