//! Each descriptor's status from the answers to its items, with its
//! per-rule statistics counted: the original's arithmetic for a counted
//! original window (near-limit, the local over-limit cache), and for a
//! decided descriptor the limit closest to exhaustion.

use std::time::Duration;

use crate::config::ConfiguredLimit;
use crate::limiter::fixed_window::{self, Window};
use crate::limiter::Decision;
use crate::store::{Answer, Decided, PolicyAnswer};

use super::local_cache::LocalCache;
use super::plan::{Planned, Shape};
use super::types::{Code, CurrentLimit, DescriptorStatus};

/// The status of `d` from the answers of the whole work (`answers[i]` for
/// item `i`), `committed` as the store said.
pub(crate) fn status(
    d: &Planned,
    answers: &[Answer],
    committed: bool,
    near_ratio: f32,
    now_secs: u64,
    local_cache: Option<&LocalCache>,
) -> DescriptorStatus {
    let own = &answers[d.items.clone()];
    match &d.shape {
        Shape::Counted { window, key, .. } => counted(
            d,
            *window,
            key,
            own.first(),
            near_ratio,
            now_secs,
            local_cache,
        ),
        Shape::Decided { window } => decided(d, *window, own, committed, near_ratio, now_secs),
    }
}

/// The limit a status of `rule` reports.
pub(crate) fn current_limit(rule: &crate::config::RateLimitRule) -> CurrentLimit {
    CurrentLimit {
        requests_per_unit: rule.requests_per_unit,
        unit: rule.unit,
        name: rule.name.clone(),
        window_seconds: rule.unit.seconds().unwrap_or(0),
        burst: None,
    }
}

/// `limit` over the window it counts: a calendar period's own length (a
/// month of 28 to 31 days, a day of 23 to 25 hours), which for an
/// epoch-aligned window is its unit's.
fn windowed(limit: CurrentLimit, window: Window) -> CurrentLimit {
    CurrentLimit {
        window_seconds: window.length,
        ..limit
    }
}

/// An answer as the store's decision; a failure policy's with no count.
fn as_decided(a: &Answer) -> Decided {
    match a {
        Answer::Decided(d) => *d,
        Answer::ByPolicy(p) => Decided {
            decision: p.decision,
            count: 0,
            at: Duration::ZERO,
        },
    }
}

/// The status of a counted original window: its answer (none when the
/// local over-limit cache answered), the original's verdict from its
/// counter after the increment, and a refusal remembered in the cache.
fn counted(
    d: &Planned,
    window: Window,
    key: &str,
    answer: Option<&Answer>,
    near_ratio: f32,
    now_secs: u64,
    local_cache: Option<&LocalCache>,
) -> DescriptorStatus {
    let rule = &d.limit.rule;
    let stats = &d.stats;
    let after = match answer {
        Some(Answer::ByPolicy(policy)) => return by_policy(d, window, policy, now_secs),
        Some(Answer::Decided(decided)) => Some(decided.count),
        None => None,
    };
    let verdict = match after {
        None => {
            stats.over_limit_with_local_cache.increment(d.hits);
            fixed_window::judge_cached_over_limit(d.hits)
        }
        Some(after) => fixed_window::judge(
            rule.requests_per_unit,
            near_ratio,
            d.hits,
            after.wrapping_sub(d.hits),
            after,
        ),
    };
    stats.over_limit.increment(verdict.over_limit_hits);
    stats.near_limit.increment(verdict.near_limit_hits);
    stats.within_limit.increment(verdict.within_limit_hits);
    if verdict.over_limit && after.is_some() {
        if let Some(cache) = local_cache {
            cache.insert(key, window.start + window.length);
        }
    }
    let shadowed = verdict.over_limit && rule.shadow_mode;
    let code = if shadowed {
        stats.shadow_mode.increment(verdict.shadowable_hits);
        Code::Ok
    } else if verdict.over_limit {
        Code::OverLimit
    } else {
        Code::Ok
    };
    DescriptorStatus {
        code,
        current_limit: Some(windowed(current_limit(rule), window)),
        limit_remaining: verdict.remaining,
        duration_until_reset: Some(Duration::from_secs(window.reset_after(now_secs))),
        shadowed,
    }
}

/// The status of an original window that its failure policy answered: the
/// floor's (or the denial's) remaining and retry, counted in the rule's
/// statistics as any decision is; never put in the local cache.
fn by_policy(d: &Planned, window: Window, policy: &PolicyAnswer, now: u64) -> DescriptorStatus {
    let rule = &d.limit.rule;
    let denied = !policy.decision.is_allowed();
    let code = if !denied {
        d.stats.within_limit.increment(d.hits);
        Code::Ok
    } else if rule.shadow_mode {
        d.stats.over_limit.increment(d.hits);
        d.stats.shadow_mode.increment(d.hits);
        Code::Ok
    } else {
        d.stats.over_limit.increment(d.hits);
        Code::OverLimit
    };
    let until = match policy.decision {
        Decision::Deny { retry_after, .. } => retry_after,
        _ => Duration::from_secs(window.reset_after(now)),
    };
    DescriptorStatus {
        code,
        current_limit: Some(windowed(current_limit(rule), window)),
        limit_remaining: u32::try_from(policy.decision.remaining()).unwrap_or(u32::MAX),
        duration_until_reset: Some(until),
        shadowed: denied && rule.shadow_mode,
    }
}

/// The status of a decided descriptor from its answers, with its per-rule
/// stats counted. A descriptor with several limits reports the one
/// closest to exhaustion: a refused limit if any (the one whose retry is
/// furthest), else the smallest fraction of its capacity remaining.
fn decided(
    d: &Planned,
    window: Option<Window>,
    own: &[Answer],
    committed: bool,
    near_ratio: f32,
    now_secs: u64,
) -> DescriptorStatus {
    let rule = &d.limit.rule;
    let answers: Vec<Decided> = own
        .iter()
        .enumerate()
        .map(|(i, a)| logical(rule.limits.get(i), as_decided(a)))
        .collect();
    let answers = answers.as_slice();
    let describe = |i: usize| describe(rule, i, now_secs);
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
        let (before, after) = match window {
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
    let by_policy = matches!(own[i], Answer::ByPolicy(_));
    let until = match (window, answer.decision) {
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
        shadowed: denied && rule.shadow_mode,
    }
}

/// Capacity and reported limit of `rule`'s `i`-th limit at `now_secs`.
pub(super) fn describe(
    rule: &crate::config::RateLimitRule,
    i: usize,
    now_secs: u64,
) -> (u64, CurrentLimit) {
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
                window_seconds: match &l.calendar {
                    Some(c) => c.window_at(now_secs).length,
                    None => l.limiter.window_seconds(),
                },
                burst: matches!(l.limiter, crate::limiter::Limiter::TokenBucket(_))
                    .then(|| l.limiter.capacity()),
            },
        ),
        None => (u64::from(rule.requests_per_unit), current_limit(rule)),
    }
}

/// The status of a descriptor that gave its hits back: OK whatever its
/// answers say (a refund is never a refusal), with what its limit closest
/// to exhaustion has left after it; its hits are counted as refunded, or
/// as lost when the store could not take them (`lost`), and never as hits.
pub(crate) fn given_back(
    d: &Planned,
    answers: &[Answer],
    lost: bool,
    now_secs: u64,
) -> DescriptorStatus {
    let rule = &d.limit.rule;
    let refunds = d.stats.refunds();
    match lost {
        true => refunds.refund_lost.increment(d.hits),
        false => refunds.refunded_hits.increment(d.hits),
    }
    let own: Vec<Decided> = answers[d.items.clone()]
        .iter()
        .enumerate()
        .map(|(i, a)| logical(rule.limits.get(i), as_decided(a)))
        .collect();
    let (remaining, current, until) = match &d.shape {
        Shape::Counted { window, .. } => (
            own.first().map_or(0, |a| a.decision.remaining()),
            windowed(current_limit(rule), *window),
            Duration::from_secs(window.reset_after(now_secs)),
        ),
        Shape::Decided { window } => {
            let allowed: Vec<Decided> = own
                .iter()
                .map(|a| Decided {
                    decision: Decision::Allow {
                        remaining: a.decision.remaining(),
                        reset_after: a.decision.reset_after(),
                    },
                    ..*a
                })
                .collect();
            let Some(i) = closest_to_exhaustion(&allowed, |i| describe(rule, i, now_secs).0) else {
                return DescriptorStatus::default();
            };
            let until = match window {
                Some(w) => Duration::from_secs(w.reset_after(now_secs)),
                None => allowed[i].decision.reset_after(),
            };
            (
                allowed[i].decision.remaining(),
                describe(rule, i, now_secs).1,
                until,
            )
        }
    };
    DescriptorStatus {
        code: Code::Ok,
        current_limit: Some(current),
        limit_remaining: u32::try_from(remaining).unwrap_or(u32::MAX),
        duration_until_reset: Some(until),
        shadowed: false,
    }
}

/// A sub-bucket's answer as its limit's: `remaining` times the number of
/// sub-buckets (what the whole has left if the others are like this one,
/// as they are under uniform picks), at most the limit's capacity. Other
/// answers as they are.
pub(super) fn logical(limit: Option<&ConfiguredLimit>, mut answer: Decided) -> Decided {
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
fn closest_to_exhaustion(answers: &[Decided], capacity: impl Fn(usize) -> u64) -> Option<usize> {
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

    fn allow(remaining: u64) -> Decided {
        Decided {
            decision: Decision::Allow {
                remaining,
                reset_after: Duration::from_secs(1),
            },
            count: 0,
            at: Duration::ZERO,
        }
    }

    fn deny(retry: u64) -> Decided {
        Decided {
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
        let never = Decided {
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
