//! Settings of the service's own servers and process: the listeners (HTTP, debug, gRPC and its
//! TLS), logging, tracing, shutdown, and the bounds on a request.

use std::str::FromStr;
use std::time::Duration;

use super::parse::{
    parse_bool, parse_count, parse_duration, parse_f64, parse_port, parse_positive_duration,
    parse_positive_size, ParseError,
};
use super::reader::Reader;
use super::vars::*;

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

/// Graceful shutdown (ours): `SHUTDOWN_DRAIN_DURATION`, `SHUTDOWN_TIMEOUT`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ShutdownSettings {
    /// After SIGTERM, how long health fails before listeners close.
    pub drain: Duration,
    /// How long in-flight calls may run before connections are cut.
    pub timeout: Duration,
}

/// The per-tenant overrides' API (ours): `ADMIN_TOKEN_FILE`,
/// `OVERRIDES_MAX`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OverrideSettings {
    /// `ADMIN_TOKEN_FILE`; empty: writes are refused.
    pub admin_token_file: String,
    /// `OVERRIDES_MAX` (at least 1).
    pub max_entries: usize,
}

impl OverrideSettings {
    pub(super) fn read(r: &mut Reader<'_>) -> OverrideSettings {
        OverrideSettings {
            admin_token_file: r.string(ENV_ADMIN_TOKEN_FILE),
            max_entries: r.get(ENV_OVERRIDES_MAX, parse_positive_size),
        }
    }
}

/// How large one request may be (ours).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestSettings {
    /// `REQUEST_MAX_DESCRIPTORS`.
    pub max_descriptors: usize,
    /// `REQUEST_MAX_ENTRIES`: per descriptor.
    pub max_entries: usize,
}

impl ListenerSettings {
    pub(super) fn read(r: &mut Reader<'_>) -> ListenerSettings {
        ListenerSettings {
            host: r.string(ENV_HOST),
            port: r.get(ENV_PORT, parse_port),
            debug_host: r.string(ENV_DEBUG_HOST),
            debug_port: r.get(ENV_DEBUG_PORT, parse_port),
            grpc_uds: r.string(ENV_GRPC_UDS),
            grpc_host: r.string(ENV_GRPC_HOST),
            grpc_port: r.get(ENV_GRPC_PORT, parse_port),
            grpc_max_connection_age: r.get(ENV_GRPC_MAX_CONNECTION_AGE, parse_duration),
            grpc_max_connection_age_grace: r.get(ENV_GRPC_MAX_CONNECTION_AGE_GRACE, parse_duration),
            grpc_workers: r.get(ENV_GRPC_WORKERS, |s| match s {
                "auto" => Ok(GrpcWorkers::Auto),
                n => parse_count(n)
                    .map(|n| GrpcWorkers::Count(usize::try_from(n).unwrap_or(1024).min(1024))),
            }),
            grpc_max_connections: r.get(ENV_GRPC_MAX_CONNECTIONS, |s| match s {
                "auto" => Ok(None),
                n => parse_positive_size(n).map(Some),
            }),
            grpc_connection_timeout: r.get(ENV_GRPC_CONNECTION_TIMEOUT, parse_positive_duration),
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
        }
    }
}

impl LogSettings {
    pub(super) fn read(r: &mut Reader<'_>) -> LogSettings {
        LogSettings {
            level: r.get(ENV_LOG_LEVEL, str::parse),
            format: r.get(ENV_LOG_FORMAT, str::parse),
        }
    }
}

impl TracingSettings {
    pub(super) fn read(r: &mut Reader<'_>) -> TracingSettings {
        TracingSettings {
            enabled: r.get(ENV_TRACING_ENABLED, parse_bool),
            service_name: r.string(ENV_TRACING_SERVICE_NAME),
            service_namespace: r.string(ENV_TRACING_SERVICE_NAMESPACE),
            service_instance_id: r.string(ENV_TRACING_SERVICE_INSTANCE_ID),
            exporter_protocol: r.get(ENV_TRACING_EXPORTER_PROTOCOL, str::parse),
            sampling_rate: r.get(ENV_TRACING_SAMPLING_RATE, parse_f64),
        }
    }
}

impl ShutdownSettings {
    pub(super) fn read(r: &mut Reader<'_>) -> ShutdownSettings {
        ShutdownSettings {
            drain: r.get(ENV_SHUTDOWN_DRAIN_DURATION, parse_duration),
            timeout: r.get(ENV_SHUTDOWN_TIMEOUT, parse_duration),
        }
    }
}

impl RequestSettings {
    pub(super) fn read(r: &mut Reader<'_>) -> RequestSettings {
        RequestSettings {
            max_descriptors: r.get(ENV_REQUEST_MAX_DESCRIPTORS, parse_positive_size),
            max_entries: r.get(ENV_REQUEST_MAX_ENTRIES, parse_positive_size),
        }
    }
}
