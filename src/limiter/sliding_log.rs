//! Sliding window log: the exact algorithm. The state is the log of admitted
//! requests in the last window (time and cost of each), so a request of
//! `cost` is admitted iff
//!
//! ```text
//! Σ cost of entries with time in (now − window, now]  +  cost  ≤  limit
//! ```
//!
//! # Bound
//!
//! Exact: in any interval of one window length, the admitted cost is at most
//! `limit`, and a request is denied only when admitting it would break that
//! (the tests compare it decision by decision with a naive log that never
//! forgets). Retries are exact too: a denial's `retry_after` is the instant
//! the oldest entries that must leave have left.
//!
//! # Cost
//!
//! Memory grows with the limit (one entry per admitted request, ≈ 70 B in a
//! Redis sorted set, ≈ 70 KB per active key at 1,000 per minute), which is
//! why limits above [`MAX_LOG_LIMIT`] are refused. Use it for small,
//! security-sensitive limits (5 logins per 15 minutes).
//!
//! # Time going backwards
//!
//! The state keeps the latest `now` it has seen, and every decision is made
//! at `max(now, latest)`: entries are appended in time order, and a log that
//! has drained is not fooled by a clock that then steps back into the window
//! it drained. The bound holds over these effective times.

use std::collections::VecDeque;
use std::time::Duration;

use super::decision::{from_nanos, InvalidLimit};
use super::per_window::PerWindow;
use super::Decision;

/// The largest limit a sliding log accepts. The log keeps one entry per
/// admitted request, so memory per key grows with the limit; configs above
/// this are rejected at validation ([`InvalidLimit::LogLimitTooLarge`]).
pub const MAX_LOG_LIMIT: u64 = 1_000;

/// An exact sliding window log: at most `limit` per `window`.
///
/// Invariants (checked by [`SlidingLog::new`]): `limit ≤ MAX_LOG_LIMIT`;
/// `1 ≤ window ≤ u64::MAX` ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingLog {
    per: PerWindow,
}

/// Which end of a log a give-back takes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogEnd {
    /// The latest entries.
    Newest,
    /// The earliest entries still in the window.
    Oldest,
}

/// One admitted request: when, and its cost (its multiplicity).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Hit {
    /// The (effective) time it was admitted, since the Unix epoch.
    pub at: Duration,
    /// Its cost (≥ 1: cost-0 queries are not logged).
    pub cost: u64,
}

/// The state of one key. `decide` accepts any values (it sorts an unsorted
/// log and drops what has left the window); the ones it writes keep the
/// invariants below.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SlidingLogState {
    /// Admitted requests still inside the window, oldest first; their costs
    /// sum to at most the limit.
    pub hits: VecDeque<Hit>,
    /// The latest effective `now` decided on (≥ every `hits[i].at`): the
    /// high-water mark that keeps a drained log from admitting on a clock
    /// that stepped back.
    pub latest: Duration,
}

impl SlidingLog {
    /// At most `limit` per `window`, exactly. Refuses limits above
    /// [`MAX_LOG_LIMIT`].
    pub fn new(limit: u64, window: Duration) -> Result<SlidingLog, InvalidLimit> {
        if limit > MAX_LOG_LIMIT {
            return Err(InvalidLimit::LogLimitTooLarge {
                limit,
                max: MAX_LOG_LIMIT,
            });
        }
        Ok(SlidingLog {
            per: PerWindow::new(limit, window)?,
        })
    }

    /// An exact log of `limit` per `window` without the [`MAX_LOG_LIMIT`]
    /// cap: the decision audit's reference of a window contract ("at most
    /// `limit` admitted in any trailing `window`"), whose memory the audit
    /// bounds itself (`DECISION_AUDIT_MAX_LIMIT`).
    pub fn reference(limit: u64, window: Duration) -> Result<SlidingLog, InvalidLimit> {
        Ok(SlidingLog {
            per: PerWindow::new(limit, window)?,
        })
    }

    /// The limit and its window.
    pub fn rate(&self) -> PerWindow {
        self.per
    }

    /// `state` with `cost` logged at `now` whatever the limit says: an
    /// admission decided elsewhere, which the decision audit's reference
    /// follows (so its later decisions count what was really admitted, not
    /// what it would have admitted). Pruned as [`SlidingLog::decide`] prunes;
    /// the costs logged may then sum above the limit.
    pub fn record(
        &self,
        state: Option<SlidingLogState>,
        cost: u64,
        now: Duration,
    ) -> SlidingLogState {
        let (mut state, at) = self.pruned(state, now);
        if cost > 0 {
            state.hits.push_back(Hit { at, cost });
        }
        state
    }

    /// `state` with `cost` given back at `now` from its `end` entries (the
    /// newest: a refund of the latest admissions; the oldest: an in-flight
    /// limit's release); never fewer than none logged.
    pub fn give_back(
        &self,
        state: SlidingLogState,
        cost: u64,
        now: Duration,
        end: LogEnd,
    ) -> SlidingLogState {
        let (mut state, _) = self.pruned(Some(state), now);
        let mut left = cost;
        while left > 0 {
            let hit = match end {
                LogEnd::Newest => state.hits.back_mut(),
                LogEnd::Oldest => state.hits.front_mut(),
            };
            let Some(hit) = hit else { break };
            let take = left.min(hit.cost);
            hit.cost -= take;
            left -= take;
            if hit.cost == 0 {
                match end {
                    LogEnd::Newest => state.hits.pop_back(),
                    LogEnd::Oldest => state.hits.pop_front(),
                };
            }
        }
        state
    }

    /// The costs `state` holds in the window ending at `now` (or at its
    /// high-water mark, if later).
    pub fn in_window(&self, state: &SlidingLogState, now: Duration) -> u64 {
        let w = u128::from(self.per.window_ns);
        let newest = state
            .hits
            .iter()
            .map(|hit| hit.at)
            .max()
            .unwrap_or(Duration::ZERO);
        let at = now.max(state.latest).max(newest).as_nanos();
        // What `pruned` would keep, counted in place: (at − window, at].
        state
            .hits
            .iter()
            .filter(|hit| hit.at.as_nanos() + w > at)
            .fold(0, |sum, hit| sum.saturating_add(hit.cost))
    }

    /// `state` sorted, with what has left the window at the effective time
    /// dropped and the high-water mark moved to it; and that time.
    fn pruned(&self, state: Option<SlidingLogState>, now: Duration) -> (SlidingLogState, Duration) {
        let w = u128::from(self.per.window_ns);
        let mut state = state.unwrap_or_default();
        if !is_sorted(&state.hits) {
            state.hits.make_contiguous().sort_by_key(|hit| hit.at);
        }
        let newest = state.hits.back().map_or(Duration::ZERO, |hit| hit.at);
        let at = now.max(state.latest).max(newest);
        let at_ns = at.as_nanos();
        // Keep the entries in (at − window, at].
        while state
            .hits
            .front()
            .is_some_and(|hit| hit.at.as_nanos() + w <= at_ns)
        {
            state.hits.pop_front();
        }
        state.latest = at;
        (state, at)
    }

    /// Decides a request of `cost` at `now`; `state` is `None` for an absent
    /// (or expired) key. Returns the decision and the state to store, which
    /// is pruned and carries the new high-water mark even when nothing was
    /// admitted.
    ///
    /// A cost of 0 asks without logging and is always allowed. A cost above
    /// the limit is [`Decision::ExceedsCapacity`]. Never panics or overflows.
    pub fn decide(
        &self,
        state: Option<SlidingLogState>,
        cost: u64,
        now: Duration,
    ) -> (Decision, SlidingLogState) {
        let w = u128::from(self.per.window_ns);
        let now_ns = now.as_nanos();
        let (mut state, at) = self.pruned(state, now);
        let at_ns = at.as_nanos();
        let used: u128 = state.hits.iter().map(|hit| u128::from(hit.cost)).sum();
        let limit = u128::from(self.per.limit);
        if cost > self.per.limit {
            let decision = Decision::ExceedsCapacity {
                capacity: self.per.limit,
                reset_after: self.reset_after(&state, now_ns),
            };
            return (decision, state);
        }
        if cost == 0 || used + u128::from(cost) <= limit {
            if cost > 0 {
                state.hits.push_back(Hit { at, cost });
            }
            let used = used + u128::from(cost);
            let decision = Decision::Allow {
                // ≤ limit ≤ MAX_LOG_LIMIT.
                remaining: u64::try_from(limit.saturating_sub(used)).unwrap_or(0),
                reset_after: self.reset_after(&state, now_ns),
            };
            return (decision, state);
        }
        // The oldest entries leave first: find how many must go, and the
        // instant the last of them does (after `at`: every kept entry has
        // `hit.at + window > at`). Found at the latest when all are gone,
        // since cost ≤ limit.
        let mut left = used;
        let mut retry_at = at_ns + 1;
        for hit in &state.hits {
            left -= u128::from(hit.cost);
            retry_at = hit.at.as_nanos() + w;
            if left + u128::from(cost) <= limit {
                break;
            }
        }
        let decision = Decision::Deny {
            retry_after: from_nanos(retry_at - now_ns),
            reset_after: self.reset_after(&state, now_ns),
        };
        (decision, state)
    }

    /// The TTL for `state` written at `now`: from `now + expires_after` on,
    /// deciding on the stored state and on an absent key give the same
    /// decision and new state, so the store may drop it. That is when the
    /// newest entry leaves the window (and the high-water mark has passed):
    /// at most one window after the last admission. Stores round it up to
    /// their TTL granularity.
    pub fn expires_after(&self, state: &SlidingLogState, now: Duration) -> Duration {
        self.reset_after(state, now.as_nanos())
    }

    fn reset_after(&self, state: &SlidingLogState, now_ns: u128) -> Duration {
        let w = u128::from(self.per.window_ns);
        let drained = state
            .hits
            .iter()
            .map(|hit| hit.at.as_nanos() + w)
            .max()
            .unwrap_or(0)
            .max(state.latest.as_nanos());
        from_nanos(drained.saturating_sub(now_ns))
    }
}

fn is_sorted(hits: &VecDeque<Hit>) -> bool {
    hits.iter()
        .zip(hits.iter().skip(1))
        .all(|(a, b)| a.at <= b.at)
}

#[cfg(test)]
mod tests;
