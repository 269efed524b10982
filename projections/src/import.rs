//! Import of a data root written by the Node planb-mcp (`planb-mcp import DIR`),
//! so that people can move to planb without losing history.
//!
//! The files of each session become the commands that would have produced
//! them, executed through the [`Store`] with the times the files record:
//! `CreateSession` at the session's `createdAt`; for each ask `OpenAsk` at its
//! `createdAt`, then its outcome; `SavePlan` for each version in order. Steps
//! run in time order within a session (plan versions always in version
//! order), so the log reads like the session happened.
//!
//! What the files cannot say is filled in as follows, and nothing else is
//! invented:
//! - an imported ask was delivered with [`Delivery::BrowserOpened`] and has
//!   the form URL [`IMPORTED_ASK_URL`] (the Node tool kept neither);
//! - a timeout, decline or error has no time in the files, so it is stamped
//!   with the ask's `createdAt`; answers are stamped with `answeredAt`;
//! - answers in a record whose status is `timeout`, `declined` or `error`
//!   (as planb's own export writes for late answers) are imported as a late
//!   answer.
//!
//! Imports into one data root run one at a time, across processes
//! ([`ImportLock`]): each decides what is new by reading the log, and
//! another import under way would change it under its feet (two at once
//! could each save the same plan version).
//!
//! Importing is idempotent: a session, ask or plan version already in the
//! state is skipped (an ask still pending in the state gets its outcome), and
//! the report says so. A file that cannot be read, is not valid JSON, or
//! holds a spec or answers that do not validate is reported with its path
//! and the problem, and the rest is still imported. Only a failing store
//! (the log, not a rejected command) makes [`import`] return an error.

mod read;

use std::fmt;
use std::path::{Path, PathBuf};

use planb_core::{AskId, AskStatus, Command, Delivery, EventBody, SessionId, Timestamp};

use crate::{DataRoot, Store, StoreError};
use read::{Outcome, SessionFiles};

/// The form URL recorded for imported asks: the Node tool kept none, and an
/// empty URL is never mistaken for a link.
pub const IMPORTED_ASK_URL: &str = "";

/// Something [`import`] added to the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Imported {
    /// A session was created.
    Session(SessionId),
    /// An ask was opened, or given the outcome its record holds.
    Ask {
        /// Its session.
        session: SessionId,
        /// The ask.
        ask: AskId,
    },
    /// A plan version was saved.
    Plan {
        /// Its session.
        session: SessionId,
        /// The version number (the same as in the files).
        version: u32,
    },
}

/// Something [`import`] left out because the state already holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The file that describes it.
    pub path: PathBuf,
    /// Why it was skipped.
    pub reason: String,
}

/// A file [`import`] could not read or could not accept (wholly or in part).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportProblem {
    /// The file (or directory) at fault.
    pub path: PathBuf,
    /// What is wrong, naming the field where there is one.
    pub problem: String,
}

impl ImportProblem {
    fn new(path: &Path, problem: String) -> ImportProblem {
        ImportProblem {
            path: path.to_owned(),
            problem,
        }
    }
}

impl fmt::Display for ImportProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.problem)
    }
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.reason)
    }
}

/// What an [`import`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// What was added, in the order it was added.
    pub imported: Vec<Imported>,
    /// What was already in the state.
    pub skipped: Vec<Skipped>,
    /// What could not be imported, and why.
    pub problems: Vec<ImportProblem>,
}

impl ImportReport {
    fn skip(&mut self, path: &Path, reason: String) {
        self.skipped.push(Skipped {
            path: path.to_owned(),
            reason,
        });
    }
}

/// The right to import into a data root, held by one process at a time
/// (an `flock` on `import.lock`) until dropped. Every import of planb's
/// (old session folders, mcp-cli's plans) holds it.
#[derive(Debug)]
pub struct ImportLock {
    _file: std::fs::File,
}

impl ImportLock {
    /// Takes the lock of `root`, waiting for an import under way to end
    /// (`waiting` is called first, then).
    pub fn take(root: &DataRoot, waiting: impl FnOnce()) -> Result<ImportLock, StoreError> {
        let io = |op: &'static str, path: &Path| {
            let path = path.display().to_string();
            move |source| StoreError::Io { op, path, source }
        };
        std::fs::create_dir_all(root.root()).map_err(io("create data root", root.root()))?;
        let path = root.import_lock_path();
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io("open", &path))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                waiting();
                file.lock().map_err(io("lock", &path))?;
            }
            Err(std::fs::TryLockError::Error(source)) => return Err(io("lock", &path)(source)),
        }
        Ok(ImportLock { _file: file })
    }
}

/// Imports the planb-mcp data root at `from` (the directory holding
/// `sessions/`, or that `sessions/` directory itself) into `store`, while
/// `_lock` keeps other imports out.
pub fn import(store: &Store, from: &Path, _lock: &ImportLock) -> Result<ImportReport, StoreError> {
    let nested = from.join("sessions");
    let sessions_dir = if nested.is_dir() {
        nested
    } else {
        from.to_owned()
    };
    let entries = std::fs::read_dir(&sessions_dir).map_err(|source| StoreError::Io {
        op: "list sessions",
        path: sessions_dir.display().to_string(),
        source,
    })?;
    // A directory is a session if it is named like one or holds a manifest;
    // anything else (a planb `log/`, stray folders) is not ours to judge.
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.is_dir())
        .filter(|path| {
            let named = path.file_name().and_then(|n| n.to_str());
            named.is_some_and(|n| SessionId::parse(n).is_ok()) || path.join("session.json").exists()
        })
        .collect();
    dirs.sort();
    let mut report = ImportReport::default();
    let mut sessions: Vec<SessionFiles> = dirs
        .iter()
        .filter_map(|dir| read::session(dir, &mut report.problems))
        .collect();
    sessions.sort_by_key(|s| (s.created_at, s.id));
    for session in &sessions {
        import_session(store, session, &mut report)?;
    }
    Ok(report)
}

/// One step of replaying a session; indexes into its asks and plans.
#[derive(Debug, Clone, Copy)]
enum Step {
    Open(usize),
    Close(usize),
    Late(usize),
    Plan(usize),
}

/// The session's steps in time order; a close never precedes its open, a
/// late answer never precedes its close, and plans keep version order.
fn steps(session: &SessionFiles) -> Vec<Step> {
    let mut timed: Vec<(Timestamp, Step)> = Vec::new();
    for (i, ask) in session.asks.iter().enumerate() {
        let opened = ask.created_at;
        timed.push((opened, Step::Open(i)));
        let answered = ask.answers.as_ref().map(|(at, _)| (*at).max(opened));
        match ask.outcome {
            Outcome::Pending => {}
            Outcome::Answered => timed.push((answered.unwrap_or(opened), Step::Close(i))),
            _ => {
                timed.push((opened, Step::Close(i)));
                if let Some(at) = answered {
                    timed.push((at, Step::Late(i)));
                }
            }
        }
    }
    for (i, plan) in session.plans.iter().enumerate() {
        timed.push((plan.created_at, Step::Plan(i)));
    }
    timed.sort_by_key(|(at, _)| *at);
    let mut next_plan = 0;
    for (_, step) in &mut timed {
        if let Step::Plan(_) = step {
            *step = Step::Plan(next_plan);
            next_plan += 1;
        }
    }
    timed.into_iter().map(|(_, step)| step).collect()
}

/// Executes `command` at `at` and returns the recorded event bodies; a
/// rejection is reported against `path` and gives `None`.
fn run(
    store: &Store,
    command: Command,
    at: Timestamp,
    path: &Path,
    report: &mut ImportReport,
) -> Result<Option<Vec<EventBody>>, StoreError> {
    match store.execute_at(command, at) {
        Ok(envelopes) => Ok(Some(envelopes.into_iter().map(|e| e.event.body).collect())),
        Err(StoreError::Rejected(rejection)) => {
            report
                .problems
                .push(ImportProblem::new(path, rejection.to_string()));
            Ok(None)
        }
        Err(other) => Err(other),
    }
}

fn import_session(
    store: &Store,
    session: &SessionFiles,
    report: &mut ImportReport,
) -> Result<(), StoreError> {
    let id = session.id;
    if store.read(|state| state.session(&id).is_some())? {
        report.skip(
            &session.manifest,
            format!("session {id} is already in the store"),
        );
    } else {
        let command = Command::CreateSession {
            session: id,
            title: session.title.clone(),
            intent: session.intent.clone(),
            project_path: session.project_path.clone(),
        };
        if run(
            store,
            command,
            session.created_at,
            &session.manifest,
            report,
        )?
        .is_none()
        {
            return Ok(());
        }
        report.imported.push(Imported::Session(id));
    }
    // Per ask: whether a command was executed for it, whether it is left out.
    let mut touched = vec![false; session.asks.len()];
    let mut dropped = vec![false; session.asks.len()];
    for step in steps(session) {
        let executed = match step {
            Step::Plan(i) => {
                import_plan(store, session, i, report)?;
                continue;
            }
            Step::Open(i) | Step::Close(i) | Step::Late(i) if dropped[i] => continue,
            Step::Open(i) => match open_ask(store, session, i, report)? {
                Some(executed) => (i, executed),
                None => {
                    dropped[i] = true;
                    continue;
                }
            },
            Step::Close(i) => (i, close_ask(store, session, i, report)?),
            Step::Late(i) => (i, late_answer(store, session, i, report)?),
        };
        if let (i, true) = executed {
            if !touched[i] {
                let ask = session.asks[i].id;
                report.imported.push(Imported::Ask { session: id, ask });
            }
            touched[i] = true;
        }
    }
    for (i, ask) in session.asks.iter().enumerate() {
        if !touched[i] && !dropped[i] {
            report.skip(&ask.path, format!("ask {} is already in the store", ask.id));
        }
    }
    Ok(())
}

/// Opens the ask unless the state has it. `Some(executed)`, or `None` when
/// the ask cannot be imported.
fn open_ask(
    store: &Store,
    session: &SessionFiles,
    i: usize,
    report: &mut ImportReport,
) -> Result<Option<bool>, StoreError> {
    let ask = &session.asks[i];
    match store.read(|state| state.ask(&ask.id).map(|a| a.session))? {
        Some(owner) if owner != session.id => {
            let problem = format!("askId: ask {} already belongs to session {owner}", ask.id);
            report.problems.push(ImportProblem::new(&ask.path, problem));
            Ok(None)
        }
        Some(_) => Ok(Some(false)),
        None => {
            let command = Command::OpenAsk {
                session: session.id,
                ask: ask.id,
                spec: ask.spec.clone(),
                delivery: Delivery::BrowserOpened,
                url: IMPORTED_ASK_URL.to_owned(),
                sid: String::new(),
            };
            let executed = run(store, command, ask.created_at, &ask.path, report)?;
            Ok(executed.map(|_| true))
        }
    }
}

/// Gives a pending ask the outcome its record holds.
fn close_ask(
    store: &Store,
    session: &SessionFiles,
    i: usize,
    report: &mut ImportReport,
) -> Result<bool, StoreError> {
    let ask = &session.asks[i];
    let (command, status, at) = match &ask.outcome {
        Outcome::Pending => return Ok(false),
        Outcome::Answered => {
            let Some((at, answers)) = &ask.answers else {
                return Ok(false);
            };
            let command = Command::SubmitAnswers {
                ask: ask.id,
                answers: answers.clone(),
            };
            (command, AskStatus::Answered, (*at).max(ask.created_at))
        }
        Outcome::TimedOut => (
            Command::TimeOut { ask: ask.id },
            AskStatus::TimedOut,
            ask.created_at,
        ),
        Outcome::Declined(action) => {
            let command = Command::Decline {
                ask: ask.id,
                action: *action,
            };
            (command, AskStatus::Declined, ask.created_at)
        }
        Outcome::Failed(detail) => {
            let command = Command::Fail {
                ask: ask.id,
                detail: detail.clone(),
            };
            (command, AskStatus::Failed, ask.created_at)
        }
    };
    match store.read(|state| state.ask(&ask.id).map(|a| a.status))? {
        Some(AskStatus::Pending) => Ok(run(store, command, at, &ask.path, report)?.is_some()),
        Some(current) if current != status => {
            let problem = format!("status: the store has this ask as {current}, not {status}");
            report.problems.push(ImportProblem::new(&ask.path, problem));
            Ok(false)
        }
        _ => Ok(false),
    }
}

/// Records the answers of an ask that ended otherwise as its late answer.
fn late_answer(
    store: &Store,
    session: &SessionFiles,
    i: usize,
    report: &mut ImportReport,
) -> Result<bool, StoreError> {
    let ask = &session.asks[i];
    let Some((at, answers)) = &ask.answers else {
        return Ok(false);
    };
    let needed = store.read(|state| {
        state.ask(&ask.id).is_some_and(|a| {
            a.status != AskStatus::Pending
                && a.status != AskStatus::Answered
                && a.late_answers.is_empty()
        })
    })?;
    if !needed {
        return Ok(false);
    }
    let command = Command::SubmitAnswers {
        ask: ask.id,
        answers: answers.clone(),
    };
    Ok(run(store, command, (*at).max(ask.created_at), &ask.path, report)?.is_some())
}

fn import_plan(
    store: &Store,
    session: &SessionFiles,
    i: usize,
    report: &mut ImportReport,
) -> Result<(), StoreError> {
    let plan = &session.plans[i];
    let known = store.read(|state| {
        state.session(&session.id).map(|s| {
            let same = s.plans.iter().find(|p| p.version == plan.version);
            (
                same.map(|p| p.is_content(plan.content.as_bytes())),
                s.plans.last().map_or(0, |p| p.version),
            )
        })
    })?;
    let Some((existing, latest)) = known else {
        return Ok(());
    };
    match existing {
        Some(true) => {
            let reason = format!("plan v{} is already in the store", plan.version);
            report.skip(&plan.path, reason);
        }
        Some(false) => {
            let problem = format!(
                "plan v{} is already in the store with other content",
                plan.version
            );
            report
                .problems
                .push(ImportProblem::new(&plan.path, problem));
        }
        None if latest.checked_add(1) != Some(plan.version) => {
            let problem = format!(
                "would be saved as v{} since the store's latest version is v{latest}; not imported",
                latest.saturating_add(1)
            );
            report
                .problems
                .push(ImportProblem::new(&plan.path, problem));
        }
        None => {
            let command = Command::SavePlan {
                session: session.id,
                title: plan.title.clone(),
                content: plan.content.clone(),
            };
            let Some(bodies) = run(store, command, plan.created_at, &plan.path, report)? else {
                return Ok(());
            };
            // Another process may have saved a version in between.
            let saved = bodies.iter().find_map(|body| match body {
                EventBody::PlanVersionSaved { version, .. } => Some(*version),
                _ => None,
            });
            if saved != Some(plan.version) {
                let problem = format!("saved as version {saved:?} instead of v{}", plan.version);
                report
                    .problems
                    .push(ImportProblem::new(&plan.path, problem));
            }
            report.imported.push(Imported::Plan {
                session: session.id,
                version: saved.unwrap_or(plan.version),
            });
        }
    }
    Ok(())
}
