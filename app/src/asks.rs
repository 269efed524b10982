//! Waiting for the answer to an ask, whichever process records it: one
//! task reads the state once a second for all the asks this process waits
//! on and hands each answer to its waiters.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use planb_core::{Answers, AskId, AskStatus};
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
