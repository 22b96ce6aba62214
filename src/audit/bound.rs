//! What each rule promises, in the terms the audit measures: the most it
//! may admit in a trailing window of its contract, and whether it may
//! refuse what the contract admits. The texts are the bounds that
//! docs/algorithms.md states for each algorithm.

use crate::limiter::AlgorithmName;

/// The facts of one audited limit that its bound depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitFacts {
    /// The algorithm (`fixed_window` for a rule in the original's
    /// vocabulary).
    pub algorithm: &'static str,
    /// Requests per window (a token bucket: its refill per period).
    pub limit: u64,
    /// The window or refill period in seconds.
    pub window_seconds: u64,
    /// A token bucket's burst.
    pub burst: Option<u64>,
    /// `shards` (1: not sharded).
    pub shards: u64,
    /// `lease: true`.
    pub lease: bool,
    /// A local-first window's over-admission allowance a window, `⌊ε·L⌋`
    /// (`LOCAL_FIRST_MAX_OVER` `ε`): at least `N·⌊ε·L/N⌋` for any instance
    /// count `N`. 0: decided at the store.
    pub local_first_over: u64,
}

impl LimitFacts {
    /// The facts as `/audit` shows them.
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::json!({
            "algorithm": self.algorithm,
            "limit": self.limit,
            "window_seconds": self.window_seconds,
            "shards": self.shards,
            "lease": self.lease,
        });
        if let (Some(burst), Some(map)) = (self.burst, v.as_object_mut()) {
            map.insert("burst".into(), burst.into());
        }
        if let (over @ 1.., Some(map)) = (self.local_first_over, v.as_object_mut()) {
            map.insert("local_first_over".into(), over.into());
        }
        v
    }
}

/// A limit's stated bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bound {
    /// The most the rule may admit in any trailing window of its contract
    /// (window algorithms); `None` for a token bucket, whose contract is
    /// its exact model, so that it may never admit what the model refuses.
    pub max_in_window: Option<u64>,
    /// Whether the rule may refuse what the contract admits.
    pub under_allowed: bool,
    /// The bound in words.
    pub text: String,
}

impl Bound {
    /// The bound of a limit with these facts.
    pub fn of(facts: &LimitFacts) -> Bound {
        let n = facts.limit;
        let algorithm = facts
            .algorithm
            .parse()
            .unwrap_or(AlgorithmName::FixedWindow);
        let (max_in_window, estimate, mut text) = match algorithm {
            AlgorithmName::FixedWindow if facts.local_first_over > 0 => (
                Some(n.saturating_add(facts.local_first_over).saturating_mul(2)),
                false,
                format!(
                    "local-first (sync_interval): at most limit + {} a window (N·⌊ε·limit/N⌋ \
                     over N instances), so up to 2 × that in a trailing window across a window \
                     boundary; a killed instance adds up to (N + 1)·⌊ε·limit/N⌋ to its window; \
                     never refuses what the window contract admits",
                    facts.local_first_over
                ),
            ),
            AlgorithmName::FixedWindow => (
                Some(n.saturating_mul(2)),
                false,
                "up to 2 × limit in a trailing window across a window boundary; never refuses \
                 what the window contract admits"
                    .to_string(),
            ),
            AlgorithmName::SlidingWindow => (
                Some(n.saturating_mul(2).saturating_sub(1).max(n)),
                true,
                "the estimate is at most limit − 1 above an exact log in any window, and below \
                 it when the previous window's traffic came early (under)"
                    .to_string(),
            ),
            AlgorithmName::SlidingLog => (Some(n), false, "exact".to_string()),
            AlgorithmName::TokenBucket => {
                (None, false, "exact: the bucket model itself".to_string())
            }
            AlgorithmName::Concurrency => (
                None,
                false,
                "exact: the slots model itself, given back by refunds and after max_duration"
                    .to_string(),
            ),
        };
        if facts.shards > 1 {
            text.push_str(
                "; sharded: never above the limit, and a request can be refused while another \
                 sub-bucket has room (under; at 2 × the limit offered uniformly, at least 95 % \
                 of it is admitted)",
            );
        }
        if facts.lease {
            text.push_str(
                "; leased: never above the limit; refusals while other instances hold leases \
                 (under), at most instances × largest batch",
            );
        }
        Bound {
            max_in_window,
            under_allowed: estimate || facts.shards > 1 || facts.lease,
            text,
        }
    }

    /// The bound as `/audit` shows it.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "max_in_window": self.max_in_window,
            "under_allowed": self.under_allowed,
            "text": self.text,
        })
    }

    /// Whether what was measured is within this bound: the peak admitted in
    /// a trailing window at most `max_in_window` (a bucket: no over at
    /// all), and no under unless allowed.
    pub fn holds(&self, peak_in_window: u64, over: u64, under: u64) -> bool {
        let over_ok = match self.max_in_window {
            Some(max) => peak_in_window <= max,
            None => over == 0,
        };
        over_ok && (self.under_allowed || under == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(algorithm: &'static str, shards: u64, lease: bool) -> LimitFacts {
        LimitFacts {
            algorithm,
            limit: 10,
            window_seconds: 1,
            burst: None,
            shards,
            lease,
            local_first_over: 0,
        }
    }

    #[test]
    fn each_algorithm_states_its_bound() {
        let fixed = Bound::of(&facts("fixed_window", 1, false));
        assert_eq!(fixed.max_in_window, Some(20));
        assert!(!fixed.under_allowed);
        assert!(fixed.holds(20, 10, 0));
        assert!(!fixed.holds(21, 11, 0));
        assert!(!fixed.holds(10, 0, 1));

        let sliding = Bound::of(&facts("sliding_window", 1, false));
        assert_eq!(sliding.max_in_window, Some(19));
        assert!(sliding.holds(19, 3, 5));
        assert!(!sliding.holds(20, 3, 0));

        let log = Bound::of(&facts("sliding_log", 1, false));
        assert_eq!(log.max_in_window, Some(10));
        assert!(log.holds(10, 0, 0));
        assert!(!log.holds(11, 1, 0));

        let bucket = Bound::of(&facts("token_bucket", 1, false));
        assert_eq!(bucket.max_in_window, None);
        assert!(bucket.holds(0, 0, 0));
        assert!(!bucket.holds(0, 1, 0));
    }

    #[test]
    fn a_local_first_window_may_admit_its_allowance_more_a_window() {
        let b = Bound::of(&LimitFacts {
            local_first_over: 1,
            ..facts("fixed_window", 1, false)
        });
        assert_eq!(b.max_in_window, Some(22));
        assert!(
            !b.under_allowed,
            "it never refuses what the contract admits"
        );
        assert!(b.holds(22, 12, 0));
        assert!(!b.holds(23, 13, 0));
        assert!(b.text.contains("limit + 1 a window"), "{}", b.text);
    }

    #[test]
    fn shards_and_leases_may_refuse_what_the_contract_admits() {
        for (shards, lease) in [(4, false), (1, true), (4, true)] {
            let b = Bound::of(&facts("token_bucket", shards, lease));
            assert!(b.under_allowed);
            assert!(b.holds(0, 0, 100));
            assert!(!b.holds(0, 1, 0), "but never over");
        }
    }
}
