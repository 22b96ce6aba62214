//! The store the settings name (memory, Redis, memcache), connected and
//! wrapped in its layers, with what keeps its background tasks alive.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::options::{client_tls, lease_options, redis_address, resilience_options};
use super::{AppError, Signal};
use crate::limiter::Clock;
use crate::platform::workers::Workers;
use crate::resilience::{self, Leases};
use crate::service::health::{Component, Health};
use crate::settings::{BackendType, Settings};
use crate::store::memcache::{MemcacheOptions, MemcacheStore};
use crate::store::memory::SweeperGuard;
use crate::store::redis::{RedisOptions, StartupRetry};
use crate::store::{InProcess, MemoryStore, Placement, Store};

/// The store the engine calls, with what keeps its background tasks alive.
pub(super) struct BuiltStore {
    /// The whole stack; RLQS's boards are its [`Job::Boards`](crate::store::Job::Boards).
    pub(super) store: Arc<dyn Store>,
    /// The lease layer whose table `/hotkeys` shows and whose leases go
    /// back at shutdown (none on the memory store, whose state is already
    /// local, or on memcache, which leases nothing).
    pub(super) leases: Option<Arc<Leases<Arc<dyn Store>>>>,
    /// Where the store keeps a key.
    pub(super) placement: Arc<dyn Placement>,
    /// The memory store, for `/keys` (none on the other backends).
    pub(super) memory: Option<Arc<MemoryStore>>,
    _sweeper: Option<SweeperGuard>,
    _wrapped: resilience::Wrapped,
    /// `MEMCACHE_SRV_REFRESH`'s task.
    _refresh: Option<crate::store::memcache::srv::RefreshGuard>,
}

impl BuiltStore {
    /// What the local-first write-back knows of the fleet: any store
    /// across the network (memcache's included) has one.
    pub(super) fn fleet(&self) -> Option<Arc<resilience::leases::Fleet>> {
        self._wrapped.leases.as_ref().map(|l| l.fleet())
    }

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
        leases: lease_options(settings),
    }
}

pub(super) async fn build_store(
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
