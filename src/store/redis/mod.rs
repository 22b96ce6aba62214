//! The Redis store (runtime.md §5): fixed-window counters in Redis single,
//! sentinel or cluster, through `fred`, with the original's keys.
//!
//! Every request costs at most one `EVALSHA` per node touched (per hash
//! slot in Redis Cluster, sent concurrently) instead of the original's
//! `INCRBY` + `EXPIRE` per key; see [`scripts`]. On a single node, decisions
//! that arrive while earlier calls run are coalesced into one call (each
//! still atomic); see `coalesce`.
//!
//! With `REDIS_PERSECOND`, counters of one-second windows go to their own
//! Redis, as in the original.
//!
//! Atomicity: all counters of a request on one node are decided in one
//! script. With `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` and counters on
//! several nodes (slots, or main and per-second Redis), the values are read
//! first and the increments decided from them; a concurrent request can
//! change a counter between the two steps, so across nodes the over-deduction
//! is bounded by the hits of the requests in flight on those keys (the
//! original has this race on every request).

mod algorithms;
mod coalesce;
pub mod connect;
pub mod scripts;
pub mod url;

use std::sync::Arc;

use async_trait::async_trait;
use fred::clients::Pool;
use fred::interfaces::{ClientLike, EventInterface};
use fred::types::scripts::Script;
use fred::types::Value;

use super::{
    Check, CheckReply, Commit, Increment, IncrementPolicy, Store, StoreError, StoreErrorKind,
};

pub use connect::{connect, RedisOptions, StartupRetry};

/// One Redis deployment (main or per-second) and its loaded script.
#[derive(Debug)]
struct Backend {
    pool: Pool,
    clustered: bool,
    script: Script,
    /// The opt-in algorithms ([`algorithms`]).
    algorithms: Script,
}

/// A deployment and, for a single node (plain or behind sentinels), the
/// queues that coalesce its decisions (see [`coalesce`]), one per script.
/// Cluster calls go out directly, one per slot.
#[derive(Debug)]
struct Node {
    backend: Arc<Backend>,
    windows: Option<coalesce::Coalescer<WindowCalls>>,
    algorithms: Option<coalesce::Coalescer<algorithms::AlgorithmCalls>>,
}

impl Node {
    fn new(backend: Backend) -> Node {
        let backend = Arc::new(backend);
        let single = !backend.clustered;
        Node {
            windows: single
                .then(|| coalesce::Coalescer::spawn(Arc::new(WindowCalls(Arc::clone(&backend))))),
            algorithms: single.then(|| {
                coalesce::Coalescer::spawn(Arc::new(algorithms::AlgorithmCalls(Arc::clone(
                    &backend,
                ))))
            }),
            backend,
        }
    }

    /// One fixed-window decision: each key's value after it.
    async fn run(&self, decision: WindowDecision) -> Result<Vec<u64>, StoreError> {
        match &self.windows {
            Some(c) => c.run(decision).await,
            None => one(self.backend.run_windows(vec![decision]).await),
        }
    }
}

/// The only answer of a one-item call.
fn one<T>(answers: Result<Vec<T>, StoreError>) -> Result<T, StoreError> {
    answers?.pop().ok_or_else(|| StoreError {
        kind: StoreErrorKind::Rejected,
        message: "a script call answered no decision".into(),
    })
}

/// One fixed-window decision for `fixed_window.lua`: its mode, keys and per
/// key `hits, ttl, limit`.
#[derive(Debug)]
pub(crate) struct WindowDecision {
    pub(crate) mode: &'static str,
    pub(crate) keys: Vec<String>,
    /// Per key `hits, ttl, limit`, as integers (encoded without a string
    /// per number).
    pub(crate) args: Vec<Value>,
}

/// A count as a script argument (Redis integers are signed).
fn int(n: u64) -> Value {
    Value::Integer(i64::try_from(n).unwrap_or(i64::MAX))
}

/// `fixed_window.lua` calls on one node, for the coalescer.
#[derive(Debug)]
struct WindowCalls(Arc<Backend>);

impl coalesce::Batch for WindowCalls {
    type Item = WindowDecision;
    type Answer = Vec<u64>;

    fn run(
        &self,
        items: Vec<WindowDecision>,
    ) -> impl std::future::Future<Output = Result<Vec<Vec<u64>>, StoreError>> + Send {
        self.0.run_windows(items)
    }
}

/// Fixed-window counters in Redis.
#[derive(Debug)]
pub struct RedisStore {
    main: Node,
    per_second: Option<Node>,
}

fn store_error(e: &fred::error::Error) -> StoreError {
    use fred::error::ErrorKind as K;
    let kind = match e.kind() {
        K::Timeout => StoreErrorKind::Timeout,
        K::IO | K::Canceled | K::Cluster | K::Sentinel | K::Routing | K::Backpressure => {
            StoreErrorKind::Unavailable
        }
        _ => StoreErrorKind::Rejected,
    };
    let message = if e.details().is_empty() {
        format!("{:?}", e.kind())
    } else {
        e.details().to_string()
    };
    StoreError { kind, message }
}

impl Backend {
    /// One `fixed_window.lua` call for `decisions`, all on one node (one
    /// slot); per decision, the values of its keys.
    async fn run_windows(
        &self,
        decisions: Vec<WindowDecision>,
    ) -> Result<Vec<Vec<u64>>, StoreError> {
        let n_keys: usize = decisions.iter().map(|d| d.keys.len()).sum();
        let mut keys = Vec::with_capacity(n_keys);
        let mut argv = Vec::with_capacity(1 + 2 * decisions.len() + 3 * n_keys);
        let mut sizes = Vec::with_capacity(decisions.len());
        argv.push(int(decisions.len() as u64));
        for d in decisions {
            argv.push(Value::from_static_str(d.mode));
            argv.push(int(d.keys.len() as u64));
            sizes.push(d.keys.len());
            argv.extend(d.args);
            keys.extend(d.keys);
        }
        let answers = self
            .call(&self.script, keys, argv, sizes, "fixed-window")
            .await?;
        Ok(answers
            .into_iter()
            .map(|a| a.into_iter().map(|v| v.max(0).unsigned_abs()).collect())
            .collect())
    }

    /// Runs `script` over `keys` and `argv` on one node; its integer reply
    /// cut into consecutive answers of `sizes` values (one per decision or
    /// group), or an error naming `what` if the lengths disagree.
    async fn call<V>(
        &self,
        script: &Script,
        keys: Vec<String>,
        argv: V,
        sizes: Vec<usize>,
        what: &str,
    ) -> Result<Vec<Vec<i64>>, StoreError>
    where
        V: TryInto<fred::types::MultipleValues> + Send,
        V::Error: Into<fred::error::Error> + Send,
    {
        let client = self.pool.next();
        let values: Vec<i64> = script
            .evalsha_with_reload(client, keys, argv)
            .await
            .map_err(|e| store_error(&e))?;
        if values.len() != sizes.iter().sum::<usize>() {
            return Err(StoreError {
                kind: StoreErrorKind::Rejected,
                message: format!("unexpected reply from the {what} script"),
            });
        }
        let mut values = values.into_iter();
        Ok(sizes
            .into_iter()
            .map(|n| values.by_ref().take(n).collect())
            .collect())
    }
}

/// Batch positions grouped by the script call that can serve them, keyed by
/// (per-second Redis?, hash slot), in order of first appearance. A request
/// touches few nodes, so a linear search beats a map here.
type Groups = Vec<((bool, u16), Vec<usize>)>;

impl RedisStore {
    fn node(&self, per_second: bool) -> &Node {
        match (&self.per_second, per_second) {
            (Some(b), true) => b,
            _ => &self.main,
        }
    }

    /// Batch positions grouped by (per-second Redis?, hash slot).
    fn groups(&self, batch: &[Increment]) -> Groups {
        self.group_by_node(
            batch
                .iter()
                .map(|inc| (inc.key.as_str(), inc.window.length == 1)),
        )
    }

    /// Positions of `keys` grouped by the script call that can serve them:
    /// (per-second Redis?, hash slot; 0 off a cluster). Each key comes with
    /// whether it counts a one-second window (those go to the per-second
    /// Redis when there is one).
    fn group_by_node<'k>(&self, keys: impl Iterator<Item = (&'k str, bool)>) -> Groups {
        let mut groups = Groups::new();
        for (i, (key, one_second)) in keys.enumerate() {
            let per_second = self.per_second.is_some() && one_second;
            let slot = if self.node(per_second).backend.clustered {
                fred::util::redis_keyslot(key.as_bytes())
            } else {
                0
            };
            match groups
                .iter_mut()
                .find(|(node, _)| *node == (per_second, slot))
            {
                Some((_, positions)) => positions.push(i),
                None => groups.push(((per_second, slot), vec![i])),
            }
        }
        groups
    }

    /// Runs `mode` for every group concurrently; `hits[i]` overrides the
    /// batch's hits. Returns values in batch order.
    async fn run_groups(
        &self,
        mode: &'static str,
        batch: &[Increment],
        groups: &Groups,
        hits: &[u64],
    ) -> Result<Vec<u64>, StoreError> {
        let decision_of = |positions: &[usize]| WindowDecision {
            mode,
            keys: positions.iter().map(|&i| batch[i].key.clone()).collect(),
            args: positions
                .iter()
                .flat_map(|&i| [int(hits[i]), int(batch[i].ttl_seconds), int(batch[i].limit)])
                .collect(),
        };
        // One node (the common case): no join, no reordering.
        if let Some(((per_second, _), positions)) = groups.first() {
            if groups.len() == 1 && positions.len() == batch.len() {
                return self.node(*per_second).run(decision_of(positions)).await;
            }
        }
        let calls = groups
            .iter()
            .map(|((per_second, _), positions)| self.node(*per_second).run(decision_of(positions)));
        let results = futures::future::join_all(calls).await;
        let mut out = vec![0; batch.len()];
        for ((_, positions), result) in groups.iter().zip(results) {
            for (&i, v) in positions.iter().zip(result?) {
                out[i] = v;
            }
        }
        Ok(out)
    }

    /// Calls `on_change(false)` when a connection to Redis fails and
    /// `on_change(true)` when one is re-established
    /// (`REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`, runtime.md §5.9). The
    /// listener tasks end when the store's connections are closed.
    pub fn watch_connections(&self, on_change: Arc<dyn Fn(bool) + Send + Sync>) {
        let nodes = std::iter::once(&self.main).chain(self.per_second.as_ref());
        for node in nodes {
            for client in node.backend.pool.clients() {
                let up = Arc::clone(&on_change);
                client.on_reconnect(move |_| {
                    up(true);
                    async { Ok(()) }
                });
                let down = Arc::clone(&on_change);
                client.on_error(move |(e, _)| {
                    if matches!(
                        e.kind(),
                        fred::error::ErrorKind::IO | fred::error::ErrorKind::Canceled
                    ) {
                        down(false);
                    }
                    async { Ok(()) }
                });
            }
        }
    }

    /// Closes every connection.
    pub async fn quit(&self) {
        let _ = self.main.backend.pool.quit().await;
        if let Some(b) = &self.per_second {
            let _ = b.backend.pool.quit().await;
        }
    }
}

#[async_trait]
impl Store for RedisStore {
    async fn increment(
        &self,
        batch: &[Increment],
        policy: IncrementPolicy,
    ) -> Result<Vec<u64>, StoreError> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let groups = self.groups(batch);
        let hits: Vec<u64> = batch.iter().map(|i| i.hits).collect();
        match policy {
            IncrementPolicy::Always => self.run_groups("always", batch, &groups, &hits).await,
            IncrementPolicy::OnlyIfNoneWouldExceed if groups.len() == 1 => {
                self.run_groups("stop", batch, &groups, &hits).await
            }
            IncrementPolicy::OnlyIfNoneWouldExceed => {
                let current = self.run_groups("read", batch, &groups, &hits).await?;
                let exceeds: Vec<bool> = batch
                    .iter()
                    .zip(&current)
                    .map(|(inc, &c)| c.saturating_add(inc.hits) > inc.limit)
                    .collect();
                let any = exceeds.iter().any(|&e| e);
                let hits: Vec<u64> = batch
                    .iter()
                    .zip(&exceeds)
                    .map(|(inc, &e)| if !any || e { inc.hits } else { 0 })
                    .collect();
                self.run_groups("always", batch, &groups, &hits).await
            }
        }
    }

    async fn check_with(&self, batch: &[Check], commit: Commit) -> Result<CheckReply, StoreError> {
        algorithms::check(self, batch, commit).await
    }
}
