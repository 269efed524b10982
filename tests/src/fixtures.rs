//! Small pieces of state the unit tests of several crates start from.

use std::sync::Arc;

use planb_core::{AskSpec, Command, Question, QuestionKind, SessionId, Timestamp};
use planb_projections::{DataRoot, FixedEnvironment, Store};

/// A form of one required text question, `db`, titled "Storage".
pub fn storage_spec() -> AskSpec {
    one_question("Storage")
}

/// A form titled `title` of one required text question, `db`.
pub fn one_question(title: &str) -> AskSpec {
    AskSpec {
        title: title.into(),
        intro_title: None,
        intro: None,
        questions: vec![Question {
            id: "db".into(),
            label: "Which database?".into(),
            required: true,
            tab: None,
            kind: QuestionKind::Text { placeholder: None },
        }],
    }
}

/// A fresh id (time-ordered).
pub fn new_uuid() -> uuid::Uuid {
    uuid::Uuid::now_v7()
}

/// A store on a fresh data root in `dir`, with one session.
pub fn store_with_session(dir: &std::path::Path) -> (Arc<Store>, SessionId) {
    let env = Arc::new(FixedEnvironment::new(Timestamp(1_700_000_000_000), 1_000));
    let (store, _) = Store::open(DataRoot::new(dir), env).expect("open store");
    let session = SessionId::from_uuid(new_uuid());
    store
        .execute(Command::CreateSession {
            session,
            title: None,
            intent: None,
            project_path: None,
        })
        .expect("session");
    (Arc::new(store), session)
}
