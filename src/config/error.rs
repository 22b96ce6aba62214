//! Configuration errors, with the original's texts.
//!
//! `Display` of a [`ConfigError`] is byte-identical to the original service's
//! message (`<config name>: <message>`), because users and tests compare those
//! strings. What the original does not say — the line, and a suggestion for a
//! misspelled key — travels beside it in [`ConfigError::line`] and
//! [`ConfigError::hint`], for logs and the config checker to print.

use std::fmt;

/// A rejected configuration: which file, what, and where.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{file}: {kind}")]
pub struct ConfigError {
    /// The config name the original uses in messages: the runtime key of the
    /// file (e.g. `config.basic.yaml`), or the name the caller gave.
    pub file: String,
    /// What is wrong; its `Display` is the original's message.
    pub kind: ConfigErrorKind,
    /// The 1-based line of the offending node, when there is one.
    pub line: Option<usize>,
    /// A suggestion, e.g. "did you mean 'rate_limit'?".
    pub hint: Option<String>,
}

impl ConfigError {
    pub(crate) fn new(file: &str, kind: ConfigErrorKind, line: Option<usize>) -> Self {
        ConfigError {
            file: file.to_string(),
            kind,
            line,
            hint: None,
        }
    }

    /// The original message followed by the line and the hint, for logs:
    /// `f.yaml: invalid rate limit unit 'foo' (line 5)`.
    pub fn detailed(&self) -> String {
        let mut out = self.to_string();
        if let Some(line) = self.line {
            out.push_str(&format!(" (line {line})"));
        }
        if let Some(hint) = &self.hint {
            out.push_str(&format!("; {hint}"));
        }
        out
    }
}

/// Every way a configuration can be rejected. Variants P1–P7 and L1–L10 are
/// the original's conditions, in its words.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigErrorKind {
    /// P1: the YAML reader's message, `yaml: line N: ...`.
    #[error("error loading config file: {0}")]
    Syntax(String),
    /// P2 and P7: a value of the wrong type, all of a file's listed together.
    #[error("error loading config file: yaml: unmarshal errors:{}", TypeErrors(.0))]
    Types(Vec<TypeError>),
    /// P3: a mapping key that is not a string (Go `%v` of the key).
    #[error("config error, key is not of type string: {0}")]
    NonStringKey(String),
    /// P4: a key outside the allowed set.
    #[error("config error, unknown key '{0}'")]
    UnknownKey(String),
    /// P5: a list element that is not a mapping (Go `%v` of the element).
    #[error("config error, yaml file contains list of type other than map: {0}")]
    NonMapListElement(String),
    /// P6: a leaf that is not a string, int, bool or null (a float, say).
    #[error("error checking config")]
    InvalidLeaf,
    /// L1.
    #[error("config file cannot have empty domain")]
    EmptyDomain,
    /// L2: the same domain in two files without `MERGE_DOMAIN_CONFIG`.
    #[error("duplicate domain '{0}' in config file")]
    DuplicateDomain(String),
    /// L3.
    #[error("descriptor has empty key")]
    EmptyKey,
    /// L4: the full load-time path of the duplicate.
    #[error("duplicate descriptor composite key '{0}'")]
    DuplicateCompositeKey(String),
    /// L5.
    #[error("should not specify rate limit unit when unlimited")]
    UnitWithUnlimited,
    /// L6: the unit exactly as written.
    #[error("invalid rate limit unit '{0}'")]
    InvalidUnit(String),
    /// L7.
    #[error("should not have an empty replaces entry")]
    EmptyReplaces,
    /// L8.
    #[error("replaces should not contain name of same descriptor")]
    ReplacesSelf,
    /// L9: the composite (`key_value`) of the descriptor.
    #[error(
        "share_threshold can only be used with wildcard values (containing '*'), but found key '{0}'"
    )]
    ShareThresholdWithoutWildcard(String),
    /// L10: metadata that cannot become a protobuf Struct.
    #[error("error parsing metadata: {0}")]
    Metadata(String),
    /// An `algorithm:` that is not one of ours (an extension key).
    #[error("invalid rate limit algorithm '{0}' (expected one of fixed_window, sliding_window, token_bucket, sliding_log, concurrency)")]
    InvalidAlgorithm(String),
    /// `unit_multiplier: 0` (an extension key).
    #[error("unit_multiplier must be at least 1")]
    ZeroUnitMultiplier,
    /// The limit cannot be built (an extension key made it so).
    #[error("invalid rate limit: {0}")]
    InvalidLimit(#[from] crate::limiter::InvalidLimit),
    /// A `failure_mode:` that is not one of ours (an extension key).
    #[error("invalid failure_mode '{0}' (expected one of error, open, closed)")]
    InvalidFailureMode(String),
    /// A `durability:` that is not one of ours (an extension key).
    #[error("invalid durability '{0}' (expected one of acknowledged, replicated)")]
    InvalidDurability(String),
    /// `fallback_requests_per_unit` without `failure_mode: open`.
    #[error("fallback_requests_per_unit needs failure_mode: open")]
    FallbackWithoutOpen,
    /// `fallback_requests_per_unit` outside `1..=requests_per_unit`.
    #[error("fallback_requests_per_unit must be between 1 and requests_per_unit ({limit}), got {fallback}")]
    FallbackOutOfRange {
        /// The floor asked for.
        fallback: u32,
        /// The block's `requests_per_unit`.
        limit: u32,
    },
    /// `shards:` outside `2..=64`.
    #[error("shards must be between 2 and 64, got {0}")]
    ShardsOutOfRange(u32),
    /// More sub-buckets than the limit (or a token bucket's burst) can
    /// give each at least one request.
    #[error("shards ({shards}) must not exceed the limit's capacity ({capacity}): every sub-bucket needs at least one request")]
    ShardsAboveCapacity {
        /// The sub-buckets asked for.
        shards: u32,
        /// `requests_per_unit`, or a token bucket's burst if smaller.
        capacity: u64,
    },
    /// `lease: true` on the exact log, which has no batch to lend out.
    #[error("lease does not apply to sliding_log: an exact log cannot lend tokens out")]
    LeaseWithSlidingLog,
    /// A rule the configured store cannot count (memcache holds the
    /// original's fixed windows only).
    #[error("rule {rule} uses {feature}, which the memcache backend cannot count: it holds the original's fixed windows only (use BACKEND_TYPE=redis or memory)")]
    StoreCannotCount {
        /// The rule's load key (`domain.key_value…`).
        rule: String,
        /// The first thing it uses that the store cannot count.
        feature: &'static str,
    },
    /// A `time_zone:` that is not in the IANA database.
    #[error("unknown time_zone '{0}' (expected an IANA name such as Europe/Berlin or UTC)")]
    UnknownTimeZone(String),
    /// `calendar: true` on a unit shorter than a day.
    #[error("calendar windows are days, weeks, months or years, not {0}")]
    CalendarUnit(crate::limiter::Unit),
    /// `calendar: true` on an algorithm that has no calendar window.
    #[error("calendar applies to fixed_window only, not {0}")]
    CalendarAlgorithm(crate::limiter::AlgorithmName),
    /// `calendar: true` beside a key it cannot be combined with.
    #[error("calendar cannot be combined with {0}")]
    CalendarWith(&'static str),
    /// `time_zone:` without `calendar: true`.
    #[error("time_zone applies to calendar windows only")]
    TimeZoneWithoutCalendar,
    /// Both `rate_limit` and `rate_limits` on one descriptor.
    #[error("a descriptor cannot have both rate_limit and rate_limits")]
    BothRateLimitForms,
    /// `rate_limits: []`.
    #[error("rate_limits must list at least one rate limit")]
    EmptyRateLimits,
    /// `unlimited` or `replaces` inside `rate_limits`.
    #[error("'{0}' is not allowed inside rate_limits; put it in a single rate_limit")]
    NotAllowedInRateLimits(&'static str),
    /// An in-flight limit with a key that only a windowed limit takes.
    #[error("an in-flight limit (algorithm: concurrency) takes no {0}")]
    ConcurrencyWith(&'static str),

    /// An in-flight limit without its number of slots.
    #[error("algorithm: concurrency needs max_in_flight")]
    MissingMaxInFlight,

    /// An in-flight limit without the time after which a slot returns.
    #[error("algorithm: concurrency needs max_duration, the longest a slot is held when its release never comes")]
    MissingMaxDuration,

    /// A `max_duration` that is not a positive duration.
    #[error("invalid max_duration '{0}' (expected a positive duration such as 60s or 1m30s)")]
    InvalidMaxDuration(String),

    /// A `sync_interval` that is not a positive duration.
    #[error("invalid sync_interval '{0}' (expected a positive duration such as 50ms)")]
    InvalidSyncInterval(String),

    /// `sync_interval` on a limit that is not a fixed window.
    #[error(
        "sync_interval applies to fixed windows (the original's, or calendar: true), not with {0}"
    )]
    SyncIntervalWith(&'static str),

    /// `max_in_flight` or `max_duration` on another algorithm.
    #[error("{0} applies to algorithm: concurrency only")]
    InFlightWithoutConcurrency(&'static str),

    /// Two limits of one `rate_limits` with the same algorithm and window
    /// would share a store key.
    #[error("rate_limits has two {algorithm} limits over the same window of {seconds}s")]
    DuplicateLimitWindow {
        /// The algorithm.
        algorithm: crate::limiter::AlgorithmName,
        /// The window, in seconds.
        seconds: u64,
    },
}

/// One type error of yaml.v2's decoder (P2, P7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeError {
    /// 1-based line of the node.
    pub line: usize,
    /// `!!str`, `!!int`, `!!seq`, ...
    pub tag: &'static str,
    /// The scalar's text, cut as yaml.v2 cuts it; `None` for collections.
    pub value: Option<String>,
    /// The Go type yaml.v2 names (`uint32`, `[]config.YamlDescriptor`, ...).
    pub go_type: &'static str,
}

impl TypeError {
    pub(crate) fn new(
        line: usize,
        tag: &'static str,
        text: Option<&str>,
        go_type: &'static str,
    ) -> Self {
        TypeError {
            line,
            tag,
            value: text.map(shorten),
            go_type,
        }
    }
}

/// yaml.v2 cuts a value longer than 10 bytes to its first 7 bytes and `...`.
/// The cut is by bytes, as in Go; a split character is replaced, never a panic.
fn shorten(text: &str) -> String {
    if text.len() > 10 {
        format!("{}...", String::from_utf8_lossy(&text.as_bytes()[..7]))
    } else {
        text.to_string()
    }
}

impl fmt::Display for TypeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: cannot unmarshal {}", self.line, self.tag)?;
        if let Some(v) = &self.value {
            write!(f, " `{v}`")?;
        }
        write!(f, " into {}", self.go_type)
    }
}

struct TypeErrors<'a>(&'a [TypeError]);

impl fmt::Display for TypeErrors<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for e in self.0 {
            write!(f, "\n  {e}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_errors_print_like_yaml_v2() {
        let e = ConfigError::new(
            "f.yaml",
            ConfigErrorKind::Types(vec![
                TypeError::new(4, "!!int", Some("1"), "bool"),
                TypeError::new(5, "!!str", Some("abcdefghijklmnop"), "uint32"),
                TypeError::new(6, "!!seq", None, "config.YamlRateLimit"),
            ]),
            Some(4),
        );
        assert_eq!(
            e.to_string(),
            "f.yaml: error loading config file: yaml: unmarshal errors:\n  line 4: cannot unmarshal !!int `1` into bool\n  line 5: cannot unmarshal !!str `abcdefg...` into uint32\n  line 6: cannot unmarshal !!seq into config.YamlRateLimit"
        );
    }

    #[test]
    fn shortening_never_splits_into_a_panic() {
        assert_eq!(shorten("ééééééé"), "ééé\u{fffd}...");
        assert_eq!(shorten("0123456789"), "0123456789");
    }

    #[test]
    fn detailed_adds_line_and_hint() {
        let mut e = ConfigError::new(
            "f.yaml",
            ConfigErrorKind::UnknownKey("ratelimit".into()),
            Some(3),
        );
        e.hint = Some("did you mean 'rate_limit'?".into());
        assert_eq!(
            e.detailed(),
            "f.yaml: config error, unknown key 'ratelimit' (line 3); did you mean 'rate_limit'?"
        );
    }
}
