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
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn a_scaled_limit_keeps_the_algorithm_and_period() {
        let minute = Duration::from_secs(60);
        for a in AlgorithmName::ALL {
            let l = Limiter::new(a, 60, minute, None).expect("valid");
            let s = l.scaled_to(6).expect("valid");
            assert_eq!((s.name(), s.limit(), s.period()), (a, 6, minute));
        }
        // A token bucket's burst scales with its rate, at least 1.
        let b = Limiter::new(AlgorithmName::TokenBucket, 10, S, Some(40)).expect("valid");
        assert_eq!(b.scaled_to(5).expect("valid").capacity(), 20);
        let b = Limiter::new(AlgorithmName::TokenBucket, 100, S, Some(3)).expect("valid");
        assert_eq!(b.scaled_to(1).expect("valid").capacity(), 1);
    }

    #[test]
    fn sub_buckets_add_up_to_the_limit_exactly() {
        let minute = Duration::from_secs(60);
        for a in AlgorithmName::ALL {
            for (limit, k) in [(100, 8), (7, 7), (1000, 64), (65, 64)] {
                let l = Limiter::new(a, limit, minute, None).expect("valid");
                let subs: Vec<Limiter> =
                    (0..k).map(|i| l.sub_bucket(i, k).expect("valid")).collect();
                assert_eq!(
                    subs.iter().map(Limiter::limit).sum::<u64>(),
                    limit,
                    "{a} {limit}/{k}"
                );
                assert!(subs.iter().all(|s| s.name() == a && s.period() == minute));
                let (lo, hi) = (limit / k, limit.div_ceil(k));
                assert!(subs.iter().all(|s| (lo..=hi).contains(&s.limit())));
            }
            let l = Limiter::new(a, 3, minute, None).expect("valid");
            assert!(l.sub_bucket(3, 4).is_err(), "a sub-bucket with nothing");
        }
        let b = Limiter::new(AlgorithmName::TokenBucket, 100, S, Some(30)).expect("valid");
        let bursts: u64 = (0..8)
            .map(|i| b.sub_bucket(i, 8).expect("valid").capacity())
            .sum();
        assert_eq!(bursts, 30, "the burst splits the same way");
    }

    proptest::proptest! {
        /// Any split adds up to the limit (and a bucket's burst) exactly,
        /// with every sub-bucket within one of an even share.
        #[test]
        fn any_split_adds_up(limit in 1u64..100_000, burst in 1u64..100_000, k in 2u64..=64) {
            let minute = Duration::from_secs(60);
            let l = Limiter::new(AlgorithmName::TokenBucket, limit, minute, Some(burst)).expect("valid");
            let subs: Result<Vec<Limiter>, _> = (0..k).map(|i| l.sub_bucket(i, k)).collect();
            match subs {
                Ok(subs) => {
                    proptest::prop_assert!(k <= limit && k <= burst);
                    proptest::prop_assert_eq!(subs.iter().map(Limiter::limit).sum::<u64>(), limit);
                    proptest::prop_assert_eq!(subs.iter().map(Limiter::capacity).sum::<u64>(), burst);
                    for s in &subs {
                        proptest::prop_assert!(s.limit() == limit / k || s.limit() == limit / k + 1);
                    }
                }
                Err(_) => proptest::prop_assert!(k > limit || k > burst),
            }
        }
    }

    #[test]
    fn a_refund_undoes_what_it_took_while_that_still_counts() {
        let w = Duration::from_secs(10);
        for a in AlgorithmName::ALL {
            let l = Limiter::new(a, 10, w, None).expect("valid");
            let t0 = Duration::from_secs(100);
            let (d, s) = l.decide(None, 6, t0);
            assert!(d.is_allowed());
            // Given back within the window: the key admits as if never taken.
            let back = l.refund(s.clone(), 6, t0, t0 + S);
            assert!(l.decide(Some(back), 10, t0 + S).0.is_allowed(), "{a}");
            // Half given back: only that half is free again.
            let half = l.refund(s.clone(), 3, t0, t0);
            assert!(l.decide(Some(half.clone()), 7, t0).0.is_allowed(), "{a}");
            assert!(!l.decide(Some(half), 8, t0).0.is_allowed(), "{a}");
        }
        // A fixed window that has ended is not given anything.
        let fw = Limiter::new(AlgorithmName::FixedWindow, 10, w, None).expect("valid");
        let (_, s) = fw.decide(None, 10, Duration::from_secs(105));
        let (_, later) = fw.decide(Some(s), 10, Duration::from_secs(112));
        let after = fw.refund(
            later.clone(),
            10,
            Duration::from_secs(105),
            Duration::from_secs(112),
        );
        assert_eq!(after, later, "the next window's count is untouched");
        // A token bucket never goes above full.
        let tb = Limiter::new(AlgorithmName::TokenBucket, 10, w, None).expect("valid");
        let (_, s) = tb.decide(None, 1, Duration::from_secs(100));
        let over = tb.refund(s, 50, Duration::from_secs(100), Duration::from_secs(100));
        assert!(!tb
            .decide(Some(over), 11, Duration::from_secs(100))
            .0
            .is_allowed());
    }

    #[test]
    fn a_give_back_lowers_what_counts_now_and_never_below_nothing() {
        let w = Duration::from_secs(10);
        let t = Duration::from_secs(100);
        for a in AlgorithmName::ALL {
            let l = Limiter::new(a, 10, w, None).expect("valid");
            // 14 hits each given back: never refused.
            let mut state = None;
            for i in 0..14u32 {
                let now = t + Duration::from_millis(u64::from(i) * 100);
                let (d, s) = l.decide(state, 1, now);
                assert!(d.is_allowed(), "{a}: request {i}");
                state = Some(l.give_back(s, 1, now));
            }
            // More given back than taken: the key is as good as empty.
            let (_, s) = l.decide(state, 4, t + S);
            let s = l.give_back(s, 50, t + S);
            assert!(l.decide(Some(s.clone()), 10, t + S).0.is_allowed(), "{a}");
            assert!(!l.decide(Some(s), 11, t + S).0.is_allowed(), "{a}");
        }
        // A sliding log gives back its newest entries.
        let sl = Limiter::new(AlgorithmName::SlidingLog, 10, w, None).expect("valid");
        let (_, s) = sl.decide(None, 5, t);
        let (_, s) = sl.decide(Some(s), 5, t + 5 * S);
        let s = sl.give_back(s, 5, t + 6 * S);
        assert_eq!(sl.in_window(Some(&s), t + 9 * S), 5);
        assert_eq!(
            sl.in_window(Some(&s), t + 10 * S),
            0,
            "the older five remain"
        );
        // A fixed window's refund in the next window finds nothing to give.
        let fw = Limiter::new(AlgorithmName::FixedWindow, 10, w, None).expect("valid");
        let (_, s) = fw.decide(None, 10, Duration::from_secs(109));
        let (_, s) = fw.decide(Some(s), 3, Duration::from_secs(110));
        let s = fw.give_back(s, 10, Duration::from_secs(110));
        assert!(fw
            .decide(Some(s.clone()), 10, Duration::from_secs(110))
            .0
            .is_allowed());
        assert!(!fw
            .decide(Some(s), 11, Duration::from_secs(110))
            .0
            .is_allowed());
    }

    #[test]
    fn names_round_trip() {
        for a in AlgorithmName::ALL {
            assert_eq!(a.as_str().parse::<AlgorithmName>(), Ok(a));
        }
        assert!("leaky_bucket".parse::<AlgorithmName>().is_err());
        assert_eq!(AlgorithmName::default(), AlgorithmName::FixedWindow);
    }

    #[test]
    fn burst_only_for_the_bucket() {
        assert_eq!(
            Limiter::new(AlgorithmName::SlidingLog, 5, S, Some(3)),
            Err(InvalidLimit::BurstWithoutBucket { burst: 3 })
        );
        let tb = Limiter::new(AlgorithmName::TokenBucket, 10, S, Some(3)).unwrap();
        assert_eq!((tb.limit(), tb.capacity(), tb.period()), (10, 3, S));
        let tb = Limiter::new(AlgorithmName::TokenBucket, 10, S, None).unwrap();
        assert_eq!(tb.capacity(), 10, "burst defaults to the limit");
    }

    #[test]
    fn log_limit_is_capped() {
        assert!(matches!(
            Limiter::new(AlgorithmName::SlidingLog, 1_001, S, None),
            Err(InvalidLimit::LogLimitTooLarge { .. })
        ));
    }

    #[test]
    fn dispatches_and_treats_foreign_state_as_absent() {
        for name in AlgorithmName::ALL {
            let l = Limiter::new(name, 2, S, None).unwrap();
            assert_eq!(l.name(), name);
            let (d1, s1) = l.decide(None, 2, S);
            assert!(d1.is_allowed());
            assert!(!l.decide(Some(s1.clone()), 1, S).0.is_allowed(), "{name}");
            assert!(l.expires_after(&s1, S) > Duration::ZERO);
            let foreign = if name == AlgorithmName::TokenBucket {
                LimiterState::FixedWindow(WindowCount {
                    window_start: S,
                    count: 2,
                })
            } else {
                LimiterState::TokenBucket(GcraState { tat: 100 * S })
            };
            assert_eq!(
                l.decide(Some(foreign.clone()), 1, S).0,
                l.decide(None, 1, S).0
            );
            assert_eq!(l.expires_after(&foreign, S), Duration::ZERO);
        }
    }

    #[test]
    fn only_a_fixed_window_waits_for_its_end_to_refill() {
        let s = Duration::from_secs(1);
        for (a, refills) in [
            (AlgorithmName::FixedWindow, false),
            (AlgorithmName::SlidingWindow, true),
            (AlgorithmName::SlidingLog, true),
            (AlgorithmName::TokenBucket, true),
            (AlgorithmName::Concurrency, true),
        ] {
            let l = Limiter::new(a, 10, s, None).expect("valid");
            assert_eq!(l.refills(), refills, "{a}");
        }
    }
}
