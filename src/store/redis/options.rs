//! How to reach one Redis deployment: the original's settings parsed
//! ([`RedisAddress`] to [`RedisOptions`]), and the `fred` pools made from
//! them, with their timeouts, TLS and reconnection policy.

use std::time::Duration;

use fred::clients::Pool;
use fred::types::config::{
    Config, ConnectionConfig, PerformanceConfig, ReconnectPolicy, ServerConfig, TlsConfig,
};

use super::error::store_error;
use super::url::{self, Credentials, Deployment, Target, UrlError};
use crate::store::{StoreError, StoreErrorKind};

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

    pub(super) fn pool(&self) -> Result<Pool, StoreError> {
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
