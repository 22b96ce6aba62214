//! One configured limit of any algorithm: what the config builds from a
//! `rate_limit` block and what the stores run, so that neither has to know
//! the algorithms one by one.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use super::algorithm::Algorithm;
use super::concurrency::Concurrency;
use super::gcra::{Gcra, GcraState};
use super::sliding_log::{LogEnd, SlidingLog, SlidingLogState};
use super::sliding_window::{SlidingWindowCounter, SlidingWindowState};
use super::window_counter::{FixedWindowCounter, WindowCount};
use super::{Decision, InvalidLimit, PerWindow};

/// The `algorithm:` of a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum AlgorithmName {
    /// `fixed_window`, the default and the original's.
    #[default]
    FixedWindow,
    /// `sliding_window`: the two-counter sliding window counter.
    SlidingWindow,
    /// `token_bucket`, run as GCRA.
    TokenBucket,
    /// `sliding_log`: exact, for small limits.
    SlidingLog,
    /// `concurrency`: at most `max_in_flight` requests in flight.
    Concurrency,
}

impl AlgorithmName {
    /// Every name, as written in the YAML.
    pub const ALL: [AlgorithmName; 5] = [
        AlgorithmName::FixedWindow,
        AlgorithmName::SlidingWindow,
        AlgorithmName::TokenBucket,
        AlgorithmName::SlidingLog,
        AlgorithmName::Concurrency,
    ];

    /// The algorithms that limit a rate over a window (every one but
    /// `concurrency`, which limits what is in flight).
    pub const RATES: [AlgorithmName; 4] = [
        AlgorithmName::FixedWindow,
        AlgorithmName::SlidingWindow,
        AlgorithmName::TokenBucket,
        AlgorithmName::SlidingLog,
    ];

    /// The YAML spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            AlgorithmName::FixedWindow => "fixed_window",
            AlgorithmName::SlidingWindow => "sliding_window",
            AlgorithmName::TokenBucket => "token_bucket",
            AlgorithmName::SlidingLog => "sliding_log",
            AlgorithmName::Concurrency => "concurrency",
        }
    }

    /// Two letters for store keys (keys are a real share of store memory).
    pub fn key_tag(self) -> &'static str {
        match self {
            AlgorithmName::FixedWindow => "fw",
            AlgorithmName::SlidingWindow => "sw",
            AlgorithmName::TokenBucket => "tb",
            AlgorithmName::SlidingLog => "sl",
            AlgorithmName::Concurrency => "cc",
        }
    }
}

impl fmt::Display for AlgorithmName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AlgorithmName {
    type Err = ();

    fn from_str(s: &str) -> Result<AlgorithmName, ()> {
        AlgorithmName::ALL
            .into_iter()
            .find(|a| a.as_str() == s)
            .ok_or(())
    }
}

/// A built limit of any algorithm. Its parameters were checked when it was
/// built, so [`Limiter::decide`] never fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limiter {
    /// See [`FixedWindowCounter`].
    FixedWindow(FixedWindowCounter),
    /// See [`SlidingWindowCounter`].
    SlidingWindow(SlidingWindowCounter),
    /// See [`Gcra`].
    TokenBucket(Gcra),
    /// See [`SlidingLog`].
    SlidingLog(SlidingLog),
    /// See [`Concurrency`].
    Concurrency(Concurrency),
}

/// The state of one key under a [`Limiter`].
#[derive(Debug, Clone, PartialEq)]
pub enum LimiterState {
    /// A fixed window's counter.
    FixedWindow(WindowCount),
    /// A sliding window's two counters.
    SlidingWindow(SlidingWindowState),
    /// A token bucket's theoretical arrival time.
    TokenBucket(GcraState),
    /// A sliding log's entries.
    SlidingLog(SlidingLogState),
    /// An in-flight limit's held slots.
    Concurrency(SlidingLogState),
}

impl Limiter {
    /// `limit` per `period` with `algorithm`; `burst` is the token bucket's
    /// capacity (default `limit`) and is refused for the others. For
    /// `concurrency`, `limit` is `max_in_flight` and `period` is
    /// `max_duration`.
    pub fn new(
        algorithm: AlgorithmName,
        limit: u64,
        period: Duration,
        burst: Option<u64>,
    ) -> Result<Limiter, InvalidLimit> {
        if let (Some(burst), false) = (burst, algorithm == AlgorithmName::TokenBucket) {
            return Err(InvalidLimit::BurstWithoutBucket { burst });
        }
        Ok(match algorithm {
            AlgorithmName::FixedWindow => {
                Limiter::FixedWindow(FixedWindowCounter::new(limit, period)?)
            }
            AlgorithmName::SlidingWindow => {
                Limiter::SlidingWindow(SlidingWindowCounter::new(limit, period)?)
            }
            AlgorithmName::TokenBucket => {
                Limiter::TokenBucket(Gcra::with_burst(limit, period, burst.unwrap_or(limit))?)
            }
            AlgorithmName::SlidingLog => Limiter::SlidingLog(SlidingLog::new(limit, period)?),
            AlgorithmName::Concurrency => Limiter::Concurrency(Concurrency::new(limit, period)?),
        })
    }

    /// Which algorithm this is.
    pub fn name(&self) -> AlgorithmName {
        match self {
            Limiter::FixedWindow(_) => AlgorithmName::FixedWindow,
            Limiter::SlidingWindow(_) => AlgorithmName::SlidingWindow,
            Limiter::TokenBucket(_) => AlgorithmName::TokenBucket,
            Limiter::SlidingLog(_) => AlgorithmName::SlidingLog,
            Limiter::Concurrency(_) => AlgorithmName::Concurrency,
        }
    }

    /// Its limit per window (for the token bucket: the refill rate; for an
    /// in-flight limit: `max_in_flight` per `max_duration`).
    pub fn rate(&self) -> PerWindow {
        match self {
            Limiter::FixedWindow(a) => a.rate(),
            Limiter::SlidingWindow(a) => a.rate(),
            Limiter::TokenBucket(a) => a.rate(),
            Limiter::SlidingLog(a) => a.rate(),
            Limiter::Concurrency(a) => a.rate(),
        }
    }

    /// Requests per period.
    pub fn limit(&self) -> u64 {
        self.rate().limit()
    }

    /// The window or refill period.
    pub fn period(&self) -> Duration {
        self.rate().window()
    }

    /// The window as a limit's statuses and gauges report it, in whole
    /// seconds: the period, or 0 for an in-flight limit, which has none
    /// (its period is the longest a slot is held).
    pub fn window_seconds(&self) -> u64 {
        match self {
            Limiter::Concurrency(_) => 0,
            _ => self.period().as_secs(),
        }
    }

    /// The same algorithm over the same period with `limit` per period
    /// instead (a token bucket's burst scaled alike, rounded down, at least
    /// 1): a share of this limit, as a failure policy's local floor.
    pub fn scaled_to(&self, limit: u64) -> Result<Limiter, InvalidLimit> {
        let burst = match self {
            Limiter::TokenBucket(b) => {
                let scaled =
                    u128::from(b.burst()) * u128::from(limit) / u128::from(self.limit().max(1));
                Some(u64::try_from(scaled).unwrap_or(u64::MAX).max(1))
            }
            _ => None,
        };
        Limiter::new(self.name(), limit, self.period(), burst)
    }

    /// Sub-bucket `i` of `k` (`i < k`): the same algorithm and period with
    /// `⌊limit / k⌋` per period, plus one for the first `limit mod k`
    /// sub-buckets, so that the `k` sub-buckets' limits add up to this
    /// limit exactly; a token bucket's burst is split the same way. Fails
    /// when a sub-bucket would get nothing (`k` above the limit or the
    /// burst), which config validation refuses.
    pub fn sub_bucket(&self, i: u64, k: u64) -> Result<Limiter, InvalidLimit> {
        let share = |n: u64| n / k.max(1) + u64::from(i < n % k.max(1));
        let burst = match self {
            Limiter::TokenBucket(b) => Some(share(b.burst())),
            _ => None,
        };
        let limit = share(self.limit());
        if limit == 0 || burst == Some(0) {
            return Err(InvalidLimit::EmptySubBucket { shards: k });
        }
        Limiter::new(self.name(), limit, self.period(), burst)
    }

    /// `state` with `cost` given back at `now`: cost that a decision at
    /// `taken_at` admitted and nobody used (a lease's unspent tokens).
    /// From then on the key decides as if that cost had not been admitted,
    /// for as long as it would still have counted: cost whose window has
    /// ended is not given back, so a refund never lets any window of the
    /// algorithm admit more than the limit. A state of another algorithm is
    /// returned unchanged.
    pub fn refund(
        &self,
        state: LimiterState,
        cost: u64,
        taken_at: Duration,
        now: Duration,
    ) -> LimiterState {
        let window_ns = self.period().as_nanos().max(1);
        let start_of = |t: Duration| t.as_nanos() - t.as_nanos() % window_ns;
        let taken_window = start_of(taken_at);
        match (self, state) {
            (Limiter::TokenBucket(b), LimiterState::TokenBucket(s)) => {
                LimiterState::TokenBucket(b.refund(s, cost, now))
            }
            (Limiter::FixedWindow(_), LimiterState::FixedWindow(mut w)) => {
                if w.window_start.as_nanos() == taken_window {
                    w.count = w.count.saturating_sub(cost);
                }
                LimiterState::FixedWindow(w)
            }
            (Limiter::SlidingWindow(_), LimiterState::SlidingWindow(mut w)) => {
                let start = w.window_start.as_nanos();
                if start == taken_window {
                    w.current = w.current.saturating_sub(cost);
                } else if start == taken_window + window_ns {
                    w.previous = w.previous.saturating_sub(cost);
                }
                LimiterState::SlidingWindow(w)
            }
            (Limiter::SlidingLog(_), LimiterState::SlidingLog(mut log))
            | (Limiter::Concurrency(_), LimiterState::Concurrency(mut log)) => {
                // The newest entries admitted at `taken_at`, up to `cost`.
                let mut left = cost;
                while left > 0 {
                    let Some(i) = log.hits.iter().rposition(|h| h.at == taken_at) else {
                        break;
                    };
                    let take = left.min(log.hits[i].cost);
                    log.hits[i].cost -= take;
                    left -= take;
                    if log.hits[i].cost == 0 {
                        log.hits.remove(i);
                    }
                }
                match self {
                    Limiter::Concurrency(_) => LimiterState::Concurrency(log),
                    _ => LimiterState::SlidingLog(log),
                }
            }
            (_, other) => other,
        }
    }

    /// `state` with `cost` given back at `now` by a refund that names no
    /// admission (a descriptor with `is_negative_hits`): what the
    /// algorithm counts for the current moment goes down by `cost`, never
    /// below nothing.
    ///
    /// - a fixed window: the current window's count (a refund that lands
    ///   in the next window finds nothing of the admission to give back);
    /// - a sliding window: its current window's count, not the previous
    ///   one's weight;
    /// - a token bucket: `cost` tokens, never above the burst;
    /// - a sliding log: its newest entries;
    /// - an in-flight limit: its oldest held slots (see [`Concurrency`]).
    ///
    /// A state of another algorithm is returned unchanged.
    pub fn give_back(&self, state: LimiterState, cost: u64, now: Duration) -> LimiterState {
        match (self, state) {
            (Limiter::SlidingLog(l), LimiterState::SlidingLog(s)) => {
                LimiterState::SlidingLog(l.give_back(s, cost, now, LogEnd::Newest))
            }
            (Limiter::Concurrency(c), LimiterState::Concurrency(s)) => {
                LimiterState::Concurrency(c.give_back(s, cost, now))
            }
            (_, s) => self.refund(s, cost, now, now),
        }
    }

    /// `state` with `cost` taken at `now` whatever the limit says (an
    /// admission decided elsewhere): what the decision audit's exact
    /// references ([`Limiter::reference_of`]) follow. A sliding log logs
    /// it, a token bucket moves its TAT; the counters record it as an
    /// admission would, and not at all when it would not fit.
    pub fn record(&self, state: Option<LimiterState>, cost: u64, now: Duration) -> LimiterState {
        match (self, state) {
            (Limiter::SlidingLog(log), s) => {
                let own = match s {
                    Some(LimiterState::SlidingLog(s)) => Some(s),
                    _ => None,
                };
                LimiterState::SlidingLog(log.record(own, cost, now))
            }
            (Limiter::Concurrency(c), s) => {
                let own = match s {
                    Some(LimiterState::Concurrency(s)) => Some(s),
                    _ => None,
                };
                LimiterState::Concurrency(c.record(own, cost, now))
            }
            (Limiter::TokenBucket(b), s) => {
                let own = match s {
                    Some(LimiterState::TokenBucket(s)) => Some(s),
                    _ => None,
                };
                LimiterState::TokenBucket(b.record(own, cost, now))
            }
            (counter, s) => {
                let before = s.clone();
                match counter.decide(s, cost, now) {
                    (d, next) if d.is_allowed() => next,
                    (_, next) => before.unwrap_or(next),
                }
            }
        }
    }

    /// What a sliding log's `state` holds in its window at `now` (the sum
    /// of the costs logged in `(now − window, now]`), or an in-flight
    /// limit's the slots it holds; 0 for the others.
    pub fn in_window(&self, state: Option<&LimiterState>, now: Duration) -> u64 {
        match (self, state) {
            (Limiter::SlidingLog(log), Some(LimiterState::SlidingLog(s))) => log.in_window(s, now),
            (Limiter::Concurrency(c), Some(LimiterState::Concurrency(s))) => c.held(s, now),
            _ => 0,
        }
    }

    /// The exact reference of this limit's contract, for the decision
    /// audit: for the window algorithms "at most `limit` admitted in any
    /// trailing window of its period" (an uncapped [`SlidingLog`]); for a
    /// token bucket the same bucket (GCRA is the exact model, to the
    /// nanosecond); for an in-flight limit the same slots.
    pub fn reference_of(&self) -> Result<Limiter, InvalidLimit> {
        match self {
            Limiter::TokenBucket(b) => Ok(Limiter::TokenBucket(*b)),
            Limiter::Concurrency(c) => Ok(Limiter::Concurrency(*c)),
            other => Ok(Limiter::SlidingLog(SlidingLog::reference(
                other.limit(),
                other.period(),
            )?)),
        }
    }

    /// Whether room comes back a little at a time (a token bucket, the
    /// sliding window and log), rather than all at once when a fixed window
    /// ends.
    pub fn refills(&self) -> bool {
        !matches!(self, Limiter::FixedWindow(_))
    }

    /// The most one instant admits: the bucket's burst, else the limit.
    pub fn capacity(&self) -> u64 {
        match self {
            Limiter::TokenBucket(a) => a.burst(),
            other => other.limit(),
        }
    }
}

impl Algorithm for Limiter {
    type State = LimiterState;

    /// A state of another algorithm than this limiter's counts as absent.
    fn decide(
        &self,
        state: Option<LimiterState>,
        cost: u64,
        now: Duration,
    ) -> (Decision, LimiterState) {
        /// Runs the variant's algorithm on its own kind of state.
        macro_rules! run {
            ($a:expr, $variant:ident) => {{
                let own = state.and_then(|s| match s {
                    LimiterState::$variant(s) => Some(s),
                    _ => None,
                });
                let (decision, next) = $a.decide(own, cost, now);
                (decision, LimiterState::$variant(next))
            }};
        }
        match self {
            Limiter::FixedWindow(a) => run!(a, FixedWindow),
            Limiter::SlidingWindow(a) => run!(a, SlidingWindow),
            Limiter::TokenBucket(a) => run!(a, TokenBucket),
            Limiter::SlidingLog(a) => run!(a, SlidingLog),
            Limiter::Concurrency(a) => run!(a, Concurrency),
        }
    }

    /// Zero for a state of another algorithm (it is as good as absent).
    fn expires_after(&self, state: &LimiterState, now: Duration) -> Duration {
        match (self, state) {
            (Limiter::FixedWindow(a), LimiterState::FixedWindow(s)) => a.expires_after(s, now),
            (Limiter::SlidingWindow(a), LimiterState::SlidingWindow(s)) => a.expires_after(s, now),
            (Limiter::TokenBucket(a), LimiterState::TokenBucket(s)) => a.expires_after(s, now),
            (Limiter::SlidingLog(a), LimiterState::SlidingLog(s)) => a.expires_after(s, now),
            (Limiter::Concurrency(a), LimiterState::Concurrency(s)) => a.expires_after(s, now),
            _ => Duration::ZERO,
        }
    }
}

#[cfg(test)]
mod tests;
