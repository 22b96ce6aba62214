//! Descriptors decided all or nothing through [`Store::check`]: the opt-in
//! algorithms (a rule with `algorithm`, `burst`, `unit_multiplier` or
//! `rate_limits`), and with `ALL_OR_NOTHING` the original's fixed windows.
//!
//! What this module adds to the engine is pure: the checks of a descriptor
//! (one per limit) and its status from their answers. A descriptor with
//! several limits reports the one closest to exhaustion: a refused limit if
//! any (the one whose retry is furthest), else the smallest fraction of its
//! capacity remaining.
//!
//! [`Store::check`]: crate::store::Store::check

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{ConfiguredLimit, MatchedLimit};
use crate::limiter::fixed_window::{self, Window};
use crate::limiter::Decision;
use crate::metrics::RuleStats;
use crate::store::key::{algorithm_key, fixed_window_key, sub_bucket_key};
use crate::store::{Check, Checked, CheckedLimit, PolicyAnswer};

use super::types::{Code, CurrentLimit, DescriptorStatus, RateLimitRequest};

/// One descriptor decided through checks.
pub(crate) struct CheckedDescriptor {
    /// Its position in the request.
    pub(crate) index: usize,
    pub(crate) limit: MatchedLimit,
    pub(crate) stats: Arc<RuleStats>,
    pub(crate) hits: u64,
    /// Its checks in the batch.
    pub(crate) checks: Range<usize>,
    /// For a rule in the original's vocabulary: its window.
    pub(crate) window: Option<Window>,
}

/// What the checks need from the engine's options.
pub(crate) struct KeyOptions<'a> {
    pub(crate) prefix: &'a str,
    /// Global `SHADOW_MODE`: nothing binds.
    pub(crate) shadow_mode: bool,
    /// Which descriptors of the request count as quotas (`quota_mode`).
    pub(crate) quota: &'a [bool],
    /// Whether the request has exactly one quota descriptor.
    pub(crate) one_quota: bool,
    /// The failure policy of rules that set none.
    pub(crate) failure: super::FailureDefaults,
}

/// A check's answer: the store's, or its failure policy's when the store
/// could not answer.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Answered {
    /// Decided by the store.
    Store(Checked),
    /// Decided by `failure_mode`.
    Policy(PolicyAnswer),
}

impl Answered {
    fn checked(&self) -> Checked {
        match self {
            Answered::Store(c) => *c,
            Answered::Policy(p) => Checked {
                decision: p.decision,
                count: 0,
                at: Duration::ZERO,
            },
        }
    }
}

impl KeyOptions<'_> {
    /// Whether a refusal of descriptor `index` refuses the request by
    /// itself, and so vetoes the commit: not in shadow mode (reported, let
    /// through), and not a quota unless it is the request's only one (a
    /// request is refused by its quotas only when all of them refuse, which
    /// one check cannot know; with several, a refused request can be
    /// counted by its other limits).
    fn binds(&self, index: usize, rule_shadow_mode: bool) -> bool {
        let is_quota = self.quota.get(index).copied().unwrap_or(false);
        !(self.shadow_mode || rule_shadow_mode) && (!is_quota || self.one_quota)
    }
}

/// Appends the checks of descriptor `index` (matched to `limit`) to `batch`.
/// `ttl_seconds` gives an original window's key TTL.
#[allow(clippy::too_many_arguments)]
pub(crate) fn add_checks(
    batch: &mut Vec<Check>,
    request: &RateLimitRequest,
    index: usize,
    limit: MatchedLimit,
    stats: Arc<RuleStats>,
    hits: u64,
    now_secs: u64,
    options: &KeyOptions<'_>,
    ttl_seconds: impl Fn(u64) -> u64,
) -> Option<CheckedDescriptor> {
    let entries = &request.descriptors[index].entries;
    let pattern = limit.share_threshold_key_pattern.as_deref();
    let binding = options.binds(index, limit.rule.shadow_mode);
    let first = batch.len();
    let mut window = None;
    if limit.rule.is_original() {
        let unit_seconds = limit.rule.unit.seconds()?;
        let w = Window::containing(now_secs, unit_seconds);
        window = Some(w);
        batch.push(Check {
            key: fixed_window_key(options.prefix, &request.domain, entries, pattern, w.start),
            limit: CheckedLimit::OriginalWindow {
                limit: u64::from(limit.rule.requests_per_unit),
                window: w,
                ttl_seconds: ttl_seconds(w.length),
            },
            cost: hits,
            binding,
            on_failure: options
                .failure
                .on_failure(&limit.rule.failure, u64::from(limit.rule.requests_per_unit)),
            lease: false,
        });
    } else {
        // One pick per descriptor: its limits with the same `shards` use
        // the same sub-bucket, on one slot.
        let pick = rand::random::<u32>();
        for l in &limit.rule.limits {
            let (key, limiter) = match u8::try_from(l.sub_buckets.len()) {
                Ok(k @ 2..) => {
                    // < k ≤ 64.
                    let i = u8::try_from(pick % u32::from(k)).unwrap_or(0);
                    let key = sub_bucket_key(
                        options.prefix,
                        &request.domain,
                        entries,
                        pattern,
                        &l.key_suffix,
                        i,
                        k,
                    );
                    (key, l.sub_buckets[usize::from(i)])
                }
                _ => (
                    algorithm_key(
                        options.prefix,
                        &request.domain,
                        entries,
                        pattern,
                        &l.key_suffix,
                    ),
                    l.limiter,
                ),
            };
            batch.push(Check {
                key,
                limit: CheckedLimit::Algorithm(limiter),
                cost: hits,
                binding,
                on_failure: options
                    .failure
                    .on_failure(&l.failure, u64::from(l.requests_per_unit)),
                lease: l.hot.lease,
            });
        }
    }
    Some(CheckedDescriptor {
        index,
        limit,
        stats,
        hits,
        checks: first..batch.len(),
        window,
    })
}

/// The status of `d` from its answers, with its per-rule stats counted.
pub(crate) fn status(
    d: &CheckedDescriptor,
    results: &[Answered],
    committed: bool,
    near_ratio: f32,
    now_secs: u64,
) -> DescriptorStatus {
    let rule = &d.limit.rule;
    let own = &results[d.checks.clone()];
    let answers: Vec<Checked> = own
        .iter()
        .enumerate()
        .map(|(i, a)| logical(rule.limits.get(i), a.checked()))
        .collect();
    let answers = answers.as_slice();
    // Capacity and reported limit of the descriptor's i-th limit.
    let describe = |i: usize| -> (u64, CurrentLimit) {
        match rule.limits.get(i) {
            Some(l) => (
                l.limiter.capacity(),
                CurrentLimit {
                    requests_per_unit: l.requests_per_unit,
                    unit: l.unit,
                    name: if l.name.is_empty() {
                        rule.name.clone()
                    } else {
                        l.name.clone()
                    },
                    window_seconds: l.limiter.period().as_secs(),
                    burst: matches!(l.limiter, crate::limiter::Limiter::TokenBucket(_))
                        .then(|| l.limiter.capacity()),
                },
            ),
            None => (
                u64::from(rule.requests_per_unit),
                super::current_limit(rule),
            ),
        }
    };
    let chosen = closest_to_exhaustion(answers, |i| describe(i).0);
    let Some((i, answer)) = chosen.map(|i| (i, answers[i])) else {
        return DescriptorStatus::default();
    };
    let (capacity, current) = describe(i);
    let denied = answers.iter().any(|a| !a.decision.is_allowed());
    let stats = &d.stats;
    if denied {
        stats.over_limit.increment(d.hits);
    } else {
        // Used before and after this request, as the original's near-limit
        // arithmetic wants them.
        let (before, after) = match d.window {
            Some(_) if committed => (answer.count.saturating_sub(d.hits), answer.count),
            Some(_) => (answer.count, answer.count.saturating_add(d.hits)),
            None => {
                let after = capacity.saturating_sub(answer.decision.remaining());
                (after.saturating_sub(d.hits), after)
            }
        };
        let cap = u32::try_from(capacity).unwrap_or(u32::MAX);
        let verdict = fixed_window::judge(cap, near_ratio, d.hits, before, after);
        stats.near_limit.increment(verdict.near_limit_hits);
        stats.within_limit.increment(verdict.within_limit_hits);
    }
    let code = match (denied, rule.shadow_mode) {
        (true, true) => {
            stats.shadow_mode.increment(d.hits);
            Code::Ok
        }
        (true, false) => Code::OverLimit,
        (false, _) => Code::Ok,
    };
    // An original window resets with its window, unless its failure
    // policy refused it: then the retry is the policy's.
    let by_policy = matches!(own[i], Answered::Policy(_));
    let until = match (d.window, answer.decision) {
        (Some(w), Decision::Allow { .. }) => Duration::from_secs(w.reset_after(now_secs)),
        (Some(w), _) if !by_policy => Duration::from_secs(w.reset_after(now_secs)),
        (_, Decision::Deny { retry_after, .. }) => retry_after,
        (_, other) => other.reset_after(),
    };
    DescriptorStatus {
        code,
        current_limit: Some(current),
        limit_remaining: u32::try_from(answer.decision.remaining()).unwrap_or(u32::MAX),
        duration_until_reset: Some(until),
    }
}

/// A sub-bucket's answer as its limit's: `remaining` times the number of
/// sub-buckets (what the whole has left if the others are like this one,
/// as they are under uniform picks), at most the limit's capacity. Other
/// answers as they are.
fn logical(limit: Option<&ConfiguredLimit>, mut answer: Checked) -> Checked {
    let k = limit.map_or(0, |l| l.sub_buckets.len() as u64);
    if let (Some(l), true, Decision::Allow { remaining, .. }) = (limit, k > 1, &mut answer.decision)
    {
        *remaining = remaining.saturating_mul(k).min(l.limiter.capacity());
    }
    answer
}

/// Which answer a descriptor reports: among refused ones the furthest
/// retry (a capacity refusal first: no wait helps); else the smallest
/// fraction `remaining / capacity`, ties to the first.
fn closest_to_exhaustion(answers: &[Checked], capacity: impl Fn(usize) -> u64) -> Option<usize> {
    let refusal_rank = |d: &Decision| match d {
        Decision::ExceedsCapacity { .. } => Some(Duration::MAX),
        Decision::Deny { retry_after, .. } => Some(*retry_after),
        Decision::Allow { .. } => None,
    };
    let refused = answers
        .iter()
        .enumerate()
        .filter_map(|(i, a)| refusal_rank(&a.decision).map(|r| (i, r)))
        .fold(None::<(usize, Duration)>, |best, (i, r)| match best {
            Some((_, b)) if b >= r => best,
            _ => Some((i, r)),
        });
    if let Some((i, _)) = refused {
        return Some(i);
    }
    // remaining_a / cap_a < remaining_b / cap_b, compared exactly.
    let fraction = |i: usize| {
        (
            u128::from(answers[i].decision.remaining()),
            u128::from(capacity(i).max(1)),
        )
    };
    (0..answers.len()).reduce(|best, i| {
        let ((r1, c1), (r2, c2)) = (fraction(best), fraction(i));
        if r2 * c1 < r1 * c2 {
            i
        } else {
            best
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allow(remaining: u64) -> Checked {
        Checked {
            decision: Decision::Allow {
                remaining,
                reset_after: Duration::from_secs(1),
            },
            count: 0,
            at: Duration::ZERO,
        }
    }

    fn deny(retry: u64) -> Checked {
        Checked {
            decision: Decision::Deny {
                retry_after: Duration::from_secs(retry),
                reset_after: Duration::from_secs(retry),
            },
            count: 0,
            at: Duration::ZERO,
        }
    }

    #[test]
    fn reports_the_limit_closest_to_exhaustion() {
        // 10/s with 5 left (50 %) against 10,000/day with 900 left (9 %).
        let caps = [10, 10_000];
        assert_eq!(
            closest_to_exhaustion(&[allow(5), allow(900)], |i| caps[i]),
            Some(1)
        );
        assert_eq!(
            closest_to_exhaustion(&[allow(1), allow(9_000)], |i| caps[i]),
            Some(0)
        );
        // A refusal wins; among refusals the furthest retry.
        assert_eq!(
            closest_to_exhaustion(&[deny(1), allow(0), deny(3_600)], |_| 10),
            Some(2)
        );
        let never = Checked {
            decision: Decision::ExceedsCapacity {
                capacity: 1,
                reset_after: Duration::ZERO,
            },
            count: 0,
            at: Duration::ZERO,
        };
        assert_eq!(
            closest_to_exhaustion(&[deny(3_600), never], |_| 10),
            Some(1)
        );
        assert_eq!(closest_to_exhaustion(&[], |_| 10), None);
    }
}
