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

use crate::quota::{QuotaOptions, QuotaParts, Quotas};
use crate::service::rlqs::QuotaService;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;

use crate::config::provider::ProviderOptions;
use crate::config::watcher::{ConfigWatcher, ReloadStatus};
use crate::config::LiveConfig;
use crate::engine::{Engine, LocalCache};
use crate::hotkeys::TopKeys;
use crate::limiter::{Clock, SystemClock};
use crate::metrics::{LocalCacheGauges, MetricsHandle, Stats};
use crate::resilience::{self, Leases};
use crate::service::admit::Admission;
use crate::service::debug::HotKeysView;
use crate::service::edge::GrpcListener;
use crate::service::health::{Component, Health};
use crate::service::http_server::HttpLimits;
use crate::service::rls::RlsServer;
use crate::settings::{BackendType, ConfigType, Settings};
use crate::store::memcache::{MemcacheOptions, MemcacheStore};
use crate::store::memory::SweeperGuard;
use crate::store::redis::{RedisOptions, StartupRetry};
use crate::store::{InProcess, MemoryStore, Placement, Store};
use crate::workers::Workers;
use crate::xds::XdsProvider;

mod options;

pub use options::metrics_options;
use options::{
    client_tls, engine_options, grpc_admission, grpc_workers, lease_options, original_windows_only,
    redis_address, resilience_options, xds_options,
};

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

/// The Prometheus listener (`USE_PROMETHEUS`); it stops when dropped.
#[derive(Debug)]
struct PrometheusListener {
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// Opens the Prometheus port (`PROMETHEUS_ADDR`, `PROMETHEUS_PATH`) when
/// `USE_PROMETHEUS` asks for it, serving `metrics` until the returned
/// listener is dropped.
async fn serve_prometheus(
    settings: &Settings,
    metrics: &MetricsHandle,
) -> Result<Option<PrometheusListener>, AppError> {
    if !settings.stats.use_prometheus {
        return Ok(None);
    }
    let addr = crate::metrics::listen_addr(&settings.stats.prometheus_addr);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|source| AppError::Listen {
            what: "Prometheus",
            addr: addr.clone(),
            source,
        })?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (metrics, path) = (metrics.clone(), settings.stats.prometheus_path.clone());
    tokio::spawn(async move {
        let stopped = async {
            let _ = stopped.await;
        };
        if let Err(e) = metrics.serve_prometheus(listener, path, stopped).await {
            tracing::error!("Prometheus listener: {e}");
        }
    });
    Ok(Some(PrometheusListener { _stop: stop }))
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
    let Some((config_source, status_task)) =
        start_config(&settings, &live, &service_stats, &health, shutdown.clone()).await?
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
        crate::audit::Audit::new(settings.audit.sample, settings.audit.max_limit).map(Arc::new);
    if let Some(audit) = &audit {
        engine = engine.with_audit(Arc::clone(audit));
    }
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
            failure_mode: settings.store_failure.failure_mode,
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
        Arc::new(move || {
            grpc_router(
                &l,
                Arc::clone(&engine),
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
    let http_task = spawn_server(crate::service::http_server::serve(
        listeners.http,
        crate::service::http::router(Arc::clone(&engine), health.clone()),
        http_limits,
        "HTTP port",
        crate::metrics::HTTP_CONNECTION_REFUSED,
        stopped(stop_rx.clone()),
    ));
    let debug_task = spawn_server(crate::service::http_server::serve(
        listeners.debug,
        crate::service::debug::router(
            live,
            {
                let metrics = metrics.clone();
                Arc::new(move || metrics.render_stats())
            },
            hot_keys,
            audit,
            memory_keys,
        ),
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

/// Lets the servers (told to stop) finish their in-flight calls for at most
/// `deadline`, then cuts what is left; logs how each ended.
async fn finish_servers(servers: [(&'static str, ServerTask); 3], deadline: Duration) {
    let aborts: Vec<_> = servers.iter().map(|(_, t)| t.abort_handle()).collect();
    let all = futures::future::join_all(servers.into_iter().map(|(what, task)| async move {
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!("{what} server: {e}"),
            Err(e) => tracing::error!("{what} server task: {e}"),
        }
    }));
    if tokio::time::timeout(deadline, all).await.is_err() {
        tracing::warn!("in-flight calls still open after {deadline:?}; closing them");
        for a in aborts {
            a.abort();
        }
    }
}

/// Starts the configuration provider and, unless
/// `FORCE_START_WITHOUT_INITIAL_CONFIG`, waits for its first load; `None` if a
/// shutdown signal came first. Returns the source (file watcher or xDS
/// stream) and the task that follows its loads into statistics and health.
async fn start_config(
    settings: &Settings,
    live: &LiveConfig,
    stats: &Arc<Stats>,
    health: &Health,
    shutdown: impl Future<Output = Signal>,
) -> Result<Option<(ConfigSource, tokio::task::JoinHandle<()>)>, AppError> {
    let (source, status) = match settings.config_provider.config_type {
        ConfigType::File => {
            let rt = &settings.config_provider.runtime;
            let opts = ProviderOptions {
                runtime_root: PathBuf::from(&rt.root),
                subdirectory: rt.subdirectory.clone(),
                app_directory: rt.app_directory.clone(),
                ignore_dotfiles: rt.ignore_dot_files,
                watch_root: rt.watch_root,
                merge_domains: settings.config_provider.merge_domain_config,
                original_windows_only: original_windows_only(settings),
            };
            let (watcher, status) = ConfigWatcher::start(opts, live.clone())?;
            (ConfigSource::Files(watcher), status)
        }
        ConfigType::GrpcXdsSotw => {
            let (provider, status) = XdsProvider::start(xds_options(settings)?, live.clone());
            (ConfigSource::Xds(provider), status)
        }
    };
    let status_task = tokio::spawn(follow_reloads(
        status,
        Arc::clone(stats),
        health.clone(),
        live.clone(),
    ));
    if !settings.config_provider.force_start_without_initial_config {
        tokio::select! {
            loaded = source.first_load() => { loaded?; }
            _ = shutdown => {
                status_task.abort();
                source.shutdown().await;
                return Ok(None);
            }
        }
        // Health knows of the first config before any listener opens (the
        // reload follower may not have run yet).
        if let Some(config) = live.current() {
            health
                .set(Component::Config, config.tree().domain_count() > 0)
                .await;
        }
    }
    Ok(Some((source, status_task)))
}

/// Where the configuration comes from (`CONFIG_TYPE`); both publish into
/// the one [`LiveConfig`].
enum ConfigSource {
    Files(ConfigWatcher),
    Xds(XdsProvider),
}

impl ConfigSource {
    /// Waits for the first load; a file provider's fatal error.
    async fn first_load(&self) -> Result<(), AppError> {
        match self {
            ConfigSource::Files(w) => w.first_load().await.map(drop).map_err(AppError::from),
            ConfigSource::Xds(x) => {
                x.first_load().await;
                Ok(())
            }
        }
    }

    async fn shutdown(self) {
        match self {
            ConfigSource::Files(w) => w.shutdown().await,
            ConfigSource::Xds(x) => x.shutdown().await,
        }
    }
}

/// The three listeners, bound.
struct Listeners {
    debug: TcpListener,
    http: TcpListener,
    grpc: GrpcListener,
}

impl Listeners {
    /// Binds debug, HTTP and gRPC (TCP or `GRPC_UDS`) and logs where, as
    /// the original does.
    async fn bind(
        l: &crate::settings::ListenerSettings,
    ) -> Result<(Listeners, BoundAddrs), AppError> {
        let debug = bind("debug", &l.debug_host, l.debug_port).await?;
        let http = bind("HTTP", &l.host, l.port).await?;
        let grpc = if l.grpc_uds.is_empty() {
            GrpcListener::Tcp(bind("gRPC", &l.grpc_host, l.grpc_port).await?)
        } else {
            GrpcListener::Unix(bind_unix(&l.grpc_uds)?)
        };
        let addrs = BoundAddrs {
            grpc: match &grpc {
                GrpcListener::Tcp(t) => t.local_addr().ok(),
                GrpcListener::Unix(_) => None,
            },
            http: local_addr(&http),
            debug: local_addr(&debug),
        };
        tracing::warn!("Listening for debug on '{}'", addrs.debug);
        match &addrs.grpc {
            Some(a) => tracing::warn!("Listening for gRPC on '{a}'"),
            None => tracing::warn!("Listening for gRPC on unix socket '{}'", l.grpc_uds),
        }
        tracing::warn!("Listening for HTTP on '{}'", addrs.http);
        Ok((Listeners { debug, http, grpc }, addrs))
    }
}

/// The gRPC services (rate limit and health) with grpc-go's server
/// defaults, which the original runs with: a keepalive ping after 2 h idle,
/// answered within 20 s; and at most `GRPC_MAX_CONCURRENT_STREAMS` streams
/// per connection (grpc-go advertises no limit), so a client that never
/// reads its answers holds at most that many of them.
/// How many request bytes a client may send on one gRPC stream before the
/// server reads them (HTTP/2 `SETTINGS_INITIAL_WINDOW_SIZE`): an RLS
/// request is a few hundred bytes; a larger one is read in turns.
const GRPC_STREAM_WINDOW: u32 = 64 * 1024;

/// How many unread request bytes one gRPC connection may hold in all (the
/// connection's flow-control window; hyper's default is 1 MiB).
const GRPC_CONNECTION_WINDOW: u32 = 256 * 1024;

/// The largest header block a gRPC request may carry
/// (`SETTINGS_MAX_HEADER_LIST_SIZE`).
const GRPC_MAX_HEADER_LIST: u32 = 16 * 1024;

fn grpc_router(
    l: &crate::settings::ListenerSettings,
    engine: Arc<Engine>,
    quota: QuotaService,
    health_service: tonic_health::pb::health_server::HealthServer<
        impl tonic_health::pb::health_server::Health,
    >,
) -> GrpcRouter {
    tonic::transport::Server::builder()
        .max_connection_age(l.grpc_max_connection_age)
        .max_connection_age_grace(l.grpc_max_connection_age_grace)
        .http2_keepalive_interval(Some(Duration::from_secs(2 * 3600)))
        .http2_keepalive_timeout(Some(Duration::from_secs(20)))
        .max_concurrent_streams(Some(l.grpc_max_concurrent_streams))
        .initial_stream_window_size(GRPC_STREAM_WINDOW)
        .initial_connection_window_size(GRPC_CONNECTION_WINDOW)
        .http2_max_header_list_size(GRPC_MAX_HEADER_LIST)
        .layer(crate::service::grpc_metrics::GrpcMetricsLayer)
        .add_service(RlsServer::new(engine, MAX_GRPC_MESSAGE))
        .add_service(quota.server(MAX_GRPC_MESSAGE))
        .add_service(health_service)
}

/// The gRPC server task on `listener`, served by `workers` single-threaded
/// runtimes (see [`crate::service::edge`]), with TLS when
/// `GRPC_SERVER_USE_TLS` (and the watcher that reloads a rotated
/// certificate, to keep alive).
fn serve_grpc(
    router: Arc<dyn Fn() -> GrpcRouter + Send + Sync>,
    listener: GrpcListener,
    tls: &crate::settings::GrpcTlsSettings,
    workers: &Workers,
    admission: Arc<Admission>,
    stop: watch::Receiver<bool>,
) -> Result<GrpcServing, AppError> {
    let (tls_config, cert_watch) = if tls.enabled {
        let opts = crate::service::tls::TlsOptions {
            cert: PathBuf::from(&tls.server_cert),
            key: PathBuf::from(&tls.server_key),
            client_ca: (!tls.client_ca_cert.is_empty()).then(|| PathBuf::from(&tls.client_ca_cert)),
            client_san: (!tls.client_san.is_empty()).then(|| tls.client_san.clone()),
        };
        let (config, cert) = crate::service::tls::server_config(&opts)
            .map_err(|e| AppError::Unsupported(e.to_string()))?;
        let watch = crate::service::tls::watch_certificate(cert)
            .map_err(|e| AppError::Unsupported(format!("watching the TLS certificate: {e}")))?;
        (Some(config), Some(watch))
    } else {
        (None, None)
    };
    let unsupported = |e: crate::service::edge::EdgeError| AppError::Unsupported(e.to_string());
    let task = if workers.is_empty() {
        spawn_server(
            crate::service::edge::serve_shared(listener, tls_config, router(), admission, stop)
                .map_err(unsupported)?,
        )
    } else {
        spawn_server(
            crate::service::edge::serve(workers, listener, tls_config, router, admission, stop)
                .map_err(unsupported)?,
        )
    };
    Ok((task, cert_watch))
}

/// The gRPC services behind the call-statistics layer.
type GrpcRouter = crate::service::edge::Router;

/// The gRPC server's task and, with TLS, its certificate watcher.
type GrpcServing = (ServerTask, Option<notify::RecommendedWatcher>);

/// A server running on its own task; its error as text.
type ServerTask = tokio::task::JoinHandle<Result<(), String>>;

fn spawn_server<E: std::fmt::Display>(
    serve: impl Future<Output = Result<(), E>> + Send + 'static,
) -> ServerTask {
    tokio::spawn(async move { serve.await.map_err(|e| e.to_string()) })
}

/// The store the engine calls, with what keeps its background tasks alive.
struct BuiltStore {
    /// The whole stack; RLQS's boards are its [`Store::share`].
    store: Arc<dyn Store>,
    /// The lease layer whose table `/hotkeys` shows and whose leases go
    /// back at shutdown (none on the memory store, whose state is already
    /// local, or on memcache, which leases nothing).
    leases: Option<Arc<Leases<Arc<dyn Store>>>>,
    /// Where the store keeps a key.
    placement: Arc<dyn Placement>,
    /// The memory store, for `/keys` (none on the other backends).
    memory: Option<Arc<MemoryStore>>,
    _sweeper: Option<SweeperGuard>,
    _wrapped: resilience::Wrapped,
    /// `MEMCACHE_SRV_REFRESH`'s task.
    _refresh: Option<crate::store::memcache::srv::RefreshGuard>,
}

impl BuiltStore {
    /// `store` in the layers it needs ([`resilience::wrap`]); `leased`:
    /// whether `/hotkeys` and shutdown see its lease layer.
    fn wrapped(
        store: impl Store + 'static,
        placement: Arc<dyn Placement>,
        layers: resilience::Layers,
        clock: &Arc<dyn Clock>,
        leased: bool,
    ) -> BuiltStore {
        let wrapped = resilience::wrap(store, layers, Arc::clone(clock));
        BuiltStore {
            store: Arc::clone(&wrapped.store),
            placement,
            leases: wrapped.leases.clone().filter(|_| leased),
            memory: None,
            _sweeper: None,
            _wrapped: wrapped,
            _refresh: None,
        }
    }
}

/// The whole stack, for a store across the network.
fn remote(settings: &Settings) -> resilience::Layers {
    resilience::Layers::Remote {
        options: resilience_options(settings),
        leases: lease_options(&settings.hot_keys.lease),
    }
}

async fn build_store(
    settings: &Settings,
    clock: &Arc<dyn Clock>,
    health: &Health,
    workers: &Workers,
    shutdown: impl Future<Output = Signal>,
) -> Result<Option<BuiltStore>, AppError> {
    let built = match settings.limiter.backend_type {
        BackendType::Memory => {
            let store = Arc::new(
                MemoryStore::with_max_keys(Arc::clone(clock), settings.memory_max_keys)
                    .reporting_keys(),
            );
            let sweeper = store.spawn_sweeper(Duration::from_secs(1));
            let mut built = BuiltStore::wrapped(
                Arc::clone(&store),
                Arc::new(InProcess),
                resilience::Layers::InProcess,
                clock,
                false,
            );
            built.memory = Some(store);
            built._sweeper = Some(sweeper);
            built
        }
        BackendType::Redis => {
            let r = &settings.redis;
            let main = RedisOptions::parse(&redis_address(&r.main, &r.tls), "REDIS_URL")
                .map_err(|e| AppError::Unsupported(e.to_string()))?;
            let per_second = if r.per_second_enabled {
                Some(
                    RedisOptions::parse(
                        &redis_address(&r.per_second, &r.tls),
                        "REDIS_PERSECOND_URL",
                    )
                    .map_err(|e| AppError::Unsupported(e.to_string()))?,
                )
            } else {
                None
            };
            for (name, b) in [
                (
                    "REDIS_POOL_ON_EMPTY_BEHAVIOR",
                    r.main.pool_on_empty_behavior,
                ),
                (
                    "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
                    r.per_second.pool_on_empty_behavior,
                ),
            ] {
                if b != crate::settings::PoolOnEmptyBehavior::Wait {
                    // The original refuses these at start-up too.
                    return Err(AppError::Unsupported(format!(
                        "{name}={b:?} is not supported; use WAIT (the default)"
                    )));
                }
            }
            let retry = StartupRetry {
                initial: r.startup_initial_interval,
                max: r.startup_max_interval,
                max_elapsed: r.startup_max_elapsed_time,
            };
            let connecting =
                crate::store::redis::connect(&main, per_second.as_ref(), retry, workers);
            let store = tokio::select! {
                s = connecting => s.map_err(|e| AppError::Store(e.message))?,
                _ = shutdown => return Ok(None),
            };
            if r.health_check_active_connection {
                let health = health.clone();
                let handle = tokio::runtime::Handle::current();
                store.watch_connections(Arc::new(move |up| {
                    let health = health.clone();
                    handle.spawn(async move { health.set(Component::Backend, up).await });
                }));
            }
            let placement = store.placement();
            BuiltStore::wrapped(store, placement, remote(settings), clock, true)
        }
        BackendType::Memcache => {
            if settings.limiter.all_or_nothing {
                // Decided-then-counted windows need an atomic step memcache
                // does not have.
                return Err(AppError::Unsupported(format!(
                    "ALL_OR_NOTHING=true: {}",
                    crate::store::memcache::ONLY_COUNTERS
                )));
            }
            let m = &settings.memcache;
            let servers = match (m.host_port.is_empty(), m.srv.is_empty()) {
                (false, false) => {
                    return Err(AppError::Unsupported(
                        "MEMCACHE_HOST_PORT and MEMCACHE_SRV are both set; set one".into(),
                    ))
                }
                (true, false) => crate::store::memcache::srv::resolve(&m.srv)
                    .await
                    .map_err(|e| AppError::Store(e.message))?,
                _ => m.host_port.clone(),
            };
            let options = MemcacheOptions {
                servers,
                max_idle: usize::try_from(m.max_idle_conns).unwrap_or(2),
                tls: m.tls_enabled.then(|| client_tls(&m.tls)),
            };
            let store = MemcacheStore::new(&options).map_err(|e| AppError::Store(e.message))?;
            let refresh = (!m.srv.is_empty() && !m.srv_refresh.is_zero()).then(|| {
                crate::store::memcache::srv::spawn_refresh(
                    store.clone(),
                    m.srv.clone(),
                    m.srv_refresh,
                )
            });
            // Memcache has no atomic take: nothing is leased.
            let placement = store.placement();
            let mut built = BuiltStore::wrapped(store, placement, remote(settings), clock, false);
            built._refresh = refresh;
            built
        }
    };
    Ok(Some(built))
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

fn local_addr(l: &TcpListener) -> SocketAddr {
    l.local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
}

async fn bind(what: &'static str, host: &str, port: u16) -> Result<TcpListener, AppError> {
    let addr = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    TcpListener::bind(&addr)
        .await
        .map_err(|source| AppError::Listen { what, addr, source })
}

/// A unix socket for gRPC; a stale socket file from an earlier run is
/// removed first (the original fails to start).
fn bind_unix(path: &str) -> Result<UnixListener, AppError> {
    use std::os::unix::fs::FileTypeExt;
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if meta.file_type().is_socket() {
            let _ = std::fs::remove_file(path);
        }
    }
    UnixListener::bind(path).map_err(|source| AppError::Listen {
        what: "gRPC unix socket",
        addr: path.to_string(),
        source,
    })
}

/// Turns reload outcomes into the `config_load_*` and `runtime.*` stats and
/// the `config` health component (healthy iff the live config has a domain).
async fn follow_reloads(
    mut status: watch::Receiver<ReloadStatus>,
    stats: Arc<Stats>,
    health: Health,
    live: LiveConfig,
) {
    let mut seen = ReloadStatus::default();
    loop {
        let now = status.borrow_and_update().clone();
        for _ in seen.successes..now.successes {
            stats.config_load(true);
        }
        for _ in seen.failures..now.failures {
            stats.config_load(false);
        }
        if now.successes > seen.successes {
            health.set(Component::Config, now.domains > 0).await;
            if let Some(config) = live.current() {
                stats.config_files(config.files().len());
            }
        }
        seen = now;
        if status.changed().await.is_err() {
            return;
        }
    }
}
