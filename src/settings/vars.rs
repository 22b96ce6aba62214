//! The 118 environment variables of the original service: one `ENV_*` constant per
//! original name, and [`VARS`], the table of their kinds, defaults and support status.
//!
//! The table is the single source of truth for names and default texts:
//! [`Settings::from_source`](super::Settings::from_source) reads every variable through it, so
//! a default changed here changes the parsed default.

use super::parse::{self, ParseError};

/// The value syntax of a variable, as the original's `envconfig` decodes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Any text, taken verbatim (the empty string included).
    String,
    /// A Go `strconv.ParseInt(s, 0, 64)` integer: see [`parse::parse_int`].
    Int,
    /// A Go `strconv.ParseBool` boolean: see [`parse::parse_bool`].
    Bool,
    /// A Go `time.ParseDuration` duration: see [`parse::parse_duration`].
    Duration,
    /// A Go `strconv.ParseFloat` number: see [`parse::parse_f64`].
    Float,
    /// Comma-separated items: see [`parse::parse_list`].
    List,
    /// Comma-separated `key:value` items: see [`parse::parse_map`].
    Map,
}

impl Kind {
    /// Checks that `value` has this kind's syntax.
    ///
    /// This is the syntax only: the typed [`Settings`](super::Settings) may narrow a value
    /// further (a port must fit `0..=65535`, `CONFIG_TYPE` must name a provider, …).
    pub fn check(self, value: &str) -> Result<(), ParseError> {
        match self {
            Kind::String | Kind::List => Ok(()),
            Kind::Int => parse::parse_int(value).map(drop),
            Kind::Bool => parse::parse_bool(value).map(drop),
            Kind::Duration => parse::parse_duration(value).map(drop),
            Kind::Float => parse::parse_f64(value).map(drop),
            Kind::Map => parse::parse_map(value).map(drop),
        }
    }
}

/// Whether this service acts on a variable yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// Parsed, validated and acted on.
    Active,
    /// Parsed and validated (a bad value still aborts start-up, as in the original) but not
    /// acted on yet; an explicitly set one is named in the start-up warning built from
    /// [`Settings::accepted_but_inactive`](super::Settings::accepted_but_inactive).
    Accepted,
}

/// One row of [`VARS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VarSpec {
    /// The original's environment variable name.
    pub name: &'static str,
    /// The value syntax.
    pub kind: Kind,
    /// The text used when the variable is unset; it always passes `kind.check`
    /// (unit-tested). An unset variable and one set to this text parse identically; a
    /// variable set to the empty string does not use it.
    pub default: &'static str,
    /// Whether this service acts on the variable yet.
    pub support: Support,
    /// What it sets: its doc comment's text, one line per comment line
    /// (`docs/settings.md` shows it, held there by a test).
    pub meaning: &'static str,
}

/// The row of [`VARS`] or [`EXTENSIONS`] for `name`.
pub fn spec(name: &str) -> Option<&'static VarSpec> {
    VARS.iter().chain(EXTENSIONS).find(|v| v.name == name)
}

/// Declares one `pub const` per variable and its table ([`VARS`], the original's;
/// [`EXTENSIONS`], ours) from a single list, so a name cannot be in one and missing from the
/// other, and each variable's name, kind, default and support are written once. To start
/// acting on a variable, change its last word from `Accepted` to `Active`.
macro_rules! vars {
    (
        $(#[$table_doc:meta])* static $table:ident;
        $($(#[doc = $doc:literal])* $konst:ident = $name:literal, $kind:ident, $default:literal, $support:ident;)*
    ) => {
        $(
            $(#[doc = $doc])*
            #[doc = concat!("\n\nKind: ", stringify!($kind), "; default: \"", $default, "\".")]
            pub const $konst: &str = $name;
        )*

        $(#[$table_doc])*
        pub static $table: &[VarSpec] = &[
            $(VarSpec {
                name: $konst,
                kind: Kind::$kind,
                default: $default,
                support: Support::$support,
                meaning: concat!($($doc, "\n"),*),
            },)*
        ];
    };
}

vars! {
    /// Every variable of the original, in the order of the specification
    /// table. Names are unique (unit-tested).
    static VARS;

    /// Bind address of the main HTTP port.
    ENV_HOST = "HOST", String, "0.0.0.0", Active;
    /// Main HTTP port (`/healthcheck`, `/json`).
    ENV_PORT = "PORT", Int, "8080", Active;
    /// Bind address of the debug port.
    ENV_DEBUG_HOST = "DEBUG_HOST", String, "0.0.0.0", Active;
    /// Debug port.
    ENV_DEBUG_PORT = "DEBUG_PORT", Int, "6070", Active;
    /// If set, gRPC listens on this unix socket instead of host:port.
    ENV_GRPC_UDS = "GRPC_UDS", String, "", Active;
    /// gRPC bind address.
    ENV_GRPC_HOST = "GRPC_HOST", String, "0.0.0.0", Active;
    /// gRPC port.
    ENV_GRPC_PORT = "GRPC_PORT", Int, "8081", Active;
    /// Connection age before GOAWAY (±10 % jitter).
    ENV_GRPC_MAX_CONNECTION_AGE = "GRPC_MAX_CONNECTION_AGE", Duration, "24h", Active;
    /// Grace after GOAWAY before forced close.
    ENV_GRPC_MAX_CONNECTION_AGE_GRACE = "GRPC_MAX_CONNECTION_AGE_GRACE", Duration, "1h", Active;
    /// TLS on the gRPC port.
    ENV_GRPC_SERVER_USE_TLS = "GRPC_SERVER_USE_TLS", Bool, "false", Active;
    /// Server certificate chain file (PEM).
    ENV_GRPC_SERVER_TLS_CERT = "GRPC_SERVER_TLS_CERT", String, "", Active;
    /// Server private key file (PEM), same directory as the cert.
    ENV_GRPC_SERVER_TLS_KEY = "GRPC_SERVER_TLS_KEY", String, "", Active;
    /// CA for client certificates; set ⇒ mTLS required.
    ENV_GRPC_CLIENT_TLS_CACERT = "GRPC_CLIENT_TLS_CACERT", String, "", Active;
    /// DNS SAN the client certificate must match.
    ENV_GRPC_CLIENT_TLS_SAN = "GRPC_CLIENT_TLS_SAN", String, "", Active;
    /// Log level.
    ENV_LOG_LEVEL = "LOG_LEVEL", String, "WARN", Active;
    /// `json` ⇒ JSON logs.
    ENV_LOG_FORMAT = "LOG_FORMAT", String, "text", Active;
    /// `FILE` or `GRPC_XDS_SOTW`.
    ENV_CONFIG_TYPE = "CONFIG_TYPE", String, "FILE", Active;
    /// Don't wait for the first config before listening.
    ENV_FORCE_START_WITHOUT_INITIAL_CONFIG = "FORCE_START_WITHOUT_INITIAL_CONFIG", Bool, "false", Active;
    /// XDS node id.
    ENV_CONFIG_GRPC_XDS_NODE_ID = "CONFIG_GRPC_XDS_NODE_ID", String, "default", Active;
    /// Node metadata `k=v,k2=v2`.
    ENV_CONFIG_GRPC_XDS_NODE_METADATA = "CONFIG_GRPC_XDS_NODE_METADATA", String, "", Active;
    /// XDS management server (gRPC target).
    ENV_CONFIG_GRPC_XDS_SERVER_URL = "CONFIG_GRPC_XDS_SERVER_URL", String, "localhost:18000", Active;
    /// Stream retry interval (effectively unused).
    ENV_CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL = "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", Duration, "3s", Active;
    /// Extra gRPC metadata on the xDS stream.
    ENV_CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS = "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", Map, "", Active;
    /// TLS to the xDS server.
    ENV_CONFIG_GRPC_XDS_SERVER_USE_TLS = "CONFIG_GRPC_XDS_SERVER_USE_TLS", Bool, "false", Active;
    /// Client certificate for xDS TLS.
    ENV_CONFIG_GRPC_XDS_CLIENT_TLS_CERT = "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", String, "", Active;
    /// Client key for xDS TLS.
    ENV_CONFIG_GRPC_XDS_CLIENT_TLS_KEY = "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", String, "", Active;
    /// CA added to system roots for the xDS server.
    ENV_CONFIG_GRPC_XDS_SERVER_TLS_CACERT = "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", String, "", Active;
    /// Expected server name of the xDS server.
    ENV_CONFIG_GRPC_XDS_SERVER_TLS_SAN = "CONFIG_GRPC_XDS_SERVER_TLS_SAN", String, "", Active;
    /// Reconnect back-off minimum.
    ENV_XDS_CLIENT_BACKOFF_INITIAL_INTERVAL = "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", Duration, "10s", Active;
    /// Reconnect back-off maximum.
    ENV_XDS_CLIENT_BACKOFF_MAX_INTERVAL = "XDS_CLIENT_BACKOFF_MAX_INTERVAL", Duration, "60s", Active;
    /// Used as the back-off *multiplier*, as the original does.
    ENV_XDS_CLIENT_BACKOFF_RANDOM_FACTOR = "XDS_CLIENT_BACKOFF_RANDOM_FACTOR", Float, "0.5", Active;
    /// Jitter on the back-off.
    ENV_XDS_CLIENT_BACKOFF_JITTER = "XDS_CLIENT_BACKOFF_JITTER", Bool, "true", Active;
    /// Max xDS message size received.
    ENV_XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES = "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", Int, "0", Active;
    /// DogStatsD sink.
    ENV_USE_DOG_STATSD = "USE_DOG_STATSD", Bool, "false", Active;
    /// Mogrifier names.
    ENV_USE_DOG_STATSD_MOGRIFIERS = "USE_DOG_STATSD_MOGRIFIERS", List, "", Active;
    /// Statsd sink.
    ENV_USE_STATSD = "USE_STATSD", Bool, "true", Active;
    /// Statsd/DogStatsD host.
    ENV_STATSD_HOST = "STATSD_HOST", String, "localhost", Active;
    /// Statsd/DogStatsD port.
    ENV_STATSD_PORT = "STATSD_PORT", Int, "8125", Active;
    /// Tags added to all stats.
    ENV_EXTRA_TAGS = "EXTRA_TAGS", Map, "", Active;
    /// Stats flush period (must be > 0).
    ENV_STATS_FLUSH_INTERVAL = "STATS_FLUSH_INTERVAL", Duration, "10s", Active;
    /// Discard all stats.
    ENV_DISABLE_STATS = "DISABLE_STATS", Bool, "false", Active;
    /// Prometheus sink (requires `USE_STATSD=false`).
    ENV_USE_PROMETHEUS = "USE_PROMETHEUS", Bool, "false", Active;
    /// Prometheus listen address.
    ENV_PROMETHEUS_ADDR = "PROMETHEUS_ADDR", String, ":9090", Active;
    /// Prometheus scrape path.
    ENV_PROMETHEUS_PATH = "PROMETHEUS_PATH", String, "/metrics", Active;
    /// Path of a statsd_exporter mapping file replacing the default.
    ENV_PROMETHEUS_MAPPER_YAML = "PROMETHEUS_MAPPER_YAML", String, "", Active;
    /// Keep response time in ms in the default mapping.
    ENV_PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS = "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", Bool, "false", Active;
    /// FILE provider root.
    ENV_RUNTIME_ROOT = "RUNTIME_ROOT", String, "/srv/runtime_data/current", Active;
    /// Subdirectory under the root.
    ENV_RUNTIME_SUBDIRECTORY = "RUNTIME_SUBDIRECTORY", String, "", Active;
    /// Directory (watch-root: key prefix) holding config files.
    ENV_RUNTIME_APPDIRECTORY = "RUNTIME_APPDIRECTORY", String, "config", Active;
    /// Skip dot files and dot directories.
    ENV_RUNTIME_IGNOREDOTFILES = "RUNTIME_IGNOREDOTFILES", Bool, "false", Active;
    /// True = reload on symlink swap of the root; false = watch the app directory.
    ENV_RUNTIME_WATCH_ROOT = "RUNTIME_WATCH_ROOT", Bool, "true", Active;
    /// Upper bound (exclusive) of random seconds added to key expiry.
    ENV_EXPIRATION_JITTER_MAX_SECONDS = "EXPIRATION_JITTER_MAX_SECONDS", Int, "300", Active;
    /// Size of the local over-limit cache; 0 = off.
    ENV_LOCAL_CACHE_SIZE_IN_BYTES = "LOCAL_CACHE_SIZE_IN_BYTES", Int, "0", Active;
    /// Near-limit threshold ratio.
    ENV_NEAR_LIMIT_RATIO = "NEAR_LIMIT_RATIO", Float, "0.8", Active;
    /// Prefix of every backend key.
    ENV_CACHE_KEY_PREFIX = "CACHE_KEY_PREFIX", String, "", Active;
    /// `redis` (or empty) / `memcache`.
    ENV_BACKEND_TYPE = "BACKEND_TYPE", String, "redis", Active;
    /// Redis only.
    ENV_STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT = "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", Bool, "false", Active;
    /// Add rate-limit headers.
    ENV_LIMIT_RESPONSE_HEADERS_ENABLED = "LIMIT_RESPONSE_HEADERS_ENABLED", Bool, "false", Active;
    /// Header name for the limit.
    ENV_LIMIT_LIMIT_HEADER = "LIMIT_LIMIT_HEADER", String, "RateLimit-Limit", Active;
    /// Header name for the remaining count.
    ENV_LIMIT_REMAINING_HEADER = "LIMIT_REMAINING_HEADER", String, "RateLimit-Remaining", Active;
    /// Header name for seconds until reset.
    ENV_LIMIT_RESET_HEADER = "LIMIT_RESET_HEADER", String, "RateLimit-Reset", Active;
    /// Add the same three headers to the request Envoy forwards upstream
    /// (`request_headers_to_add`), chosen as the response's are; independent
    /// of `LIMIT_RESPONSE_HEADERS_ENABLED`.
    ENV_LIMIT_REQUEST_HEADERS_ENABLED = "LIMIT_REQUEST_HEADERS_ENABLED", Bool, "false", Active;
    /// Upstream header name for the limit.
    ENV_LIMIT_REQUEST_LIMIT_HEADER = "LIMIT_REQUEST_LIMIT_HEADER", String, "RateLimit-Limit", Active;
    /// Upstream header name for the remaining count.
    ENV_LIMIT_REQUEST_REMAINING_HEADER = "LIMIT_REQUEST_REMAINING_HEADER", String, "RateLimit-Remaining", Active;
    /// Upstream header name for seconds until reset.
    ENV_LIMIT_REQUEST_RESET_HEADER = "LIMIT_REQUEST_RESET_HEADER", String, "RateLimit-Reset", Active;
    /// Add the `config` health component.
    ENV_HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED = "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", Bool, "false", Active;
    /// Network for `REDIS_URL` (`unix`/`tcp`).
    ENV_REDIS_SOCKET_TYPE = "REDIS_SOCKET_TYPE", String, "unix", Active;
    /// `single`/`cluster`/`sentinel` (case-insensitive).
    ENV_REDIS_TYPE = "REDIS_TYPE", String, "SINGLE", Active;
    /// Redis address(es).
    ENV_REDIS_URL = "REDIS_URL", String, "/var/run/nutcracker/ratelimit.sock", Active;
    /// Connections per Redis node.
    ENV_REDIS_POOL_SIZE = "REDIS_POOL_SIZE", Int, "10", Active;
    /// `password` or `user:password`.
    ENV_REDIS_AUTH = "REDIS_AUTH", String, "", Active;
    /// TLS to the main Redis.
    ENV_REDIS_TLS = "REDIS_TLS", Bool, "false", Active;
    /// Client cert for Redis TLS (both clients).
    ENV_REDIS_TLS_CLIENT_CERT = "REDIS_TLS_CLIENT_CERT", String, "", Active;
    /// Client key for Redis TLS.
    ENV_REDIS_TLS_CLIENT_KEY = "REDIS_TLS_CLIENT_KEY", String, "", Active;
    /// CA added to system roots for Redis TLS.
    ENV_REDIS_TLS_CACERT = "REDIS_TLS_CACERT", String, "", Active;
    /// Verify chain but not host name.
    ENV_REDIS_TLS_SKIP_HOSTNAME_VERIFICATION = "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", Bool, "false", Active;
    /// Write-flush interval (cluster mode only).
    ENV_REDIS_PIPELINE_WINDOW = "REDIS_PIPELINE_WINDOW", Duration, "0", Accepted;
    /// Deprecated, no effect.
    ENV_REDIS_PIPELINE_LIMIT = "REDIS_PIPELINE_LIMIT", Int, "0", Accepted;
    /// Cluster key-group concurrency.
    ENV_REDIS_CLUSTER_PIPELINE_PARALLELISM = "REDIS_CLUSTER_PIPELINE_PARALLELISM", Int, "1", Accepted;
    /// Separate Redis for SECOND limits.
    ENV_REDIS_PERSECOND = "REDIS_PERSECOND", Bool, "false", Active;
    /// As `REDIS_SOCKET_TYPE` for the per-second Redis.
    ENV_REDIS_PERSECOND_SOCKET_TYPE = "REDIS_PERSECOND_SOCKET_TYPE", String, "unix", Active;
    /// As `REDIS_TYPE`.
    ENV_REDIS_PERSECOND_TYPE = "REDIS_PERSECOND_TYPE", String, "SINGLE", Active;
    /// As `REDIS_URL`.
    ENV_REDIS_PERSECOND_URL = "REDIS_PERSECOND_URL", String, "/var/run/nutcracker/ratelimitpersecond.sock", Active;
    /// As `REDIS_POOL_SIZE`.
    ENV_REDIS_PERSECOND_POOL_SIZE = "REDIS_PERSECOND_POOL_SIZE", Int, "10", Active;
    /// As `REDIS_AUTH`.
    ENV_REDIS_PERSECOND_AUTH = "REDIS_PERSECOND_AUTH", String, "", Active;
    /// TLS to the per-second Redis.
    ENV_REDIS_PERSECOND_TLS = "REDIS_PERSECOND_TLS", Bool, "false", Active;
    /// Auth for sentinel nodes (main).
    ENV_REDIS_SENTINEL_AUTH = "REDIS_SENTINEL_AUTH", String, "", Active;
    /// Auth for sentinel nodes (per-second).
    ENV_REDIS_PERSECOND_SENTINEL_AUTH = "REDIS_PERSECOND_SENTINEL_AUTH", String, "", Active;
    /// As `REDIS_PIPELINE_WINDOW`.
    ENV_REDIS_PERSECOND_PIPELINE_WINDOW = "REDIS_PERSECOND_PIPELINE_WINDOW", Duration, "0", Accepted;
    /// Deprecated, no effect.
    ENV_REDIS_PERSECOND_PIPELINE_LIMIT = "REDIS_PERSECOND_PIPELINE_LIMIT", Int, "0", Accepted;
    /// As `REDIS_CLUSTER_PIPELINE_PARALLELISM`.
    ENV_REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM = "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", Int, "1", Accepted;
    /// Tie the `redis` health component to live connections.
    ENV_REDIS_HEALTH_CHECK_ACTIVE_CONNECTION = "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", Bool, "false", Active;
    /// Dial timeout (main).
    ENV_REDIS_TIMEOUT = "REDIS_TIMEOUT", Duration, "10s", Active;
    /// Dial timeout (per-second).
    ENV_REDIS_PERSECOND_TIMEOUT = "REDIS_PERSECOND_TIMEOUT", Duration, "10s", Active;
    /// `WAIT`; `CREATE`/`ERROR` abort start-up.
    ENV_REDIS_POOL_ON_EMPTY_BEHAVIOR = "REDIS_POOL_ON_EMPTY_BEHAVIOR", String, "WAIT", Active;
    /// Same for per-second.
    ENV_REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR = "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", String, "WAIT", Active;
    /// First start-up retry delay.
    ENV_REDIS_STARTUP_INITIAL_INTERVAL = "REDIS_STARTUP_INITIAL_INTERVAL", Duration, "1s", Active;
    /// Max start-up retry delay.
    ENV_REDIS_STARTUP_MAX_INTERVAL = "REDIS_STARTUP_MAX_INTERVAL", Duration, "30s", Active;
    /// Give up (panic) after this; 0 = never.
    ENV_REDIS_STARTUP_MAX_ELAPSED_TIME = "REDIS_STARTUP_MAX_ELAPSED_TIME", Duration, "0", Active;
    /// Memcache servers `host:port,…`.
    ENV_MEMCACHE_HOST_PORT = "MEMCACHE_HOST_PORT", List, "", Active;
    /// Idle connections per memcache server.
    ENV_MEMCACHE_MAX_IDLE_CONNS = "MEMCACHE_MAX_IDLE_CONNS", Int, "2", Active;
    /// SRV record for memcache servers (exclusive with host list).
    ENV_MEMCACHE_SRV = "MEMCACHE_SRV", String, "", Active;
    /// SRV re-resolution period; 0 = never.
    ENV_MEMCACHE_SRV_REFRESH = "MEMCACHE_SRV_REFRESH", Duration, "0", Active;
    /// TLS to memcache.
    ENV_MEMCACHE_TLS = "MEMCACHE_TLS", Bool, "false", Active;
    /// Client cert for memcache TLS.
    ENV_MEMCACHE_TLS_CLIENT_CERT = "MEMCACHE_TLS_CLIENT_CERT", String, "", Active;
    /// Client key for memcache TLS.
    ENV_MEMCACHE_TLS_CLIENT_KEY = "MEMCACHE_TLS_CLIENT_KEY", String, "", Active;
    /// CA added to system roots for memcache TLS.
    ENV_MEMCACHE_TLS_CACERT = "MEMCACHE_TLS_CACERT", String, "", Active;
    /// Verify chain but not host name.
    ENV_MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION = "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", Bool, "false", Active;
    /// Global shadow mode.
    ENV_SHADOW_MODE = "SHADOW_MODE", Bool, "false", Active;
    /// Global quota mode.
    ENV_QUOTA_MODE = "QUOTA_MODE", Bool, "false", Active;
    /// Fill `dynamic_metadata`.
    ENV_RESPONSE_DYNAMIC_METADATA = "RESPONSE_DYNAMIC_METADATA", Bool, "false", Active;
    /// Allow several files for one domain (config document).
    ENV_MERGE_DOMAIN_CONFIG = "MERGE_DOMAIN_CONFIG", Bool, "false", Active;
    /// OpenTelemetry tracing.
    ENV_TRACING_ENABLED = "TRACING_ENABLED", Bool, "false", Active;
    /// `service.name`.
    ENV_TRACING_SERVICE_NAME = "TRACING_SERVICE_NAME", String, "RateLimit", Active;
    /// `service.namespace`.
    ENV_TRACING_SERVICE_NAMESPACE = "TRACING_SERVICE_NAMESPACE", String, "", Active;
    /// `service.instance.id` (random UUID if empty).
    ENV_TRACING_SERVICE_INSTANCE_ID = "TRACING_SERVICE_INSTANCE_ID", String, "", Active;
    /// `http` or `grpc`.
    ENV_TRACING_EXPORTER_PROTOCOL = "TRACING_EXPORTER_PROTOCOL", String, "http", Active;
    /// Trace-id ratio sampling.
    ENV_TRACING_SAMPLING_RATE = "TRACING_SAMPLING_RATE", Float, "1", Active;
}

vars! {
    /// Variables this service adds to the original's. Each is opt-in: its
    /// default keeps an existing deployment's behaviour.
    static EXTENSIONS;

    /// `tcp` (default) or `udp`: the statsd transport. Read by the original's
    /// statsd library rather than its settings; honoured here the same way.
    ENV_STATSD_PROTOCOL = "STATSD_PROTOCOL", String, "tcp", Active;
    /// After SIGTERM, how long the health check fails before the listeners
    /// close, so load balancers stop sending first. Ours; default `0s` (the
    /// original's behaviour).
    ENV_SHUTDOWN_DRAIN_DURATION = "SHUTDOWN_DRAIN_DURATION", Duration, "0s", Active;
    /// How long in-flight calls may run after the listeners close before
    /// connections are cut. Ours; the original waits forever.
    ENV_SHUTDOWN_TIMEOUT = "SHUTDOWN_TIMEOUT", Duration, "15s", Active;
    /// `true`: a request's fixed-window limits in the original's vocabulary
    /// are decided first and counted only if every limit of the request passes
    /// (all or nothing), instead of the original's count-every-hit. Ours;
    /// default `false` (the original's behaviour). The opt-in algorithms are
    /// always all or nothing.
    ENV_ALL_OR_NOTHING = "ALL_OR_NOTHING", Bool, "false", Active;
    /// Which rate-limit headers `LIMIT_RESPONSE_HEADERS_ENABLED` adds:
    /// `original` (the original's three, byte for byte), `ietf` (RateLimit-Policy
    /// and RateLimit of the IETF draft, and Retry-After) or `x-ratelimit`
    /// (Envoy's X-RateLimit-* spelling). Ours; default `original`.
    ENV_LIMIT_RESPONSE_HEADERS_FORMAT = "LIMIT_RESPONSE_HEADERS_FORMAT", String, "original", Active;
    /// A uniformly random extra delay in [0, jitter) added to the retry time of
    /// OVER_LIMIT statuses (and so to Retry-After). Ours; default `0s`.
    ENV_RETRY_AFTER_JITTER = "RETRY_AFTER_JITTER", Duration, "0s", Active;
    /// Add a `decision` struct to every response's `dynamic_metadata`: the
    /// decision's id (which the decision audit and the logs name too), its
    /// code, the rule that decided, and the shadow-mode rules it found over
    /// their limit, for Envoy's access log and the upstream. Ours; default
    /// `false`; independent of `RESPONSE_DYNAMIC_METADATA`.
    ENV_RESPONSE_DECISION_METADATA = "RESPONSE_DECISION_METADATA", Bool, "false", Active;
    /// Hard deadline of a request's store work; past it the store has failed
    /// for that request's limits. Ours; default `50ms`.
    ENV_STORE_TIMEOUT = "STORE_TIMEOUT", Duration, "50ms", Active;
    /// Consecutive failures of one store node that open its breaker; `0`
    /// disables the breaker. Ours; default `5`.
    ENV_STORE_BREAKER_FAILURES = "STORE_BREAKER_FAILURES", Int, "5", Active;
    /// How long an open breaker sends nothing before one probe. Ours; default `1s`.
    ENV_STORE_BREAKER_COOLDOWN = "STORE_BREAKER_COOLDOWN", Duration, "1s", Active;
    /// What a rule without its own `failure_mode` does when the store cannot
    /// answer: `error` (the original's UNKNOWN), `open` or `closed`. Ours;
    /// default `error`.
    ENV_STORE_FAILURE_MODE = "STORE_FAILURE_MODE", String, "error", Active;
    /// An `open` rule's local floor as a share of its limit, when it sets no
    /// `fallback_requests_per_unit`. Ours; default `0.1`.
    ENV_STORE_FALLBACK_SHARE = "STORE_FALLBACK_SHARE", Float, "0.1", Active;
    /// Decisions per second on one instance from which a key of a `lease:
    /// true` rule is leased. Ours; default `100`.
    ENV_LEASE_MIN_RATE = "LEASE_MIN_RATE", Int, "100", Active;
    /// How much of a leased key's measured traffic one batch covers. Ours;
    /// default `100ms`.
    ENV_LEASE_DURATION = "LEASE_DURATION", Duration, "100ms", Active;
    /// The longest a lease lives before its unspent tokens go back. Ours;
    /// default `1s`.
    ENV_LEASE_TTL = "LEASE_TTL", Duration, "1s", Active;
    /// The most keys the memory store holds (`BACKEND_TYPE=memory`). Ours;
    /// default `1000000` (about 125 MB), shared between the rules that hold
    /// keys (a flood of one rule evicts its own keys). On a shared store,
    /// the most keys an instance holds a local-first view of.
    ENV_MEMORY_MAX_KEYS = "MEMORY_MAX_KEYS", Int, "1000000", Active;
    /// How long an RLQS assignment holds without a new report, and how long
    /// a silent Envoy's share stays taken. Ours; default `15s` (three of
    /// Envoy's 5 s reports).
    ENV_RLQS_ASSIGNMENT_TTL = "RLQS_ASSIGNMENT_TTL", Duration, "15s", Active;
    /// An RLQS bucket reported without requests this long is abandoned. Ours;
    /// default `60s`.
    ENV_RLQS_IDLE_TIMEOUT = "RLQS_IDLE_TIMEOUT", Duration, "60s", Active;
    /// How often an instance reads again the RLQS boards its streams hold
    /// lines on, to push the shares other instances moved. Ours; default
    /// `250ms`.
    ENV_RLQS_SYNC_INTERVAL = "RLQS_SYNC_INTERVAL", Duration, "250ms", Active;
    /// The largest batch as a share of the limit, in (0, 1]. Ours; default `0.05`.
    ENV_LEASE_MAX_SHARE = "LEASE_MAX_SHARE", Float, "0.05", Active;
    /// The `sync_interval` of every fixed window (the original's, or a
    /// calendar's) whose rule sets none: its decisions are local-first,
    /// written back this often (needs a shared store). Ours; default `0`:
    /// off, every decision at the store.
    ENV_LOCAL_FIRST_SYNC_INTERVAL = "LOCAL_FIRST_SYNC_INTERVAL", Duration, "0", Active;
    /// The most a local-first window may admit over its limit, as a share
    /// of it, in (0, 1]: each instance holds at most this share, divided
    /// by the instance count, admitted and not yet written. Ours; default
    /// `0.01`.
    ENV_LOCAL_FIRST_MAX_OVER = "LOCAL_FIRST_MAX_OVER", Float, "0.01", Active;
    /// How many of the busiest keys `/hotkeys` and the `ratelimit.hot_keys`
    /// gauges show; `0` turns detection off. Ours; default `16`.
    ENV_HOT_KEYS_TOP_K = "HOT_KEYS_TOP_K", Int, "16", Active;
    /// How many single-threaded runtimes serve the gRPC connections (each
    /// connection is served by one of them); `0`: none, the shared
    /// multi-threaded runtime serves them; `auto`: one per core with two cores
    /// or more, else `0`. Ours; default `auto`.
    ENV_GRPC_WORKERS = "GRPC_WORKERS", String, "auto", Active;
    /// The share of keys whose decisions the decision audit checks against
    /// their rule's exact contract, in [0, 1]; `0` turns it off. Ours;
    /// default `0`.
    ENV_DECISION_AUDIT_SAMPLE = "DECISION_AUDIT_SAMPLE", Float, "0", Active;
    /// Every limited rule's configured limit as two gauges,
    /// `ratelimit.service.rate_limit.<rule>.limit` and `.window_seconds`,
    /// set at each config load: one pair per rule, whatever the traffic.
    /// Ours; default `false`.
    ENV_RULE_LIMIT_GAUGES = "RULE_LIMIT_GAUGES", Bool, "false", Active;
    /// Window contracts above this many requests per window are not audited
    /// (their reference holds one entry per admitted request). Ours; default
    /// `10000`.
    ENV_DECISION_AUDIT_MAX_LIMIT = "DECISION_AUDIT_MAX_LIMIT", Int, "10000", Active;
    /// The most descriptors one request may carry; a request with more is
    /// refused with INVALID_ARGUMENT naming the limit. Ours; default `1000`.
    ENV_REQUEST_MAX_DESCRIPTORS = "REQUEST_MAX_DESCRIPTORS", Int, "1000", Active;
    /// The most entries one descriptor may carry, likewise. Ours; default `64`.
    ENV_REQUEST_MAX_ENTRIES = "REQUEST_MAX_ENTRIES", Int, "64", Active;
    /// The most connections the HTTP port, and the debug port, each hold open
    /// at once; one more is closed at once. Ours; default `256`.
    ENV_HTTP_MAX_CONNECTIONS = "HTTP_MAX_CONNECTIONS", Int, "256", Active;
    /// How long the HTTP and debug ports wait for a request's head (on a new
    /// connection, or an idle keep-alive one) before closing it. Ours; default
    /// `5s`.
    ENV_HTTP_HEADER_TIMEOUT = "HTTP_HEADER_TIMEOUT", Duration, "5s", Active;
    /// The most gRPC connections open at once; one more is closed at once.
    /// `auto`: the process's open-file limit less the other ports' and the
    /// stores' share. Ours; default `auto`.
    ENV_GRPC_MAX_CONNECTIONS = "GRPC_MAX_CONNECTIONS", String, "auto", Active;
    /// How long a new gRPC connection may stay silent before it is closed (a
    /// connection that has spoken is never closed for idleness). Ours; default
    /// `5s`.
    ENV_GRPC_CONNECTION_TIMEOUT = "GRPC_CONNECTION_TIMEOUT", Duration, "5s", Active;
    /// The most concurrent streams one gRPC connection may open (HTTP/2
    /// `SETTINGS_MAX_CONCURRENT_STREAMS`; a proxy opens another connection
    /// beyond it). Ours; default `1024`.
    ENV_GRPC_MAX_CONCURRENT_STREAMS = "GRPC_MAX_CONCURRENT_STREAMS", Int, "1024", Active;
    /// A file of bearer tokens, one per line (optionally after a name and a
    /// space), that writes of the per-tenant overrides on the debug port
    /// must present; read at each write. Ours; default empty: writes are
    /// refused (403), reads are open as the debug port is.
    ENV_ADMIN_TOKEN_FILE = "ADMIN_TOKEN_FILE", String, "", Active;
    /// The most per-tenant overrides the store's book holds; a new one past
    /// it is refused (409). Ours; default `10000`.
    ENV_OVERRIDES_MAX = "OVERRIDES_MAX", Int, "10000", Active;
}

#[cfg(test)]
mod tests;
