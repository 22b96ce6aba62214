//! [`Fallback`]: the failure policies. Every item the store could not answer
//! (a timeout, a refused or reset connection, an open breaker) is answered
//! by its rule's [`OnFailure`]:
//!
//! - `Closed`: denied, with the time until the store is tried again (the
//!   breaker's next probe) as the retry, at least 1 s;
//! - `Open { fallback }`: decided by an in-process limiter of the same
//!   algorithm and window with `fallback` per window (for a token bucket,
//!   rate and burst scaled alike). Bound: while the store is out, each
//!   instance admits at most `fallback` per window per key (a token bucket:
//!   its scaled burst plus its scaled rate), so a fleet of N admits at most
//!   N × `fallback`; pick the floor as the limit's share per instance. It
//!   starts empty when the outage starts: what the store had counted is not
//!   known here;
//! - `Error`: left failing, so the call fails as the original's does.
//!
//! A give-back (`is_negative_hits`) the store could not take is given to
//! an open rule's floor (so that a floor of in-flight slots gets its slots
//! back); under the other policies it is left failing, never denied: a
//! refund is never a refusal, and the engine reports it lost.
//!
//! Errors that are the store's answer (a Redis error reply) are not
//! failures of reachability and are never answered by policy.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::limiter::{Clock, Decision};
use crate::metrics;
use crate::store::memory::SweeperGuard;
use crate::store::{
    Answer, Done, Item, Job, Limit, MemoryStore, OnFailure, Policy, PolicyAnswer, Reply, Store,
    StoreError, StoreErrorKind, StoreExt, Work,
};

/// The shortest retry a fail-closed denial names.
pub const MIN_CLOSED_RETRY: Duration = Duration::from_secs(1);

/// A store whose unanswered items are answered by their failure policies.
#[derive(Debug)]
pub struct Fallback<S> {
    inner: S,
    /// The local floors of open rules, by the store's key.
    floor: Arc<MemoryStore>,
    _sweeper: SweeperGuard,
}

impl<S: Store> Fallback<S> {
    /// `inner` with floors timed by `clock`. Needs a tokio runtime.
    pub fn new(inner: S, clock: Arc<dyn Clock>) -> Fallback<S> {
        let floor = Arc::new(MemoryStore::new(clock));
        let sweeper = floor.spawn_sweeper(Duration::from_secs(1));
        Fallback {
            inner,
            floor,
            _sweeper: sweeper,
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

/// The floor of `item`: the same key, algorithm and window, with
/// `fallback` as the limit, deciding on its own. `None` if that limit
/// cannot be built (then the item is denied).
fn floor_of(item: &Item, fallback: u64) -> Option<Item> {
    let limit = match &item.limit {
        Limit::Counter(w) | Limit::Window(w) => Limit::Window(crate::store::OriginalWindow {
            limit: fallback,
            ..*w
        }),
        Limit::Algorithm(l) => Limit::Algorithm(l.scaled_to(fallback).ok()?),
        // An audit reference has no floor (and fails with `Error`).
        Limit::Reference { .. } => return None,
    };
    Some(Item {
        binding: false,
        hits: item.hits,
        ..Item::new(item.key.clone(), limit, item.cost())
    })
}

fn closed(error: &StoreError) -> Answer {
    let retry = error.retry_after.unwrap_or_default().max(MIN_CLOSED_RETRY);
    Answer::ByPolicy(PolicyAnswer {
        decision: Decision::Deny {
            retry_after: retry,
            reset_after: retry,
        },
        fell_back: false,
    })
}

/// Counts one request's failures by kind.
fn count_failures(reply: &Reply) {
    let kinds = reply.answers.iter().filter_map(|a| a.as_ref().err());
    let (mut failed, mut timed_out, mut open) = (false, false, false);
    for e in kinds {
        failed = true;
        timed_out |= e.kind == StoreErrorKind::Timeout;
        open |= e.kind == StoreErrorKind::CircuitOpen;
    }
    for (hit, name) in [
        (failed, metrics::STORE_FAILURE),
        (timed_out, metrics::STORE_TIMEOUT),
        (open, metrics::STORE_CIRCUIT_OPEN),
    ] {
        if hit {
            ::metrics::counter!(name).increment(1);
        }
    }
}

#[async_trait]
impl<S: Store> Store for Fallback<S> {
    /// A request's limits; every other kind of job is passed through (RLQS
    /// answers a failed board step itself).
    async fn call(&self, job: Job<'_>, deadline: Option<Instant>) -> Done {
        match job {
            Job::Limits(work) => Done::Limits(self.limits(work, deadline).await),
            other => self.inner.call(other, deadline).await,
        }
    }
}

impl<S: Store> Fallback<S> {
    /// `work` on the inner store, its unanswered items answered by their
    /// policies.
    async fn limits(&self, work: &Work, deadline: Option<Instant>) -> Reply {
        let mut reply = self.inner.execute(work, deadline).await;
        let refund = matches!(work.policy, Policy::Refund { .. });
        // A refund that failed is the caller's to report, not a decision.
        if refund || reply.answers.iter().all(Result::is_ok) {
            return reply;
        }
        count_failures(&reply);
        let mut floors = Vec::new();
        let mut floor_at = Vec::new();
        for (i, answer) in reply.answers.iter_mut().enumerate() {
            // Every error of an item whose rule chose `open` or `closed` is
            // answered by that choice: a node that cannot answer, and one
            // that answered with an error the rule cannot read as a count
            // (which the breaker does not count against the node).
            let Err(e) = answer else { continue };
            match work.items[i].rule.on_failure {
                OnFailure::Error => {}
                OnFailure::Closed if work.items[i].gives_back() => {}
                OnFailure::Closed => {
                    ::metrics::counter!(metrics::STORE_FAIL_CLOSED_DENIAL).increment(1);
                    *answer = Ok(closed(e));
                }
                OnFailure::Open { fallback } => match floor_of(&work.items[i], fallback) {
                    Some(floor) => {
                        floors.push(floor);
                        floor_at.push(i);
                    }
                    None => *answer = Ok(closed(e)),
                },
            }
        }
        if floors.is_empty() {
            return reply;
        }
        let decided = match self.floor.apply(&Work::new(floors, Policy::Commit)) {
            Ok(d) => d.answers,
            // The floor of an original window that cannot be built: the
            // items stay failed.
            Err(_) => return reply,
        };
        for (i, answer) in floor_at.into_iter().zip(decided) {
            let Ok(answer) = answer else { continue };
            let decision = answer.decision();
            ::metrics::counter!(metrics::STORE_FALLBACK_DECISION).increment(1);
            if !decision.is_allowed() {
                ::metrics::counter!(metrics::STORE_FALLBACK_OVER_LIMIT).increment(1);
            }
            reply.answers[i] = Ok(Answer::ByPolicy(PolicyAnswer {
                decision,
                fell_back: true,
            }));
        }
        reply
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::ManualClock;
    use crate::resilience::testing::{work_on, Behaviour, Scripted};

    /// The scripted store behind the failure policies.
    fn fallback() -> (Fallback<Scripted>, Scripted) {
        let store = Scripted::new();
        let clock = Arc::new(ManualClock::at_secs(1_000_000));
        (Fallback::new(store.clone(), clock), store)
    }

    /// [`work_on`] one node, its item failing by `on_failure`.
    fn work(on_failure: OnFailure) -> Work {
        let mut work = work_on("n", 10);
        work.items[0].rule.on_failure = on_failure;
        work
    }

    fn by_policy(reply: &Reply) -> Option<PolicyAnswer> {
        match &reply.answers[0] {
            Ok(Answer::ByPolicy(p)) => Some(*p),
            _ => None,
        }
    }

    #[tokio::test]
    async fn a_give_back_the_store_cannot_take_goes_to_an_open_floor_and_is_never_denied() {
        let (f, store) = fallback();
        store.set(Behaviour::Refuse);
        // An open floor of 2: two taken, then the floor is spent.
        let take = work(OnFailure::Open { fallback: 2 });
        for _ in 0..2 {
            assert!(
                by_policy(&f.execute(&take, None).await).is_some_and(|p| p.decision.is_allowed())
            );
        }
        assert!(!by_policy(&f.execute(&take, None).await).is_some_and(|p| p.decision.is_allowed()));
        // A give-back reaches the floor: one more is admitted.
        let mut back = take.clone();
        back.items[0] = back.items[0].clone().giving_back();
        let answer = by_policy(&f.execute(&back, None).await).expect("by the floor");
        assert!(answer.decision.is_allowed() && answer.fell_back);
        assert!(by_policy(&f.execute(&take, None).await).is_some_and(|p| p.decision.is_allowed()));
        // Under a closed rule a give-back is left failing, not denied.
        let mut closed = work(OnFailure::Closed);
        closed.items[0] = closed.items[0].clone().giving_back();
        assert!(f.execute(&closed, None).await.answers[0].is_err());
    }

    #[tokio::test]
    async fn an_answering_store_is_left_alone_and_spends_no_floor() {
        let (f, _store) = fallback();
        let open = OnFailure::Open { fallback: 1 };
        for _ in 0..3 {
            let reply = f.execute(&work(open), None).await;
            assert!(matches!(reply.answers[0], Ok(Answer::Decided(_))));
        }
        assert!(f.floor.is_empty(), "no floor key without a failure");
    }

    #[tokio::test]
    async fn closed_denies_with_at_least_a_second_to_retry() {
        let (f, store) = fallback();
        store.set(Behaviour::Refuse);
        let reply = f.execute(&work(OnFailure::Closed), None).await;
        let p = by_policy(&reply).expect("answered by policy");
        assert!(!p.fell_back);
        match p.decision {
            Decision::Deny { retry_after, .. } => assert!(retry_after >= MIN_CLOSED_RETRY),
            allowed => panic!("closed admitted: {allowed:?}"),
        }
    }

    #[tokio::test]
    async fn open_admits_exactly_its_floor_then_denies() {
        let (f, store) = fallback();
        store.set(Behaviour::Refuse);
        let open = OnFailure::Open { fallback: 3 };
        let mut admitted = 0;
        for _ in 0..10 {
            let p = by_policy(&f.execute(&work(open), None).await).expect("by policy");
            assert!(p.fell_back);
            admitted += u32::from(p.decision.is_allowed());
        }
        assert_eq!(admitted, 3, "the floor, not the rule's 10");
    }

    #[tokio::test]
    async fn error_leaves_the_failure_for_the_caller() {
        let (f, store) = fallback();
        store.set(Behaviour::Refuse);
        let reply = f.execute(&work(OnFailure::Error), None).await;
        let e = reply.answers[0].as_ref().expect_err("still failing");
        assert_eq!(e.kind, StoreErrorKind::Unavailable);
    }

    #[tokio::test]
    async fn a_store_s_error_reply_is_answered_by_open_and_closed_and_left_by_error() {
        let (f, store) = fallback();
        store.set(Behaviour::Reject);
        let closed = f.execute(&work(OnFailure::Closed), None).await;
        assert!(
            by_policy(&closed).is_some_and(|p| !p.decision.is_allowed()),
            "closed denies: {closed:?}"
        );
        let open = f
            .execute(&work(OnFailure::Open { fallback: 1 }), None)
            .await;
        assert!(
            by_policy(&open).is_some_and(|p| p.decision.is_allowed()),
            "open admits its floor: {open:?}"
        );
        let error = f.execute(&work(OnFailure::Error), None).await;
        assert!(error.answers[0].is_err(), "error leaves it to the caller");
    }

    #[tokio::test]
    async fn a_failed_refund_is_not_answered_by_policy() {
        let (f, store) = fallback();
        store.set(Behaviour::Refuse);
        let mut refund = work(OnFailure::Closed);
        refund.policy = Policy::Refund {
            taken_at: Duration::ZERO,
        };
        let reply = f.execute(&refund, None).await;
        assert!(reply.answers[0].is_err());
    }
}
