//! In-flight limit: at most `max_in_flight` slots held at once, each taken
//! by a hit and given back by a refund of the same descriptor (Envoy's
//! `is_negative_hits` at the end of the stream), or by itself
//! `max_duration` after it was taken.
//!
//! The state is the log of held slots, oldest first (a [`SlidingLog`]'s
//! state over a window of `max_duration`): a hit of `cost` takes `cost`
//! slots iff the held ones plus `cost` fit, and a refund gives back the
//! **oldest** held slots.
//!
//! # Bound
//!
//! A slot carries no name of its holder (Envoy's two calls send the same
//! descriptor), so a refund cannot know which slot is its own; giving back
//! the oldest keeps the held slots the newest ones taken. Hence:
//!
//! - while every request ends within `max_duration` and every release
//!   arrives, at most `max_in_flight` are in flight, exactly: a running
//!   request's slot never expires before it has run `max_duration`;
//! - a request that runs longer than `max_duration` loses its slot then,
//!   while it still runs (one more may be admitted beside it);
//! - a release that never arrives (the proxy died, the call was lost)
//!   holds one slot until the key has admitted nothing for `max_duration`:
//!   a key whose slots are all held that way is admitted again at most
//!   `max_duration` after its last admission. While other requests keep
//!   being admitted on the key, each of their releases gives back the
//!   oldest slot, so the lost one stays counted (the key runs one slot
//!   short) instead of coming back early.
//!
//! The opposite choice (give back the newest) would bring a lost slot back
//! sooner but would let a busy key's oldest slots expire under requests
//! that are still running, admitting above the limit every `max_duration`;
//! an in-flight limit protects an upstream, so it errs on the side of
//! admitting less.

use std::time::Duration;

use super::decision::InvalidLimit;
use super::per_window::PerWindow;
use super::sliding_log::{LogEnd, SlidingLog, SlidingLogState};
use super::Decision;

/// The largest `max_in_flight` accepted: every held slot is an entry of
/// the key's state (a Redis sorted-set member, about 70 B).
pub const MAX_IN_FLIGHT: u64 = 10_000;

/// At most `max_in_flight` slots held, each for at most `max_duration`.
///
/// Invariants (checked by [`Concurrency::new`]): `max_in_flight ≤`
/// [`MAX_IN_FLIGHT`]; `1 ns ≤ max_duration ≤ u64::MAX ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Concurrency {
    slots: SlidingLog,
}

impl Concurrency {
    /// `max_in_flight` slots, each returned by itself `max_duration` after
    /// it was taken.
    pub fn new(max_in_flight: u64, max_duration: Duration) -> Result<Concurrency, InvalidLimit> {
        if max_in_flight > MAX_IN_FLIGHT {
            return Err(InvalidLimit::InFlightTooLarge {
                max_in_flight,
                max: MAX_IN_FLIGHT,
            });
        }
        Ok(Concurrency {
            slots: SlidingLog::reference(max_in_flight, max_duration)?,
        })
    }

    /// `max_in_flight` per `max_duration`.
    pub fn rate(&self) -> PerWindow {
        self.slots.rate()
    }

    /// Takes `cost` slots at `now` if that many are free (a slot held for
    /// `max_duration` is free again). A deny's `retry_after` is when enough
    /// slots come back by themselves: the latest a release-free wait can
    /// take, which a release shortens.
    pub fn decide(
        &self,
        state: Option<SlidingLogState>,
        cost: u64,
        now: Duration,
    ) -> (Decision, SlidingLogState) {
        self.slots.decide(state, cost, now)
    }

    /// `state` with `cost` slots given back at `now`, the oldest first;
    /// never fewer than none held.
    pub fn give_back(&self, state: SlidingLogState, cost: u64, now: Duration) -> SlidingLogState {
        self.slots.give_back(state, cost, now, LogEnd::Oldest)
    }

    /// `state` with `cost` slots taken at `now` whatever is free (an
    /// admission decided elsewhere, for the decision audit).
    pub fn record(
        &self,
        state: Option<SlidingLogState>,
        cost: u64,
        now: Duration,
    ) -> SlidingLogState {
        self.slots.record(state, cost, now)
    }

    /// The slots `state` holds at `now`.
    pub fn held(&self, state: &SlidingLogState, now: Duration) -> u64 {
        self.slots.in_window(state, now)
    }

    /// When the store may drop `state`: once its newest slot has expired.
    pub fn expires_after(&self, state: &SlidingLogState, now: Duration) -> Duration {
        self.slots.expires_after(state, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn three() -> Concurrency {
        Concurrency::new(3, 60 * S).expect("valid")
    }

    #[test]
    fn a_hit_takes_a_free_slot_and_a_refund_gives_one_back() {
        let c = three();
        let t = 1_000 * S;
        let mut state = None;
        for i in 0..3 {
            let (d, next) = c.decide(state, 1, t + i * S);
            assert!(d.is_allowed(), "slot {i}");
            state = Some(next);
        }
        let (d, held) = c.decide(state, 1, t + 3 * S);
        assert!(!d.is_allowed(), "all three are held");
        let back = c.give_back(held, 1, t + 4 * S);
        assert_eq!(c.held(&back, t + 4 * S), 2);
        assert!(c.decide(Some(back), 1, t + 4 * S).0.is_allowed());
    }

    #[test]
    fn a_refund_gives_back_the_oldest_slot_and_never_below_none() {
        let c = three();
        let t = 1_000 * S;
        let (_, s) = c.decide(None, 1, t);
        let (_, s) = c.decide(Some(s), 1, t + 50 * S);
        let s = c.give_back(s, 1, t + 51 * S);
        // The slot left is the newest: it lasts until t + 110 s.
        assert_eq!(c.held(&s, t + 100 * S), 1);
        assert_eq!(c.held(&s, t + 110 * S), 0);
        let none = c.give_back(s, 5, t + 52 * S);
        assert_eq!(c.held(&none, t + 52 * S), 0);
        let (d, _) = c.decide(Some(none), 3, t + 52 * S);
        assert!(
            d.is_allowed(),
            "a refund beyond what is held frees nothing more"
        );
    }

    #[test]
    fn a_slot_never_given_back_returns_after_max_duration() {
        let c = three();
        let t = 1_000 * S;
        let (_, s) = c.decide(None, 3, t);
        let (d, s) = c.decide(Some(s), 1, t + 59 * S);
        assert!(!d.is_allowed());
        assert_eq!(
            d.retry_after(),
            Some(S),
            "the oldest slot returns at t + 60 s"
        );
        assert!(c.decide(Some(s), 3, t + 60 * S).0.is_allowed());
    }

    #[test]
    fn the_in_flight_cap() {
        assert!(Concurrency::new(MAX_IN_FLIGHT, S).is_ok());
        assert!(matches!(
            Concurrency::new(MAX_IN_FLIGHT + 1, S),
            Err(InvalidLimit::InFlightTooLarge { .. })
        ));
    }

    proptest::proptest! {
        /// Against a model that names every slot: while every request ends
        /// within `max_duration` and every release arrives, the slots held
        /// are exactly the requests in flight.
        #[test]
        fn exact_while_requests_end_in_time(ops in proptest::collection::vec((0u8..2, 0usize..3, 0u64..5), 1..200)) {
            let c = three();
            let mut state: Option<SlidingLogState> = None;
            let mut running: std::collections::VecDeque<Duration> = Default::default();
            let mut t = 1_000 * S;
            for (op, which, step) in ops {
                t += Duration::from_millis(step * 100);
                // Requests last at most 20 s: end those that must.
                while running.front().is_some_and(|&at| t >= at + 20 * S) {
                    running.pop_front();
                    state = Some(c.give_back(state.take().unwrap_or_default(), 1, t));
                }
                if op == 0 {
                    let (d, next) = c.decide(state.take(), 1, t);
                    proptest::prop_assert_eq!(d.is_allowed(), running.len() < 3);
                    if d.is_allowed() {
                        running.push_back(t);
                    }
                    state = Some(next);
                } else if !running.is_empty() {
                    // Any of the running requests ends, not only the oldest.
                    running.remove(which % running.len());
                    state = Some(c.give_back(state.take().unwrap_or_default(), 1, t));
                }
                let held = state.as_ref().map_or(0, |s| c.held(s, t));
                proptest::prop_assert_eq!(held, running.len() as u64);
            }
        }
    }
}
