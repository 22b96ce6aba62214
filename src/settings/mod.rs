//! Settings: the 114 environment variables of the original service, parsed into typed,
//! grouped values.
//!
//! Values are read through a [`Source`] ([`Env`] in production, [`MapSource`] in tests), once,
//! at start-up. An unset variable takes its default from [`vars::VARS`]; a variable set to the
//! empty string is parsed as empty (so `PORT=""` is an error, `CACHE_KEY_PREFIX=""` is not).
//! Every variable is parsed before [`Settings::from_source`] returns, so one start-up error
//! lists every bad variable; like the original, any bad variable aborts start-up, including
//! variables this service does not act on yet ([`vars::Support::Accepted`]).
//!
//! ```
//! use ratelimit::settings::{LogLevel, MapSource, Settings};
//!
//! let src: MapSource = [("LOG_LEVEL", "debug"), ("PORT", "0x1F90")].into_iter().collect();
//! let settings = Settings::from_source(&src).expect("valid");
//! assert_eq!(settings.log.level, LogLevel::Debug);
//! assert_eq!(settings.listener.port, 8080);
//!
//! let bad: MapSource = [("PORT", ""), ("USE_STATSD", "yes")].into_iter().collect();
//! let err = Settings::from_source(&bad).expect_err("invalid");
//! assert_eq!(err.invalid().len(), 2);
//! ```

pub mod parse;
pub mod source;
pub mod vars;

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

pub use parse::ParseError;
pub use source::{Env, MapSource, NotUnicode, Source};
pub use vars::{Kind, Support, VarSpec, EXTENSIONS, VARS};

use parse::{
    parse_bool, parse_duration, parse_f32, parse_f64, parse_int, parse_list, parse_map, parse_port,
    parse_positive_duration,
};
use vars::*;

/// Every setting of the service, typed and grouped by the component that uses it.
///
/// `Settings::default()` equals parsing an empty source: every variable at its default.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Listening addresses, ports and gRPC connection options.
    pub listener: ListenerSettings,
    /// Log level and format.
    pub log: LogSettings,
    /// Where descriptor configuration comes from.
    pub config_provider: ConfigProviderSettings,
    /// Statistics sinks.
    pub stats: StatsSettings,
    /// Counting common to every backend.
    pub limiter: LimiterSettings,
    /// What a response carries, and the global modes that shape it.
    pub response: ResponseSettings,
    /// The Redis backend: main and per-second clients.
    pub redis: RedisBackendSettings,
    /// The memcache backend.
    pub memcache: MemcacheSettings,
    /// OpenTelemetry tracing.
    pub tracing: TracingSettings,
    /// Our graceful-shutdown timings (`SHUTDOWN_*`, not in the original).
    pub shutdown: ShutdownSettings,
    /// `STATSD_PROTOCOL` (`tcp`/`udp`), read by the original's statsd library.
    pub statsd_protocol: String,
    /// What happens when the store cannot answer (`STORE_*`, ours).
    pub store_failure: StoreFailureSettings,
    /// Hot keys (`LEASE_*`, `HOT_KEYS_TOP_K`, ours).
    pub hot_keys: HotKeySettings,
    /// The decision audit (`DECISION_AUDIT_*`, ours).
    pub audit: AuditSettings,
    /// How large a request may be (`REQUEST_MAX_*`, ours).
    pub request: RequestSettings,
    /// RLQS (`RLQS_*`, ours).
    pub quota: QuotaSettings,
    /// `MEMORY_MAX_KEYS` (ours): the most keys the memory store holds.
    pub memory_max_keys: usize,
}

/// RLQS, the rate limit quota service (ours).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QuotaSettings {
    /// `RLQS_ASSIGNMENT_TTL`.
    pub assignment_ttl: Duration,
    /// `RLQS_IDLE_TIMEOUT`.
    pub idle_timeout: Duration,
}

/// How large one request may be (ours).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestSettings {
    /// `REQUEST_MAX_DESCRIPTORS`.
    pub max_descriptors: usize,
    /// `REQUEST_MAX_ENTRIES`: per descriptor.
    pub max_entries: usize,
}

/// The decision audit (ours).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AuditSettings {
    /// `DECISION_AUDIT_SAMPLE`: the share of keys audited (0: off).
    pub sample: f64,
    /// `DECISION_AUDIT_MAX_LIMIT`: the largest window limit audited.
    pub max_limit: u64,
}

/// Hot keys (ours): token leasing and detection.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HotKeySettings {
    /// `LEASE_MIN_RATE`, `LEASE_DURATION`, `LEASE_TTL`, `LEASE_MAX_SHARE`.
    pub lease: LeaseSettings,
    /// `HOT_KEYS_TOP_K` (0: off).
    pub top_k: usize,
}

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
    pub failure_mode: crate::config::FailureMode,
    /// An open rule's default floor as a share of its limit, in (0, 1].
    pub fallback_share: f64,
}

/// Graceful shutdown (ours): `SHUTDOWN_DRAIN_DURATION`, `SHUTDOWN_TIMEOUT`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ShutdownSettings {
    /// After SIGTERM, how long health fails before listeners close.
    pub drain: Duration,
    /// How long in-flight calls may run before connections are cut.
    pub timeout: Duration,
}

/// Listening addresses, ports and gRPC connection options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerSettings {
    /// `HOST`: bind address of the main HTTP port.
    pub host: String,
    /// `PORT`: main HTTP port (`/healthcheck`, `/json`).
    pub port: u16,
    /// `DEBUG_HOST`: bind address of the debug port.
    pub debug_host: String,
    /// `DEBUG_PORT`: debug port.
    pub debug_port: u16,
    /// `GRPC_UDS`: when non-empty, gRPC listens on this unix socket path instead of
    /// `grpc_host:grpc_port`.
    pub grpc_uds: String,
    /// `GRPC_HOST`: gRPC bind address.
    pub grpc_host: String,
    /// `GRPC_PORT`: gRPC port.
    pub grpc_port: u16,
    /// `GRPC_MAX_CONNECTION_AGE`: connection age before GOAWAY (±10 % jitter).
    pub grpc_max_connection_age: Duration,
    /// `GRPC_MAX_CONNECTION_AGE_GRACE`: grace after GOAWAY before a forced close.
    pub grpc_max_connection_age_grace: Duration,
    /// TLS on the gRPC port.
    pub grpc_tls: GrpcTlsSettings,
    /// `GRPC_WORKERS` (ours): how gRPC connections are served.
    pub grpc_workers: GrpcWorkers,
    /// `GRPC_MAX_CONCURRENT_STREAMS` (ours): streams per connection.
    pub grpc_max_concurrent_streams: u32,
    /// `GRPC_MAX_CONNECTIONS` (ours): `None` for `auto`.
    pub grpc_max_connections: Option<usize>,
    /// `GRPC_CONNECTION_TIMEOUT` (ours): how long a new connection may be
    /// silent.
    pub grpc_connection_timeout: Duration,
    /// `HTTP_MAX_CONNECTIONS` (ours): per HTTP and debug port.
    pub http_max_connections: usize,
    /// `HTTP_HEADER_TIMEOUT` (ours): how long a request's head may take.
    pub http_header_timeout: Duration,
}

/// `GRPC_WORKERS`: `auto`, or how many single-threaded runtimes serve the
/// gRPC connections (0: none, the shared multi-threaded runtime does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GrpcWorkers {
    /// One per core with two cores or more, else none (see
    /// `app::grpc_workers`).
    #[default]
    Auto,
    /// That many (0: the shared runtime).
    Count(usize),
}

/// TLS and mTLS on the gRPC port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrpcTlsSettings {
    /// `GRPC_SERVER_USE_TLS`: serve gRPC over TLS. The file fields are only read when set.
    pub enabled: bool,
    /// `GRPC_SERVER_TLS_CERT`: server certificate chain file (PEM).
    pub server_cert: String,
    /// `GRPC_SERVER_TLS_KEY`: server private key file (PEM).
    pub server_key: String,
    /// `GRPC_CLIENT_TLS_CACERT`: CA for client certificates; non-empty means mTLS is required.
    pub client_ca_cert: String,
    /// `GRPC_CLIENT_TLS_SAN`: DNS SAN the client certificate must match; empty means any.
    pub client_san: String,
}

/// Log level and format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogSettings {
    /// `LOG_LEVEL`.
    pub level: LogLevel,
    /// `LOG_FORMAT`.
    pub format: LogFormat,
}

/// Where descriptor configuration comes from and how it is loaded.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigProviderSettings {
    /// `CONFIG_TYPE`: which provider delivers the configuration.
    pub config_type: ConfigType,
    /// `FORCE_START_WITHOUT_INITIAL_CONFIG`: open the listeners without waiting for the
    /// first configuration.
    pub force_start_without_initial_config: bool,
    /// `MERGE_DOMAIN_CONFIG`: allow several files to define one domain.
    pub merge_domain_config: bool,
    /// The FILE provider's runtime directory.
    pub runtime: RuntimeSettings,
    /// The GRPC_XDS_SOTW provider.
    pub xds: XdsSettings,
}

/// The FILE provider's runtime directory: files are read from
/// `root/subdirectory/app_directory`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeSettings {
    /// `RUNTIME_ROOT`: provider root (often a symlink swapped on deploy).
    pub root: String,
    /// `RUNTIME_SUBDIRECTORY`: subdirectory under the root; may be empty.
    pub subdirectory: String,
    /// `RUNTIME_APPDIRECTORY`: directory holding the config files (with `watch_root`, also
    /// the prefix of the runtime keys).
    pub app_directory: String,
    /// `RUNTIME_IGNOREDOTFILES`: skip dot files and dot directories.
    pub ignore_dot_files: bool,
    /// `RUNTIME_WATCH_ROOT`: true reloads on a symlink swap of the root; false watches the
    /// application directory.
    pub watch_root: bool,
}

/// The xDS state-of-the-world configuration client.
#[derive(Clone, PartialEq)]
pub struct XdsSettings {
    /// `CONFIG_GRPC_XDS_NODE_ID`: node id sent to the management server.
    pub node_id: String,
    /// `CONFIG_GRPC_XDS_NODE_METADATA`: node metadata as written (`k=v,k2=v2`), unparsed.
    pub node_metadata: String,
    /// `CONFIG_GRPC_XDS_SERVER_URL`: management server gRPC target.
    pub server_url: String,
    /// `CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL`: stream retry interval.
    pub connect_retry_interval: Duration,
    /// `CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS`: extra gRPC metadata on the stream. Values
    /// may be credentials, so `Debug` shows only the keys.
    pub additional_headers: BTreeMap<String, String>,
    /// `CONFIG_GRPC_XDS_SERVER_USE_TLS`: TLS to the management server.
    pub use_tls: bool,
    /// `CONFIG_GRPC_XDS_CLIENT_TLS_CERT`: client certificate file.
    pub client_tls_cert: String,
    /// `CONFIG_GRPC_XDS_CLIENT_TLS_KEY`: client key file.
    pub client_tls_key: String,
    /// `CONFIG_GRPC_XDS_SERVER_TLS_CACERT`: CA file added to the system roots.
    pub server_tls_ca_cert: String,
    /// `CONFIG_GRPC_XDS_SERVER_TLS_SAN`: expected server name; empty means the URL's host.
    pub server_tls_san: String,
    /// `XDS_CLIENT_BACKOFF_INITIAL_INTERVAL`: reconnect back-off minimum.
    pub backoff_initial_interval: Duration,
    /// `XDS_CLIENT_BACKOFF_MAX_INTERVAL`: reconnect back-off maximum.
    pub backoff_max_interval: Duration,
    /// `XDS_CLIENT_BACKOFF_RANDOM_FACTOR`: the original uses it as the back-off
    /// multiplier, whatever its name says.
    pub backoff_random_factor: f64,
    /// `XDS_CLIENT_BACKOFF_JITTER`: jitter on the back-off.
    pub backoff_jitter: bool,
    /// `XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES`: largest message received; 0 means the gRPC
    /// default (4 MiB).
    pub max_msg_size_in_bytes: i64,
}

/// Statistics sinks. The sink choice is made by the stats layer from
/// the flags; conflicting flags are not an error here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatsSettings {
    /// `USE_DOG_STATSD`: DogStatsD sink.
    pub use_dog_statsd: bool,
    /// `USE_DOG_STATSD_MOGRIFIERS`: mogrifier names.
    pub dog_statsd_mogrifiers: Vec<String>,
    /// `USE_STATSD`: plain statsd sink (on by default).
    pub use_statsd: bool,
    /// `STATSD_HOST`: statsd/DogStatsD host.
    pub statsd_host: String,
    /// `STATSD_PORT`: statsd/DogStatsD port.
    pub statsd_port: u16,
    /// `EXTRA_TAGS`: tags added to every stat.
    pub extra_tags: BTreeMap<String, String>,
    /// `STATS_FLUSH_INTERVAL`: flush period; never zero (zero is rejected, as the original
    /// crashes on it).
    pub flush_interval: Duration,
    /// `DISABLE_STATS`: discard all stats.
    pub disable_stats: bool,
    /// `USE_PROMETHEUS`: Prometheus sink.
    pub use_prometheus: bool,
    /// `PROMETHEUS_ADDR`: Prometheus listen address.
    pub prometheus_addr: String,
    /// `PROMETHEUS_PATH`: Prometheus scrape path.
    pub prometheus_path: String,
    /// `PROMETHEUS_MAPPER_YAML`: statsd_exporter mapping file replacing the default; empty
    /// means the default mapping.
    pub prometheus_mapper_yaml: String,
    /// `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS`: keep response times in milliseconds in the
    /// default mapping.
    pub prometheus_response_time_as_milliseconds: bool,
}

/// Counting common to every backend.
#[derive(Debug, Clone, PartialEq)]
pub struct LimiterSettings {
    /// `BACKEND_TYPE`: where counters live.
    pub backend_type: BackendType,
    /// `CACHE_KEY_PREFIX`: prefix of every backend key; may be empty.
    pub cache_key_prefix: String,
    /// `NEAR_LIMIT_RATIO`: near-limit threshold ratio; 32-bit as in the original, whose
    /// near-limit arithmetic is done in `float32`.
    pub near_limit_ratio: f32,
    /// `LOCAL_CACHE_SIZE_IN_BYTES`: size of the local over-limit cache; 0 turns it off.
    pub local_cache_size_in_bytes: i64,
    /// `EXPIRATION_JITTER_MAX_SECONDS`: exclusive upper bound of the random seconds added to
    /// key expiry.
    pub expiration_jitter_max_seconds: i64,
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`: do not increment keys already over limit.
    pub stop_cache_key_increment_when_overlimit: bool,
    /// `ALL_OR_NOTHING` (ours): the original's fixed windows too are
    /// counted only if every limit of the request passes.
    pub all_or_nothing: bool,
}

/// What a response carries, and the global modes that shape it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseSettings {
    /// Rate-limit response headers.
    pub headers: ResponseHeaderSettings,
    /// `SHADOW_MODE`: never deny (global shadow mode).
    pub shadow_mode: bool,
    /// `QUOTA_MODE`: global quota mode.
    pub quota_mode: bool,
    /// `RESPONSE_DYNAMIC_METADATA`: fill `dynamic_metadata` in responses.
    pub dynamic_metadata: bool,
    /// `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`: add the `config` health component.
    pub healthy_with_at_least_one_config_loaded: bool,
}

/// Rate-limit response headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHeaderSettings {
    /// `LIMIT_RESPONSE_HEADERS_ENABLED`: add the headers.
    pub enabled: bool,
    /// `LIMIT_LIMIT_HEADER`: header name for the limit.
    pub limit: String,
    /// `LIMIT_REMAINING_HEADER`: header name for the remaining count.
    pub remaining: String,
    /// `LIMIT_RESET_HEADER`: header name for the seconds until reset.
    pub reset: String,
    /// `LIMIT_RESPONSE_HEADERS_FORMAT` (ours): which headers.
    pub format: HeaderFormatSetting,
    /// `RETRY_AFTER_JITTER` (ours): the largest random delay added to the
    /// retry time of a refusal.
    pub retry_after_jitter: Duration,
}

/// `LIMIT_RESPONSE_HEADERS_FORMAT`: which rate-limit headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HeaderFormatSetting {
    /// `original`: the original's three headers.
    #[default]
    Original,
    /// `ietf`: `RateLimit-Policy` and `RateLimit` (draft 11).
    Ietf,
    /// `x-ratelimit`: Envoy's `X-RateLimit-*` (draft 03).
    XRateLimit,
}

impl std::str::FromStr for HeaderFormatSetting {
    type Err = ();

    fn from_str(s: &str) -> Result<HeaderFormatSetting, ()> {
        match s {
            "original" => Ok(HeaderFormatSetting::Original),
            "ietf" => Ok(HeaderFormatSetting::Ietf),
            "x-ratelimit" => Ok(HeaderFormatSetting::XRateLimit),
            _ => Err(()),
        }
    }
}

/// Token leasing (ours): `LEASE_MIN_RATE`, `LEASE_DURATION`, `LEASE_TTL`,
/// `LEASE_MAX_SHARE`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LeaseSettings {
    /// `LEASE_MIN_RATE`: decisions per second below which a key is not
    /// leased.
    pub min_rate: u64,
    /// `LEASE_DURATION`: how much of a key's traffic one batch covers.
    pub duration: Duration,
    /// `LEASE_TTL`: the longest a lease lives.
    pub ttl: Duration,
    /// `LEASE_MAX_SHARE`: the largest batch as a share of the capacity.
    pub max_share: f64,
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

/// OpenTelemetry tracing.
#[derive(Debug, Clone, PartialEq)]
pub struct TracingSettings {
    /// `TRACING_ENABLED`.
    pub enabled: bool,
    /// `TRACING_SERVICE_NAME`: `service.name`.
    pub service_name: String,
    /// `TRACING_SERVICE_NAMESPACE`: `service.namespace`.
    pub service_namespace: String,
    /// `TRACING_SERVICE_INSTANCE_ID`: `service.instance.id`; empty means a random UUID.
    pub service_instance_id: String,
    /// `TRACING_EXPORTER_PROTOCOL`.
    pub exporter_protocol: TracingProtocol,
    /// `TRACING_SAMPLING_RATE`: trace-id ratio; ≥ 1 samples all, ≤ 0 none.
    pub sampling_rate: f64,
}

/// `CONFIG_TYPE`: exactly `FILE` or `GRPC_XDS_SOTW` (case-sensitive, as the original).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConfigType {
    /// `FILE`: the runtime directory.
    #[default]
    File,
    /// `GRPC_XDS_SOTW`: an xDS management server.
    GrpcXdsSotw,
}

impl FromStr for ConfigType {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, ParseError> {
        match s {
            "FILE" => Ok(Self::File),
            "GRPC_XDS_SOTW" => Ok(Self::GrpcXdsSotw),
            _ => Err(ParseError::OneOf {
                expected: "FILE, GRPC_XDS_SOTW",
            }),
        }
    }
}

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

/// `LOG_FORMAT`: `json` in any case selects JSON; any other value, text. Never an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// `time="…" level=… msg="…"` lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl FromStr for LogFormat {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, ParseError> {
        Ok(if s.eq_ignore_ascii_case("json") {
            Self::Json
        } else {
            Self::Text
        })
    }
}

/// `LOG_LEVEL`: a logrus level name in any case (`warning` is `warn`).
///
/// Ordered from most to least severe, as logrus numbers them: a message at level `m` is
/// logged when `m <= configured`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum LogLevel {
    /// `panic`.
    Panic,
    /// `fatal`.
    Fatal,
    /// `error`.
    Error,
    /// `warn` or `warning` (the default, `WARN`).
    #[default]
    Warn,
    /// `info`.
    Info,
    /// `debug`.
    Debug,
    /// `trace`.
    Trace,
}

impl FromStr for LogLevel {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, ParseError> {
        match s.to_ascii_lowercase().as_str() {
            "panic" => Ok(Self::Panic),
            "fatal" => Ok(Self::Fatal),
            "error" => Ok(Self::Error),
            "warn" | "warning" => Ok(Self::Warn),
            "info" => Ok(Self::Info),
            "debug" => Ok(Self::Debug),
            "trace" => Ok(Self::Trace),
            _ => Err(ParseError::OneOf {
                expected: "trace, debug, info, warn, warning, error, fatal, panic (any case)",
            }),
        }
    }
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

/// `TRACING_EXPORTER_PROTOCOL`: `http` or empty, or `grpc` (case-sensitive, as the original).
///
/// Validated even when tracing is off, where the original would ignore a bad value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TracingProtocol {
    /// OTLP over HTTP.
    #[default]
    Http,
    /// OTLP over gRPC.
    Grpc,
}

impl FromStr for TracingProtocol {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, ParseError> {
        match s {
            "http" | "" => Ok(Self::Http),
            "grpc" => Ok(Self::Grpc),
            _ => Err(ParseError::OneOf {
                expected: "http, grpc",
            }),
        }
    }
}

/// One variable whose value does not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidVar {
    /// The variable name.
    pub name: &'static str,
    /// The value as set (lossily converted if it was not UTF-8).
    pub value: String,
    /// Why it does not parse.
    pub error: ParseError,
}

impl fmt::Display for InvalidVar {
    /// `NAME=value is not valid: reason`, on one line: control characters in the value are
    /// escaped.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}=", self.name)?;
        for c in self.value.chars() {
            if c.is_control() {
                write!(f, "{}", c.escape_default())?;
            } else {
                write!(f, "{c}")?;
            }
        }
        write!(f, " is not valid: {}", self.error)
    }
}

/// The settings could not be parsed. Holds every bad variable, never none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingsError {
    invalid: Vec<InvalidVar>,
}

impl SettingsError {
    /// The bad variables, in reading order; never empty.
    pub fn invalid(&self) -> &[InvalidVar] {
        &self.invalid
    }
}

impl fmt::Display for SettingsError {
    /// One `NAME=value is not valid: reason` line per bad variable.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, var) in self.invalid.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{var}")?;
        }
        Ok(())
    }
}

impl std::error::Error for SettingsError {}

impl Settings {
    /// Parses every variable from `src`, returning all bad ones together on failure.
    pub fn from_source(src: &dyn Source) -> Result<Self, SettingsError> {
        let (settings, invalid) = Self::read(src);
        if invalid.is_empty() {
            Ok(settings)
        } else {
            Err(SettingsError { invalid })
        }
    }

    /// [`Settings::from_source`] on the process environment.
    pub fn from_env() -> Result<Self, SettingsError> {
        Self::from_source(&Env)
    }

    /// The variables set in `src` (to any value, the empty string included) that this
    /// service parses but does not act on yet, in [`VARS`] order. The caller names them in
    /// one start-up warning.
    pub fn accepted_but_inactive(&self, src: &dyn Source) -> Vec<&'static str> {
        VARS.iter()
            .filter(|v| v.support == Support::Accepted && src.get(v.name).is_some())
            .map(|v| v.name)
            .collect()
    }

    /// Reads every variable. A bad one is recorded and its field left at `T::default()`;
    /// the `Settings` is then meaningless and only the list is used.
    fn read(src: &dyn Source) -> (Self, Vec<InvalidVar>) {
        let mut r = Reader {
            src,
            invalid: Vec::new(),
        };
        let settings = Settings {
            listener: ListenerSettings {
                host: r.string(ENV_HOST),
                port: r.get(ENV_PORT, parse_port),
                debug_host: r.string(ENV_DEBUG_HOST),
                debug_port: r.get(ENV_DEBUG_PORT, parse_port),
                grpc_uds: r.string(ENV_GRPC_UDS),
                grpc_host: r.string(ENV_GRPC_HOST),
                grpc_port: r.get(ENV_GRPC_PORT, parse_port),
                grpc_max_connection_age: r.get(ENV_GRPC_MAX_CONNECTION_AGE, parse_duration),
                grpc_max_connection_age_grace: r
                    .get(ENV_GRPC_MAX_CONNECTION_AGE_GRACE, parse_duration),
                grpc_workers: r.get(ENV_GRPC_WORKERS, |s| match s {
                    "auto" => Ok(GrpcWorkers::Auto),
                    n => parse_count(n)
                        .map(|n| GrpcWorkers::Count(usize::try_from(n).unwrap_or(1024).min(1024))),
                }),
                grpc_max_connections: r.get(ENV_GRPC_MAX_CONNECTIONS, |s| match s {
                    "auto" => Ok(None),
                    n => parse_positive_size(n).map(Some),
                }),
                grpc_connection_timeout: r
                    .get(ENV_GRPC_CONNECTION_TIMEOUT, parse_positive_duration),
                http_max_connections: r.get(ENV_HTTP_MAX_CONNECTIONS, parse_positive_size),
                http_header_timeout: r.get(ENV_HTTP_HEADER_TIMEOUT, parse_positive_duration),
                grpc_max_concurrent_streams: r.get(ENV_GRPC_MAX_CONCURRENT_STREAMS, |s| {
                    parse_positive_size(s).map(|n| u32::try_from(n).unwrap_or(u32::MAX))
                }),
                grpc_tls: GrpcTlsSettings {
                    enabled: r.get(ENV_GRPC_SERVER_USE_TLS, parse_bool),
                    server_cert: r.string(ENV_GRPC_SERVER_TLS_CERT),
                    server_key: r.string(ENV_GRPC_SERVER_TLS_KEY),
                    client_ca_cert: r.string(ENV_GRPC_CLIENT_TLS_CACERT),
                    client_san: r.string(ENV_GRPC_CLIENT_TLS_SAN),
                },
            },
            log: LogSettings {
                level: r.get(ENV_LOG_LEVEL, str::parse),
                format: r.get(ENV_LOG_FORMAT, str::parse),
            },
            config_provider: ConfigProviderSettings {
                config_type: r.get(ENV_CONFIG_TYPE, str::parse),
                force_start_without_initial_config: r
                    .get(ENV_FORCE_START_WITHOUT_INITIAL_CONFIG, parse_bool),
                merge_domain_config: r.get(ENV_MERGE_DOMAIN_CONFIG, parse_bool),
                runtime: RuntimeSettings {
                    root: r.string(ENV_RUNTIME_ROOT),
                    subdirectory: r.string(ENV_RUNTIME_SUBDIRECTORY),
                    app_directory: r.string(ENV_RUNTIME_APPDIRECTORY),
                    ignore_dot_files: r.get(ENV_RUNTIME_IGNOREDOTFILES, parse_bool),
                    watch_root: r.get(ENV_RUNTIME_WATCH_ROOT, parse_bool),
                },
                xds: XdsSettings {
                    node_id: r.string(ENV_CONFIG_GRPC_XDS_NODE_ID),
                    node_metadata: r.string(ENV_CONFIG_GRPC_XDS_NODE_METADATA),
                    server_url: r.string(ENV_CONFIG_GRPC_XDS_SERVER_URL),
                    connect_retry_interval: r.get(
                        ENV_CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL,
                        parse_duration,
                    ),
                    additional_headers: r
                        .get(ENV_CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS, parse_map),
                    use_tls: r.get(ENV_CONFIG_GRPC_XDS_SERVER_USE_TLS, parse_bool),
                    client_tls_cert: r.string(ENV_CONFIG_GRPC_XDS_CLIENT_TLS_CERT),
                    client_tls_key: r.string(ENV_CONFIG_GRPC_XDS_CLIENT_TLS_KEY),
                    server_tls_ca_cert: r.string(ENV_CONFIG_GRPC_XDS_SERVER_TLS_CACERT),
                    server_tls_san: r.string(ENV_CONFIG_GRPC_XDS_SERVER_TLS_SAN),
                    backoff_initial_interval: r
                        .get(ENV_XDS_CLIENT_BACKOFF_INITIAL_INTERVAL, parse_duration),
                    backoff_max_interval: r
                        .get(ENV_XDS_CLIENT_BACKOFF_MAX_INTERVAL, parse_duration),
                    backoff_random_factor: r.get(ENV_XDS_CLIENT_BACKOFF_RANDOM_FACTOR, parse_f64),
                    backoff_jitter: r.get(ENV_XDS_CLIENT_BACKOFF_JITTER, parse_bool),
                    max_msg_size_in_bytes: r.get(ENV_XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES, parse_int),
                },
            },
            stats: StatsSettings {
                use_dog_statsd: r.get(ENV_USE_DOG_STATSD, parse_bool),
                dog_statsd_mogrifiers: r.get(ENV_USE_DOG_STATSD_MOGRIFIERS, |s| Ok(parse_list(s))),
                use_statsd: r.get(ENV_USE_STATSD, parse_bool),
                statsd_host: r.string(ENV_STATSD_HOST),
                statsd_port: r.get(ENV_STATSD_PORT, parse_port),
                extra_tags: r.get(ENV_EXTRA_TAGS, parse_map),
                flush_interval: r.get(ENV_STATS_FLUSH_INTERVAL, parse_positive_duration),
                disable_stats: r.get(ENV_DISABLE_STATS, parse_bool),
                use_prometheus: r.get(ENV_USE_PROMETHEUS, parse_bool),
                prometheus_addr: r.string(ENV_PROMETHEUS_ADDR),
                prometheus_path: r.string(ENV_PROMETHEUS_PATH),
                prometheus_mapper_yaml: r.string(ENV_PROMETHEUS_MAPPER_YAML),
                prometheus_response_time_as_milliseconds: r
                    .get(ENV_PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS, parse_bool),
            },
            limiter: LimiterSettings {
                backend_type: r.get(ENV_BACKEND_TYPE, str::parse),
                cache_key_prefix: r.string(ENV_CACHE_KEY_PREFIX),
                near_limit_ratio: r.get(ENV_NEAR_LIMIT_RATIO, parse_f32),
                local_cache_size_in_bytes: r.get(ENV_LOCAL_CACHE_SIZE_IN_BYTES, parse_int),
                expiration_jitter_max_seconds: r.get(ENV_EXPIRATION_JITTER_MAX_SECONDS, parse_int),
                stop_cache_key_increment_when_overlimit: r
                    .get(ENV_STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, parse_bool),
                all_or_nothing: r.get(ENV_ALL_OR_NOTHING, parse_bool),
            },
            response: ResponseSettings {
                headers: ResponseHeaderSettings {
                    enabled: r.get(ENV_LIMIT_RESPONSE_HEADERS_ENABLED, parse_bool),
                    limit: r.string(ENV_LIMIT_LIMIT_HEADER),
                    remaining: r.string(ENV_LIMIT_REMAINING_HEADER),
                    reset: r.string(ENV_LIMIT_RESET_HEADER),
                    format: r.get(ENV_LIMIT_RESPONSE_HEADERS_FORMAT, |s| {
                        s.parse().map_err(|()| ParseError::OneOf {
                            expected: "original, ietf, x-ratelimit",
                        })
                    }),
                    retry_after_jitter: r.get(ENV_RETRY_AFTER_JITTER, parse_duration),
                },
                shadow_mode: r.get(ENV_SHADOW_MODE, parse_bool),
                quota_mode: r.get(ENV_QUOTA_MODE, parse_bool),
                dynamic_metadata: r.get(ENV_RESPONSE_DYNAMIC_METADATA, parse_bool),
                healthy_with_at_least_one_config_loaded: r
                    .get(ENV_HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED, parse_bool),
            },
            redis: RedisBackendSettings {
                main: r.redis(&MAIN_REDIS),
                per_second_enabled: r.get(ENV_REDIS_PERSECOND, parse_bool),
                per_second: r.redis(&PER_SECOND_REDIS),
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
            },
            memcache: MemcacheSettings {
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
            },
            tracing: TracingSettings {
                enabled: r.get(ENV_TRACING_ENABLED, parse_bool),
                service_name: r.string(ENV_TRACING_SERVICE_NAME),
                service_namespace: r.string(ENV_TRACING_SERVICE_NAMESPACE),
                service_instance_id: r.string(ENV_TRACING_SERVICE_INSTANCE_ID),
                exporter_protocol: r.get(ENV_TRACING_EXPORTER_PROTOCOL, str::parse),
                sampling_rate: r.get(ENV_TRACING_SAMPLING_RATE, parse_f64),
            },
            statsd_protocol: r.string(ENV_STATSD_PROTOCOL),
            shutdown: ShutdownSettings {
                drain: r.get(ENV_SHUTDOWN_DRAIN_DURATION, parse_duration),
                timeout: r.get(ENV_SHUTDOWN_TIMEOUT, parse_duration),
            },
            store_failure: StoreFailureSettings {
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
            },
            hot_keys: HotKeySettings {
                lease: LeaseSettings {
                    min_rate: r.get(ENV_LEASE_MIN_RATE, parse_count),
                    duration: r.get(ENV_LEASE_DURATION, parse_positive_duration),
                    ttl: r.get(ENV_LEASE_TTL, parse_positive_duration),
                    max_share: r.get(ENV_LEASE_MAX_SHARE, parse_share),
                },
                top_k: r.get(ENV_HOT_KEYS_TOP_K, |s| {
                    parse_count(s).map(|n| usize::try_from(n).unwrap_or(usize::MAX))
                }),
            },
            memory_max_keys: r.get(ENV_MEMORY_MAX_KEYS, |s| {
                parse_count(s).map(|n| usize::try_from(n).unwrap_or(usize::MAX).max(1))
            }),
            quota: QuotaSettings {
                assignment_ttl: r.get(ENV_RLQS_ASSIGNMENT_TTL, parse_positive_duration),
                idle_timeout: r.get(ENV_RLQS_IDLE_TIMEOUT, parse_positive_duration),
            },
            audit: AuditSettings {
                sample: r.get(ENV_DECISION_AUDIT_SAMPLE, |s| {
                    let share = parse_f64(s)?;
                    if (0.0..=1.0).contains(&share) {
                        Ok(share)
                    } else {
                        Err(ParseError::ShareOutOfUnitRange)
                    }
                }),
                max_limit: r.get(ENV_DECISION_AUDIT_MAX_LIMIT, parse_count),
            },
            request: RequestSettings {
                max_descriptors: r.get(ENV_REQUEST_MAX_DESCRIPTORS, parse_positive_size),
                max_entries: r.get(ENV_REQUEST_MAX_ENTRIES, parse_positive_size),
            },
        };
        (settings, r.invalid)
    }
}

/// A share in (0, 1].
fn parse_share(s: &str) -> Result<f64, ParseError> {
    let share = parse_f64(s)?;
    if share > 0.0 && share <= 1.0 {
        Ok(share)
    } else {
        Err(ParseError::ShareOutOfRange)
    }
}

/// A count ≥ 0.
/// A count of at least 1.
fn parse_positive_size(s: &str) -> Result<usize, ParseError> {
    match parse_int(s)? {
        n @ 1.. => Ok(usize::try_from(n).unwrap_or(usize::MAX)),
        _ => Err(ParseError::OutOfRange {
            min: 1,
            max: i64::MAX,
        }),
    }
}

fn parse_count(s: &str) -> Result<u64, ParseError> {
    let n = parse_int(s)?;
    u64::try_from(n).map_err(|_| ParseError::OutOfRange {
        min: 0,
        max: i64::MAX,
    })
}

impl Default for Settings {
    /// Every variable at its default. The defaults in [`VARS`] all parse (unit-tested).
    fn default() -> Self {
        let (settings, invalid) = Self::read(&MapSource::new());
        debug_assert!(invalid.is_empty(), "a default does not parse: {invalid:?}");
        settings
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

/// Reads variables from a source, collecting every failure instead of stopping at the first.
struct Reader<'a> {
    src: &'a dyn Source,
    invalid: Vec<InvalidVar>,
}

impl Reader<'_> {
    /// The parsed value of `name`, its default text when unset. On failure the failure is
    /// recorded and `T::default()` stands in.
    fn get<T: Default>(
        &mut self,
        name: &'static str,
        parse: impl FnOnce(&str) -> Result<T, ParseError>,
    ) -> T {
        let value = match self.src.get_utf8(name) {
            Ok(value) => value,
            Err(NotUnicode { lossy }) => {
                self.invalid.push(InvalidVar {
                    name,
                    value: lossy,
                    error: ParseError::NotUnicode,
                });
                return T::default();
            }
        };
        // Every name read here is in VARS (unit-tested), so the fallback is never used.
        let text = value
            .as_deref()
            .unwrap_or_else(|| vars::spec(name).map_or("", |v| v.default));
        match parse(text) {
            Ok(parsed) => parsed,
            Err(error) => {
                self.invalid.push(InvalidVar {
                    name,
                    value: text.to_owned(),
                    error,
                });
                T::default()
            }
        }
    }

    fn string(&mut self, name: &'static str) -> String {
        self.get(name, |s| Ok(s.to_owned()))
    }

    fn redis(&mut self, names: &RedisVarNames) -> RedisSettings {
        RedisSettings {
            socket_type: self.string(names.socket_type),
            redis_type: self.get(names.redis_type, str::parse),
            url: self.string(names.url),
            pool_size: self.get(names.pool_size, parse_int),
            auth: self.string(names.auth),
            tls: self.get(names.tls, parse_bool),
            sentinel_auth: self.string(names.sentinel_auth),
            pipeline_window: self.get(names.pipeline_window, parse_duration),
            pipeline_limit: self.get(names.pipeline_limit, parse_int),
            cluster_pipeline_parallelism: self.get(names.cluster_pipeline_parallelism, parse_int),
            timeout: self.get(names.timeout, parse_duration),
            pool_on_empty_behavior: self.get(names.pool_on_empty_behavior, str::parse),
        }
    }
}

/// Shows whether a secret is set without showing it.
struct Redacted<'a>(&'a str);

impl fmt::Debug for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_empty() {
            "\"\""
        } else {
            "<redacted>"
        })
    }
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

impl fmt::Debug for XdsSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: BTreeMap<&str, Redacted<'_>> = self
            .additional_headers
            .iter()
            .map(|(k, v)| (k.as_str(), Redacted(v)))
            .collect();
        f.debug_struct("XdsSettings")
            .field("node_id", &self.node_id)
            .field("node_metadata", &self.node_metadata)
            .field("server_url", &self.server_url)
            .field("connect_retry_interval", &self.connect_retry_interval)
            .field("additional_headers", &headers)
            .field("use_tls", &self.use_tls)
            .field("client_tls_cert", &self.client_tls_cert)
            .field("client_tls_key", &self.client_tls_key)
            .field("server_tls_ca_cert", &self.server_tls_ca_cert)
            .field("server_tls_san", &self.server_tls_san)
            .field("backoff_initial_interval", &self.backoff_initial_interval)
            .field("backoff_max_interval", &self.backoff_max_interval)
            .field("backoff_random_factor", &self.backoff_random_factor)
            .field("backoff_jitter", &self.backoff_jitter)
            .field("max_msg_size_in_bytes", &self.max_msg_size_in_bytes)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::BTreeSet;

    fn src(pairs: &[(&str, &str)]) -> MapSource {
        pairs.iter().copied().collect()
    }

    fn parse(pairs: &[(&str, &str)]) -> Result<Settings, SettingsError> {
        Settings::from_source(&src(pairs))
    }

    fn errors(pairs: &[(&str, &str)]) -> Vec<(&'static str, ParseError)> {
        parse(pairs)
            .expect_err("should be invalid")
            .invalid()
            .iter()
            .map(|v| (v.name, v.error.clone()))
            .collect()
    }

    #[test]
    fn grpc_workers_are_auto_by_default_or_a_count() {
        assert_eq!(Settings::default().listener.grpc_workers, GrpcWorkers::Auto);
        for (value, want) in [
            ("auto", GrpcWorkers::Auto),
            ("0", GrpcWorkers::Count(0)),
            ("3", GrpcWorkers::Count(3)),
            ("100000", GrpcWorkers::Count(1024)),
        ] {
            let s = parse(&[("GRPC_WORKERS", value)]).expect("valid");
            assert_eq!(s.listener.grpc_workers, want, "{value}");
        }
        assert_eq!(errors(&[("GRPC_WORKERS", "many")]).len(), 1);
    }

    #[test]
    fn the_decision_audit_is_off_by_default_and_takes_a_share_from_0_to_1() {
        let s = Settings::default().audit;
        assert_eq!(
            s,
            AuditSettings {
                sample: 0.0,
                max_limit: 10_000
            }
        );
        let on = parse(&[
            ("DECISION_AUDIT_SAMPLE", "0.01"),
            ("DECISION_AUDIT_MAX_LIMIT", "500"),
        ])
        .expect("valid");
        assert_eq!((on.audit.sample, on.audit.max_limit), (0.01, 500));
        assert_eq!(
            parse(&[("DECISION_AUDIT_SAMPLE", "1")])
                .expect("valid")
                .audit
                .sample,
            1.0
        );
        assert_eq!(
            errors(&[("DECISION_AUDIT_SAMPLE", "1.5")]),
            vec![("DECISION_AUDIT_SAMPLE", ParseError::ShareOutOfUnitRange)]
        );
        assert_eq!(
            errors(&[("DECISION_AUDIT_MAX_LIMIT", "-1")]),
            vec![(
                "DECISION_AUDIT_MAX_LIMIT",
                ParseError::OutOfRange {
                    min: 0,
                    max: i64::MAX
                }
            )]
        );
    }

    #[test]
    fn store_failure_settings_default_and_refuse_bad_values() {
        let s = Settings::default().store_failure;
        assert_eq!(
            s,
            StoreFailureSettings {
                timeout: Duration::from_millis(50),
                breaker_failures: 5,
                breaker_cooldown: Duration::from_secs(1),
                failure_mode: crate::config::FailureMode::Error,
                fallback_share: 0.1,
            }
        );
        let s = parse(&[
            ("STORE_TIMEOUT", "5ms"),
            ("STORE_BREAKER_FAILURES", "0"),
            ("STORE_FAILURE_MODE", "open"),
            ("STORE_FALLBACK_SHARE", "0.25"),
        ])
        .expect("valid")
        .store_failure;
        assert_eq!(s.timeout, Duration::from_millis(5));
        assert_eq!(s.breaker_failures, 0, "0 disables the breaker");
        assert_eq!(s.failure_mode, crate::config::FailureMode::Open);
        assert_eq!(s.fallback_share, 0.25);
        assert_eq!(
            errors(&[
                ("STORE_TIMEOUT", "0s"),
                ("STORE_BREAKER_FAILURES", "-1"),
                ("STORE_FAILURE_MODE", "fail_open"),
                ("STORE_FALLBACK_SHARE", "1.5"),
            ]),
            vec![
                ("STORE_TIMEOUT", ParseError::NotPositive),
                (
                    "STORE_BREAKER_FAILURES",
                    ParseError::OutOfRange {
                        min: 0,
                        max: i64::from(u32::MAX)
                    }
                ),
                (
                    "STORE_FAILURE_MODE",
                    ParseError::OneOf {
                        expected: "error, open, closed"
                    }
                ),
                ("STORE_FALLBACK_SHARE", ParseError::ShareOutOfRange),
            ]
        );
    }

    #[test]
    fn default_is_the_empty_source_and_matches_the_spec() {
        let s = Settings::from_source(&MapSource::new()).expect("defaults parse");
        assert_eq!(s, Settings::default());

        assert_eq!(s.listener.host, "0.0.0.0");
        assert_eq!(s.listener.port, 8080);
        assert_eq!(s.listener.debug_port, 6070);
        assert_eq!(s.listener.grpc_port, 8081);
        assert_eq!(s.listener.grpc_uds, "");
        assert_eq!(
            s.listener.grpc_max_connection_age,
            Duration::from_secs(86_400)
        );
        assert_eq!(
            s.listener.grpc_max_connection_age_grace,
            Duration::from_secs(3600)
        );
        assert!(!s.listener.grpc_tls.enabled);
        assert_eq!(s.log.level, LogLevel::Warn);
        assert_eq!(s.log.format, LogFormat::Text);
        let cp = &s.config_provider;
        assert_eq!(cp.config_type, ConfigType::File);
        assert_eq!(cp.runtime.root, "/srv/runtime_data/current");
        assert_eq!(cp.runtime.subdirectory, "");
        assert_eq!(cp.runtime.app_directory, "config");
        assert!(!cp.runtime.ignore_dot_files);
        assert!(cp.runtime.watch_root);
        assert!(!cp.merge_domain_config);
        assert_eq!(cp.xds.node_id, "default");
        assert_eq!(cp.xds.server_url, "localhost:18000");
        assert_eq!(cp.xds.connect_retry_interval, Duration::from_secs(3));
        assert!(cp.xds.additional_headers.is_empty());
        assert_eq!(cp.xds.backoff_random_factor, 0.5);
        assert!(cp.xds.backoff_jitter);
        assert_eq!(cp.xds.max_msg_size_in_bytes, 0);
        assert!(s.stats.use_statsd);
        assert!(s.stats.dog_statsd_mogrifiers.is_empty());
        assert_eq!(s.stats.statsd_port, 8125);
        assert_eq!(s.stats.flush_interval, Duration::from_secs(10));
        assert_eq!(s.stats.prometheus_addr, ":9090");
        assert_eq!(s.stats.prometheus_path, "/metrics");
        assert_eq!(s.limiter.backend_type, BackendType::Redis);
        assert_eq!(s.limiter.near_limit_ratio, 0.8f32);
        assert_eq!(s.limiter.expiration_jitter_max_seconds, 300);
        assert_eq!(s.limiter.local_cache_size_in_bytes, 0);
        assert_eq!(s.response.headers.limit, "RateLimit-Limit");
        assert_eq!(s.response.headers.remaining, "RateLimit-Remaining");
        assert_eq!(s.response.headers.reset, "RateLimit-Reset");
        assert_eq!(s.redis.main.url, "/var/run/nutcracker/ratelimit.sock");
        assert_eq!(s.redis.main.socket_type, "unix");
        assert_eq!(s.redis.main.redis_type, RedisType::Single);
        assert_eq!(s.redis.main.pool_size, 10);
        assert_eq!(s.redis.main.cluster_pipeline_parallelism, 1);
        assert_eq!(s.redis.main.timeout, Duration::from_secs(10));
        assert_eq!(
            s.redis.main.pool_on_empty_behavior,
            PoolOnEmptyBehavior::Wait
        );
        assert_eq!(
            s.redis.per_second.url,
            "/var/run/nutcracker/ratelimitpersecond.sock"
        );
        assert!(!s.redis.per_second_enabled);
        assert_eq!(s.redis.startup_initial_interval, Duration::from_secs(1));
        assert_eq!(s.redis.startup_max_interval, Duration::from_secs(30));
        assert_eq!(s.redis.startup_max_elapsed_time, Duration::ZERO);
        assert_eq!(s.memcache.max_idle_conns, 2);
        assert!(s.memcache.host_port.is_empty());
        assert_eq!(s.tracing.service_name, "RateLimit");
        assert_eq!(s.tracing.exporter_protocol, TracingProtocol::Http);
        assert_eq!(s.tracing.sampling_rate, 1.0);
    }

    /// A source that records every name asked for.
    #[derive(Default)]
    struct Recording {
        asked: RefCell<BTreeSet<String>>,
    }

    impl Source for Recording {
        fn get(&self, name: &str) -> Option<String> {
            self.asked.borrow_mut().insert(name.to_owned());
            None
        }
    }

    #[test]
    fn from_source_reads_exactly_the_table() {
        let rec = Recording::default();
        Settings::from_source(&rec).expect("defaults parse");
        let table: BTreeSet<String> = VARS
            .iter()
            .chain(vars::EXTENSIONS)
            .map(|v| v.name.to_owned())
            .collect();
        assert_eq!(*rec.asked.borrow(), table);
    }

    #[test]
    fn empty_is_set_not_unset() {
        assert_eq!(errors(&[("PORT", "")]), [("PORT", ParseError::Empty)]);
        let s = parse(&[("CACHE_KEY_PREFIX", "")]).expect("empty string is a valid prefix");
        assert_eq!(s.limiter.cache_key_prefix, "");
        let s = parse(&[("RUNTIME_ROOT", "")]).expect("strings take the empty value");
        assert_eq!(s.config_provider.runtime.root, "");
        for name in [
            "USE_STATSD",
            "REDIS_TIMEOUT",
            "NEAR_LIMIT_RATIO",
            "REDIS_POOL_SIZE",
        ] {
            assert_eq!(errors(&[(name, "")]), [(name, ParseError::Empty)]);
        }
        let s = parse(&[("EXTRA_TAGS", ""), ("MEMCACHE_HOST_PORT", "")]).expect("empty");
        assert!(s.stats.extra_tags.is_empty() && s.memcache.host_port.is_empty());
    }

    #[test]
    fn values_are_parsed_into_their_fields() {
        let s = parse(&[
            ("PORT", "0x1F90"),
            ("GRPC_PORT", "017"),
            ("GRPC_MAX_CONNECTION_AGE", "1h30m"),
            ("USE_STATSD", "F"),
            ("EXTRA_TAGS", "env:prod,az:a:b"),
            ("USE_DOG_STATSD_MOGRIFIERS", "a,b"),
            ("NEAR_LIMIT_RATIO", "0.9"),
            ("EXPIRATION_JITTER_MAX_SECONDS", "-5"),
            ("REDIS_PERSECOND", "1"),
            ("REDIS_PERSECOND_URL", "localhost:6380"),
            ("REDIS_PERSECOND_TIMEOUT", "150\u{b5}s"),
            ("REDIS_PERSECOND_TYPE", "Cluster"),
        ])
        .expect("valid");
        assert_eq!(s.listener.port, 8080);
        assert_eq!(s.listener.grpc_port, 15);
        assert_eq!(
            s.listener.grpc_max_connection_age,
            Duration::from_secs(5400)
        );
        assert!(!s.stats.use_statsd);
        assert_eq!(
            s.stats.extra_tags.get("az").map(String::as_str),
            Some("a:b")
        );
        assert_eq!(s.stats.dog_statsd_mogrifiers, ["a", "b"]);
        assert_eq!(s.limiter.near_limit_ratio, 0.9f32);
        assert_eq!(s.limiter.expiration_jitter_max_seconds, -5);
        assert!(s.redis.per_second_enabled);
        assert_eq!(s.redis.per_second.url, "localhost:6380");
        assert_eq!(s.redis.per_second.timeout, Duration::from_micros(150));
        assert_eq!(s.redis.per_second.redis_type, RedisType::Cluster);
        // The main client is untouched by the per-second variables.
        assert_eq!(s.redis.main.url, "/var/run/nutcracker/ratelimit.sock");
        assert_eq!(s.redis.main.redis_type, RedisType::Single);
    }

    #[test]
    fn ports_out_of_range_are_rejected() {
        let range = ParseError::OutOfRange { min: 0, max: 65535 };
        assert_eq!(errors(&[("PORT", "70000")]), [("PORT", range.clone())]);
        assert_eq!(errors(&[("STATSD_PORT", "-1")]), [("STATSD_PORT", range)]);
    }

    #[test]
    fn zero_stats_flush_interval_is_rejected() {
        assert_eq!(
            errors(&[("STATS_FLUSH_INTERVAL", "0")]),
            [("STATS_FLUSH_INTERVAL", ParseError::NotPositive)]
        );
    }

    #[test]
    fn every_bad_variable_is_reported_at_once() {
        let err = parse(&[
            ("PORT", "http"),
            ("USE_STATSD", "yes"),
            ("REDIS_TIMEOUT", "10"),
            ("HOST", "fine"),
            ("CONFIG_TYPE", "file"),
        ])
        .expect_err("invalid");
        assert_eq!(
            err.to_string(),
            "PORT=http is not valid: expected an integer such as 42, -7, 0x1F, 0o17, 017 or 0b101\n\
             CONFIG_TYPE=file is not valid: expected one of FILE, GRPC_XDS_SOTW\n\
             USE_STATSD=yes is not valid: expected a boolean: 1, t, T, TRUE, true, True, 0, f, F, FALSE, false or False\n\
             REDIS_TIMEOUT=10 is not valid: missing unit in duration (units: ns, us, µs, ms, s, m, h; only 0 may omit it)"
        );
        assert_eq!(err.invalid().len(), 4);
    }

    #[test]
    fn error_lines_escape_control_characters() {
        let err = parse(&[("PORT", "80\n80")]).expect_err("invalid");
        assert_eq!(
            err.to_string(),
            "PORT=80\\n80 is not valid: expected an integer such as 42, -7, 0x1F, 0o17, 017 or 0b101"
        );
    }

    /// A source holding one value that is not UTF-8.
    struct NonUtf8;

    impl Source for NonUtf8 {
        fn get(&self, _: &str) -> Option<String> {
            None
        }

        fn get_utf8(&self, name: &str) -> Result<Option<String>, NotUnicode> {
            if name == ENV_REDIS_URL {
                Err(NotUnicode {
                    lossy: "redis\u{fffd}".to_owned(),
                })
            } else {
                Ok(None)
            }
        }
    }

    #[test]
    fn non_utf8_value_is_an_invalid_value() {
        let err = Settings::from_source(&NonUtf8).expect_err("invalid");
        assert_eq!(
            err.to_string(),
            "REDIS_URL=redis\u{fffd} is not valid: not valid UTF-8"
        );
    }

    #[test]
    fn config_type_is_exact() {
        assert_eq!("FILE".parse(), Ok(ConfigType::File));
        assert_eq!("GRPC_XDS_SOTW".parse(), Ok(ConfigType::GrpcXdsSotw));
        for s in ["file", "File", "", "GRPC_XDS", " FILE"] {
            assert!(s.parse::<ConfigType>().is_err(), "{s:?}");
        }
    }

    #[test]
    fn backend_type_empty_is_redis() {
        assert_eq!("redis".parse(), Ok(BackendType::Redis));
        assert_eq!("".parse(), Ok(BackendType::Redis));
        assert_eq!("memcache".parse(), Ok(BackendType::Memcache));
        assert_eq!("memory".parse(), Ok(BackendType::Memory));
        for s in ["Redis", "REDIS", "memcached", "mem"] {
            assert!(s.parse::<BackendType>().is_err(), "{s:?}");
        }
    }

    #[test]
    fn redis_type_is_case_insensitive() {
        assert_eq!("SINGLE".parse(), Ok(RedisType::Single));
        assert_eq!("single".parse(), Ok(RedisType::Single));
        assert_eq!("Sentinel".parse(), Ok(RedisType::Sentinel));
        assert_eq!("cLuStEr".parse(), Ok(RedisType::Cluster));
        for s in ["", "standalone", "single "] {
            assert!(s.parse::<RedisType>().is_err(), "{s:?}");
        }
    }

    #[test]
    fn log_format_json_any_case_else_text() {
        assert_eq!("json".parse(), Ok(LogFormat::Json));
        assert_eq!("JSON".parse(), Ok(LogFormat::Json));
        assert_eq!("text".parse(), Ok(LogFormat::Text));
        assert_eq!("xml".parse(), Ok(LogFormat::Text));
        assert_eq!("".parse(), Ok(LogFormat::Text));
    }

    #[test]
    fn log_level_logrus_names_any_case() {
        let cases = [
            ("trace", LogLevel::Trace),
            ("DEBUG", LogLevel::Debug),
            ("Info", LogLevel::Info),
            ("WARN", LogLevel::Warn),
            ("warning", LogLevel::Warn),
            ("error", LogLevel::Error),
            ("fatal", LogLevel::Fatal),
            ("PANIC", LogLevel::Panic),
        ];
        for (s, level) in cases {
            assert_eq!(s.parse(), Ok(level), "{s}");
        }
        for s in ["", "verbose", "warn ", "critical"] {
            assert!(s.parse::<LogLevel>().is_err(), "{s:?}");
        }
        assert!(LogLevel::Error < LogLevel::Warn && LogLevel::Warn < LogLevel::Debug);
    }

    #[test]
    fn pool_on_empty_behavior_unknown_is_wait() {
        assert_eq!("WAIT".parse(), Ok(PoolOnEmptyBehavior::Wait));
        assert_eq!("create".parse(), Ok(PoolOnEmptyBehavior::Create));
        assert_eq!("Error".parse(), Ok(PoolOnEmptyBehavior::Error));
        assert_eq!("bogus".parse(), Ok(PoolOnEmptyBehavior::Wait));
        assert_eq!("".parse(), Ok(PoolOnEmptyBehavior::Wait));
    }

    #[test]
    fn tracing_protocol_is_exact() {
        assert_eq!("http".parse(), Ok(TracingProtocol::Http));
        assert_eq!("".parse(), Ok(TracingProtocol::Http));
        assert_eq!("grpc".parse(), Ok(TracingProtocol::Grpc));
        assert!("GRPC".parse::<TracingProtocol>().is_err());
    }

    #[test]
    fn enum_errors_reach_the_settings_error() {
        assert_eq!(
            errors(&[("LOG_LEVEL", "loud"), ("REDIS_PERSECOND_TYPE", "ring")]),
            [
                (
                    "LOG_LEVEL",
                    ParseError::OneOf {
                        expected:
                            "trace, debug, info, warn, warning, error, fatal, panic (any case)"
                    }
                ),
                (
                    "REDIS_PERSECOND_TYPE",
                    ParseError::OneOf {
                        expected: "single, sentinel, cluster (any case)"
                    }
                ),
            ]
        );
    }

    #[test]
    fn inactive_list_names_set_accepted_variables_in_table_order() {
        let source = src(&[
            ("REDIS_PIPELINE_LIMIT", "8"),
            ("LOG_LEVEL", "debug"),
            ("PORT", "9090"),
            ("REDIS_PERSECOND_PIPELINE_WINDOW", "150us"),
            ("CACHE_KEY_PREFIX", ""),
            ("RUNTIME_ROOT", "/data"),
            ("NOT_A_SETTING", "1"),
        ]);
        let settings = Settings::from_source(&source).expect("valid");
        assert_eq!(
            settings.accepted_but_inactive(&source),
            ["REDIS_PIPELINE_LIMIT", "REDIS_PERSECOND_PIPELINE_WINDOW"]
        );
        assert!(Settings::default()
            .accepted_but_inactive(&MapSource::new())
            .is_empty());
    }

    #[test]
    fn debug_redacts_credentials() {
        let s = parse(&[
            ("REDIS_AUTH", "user:hunter2"),
            ("REDIS_PERSECOND_SENTINEL_AUTH", "hunter3"),
            (
                "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
                "authorization:Bearer hunter4",
            ),
        ])
        .expect("valid");
        let debug = format!("{s:?}");
        for secret in ["hunter2", "hunter3", "hunter4"] {
            assert!(!debug.contains(secret), "{secret} leaked: {debug}");
        }
        assert!(debug.contains("authorization"));
        assert!(debug.contains("auth: <redacted>"));
        assert!(debug.contains("sentinel_auth: \"\""));
    }

    #[test]
    fn module_doc_example() {
        let src: MapSource = [("LOG_LEVEL", "debug"), ("PORT", "0x1F90")]
            .into_iter()
            .collect();
        let settings = Settings::from_source(&src).expect("valid");
        assert_eq!(settings.log.level, LogLevel::Debug);
        assert_eq!(settings.listener.port, 8080);
        let bad: MapSource = [("PORT", ""), ("USE_STATSD", "yes")].into_iter().collect();
        assert_eq!(
            Settings::from_source(&bad)
                .expect_err("invalid")
                .invalid()
                .len(),
            2
        );
    }
}
