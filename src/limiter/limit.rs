//! One configured limit of any algorithm: what the config builds from a
//! `rate_limit` block and what the stores run, so that neither has to know
//! the algorithms one by one.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use super::algorithm::Algorithm;
use super::gcra::{Gcra, GcraState};
use super::sliding_log::{SlidingLog, SlidingLogState};
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
}

impl AlgorithmName {
    /// Every name, as written in the YAML.
    pub const ALL: [AlgorithmName; 4] = [
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
        }
    }

    /// Two letters for store keys (keys are a real share of store memory).
    pub fn key_tag(self) -> &'static str {
        match self {
            AlgorithmName::FixedWindow => "fw",
            AlgorithmName::SlidingWindow => "sw",
            AlgorithmName::TokenBucket => "tb",
            AlgorithmName::SlidingLog => "sl",
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
}

impl Limiter {
    /// `limit` per `period` with `algorithm`; `burst` is the token bucket's
    /// capacity (default `limit`) and is refused for the others.
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
        })
    }

    /// Which algorithm this is.
    pub fn name(&self) -> AlgorithmName {
        match self {
            Limiter::FixedWindow(_) => AlgorithmName::FixedWindow,
            Limiter::SlidingWindow(_) => AlgorithmName::SlidingWindow,
            Limiter::TokenBucket(_) => AlgorithmName::TokenBucket,
            Limiter::SlidingLog(_) => AlgorithmName::SlidingLog,
        }
    }

    /// Its limit per window (for the token bucket: the refill rate).
    pub fn rate(&self) -> PerWindow {
        match self {
            Limiter::FixedWindow(a) => a.rate(),
            Limiter::SlidingWindow(a) => a.rate(),
            Limiter::TokenBucket(a) => a.rate(),
            Limiter::SlidingLog(a) => a.rate(),
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
        }
    }

    /// Zero for a state of another algorithm (it is as good as absent).
    fn expires_after(&self, state: &LimiterState, now: Duration) -> Duration {
        match (self, state) {
            (Limiter::FixedWindow(a), LimiterState::FixedWindow(s)) => a.expires_after(s, now),
            (Limiter::SlidingWindow(a), LimiterState::SlidingWindow(s)) => a.expires_after(s, now),
            (Limiter::TokenBucket(a), LimiterState::TokenBucket(s)) => a.expires_after(s, now),
            (Limiter::SlidingLog(a), LimiterState::SlidingLog(s)) => a.expires_after(s, now),
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
}
