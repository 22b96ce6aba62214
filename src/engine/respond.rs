//! The response around a request's statuses: the refusals' retry jitter,
//! the overall code, the rate-limit headers of the response and of the
//! upstream request (computed before global shadow
//! mode turns a refusal into OK, as the original does), global shadow mode,
//! the dynamic metadata and the decision's own metadata.

use std::time::Duration;

use super::aggregate::{self, Disposition};
use super::dynamic_metadata::{self, DecisionFacts};
use super::headers::{self, HeaderFormat};
use super::types::{Code, DecisionId, DescriptorStatus, RateLimitRequest, RateLimitResponse};
use super::{EngineOptions, Matched};
use crate::metrics::Stats;

/// What the store phase decided: one status per descriptor, and the
/// decision's id.
pub(super) struct Decided {
    /// The decision's id.
    pub(super) id: DecisionId,
    /// One per descriptor, in request order.
    pub(super) statuses: Vec<DescriptorStatus>,
}

/// The overall code, headers, shadow mode and metadata around the
/// decided statuses.
pub(super) fn respond(
    options: &EngineOptions,
    stats: &Stats,
    request: &RateLimitRequest,
    matched: &Matched,
    decided: Decided,
) -> RateLimitResponse {
    let Decided { id, mut statuses } = decided;
    let (dispositions, quota) = (&matched.dispositions, &matched.quota);
    jitter_refusals(options.retry_after_jitter, &mut statuses);
    let (mut overall, passed) = aggregate::overall_code(&statuses, dispositions, quota);
    let entries = |i: usize| request.descriptors[i].entries.as_slice();
    let shown = |i: usize| {
        !options.shadow_mode && !matched.shadow[i] && dispositions[i] != Disposition::Unlimited
    };
    let listing = headers::Listing {
        statuses: &statuses,
        entries: &entries,
        shown: &shown,
        dispositions,
        quota,
    };
    // Global shadow mode answers OK: nothing to retry.
    let refused = overall == Code::OverLimit && !options.shadow_mode;
    let response_headers_to_add = match &options.response_headers {
        Some(names) => headers::for_response(options.header_format, names, &listing, refused),
        None => Vec::new(),
    };
    // The upstream sees the original's three headers of the same chosen
    // status, shadow-mode limits included (that is what they are for: an
    // upstream serving a request over a limit on trial differently).
    let request_headers_to_add = match &options.request_headers {
        Some(names) => headers::for_response(HeaderFormat::Original, names, &listing, refused),
        None => Vec::new(),
    };
    // Only a response that carries the decision, or a debug log that
    // reads it, needs the deciding rule and the shadowed ones found.
    let facts = (options.decision_metadata || tracing::enabled!(tracing::Level::DEBUG))
        .then(|| decision_facts(options, matched, &statuses, id, overall));
    if overall == Code::OverLimit && options.shadow_mode {
        overall = Code::Ok;
        stats.global_shadow_mode();
    }
    let mut dynamic_metadata = options.response_dynamic_metadata.then(|| {
        let refs: Vec<_> = matched
            .rules
            .iter()
            .map(|r| r.as_ref().and_then(|r| r.metadata.as_deref()))
            .collect();
        dynamic_metadata::build(request, &refs, &passed)
    });
    if let Some(facts) = facts {
        if refused || !facts.shadow_violations.is_empty() {
            tracing::debug!(
                decision = %facts.id,
                code = ?facts.code,
                rule = facts.rule.as_deref().unwrap_or_default(),
                shadowed = facts.shadow_violations.len(),
                "over a limit"
            );
        }
        if options.decision_metadata {
            let metadata = dynamic_metadata.get_or_insert_with(Default::default);
            metadata
                .0
                .insert("decision".into(), dynamic_metadata::decision(&facts));
        }
    }
    RateLimitResponse {
        overall_code: overall,
        statuses,
        response_headers_to_add,
        request_headers_to_add,
        dynamic_metadata,
    }
}

/// What the decision's metadata and log line say: the rule that decided
/// (the refusing one, else the one closest to its limit: the status the
/// headers describe), and the rules over a limit that were let through (a
/// shadow rule's, or any refusal under global shadow mode). `overall` is
/// the code before global shadow mode; Envoy is answered OK under it.
fn decision_facts(
    options: &EngineOptions,
    matched: &Matched,
    statuses: &[DescriptorStatus],
    id: DecisionId,
    overall: Code,
) -> DecisionFacts {
    let label = |i: usize| matched.rules[i].as_deref().map(|r| r.label().to_string());
    let over = |s: &DescriptorStatus| s.code == Code::OverLimit;
    DecisionFacts {
        id,
        code: match overall {
            Code::OverLimit if options.shadow_mode => Code::Ok,
            code => code,
        },
        rule: headers::chosen_status(statuses, &matched.dispositions, &matched.quota)
            .and_then(label),
        shadow_violations: (0..statuses.len())
            .filter(|&i| statuses[i].shadowed || (options.shadow_mode && over(&statuses[i])))
            .filter_map(label)
            .collect(),
    }
}

/// `RETRY_AFTER_JITTER`: each OVER_LIMIT status waits a uniformly random
/// `[0, jitter)` longer, so refused clients do not all return at one
/// instant; never earlier than the real reset.
fn jitter_refusals(jitter: Duration, statuses: &mut [DescriptorStatus]) {
    if jitter.is_zero() {
        return;
    }
    for s in statuses.iter_mut().filter(|s| s.code == Code::OverLimit) {
        if let Some(d) = &mut s.duration_until_reset {
            *d += jitter.mul_f64(rand::random::<f64>());
        }
    }
}
