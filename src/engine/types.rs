//! The engine's request and response: the domain side of
//! `envoy.service.ratelimit.v3`, free of generated code.

use std::time::Duration;

use crate::config::{Entry, LimitOverride, Metadata};
use crate::limiter::Unit;

/// A `ShouldRateLimit` request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RateLimitRequest {
    /// The rules' namespace.
    pub domain: String,
    /// What to check, in order.
    pub descriptors: Vec<RequestDescriptor>,
    /// Request-level hits; 0 means 1.
    pub hits_addend: u32,
}

/// One descriptor of a request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestDescriptor {
    /// Ordered `(key, value)` entries.
    pub entries: Vec<Entry>,
    /// A per-request limit that replaces matching.
    pub limit: Option<LimitOverride>,
    /// Per-descriptor hits; when present (even 0) it wins over the request's.
    pub hits_addend: Option<u64>,
    /// `is_negative_hits`: the descriptor gives its hits back (a refund,
    /// or an in-flight slot's release) instead of taking them.
    pub is_negative_hits: bool,
}

/// A status code (`RateLimitResponse.Code`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Code {
    /// Not decided.
    #[default]
    Unknown = 0,
    /// Allowed.
    Ok = 1,
    /// Rejected.
    OverLimit = 2,
}

/// The limit a status reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentLimit {
    /// Allowed hits per unit.
    pub requests_per_unit: u32,
    /// The unit.
    pub unit: Unit,
    /// The rule's name; "" when unnamed.
    pub name: String,
    /// The window (or a token bucket's refill period) in seconds, with
    /// `unit_multiplier` applied: what the `w` of the RateLimit fields says;
    /// 0 for an in-flight limit, which has no window.
    pub window_seconds: u64,
    /// A token bucket's burst (its capacity); `None` for the other
    /// algorithms.
    pub burst: Option<u64>,
}

/// The verdict for one descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescriptorStatus {
    /// OK or OVER_LIMIT.
    pub code: Code,
    /// The applied limit; `None` when no limit applied.
    pub current_limit: Option<CurrentLimit>,
    /// Hits left in the window (`u32::MAX` for unlimited rules).
    pub limit_remaining: u32,
    /// Time until the window resets; `None` when no limit applied.
    pub duration_until_reset: Option<Duration>,
    /// Over the limit of a shadow-mode rule, and let through (code OK) for
    /// that alone. Not on the wire: the decision's metadata reports it.
    pub shadowed: bool,
}

/// One decision's id: random, shown as 16 hex digits. The response's
/// decision metadata, the decision audit and the logs name a decision by
/// it, so one request can be followed from Envoy's access log to both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DecisionId(pub u64);

impl DecisionId {
    /// A fresh id.
    pub fn new() -> DecisionId {
        DecisionId(rand::random())
    }
}

impl std::fmt::Display for DecisionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// A `ShouldRateLimit` response.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RateLimitResponse {
    /// The overall verdict.
    pub overall_code: Code,
    /// One status per request descriptor, same order.
    pub statuses: Vec<DescriptorStatus>,
    /// Headers for the proxy to add to the downstream response.
    pub response_headers_to_add: Vec<(String, String)>,
    /// Headers for the proxy to add to the request it forwards upstream.
    pub request_headers_to_add: Vec<(String, String)>,
    /// Dynamic metadata, when enabled.
    pub dynamic_metadata: Option<Metadata>,
}

/// Why a request could not be answered. Over the limit is not an error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServiceError {
    /// The domain is empty.
    #[error("rate limit domain must not be empty")]
    EmptyDomain,
    /// No descriptors.
    #[error("rate limit descriptor list must not be empty")]
    EmptyDescriptors,
    /// No configuration has loaded yet.
    #[error("no rate limit configuration loaded")]
    NoConfig,
    /// A descriptor cannot be evaluated (the original crashes here).
    #[error("descriptor {index}: {reason}")]
    InvalidDescriptor {
        /// Index of the descriptor in the request.
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// The request is larger than the service takes (`REQUEST_MAX_*`).
    #[error("request too large: {got} {what}, at most {limit} allowed ({setting})")]
    RequestTooLarge {
        /// What was counted.
        what: &'static str,
        /// How many the request has.
        got: usize,
        /// The most allowed.
        limit: usize,
        /// The setting that says so.
        setting: &'static str,
    },
    /// The store failed; the message is the store's.
    #[error("{0}")]
    Store(#[from] crate::store::StoreError),
}
