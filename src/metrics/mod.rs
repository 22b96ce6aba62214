//! Every statistic of the original, under the original's names,
//! recorded through the `metrics` facade.
//!
//! Names here are the original's statsd names (`ratelimit.service.…`); the
//! exporters translate them (Prometheus through the original's default
//! mapping, statsd as they are). This module owns every name; nothing else
//! spells one.
//!
//! Cardinality is bounded, unlike the original's: per-rule and
//! per-domain handles live in a cache of at most [`MAX_DYNAMIC_KEYS`]
//! entries, so request-supplied values (unknown domains, override and
//! detailed-metric keys) cannot grow this process's handle table without
//! bound; the exporter forgets series that stay idle.

use std::sync::Arc;
use std::time::Duration;

use metrics::Counter;

pub mod exporter;
pub mod memcache;
pub mod prometheus_mapping;
mod recorder;
pub mod statsd;

pub use exporter::{
    build, install, listen_addr, select_sink, FlushReport, MetricsError, MetricsHandle,
    MetricsOptions, SinkKind,
};
pub use prometheus_mapping::map_statsd_name;
pub use recorder::{MetricsRecorder, MAX_DYNAMIC_SERIES, MAX_PENDING_SAMPLES};
pub use statsd::StatsdProtocol;

/// Most distinct per-rule or per-domain stats keys whose handles are kept.
pub const MAX_DYNAMIC_KEYS: usize = 10_000;

/// `ratelimit.service.config_load_success`.
pub const CONFIG_LOAD_SUCCESS: &str = "ratelimit.service.config_load_success";
/// `ratelimit.service.config_load_error`.
pub const CONFIG_LOAD_ERROR: &str = "ratelimit.service.config_load_error";
/// `ratelimit.service.global_shadow_mode`.
pub const GLOBAL_SHADOW_MODE: &str = "ratelimit.service.global_shadow_mode";
/// `ratelimit.service.call.should_rate_limit.redis_error`.
pub const REDIS_ERROR: &str = "ratelimit.service.call.should_rate_limit.redis_error";
/// `ratelimit.service.call.should_rate_limit.service_error`.
pub const SERVICE_ERROR: &str = "ratelimit.service.call.should_rate_limit.service_error";
/// `ratelimit.service.call.should_rate_limit.past_caller_deadline` (ours):
/// calls not answered by their `grpc-timeout` (answered late, or ended by the
/// server at the deadline), so the caller (Envoy) had already applied its own
/// failure mode. Non-zero means the deadline's margin is too small for the
/// deployment.
pub const PAST_CALLER_DEADLINE: &str =
    "ratelimit.service.call.should_rate_limit.past_caller_deadline";
/// `ratelimit.service.call.should_rate_limit.caller_gone` (ours): calls
/// whose caller went away (cancelled the stream, closed the connection)
/// before they were answered and before any `grpc-timeout` of theirs ran out.
pub const CALLER_GONE: &str = "ratelimit.service.call.should_rate_limit.caller_gone";
/// `ratelimit.service.call.should_rate_limit.large_lane` (ours): calls of
/// more than [`SLICE`](crate::platform::workers::SLICE) descriptors,
/// decided on the large-request lane rather than on the worker that
/// received them.
pub const LARGE_REQUESTS: &str = "ratelimit.service.call.should_rate_limit.large_lane";
/// `runtime.load_attempts`: configuration snapshots read by the file provider.
pub const RUNTIME_LOAD_ATTEMPTS: &str = "runtime.load_attempts";
/// `runtime.num_values`: files in the live configuration.
pub const RUNTIME_NUM_VALUES: &str = "runtime.num_values";
/// `ratelimit.store.timeout` (ours): requests whose store work passed
/// `STORE_TIMEOUT` on some node.
pub const STORE_TIMEOUT: &str = "ratelimit.store.timeout";
/// `ratelimit.memory.keys` (ours): keys the memory store holds (a gauge).
pub const MEMORY_KEYS: &str = "ratelimit.memory.keys";
/// `ratelimit.memory.rule.<rule>.keys` (ours, a gauge) and
/// `ratelimit.memory.rule.<rule>.evictions` (ours, a counter): per rule with
/// keys in the memory store (its load key), the keys it holds and its keys
/// evicted to make room when the store was full (each may admit its limit
/// again within its window). One pair per configured rule, set by the
/// store's sweeper every second.
pub fn memory_rule(rule: &str) -> (metrics::Gauge, metrics::Counter) {
    let base = format!("ratelimit.memory.rule.{}", sanitize(rule));
    (
        metrics::gauge!(format!("{base}.keys")),
        metrics::counter!(format!("{base}.evictions")),
    )
}

/// `ratelimit.memory.full` (ours): works refused because the memory store
/// held `MEMORY_MAX_KEYS` keys (their items go to their failure policies).
pub const MEMORY_FULL: &str = "ratelimit.memory.full";
/// `ratelimit.store.failure` (ours): requests with an item the store could
/// not answer (timeout, connection refused or reset, breaker open, or an
/// error reply).
pub const STORE_FAILURE: &str = "ratelimit.store.failure";
/// `ratelimit.http.connection_refused` (ours): connections to the HTTP
/// port closed at once because `HTTP_MAX_CONNECTIONS` were open.
pub const HTTP_CONNECTION_REFUSED: &str = "ratelimit.http.connection_refused";
/// `ratelimit.grpc.connection_refused` (ours): connections to the gRPC
/// port closed at once because `GRPC_MAX_CONNECTIONS` were open.
pub const GRPC_CONNECTION_REFUSED: &str = "ratelimit.grpc.connection_refused";
/// `ratelimit.grpc.connection_silent` (ours): connections to the gRPC port
/// closed for sending nothing within `GRPC_CONNECTION_TIMEOUT`.
pub const GRPC_CONNECTION_SILENT: &str = "ratelimit.grpc.connection_silent";
/// `ratelimit.debug.connection_refused` (ours): the same on the debug port.
pub const DEBUG_CONNECTION_REFUSED: &str = "ratelimit.debug.connection_refused";
/// `ratelimit.store.circuit_open` (ours): requests with an item not sent
/// because its node's breaker was open.
pub const STORE_CIRCUIT_OPEN: &str = "ratelimit.store.circuit_open";
/// `ratelimit.store.fallback_decision` (ours): items of `failure_mode: open`
/// rules decided by the local floor.
pub const STORE_FALLBACK_DECISION: &str = "ratelimit.store.fallback_decision";
/// `ratelimit.store.fallback_over_limit` (ours): of those, refused by the floor.
pub const STORE_FALLBACK_OVER_LIMIT: &str = "ratelimit.store.fallback_over_limit";
/// `ratelimit.store.fail_closed_denial` (ours): items of `failure_mode:
/// closed` rules denied because the store could not answer.
pub const STORE_FAIL_CLOSED_DENIAL: &str = "ratelimit.store.fail_closed_denial";

/// `ratelimit.lease.store_call` (ours): store calls made for requests
/// with a leased item (takes, plain decisions of leased keys).
pub const LEASE_STORE_CALL: &str = "ratelimit.lease.store_call";
/// `ratelimit.lease.local_decision` (ours): leased items answered from a
/// lease or a remembered refusal, with no store call.
pub const LEASE_LOCAL_DECISION: &str = "ratelimit.lease.local_decision";
/// `ratelimit.local_first.local_decision` (ours): decisions of
/// local-first windows answered from this instance's view, with no store
/// call.
pub const LOCAL_FIRST_LOCAL_DECISION: &str = "ratelimit.local_first.local_decision";
/// `ratelimit.local_first.store_decision` (ours): decisions of local-first
/// windows sent to the store (near the limit, cold and uncounted, stale,
/// or a read or give-back).
pub const LOCAL_FIRST_STORE_DECISION: &str = "ratelimit.local_first.store_decision";
/// `ratelimit.local_first.sync_call` (ours): write-back works sent (one
/// script call per Redis node each).
pub const LOCAL_FIRST_SYNC_CALL: &str = "ratelimit.local_first.sync_call";
/// `ratelimit.local_first.sync_keys` (ours): keys written back.
pub const LOCAL_FIRST_SYNC_KEYS: &str = "ratelimit.local_first.sync_keys";
/// `ratelimit.local_first.sync_failed` (ours): keys whose write-back
/// failed (owed still, sent again).
pub const LOCAL_FIRST_SYNC_FAILED: &str = "ratelimit.local_first.sync_failed";
/// `ratelimit.local_first.instances` (ours): the instances counted on the
/// store in the last second, which each view's share divides by.
pub const LOCAL_FIRST_INSTANCES: &str = "ratelimit.local_first.instances";
/// `ratelimit.local_first.views` (ours): keys this instance holds a view
/// of (at most `MEMORY_MAX_KEYS`), set by the lease sweeper.
pub const LOCAL_FIRST_VIEWS: &str = "ratelimit.local_first.views";
/// `ratelimit.lease.taken` (ours): leases taken.
pub const LEASE_TAKEN: &str = "ratelimit.lease.taken";
/// `ratelimit.lease.tokens_taken` (ours): tokens taken in leases.
pub const LEASE_TOKENS_TAKEN: &str = "ratelimit.lease.tokens_taken";
/// `ratelimit.lease.tokens_returned` (ours): unspent tokens given back.
pub const LEASE_TOKENS_RETURNED: &str = "ratelimit.lease.tokens_returned";
/// `ratelimit.lease.return_failed` (ours): leases whose return failed.
pub const LEASE_RETURN_FAILED: &str = "ratelimit.lease.return_failed";

/// `ratelimit.rlqs.assignment_changed` (ours): RLQS assignments sent that
/// replace the one the bucket ran (each starts Envoy's bucket full: the
/// over-admission a change costs).
pub const RLQS_ASSIGNMENT_CHANGED: &str = "ratelimit.rlqs.assignment_changed";
/// `ratelimit.rlqs.pushed` (ours): of those, sent between reports because
/// the bucket's share moved.
pub const RLQS_PUSHED: &str = "ratelimit.rlqs.pushed";
/// `ratelimit.rlqs.board_failure` (ours): reports whose buckets' boards
/// could not answer (the buckets keep their assignments until their TTL).
pub const RLQS_BOARD_FAILURE: &str = "ratelimit.rlqs.board_failure";

/// `ratelimit.hot_keys.rank_<n>.rate` (ours): decisions per second of this
/// instance's n-th busiest key, for n in `1..=k` (0 past the last listed
/// key), so the series are `k` whatever the keys. Prometheus:
/// `ratelimit_hot_keys_rate{rank="n"}`; `/hotkeys` names the keys.
pub fn record_hot_keys(rates: &[f64], k: usize) {
    for rank in 1..=k {
        let rate = rates.get(rank - 1).copied().unwrap_or(0.0);
        ::metrics::gauge!(format!("ratelimit.hot_keys.rank_{rank}.rate")).set(rate);
    }
}

/// `ratelimit.store.breaker.<node>.open` (ours): 1 while the node's breaker
/// is open or probing, 0 when closed. Prometheus:
/// `ratelimit_store_breaker_open{node="…"}`.
pub fn breaker_gauge(node: &str) -> metrics::Gauge {
    // One statsd segment whatever the address holds (dots, colons).
    let node: String = node
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    metrics::gauge!(format!("ratelimit.store.breaker.{node}.open"))
}

/// Prefix of every per-rule counter.
pub const RATE_LIMIT_PREFIX: &str = "ratelimit.service.rate_limit.";

/// The six counters of one rule's stats key.
#[derive(Debug, Clone)]
pub struct RuleStats {
    /// `<key>.total_hits`.
    pub total_hits: Counter,
    /// `<key>.over_limit`.
    pub over_limit: Counter,
    /// `<key>.near_limit`.
    pub near_limit: Counter,
    /// `<key>.over_limit_with_local_cache`.
    pub over_limit_with_local_cache: Counter,
    /// `<key>.within_limit`.
    pub within_limit: Counter,
    /// `<key>.shadow_mode`.
    pub shadow_mode: Counter,
    /// Ours, registered on a rule's first refund: see [`RefundStats`].
    refunds: std::sync::OnceLock<RefundStats>,
    base: String,
}

/// A rule's refund counters (ours; registered on the rule's first
/// `is_negative_hits` descriptor, so a config that sends none shows none):
/// `<key>.refunded_hits` (hits given back, never counted in `total_hits`,
/// `over_limit` or `within_limit`) and `<key>.refund_lost` (hits whose
/// give-back the store could not take, left counted until their window
/// ends or their slot returns by itself). Prometheus:
/// `ratelimit_service_rate_limit_refunded_hits{domain,key1…}`.
#[derive(Debug, Clone)]
pub struct RefundStats {
    /// `<key>.refunded_hits`.
    pub refunded_hits: Counter,
    /// `<key>.refund_lost`.
    pub refund_lost: Counter,
}

impl RuleStats {
    /// The rule's refund counters, registered on first use.
    pub fn refunds(&self) -> &RefundStats {
        self.refunds.get_or_init(|| RefundStats {
            refunded_hits: metrics::counter!(format!("{}.refunded_hits", self.base)),
            refund_lost: metrics::counter!(format!("{}.refund_lost", self.base)),
        })
    }

    /// Counters that record nothing: for a dry run, which must not count.
    pub fn unrecorded() -> RuleStats {
        RuleStats {
            total_hits: Counter::noop(),
            over_limit: Counter::noop(),
            near_limit: Counter::noop(),
            over_limit_with_local_cache: Counter::noop(),
            within_limit: Counter::noop(),
            shadow_mode: Counter::noop(),
            refunds: std::sync::OnceLock::new(),
            base: String::new(),
        }
    }

    fn register(stats_key: &str) -> RuleStats {
        let base = format!("{RATE_LIMIT_PREFIX}{}", sanitize(stats_key));
        let c = |stat: &str| metrics::counter!(format!("{base}.{stat}"));
        RuleStats {
            total_hits: c("total_hits"),
            over_limit: c("over_limit"),
            near_limit: c("near_limit"),
            over_limit_with_local_cache: c("over_limit_with_local_cache"),
            within_limit: c("within_limit"),
            shadow_mode: c("shadow_mode"),
            refunds: std::sync::OnceLock::new(),
            base,
        }
    }
}

/// The decision audit's counters of one rule's stats key (ours; only
/// registered for rules that are audited): `<key>.audit_decisions`
/// (decisions compared with the contract), `<key>.audit_over` (admitted,
/// the contract refuses), `<key>.audit_under` (refused, the contract
/// admits), `<key>.audit_unverified` (audited decisions that could not be
/// compared: answered by a failure policy, or the reference did not
/// answer). Prometheus: `ratelimit_service_rate_limit_audit_over{domain,key1…}`.
#[derive(Debug, Clone)]
pub struct AuditStats {
    /// `<key>.audit_decisions`.
    pub decisions: Counter,
    /// `<key>.audit_over`.
    pub over: Counter,
    /// `<key>.audit_under`.
    pub under: Counter,
    /// `<key>.audit_unverified`.
    pub unverified: Counter,
}

impl AuditStats {
    /// The counters of `stats_key`.
    pub fn register(stats_key: &str) -> AuditStats {
        let base = format!("{RATE_LIMIT_PREFIX}{}", sanitize(stats_key));
        let c = |stat: &str| metrics::counter!(format!("{base}.{stat}"));
        AuditStats {
            decisions: c("audit_decisions"),
            over: c("audit_over"),
            under: c("audit_under"),
            unverified: c("audit_unverified"),
        }
    }
}

/// One rule's configured limit, as its gauges show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleLimit {
    /// The rule's stats key of a plain match (its path, `domain.key_value…`).
    pub stats_key: String,
    /// `<key>.limit`: requests per window (an in-flight limit's slots).
    pub limit: u64,
    /// `<key>.window_seconds`: the window's length (a token bucket's
    /// period; 0 for an in-flight limit, which has none).
    pub window_seconds: u64,
}

/// The service's statistics. Cheap to share.
#[derive(Debug)]
pub struct Stats {
    rules: quick_cache::sync::Cache<String, Arc<RuleStats>>,
    domains: quick_cache::sync::Cache<String, Counter>,
    /// The stats keys whose configured-limit gauges the live config set.
    configured: parking_lot::Mutex<std::collections::BTreeSet<String>>,
}

impl Default for Stats {
    fn default() -> Self {
        Stats::new()
    }
}

impl Stats {
    /// Handles with the bounded caches of [`MAX_DYNAMIC_KEYS`] each.
    pub fn new() -> Stats {
        Stats {
            rules: quick_cache::sync::Cache::new(MAX_DYNAMIC_KEYS),
            domains: quick_cache::sync::Cache::new(MAX_DYNAMIC_KEYS),
            configured: parking_lot::Mutex::default(),
        }
    }

    /// Sets every rule's configured-limit gauges (`<key>.limit` and
    /// `<key>.window_seconds`) after a load, so that a utilisation ratio
    /// is `hits / limit` from the same series. One pair per rule of the
    /// config, never per request value: their number is the config's, and
    /// no flood of values changes it. A rule a reload removed reads 0 (a
    /// gauge cannot be withdrawn from every sink).
    pub fn configured_limits(&self, limits: &[RuleLimit]) {
        let mut configured = self.configured.lock();
        let now: std::collections::BTreeSet<String> =
            limits.iter().map(|l| l.stats_key.clone()).collect();
        for gone in configured.difference(&now) {
            let base = format!("{RATE_LIMIT_PREFIX}{}", sanitize(gone));
            metrics::gauge!(format!("{base}.limit")).set(0.0);
            metrics::gauge!(format!("{base}.window_seconds")).set(0.0);
        }
        for l in limits {
            let base = format!("{RATE_LIMIT_PREFIX}{}", sanitize(&l.stats_key));
            metrics::gauge!(format!("{base}.limit")).set(l.limit as f64);
            metrics::gauge!(format!("{base}.window_seconds")).set(l.window_seconds as f64);
        }
        *configured = now;
    }

    /// The counters of a rule's stats key (registered on first use).
    ///
    /// A rule's own series (`per_value` false: its key is the config's) is
    /// never refused by the per-key cap, so a flood of per-value series
    /// (`detailed_metric`, `value_to_metric`) cannot blind another rule;
    /// per-value series share the cap.
    pub fn rule(&self, stats_key: &str, per_value: bool) -> Arc<RuleStats> {
        if let Some(s) = self.rules.get(stats_key) {
            return s;
        }
        let register = || RuleStats::register(stats_key);
        let s = Arc::new(match per_value {
            true => register(),
            false => recorder::beyond_the_cap(register),
        });
        self.rules.insert(stats_key.to_string(), s.clone());
        s
    }

    /// `ratelimit.service.rate_limit.<domain>.domain_not_found` +1.
    pub fn domain_not_found(&self, domain: &str) {
        let counter = match self.domains.get(domain) {
            Some(c) => c,
            None => {
                let c = metrics::counter!(format!(
                    "{RATE_LIMIT_PREFIX}{}.domain_not_found",
                    sanitize(domain)
                ));
                self.domains.insert(domain.to_string(), c.clone());
                c
            }
        };
        counter.increment(1);
    }

    /// A request failed with a service error.
    pub fn service_error(&self) {
        metrics::counter!(SERVICE_ERROR).increment(1);
    }

    /// A request failed with a store error.
    pub fn redis_error(&self) {
        metrics::counter!(REDIS_ERROR).increment(1);
    }

    /// Global shadow mode turned an OVER_LIMIT into OK.
    pub fn global_shadow_mode(&self) {
        metrics::counter!(GLOBAL_SHADOW_MODE).increment(1);
    }

    /// A configuration load finished.
    pub fn config_load(&self, success: bool) {
        metrics::counter!(if success {
            CONFIG_LOAD_SUCCESS
        } else {
            CONFIG_LOAD_ERROR
        })
        .increment(1);
        metrics::counter!(RUNTIME_LOAD_ATTEMPTS).increment(1);
    }

    /// The live configuration has `files` files.
    pub fn config_files(&self, files: usize) {
        metrics::gauge!(RUNTIME_NUM_VALUES).set(files as f64);
    }
}

/// The original's stat-name sanitising: `:` and `|` become `_`, and the dots
/// of every IPv4-looking run (`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`, leftmost,
/// non-overlapping) become `_`.
pub fn sanitize(key: &str) -> String {
    let mut out: Vec<u8> = key
        .bytes()
        .map(|b| if b == b':' || b == b'|' { b'_' } else { b })
        .collect();
    let mut i = 0;
    while i < out.len() {
        match ipv4_at(&out, i) {
            Some(end) => {
                for b in &mut out[i..end] {
                    if *b == b'.' {
                        *b = b'_';
                    }
                }
                i = end;
            }
            None => i += 1,
        }
    }
    // Only ASCII bytes were replaced by ASCII bytes: still UTF-8.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// The end of the regex `\d{1,3}(\.\d{1,3}){3}` matched at `start`, taking
/// each digit run greedily (up to three digits) as Go's RE2 does.
fn ipv4_at(s: &[u8], start: usize) -> Option<usize> {
    let mut i = start;
    for part in 0..4 {
        if part > 0 {
            if s.get(i) != Some(&b'.') {
                return None;
            }
            i += 1;
        }
        let digits = s[i..]
            .iter()
            .take(3)
            .take_while(|b| b.is_ascii_digit())
            .count();
        if digits == 0 {
            return None;
        }
        i += digits;
    }
    Some(i)
}

/// `ratelimit.localcache.hitCount`.
pub const LOCALCACHE_HIT_COUNT: &str = "ratelimit.localcache.hitCount";
/// `ratelimit.localcache.missCount`.
pub const LOCALCACHE_MISS_COUNT: &str = "ratelimit.localcache.missCount";
/// `ratelimit.localcache.lookupCount`.
pub const LOCALCACHE_LOOKUP_COUNT: &str = "ratelimit.localcache.lookupCount";
/// `ratelimit.localcache.entryCount`.
pub const LOCALCACHE_ENTRY_COUNT: &str = "ratelimit.localcache.entryCount";
/// `ratelimit.localcache.expiredCount`.
pub const LOCALCACHE_EXPIRED_COUNT: &str = "ratelimit.localcache.expiredCount";
/// `ratelimit.localcache.evacuateCount`.
pub const LOCALCACHE_EVACUATE_COUNT: &str = "ratelimit.localcache.evacuateCount";
/// `ratelimit.localcache.overwriteCount`.
pub const LOCALCACHE_OVERWRITE_COUNT: &str = "ratelimit.localcache.overwriteCount";
/// `ratelimit.localcache.averageAccessTime`.
pub const LOCALCACHE_AVERAGE_ACCESS_TIME: &str = "ratelimit.localcache.averageAccessTime";

/// One unary gRPC method's two series: `ratelimit_server.<method>.total_requests`
/// and `ratelimit_server.<method>.response_time`. Registered once and held
/// by whoever counts calls, so that a call costs no registry lookup; these
/// series are not per key, so the registry never forgets them.
#[derive(Debug, Clone)]
pub struct GrpcCallStats {
    total_requests: metrics::Counter,
    response_time: metrics::Histogram,
}

impl GrpcCallStats {
    /// `method`'s series in the current recorder.
    pub fn register(method: &str) -> GrpcCallStats {
        GrpcCallStats {
            total_requests: metrics::counter!(format!("ratelimit_server.{method}.total_requests")),
            response_time: metrics::histogram!(format!("ratelimit_server.{method}.response_time")),
        }
    }

    /// Counts one call: `total_requests` +1 and `response_time` ←
    /// `elapsed` in milliseconds (fractional; statsd receives it truncated
    /// to whole ms as the original sends it).
    pub fn record(&self, elapsed: Duration) {
        self.total_requests.increment(1);
        self.response_time.record(elapsed.as_secs_f64() * 1000.0);
    }
}

/// Counts one unary gRPC call of `method` (see [`GrpcCallStats::record`]),
/// looking its series up in the current recorder.
pub fn record_grpc_call(method: &str, elapsed: Duration) {
    GrpcCallStats::register(method).record(elapsed);
}

/// The local cache's statistics (`ratelimit.localcache.*` gauges).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LocalCacheGauges {
    /// `hitCount`.
    pub hit_count: u64,
    /// `missCount`.
    pub miss_count: u64,
    /// `lookupCount`.
    pub lookup_count: u64,
    /// `entryCount`.
    pub entry_count: u64,
    /// `expiredCount`.
    pub expired_count: u64,
    /// `evacuateCount`.
    pub evacuate_count: u64,
    /// `overwriteCount`.
    pub overwrite_count: u64,
    /// `averageAccessTime`.
    pub average_access_time: u64,
}

/// Sets the eight `ratelimit.localcache.*` gauges; meant to run in a
/// generator ([`MetricsHandle::add_generator`]) so they are fresh at every
/// flush, as the original's stat generator is.
pub fn record_local_cache(g: &LocalCacheGauges) {
    let set = |name: &'static str, v: u64| metrics::gauge!(name).set(v as f64);
    set(LOCALCACHE_HIT_COUNT, g.hit_count);
    set(LOCALCACHE_MISS_COUNT, g.miss_count);
    set(LOCALCACHE_LOOKUP_COUNT, g.lookup_count);
    set(LOCALCACHE_ENTRY_COUNT, g.entry_count);
    set(LOCALCACHE_EXPIRED_COUNT, g.expired_count);
    set(LOCALCACHE_EVACUATE_COUNT, g.evacuate_count);
    set(LOCALCACHE_OVERWRITE_COUNT, g.overwrite_count);
    set(LOCALCACHE_AVERAGE_ACCESS_TIME, g.average_access_time);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitizes_like_the_original() {
        assert_eq!(
            sanitize("edge.remote_address_50.0.0.5"),
            "edge.remote_address_50_0_0_5"
        );
        assert_eq!(sanitize("d.1234.5.6.7"), "d.1234_5_6_7");
        assert_eq!(sanitize("a:b|c"), "a_b_c");
        assert_eq!(sanitize("d.key_1.2.3"), "d.key_1.2.3");
        assert_eq!(sanitize("rl.foo.bar"), "rl.foo.bar");
    }
}
