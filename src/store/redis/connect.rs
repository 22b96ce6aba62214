//! Connecting to Redis: settings to `fred` configuration, TLS, and the
//! original's start-up wait: start-up blocks until Redis
//! answers `PING`, retrying with jittered exponential back-off, giving up
//! only after `REDIS_STARTUP_MAX_ELAPSED_TIME` (0 = never).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use fred::clients::Pool;
use fred::interfaces::ClientLike;
use fred::types::config::{
    Config, ConnectionConfig, PerformanceConfig, ReconnectPolicy, ServerConfig, TlsConfig,
};
use fred::types::scripts::Script;

use super::node::{store_error, Backend, Lanes, Node};
use super::url::{self, Credentials, Deployment, Target, UrlError};
use super::{RedisPlacement, RedisStore};
use crate::platform::workers::Workers;
use crate::store::{NodeId, StoreError, StoreErrorKind};
use tokio::runtime::Handle;

/// TLS files for Redis connections.
pub type RedisTls = crate::platform::client_tls::ClientTls;

/// How to reach one Redis deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisOptions {
    /// Where.
    pub target: Target,
    /// Credentials for the data nodes.
    pub credentials: Credentials,
    /// Credentials for sentinel nodes.
    pub sentinel_credentials: Credentials,
    /// Connections (`REDIS_POOL_SIZE`).
    pub pool_size: usize,
    /// Dial and command timeout (`REDIS_TIMEOUT`; the original bounds only
    /// dialing).
    pub timeout: Duration,
    /// TLS, when enabled.
    pub tls: Option<RedisTls>,
    /// The address for logs, credentials masked.
    pub display: String,
}

/// One Redis deployment's address as the original's settings give it
/// (main or per-second), before parsing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisAddress<'a> {
    /// `REDIS_TYPE`.
    pub deployment: Deployment,
    /// `REDIS_SOCKET_TYPE`: `tcp`, `unix`, …
    pub socket_type: &'a str,
    /// `REDIS_URL`: the format depends on the deployment.
    pub url: &'a str,
    /// `REDIS_AUTH`: `password` or `user:password`; empty: none (then a
    /// `redis://` URL's credentials apply).
    pub auth: &'a str,
    /// `REDIS_SENTINEL_AUTH`, in the same format.
    pub sentinel_auth: &'a str,
    /// `REDIS_POOL_SIZE`.
    pub pool_size: i64,
    /// `REDIS_TIMEOUT` (zero: 10 s).
    pub timeout: Duration,
    /// `REDIS_TLS` with its files.
    pub tls: Option<RedisTls>,
}

impl RedisOptions {
    /// Options for the deployment at `a`; `url_setting` names the variable
    /// in errors.
    pub fn parse(
        a: &RedisAddress<'_>,
        url_setting: &'static str,
    ) -> Result<RedisOptions, UrlError> {
        let (target, uri_credentials) =
            url::parse(url_setting, a.deployment, a.socket_type, a.url)?;
        let credentials = if a.auth.is_empty() {
            uri_credentials
        } else {
            url::credentials(a.auth)
        };
        Ok(RedisOptions {
            target,
            credentials,
            sentinel_credentials: url::credentials(a.sentinel_auth),
            pool_size: effective_pool_size(a.pool_size),
            timeout: if a.timeout.is_zero() {
                Duration::from_secs(10)
            } else {
                a.timeout
            },
            tls: a.tls.clone(),
            display: url::mask(a.url),
        })
    }

    fn fred_config(&self) -> Result<Config, StoreError> {
        let server = match &self.target {
            Target::Tcp { host, port, .. } => ServerConfig::new_centralized(host.clone(), *port),
            Target::Unix { path } => ServerConfig::Unix { path: path.into() },
            Target::Cluster { seeds } => ServerConfig::new_clustered(seeds.clone()),
            Target::Sentinel { master, sentinels } => ServerConfig::Sentinel {
                hosts: sentinels
                    .iter()
                    .map(|(h, p)| fred::types::config::Server::new(h.clone(), *p))
                    .collect(),
                service_name: master.clone(),
                username: self.sentinel_credentials.username.clone(),
                password: self.sentinel_credentials.password.clone(),
            },
        };
        Ok(Config {
            server,
            username: self.credentials.username.clone(),
            password: self.credentials.password.clone(),
            database: match &self.target {
                Target::Tcp { db, .. } => *db,
                _ => None,
            },
            fail_fast: true,
            tls: match &self.tls {
                Some(t) => Some(tls_config(t)?),
                None => None,
            },
            ..Config::default()
        })
    }

    fn pool(&self) -> Result<Pool, StoreError> {
        self.pool_of(self.pool_size)
    }

    /// One connection to the Cluster node at `host:port` alone, with the
    /// deployment's credentials, TLS and timeouts.
    pub(super) fn direct_pool(&self, host: &str, port: u16) -> Result<Pool, StoreError> {
        let direct = RedisOptions {
            target: Target::Tcp {
                host: host.to_string(),
                port,
                db: None,
            },
            ..self.clone()
        };
        direct.pool_of(1)
    }

    pub(super) fn pool_of(&self, size: usize) -> Result<Pool, StoreError> {
        let perf = PerformanceConfig {
            default_command_timeout: self.timeout,
            ..PerformanceConfig::default()
        };
        let mut conn = ConnectionConfig {
            connection_timeout: self.timeout,
            // Cluster topology reads and the like: a refresh that asked a
            // hung primary must give up soon and try another node, or a
            // failover is followed only after REDIS_TIMEOUT.
            internal_command_timeout: self.timeout.min(INTERNAL_COMMAND_TIMEOUT),
            ..ConnectionConfig::default()
        };
        conn.tcp.nodelay = Some(true);
        // Reconnect forever, 100 ms to 5 s apart: the store recovers by itself
        // when Redis comes back.
        let policy = ReconnectPolicy::new_exponential(0, 100, 5_000, 2);
        Pool::new(
            self.fred_config()?,
            Some(perf),
            Some(conn),
            Some(policy),
            size,
        )
        .map_err(|e| store_error(&e))
    }
}

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

/// The longest a command of the client's own (topology, `PING`) may wait.
const INTERNAL_COMMAND_TIMEOUT: Duration = Duration::from_secs(1);

/// Connections per node actually opened for `REDIS_POOL_SIZE`. The
/// original's pool serves one command per connection at a time, so it needs
/// many; fred pipelines every caller's commands on each connection, and more
/// connections than cores only split the batches (measured here: 1–2
/// connections serve 15–20 % more decisions per second than 10). The setting
/// is therefore an upper bound, capped at the number of cores.
fn effective_pool_size(configured: i64) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (configured.clamp(1, 1024) as usize).min(cores)
}

fn tls_config(t: &RedisTls) -> Result<TlsConfig, StoreError> {
    let config = t
        .rustls_config()
        .map_err(|e| StoreError::new(StoreErrorKind::Rejected, format!("Redis TLS {e}")))?;
    Ok(TlsConfig::from(fred::types::config::TlsConnector::from(
        config,
    )))
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

/// Connects one deployment, retrying until `PING` answers `PONG`.
async fn connect_one(options: &RedisOptions, retry: StartupRetry) -> Result<Backend, StoreError> {
    let started = Instant::now();
    let mut delay = retry.initial.max(Duration::from_millis(10));
    loop {
        let pool = options.pool()?;
        let attempt = async {
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
                            "timed out waiting for Redis connection to {} after {:?}: {}",
                            options.display, elapsed, e.message
                        ),
                    ));
                }
                tracing::warn!(
                    "Redis {} not ready ({}); retrying in {:?}",
                    options.display,
                    e.message,
                    delay
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
