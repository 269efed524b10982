//! `planb-mcp plan …`: execution plans from the command line.
//!
//! Exit codes: 0 done (or a dry run), 1 the plan ran and failed, 3 it
//! stopped on request, 2 the command could not be carried out (bad input,
//! no such plan, a server that did not start).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use planb_app::App;
use planb_app::execution::{Execution, Plans, RunAsk, Unreviewed};
use planb_app::plans::{Guards, PlanOutcome, Progress, ProgressFn, RunOptions};
use planb_core::Task;
use planb_core::exec_plan::{ExecPlan, StepMark, render_dag};
use planb_core::text::{counted, json_visible, unique_prefix_lengths, visible};
use planb_projections::{DataRoot, Store, SystemEnvironment};
use serde_json::{Map, Value};

use crate::progress::{Display, Live};
use planb_app::plans as exec_plans;

/// What `plan` does.
#[derive(Debug, clap::Subcommand)]
pub enum PlanCommand {
    /// Check a plan file (plan JSON) against the servers' tools and record it.
    Create {
        /// The plan as JSON.
        #[arg(value_name = "FILE")]
        file: Option<PathBuf>,
        /// Generate the steps from a goal with the model of PLANB_MODEL
        /// (checked against the servers' tools like a written plan).
        #[arg(long, value_name = "TEXT", conflicts_with = "file")]
        goal: Option<String>,
    },
    /// List the plans: id (the shortest prefix that tells it apart, 8
    /// characters at least), title, steps, last run.
    List,
    /// Show a plan's DAG, variables and last run.
    Show {
        /// The plan's id or a unique prefix.
        id: String,
    },
    /// Run a plan from the start.
    Run {
        /// The plan's id or a unique prefix.
        id: String,
        /// Trace it without calling any tool.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        knobs: Knobs,
    },
    /// Resume a plan's last run: no step that succeeded is called again.
    Resume {
        /// The plan's id or a unique prefix.
        id: String,
        #[command(flatten)]
        knobs: Knobs,
    },
    /// Ask the plan's active run (in whichever process runs it) to stop;
    /// calls in flight are cancelled and the run ends `stopped`.
    Stop {
        /// The plan's id or a unique prefix.
        id: String,
    },
    /// Import mcp-cli's saved plans and their checkpoints (a checkpoint
    /// becomes a run that `resume` continues); importing again changes
    /// nothing.
    Import {
        /// The directory of mcp-cli's plans [default: ~/.mcp-cli/plans].
        dir: Option<PathBuf>,
    },
    /// Delete a plan (its history stays in the log).
    Delete {
        /// The plan's id or a unique prefix.
        id: String,
    },
}

/// Variables, guards and limits of a run.
#[derive(Debug, clap::Args)]
pub struct Knobs {
    /// A call-time variable, `name=value` (value read as JSON when it is JSON); repeatable.
    #[arg(long = "var", value_name = "NAME=VALUE")]
    vars: Vec<String>,
    /// Most tool calls in the run.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=100_000))]
    max_calls: Option<u32>,
    /// Most calls of one tool, `tool=N`; repeatable.
    #[arg(long = "tool-cap", value_name = "TOOL=N")]
    tool_caps: Vec<String>,
    /// On a failed step, ask the model (PLANB_MODEL) for a revised plan of
    /// the remaining work and run it, at most N times.
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=10))]
    replan: u32,
    /// Run without runaway detection (on by default: a run stops when its
    /// numeric results degenerate to 0 or 1, become effectively zero, or
    /// repeat). The limits given here still hold.
    #[arg(long)]
    no_guards: bool,
    /// No call starts after this many seconds.
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=604_800))]
    max_seconds: Option<u64>,
    /// Most calls at once within a batch.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    concurrency: u16,
    /// The longest one call may take.
    #[arg(long, default_value_t = 300, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=86_400))]
    step_timeout: u64,
}

impl Knobs {
    fn variables(&self) -> anyhow::Result<Option<Map<String, Value>>> {
        if self.vars.is_empty() {
            return Ok(None);
        }
        let mut out = Map::new();
        for pair in &self.vars {
            let (name, value) = pair
                .split_once('=')
                .with_context(|| format!("--var {pair:?}: expected NAME=VALUE"))?;
            let value = serde_json::from_str(value).unwrap_or_else(|_| Value::from(value));
            out.insert(name.trim().to_owned(), value);
        }
        Ok(Some(out))
    }

    fn options(&self) -> anyhow::Result<RunOptions> {
        let mut guards = Guards {
            max_calls: self.max_calls,
            max_wall: self.max_seconds.map(Duration::from_secs),
            runaway: !self.no_guards,
            ..Guards::default()
        };
        for cap in &self.tool_caps {
            let (tool, n) = cap
                .rsplit_once('=')
                .with_context(|| format!("--tool-cap {cap:?}: expected TOOL=N"))?;
            let n: u32 = n
                .trim()
                .parse()
                .with_context(|| format!("--tool-cap {cap:?}: N must be a whole number"))?;
            guards.per_tool.insert(tool.trim().to_owned(), n);
        }
        Ok(RunOptions {
            concurrency: usize::from(self.concurrency),
            step_timeout: Duration::from_secs(self.step_timeout),
            guards,
            replan: self.replan,
            ..RunOptions::default()
        })
    }
}

fn open(root: &DataRoot) -> anyhow::Result<Arc<Store>> {
    std::fs::create_dir_all(root.root())
        .with_context(|| format!("cannot create the data root {}", root.root().display()))?;
    let (store, _) = Store::open(root.clone(), Arc::new(SystemEnvironment))?;
    Ok(Arc::new(store))
}

/// A plan file: JSON, at most 4 MiB.
fn read_plan_file(file: &Path) -> anyhow::Result<Value> {
    let meta =
        std::fs::metadata(file).with_context(|| format!("cannot read {}", file.display()))?;
    if meta.len() > 4 * 1024 * 1024 {
        anyhow::bail!(
            "{}: {} bytes; a plan file may hold at most 4 MiB",
            file.display(),
            meta.len()
        );
    }
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}: not JSON", file.display()))
}

/// One thread: a run's calls, its appends (made inline) and its display
/// take turns on it, with no hand-off between threads.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// Text from a plan or a tool, its control characters shown.
fn shown(text: &str) -> std::borrow::Cow<'_, str> {
    visible(text, false)
}

/// An application error as the command line says it: its message, after
/// its code when another run is in the way.
fn said(error: planb_app::Error) -> anyhow::Error {
    match error.code {
        planb_app::ErrorCode::RunAlreadyActive => anyhow::anyhow!("{error}"),
        _ => anyhow::anyhow!(error.message),
    }
}

/// Runs one `plan` command.
pub fn main(
    root: &DataRoot,
    servers: &exec_plans::ServersSource,
    command: &PlanCommand,
    live: bool,
    out: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    // The folder the command runs in is the project its plans are made for.
    let project = std::env::current_dir()
        .ok()
        .map(|d| d.display().to_string());
    let app = App::ready(open(root)?, servers.clone()).in_project(project);
    runtime()?.block_on(run(&app.plans(), command, live, out))
}

async fn run(
    plans: &Plans,
    command: &PlanCommand,
    live: bool,
    out: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    let find = async |id: &str| plans.find(id).await.map_err(said);
    match command {
        PlanCommand::Create { file, goal } => {
            create(plans, file.as_deref(), goal.as_deref(), out).await
        }
        PlanCommand::List => list(plans, out).await,
        PlanCommand::Show { id } => show(plans, &find(id).await?, out).await,
        PlanCommand::Stop { id } => {
            let task = find(id).await?;
            // The refusal is said with its code (`RUN_NOT_ACTIVE: …`).
            if plans.stop(task.id).await? == exec_plans::Stop::AlreadyAsked {
                writeln!(out, "Plan {}: a stop was already asked for", task.id)?;
            } else {
                writeln!(out, "Plan {}: stop requested", task.id)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        PlanCommand::Import { dir } => import(plans, dir.as_deref(), out).await,
        PlanCommand::Delete { id } => {
            let task = plans.delete(id).await.map_err(said)?;
            writeln!(out, "Plan deleted: {task}")?;
            Ok(ExitCode::SUCCESS)
        }
        PlanCommand::Run { id, dry_run, knobs } => {
            let task = find(id).await?;
            if *dry_run {
                return trace(plans, task, knobs, out).await;
            }
            execute(plans, &task, false, knobs, live, out).await
        }
        PlanCommand::Resume { id, knobs } => {
            let task = find(id).await?;
            execute(plans, &task, true, knobs, live, out).await
        }
    }
}

/// Each model answer is said on stderr: generation can take minutes.
fn tell_attempt(attempt: &exec_plans::Attempt) {
    match attempt {
        exec_plans::Attempt::Asking { answer } => eprintln!(
            "plan create: asking the model for a plan (answer {answer} of {})",
            exec_plans::ATTEMPTS
        ),
        exec_plans::Attempt::Refused { answer, reason } => {
            eprintln!("plan create: answer {answer} refused: {}", shown(reason))
        }
    }
}

/// `plan create FILE` or `plan create --goal TEXT`.
async fn create(
    plans: &Plans,
    file: Option<&Path>,
    goal: Option<&str>,
    out: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    let created = if let Some(goal) = goal {
        plans
            .create_from_goal(goal, None, None, &tell_attempt)
            .await
    } else {
        let Some(file) = file else {
            anyhow::bail!("plan create: give a plan file (JSON) or --goal TEXT");
        };
        plans.create(&read_plan_file(file)?, None).await
    };
    let exec_plans::Created {
        id: task,
        plan,
        silent,
    } = created.map_err(said)?;
    writeln!(
        out,
        "\nPlan: {} ({})\n",
        shown(&plan.title),
        counted(plan.steps.len(), "step", "steps")
    )?;
    writeln!(out, "{}", render_dag(&plan, |_| StepMark::Pending))?;
    writeln!(out, "\nPlan saved: {task}")?;
    not_waited_for(out, &silent)?;
    Ok(ExitCode::SUCCESS)
}

/// `plan list`: each id as its shortest prefix no other listed plan shares
/// (plans made within a minute share their first 8 characters).
async fn list(plans: &Plans, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let rows = plans.list().await.map_err(said)?;
    if rows.is_empty() {
        writeln!(out, "No saved plans. Use plan create FILE to create one.")?;
        return Ok(ExitCode::SUCCESS);
    }
    // Each id as its shortest prefix no other listed plan shares
    // (plans made within a minute share their first 8 characters).
    let ids: Vec<String> = rows.iter().map(|row| row.id.to_string()).collect();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let lengths = unique_prefix_lengths(&refs, 8);
    let shorts: Vec<String> = ids
        .iter()
        .zip(&lengths)
        .map(|(id, &n)| id.chars().take(n).collect())
        .collect();
    let width = shorts.iter().map(String::len).max().unwrap_or(0).max(8);
    writeln!(
        out,
        "{:<width$}  {:<50} {:>5}  LAST RUN",
        "ID", "TITLE", "STEPS"
    )?;
    for (row, id) in rows.iter().zip(&shorts) {
        let title: String = shown(&row.title).chars().take(50).collect();
        writeln!(
            out,
            "{id:<width$}  {:<50} {:>5}  {}",
            title, row.steps, row.state
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `plan show ID`.
async fn show(plans: &Plans, task: &Task, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let plan = plans.load(task).map_err(said)?;
    if let Some(revises) = &plan.revises {
        writeln!(
            out,
            "\nRevised plan {} of plan {}: made after its run {} failed at step {} ({})",
            revises.number,
            shown(&revises.plan),
            shown(&revises.run),
            shown(&revises.step),
            shown(&revises.error)
        )?;
    }
    writeln!(
        out,
        "\nPlan: {} ({})",
        shown(&plan.title),
        counted(plan.steps.len(), "step", "steps")
    )?;
    writeln!(out, "id: {}\n", task.id)?;
    writeln!(out, "{}", exec_plans::rendered(task, &plan))?;
    let vars: Vec<&str> = plan
        .steps
        .iter()
        .filter_map(|s| s.result_variable.as_deref())
        .collect();
    if !vars.is_empty() {
        writeln!(out, "\nVariables: {}", vars.join(", "))?;
    }
    if let Some(run) = task.runs.last() {
        writeln!(
            out,
            "\nLast run {}: {}{}",
            run.id,
            run.state.as_str(),
            run.reason
                .as_ref()
                .map(|r| format!(" ({})", shown(r)))
                .unwrap_or_default()
        )?;
    }
    for seen in plans.revisions(task).await.map_err(said)? {
        writeln!(
            out,
            "Re-planned after run {} failed at step {} ({}): revised plan {} {} ({}), {}",
            shown(&seen.run),
            shown(&seen.step),
            shown(&seen.error),
            seen.number,
            seen.plan_id,
            counted(seen.steps, "step", "steps"),
            seen.state
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `plan import [DIR]`: mcp-cli's saved plans.
async fn import(
    plans: &Plans,
    dir: Option<&Path>,
    out: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    let dir = match dir {
        Some(dir) => dir.to_owned(),
        None => planb_app::import::default_dir()
            .ok_or_else(|| anyhow::anyhow!("HOME is not set: give the directory"))?,
    };
    let saved = planb_app::import::saved(&dir).map_err(said)?;
    if saved.is_empty() {
        writeln!(out, "No mcp-cli plans in {}.", dir.display())?;
        return Ok(ExitCode::SUCCESS);
    }
    let waiting = || eprintln!("planb-mcp: waiting for another import into this data root to end");
    // Each plan is said as it is imported: a large directory takes a while.
    let (mut failed, mut written) = (0, Ok(()));
    let each = |plan: &planb_app::import::Saved, imported: &Result<_, _>| match said_imported(
        &plan.id, imported, out,
    ) {
        Ok(true) => {}
        Ok(false) => failed += 1,
        Err(error) => written = Err(error),
    };
    plans.import(&saved, waiting, each).await.map_err(said)?;
    written?;
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Says what came of importing mcp-cli's plan `id`; whether it is in.
fn said_imported(
    id: &str,
    imported: &Result<planb_app::import::Imported, planb_app::Error>,
    out: &mut dyn Write,
) -> anyhow::Result<bool> {
    let notes = match imported {
        Ok(planb_app::import::Imported::New {
            task,
            title,
            steps,
            run,
            notes,
        }) => {
            let checkpoint = run.as_ref().map(|r| format!("; its checkpoint: {r}"));
            writeln!(
                out,
                "{}: imported as {task}: {} ({}){}",
                shown(id),
                shown(title),
                counted(*steps, "step", "steps"),
                checkpoint.unwrap_or_default()
            )?;
            notes
        }
        Ok(planb_app::import::Imported::Already { task, run, notes }) => {
            let checkpoint = (run.as_ref()).map(|r| format!("; its checkpoint, recorded now: {r}"));
            writeln!(
                out,
                "{}: imported before, as {task}{}",
                shown(id),
                checkpoint.unwrap_or_default()
            )?;
            notes
        }
        Err(error) => {
            writeln!(
                out,
                "{}: not imported: {}",
                shown(id),
                shown(&error.message)
            )?;
            return Ok(false);
        }
    };
    for note in notes {
        writeln!(out, "  {}", shown(note))?;
    }
    Ok(true)
}

/// `plan run ID --dry-run`: the plan traced with its arguments resolved,
/// nothing called.
async fn trace(
    plans: &Plans,
    task: Task,
    knobs: &Knobs,
    out: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    let ask = RunAsk {
        variables: knobs.variables()?,
        dry_run: true,
        ..RunAsk::default()
    };
    let traced = plans.execute(task, ask, false, &Unreviewed);
    let Execution::DryRun { plan, outcome } = traced.await.map_err(said)? else {
        anyhow::bail!("a dry run came to no trace");
    };
    writeln!(out, "[DRY RUN] Executing plan: {}", shown(&plan.title))?;
    for step in &outcome.steps {
        let after: Vec<&str> = plan
            .position(&step.index)
            .map(|at| {
                plan.needs(at)
                    .iter()
                    .map(|&n| plan.steps[n].index.as_str())
                    .collect()
            })
            .unwrap_or_default();
        writeln!(
            out,
            "  Step {}: {} [{}] args {}{} → {}",
            shown(&step.index),
            shown(&step.title),
            shown(&step.tool),
            json_visible(step.args.to_string()),
            if after.is_empty() {
                String::new()
            } else {
                format!(" (after {})", shown(&after.join(", ")))
            },
            json_visible(step.result.as_ref().unwrap_or(&Value::Null).to_string())
        )?;
        for typed in &step.typed {
            writeln!(out, "    typed argument {}", shown(typed))?;
        }
    }
    writeln!(
        out,
        "Variables: {}",
        json_visible(serde_json::to_string(&outcome.variables)?)
    )?;
    writeln!(
        out,
        "[DRY RUN] Plan completed: {}, no tool called",
        counted(outcome.steps.len(), "step", "steps")
    )?;
    Ok(ExitCode::SUCCESS)
}

async fn execute(
    plans: &Plans,
    task: &Task,
    resume: bool,
    knobs: &Knobs,
    live: bool,
    out: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    let plan = plans.load(task).map_err(said)?;
    let ask = RunAsk {
        variables: knobs.variables()?,
        resume,
        options: knobs.options()?,
        ..RunAsk::default()
    };
    writeln!(
        out,
        "{} plan: {} ({})",
        if resume { "Resuming" } else { "Executing" },
        shown(&plan.title),
        task.id
    )?;
    let mut display = first_display(task, &plan, resume, live, out)?;
    // The run's events come here over a channel and are shown on this
    // thread, between the run's steps, through `out`.
    let (sender, mut events) = tokio::sync::mpsc::unbounded_channel::<Progress>();
    let progress: ProgressFn = Arc::new(move |event: &Progress| {
        let _ = sender.send(event.clone());
    });
    let run = plans.run_here(task, ask, progress);
    tokio::pin!(run);
    let mut ticks = tokio::time::interval(crate::progress::FRAME_INTERVAL);
    let outcome: PlanOutcome = loop {
        tokio::select! {
            outcome = &mut run => {
                while let Ok(event) = events.try_recv() {
                    display.show(&event, out)?;
                }
                break outcome.map_err(said)?;
            }
            Some(event) = events.recv() => display.show(&event, out)?,
            _ = ticks.tick() => display.tick(out)?,
        }
    };
    display.finish(out)?;
    if !live {
        // The plan as it ended: the last revised plan, when it was re-planned.
        let last = outcome.revisions.last().map_or(task.id, |r| r.plan_id);
        let after = plans.get(last).await.unwrap_or_else(|_| task.clone());
        let drawn = plans.load(&after).unwrap_or_else(|_| Arc::clone(&plan));
        writeln!(out, "\n{}\n", exec_plans::rendered(&after, &drawn))?;
    }
    ended(task, &outcome, out)
}

/// How a run's progress is shown: the DAG redrawn in place on a terminal
/// (a resume starts from what was done), else drawn once, then a line per
/// event.
fn first_display(
    task: &Task,
    plan: &Arc<ExecPlan>,
    resume: bool,
    live: bool,
    out: &mut dyn Write,
) -> anyhow::Result<Display> {
    let mut display = if live {
        let marks = if resume {
            exec_plans::marks(task, plan)
        } else {
            vec![StepMark::Pending; plan.steps.len()]
        };
        Display::Live(Box::new(Live::new(Arc::clone(plan), marks)))
    } else {
        writeln!(out, "{}\n", render_dag(plan, |_| StepMark::Pending))?;
        Display::Lines
    };
    display.finish(out)?;
    Ok(display)
}

/// Says how a run ended; the exit status says it too (0 completed, 3
/// stopped, 1 failed).
fn ended(task: &Task, outcome: &PlanOutcome, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    not_waited_for(out, &outcome.servers_not_answering)?;
    for revision in &outcome.revisions {
        writeln!(
            out,
            "Re-planned: step {} failed ({}); revised plan {} ({}) {}",
            shown(&revision.step),
            shown(&revision.error),
            revision.number,
            revision.plan_id,
            if revision.success {
                "completed"
            } else {
                "failed"
            }
        )?;
    }
    if !outcome.called_again.is_empty() {
        writeln!(
            out,
            "Called a second time (called before in the resumed run, no success recorded): step {}; check that a tool that is not idempotent did not act twice",
            outcome.called_again.join(", step ")
        )?;
    }
    let seconds = outcome.duration.as_secs_f64();
    if outcome.success {
        writeln!(
            out,
            "Plan completed: {} in {seconds:.1}s",
            counted(outcome.steps.len(), "step", "steps")
        )?;
        Ok(ExitCode::SUCCESS)
    } else if outcome.stopped {
        writeln!(out, "Plan stopped: resume it with plan resume {}", task.id)?;
        Ok(ExitCode::from(3))
    } else {
        writeln!(
            out,
            "Plan failed: {}",
            visible(outcome.error.as_deref().unwrap_or("unknown error"), true)
        )?;
        Ok(ExitCode::from(1))
    }
}

/// Names the servers a plan's tool names resolved without.
fn not_waited_for(out: &mut dyn Write, silent: &[String]) -> std::io::Result<()> {
    if silent.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "Not waited for (still starting when every tool name had resolved without it): {}",
        silent
            .iter()
            .map(|s| shown(s))
            .collect::<Vec<_>>()
            .join(", ")
    )
}
