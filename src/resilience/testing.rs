//! A store for the layers' own tests: it counts the calls that reach it
//! and, as told, answers (from a memory store), fails, rejects, or hangs
//! until it is cut. Each layer's rule is tested on it, as tower-test's mock serves
//! tower's layers.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::limiter::fixed_window::Window;
use crate::limiter::ManualClock;
use crate::store::{
    Done, Item, Job, Limit, MemoryStore, NodeId, OriginalWindow, Store, StoreError, StoreErrorKind,
    Work,
};

/// What the store does with the next calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Behaviour {
    /// Decides them in memory.
    Answer = 0,
    /// Fails every item as unavailable (a refused connection).
    Refuse = 1,
    /// Never answers: the caller's deadline, or its going away, ends it.
    Hang = 2,
    /// Answers every item with an error of its own (a Redis error reply):
    /// reachable, so no layer's failure.
    Reject = 3,
}

/// The scripted store; clones share the state.
#[derive(Debug, Clone)]
pub(crate) struct Scripted {
    memory: Arc<MemoryStore>,
    behaviour: Arc<AtomicU8>,
    calls: Arc<AtomicU64>,
}

impl Scripted {
    pub(crate) fn new() -> Scripted {
        Scripted::on(Arc::new(MemoryStore::new(Arc::new(ManualClock::at_secs(
            1_000_000,
        )))))
    }

    /// A scripted store that answers from `memory` (which other stores or
    /// clones may share, as instances share one Redis).
    pub(crate) fn on(memory: Arc<MemoryStore>) -> Scripted {
        Scripted {
            memory,
            behaviour: Arc::new(AtomicU8::new(Behaviour::Answer as u8)),
            calls: Arc::new(AtomicU64::new(0)),
        }
    }

    pub(crate) fn set(&self, b: Behaviour) {
        self.behaviour.store(b as u8, Ordering::SeqCst);
    }

    /// Calls that reached the store.
    pub(crate) fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl Store for Scripted {
    /// Every kind of job alike.
    async fn call(&self, job: Job<'_>, deadline: Option<Instant>) -> Done {
        self.calls.fetch_add(1, Ordering::SeqCst);
        // A round trip: other callers run meanwhile.
        tokio::task::yield_now().await;
        match self.behaviour.load(Ordering::SeqCst) {
            0 => self.memory.call(job, deadline).await,
            1 => job.failed(&StoreError::new(
                StoreErrorKind::Unavailable,
                "connection refused",
            )),
            3 => job.failed(&StoreError::new(
                StoreErrorKind::Rejected,
                "ERR the script failed",
            )),
            _ => std::future::pending().await,
        }
    }
}

/// A board work of one report on `node`.
pub(crate) fn board_work_on(node: &str) -> crate::store::board::BoardWork {
    use crate::store::board::{BoardOp, BoardStep, BoardWork};
    BoardWork {
        instance: "i".into(),
        ttl: std::time::Duration::from_secs(1),
        steps: vec![BoardStep {
            key: "b".into(),
            node: Some(NodeId::new(node)),
            rate: 10.0,
            op: BoardOp::Report {
                line: 1,
                demand: 1.0,
            },
        }],
    }
}

/// A work of one original window of `limit` a minute on `node`.
pub(crate) fn work_on(node: &str, limit: u64) -> Work {
    let window = OriginalWindow {
        limit,
        window: Window::containing(1_000_000, 60),
        ttl_seconds: 60,
        jitter_seconds: 0,
    };
    let mut item = Item::new("k", Limit::Window(window), 1);
    item.node = Some(NodeId::new(node));
    Work::new(vec![item], crate::store::Policy::Commit)
}
