//! What an algorithm answers for one request, and the one way an algorithm
//! can fail: being built from parameters it cannot honour.
//!
//! "Over limit" is a [`Decision`], never an error: every call to an
//! algorithm's `decide` decides. [`InvalidLimit`] is returned only by the
//! constructors, i.e. at config validation, never per request.
//!
//! Time throughout the limiter is a [`Duration`] since the Unix epoch with
//! nanosecond precision. Internally the algorithms compute in `u128`
//! nanoseconds, where every `Duration` fits (`Duration::MAX` is about
//! 1.8 × 10²⁸ ns < 2¹⁰⁰), and windows are limited to `u64::MAX` ns (about
//! 584 years) so that a product of a window and a `u64` count fits in `u128`
//! exactly. That is what makes the arithmetic free of overflow and of
//! rounding for every input.

use std::time::Duration;

/// The answer for one request of some cost at some `now`.
///
/// `reset_after`, in every variant: the time from `now` until the key, with
/// no further traffic, is as good as absent (full capacity again); zero when
/// it already is. It is the same value the algorithm's `expires_after` gives
/// for the returned state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Admitted: the cost is counted in the returned state.
    Allow {
        /// How many more unit-cost requests would be admitted at the same
        /// `now`. Exact: right after this decision, a request of cost
        /// `remaining` is admitted and one of `remaining + 1` is not.
        remaining: u64,
        /// Until the key is back to full capacity (see the type's doc).
        reset_after: Duration,
    },
    /// Not admitted now; nothing was counted.
    Deny {
        /// Always greater than zero. The least wait after which the same
        /// request, with no other traffic in between, is admitted: at
        /// `now + retry_after` it is, 1 ns earlier it is not.
        retry_after: Duration,
        /// Until the key is back to full capacity (see the type's doc).
        reset_after: Duration,
    },
    /// Never admittable: the cost is larger than anything the limit can
    /// admit at once (its burst, or its limit per window), so no wait would
    /// help. Kept apart from [`Decision::Deny`] so that `Deny`'s
    /// `retry_after` is always a promise that holds, and so that a caller
    /// can report the misconfigured client instead of telling it to retry.
    /// At the wire it is an over-limit answer like `Deny`, as the original
    /// answers a `hits_addend` above the limit.
    ExceedsCapacity {
        /// The largest cost the limit can ever admit at once.
        capacity: u64,
        /// Until the key is back to full capacity (see the type's doc).
        reset_after: Duration,
    },
}

impl Decision {
    /// Whether the request was admitted.
    pub fn is_allowed(&self) -> bool {
        matches!(self, Decision::Allow { .. })
    }

    /// Unit-cost requests still admittable at the same `now`: the
    /// `remaining` of an [`Decision::Allow`], otherwise 0 (what the
    /// original reports on an over-limit answer).
    pub fn remaining(&self) -> u64 {
        match *self {
            Decision::Allow { remaining, .. } => remaining,
            Decision::Deny { .. } | Decision::ExceedsCapacity { .. } => 0,
        }
    }

    /// The time until the key is back to full capacity.
    pub fn reset_after(&self) -> Duration {
        match *self {
            Decision::Allow { reset_after, .. }
            | Decision::Deny { reset_after, .. }
            | Decision::ExceedsCapacity { reset_after, .. } => reset_after,
        }
    }

    /// The wait after which this request would be admitted: `Some` only for
    /// [`Decision::Deny`] (and then never zero).
    pub fn retry_after(&self) -> Option<Duration> {
        match *self {
            Decision::Deny { retry_after, .. } => Some(retry_after),
            Decision::Allow { .. } | Decision::ExceedsCapacity { .. } => None,
        }
    }
}

/// Why an algorithm cannot be built from the given parameters. Config
/// validation reports these; `decide` itself never fails.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidLimit {
    /// Split into more sub-buckets than the limit (or the burst) has
    /// requests, one of them would admit nothing.
    #[error("{shards} sub-buckets leave one with nothing to admit")]
    EmptySubBucket {
        /// The sub-buckets asked for.
        shards: u64,
    },
    /// A window or period of zero length has no rate.
    #[error("the window must be longer than zero")]
    ZeroWindow,
    /// Windows are counted in `u64` nanoseconds (up to about 584 years).
    #[error("a window of {window:?} is longer than the longest supported, {max:?}")]
    WindowTooLong {
        /// The window asked for.
        window: Duration,
        /// The longest supported window, `u64::MAX` ns.
        max: Duration,
    },
    /// A token bucket that never refills (limit 0) cannot have a burst.
    #[error("a burst of {burst} needs a limit above zero")]
    BurstWithoutRate {
        /// The burst asked for.
        burst: u64,
    },
    /// `burst` is the token bucket's capacity; other algorithms admit up to
    /// their limit per window and have none.
    #[error("burst ({burst}) applies to the token_bucket algorithm only")]
    BurstWithoutBucket {
        /// The burst asked for.
        burst: u64,
    },
    /// Refilling a full bucket (`burst × period / limit`) would take longer
    /// than `u64::MAX` ns (about 584 years).
    #[error("refilling a burst of {burst} at {limit} per {period:?} takes longer than {max:?}")]
    RefillTooLong {
        /// The burst asked for.
        burst: u64,
        /// The limit per period asked for.
        limit: u64,
        /// The period asked for.
        period: Duration,
        /// The longest supported refill, `u64::MAX` ns.
        max: Duration,
    },
    /// `max_in_flight` above [`super::concurrency::MAX_IN_FLIGHT`].
    #[error("max_in_flight {max_in_flight} is above the maximum of {max}")]
    InFlightTooLarge {
        /// The configured slots.
        max_in_flight: u64,
        /// The most accepted.
        max: u64,
    },
    /// A sliding log keeps one entry per admitted request, so its memory
    /// grows with the limit; limits above
    /// [`MAX_LOG_LIMIT`](crate::limiter::sliding_log::MAX_LOG_LIMIT) are
    /// refused.
    #[error("a sliding log limit of {limit} is above the maximum of {max}")]
    LogLimitTooLarge {
        /// The limit asked for.
        limit: u64,
        /// [`MAX_LOG_LIMIT`](crate::limiter::sliding_log::MAX_LOG_LIMIT).
        max: u64,
    },
}

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// The longest window or refill the algorithms accept: `u64::MAX` ns.
pub(crate) const MAX_WINDOW: Duration = Duration::from_nanos(u64::MAX);

/// A window's length in nanoseconds, if it is in `1 ..= u64::MAX` ns.
pub(crate) fn window_nanos(window: Duration) -> Result<u64, InvalidLimit> {
    if window.is_zero() {
        return Err(InvalidLimit::ZeroWindow);
    }
    u64::try_from(window.as_nanos()).map_err(|_| InvalidLimit::WindowTooLong {
        window,
        max: MAX_WINDOW,
    })
}

/// `ns` nanoseconds as a [`Duration`], saturating at [`Duration::MAX`].
pub(crate) fn from_nanos(ns: u128) -> Duration {
    match u64::try_from(ns / NANOS_PER_SEC) {
        // The remainder is below 10⁹, so it fits a u32 and does not carry.
        Ok(secs) => Duration::new(secs, (ns % NANOS_PER_SEC) as u32),
        Err(_) => Duration::MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accessors() {
        let s = Duration::from_secs(1);
        let allow = Decision::Allow {
            remaining: 3,
            reset_after: s,
        };
        let deny = Decision::Deny {
            retry_after: s,
            reset_after: 2 * s,
        };
        let never = Decision::ExceedsCapacity {
            capacity: 5,
            reset_after: 3 * s,
        };
        assert!(allow.is_allowed() && !deny.is_allowed() && !never.is_allowed());
        assert_eq!(
            [allow.remaining(), deny.remaining(), never.remaining()],
            [3, 0, 0]
        );
        assert_eq!(
            [allow.reset_after(), deny.reset_after(), never.reset_after()],
            [s, 2 * s, 3 * s]
        );
        assert_eq!(
            [allow.retry_after(), deny.retry_after(), never.retry_after()],
            [None, Some(s), None]
        );
    }

    #[test]
    fn window_bounds() {
        assert_eq!(window_nanos(Duration::ZERO), Err(InvalidLimit::ZeroWindow));
        assert_eq!(window_nanos(Duration::from_nanos(1)), Ok(1));
        assert_eq!(window_nanos(MAX_WINDOW), Ok(u64::MAX));
        let too_long = MAX_WINDOW + Duration::from_nanos(1);
        assert!(matches!(
            window_nanos(too_long),
            Err(InvalidLimit::WindowTooLong { .. })
        ));
        assert!(window_nanos(Duration::MAX).is_err());
        // A century fits; 600 years do not.
        assert!(window_nanos(Duration::from_secs(100 * 365 * 86_400)).is_ok());
        assert!(window_nanos(Duration::from_secs(600 * 365 * 86_400)).is_err());
    }

    #[test]
    fn nanos_round_trip_and_saturate() {
        for d in [
            Duration::ZERO,
            Duration::new(1, 999_999_999),
            MAX_WINDOW,
            Duration::MAX,
        ] {
            assert_eq!(from_nanos(d.as_nanos()), d);
        }
        assert_eq!(from_nanos(u128::MAX), Duration::MAX);
        assert_eq!(from_nanos(Duration::MAX.as_nanos() + 1), Duration::MAX);
    }
}
