//! Admin commands: `check`, `rebuild`, `log dump`, `log tail`. Glue only: the
//! log verifies, the projections rebuild; this module prints.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use planb_core::{Cursor, Envelope, EventBody, decode};
use planb_log::{FsStorage, LogError, LogOptions, LogReader, Storage, verify};
use planb_projections::{DataRoot, Index, LostTail, TreeCheck};

/// How often `log tail` looks for new events.
const TAIL_POLL: Duration = Duration::from_millis(200);

fn storage(root: &DataRoot) -> anyhow::Result<Arc<dyn Storage>> {
    let dir = root.log_dir();
    anyhow::ensure!(
        dir.exists(),
        "nothing is recorded in {} yet: run `planb-mcp demo` to record a first session",
        root.root().display()
    );
    let storage = FsStorage::open_read_only(&dir).context("the log cannot be opened")?;
    Ok(Arc::new(storage))
}

/// Verifies the whole log and decodes every event.
pub fn check(root: &DataRoot, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    writeln!(out, "data root: {}", root.root().display())?;
    if !root.log_dir().is_dir() {
        writeln!(
            out,
            "no log at {} yet: nothing recorded, nothing to check",
            root.log_dir().display()
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    let storage = storage(root)?;
    let report = match verify(Arc::clone(&storage), LogOptions::default()) {
        Ok(report) => report,
        Err(error @ LogError::Corrupt { .. }) => {
            writeln!(out, "CORRUPT: {error}")?;
            writeln!(
                out,
                "nothing was changed; keep a copy of {} before any repair",
                root.log_dir().display()
            )?;
            return Ok(ExitCode::FAILURE);
        }
        Err(error) => return Err(error.into()),
    };
    writeln!(
        out,
        "log: {} segment(s), {} record(s), last cursor {}, {} payload bytes; checksums and chain verified",
        report.segments, report.records, report.last_cursor, report.payload_bytes
    )?;
    if let Some((segment, offset, bytes)) = &report.torn_tail {
        writeln!(
            out,
            "torn tail: {bytes} byte(s) at offset {offset} of {segment} (an interrupted append; the next writer truncates it)"
        )?;
    }
    let mut reader = LogReader::new(storage, LogOptions::default(), planb_log::Cursor(1));
    let mut kinds = std::collections::BTreeMap::<&str, u64>::new();
    let mut blobs = std::collections::BTreeSet::<[u8; 32]>::new();
    while let Some(record) = reader.next()? {
        match decode(&record.payload, Cursor(record.cursor.0)) {
            Ok(envelope) => {
                let body = &envelope.event.body;
                *kinds.entry(body.kind_name()).or_default() += 1;
                if let EventBody::StepSucceeded { artifact, .. }
                | EventBody::ArtifactEdited { artifact, .. } = body
                {
                    blobs.insert(*artifact);
                }
            }
            Err(error) => {
                writeln!(out, "UNREADABLE EVENT: {error}")?;
                return Ok(ExitCode::FAILURE);
            }
        }
    }
    writeln!(out, "events: all {} decode", report.records)?;
    for (kind, count) in kinds {
        writeln!(out, "  {kind:<28} {count}")?;
    }
    if !check_blobs(root, &blobs, out)? {
        return Ok(ExitCode::FAILURE);
    }
    let mut projections_hold = check_projections(root, Cursor(report.last_cursor.0), out)?;
    projections_hold &= check_state_snapshot(root, Cursor(report.last_cursor.0), out)?;
    if !projections_hold {
        return Ok(ExitCode::FAILURE);
    }
    writeln!(out, "ok")?;
    Ok(ExitCode::SUCCESS)
}

/// Checks that every blob the log names is in the blob store with the bytes
/// its name says; returns whether all are.
fn check_blobs(
    root: &DataRoot,
    named: &std::collections::BTreeSet<[u8; 32]>,
    out: &mut dyn Write,
) -> anyhow::Result<bool> {
    if named.is_empty() {
        return Ok(true);
    }
    let store = root.blobs();
    // Checking writes nothing. A small blob lives in the log and has no
    // file (a damaged copy left by an earlier version is read past, and
    // `rebuild` removes it).
    let failed: Vec<([u8; 32], planb_projections::BlobError)> = named
        .iter()
        .filter_map(|hash| store.read_file(hash).err().map(|e| (*hash, e)))
        .collect();
    let in_log = if failed.is_empty() {
        Default::default()
    } else {
        store.held_in_log()?
    };
    let mut bad = 0;
    let mut logged = 0;
    for (hash, error) in &failed {
        if in_log.contains(hash) {
            logged += 1;
        } else {
            writeln!(out, "BLOB: {error} ({})", store.path(hash).display())?;
            bad += 1;
        }
    }
    if bad == 0 {
        writeln!(
            out,
            "blobs: all {} the log names are present and intact ({logged} held in the log itself)",
            named.len()
        )?;
    } else {
        writeln!(
            out,
            "blobs: {bad} of {} the log names are missing or damaged; restore them from a backup of {}",
            named.len(),
            root.blobs_dir().display()
        )?;
    }
    Ok(bad == 0)
}

/// Checks `state.snapshot`; returns whether it may stay as it is.
fn check_state_snapshot(
    root: &DataRoot,
    log_end: Cursor,
    out: &mut dyn Write,
) -> anyhow::Result<bool> {
    use planb_projections::SnapshotCheck;
    let path = root.state_snapshot_path();
    match planb_projections::check_snapshot(root, &storage(root)?, log_end)? {
        SnapshotCheck::Absent => writeln!(
            out,
            "state.snapshot: none; the next server start folds the whole log and saves one"
        )?,
        SnapshotCheck::Holds { cursor, bytes } => writeln!(
            out,
            "state.snapshot: at cursor {} ({bytes} bytes), equal to the fold of the log up to it",
            cursor.0
        )?,
        SnapshotCheck::PastEnd { cursor } => {
            writeln!(
                out,
                "LOST TAIL: state.snapshot stands at cursor {}, the log ends at {}; put the log back, or run `planb-mcp accept-loss` (it keeps the snapshot aside)",
                cursor.0, log_end.0
            )?;
            return Ok(false);
        }
        SnapshotCheck::Unusable { reason } => writeln!(
            out,
            "state.snapshot: not usable ({reason}); the next server start ignores it, folds the whole log and saves a new one"
        )?,
        SnapshotCheck::Differs { cursor } => {
            writeln!(
                out,
                "WRONG: state.snapshot at cursor {} is not what folding the log gives; delete {} (it is derived) and report this",
                cursor.0,
                path.display()
            )?;
            return Ok(false);
        }
    }
    Ok(true)
}

/// Checks that no projection claims more than the log and the files hold.
/// Returns whether they hold.
fn check_projections(
    root: &DataRoot,
    log_end: Cursor,
    out: &mut dyn Write,
) -> anyhow::Result<bool> {
    let mut hold = true;
    if let Some(applied) = Index::peek_applied_cursor(&root.index_path()) {
        if applied > log_end {
            writeln!(
                out,
                "LOST TAIL: {}",
                LostTail {
                    root: root.root().to_path_buf(),
                    log_end,
                    seen: applied,
                    witness: "index.redb",
                }
            )?;
            hold = false;
        } else {
            writeln!(out, "index.redb: applied up to cursor {}", applied.0)?;
        }
    }
    match planb_projections::check_tree(root)? {
        TreeCheck::Unclaimed => writeln!(
            out,
            "sessions/: no checkpoint from this boot; the next server start rewrites the tree"
        )?,
        TreeCheck::Holds { checkpoint, files } => writeln!(
            out,
            "sessions/: all {files} file(s) the checkpoint (cursor {}) vouches for are there and right",
            checkpoint.0
        )?,
        TreeCheck::Wrong {
            checkpoint,
            examples,
            count,
        } => {
            writeln!(
                out,
                "PROJECTION WRONG: sessions.cursor says the tree shows every event up to cursor {}, but {count} file(s) are missing or differ; run `planb-mcp rebuild`:",
                checkpoint.0
            )?;
            for (path, problem) in examples {
                writeln!(out, "  {problem}: {}", path.display())?;
            }
            hold = false;
        }
        TreeCheck::LostTail(lost) => {
            writeln!(out, "LOST TAIL: {lost}")?;
            hold = false;
        }
    }
    Ok(hold)
}

/// Goes on from the log as it is after a lost tail, keeping the old
/// projections aside.
pub fn accept_loss(root: &DataRoot, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let now = planb_projections::Environment::now(&planb_projections::SystemEnvironment);
    let accepted = planb_projections::accept_loss(root, now)?;
    writeln!(
        out,
        "moved {} to {}; the files there may hold the only copy of the lost events",
        accepted.moved.join(", "),
        accepted.kept_in.display()
    )?;
    writeln!(
        out,
        "rebuilt from {} event(s): {} session(s); planb records again from here",
        accepted.rebuilt.events, accepted.rebuilt.sessions
    )?;
    Ok(ExitCode::SUCCESS)
}

/// Drops and rebuilds every projection.
pub fn rebuild(root: &DataRoot, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let (state, report) = planb_projections::rebuild(root)?;
    writeln!(
        out,
        "rebuilt from {} event(s): {} session(s) in {:.1} ms",
        report.events,
        report.sessions,
        report.elapsed.as_secs_f64() * 1e3
    )?;
    if report.blobs_in_log > 0 {
        writeln!(
            out,
            "blobs held by the log: {} (their places written again)",
            report.blobs_in_log
        )?;
    }
    if report.blob_copies_removed > 0 {
        writeln!(
            out,
            "blob files removed (copies of blobs the log holds): {}",
            report.blob_copies_removed
        )?;
    }
    let tasks = planb_app::tasks::rewrite_folders(root, &state);
    writeln!(out, "task folders rewritten: {}", tasks.written)?;
    for (task, why) in &tasks.left {
        writeln!(out, "  tasks/{task} left as it is: {why}")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints events from `from` on.
pub fn dump(
    root: &DataRoot,
    from: u64,
    limit: Option<u64>,
    out: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    let mut reader = LogReader::new(
        storage(root)?,
        LogOptions::default(),
        planb_log::Cursor(from),
    );
    let mut printed = 0;
    while limit.is_none_or(|l| printed < l) {
        let Some(record) = reader.next()? else { break };
        let envelope = decode(&record.payload, Cursor(record.cursor.0))?;
        writeln!(out, "{}", describe(&envelope))?;
        printed += 1;
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints the last `lines` events, then follows the log if `follow`.
pub fn tail(
    root: &DataRoot,
    lines: u64,
    follow: bool,
    out: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    let storage = storage(root)?;
    let end = verify(Arc::clone(&storage), LogOptions::default())?
        .last_cursor
        .0;
    let from = end.saturating_sub(lines) + 1;
    let mut reader = LogReader::new(storage, LogOptions::default(), planb_log::Cursor(from));
    loop {
        while let Some(record) = reader.next()? {
            let envelope = decode(&record.payload, Cursor(record.cursor.0))?;
            writeln!(out, "{}", describe(&envelope))?;
        }
        out.flush()?;
        if !follow {
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(TAIL_POLL);
    }
}

/// One line per event: cursor, time, kind and the fields a person looks for.
fn describe(envelope: &Envelope) -> String {
    let body = &envelope.event.body;
    let details = session_details(body)
        .or_else(|| task_details(body))
        .unwrap_or_else(|| match (body.ask(), body.plan()) {
            (Some(ask), _) => format!("ask={ask}"),
            (_, Some(plan)) => format!("plan={}", plan.as_str()),
            _ => String::new(),
        });
    format!(
        "{:>8}  {}  {:<26}  {details}",
        envelope.cursor.0,
        envelope.event.at.to_iso8601(),
        body.kind_name()
    )
}

/// The fields of a session's, an ask's or a plan version's event.
fn session_details(body: &EventBody) -> Option<String> {
    Some(match body {
        EventBody::SessionCreated {
            session,
            title,
            project_path,
            ..
        } => format!(
            "session={session} title={:?} project={:?}",
            title.as_deref().unwrap_or(""),
            project_path.as_deref().unwrap_or("")
        ),
        EventBody::AskOpened {
            session,
            ask,
            spec,
            url,
            ..
        } => format!(
            "session={session} ask={ask} title={:?} questions={} url={url}",
            spec.title,
            spec.questions.len()
        ),
        EventBody::AskAnswered { ask, answers }
        | EventBody::AskLateAnswer { ask, answers }
        | EventBody::AskDraftSaved { ask, answers } => {
            format!("ask={ask} answers={}", answers.to_json())
        }
        EventBody::AskDeclined { ask, action } => format!("ask={ask} action={action:?}"),
        EventBody::AskFailed { ask, detail } => format!("ask={ask} detail={detail:?}"),
        EventBody::PlanVersionSaved {
            session,
            version,
            title,
            content,
        } => format!(
            "session={session} version={version} title={:?} bytes={}",
            title.as_deref().unwrap_or(""),
            content.len()
        ),
        EventBody::AskTimedOut { .. }
        | EventBody::NamedPlanWritten { .. }
        | EventBody::NamedPlanEdited { .. }
        | EventBody::NamedPlanChangedOutside { .. }
        | EventBody::NamedPlanSubmitted { .. }
        | EventBody::NamedPlanReviewed { .. }
        | EventBody::TaskCreated { .. }
        | EventBody::RunStarted { .. }
        | EventBody::StepStarted { .. }
        | EventBody::StepSucceeded { .. }
        | EventBody::StepFailed { .. }
        | EventBody::ArtifactEdited { .. }
        | EventBody::StopRequested { .. }
        | EventBody::RunEnded { .. }
        | EventBody::RunLog { .. }
        | EventBody::PlanCreated { .. }
        | EventBody::PlanDeleted { .. }
        | EventBody::BlobStored { .. }
        | EventBody::TaskArchived { .. }
        | EventBody::TaskDeleted { .. } => return None,
    })
}

/// The fields of a step's event: when it started, succeeded or failed.
fn step_details(body: &EventBody) -> Option<String> {
    if let EventBody::StepStarted {
        task,
        run,
        step,
        attempt,
        ..
    } = body
    {
        return Some(format!(
            "task={task} run={run} step={step} attempt={attempt}"
        ));
    }
    if let EventBody::StepSucceeded {
        task,
        run,
        step,
        bytes,
        duration_ms,
        ..
    } = body
    {
        return Some(format!(
            "task={task} run={run} step={step} bytes={bytes} ms={duration_ms}"
        ));
    }
    if let EventBody::StepFailed {
        task,
        run,
        step,
        class,
        message,
        ..
    } = body
    {
        return Some(format!(
            "task={task} run={run} step={step} class={class} message={message:?}"
        ));
    }
    None
}

/// The fields of a task's, a run's or a step's event.
fn task_details(body: &EventBody) -> Option<String> {
    Some(match body {
        EventBody::TaskCreated {
            task,
            pipeline,
            speed,
            target,
            ..
        } => format!("task={task} pipeline={pipeline} speed={speed} target={target}"),
        EventBody::RunStarted {
            task,
            run,
            resumed_from,
            owner_pid,
            ..
        } => format!(
            "task={task} run={run} pid={owner_pid}{}",
            resumed_from.map_or(String::new(), |r| format!(" resumes={r}"))
        ),
        EventBody::StepStarted { .. }
        | EventBody::StepSucceeded { .. }
        | EventBody::StepFailed { .. } => return step_details(body),
        EventBody::ArtifactEdited { task, step, by, .. } => {
            format!("task={task} step={step} by={by:?}")
        }
        EventBody::RunEnded {
            task,
            run,
            outcome,
            reason,
            ..
        } => format!(
            "task={task} run={run} outcome={outcome:?} reason={:?}",
            reason.as_deref().unwrap_or("")
        ),
        EventBody::StopRequested { task, run } => format!("task={task} run={run}"),
        EventBody::RunLog { task, run, lines } => {
            format!("task={task} run={run} lines={}", lines.len())
        }
        EventBody::SessionCreated { .. }
        | EventBody::AskOpened { .. }
        | EventBody::AskDraftSaved { .. }
        | EventBody::AskAnswered { .. }
        | EventBody::AskTimedOut { .. }
        | EventBody::AskDeclined { .. }
        | EventBody::AskFailed { .. }
        | EventBody::AskLateAnswer { .. }
        | EventBody::PlanVersionSaved { .. }
        | EventBody::NamedPlanWritten { .. }
        | EventBody::NamedPlanEdited { .. }
        | EventBody::NamedPlanChangedOutside { .. }
        | EventBody::NamedPlanSubmitted { .. }
        | EventBody::NamedPlanReviewed { .. }
        | EventBody::PlanCreated { .. }
        | EventBody::PlanDeleted { .. }
        | EventBody::BlobStored { .. }
        | EventBody::TaskArchived { .. }
        | EventBody::TaskDeleted { .. } => return None,
    })
}

fn open_store(root: &DataRoot) -> anyhow::Result<planb_projections::Store> {
    let (store, _) = planb_projections::Store::open(
        root.clone(),
        Arc::new(planb_projections::SystemEnvironment),
    )?;
    Ok(store)
}

/// Writes every session in the file layout under `to`.
pub fn export(
    root: &DataRoot,
    to: &std::path::Path,
    out: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    if !root.log_dir().is_dir() {
        anyhow::bail!("no log at {}: nothing to export", root.log_dir().display());
    }
    let report = planb_projections::export(&open_store(root)?, to)?;
    writeln!(
        out,
        "exported {} session(s) to {}: {} file(s) written, {} unchanged",
        report.sessions,
        to.display(),
        report.files_written,
        report.files_unchanged
    )?;
    Ok(ExitCode::SUCCESS)
}

/// browser-plan's data root, which `import` reads when given no directory:
/// `$BROWSER_PLAN_DATA_DIR`, else `~/.browser-plan`; never planb's own.
pub fn browser_plan_root(own: &DataRoot) -> anyhow::Result<std::path::PathBuf> {
    let from = match std::env::var_os("BROWSER_PLAN_DATA_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => std::path::PathBuf::from(dir),
        None => std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(|home| std::path::PathBuf::from(home).join(".browser-plan"))
            .ok_or_else(|| anyhow::anyhow!("HOME is not set; name the directory to import"))?,
    };
    let same = |a: &std::path::Path, b: &std::path::Path| {
        a == b
            || matches!(
                (std::fs::canonicalize(a), std::fs::canonicalize(b)),
                (Ok(a), Ok(b)) if a == b
            )
    };
    if same(&from, own.root()) {
        anyhow::bail!(
            "{} is this planb's own data root (BROWSER_PLAN_DATA_DIR names it); copy its sessions/ elsewhere and import that directory, or set PLANB_MCP_DATA_DIR to a new root",
            from.display()
        );
    }
    if !from.is_dir() {
        anyhow::bail!(
            "no browser-plan data root at {} (BROWSER_PLAN_DATA_DIR or ~/.browser-plan); name the directory to import",
            from.display()
        );
    }
    Ok(from)
}

/// Imports an existing planb-mcp data root into the log.
pub fn import(
    root: &DataRoot,
    from: &std::path::Path,
    out: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    if !from.is_dir() {
        anyhow::bail!("{}: not a directory", from.display());
    }
    let store = open_store(root)?;
    let lock = planb_projections::ImportLock::take(root, || {
        eprintln!("planb-mcp: waiting for another import into this data root to end");
    })?;
    let report = planb_projections::import(&store, from, &lock)?;
    let mut counts = std::collections::BTreeMap::<&str, usize>::new();
    for imported in &report.imported {
        let kind = match imported {
            planb_projections::Imported::Session(_) => "session(s)",
            planb_projections::Imported::Ask { .. } => "ask(s)",
            _ => "plan version(s)",
        };
        *counts.entry(kind).or_default() += 1;
    }
    let summary: Vec<String> = counts.iter().map(|(k, n)| format!("{n} {k}")).collect();
    writeln!(
        out,
        "imported {} from {} ({} already present, skipped)",
        if summary.is_empty() {
            "nothing".to_string()
        } else {
            summary.join(", ")
        },
        from.display(),
        report.skipped.len()
    )?;
    for problem in &report.problems {
        writeln!(
            out,
            "problem: {}: {}",
            problem.path.display(),
            problem.problem
        )?;
    }
    Ok(if report.problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
