//! The pages this process has opened (question forms and plan reviews), by
//! their secret id.
//!
//! A page is registered when its tool opens it and stays known after the tool
//! returns (timeout, cancel), so an answer submitted late is still recorded. The
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

    /// Marks the page answered and hands back the waiting tool's channel, if any.
    pub fn finish(&self, id: &str) -> Option<oneshot::Sender<A>> {
        let mut inner = self.inner();
        let page = inner.pages.get_mut(id)?;
        page.finished = true;
        page.waiter.take()
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

/// What a reviewer decided.
#[derive(Debug, Clone)]
pub struct ReviewOutcome {
    /// Approve or request changes.
    pub verdict: planb_core::Verdict,
    /// General feedback.
    pub feedback: Option<String>,
    /// Comments on quoted passages.
    pub comments: Vec<planb_core::ReviewComment>,
}

/// Open review pages by rid.
pub type Reviews = Registry<ReviewInfo, ReviewOutcome>;
