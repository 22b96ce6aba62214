//! One Redis deployment as the store calls it: its connections and loaded
//! script ([`Backend`]), its coalescing lanes ([`Node`]; on a Cluster one
//! per primary), a runtime's pair of them ([`Lanes`]: main and per-second),
//! and one call given up at its deadline ([`until`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::clients::Pool;
use fred::interfaces::{ClientLike, LuaInterface, ServerInterface};
use fred::types::config::Options;
use fred::types::scripts::Script;
use fred::types::Value;
use tokio::time::Instant;

use super::args::{int, CallArgs, Destination, Group, Route};
use super::coalesce;
use super::error::{moved_key, store_error};
use super::options::RedisOptions;
use crate::store::{NodeId, StoreError, StoreErrorKind};

/// One Redis deployment (main or per-second) and its loaded script.
#[derive(Debug)]
pub(super) struct Backend {
    pub(super) pool: Pool,
    pub(super) clustered: bool,
    /// The node's name off a cluster (its masked address).
    pub(super) name: NodeId,
    /// `limits.lua`.
    pub(super) script: Script,
    /// On a cluster whose primaries took it, the per-node variant
    /// ([`scripts::LIMITS_PER_NODE`]): a request's items on one primary
    /// are one call, whatever their slots.
    pub(super) node_script: Option<Script>,
    /// On a cluster, a one-connection client that only reads the topology:
    /// a refresh that asks a hung primary stalls this client, not the ones
    /// that carry decisions (fred's routing waits for its refresh).
    pub(super) discovery: Option<Pool>,
    /// How to open more connections to the deployment: a Cluster
    /// primary's own (see [`Node::primary`]), a replicated lane's (see
    /// [`Node::replicated`]). `None` on a backend that is itself one of
    /// those.
    pub(super) options: Option<Arc<RedisOptions>>,
    /// A connection of one primary's own that has not connected yet: its
    /// first calls wait for it (within their deadline) instead of failing
    /// at once.
    pub(super) connecting: AtomicBool,
}

/// A deployment and its script's lanes (see [`coalesce`]): one coalesced
/// lane on a single node (plain or behind sentinels); on a Cluster, a
/// coalesced lane per primary with the per-node script, or one call per
/// slot where the deployment refused that script.
#[derive(Debug)]
pub(super) struct Node {
    pub(super) backend: Arc<Backend>,
    /// The single node's lane; a Cluster's per-slot calls.
    pub(super) lane: coalesce::Lane<LimitCalls>,
    /// A Cluster's lanes by primary, made on first use (a failover adds
    /// the new primary's; there are as many as primaries ever served).
    pub(super) primaries: parking_lot::Mutex<Vec<(NodeId, Arc<coalesce::Lane<LimitCalls>>)>>,
    /// The lanes of `durability: replicated` items by route, made on first
    /// use (see [`Node::replicated`]).
    pub(super) replicated: parking_lot::Mutex<Vec<(Route, Arc<coalesce::Lane<LimitCalls>>)>>,
    /// The runtime the lanes' tasks run on: the one that made the node.
    pub(super) home: tokio::runtime::Handle,
}

impl Node {
    /// Needs a tokio runtime: the node's lanes live on it.
    pub(super) fn new(backend: Backend) -> Node {
        let backend = Arc::new(backend);
        let home = tokio::runtime::Handle::current();
        let single = !backend.clustered;
        Node {
            lane: coalesce::Lane::new(
                LimitCalls::new(Arc::clone(&backend), false),
                single.then_some(&home),
            ),
            primaries: parking_lot::Mutex::default(),
            replicated: parking_lot::Mutex::default(),
            backend,
            home,
        }
    }

    /// Runs `group` in the call `route` names (on the replicated lane if
    /// `replicated`).
    async fn run(
        &self,
        route: Route,
        replicated: bool,
        group: Group,
    ) -> Result<Vec<i64>, StoreError> {
        match (&route, replicated) {
            (_, true) => self.replicated(&route)?.run(group).await,
            (Route::Primary(node), false) => self.primary(node).run(group).await,
            (Route::Slot(_), false) => self.lane.run(group).await,
        }
    }

    /// The lane of `durability: replicated` items to `route`'s node: each
    /// of its calls is followed by `WAIT 1` on the same connection, and
    /// answers only once a replica acknowledged the call's counts (see
    /// [`LimitCalls::call`]). `WAIT` holds its connection until then, so
    /// the lane has a connection of its own: the node's other calls never
    /// wait behind it. On a Cluster that refused the per-node script
    /// (before Redis 7) the items of a slot have no connection of their
    /// node's own to wait on, and fail.
    fn replicated(&self, route: &Route) -> Result<Arc<coalesce::Lane<LimitCalls>>, StoreError> {
        let mut lanes = self.replicated.lock();
        if let Some((_, lane)) = lanes.iter().find(|(r, _)| r == route) {
            return Ok(Arc::clone(lane));
        }
        let backend = match route {
            Route::Primary(node) => self.backend.direct_to(node, &self.home),
            Route::Slot(_) if !self.backend.clustered => self.backend.own_connection(&self.home),
            Route::Slot(_) => None,
        }
        .ok_or_else(|| {
            StoreError::new(
                StoreErrorKind::Rejected,
                "durability: replicated needs a connection of the node's own (on a Cluster: Redis 7 or Valkey)",
            )
        })?;
        let lane = Arc::new(coalesce::Lane::new(
            LimitCalls {
                replicated: true,
                ..LimitCalls::new(Arc::new(backend), matches!(route, Route::Primary(_)))
            },
            Some(&self.home),
        ));
        lanes.push((route.clone(), Arc::clone(&lane)));
        Ok(lane)
    }

    /// The lane to the Cluster primary `node`, with the per-node script,
    /// on a connection of its own to that primary. Calls to one primary
    /// then never wait on another's: fred's cluster client routes every
    /// node's commands through one task, which stops writing while it
    /// reconnects to a killed primary (until the Cluster fails it over,
    /// seconds later), so healthy primaries' calls would time out behind
    /// it. A primary whose own connection cannot be made uses the cluster
    /// client.
    fn primary(&self, node: &NodeId) -> Arc<coalesce::Lane<LimitCalls>> {
        let mut lanes = self.primaries.lock();
        if let Some((_, lane)) = lanes.iter().find(|(n, _)| n == node) {
            return Arc::clone(lane);
        }
        let backend = self
            .backend
            .direct_to(node, &self.home)
            .map_or_else(|| Arc::clone(&self.backend), Arc::new);
        let lane = Arc::new(coalesce::Lane::new(
            LimitCalls::new(backend, true),
            Some(&self.home),
        ));
        lanes.push((node.clone(), Arc::clone(&lane)));
        lane
    }

    /// The backend the call `route` names runs on: a Cluster primary's
    /// own connection, or the deployment's.
    pub(super) fn backend_of(&self, route: &Route) -> Arc<Backend> {
        match route {
            Route::Primary(node) => Arc::clone(&self.primary(node).batch().backend),
            Route::Slot(_) => Arc::clone(&self.backend),
        }
    }

    /// The connections of the primaries' own (see [`Node::primary`]).
    pub(super) fn primary_pools(&self) -> Vec<Pool> {
        self.primaries
            .lock()
            .iter()
            .map(|(_, lane)| &lane.batch().backend)
            .filter(|b| !Arc::ptr_eq(b, &self.backend))
            .map(|b| b.pool.clone())
            .collect()
    }

    /// The replicated lanes' connections (see [`Node::replicated`]).
    pub(super) fn replicated_pools(&self) -> Vec<Pool> {
        self.replicated
            .lock()
            .iter()
            .map(|(_, lane)| lane.batch().backend.pool.clone())
            .collect()
    }
}

/// `call`, given up at `deadline`: then a [`StoreErrorKind::Timeout`].
/// A call already sent still runs on the server; one still queued for a
/// coalesced call is dropped (see `coalesce`).
pub(super) async fn until<T>(
    deadline: Option<Instant>,
    call: impl std::future::Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    match deadline {
        None => call.await,
        Some(at) => tokio::time::timeout_at(at, call).await.unwrap_or_else(|_| {
            Err(StoreError::new(
                StoreErrorKind::Timeout,
                crate::store::DEADLINE_EXCEEDED,
            ))
        }),
    }
}

/// A store's nodes as seen from one runtime: the main deployment and the
/// per-second one, each with its connections and its coalescing lane.
#[derive(Debug)]
pub(super) struct Lanes {
    pub(super) main: Node,
    pub(super) per_second: Option<Node>,
}

impl Lanes {
    pub(super) fn node(&self, per_second: bool) -> &Node {
        match (&self.per_second, per_second) {
            (Some(b), true) => b,
            _ => &self.main,
        }
    }

    pub(super) fn nodes(&self) -> impl Iterator<Item = &Node> {
        std::iter::once(&self.main).chain(self.per_second.as_ref())
    }

    /// Runs `group` in the call `to` names; `deadline` is its request's.
    pub(super) async fn run(
        &self,
        to: Destination,
        mut group: Group,
        deadline: Option<Instant>,
    ) -> Result<Vec<i64>, StoreError> {
        group.deadline = deadline;
        self.node(to.per_second)
            .run(to.route, to.replicated, group)
            .await
    }
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
    /// A backend on a connection of the Cluster primary `node`'s own (see
    /// [`Node::primary`]), connecting on `home`; `None` off a cluster, or
    /// if `node` is not a `host:port`.
    fn direct_to(&self, node: &NodeId, home: &tokio::runtime::Handle) -> Option<Backend> {
        if !self.clustered {
            return None;
        }
        let options = self.options.as_ref()?;
        let name = node.to_string();
        let (host, port) = name.rsplit_once(':')?;
        let port: u16 = port.parse().ok()?;
        let pool = match options.direct_pool(host.trim_matches(['[', ']']), port) {
            Ok(pool) => pool,
            Err(e) => {
                tracing::warn!(node = %node, error = %e.message, "no connection of the primary's own; its calls share the cluster client");
                return None;
            }
        };
        Some(self.on_connection(pool, node.clone(), home))
    }

    /// A backend on a connection of its own to this single node (plain or
    /// behind sentinels), connecting on `home`; `None` on a cluster.
    fn own_connection(&self, home: &tokio::runtime::Handle) -> Option<Backend> {
        if self.clustered {
            return None;
        }
        match self.options.as_ref()?.pool_of(1) {
            Ok(pool) => Some(self.on_connection(pool, self.name.clone(), home)),
            Err(e) => {
                tracing::warn!(node = %self.name, error = %e.message, "no connection of the replicated lane's own");
                None
            }
        }
    }

    /// This backend's scripts on `pool` (one connection), named `name`,
    /// connected by [`keep_connecting`] on `home`: its first calls wait for
    /// the connection.
    fn on_connection(&self, pool: Pool, name: NodeId, home: &tokio::runtime::Handle) -> Backend {
        home.spawn(keep_connecting(pool.clone()));
        Backend {
            pool,
            clustered: self.clustered,
            name,
            script: self.script.clone(),
            node_script: self.node_script.clone(),
            discovery: None,
            options: None,
            connecting: AtomicBool::new(true),
        }
    }

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
        let values = self.call_raw(script, keys, argv).await?;
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

    /// Runs `script` over `keys` and `argv` on one node, failing at once
    /// while the connection is down, loading the script on `NOSCRIPT`:
    /// every script call of the store goes through here.
    pub(super) async fn call_raw<V>(
        &self,
        script: &Script,
        keys: Vec<String>,
        argv: V,
    ) -> Result<Vec<i64>, StoreError>
    where
        V: TryInto<fred::types::MultipleValues> + Send,
        V::Error: Into<fred::error::Error> + Send,
    {
        self.call_script(script, keys, argv).await
    }

    /// The next connection, once the pool's first connect is done.
    async fn ready_client(&self) -> Result<&fred::clients::Client, StoreError> {
        let client = self.pool.next();
        if self.connecting.load(Ordering::Relaxed) {
            client
                .wait_for_connect()
                .await
                .map_err(|e| store_error(&e))?;
            self.connecting.store(false, Ordering::Relaxed);
        }
        Ok(client)
    }

    /// `GET key`, failing at once while the connection is down, as the
    /// script calls do.
    pub(super) async fn get(&self, key: &str) -> Result<Option<String>, StoreError> {
        use fred::interfaces::KeysInterface;
        let client = self.ready_client().await?;
        client
            .with_options(&fail_fast())
            .get(key)
            .await
            .map_err(|e| store_error(&e))
    }

    /// [`Backend::call_raw`] for a script whose reply is any `R`.
    pub(super) async fn call_script<R, V>(
        &self,
        script: &Script,
        keys: Vec<String>,
        argv: V,
    ) -> Result<R, StoreError>
    where
        R: fred::types::FromValue,
        V: TryInto<fred::types::MultipleValues> + Send,
        V::Error: Into<fred::error::Error> + Send,
    {
        let client = self.ready_client().await?;
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
        let values: R = match sent {
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
        Ok(values)
    }
}

/// Connects `pool` made while the service runs (a primary's own, a
/// replicated lane's), at once, and again, 100 ms to 5 s apart, for as long
/// as its first connection fails: fred ends a client's connection task
/// when its first attempt fails (its later losses it retries by itself,
/// see `pool_of`), and a call waiting for it meanwhile would wait out its
/// deadline. (The chaos soak saw an instance started while cut off from a
/// primary fail that primary's keys for 100 s after the cut healed.) Ends
/// once the connection task ends without an error: the pool was quit.
async fn keep_connecting(pool: Pool) {
    let mut delay = Duration::from_millis(100);
    loop {
        match pool.connect().await {
            Ok(Ok(())) => return,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "a connection of a node's own failed; retrying")
            }
            Err(_) => return,
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(5));
    }
}

impl Backend {
    /// How long a replicated call waits for a replica when its requests
    /// gave no deadline.
    fn wait_default(&self) -> Duration {
        self.options
            .as_ref()
            .map_or(Duration::from_secs(1), |o| o.timeout)
    }

    /// `WAIT 1 <wait>` on the backend's connection: `Ok` once a replica has
    /// every write sent on it so far, else a refusal naming the durability.
    /// Redis checks a blocked command's timeout only when its event loop
    /// wakes (every 100 ms on an idle server at the default `hz`), so the
    /// wait is also bounded here: past `wait`, the refusal answers while
    /// the `WAIT` still holds the lane's connection until Redis ends it.
    async fn wait_for_a_replica(&self, wait: Duration) -> Result<(), StoreError> {
        let ms = i64::try_from(wait.as_millis()).unwrap_or(i64::MAX).max(1);
        let client = self.pool.next();
        let options = fail_fast();
        let with = client.with_options(&options);
        match tokio::time::timeout(wait, with.wait::<i64>(1, ms)).await {
            Ok(Ok(acknowledged)) if acknowledged >= 1 => Ok(()),
            Ok(Err(e)) => Err(store_error(&e)),
            Ok(Ok(_)) | Err(_) => Err(StoreError::new(
                StoreErrorKind::Rejected,
                format!("durability: replicated: no replica acknowledged the count within {ms} ms"),
            )),
        }
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
    /// Each call is followed by `WAIT 1` on its connection (the backend's
    /// only one): see [`Node::replicated`].
    replicated: bool,
}

/// The least a replicated call's `WAIT` is given; and what it leaves of
/// the time to the earliest deadline of its groups for its answer to
/// arrive: a fifth, at least `WAIT_MARGIN`.
const WAIT_FLOOR: Duration = Duration::from_millis(1);
const WAIT_MARGIN: Duration = Duration::from_millis(2);

impl LimitCalls {
    pub(super) fn new(backend: Arc<Backend>, per_node: bool) -> LimitCalls {
        LimitCalls {
            backend,
            per_node,
            replicated: false,
        }
    }

    /// One script call for `groups`; on a replicated lane, answered only
    /// once a replica acknowledged it: `WAIT 1 <ms>` on the same connection
    /// covers every write sent on it before, and gives up before the
    /// earliest of the groups' deadlines (so that the reply, not the
    /// deadline, answers them: a failed replication is not the node's
    /// timeout, and never opens its breaker). A count that no replica
    /// acknowledged stays on the primary and is answered as the store's
    /// failure (the items' `on_failure`).
    async fn call(&self, groups: Vec<Group>) -> Result<Vec<Vec<i64>>, StoreError> {
        let wait = self.replicated.then(|| {
            groups.iter().filter_map(|g| g.deadline).min().map_or(
                self.backend.wait_default(),
                |at| {
                    let left = at.saturating_duration_since(Instant::now());
                    left.saturating_sub((left / 5).max(WAIT_MARGIN))
                        .max(WAIT_FLOOR)
                },
            )
        });
        let answers = self.script_call(groups).await?;
        if let Some(wait) = wait {
            self.backend.wait_for_a_replica(wait).await?;
        }
        Ok(answers)
    }

    async fn script_call(&self, groups: Vec<Group>) -> Result<Vec<Vec<i64>>, StoreError> {
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

impl coalesce::Batch for LimitCalls {
    type Item = Group;
    type Answer = Vec<i64>;

    fn keys(item: &Group) -> usize {
        item.len()
    }

    fn run(
        &self,
        items: Vec<Group>,
    ) -> impl std::future::Future<Output = Result<Vec<Vec<i64>>, StoreError>> + Send {
        self.call(items)
    }
}
