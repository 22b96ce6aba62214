//! [`Deadline`]: a hard deadline on a request's store work.
//!
//! Bound: no request waits longer than the timeout at the store step. The
//! deadline is handed to the store, which gives up on each node at that
//! instant, so a slow node fails only its own items; and the whole call is
//! cut at the same instant, so a store that ignored the deadline could not
//! hold a request either. A timeout is a failure of the items it cut, not a
//! reason to wait.

use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::store::{Reply, Store, StoreError, StoreErrorKind, Work, DEADLINE_EXCEEDED};

/// A store whose every call ends within `timeout`.
#[derive(Debug)]
pub struct Deadline<S> {
    inner: S,
    timeout: Duration,
}

impl<S: Store> Deadline<S> {
    /// `inner`, cut after `timeout`.
    pub fn new(inner: S, timeout: Duration) -> Deadline<S> {
        Deadline { inner, timeout }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

#[async_trait]
impl<S: Store> Store for Deadline<S> {
    async fn execute(&self, work: &Work, deadline: Option<Instant>) -> Reply {
        let own = Instant::now() + self.timeout;
        let at = deadline.map_or(own, |d| d.min(own));
        // The inner call is polled first, so when the store's per-node
        // timeouts and this one fire together, its per-item answers win.
        match tokio::time::timeout_at(at, self.inner.execute(work, Some(at))).await {
            Ok(reply) => reply,
            Err(_) => Reply::failed(
                work.len(),
                &StoreError::new(StoreErrorKind::Timeout, DEADLINE_EXCEEDED),
            ),
        }
    }
}
