//! Asks (`ask_user` rounds) as the front doors record and find them: an
//! ask opened, ended without an answer (the answer wins a race), found by
//! its id or by its form's sid; and the wait for its answer, whichever
//! process records it ([`AnswerWatch`]: one task reads the state once a
//! second for all the asks this process waits on).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use planb_core::{
    Answers, AskId, AskSpec, AskStatus, Command, DeclineAction, Delivery, EventBody, Rejection,
    SessionId,
};
use planb_projections::StoreError;

use crate::error::{Error, ErrorCode};
use tokio::sync::oneshot;

use crate::store::StoreHandle;

/// How often a waiting tool looks in the log for an answer recorded by
/// another process.
const LOG_POLL: Duration = Duration::from_secs(1);

/// The answer the log holds for `ask`: the one returned in time, or the
/// first given after the wait ended.
pub fn recorded_answer(ask: &planb_core::Ask) -> Option<Answers> {
    match ask.status {
        AskStatus::Answered => ask.answers.clone(),
        _ => ask.late_answers.first().map(|(_, answers)| answers.clone()),
    }
}

/// A form about to be put in front of the person.
#[derive(Debug)]
pub struct NewAsk {
    /// The session it belongs to.
    pub session: SessionId,
    /// The questions.
    pub spec: AskSpec,
    /// How the form reaches the person.
    pub delivery: Delivery,
    /// The form's address, without its secret.
    pub url: String,
    /// The form's secret (the log keeps its SHA-256).
    pub sid: String,
}

/// How an ask ended without an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// Nobody answered in time (the form stays open).
    TimedOut,
    /// The person dismissed the form.
    Declined(DeclineAction),
    /// It could not go on (the detail says why).
    Failed(String),
}

/// An ask as the log holds it, for a call that collects its answer.
#[derive(Debug, Clone)]
pub struct Found {
    /// Its session.
    pub session: SessionId,
    /// Its questions.
    pub spec: AskSpec,
    /// Whether it has a form to serve (an imported ask has none).
    pub has_form: bool,
    /// Its answer, if one is recorded ([`recorded_answer`]).
    pub answer: Option<Answers>,
    /// Its form's address.
    pub url: String,
}

/// The asks of a store.
#[derive(Debug, Clone)]
pub struct Asks {
    store: StoreHandle,
}

impl Asks {
    /// The asks of `store`.
    pub(crate) fn new(store: StoreHandle) -> Asks {
        Asks { store }
    }

    /// Records `ask` as opened, under a new id.
    pub async fn open(&self, ask: NewAsk) -> Result<AskId, Error> {
        let id = AskId::from_uuid(self.store.env().random_id());
        let command = Command::OpenAsk {
            session: ask.session,
            ask: id,
            spec: ask.spec,
            delivery: ask.delivery,
            url: ask.url,
            sid: ask.sid,
        };
        self.store.execute(command).await?;
        Ok(id)
    }

    /// Records how `ask` ended without an answer; if the person's answer
    /// won the race, that answer instead (`None` if it cannot be read).
    pub async fn end(&self, ask: AskId, ending: Ending) -> Result<(), Option<Answers>> {
        let command = match ending {
            Ending::TimedOut => Command::TimeOut { ask },
            Ending::Declined(action) => Command::Decline { ask, action },
            Ending::Failed(detail) => Command::Fail { ask, detail },
        };
        match self.store.execute(command).await {
            Ok(_) => Ok(()),
            Err(StoreError::Rejected(_)) => {
                // The person submitted at the same moment: the answer is recorded.
                let answers = self
                    .store
                    .read(move |s| s.ask(&ask).and_then(|a| a.answers.clone()))
                    .await;
                Err(answers.ok().flatten())
            }
            Err(error) => {
                tracing::error!("recording the end of ask {ask} failed: {error}");
                Ok(())
            }
        }
    }

    /// Records `answers` as the ask's draft, autosaved while the person
    /// fills the form in.
    pub async fn save_draft(&self, ask: AskId, answers: Answers) -> Result<(), Error> {
        let command = Command::SaveDraft { ask, answers };
        self.store
            .execute(command)
            .await
            .map(drop)
            .map_err(Error::from)
    }

    /// Records the person's `answers`: whether they came while the tool
    /// waited (`true`) or after it stopped waiting, as a late answer. An
    /// ask answered already is `CONFLICT` with `already_answered` in its
    /// details.
    pub async fn submit(&self, ask: AskId, answers: Answers) -> Result<bool, Error> {
        let command = Command::SubmitAnswers { ask, answers };
        match self.store.execute(command).await {
            Ok(events) => Ok(matches!(events.as_slice(), [EventBody::AskAnswered { .. }])),
            Err(StoreError::Rejected(rejection @ Rejection::AlreadyAnswered { .. })) => {
                Err(Error::with(
                    ErrorCode::Conflict,
                    rejection.to_string(),
                    serde_json::json!({"already_answered": true}),
                ))
            }
            Err(error) => Err(error.into()),
        }
    }

    /// The ask `ask`, if the log holds it.
    pub async fn find(&self, ask: AskId) -> Result<Option<Found>, Error> {
        self.store
            .read(move |s| {
                s.ask(&ask).map(|a| Found {
                    session: a.session,
                    spec: a.spec.clone(),
                    has_form: a.has_form(),
                    answer: recorded_answer(a),
                    url: a.url.clone(),
                })
            })
            .await
            .map_err(Error::from)
    }

    /// The ask whose form has the secret `sid` and would still record an
    /// answer (waiting, or closed without one: its server may have
    /// exited).
    pub async fn answerable(&self, sid: &str) -> Option<(AskId, AskSpec)> {
        let sid = sid.to_owned();
        let found = self.store.read(move |state| {
            let mut asks = state.asks().values();
            let ask = asks.find(|ask| ask.accepts_answer() && ask.has_sid(&sid))?;
            Some((ask.id, ask.spec.clone()))
        });
        found.await.ok().flatten()
    }

    /// How many forms in the log would still record an answer.
    pub async fn answerable_forms(&self) -> usize {
        let counted = self.store.read(|s| {
            let asks = s.asks().values();
            asks.filter(|a| a.has_form() && a.accepts_answer()).count()
        });
        counted.await.unwrap_or(0)
    }
}

/// Answers recorded by other processes, for the asks this process waits
/// on: one task reads the state once every [`LOG_POLL`] for all of them
/// (rather than one read per waiting ask), and stops when none is left.
#[derive(Debug, Default)]
pub struct AnswerWatch {
    waiting: Mutex<HashMap<AskId, Vec<oneshot::Sender<Answers>>>>,
    /// Whether the watching task runs.
    running: AtomicBool,
}

impl AnswerWatch {
    fn waiting(&self) -> MutexGuard<'_, HashMap<AskId, Vec<oneshot::Sender<Answers>>>> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Resolves once the log holds an answer to `ask` (recorded by any
    /// process). Dropping the future stops the wait.
    pub async fn answered(self: &Arc<Self>, store: &StoreHandle, ask: AskId) -> Answers {
        let (sender, answered) = oneshot::channel();
        self.waiting().entry(ask).or_default().push(sender);
        if !self.running.swap(true, Ordering::SeqCst) {
            tokio::spawn(Arc::clone(self).watch(store.clone()));
        }
        match answered.await {
            Ok(answers) => answers,
            // The watcher never drops a sender it has not answered.
            Err(_) => std::future::pending().await,
        }
    }

    /// Whether the watching task runs (it stops when nobody waits).
    pub fn is_watching(&self) -> bool {
        self.running.load(Ordering::SeqCst)
    }

    async fn watch(self: Arc<Self>, store: StoreHandle) {
        let mut ticker = tokio::time::interval(LOG_POLL);
        loop {
            ticker.tick().await;
            let asks: Vec<AskId> = {
                let mut waiting = self.waiting();
                // Waits that ended dropped their receivers.
                waiting.retain(|_, senders| {
                    senders.retain(|s| !s.is_closed());
                    !senders.is_empty()
                });
                waiting.keys().copied().collect()
            };
            if asks.is_empty() {
                self.running.store(false, Ordering::SeqCst);
                // A wait that registered meanwhile started a watcher of its
                // own, or finds this one going on.
                if self.waiting().is_empty() || self.running.swap(true, Ordering::SeqCst) {
                    return;
                }
                continue;
            }
            let found = store
                .read(move |state| {
                    asks.iter()
                        .filter_map(|ask| Some((*ask, recorded_answer(state.ask(ask)?)?)))
                        .collect::<Vec<_>>()
                })
                .await
                .unwrap_or_default();
            let mut waiting = self.waiting();
            for (ask, answers) in found {
                for sender in waiting.remove(&ask).unwrap_or_default() {
                    let _ = sender.send(answers.clone());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use planb_core::{AskId, Command, Delivery, SessionId};
    use planb_projections::Store;
    use planb_tests::fixtures::{new_uuid, storage_spec, store_with_session};

    use super::AnswerWatch;
    use crate::store::StoreHandle;

    fn open_ask(store: &Store, session: SessionId) -> AskId {
        let ask = AskId::from_uuid(new_uuid());
        let spec = storage_spec();
        store
            .execute(Command::OpenAsk {
                session,
                ask,
                spec,
                delivery: Delivery::BrowserNotOpened,
                url: "http://127.0.0.1:9/ask".into(),
                sid: format!("sid-{ask}"),
            })
            .expect("open ask");
        ask
    }

    /// One watcher serves every waiting ask, hands each its own answer, and
    /// stops once nobody waits.
    #[tokio::test]
    async fn one_watcher_hands_each_waiting_ask_its_answer_and_stops_when_idle() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, session) = store_with_session(dir.path());
        let (first, second) = (open_ask(&store, session), open_ask(&store, session));
        let handle = StoreHandle::ready(Arc::clone(&store));
        let watch = Arc::new(AnswerWatch::default());
        let waits: Vec<_> = [first, first, second]
            .into_iter()
            .map(|ask| {
                let (watch, handle) = (Arc::clone(&watch), handle.clone());
                tokio::spawn(async move { watch.answered(&handle, ask).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(watch.is_watching());
        let spec = store
            .read(move |s| s.ask(&first).map(|a| a.spec.clone()))
            .expect("read")
            .expect("ask");
        let answers = spec
            .validate_answers(&serde_json::json!({"db": "SQLite"}))
            .expect("valid");
        store
            .execute(Command::SubmitAnswers {
                ask: first,
                answers: answers.clone(),
            })
            .expect("answer");
        let mut waits = waits.into_iter();
        for wait in waits.by_ref().take(2) {
            let got = tokio::time::timeout(Duration::from_secs(10), wait)
                .await
                .expect("answered in time")
                .expect("task");
            assert_eq!(got, answers);
        }
        let unanswered = waits.next().expect("the second ask's wait");
        assert!(!unanswered.is_finished());
        unanswered.abort();
        for _ in 0..100 {
            if !watch.is_watching() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the watcher kept running with nobody waiting");
    }
}
