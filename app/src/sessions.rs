//! Planning sessions: started, their plan versions saved (each version's
//! Markdown file written before the save is answered), looked up. The
//! questions asked in a session are [`crate::asks`].

use std::path::PathBuf;

use planb_core::{Command, EventBody, SessionId};
use planb_projections::files;

use crate::error::Error;
use crate::store::StoreHandle;

/// A session about to start.
#[derive(Debug, Default)]
pub struct NewSession {
    /// Its title.
    pub title: Option<String>,
    /// What it is for.
    pub intent: Option<String>,
    /// The project it plans.
    pub project_path: Option<String>,
}

/// A plan version saved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Saved {
    /// Its number (1, 2, …).
    pub version: u32,
    /// Its Markdown file.
    pub path: PathBuf,
}

/// The sessions of a store.
#[derive(Debug, Clone)]
pub struct Sessions {
    store: StoreHandle,
}

impl Sessions {
    /// The sessions of `store`.
    pub(crate) fn new(store: StoreHandle) -> Sessions {
        Sessions { store }
    }

    /// Starts a session: its id and the folder its files are kept in.
    pub async fn start(&self, new: NewSession) -> Result<(SessionId, PathBuf), Error> {
        let session = SessionId::from_uuid(self.store.env().random_id());
        let command = Command::CreateSession {
            session,
            title: new.title,
            intent: new.intent,
            project_path: new.project_path,
        };
        self.store.execute(command).await?;
        Ok((session, files::session_dir(self.store.root(), &session)))
    }

    /// Saves `content` as the session's next plan version; answered once
    /// the version's file is written (the manifests follow).
    pub async fn save_plan(
        &self,
        session: SessionId,
        title: Option<String>,
        content: String,
    ) -> Result<Saved, Error> {
        let save = Command::SavePlan {
            session,
            title,
            content,
        };
        let events = self.store.execute(save).await?;
        match events.as_slice() {
            [EventBody::PlanVersionSaved { version, .. }] => Ok(Saved {
                version: *version,
                path: files::plan_file(self.store.root(), &session, *version),
            }),
            other => Err(Error::internal(format!(
                "the save recorded unexpected events: {other:?}"
            ))),
        }
    }

    /// Whether the session exists.
    pub async fn exists(&self, session: SessionId) -> Result<bool, Error> {
        self.store
            .read(move |s| s.session(&session).is_some())
            .await
            .map_err(Error::from)
    }
}
