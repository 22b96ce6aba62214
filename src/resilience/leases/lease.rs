//! Token leasing, the pure part: how big a batch to take for a key, how
//! soon to take the next one when the store is short, how long a lease
//! lives, and spending it. The layer that takes and returns batches through
//! the store is [`super::Leases`].
//!
//! # The bound
//!
//! A batch is taken from the store in one atomic admission of `batch`
//! tokens, as one request of that cost would be, so what a fleet admits
//! never exceeds the algorithm's own bound (a fixed window's limit per
//! window, a token bucket's burst + rate × elapsed, a sliding window's
//! estimate): every token spent from a lease was admitted by the store
//! first. What leasing costs is the other direction, and it is bounded by
//! `instances × largest batch` per window or refill period, where the
//! largest batch is `⌊LEASE_MAX_SHARE × capacity⌋` of the limit (of a
//! sub-bucket, if sharded):
//! - tokens that sit unspent in some instance's lease are not available to
//!   the others. They go back to the store when a lease ends (after
//!   `LEASE_TTL`, at the end of the window or refill period it was taken
//!   from, whichever is first) and on shutdown; an instance killed with
//!   SIGKILL strands at most its batch until the window ends or the bucket
//!   refills;
//! - a take is all or nothing, so a key whose store has less than a batch
//!   left refuses locally until the store says a batch can be granted
//!   (the retry of the refused take): at most a batch per instance is left
//!   unclaimed that way;
//! - while the store is short ([`next_take`]), an instance takes at the
//!   pace of what it was granted, so the fleet's takes follow the refill
//!   instead of racing for every token. A store that gathers a batch to
//!   spare ends the pacing on the next take.

use std::time::Duration;

use crate::limiter::{Decision, Limiter};

/// The settings of leasing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LeaseOptions {
    /// `LEASE_MIN_RATE`: a key this instance decides fewer times per second
    /// is not leased.
    pub min_rate: u64,
    /// `LEASE_DURATION`: a batch covers this much of the key's measured
    /// traffic on this instance.
    pub duration: Duration,
    /// `LEASE_TTL`: the longest a lease lives.
    pub ttl: Duration,
    /// `LEASE_MAX_SHARE`: the largest batch as a share of the limit's
    /// capacity.
    pub max_share: f64,
    /// `LOCAL_FIRST_MAX_OVER`: the over-admission a local-first window may
    /// reach, as a share of its limit (`ε` in [`super::local`]).
    pub max_over: f64,
    /// `MEMORY_MAX_KEYS`: the most keys with a local-first view.
    pub max_views: usize,
}

impl Default for LeaseOptions {
    fn default() -> LeaseOptions {
        LeaseOptions {
            min_rate: 100,
            duration: Duration::from_millis(100),
            ttl: Duration::from_secs(1),
            max_share: 0.05,
            max_over: 0.01,
            max_views: crate::store::memory::DEFAULT_MAX_KEYS,
        }
    }
}

impl LeaseOptions {
    /// The batch to take for a key decided `rate` times a second on this
    /// instance, for a request of `cost`, under a limit of `capacity`:
    /// `rate × duration × cost`, at most `⌊max_share × capacity⌋`; the
    /// largest batch when the store is `short` (the key is in overload:
    /// whatever is granted is spent at once, so a larger batch costs no
    /// unspent tokens, only fewer store calls). `None` when the key is cold
    /// (`rate < min_rate`) or the batch would not cover more than this one
    /// request.
    pub fn batch(&self, rate: u64, cost: u64, capacity: u64, short: bool) -> Option<u64> {
        if rate < self.min_rate || cost == 0 {
            return None;
        }
        let most = self.largest_batch(capacity);
        let want = (rate as f64 * self.duration.as_secs_f64()).ceil() as u64;
        let batch = if short {
            most
        } else {
            want.saturating_mul(cost).min(most)
        };
        (batch > cost).then_some(batch)
    }

    /// The largest batch for a limit of `capacity`: what one instance can
    /// hold unspent at a time.
    pub fn largest_batch(&self, capacity: u64) -> u64 {
        (capacity as f64 * self.max_share.clamp(0.0, 1.0)).floor() as u64
    }
}

/// The end, in store time, of what a lease taken at store time `at` from
/// `limiter` may live in: the window it was taken from (fixed and sliding
/// windows), or one refill period (the token bucket: past it, tokens the
/// lease holds would be the bucket's again anyway).
pub fn taken_until(limiter: &Limiter, at: Duration) -> Duration {
    let period = limiter.period();
    match limiter {
        Limiter::TokenBucket(_) => at + period,
        _ => {
            let w = period.as_nanos().max(1);
            let start = at.as_nanos() - at.as_nanos() % w;
            let end = start + w;
            Duration::new(
                u64::try_from(end / 1_000_000_000).unwrap_or(u64::MAX),
                u32::try_from(end % 1_000_000_000).unwrap_or(0),
            )
        }
    }
}

/// When an instance that took its last batch at `last_take` may take a
/// batch of `batch` tokens again while the store is short, having been
/// granted `granted_rate` tokens a second: after `batch / granted_rate`,
/// the time its own share of the refill takes to gather a batch, and never
/// later than `ttl` after the last take (so that an instance the others
/// crowded out still asks at least that often). An instance granted
/// nothing yet is not paced: the store's retry alone decides.
///
/// Paced so, instances whose grants add up to the refill take a batch each
/// when one has gathered for them, one store call a batch, instead of all
/// asking whenever the key refills a little.
pub fn next_take(last_take: Duration, batch: u64, granted_rate: u64, ttl: Duration) -> Duration {
    if granted_rate == 0 {
        return last_take;
    }
    let pace = Duration::from_secs_f64(batch as f64 / granted_rate as f64).min(ttl);
    last_take + pace
}

/// Tokens this instance holds for one key. Times are of the local clock,
/// except `taken_at`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Lease {
    /// Unspent tokens.
    pub tokens: u64,
    /// The store's clock at the take (what a refund names).
    pub taken_at: Duration,
    /// When it ends: the take plus `LEASE_TTL`, or the end of the window or
    /// refill period taken from, whichever is first.
    pub ends_at: Duration,
    /// What the store had left right after the take.
    pub store_remaining: u64,
    /// When the key would be full again, as of the take.
    pub resets_at: Duration,
}

impl Lease {
    /// The lease of `batch` tokens that the store admitted with `decision`
    /// at store time `at` (local time `now`), of which this request spent
    /// `cost`.
    pub fn taken(
        options: &LeaseOptions,
        limiter: &Limiter,
        batch: u64,
        cost: u64,
        decision: &Decision,
        at: Duration,
        now: Duration,
    ) -> Lease {
        let lives = options.ttl.min(taken_until(limiter, at).saturating_sub(at));
        Lease {
            tokens: batch.saturating_sub(cost),
            taken_at: at,
            ends_at: now + lives,
            store_remaining: decision.remaining(),
            resets_at: now + decision.reset_after(),
        }
    }

    /// Whether it may still be spent at `now`.
    pub fn is_live(&self, now: Duration) -> bool {
        now < self.ends_at
    }

    /// Spends `cost` at `now` if the lease is live and holds that much;
    /// the decision to answer with: what the store had left at the take
    /// plus what this lease still holds (an instance cannot see the other
    /// instances' leases).
    pub fn spend(&mut self, cost: u64, now: Duration) -> Option<Decision> {
        if !self.is_live(now) || self.tokens < cost {
            return None;
        }
        self.tokens -= cost;
        Some(Decision::Allow {
            remaining: self.store_remaining.saturating_add(self.tokens),
            reset_after: self.resets_at.saturating_sub(now),
        })
    }

    /// Undoes a [`Lease::spend`] of `cost` whose request was not committed.
    pub fn unspend(&mut self, cost: u64) {
        self.tokens = self.tokens.saturating_add(cost);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::AlgorithmName;
    use proptest::prelude::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn the_defaults_lease_a_key_seen_500_times_a_second() {
        let o = LeaseOptions::default();
        assert_eq!(o.batch(500, 1, 100_000, false), Some(50));
        assert_eq!(o.batch(99, 1, 100_000, false), None, "cold");
        assert_eq!(
            o.batch(500, 1, 200, false),
            Some(10),
            "at most 5 % of the limit"
        );
        assert_eq!(
            o.batch(500, 1, 20, false),
            None,
            "a batch of one is no lease"
        );
        assert_eq!(
            o.batch(500, 3, 100_000, false),
            Some(150),
            "weighted requests"
        );
        assert_eq!(
            o.batch(500, 1, 100_000, true),
            Some(5_000),
            "in overload, the largest"
        );
        assert_eq!(o.batch(99, 1, 100_000, true), None, "still cold");
    }

    #[test]
    fn a_short_store_is_asked_at_the_pace_of_what_it_granted() {
        let at = 100 * S;
        // Granted 100 tokens a second: a batch of 10 every 100 ms.
        assert_eq!(next_take(at, 10, 100, S), at + S / 10);
        // Crowded out (1 token a second): still once a LEASE_TTL.
        assert_eq!(next_take(at, 10, 1, S), at + S);
        // Granted nothing yet: the store's retry alone decides.
        assert_eq!(next_take(at, 10, 0, S), at);
    }

    #[test]
    fn a_lease_never_outlives_its_window() {
        let o = LeaseOptions::default();
        let fw = Limiter::new(AlgorithmName::FixedWindow, 1000, 60 * S, None).expect("valid");
        let allow = Decision::Allow {
            remaining: 900,
            reset_after: 30 * S,
        };
        // Taken 200 ms before the window ends: it ends with the window.
        let at = Duration::from_secs(119) + Duration::from_millis(800);
        let l = Lease::taken(&o, &fw, 50, 1, &allow, at, 10 * S);
        assert_eq!(l.ends_at, 10 * S + Duration::from_millis(200));
        assert_eq!(l.tokens, 49);
        // Early in the window: LEASE_TTL.
        let l = Lease::taken(&o, &fw, 50, 1, &allow, Duration::from_secs(61), 10 * S);
        assert_eq!(l.ends_at, 11 * S);
        let tb = Limiter::new(AlgorithmName::TokenBucket, 10, S / 2, None).expect("valid");
        let l = Lease::taken(&o, &tb, 5, 1, &allow, Duration::from_secs(61), 10 * S);
        assert_eq!(l.ends_at, 10 * S + S / 2, "one refill period");
    }

    proptest! {
        /// Spending never hands out more than the batch, and nothing once
        /// the lease has ended.
        #[test]
        fn spends_at_most_the_batch(batch in 2u64..200, costs in prop::collection::vec((1u64..5, 0u64..300), 1..100)) {
            let o = LeaseOptions::default();
            let fw = Limiter::new(AlgorithmName::FixedWindow, 10_000, 60 * S, None).expect("valid");
            let allow = Decision::Allow { remaining: 0, reset_after: S };
            let mut lease = Lease::taken(&o, &fw, batch, 1, &allow, 60 * S, 100 * S);
            let mut spent = 1;
            let mut now = 100 * S;
            for (cost, step_ms) in costs {
                now += Duration::from_millis(step_ms);
                if let Some(d) = lease.spend(cost, now) {
                    prop_assert!(d.is_allowed() && now < lease.ends_at);
                    spent += cost;
                }
                prop_assert_eq!(spent + lease.tokens, batch);
            }
            prop_assert!(spent <= batch);
        }

        /// The batch is within its bounds for every input.
        #[test]
        fn batches_stay_within_the_share(rate in 0u64..1_000_000, cost in 0u64..10, capacity in 0u64..10_000_000, short: bool) {
            let o = LeaseOptions::default();
            if let Some(b) = o.batch(rate, cost, capacity, short) {
                prop_assert!(b > cost && b <= o.largest_batch(capacity));
                prop_assert!(rate >= o.min_rate);
            }
        }

        /// The pace never waits past `ttl`, and a higher grant never waits
        /// longer.
        #[test]
        fn the_pace_is_bounded_and_monotone(batch in 1u64..10_000, rate in 1u64..100_000, more in 0u64..1_000) {
            let at = 100 * S;
            let slow = next_take(at, batch, rate, S);
            let fast = next_take(at, batch, rate + more, S);
            prop_assert!(slow >= at && slow <= at + S);
            prop_assert!(fast <= slow);
        }
    }
}
