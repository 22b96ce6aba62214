//! The settings turned into each component's options: the one place where the environment's
//! names and values meet the types the components take.

use super::AppError;
use crate::engine::{EngineOptions, FailureDefaults, HeaderFormat, HeaderNames};
use crate::metrics::MetricsOptions;
use crate::platform::client_tls::ClientTls;
use crate::platform::logging::LogOptions;
use crate::platform::telemetry::{ExportProtocol, TracingOptions};
use crate::resilience::{BreakerOptions, LeaseOptions, ResilienceOptions};
use crate::service::grpc::admit::Admission;
use crate::settings::{
    BackendType, ClientTlsSettings, HeaderFormatSetting, ListenerSettings, LogFormat, LogLevel,
    RedisSettings, RedisType, Settings, TracingProtocol,
};
use crate::store::redis::url::Deployment;
use crate::store::redis::RedisAddress;
use crate::xds::{Backoff, XdsOptions, XdsTls};

/// The logs the settings describe (`LOG_LEVEL`, `LOG_FORMAT`); logrus's
/// `panic` and `fatal` levels log errors only, as `error` does.
pub fn log_options(settings: &Settings) -> LogOptions {
    let max = match settings.log.level {
        LogLevel::Trace => tracing::Level::TRACE,
        LogLevel::Debug => tracing::Level::DEBUG,
        LogLevel::Info => tracing::Level::INFO,
        LogLevel::Warn => tracing::Level::WARN,
        _ => tracing::Level::ERROR,
    };
    LogOptions {
        max,
        json: settings.log.format == LogFormat::Json,
    }
}

/// The tracing the settings describe (`TRACING_*`); `None` when
/// `TRACING_ENABLED` is off.
pub fn tracing_options(settings: &Settings) -> Option<TracingOptions> {
    let t = &settings.tracing;
    t.enabled.then(|| TracingOptions {
        service_name: t.service_name.clone(),
        service_namespace: t.service_namespace.clone(),
        service_instance_id: t.service_instance_id.clone(),
        protocol: match t.exporter_protocol {
            TracingProtocol::Http => ExportProtocol::Http,
            TracingProtocol::Grpc => ExportProtocol::Grpc,
        },
        sampling_rate: t.sampling_rate,
    })
}

/// The metrics options the settings describe.
pub fn metrics_options(settings: &Settings) -> Result<MetricsOptions, AppError> {
    let s = &settings.stats;
    Ok(MetricsOptions {
        disable_stats: s.disable_stats,
        use_dog_statsd: s.use_dog_statsd,
        dog_statsd_mogrifiers: s.dog_statsd_mogrifiers.clone(),
        use_statsd: s.use_statsd,
        statsd_host: s.statsd_host.clone(),
        statsd_port: s.statsd_port,
        statsd_protocol: settings
            .statsd_protocol
            .parse()
            .map_err(|e| AppError::Unsupported(format!("STATSD_PROTOCOL: {e}")))?,
        flush_interval: s.flush_interval,
        use_prometheus: s.use_prometheus,
        prometheus_addr: s.prometheus_addr.clone(),
        prometheus_path: s.prometheus_path.clone(),
        prometheus_response_time_as_ms: s.prometheus_response_time_as_milliseconds,
        prometheus_mapper_yaml: s.prometheus_mapper_yaml.clone(),
        extra_tags: s.extra_tags.clone(),
        ..MetricsOptions::default()
    })
}

/// The xDS provider's options from the settings; its TLS files are read
/// now, so that a missing one is a start-up error naming it.
pub(super) fn xds_options(settings: &Settings) -> Result<XdsOptions, AppError> {
    let x = &settings.config_provider.xds;
    let read = |what: &str, path: &str| -> Result<Option<Vec<u8>>, AppError> {
        if path.is_empty() {
            return Ok(None);
        }
        std::fs::read(path)
            .map(Some)
            .map_err(|e| AppError::Unsupported(format!("{what}={path}: {e}")))
    };
    let tls = if x.use_tls {
        let cert = read("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", &x.client_tls_cert)?;
        let key = read("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", &x.client_tls_key)?;
        Some(XdsTls {
            identity: cert.zip(key),
            ca: read("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", &x.server_tls_ca_cert)?,
            server_name: (!x.server_tls_san.is_empty()).then(|| x.server_tls_san.clone()),
        })
    } else {
        None
    };
    Ok(XdsOptions {
        server_url: x.server_url.clone(),
        node_id: x.node_id.clone(),
        node_metadata: crate::xds::parse_node_metadata(&x.node_metadata),
        headers: x
            .additional_headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        tls,
        backoff: Backoff {
            initial: x.backoff_initial_interval,
            max: x.backoff_max_interval,
            random_factor: x.backoff_random_factor,
            jitter: x.backoff_jitter,
        },
        max_message_size: usize::try_from(x.max_msg_size_in_bytes)
            .ok()
            .filter(|n| *n > 0),
        load: crate::config::LoadOptions {
            merge_domains: settings.config_provider.merge_domain_config,
            original_windows_only: original_windows_only(settings),
        },
    })
}

/// Whether the store holds the original's fixed windows only (memcache):
/// the config loader then refuses rules it cannot count.
pub(super) fn original_windows_only(settings: &Settings) -> bool {
    settings.limiter.backend_type == BackendType::Memcache
}

/// What the engine does beyond matching, from the settings.
pub(super) fn engine_options(settings: &Settings) -> EngineOptions {
    let r = &settings.response;
    let limiter = &settings.limiter;
    EngineOptions {
        near_limit_ratio: limiter.near_limit_ratio,
        cache_key_prefix: limiter.cache_key_prefix.clone(),
        expiration_jitter_max_seconds: limiter.expiration_jitter_max_seconds.max(0) as u64,
        stop_increment_when_over_limit: limiter.stop_cache_key_increment_when_overlimit,
        all_or_nothing: limiter.all_or_nothing,
        shadow_mode: r.shadow_mode,
        quota_mode: r.quota_mode,
        response_dynamic_metadata: r.dynamic_metadata,
        decision_metadata: r.decision_metadata,
        local_first_sync_interval: settings.hot_keys.lease.local_first_sync_interval,
        response_headers: r.headers.enabled.then(|| HeaderNames {
            limit: r.headers.limit.clone(),
            remaining: r.headers.remaining.clone(),
            reset: r.headers.reset.clone(),
        }),
        request_headers: r.request_headers.enabled.then(|| HeaderNames {
            limit: r.request_headers.limit.clone(),
            remaining: r.request_headers.remaining.clone(),
            reset: r.request_headers.reset.clone(),
        }),
        header_format: match r.headers.format {
            HeaderFormatSetting::Original => HeaderFormat::Original,
            HeaderFormatSetting::Ietf => HeaderFormat::Ietf,
            HeaderFormatSetting::XRateLimit => HeaderFormat::XRateLimit,
        },
        retry_after_jitter: r.headers.retry_after_jitter,
        max_descriptors: settings.request.max_descriptors,
        max_entries: settings.request.max_entries,
        failure: FailureDefaults {
            mode: settings.store_failure.failure_mode,
            fallback_share: settings.store_failure.fallback_share,
        },
    }
}

/// `GRPC_MAX_CONNECTIONS` (by default the file limit less the HTTP and
/// debug ports' connections and 512 for the stores, config files and logs)
/// and `GRPC_CONNECTION_TIMEOUT`.
pub(super) fn grpc_admission(l: &ListenerSettings) -> Admission {
    let max = l.grpc_max_connections.unwrap_or_else(|| {
        crate::service::grpc::admit::default_max_connections(2 * l.http_max_connections + 512)
    });
    Admission::new(max, l.grpc_connection_timeout)
}

/// The gRPC workers `GRPC_WORKERS` asks for (0: the shared runtime).
/// `auto` is what measured best on a small machine (docs/performance.md):
/// one per core when the process may use two cores or more; on one core
/// the shared runtime, which keeps the light-load latency lower there.
pub(super) fn grpc_workers(settings: &Settings) -> usize {
    match settings.listener.grpc_workers {
        crate::settings::GrpcWorkers::Count(n) => n,
        crate::settings::GrpcWorkers::Auto => match crate::service::grpc::edge::cores() {
            1 => 0,
            cores => cores,
        },
    }
}

/// The store the settings ask for; `None` if a shutdown signal came while
/// waiting for Redis. The memory store comes with its sweeper's guard.
/// `STORE_TIMEOUT` and the breaker settings.
pub(super) fn resilience_options(settings: &Settings) -> ResilienceOptions {
    let f = &settings.store_failure;
    ResilienceOptions {
        timeout: f.timeout,
        breaker: (f.breaker_failures > 0).then_some(BreakerOptions {
            failures: f.breaker_failures,
            cooldown: f.breaker_cooldown,
        }),
    }
}

/// One Redis deployment's settings (main or per-second) as the store reads
/// them; `tls` is shared by both.
pub(super) fn redis_address<'a>(s: &'a RedisSettings, tls: &ClientTlsSettings) -> RedisAddress<'a> {
    RedisAddress {
        deployment: match s.redis_type {
            RedisType::Single => Deployment::Single,
            RedisType::Sentinel => Deployment::Sentinel,
            RedisType::Cluster => Deployment::Cluster,
        },
        socket_type: &s.socket_type,
        url: &s.url,
        auth: &s.auth,
        sentinel_auth: &s.sentinel_auth,
        pool_size: s.pool_size,
        timeout: s.timeout,
        tls: s.tls.then(|| client_tls(tls)),
    }
}

/// A store's `*_TLS_*` files.
pub(super) fn client_tls(s: &ClientTlsSettings) -> ClientTls {
    ClientTls::from_paths(
        &s.ca_cert,
        &s.client_cert,
        &s.client_key,
        s.skip_hostname_verification,
    )
}

/// `LEASE_*`, `LOCAL_FIRST_MAX_OVER`, and `MEMORY_MAX_KEYS` as the most
/// local-first views.
pub(super) fn lease_options(settings: &Settings) -> LeaseOptions {
    let s = &settings.hot_keys.lease;
    LeaseOptions {
        min_rate: s.min_rate,
        duration: s.duration,
        ttl: s.ttl,
        max_share: s.max_share,
        max_over: s.local_first_max_over,
        max_views: settings.memory_max_keys,
    }
}
