//! Sliding window counter: two counters per key (the current epoch-aligned
//! window and the one before it), and an estimate of the count over the last
//! window length:
//!
//! ```text
//! estimate = previous × (1 − elapsed / window) + current
//! admit `cost` ⇔ estimate + cost ≤ limit        (then current += cost)
//! ```
//!
//! where `elapsed` is how far `now` is into the current window. The
//! comparison is exact: it is done as
//! `previous × (window − elapsed) ≤ (limit − current − cost) × window` in
//! integers (nanoseconds), with no rounding of the estimate.
//!
//! # Error bound, against an exact sliding log
//!
//! An exact log admits at most `limit` in any interval of one window length.
//! This counter admits, in any interval of one window length ending at `t`
//! (`t` being `elapsed` into its aligned window, whose previous window
//! admitted `previous`),
//!
//! ```text
//! at most  limit + ⌊previous × elapsed / window⌋  ≤  2 × limit − 1
//! ```
//!
//! (for `limit ≥ 1`). Proof: the interval covers the last `window − elapsed`
//! of the previous window, which holds at most `previous` admitted; and the
//! current window's admissions up to `t` total at most
//! `limit − previous × (1 − elapsed / window)`, or the last of them would not
//! have fitted. Every window admits at most `limit`, so `previous ≤ limit`,
//! and `elapsed < window`, hence the strict `< 2 × limit`. So it over-admits
//! by at most `limit − 1` beyond an exact log (a fixed window by `limit`), and
//! that is reached only when the previous window's whole count arrived at its
//! very end and the current one is then used up as fast as it decays: with a
//! window of 100 ns and a limit of 10, 10 at 99 ns and then 9 more by 198 ns
//! is 19 within 100 ns (a unit test).
//!
//! It also errs the other way: previous-window traffic that has already left
//! the sliding interval still counts at weight `1 − elapsed / window`. At
//! worst (the previous window's `limit` all at its first instant) it admits
//! nothing at the start of the current window where an exact log admits
//! `limit`, and only `limit × elapsed / window` by `elapsed`.
//!
//! When the previous window's traffic was spread evenly over it,
//! `previous × (1 − elapsed / window)` is the part of it still inside the
//! sliding interval (up to one request of discreteness), so the counter
//! decides as the exact log does; the published production analysis the
//! design cites found about 0.003 % of decisions differing from an exact log.
//!
//! # Time going backwards
//!
//! A `now` in a window before the state's is treated as the state's window
//! start (elapsed 0, the instant the previous window weighs most); an earlier
//! `now` inside the state's window only weighs the previous window more.
//! The bound above then holds over these effective times; the state's
//! `window_start` never moves back.
//!
//! # Retries
//!
//! With no further traffic the estimate never increases: it decays through
//! the current window, carries over continuously (the current count becomes
//! the previous one at weight 1), and is 0 two windows on. So there is a
//! least instant at which a denied request fits, and `retry_after` is
//! exactly that instant, as for the other algorithms.

use std::time::Duration;

use super::decision::{from_nanos, InvalidLimit};
use super::per_window::PerWindow;
use super::Decision;

/// A sliding window counter: at most `limit` per `window`, estimated.
///
/// Invariant (checked by [`SlidingWindowCounter::new`]):
/// `1 ≤ window ≤ u64::MAX` ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingWindowCounter {
    per: PerWindow,
}

/// The state of one key. `decide` accepts any values (a state written under
/// another window length is read as the window containing `window_start`);
/// the ones it writes keep the invariants below.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SlidingWindowState {
    /// Start of the current window, since the Unix epoch: a multiple of the
    /// window length. Never moves back.
    pub window_start: Duration,
    /// Cost admitted in the current window (≤ limit).
    pub current: u64,
    /// Cost admitted in the window before (≤ limit; 0 if that window saw no
    /// decision).
    pub previous: u64,
}

/// A state seen from one `now`: rolled over to `now`'s window (or clamped to
/// the state's, if `now` is earlier), in nanoseconds.
#[derive(Debug, Clone, Copy)]
struct View {
    /// Start of the effective window.
    start: u128,
    /// How far the effective `now` is into it (`< window`).
    elapsed: u128,
    previous: u64,
    current: u64,
}

impl View {
    fn state(&self) -> SlidingWindowState {
        SlidingWindowState {
            window_start: from_nanos(self.start),
            current: self.current,
            previous: self.previous,
        }
    }
}

impl SlidingWindowCounter {
    /// At most `limit` per `window` (estimated as the module explains).
    pub fn new(limit: u64, window: Duration) -> Result<SlidingWindowCounter, InvalidLimit> {
        Ok(SlidingWindowCounter {
            per: PerWindow::new(limit, window)?,
        })
    }

    /// The limit and its window.
    pub fn rate(&self) -> PerWindow {
        self.per
    }

    /// Decides a request of `cost` at `now`; `state` is `None` for an absent
    /// (or expired) key. Returns the decision and the state to store, which
    /// may have rolled over to `now`'s window even when nothing was counted.
    ///
    /// A cost of 0 asks without counting and is always allowed. A cost above
    /// the limit is [`Decision::ExceedsCapacity`]. Never panics or overflows.
    pub fn decide(
        &self,
        state: Option<SlidingWindowState>,
        cost: u64,
        now: Duration,
    ) -> (Decision, SlidingWindowState) {
        let now_ns = now.as_nanos();
        let mut view = self.view(state, now_ns);
        if cost > self.per.limit {
            let decision = Decision::ExceedsCapacity {
                capacity: self.per.limit,
                reset_after: self.reset_after(&view, now_ns),
            };
            return (decision, view.state());
        }
        if cost == 0 || self.fits(&view, cost) {
            // fits ⇒ current + cost ≤ limit.
            view.current += cost;
            let decision = Decision::Allow {
                remaining: self.remaining(&view),
                reset_after: self.reset_after(&view, now_ns),
            };
            (decision, view.state())
        } else {
            let retry_at = self.earliest(&view, cost);
            // After `now` by construction (see `earliest`); saturating so that
            // a broken invariant cannot panic the request path.
            debug_assert!(retry_at > now_ns, "retry at {retry_at} ≤ now {now_ns}");
            let decision = Decision::Deny {
                retry_after: from_nanos(retry_at.saturating_sub(now_ns)),
                reset_after: self.reset_after(&view, now_ns),
            };
            (decision, view.state())
        }
    }

    /// The TTL for `state` written at `now`: from `now + expires_after` on,
    /// deciding on the stored state and on an absent key give the same
    /// decision and new state, so the store may drop it. That is the end of
    /// the window after `window_start` if `current > 0`, the end of the
    /// current window if only `previous > 0`, else `window_start`: at most
    /// two windows. Stores round it up to their TTL granularity.
    pub fn expires_after(&self, state: &SlidingWindowState, now: Duration) -> Duration {
        let w = u128::from(self.per.window_ns);
        let view = View {
            start: state.window_start.as_nanos() / w * w,
            elapsed: 0,
            previous: state.previous,
            current: state.current,
        };
        self.reset_after(&view, now.as_nanos())
    }

    fn view(&self, state: Option<SlidingWindowState>, now_ns: u128) -> View {
        let w = u128::from(self.per.window_ns);
        let at_now = |previous, current| View {
            start: now_ns / w * w,
            elapsed: now_ns % w,
            previous,
            current,
        };
        let Some(state) = state else {
            return at_now(0, 0);
        };
        let k = state.window_start.as_nanos() / w;
        let k_now = now_ns / w;
        if k_now < k {
            // Backwards into an earlier window: clamp to this one's start.
            View {
                start: k * w,
                elapsed: 0,
                previous: state.previous,
                current: state.current,
            }
        } else if k_now == k {
            at_now(state.previous, state.current)
        } else if k_now == k + 1 {
            at_now(state.current, 0)
        } else {
            at_now(0, 0)
        }
    }

    /// `previous × (window − elapsed) ≤ (limit − current − cost) × window`:
    /// both sides are products of two values below 2⁶⁴, so fit `u128`.
    fn fits(&self, view: &View, cost: u64) -> bool {
        let w = u128::from(self.per.window_ns);
        match self
            .per
            .limit
            .checked_sub(view.current)
            .and_then(|slack| slack.checked_sub(cost))
        {
            Some(slack) => u128::from(view.previous) * (w - view.elapsed) <= u128::from(slack) * w,
            None => false,
        }
    }

    /// The largest `k` that fits right now:
    /// `limit − current − ⌈previous × (window − elapsed) / window⌉`, or 0.
    fn remaining(&self, view: &View) -> u64 {
        let w = u128::from(self.per.window_ns);
        let weighted = (u128::from(view.previous) * (w - view.elapsed)).div_ceil(w);
        let slack = u128::from(self.per.limit.saturating_sub(view.current));
        // ≤ slack ≤ u64::MAX.
        u64::try_from(slack.saturating_sub(weighted)).unwrap_or(0)
    }

    /// When, with no more traffic, the key is as good as absent.
    fn end(&self, view: &View) -> u128 {
        let w = u128::from(self.per.window_ns);
        if view.current > 0 {
            view.start + 2 * w
        } else if view.previous > 0 {
            view.start + w
        } else {
            view.start
        }
    }

    fn reset_after(&self, view: &View, now_ns: u128) -> Duration {
        from_nanos(self.end(view).saturating_sub(now_ns))
    }

    /// The least instant (ns) at which `cost` fits, for a `cost` in
    /// `1 ..= limit` that does not fit now. The estimate never increases
    /// with time, so this is a threshold: it is in the current window if
    /// the previous window's weight can decay enough, else in the next
    /// (where the current count weighs `1 − elapsed / window`), else the
    /// start of the one after, where the estimate is 0.
    ///
    /// It is after the effective `now`: in the current window, not fitting
    /// at `elapsed` means `window − elapsed > slack × window / previous ≥
    /// free`; the other candidates are at or after the next window's start.
    fn earliest(&self, view: &View, cost: u64) -> u128 {
        let w = u128::from(self.per.window_ns);
        if let Some(slack) = self
            .per
            .limit
            .checked_sub(view.current)
            .and_then(|slack| slack.checked_sub(cost))
        {
            // previous > 0, or the cost would fit. Fits at elapsed `x` iff
            // window − x ≤ ⌊slack × window / previous⌋.
            if view.previous > 0 {
                let free = (u128::from(slack) * w / u128::from(view.previous)).min(w);
                if free > 0 {
                    return view.start + w - free;
                }
            }
        }
        let next = view.start + w;
        if view.current == 0 {
            return next;
        }
        // In the next window previous = current, current = 0.
        let free = (u128::from(self.per.limit - cost) * w / u128::from(view.current)).min(w);
        next + w - free
    }
}

#[cfg(test)]
mod tests;
