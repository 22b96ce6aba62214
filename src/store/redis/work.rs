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
//! on its own.

use std::sync::Arc;
use std::time::Duration;

use fred::types::Value;
use tokio::time::Instant;

use super::{coalesce, int, until, Backend, RedisStore, Route};
use crate::limiter::Decision;
use crate::store::{Answer, Decided, Item, Limit, Policy, Reply, StoreError, StoreErrorKind, Work};

/// Fields per item in ARGV, and per counter in a compact group.
const FIELDS: usize = 6;
const COUNTER_FIELDS: usize = 3;
/// Values the script answers for a counter, and for any other item.
const COUNTER_REPLY: usize = 1;
const ITEM_REPLY: usize = 5;

/// One script call's worth of a work's items.
struct Part<'a> {
    per_second: bool,
    route: Route,
    positions: Vec<usize>,
    items: &'a [Item],
}

impl Part<'_> {
    /// The script group for `mode` over this part's items (or `only` of
    /// them), with `cost(i)` as item `i`'s cost.
    fn group(
        &self,
        mode: &'static str,
        nonce: &str,
        taken_at: u64,
        only: Option<&[usize]>,
        cost: impl Fn(usize) -> u64,
    ) -> Group {
        let positions: &[usize] = only.unwrap_or(&self.positions);
        if self.is_compact(mode, positions) {
            return self.counters(positions, cost);
        }
        let mut args = Vec::with_capacity(4 + FIELDS * positions.len());
        args.extend([
            Value::from_static_str(mode),
            Value::from(nonce),
            int(taken_at),
            int(positions.len() as u64),
        ]);
        let mut reply_len = 2;
        for &i in positions {
            let c = &self.items[i];
            let (kind, limit, period, burst) = fields(&c.limit);
            let flag = match (&c.limit, c.binding) {
                // -(j + 1) for a counter subject, the group's 1-based item
                // j; -1 for the commit.
                (Limit::Reference { subject, .. }, _) => {
                    let j = subject
                        .filter(|&s| matches!(self.items[s].limit, Limit::Counter(_)))
                        .and_then(|s| positions.iter().position(|&p| p == s))
                        .map_or(0, |j| j as i64 + 1);
                    -(j + 1)
                }
                (_, true) => 1,
                (_, false) => 0,
            };
            args.extend([
                Value::from_static_str(kind),
                int(limit),
                int(period),
                int(burst),
                int(cost(i)),
                Value::Integer(flag),
            ]);
            reply_len += if kind == "oc" {
                COUNTER_REPLY
            } else {
                ITEM_REPLY
            };
        }
        Group {
            keys: self.keys(positions),
            args: GroupArgs::Listed(args),
            reply_len,
        }
    }

    /// The keys of the items at `positions`, in order.
    fn keys(&self, positions: &[usize]) -> Vec<String> {
        positions
            .iter()
            .map(|&i| self.items[i].key.clone())
            .collect()
    }

    /// Whether the group for `mode` over `positions` is a compact one: the
    /// original's counters alone, in a mode that counts them without STOP
    /// (commit or decide). Such a group needs no decision in Redis, only
    /// the increments; [`Part::compact_commits`] decides it from the values.
    fn is_compact(&self, mode: &str, positions: &[usize]) -> bool {
        matches!(mode, "commit" | "decide")
            && positions
                .iter()
                .all(|&i| matches!(self.items[i].limit, Limit::Counter(_)))
    }

    /// The compact group: the one cost, TTL and jitter bound of all its
    /// counters (a request's counters on a node usually share all three),
    /// or else `count`, `n`, then per counter its own. The script answers
    /// each counter's value after, and nothing else.
    fn counters(&self, positions: &[usize], cost: impl Fn(usize) -> u64) -> Group {
        let counter_args = |i: usize| {
            let (_, _, ttl, jitter) = fields(&self.items[i].limit);
            CounterArgs {
                cost: cost(i),
                ttl,
                jitter,
            }
        };
        let shared = positions
            .first()
            .map(|&i| counter_args(i))
            .filter(|&first| positions.iter().all(|&i| counter_args(i) == first));
        let args = match shared {
            Some(shared) => GroupArgs::SameCounters(shared),
            None => {
                let mut args = Vec::with_capacity(2 + COUNTER_FIELDS * positions.len());
                args.extend([Value::from_static_str("count"), int(positions.len() as u64)]);
                for &i in positions {
                    args.extend(counter_args(i).args());
                }
                GroupArgs::Listed(args)
            }
        };
        Group {
            keys: self.keys(positions),
            args,
            reply_len: COUNTER_REPLY * positions.len(),
        }
    }

    /// Whether a compact group under `mode` committed, from its counters'
    /// `values` after: in commit mode, iff no binding counter passed its
    /// limit (the counters count either way, as the original's do).
    fn compact_commits(&self, mode: &str, values: &[i64]) -> bool {
        mode == "commit"
            && self.positions.iter().zip(values).all(|(&i, &v)| {
                let item = &self.items[i];
                match &item.limit {
                    Limit::Counter(w) if item.binding => w.admits(v.max(0).unsigned_abs()),
                    _ => true,
                }
            })
    }
}

/// One request's items on one node, as one group of a script call.
#[derive(Debug)]
pub(super) struct Group {
    keys: Vec<String>,
    args: GroupArgs,
    /// How many values the script answers for it.
    reply_len: usize,
}

/// What the script needs of a counter besides its key: the increment, and
/// the TTL (s) and jitter bound (s) it draws the key's expiry from when the
/// increment creates the key.
#[derive(Debug, Clone, Copy, PartialEq)]
struct CounterArgs {
    cost: u64,
    ttl: u64,
    jitter: u64,
}

impl CounterArgs {
    fn args(self) -> [Value; COUNTER_FIELDS] {
        [int(self.cost), int(self.ttl), int(self.jitter)]
    }
}

/// A group's arguments, after the keys.
#[derive(Debug, PartialEq)]
enum GroupArgs {
    /// Counters alone, sharing one [`CounterArgs`]: sent as the script's
    /// `count-same`, `n`, cost, TTL, jitter, one such header for a run of
    /// these groups with the same one (see [`CallArgs`]).
    SameCounters(CounterArgs),
    /// Any other group, as the script reads it: `mode, nonce, taken-at
    /// time, n`, then the items' fields, or a `count` group.
    Listed(Vec<Value>),
}

/// One script call's keys, arguments and answer sizes, from its groups in
/// order. Consecutive counter groups with the same [`CounterArgs`] (the
/// common case when many requests' counters are coalesced into one call)
/// become one `count-same` group of the script: its answer, a value per
/// counter in key order, is the groups' answers one after another, so it
/// still splits back by their sizes; the call sends one header for the run
/// instead of one per group.
#[derive(Debug)]
struct CallArgs {
    keys: Vec<String>,
    /// The script's group count, then its groups.
    args: Vec<Value>,
    /// Per group given, how many values of the answer are its.
    sizes: Vec<usize>,
}

impl CallArgs {
    fn new(groups: Vec<Group>) -> CallArgs {
        let n_keys: usize = groups.iter().map(|g| g.keys.len()).sum();
        let n_args: usize = groups
            .iter()
            .map(|g| match &g.args {
                GroupArgs::SameCounters(_) => 2 + COUNTER_FIELDS,
                GroupArgs::Listed(args) => args.len(),
            })
            .sum();
        let mut keys = Vec::with_capacity(n_keys);
        let mut sizes = Vec::with_capacity(groups.len());
        let mut args = Vec::with_capacity(1 + n_args);
        args.push(Value::Null);
        let mut script_groups = 0u64;
        // The open `count-same` run: where its `n` sits, its arguments, its `n`.
        let mut run: Option<(usize, CounterArgs, u64)> = None;
        for g in groups {
            let n = g.keys.len() as u64;
            keys.extend(g.keys);
            sizes.push(g.reply_len);
            match g.args {
                GroupArgs::SameCounters(shared) => match &mut run {
                    Some((at, same, count)) if *same == shared => {
                        *count += n;
                        args[*at] = int(*count);
                    }
                    _ => {
                        args.push(Value::from_static_str("count-same"));
                        run = Some((args.len(), shared, n));
                        args.push(int(n));
                        args.extend(shared.args());
                        script_groups += 1;
                    }
                },
                GroupArgs::Listed(listed) => {
                    args.extend(listed);
                    run = None;
                    script_groups += 1;
                }
            }
        }
        args[0] = int(script_groups);
        CallArgs { keys, args, sizes }
    }
}

/// `limits.lua` calls on one node, for the coalescer: groups of several
/// requests in one call, each still applied on its own.
#[derive(Debug)]
pub(super) struct LimitCalls {
    backend: Arc<Backend>,
    /// The per-node script, for a Cluster primary: the groups' keys may
    /// sit on any of its slots.
    per_node: bool,
}

impl LimitCalls {
    pub(super) fn new(backend: Arc<Backend>, per_node: bool) -> LimitCalls {
        LimitCalls { backend, per_node }
    }

    async fn call(&self, groups: Vec<Group>) -> Result<Vec<Vec<i64>>, StoreError> {
        let backend = &self.backend;
        let CallArgs { keys, args, sizes } = CallArgs::new(groups);
        let n_keys = keys.len();
        let (script, keys, argv) = match (self.per_node, &backend.node_script) {
            (true, Some(script)) => {
                // The first key is declared and routes the call; all of
                // them follow their count in ARGV (see node_keys.lua).
                let routing = keys.first().cloned().into_iter().collect();
                let mut argv = Vec::with_capacity(1 + n_keys + args.len());
                argv.push(int(n_keys as u64));
                argv.extend(keys.into_iter().map(Value::from));
                argv.extend(args);
                (script, routing, argv)
            }
            _ => (&backend.script, keys, args),
        };
        backend
            .call(script, keys, argv, sizes)
            .await
            .map_err(moved_key)
    }
}

/// A per-node call that touched a key its primary no longer serves (the
/// routes changed under a failover or a resharding) did not reach the
/// key's node: unreachable, as a call to a failed node is, so that the
/// routing table is read again and the items' policies answer.
fn moved_key(e: StoreError) -> StoreError {
    if e.kind == StoreErrorKind::Rejected && e.message.contains("non local key") {
        StoreError::new(StoreErrorKind::Unavailable, e.message)
    } else {
        e
    }
}

impl coalesce::Batch for LimitCalls {
    type Item = Group;
    type Answer = Vec<i64>;

    fn run(
        &self,
        items: Vec<Group>,
    ) -> impl std::future::Future<Output = Result<Vec<Vec<i64>>, StoreError>> + Send {
        self.call(items)
    }
}

/// `kind, limit, period (µs; the TTL in s for the original's), burst (the
/// jitter bound in s for the original's)`.
fn fields(limit: &Limit) -> (&'static str, u64, u64, u64) {
    let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1);
    match limit {
        Limit::Algorithm(l) | Limit::Reference { contract: l, .. } => (
            l.name().key_tag(),
            l.limit(),
            micros(l.period()),
            l.capacity(),
        ),
        Limit::Counter(w) => ("oc", w.limit, w.ttl_seconds, w.jitter_seconds),
        Limit::Window(w) => ("ow", w.limit, w.ttl_seconds, w.jitter_seconds),
    }
}

/// One item's answer from its row of the reply: a counter's value, or
/// `code, remaining, retry µs, reset µs, count`.
fn decided(c: &Item, row: &[i64], now_us: i64) -> Decided {
    let us = |v: i64| Duration::from_micros(v.max(0).unsigned_abs());
    let at = us(now_us);
    if let Limit::Counter(w) = &c.limit {
        // A group of counters alone reads no time in Redis: the key names
        // the window, and the reset this reports is only informational.
        let at = match now_us {
            0 => crate::limiter::Clock::now(&crate::limiter::SystemClock),
            _ => at,
        };
        let value = row[0].max(0).unsigned_abs();
        return Decided {
            decision: w.decision(value, at.as_secs()),
            count: value,
            at,
        };
    }
    let (code, remaining, mut retry, mut reset, count) = (
        row[0],
        row[1].max(0).unsigned_abs(),
        us(row[2]),
        us(row[3]),
        row[4].max(0).unsigned_abs(),
    );
    if let Limit::Window(w) = &c.limit {
        // The key names the window; its end is the reset.
        let end = w.window.start + w.window.length;
        reset = Duration::from_secs(end.saturating_sub(at.as_secs()).max(1));
        retry = reset;
    }
    let decision = match code {
        1 => Decision::Allow {
            remaining,
            reset_after: reset,
        },
        2 => Decision::ExceedsCapacity {
            capacity: match &c.limit {
                Limit::Algorithm(l) | Limit::Reference { contract: l, .. } => l.capacity(),
                Limit::Counter(w) | Limit::Window(w) => w.limit,
            },
            reset_after: reset,
        },
        _ => Decision::Deny {
            retry_after: retry.max(Duration::from_micros(1)),
            reset_after: reset,
        },
    };
    Decided {
        decision,
        count,
        at,
    }
}

fn malformed(what: &str) -> StoreError {
    StoreError::new(
        StoreErrorKind::Rejected,
        format!("unexpected reply from the limits script: {what}"),
    )
}

/// Runs `work`, one script call per node. A node that fails fails its own
/// items only; a part refused by a node that answered has the other parts
/// refunded.
pub(super) async fn execute(store: &RedisStore, work: &Work, deadline: Option<Instant>) -> Reply {
    let items = &work.items;
    if items.is_empty() {
        return Reply {
            answers: Vec::new(),
            committed: work.policy.commits(),
        };
    }
    let groups = store.group_by_node(
        items
            .iter()
            .map(|c| (c.key.as_str(), c.limit.one_second(), c.node.as_ref())),
    );
    let parts: Vec<Part<'_>> = groups
        .into_iter()
        .map(|((per_second, route), positions)| Part {
            per_second,
            route,
            positions,
            items,
        })
        .collect();
    // Names a sliding log's entries (a reference's too), so that a refund
    // removes exactly them; nothing else reads it.
    let needs_nonce = items.iter().any(|c| match &c.limit {
        Limit::Algorithm(l) | Limit::Reference { contract: l, .. } => {
            l.name() == crate::limiter::AlgorithmName::SlidingLog
        }
        _ => false,
    });
    let nonce = match needs_nonce {
        true => format!("{:x}", rand::random::<u64>()),
        false => String::new(),
    };
    let mut costs: Vec<u64> = items.iter().map(|c| c.cost).collect();
    let (mode, taken_at) = match work.policy {
        Policy::Commit => ("commit", 0),
        Policy::CommitStopping if counters_span_parts(&parts) => {
            stop_across_parts(store, items, &parts, &nonce, &mut costs, deadline).await;
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
        until(
            deadline,
            store.node(part.per_second).run(part.route.clone(), group),
        )
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
        refund(store, &committed_parts, &results, &nonce, deadline).await;
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
                r.count = r.count.saturating_add(c.cost);
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
    store: &RedisStore,
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
            .filter(|&i| matches!(p.items[i].limit, Limit::Counter(_)))
            .collect()
    };
    let reads = parts.iter().map(|part| {
        let only = counters(part);
        let group = part.group("read", nonce, 0, Some(&only), |i| part.items[i].cost);
        async move {
            let reply = until(
                deadline,
                store.node(part.per_second).run(part.route.clone(), group),
            )
            .await;
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
            if !exceeds[i] && matches!(items[i].limit, Limit::Counter(_)) {
                *cost = 0;
            }
        }
    }
}

/// Gives back what the committed parts of a refused work took. A failed
/// refund is logged: it leaves at most the request's cost counted on those
/// limits (see the module doc).
async fn refund(
    store: &RedisStore,
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
                item.cost > 0 && results[i].as_ref().is_ok_and(recorded)
            })
            .collect();
        if taken.is_empty() {
            return None;
        }
        let at = now_us.max(&0).unsigned_abs();
        let group = part.group("refund", nonce, at, Some(&taken), |i| part.items[i].cost);
        Some(until(
            deadline,
            store.node(part.per_second).run(part.route.clone(), group),
        ))
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

    #[test]
    fn a_key_its_primary_no_longer_serves_is_unreachable_not_refused() {
        // Redis 7 and Valkey 8 both word it so.
        let moved = StoreError::new(
            StoreErrorKind::Rejected,
            "ERR Script attempted to access a non local key in a cluster node script: 3fb5, on @user_script:2.",
        );
        assert_eq!(moved_key(moved).kind, StoreErrorKind::Unavailable);
        let other = StoreError::new(StoreErrorKind::Rejected, "ERR wrong number of arguments");
        assert_eq!(moved_key(other).kind, StoreErrorKind::Rejected);
    }

    fn counter(limit: u64, binding: bool) -> Item {
        let window = crate::limiter::fixed_window::Window::containing(120, 60);
        Item {
            binding,
            ..Item::new(
                format!("k_{limit}_{binding}"),
                Limit::Counter(crate::store::OriginalWindow {
                    limit,
                    window,
                    ttl_seconds: 60,
                    jitter_seconds: 0,
                }),
                1,
            )
        }
    }

    /// One part holding every one of `items`, on one node.
    fn whole(items: &[Item]) -> Part<'_> {
        Part {
            per_second: false,
            route: Route::Slot(0),
            positions: (0..items.len()).collect(),
            items,
        }
    }

    #[test]
    fn a_compact_group_commits_iff_no_binding_counter_passed_its_limit() {
        let items = [counter(5, true), counter(2, false), counter(3, true)];
        let part = whole(&items);
        assert!(part.is_compact("commit", &part.positions));
        assert!(part.is_compact("decide", &part.positions));
        assert!(!part.is_compact("stop", &part.positions));
        // At the limit admits; a non-binding counter over its own does not
        // stop the commit.
        assert!(part.compact_commits("commit", &[5, 9, 3]));
        assert!(!part.compact_commits("commit", &[6, 0, 3]));
        assert!(!part.compact_commits("commit", &[0, 0, 4]));
        // Decide never commits.
        assert!(!part.compact_commits("decide", &[0, 0, 0]));
        // A group with any other kind of item is not compact.
        let mut mixed = items.clone();
        mixed[1].limit = Limit::Window(crate::store::OriginalWindow {
            limit: 2,
            window: crate::limiter::fixed_window::Window::containing(120, 60),
            ttl_seconds: 60,
            jitter_seconds: 0,
        });
        let part = Part {
            items: &mixed,
            ..part
        };
        assert!(!part.is_compact("commit", &part.positions));
    }

    /// The script's view of `args` as text, integers and all.
    fn text(args: &[Value]) -> Vec<String> {
        args.iter()
            .map(|v| v.as_string().unwrap_or_default())
            .collect()
    }

    #[test]
    fn counters_that_share_cost_and_ttl_send_them_once() {
        let items = [counter(5, true), counter(2, false), counter(3, true)];
        let part = whole(&items);
        let same = part.group("commit", "", 0, None, |i| items[i].cost);
        let shared = CounterArgs {
            cost: 1,
            ttl: 60,
            jitter: 0,
        };
        assert_eq!(same.args, GroupArgs::SameCounters(shared));
        assert_eq!(same.reply_len, 3);
        // Another cost, or another TTL, and each counter carries its own.
        let costs = part.group("commit", "", 0, None, |i| 1 + i as u64);
        let GroupArgs::Listed(args) = &costs.args else {
            panic!("per-counter costs are listed: {costs:?}");
        };
        #[rustfmt::skip]
        assert_eq!(text(args), ["count", "3", "1", "60", "0", "2", "60", "0", "3", "60", "0"]);
        let mut hourly = items.clone();
        if let Limit::Counter(w) = &mut hourly[2].limit {
            w.ttl_seconds = 3600;
        }
        let part = Part {
            items: &hourly,
            ..part
        };
        let ttls = part.group("decide", "", 0, None, |i| hourly[i].cost);
        let GroupArgs::Listed(args) = &ttls.args else {
            panic!("per-counter TTLs are listed: {ttls:?}");
        };
        #[rustfmt::skip]
        assert_eq!(text(args), ["count", "3", "1", "60", "0", "1", "60", "0", "1", "3600", "0"]);
        assert_eq!(ttls.reply_len, 3);
    }

    #[test]
    fn a_call_sends_one_header_per_run_of_counter_groups_with_one_cost_and_ttl() {
        let same = |keys: &[&str], cost, ttl, jitter| Group {
            keys: keys.iter().map(|k| k.to_string()).collect(),
            args: GroupArgs::SameCounters(CounterArgs { cost, ttl, jitter }),
            reply_len: keys.len(),
        };
        let listed = Group {
            keys: vec!["x".into()],
            args: GroupArgs::Listed(vec![
                Value::from_static_str("count"),
                int(1),
                int(4),
                int(60),
                int(0),
            ]),
            reply_len: 1,
        };
        let call = CallArgs::new(vec![
            same(&["a", "b"], 1, 60, 300),
            same(&["c"], 1, 60, 300),
            same(&["d", "e", "f"], 1, 60, 300),
            same(&["g"], 2, 60, 300),
            same(&["h"], 2, 3600, 300),
            same(&["j"], 2, 3600, 0),
            listed,
            same(&["i"], 2, 3600, 0),
        ]);
        assert_eq!(
            call.keys,
            ["a", "b", "c", "d", "e", "f", "g", "h", "j", "x", "i"]
        );
        // Each group's share of the answer, as given: the merged run
        // answers its counters in key order, so it splits back the same.
        assert_eq!(call.sizes, [2, 1, 3, 1, 1, 1, 1, 1]);
        #[rustfmt::skip]
        let want = [
            "6",
            "count-same", "6", "1", "60", "300",
            "count-same", "1", "2", "60", "300",
            "count-same", "1", "2", "3600", "300",
            "count-same", "1", "2", "3600", "0",
            "count", "1", "4", "60", "0",
            "count-same", "1", "2", "3600", "0",
        ];
        assert_eq!(text(&call.args), want);
    }

    /// The size of the future `f` returns for a request's work.
    fn future_size<F, Fut>(_: F) -> usize
    where
        F: FnOnce(&'static RedisStore, &'static Work, Option<Instant>) -> Fut,
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
