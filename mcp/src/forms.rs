//! The forms this process has opened, by their secret `sid`.
//!
//! A form is registered when `ask_user` opens it and stays known after the tool
//! returns (timeout, cancel), so an answer submitted late is still recorded. The
//! registry is bounded: past the limit, the oldest forms nobody waits for are
//! forgotten (their asks stay in the log).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use planb_core::{Answers, AskId, AskSpec};
use tokio::sync::oneshot;

/// Most forms remembered per process.
const FORMS_MAX: usize = 1024;

/// What the callback server needs to know about one form.
#[derive(Debug, Clone)]
pub struct FormInfo {
    /// The ask in the log.
    pub ask: AskId,
    /// Its questions.
    pub spec: Arc<AskSpec>,
    /// An answer was accepted (in time or late): the form is one-shot.
    pub finished: bool,
}

#[derive(Debug)]
struct Form {
    info: FormInfo,
    /// Present while `ask_user` waits; the answer goes through it.
    waiter: Option<oneshot::Sender<Answers>>,
}

#[derive(Debug, Default)]
struct Inner {
    forms: HashMap<String, Form>,
    /// Registration order, for eviction.
    order: VecDeque<String>,
}

/// The registry; shared by the MCP tools and the callback server.
#[derive(Debug, Default)]
pub struct Forms {
    inner: Mutex<Inner>,
}

/// Too many forms are waiting at once.
#[derive(Debug, thiserror::Error)]
#[error(
    "{FORMS_MAX} forms are already waiting for answers in this server; answer or close some first"
)]
pub struct TooManyForms;

impl Forms {
    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a form that `ask_user` waits on through `waiter`.
    pub fn register(
        &self,
        sid: String,
        ask: AskId,
        spec: Arc<AskSpec>,
        waiter: oneshot::Sender<Answers>,
    ) -> Result<(), TooManyForms> {
        let mut inner = self.inner();
        if inner.forms.len() >= FORMS_MAX {
            let evict = inner
                .order
                .iter()
                .position(|sid| inner.forms.get(sid).is_none_or(|f| f.waiter.is_none()));
            let Some(position) = evict else {
                return Err(TooManyForms);
            };
            if let Some(old) = inner.order.remove(position) {
                inner.forms.remove(&old);
            }
        }
        inner.order.push_back(sid.clone());
        inner.forms.insert(
            sid,
            Form {
                info: FormInfo {
                    ask,
                    spec,
                    finished: false,
                },
                waiter: Some(waiter),
            },
        );
        Ok(())
    }

    /// The form behind `sid`, if this process knows it.
    pub fn get(&self, sid: &str) -> Option<FormInfo> {
        self.inner().forms.get(sid).map(|f| f.info.clone())
    }

    /// Marks the form answered and hands back the waiting tool's channel, if any.
    pub fn finish(&self, sid: &str) -> Option<oneshot::Sender<Answers>> {
        let mut inner = self.inner();
        let form = inner.forms.get_mut(sid)?;
        form.info.finished = true;
        form.waiter.take()
    }

    /// The tool stopped waiting; the form stays known for late answers.
    pub fn detach(&self, sid: &str) {
        if let Some(form) = self.inner().forms.get_mut(sid) {
            form.waiter = None;
        }
    }
}
