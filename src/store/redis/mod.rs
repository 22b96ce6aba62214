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
//!
//! The files, each importing only from those below it: `args` (the
//! script's argument layout and its reply's rows), `node` (a deployment's
//! connections, script and coalescing lanes; one call to it), `placement`
//! (which node and which call serve a key), `work` (a request's work across
//! its nodes: reserve, then refund), and this file, the store around them.

mod args;
mod board;
mod coalesce;
pub mod connect;
mod error;
mod node;
pub mod options;
mod overrides;
mod placement;
pub mod scripts;
pub mod url;
mod work;

use std::sync::Arc;

use async_trait::async_trait;
use fred::clients::Pool;
use fred::interfaces::{ClientLike, ClusterInterface, EventInterface};
use tokio::time::Instant;

use futures::TryFutureExt;

use super::board::{BoardReply, BoardWork};
use super::overrides::{BookReply, BookWork};
use super::{Done, Job, Placement, Reply, Store, StoreError, StoreErrorKind, Work};

pub use connect::{connect, StartupRetry};
pub use options::{RedisAddress, RedisOptions, RedisTls};
pub use placement::RedisPlacement;

use node::Lanes;
use placement::ROUTES_MAX_AGE;

/// Limits in Redis.
///
/// Connections: the shared pool (`REDIS_POOL_SIZE`, at most one per core)
/// serves callers off the gRPC workers (the HTTP `/json` port, RLQS, lease
/// returns), and each gRPC worker has one connection per node of its own,
/// opened on its runtime ([`crate::platform::workers`]), with its own coalescing
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

impl RedisStore {
    /// The lanes of the calling thread's runtime: its worker's own, or
    /// the shared ones.
    fn lanes(&self) -> &Lanes {
        crate::platform::workers::current()
            .and_then(|i| self.workers.get(i))
            .and_then(Option::as_ref)
            .unwrap_or(&self.shared)
    }

    /// Every runtime's lanes, the shared ones first.
    fn all_lanes(&self) -> impl Iterator<Item = &Lanes> {
        std::iter::once(&self.shared).chain(self.workers.iter().flatten())
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
        self.placement.forget_routes();
        // The slot table from the first primary that answers, on the
        // primaries' own connections: the cluster clients may be waiting
        // out a reconnection to a dead primary, seconds behind a failover.
        let direct: Vec<Pool> = self
            .all_lanes()
            .flat_map(|l| l.main.primary_pools())
            .collect();
        let placement = Arc::clone(&self.placement);
        tokio::spawn(async move {
            for pool in direct {
                let client = pool.next();
                let asked = tokio::time::timeout(
                    ROUTES_MAX_AGE / 2,
                    client.cluster_slots::<fred::types::Value>(),
                );
                let Ok(Ok(slots)) = asked.await else { continue };
                let host = client
                    .client_config()
                    .server
                    .hosts()
                    .first()
                    .map(|s| s.host.clone());
                let table = fred::types::cluster::ClusterRouting::from_cluster_slots(
                    slots,
                    host.unwrap_or_default(),
                );
                if let Ok(table) = table {
                    placement.set_routes(&table);
                    return;
                }
            }
        });
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

    /// After a reply with failed items: a redirection names the slot's new
    /// primary at once, and any failure of a node reads the topology soon.
    fn follow_failures<'e>(&self, errors: impl Iterator<Item = &'e StoreError>) {
        let mut unreachable = false;
        for e in errors.filter(|e| e.kind != StoreErrorKind::Rejected) {
            unreachable = true;
            self.placement.follow_moved(&e.message);
        }
        if unreachable {
            self.resync_soon();
        }
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
            for pool in node
                .primary_pools()
                .into_iter()
                .chain(node.replicated_pools())
            {
                let _ = pool.quit().await;
            }
        }
    }
}

#[async_trait]
impl Store for RedisStore {
    async fn call(&self, job: Job<'_>, deadline: Option<Instant>) -> Done {
        let work = match job {
            Job::Limits(work) => work,
            Job::Boards(work) => return Done::Boards(self.share_boards(work, deadline).await),
            Job::Overrides(work) => return Done::Overrides(self.book(work, deadline).await),
        };
        if crate::platform::telemetry::enabled() {
            use tracing::Instrument;
            let span = tracing::info_span!(
                target: crate::platform::telemetry::SPAN_TARGET,
                "Redis Pipeline Execution",
                "pipeline length" = work.len(),
            );
            return Done::Limits(self.limits(work, deadline).instrument(span).await);
        }
        Done::Limits(self.limits(work, deadline).await)
    }
}

impl RedisStore {
    /// Board steps on the main deployment, one call per node (per slot
    /// where the cluster refuses script flags), concurrently, each given up
    /// at the deadline.
    async fn share_boards(&self, work: &BoardWork, deadline: Option<Instant>) -> BoardReply {
        let main = &self.lanes().main;
        let groups = self.placement.group_by_node(
            work.steps
                .iter()
                .map(|s| (s.key.as_str(), false, false, s.node.as_ref())),
        );
        let calls =
            groups
                .into_iter()
                .map(|(args::Destination { route, .. }, positions)| async move {
                    let per_node = matches!(route, args::Route::Primary(_));
                    let backend = main.backend_of(&route);
                    let answer = node::until(
                        deadline,
                        board::call(&backend, per_node, work, &positions).map_err(error::moved_key),
                    )
                    .await;
                    (positions, answer)
                });
        let mut reply: BoardReply = vec![
            Err(StoreError::new(
                StoreErrorKind::Rejected,
                "a board step was not sent"
            ));
            work.steps.len()
        ];
        for (positions, answer) in futures::future::join_all(calls).await {
            match answer {
                Ok(shares) => {
                    for (i, s) in positions.into_iter().zip(shares) {
                        reply[i] = Ok(s);
                    }
                }
                Err(e) => {
                    for i in positions {
                        reply[i] = Err(e.clone());
                    }
                }
            }
        }
        self.follow_failures(reply.iter().filter_map(|a| a.as_ref().err()));
        reply
    }

    /// Steps on the overrides' book, one call each, in order, each given up
    /// at the deadline (the book's keys are one slot: one node serves all).
    async fn book(&self, work: &BookWork, deadline: Option<Instant>) -> BookReply {
        let backend = self.lanes().main.backend_of(&args::Route::Slot(0));
        let mut reply = Vec::with_capacity(work.steps.len());
        for step in &work.steps {
            let answer = node::until(
                deadline,
                overrides::call(&backend, work, step).map_err(error::moved_key),
            )
            .await;
            reply.push(answer);
        }
        self.follow_failures(reply.iter().filter_map(|a| a.as_ref().err()));
        reply
    }

    /// Where this store keeps its keys.
    pub fn placement(&self) -> Arc<dyn Placement> {
        Arc::clone(&self.placement) as Arc<dyn Placement>
    }

    /// A request's limits, without their span.
    async fn limits(&self, work: &Work, deadline: Option<Instant>) -> Reply {
        let reply = work::execute(self.lanes(), &self.placement, work, deadline).await;
        self.follow_failures(reply.answers.iter().filter_map(|a| a.as_ref().err()));
        reply
    }
}
