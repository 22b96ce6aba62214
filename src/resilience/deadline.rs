//! [`Deadline`]: a hard deadline on a request's store work.
//!
//! A call's store step ends at the earlier of two instants: `STORE_TIMEOUT`
//! after it starts, and the caller's own deadline. A gRPC caller sends its
//! deadline as `grpc-timeout` (Envoy sends its filter's `timeout`, 20 ms by
//! default); the service keeps [`caller_margin`] of it back for the answer
//! to travel, so the caller hears the rule's policy instead of giving up
//! and applying its own (`failure_mode_deny`).
//!
//! Bound: no request waits longer than that instant at the store step. The
//! deadline is handed to the store, which gives up on each node at that
//! instant, so a slow node fails only its own items; and the whole call is
//! cut at the same instant, so a store that ignored the deadline could not
//! hold a request either. A timeout is a failure of the items it cut, not a
//! reason to wait. A call that arrives with less than [`MIN_STORE_TIME`]
//! left is not sent at all: its items fail at once as
//! [`StoreErrorKind::Expired`], which is no node's failure.

use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::store::{Done, Job, Store, StoreError, StoreErrorKind, DEADLINE_EXCEEDED};

/// The least time worth asking the store in: a call whose deadline leaves
/// less is answered by its rules' policies without being sent.
pub const MIN_STORE_TIME: Duration = Duration::from_millis(1);

/// What is kept back from a caller's timeout for the answer to reach it:
/// half the timeout, at least 2 ms and at most 10 ms (10 ms of Envoy's
/// default 20 ms, which leaves the store 10 ms, several times a loaded
/// Redis's p99). It covers the timer (a deadline fires up to 1.5 ms late),
/// the answer's way back and the caller's own handling of it. Measured
/// behind Envoy 1.40 on two shared cores with Redis paused: the release
/// build answered 0.4–1.4 ms after its store deadline, Envoy had the answer
/// 1.5–2 ms after that, a debug build about 2 ms later still; with a 6 ms
/// margin 1 answer in 20 of a debug build, and 7 in 28,800 of a release
/// build under load, still reached Envoy after its 20 ms.
pub fn caller_margin(timeout: Duration) -> Duration {
    (timeout / 2).clamp(Duration::from_millis(2), Duration::from_millis(10))
}

/// When the store step of a call received at `received` with a timeout of
/// `timeout` (its `grpc-timeout`) must end: the timeout less
/// [`caller_margin`].
pub fn caller_deadline(received: Instant, timeout: Duration) -> Instant {
    received + timeout.saturating_sub(caller_margin(timeout))
}

/// A store whose every call ends within `timeout`, or by the caller's
/// deadline when that comes first.
#[derive(Debug)]
pub struct Deadline<S> {
    inner: S,
    timeout: Duration,
}

impl<S: Store> Deadline<S> {
    /// The instant a call that arrives now with the caller's `deadline`
    /// must end: the earlier of the two; `None` when that leaves less than
    /// [`MIN_STORE_TIME`] (the call is not sent).
    fn end(&self, deadline: Option<Instant>) -> Option<Instant> {
        let now = Instant::now();
        let own = now + self.timeout;
        match deadline {
            Some(caller) if caller < own => {
                (caller.saturating_duration_since(now) >= MIN_STORE_TIME).then_some(caller)
            }
            _ => Some(own),
        }
    }

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
    /// Every kind of job alike.
    async fn call(&self, job: Job<'_>, deadline: Option<Instant>) -> Done {
        let failed = |kind| job.failed(&StoreError::new(kind, DEADLINE_EXCEEDED));
        let Some(at) = self.end(deadline) else {
            return failed(StoreErrorKind::Expired);
        };
        // The inner call is polled first, so when the store's per-node
        // timeouts and this one fire together, its per-entry answers win.
        tokio::time::timeout_at(at, self.inner.call(job, Some(at)))
            .await
            .unwrap_or_else(|_| failed(StoreErrorKind::Timeout))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resilience::testing::{work_on, Behaviour, Scripted};
    use crate::store::StoreExt;

    const MS: Duration = Duration::from_millis(1);

    fn hanging(timeout: Duration) -> (Deadline<Scripted>, Scripted) {
        let store = Scripted::new();
        store.set(Behaviour::Hang);
        (Deadline::new(store.clone(), timeout), store)
    }

    #[test]
    fn the_margin_is_half_the_callers_timeout_within_2_to_10_ms() {
        assert_eq!(caller_margin(20 * MS), 10 * MS);
        assert_eq!(caller_margin(12 * MS), 6 * MS);
        assert_eq!(caller_margin(3 * MS), 2 * MS);
        assert_eq!(caller_margin(Duration::from_secs(1)), 10 * MS);
        let t0 = Instant::now();
        assert_eq!(caller_deadline(t0, 20 * MS), t0 + 10 * MS);
        assert_eq!(caller_deadline(t0, MS), t0, "never before it arrived");
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_ends_at_the_callers_deadline_when_it_comes_first() {
        let (deadline, store) = hanging(50 * MS);
        let t0 = Instant::now();
        let reply = deadline.execute(&work_on("n", 5), Some(t0 + 12 * MS)).await;
        assert_eq!(t0.elapsed(), 12 * MS);
        let e = reply.answers[0].as_ref().expect_err("cut");
        assert_eq!(
            (e.kind, e.message.as_str()),
            (StoreErrorKind::Timeout, DEADLINE_EXCEEDED)
        );
        assert_eq!(store.calls(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn the_store_timeout_holds_when_it_comes_first_or_alone() {
        let (deadline, _) = hanging(50 * MS);
        let t0 = Instant::now();
        deadline.execute(&work_on("n", 5), Some(t0 + 80 * MS)).await;
        assert_eq!(t0.elapsed(), 50 * MS);
        let t1 = Instant::now();
        deadline.execute(&work_on("n", 5), None).await;
        assert_eq!(t1.elapsed(), 50 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_with_too_little_time_left_is_failed_at_once_and_not_sent() {
        let (deadline, store) = hanging(50 * MS);
        let t0 = Instant::now();
        for left in [Duration::ZERO, MIN_STORE_TIME / 2] {
            let reply = deadline.execute(&work_on("n", 5), Some(t0 + left)).await;
            let e = reply.answers[0].as_ref().expect_err("not sent");
            assert_eq!(e.kind, StoreErrorKind::Expired);
        }
        // A deadline already past, too.
        tokio::time::advance(10 * MS).await;
        let reply = deadline.execute(&work_on("n", 5), Some(t0)).await;
        assert_eq!(
            reply.answers[0].as_ref().map_err(|e| e.kind),
            Err(StoreErrorKind::Expired)
        );
        assert_eq!(t0.elapsed(), 10 * MS, "no wait");
        assert_eq!(store.calls(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_hung_board_is_cut_at_the_store_timeout() {
        use crate::resilience::testing::board_work_on;
        let (deadline, _) = hanging(50 * MS);
        let t0 = Instant::now();
        let reply = deadline.share(&board_work_on("n"), None).await;
        assert_eq!(t0.elapsed(), 50 * MS);
        assert_eq!(
            reply[0].as_ref().map_err(|e| e.kind).err(),
            Some(StoreErrorKind::Timeout)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_answering_store_is_not_cut() {
        let store = Scripted::new();
        let deadline = Deadline::new(store, 50 * MS);
        let reply = deadline
            .execute(&work_on("n", 5), Some(Instant::now() + 5 * MS))
            .await;
        assert!(reply.answers[0].is_ok());
    }
}
