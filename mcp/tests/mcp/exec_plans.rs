//! Execution plans end to end: the real `planb-mcp plan …` commands against
//! real downstream MCP servers (the `downstream` example, started by planb
//! over stdio), each recording the calls it receives. What a run does in
//! one process is tested at planb-app (`app/tests/app/runs.rs`); here, what
//! needs the binary: its printed text and exit codes, kills, several
//! processes on one root, the terminal, the process's environment.

use planb_tests::plans::step;

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

fn planb() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_planb-mcp"))
}

struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    fn new() -> Setup {
        let dir = tempfile::tempdir().expect("tempdir");
        let ds = crate::support::downstream_binary();
        let servers = json!({"mcpServers": {
            "alpha": {"command": ds, "args": ["alpha"]},
            "beta": {"command": ds, "args": ["beta", "echo", "sleep", "crash"]},
        }});
        std::fs::write(dir.path().join("servers.json"), servers.to_string()).expect("servers");
        Setup { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(planb());
        command
            .arg("--data-dir")
            .arg(self.path("root"))
            .arg("plan")
            .arg("--servers")
            .arg(self.path("servers.json"))
            .args(args)
            .env("DOWNSTREAM_CALLS", self.path("calls"))
            .stdin(Stdio::null());
        command
    }

    fn run(&self, args: &[&str]) -> (i32, String) {
        let Output {
            status,
            stdout,
            stderr,
        } = self.command(args).output().expect("run planb-mcp");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&stdout),
            String::from_utf8_lossy(&stderr)
        );
        (status.code().unwrap_or(-1), text)
    }

    /// Creates the plan and returns its id.
    fn create(&self, plan: &Value) -> String {
        let file = self.path("plan.json");
        std::fs::write(&file, plan.to_string()).expect("plan file");
        let (code, out) = self.run(&["create", file.to_str().expect("path")]);
        assert_eq!(code, 0, "{out}");
        saved_id(&out)
    }

    /// Runs a `planb-mcp` command other than `plan` on the data root:
    /// whether it succeeded, and its stdout.
    fn admin(&self, args: &[&str]) -> (bool, String) {
        let output = Command::new(planb())
            .arg("--data-dir")
            .arg(self.path("root"))
            .args(args)
            .output()
            .expect("run planb-mcp");
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
        )
    }

    /// Starts a `plan` command in the background, its output piped.
    fn spawn(&self, args: &[&str]) -> std::process::Child {
        self.command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn planb-mcp")
    }

    /// Starts `plan run ID` in the background, its output piped, and
    /// returns once the plan's sleep step has been called.
    fn run_until_sleeping(&self, id: &str) -> std::process::Child {
        let child = self.spawn(&["run", id]);
        wait_for("the sleep call", || {
            self.calls().iter().any(|c| c["tool"] == "sleep")
        });
        child
    }

    /// The calls the servers received, in order.
    fn calls(&self) -> Vec<Value> {
        planb_tests::plans::calls(&self.path("calls"))
    }
}

/// The plan id `plan create` printed.
fn saved_id(out: &str) -> String {
    out.lines()
        .find_map(|l| l.strip_prefix("Plan saved: "))
        .expect("plan id")
        .trim()
        .to_owned()
}

/// A plan `plan create` cannot save exits 2 naming the problem, and no
/// plan is listed (what is refused, and why, is planb-app's:
/// app/tests/app/runs.rs).
#[test]
fn a_plan_that_cannot_be_saved_exits_2_and_is_not_listed() {
    let setup = Setup::new();
    let file = setup.path("bad.json");
    std::fs::write(
        &file,
        json!({"title": "Loop", "steps": [
            step("1", "echo", json!({}), &["2"], None),
            step("2", "alpha__echo", json!({}), &["1"], None)]})
        .to_string(),
    )
    .expect("write");
    let (code, out) = setup.run(&["create", file.to_str().expect("path")]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("dependency cycle: 1 → 2 → 1"), "{out}");
    let (_, listed) = setup.run(&["list"]);
    assert!(listed.contains("No saved plans"), "{listed}");
}

/// A plan reads only the settings plans use: a task's setting that could
/// not be used, or a blank one, stops no plan; a bad
/// `PLANB_SERVER_START_SEC`, which plans use, stops it before any call,
/// naming the variable.
#[test]
fn a_plan_is_stopped_only_by_a_setting_plans_use() {
    let setup = Setup::new();
    let file = setup.path("plan.json");
    let plan = json!({"title": "Settings", "steps": [
        step("1", "alpha__echo", json!({"text": "ran"}), &[], None),
    ]});
    std::fs::write(&file, plan.to_string()).expect("plan file");
    let file = file.to_str().expect("path");
    let run = |vars: &[(&str, &str)]| {
        let mut command = setup.command(&["create", file]);
        command.envs(vars.iter().copied());
        let output = command.output().expect("run planb-mcp");
        let text = String::from_utf8_lossy(&output.stderr).into_owned();
        (output.status.code(), text)
    };
    let task_only = [("PLANB_CONCURRENCY", "100"), ("PLANB_INACTIVITY_SEC", " ")];
    let (code, said) = run(&task_only);
    assert_eq!(code, Some(0), "{said}");
    // One step is one step, not "1 steps".
    let (code, out) = setup.run(&["show", &saved_id(&setup.run(&["create", file]).1)]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("Plan: Settings (1 step)"), "{out}");
    let (code, said) = run(&[("PLANB_SERVER_START_SEC", "soon")]);
    assert_eq!(code, Some(2), "{said}");
    assert!(said.contains("PLANB_SERVER_START_SEC"), "{said}");
}

/// A run that fails exits 1 saying why; limits that could silently never
/// apply exit 2 before any call (the runs themselves: app/tests/app/runs.rs).
#[test]
fn a_failed_run_exits_1_and_limits_that_cannot_apply_exit_2_before_any_call() {
    let setup = Setup::new();
    let id = setup.create(&json!({"title": "Fails", "steps": [
        step("1", "alpha__echo", json!({"text": "ok"}), &[], None),
        step("2", "alpha__fail", json!({"message": "boom"}), &[], None),
        step("3", "beta__echo", json!({"text": "never"}), &["1", "2"], None),
    ]}));
    let (code, out) = setup.run(&["run", &id]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("Plan failed: Batch 1 had failures: step 2: boom"),
        "{out}"
    );

    let chain = setup.create(&json!({"title": "Budget", "steps": [
        step("1", "beta__echo", json!({"text": "first"}), &[], None),
        step("2", "beta__echo", json!({"text": "second"}), &["1"], None),
    ]}));
    let before = setup.calls().len();
    let (code, out) = setup.run(&["run", &chain, "--tool-cap", "echo=1"]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("tool cap \"echo\": no step calls it (the plan's tools: beta__echo)"),
        "{out}"
    );
    let (code, out) = setup.run(&["run", &chain, "--var", "=x"]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("variables[\"\"]: \"\" is not a variable name"),
        "{out}"
    );
    let (code, out) = setup.run(&["run", &chain, "--max-seconds", "0"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("--max-seconds"), "{out}");
    assert_eq!(setup.calls().len(), before, "a refused run called a tool");
}

/// 40 calls of 30 KB started at once are more than one append may hold in
/// the log (1 MiB of blobs): those past it go to the blob store, and the
/// run completes with every result whole.
#[test]
fn a_wide_batch_of_large_calls_spills_past_one_append_into_the_blob_store() {
    let setup = Setup::new();
    let steps: Vec<Value> = (1..=40)
        .map(|i| {
            step(
                &i.to_string(),
                "beta__echo",
                json!({"text": format!("${{blob}} {i}")}),
                &[],
                Some(&format!("r{i}")),
            )
        })
        .collect();
    let id = setup.create(&json!({"title": "Heavy", "steps": steps}));
    let blob = "x".repeat(30_000);
    let (code, out) = setup.run(&[
        "run",
        &id,
        "--concurrency",
        "64",
        "--var",
        &format!("blob={blob}"),
    ]);
    assert_eq!(code, 0, "{}", out.chars().take(2000).collect::<String>());
    assert!(
        out.contains("Plan completed: 40 steps"),
        "{}",
        &out[out.len().saturating_sub(2000)..]
    );
    let calls = setup.calls();
    assert_eq!(calls.len(), 40);
    assert!(
        calls
            .iter()
            .all(|c| c["args"]["text"].as_str().is_some_and(|t| t.len() > 30_000))
    );
    // Resumed, nothing is called again: every call and result reads back.
    let (code, out) = setup.run(&["resume", &id]);
    assert_eq!(code, 0, "{}", &out[out.len().saturating_sub(2000)..]);
    assert_eq!(setup.calls().len(), 40, "a step was called again");
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn killed_mid_plan_a_resume_calls_no_completed_step_again_and_keeps_a_large_result_whole() {
    let setup = Setup::new();
    let id = setup.create(
        &json!({"title": "Crash and resume", "variables": {"nap": 60_000},
        "steps": [
            step("1", "alpha__big", json!({"bytes": 50_000}), &[], Some("blob")),
            step("2", "beta__sleep", json!({"ms": "${nap}"}), &["1"], Some("slept")),
            step("3", "alpha__echo", json!({"text": "${blob}"}), &["2"], None),
        ]}),
    );
    let mut child = setup.run_until_sleeping(&id);
    // SIGKILL: no chance to record anything more.
    child.kill().expect("kill");
    let _ = child.wait();
    // Another process sees the run's process gone and says so.
    let (_, shown) = setup.run(&["show", &id]);
    assert!(shown.contains("failed (worker_error)"), "{shown}");
    let (code, out) = setup.run(&["resume", &id[..10], "--var", "nap=5"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("recorded result reused, not called again"),
        "{out}"
    );
    let calls = setup.calls();
    let bigs = calls.iter().filter(|c| c["tool"] == "big").count();
    assert_eq!(bigs, 1, "the completed step was called again: {calls:?}");
    let echo = calls
        .iter()
        .find(|c| c["tool"] == "echo")
        .expect("echo call");
    let text = echo["args"]["text"].as_str().expect("text");
    assert_eq!(text.len(), 50_000, "the 50 KB result did not survive whole");
    let expected: String = (0..50_000u32)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    assert_eq!(text, expected);
    let (_, shown) = setup.run(&["show", &id]);
    assert!(shown.contains("completed"), "{shown}");
}

/// A plan that completed once is run again and killed: its resume calls
/// what the killed run had not done, although the first run made the very
/// same calls.
#[test]
fn a_resume_of_a_run_again_calls_what_that_run_had_not_done() {
    let setup = Setup::new();
    let id = setup.create(
        &json!({"title": "Again", "variables": {"nap": 5}, "steps": [
            step("1", "alpha__echo", json!({"text": "one"}), &[], None),
            step("2", "beta__sleep", json!({"ms": "${nap}"}), &["1"], None),
            step("3", "alpha__echo", json!({"text": "three"}), &["2"], None),
        ]}),
    );
    let (code, out) = setup.run(&["run", &id]);
    assert_eq!(code, 0, "{out}");
    let before = setup.calls().len();
    let mut child = setup.spawn(&["run", &id, "--var", "nap=60000"]);
    wait_for("the second run's sleep", || {
        setup.calls()[before..].iter().any(|c| c["tool"] == "sleep")
    });
    child.kill().expect("kill");
    let _ = child.wait();
    let (code, out) = setup.run(&["resume", &id, "--var", "nap=5"]);
    assert_eq!(code, 0, "{out}");
    let after: Vec<(String, Value)> = setup.calls()[before..]
        .iter()
        .map(|c| {
            (
                c["tool"].as_str().unwrap_or("").to_owned(),
                c["args"].clone(),
            )
        })
        .collect();
    let echoes = |text: &str| {
        after
            .iter()
            .filter(|(tool, args)| tool == "echo" && args["text"] == text)
            .count()
    };
    assert_eq!(
        echoes("one"),
        1,
        "step 1 ran in the killed run only: {after:?}"
    );
    assert_eq!(
        after.iter().filter(|(tool, _)| tool == "sleep").count(),
        2,
        "step 2 was cut short and is called again: {after:?}"
    );
    assert_eq!(
        echoes("three"),
        1,
        "step 3 never ran in the killed run: {after:?}"
    );
    assert!(
        out.contains(
            "Called a second time (called before in the resumed run, no success recorded): step 2;"
        ),
        "{out}"
    );
}

/// Runs of a plan that completed before are killed at random points and
/// resumed: every step is called in the run or its resume, never taken from
/// the earlier run that made the same calls.
#[test]
fn killed_runs_again_resume_without_skipping_what_they_had_not_done() {
    let setup = Setup::new();
    let id = setup.create(&json!({"title": "Loop", "steps": [
        step("1", "alpha__echo", json!({"text": "a"}), &[], None),
        step("2", "beta__sleep", json!({"ms": 40}), &["1"], None),
        step("3", "alpha__echo", json!({"text": "b"}), &["2"], None),
        step("4", "beta__sleep", json!({"ms": 40}), &["3"], None),
        step("5", "alpha__echo", json!({"text": "c"}), &["4"], None),
    ]}));
    let (code, out) = setup.run(&["run", &id]);
    assert_eq!(code, 0, "{out}");
    let wanted = [("echo", "a"), ("sleep", ""), ("echo", "b"), ("echo", "c")];
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(7, |d| d.as_nanos() as u64);
    eprintln!("seed {seed}");
    let mut killed = 0;
    for round in 0..8 {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        // Under the 80 ms the plan's two sleeps take after its first call.
        let delay = Duration::from_millis((seed >> 33) % 70);
        let before = setup.calls().len();
        let mut child = setup.spawn(&["run", &id]);
        // Killed once its run has started (its first call made), at a
        // random point after.
        wait_for("the run's first call", || setup.calls().len() > before);
        std::thread::sleep(delay);
        child.kill().expect("kill");
        let status = child.wait().expect("wait");
        if status.success() {
            continue;
        }
        killed += 1;
        let (code, out) = setup.run(&["resume", &id]);
        assert_eq!(code, 0, "round {round}, killed after {delay:?}: {out}");
        let calls = &setup.calls()[before..];
        for (tool, text) in wanted {
            assert!(
                calls
                    .iter()
                    .any(|c| c["tool"] == tool && (text.is_empty() || c["args"]["text"] == text)),
                "round {round}, killed after {delay:?}: {tool} {text} was never called \
                 in the killed run or its resume: {calls:?}"
            );
        }
    }
    assert!(
        killed > 0,
        "no round was killed mid-run: nothing was resumed"
    );
}

/// Small calls and results are in the log itself, with no file each: with
/// the blob store's directory gone after a kill, `check` passes, a resume
/// still reuses what completed, and `rebuild` writes their places again.
#[test]
fn small_results_live_in_the_log_and_outlast_the_blob_files() {
    let setup = Setup::new();
    let id = setup.create(
        &json!({"title": "Small results", "variables": {"nap": 60_000},
        "steps": [
            step("1", "alpha__echo", json!({"text": "kept in the log"}), &[], Some("said")),
            step("2", "beta__sleep", json!({"ms": "${nap}"}), &["1"], None),
            step("3", "alpha__echo", json!({"text": "again: ${said}"}), &["2"], None),
        ]}),
    );
    let mut child = setup.run_until_sleeping(&id);
    child.kill().expect("kill");
    let _ = child.wait();
    let blobs = setup.path("root").join("blobs");
    let places = blobs.join("places");
    assert_eq!(
        walk(&blobs),
        usize::from(places.exists()),
        "a small blob got a file"
    );
    if blobs.exists() {
        std::fs::remove_dir_all(&blobs).expect("remove the blob store");
    }
    // `check` finds the log whole and writes nothing.
    let (ok, said) = setup.admin(&["check"]);
    assert!(ok, "{said}");
    assert!(said.contains("held in the log itself)"), "{said}");
    assert!(!blobs.exists(), "check wrote blob files");
    let (_, dump) = setup.admin(&["log", "dump"]);
    assert!(
        dump.lines().filter(|l| l.contains("blob_stored")).count() >= 2,
        "{dump}"
    );
    let (code, out) = setup.run(&["resume", &id, "--var", "nap=5"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("recorded result reused, not called again"),
        "{out}"
    );
    let calls = setup.calls();
    let texts: Vec<&str> = calls
        .iter()
        .filter(|c| c["tool"] == "echo")
        .filter_map(|c| c["args"]["text"].as_str())
        .collect();
    assert_eq!(
        texts,
        ["kept in the log", "again: kept in the log"],
        "{calls:?}"
    );
    assert_eq!(walk(&blobs), 1, "only the places file");
    // `rebuild` writes the places of every blob the log holds.
    std::fs::remove_dir_all(&blobs).expect("remove the blob store again");
    let (ok, said) = setup.admin(&["rebuild"]);
    assert!(ok, "{said}");
    let held = said
        .lines()
        .find_map(|l| l.strip_prefix("blobs held by the log: "))
        .and_then(|n| n.split(' ').next()?.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("{said}"));
    // The resumed run's calls and results, and the first run's.
    assert!(held >= 5, "{said}");
    let bytes = std::fs::metadata(&places).expect("places").len();
    assert!(bytes >= held * 68, "{bytes} bytes for {held} blobs");
    assert_eq!(walk(&blobs), 1, "only the places file");
    let (ok, said) = setup.admin(&["check"]);
    assert!(ok, "{said}");
}

/// Several processes run plans on one data root at once: each notes the
/// places of the blobs it records in the one places file, no entry is torn
/// or lost, no blob gets a file of its own, and every blob reads back from
/// its place.
#[test]
fn processes_running_plans_at_once_note_every_blob_s_place() {
    use std::collections::BTreeSet;

    let setup = Setup::new();
    let ids: Vec<String> = (0..3)
        .map(|p| {
            let steps: Vec<Value> = (1..=12)
                .map(|n| {
                    let after: Vec<String> = if n == 1 {
                        vec![]
                    } else {
                        vec![(n - 1).to_string()]
                    };
                    let after: Vec<&str> = after.iter().map(String::as_str).collect();
                    let text = if n == 1 {
                        format!("plan {p} begins")
                    } else {
                        format!("plan {p} step {n} after ${{s{}}}", n - 1)
                    };
                    step(
                        &n.to_string(),
                        "alpha__echo",
                        json!({ "text": text }),
                        &after,
                        Some(&format!("s{n}")),
                    )
                })
                .collect();
            setup.create(&json!({"title": format!("Plan {p}"), "steps": steps}))
        })
        .collect();
    let children: Vec<std::process::Child> =
        ids.iter().map(|id| setup.spawn(&["run", id])).collect();
    for child in children {
        let out = child.wait_with_output().expect("wait");
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let blobs = setup.path("root").join("blobs");
    assert_eq!(walk(&blobs), 1, "only the places file");
    let bytes = std::fs::read(blobs.join("places")).expect("places");
    assert_eq!(bytes.len() % 68, 0, "a torn entry");
    let mut placed = BTreeSet::new();
    for entry in bytes.chunks(68) {
        assert_eq!(&entry[..4], b"PBLP");
        assert_eq!(
            crc32fast::hash(&entry[..64]).to_le_bytes(),
            entry[64..68],
            "an entry's checksum"
        );
        placed.insert(<[u8; 32]>::try_from(&entry[4..36]).expect("hash"));
    }
    // Every blob the log holds has its place.
    let mut held = BTreeSet::new();
    for event in planb_tests::logs::events(&setup.path("root")) {
        if let planb_core::EventBody::BlobStored { bytes, .. } = event {
            held.insert(planb_core::ContentHash::of_bytes(&bytes).0);
        }
    }
    // Three plans of twelve steps: a call and a result each.
    assert_eq!(held.len(), 3 * 12 * 2, "blobs the log holds");
    assert_eq!(placed, held);
    let store = planb_projections::DataRoot::new(setup.path("root")).blobs();
    for hash in &held {
        let bytes = store.get(hash).expect("read at its place");
        assert_eq!(planb_core::ContentHash::of_bytes(&bytes).0, *hash);
    }
    for id in &ids {
        let (_, shown) = setup.run(&["show", id]);
        assert!(shown.contains("completed"), "{shown}");
    }
}

fn walk(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .flatten()
            .map(|e| {
                if e.path().is_dir() {
                    walk(&e.path())
                } else {
                    1
                }
            })
            .sum()
    })
}

/// `plan delete` takes a prefix and says so; the deleted plan then cannot
/// run, and the command exits 2 (what a deletion leaves: app/tests/app/runs.rs).
#[test]
fn a_deleted_plan_cannot_run_and_the_command_says_it_is_not_found() {
    let setup = Setup::new();
    let id = setup.create(&json!({"title": "Short-lived", "steps": [
        step("1", "beta__echo", json!({"text": "x"}), &[], None)]}));
    let (code, out) = setup.run(&["delete", &id[..8]]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(&format!("Plan deleted: {id}")), "{out}");
    let (code, out) = setup.run(&["run", &id]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains(&format!("Plan not found: {id}")), "{out}");
}

#[test]
fn another_process_stops_a_running_plan_and_a_second_run_is_refused_meanwhile() {
    let setup = Setup::new();
    let id = setup.create(&json!({"title": "Long", "steps": [
        step("1", "beta__echo", json!({"text": "first"}), &[], None),
        step("2", "beta__sleep", json!({"ms": 60_000}), &["1"], None),
        step("3", "beta__echo", json!({"text": "never"}), &["2"], None),
    ]}));
    let runner = setup.run_until_sleeping(&id);
    // One run at a time, whichever process asks.
    let (code, out) = setup.run(&["run", &id]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("RUN_ALREADY_ACTIVE"), "{out}");
    let (code, out) = setup.run(&["stop", &id[..8]]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("stop requested"), "{out}");
    let output = runner.wait_with_output().expect("runner");
    let printed = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(3), "{printed}");
    assert!(printed.contains("Plan stopped"), "{printed}");
    assert!(!setup.calls().iter().any(|c| c["args"]["text"] == "never"));
    let (_, shown) = setup.run(&["show", &id]);
    assert!(shown.contains("stopped"), "{shown}");
    assert!(
        shown.contains("  ✗ 2. Step 2"),
        "the cancelled step: {shown}"
    );
}

/// A downstream server reached by url: the example serving streamable HTTP
/// on a port of its choosing, which it prints first on stdout.
struct HttpServer {
    child: std::process::Child,
    url: String,
}

impl HttpServer {
    fn start(setup: &Setup, name: &str, token: &str) -> HttpServer {
        use std::io::BufRead;
        let mut child = Command::new(crate::support::downstream_binary())
            .args([name, "--http", "127.0.0.1:0"])
            .env("DOWNSTREAM_CALLS", setup.path("calls"))
            .env("DOWNSTREAM_TOKEN", token)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the http server");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("its url");
        HttpServer {
            child,
            url: line.trim().to_owned(),
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_server_reached_by_url_runs_its_steps_with_its_headers() {
    let setup = Setup::new();
    let web = HttpServer::start(&setup, "web", "sekrit");
    // The same server behind TLS, with a certificate only SSL_CERT_FILE
    // makes trusted.
    let web_port: u16 = web
        .url
        .rsplit(':')
        .next()
        .and_then(|rest| rest.split('/').next())
        .and_then(|port| port.parse().ok())
        .expect("the url's port");
    let front = crate::support::TlsFront::start(setup.dir.path(), web_port);
    let ds = crate::support::downstream_binary();
    let servers = json!({"mcpServers": {
        "alpha": {"command": ds, "args": ["alpha"]},
        "web": {"type": "http", "url": web.url,
                "headers": {"Authorization": "Bearer ${PLANB_TEST_WEB_TOKEN}"}},
        "secure": {"url": format!("https://127.0.0.1:{}/mcp", front.port),
                   "headers": {"Authorization": "Bearer ${PLANB_TEST_WEB_TOKEN}"}},
    }});
    std::fs::write(setup.path("servers.json"), servers.to_string()).expect("servers");
    let plan = json!({"title": "Over HTTP", "steps": [
        step("1", "web__add", json!({"a": 2, "b": 3}), &[], Some("sum")),
        step("2", "alpha__echo", json!({"text": "sum ${sum.sum}"}), &["1"], Some("said")),
        step("3", "web__echo", json!({"text": "${said}"}), &["2"], None),
    ]});
    let file = setup.path("plan.json");
    std::fs::write(&file, plan.to_string()).expect("plan file");
    let file = file.to_str().expect("path");

    // The token comes from the environment; without it the server is not
    // started, and the message says which variable is missing.
    let (code, out) = setup.run(&["create", file]);
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains("the environment variable PLANB_TEST_WEB_TOKEN is not set"),
        "{out}"
    );
    let with_env = |args: &[&str], env: &[(&str, &OsStr)]| {
        let output = setup
            .command(args)
            .envs(env.iter().copied())
            .output()
            .expect("run planb-mcp");
        (
            output.status.code().unwrap_or(-1),
            format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
        )
    };
    let with_token =
        |args: &[&str], token: &str| with_env(args, &[("PLANB_TEST_WEB_TOKEN", OsStr::new(token))]);
    // A wrong token: the server answers 401 and the start fails naming it.
    let (code, out) = with_token(&["create", file], "wrong");
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("\"web\""), "{out}");
    assert!(out.contains("401"), "{out}");
    assert!(
        !out.contains("] error: "),
        "the transport's type is left out: {out}"
    );

    let (code, out) = with_token(&["create", file], "sekrit");
    assert_eq!(code, 0, "{out}");
    let id = saved_id(&out);
    let (code, out) = with_token(&["run", &id], "sekrit");
    assert_eq!(code, 0, "{out}");
    let calls = setup.calls();
    let seen: Vec<(&str, &str)> = calls
        .iter()
        .map(|c| {
            (
                c["server"].as_str().unwrap_or_default(),
                c["tool"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [("web", "add"), ("alpha", "echo"), ("web", "echo")],
        "{calls:?}"
    );
    assert_eq!(calls[2]["args"]["text"], "sum 5.0", "{calls:?}");

    // Over https: a certificate the system does not trust fails the start,
    // naming the server and the certificate, and no call is made.
    let https = json!({"title": "Secure", "steps": [
        step("1", "secure__echo", json!({"text": "over tls"}), &[], None)]});
    std::fs::write(setup.path("https.json"), https.to_string()).expect("plan file");
    let https_file = setup.path("https.json");
    let https_file = https_file.to_str().expect("path");
    let (code, out) = with_token(&["create", https_file], "sekrit");
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("\"secure\""), "{out}");
    assert!(out.contains("certificate"), "{out}");
    assert_eq!(setup.calls().len(), 3);
    // Trusted through SSL_CERT_FILE, the same server runs the step.
    let trusted = |args: &[&str]| {
        with_env(
            args,
            &[
                ("PLANB_TEST_WEB_TOKEN", OsStr::new("sekrit")),
                ("SSL_CERT_FILE", front.ca.as_os_str()),
            ],
        )
    };
    let (code, out) = trusted(&["create", https_file]);
    assert_eq!(code, 0, "{out}");
    let id = saved_id(&out);
    let (code, out) = trusted(&["run", &id]);
    assert_eq!(code, 0, "{out}");
    let calls = setup.calls();
    assert_eq!(calls.len(), 4, "{calls:?}");
    assert_eq!(calls[3]["server"], "web", "{calls:?}");
    assert_eq!(calls[3]["args"]["text"], "over tls", "{calls:?}");
}

#[test]
fn mcp_cli_plans_and_checkpoints_are_imported_and_resume_where_they_stopped() {
    let setup = Setup::new();
    // mcp-cli's plans name tools bare: one server, so each name is its own.
    let servers = json!({"mcpServers": {
        "alpha": {"command": crate::support::downstream_binary(), "args": ["alpha"]},
    }});
    std::fs::write(setup.path("servers.json"), servers.to_string()).expect("servers");
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp-cli-plans");
    let dir = setup.path("plans");
    std::fs::create_dir(&dir).expect("dir");
    for entry in std::fs::read_dir(&fixtures).expect("fixtures") {
        let path = entry.expect("entry").path();
        std::fs::copy(&path, dir.join(path.file_name().expect("name"))).expect("copy");
    }
    let dir = dir.to_str().expect("path");
    // Two windows import the same directory at once: each plan, and each
    // checkpoint's run, is recorded by one of them; the other says so.
    let importers: Vec<std::process::Child> =
        (0..2).map(|_| setup.spawn(&["import", dir])).collect();
    let mut out = String::new();
    for importer in importers {
        let output = importer.wait_with_output().expect("import");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(output.status.success(), "{text}");
        out.push_str(&text);
    }
    assert_eq!(out.matches(": imported as ").count(), 3, "{out}");
    assert_eq!(out.matches(": imported before, as ").count(), 3, "{out}");
    let id_of = |mcp_cli: &str| -> String {
        out.lines()
            .find_map(|l| l.strip_prefix(&format!("{mcp_cli}: imported as ")))
            .and_then(|rest| rest.split(':').next())
            .unwrap_or_else(|| panic!("{mcp_cli} not imported: {out}"))
            .to_owned()
    };
    let diamond = id_of("e9b14d1f-5728-48f3-b6db-622c2a84bacf");
    let cut = id_of("b6e656c9-bd9f-421d-a8de-3ebe91425e36");
    let never = id_of("32593754-879c-4c65-ba69-d172c132f409");
    assert!(
        out.contains("Diamond demo (3 steps); its checkpoint: 3 of 3 steps done, completed"),
        "{out}"
    );
    assert!(
        out.contains("(3 steps); its checkpoint: 1 of 3 steps done"),
        "{out}"
    );

    // Again: nothing new.
    let (code, again) = setup.run(&["import", dir]);
    assert_eq!(code, 0, "{again}");
    assert_eq!(again.matches("imported before, as").count(), 3, "{again}");
    let (_, listed) = setup.run(&["list"]);
    assert_eq!(listed.lines().count(), 4, "{listed}");

    // The plan that never ran kept its dependency-free steps and shows them,
    // found by planb's id or by a prefix of mcp-cli's.
    let (code, shown) = setup.run(&["show", &never]);
    assert_eq!(code, 0, "{shown}");
    assert!(shown.contains("Raw registry plan"), "{shown}");
    let (code, by_mcp_cli) = setup.run(&["show", "32593754"]);
    assert_eq!(code, 0, "{by_mcp_cli}");
    assert!(by_mcp_cli.contains(&never), "{by_mcp_cli}");

    // The completed diamond resumes without a call, named by mcp-cli's id.
    assert!(!diamond.is_empty());
    let (code, out) = setup.run(&["resume", "e9b14d1f-5728-48f3-b6db-622c2a84bacf"]);
    assert_eq!(code, 0, "{out}");
    assert!(setup.calls().is_empty(), "{:?}", setup.calls());

    // The other one: its step 3 is on record; step 1 (never completed in
    // the kept checkpoint) runs with the whole 1,500-character variable,
    // and step 2 runs again since mcp-cli kept only a placeholder of it.
    let (code, out) = setup.run(&["resume", &cut]);
    assert_eq!(code, 0, "{out}");
    let calls = setup.calls();
    let tools: Vec<&str> = calls.iter().filter_map(|c| c["tool"].as_str()).collect();
    assert_eq!(tools, ["echo", "big"], "{calls:?}");
    assert_eq!(calls[0]["args"]["text"].as_str().map(str::len), Some(1500));
}

#[test]
fn a_checkpoint_not_on_record_when_its_plan_was_imported_comes_with_the_next_import() {
    let setup = Setup::new();
    let servers = json!({"mcpServers": {
        "alpha": {"command": crate::support::downstream_binary(), "args": ["alpha"]},
    }});
    std::fs::write(setup.path("servers.json"), servers.to_string()).expect("servers");
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp-cli-plans");
    let diamond = "e9b14d1f-5728-48f3-b6db-622c2a84bacf";
    let dir = setup.path("plans");
    std::fs::create_dir(&dir).expect("dir");
    let copy = |name: &str| {
        std::fs::copy(fixtures.join(name), dir.join(name)).expect("copy");
    };
    // The plan is on record and its checkpoint is not: as an import that
    // ended between the two leaves it, or one made before mcp-cli saved it.
    copy(&format!("{diamond}.json"));
    let dir = dir.to_str().expect("path");
    let (code, out) = setup.run(&["import", dir]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(": imported as ") && !out.contains("checkpoint"),
        "{out}"
    );
    // Not onto a plan mcp-cli changed since: its steps may be others.
    copy(&format!("{diamond}_state.json"));
    let plan_file = PathBuf::from(dir).join(format!("{diamond}.json"));
    let original = std::fs::read_to_string(&plan_file).expect("plan");
    let mut changed: Value = serde_json::from_str(&original).expect("plan JSON");
    changed["variables"]["base"] = json!(41);
    std::fs::write(&plan_file, changed.to_string()).expect("change the plan");
    let (code, out) = setup.run(&["import", dir]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("its checkpoint was not imported: ")
            && out.contains("is no longer the plan imported")
            && !out.contains("recorded now"),
        "{out}"
    );
    std::fs::write(&plan_file, original).expect("restore the plan");
    let (code, out) = setup.run(&["import", dir]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("imported before, as ")
            && out.contains("; its checkpoint, recorded now: 3 of 3 steps done, completed"),
        "{out}"
    );
    // Once the plan has a run, its checkpoint is never recorded again.
    let (code, out) = setup.run(&["import", dir]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("imported before, as ") && !out.contains("checkpoint"),
        "{out}"
    );
    let (code, out) = setup.run(&["resume", diamond]);
    assert_eq!(code, 0, "{out}");
    assert!(setup.calls().is_empty(), "{:?}", setup.calls());
}

/// Whether `text` holds a C1 control character (U+0080–U+009F), which a
/// terminal may act on as it does on ESC.
fn has_c1(text: &str) -> bool {
    text.chars().any(|c| ('\u{80}'..='\u{9f}').contains(&c))
}

/// C1 control characters (the 8-bit CSI) in a plan's title, steps, arguments
/// and variables reach no command's output: they are shown, not acted on.
#[test]
fn c1_control_characters_are_shown_not_acted_on() {
    let setup = Setup::new();
    let id = setup.create(
        &json!({"title": "T\u{9b}2J", "variables": {"v": "x\u{9b}y"},
        "steps": [step("1", "alpha__echo", json!({"text": "a\u{9b}b ${v}"}), &[], Some("r"))]}),
    );
    let (code, dry) = setup.run(&["run", &id, "--dry-run"]);
    assert_eq!(code, 0, "{dry}");
    assert!(!has_c1(&dry), "{dry:?}");
    assert!(
        dry.contains(r#"args {"text":"a\u009bb x\u009by"}"#),
        "{dry}"
    );
    let (code, shown) = setup.run(&["show", &id]);
    assert_eq!(code, 0, "{shown}");
    assert!(!has_c1(&shown) && shown.contains("T\\u{9b}2J"), "{shown:?}");
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp-cli-plans");
    let raw = std::fs::read_to_string(fixtures.join("32593754-879c-4c65-ba69-d172c132f409.json"))
        .expect("fixture");
    let mut plan: Value = serde_json::from_str(&raw).expect("plan JSON");
    plan["title"] = json!("Imported\u{9b}31m");
    let dir = setup.path("plans");
    std::fs::create_dir(&dir).expect("dir");
    std::fs::write(dir.join("c1.json"), plan.to_string()).expect("plan");
    let (code, out) = setup.run(&["import", dir.to_str().expect("path")]);
    assert_eq!(code, 0, "{out}");
    assert!(!has_c1(&out) && out.contains("Imported"), "{out:?}");
}

/// Runs `args` with stdout and stderr on a pseudo-terminal of 40 rows and
/// 120 columns, and returns its exit code and everything the terminal got.
fn on_a_terminal(setup: &Setup, args: &[&str]) -> (i32, String) {
    use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
    use std::io::Read;

    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).expect("openpt");
    grantpt(&master).expect("grantpt");
    unlockpt(&master).expect("unlockpt");
    let name = ptsname(&master, Vec::new()).expect("ptsname");
    let slave = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(name.to_str().expect("pty name"))
        .expect("open the pty");
    let size = rustix::termios::Winsize {
        ws_row: 40,
        ws_col: 120,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    rustix::termios::tcsetwinsize(&slave, size).expect("window size");
    let mut child = setup
        .command(args)
        .env("TERM", "xterm")
        .stdout(slave.try_clone().expect("slave"))
        .stderr(slave)
        .spawn()
        .expect("run planb-mcp");
    // The child holds the only slave now: reading ends (EIO) when it exits.
    let mut master = std::fs::File::from(master);
    let mut seen = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match master.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => seen.extend_from_slice(&chunk[..n]),
        }
    }
    let code = child.wait().expect("wait").code().unwrap_or(-1);
    (code, String::from_utf8_lossy(&seen).into_owned())
}

#[test]
fn on_a_terminal_the_dag_is_redrawn_in_place_until_it_is_done() {
    let setup = Setup::new();
    let id = setup.create(&json!({"title": "Live", "steps": [
        step("1", "alpha__echo", json!({"text": "one"}), &[], None),
        step("2", "beta__sleep", json!({"ms": 300}), &["1"], None),
        step("3", "beta__sleep", json!({"ms": 300}), &["1"], None),
        step("4", "alpha__echo", json!({"text": "four"}), &["2", "3"], None),
    ]}));
    let (code, out) = on_a_terminal(&setup, &["run", &id]);
    assert_eq!(code, 0, "{out}");
    // Frames replaced each other: cursor up and clear to the end.
    assert!(out.contains("\x1b[J"), "{out:?}");
    assert!(!out.contains("step 1 started"), "no plain lines: {out:?}");
    // The last frame shows every step done, then the summary.
    let last = out.rsplit("\x1b[J").next().expect("the last frame");
    for line in [
        "● 1. Step 1",
        "● 2. Step 2",
        "● 3. Step 3",
        "● 4. Step 4",
        "4/4 steps done",
        "Plan completed: 4 steps",
    ] {
        assert!(last.contains(line), "{line:?} in {last:?}");
    }
    assert!(!last.contains('◉'), "{last:?}");

    // Not on a terminal: one plain line per event, as before.
    let (code, out) = setup.run(&["resume", &id]);
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains('\x1b'), "{out:?}");
    assert!(out.contains("recorded result reused"), "{out}");
}

#[test]
fn a_plans_servers_start_at_once_not_one_after_another() {
    let setup = Setup::new();
    // `waits` starts only once `signals` has begun starting: started one
    // after the other in name order, `waits` would never answer.
    let ds = crate::support::downstream_binary();
    let flag = setup.path("signals-started");
    let waits = setup.path("waits.sh");
    std::fs::write(
        &waits,
        format!(
            "#!/bin/sh\nwhile [ ! -f '{}' ]; do sleep 0.05; done\nexec '{}' waits\n",
            flag.display(),
            ds.display()
        ),
    )
    .expect("script");
    let signals = setup.path("signals.sh");
    std::fs::write(
        &signals,
        format!(
            "#!/bin/sh\ntouch '{}'\nexec '{}' signals\n",
            flag.display(),
            ds.display()
        ),
    )
    .expect("script");
    let servers = json!({"mcpServers": {
        "a_waits": {"command": "sh", "args": [waits]},
        "b_signals": {"command": "sh", "args": [signals]},
    }});
    std::fs::write(setup.path("servers.json"), servers.to_string()).expect("servers");
    let id = setup.create(&json!({"title": "Both", "steps": [
        step("1", "a_waits__echo", json!({"text": "one"}), &[], None),
        step("2", "b_signals__echo", json!({"text": "two"}), &["1"], None),
    ]}));
    let (code, out) = setup.run(&["run", &id]);
    assert_eq!(code, 0, "{out}");
    let servers: Vec<String> = setup
        .calls()
        .iter()
        .map(|c| c["server"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(servers, ["waits", "signals"]);
}

#[test]
fn a_run_another_process_ends_is_left_as_it_was_ended_not_taken_for_a_stop() {
    let setup = Setup::new();
    let id = setup.create(&json!({"title": "Ended elsewhere", "steps": [
        step("1", "beta__sleep", json!({"ms": 60_000}), &[], None),
    ]}));
    let child = setup.run_until_sleeping(&id);
    // Another writer (an admin's tool, say) records the run's end.
    let root = planb_projections::DataRoot::new(setup.path("root"));
    let (store, _) = planb_projections::Store::open(
        root,
        std::sync::Arc::new(planb_projections::SystemEnvironment),
    )
    .expect("open the store");
    let task = planb_core::TaskId::parse(&id).expect("id");
    let run = store
        .read(|s| s.task(&task).and_then(|t| t.runs.last()).map(|r| r.id))
        .expect("read")
        .expect("a run");
    store
        .execute(planb_core::Command::EndRun {
            task,
            run,
            outcome: planb_core::RunOutcome::Failed,
            reason: Some("ended by hand".into()),
            failed_step: None,
            recoverable: true,
        })
        .expect("end the run");
    let output = child.wait_with_output().expect("the run returns");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(output.status.code(), Some(1), "{said}");
    assert!(
        said.contains("the run was ended by another process (it is failed)"),
        "{said}"
    );
    assert!(!said.contains("stopped"), "{said}");
    // The end recorded is the other writer's, and nothing after it.
    let (state, _) = crate::support::fold_log(&setup.path("root"));
    let recorded = &state.task(&task).expect("task").runs[0];
    assert_eq!(recorded.reason.as_deref(), Some("ended by hand"));
}

/// Plans made within the same minute share the time prefix of their ids:
/// the list shows each by a prefix no other listed plan shares, and that
/// prefix finds it.
#[test]
fn plans_made_together_are_listed_by_ids_that_tell_them_apart() {
    let setup = Setup::new();
    let ids: Vec<String> = (0..4)
        .map(|n| {
            setup.create(&json!({"title": format!("Plan {n}"), "steps": [
                step("1", "alpha__echo", json!({"text": n}), &[], None)]}))
        })
        .collect();
    let (code, listed) = setup.run(&["list"]);
    assert_eq!(code, 0, "{listed}");
    let shown: Vec<&str> = listed
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(shown.len(), 4, "{listed}");
    for id in &ids {
        let short = shown
            .iter()
            .find(|s| id.starts_with(**s))
            .unwrap_or_else(|| panic!("{id} is not listed: {listed}"));
        assert!(short.len() >= 8);
        let matching = ids.iter().filter(|other| other.starts_with(*short)).count();
        assert_eq!(
            matching, 1,
            "{short} is the prefix of {matching} plans: {listed}"
        );
        let (code, out) = setup.run(&["show", short]);
        assert_eq!(code, 0, "{short} does not find its plan: {out}");
        assert!(out.contains(&format!("id: {id}")), "{out}");
    }
}

/// Escape sequences in a plan's title, its steps' titles and a tool's answer
/// are shown, never sent to the terminal as they are.
#[test]
fn control_characters_from_plans_and_tools_never_reach_the_terminal() {
    let setup = Setup::new();
    let mut wipe = step(
        "2",
        "alpha__fail",
        json!({"message": "\u{1b}[2J\u{1b}[31mred"}),
        &["1"],
        None,
    );
    wipe["title"] = json!("Wipe \u{1b}[2J the screen");
    let id = setup.create(&json!({"title": "\u{1b}]0;pwned\u{7}Evil", "steps": [
        step("1", "alpha__echo", json!({"text": "ok"}), &[], None),
        wipe,
    ]}));
    let mut seen = String::new();
    for args in [
        vec!["list"],
        vec!["show", &id],
        vec!["run", &id],
        vec!["run", "--dry-run", &id],
    ] {
        let (_, out) = setup.run(&args);
        assert!(
            !out.contains('\u{1b}'),
            "{args:?} printed an escape: {out:?}"
        );
        seen.push_str(&out);
    }
    assert!(seen.contains("␛]0;pwned␇Evil"), "{seen}");
    assert!(seen.contains("Wipe ␛[2J the screen"), "{seen}");
    assert!(seen.contains("␛[2J␛[31mred"), "{seen}");
    // On a terminal the live display draws with escapes of its own, and
    // none of the plan's.
    let (_, drawn) = on_a_terminal(&setup, &["run", &id]);
    assert!(!drawn.contains("\u{1b}]0;"), "{drawn:?}");
    assert!(!drawn.contains("\u{1b}[31m"), "{drawn:?}");
    assert!(drawn.contains("␛[31mred"), "{drawn:?}");
}

/// Each tool of the SDK servers (real processes on the official Python and
/// TypeScript SDKs, installed by the test command into `clients/`), the
/// value planb binds from it, and the value mcp-cli binds from the same
/// answer (its rule: the text blocks, joined and read as JSON when they
/// are JSON; with no text, the blocks).
const SDK_CASES: [(&str, &str, &str, &str); 13] = [
    ("pysdk", "text", r#""hello""#, r#""hello""#),
    ("pysdk", "json_looking_text", r#""[1, 2]""#, "[1, 2]"),
    ("pysdk", "number", "42", "42"),
    ("pysdk", "numbers", "[1, 2, 3]", r#""1\n2\n3""#),
    (
        "pysdk",
        "mapping",
        r#"{"a": 1, "b": 2}"#,
        r#"{"a": 1, "b": 2}"#,
    ),
    (
        "pysdk",
        "point",
        r#"{"x": 1, "y": 2}"#,
        r#"{"x": 1, "y": 2}"#,
    ),
    ("pysdk", "untyped", r#""plain""#, r#""plain""#),
    ("pysdk", "picture", "", ""),
    ("tssdk", "text", r#""hello""#, r#""hello""#),
    (
        "tssdk",
        "two_texts",
        r#""first\nsecond""#,
        r#""first\nsecond""#,
    ),
    (
        "tssdk",
        "summary_and_data",
        r#"{"total": 5}"#,
        r#""the total is 5""#,
    ),
    ("tssdk", "wrapped", r#""hello""#, r#""hello""#),
    ("tssdk", "broken", "", ""),
];

#[test]
fn results_of_python_and_typescript_sdk_servers_bind_their_values() {
    let clients = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../clients");
    let python = clients.join(".venv/bin/python");
    assert!(
        python.exists()
            && clients
                .join("node_modules/@modelcontextprotocol/server")
                .exists(),
        "the SDKs are missing: run scripts/test, which installs them into clients/"
    );
    let setup = Setup::new();
    let servers = json!({"mcpServers": {
        "pysdk": {"command": python, "args": [clients.join("sdk-servers/python_server.py")]},
        "tssdk": {"command": "node", "args": [clients.join("sdk-servers/typescript_server.mjs")]},
    }});
    std::fs::write(setup.path("servers.json"), servers.to_string()).expect("servers");
    let record = setup.path("record");
    // Errors in a plan of their own: a failing batch stops its run.
    let mut out = String::new();
    for errors in [false, true] {
        let mut steps = Vec::new();
        let cases = SDK_CASES
            .iter()
            .enumerate()
            .filter(|(_, case)| (case.1 == "broken") == errors);
        for (n, (server, tool, _, _)) in cases {
            let made = format!("{}", 2 * n + 1);
            let var = format!("v{n}");
            steps.push(step(
                &made,
                &format!("{server}__{tool}"),
                json!({}),
                &[],
                Some(&var),
            ));
            let tag = format!("{server}__{tool}");
            let args = json!({"tag": tag, "value": format!("${{{var}}}")});
            // The TypeScript server records what it is given as it is (the
            // Python SDK reads a JSON-looking string argument as JSON).
            steps.push(step(
                &format!("{}", 2 * n + 2),
                "tssdk__record",
                args,
                &[&made],
                None,
            ));
        }
        let id = setup.create(&json!({"title": "SDK answers", "steps": steps}));
        let ran = setup
            .command(&["run", &id])
            .env("SDK_RECORD", &record)
            .output()
            .expect("run");
        out.push_str(&String::from_utf8_lossy(&ran.stdout));
        out.push_str(&String::from_utf8_lossy(&ran.stderr));
    }
    let recorded: std::collections::BTreeMap<String, Value> = std::fs::read_to_string(&record)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("record line"))
        .map(|r| {
            (
                r["tag"].as_str().unwrap_or("").to_owned(),
                r["value"].clone(),
            )
        })
        .collect();
    let mut table = String::from("tool | planb | mcp-cli\n");
    for (server, tool, planb, mcp_cli) in SDK_CASES {
        let tag = format!("{server}__{tool}");
        let bound = recorded.get(&tag);
        table.push_str(&format!("{tag} | {bound:?} | {mcp_cli}\n"));
        match (tool, planb) {
            ("broken", _) => assert!(bound.is_none(), "an error bound a value: {bound:?}"),
            ("picture", _) => {
                let blocks = bound.unwrap_or_else(|| panic!("{tag} bound nothing: {out}"));
                assert_eq!(blocks[0]["type"], "image", "{blocks}");
            }
            _ => {
                let expected: Value = serde_json::from_str(planb).expect("expected JSON");
                assert_eq!(bound, Some(&expected), "{tag}\n{table}\n{out}");
            }
        }
    }
    eprintln!("{table}");
    assert!(
        out.contains("it broke"),
        "the error's text is reported: {out}"
    );
}

/// Two `plan run` of one short plan started together: it runs once, and
/// the other start is refused, whichever way the timing falls.
#[test]
fn two_starts_of_one_short_plan_run_it_once() {
    let setup = Setup::new();
    let id = setup.create(&json!({"title": "Once", "steps": [
        step("1", "alpha__echo", json!({"text": "side effect"}), &[], None),
        step("2", "beta__sleep", json!({"ms": 150}), &["1"], None),
    ]}));
    for round in 0..4 {
        let before = setup.calls().len();
        let (first, second) = (setup.spawn(&["run", &id]), setup.spawn(&["run", &id]));
        let outputs = [first, second].map(|c| c.wait_with_output().expect("wait"));
        let refused: Vec<String> = outputs
            .iter()
            .filter(|o| !o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
            .collect();
        let echoes = setup.calls()[before..]
            .iter()
            .filter(|c| c["tool"] == "echo")
            .count();
        assert_eq!(echoes, 1, "round {round}: the plan ran {echoes} times");
        assert_eq!(refused.len(), 1, "round {round}: {refused:?}");
        assert!(refused[0].contains("RUN_ALREADY_ACTIVE"), "{}", refused[0]);
    }
}

#[test]
fn a_server_that_never_answers_does_not_hold_up_a_plan_that_resolves_without_it() {
    let setup = Setup::new();
    let ds = crate::support::downstream_binary();
    // `hangs` keeps its pipes open and never answers `initialize`.
    let servers = json!({"mcpServers": {
        "alpha": {"command": ds, "args": ["alpha"]},
        "hangs": {"command": "sleep", "args": ["3600"]},
    }});
    std::fs::write(setup.path("servers.json"), servers.to_string()).expect("servers");
    let file = setup.path("plan.json");
    let plan = json!({"title": "Bare", "steps": [
        step("1", "echo", json!({"text": "one"}), &[], Some("e")),
        step("2", "add", json!({"a": 1, "b": 2}), &["1"], None),
    ]});
    std::fs::write(&file, plan.to_string()).expect("plan file");
    // With a start limit of an hour, a plan that waited for `hangs` would
    // never end within the test's patience.
    let finished = |args: &[&str]| {
        let mut child = setup
            .command(args)
            .env("PLANB_SERVER_START_SEC", "3600")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn planb-mcp");
        wait_for("the plan command to end", || {
            child.try_wait().expect("wait").is_some()
        });
        let output = child.wait_with_output().expect("output");
        let out = String::from_utf8_lossy(&output.stdout).into_owned();
        let err = String::from_utf8_lossy(&output.stderr).into_owned();
        (output.status.code(), out, err)
    };
    let (code, out, err) = finished(&["create", file.to_str().expect("path")]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("Not waited for") && out.contains("hangs"),
        "{out}"
    );
    assert!(err.contains("\"hangs\""), "stderr names it: {err}");
    let id = saved_id(&out);
    let (code, out, err) = finished(&["run", &id]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("Not waited for") && out.contains("hangs"),
        "{out}"
    );
    assert_eq!(setup.calls().len(), 2);
}

/// `plan create --goal` with no servers configured names the file it
/// looked for, so a person knows where to add them.
#[test]
fn a_goal_with_no_servers_names_the_servers_file_to_fill() {
    let dir = tempfile::tempdir().expect("tempdir");
    let servers = dir.path().join("nowhere").join("servers.json");
    let output = Command::new(planb())
        .arg("--data-dir")
        .arg(dir.path().join("root"))
        .args(["plan", "--servers"])
        .arg(&servers)
        .args(["create", "--goal", "Say hello"])
        .env("PLANB_MODEL", "command:cat")
        .stdin(Stdio::null())
        .output()
        .expect("run planb-mcp");
    assert!(!output.status.success());
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(
        said.contains(&format!("add servers to {}", servers.display())),
        "{said}"
    );
}

/// A whole-string `${n}` passes `n` with its own type: a dry run marks the
/// argument, and when a server on the Python SDK refuses the number where
/// its tool takes text, the step's error names the variable, its type and
/// how to pass it as text; written that way, the same call succeeds.
#[test]
fn a_number_refused_where_text_is_expected_is_named_with_how_to_pass_it_as_text() {
    let clients = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../clients");
    let python = clients.join(".venv/bin/python");
    assert!(
        python.exists(),
        "the Python SDK is missing: run scripts/test, which installs it into clients/"
    );
    let setup = Setup::new();
    let servers = json!({"mcpServers": {
        "pysdk": {"command": python, "args": [clients.join("sdk-servers/python_server.py")]},
    }});
    std::fs::write(setup.path("servers.json"), servers.to_string()).expect("servers");
    let plan = |text: &str| {
        json!({"title": "Shout", "variables": {"n": 5}, "steps": [
            step("1", "pysdk__shout", json!({"text": text}), &[], Some("loud")),
        ]})
    };
    let id = setup.create(&plan("${n}"));
    let (code, out) = setup.run(&["run", &id, "--dry-run"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("    typed argument text: number"), "{out}");
    let (code, out) = setup.run(&["run", &id]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("valid string"),
        "the server's own words: {out}"
    );
    assert!(
        out.contains(
            "argument \"text\" was \"${n}\", which passes n as a number, not text; to pass it as text write it with other text, e.g. \"text = ${n}\""
        ),
        "{out}"
    );
    let id = setup.create(&plan("n = ${n}"));
    let (code, out) = setup.run(&["run", &id, "--dry-run"]);
    assert!(code == 0 && !out.contains("typed argument"), "{out}");
    let (code, out) = setup.run(&["run", &id]);
    assert_eq!(code, 0, "{out}");
}

/// Runaway detection is on from the command line too, and `--no-guards`
/// turns it off.
#[test]
fn a_run_whose_results_degenerate_is_stopped_unless_guards_are_off() {
    let setup = Setup::new();
    let id = setup.create(&json!({"title": "Degenerate", "steps": [
        step("1", "alpha__echo", json!({"text": "0"}), &[], None),
        step("2", "alpha__echo", json!({"text": "0"}), &["1"], None),
        step("3", "alpha__echo", json!({"text": "after"}), &["2"], None),
    ]}));
    let (code, out) = setup.run(&["run", &id]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("Guard blocked: runaway detection (degenerate) before calling alpha__echo"),
        "{out}"
    );
    assert!(!setup.calls().iter().any(|c| c["args"]["text"] == "after"));
    let (code, out) = setup.run(&["run", &id, "--no-guards"]);
    assert_eq!(code, 0, "{out}");
    assert!(setup.calls().iter().any(|c| c["args"]["text"] == "after"));
}

/// `plan run --replan 1` against a real OpenAI-compatible model server,
/// killed while its revised plan runs: `plan resume` continues the revised
/// plan where it was, asks the model nothing more, and calls no recorded
/// step again (the call in flight at the kill is called a second time).
#[test]
fn killed_during_a_revised_plan_a_resume_continues_it_without_asking_again() {
    use planb_tests::model::{Answer, ModelServer, Script};
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let revised = json!({"title": "Instead", "steps": [
        step("1", "alpha__echo", json!({"text": "revised ${a}"}), &[], Some("r")),
        step("2", "alpha__sleep", json!({"ms": 1500, "text": "${r} slept"}), &["1"], Some("s")),
    ]});
    let answer: Answer = std::sync::Arc::new(move |_: &str| revised.to_string());
    let model = runtime.block_on(ModelServer::answering(Script::INSTANT, answer));
    let setup = Setup::new();
    let id = setup.create(&json!({"title": "Fails in the middle", "steps": [
        step("1", "alpha__echo", json!({"text": "first"}), &[], Some("a")),
        step("2", "alpha__fail", json!({"message": "boom"}), &["1"], None),
        step("3", "alpha__echo", json!({"text": "${a} then"}), &["2"], None),
    ]}));
    let mut child = setup
        .command(&["run", &id, "--replan", "1"])
        .env("PLANB_MODEL", model.spec())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    wait_for("the revised plan's sleep", || {
        setup.calls().iter().any(|c| c["tool"] == "sleep")
    });
    child.kill().expect("kill -9");
    child.wait().expect("reaped");
    let resumed = setup
        .command(&["resume", &id, "--replan", "1"])
        .env("PLANB_MODEL", model.spec())
        .output()
        .expect("resume");
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&resumed.stdout),
        String::from_utf8_lossy(&resumed.stderr)
    );
    assert_eq!(resumed.status.code(), Some(0), "{out}");
    assert!(
        out.contains("Re-planned: step 2 failed (boom); revised plan 1 ("),
        "{out}"
    );
    assert_eq!(model.requests(), 1, "the resume asked the model again");
    let made: Vec<String> = setup
        .calls()
        .iter()
        .map(|c| {
            let tool = c["tool"].as_str().unwrap_or("");
            format!("{tool} {}", c["args"]["text"].as_str().unwrap_or(""))
        })
        .collect();
    assert_eq!(
        made,
        [
            "echo first",
            "fail ",
            "echo revised first",
            "sleep revised first slept",
            "sleep revised first slept",
        ],
        "{out}"
    );
    // The plan shows it was re-planned, and the revised plan what it revises.
    let (code, shown) = setup.run(&["show", &id]);
    assert_eq!(code, 0, "{shown}");
    assert!(shown.contains("Re-planned after run"), "{shown}");
    assert!(shown.contains("revised plan 1 "), "{shown}");
}

/// `plan create --goal` says each answer it asks the model for on stderr,
/// and why an answer was refused, while the model works.
#[test]
fn a_goal_s_model_answers_are_said_as_they_come() {
    let setup = Setup::new();
    let model = setup.path("model");
    std::fs::create_dir_all(&model).expect("dir");
    let script = crate::plan_tools::model_script(&model);
    let output = setup
        .command(&["create", "--goal", "Say hi, then say it again"])
        .env("PLANB_MODEL", format!("command:{}", script.display()))
        .output()
        .expect("run planb-mcp");
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{said}");
    for line in [
        "plan create: asking the model for a plan (answer 1 of 3)",
        "plan create: answer 1 refused: the answer holds no JSON object",
        "plan create: asking the model for a plan (answer 2 of 3)",
    ] {
        assert!(said.contains(line), "{line:?} not in:\n{said}");
    }
}

/// How many plans the kill test runs, each killed at up to 8 random points
/// (`PLANB_KILL9_PLANS`, default 3; more to soak).
fn killed_plans() -> usize {
    std::env::var("PLANB_KILL9_PLANS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3)
}

/// A plan of sleeping steps, run by `plan run` and `plan resume` processes
/// killed with SIGKILL at random points until one completes: no step that
/// succeeded in a run is started again by a run that resumes it, and the
/// plan ends completed with every step's result.
#[test]
fn plans_killed_at_random_points_never_run_a_recorded_step_again() {
    let setup = Setup::new();
    let (seed, mut below) = crate::support::kill_points();
    let mut kills = 0;
    for plan in 0..killed_plans() {
        let steps: Vec<Value> = (1..=8)
            .map(|n| {
                let after: Vec<String> = if n > 2 {
                    vec![(n - 2).to_string()]
                } else {
                    vec![]
                };
                let after: Vec<&str> = after.iter().map(String::as_str).collect();
                let args = json!({"ms": 20 + 10 * n, "text": format!("p{plan}s{n}")});
                step(
                    &n.to_string(),
                    "beta__sleep",
                    args,
                    &after,
                    Some(&format!("v{n}")),
                )
            })
            .collect();
        let id = setup.create(&json!({"title": format!("Killed {plan}"), "steps": steps}));
        let task = planb_core::TaskId::parse(&id).expect("id");
        // A kill before the first run was recorded leaves nothing to resume.
        let verb = || {
            let (state, _) = crate::support::fold_log(&setup.path("root"));
            let ran = state.task(&task).is_some_and(|t| !t.runs.is_empty());
            if ran { "resume" } else { "run" }
        };
        let completed = loop {
            let mut child = setup.spawn(&[verb(), &id]);
            std::thread::sleep(Duration::from_millis(below(260)));
            let done = child.try_wait().expect("wait").is_some_and(|s| s.success());
            if done {
                break true;
            }
            if child.try_wait().expect("wait").is_none() {
                child.kill().expect("kill -9");
                kills += 1;
            }
            let _ = child.wait();
            if kills > 8 * (plan + 1) {
                break false;
            }
        };
        if !completed {
            let (code, out) = setup.run(&[verb(), &id]);
            assert_eq!(code, 0, "{out}");
        }
        let (state, _) = crate::support::fold_log(&setup.path("root"));
        let recorded = state.task(&task).expect("the plan");
        let mut succeeded_before = std::collections::BTreeSet::new();
        for (run, started) in recorded.runs.iter().zip(crate::tasks::started_by_task_run(
            &setup.path("root"),
            &task,
        )) {
            let again: Vec<&String> = started
                .iter()
                .filter(|s| succeeded_before.contains(*s))
                .collect();
            assert!(
                again.is_empty(),
                "plan {plan}: started again after a kill: {again:?} (seed {seed})"
            );
            if run.resumed_from.is_none() {
                succeeded_before.clear();
            }
            succeeded_before.extend(run.succeeded.iter().cloned());
        }
        let last = recorded.runs.last().expect("a run");
        assert_eq!(
            last.state,
            planb_core::RunState::Completed,
            "plan {plan} (seed {seed})"
        );
        assert_eq!(
            recorded.resumable_successes(Some(last.id)).len(),
            8,
            "plan {plan}"
        );
    }
    eprintln!("{} plan(s) completed after {kills} kill(s)", killed_plans());
}
