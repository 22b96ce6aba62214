//! The opt-in algorithms in Redis: [`Store::check`](crate::store::Store::check)
//! as one `algorithms.lua` call per node (per hash slot in Redis Cluster).
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
//! Checks on one node are one script: decided, then committed only if every
//! binding check passes, atomically. Keys of one descriptor share a hash
//! tag, so all limits of one descriptor are always on one slot. A request
//! whose descriptors are on several slots (or on the main and the
//! per-second Redis) is **reserved, then refunded**: every slot's script runs
//! concurrently and commits its own part if that part passes; if any part
//! was refused, the parts that committed are sent a refund (the same costs taken
//! back, and the sliding log's entries removed by name). Bound: a request
//! that is refused holds its cost on the other slots' limits for one round
//! trip (concurrent requests can be denied meanwhile: at most the cost of
//! the requests in flight on those keys), and keeps it only if the refund
//! itself fails (Redis down between the two calls), at most its cost per
//! limit. `integration/store_conformance.rs` (`refused_requests_take_nothing`)
//! measures it.
//!
//! On a single node (plain or behind sentinels) the groups of concurrent
//! requests are coalesced into one script call (each group still all or
//! nothing on its own), as the fixed-window decisions are.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{coalesce, until, Backend, RedisStore};
use crate::limiter::Decision;
use crate::store::{
    Answer, Check, Checked, CheckedLimit, Commit, Reply, StoreError, StoreErrorKind,
};

/// Fields per check in ARGV.
const FIELDS: usize = 6;

/// One script call's worth of checks.
struct Part<'a> {
    per_second: bool,
    positions: Vec<usize>,
    batch: &'a [Check],
}

impl Part<'_> {
    /// The script group for `mode` over this part's checks (or `only`
    /// of them).
    fn group(&self, mode: &str, nonce: &str, commit_time: u64, only: Option<&[usize]>) -> Group {
        let positions: &[usize] = only.unwrap_or(&self.positions);
        let mut args = Vec::with_capacity(4 + FIELDS * positions.len());
        args.extend([
            mode.to_string(),
            nonce.to_string(),
            commit_time.to_string(),
            positions.len().to_string(),
        ]);
        for &i in positions {
            let c = &self.batch[i];
            let (kind, limit, period, burst) = fields(&c.limit);
            args.extend([
                kind.to_string(),
                limit.to_string(),
                period.to_string(),
                burst.to_string(),
                c.cost.to_string(),
                match (&c.limit, c.binding) {
                    (CheckedLimit::Reference(_), _) => "r",
                    (_, true) => "1",
                    (_, false) => "0",
                }
                .to_string(),
            ]);
        }
        Group {
            keys: positions
                .iter()
                .map(|&i| self.batch[i].key.clone())
                .collect(),
            args,
            reply_len: 2 + 5 * positions.len(),
        }
    }
}

/// One request's checks on one node, as one group of a script call.
#[derive(Debug)]
pub(super) struct Group {
    keys: Vec<String>,
    /// `mode, nonce, commit time, n`, then the checks' fields.
    args: Vec<String>,
    /// How many values the script answers for it.
    reply_len: usize,
}

/// `algorithms.lua` calls on one node, for the coalescer: groups of
/// several requests in one call, each still all or nothing on its own.
#[derive(Debug)]
pub(super) struct AlgorithmCalls(pub(super) Arc<Backend>);

impl AlgorithmCalls {
    async fn call(backend: &Backend, groups: Vec<Group>) -> Result<Vec<Vec<i64>>, StoreError> {
        let n_keys = groups.iter().map(|g| g.keys.len()).sum();
        let mut keys = Vec::with_capacity(n_keys);
        let mut argv = Vec::with_capacity(1 + groups.iter().map(|g| g.args.len()).sum::<usize>());
        argv.push(groups.len().to_string());
        let mut sizes = Vec::with_capacity(groups.len());
        for g in groups {
            keys.extend(g.keys);
            argv.extend(g.args);
            sizes.push(g.reply_len);
        }
        backend
            .call(&backend.algorithms, keys, argv, sizes, "algorithms")
            .await
    }
}

impl coalesce::Batch for AlgorithmCalls {
    type Item = Group;
    type Answer = Vec<i64>;

    fn run(
        &self,
        items: Vec<Group>,
    ) -> impl std::future::Future<Output = Result<Vec<Vec<i64>>, StoreError>> + Send {
        AlgorithmCalls::call(&self.0, items)
    }
}

/// `kind, limit, period (µs; the TTL in s for "ow"), burst`.
fn fields(limit: &CheckedLimit) -> (&'static str, u64, u64, u64) {
    let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1);
    match limit {
        CheckedLimit::Algorithm(l) | CheckedLimit::Reference(l) => {
            let kind = l.name().key_tag();
            (kind, l.limit(), micros(l.period()), l.capacity())
        }
        CheckedLimit::OriginalWindow {
            limit, ttl_seconds, ..
        } => ("ow", *limit, *ttl_seconds, *limit),
    }
}

/// One check's reply: `code, remaining, retry µs, reset µs, count`.
fn decision(c: &Check, row: &[i64], now_us: i64) -> Checked {
    let us = |v: i64| Duration::from_micros(v.max(0).unsigned_abs());
    let (code, remaining, mut retry, mut reset, count) = (
        row[0],
        row[1].max(0).unsigned_abs(),
        us(row[2]),
        us(row[3]),
        row[4].max(0).unsigned_abs(),
    );
    if let CheckedLimit::OriginalWindow { window, .. } = &c.limit {
        // The key names the window; its end is the reset.
        let now = us(now_us).as_secs();
        let end = window.start + window.length;
        reset = Duration::from_secs(end.saturating_sub(now).max(1));
        retry = reset;
    }
    let decision = match code {
        1 => Decision::Allow {
            remaining,
            reset_after: reset,
        },
        2 => Decision::ExceedsCapacity {
            capacity: match &c.limit {
                CheckedLimit::Algorithm(l) | CheckedLimit::Reference(l) => l.capacity(),
                CheckedLimit::OriginalWindow { limit, .. } => *limit,
            },
            reset_after: reset,
        },
        _ => Decision::Deny {
            retry_after: retry.max(Duration::from_micros(1)),
            reset_after: reset,
        },
    };
    Checked {
        decision,
        count,
        at: us(now_us),
    }
}

fn malformed(what: &str) -> StoreError {
    StoreError::new(
        StoreErrorKind::Rejected,
        format!("unexpected reply from the algorithms script: {what}"),
    )
}

/// Decides `batch`, one script call per node. A node that fails fails its
/// own checks only; a part refused by a node that answered has the other
/// parts refunded. A failed part does not refund the others (its checks are
/// answered by their failure policies, not refused), so during a partial
/// outage a request that the policy then refuses can stay counted on the
/// healthy nodes: at most its cost per limit, until their windows end.
pub(super) async fn check(
    store: &RedisStore,
    batch: &[Check],
    commit: Commit,
    deadline: Option<Instant>,
) -> Reply {
    if batch.is_empty() {
        return Reply {
            answers: Vec::new(),
            committed: true,
        };
    }
    let groups = store.group_by_node(batch.iter().map(|c| {
        let one_second =
            matches!(c.limit, CheckedLimit::OriginalWindow { window, .. } if window.length == 1);
        (c.key.as_str(), one_second)
    }));
    let parts: Vec<Part<'_>> = groups
        .into_iter()
        .map(|((per_second, _), positions)| Part {
            per_second,
            positions,
            batch,
        })
        .collect();
    let nonce = format!("{:x}", rand::random::<u64>());
    let (mode, taken_at) = match commit {
        Commit::IfAllPass => ("commit", 0),
        Commit::Never => ("peek", 0),
        Commit::Refund { taken_at } => (
            "refund",
            u64::try_from(taken_at.as_micros()).unwrap_or(u64::MAX),
        ),
    };
    let calls = parts.iter().map(|part| {
        let group = part.group(mode, &nonce, taken_at, None);
        until(deadline, store.node(part.per_second).algorithms.run(group))
    });
    let replies = futures::future::join_all(calls).await;

    let mut results: Vec<Result<Checked, StoreError>> =
        vec![Err(malformed("a check without an answer")); batch.len()];
    let mut committed_parts = Vec::new();
    let mut refused = false;
    for (part, reply) in parts.iter().zip(replies) {
        // `call` checked the length; this guards the indexing below.
        let reply = reply.and_then(|r| {
            if r.len() == 2 + 5 * part.positions.len() {
                Ok(r)
            } else {
                Err(malformed("wrong length"))
            }
        });
        let reply = match reply {
            Ok(r) => r,
            Err(e) => {
                for &i in &part.positions {
                    results[i] = Err(e.clone());
                }
                continue;
            }
        };
        let (now_us, committed) = (reply[0], reply[1] == 1);
        for (&i, row) in part.positions.iter().zip(reply[2..].chunks(5)) {
            results[i] = Ok(decision(&batch[i], row, now_us));
        }
        if committed {
            committed_parts.push((part, now_us));
        } else {
            refused = true;
        }
    }
    if refused && parts.len() > 1 {
        refund(store, &committed_parts, &results, &nonce, deadline).await;
    }
    // What the nodes that answered did; a failed node's checks are answered
    // by their policies above this store.
    let all_committed = !refused;
    let answers = results
        .into_iter()
        .zip(batch)
        .map(|(r, c)| {
            let mut r = r?;
            if !refused && r.decision.is_allowed() {
                if let CheckedLimit::OriginalWindow { .. } = c.limit {
                    r.count = r.count.saturating_add(c.cost);
                }
            }
            Ok(Answer::Checked(r))
        })
        .collect();
    Reply {
        answers,
        committed: all_committed,
    }
}

/// Takes back what the committed parts of a refused request took. A
/// failed refund is logged: it leaves at most the request's cost counted
/// on those limits (see the module doc).
async fn refund(
    store: &RedisStore,
    committed: &[(&Part<'_>, i64)],
    results: &[Result<Checked, StoreError>],
    nonce: &str,
    deadline: Option<Instant>,
) {
    let calls = committed.iter().filter_map(|(part, now_us)| {
        let taken: Vec<usize> = part
            .positions
            .iter()
            .copied()
            .filter(|&i| {
                // A reference recorded its cost whatever it decided.
                let recorded = |r: &Checked| {
                    r.decision.is_allowed()
                        || matches!(part.batch[i].limit, CheckedLimit::Reference(_))
                };
                part.batch[i].cost > 0 && results[i].as_ref().is_ok_and(recorded)
            })
            .collect();
        if taken.is_empty() {
            return None;
        }
        let group = part.group("refund", nonce, now_us.max(&0).unsigned_abs(), Some(&taken));
        Some(until(
            deadline,
            store.node(part.per_second).algorithms.run(group),
        ))
    });
    for result in futures::future::join_all(calls).await {
        if let Err(e) = result {
            tracing::warn!(error = %e, "refund of a refused request failed; its cost stays counted until the limits' keys expire");
        }
    }
}
