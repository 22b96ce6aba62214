//! One Redis deployment as the store calls it: its connections and loaded
//! script ([`Backend`]), its coalescing lanes ([`Node`]; on a Cluster one
//! per primary), a runtime's pair of them ([`Lanes`]: main and per-second),
//! and one call given up at its deadline ([`until`]).

use std::sync::Arc;

use fred::clients::Pool;
use fred::interfaces::{ClientLike, LuaInterface};
use fred::types::config::Options;
use fred::types::scripts::Script;
use fred::types::Value;
use tokio::time::Instant;

use super::args::{int, CallArgs, Group, Route};
use super::coalesce;
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
            backend,
            home,
        }
    }

    /// Runs `group` in the call `route` names.
    pub(super) async fn run(&self, route: Route, group: Group) -> Result<Vec<i64>, StoreError> {
        match route {
            Route::Primary(node) => self.primary(&node).run(group).await,
            Route::Slot(_) => self.lane.run(group).await,
        }
    }

    /// The lane to the Cluster primary `node`, with the per-node script.
    fn primary(&self, node: &NodeId) -> Arc<coalesce::Lane<LimitCalls>> {
        let mut lanes = self.primaries.lock();
        if let Some((_, lane)) = lanes.iter().find(|(n, _)| n == node) {
            return Arc::clone(lane);
        }
        let lane = Arc::new(coalesce::Lane::new(
            LimitCalls::new(Arc::clone(&self.backend), true),
            Some(&self.home),
        ));
        lanes.push((node.clone(), Arc::clone(&lane)));
        lane
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
}

pub(super) fn store_error(e: &fred::error::Error) -> StoreError {
    use fred::error::ErrorKind as K;
    let kind = match e.kind() {
        K::Timeout => StoreErrorKind::Timeout,
        K::IO | K::Canceled | K::Cluster | K::Sentinel | K::Routing | K::Backpressure => {
            StoreErrorKind::Unavailable
        }
        // A Redis at `maxmemory` under `noeviction` refuses writes: the
        // store cannot count now, as if it were down, and may again once
        // keys expire; the rules' failure policies answer.
        _ if is_out_of_memory(e.details()) => StoreErrorKind::Unavailable,
        _ => StoreErrorKind::Rejected,
    };
    let message = if e.details().is_empty() {
        format!("{:?}", e.kind())
    } else {
        e.details().to_string()
    };
    StoreError::new(kind, message)
}

/// Whether an error reply is Redis's refusal of a write at `maxmemory`
/// (`OOM command not allowed when used memory > 'maxmemory'`, also inside a
/// script's error).
fn is_out_of_memory(details: &str) -> bool {
    details.starts_with("OOM ") || details.contains("OOM command not allowed")
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
        Ok(values)
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
pub(super) fn moved_key(e: StoreError) -> StoreError {
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

    #[test]
    fn a_redis_out_of_memory_is_the_stores_failure_not_an_answer() {
        use fred::error::{Error, ErrorKind};
        for text in [
            "OOM command not allowed when used memory > 'maxmemory'.",
            "ERR Error running script (call to f_x): @user_script:12: @user_script: 12: -OOM command not allowed when used memory > 'maxmemory'.",
        ] {
            let e = store_error(&Error::new(ErrorKind::Unknown, text));
            assert_eq!(e.kind, StoreErrorKind::Unavailable, "{text}");
            assert!(e.is_transient());
        }
        let wrong = store_error(&Error::new(ErrorKind::Unknown, "WRONGTYPE Operation"));
        assert_eq!(wrong.kind, StoreErrorKind::Rejected);
    }
}
