//! A request's store work in Redis: one `limits.lua` call per node (per
//! primary in Redis Cluster, whatever slots its keys sit on; per hash slot
//! on a cluster that refuses the per-node script; the per-second Redis
//! apart), all sent before any answer is awaited.
//!
//! # Time
//!
//! The script reads `TIME` and decides in whole microseconds; no service
//! node's clock enters a decision. (The memory store decides in nanoseconds
//! on its injected clock; the algorithms are the same, the unit of time is
//! not, so GCRA's rounding up of each admission's cost is at most 1 µs here
//! instead of 1 ns. Lua numbers are doubles: products above 2⁵³, e.g. a
//! burst of 10⁹ over a day in µs, lose exactness.)
//!
//! # All or nothing
//!
//! The items on one node are one script: decided, the counters counted,
//! and the rest taken only if every binding item (counters included) is
//! admitted, atomically. Keys of one descriptor's opt-in limits share a
//! hash tag, so they are always on one slot; the original's keys name
//! their window, so on a Cluster they sit on slots of their own, and a
//! request's keys on one primary are still one script. A work whose items
//! are on several nodes (Cluster primaries, or the main and the per-second
//! Redis) is **reserved, then refunded**: every node's script runs
//! concurrently and takes its own part if that part passes; if any part
//! refused (a binding counter over its limit, or a binding limit denied),
//! the parts that took are sent a refund (the same costs given back, the
//! sliding log's entries removed by name). Counters are never given back:
//! the original counts every request. So "a request an original window
//! refuses takes nothing from the opt-in limits" holds across nodes after
//! one round trip. Bound: a refused request holds its cost on the other
//! nodes' limits for one round trip (concurrent requests can be denied
//! meanwhile: at most the cost of the requests in flight on those keys),
//! and keeps it only if the refund itself fails (Redis down between the two
//! calls), at most its cost per limit. A part whose node failed refunds
//! nothing (its items are answered by their failure policies, not
//! refused), so during a partial outage a request that a policy then
//! refuses can stay counted on the healthy nodes: at most its cost per
//! limit, until their windows end. `integration/store_conformance.rs`
//! (`refused_requests_take_nothing`) measures it.
//!
//! With `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` and counters on several
//! nodes, the counters are read first and the increments decided from
//! them (a second call per node): a concurrent request can change a counter
//! between the two steps, so across nodes the over-deduction is bounded by
//! the hits of the requests in flight on those keys (the original has this
//! race on every request). On one node it is one atomic call.
//!
//! On a single node (plain or behind sentinels) the groups of concurrent
//! requests are coalesced into one script call, each group still applied
//! on its own, at most `MAX_BATCH_KEYS` keys a call.
//!
//! # Large works
//!
//! Redis runs one script at a time, so a caller's call waits behind every
//! script ahead of it. A work whose items are all the original's counters
//! ([`Work::is_independent`]: each counts on its own) is sent in slices of
//! [`SLICE`] keys, each a part of its own; a work that commits all or
//! nothing stays one script per node, its size bounded by the request caps
//! (`REQUEST_MAX_DESCRIPTORS`).

use tokio::time::Instant;

use super::args::{decided, malformed, Part, COUNTER_REPLY, ITEM_REPLY};
use super::node::{until, Lanes};
use super::placement::RedisPlacement;
use crate::platform::workers::SLICE;
use crate::store::{Answer, Decided, Item, Limit, Policy, Reply, StoreError, Work};

/// Runs `work`, one script call per node. A node that fails fails its own
/// items only; a part refused by a node that answered has the other parts
/// refunded.
pub(super) async fn execute(
    lanes: &Lanes,
    placement: &RedisPlacement,
    work: &Work,
    deadline: Option<Instant>,
) -> Reply {
    let items = &work.items;
    if items.is_empty() {
        return Reply {
            answers: Vec::new(),
            committed: work.policy.commits(),
        };
    }
    let groups = placement.group_by_node(items.iter().map(|c| {
        (
            c.key.as_str(),
            c.limit.one_second(),
            c.rule.replicated,
            c.node.as_ref(),
        )
    }));
    // An independent work (counters alone) goes in slices of SLICE keys a
    // script call, so that another caller's call waits behind a slice, not
    // behind a whole large request; any other is one script per node.
    let sliced = items.len() > SLICE && work.is_independent();
    let mut parts: Vec<Part<'_>> = Vec::with_capacity(groups.len());
    for (to, positions) in groups {
        if sliced && positions.len() > SLICE {
            parts.extend(positions.chunks(SLICE).map(|p| Part {
                to: to.clone(),
                positions: p.to_vec(),
                items,
            }));
        } else {
            parts.push(Part {
                to,
                positions,
                items,
            });
        }
    }
    // Names a sliding log's entries and an in-flight limit's slots (a
    // reference's too), so that a refund removes exactly them; nothing else
    // reads it.
    let needs_nonce = items.iter().any(|c| match &c.limit {
        Limit::Algorithm(l) | Limit::Reference { contract: l, .. } => matches!(
            l.name(),
            crate::limiter::AlgorithmName::SlidingLog | crate::limiter::AlgorithmName::Concurrency
        ),
        _ => false,
    });
    let nonce = match needs_nonce {
        true => format!("{:x}", rand::random::<u64>()),
        false => String::new(),
    };
    let mut costs: Vec<u64> = items.iter().map(|c| c.cost()).collect();
    let (mode, taken_at) = match work.policy {
        Policy::Commit => ("commit", 0),
        Policy::CommitStopping if counters_span_parts(&parts) => {
            stop_across_parts(lanes, items, &parts, &nonce, &mut costs, deadline).await;
            ("commit", 0)
        }
        Policy::CommitStopping => ("stop", 0),
        Policy::Decide => ("decide", 0),
        Policy::Refund { taken_at } => (
            "refund",
            u64::try_from(taken_at.as_micros()).unwrap_or(u64::MAX),
        ),
    };
    let call = |part: &Part<'_>| {
        let group = part.group(mode, &nonce, taken_at, None, |i| costs[i]);
        until(deadline, lanes.run(part.to.clone(), group, deadline))
    };
    // One node (the common case): no join.
    let replies = match parts.as_slice() {
        [one] => vec![call(one).await],
        _ => futures::future::join_all(parts.iter().map(call)).await,
    };

    // Every position is in exactly one part, answered below.
    let mut results: Vec<Option<Result<Decided, StoreError>>> = vec![None; items.len()];
    let mut committed_parts = Vec::new();
    let mut refused = false;
    for (part, reply) in parts.iter().zip(replies) {
        let reply = match reply {
            Ok(r) => r,
            Err(e) => {
                for &i in &part.positions {
                    results[i] = Some(Err(e.clone()));
                }
                continue;
            }
        };
        // A compact group answers its counters' values alone and reads no
        // time; any other answers `time, committed` first.
        let (now_us, committed, mut at) = match part.is_compact(mode, &part.positions) {
            true => (0, part.compact_commits(mode, &reply), 0),
            false => (reply[0], reply[1] == 1, 2),
        };
        for &i in &part.positions {
            let width = match items[i].limit {
                Limit::Counter(_) => COUNTER_REPLY,
                _ => ITEM_REPLY,
            };
            // `call` checked the total length; this guards each row.
            results[i] = Some(match reply.get(at..at + width) {
                Some(row) => Ok(decided(&items[i], row, now_us)),
                None => Err(malformed("wrong length")),
            });
            at += width;
        }
        if committed {
            committed_parts.push((part, now_us));
        } else {
            refused = true;
        }
    }
    let results: Vec<Result<Decided, StoreError>> = results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(malformed("an item without an answer"))))
        .collect();
    if refused && parts.len() > 1 && work.policy.commits() {
        refund(lanes, &committed_parts, &results, &nonce, deadline).await;
    }
    // What the nodes that answered did; a failed node's items are answered
    // by their policies above this store.
    let committed = work.policy.commits() && !refused;
    let answers = results
        .into_iter()
        .zip(items)
        .map(|(r, c)| {
            let mut r = r?;
            if let (true, Limit::Window(_)) = (committed && r.decision.is_allowed(), &c.limit) {
                r.count = r.count.saturating_add(c.taken());
            }
            Ok(Answer::Decided(r))
        })
        .collect();
    Reply { answers, committed }
}

/// Whether the counters of a work sit on more than one part.
fn counters_span_parts(parts: &[Part<'_>]) -> bool {
    parts
        .iter()
        .filter(|p| {
            p.positions
                .iter()
                .any(|&i| matches!(p.items[i].limit, Limit::Counter(_)))
        })
        .count()
        > 1
}

/// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` over counters on several
/// nodes: reads them, then zeroes `costs` of the counters that would not
/// pass their limit if any would. A counter that could not be read cannot
/// say it would exceed; it fails again in the call that follows, on its
/// own.
async fn stop_across_parts(
    lanes: &Lanes,
    items: &[Item],
    parts: &[Part<'_>],
    nonce: &str,
    costs: &mut [u64],
    deadline: Option<Instant>,
) {
    let counters = |p: &Part<'_>| -> Vec<usize> {
        p.positions
            .iter()
            .copied()
            .filter(|&i| matches!(p.items[i].limit, Limit::Counter(_)) && !p.items[i].gives_back())
            .collect()
    };
    let reads = parts.iter().map(|part| {
        let only = counters(part);
        let group = part.group("read", nonce, 0, Some(&only), |i| part.items[i].cost());
        async move {
            let reply = until(deadline, lanes.run(part.to.clone(), group, deadline)).await;
            (only, reply)
        }
    });
    let mut exceeds = vec![false; costs.len()];
    for (only, reply) in futures::future::join_all(reads).await {
        let Ok(values) = reply else { continue };
        for (&i, value) in only.iter().zip(values.iter().skip(2)) {
            if let (Limit::Counter(w), Ok(v)) = (&items[i].limit, u64::try_from(*value)) {
                exceeds[i] = v.saturating_add(costs[i]) > w.limit;
            }
        }
    }
    if exceeds.iter().any(|&e| e) {
        for (i, cost) in costs.iter_mut().enumerate() {
            if !exceeds[i] && matches!(items[i].limit, Limit::Counter(_)) && !items[i].gives_back()
            {
                *cost = 0;
            }
        }
    }
}

/// Gives back what the committed parts of a refused work took. A failed
/// refund is logged: it leaves at most the request's cost counted on those
/// limits (see the module doc).
async fn refund(
    lanes: &Lanes,
    committed: &[(&Part<'_>, i64)],
    results: &[Result<Decided, StoreError>],
    nonce: &str,
    deadline: Option<Instant>,
) {
    let calls = committed.iter().filter_map(|(part, now_us)| {
        let taken: Vec<usize> = part
            .positions
            .iter()
            .copied()
            .filter(|&i| {
                let item = &part.items[i];
                // A reference that follows the commit recorded its cost
                // whatever it decided; a counter's is never given back.
                let recorded = |r: &Decided| match &item.limit {
                    Limit::Counter(_) => false,
                    Limit::Reference { subject, .. } => subject
                        .and_then(|s| part.items.get(s))
                        .is_none_or(|s| s.limit.taken_on_commit()),
                    _ => r.decision.is_allowed(),
                };
                item.taken() > 0 && results[i].as_ref().is_ok_and(recorded)
            })
            .collect();
        if taken.is_empty() {
            return None;
        }
        let at = now_us.max(&0).unsigned_abs();
        let group = part.group("refund", nonce, at, Some(&taken), |i| part.items[i].cost());
        Some(until(deadline, lanes.run(part.to.clone(), group, deadline)))
    });
    for result in futures::future::join_all(calls).await {
        if let Err(e) = result {
            tracing::warn!(error = %e, "refund of a refused request failed; its cost stays counted until the limits' keys expire");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of the future `f` returns for a request's work.
    fn future_size<F, Fut>(_: F) -> usize
    where
        F: FnOnce(&'static Lanes, &'static RedisPlacement, &'static Work, Option<Instant>) -> Fut,
    {
        std::mem::size_of::<Fut>()
    }

    #[test]
    fn a_requests_store_future_stays_small() {
        // Every layer above the store boxes or moves this future once per
        // request; a script call's own future (kilobytes inside fred) is
        // boxed where it is made, off this path. It was 16 KB with it.
        let size = future_size(execute);
        assert!(size <= 4096, "work::execute's future is {size} bytes");
    }
}
