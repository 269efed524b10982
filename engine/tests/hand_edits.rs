//! Which files under `tasks/<task>/` count as a person's edits: over a real
//! store and blob store, with the folder written by the projection itself.

use std::sync::Arc;

use planb_core::{Command, RunId, RunOutcome, Task, TaskId, Timestamp};
use planb_engine::{pipelines, task_files};
use planb_projections::{DataRoot, FixedEnvironment, Store};

const FIRST: &str = "## Goal\n\nOpen a bakery.\n";

struct Fixture {
    _dir: tempfile::TempDir,
    root: DataRoot,
    store: Store,
    task: TaskId,
}

impl Fixture {
    /// A task whose intake succeeded in a run that then stopped, with its
    /// folder written.
    fn new() -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = DataRoot::new(dir.path());
        let env = Arc::new(FixedEnvironment::new(Timestamp(1_700_000_000_000), 1_000));
        let (store, _) = Store::open(root.clone(), env).expect("store");
        let task = TaskId::from_uuid(uuid::Uuid::new_v4());
        let run = RunId::from_uuid(uuid::Uuid::new_v4());
        let artifact = root.blobs().put(FIRST.as_bytes()).expect("blob");
        for command in [
            Command::CreateTask {
                task,
                pipeline: "project-plan".into(),
                pipeline_version: 1,
                prompt: "Open a bakery".into(),
                speed: "fast".into(),
                target: "build_plan".into(),
                model_profile: None,
                client_request_id: None,
                project_path: None,
            },
            Command::StartRun {
                task,
                run,
                resumed_from: None,
                owner_pid: 1,
                host: "test".into(),
                variables: None,
            },
            Command::StartStep {
                task,
                run,
                step: "intake".into(),
                input: [1; 32],
                call: None,
            },
            Command::SucceedStep {
                task,
                run,
                step: "intake".into(),
                input: [1; 32],
                artifact,
                bytes: FIRST.len() as u64,
                duration_ms: 1,
                tokens_in: 0,
                tokens_out: 0,
            },
            Command::EndRun {
                task,
                run,
                outcome: RunOutcome::Stopped,
                reason: None,
                failed_step: None,
                recoverable: true,
            },
        ] {
            store.execute(command).expect("recorded");
        }
        let fixture = Fixture {
            _dir: dir,
            root,
            store,
            task,
        };
        let pipeline = pipelines::project_plan();
        task_files::project(&fixture.root, &pipeline, &fixture.task(), true).expect("project");
        fixture
    }

    fn task(&self) -> Task {
        self.store
            .read(|s| s.task(&self.task).cloned())
            .expect("read")
            .expect("task")
    }

    fn intake_file(&self) -> std::path::PathBuf {
        self.root.task_dir(&self.task).join("01-intake.md")
    }

    /// The edits found, as (file, text), and why any file was skipped.
    fn edits(&self, max_bytes: usize) -> (Vec<(String, String)>, Vec<String>) {
        let (edits, skipped) = task_files::hand_edits(
            &self.root,
            &pipelines::project_plan(),
            &self.task(),
            max_bytes,
        );
        (
            edits
                .into_iter()
                .map(|e| (e.name, String::from_utf8(e.bytes).expect("utf-8")))
                .collect(),
            skipped.into_iter().map(|s| s.why).collect(),
        )
    }
}

const NONE: (Vec<(String, String)>, Vec<String>) = (Vec::new(), Vec::new());

#[test]
fn the_projections_own_files_are_not_edits() {
    let f = Fixture::new();
    assert_eq!(
        std::fs::read_to_string(f.intake_file()).expect("file"),
        FIRST
    );
    assert_eq!(f.edits(1 << 20), NONE);
    // A deleted file is not an edit either: the projection writes it again.
    std::fs::remove_file(f.intake_file()).expect("remove");
    assert_eq!(f.edits(1 << 20), NONE);
}

#[test]
fn a_file_the_projection_has_not_caught_up_on_is_not_an_edit() {
    let f = Fixture::new();
    // The state moves on (another process's edit) and the folder is not
    // rewritten: the file still holds what the projection last wrote.
    let newer = "## Goal\n\nOpen two bakeries.\n";
    let artifact = f.root.blobs().put(newer.as_bytes()).expect("blob");
    f.store
        .execute(Command::EditArtifact {
            task: f.task,
            step: "intake".into(),
            artifact,
            bytes: newer.len() as u64,
            by: "task_artifact_write".into(),
        })
        .expect("edit");
    assert_eq!(f.edits(1 << 20), NONE);
}

#[test]
fn a_changed_file_is_an_edit_and_an_oversized_one_is_named_not_read() {
    let f = Fixture::new();
    let by_hand = "## Goal\n\nOpen a bakery and a cafe.\n";
    std::fs::write(f.intake_file(), by_hand).expect("hand edit");
    assert_eq!(
        f.edits(1 << 20),
        (
            vec![("01-intake.md".to_owned(), by_hand.to_owned())],
            vec![]
        )
    );
    let (edits, skipped) = f.edits(8);
    assert!(edits.is_empty());
    assert_eq!(skipped.len(), 1);
    assert!(
        skipped[0].contains("over the 8-byte artifact limit"),
        "{skipped:?}"
    );
    // Without the record of what was written nothing tells an edit from an
    // old file, so nothing is taken.
    std::fs::remove_file(f.root.task_dir(&f.task).join(".written.json")).expect("remove");
    assert_eq!(f.edits(1 << 20), NONE);
}

#[test]
fn files_a_person_adds_to_the_folder_are_neither_edits_nor_removed() {
    let f = Fixture::new();
    let dir = f.root.task_dir(&f.task);
    let mine = [
        ("2026-budget.md", "# Budget notes\n"),
        ("01-intake.md.bak", "## Goal\n\nAn older goal.\n"),
        ("01-intake.v2.md", "## Goal\n\nA second draft.\n"),
    ];
    for (name, text) in mine {
        std::fs::write(dir.join(name), text).expect("a person's file");
    }
    assert_eq!(f.edits(1 << 20), NONE);
    let pipeline = pipelines::project_plan();
    task_files::project(&f.root, &pipeline, &f.task(), true).expect("project");
    for (name, text) in mine {
        let kept = std::fs::read_to_string(dir.join(name));
        assert_eq!(
            kept.ok().as_deref(),
            Some(text),
            "{name} was removed or changed"
        );
    }
    assert_eq!(
        std::fs::read_to_string(f.intake_file()).expect("file"),
        FIRST
    );
}

/// A step file replaced by a link to an endless file: writing the folder
/// reads no more of it than an artifact can hold, and leaves it be.
#[test]
fn a_step_file_linked_to_an_endless_file_is_read_with_a_bound_and_left_alone() {
    let f = Fixture::new();
    std::fs::remove_file(f.intake_file()).expect("remove");
    std::os::unix::fs::symlink("/dev/zero", f.intake_file()).expect("link");
    let pipeline = pipelines::project_plan();
    task_files::project(&f.root, &pipeline, &f.task(), true).expect("project");
    let link = std::fs::symlink_metadata(f.intake_file()).expect("still there");
    assert!(link.file_type().is_symlink());
    assert_eq!(f.edits(1 << 20), NONE);
}
