//! The health model: named components, all of which must be
//! healthy; seen over HTTP (`/healthcheck`) and gRPC (`grpc.health.v1`,
//! service name `ratelimit`; the empty name always reports SERVING).

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

/// The gRPC health service name that mirrors the overall health.
pub const SERVICE_NAME: &str = "ratelimit";

/// A health component.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Component {
    /// The counter store answered at start-up (the original's `redis`).
    Backend,
    /// A configuration with at least one domain is loaded (only with
    /// `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`).
    Config,
    /// No SIGTERM received yet.
    Sigterm,
}

/// Shared health state. Cloning gives another handle on the same state.
///
/// The component map sits behind a `parking_lot::Mutex`: updates are rare
/// (start-up, reloads, SIGTERM), reads are one lock per health check, and no
/// lock is held across an await; the gRPC reporter is updated after the lock
/// is released.
#[derive(Debug, Clone)]
pub struct Health {
    components: Arc<Mutex<BTreeMap<Component, bool>>>,
    reporter: HealthReporter,
}

impl Health {
    /// The initial state: backend unhealthy (until the store is up), config
    /// unhealthy if tracked, SIGTERM healthy.
    pub fn new(track_config: bool, reporter: HealthReporter) -> Health {
        let mut components = BTreeMap::new();
        components.insert(Component::Backend, false);
        components.insert(Component::Sigterm, true);
        if track_config {
            components.insert(Component::Config, false);
        }
        Health {
            components: Arc::new(Mutex::new(components)),
            reporter,
        }
    }

    /// Whether every component is healthy.
    pub fn is_healthy(&self) -> bool {
        self.components.lock().values().all(|&ok| ok)
    }

    /// Sets a component (ignored for `Config` when it is not tracked) and
    /// publishes the overall status to gRPC health watchers.
    pub async fn set(&self, component: Component, healthy: bool) {
        let overall = {
            let mut map = self.components.lock();
            if let Some(slot) = map.get_mut(&component) {
                *slot = healthy;
            }
            map.values().all(|&ok| ok)
        };
        let status = if overall {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        self.reporter.set_service_status(SERVICE_NAME, status).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn all_components_must_be_healthy() {
        let (reporter, _svc) = tonic_health::server::health_reporter();
        let h = Health::new(true, reporter);
        assert!(!h.is_healthy());
        h.set(Component::Backend, true).await;
        assert!(!h.is_healthy());
        h.set(Component::Config, true).await;
        assert!(h.is_healthy());
        h.set(Component::Sigterm, false).await;
        assert!(!h.is_healthy());
    }

    #[tokio::test]
    async fn untracked_config_is_ignored() {
        let (reporter, _svc) = tonic_health::server::health_reporter();
        let h = Health::new(false, reporter);
        h.set(Component::Config, false).await;
        h.set(Component::Backend, true).await;
        assert!(h.is_healthy());
    }
}
