//! Connecting to Redis: settings to `fred` configuration, TLS, and the
//! original's start-up wait: start-up blocks until Redis
//! answers `PING`, retrying with jittered exponential back-off, giving up
//! only after `REDIS_STARTUP_MAX_ELAPSED_TIME` (0 = never).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use fred::clients::Pool;
use fred::interfaces::ClientLike;
use fred::types::scripts::Script;

use super::error::store_error;
use super::node::{Backend, Lanes, Node};
use super::options::RedisOptions;
use super::url::Target;
use super::{RedisPlacement, RedisStore};
use crate::platform::workers::Workers;
use crate::store::{NodeId, StoreError, StoreErrorKind};
use tokio::runtime::Handle;

/// A one-connection pool for topology reads, if it connects (without it the
/// decision clients refresh the topology themselves).
async fn discovery_pool(options: &RedisOptions) -> Option<Pool> {
    let pool = options.pool_of(1).ok()?;
    match pool.init().await {
        Ok(_) => Some(pool),
        Err(e) => {
            tracing::warn!(error = %e, "no separate cluster topology client; topology refreshes share the decision clients");
            None
        }
    }
}

/// The start-up back-off (`REDIS_STARTUP_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartupRetry {
    /// First delay.
    pub initial: Duration,
    /// Largest delay.
    pub max: Duration,
    /// Give up after this long; zero retries forever.
    pub max_elapsed: Duration,
}

impl Default for StartupRetry {
    fn default() -> Self {
        StartupRetry {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(30),
            max_elapsed: Duration::ZERO,
        }
    }
}

/// The per-node script, if the cluster's primaries take it (Redis 7,
/// Valkey: script flags); a deployment that refuses it keeps one script
/// call per hash slot.
async fn per_node_script(pool: &Pool) -> Option<Script> {
    let script = Script::from_lua(super::scripts::LIMITS_PER_NODE);
    match script.load(pool.next()).await {
        Ok(()) => Some(script),
        Err(e) => {
            tracing::warn!(error = %e, "the Redis Cluster refused the per-node script (it needs Redis 7 or Valkey); one script call per hash slot instead");
            None
        }
    }
}

/// Loads every script the store calls on every primary of the deployment,
/// so a node's first request pays one script call, not a `NOSCRIPT` reply,
/// a load and the call again (three round trips, and a Lua compile, that
/// can outlast a tight `STORE_TIMEOUT` on a busy host and count against
/// the node's breaker). A refusal is logged: the `NOSCRIPT` path still
/// loads on first use, and after a failover promotes a replica that never
/// saw the load. `per_node`: the cluster took the per-node limits script
/// (already loaded), so the boards' per-node one is loaded too.
async fn preload_scripts(pool: &Pool, per_node: bool) {
    let mut texts = vec![
        super::scripts::LIMITS,
        super::scripts::BOARD,
        super::scripts::OVERRIDES,
    ];
    if per_node {
        texts.push(super::scripts::BOARD_PER_NODE);
    }
    for text in texts {
        if let Err(e) = Script::from_lua(text).load(pool.next()).await {
            tracing::warn!(error = %e, "a script was not loaded at start; it loads on its first call");
        }
    }
}

/// What to check when a deployment does not answer at start-up: the
/// settings that point at it, and how to try the service without Redis.
fn startup_hint(target: &Target) -> &'static str {
    match target {
        Target::Unix { .. } => {
            "REDIS_SOCKET_TYPE=unix (the default) reads REDIS_URL as a socket path: for a Redis over \
             TCP set REDIS_SOCKET_TYPE=tcp and REDIS_URL=host:port; to try the service without \
             Redis, BACKEND_TYPE=memory"
        }
        _ => {
            "check REDIS_URL, REDIS_TYPE, REDIS_AUTH and REDIS_TLS (REDIS_PERSECOND_* for the \
             per-second Redis); to try the service without Redis, BACKEND_TYPE=memory"
        }
    }
}

/// Connects one deployment, retrying until `PING` answers `PONG`, with
/// its scripts loaded.
async fn connect_one(options: &RedisOptions, retry: StartupRetry) -> Result<Backend, StoreError> {
    let started = Instant::now();
    let mut delay = retry.initial.max(Duration::from_millis(10));
    loop {
        let pool = options.pool()?;
        let attempt = async {
            if let Target::Unix { path } = &options.target {
                if !std::path::Path::new(path).exists() {
                    return Err(StoreError::new(
                        StoreErrorKind::Unavailable,
                        format!("no socket at {path}"),
                    ));
                }
            }
            pool.init().await.map_err(|e| store_error(&e))?;
            let pong: String = pool.ping(None).await.map_err(|e| store_error(&e))?;
            if pong != "PONG" {
                return Err(StoreError::new(
                    StoreErrorKind::Rejected,
                    format!("unexpected PING reply {pong:?}"),
                ));
            }
            Ok(())
        };
        match attempt.await {
            Ok(()) => {
                let clustered = matches!(options.target, Target::Cluster { .. });
                let (discovery, node_script) = if clustered {
                    (discovery_pool(options).await, per_node_script(&pool).await)
                } else {
                    (None, None)
                };
                preload_scripts(&pool, node_script.is_some()).await;
                return Ok(Backend {
                    discovery,
                    pool,
                    clustered,
                    name: NodeId::new(&options.display),
                    script: Script::from_lua(super::scripts::LIMITS),
                    node_script,
                    options: Some(Arc::new(options.clone())),
                    connecting: false.into(),
                });
            }
            Err(e) => {
                if pool.is_connected() {
                    let _ = pool.quit().await;
                }
                let elapsed = started.elapsed();
                if !retry.max_elapsed.is_zero() && elapsed >= retry.max_elapsed {
                    return Err(StoreError::new(
                        e.kind,
                        format!(
                            "timed out waiting for Redis connection to {} after {:?}: {}; {}",
                            options.display,
                            elapsed,
                            e.message,
                            startup_hint(&options.target)
                        ),
                    ));
                }
                tracing::warn!(
                    "Redis {} not ready ({}); retrying in {:?}; {}",
                    options.display,
                    e.message,
                    delay,
                    startup_hint(&options.target)
                );
                // Jitter between the minimum and the exponential value.
                let wait = retry.initial
                    + (delay.saturating_sub(retry.initial)).mul_f64(rand::random::<f64>());
                tokio::time::sleep(wait).await;
                delay = (delay * 2).min(retry.max.max(retry.initial));
            }
        }
    }
}

/// Connects the main Redis and, if given, the per-second one (first, as
/// the original does), each blocking until it answers; then gives each of
/// `workers` connections of its own (see [`RedisStore`]). A worker whose
/// connections fail to open (Redis went away in between) is logged and
/// uses the shared ones.
pub async fn connect(
    main: &RedisOptions,
    per_second: Option<&RedisOptions>,
    retry: StartupRetry,
    workers: &Workers,
) -> Result<RedisStore, StoreError> {
    let shared_per_second = match per_second {
        Some(o) => Some(Node::new(connect_one(o, retry).await?)),
        None => None,
    };
    let shared = Lanes {
        main: Node::new(connect_one(main, retry).await?),
        per_second: shared_per_second,
    };
    let mut on_workers = Vec::with_capacity(workers.len());
    for (index, home) in workers.handles().iter().enumerate() {
        let lanes = async {
            let per_second = match (per_second, &shared.per_second) {
                (Some(o), Some(n)) => Some(open_on(home, o, &n.backend).await?),
                _ => None,
            };
            Ok::<_, StoreError>(Lanes {
                main: open_on(home, main, &shared.main.backend).await?,
                per_second,
            })
        };
        on_workers.push(match lanes.await {
            Ok(lanes) => Some(lanes),
            Err(e) => {
                tracing::warn!(worker = index, error = %e.message, "gRPC worker's own Redis connections failed to open; it uses the shared ones");
                None
            }
        });
    }
    let placement = Arc::new(RedisPlacement::new(
        &shared.main,
        shared.per_second.as_ref(),
    ));
    Ok(RedisStore {
        shared,
        workers: on_workers,
        placement,
        resynced_at: Default::default(),
    })
}

/// One connection to the deployment of `options` (on a cluster, one per
/// primary) and its coalescing lane, both living on the runtime `home`, for
/// the worker that runs it; `like` is the deployment's shared backend,
/// already connected.
async fn open_on(
    home: &Handle,
    options: &RedisOptions,
    like: &Backend,
) -> Result<Node, StoreError> {
    let pool = options.pool_of(1)?;
    let (clustered, name) = (like.clustered, like.name.clone());
    let (script, node_script) = (like.script.clone(), like.node_script.clone());
    let options = like.options.clone();
    let opened = home.spawn(async move {
        // fred's connection task, and the lane's, are spawned here: on
        // `home`.
        if let Err(e) = pool.init().await {
            if pool.is_connected() {
                let _ = pool.quit().await;
            }
            return Err(store_error(&e));
        }
        Ok(Node::new(Backend {
            pool,
            clustered,
            name,
            script,
            node_script,
            discovery: None,
            options,
            connecting: false.into(),
        }))
    });
    opened.await.unwrap_or_else(|_| {
        Err(StoreError::new(
            StoreErrorKind::Unavailable,
            "the gRPC worker stopped",
        ))
    })
}
