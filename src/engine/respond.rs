//! The response around a request's statuses: the refusals' retry jitter,
//! the overall code, the rate-limit headers (computed before global shadow
//! mode turns a refusal into OK, as the original does), global shadow mode
//! and the dynamic metadata.

use std::time::Duration;

use super::aggregate::{self, Disposition};
use super::types::{Code, DescriptorStatus, RateLimitRequest, RateLimitResponse};
use super::{dynamic_metadata, headers, EngineOptions, Matched};
use crate::metrics::Stats;

/// The overall code, headers, shadow mode and metadata around `statuses`.
pub(super) fn respond(
    options: &EngineOptions,
    stats: &Stats,
    request: &RateLimitRequest,
    matched: &Matched,
    mut statuses: Vec<DescriptorStatus>,
) -> RateLimitResponse {
    let (dispositions, quota) = (&matched.dispositions, &matched.quota);
    jitter_refusals(options.retry_after_jitter, &mut statuses);
    let (mut overall, passed) = aggregate::overall_code(&statuses, dispositions, quota);
    let response_headers_to_add = match &options.response_headers {
        Some(names) => {
            let entries = |i: usize| request.descriptors[i].entries.as_slice();
            let shown = |i: usize| {
                !options.shadow_mode
                    && !matched.shadow[i]
                    && dispositions[i] != Disposition::Unlimited
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
            headers::for_response(options.header_format, names, &listing, refused)
        }
        None => Vec::new(),
    };
    if overall == Code::OverLimit && options.shadow_mode {
        overall = Code::Ok;
        stats.global_shadow_mode();
    }
    let dynamic_metadata = options.response_dynamic_metadata.then(|| {
        let refs: Vec<_> = matched.metadata.iter().map(|m| m.as_deref()).collect();
        dynamic_metadata::build(request, &refs, &passed)
    });
    RateLimitResponse {
        overall_code: overall,
        statuses,
        response_headers_to_add,
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
