//! The Redis store: every kind of limit in Redis single, sentinel or
//! cluster, through `fred`, with the original's keys for the original's
//! counters.
//!
//! A request's work costs one `EVALSHA` per node touched (per primary in
//! Redis Cluster, sent concurrently; per hash slot where the cluster
//! refuses script flags, before Redis 7) instead of the original's
//! `INCRBY` + `EXPIRE` per key, whatever mix of limits it carries; see
//! [`scripts`] and `work`. On a single node and on each Cluster primary,
//! works that arrive while earlier calls run are coalesced into one call
//! (each still atomic); see `coalesce`.
//!
//! With `REDIS_PERSECOND`, counters of one-second windows go to their own
//! Redis, as in the original.
//!
//! Failure: each node's items fail on their own. A call to a node that is
//! not connected fails at once (fred's fail-fast), and the caller stops
//! waiting for a node at the work's deadline; either way only the items
//! that node serves get the error, so the resilience layers can answer
//! them by their rules' failure policies while the other nodes' answers
//! stand. [`RedisStore::placement`] names the node (the Cluster primary
//! that owns the key's slot, from fred's routing table, so after a failover
//! the new primary is a new node).

mod args;
pub mod board;
mod coalesce;
pub mod connect;
pub mod scripts;
pub mod url;
mod work;

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

use super::{NodeId, Placement, ReferenceStep, Reply, Store, StoreError, StoreErrorKind, Work};

pub use connect::{connect, RedisAddress, RedisOptions, StartupRetry};

/// One Redis deployment (main or per-second) and its loaded script.
#[derive(Debug)]
struct Backend {
    pool: Pool,
    clustered: bool,
    /// The node's name off a cluster (its masked address).
    name: NodeId,
    /// `limits.lua`.
    script: Script,
    /// On a cluster whose primaries took it, the per-node variant
    /// ([`scripts::LIMITS_PER_NODE`]): a request's items on one primary
    /// are one call, whatever their slots.
    node_script: Option<Script>,
    /// On a cluster, a one-connection client that only reads the topology:
    /// a refresh that asks a hung primary stalls this client, not the ones
    /// that carry decisions (fred's routing waits for its refresh).
    discovery: Option<Pool>,
}

/// A deployment and its script's lanes (see [`coalesce`]): one coalesced
/// lane on a single node (plain or behind sentinels); on a Cluster, a
/// coalesced lane per primary with the per-node script, or one call per
/// slot where the deployment refused that script.
#[derive(Debug)]
struct Node {
    backend: Arc<Backend>,
    /// The single node's lane; a Cluster's per-slot calls.
    lane: coalesce::Lane<work::LimitCalls>,
    /// A Cluster's lanes by primary, made on first use (a failover adds
    /// the new primary's; there are as many as primaries ever served).
    primaries: parking_lot::Mutex<Vec<(NodeId, Arc<coalesce::Lane<work::LimitCalls>>)>>,
    /// The runtime the lanes' tasks run on: the one that made the node.
    home: tokio::runtime::Handle,
}

impl Node {
    /// Needs a tokio runtime: the node's lanes live on it.
    fn new(backend: Backend) -> Node {
        let backend = Arc::new(backend);
        let home = tokio::runtime::Handle::current();
        let single = !backend.clustered;
        Node {
            lane: coalesce::Lane::new(
                work::LimitCalls::new(Arc::clone(&backend), false),
                single.then_some(&home),
            ),
            primaries: parking_lot::Mutex::default(),
            backend,
            home,
        }
    }

    /// Runs `group` in the call `route` names.
    async fn run(&self, route: Route, group: args::Group) -> Result<Vec<i64>, StoreError> {
        match route {
            Route::Primary(node) => self.primary(&node).run(group).await,
            Route::Slot(_) => self.lane.run(group).await,
        }
    }

    /// The lane to the Cluster primary `node`, with the per-node script.
    fn primary(&self, node: &NodeId) -> Arc<coalesce::Lane<work::LimitCalls>> {
        let mut lanes = self.primaries.lock();
        if let Some((_, lane)) = lanes.iter().find(|(n, _)| n == node) {
            return Arc::clone(lane);
        }
        let lane = Arc::new(coalesce::Lane::new(
            work::LimitCalls::new(Arc::clone(&self.backend), true),
            Some(&self.home),
        ));
        lanes.push((node.clone(), Arc::clone(&lane)));
        lane
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

/// A count as a script argument (Redis integers are signed).
fn int(n: u64) -> Value {
    Value::Integer(i64::try_from(n).unwrap_or(i64::MAX))
}

/// A store's nodes as seen from one runtime: the main deployment and the
/// per-second one, each with its connections and its coalescing lane.
#[derive(Debug)]
struct Lanes {
    main: Node,
    per_second: Option<Node>,
}

impl Lanes {
    fn node(&self, per_second: bool) -> &Node {
        match (&self.per_second, per_second) {
            (Some(b), true) => b,
            _ => &self.main,
        }
    }

    fn nodes(&self) -> impl Iterator<Item = &Node> {
        std::iter::once(&self.main).chain(self.per_second.as_ref())
    }
}

/// Limits in Redis.
///
/// Connections: the shared pool (`REDIS_POOL_SIZE`, at most one per core)
/// serves callers off the gRPC workers (the HTTP `/json` port, RLQS, lease
/// returns), and each gRPC worker has one connection per node of its own,
/// opened on its runtime ([`crate::workers`]), with its own coalescing
/// lane: a decision made on a worker is sent, answered and resumed on that
/// worker's thread. Per node, a request still makes at most one script
/// call, under the same deadline.
#[derive(Debug)]
pub struct RedisStore {
    /// The main runtime's lanes; also the source of the routing table.
    shared: Lanes,
    /// Worker `i`'s lanes; `None` for one that could not connect at start,
    /// which then uses `shared`.
    workers: Vec<Option<Lanes>>,
    /// Which node serves a key.
    placement: Arc<RedisPlacement>,
    /// When the cluster topology was last asked for again after a failure.
    resynced_at: parking_lot::Mutex<Option<Instant>>,
}

/// Which Redis node serves a key: the per-second Redis for one-second
/// windows when there is one; on a cluster, the primary that owns the key's
/// slot, from a table refreshed from fred's routing table at most once a
/// second.
#[derive(Debug)]
pub struct RedisPlacement {
    main: Arc<Backend>,
    per_second: Option<Arc<Backend>>,
    /// Off a cluster nothing; on one, slot ranges → primary.
    routes: RwLock<Routes>,
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
    /// Runs `script` over `keys` and `argv` on one node; its integer reply
    /// cut into consecutive answers of `sizes` values (one per decision or
    /// group), or an error if the lengths disagree.
    async fn call<V>(
        &self,
        script: &Script,
        keys: Vec<String>,
        argv: V,
        sizes: Vec<usize>,
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
                "unexpected reply from the limits script: wrong length",
            ));
        }
        let mut values = values.into_iter();
        Ok(sizes
            .into_iter()
            .map(|n| values.by_ref().take(n).collect())
            .collect())
    }
}

/// Which script call serves a key: its hash slot's (slot 0 off a
/// cluster), or, on a cluster that runs the per-node script, its primary's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Route {
    Slot(u16),
    Primary(NodeId),
}

/// Batch positions grouped by the script call that can serve them, keyed by
/// (per-second Redis?, route), in order of first appearance. A request
/// touches few nodes, so a linear search beats a map here.
type Groups = Vec<((bool, Route), Vec<usize>)>;

impl RedisStore {
    /// The lanes of the calling thread's runtime: its worker's own, or
    /// the shared ones.
    fn lanes(&self) -> &Lanes {
        crate::workers::current()
            .and_then(|i| self.workers.get(i))
            .and_then(Option::as_ref)
            .unwrap_or(&self.shared)
    }

    fn node(&self, per_second: bool) -> &Node {
        self.lanes().node(per_second)
    }

    /// Every runtime's lanes, the shared ones first.
    fn all_lanes(&self) -> impl Iterator<Item = &Lanes> {
        std::iter::once(&self.shared).chain(self.workers.iter().flatten())
    }

    /// Positions of `keys` grouped by the script call that can serve them:
    /// (per-second Redis?, route). Each key comes with whether it counts a
    /// one-second window (those go to the per-second Redis when there is
    /// one) and the node its work named for it (this store's
    /// [`Placement`], asked once when the work was built). On the main
    /// cluster with the per-node script, keys group by that primary, or, for
    /// a key built without one, by their slot's primary in the routing
    /// table (at most [`ROUTES_MAX_AGE`] old; a key that moved since fails
    /// its call, which refreshes the table); else by slot.
    fn group_by_node<'k>(
        &self,
        keys: impl Iterator<Item = (&'k str, bool, Option<&'k NodeId>)>,
    ) -> Groups {
        let mut groups = Groups::new();
        for (i, (key, one_second, named)) in keys.enumerate() {
            let per_second = self.shared.per_second.is_some() && one_second;
            let backend = &self.shared.node(per_second).backend;
            let per_node = !per_second && backend.node_script.is_some();
            let route = match (backend.clustered, per_node, named) {
                (false, _, _) => Route::Slot(0),
                (true, true, Some(node)) => Route::Primary(node.clone()),
                (true, _, _) => {
                    let slot = fred::util::redis_keyslot(key.as_bytes());
                    per_node
                        .then(|| self.placement.primary_of(slot))
                        .flatten()
                        .map_or(Route::Slot(slot), Route::Primary)
                }
            };
            match groups
                .iter_mut()
                .find(|((ps, r), _)| *ps == per_second && *r == route)
            {
                Some((_, positions)) => positions.push(i),
                None => groups.push(((per_second, route), vec![i])),
            }
        }
        groups
    }

    /// After a failed call on a cluster, asks for the topology again (at most
    /// once per [`ROUTES_MAX_AGE`], in the background): a paused or dead
    /// primary sends no MOVED, so without this the client would keep routing
    /// its slots to it after its replica has taken over. A node that keeps
    /// failing is asked about every second until the cluster has failed
    /// over, then its slots go to the new primary (a new node, with a
    /// closed breaker).
    fn resync_soon(&self) {
        if !self.shared.main.backend.clustered {
            return;
        }
        {
            let mut at = self.resynced_at.lock();
            if at.is_some_and(|t| t.elapsed() < ROUTES_MAX_AGE) {
                return;
            }
            *at = Some(Instant::now());
        }
        self.placement.routes.write().read_at = None;
        let pools: Vec<Pool> = self
            .all_lanes()
            .map(|l| l.main.backend.pool.clone())
            .collect();
        let discovery = self.shared.main.backend.discovery.clone();
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
                if primaries(d.next()) == primaries(pools[0].next()) {
                    return;
                }
            }
            for client in pools.iter().flat_map(Pool::clients) {
                if let Err(e) = client.sync_cluster().await {
                    tracing::debug!(error = %e, "cluster topology refresh failed; retried on the next failure");
                }
            }
        });
    }

    /// Calls `on_change(false)` when a connection to Redis fails and
    /// `on_change(true)` when one is re-established
    /// (`REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`). The
    /// listener tasks end when the store's connections are closed.
    pub fn watch_connections(&self, on_change: Arc<dyn Fn(bool) + Send + Sync>) {
        for node in self.all_lanes().flat_map(Lanes::nodes) {
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
        for node in self.all_lanes().flat_map(Lanes::nodes) {
            let _ = node.backend.pool.quit().await;
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
}

impl RedisStore {
    /// The RLQS demand boards on the main deployment.
    pub fn board(&self) -> board::RedisBoard {
        board::RedisBoard::new(self.shared.main.backend.pool.clone())
    }

    /// Where this store keeps its keys.
    pub fn placement(&self) -> Arc<dyn Placement> {
        Arc::clone(&self.placement) as Arc<dyn Placement>
    }

    /// [`Store::execute`] without its span.
    async fn run(&self, work: &Work, deadline: Option<Instant>) -> Reply {
        let reply = work::execute(self, work, deadline).await;
        let unreachable = |a: &Result<super::Answer, StoreError>| {
            a.as_ref()
                .is_err_and(|e| e.kind != StoreErrorKind::Rejected)
        };
        if reply.answers.iter().any(unreachable) {
            self.resync_soon();
        }
        reply
    }
}

impl RedisPlacement {
    fn new(main: &Node, per_second: Option<&Node>) -> RedisPlacement {
        RedisPlacement {
            main: Arc::clone(&main.backend),
            per_second: per_second.map(|n| Arc::clone(&n.backend)),
            routes: RwLock::default(),
        }
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
        if let Some(state) = self.main.pool.next().cached_cluster_state() {
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
}

impl Placement for RedisPlacement {
    fn node_of(&self, key: &str, one_second: bool) -> Option<NodeId> {
        let backend = match (&self.per_second, one_second) {
            (Some(b), true) => b,
            _ => &self.main,
        };
        if backend.clustered {
            self.primary_of(fred::util::redis_keyslot(key.as_bytes()))
        } else {
            Some(backend.name.clone())
        }
    }

    /// In one script off a cluster; on one, iff both keys hash to one slot
    /// (an algorithm's reference shares its hash tag; the original's keys,
    /// which name their window, move slot every window).
    fn reference_step(&self, subject: &str, reference: &str) -> ReferenceStep {
        let slot = |k: &str| fred::util::redis_keyslot(k.as_bytes());
        if !self.main.clustered || slot(subject) == slot(reference) {
            ReferenceStep::Same
        } else {
            ReferenceStep::Separate
        }
    }
}
