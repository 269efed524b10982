//! A person saving a named plan's file while planb writes it: planb puts
//! its version in place only if the file still holds what it read, so the
//! person's save is never replaced; the next look records it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use planb_core::{Command, PlanKey, PlanName, Timestamp};
use planb_projections::{DataRoot, FixedEnvironment, Store};

fn open(root: &Path) -> Store {
    let env = Arc::new(FixedEnvironment::new(Timestamp(1_780_000_000_000), 1_000));
    Store::open(DataRoot::new(root), env).expect("open store").0
}

/// Saves `text` as an editor does: a file of its own, renamed into place.
fn save_by_hand(path: &Path, text: &str, n: usize) {
    let temp = path.with_file_name(format!("editor-{n}.swp"));
    std::fs::write(&temp, text).expect("write");
    std::fs::rename(&temp, path).expect("rename");
}

#[test]
fn a_save_by_hand_while_planb_writes_the_file_is_never_replaced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plans = dir.path().join("plans");
    std::fs::create_dir_all(&plans).expect("plans dir");
    let key = PlanKey::new(
        plans.display().to_string(),
        PlanName::parse("race").expect("name"),
    );
    let path: PathBuf = plans.join("race-plan.md");
    let store = Arc::new(open(&dir.path().join("root")));
    let write = |content: String| Command::WritePlan {
        plan: key.clone(),
        content,
        session: None,
    };
    store
        .execute_on_plan_file(&key, &path, Some(write("# v0\n".into())))
        .expect("first write");
    for round in 0..40 {
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (store, key, path, stop) = (
                Arc::clone(&store),
                key.clone(),
                path.clone(),
                Arc::clone(&stop),
            );
            std::thread::spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let content = format!("# planb {round}.{n}\n");
                    let command = Command::WritePlan {
                        plan: key.clone(),
                        content,
                        session: None,
                    };
                    store
                        .execute_on_plan_file(&key, &path, Some(command))
                        .expect("write");
                }
            })
        };
        // The person saves while planb writes; the last save is theirs.
        let last = format!("# the person's save {round}\n");
        for n in 0..20 {
            save_by_hand(&path, &format!("# draft {round}.{n}\n"), n);
        }
        save_by_hand(&path, &last, 99);
        stop.store(true, Ordering::Relaxed);
        writer.join().expect("writer");
        // A look records what the file holds that the plan does not.
        store.execute_on_plan_file(&key, &path, None).expect("look");
        let held = store
            .read(|state| {
                state
                    .named_plan(&key)
                    .is_some_and(|plan| plan.has_held(&last))
            })
            .expect("read");
        assert!(
            held,
            "round {round}: the person's last save was replaced before it was recorded; the file holds {:?}",
            std::fs::read_to_string(&path).unwrap_or_default()
        );
    }
}
