//! The one call: a request's descriptors to per-descriptor statuses and an
//! overall code. The [`Engine`] does the I/O-free work around one store
//! trip: match → plan → execute → status → respond. The pure steps live in
//! their own modules:
//!
//! - [`aggregate`]: `unlimited`, `replaces`, the overall code;
//! - `plan`: every descriptor's items in one store work;
//! - `audited`: the decision audit's references added to it, and judged;
//! - `status`: each descriptor's status from its answers;
//! - [`headers`]: the rate-limit response headers;
//! - [`dynamic_metadata`]: the response's dynamic metadata;
//! - [`local_cache`]: the local over-limit cache;
//! - [`types`]: request, response and errors.

pub mod aggregate;
mod audited;
pub mod dynamic_metadata;
pub mod evaluate;
pub mod headers;
pub mod local_cache;
mod observe;
mod plan;
mod respond;
mod status;
pub mod types;

use std::sync::Arc;
use std::time::Duration;

pub use crate::config::FailureDefaults;
use crate::config::LiveConfig;
use crate::config::{Lookup, MatchedLimit};
use crate::hotkeys::TopKeys;
use crate::limiter::Clock;
use crate::metrics::Stats;
use crate::store::{Answer, InProcess, Placement, Reply, Store, StoreError, StoreExt};

pub use aggregate::Disposition;
pub use headers::{HeaderFormat, HeaderNames};
pub use local_cache::LocalCache;
pub use types::{
    Code, CurrentLimit, DecisionId, DescriptorStatus, RateLimitRequest, RateLimitResponse,
    RequestDescriptor, ServiceError,
};

/// How many descriptors a request's lookup and plan handle before letting
/// the worker's other requests run (the workers' [`SLICE`]).
pub use crate::platform::workers::SLICE;

/// The largest expiry jitter bound applied, in seconds (about 68 years): the
/// Redis script draws the jitter with Lua's generator, which takes a 32-bit
/// signed bound.
const MAX_JITTER_SECONDS: u64 = i32::MAX as u64;

/// What the engine does beyond matching, from the settings.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineOptions {
    /// `NEAR_LIMIT_RATIO`.
    pub near_limit_ratio: f32,
    /// `CACHE_KEY_PREFIX`.
    pub cache_key_prefix: String,
    /// `EXPIRATION_JITTER_MAX_SECONDS`: keys live `unit + [0, max)` seconds.
    pub expiration_jitter_max_seconds: u64,
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`.
    pub stop_increment_when_over_limit: bool,
    /// `ALL_OR_NOTHING` (ours): the original's fixed windows too are decided
    /// before they are counted, all or nothing with the request's other
    /// limits.
    pub all_or_nothing: bool,
    /// `SHADOW_MODE`.
    pub shadow_mode: bool,
    /// `QUOTA_MODE`.
    pub quota_mode: bool,
    /// `RESPONSE_DYNAMIC_METADATA`.
    pub response_dynamic_metadata: bool,
    /// `RESPONSE_DECISION_METADATA`: the `decision` struct in
    /// `dynamic_metadata`.
    pub decision_metadata: bool,
    /// `LOCAL_FIRST_SYNC_INTERVAL`: fixed windows whose rule sets no
    /// `sync_interval` are local-first with this one.
    pub local_first_sync_interval: Option<Duration>,
    /// `LIMIT_RESPONSE_HEADERS_ENABLED` with the header names.
    pub response_headers: Option<HeaderNames>,
    /// `LIMIT_REQUEST_HEADERS_ENABLED` with the header names: the
    /// original's three headers, chosen as the response's are, for the
    /// request Envoy forwards upstream.
    pub request_headers: Option<HeaderNames>,
    /// `LIMIT_RESPONSE_HEADERS_FORMAT`: which headers, when enabled.
    pub header_format: HeaderFormat,
    /// `RETRY_AFTER_JITTER`: OVER_LIMIT statuses wait `[0, jitter)` longer.
    pub retry_after_jitter: Duration,
    /// `REQUEST_MAX_DESCRIPTORS`: a request with more is refused.
    pub max_descriptors: usize,
    /// `REQUEST_MAX_ENTRIES`: a descriptor with more is refused.
    pub max_entries: usize,
    /// What a rule that sets no `failure_mode` does (`STORE_FAILURE_MODE`,
    /// `STORE_FALLBACK_SHARE`).
    pub failure: FailureDefaults,
}

impl EngineOptions {
    /// The expiry jitter bound applied: `expiration_jitter_max_seconds`, at
    /// most [`MAX_JITTER_SECONDS`].
    fn expiration_jitter(&self) -> u64 {
        self.expiration_jitter_max_seconds.min(MAX_JITTER_SECONDS)
    }
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            near_limit_ratio: 0.8,
            cache_key_prefix: String::new(),
            expiration_jitter_max_seconds: 300,
            stop_increment_when_over_limit: false,
            all_or_nothing: false,
            shadow_mode: false,
            quota_mode: false,
            response_dynamic_metadata: false,
            decision_metadata: false,
            local_first_sync_interval: None,
            response_headers: None,
            request_headers: None,
            header_format: HeaderFormat::Original,
            retry_after_jitter: Duration::ZERO,
            max_descriptors: 1000,
            max_entries: 64,
            failure: FailureDefaults::default(),
        }
    }
}

/// Decides `ShouldRateLimit` requests against the live configuration and a
/// store. Cheap to share behind an `Arc`; every request reads one config
/// snapshot and one clock value, so a counter's key and the reset time it
/// reports name the same window.
#[derive(Debug)]
pub struct Engine {
    config: LiveConfig,
    store: Arc<dyn Store>,
    /// Where the store keeps a key: each item names its node.
    placement: Arc<dyn Placement>,
    clock: Arc<dyn Clock>,
    options: EngineOptions,
    local_cache: Option<LocalCache>,
    stats: Arc<Stats>,
    /// Hot-key detection (`HOT_KEYS_TOP_K` > 0).
    top_keys: Option<Arc<TopKeys>>,
    /// The decision audit (`DECISION_AUDIT_SAMPLE` > 0).
    audit: Option<Arc<crate::audit::Audit>>,
    /// The per-tenant overrides in force (empty unless some were written).
    overrides: Arc<crate::overrides::OverrideTable>,
    /// The overrides' version the over-limit cache was filled under: a
    /// change of any override empties the cache, so that a raised limit
    /// is not refused from it until its window ends.
    cached_under: std::sync::atomic::AtomicU64,
}

/// A request's descriptors matched to their rules.
pub(super) struct Matched {
    /// Each descriptor's limit (`None`: no rule, or replaced); taken by the
    /// store phase.
    pub(super) limits: Vec<Option<MatchedLimit>>,
    /// What `unlimited` and `replaces` made of each descriptor.
    pub(super) dispositions: Vec<Disposition>,
    /// Which descriptors count as quotas.
    pub(super) quota: Vec<bool>,
    /// Each descriptor's rule (`None`: no rule, or replaced).
    pub(super) rules: Vec<Option<Arc<crate::config::tree::RateLimitRule>>>,
    /// Which descriptors matched a shadow-mode rule.
    pub(super) shadow: Vec<bool>,
    /// How many descriptors named a domain no config holds.
    pub(super) unknown_domain: usize,
}

impl Engine {
    /// An engine; `local_cache` is the over-limit cache, if enabled.
    pub fn new(
        config: LiveConfig,
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        options: EngineOptions,
        local_cache: Option<LocalCache>,
        stats: Arc<Stats>,
    ) -> Engine {
        Engine {
            config,
            store,
            placement: Arc::new(InProcess),
            clock,
            options,
            local_cache,
            stats,
            top_keys: None,
            audit: None,
            overrides: crate::overrides::OverrideTable::new(),
            cached_under: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The engine applying the per-tenant overrides in `table`.
    pub fn with_overrides(mut self, table: Arc<crate::overrides::OverrideTable>) -> Engine {
        self.overrides = table;
        self
    }

    /// The engine naming each item's node by `placement` (the store's; an
    /// in-process store by default).
    pub fn with_placement(mut self, placement: Arc<dyn Placement>) -> Engine {
        self.placement = placement;
        self
    }

    /// The engine auditing its decisions with `audit`.
    pub fn with_audit(mut self, audit: Arc<crate::audit::Audit>) -> Engine {
        self.audit = Some(audit);
        self
    }

    /// The decision audit, if on.
    pub fn audit(&self) -> Option<&Arc<crate::audit::Audit>> {
        self.audit.as_ref()
    }

    /// The engine counting every matched descriptor in `top`.
    pub fn with_top_keys(mut self, top: Arc<TopKeys>) -> Engine {
        self.top_keys = Some(top);
        self
    }

    /// Hot-key detection, if on.
    pub fn top_keys(&self) -> Option<&Arc<TopKeys>> {
        self.top_keys.as_ref()
    }

    /// The live configuration handle.
    pub fn config(&self) -> &LiveConfig {
        &self.config
    }

    /// What the engine does beyond matching.
    pub fn options(&self) -> &EngineOptions {
        &self.options
    }

    /// The statistics.
    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// The local over-limit cache, if enabled.
    pub fn local_cache(&self) -> Option<&LocalCache> {
        self.local_cache.as_ref()
    }

    /// Decides one request, with no deadline but the store's own.
    pub async fn should_rate_limit(
        &self,
        request: &RateLimitRequest,
    ) -> Result<RateLimitResponse, ServiceError> {
        self.should_rate_limit_by(request, None).await
    }

    /// Decides one request whose store step must end by `deadline` (the
    /// caller's, less the margin its answer needs): items the store has not
    /// answered by then are answered by their rules' failure policies.
    pub async fn should_rate_limit_by(
        &self,
        request: &RateLimitRequest,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<RateLimitResponse, ServiceError> {
        let result = self.decide(request, deadline).await;
        match &result {
            Err(ServiceError::Store(_)) => self.stats.redis_error(),
            Err(_) => self.stats.service_error(),
            Ok(_) => {}
        }
        result
    }

    /// Validation, lookup, the store phase, the response: each a step.
    async fn decide(
        &self,
        request: &RateLimitRequest,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<RateLimitResponse, ServiceError> {
        let config = self.admit(request)?;
        // One reading of the clock per request: the hot-key counts and the
        // original's windows take it.
        let at = self.clock.now();
        let id = DecisionId::new();
        let mut matched = self.lookup(&config, request).await?;
        let (statuses, plan) = self.limit(request, &mut matched, at, deadline, id).await?;
        let decided = respond::Decided { id, statuses };
        let response = respond::respond(&self.options, &self.stats, request, &matched, decided);
        observe::observe(
            &self.stats,
            self.top_keys.as_deref(),
            request,
            matched.unknown_domain,
            &plan,
            &self.options.cache_key_prefix,
            at,
        );
        Ok(response)
    }

    /// What a request must be before it is matched: a domain, at least one
    /// descriptor, within the size caps; and a config to match it with.
    fn admit(
        &self,
        request: &RateLimitRequest,
    ) -> Result<Arc<crate::config::Config>, ServiceError> {
        if request.domain.is_empty() {
            return Err(ServiceError::EmptyDomain);
        }
        if request.descriptors.is_empty() {
            return Err(ServiceError::EmptyDescriptors);
        }
        self.check_size(request)?;
        self.config.current().ok_or(ServiceError::NoConfig)
    }

    /// The size caps: at most `max_descriptors` descriptors of at most
    /// `max_entries` entries each (Envoy sends a handful).
    fn check_size(&self, request: &RateLimitRequest) -> Result<(), ServiceError> {
        let (max_descriptors, max_entries) =
            (self.options.max_descriptors, self.options.max_entries);
        if request.descriptors.len() > max_descriptors {
            return Err(ServiceError::RequestTooLarge {
                what: "descriptors",
                got: request.descriptors.len(),
                limit: max_descriptors,
                setting: "REQUEST_MAX_DESCRIPTORS",
            });
        }
        match request.descriptors.iter().map(|d| d.entries.len()).max() {
            Some(most) if most > max_entries => Err(ServiceError::RequestTooLarge {
                what: "entries in one descriptor",
                got: most,
                limit: max_entries,
                setting: "REQUEST_MAX_ENTRIES",
            }),
            _ => Ok(()),
        }
    }

    /// Every descriptor's limit, with `replaces` and `unlimited` applied.
    /// Yields to the worker's other requests every [`SLICE`] descriptors.
    async fn lookup(
        &self,
        config: &crate::config::Config,
        request: &RateLimitRequest,
    ) -> Result<Matched, ServiceError> {
        if let Some(cache) = &self.local_cache {
            use std::sync::atomic::Ordering;
            let version = self.overrides.version();
            if self.cached_under.swap(version, Ordering::Relaxed) != version {
                cache.clear();
            }
        }
        let mut limits = Vec::with_capacity(request.descriptors.len());
        let mut unknown_domain = 0;
        for (index, d) in request.descriptors.iter().enumerate() {
            if index % SLICE == SLICE - 1 {
                tokio::task::yield_now().await;
            }
            let found = config
                .tree()
                .find(&request.domain, &d.entries, d.limit.as_ref())
                .map_err(|e| ServiceError::InvalidDescriptor {
                    index,
                    reason: e.to_string(),
                })?;
            limits.push(match found {
                Lookup::Limit(mut m) => {
                    // A request-carried limit comes first; then an override
                    // of this exact descriptor replaces the rule's limit.
                    if !m.from_override {
                        if let Some(o) = self.overrides.find(&request.domain, &d.entries) {
                            if let Some(rule) = o.applied_to(&m.rule) {
                                m.rule = rule;
                                m.tenant_override = Some(o.version);
                            }
                        }
                    }
                    Some(m)
                }
                Lookup::NoLimit => None,
                Lookup::DomainNotFound => {
                    unknown_domain += 1;
                    None
                }
            });
        }
        let dispositions = aggregate::apply_replaces(&mut limits);
        let rules = limits
            .iter()
            .map(|l| l.as_ref().map(|l| l.rule.clone()))
            .collect();
        let shadow = limits
            .iter()
            .map(|l| l.as_ref().is_some_and(|l| l.rule.shadow_mode))
            .collect();
        let quota = limits
            .iter()
            .zip(&dispositions)
            .map(|(l, d)| {
                *d != Disposition::Unlimited
                    && (self.options.quota_mode || l.as_ref().is_some_and(|l| l.rule.quota_mode))
            })
            .collect();
        Ok(Matched {
            limits,
            dispositions,
            quota,
            rules,
            shadow,
            unknown_domain,
        })
    }

    /// The store phase: every descriptor's items in one work, one trip
    /// down the store stack (under the stack's one deadline, the earlier of
    /// `STORE_TIMEOUT` and `deadline`), and each descriptor's status from
    /// its answers.
    async fn limit(
        &self,
        request: &RateLimitRequest,
        matched: &mut Matched,
        at: Duration,
        deadline: Option<tokio::time::Instant>,
        id: DecisionId,
    ) -> Result<(Vec<DescriptorStatus>, plan::Plan), ServiceError> {
        let now = at.as_secs();
        let options = plan::PlanOptions {
            prefix: &self.options.cache_key_prefix,
            shadow_mode: self.options.shadow_mode,
            all_or_nothing: self.options.all_or_nothing,
            stop_when_over: self.options.stop_increment_when_over_limit,
            quota: &matched.quota,
            failure: self.options.failure,
            placement: &*self.placement,
            expiration_jitter: self.options.expiration_jitter(),
            local_first: self.options.local_first_sync_interval,
        };
        let mut plan = plan::Plan::new();
        let limits = std::mem::take(&mut matched.limits);
        for (index, limit) in limits.into_iter().enumerate() {
            if index % SLICE == SLICE - 1 {
                tokio::task::yield_now().await;
            }
            let Some(limit) = limit else { continue };
            let hits = hits_of(request, index);
            let stats = self.stats.rule(&limit.stats_key, limit.stats_per_value);
            if !request.descriptors[index].is_negative_hits {
                stats.total_hits.increment(hits);
            }
            // The local cache is asked before any I/O, as the original does.
            let cached_over = |key: &str| {
                self.local_cache
                    .as_ref()
                    .is_some_and(|c| c.is_over_limit(key, now))
            };
            plan.add(
                request,
                index,
                limit,
                stats,
                hits,
                now,
                &options,
                cached_over,
            );
        }
        plan.settle(&options);
        let subjects = plan.work.len();
        let audited = match &self.audit {
            Some(audit) => audited::add_references(audit, &options, &mut plan),
            None => Vec::new(),
        };
        let reply = if plan.work.is_empty() {
            Reply {
                answers: Vec::new(),
                committed: plan.work.policy.commits(),
            }
        } else {
            self.store.execute(&plan.work, deadline).await
        };
        if !audited.is_empty() {
            audited::judge(&audited, &plan.work, &reply, id);
        }
        // A reference's failure is the audit's, never the request's; a
        // give-back's is a lost refund, never the request's either.
        let mut lost = vec![false; subjects];
        let answers = reply
            .answers
            .into_iter()
            .zip(&plan.work.items)
            .take(subjects)
            .enumerate()
            .map(|(i, (answer, item))| match answer {
                Err(_) if item.gives_back() => {
                    lost[i] = true;
                    Ok(Answer::ByPolicy(crate::store::PolicyAnswer {
                        decision: crate::limiter::Decision::Allow {
                            remaining: 0,
                            reset_after: Duration::ZERO,
                        },
                        fell_back: false,
                    }))
                }
                other => other,
            })
            .collect::<Result<Vec<Answer>, StoreError>>()?;

        let mut statuses: Vec<DescriptorStatus> = matched
            .dispositions
            .iter()
            .map(|d| DescriptorStatus {
                code: Code::Ok,
                limit_remaining: if *d == Disposition::Unlimited {
                    u32::MAX
                } else {
                    0
                },
                ..DescriptorStatus::default()
            })
            .collect();
        let ratio = self.options.near_limit_ratio;
        for d in plan.descriptors.iter().filter(|d| d.give_back) {
            let lost = lost[d.items.clone()].iter().any(|&l| l);
            statuses[d.index] = status::given_back(d, &answers, lost, now);
            if let (Some(cache), plan::Shape::Counted { key, .. }) = (&self.local_cache, &d.shape) {
                cache.remove(key);
            }
        }
        for d in plan.descriptors.iter().filter(|d| !d.give_back) {
            statuses[d.index] = status::status(
                d,
                &answers,
                reply.committed,
                ratio,
                now,
                self.local_cache.as_ref(),
            );
        }
        Ok((statuses, plan))
    }
}

/// The cost of descriptor `index`: its own `hits_addend` when present (even
/// 0), else the request's, where 0 means 1. A descriptor with
/// `is_negative_hits` gives back the same: an explicit 0 gives back
/// nothing.
fn hits_of(request: &RateLimitRequest, index: usize) -> u64 {
    request.descriptors[index]
        .hits_addend
        .unwrap_or_else(|| u64::from(request.hits_addend.max(1)))
}

#[cfg(test)]
mod tests;
