//! What a rule gives RLQS to split ([`Quota`]), and a share of it in the
//! form Envoy's `rate_limit_quota` filter runs ([`EnvoyBucket`]).

use crate::config::RateLimitRule;

/// What a rule's bucket gets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Quota {
    /// Every request passes (`unlimited`, `shadow_mode`, no rule).
    AllowAll,
    /// Every request is refused (a limit of 0).
    DenyAll,
    /// `per_second` split between the Envoys; a share `s` may burst to
    /// `burst × s / per_second` (at least its tokens per fill).
    Rate {
        /// The rule's rate, requests per second.
        per_second: f64,
        /// The rule's burst (a token bucket's; 0 for a window, whose share
        /// bursts to one fill).
        burst: f64,
    },
}

impl Quota {
    /// The quota of `rule`: a window's limit per its length as a rate; a
    /// token bucket's rate and burst; with several limits, the strictest
    /// rate (and its burst).
    pub fn of(rule: &RateLimitRule) -> Quota {
        if rule.unlimited || rule.shadow_mode {
            return Quota::AllowAll;
        }
        if rule.limits.is_empty() {
            let Some(secs) = rule.unit.seconds() else {
                return Quota::AllowAll;
            };
            if rule.requests_per_unit == 0 {
                return Quota::DenyAll;
            }
            return Quota::Rate {
                per_second: f64::from(rule.requests_per_unit) / secs as f64,
                burst: 0.0,
            };
        }
        let mut strictest: Option<(f64, f64)> = None;
        for l in &rule.limits {
            if l.limiter.limit() == 0 {
                return Quota::DenyAll;
            }
            let rate = l.limiter.limit() as f64 / l.limiter.period().as_secs_f64();
            let burst = match l.limiter {
                crate::limiter::Limiter::TokenBucket(_) => l.limiter.capacity() as f64,
                _ => 0.0,
            };
            if strictest.is_none_or(|(r, _)| rate < r) {
                strictest = Some((rate, burst));
            }
        }
        match strictest {
            Some((per_second, burst)) => Quota::Rate { per_second, burst },
            None => Quota::AllowAll,
        }
    }
}

/// A token bucket as Envoy's filter runs it: `tokens_per_fill` tokens every
/// `fill_interval_secs` whole seconds, holding at most `max_tokens`, and
/// full when it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EnvoyBucket {
    /// At least 1, at least `tokens_per_fill`.
    pub max_tokens: u32,
    /// At least 1.
    pub tokens_per_fill: u32,
    /// Whole seconds, 1 to 60.
    pub fill_interval_secs: u32,
}

/// The longest fill interval tried, in seconds.
const MAX_FILL_SECS: u32 = 60;

impl EnvoyBucket {
    /// The bucket for a share of `rate` requests per second that may burst
    /// to `burst`: the shortest fill interval (1 to 60 s) whose whole
    /// tokens come within 2 % of `rate` without passing it, else the one
    /// that comes closest. A short interval keeps the bucket small: Envoy
    /// starts it full. Below one token a minute it is one token a minute,
    /// the least the filter can run.
    pub fn for_rate(rate: f64, burst: f64) -> EnvoyBucket {
        let rate = if rate.is_finite() { rate.max(0.0) } else { 0.0 };
        let mut best: Option<(f64, u32, u32)> = None;
        for secs in 1..=MAX_FILL_SECS {
            let tokens = (rate * f64::from(secs) + 1e-9).floor();
            if tokens < 1.0 {
                continue;
            }
            let tokens = tokens.min(f64::from(u32::MAX)) as u32;
            let error = rate - f64::from(tokens) / f64::from(secs);
            if best.is_none_or(|(e, _, _)| error < e - 1e-12) {
                best = Some((error, tokens, secs));
            }
            if error <= rate * 0.02 {
                break;
            }
        }
        let (tokens_per_fill, fill_interval_secs) =
            best.map_or((1, MAX_FILL_SECS), |(_, t, s)| (t, s));
        let burst = if burst.is_finite() {
            burst.max(0.0)
        } else {
            0.0
        };
        let max_tokens = (burst.floor().min(f64::from(u32::MAX)) as u32).max(tokens_per_fill);
        EnvoyBucket {
            max_tokens,
            tokens_per_fill,
            fill_interval_secs,
        }
    }

    /// Its rate, requests per second.
    pub fn rate(&self) -> f64 {
        f64::from(self.tokens_per_fill) / f64::from(self.fill_interval_secs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_share_becomes_whole_seconds_and_whole_tokens() {
        // 43 a second is within 2 %.
        let b = EnvoyBucket::for_rate(43.75, 0.0);
        assert_eq!((b.tokens_per_fill, b.fill_interval_secs), (43, 1));
        assert_eq!(b.max_tokens, 43);
        let b = EnvoyBucket::for_rate(2.5, 0.0);
        assert_eq!((b.tokens_per_fill, b.fill_interval_secs), (5, 2));
        // 100 per minute split three ways: 5 tokens every 9 s.
        let b = EnvoyBucket::for_rate(100.0 / 60.0 / 3.0, 0.0);
        assert_eq!((b.tokens_per_fill, b.fill_interval_secs), (5, 9));
        let b = EnvoyBucket::for_rate(0.001, 0.0);
        assert_eq!(
            (b.tokens_per_fill, b.fill_interval_secs, b.max_tokens),
            (1, 60, 1)
        );
        assert_eq!(EnvoyBucket::for_rate(10.0, 40.0).max_tokens, 40);
    }

    proptest! {
        /// Never above the share (from one token a minute up), always a
        /// bucket the filter accepts.
        #[test]
        fn never_above_the_share(rate in 1.0f64 / 60.0..1e6, burst in 0.0f64..1e6) {
            let b = EnvoyBucket::for_rate(rate, burst);
            prop_assert!(b.tokens_per_fill >= 1 && b.max_tokens >= b.tokens_per_fill);
            prop_assert!((1..=60).contains(&b.fill_interval_secs));
            prop_assert!(b.rate() <= rate * (1.0 + 1e-9));
            // Within one token per fill interval of it.
            prop_assert!(rate - b.rate() <= 1.0 / f64::from(b.fill_interval_secs) + 1e-9);
        }
    }
}
