//! Per-tenant overrides: limits set at runtime for one domain and one full
//! descriptor, beside the YAML rules, kept in the store's book so that
//! every instance applies them and a restart loses none.
//!
//! # What an override changes
//!
//! For one descriptor of a request, the limit that applies is, first match
//! wins:
//!
//! 1. the limit the request carries (Envoy's `limit` override), as in the
//!    original;
//! 2. an override in force whose domain and descriptor are exactly the
//!    request's (every key and value, in order);
//! 3. the YAML rule the descriptor matches.
//!
//! An override changes only the limit of the rule the descriptor matches
//! (see [`crate::config::limit_block::with_block`]); everything else the
//! rule says stays (its name, shadow mode, `replaces`, failure policy,
//! statistics key). An override whose descriptor no rule matches does
//! nothing: the YAML stays the authority on what is limited, and the API
//! marks such an override `"matches_rule": false`. An expired override
//! gives the rule's own limit back at its expiry, on every instance, by
//! the wall clock.
//!
//! - [`record`]: the JSON of the API and of the book, checked and capped;
//! - [`table`]: what this instance applies, read without a lock;
//! - [`book`]: writes, reads and the refresh that spreads them.

pub mod book;
pub mod record;
pub mod table;

pub use book::{Overrides, Refused, Written};
pub use table::OverrideTable;

/// `at_ms` (ms since the Unix epoch) as RFC 3339 text, UTC.
pub fn timestamp(at_ms: u64) -> String {
    i64::try_from(at_ms)
        .ok()
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .map_or_else(|| at_ms.to_string(), |t| t.to_string())
}
