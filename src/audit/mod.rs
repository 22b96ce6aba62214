//! The decision audit: for a stable, hash-chosen share of keys
//! (`DECISION_AUDIT_SAMPLE`), an exact reference of each rule's contract
//! runs beside the real decision, and every audited decision is compared
//! with what the contract would have decided.
//!
//! - The contract of a window algorithm (and of the original's fixed
//!   window) is "at most N admitted in any trailing window W": its
//!   reference is an exact log of what was admitted. A token bucket's is
//!   the exact bucket model of the logical limit (GCRA).
//!   [`Limiter::reference_of`](crate::limiter::Limiter::reference_of).
//! - The reference is decided by the store **in the same atomic step** as
//!   the decision: in the same Lua script on Redis, at Redis's `TIME`, so
//!   that the audit holds across a fleet; under the same locks in the
//!   memory store. It records only what was really admitted, so
//!   disagreements do not compound.
//! - Its key is one per descriptor and limit ([`reference_key`]), so the
//!   sub-buckets of a sharded limit and the windows of the original's
//!   counters all meet in it. On Redis Cluster an algorithm's reference
//!   shares its limit's slot; a sharded limit's sub-buckets other than the
//!   first, and the original's counters (whose keys move slot every
//!   window), do not: the former are checked with the reference in a step
//!   of its own, committed by reserve-then-refund like a multi-slot
//!   request; the latter are not audited on a cluster.
//! - Leased limits: the instance decides from its lease, and the reference
//!   is decided in the store call that the audited request makes for it
//!   (so an audited leased key costs one store call per request).
//! - Decisions answered by a failure policy are counted apart
//!   (`by_policy`): no fleet-wide reference can be read while the store is
//!   out.
//!
//! Not audited: shadow-mode limits (they enforce nothing), requests
//! answered by the local over-limit cache (no store step), window
//! contracts above `DECISION_AUDIT_MAX_LIMIT` (their log would hold one
//! entry per admitted request), and the memcache store (no atomic step to
//! share).
//!
//! Cost: nothing when sampling is off (the engine holds no [`Audit`]).
//! For an audited key, one more key in the same script call: a sorted set
//! of up to N entries for a window contract (≈ 60–70 B an entry in Redis,
//! 24 B in memory), one timestamp for a bucket.
//!
//! [`reference_key`]: crate::store::key::reference_key

pub mod book;
pub mod bound;
pub mod sample;
pub mod verdict;

use crate::limiter::Limiter;

pub use book::{AuditBook, Row};
pub use bound::{Bound, LimitFacts};
pub use sample::Sampler;
pub use verdict::{Outcome, Verdict};

/// The default of `DECISION_AUDIT_MAX_LIMIT`.
pub const DEFAULT_MAX_LIMIT: u64 = 10_000;

/// The audit of one process: what it samples, and its results.
#[derive(Debug)]
pub struct Audit {
    sampler: Sampler,
    max_limit: u64,
    /// `LOCAL_FIRST_MAX_OVER`: what a local-first window may admit over
    /// its limit, as a share of it.
    local_first_max_over: f64,
    book: AuditBook,
}

impl Audit {
    /// An audit of `sample` of the keys (`None`: off) of limits up to
    /// `max_limit` per window.
    pub fn new(sample: f64, max_limit: u64) -> Option<Audit> {
        Some(Audit {
            sampler: Sampler::new(sample)?,
            max_limit,
            local_first_max_over: 0.0,
            book: AuditBook::default(),
        })
    }

    /// The audit, judging local-first windows by the over-admission
    /// `max_over` (`LOCAL_FIRST_MAX_OVER`, `ε`) lets them make.
    pub fn with_local_first_max_over(self, max_over: f64) -> Audit {
        Audit {
            local_first_max_over: max_over,
            ..self
        }
    }

    /// A local-first window of `limit`'s allowance a window
    /// ([`Share::allowance`](crate::resilience::leases::local::Share::allowance)).
    pub fn local_first_over(&self, limit: u64) -> u64 {
        crate::resilience::leases::local::Share::allowance(limit, self.local_first_max_over)
    }

    /// Whether the limit whose reference key is `reference_key` and whose
    /// contract is `contract` is audited: sampled, and for a window
    /// contract at most `DECISION_AUDIT_MAX_LIMIT` per window (a bucket's
    /// reference is one timestamp whatever its size).
    pub fn covers(&self, reference_key: &str, contract: &Limiter) -> bool {
        let small =
            matches!(contract, Limiter::TokenBucket(_)) || contract.limit() <= self.max_limit;
        small && self.sampler.picks(reference_key)
    }

    /// The results.
    pub fn book(&self) -> &AuditBook {
        &self.book
    }

    /// `/audit`: the settings and every audited limit's row.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "sample": self.sampler.share(),
            "max_limit": self.max_limit,
            "rules": self.book.to_json(),
        })
    }
}
