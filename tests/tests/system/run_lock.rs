//! A worker's liveness is its run lock: a run whose worker was killed with
//! SIGKILL is found by any process and ended `failed`, `worker_error`,
//! recoverable; while the worker lives, nothing touches its run.

use std::io::{BufRead, BufReader};
use std::process::{Command as Process, Stdio};
use std::sync::Arc;

use planb_core::{Command, RunId, RunState, TaskId, Timestamp};
use planb_projections::{DataRoot, FixedEnvironment, RunLock, RunLockError, Store, worker_alive};

#[test]
fn a_run_whose_worker_was_killed_is_ended_as_a_recoverable_worker_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = DataRoot::new(dir.path());
    let env = Arc::new(FixedEnvironment::new(Timestamp(1_780_000_000_000), 1_000));
    let (store, _) = Store::open(root.clone(), env).expect("open");
    let task = TaskId::from_uuid(uuid::Uuid::from_u128(0x7a5c));
    let run = RunId::from_uuid(uuid::Uuid::from_u128(0x0b01));
    store
        .execute(Command::CreateTask {
            task,
            pipeline: "project-plan".into(),
            pipeline_version: 1,
            prompt: "Open a bakery".into(),
            speed: "ping".into(),
            target: "report".into(),
            model_profile: None,
            client_request_id: None,
            project_path: None,
        })
        .expect("task");
    assert!(!worker_alive(&root, &task).expect("probe"), "no worker yet");

    // The worker takes the lock, then records its run.
    let mut worker = Process::new(env!("CARGO_BIN_EXE_planb-test-run-holder"))
        .arg(dir.path())
        .arg(task.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the worker");
    let mut lines = BufReader::new(worker.stdout.take().expect("stdout")).lines();
    assert_eq!(lines.next().expect("a line").expect("read"), "held");
    store
        .execute(Command::StartRun {
            task,
            run,
            resumed_from: None,
            owner_pid: worker.id(),
            host: "here".into(),
            variables: None,
        })
        .expect("run");
    assert!(worker_alive(&root, &task).expect("probe"));
    assert!(matches!(
        RunLock::acquire(&root, &task),
        Err(RunLockError::Held(t)) if t == task
    ));
    assert_eq!(
        store.reap_dead_runs().expect("reap"),
        [],
        "the worker lives"
    );

    worker.kill().expect("kill -9");
    worker.wait().expect("reap the process");
    assert_eq!(store.reap_dead_runs().expect("reap"), [(task, run)]);
    assert_eq!(store.reap_dead_runs().expect("again"), [], "ended once");
    let ended = store
        .read(|state| state.task(&task).expect("task").runs[0].clone())
        .expect("read");
    assert_eq!(ended.state, RunState::Failed);
    assert_eq!(ended.reason.as_deref(), Some("worker_error"));
    assert!(ended.recoverable);
    // The task can be resumed: a new worker takes the lock.
    let _lock = RunLock::acquire(&root, &task).expect("the lock is free again");
}
