//! Token bucket as GCRA (the generic cell rate algorithm): `limit` per
//! `period`, bursts up to `burst`.
//!
//! # Why GCRA
//!
//! A token bucket needs two values per key (tokens, last refill) and a
//! multiplication to refill them. GCRA keeps **one timestamp per key**, the
//! theoretical arrival time (TAT): the instant at which the bucket would be
//! full again. One integer plus the key fits the ≈ 100 bytes per active key
//! of the Redis sizing, and there is nothing to refill: time passing *is*
//! the refill, so there are no timers and a key whose TAT has passed is the
//! same as an absent one (its TTL is `TAT − now`).
//!
//! # The rule
//!
//! With emission interval `T = period / limit` (the time one token takes to
//! come back):
//!
//! ```text
//! new_tat = max(TAT, now) + cost × T
//! admit  ⇔  new_tat − now ≤ burst × T        (then TAT := new_tat)
//! ```
//!
//! # Equivalence to a token bucket
//!
//! Read `tokens(now) = burst − max(TAT − now, 0) / T`. Then the rule is
//! exactly a token bucket of capacity `burst` refilled lazily at
//! `r = limit / period`: time passing shrinks `TAT − now`, i.e. adds `r`
//! tokens per unit of time, and once `TAT ≤ now` the bucket is full and stays
//! full (`max`); admitting moves TAT by `cost × T`, i.e. takes `cost` tokens;
//! and `new_tat − now ≤ burst × T` is `tokens(now) ≥ cost`. The tests check
//! this decision by decision against a lazily refilled bucket (with `T` a
//! whole number of nanoseconds; otherwise see the rounding below).
//!
//! # Bound
//!
//! In any time interval `[a, b]`, the admitted cost is at most
//! `burst + (b − a) × limit / period`. This holds exactly, not just up to
//! rounding, and also when `now` goes backwards (no clamp is needed: a `now`
//! before TAT only makes `new_tat − now` larger):
//!
//! - `T` need not be a whole number of nanoseconds, so comparisons are done
//!   in integers scaled by `limit` (with `d = max(TAT − now, 0)`, admit iff
//!   `d ≤ ⌊(burst − cost) × period / limit⌋`, exact since `d` is whole
//!   nanoseconds).
//! - The stored TAT is whole nanoseconds: `cost × T` is rounded **up**, which
//!   only ever delays later requests, by under 1 ns per admitted request: a
//!   sustained rate below the exact one by less than `1 ns / T` relative
//!   (10⁻⁶ at 1,000 per second). It matters only as `T` nears 1 ns (10⁹
//!   per second and up), where every admitted request takes at least 1 ns of
//!   the burst tolerance. For the same reason a cost-0 query is always
//!   allowed rather than compared: right after a full burst the rounded TAT
//!   can sit up to 1 ns past `burst × T`.
//!
//! Validity: `period` is at most `u64::MAX` ns and a full refill
//! `burst × T` at most `u64::MAX` ns (about 584 years), so every product
//! fits `u128`. A TAT past [`Duration::MAX`] (only reachable with `now`
//! within 584 years of it, some 5.8 × 10¹¹ years from now) saturates.

use std::time::Duration;

use super::decision::{from_nanos, InvalidLimit, MAX_WINDOW};
use super::per_window::PerWindow;
use super::Decision;

/// A GCRA limit: `limit` per `period`, with bursts up to `burst`.
///
/// Invariants (checked by the constructors): `1 ≤ period ≤ u64::MAX` ns;
/// `limit = 0` implies `burst = 0` (a closed limit: nothing with a cost is
/// ever admitted); `burst × period / limit ≤ u64::MAX` ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gcra {
    /// Tokens per period (`window` here is the period).
    rate: PerWindow,
    /// The bucket's capacity: the most that can be admitted at one instant.
    burst: u64,
}

/// The state of one key: its theoretical arrival time. Any TAT at or before
/// `now` means a full bucket, the same as an absent key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GcraState {
    /// When the bucket is full again, since the Unix epoch.
    pub tat: Duration,
}

impl Gcra {
    /// `limit` per `period`, with the burst equal to the limit (a full
    /// period's worth at once, as a fixed window allows).
    pub fn new(limit: u64, period: Duration) -> Result<Gcra, InvalidLimit> {
        Gcra::with_burst(limit, period, limit)
    }

    /// `limit` per `period`, with bursts up to `burst`.
    pub fn with_burst(limit: u64, period: Duration, burst: u64) -> Result<Gcra, InvalidLimit> {
        let rate = PerWindow::new(limit, period)?;
        if limit == 0 {
            if burst > 0 {
                return Err(InvalidLimit::BurstWithoutRate { burst });
            }
        } else {
            let refill =
                (u128::from(burst) * u128::from(rate.window_ns)).div_ceil(u128::from(limit));
            if refill > u128::from(u64::MAX) {
                return Err(InvalidLimit::RefillTooLong {
                    burst,
                    limit,
                    period,
                    max: MAX_WINDOW,
                });
            }
        }
        Ok(Gcra { rate, burst })
    }

    /// Tokens per period: the refill rate.
    pub fn rate(&self) -> PerWindow {
        self.rate
    }

    /// The bucket's capacity.
    pub fn burst(&self) -> u64 {
        self.burst
    }

    /// Decides a request of `cost` tokens at `now`; `state` is `None` for an
    /// absent (or expired) key. Returns the decision and the state to store:
    /// on a denial the state is unchanged (a fresh key's state is
    /// `tat = now`, which is equivalent to absent).
    ///
    /// A cost of 0 asks without taking anything and is always allowed. A
    /// cost above the burst is [`Decision::ExceedsCapacity`]. Never panics
    /// or overflows.
    pub fn decide(
        &self,
        state: Option<GcraState>,
        cost: u64,
        now: Duration,
    ) -> (Decision, GcraState) {
        let now_ns = now.as_nanos();
        let state = state.unwrap_or(GcraState { tat: now });
        let tat = state.tat.as_nanos();
        // How far the bucket is below full, in time: (TAT − now)⁺.
        let debt = tat.saturating_sub(now_ns);
        if cost > self.burst {
            let decision = Decision::ExceedsCapacity {
                capacity: self.burst,
                reset_after: from_nanos(debt),
            };
            return (decision, state);
        }
        if cost == 0 {
            // A question, not a request: nothing to take, so nothing to deny
            // (the rounded-up TAT can sit up to 1 ns past `burst × T`).
            let decision = Decision::Allow {
                remaining: self.free(debt),
                reset_after: from_nanos(debt),
            };
            return (decision, state);
        }
        // Admit iff debt + cost × T ≤ burst × T, i.e. debt ≤ (burst − cost) × T;
        // debt is whole nanoseconds, so rounding the right side down is exact.
        let tolerance = self.span_floor(self.burst - cost);
        if debt <= tolerance {
            // Rounded up: the stored TAT never owes less than the exact one.
            let new_tat = tat.max(now_ns).saturating_add(self.span_ceil(cost));
            let new_debt = new_tat - now_ns;
            let decision = Decision::Allow {
                remaining: self.free(new_debt),
                reset_after: from_nanos(new_debt),
            };
            (
                decision,
                GcraState {
                    tat: from_nanos(new_tat),
                },
            )
        } else {
            // debt > tolerance ≥ 0, so TAT > now and the least `now'` with
            // TAT − now' ≤ tolerance is TAT − tolerance, which is after now.
            let decision = Decision::Deny {
                retry_after: from_nanos(debt - tolerance),
                reset_after: from_nanos(debt),
            };
            (decision, state)
        }
    }

    /// `state` with `cost` tokens taken at `now` whatever the bucket holds:
    /// an admission decided elsewhere, which the decision audit's reference
    /// follows. TAT moves forward as an admission moves it, from `now` if
    /// it had passed, so a bucket in debt stays in debt for as long as the
    /// exact model says.
    pub fn record(&self, state: Option<GcraState>, cost: u64, now: Duration) -> GcraState {
        let tat = state.map_or(now, |s| s.tat).as_nanos().max(now.as_nanos());
        GcraState {
            tat: from_nanos(tat.saturating_add(self.span_ceil(cost))),
        }
    }

    /// `state` with `cost` tokens given back at `now` (tokens an admission
    /// took and nobody used): TAT moves back by exactly what admitting
    /// `cost` moved it forward, and no further than `now` (a full bucket).
    /// So the bucket never holds more than it would had the cost never
    /// been taken.
    pub fn refund(&self, state: GcraState, cost: u64, now: Duration) -> GcraState {
        let tat = state.tat.as_nanos().saturating_sub(self.span_ceil(cost));
        GcraState {
            tat: from_nanos(tat.max(now.as_nanos())),
        }
    }

    /// The TTL for `state` written at `now`: from `now + expires_after` on,
    /// deciding on the stored state and on an absent key give the same
    /// decision and the same new state, so the store may drop it. It is
    /// `TAT − now` (zero if TAT has passed), at most one full refill
    /// `burst × T` after an admission. Stores round it up to their TTL
    /// granularity.
    pub fn expires_after(&self, state: &GcraState, now: Duration) -> Duration {
        from_nanos(state.tat.as_nanos().saturating_sub(now.as_nanos()))
    }

    /// `⌊units × T⌋` in nanoseconds. With `limit = 0` the burst is 0, so
    /// `units` is 0 here.
    fn span_floor(&self, units: u64) -> u128 {
        if self.rate.limit == 0 {
            return 0;
        }
        // < 2¹²⁸: both factors are below 2⁶⁴.
        u128::from(units) * u128::from(self.rate.window_ns) / u128::from(self.rate.limit)
    }

    /// `⌈units × T⌉` in nanoseconds (see [`Gcra::span_floor`]).
    fn span_ceil(&self, units: u64) -> u128 {
        if self.rate.limit == 0 {
            return 0;
        }
        (u128::from(units) * u128::from(self.rate.window_ns)).div_ceil(u128::from(self.rate.limit))
    }

    /// The largest `k` with `debt ≤ ⌊(burst − k) × T⌋`: `burst − ⌈debt / T⌉`,
    /// or 0.
    fn free(&self, debt: u128) -> u64 {
        if self.rate.limit == 0 {
            return 0;
        }
        // If debt × limit overflows, debt is far above burst × T (< 2¹²⁸).
        match debt.checked_mul(u128::from(self.rate.limit)) {
            Some(scaled) => {
                let owed = scaled.div_ceil(u128::from(self.rate.window_ns));
                u64::try_from(u128::from(self.burst).saturating_sub(owed)).unwrap_or(0)
            }
            None => 0,
        }
    }
}

#[cfg(test)]
mod tests;
