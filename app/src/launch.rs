//! Starting a task's next run: where it goes ([`runner`]: a detached worker
//! on the configured model, or this process on the client's model through
//! MCP sampling), and [`start`], which returns once the run is recorded, or
//! says why it was not (the worker's exit status, another caller's run).

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use planb_core::{Run, Task, TaskId};
use planb_engine::backend::sampling::Sampler;
use planb_engine::backend::{Backend, BackendError};
use planb_engine::plans::Downstream;
pub use planb_engine::worker::Start;
use planb_projections::{DataRoot, Store};
use serde_json::{Value, json};

use crate::error::{Error, ErrorCode};
use crate::plans::ServersSource;
use crate::settings::{SettingError, Settings, worker_options};

/// How long a worker (or an in-process run) may take to record its run.
const WORKER_START: Duration = Duration::from_secs(15);

/// Where a task's run goes.
#[derive(Debug)]
pub enum Runner {
    /// A detached worker (this binary's `worker` command) on the configured
    /// model.
    Worker,
    /// This process, on this backend (the client's model).
    Here(Backend),
}

/// A run setting that cannot be used, naming the variable.
pub fn unusable_setting(problem: &SettingError) -> Error {
    Error::with(
        ErrorCode::InvalidConfiguration,
        format!("{problem}; fix or unset it in the server's environment"),
        json!({"variable": problem.variable}),
    )
}

fn backend_error(e: &BackendError) -> Error {
    let code = match e {
        BackendError::NotConfigured | BackendError::BadSpec { .. } => ErrorCode::ModelNotConfigured,
        _ => ErrorCode::ModelError,
    };
    Error::new(code, e.to_string())
}

/// Where a run of a task with `profile` goes: a detached worker when a
/// model is configured, else this process on `sampler` (the client's model)
/// when the client offers one, else `MODEL_NOT_CONFIGURED`. The run
/// settings are checked first.
pub fn runner(profile: Option<&str>, sampler: Option<Sampler>) -> Result<Runner, Error> {
    Settings::from_env().map_err(|e| unusable_setting(&e))?;
    match Backend::configured(profile, &|name| std::env::var(name).ok()) {
        Ok(_) => Ok(Runner::Worker),
        Err(BackendError::NotConfigured) => match sampler {
            Some(sampler) => Ok(Runner::Here(Backend::Sampling(sampler))),
            None => Err(backend_error(&BackendError::NotConfigured)),
        },
        Err(e) => Err(backend_error(&e)),
    }
}

/// What a run is started with.
#[derive(Debug, Clone)]
pub(crate) struct Launch {
    /// The store.
    pub(crate) store: Arc<Store>,
    /// The servers a worker's tool steps use.
    pub(crate) servers: ServersSource,
    /// The downstream connections an in-process run's tool steps use.
    pub(crate) downstream: Option<Arc<Downstream>>,
}

/// Starts task `id`'s next run where `runner` says, beginning where `from`
/// says, `runs_before` being the runs the caller saw, and returns the task
/// once the run is recorded.
pub(crate) async fn start(
    launch: &Launch,
    id: TaskId,
    runs_before: usize,
    runner: Runner,
    from: Start,
) -> Result<Task, Error> {
    match runner {
        Runner::Worker => start_worker(launch, id, runs_before, from).await,
        Runner::Here(backend) => run_here(launch, id, runs_before, backend, from).await,
    }
}

/// The worker's stderr, kept beside its task.
pub fn worker_log(root: &DataRoot, task: &TaskId) -> PathBuf {
    root.task_dir(task).join("worker.log")
}

/// What was appended to `path` after its first `from` bytes, at most its
/// last `chars` characters.
fn tail_of(path: &Path, from: u64, chars: usize) -> String {
    use std::io::{Read, Seek, SeekFrom};
    // Only the end is read: the log keeps every earlier worker's lines.
    let read = |start: u64| -> std::io::Result<Vec<u8>> {
        let mut file = std::fs::File::open(path)?;
        file.seek(SeekFrom::Start(start))?;
        let mut bytes = Vec::new();
        file.take(4 * chars as u64).read_to_end(&mut bytes)?;
        Ok(bytes)
    };
    let len = std::fs::metadata(path).map_or(0, |m| m.len());
    let start = from.max(len.saturating_sub(4 * chars as u64));
    let bytes = read(start).unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes);
    let tail: Vec<char> = text.chars().rev().take(chars).collect();
    tail.into_iter().rev().collect::<String>().trim().to_owned()
}

/// Starts this binary's `worker <task>` detached: its own process group, no
/// stdin, stdout discarded, stderr appended to the task's worker log.
fn spawn_worker(
    root: &DataRoot,
    task: TaskId,
    runs_seen: usize,
    servers: &ServersSource,
    from: Start,
) -> std::io::Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    let log_path = worker_log(root, &task);
    if let Some(dir) = log_path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)?;
    let program = planb_engine::backend::keeper::this_program()?;
    let mut command = std::process::Command::new(program);
    // Named as people know it in `ps`, not as `/proc/self/exe`.
    command.arg0("planb-mcp");
    command
        .arg("--data-dir")
        .arg(root.root())
        .arg("--servers")
        .arg(&servers.file)
        .arg("worker")
        .arg(task.to_string())
        .arg("--runs-seen")
        .arg(runs_seen.to_string());
    if from == Start::Retry {
        command.arg("--retry");
    }
    if let Some(project) = &servers.project {
        command.arg("--project-servers-file").arg(project);
    }
    command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .process_group(0)
        .spawn()
}

/// Runs the task's next run in this process, on `backend` (the client's
/// model): it lasts as long as this process.
async fn run_here(
    launch: &Launch,
    id: TaskId,
    runs_before: usize,
    backend: Backend,
    from: Start,
) -> Result<Task, Error> {
    let mut options = worker_options(backend).map_err(|e| unusable_setting(&e))?;
    options.runs_seen = Some(runs_before);
    options.start = from;
    let started = Arc::new(OnceLock::new());
    options.started = Some(Arc::clone(&started));
    options.servers.clone_from(&launch.downstream);
    // Says why the run could not go on; closed without a word when it ran
    // to its end.
    let (failed, mut failure) = tokio::sync::oneshot::channel::<Error>();
    let store = Arc::clone(&launch.store);
    tokio::spawn(async move {
        match planb_engine::worker::run(store, id, options).await {
            Ok(ended) => tracing::info!(
                "task {id}: run {} ended {:?} (in this process, on the client's model)",
                ended.run,
                ended.outcome
            ),
            Err(e) => {
                tracing::warn!("task {id}: the run could not go on: {e}");
                let _ = failed.send(Error::new(ErrorCode::of_run(&e), e.to_string()));
            }
        }
    });
    let mut ended = || match failure.try_recv() {
        Err(tokio::sync::oneshot::error::TryRecvError::Empty) => None,
        Ok(failure) => Some(failure),
        Err(tokio::sync::oneshot::error::TryRecvError::Closed) => Some(Error::new(
            ErrorCode::InternalError,
            "the run ended before it was recorded",
        )),
    };
    let mine = move |run: &Run| started.get() == Some(&run.id);
    let wait = Wait {
        store: &launch.store,
        id,
        runs_before,
        what: "the run",
        details: json!({}),
    };
    wait.until_recorded(&mut ended, &mine).await
}

/// Starts a worker and waits until its run is recorded, or it exits.
async fn start_worker(
    launch: &Launch,
    id: TaskId,
    runs_before: usize,
    from: Start,
) -> Result<Task, Error> {
    let root = launch.store.root().clone();
    // The log keeps earlier workers' lines: only this one's say why it exited.
    let log_path = worker_log(&root, &id);
    let log_from = std::fs::metadata(&log_path).map_or(0, |m| m.len());
    let mut child = spawn_worker(&root, id, runs_before, &launch.servers, from).map_err(|e| {
        Error::new(
            ErrorCode::InternalError,
            format!("the worker could not start: {e}"),
        )
    })?;
    let details = json!({"worker_log": log_path.display().to_string()});
    let pid = child.id();
    let mut exited = || {
        let status = child.try_wait().ok().flatten()?;
        let tail = tail_of(&log_path, log_from, 2000);
        // Its exit status says why; the log's tail says what happened.
        let code = status
            .code()
            .and_then(ErrorCode::from_exit_status)
            .unwrap_or(ErrorCode::InternalError);
        Some(Error::with(
            code,
            format!("the worker exited ({status}) before starting a run: {tail}"),
            details.clone(),
        ))
    };
    let mine = move |run: &Run| run.owner_pid == pid;
    let wait = Wait {
        store: &launch.store,
        id,
        runs_before,
        what: "the worker",
        details: details.clone(),
    };
    let recorded = wait.until_recorded(&mut exited, &mine).await;
    // Reap it whenever it exits; the run does not depend on us.
    std::thread::spawn(move || child.wait());
    match recorded {
        Err(failure) if failure.code != ErrorCode::RunAlreadyActive => {
            Err(deleted_meanwhile(&launch.store, id)
                .await
                .unwrap_or(failure))
        }
        recorded => recorded,
    }
}

/// `TASK_NOT_FOUND` when `id` was deleted while its run was starting, once
/// the folder the worker's log made again is gone (under the run lock, so
/// never while the worker or the deletion holds it).
async fn deleted_meanwhile(store: &Arc<Store>, id: TaskId) -> Option<Error> {
    let held = Arc::clone(store);
    let read = planb_engine::host::blocking(move || {
        held.read(|s| s.task(&id).is_some_and(|t| t.deleted_at.is_some()))
    });
    if !read.await.ok()? {
        return None;
    }
    let root = store.root().clone();
    if let Ok(lock) = planb_engine::host::take_run_lock(&root, id).await {
        let removed = planb_engine::host::off_workers(move || {
            planb_engine::task_files::remove_folder(&root, &id)
        })
        .await;
        drop(lock);
        if let Ok(Err(error)) = removed {
            tracing::warn!("task {id} is deleted; its folder could not be removed: {error}");
        }
    }
    Some(Error::with(
        ErrorCode::TaskNotFound,
        format!("task_id: task {id} was deleted while its run was starting"),
        json!({"task_id": id.to_string()}),
    ))
}

/// A wait for a task's next run to be recorded.
struct Wait<'a> {
    store: &'a Arc<Store>,
    id: TaskId,
    runs_before: usize,
    /// What was started to record it: "the worker", "the run".
    what: &'static str,
    /// Given with a failure to start in time.
    details: Value,
}

impl Wait<'_> {
    async fn task_now(&self) -> Result<Option<Task>, Error> {
        let store = Arc::clone(self.store);
        let id = self.id;
        planb_engine::host::blocking(move || store.read(|s| s.pipeline_task(&id).cloned()))
            .await
            .map_err(Error::internal)
    }

    /// The task once it has more than `runs_before` runs: the next one is
    /// `mine` (started by what this call started), or another caller's,
    /// which refuses this call (`RUN_ALREADY_ACTIVE`; what this call started
    /// then records no run). `ended` says why what was started ended without
    /// recording one, if it has; past [`WORKER_START`], see
    /// [`Wait::still_starting`].
    async fn until_recorded(
        self,
        ended: &mut (dyn FnMut() -> Option<Error> + Send),
        mine: &(dyn Fn(&Run) -> bool + Send + Sync),
    ) -> Result<Task, Error> {
        let started = Instant::now();
        loop {
            if let Some(task) = self.task_now().await?
                && task.runs.len() > self.runs_before
            {
                return self.settled(task, mine);
            }
            if let Some(failure) = ended() {
                // It may have recorded its run just before it ended.
                if let Ok(Some(task)) = self.task_now().await
                    && task.runs.len() > self.runs_before
                {
                    return self.settled(task, mine);
                }
                return Err(failure);
            }
            if started.elapsed() > WORKER_START {
                return self.still_starting().await;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// What a caller gets when what it started has not recorded a run in
    /// [`WORKER_START`] and goes on starting: a new task as it stands (not
    /// started yet, which its status says), since an error would have the
    /// caller create it again; for a task's next run, an error saying the
    /// run may still begin.
    async fn still_starting(self) -> Result<Task, Error> {
        let seconds = WORKER_START.as_secs();
        if self.runs_before == 0
            && let Some(task) = self.task_now().await?
        {
            tracing::warn!(
                "task {}: {} had not started a run after {seconds} s",
                self.id,
                self.what
            );
            return Ok(task);
        }
        let mut details = self.details;
        if let Some(map) = details.as_object_mut() {
            map.insert("still_starting".into(), true.into());
        }
        Err(Error::with(
            ErrorCode::InternalError,
            format!(
                "{} had not started a run within {seconds} s; it may still start it",
                self.what
            ),
            details,
        ))
    }

    fn settled(
        &self,
        task: Task,
        mine: &(dyn Fn(&Run) -> bool + Send + Sync),
    ) -> Result<Task, Error> {
        match task.runs.get(self.runs_before) {
            Some(run) if mine(run) => Ok(task),
            Some(run) => Err(Error::with(
                ErrorCode::RunAlreadyActive,
                format!(
                    "run {} of task {} started after this call looked; it is {}",
                    run.id,
                    self.id,
                    run.state.as_str()
                ),
                json!({"run_id": run.id.to_string()}),
            )),
            None => Err(Error::new(ErrorCode::InternalError, "no run")),
        }
    }
}
