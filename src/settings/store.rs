//! Settings of the stores and of what happens when one fails: which backend, Redis (main and
//! per-second, single, sentinel or cluster), memcache, their client TLS, and the store timeout,
//! breaker and failure mode.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use super::parse::{
    parse_bool, parse_duration, parse_int, parse_list, parse_positive_duration, parse_share,
    ParseError,
};
use super::reader::Reader;
use super::vars::*;
use super::Redacted;

/// `BACKEND_TYPE`: `redis` or empty, `memcache`, `memory` (case-sensitive, as the original).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackendType {
    /// `redis` or the empty string.
    #[default]
    Redis,
    /// `memcache`.
    Memcache,
    /// `memory`: this service's embedded store (not in the original).
    Memory,
}

impl FromStr for BackendType {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, ParseError> {
        match s {
            "redis" | "" => Ok(Self::Redis),
            "memcache" => Ok(Self::Memcache),
            "memory" => Ok(Self::Memory),
            _ => Err(ParseError::OneOf {
                expected: "redis, memcache, memory",
            }),
        }
    }
}

/// `REDIS_TYPE` / `REDIS_PERSECOND_TYPE`: `single`, `sentinel` or `cluster`, any case.
///
/// Validated even when the client is unused (another backend, or the per-second client
/// off), where the original would ignore a bad value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RedisType {
    /// One server (or a proxy such as twemproxy).
    #[default]
    Single,
    /// A master found through sentinels.
    Sentinel,
    /// Redis Cluster.
    Cluster,
}

impl FromStr for RedisType {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, ParseError> {
        match s.to_ascii_lowercase().as_str() {
            "single" => Ok(Self::Single),
            "sentinel" => Ok(Self::Sentinel),
            "cluster" => Ok(Self::Cluster),
            _ => Err(ParseError::OneOf {
                expected: "single, sentinel, cluster (any case)",
            }),
        }
    }
}

/// The Redis backend: a main client, an optional per-second client, and what they share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisBackendSettings {
    /// The main client (`REDIS_*`): every key, or every non-SECOND key when
    /// `per_second_enabled`.
    pub main: RedisSettings,
    /// `REDIS_PERSECOND`: send keys of SECOND limits to the `per_second` client.
    pub per_second_enabled: bool,
    /// The per-second client (`REDIS_PERSECOND_*`); parsed and validated even when
    /// `per_second_enabled` is false.
    pub per_second: RedisSettings,
    /// `REDIS_TLS_*`: client TLS files shared by both clients (used by whichever has TLS on).
    pub tls: ClientTlsSettings,
    /// `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`: tie the `redis` health component to live
    /// connections.
    pub health_check_active_connection: bool,
    /// `REDIS_STARTUP_INITIAL_INTERVAL`: first start-up retry delay.
    pub startup_initial_interval: Duration,
    /// `REDIS_STARTUP_MAX_INTERVAL`: largest start-up retry delay.
    pub startup_max_interval: Duration,
    /// `REDIS_STARTUP_MAX_ELAPSED_TIME`: give up start-up after this long; zero means never.
    pub startup_max_elapsed_time: Duration,
}

/// One Redis client. The main and the per-second client are two instances, read from the
/// `REDIS_*` and the `REDIS_PERSECOND_*` variables. `Debug` redacts the credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisSettings {
    /// `REDIS_SOCKET_TYPE`: network for the URL (`unix`, `tcp`, …), as given.
    pub socket_type: String,
    /// `REDIS_TYPE`: topology.
    pub redis_type: RedisType,
    /// `REDIS_URL`: address(es), unparsed; the format depends on `redis_type`.
    pub url: String,
    /// `REDIS_POOL_SIZE`: connections per Redis node.
    pub pool_size: i64,
    /// `REDIS_AUTH`: `password` or `user:password`; empty means no AUTH.
    pub auth: String,
    /// `REDIS_TLS`: TLS to this Redis.
    pub tls: bool,
    /// `REDIS_SENTINEL_AUTH`: auth for sentinel nodes, same format as `auth`.
    pub sentinel_auth: String,
    /// `REDIS_PIPELINE_WINDOW`: write-flush interval (cluster mode only); zero means none.
    pub pipeline_window: Duration,
    /// `REDIS_PIPELINE_LIMIT`: deprecated, no effect.
    pub pipeline_limit: i64,
    /// `REDIS_CLUSTER_PIPELINE_PARALLELISM`: cluster key-group concurrency; 0 means pool
    /// size. A negative value is kept here and refused by the Redis backend, as the original
    /// only refuses it in cluster mode.
    pub cluster_pipeline_parallelism: i64,
    /// `REDIS_TIMEOUT`: dial timeout.
    pub timeout: Duration,
    /// `REDIS_POOL_ON_EMPTY_BEHAVIOR`.
    pub pool_on_empty_behavior: PoolOnEmptyBehavior,
}

impl fmt::Debug for RedisSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSettings")
            .field("socket_type", &self.socket_type)
            .field("redis_type", &self.redis_type)
            .field("url", &self.url)
            .field("pool_size", &self.pool_size)
            .field("auth", &Redacted(&self.auth))
            .field("tls", &self.tls)
            .field("sentinel_auth", &Redacted(&self.sentinel_auth))
            .field("pipeline_window", &self.pipeline_window)
            .field("pipeline_limit", &self.pipeline_limit)
            .field(
                "cluster_pipeline_parallelism",
                &self.cluster_pipeline_parallelism,
            )
            .field("timeout", &self.timeout)
            .field("pool_on_empty_behavior", &self.pool_on_empty_behavior)
            .finish()
    }
}

/// Client TLS files for a backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientTlsSettings {
    /// Client certificate file; empty means no client certificate.
    pub client_cert: String,
    /// Client key file.
    pub client_key: String,
    /// CA file added to the system roots; empty means system roots only.
    pub ca_cert: String,
    /// Verify the chain but not the host name.
    pub skip_hostname_verification: bool,
}

/// The memcache backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemcacheSettings {
    /// `MEMCACHE_HOST_PORT`: servers, `host:port` each.
    pub host_port: Vec<String>,
    /// `MEMCACHE_MAX_IDLE_CONNS`: idle connections kept per server.
    pub max_idle_conns: i64,
    /// `MEMCACHE_SRV`: SRV record naming the servers (exclusive with `host_port`).
    pub srv: String,
    /// `MEMCACHE_SRV_REFRESH`: SRV re-resolution period; zero means never.
    pub srv_refresh: Duration,
    /// `MEMCACHE_TLS`: TLS to memcache.
    pub tls_enabled: bool,
    /// `MEMCACHE_TLS_*`: client TLS files.
    pub tls: ClientTlsSettings,
}

/// `REDIS_POOL_ON_EMPTY_BEHAVIOR`: `CREATE` or `ERROR` in any case; any other value
/// (`WAIT` included) is `Wait`, as in the original. The original refuses to start with
/// `Create` or `Error`; that refusal belongs to the Redis backend, not to parsing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PoolOnEmptyBehavior {
    /// Wait for a free connection.
    #[default]
    Wait,
    /// `CREATE`.
    Create,
    /// `ERROR`.
    Error,
}

impl FromStr for PoolOnEmptyBehavior {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, ParseError> {
        Ok(match s.to_ascii_uppercase().as_str() {
            "CREATE" => Self::Create,
            "ERROR" => Self::Error,
            _ => Self::Wait,
        })
    }
}

/// The variable names of one Redis client.
struct RedisVarNames {
    socket_type: &'static str,
    redis_type: &'static str,
    url: &'static str,
    pool_size: &'static str,
    auth: &'static str,
    tls: &'static str,
    sentinel_auth: &'static str,
    pipeline_window: &'static str,
    pipeline_limit: &'static str,
    cluster_pipeline_parallelism: &'static str,
    timeout: &'static str,
    pool_on_empty_behavior: &'static str,
}

const MAIN_REDIS: RedisVarNames = RedisVarNames {
    socket_type: ENV_REDIS_SOCKET_TYPE,
    redis_type: ENV_REDIS_TYPE,
    url: ENV_REDIS_URL,
    pool_size: ENV_REDIS_POOL_SIZE,
    auth: ENV_REDIS_AUTH,
    tls: ENV_REDIS_TLS,
    sentinel_auth: ENV_REDIS_SENTINEL_AUTH,
    pipeline_window: ENV_REDIS_PIPELINE_WINDOW,
    pipeline_limit: ENV_REDIS_PIPELINE_LIMIT,
    cluster_pipeline_parallelism: ENV_REDIS_CLUSTER_PIPELINE_PARALLELISM,
    timeout: ENV_REDIS_TIMEOUT,
    pool_on_empty_behavior: ENV_REDIS_POOL_ON_EMPTY_BEHAVIOR,
};

const PER_SECOND_REDIS: RedisVarNames = RedisVarNames {
    socket_type: ENV_REDIS_PERSECOND_SOCKET_TYPE,
    redis_type: ENV_REDIS_PERSECOND_TYPE,
    url: ENV_REDIS_PERSECOND_URL,
    pool_size: ENV_REDIS_PERSECOND_POOL_SIZE,
    auth: ENV_REDIS_PERSECOND_AUTH,
    tls: ENV_REDIS_PERSECOND_TLS,
    sentinel_auth: ENV_REDIS_PERSECOND_SENTINEL_AUTH,
    pipeline_window: ENV_REDIS_PERSECOND_PIPELINE_WINDOW,
    pipeline_limit: ENV_REDIS_PERSECOND_PIPELINE_LIMIT,
    cluster_pipeline_parallelism: ENV_REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM,
    timeout: ENV_REDIS_PERSECOND_TIMEOUT,
    pool_on_empty_behavior: ENV_REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR,
};

/// When the store cannot answer (ours): `STORE_TIMEOUT`,
/// `STORE_BREAKER_FAILURES`, `STORE_BREAKER_COOLDOWN`, `STORE_FAILURE_MODE`,
/// `STORE_FALLBACK_SHARE`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StoreFailureSettings {
    /// Hard deadline of a request's store work.
    pub timeout: Duration,
    /// Consecutive failures that open a node's breaker; 0 disables it.
    pub breaker_failures: u32,
    /// How long an open breaker waits before one probe.
    pub breaker_cooldown: Duration,
    /// The mode of a rule that sets no `failure_mode`.
    pub failure_mode: FailureMode,
    /// An open rule's default floor as a share of its limit, in (0, 1].
    pub fallback_share: f64,
}

/// What a rule does when the store cannot answer for it: a rule's
/// `failure_mode:`, and `STORE_FAILURE_MODE` for the rules that set none.
/// Declared here, below the config that re-exports it, so that the setting
/// and the rule key parse into one type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailureMode {
    /// `error`: the call fails, as the original's does (gRPC UNKNOWN).
    #[default]
    Error,
    /// `open`: allowed up to a local floor per instance.
    Open,
    /// `closed`: denied.
    Closed,
}

impl std::str::FromStr for FailureMode {
    type Err = ();

    fn from_str(s: &str) -> Result<FailureMode, ()> {
        match s {
            "error" => Ok(FailureMode::Error),
            "open" => Ok(FailureMode::Open),
            "closed" => Ok(FailureMode::Closed),
            _ => Err(()),
        }
    }
}

impl std::fmt::Display for FailureMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FailureMode::Error => "error",
            FailureMode::Open => "open",
            FailureMode::Closed => "closed",
        })
    }
}

impl RedisBackendSettings {
    pub(super) fn read(r: &mut Reader<'_>) -> RedisBackendSettings {
        RedisBackendSettings {
            main: RedisSettings::read(r, &MAIN_REDIS),
            per_second_enabled: r.get(ENV_REDIS_PERSECOND, parse_bool),
            per_second: RedisSettings::read(r, &PER_SECOND_REDIS),
            tls: ClientTlsSettings {
                client_cert: r.string(ENV_REDIS_TLS_CLIENT_CERT),
                client_key: r.string(ENV_REDIS_TLS_CLIENT_KEY),
                ca_cert: r.string(ENV_REDIS_TLS_CACERT),
                skip_hostname_verification: r
                    .get(ENV_REDIS_TLS_SKIP_HOSTNAME_VERIFICATION, parse_bool),
            },
            health_check_active_connection: r
                .get(ENV_REDIS_HEALTH_CHECK_ACTIVE_CONNECTION, parse_bool),
            startup_initial_interval: r.get(ENV_REDIS_STARTUP_INITIAL_INTERVAL, parse_duration),
            startup_max_interval: r.get(ENV_REDIS_STARTUP_MAX_INTERVAL, parse_duration),
            startup_max_elapsed_time: r.get(ENV_REDIS_STARTUP_MAX_ELAPSED_TIME, parse_duration),
        }
    }
}

impl RedisSettings {
    fn read(r: &mut Reader<'_>, names: &RedisVarNames) -> RedisSettings {
        RedisSettings {
            socket_type: r.string(names.socket_type),
            redis_type: r.get(names.redis_type, str::parse),
            url: r.string(names.url),
            pool_size: r.get(names.pool_size, parse_int),
            auth: r.string(names.auth),
            tls: r.get(names.tls, parse_bool),
            sentinel_auth: r.string(names.sentinel_auth),
            pipeline_window: r.get(names.pipeline_window, parse_duration),
            pipeline_limit: r.get(names.pipeline_limit, parse_int),
            cluster_pipeline_parallelism: r.get(names.cluster_pipeline_parallelism, parse_int),
            timeout: r.get(names.timeout, parse_duration),
            pool_on_empty_behavior: r.get(names.pool_on_empty_behavior, str::parse),
        }
    }
}

impl MemcacheSettings {
    pub(super) fn read(r: &mut Reader<'_>) -> MemcacheSettings {
        MemcacheSettings {
            host_port: r.get(ENV_MEMCACHE_HOST_PORT, |s| Ok(parse_list(s))),
            max_idle_conns: r.get(ENV_MEMCACHE_MAX_IDLE_CONNS, parse_int),
            srv: r.string(ENV_MEMCACHE_SRV),
            srv_refresh: r.get(ENV_MEMCACHE_SRV_REFRESH, parse_duration),
            tls_enabled: r.get(ENV_MEMCACHE_TLS, parse_bool),
            tls: ClientTlsSettings {
                client_cert: r.string(ENV_MEMCACHE_TLS_CLIENT_CERT),
                client_key: r.string(ENV_MEMCACHE_TLS_CLIENT_KEY),
                ca_cert: r.string(ENV_MEMCACHE_TLS_CACERT),
                skip_hostname_verification: r
                    .get(ENV_MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION, parse_bool),
            },
        }
    }
}

impl StoreFailureSettings {
    pub(super) fn read(r: &mut Reader<'_>) -> StoreFailureSettings {
        StoreFailureSettings {
            timeout: r.get(ENV_STORE_TIMEOUT, parse_positive_duration),
            breaker_failures: r.get(ENV_STORE_BREAKER_FAILURES, |s| {
                let n = parse_int(s)?;
                u32::try_from(n).map_err(|_| ParseError::OutOfRange {
                    min: 0,
                    max: i64::from(u32::MAX),
                })
            }),
            breaker_cooldown: r.get(ENV_STORE_BREAKER_COOLDOWN, parse_duration),
            failure_mode: r.get(ENV_STORE_FAILURE_MODE, |s| {
                s.parse().map_err(|()| ParseError::OneOf {
                    expected: "error, open, closed",
                })
            }),
            fallback_share: r.get(ENV_STORE_FALLBACK_SHARE, parse_share),
        }
    }
}
