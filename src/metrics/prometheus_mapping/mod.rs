//! The translation of the original's statsd names into Prometheus metric
//! names and labels.
//!
//! The original feeds every flushed stat into an embedded `statsd_exporter`
//! whose mapping is either the built-in default or the file named by
//! `PROMETHEUS_MAPPER_YAML`. This module reproduces both:
//!
//! - [`map_statsd_name`] / [`Mapper::Default`]: the built-in default mapping
//!   as a pure function (the original's default table);
//! - [`CustomMapping`] (in `mapping_file`): the common subset of
//!   `statsd_exporter` mapping files.
//!
//! # Deliberate differences from the original
//!
//! - The default mapping's three-or-more-level rules are **anchored**: the
//!   original's regexes are unanchored, so
//!   `ratelimit.service.rate_limit.D.K1.K2.over_limit_with_local_cache` was
//!   also counted into `ratelimit_service_rate_limit_over_limit`. Here such a
//!   name is not folded; it becomes its escaped name
//!   (`ratelimit_service_rate_limit_D_K1_K2_over_limit_with_local_cache`),
//!   exactly as the original already does for the two-level form.
//! - `EXTRA_TAGS` are not serialised into the name before mapping (which in
//!   the original breaks every rate-limit mapping); the exporter maps the bare
//!   name and adds the tags as labels (a mapping's own labels win on a clash).
//! - Custom mapping files keep `statsd_exporter`'s semantics (unanchored
//!   regexes included): they are the operator's own rules.

mod mapping_file;

pub use mapping_file::{CustomMapping, MapperError};

/// `statsd_exporter`'s (and Prometheus') default histogram buckets, in
/// seconds: 5 ms … 10 s.
pub const DEFAULT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Prometheus name of the gRPC response-time histogram (default mapping).
pub const RESPONSE_TIME_METRIC: &str = "ratelimit_service_response_time_seconds";

/// The per-rule statistics the default mapping turns into labelled metrics:
/// the original's five, ours of refunds, ours of the decision audit and the
/// configured limit's gauges (which the original never emits, so its mapping
/// of its own names is unchanged).
const RULE_STATS: [&str; 13] = [
    "near_limit",
    "over_limit",
    "total_hits",
    "within_limit",
    "shadow_mode",
    "audit_decisions",
    "audit_over",
    "audit_under",
    "audit_unverified",
    "refunded_hits",
    "refund_lost",
    "limit",
    "window_seconds",
];

/// The kind of a statsd statistic, as `match_metric_type` distinguishes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StatKind {
    /// `|c`: a counter (flushed as deltas).
    Counter,
    /// `|g`: a gauge.
    Gauge,
    /// `|ms`: a timer (an "observer" in `statsd_exporter`).
    Timer,
}

/// Where one statsd stat goes in Prometheus.
#[derive(Debug, Clone, PartialEq)]
pub struct Mapped {
    /// Prometheus metric name; always matches `[a-zA-Z_][a-zA-Z0-9_]*`.
    pub name: String,
    /// Labels in mapping order; names are valid Prometheus label names.
    pub labels: Vec<(String, String)>,
    /// Factor applied to every timer sample (1.0 = unchanged).
    pub scale: f64,
}

/// The statsd → Prometheus translation in force.
#[derive(Debug, Clone)]
pub enum Mapper {
    /// The original's built-in default mapping.
    Default {
        /// `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS`: keep gRPC response
        /// times in milliseconds instead of scaling them to seconds.
        response_time_as_ms: bool,
    },
    /// A `PROMETHEUS_MAPPER_YAML` file (replaces the default entirely).
    Custom(CustomMapping),
}

impl Mapper {
    /// Maps one stat; `None` when a mapping drops it (`action: drop`).
    /// Unmatched names become their escaped name without labels.
    pub fn map(&self, name: &str, kind: StatKind) -> Option<Mapped> {
        match self {
            Mapper::Default {
                response_time_as_ms,
            } => {
                let (name, labels, is_response_time) = default_mapping(name, kind);
                let scale = if is_response_time && !response_time_as_ms {
                    0.001
                } else {
                    1.0
                };
                Some(Mapped {
                    name,
                    labels,
                    scale,
                })
            }
            Mapper::Custom(custom) => custom.map(name, kind),
        }
    }

    /// Histogram bucket bounds per Prometheus metric name; mapped timers not
    /// listed here are rendered as summaries.
    pub fn histogram_buckets(&self) -> Vec<(String, Vec<f64>)> {
        match self {
            Mapper::Default { .. } => {
                vec![(RESPONSE_TIME_METRIC.to_string(), DEFAULT_BUCKETS.to_vec())]
            }
            Mapper::Custom(custom) => custom.histogram_buckets(),
        }
    }
}

/// The original's built-in default mapping, with the three-level
/// rules anchored (see the module documentation): the Prometheus name and
/// labels of a statsd `name`, taking each name as the kind the catalogue
/// gives it — which only matters for the counter-only rules
/// (`should_rate_limit.*`, `total_requests`, `config_load_*`), all counters.
///
/// ```
/// use ratelimit::metrics::prometheus_mapping::map_statsd_name;
/// let (name, labels) = map_statsd_name("ratelimit.service.rate_limit.rl.foo.over_limit");
/// assert_eq!(name, "ratelimit_service_rate_limit_over_limit");
/// assert_eq!(labels, vec![("domain".into(), "rl".into()), ("key1".into(), "foo".into())]);
/// ```
pub fn map_statsd_name(name: &str) -> (String, Vec<(String, String)>) {
    let kind = if name.starts_with("ratelimit_server.") && name.ends_with(".response_time") {
        StatKind::Timer
    } else {
        StatKind::Counter
    };
    let (name, labels, _) = default_mapping(name, kind);
    (name, labels)
}

/// The default mapping of a stat of `kind`: name, labels, and whether it is
/// the response-time rule (whose samples are scaled ms → s).
fn default_mapping(name: &str, kind: StatKind) -> (String, Vec<(String, String)>, bool) {
    let segs: Vec<&str> = name.split('.').collect();
    let label = |k: &str, v: &str| (k.to_string(), v.to_string());
    // Glob rules (tried first, as statsd_exporter does).
    match segs.as_slice() {
        ["ratelimit", "service", "rate_limit", domain, key1, stat] if RULE_STATS.contains(stat) => {
            return (
                format!("ratelimit_service_rate_limit_{stat}"),
                vec![label("domain", domain), label("key1", key1)],
                false,
            );
        }
        ["ratelimit", "service", "call", "should_rate_limit", err] if kind == StatKind::Counter => {
            return (
                "ratelimit_service_should_rate_limit_error".to_string(),
                vec![label("err_type", err)],
                false,
            );
        }
        ["ratelimit_server", method, "total_requests"] if kind == StatKind::Counter => {
            return (
                "ratelimit_service_total_requests".to_string(),
                vec![label("grpc_method", method)],
                false,
            );
        }
        ["ratelimit_server", method, "response_time"] => {
            return (
                RESPONSE_TIME_METRIC.to_string(),
                vec![label("grpc_method", method)],
                kind == StatKind::Timer,
            );
        }
        // Ours: one breaker gauge per store node, the node as a label.
        ["ratelimit", "store", "breaker", node, "open"] => {
            return (
                "ratelimit_store_breaker_open".to_string(),
                vec![label("node", node)],
                false,
            );
        }
        // Ours: the busiest keys' rates by rank (1 = busiest), the rank as
        // a label: at most HOT_KEYS_TOP_K series.
        ["ratelimit", "hot_keys", rank, "rate"] if rank.starts_with("rank_") => {
            return (
                "ratelimit_hot_keys_rate".to_string(),
                vec![label("rank", &rank["rank_".len()..])],
                false,
            );
        }
        ["ratelimit", "service", "config_load_success"] if kind == StatKind::Counter => {
            return (
                "ratelimit_service_config_load_success".to_string(),
                Vec::new(),
                false,
            );
        }
        ["ratelimit", "service", "config_load_error"] if kind == StatKind::Counter => {
            return (
                "ratelimit_service_config_load_error".to_string(),
                Vec::new(),
                false,
            );
        }
        _ => {}
    }
    // Regex rules, anchored: D.K1.K2[.more…].<stat>, deeper segments dropped.
    if let ["ratelimit", "service", "rate_limit", domain, key1, key2, .., stat] = segs.as_slice() {
        if RULE_STATS.contains(stat) {
            return (
                format!("ratelimit_service_rate_limit_{stat}"),
                vec![
                    label("domain", domain),
                    label("key1", key1),
                    label("key2", key2),
                ],
                false,
            );
        }
    }
    (escape_metric_name(name), Vec::new(), false)
}

/// `statsd_exporter`'s escaping of an unmapped name: every character outside
/// `[a-zA-Z0-9_]` becomes `_`, and a leading digit gets a `_` prefix. The
/// result is a valid Prometheus metric name (empty input stays empty).
pub fn escape_metric_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 1);
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        out.push('_');
    }
    out.extend(name.chars().map(|c| {
        if c.is_ascii_alphanumeric() || c == '_' {
            c
        } else {
            '_'
        }
    }));
    out
}

/// A Prometheus label name: `[a-zA-Z_][a-zA-Z0-9_]*`.
pub(crate) fn is_label_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A label name made valid: invalid characters become `_`, a leading digit
/// gets a `_` prefix; empty stays empty (callers drop empty names).
pub(crate) fn sanitize_label_name(s: &str) -> String {
    escape_metric_name(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn l(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn check(statsd: &str, prom: &str, labels: &[(&str, &str)]) {
        assert_eq!(
            map_statsd_name(statsd),
            (prom.to_string(), l(labels)),
            "{statsd}"
        );
    }

    #[test]
    fn hot_key_gauges_carry_their_rank_as_a_label() {
        check(
            "ratelimit.hot_keys.rank_3.rate",
            "ratelimit_hot_keys_rate",
            &[("rank", "3")],
        );
    }

    #[test]
    fn row_two_level_near_limit() {
        check(
            "ratelimit.service.rate_limit.rl.foo.near_limit",
            "ratelimit_service_rate_limit_near_limit",
            &[("domain", "rl"), ("key1", "foo")],
        );
    }

    #[test]
    fn row_two_level_over_limit() {
        check(
            "ratelimit.service.rate_limit.rl.foo.over_limit",
            "ratelimit_service_rate_limit_over_limit",
            &[("domain", "rl"), ("key1", "foo")],
        );
    }

    #[test]
    fn row_two_level_total_hits() {
        check(
            "ratelimit.service.rate_limit.basic.key1.total_hits",
            "ratelimit_service_rate_limit_total_hits",
            &[("domain", "basic"), ("key1", "key1")],
        );
    }

    #[test]
    fn row_two_level_within_limit() {
        check(
            "ratelimit.service.rate_limit.rl.unspec_unspecified_value.within_limit",
            "ratelimit_service_rate_limit_within_limit",
            &[("domain", "rl"), ("key1", "unspec_unspecified_value")],
        );
    }

    #[test]
    fn row_two_level_shadow_mode() {
        check(
            "ratelimit.service.rate_limit.rl.foo.shadow_mode",
            "ratelimit_service_rate_limit_shadow_mode",
            &[("domain", "rl"), ("key1", "foo")],
        );
    }

    #[test]
    fn row_three_level_near_limit() {
        check(
            "ratelimit.service.rate_limit.rl.foo.bar_bkthomps.near_limit",
            "ratelimit_service_rate_limit_near_limit",
            &[("domain", "rl"), ("key1", "foo"), ("key2", "bar_bkthomps")],
        );
    }

    #[test]
    fn row_three_or_more_levels_every_stat() {
        for stat in RULE_STATS {
            check(
                &format!("ratelimit.service.rate_limit.domain1.key1_val1.key2_val2.{stat}"),
                &format!("ratelimit_service_rate_limit_{stat}"),
                &[
                    ("domain", "domain1"),
                    ("key1", "key1_val1"),
                    ("key2", "key2_val2"),
                ],
            );
            // Deeper segments are dropped.
            check(
                &format!(
                    "ratelimit.service.rate_limit.domain1.key3_val3.key4_val4.key5_val5.k6.{stat}"
                ),
                &format!("ratelimit_service_rate_limit_{stat}"),
                &[
                    ("domain", "domain1"),
                    ("key1", "key3_val3"),
                    ("key2", "key4_val4"),
                ],
            );
        }
    }

    #[test]
    fn the_audit_counters_are_labelled_like_the_rule_stats() {
        for stat in [
            "audit_decisions",
            "audit_over",
            "audit_under",
            "audit_unverified",
        ] {
            let (name, labels) = map_statsd_name(&format!(
                "ratelimit.service.rate_limit.api.tenant_big.{stat}"
            ));
            assert_eq!(name, format!("ratelimit_service_rate_limit_{stat}"));
            assert_eq!(
                labels,
                vec![
                    ("domain".to_string(), "api".to_string()),
                    ("key1".to_string(), "tenant_big".to_string())
                ]
            );
        }
    }

    #[test]
    fn row_should_rate_limit_errors() {
        check(
            "ratelimit.service.call.should_rate_limit.redis_error",
            "ratelimit_service_should_rate_limit_error",
            &[("err_type", "redis_error")],
        );
        check(
            "ratelimit.service.call.should_rate_limit.service_error",
            "ratelimit_service_should_rate_limit_error",
            &[("err_type", "service_error")],
        );
    }

    #[test]
    fn row_total_requests() {
        check(
            "ratelimit_server.ShouldRateLimit.total_requests",
            "ratelimit_service_total_requests",
            &[("grpc_method", "ShouldRateLimit")],
        );
    }

    #[test]
    fn row_response_time_is_scaled_histogram() {
        check(
            "ratelimit_server.ShouldRateLimit.response_time",
            RESPONSE_TIME_METRIC,
            &[("grpc_method", "ShouldRateLimit")],
        );
        let secs = Mapper::Default {
            response_time_as_ms: false,
        };
        let ms = Mapper::Default {
            response_time_as_ms: true,
        };
        let name = "ratelimit_server.Check.response_time";
        assert_eq!(
            secs.map(name, StatKind::Timer).map(|m| m.scale),
            Some(0.001)
        );
        assert_eq!(ms.map(name, StatKind::Timer).map(|m| m.scale), Some(1.0));
        assert_eq!(
            secs.histogram_buckets(),
            vec![(RESPONSE_TIME_METRIC.to_string(), DEFAULT_BUCKETS.to_vec())]
        );
    }

    #[test]
    fn row_config_load() {
        check(
            "ratelimit.service.config_load_success",
            "ratelimit_service_config_load_success",
            &[],
        );
        check(
            "ratelimit.service.config_load_error",
            "ratelimit_service_config_load_error",
            &[],
        );
    }

    #[test]
    fn row_everything_else_is_escaped() {
        check(
            "ratelimit.service.rate_limit.rl.domain_not_found",
            "ratelimit_service_rate_limit_rl_domain_not_found",
            &[],
        );
        check(
            "ratelimit.service.global_shadow_mode",
            "ratelimit_service_global_shadow_mode",
            &[],
        );
        check(
            "ratelimit.service.rate_limit.rl.foo.over_limit_with_local_cache",
            "ratelimit_service_rate_limit_rl_foo_over_limit_with_local_cache",
            &[],
        );
        check(
            "ratelimit.redis_pool.cx_active",
            "ratelimit_redis_pool_cx_active",
            &[],
        );
        check(
            "ratelimit.localcache.hitCount",
            "ratelimit_localcache_hitCount",
            &[],
        );
        check("runtime.load_attempts", "runtime_load_attempts", &[]);
    }

    #[test]
    fn a_three_level_local_cache_stat_is_not_folded() {
        check(
            "ratelimit.service.rate_limit.rl.a.b.over_limit_with_local_cache",
            "ratelimit_service_rate_limit_rl_a_b_over_limit_with_local_cache",
            &[],
        );
        // A stat name that merely starts with a mapped one is not mapped either.
        check(
            "ratelimit.service.rate_limit.rl.a.b.total_hits_x",
            "ratelimit_service_rate_limit_rl_a_b_total_hits_x",
            &[],
        );
    }

    #[test]
    fn counter_only_rules_ignore_other_kinds() {
        let m = Mapper::Default {
            response_time_as_ms: false,
        };
        let g = m
            .map("ratelimit_server.Check.total_requests", StatKind::Gauge)
            .map(|m| m.name);
        assert_eq!(g.as_deref(), Some("ratelimit_server_Check_total_requests"));
        let c = m
            .map("ratelimit_server.Check.total_requests", StatKind::Counter)
            .map(|m| m.name);
        assert_eq!(c.as_deref(), Some("ratelimit_service_total_requests"));
    }

    #[test]
    fn escaping_follows_statsd_exporter() {
        assert_eq!(escape_metric_name("a.b-c:d|e"), "a_b_c_d_e");
        assert_eq!(escape_metric_name("1abc"), "_1abc");
        assert_eq!(escape_metric_name("a.é"), "a__");
        assert_eq!(escape_metric_name(""), "");
    }
}
