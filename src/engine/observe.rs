//! What a decided request tells the instance about its traffic, recorded
//! once its answer is built: the descriptors of an unknown domain
//! (`domain_not_found`), and each planned descriptor counted in the
//! hot-key sketch. A hot key is known by its descriptor's key part (the
//! same text two descriptors share exactly when they share counters), and
//! its leased items' keys are the keys whose leases `/hotkeys` reads.

use std::time::Duration;

use super::plan::{Plan, Planned};
use super::types::RateLimitRequest;
use crate::hotkeys::top::{Candidacy, KeyInfo};
use crate::hotkeys::TopKeys;
use crate::metrics::Stats;
use crate::store::Item;

/// Records what `request`, decided through `plan`, tells: `unknown`
/// descriptors of a domain no config holds, and with `top` each planned
/// descriptor's decision at `at`. A key's description is built only when
/// it may join the top list.
pub(super) fn observe(
    stats: &Stats,
    top: Option<&TopKeys>,
    request: &RateLimitRequest,
    unknown: usize,
    plan: &Plan,
    prefix: &str,
    at: Duration,
) {
    // The keys that may join the top list, described while the plan is at
    // hand; then the statistics, then the list.
    let offers: Vec<(Candidacy, KeyInfo)> = top.map_or_else(Vec::new, |top| {
        plan.descriptors
            .iter()
            .filter_map(|planned| {
                let candidacy = top.count(top.hash_of([planned.key.as_str()]), at)?;
                Some((
                    candidacy,
                    describe(request, planned, &plan.work.items, prefix),
                ))
            })
            .collect()
    });
    for _ in 0..unknown {
        stats.domain_not_found(&request.domain);
    }
    if let Some(top) = top {
        for (candidacy, info) in offers {
            top.offer(candidacy, info);
        }
    }
}

/// What `/hotkeys` shows of a descriptor: its entries as the counters see
/// them (`share_threshold`'s patterns in place of values), its shards, and
/// every key a lease of it can be held on: each leased limit's item, and
/// for a sharded one every sub-bucket (the plan picked one of them).
fn describe(
    request: &RateLimitRequest,
    planned: &Planned,
    items: &[Item],
    prefix: &str,
) -> KeyInfo {
    let rule = &planned.limit.rule;
    let pattern = planned.limit.share_threshold_key_pattern.as_deref();
    let entries = &request.descriptors[planned.index].entries;
    let mut lease_keys = Vec::new();
    for (n, l) in rule.limits.iter().enumerate().filter(|(_, l)| l.hot.lease) {
        match u8::try_from(l.sub_buckets.len()) {
            Ok(k @ 2..) => lease_keys
                .extend((0..k).map(|i| planned.key.sub_bucket(prefix, &l.key_suffix, i, k))),
            // The rule's limits are its items, in order.
            _ => lease_keys.extend(items.get(planned.items.start + n).map(|i| i.key.clone())),
        }
    }
    KeyInfo {
        domain: request.domain.clone(),
        entries: entries
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let shown = match pattern.and_then(|p| p.get(i)).filter(|p| !p.is_empty()) {
                    Some(p) => p,
                    None => &e.value,
                };
                (e.key.clone(), shown.clone())
            })
            .collect(),
        shards: rule
            .limits
            .iter()
            .map(|l| u8::try_from(l.sub_buckets.len()).unwrap_or(64).max(1))
            .max()
            .unwrap_or(1),
        lease: rule.limits.iter().any(|l| l.hot.lease),
        lease_keys,
    }
}
