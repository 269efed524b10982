//! The pages this process has opened (question forms and plan reviews), by
//! their secret id.
//!
//! A page is registered when its tool opens it and stays known after the tool
//! returns (timeout, cancel, "still open"), so an answer submitted late is
//! still recorded, and a later call can wait on the same page
//! ([`Registry::rewait`]) instead of opening another. The
//! registry is bounded: past the limit, the oldest pages nobody waits for are
//! forgotten (their asks and rounds stay in the log).

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

use tokio::sync::oneshot;

/// Most pages remembered per process, per kind.
const PAGES_MAX: usize = 1024;

#[derive(Debug)]
struct Page<I, A> {
    info: I,
    /// An answer was accepted (in time or late): pages are one-shot.
    finished: bool,
    /// Present while the tool waits; the answer goes through it.
    waiter: Option<oneshot::Sender<A>>,
    /// An answer that came while no tool waited (after a "still open"
    /// result), until a later call claims it.
    unclaimed: Option<A>,
}

#[derive(Debug)]
struct Inner<I, A> {
    pages: HashMap<String, Page<I, A>>,
    /// Registration order, for eviction.
    order: VecDeque<String>,
}

/// Open pages of one kind: `I` is what the HTTP side needs to know, `A` what
/// flows back to the waiting tool.
#[derive(Debug)]
pub struct Registry<I, A> {
    inner: Mutex<Inner<I, A>>,
}

impl<I, A> Default for Registry<I, A> {
    fn default() -> Self {
        Registry {
            inner: Mutex::new(Inner {
                pages: HashMap::new(),
                order: VecDeque::new(),
            }),
        }
    }
}

/// Too many pages are waiting at once.
#[derive(Debug, thiserror::Error)]
#[error(
    "{PAGES_MAX} pages are already waiting for a person in this server; answer or close some first"
)]
pub struct TooManyPages;

impl<I: Clone, A> Registry<I, A> {
    fn inner(&self) -> MutexGuard<'_, Inner<I, A>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a page whose tool waits through `waiter`.
    pub fn register(
        &self,
        id: String,
        info: I,
        waiter: oneshot::Sender<A>,
    ) -> Result<(), TooManyPages> {
        let mut inner = self.inner();
        // A page known already (adopted from the log, or detached after a
        // timeout) gets the new waiter.
        if let Some(page) = inner.pages.get_mut(&id) {
            page.info = info;
            page.waiter = Some(waiter);
            return Ok(());
        }
        if inner.pages.len() >= PAGES_MAX {
            let evict = inner
                .order
                .iter()
                .position(|id| inner.pages.get(id).is_none_or(|p| p.waiter.is_none()));
            let Some(position) = evict else {
                return Err(TooManyPages);
            };
            if let Some(old) = inner.order.remove(position) {
                inner.pages.remove(&old);
            }
        }
        inner.order.push_back(id.clone());
        inner.pages.insert(
            id,
            Page {
                info,
                finished: false,
                waiter: Some(waiter),
                unclaimed: None,
            },
        );
        Ok(())
    }

    /// Serves a page another process opened (its ask is in the log), with
    /// nobody waiting in this process. Past the limit it is simply not kept.
    pub fn adopt(&self, id: String, info: I) {
        let (sender, _) = oneshot::channel();
        if self.register(id.clone(), info, sender).is_ok() {
            self.detach(&id);
        }
    }

    /// The page behind `id` and whether it was already answered.
    pub fn get(&self, id: &str) -> Option<(I, bool)> {
        self.inner()
            .pages
            .get(id)
            .map(|p| (p.info.clone(), p.finished))
    }

    /// Marks the page answered and hands `answer` to the waiting tool; with
    /// none waiting (or one that just stopped), keeps it for [`Self::claim`].
    pub fn finish(&self, id: &str, answer: A) {
        let mut inner = self.inner();
        let Some(page) = inner.pages.get_mut(id) else {
            return;
        };
        page.finished = true;
        let unsent = match page.waiter.take() {
            Some(waiter) => waiter.send(answer).err(),
            None => Some(answer),
        };
        page.unclaimed = unsent;
    }

    /// Marks the page answered by someone else: nothing to hand over.
    pub fn close(&self, id: &str) {
        if let Some(page) = self.inner().pages.get_mut(id) {
            page.finished = true;
            page.waiter = None;
        }
    }

    /// Whether this process knows a page matching `matches` (answered or not).
    pub fn knows(&self, matches: impl Fn(&I) -> bool) -> bool {
        self.inner().pages.values().any(|page| matches(&page.info))
    }

    /// Takes the answer that came, for a page matching `matches`, while no
    /// tool waited on it.
    pub fn claim(&self, matches: impl Fn(&I) -> bool) -> Option<A> {
        self.inner()
            .pages
            .values_mut()
            .filter(|page| matches(&page.info))
            .find_map(|page| page.unclaimed.take())
    }

    /// Waits on a page already in front of the person: the first one
    /// matching `matches` that is unanswered and that no tool waits on gets
    /// a new waiter. Returns its id, its info and the waiter's end.
    pub fn rewait(
        &self,
        matches: impl Fn(&I) -> bool,
    ) -> Option<(String, I, oneshot::Receiver<A>)> {
        let mut inner = self.inner();
        let (id, page) = inner
            .pages
            .iter_mut()
            .find(|(_, page)| !page.finished && page.waiter.is_none() && matches(&page.info))?;
        let (sender, receiver) = oneshot::channel();
        page.waiter = Some(sender);
        Some((id.clone(), page.info.clone(), receiver))
    }

    /// The tool stopped waiting; the page stays known for late answers.
    pub fn detach(&self, id: &str) {
        if let Some(page) = self.inner().pages.get_mut(id) {
            page.waiter = None;
        }
    }
}

/// A question form: what the callback server needs to know.
#[derive(Debug, Clone)]
pub struct FormInfo {
    /// The ask in the log.
    pub ask: planb_core::AskId,
    /// Its questions.
    pub spec: std::sync::Arc<planb_core::AskSpec>,
}

/// Open question forms by sid.
pub type Forms = Registry<FormInfo, planb_core::Answers>;

/// A plan review page: what the callback server needs to know.
#[derive(Debug, Clone)]
pub struct ReviewInfo {
    /// The plan.
    pub plan: planb_core::PlanKey,
    /// The round under review.
    pub round: u32,
    /// The content submitted.
    pub content: std::sync::Arc<str>,
    /// The previous round's content, for the diff.
    pub previous: Option<std::sync::Arc<str>>,
    /// The plan file, shown on the page.
    pub path: std::sync::Arc<str>,
}

pub use planb_app::named::ReviewOutcome;

/// Open review pages by rid.
pub type Reviews = Registry<ReviewInfo, ReviewOutcome>;

#[cfg(test)]
mod tests {
    use super::*;

    /// A page answered while nobody waited is not waited on again: its
    /// answer is claimed, once (what `submit_plan` relies on when a verdict
    /// comes between its look at the log and its wait).
    #[test]
    fn an_answer_that_came_with_nobody_waiting_is_claimed_not_waited_for() {
        let pages: Registry<u32, &'static str> = Registry::default();
        let (waiter, _gone) = oneshot::channel();
        pages.register("r1".into(), 1, waiter).expect("register");
        pages.detach("r1");
        pages.finish("r1", "approved");
        assert!(pages.knows(|round| *round == 1));
        assert!(pages.rewait(|round| *round == 1).is_none());
        assert_eq!(pages.claim(|round| *round == 1), Some("approved"));
        assert_eq!(pages.claim(|round| *round == 1), None);
    }

    /// A page still open gets a new waiter, who receives the answer.
    #[test]
    fn an_open_page_is_waited_on_again_and_the_answer_reaches_the_new_waiter() {
        let pages: Registry<u32, &'static str> = Registry::default();
        let (waiter, _gone) = oneshot::channel();
        pages.register("r1".into(), 1, waiter).expect("register");
        pages.detach("r1");
        let (id, round, mut answered) = pages.rewait(|round| *round == 1).expect("open");
        assert_eq!((id.as_str(), round), ("r1", 1));
        pages.finish("r1", "changes");
        assert_eq!(answered.try_recv(), Ok("changes"));
        assert_eq!(pages.claim(|round| *round == 1), None);
    }
}
