//! Fixed window as an [`Algorithm`](super::Algorithm): one counter per
//! epoch-aligned window of any length, deciding before it counts.
//!
//! This is the fixed window of the opt-in path (`unit_multiplier`, a
//! `fixed_window` inside `rate_limits`, or all-or-nothing commits): a
//! request is admitted iff `count + cost ≤ limit`, and only admitted cost is
//! counted: the rule of [`decide_before_counting`], which the original's
//! window decided all or nothing follows too. This module adds windows of
//! any length in nanoseconds and the state a store keeps for them. The
//! original's counter ([`super::fixed_window`]) counts every hit, over the
//! limit or not, and keeps its key format; this one never does.
//!
//! # Error bound
//!
//! Each aligned window admits at most `limit`. Any interval of one window
//! length overlaps at most two aligned windows, so it admits at most
//! `2 × limit`: `limit` at the very end of one window and `limit` at the
//! start of the next (the boundary burst). Windows start at multiples of
//! their length since the epoch, so every client of a limit resets at once.

use std::time::Duration;

use super::decision::{from_nanos, InvalidLimit};
use super::fixed_window::decide_before_counting;
use super::per_window::PerWindow;
use super::Decision;

/// A fixed window: at most `limit` per epoch-aligned `window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedWindowCounter {
    per: PerWindow,
}

/// The state of one key: which window it counts and how much it admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WindowCount {
    /// Start of the counted window, since the Unix epoch.
    pub window_start: Duration,
    /// Cost admitted in it (≤ limit when written by `decide`).
    pub count: u64,
}

impl FixedWindowCounter {
    /// At most `limit` per aligned `window`.
    pub fn new(limit: u64, window: Duration) -> Result<FixedWindowCounter, InvalidLimit> {
        Ok(FixedWindowCounter {
            per: PerWindow::new(limit, window)?,
        })
    }

    /// The limit and its window.
    pub fn rate(&self) -> PerWindow {
        self.per
    }

    /// Decides `cost` at `now`. A state of an older window than `now`'s
    /// counts as empty; one of a later window (time went back) is the
    /// window that counts. A cost of 0 is always allowed; a cost above the
    /// limit is [`Decision::ExceedsCapacity`].
    pub fn decide(
        &self,
        state: Option<WindowCount>,
        cost: u64,
        now: Duration,
    ) -> (Decision, WindowCount) {
        let w = u128::from(self.per.window_ns);
        let now_ns = now.as_nanos();
        let now_start = now_ns / w * w;
        // A state of a later window (the clock went back) keeps counting
        // that window, so no window ever admits more than the limit.
        let (start, count) = match state {
            Some(s) if s.window_start.as_nanos() >= now_start => {
                (s.window_start.as_nanos(), s.count)
            }
            _ => (now_start, 0),
        };
        // In (0, w]: the window ends after now.
        let until_end = from_nanos(start + w - now_ns);
        let (decision, count) = decide_before_counting(self.per.limit, count, cost, until_end);
        let state = WindowCount {
            window_start: from_nanos(start),
            count,
        };
        (nothing_counted_resets_now(decision, count), state)
    }

    /// Until the end of the state's window (zero once it has passed or when
    /// nothing was counted).
    pub fn expires_after(&self, state: &WindowCount, now: Duration) -> Duration {
        if state.count == 0 {
            return Duration::ZERO;
        }
        let end = state.window_start.as_nanos() + u128::from(self.per.window_ns);
        from_nanos(end.saturating_sub(now.as_nanos()))
    }
}

/// A window that counts nothing has nothing to reset: its admission (of a
/// cost of 0) and its refusal of a cost above the limit reset now.
fn nothing_counted_resets_now(decision: Decision, count: u64) -> Decision {
    match decision {
        Decision::Allow { remaining, .. } if count == 0 => Decision::Allow {
            remaining,
            reset_after: Duration::ZERO,
        },
        Decision::ExceedsCapacity { capacity, .. } if count == 0 => Decision::ExceedsCapacity {
            capacity,
            reset_after: Duration::ZERO,
        },
        decision => decision,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::testing::{arrivals, expired_equals_absent};
    use proptest::prelude::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn admits_limit_per_window_then_denies_until_its_end() {
        let fw = FixedWindowCounter::new(3, 5 * S).unwrap();
        let mut state = None;
        let now = 12 * S; // window [10, 15)
        for left in [2, 1, 0] {
            let (d, s) = fw.decide(state, 1, now);
            assert_eq!(
                d,
                Decision::Allow {
                    remaining: left,
                    reset_after: 3 * S
                }
            );
            state = Some(s);
        }
        let (d, s) = fw.decide(state, 1, now);
        assert_eq!(
            d,
            Decision::Deny {
                retry_after: 3 * S,
                reset_after: 3 * S
            }
        );
        assert_eq!(s.count, 3, "a denial counts nothing");
        let (d, _) = fw.decide(Some(s), 1, 15 * S);
        assert!(d.is_allowed(), "the next window starts empty");
    }

    #[test]
    fn boundary_burst_is_twice_the_limit() {
        let fw = FixedWindowCounter::new(10, S).unwrap();
        let mut state = None;
        let mut admitted = 0;
        for at in [Duration::from_millis(999), Duration::from_millis(1_000)] {
            for _ in 0..20 {
                let (d, s) = fw.decide(state, 1, at);
                admitted += u64::from(d.is_allowed());
                state = Some(s);
            }
        }
        assert_eq!(admitted, 20, "1 ms apart, two windows: 2 × limit");
    }

    #[test]
    fn cost_above_limit_never_fits_and_zero_cost_always_does() {
        let fw = FixedWindowCounter::new(2, S).unwrap();
        let (d, _) = fw.decide(None, 3, S);
        assert!(matches!(d, Decision::ExceedsCapacity { capacity: 2, .. }));
        let full = WindowCount {
            window_start: S,
            count: 2,
        };
        assert!(fw.decide(Some(full), 0, S).0.is_allowed());
        let closed = FixedWindowCounter::new(0, S).unwrap();
        assert!(matches!(
            closed.decide(None, 1, S).0,
            Decision::ExceedsCapacity { capacity: 0, .. }
        ));
    }

    #[test]
    fn extreme_inputs_do_not_overflow() {
        let fw = FixedWindowCounter::new(u64::MAX, Duration::from_nanos(u64::MAX)).unwrap();
        let (d, s) = fw.decide(None, u64::MAX, Duration::MAX);
        assert!(d.is_allowed());
        assert_eq!(s.count, u64::MAX);
        assert!(!fw.decide(Some(s), 1, Duration::MAX).0.is_allowed());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        /// Never more than `limit` admitted in one aligned window; every
        /// denial carries a positive retry time after which it is admitted.
        #[test]
        fn bound_and_retry(limit in 0u64..20, unit in 1u64..1_000_000,
                           steps in arrivals(1_000_000, 20, true, 1_500)) {
            let fw = FixedWindowCounter::new(limit, Duration::from_nanos(unit)).unwrap();
            let mut per_window = std::collections::HashMap::new();
            let mut state = None;
            for &(now, cost) in &steps {
                let (decision, next) = fw.decide(state, cost, now);
                let start = next.window_start;
                if decision.is_allowed() {
                    let admitted = per_window.entry(start).or_insert(0u64);
                    *admitted += cost;
                    prop_assert!(*admitted <= limit);
                }
                if let Some(retry) = decision.retry_after() {
                    prop_assert!(retry > Duration::ZERO);
                    prop_assert!(fw.decide(Some(next), cost, now + retry).0.is_allowed());
                }
                state = Some(next);
            }
                    }

        #[test]
        fn expired_state_equals_absent(limit in 0u64..20, unit in 1u64..1_000_000,
                                       steps in arrivals(1_000_000, 20, false, 1_500),
                                       later in 0u64..2_000_000, cost in 0u64..22) {
            let fw = FixedWindowCounter::new(limit, Duration::from_nanos(unit)).unwrap();
            expired_equals_absent(&fw, &steps, Duration::from_nanos(later), cost)?;
        }
    }
}
