//! What a rule does when the store cannot answer for it, and when a count
//! counts: the extension keys `failure_mode`, `fallback_requests_per_unit`
//! and `durability` of a `rate_limit` block (and of each `rate_limits`
//! item), and the one failure policy they make ([`OnFailure`]).
//!
//! [`FailureDefaults::on_failure`] is the one place a rule's policy becomes
//! an [`OnFailure`], for every kind of limit: the
//! [`crate::resilience::Fallback`] layer answers each item of a request the
//! store could not answer by it, per call; an RLQS bucket keeps its live
//! assignment until its TTL (Envoy holds it that long anyway), then is told
//! what the same policy says, in the form Envoy enforces
//! (`crate::quota::session`).

use std::fmt;
use std::str::FromStr;

pub use crate::settings::FailureMode;

/// `durability:`: what must hold a count before the decision it made is
/// answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// The primary's acknowledgement (the original's, and the default): a
    /// failover can lose the counts the old primary had not yet passed to
    /// its replica, and the new primary then admits them again.
    #[default]
    Acknowledged,
    /// A replica's as well (`WAIT 1` after the count, within the call's
    /// deadline): a count no replica acknowledged in time is the store's
    /// failure, answered by the rule's `failure_mode`, so a failover loses
    /// nothing that was admitted.
    Replicated,
}

impl FromStr for Durability {
    type Err = ();

    fn from_str(s: &str) -> Result<Durability, ()> {
        match s {
            "acknowledged" => Ok(Durability::Acknowledged),
            "replicated" => Ok(Durability::Replicated),
            _ => Err(()),
        }
    }
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Durability::Acknowledged => "acknowledged",
            Durability::Replicated => "replicated",
        })
    }
}

/// A rule's own failure policy; what it leaves out comes from the settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FailurePolicy {
    /// `failure_mode`, when the rule sets it.
    pub mode: Option<FailureMode>,
    /// `fallback_requests_per_unit` (only with `failure_mode: open`;
    /// 1 ≤ n ≤ `requests_per_unit`).
    pub fallback_requests_per_unit: Option<u32>,
    /// `durability` (default: acknowledged).
    pub durability: Durability,
}

impl FailurePolicy {
    /// The mode, `default` when the rule sets none.
    pub fn mode_or(&self, default: FailureMode) -> FailureMode {
        self.mode.unwrap_or(default)
    }

    /// Whether the rule's counts must reach a replica before they are
    /// answered (`durability: replicated`).
    pub fn replicated(&self) -> bool {
        self.durability == Durability::Replicated
    }

    /// The local floor of an open rule with `limit` per window: its own
    /// `fallback_requests_per_unit`, else `⌊limit × share⌋`, at least 1 and
    /// never above `limit`.
    pub fn fallback(&self, limit: u64, share: f64) -> u64 {
        let derived = || ((limit as f64 * share).floor() as u64).max(1);
        self.fallback_requests_per_unit
            .map_or_else(derived, u64::from)
            .min(limit)
    }
}

/// What a rule wants when the store cannot answer for it (`failure_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnFailure {
    /// Fail, as the original does (gRPC UNKNOWN): the proxy's own failure
    /// behaviour (`failure_mode_deny`, or RLQS's
    /// `expired_assignment_behavior`) decides.
    #[default]
    Error,
    /// Deny: the limit refuses until the store answers again.
    Closed,
    /// Allow up to a local floor: an in-process limiter of the same
    /// algorithm and window with `fallback` requests per window (per
    /// instance), never more than the rule's own limit.
    Open {
        /// The floor's limit (≥ 1).
        fallback: u64,
    },
}

/// The failure policy of rules that set none of their own.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FailureDefaults {
    /// `STORE_FAILURE_MODE`.
    pub mode: FailureMode,
    /// `STORE_FALLBACK_SHARE`: an open rule's floor as a share of its limit.
    pub fallback_share: f64,
}

impl Default for FailureDefaults {
    fn default() -> Self {
        FailureDefaults {
            mode: FailureMode::Error,
            fallback_share: 0.1,
        }
    }
}

impl FailureDefaults {
    /// What a limit of `limit` per window whose rule says `policy` gets
    /// when the store cannot answer.
    pub fn on_failure(&self, policy: &FailurePolicy, limit: u64) -> OnFailure {
        match policy.mode_or(self.mode) {
            FailureMode::Error => OnFailure::Error,
            FailureMode::Closed => OnFailure::Closed,
            FailureMode::Open => OnFailure::Open {
                fallback: policy.fallback(limit, self.fallback_share),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_print() {
        for m in [FailureMode::Error, FailureMode::Open, FailureMode::Closed] {
            assert_eq!(m.to_string().parse(), Ok(m));
        }
        assert_eq!("Open".parse::<FailureMode>(), Err(()));
        for d in [Durability::Acknowledged, Durability::Replicated] {
            assert_eq!(d.to_string().parse(), Ok(d));
        }
        assert_eq!("durable".parse::<Durability>(), Err(()));
    }

    #[test]
    fn the_floor_is_a_share_of_the_limit_at_least_one_never_above_it() {
        let derived = FailurePolicy::default();
        assert_eq!(derived.fallback(100, 0.1), 10);
        assert_eq!(derived.fallback(19, 0.1), 1, "rounded down");
        assert_eq!(derived.fallback(5, 0.1), 1, "at least one");
        assert_eq!(derived.fallback(0, 0.1), 0, "a zero limit stays zero");
        assert_eq!(derived.fallback(10, 1.0), 10);
        let own = FailurePolicy {
            mode: Some(FailureMode::Open),
            fallback_requests_per_unit: Some(7),
            ..FailurePolicy::default()
        };
        assert_eq!(own.fallback(100, 0.1), 7);
        assert_eq!(own.mode_or(FailureMode::Error), FailureMode::Open);
        assert_eq!(derived.mode_or(FailureMode::Closed), FailureMode::Closed);
    }

    #[test]
    fn a_rules_own_mode_wins_and_open_gets_its_floor() {
        let defaults = FailureDefaults {
            mode: FailureMode::Closed,
            fallback_share: 0.1,
        };
        assert_eq!(
            defaults.on_failure(&FailurePolicy::default(), 100),
            OnFailure::Closed
        );
        let open = FailurePolicy {
            mode: Some(FailureMode::Open),
            ..FailurePolicy::default()
        };
        assert_eq!(
            defaults.on_failure(&open, 100),
            OnFailure::Open { fallback: 10 }
        );
    }
}
