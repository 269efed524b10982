//! Logs written straight through `planb_log`, as a server would append
//! them but without a store: for tests that need many real events fast;
//! and a data root's log read back, record by record or event by event.

use std::path::Path;

use planb_core::{Event, EventBody, EventId, SessionId, Timestamp, encode};

/// Appends `bodies` to `log` in one append (one sync), each a fresh event;
/// how many.
pub fn append(log: &planb_log::Log, bodies: Vec<EventBody>) -> u64 {
    let payloads: Vec<Vec<u8>> = bodies
        .into_iter()
        .map(|body| {
            let event = Event {
                id: EventId::from_uuid(uuid::Uuid::now_v7()),
                at: Timestamp(1_790_000_000_000),
                body,
            };
            encode(&event).expect("encode")
        })
        .collect();
    let refs: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
    log.append(&refs).expect("append");
    payloads.len() as u64
}

/// Appends `sessions` sessions of `project` to the log of the data root
/// `root`, each created then saved five times (six events, one append each
/// session); `seed` tells their titles apart. How many events.
pub fn append_sessions(root: &Path, sessions: u32, project: &str, seed: u32) -> u64 {
    let (log, _) = planb_log::open_dir(&root.join("log"), Default::default()).expect("open log");
    let mut appended = 0;
    for n in 0..sessions {
        let session = SessionId::from_uuid(uuid::Uuid::now_v7());
        let mut bodies = vec![EventBody::SessionCreated {
            session,
            title: Some(format!("session {seed}-{n}")),
            intent: None,
            project_path: Some(project.to_string()),
        }];
        bodies.extend((1..=5).map(|version| EventBody::PlanVersionSaved {
            session,
            version,
            title: None,
            content: format!(
                "# Plan {seed}-{n} v{version}\n\n{}",
                "- a step\n".repeat(40)
            ),
        }));
        appended += append(&log, bodies);
    }
    appended
}

/// Every record the log of the data root `root` holds, in order: its
/// cursor (as the team database keeps it) and its payload (read only:
/// nothing is recovered or written).
pub fn records(root: &Path) -> Vec<(i64, Vec<u8>)> {
    let mut reader =
        planb_log::read_dir(&root.join("log"), Default::default(), planb_log::Cursor(1))
            .expect("the log");
    let mut records = Vec::new();
    while let Some(record) = reader.next().expect("a record") {
        let cursor = i64::try_from(record.cursor.0).expect("a cursor within i64");
        records.push((cursor, record.payload));
    }
    records
}

/// Every event the log of the data root `root` holds, in order (read only:
/// nothing is recovered or written).
pub fn events(root: &Path) -> Vec<EventBody> {
    let mut reader =
        planb_log::read_dir(&root.join("log"), Default::default(), planb_log::Cursor(1))
            .expect("the log");
    let mut events = Vec::new();
    while let Some(record) = reader.next().expect("a record") {
        let envelope = planb_core::decode(&record.payload, planb_core::Cursor(record.cursor.0))
            .expect("an event");
        events.push(envelope.event.body);
    }
    events
}

/// The steps each run started, run by run in the order the runs started,
/// from the log of the data root `root`.
pub fn started_by_run(root: &Path) -> Vec<Vec<String>> {
    let mut runs: Vec<(planb_core::RunId, Vec<String>)> = Vec::new();
    for event in events(root) {
        match event {
            EventBody::RunStarted { run, .. } => runs.push((run, Vec::new())),
            EventBody::StepStarted { run, step, .. } => {
                if let Some((_, steps)) = runs.iter_mut().find(|(r, _)| *r == run) {
                    steps.push(step);
                }
            }
            _ => {}
        }
    }
    runs.into_iter().map(|(_, steps)| steps).collect()
}
