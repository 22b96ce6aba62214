//! Settings of how limits are decided and answered: the limiter's options, the response (headers,
//! shadow and quota modes), hot keys and leases, RLQS quotas and the decision audit.

use std::time::Duration;

use super::parse::{
    parse_bool, parse_count, parse_duration, parse_f32, parse_f64, parse_int,
    parse_positive_duration, parse_share, ParseError,
};
use super::reader::Reader;
use super::store::BackendType;
use super::vars::*;

/// Counting common to every backend.
#[derive(Debug, Clone, PartialEq)]
pub struct LimiterSettings {
    /// `BACKEND_TYPE`: where counters live.
    pub backend_type: BackendType,
    /// `CACHE_KEY_PREFIX`: prefix of every backend key; may be empty.
    pub cache_key_prefix: String,
    /// `NEAR_LIMIT_RATIO`: near-limit threshold ratio; 32-bit as in the original, whose
    /// near-limit arithmetic is done in `float32`.
    pub near_limit_ratio: f32,
    /// `LOCAL_CACHE_SIZE_IN_BYTES`: size of the local over-limit cache; 0 turns it off.
    pub local_cache_size_in_bytes: i64,
    /// `EXPIRATION_JITTER_MAX_SECONDS`: exclusive upper bound of the random seconds added to
    /// key expiry.
    pub expiration_jitter_max_seconds: i64,
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`: do not increment keys already over limit.
    pub stop_cache_key_increment_when_overlimit: bool,
    /// `ALL_OR_NOTHING` (ours): the original's fixed windows too are
    /// counted only if every limit of the request passes.
    pub all_or_nothing: bool,
}

/// What a response carries, and the global modes that shape it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseSettings {
    /// Rate-limit response headers.
    pub headers: ResponseHeaderSettings,
    /// `LIMIT_REQUEST_HEADERS_ENABLED` and its header names: the same
    /// headers for the upstream request.
    pub request_headers: RequestHeaderSettings,
    /// `SHADOW_MODE`: never deny (global shadow mode).
    pub shadow_mode: bool,
    /// `QUOTA_MODE`: global quota mode.
    pub quota_mode: bool,
    /// `RESPONSE_DYNAMIC_METADATA`: fill `dynamic_metadata` in responses.
    pub dynamic_metadata: bool,
    /// `RESPONSE_DECISION_METADATA` (ours): add the decision's struct to
    /// `dynamic_metadata`.
    pub decision_metadata: bool,
    /// `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`: add the `config` health component.
    pub healthy_with_at_least_one_config_loaded: bool,
}

/// Rate-limit response headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHeaderSettings {
    /// `LIMIT_RESPONSE_HEADERS_ENABLED`: add the headers.
    pub enabled: bool,
    /// `LIMIT_LIMIT_HEADER`: header name for the limit.
    pub limit: String,
    /// `LIMIT_REMAINING_HEADER`: header name for the remaining count.
    pub remaining: String,
    /// `LIMIT_RESET_HEADER`: header name for the seconds until reset.
    pub reset: String,
    /// `LIMIT_RESPONSE_HEADERS_FORMAT` (ours): which headers.
    pub format: HeaderFormatSetting,
    /// `RETRY_AFTER_JITTER` (ours): the largest random delay added to the
    /// retry time of a refusal.
    pub retry_after_jitter: Duration,
}

/// Rate-limit headers on the request Envoy forwards upstream (always the
/// original's three).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHeaderSettings {
    /// `LIMIT_REQUEST_HEADERS_ENABLED`: add the headers.
    pub enabled: bool,
    /// `LIMIT_REQUEST_LIMIT_HEADER`: header name for the limit.
    pub limit: String,
    /// `LIMIT_REQUEST_REMAINING_HEADER`: header name for the remaining count.
    pub remaining: String,
    /// `LIMIT_REQUEST_RESET_HEADER`: header name for the seconds until reset.
    pub reset: String,
}

/// `LIMIT_RESPONSE_HEADERS_FORMAT`: which rate-limit headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HeaderFormatSetting {
    /// `original`: the original's three headers.
    #[default]
    Original,
    /// `ietf`: `RateLimit-Policy` and `RateLimit` (draft 11).
    Ietf,
    /// `x-ratelimit`: Envoy's `X-RateLimit-*` (draft 03).
    XRateLimit,
}

impl std::str::FromStr for HeaderFormatSetting {
    type Err = ();

    fn from_str(s: &str) -> Result<HeaderFormatSetting, ()> {
        match s {
            "original" => Ok(HeaderFormatSetting::Original),
            "ietf" => Ok(HeaderFormatSetting::Ietf),
            "x-ratelimit" => Ok(HeaderFormatSetting::XRateLimit),
            _ => Err(()),
        }
    }
}

/// Hot keys (ours): token leasing and detection.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HotKeySettings {
    /// `LEASE_MIN_RATE`, `LEASE_DURATION`, `LEASE_TTL`, `LEASE_MAX_SHARE`.
    pub lease: LeaseSettings,
    /// `HOT_KEYS_TOP_K` (0: off).
    pub top_k: usize,
}

/// Token leasing and local-first windows (ours, one mechanism):
/// `LEASE_MIN_RATE`, `LEASE_DURATION`, `LEASE_TTL`, `LEASE_MAX_SHARE`,
/// `LOCAL_FIRST_SYNC_INTERVAL`, `LOCAL_FIRST_MAX_OVER`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LeaseSettings {
    /// `LEASE_MIN_RATE`: decisions per second below which a key is not
    /// leased.
    pub min_rate: u64,
    /// `LEASE_DURATION`: how much of a key's traffic one batch covers.
    pub duration: Duration,
    /// `LEASE_TTL`: the longest a lease lives.
    pub ttl: Duration,
    /// `LEASE_MAX_SHARE`: the largest batch as a share of the capacity.
    pub max_share: f64,
    /// `LOCAL_FIRST_SYNC_INTERVAL`: the write-back interval of fixed
    /// windows whose rule sets none; `None` (0): they are decided at the
    /// store.
    pub local_first_sync_interval: Option<Duration>,
    /// `LOCAL_FIRST_MAX_OVER`: the over-admission a local-first window may
    /// reach, as a share of its limit.
    pub local_first_max_over: f64,
}

/// RLQS, the rate limit quota service (ours).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QuotaSettings {
    /// `RLQS_ASSIGNMENT_TTL`.
    pub assignment_ttl: Duration,
    /// `RLQS_IDLE_TIMEOUT`.
    pub idle_timeout: Duration,
    /// `RLQS_SYNC_INTERVAL`.
    pub sync_interval: Duration,
}

/// The decision audit (ours).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AuditSettings {
    /// `DECISION_AUDIT_SAMPLE`: the share of keys audited (0: off).
    pub sample: f64,
    /// `DECISION_AUDIT_MAX_LIMIT`: the largest window limit audited.
    pub max_limit: u64,
}

impl LimiterSettings {
    pub(super) fn read(r: &mut Reader<'_>) -> LimiterSettings {
        LimiterSettings {
            backend_type: r.get(ENV_BACKEND_TYPE, str::parse),
            cache_key_prefix: r.string(ENV_CACHE_KEY_PREFIX),
            near_limit_ratio: r.get(ENV_NEAR_LIMIT_RATIO, parse_f32),
            local_cache_size_in_bytes: r.get(ENV_LOCAL_CACHE_SIZE_IN_BYTES, parse_int),
            expiration_jitter_max_seconds: r.get(ENV_EXPIRATION_JITTER_MAX_SECONDS, parse_int),
            stop_cache_key_increment_when_overlimit: r
                .get(ENV_STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, parse_bool),
            all_or_nothing: r.get(ENV_ALL_OR_NOTHING, parse_bool),
        }
    }
}

impl ResponseSettings {
    pub(super) fn read(r: &mut Reader<'_>) -> ResponseSettings {
        ResponseSettings {
            headers: ResponseHeaderSettings {
                enabled: r.get(ENV_LIMIT_RESPONSE_HEADERS_ENABLED, parse_bool),
                limit: r.string(ENV_LIMIT_LIMIT_HEADER),
                remaining: r.string(ENV_LIMIT_REMAINING_HEADER),
                reset: r.string(ENV_LIMIT_RESET_HEADER),
                format: r.get(ENV_LIMIT_RESPONSE_HEADERS_FORMAT, |s| {
                    s.parse().map_err(|()| ParseError::OneOf {
                        expected: "original, ietf, x-ratelimit",
                    })
                }),
                retry_after_jitter: r.get(ENV_RETRY_AFTER_JITTER, parse_duration),
            },
            request_headers: RequestHeaderSettings {
                enabled: r.get(ENV_LIMIT_REQUEST_HEADERS_ENABLED, parse_bool),
                limit: r.string(ENV_LIMIT_REQUEST_LIMIT_HEADER),
                remaining: r.string(ENV_LIMIT_REQUEST_REMAINING_HEADER),
                reset: r.string(ENV_LIMIT_REQUEST_RESET_HEADER),
            },
            shadow_mode: r.get(ENV_SHADOW_MODE, parse_bool),
            quota_mode: r.get(ENV_QUOTA_MODE, parse_bool),
            dynamic_metadata: r.get(ENV_RESPONSE_DYNAMIC_METADATA, parse_bool),
            decision_metadata: r.get(ENV_RESPONSE_DECISION_METADATA, parse_bool),
            healthy_with_at_least_one_config_loaded: r
                .get(ENV_HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED, parse_bool),
        }
    }
}

impl HotKeySettings {
    pub(super) fn read(r: &mut Reader<'_>) -> HotKeySettings {
        HotKeySettings {
            lease: LeaseSettings {
                min_rate: r.get(ENV_LEASE_MIN_RATE, parse_count),
                duration: r.get(ENV_LEASE_DURATION, parse_positive_duration),
                ttl: r.get(ENV_LEASE_TTL, parse_positive_duration),
                max_share: r.get(ENV_LEASE_MAX_SHARE, parse_share),
                local_first_sync_interval: Some(
                    r.get(ENV_LOCAL_FIRST_SYNC_INTERVAL, parse_duration),
                )
                .filter(|d| !d.is_zero()),
                local_first_max_over: r.get(ENV_LOCAL_FIRST_MAX_OVER, parse_share),
            },
            top_k: r.get(ENV_HOT_KEYS_TOP_K, |s| {
                parse_count(s).map(|n| usize::try_from(n).unwrap_or(usize::MAX))
            }),
        }
    }
}

impl QuotaSettings {
    pub(super) fn read(r: &mut Reader<'_>) -> QuotaSettings {
        QuotaSettings {
            assignment_ttl: r.get(ENV_RLQS_ASSIGNMENT_TTL, parse_positive_duration),
            idle_timeout: r.get(ENV_RLQS_IDLE_TIMEOUT, parse_positive_duration),
            sync_interval: r.get(ENV_RLQS_SYNC_INTERVAL, parse_positive_duration),
        }
    }
}

impl AuditSettings {
    pub(super) fn read(r: &mut Reader<'_>) -> AuditSettings {
        AuditSettings {
            sample: r.get(ENV_DECISION_AUDIT_SAMPLE, |s| {
                let share = parse_f64(s)?;
                if (0.0..=1.0).contains(&share) {
                    Ok(share)
                } else {
                    Err(ParseError::ShareOutOfUnitRange)
                }
            }),
            max_limit: r.get(ENV_DECISION_AUDIT_MAX_LIMIT, parse_count),
        }
    }
}
