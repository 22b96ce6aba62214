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
//! Failure: each node's items fail on their own. A call to a node that is
//! not connected fails at once (fred's fail-fast), and the caller stops
//! waiting for a node at the batch's deadline; either way only the items
//! that node serves get the error, so the resilience layers can answer
//! them by their rules' failure policies while the other nodes' answers
//! stand. [`Store::node_of`] names the node (the Cluster primary that owns
//! the key's slot, from fred's routing table, so after a failover the new
//! primary is a new node).
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
use std::time::Duration;

use async_trait::async_trait;
use fred::clients::Pool;
use fred::interfaces::{ClientLike, ClusterInterface, EventInterface, LuaInterface};
use fred::types::config::Options;
use fred::types::scripts::Script;
use fred::types::Value;
use parking_lot::RwLock;
use tokio::time::Instant;

use super::{
    Answer, Increment, IncrementPolicy, NodeId, Reply, Store, StoreError, StoreErrorKind, Work,
};

pub use connect::{connect, RedisOptions, StartupRetry};

/// One Redis deployment (main or per-second) and its loaded script.
#[derive(Debug)]
struct Backend {
    pool: Pool,
    clustered: bool,
    /// The node's name off a cluster (its masked address).
    name: NodeId,
    script: Script,
    /// The opt-in algorithms ([`algorithms`]).
    algorithms: Script,
    /// On a cluster, a one-connection client that only reads the topology:
    /// a refresh that asks a hung primary stalls this client, not the ones
    /// that carry decisions (fred's routing waits for its refresh).
    discovery: Option<Pool>,
}

/// A deployment and its two scripts' lanes (see [`coalesce`]): coalesced
/// on a single node (plain or behind sentinels), one call per slot on a
/// Cluster.
#[derive(Debug)]
struct Node {
    backend: Arc<Backend>,
    windows: coalesce::Lane<WindowCalls>,
    algorithms: coalesce::Lane<algorithms::AlgorithmCalls>,
}

impl Node {
    fn new(backend: Backend) -> Node {
        let backend = Arc::new(backend);
        let single = !backend.clustered;
        Node {
            windows: coalesce::Lane::new(WindowCalls(Arc::clone(&backend)), single),
            algorithms: coalesce::Lane::new(
                algorithms::AlgorithmCalls(Arc::clone(&backend)),
                single,
            ),
            backend,
        }
    }
}

/// `call`, given up at `deadline`: then a [`StoreErrorKind::Timeout`].
/// A call already sent still runs on the server; one still queued for a
/// coalesced call is dropped (see `coalesce`).
async fn until<T>(
    deadline: Option<Instant>,
    call: impl std::future::Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    match deadline {
        None => call.await,
        Some(at) => tokio::time::timeout_at(at, call).await.unwrap_or_else(|_| {
            Err(StoreError::new(
                StoreErrorKind::Timeout,
                super::DEADLINE_EXCEEDED,
            ))
        }),
    }
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
    /// Off a cluster nothing; on one, slot ranges → primary, refreshed from
    /// fred's routing table at most every [`ROUTES_MAX_AGE`].
    routes: RwLock<Routes>,
    /// When the cluster topology was last asked for again after a failure.
    resynced_at: parking_lot::Mutex<Option<Instant>>,
}

/// How stale the slot → primary table behind [`Store::node_of`] may get.
/// fred follows a failover itself (MOVED, resync); this only names breakers.
const ROUTES_MAX_AGE: Duration = Duration::from_secs(1);

/// Slot ranges of a cluster and their primaries.
#[derive(Debug, Default)]
struct Routes {
    read_at: Option<Instant>,
    ranges: Vec<(u16, u16, NodeId)>,
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
    StoreError::new(kind, message)
}

/// Every script call fails at once while its connection is down instead of
/// waiting for the reconnection: a refused or reset connection is a failure
/// now, for the failure policies to answer.
fn fail_fast() -> Options {
    Options {
        fail_fast: true,
        ..Options::default()
    }
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
        // Converted once: the NOSCRIPT retry below clones these, and a
        // converted key or value clones by reference count, not by copy.
        let keys: fred::types::MultipleKeys = keys.into();
        let argv: fred::types::MultipleValues =
            argv.try_into().map_err(|e| store_error(&e.into()))?;
        let options = fail_fast();
        let sent = client
            .with_options(&options)
            .evalsha(script.sha1().clone(), keys.clone(), argv.clone())
            .await;
        let values: Vec<i64> = match sent {
            Err(e) if e.details().starts_with("NOSCRIPT") => {
                script.load(client).await.map_err(|e| store_error(&e))?;
                client
                    .with_options(&options)
                    .evalsha(script.sha1().clone(), keys, argv)
                    .await
            }
            other => other,
        }
        .map_err(|e| store_error(&e))?;
        if values.len() != sizes.iter().sum::<usize>() {
            return Err(StoreError::new(
                StoreErrorKind::Rejected,
                format!("unexpected reply from the {what} script"),
            ));
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
    /// batch's hits. Returns values in batch order; a group that failed
    /// fails only its own items.
    async fn run_groups(
        &self,
        mode: &'static str,
        batch: &[Increment],
        groups: &Groups,
        hits: &[u64],
        deadline: Option<Instant>,
    ) -> Vec<Result<u64, StoreError>> {
        let decision_of = |positions: &[usize]| {
            // An audit reference: its window in µs, negated (see the script).
            let ttl = |inc: &Increment| match &inc.reference {
                Some(r) => Value::Integer(
                    -i64::try_from(r.period().as_micros())
                        .unwrap_or(i64::MAX)
                        .max(1),
                ),
                None => int(inc.ttl_seconds),
            };
            let audited = positions.iter().any(|&i| batch[i].reference.is_some());
            let mut args = Vec::with_capacity(1 + 3 * positions.len());
            let mode = match (audited, mode) {
                (true, "always") => "always+",
                (true, "stop") => "stop+",
                (_, mode) => mode,
            };
            if mode.ends_with('+') {
                args.push(Value::from(format!("{:x}", rand::random::<u64>())));
            }
            args.extend(
                positions
                    .iter()
                    .flat_map(|&i| [int(hits[i]), ttl(&batch[i]), int(batch[i].limit)]),
            );
            WindowDecision {
                mode,
                keys: positions.iter().map(|&i| batch[i].key.clone()).collect(),
                args,
            }
        };
        // One node (the common case): no join, no reordering.
        if let Some(((per_second, _), positions)) = groups.first() {
            if groups.len() == 1 && positions.len() == batch.len() {
                let node = self.node(*per_second);
                return match until(deadline, node.windows.run(decision_of(positions))).await {
                    Ok(values) => values.into_iter().map(Ok).collect(),
                    Err(e) => vec![Err(e); batch.len()],
                };
            }
        }
        let calls = groups.iter().map(|((per_second, _), positions)| {
            until(
                deadline,
                self.node(*per_second).windows.run(decision_of(positions)),
            )
        });
        let results = futures::future::join_all(calls).await;
        let mut out = vec![Ok(0); batch.len()];
        for ((_, positions), result) in groups.iter().zip(results) {
            match result {
                Ok(values) => {
                    for (&i, v) in positions.iter().zip(values) {
                        out[i] = Ok(v);
                    }
                }
                Err(e) => {
                    for &i in positions {
                        out[i] = Err(e.clone());
                    }
                }
            }
        }
        out
    }

    /// The original's windows, per item.
    async fn count(
        &self,
        batch: &[Increment],
        policy: IncrementPolicy,
        deadline: Option<Instant>,
    ) -> Vec<Result<u64, StoreError>> {
        if batch.is_empty() {
            return Vec::new();
        }
        let groups = self.groups(batch);
        let hits: Vec<u64> = batch.iter().map(|i| i.hits).collect();
        match policy {
            IncrementPolicy::Always => {
                self.run_groups("always", batch, &groups, &hits, deadline)
                    .await
            }
            IncrementPolicy::OnlyIfNoneWouldExceed if groups.len() == 1 => {
                self.run_groups("stop", batch, &groups, &hits, deadline)
                    .await
            }
            IncrementPolicy::OnlyIfNoneWouldExceed => {
                let current = self
                    .run_groups("read", batch, &groups, &hits, deadline)
                    .await;
                // A counter that could not be read cannot say it would
                // exceed; it fails again below, on its own.
                let exceeds: Vec<bool> = batch
                    .iter()
                    .zip(&current)
                    .map(|(inc, c)| {
                        inc.reference.is_none()
                            && c.as_ref()
                                .is_ok_and(|&c| c.saturating_add(inc.hits) > inc.limit)
                    })
                    .collect();
                let any = exceeds.iter().any(|&e| e);
                let hits: Vec<u64> = batch
                    .iter()
                    .zip(&exceeds)
                    .map(|(inc, &e)| if !any || e { inc.hits } else { 0 })
                    .collect();
                self.run_groups("always", batch, &groups, &hits, deadline)
                    .await
            }
        }
    }

    /// After a failed call on a cluster, asks for the topology again (at most
    /// once per [`ROUTES_MAX_AGE`], in the background): a paused or dead
    /// primary sends no MOVED, so without this the client would keep routing
    /// its slots to it after its replica has taken over. A node that keeps
    /// failing is asked about every second until the cluster has failed
    /// over, then its slots go to the new primary (a new node, with a
    /// closed breaker).
    fn resync_soon(&self) {
        if !self.main.backend.clustered {
            return;
        }
        {
            let mut at = self.resynced_at.lock();
            if at.is_some_and(|t| t.elapsed() < ROUTES_MAX_AGE) {
                return;
            }
            *at = Some(Instant::now());
        }
        self.routes.write().read_at = None;
        let pool = self.main.backend.pool.clone();
        let discovery = self.main.backend.discovery.clone();
        tokio::spawn(async move {
            // The decision clients are refreshed only when the topology
            // has changed (a failover), so that a primary that merely
            // hangs never stalls the healthy primaries' traffic.
            if let Some(d) = discovery {
                if let Err(e) = d.next().sync_cluster().await {
                    tracing::debug!(error = %e, "cluster topology read failed; retried on the next failure");
                    return;
                }
                let primaries = |c: &fred::clients::Client| {
                    c.cached_cluster_state().map(|s| {
                        s.slots()
                            .iter()
                            .map(|r| (r.start, r.end, r.primary.clone()))
                            .collect::<Vec<_>>()
                    })
                };
                if primaries(d.next()) == primaries(pool.next()) {
                    return;
                }
            }
            for client in pool.clients() {
                if let Err(e) = client.sync_cluster().await {
                    tracing::debug!(error = %e, "cluster topology refresh failed; retried on the next failure");
                }
            }
        });
    }

    /// The primary that owns `slot`, from a routing table at most
    /// [`ROUTES_MAX_AGE`] old.
    fn primary_of(&self, slot: u16) -> Option<NodeId> {
        let find = |routes: &Routes| {
            routes
                .ranges
                .iter()
                .find(|(start, end, _)| (*start..=*end).contains(&slot))
                .map(|(_, _, node)| node.clone())
        };
        {
            let routes = self.routes.read();
            if routes
                .read_at
                .is_some_and(|at| at.elapsed() < ROUTES_MAX_AGE)
            {
                return find(&routes);
            }
        }
        let mut routes = self.routes.write();
        if let Some(state) = self.main.backend.pool.next().cached_cluster_state() {
            routes.ranges = state
                .slots()
                .iter()
                .map(|r| {
                    (
                        r.start,
                        r.end,
                        NodeId::new(&format!("{}:{}", r.primary.host, r.primary.port)),
                    )
                })
                .collect();
        }
        routes.read_at = Some(Instant::now());
        find(&routes)
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
    async fn execute(&self, work: &Work, deadline: Option<Instant>) -> Reply {
        if crate::telemetry::enabled() {
            use tracing::Instrument;
            let span = tracing::info_span!(
                target: crate::telemetry::SPAN_TARGET,
                "Redis Pipeline Execution",
                "pipeline length" = work.len(),
            );
            return self.run(work, deadline).instrument(span).await;
        }
        self.run(work, deadline).await
    }

    /// In one script off a cluster; on one, iff both keys hash to one slot
    /// (an algorithm's reference shares its hash tag; the original's keys,
    /// which name their window, move slot every window).
    fn reference_step(&self, subject: &str, reference: &str) -> crate::store::ReferenceStep {
        use crate::store::ReferenceStep;
        let slot = |k: &str| fred::util::redis_keyslot(k.as_bytes());
        if !self.main.backend.clustered || slot(subject) == slot(reference) {
            ReferenceStep::Same
        } else {
            ReferenceStep::Separate
        }
    }

    fn node_of(&self, key: &str, one_second: bool) -> Option<NodeId> {
        let per_second = self.per_second.is_some() && one_second;
        let backend = &self.node(per_second).backend;
        if backend.clustered {
            self.primary_of(fred::util::redis_keyslot(key.as_bytes()))
        } else {
            Some(backend.name.clone())
        }
    }
}

impl RedisStore {
    /// [`Store::execute`] without its span.
    async fn run(&self, work: &Work, deadline: Option<Instant>) -> Reply {
        let reply = match work {
            Work::Count { items, policy } => Reply {
                answers: self
                    .count(items, *policy, deadline)
                    .await
                    .into_iter()
                    .map(|r| r.map(Answer::Count))
                    .collect(),
                committed: true,
            },
            Work::Check { items, commit } => {
                algorithms::check(self, items, *commit, deadline).await
            }
        };
        let unreachable = |a: &Result<Answer, StoreError>| {
            a.as_ref()
                .is_err_and(|e| e.kind != StoreErrorKind::Rejected)
        };
        if reply.answers.iter().any(unreachable) {
            self.resync_soon();
        }
        reply
    }
}
