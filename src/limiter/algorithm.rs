//! The common shape of the opt-in algorithms, so that stores and tests can
//! treat them alike: a pure state machine over `(state, cost, now)`.

use std::fmt;
use std::time::Duration;

use super::concurrency::Concurrency;
use super::gcra::{Gcra, GcraState};
use super::sliding_log::{SlidingLog, SlidingLogState};
use super::sliding_window::{SlidingWindowCounter, SlidingWindowState};
use super::window_counter::{FixedWindowCounter, WindowCount};
use super::Decision;

/// A rate-limit algorithm. Implementations do no I/O and read no clock.
pub trait Algorithm {
    /// What a store keeps per key.
    type State: Clone + fmt::Debug + PartialEq;

    /// Decides `cost` hits at `now`; `state` is `None` for an absent (or
    /// expired) key. Returns the decision and the state to store.
    fn decide(
        &self,
        state: Option<Self::State>,
        cost: u64,
        now: Duration,
    ) -> (Decision, Self::State);

    /// How long after `now` a store may drop `state`: past it, an absent key
    /// decides exactly as `state` would.
    fn expires_after(&self, state: &Self::State, now: Duration) -> Duration;
}

macro_rules! algorithm {
    ($alg:ty, $state:ty) => {
        impl Algorithm for $alg {
            type State = $state;

            fn decide(
                &self,
                state: Option<$state>,
                cost: u64,
                now: Duration,
            ) -> (Decision, $state) {
                <$alg>::decide(self, state, cost, now)
            }

            fn expires_after(&self, state: &$state, now: Duration) -> Duration {
                <$alg>::expires_after(self, state, now)
            }
        }
    };
}

algorithm!(Gcra, GcraState);
algorithm!(SlidingWindowCounter, SlidingWindowState);
algorithm!(SlidingLog, SlidingLogState);
algorithm!(FixedWindowCounter, WindowCount);
algorithm!(Concurrency, SlidingLogState);
