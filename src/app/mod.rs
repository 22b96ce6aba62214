//! Wiring and lifecycle: settings in, a running service out, until a
//! shutdown signal.
//!
//! Start-up order keeps the original's observable consequences: the store is
//! created and the first configuration event (success or failure) is awaited
//! (unless `FORCE_START_WITHOUT_INITIAL_CONFIG`) before any port listens.
//!
//! Shutdown fixes the original's hang: SIGTERM first fails the
//! health check, then waits the drain window so load balancers stop sending,
//! then stops accepting and lets in-flight calls finish, with a hard deadline
//! after which remaining connections (health `Watch` streams included) are
//! cut.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::config::LiveConfig;
use crate::engine::{Engine, LocalCache};
use crate::hotkeys::TopKeys;
use crate::limiter::{Clock, SystemClock};
use crate::metrics::{LocalCacheGauges, MetricsHandle, Stats};
use crate::platform::workers::Workers;
use crate::quota::{QuotaOptions, QuotaParts, Quotas};
use crate::resilience;
use crate::service::grpc::rlqs::QuotaService;
use crate::service::health::{Component, Health};
use crate::service::http::debug::HotKeysView;
use crate::service::http::server::HttpLimits;
use crate::settings::Settings;

mod config_source;
mod listeners;
mod options;
mod servers;
mod stack;

use config_source::start_config;
use listeners::{serve_prometheus, Listeners};
use options::{engine_options, grpc_admission, grpc_workers};
pub use options::{log_options, metrics_options, tracing_options};
use servers::{finish_servers, grpc_router, serve_grpc, spawn_server};
use stack::build_store;

/// grpc-go's default maximum received message size.
pub const MAX_GRPC_MESSAGE: usize = 4 * 1024 * 1024;

/// Why the service could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// A setting names something this build does not provide.
    #[error("{0}")]
    Unsupported(String),
    /// A listener could not be opened.
    #[error("cannot listen on {what} {addr}: {source}")]
    Listen {
        /// Which listener.
        what: &'static str,
        /// The address.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// The store could not be reached.
    #[error("{0}")]
    Store(String),
    /// The config watcher failed.
    #[error("config watcher: {0}")]
    Watch(#[from] crate::config::watcher::WatchError),
    /// A server failed while running.
    #[error("{0}")]
    Serve(String),
}

/// What ended the service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM: fail health, drain, then stop.
    Terminate,
    /// SIGINT or SIGHUP: stop now (gracefully, within the deadline).
    Interrupt,
}

/// Timings of a graceful shutdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShutdownTimings {
    /// After SIGTERM, how long health fails before listeners close.
    pub drain: Duration,
    /// How long in-flight calls may take before connections are cut.
    pub deadline: Duration,
}

impl Default for ShutdownTimings {
    fn default() -> Self {
        ShutdownTimings {
            drain: Duration::ZERO,
            deadline: Duration::from_secs(15),
        }
    }
}

/// The addresses the service listens on (useful with port 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundAddrs {
    /// The gRPC listener (`None` with `GRPC_UDS`).
    pub grpc: Option<SocketAddr>,
    /// The main HTTP port.
    pub http: SocketAddr,
    /// The debug port.
    pub debug: SocketAddr,
}

/// Runs the service until `shutdown` resolves, recording into the installed
/// `metrics`; `ready` receives the bound addresses once every listener is
/// open. The Prometheus port (`USE_PROMETHEUS`) opens first, before the
/// store is reached, as in the original, and closes when this returns.
pub async fn run(
    settings: Settings,
    timings: ShutdownTimings,
    metrics: MetricsHandle,
    ready: Option<tokio::sync::oneshot::Sender<BoundAddrs>>,
    shutdown: impl Future<Output = Signal>,
) -> Result<(), AppError> {
    let _prometheus = serve_prometheus(&settings, &metrics).await?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let (reporter, health_service) = tonic_health::server::health_reporter();
    let health = Health::new(
        settings.response.healthy_with_at_least_one_config_loaded,
        reporter,
    );
    let service_stats = Arc::new(Stats::new());

    // A signal during start-up (waiting for Redis or the first config) ends
    // the start-up cleanly (the original panics or ignores it).
    let shutdown = futures::FutureExt::shared(Box::pin(shutdown));

    // The gRPC workers first: the store may keep connections on each.
    let workers = match grpc_workers(&settings) {
        0 => Workers::none(),
        n => Workers::start(n).map_err(|e| AppError::Unsupported(e.to_string()))?,
    };

    // The store.
    let Some(built) = build_store(&settings, &clock, &health, &workers, shutdown.clone()).await?
    else {
        return Ok(());
    };
    let store = Arc::clone(&built.store);
    health.set(Component::Backend, true).await;

    // The configuration.
    let live = LiveConfig::new();
    let Some((config_source, status_task)) = start_config(
        &settings,
        &live,
        &service_stats,
        &health,
        built.fleet(),
        shutdown.clone(),
    )
    .await?
    else {
        return Ok(());
    };

    let local_cache = match settings.limiter.local_cache_size_in_bytes {
        n if n > 0 => Some(LocalCache::new(n as u64)),
        _ => None,
    };
    let mut engine = Engine::new(
        live.clone(),
        store,
        Arc::clone(&clock),
        engine_options(&settings),
        local_cache,
        service_stats,
    )
    .with_placement(Arc::clone(&built.placement));
    let memory_keys = built.memory.clone();
    let hot_keys = (settings.hot_keys.top_k > 0).then(|| HotKeysView {
        top: Arc::new(TopKeys::new(settings.hot_keys.top_k)),
        leases: built.leases.as_ref().map(|l| l.table()),
        clock: Arc::clone(&clock),
    });
    let audit =
        crate::audit::Audit::new(settings.audit.sample, settings.audit.max_limit).map(|a| {
            Arc::new(a.with_local_first_max_over(settings.hot_keys.lease.local_first_max_over))
        });
    if let Some(audit) = &audit {
        engine = engine.with_audit(Arc::clone(audit));
    }
    // The per-tenant overrides: read once before serving, so that a
    // restarted instance applies the book's at its first request.
    let overrides = Arc::new(crate::overrides::Overrides::new(
        Arc::clone(&built.store),
        &settings.limiter.cache_key_prefix,
        settings.overrides.max_entries,
        crate::overrides::OverrideTable::new(),
    ));
    engine = engine.with_overrides(Arc::clone(overrides.table()));
    let _ = overrides.refresh().await;
    let _override_refresh = resilience::AbortOnDrop(overrides.spawn_refresher());
    if let Some(view) = &hot_keys {
        engine = engine.with_top_keys(Arc::clone(&view.top));
        let (view, k) = (view.clone(), settings.hot_keys.top_k);
        metrics.add_generator(move || crate::metrics::record_hot_keys(&view.rates_by_rank(), k));
    }
    let engine = Arc::new(engine);
    if engine.local_cache().is_some() {
        let engine = Arc::downgrade(&engine);
        metrics.add_generator(move || {
            if let Some(cache) = engine.upgrade().as_ref().and_then(|e| e.local_cache()) {
                crate::metrics::record_local_cache(&local_cache_gauges(cache));
            }
        });
    }

    // Listeners, opened only now (see the module doc).
    let l = &settings.listener;
    let (listeners, addrs) = Listeners::bind(l).await?;

    // One signal fans out to every server.
    let (stop_tx, stop_rx) = watch::channel(false);
    // RLQS streams are told at the signal, before the drain.
    let (stopping_tx, stopping_rx) = watch::channel(false);
    let quotas = Quotas::new(QuotaParts {
        config: engine.config().clone(),
        stats: Arc::clone(engine.stats()),
        store: Arc::clone(&built.store),
        placement: Arc::clone(&built.placement),
        clock: Arc::clone(&clock),
        options: QuotaOptions {
            ttl: settings.quota.assignment_ttl,
            idle: settings.quota.idle_timeout,
            sync: settings.quota.sync_interval,
            key_prefix: settings.limiter.cache_key_prefix.clone(),
            failure: engine.options().failure,
            ..QuotaOptions::default()
        },
        instance: instance_name(),
    });
    let _quota_sync = resilience::AbortOnDrop(quotas.spawn_sync());
    let quota = QuotaService::new(quotas, stopping_rx);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|&s| s).await;
    };

    let router = {
        let (l, engine) = (l.clone(), Arc::clone(&engine));
        let large_lane = workers.large().cloned();
        Arc::new(move || {
            grpc_router(
                &l,
                Arc::clone(&engine),
                large_lane.clone(),
                quota.clone(),
                health_service.clone(),
            )
        })
    };
    let (grpc_task, _cert_watch) = serve_grpc(
        router,
        listeners.grpc,
        &l.grpc_tls,
        &workers,
        Arc::new(grpc_admission(l)),
        stop_rx.clone(),
    )?;
    let http_limits = HttpLimits {
        max_connections: l.http_max_connections,
        header_timeout: l.http_header_timeout,
    };
    let http_task = spawn_server(crate::service::http::server::serve(
        listeners.http,
        crate::service::http::router(Arc::clone(&engine), health.clone()),
        http_limits,
        "HTTP port",
        crate::metrics::HTTP_CONNECTION_REFUSED,
        stopped(stop_rx.clone()),
    ));
    let debug_task = spawn_server(crate::service::http::server::serve(
        listeners.debug,
        crate::service::http::debug::router(
            Arc::clone(&engine),
            {
                let metrics = metrics.clone();
                Arc::new(move || metrics.render_stats())
            },
            hot_keys,
            memory_keys,
        )
        .merge(crate::service::http::overrides::router(
            overrides,
            Arc::clone(&engine),
            (!settings.overrides.admin_token_file.is_empty())
                .then(|| std::path::PathBuf::from(&settings.overrides.admin_token_file)),
        )),
        http_limits,
        "debug port",
        crate::metrics::DEBUG_CONNECTION_REFUSED,
        stopped(stop_rx.clone()),
    ));
    if let Some(ready) = ready {
        let _ = ready.send(addrs);
    }

    let signal = shutdown.await;
    tracing::warn!("shutting down ({signal:?})");
    let _ = stopping_tx.send(true);
    if signal == Signal::Terminate {
        health.set(Component::Sigterm, false).await;
        tokio::time::sleep(timings.drain).await;
    }
    let _ = stop_tx.send(true);
    finish_servers(
        [
            ("gRPC", grpc_task),
            ("HTTP", http_task),
            ("debug", debug_task),
        ],
        timings.deadline,
    )
    .await;
    status_task.abort();
    config_source.shutdown().await;
    if let Some(leases) = &built.leases {
        let returned = leases.return_all().await;
        if returned > 0 {
            tracing::info!(tokens = returned, "returned unspent leases to the store");
        }
    }
    Ok(())
}

fn local_cache_gauges(cache: &LocalCache) -> LocalCacheGauges {
    use std::sync::atomic::Ordering::Relaxed;
    let hits = cache.counts().hits.load(Relaxed);
    let misses = cache.counts().misses.load(Relaxed);
    LocalCacheGauges {
        hit_count: hits,
        miss_count: misses,
        lookup_count: hits + misses,
        entry_count: cache.len() as u64,
        ..LocalCacheGauges::default()
    }
}

/// This instance's name among every instance that shares the store: the
/// host's (`HOSTNAME`, as Kubernetes sets it), this process's and its
/// start, so that a restarted pod is a new instance.
fn instance_name() -> String {
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_nanos();
    let host = std::env::var("HOSTNAME").unwrap_or_default();
    format!("{host}/{}/{started:x}", std::process::id())
}

#[cfg(test)]
mod tests;
