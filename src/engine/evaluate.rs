//! A dry run: what the live config and the store would decide for a
//! request, charging nothing (`POST /evaluate`, and with no cost the usage
//! read-back, `GET /usage`).
//!
//! The request is matched and planned as a real one, from the same config
//! snapshot and the same store stack, with two changes that make it a
//! read: the original's counters are decided before they are counted (as
//! under `ALL_OR_NOTHING`, on the same keys), and the work's policy is
//! [`Policy::Decide`], under which nothing but a counter takes, so nothing
//! takes at all. Each limit is then decided by its own algorithm with the
//! request's real cost: an answer of "allowed" is exactly what a real
//! request of that cost would get at the store's time, if nothing else
//! takes in between. No statistic, audit, hot-key count or local over-limit
//! cache entry is touched.
//!
//! A local-first rule's store count lags this instance's unwritten
//! admissions (at most its stated over-admission bound), and a leased
//! rule's leased tokens are held out of the store: for those the dry run
//! can admit what the instance's own view would refuse.

use std::sync::Arc;
use std::time::Duration;

use super::aggregate::Disposition;
use super::plan::{Plan, PlanOptions};
use super::types::{RateLimitRequest, ServiceError};
use super::Engine;
use crate::config::tree::RateLimitRule;
use crate::limiter::Decision;
use crate::metrics::RuleStats;
use crate::store::{Answer, Limit, Policy, StoreExt};

/// What the dry run found for one descriptor.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluated {
    /// The rule that applies: its label (name or path) and path; `None`
    /// when none does (see `why`).
    pub rule: Option<RuleFound>,
    /// Why no limit applies (no rule matched, `unlimited`, replaced by
    /// another limit's `replaces`, a refund); `None` when one does.
    pub why: Option<String>,
    /// The request's cost for it.
    pub hits: u64,
    /// Each of its limits, in the rule's order.
    pub limits: Vec<LimitFound>,
    /// Whether a request of `hits` would be admitted by every limit (a
    /// shadow-mode rule reports the truth here; its request would still
    /// pass).
    pub allowed: bool,
}

/// The rule a descriptor matched.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleFound {
    /// Its name, or its path when unnamed.
    pub label: String,
    /// Its path (`domain.key_value…`).
    pub path: String,
    /// The request carried its own limit (Envoy's `limit` override), which
    /// replaced the configured one.
    pub from_request: bool,
    /// The version of the per-tenant override that replaced the rule's
    /// limit, if one did.
    pub override_version: Option<u64>,
    /// `shadow_mode`: reported, never refused.
    pub shadow_mode: bool,
}

/// One limit's state and what it would decide.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitFound {
    /// The algorithm (`fixed_window` for the original's windows).
    pub algorithm: &'static str,
    /// Requests per window, or a bucket's rate per period, or slots.
    pub limit: u64,
    /// The window or period, seconds (0 for an in-flight limit).
    pub window_seconds: u64,
    /// What its window holds now, for a fixed or calendar window; `None`
    /// for the other algorithms, whose state is not a count.
    pub used: Option<u64>,
    /// What would remain after a request of the cost (0 when refused).
    pub remaining: u64,
    /// Until it resets (a refusal: until a retry can pass).
    pub reset_after: Duration,
    /// Whether it admits the cost.
    pub allowed: bool,
    /// Why there is no decision (the store could not answer); the other
    /// fields are then empty.
    pub error: Option<String>,
}

impl Engine {
    /// What the live config and the store would decide for `request`,
    /// charging nothing. With `cost`, every descriptor is asked for that
    /// cost instead of its own (0: a pure read of the usage).
    pub async fn evaluate(
        &self,
        request: &RateLimitRequest,
        cost: Option<u64>,
    ) -> Result<Vec<Evaluated>, ServiceError> {
        let config = self.admit(request)?;
        let now = self.clock.now().as_secs();
        let mut matched = self.lookup(&config, request).await?;
        let options = PlanOptions {
            prefix: &self.options.cache_key_prefix,
            shadow_mode: self.options.shadow_mode,
            // The original's counters decided before they count: a read.
            all_or_nothing: true,
            stop_when_over: false,
            quota: &matched.quota,
            failure: self.options.failure,
            placement: &*self.placement,
            expiration_jitter: self.options.expiration_jitter(),
            local_first: self.options.local_first_sync_interval,
        };
        let unrecorded = Arc::new(RuleStats::unrecorded());
        let mut plan = Plan::new();
        let mut found: Vec<Evaluated> = Vec::with_capacity(request.descriptors.len());
        let limits = std::mem::take(&mut matched.limits);
        for (index, limit) in limits.into_iter().enumerate() {
            let d = &request.descriptors[index];
            let hits = cost.unwrap_or_else(|| super::hits_of(request, index));
            let mut evaluated = Evaluated {
                rule: None,
                why: None,
                hits,
                limits: Vec::new(),
                allowed: true,
            };
            match (limit, &matched.dispositions[index]) {
                (_, Disposition::Unlimited) => evaluated.why = Some("unlimited".into()),
                (_, Disposition::DroppedByReplaces) => {
                    evaluated.why = Some("replaced by another limit of the request".into())
                }
                (None, _) => evaluated.why = Some("no rule matched".into()),
                (Some(_), _) if d.is_negative_hits => {
                    evaluated.why = Some("a refund: it gives back, never refused".into())
                }
                (Some(limit), _) => {
                    evaluated.rule = Some(RuleFound {
                        label: limit.rule.label().to_string(),
                        path: limit.rule.load_key.clone(),
                        from_request: limit.from_override,
                        override_version: limit.tenant_override,
                        shadow_mode: limit.rule.shadow_mode,
                    });
                    plan.add(
                        request,
                        index,
                        limit,
                        unrecorded.clone(),
                        hits,
                        now,
                        &options,
                        |_| false,
                    );
                }
            }
            found.push(evaluated);
        }
        plan.settle(&options);
        // Nothing takes: the counters are decided, never counted.
        plan.work.policy = Policy::Decide;
        let reply = match plan.work.is_empty() {
            true => None,
            false => Some(self.store.execute(&plan.work, None).await),
        };
        for d in &plan.descriptors {
            let evaluated = &mut found[d.index];
            let rule = &d.limit.rule;
            for (n, i) in d.items.clone().enumerate() {
                let item = &plan.work.items[i];
                let answer = reply.as_ref().and_then(|r| r.answers.get(i));
                let limit = describe(rule, n, &item.limit, answer, now);
                evaluated.allowed &= limit.allowed;
                evaluated.limits.push(limit);
            }
        }
        Ok(found)
    }
}

/// Limit `n` of `rule` (the store item `limit`) as the dry run found it:
/// described as its statuses describe it, its answer read as theirs (a
/// sub-bucket's for its whole limit).
fn describe(
    rule: &RateLimitRule,
    n: usize,
    limit: &Limit,
    answer: Option<&Result<Answer, crate::store::StoreError>>,
    now_secs: u64,
) -> LimitFound {
    let (_, current) = super::status::describe(rule, n, now_secs);
    let algorithm = rule
        .limits
        .get(n)
        .map_or("fixed_window", |l| l.limiter.name().as_str());
    // An original window's item names the window it counts (a calendar
    // period's included).
    let window_seconds = limit
        .original_window()
        .map_or(current.window_seconds, |w| w.window.length);
    let mut found = LimitFound {
        algorithm,
        limit: u64::from(current.requests_per_unit),
        window_seconds,
        used: None,
        remaining: 0,
        reset_after: Duration::ZERO,
        allowed: false,
        error: None,
    };
    match answer {
        Some(Ok(Answer::Decided(d))) => {
            let d = super::status::logical(rule.limits.get(n), *d);
            found.allowed = d.decision.is_allowed();
            found.remaining = d.decision.remaining();
            found.reset_after = match d.decision {
                Decision::Deny { retry_after, .. } => retry_after,
                other => other.reset_after(),
            };
            if limit.original_window().is_some() {
                found.used = Some(d.count);
            }
        }
        Some(Ok(Answer::ByPolicy(p))) => {
            found.allowed = p.decision.is_allowed();
            found.remaining = p.decision.remaining();
            found.error = Some("the store did not answer: its failure_mode decided".into());
        }
        Some(Err(e)) => found.error = Some(e.to_string()),
        None => found.error = Some("not asked".into()),
    }
    found
}
