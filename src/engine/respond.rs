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
    // The rule that decided: the refusing one, else the one closest to
    // its limit (the status the headers describe).
    let deciding = headers::chosen_status(&statuses, dispositions, quota);
    // Over a limit and let through: a shadow rule's, or any refusal under
    // global shadow mode.
    let shadowed: Vec<usize> = (0..statuses.len())
        .filter(|&i| {
            statuses[i].shadowed || (options.shadow_mode && statuses[i].code == Code::OverLimit)
        })
        .collect();
    if overall == Code::OverLimit && options.shadow_mode {
        overall = Code::Ok;
        stats.global_shadow_mode();
    }
    let rule_label = |i: usize| matched.rules[i].as_deref().map(|r| r.label().to_string());
    if refused || !shadowed.is_empty() {
        tracing::debug!(
            decision = %id,
            code = ?overall,
            rule = deciding.and_then(rule_label).unwrap_or_default(),
            shadowed = shadowed.len(),
            "over a limit"
        );
    }
    let mut dynamic_metadata = options.response_dynamic_metadata.then(|| {
        let refs: Vec<_> = matched
            .rules
            .iter()
            .map(|r| r.as_ref().and_then(|r| r.metadata.as_deref()))
            .collect();
        dynamic_metadata::build(request, &refs, &passed)
    });
    if options.decision_metadata {
        let facts = DecisionFacts {
            id,
            code: overall,
            rule: deciding.and_then(rule_label),
            shadow_violations: shadowed.iter().filter_map(|&i| rule_label(i)).collect(),
        };
        let metadata = dynamic_metadata.get_or_insert_with(Default::default);
        metadata
            .0
            .insert("decision".into(), dynamic_metadata::decision(&facts));
    }
    RateLimitResponse {
        overall_code: overall,
        statuses,
        response_headers_to_add,
        request_headers_to_add,
        dynamic_metadata,
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
