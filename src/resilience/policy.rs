//! The one failure policy: what a limit gets when the store cannot answer
//! for it, from its rule's `failure_mode` (or `STORE_FAILURE_MODE`) and,
//! for `open`, its floor (`fallback_requests_per_unit`, or
//! `STORE_FALLBACK_SHARE` of its limit). [`FailureDefaults::on_failure`] is
//! the one place a rule's policy becomes an [`OnFailure`], for every kind
//! of limit:
//!
//! - a request's limits: the [`super::Fallback`] layer answers each item
//!   the store could not answer by it, per call;
//! - an RLQS bucket: its stream keeps the bucket's live assignment until
//!   its TTL (Envoy holds it that long anyway), then tells the bucket what
//!   the same policy says, in the form Envoy enforces (see
//!   `crate::quota::session`).

use crate::config::{FailureMode, FailurePolicy};

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
