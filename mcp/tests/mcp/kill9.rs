//! `kill -9` of the real server at random points while saves and named-plan
//! writes are in flight: every call that was answered is in the log, and
//! the data root checks out after each kill and at the end. The number of
//! kills is `PLANB_KILL9_ITERATIONS` (default 20; run with 1000 to soak).

use std::time::Duration;

use crate::support::{
    Server, UrlAnswer, all_output, fold_log, new_session, planb, start_with, text_of,
};
use planb_core::{PlanKey, PlanName, SessionId};
use rmcp::model::{CallToolRequestParams, CallToolResult};
use serde_json::{Value, json};

/// Calls `tool` in the background; `None` when the server died before
/// answering.
fn call_in_background(
    server: &Server,
    tool: &'static str,
    arguments: Value,
) -> tokio::task::JoinHandle<Option<CallToolResult>> {
    let peer = server.client.peer().clone();
    let Value::Object(arguments) = arguments else {
        panic!("object")
    };
    tokio::spawn(async move {
        peer.call_tool(CallToolRequestParams::new(tool).with_arguments(arguments))
            .await
            .ok()
    })
}

const ITERATIONS_DEFAULT: usize = 20;

fn iterations() -> usize {
    std::env::var("PLANB_KILL9_ITERATIONS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(ITERATIONS_DEFAULT)
}

/// A small deterministic generator (SplitMix64): a failing round can be
/// replayed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n
    }
}

/// A call answered before its server died.
enum Acked {
    Save { version: u32, content: String },
    Write { name: String, content: String },
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answered_save_and_plan_write_survives_kill_9_at_any_point() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plans = dir.path().join("plans");
    std::fs::create_dir_all(&plans).expect("plans dir");
    let plans = plans.canonicalize().expect("plans dir");
    let plans_arg = plans.display().to_string();
    let args = ["--plans-dir", plans_arg.as_str()];
    let mut rng = Rng(0x5eed);
    let mut acked = Vec::new();
    let mut session = None;
    let (mut kills, mut unanswered) = (0, 0);
    for round in 0..iterations() {
        let server = start_with(dir.path(), UrlAnswer::NotSupported, None, &[], &args).await;
        let id = match &session {
            Some(id) => String::clone(id),
            None => session.insert(new_session(&server).await).clone(),
        };
        let mut calls = Vec::new();
        for n in 0..1 + rng.below(6) {
            let content = format!("# round {round}, call {n}\n");
            if rng.below(2) == 0 {
                let args = json!({"sessionId": id, "plan": content});
                calls.push((
                    None,
                    content,
                    call_in_background(&server, "save_plan", args),
                ));
            } else {
                let name = format!("plan-{}", rng.below(3));
                let args = json!({"planName": name, "content": content});
                calls.push((
                    Some(name),
                    content,
                    call_in_background(&server, "write_plan", args),
                ));
            }
        }
        tokio::time::sleep(Duration::from_micros(rng.below(40_000))).await;
        server.kill_9();
        kills += 1;
        let _ = server.client.cancel().await;
        for (name, content, call) in calls {
            let Some(result) = call.await.expect("call task") else {
                unanswered += 1;
                continue;
            };
            assert_eq!(result.is_error, Some(false), "{}", text_of(&result));
            acked.push(match name {
                None => Acked::Save {
                    version: saved_version(&text_of(&result)),
                    content,
                },
                Some(name) => Acked::Write { name, content },
            });
        }
    }
    let session = SessionId::parse(&session.expect("a session")).expect("id");
    let (state, _) = fold_log(dir.path());
    let versions = &state.session(&session).expect("session").plans;
    for call in &acked {
        match call {
            Acked::Save { version, content } => assert!(
                versions
                    .iter()
                    .any(|p| p.version == *version && p.is_content(content.as_bytes())),
                "answered save v{version} is not in the log"
            ),
            Acked::Write { name, content } => {
                let key = PlanKey::new(plans_arg.clone(), PlanName::parse(name).expect("name"));
                let plan = state.named_plan(&key).expect("plan");
                assert!(plan.has_held(content), "answered write of {name} lost");
            }
        }
    }
    eprintln!(
        "{kills} kills: {} answered calls all in the log, {unanswered} cut off unanswered",
        acked.len()
    );
    let output = planb(dir.path(), &["check"]);
    assert!(output.status.success(), "{}", all_output(&output));
}

fn saved_version(reply: &str) -> u32 {
    reply
        .strip_prefix("Saved plan v")
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no version in {reply}"))
}
