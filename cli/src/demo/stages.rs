//! The tour's stages, each said in one line (what the person sees and why
//! it matters), then done through the real tools.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use serde_json::{Value, json};

use super::{Demo, web};

const STAGES: usize = 5;
/// The named plan the tour writes and reviews.
const PLAN_NAME: &str = "demo-release";

/// Where the demo keeps its files: `<data root>/demo`.
fn demo_dir(data_root: &Path) -> PathBuf {
    data_root.join("demo")
}

/// Writes the servers file of the tour's execution plan: this binary's
/// `demo-tools`, as `demo`. Returns its path.
pub(super) fn servers_file(data_root: &Path) -> anyhow::Result<PathBuf> {
    let dir = demo_dir(data_root);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let exe =
        planb_app::models::keeper::this_program().context("cannot find the planb-mcp binary")?;
    let servers = json!({"mcpServers": {"demo": {"command": exe, "args": ["demo-tools"]}}});
    let file = dir.join("servers.json");
    std::fs::write(&file, serde_json::to_vec_pretty(&servers)?)
        .with_context(|| format!("writing {}", file.display()))?;
    Ok(file)
}

/// The whole tour.
pub(super) async fn tour(demo: &mut Demo<'_>) -> anyhow::Result<ExitCode> {
    demo.say("planb demo: the real server, driven over MCP as an agent drives it.")?;
    let (session, answers) = session_stage(demo).await?;
    review_stage(demo, &answers).await?;
    plan_stage(demo, &answers).await?;
    task_stage(demo, &answers).await?;
    replay_stage(demo, &session).await?;
    Ok(ExitCode::SUCCESS)
}

fn stage(n: usize, title: &str, why: &str) -> String {
    format!("\n[{n}/{STAGES}] {title}: {why}")
}

/// A session, the form, two plan versions from the answers.
async fn session_stage(demo: &mut Demo<'_>) -> anyhow::Result<(String, Value)> {
    demo.say(stage(
        1,
        "A question form",
        "the agent asks you structured questions in a real browser form; your answers come back to it as JSON, and both are in the log",
    ))?;
    let project = std::env::current_dir()?.display().to_string();
    let created = demo
        .call(
            "init_planb_session",
            json!({"title": "planb demo", "intent": "try planb end to end", "projectPath": project}),
        )
        .await?;
    let session = created
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("sessionId: "))
        .context("no sessionId in the reply")?
        .to_string();
    demo.say(format!("   init_planb_session -> sessionId {session}"))?;
    let peer = demo.client.peer().clone();
    let ask = tokio::spawn(super::call(peer, "ask_user", ask_arguments(&session)));
    let url = demo.next_page("form").await?;
    if demo.auto {
        let (port, sid) = web::page_key(&url, "sid")?;
        web::post(
            port,
            "/submit",
            &json!({"sid": sid, "answers": auto_answers()}),
        )
        .await?;
    } else {
        demo.say("   waiting for your answers...")?;
    }
    let answers_text = ask.await.context("ask_user task")??;
    let answers: Value = serde_json::from_str(&answers_text)
        .with_context(|| format!("ask_user did not answer with the answers: {answers_text}"))?;
    demo.say(format!("   ask_user -> {answers}"))?;
    for revision in 1..=2 {
        let saved = demo
            .call(
                "save_plan",
                json!({"sessionId": session, "plan": plan_from(&answers, revision), "title": format!("revision {revision}")}),
            )
            .await?;
        let first = saved.lines().next().unwrap_or_default().to_owned();
        demo.say(format!("   save_plan -> {first}"))?;
    }
    Ok((session, answers))
}

/// The answers `--auto` gives the form.
fn auto_answers() -> Value {
    json!({
        "name": "tidy",
        "purpose": "Sort a downloads folder into dated subfolders",
        "language": "Rust",
        "features": ["Config file", "JSON output"],
        "effort": 3
    })
}

fn ask_arguments(session: &str) -> Value {
    json!({
        "sessionId": session,
        "title": "Plan a small CLI tool with planb",
        "introTitle": "Welcome",
        "intro": "This is **planb**'s question form. An agent asks you structured questions; \
                  your answers go straight back to it and are recorded in planb's event log.\n\n\
                  | Kind | Control | Answer |\n|---|---|---|\n| text | one line | string |\n\
                  | longtext | paragraph | string |\n| single | radio group | string |\n\
                  | multi | checkboxes | string[] |\n| scale | slider | number |\n\n\
                  ```mermaid\nflowchart LR\n  Agent -- ask_user --> planb -- form --> You\n  You -- answers --> planb -- JSON --> Agent\n```\n\n\
                  Use the arrow keys to move between tabs and options.",
        "questions": [
            {"id": "name", "kind": "text", "label": "What should the tool be called?", "placeholder": "e.g. tidy", "required": true, "tab": "Basics"},
            {"id": "purpose", "kind": "longtext", "label": "What should it do?", "placeholder": "One paragraph is plenty", "tab": "Basics"},
            {"id": "language", "kind": "single", "label": "Language", "required": true, "tab": "Design", "options": [
                {"value": "Rust", "markdown": "### Rust\nFast, a single static binary.\n\n```rust\nfn main() {\n    println!(\"hello\");\n}\n```"},
                {"value": "Go", "markdown": "### Go\nQuick to write, simple cross-compilation."},
                {"value": "Python", "markdown": "### Python\nThe fastest to prototype; needs an interpreter."}
            ]},
            {"id": "features", "kind": "multi", "label": "Which features belong in the first version?", "tab": "Design",
             "options": ["Config file", "Colour output", "Shell completions", "JSON output"]},
            {"id": "effort", "kind": "scale", "label": "How much time for version 1 (days)?", "min": 1, "max": 10, "step": 1, "required": true, "tab": "Design"}
        ]
    })
}

fn name_of(answers: &Value) -> &str {
    answers["name"]
        .as_str()
        .filter(|n| !n.trim().is_empty())
        .unwrap_or("the tool")
}

fn purpose_of(answers: &Value) -> &str {
    answers["purpose"]
        .as_str()
        .filter(|p| !p.trim().is_empty())
        .unwrap_or("A small command-line tool")
}

fn plan_from(answers: &Value, revision: u32) -> String {
    let language = answers["language"].as_str().unwrap_or("Rust");
    let features: Vec<&str> = answers["features"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let effort = answers["effort"].as_f64().unwrap_or(3.0);
    let mut plan = format!(
        "# Plan: {}\n\n## Goal\n{}\n\n## Decisions\n- Language: {language}\n- Time box: {effort} day(s)\n\n## Steps\n1. Scaffold the {language} project and its CI.\n2. Implement the core command.\n",
        name_of(answers),
        purpose_of(answers)
    );
    for (i, feature) in features.iter().enumerate() {
        plan.push_str(&format!("{}. Add: {feature}.\n", i + 3));
    }
    if revision > 1 {
        plan.push_str("\n## Verification\n- End-to-end test of every command.\n- A release build on each target platform.\n");
    }
    plan
}

/// The release checklist the named plan starts as.
fn release_plan(answers: &Value) -> String {
    format!(
        "# Release {name} 0.1\n\n## Steps\n1. Tag the release.\n2. Publish the binaries.\n\n## Rollback\nTo be decided.\n",
        name = name_of(answers)
    )
}

/// A named plan written, reviewed, changed as asked and approved.
async fn review_stage(demo: &mut Demo<'_>, answers: &Value) -> anyhow::Result<()> {
    demo.say(stage(
        2,
        "A plan you review",
        "the agent writes a plan file and submits it; you request a change on the review page, it edits, you approve. Nothing goes ahead without you",
    ))?;
    let written = demo
        .call(
            "write_plan",
            json!({"planName": PLAN_NAME, "content": release_plan(answers)}),
        )
        .await?;
    demo.say(format!("   write_plan -> {}", one_line(&written)))?;
    let first = review_round(demo, 1).await?;
    demo.say(format!("   submit_plan, round 1 -> {}", one_line(&first)))?;
    let edited = demo
        .call(
            "edit_plan",
            json!({"planName": PLAN_NAME, "oldString": "To be decided.", "newString": "Re-publish the previous tag's binaries within the hour."}),
        )
        .await?;
    demo.say(format!(
        "   edit_plan (the change asked for) -> {}",
        one_line(&edited)
    ))?;
    let second = review_round(demo, 2).await?;
    demo.say(format!("   submit_plan, round 2 -> {}", one_line(&second)))?;
    Ok(())
}

/// Submits the named plan and waits for its review; `--auto` requests a
/// change in round 1 and approves round 2.
async fn review_round(demo: &mut Demo<'_>, round: u32) -> anyhow::Result<String> {
    let peer = demo.client.peer().clone();
    let args = json!({"planName": PLAN_NAME});
    let submitted = tokio::spawn(super::call(peer, "submit_plan", args.clone()));
    let url = demo.next_page("review page").await?;
    if demo.auto {
        let (port, rid) = web::page_key(&url, "rid")?;
        let verdict = match round {
            1 => json!({"rid": rid, "verdict": "changes", "feedback": "Say how we roll back.",
                "comments": [{"quote": "To be decided.", "text": "We need a real rollback before we ship."}]}),
            _ => json!({"rid": rid, "verdict": "approve"}),
        };
        web::post(port, "/review", &verdict).await?;
    } else if round == 1 {
        demo.say("   try it: select a passage, comment on it and request changes")?;
    } else {
        demo.say("   the change is in: approve it this time")?;
    }
    let mut answer = submitted.await.context("submit_plan task")??;
    // Past its hand-back the tool says the review is pending: ask again.
    let pending =
        |text: &str| serde_json::from_str::<Value>(text).is_ok_and(|v| v["pending"] == true);
    while pending(&answer) {
        answer = demo.call("submit_plan", args.clone()).await?;
    }
    Ok(answer)
}

fn one_line(text: &str) -> String {
    let joined: Vec<&str> = text.split_whitespace().collect();
    planb_core::text::clip(&joined.join(" "), 160)
}

/// An execution plan over the demo's tools, created and run.
async fn plan_stage(demo: &mut Demo<'_>, answers: &Value) -> anyhow::Result<()> {
    demo.say(stage(
        3,
        "An execution plan",
        "a DAG of tool calls on MCP servers (here planb's own demo tools): independent steps run together, every result is in the log, a stopped run resumes where it was",
    ))?;
    let plan = json!({
        "title": format!("Release note for {}", name_of(answers)),
        "variables": {"idea": purpose_of(answers)},
        "steps": [
            {"index": "1", "title": "Count the idea's words", "tool": "demo__count_words", "args": {"text": "${idea}"}, "result_variable": "words"},
            {"index": "2", "title": "Make a slug of it", "tool": "demo__slugify", "args": {"text": "${idea}"}, "result_variable": "slug"},
            {"index": "3", "title": "Draft the release note", "tool": "demo__release_note", "depends_on": ["1", "2"],
             "args": {"title": "Release ${slug}", "points": ["${idea}", "${words} words in the idea"]}, "result_variable": "note"}
        ]
    });
    let created = demo.call("plan_create", plan).await?;
    let created: Value = serde_json::from_str(&created).context("plan_create's result")?;
    let id = created["plan_id"]
        .as_str()
        .context("no plan_id")?
        .to_owned();
    demo.say(format!("   plan_create -> plan {id}:"))?;
    for line in created["dag"].as_str().unwrap_or_default().lines() {
        demo.say(format!("   {line}").trim_end())?;
    }
    let ran = demo.call("plan_execute", json!({"plan_id": id})).await?;
    let ran: Value = serde_json::from_str(&ran).context("plan_execute's result")?;
    demo.say(format!(
        "   plan_execute -> success {}, {} of {} steps; the note:",
        ran["success"], ran["steps_completed"], ran["steps_total"]
    ))?;
    for line in ran["results"]["note"].as_str().unwrap_or_default().lines() {
        demo.say(format!("     {line}").trim_end())?;
    }
    anyhow::ensure!(ran["success"] == true, "the plan failed: {}", ran["error"]);
    Ok(())
}

/// A `fast` plan-generation task, when a model is configured.
async fn task_stage(demo: &mut Demo<'_>, answers: &Value) -> anyhow::Result<()> {
    demo.say(stage(
        4,
        "A plan-generation task",
        "a background worker runs model steps (risks, work breakdown, schedule, ...) into a report; it can stop and resume without redoing work",
    ))?;
    let configured = std::env::var("PLANB_MODEL").is_ok_and(|m| !m.trim().is_empty());
    if !configured {
        demo.say("   skipped: no model is configured. Set PLANB_MODEL (for example PLANB_MODEL='openai:http://127.0.0.1:11434/v1', or PLANB_MODEL='command:claude -p') and run the demo again to see one")?;
        return Ok(());
    }
    let prompt = format!(
        "Plan version 0.1 of {}, a command-line tool: {}. One developer, {} days.",
        name_of(answers),
        purpose_of(answers),
        answers["effort"].as_f64().unwrap_or(3.0)
    );
    let created = demo
        .call(
            "task_create",
            json!({"prompt": prompt, "speed_vs_detail": "fast"}),
        )
        .await?;
    let created: Value = serde_json::from_str(&created).context("task_create's result")?;
    let id = created["task_id"]
        .as_str()
        .context("no task_id")?
        .to_owned();
    demo.say(format!(
        "   task_create -> task {id}; waiting for it (fast)..."
    ))?;
    loop {
        let waited = demo
            .call("task_wait", json!({"task_id": id, "timeout_sec": 600}))
            .await?;
        let waited: Value = serde_json::from_str(&waited).context("task_wait's result")?;
        let state = waited["state"].as_str().unwrap_or_default().to_owned();
        if state != "running" && state != "created" {
            demo.say(format!(
                "   task_wait -> {state}: {}",
                waited["progress_message"].as_str().unwrap_or_default()
            ))?;
            anyhow::ensure!(state == "completed", "the task ended {state}: {waited}");
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// planb-retro's pages over this data root, served here: opened in the
/// browser, or their address said; `--auto` reads the index and stops.
async fn replay_stage(demo: &mut Demo<'_>, session: &str) -> anyhow::Result<()> {
    demo.say(stage(
        5,
        "The replay",
        "everything above as it happened, event by event, in planb-retro's pages: the form and its answers, each plan version, the review rounds, the plan's DAG",
    ))?;
    let root = planb_projections::DataRoot::new(demo.data_root);
    let (retro, follower) = planb_retro::Retro::open(&root);
    retro.follow(follower, planb_retro::POLL_INTERVAL);
    let address = match planb_retro::serve(retro.clone(), planb_retro::DEFAULT_PORT).await {
        Ok(address) => address,
        // Another replay has the usual port: any free one.
        Err(_) => planb_retro::serve(retro, 0).await?,
    };
    let url = format!("http://{address}/");
    let root = demo.data_root.display().to_string();
    demo.say(format!("   recorded in {root}: log/ (the event log every view is rebuilt from), sessions/ (the session files), demo/plans/ (the named plan)"))?;
    if demo.auto {
        let (status, page) = web::get(address.port(), "/").await?;
        anyhow::ensure!(
            status == 200 && page.contains(PLAN_NAME) && page.contains("planb demo"),
            "the replay's index: {status}"
        );
        let (status, _) = web::get(address.port(), &format!("/sessions/{session}")).await?;
        anyhow::ensure!(status == 200, "the session's replay: {status}");
        demo.say(format!(
            "   the replay at {url} lists the session, the reviewed plan and the execution plan"
        ))?;
        return Ok(());
    }
    if demo.headless {
        demo.say(format!("   serving {url}\n   no display here: from your machine, ssh -L {port}:127.0.0.1:{port} <this host>, then open {url}", port = address.port()))?;
    } else {
        planb_forms::browser::open(&url, false);
        demo.say(format!("   opened {url} in your browser"))?;
    }
    demo.say(format!(
        "   also any time: cargo run --release -p planb-retro (on {})",
        demo.data_root.display()
    ))?;
    demo.say("   press Ctrl-C to stop the replay and end the demo")?;
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    Ok(())
}
