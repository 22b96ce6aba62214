//! The live configuration: the one slot every provider publishes into (the
//! file watcher, the xDS provider) and the engine, health and the debug
//! page read.

use std::sync::Arc;

use arc_swap::ArcSwapOption;

use super::Config;

/// The configuration the request path reads: `None` until a first load
/// succeeds (the service then answers `no rate limit configuration loaded`).
///
/// Cloning gives another handle on the same slot. Publication is atomic: a
/// reader gets one whole snapshot, and a request that took a snapshot keeps
/// it until it drops the `Arc`, whatever is published meanwhile. Reads are
/// lock-free (`arc_swap`), so the request path never waits for a reload.
#[derive(Debug, Clone, Default)]
pub struct LiveConfig {
    /// The slot. Written only by [`LiveConfig::publish`] (the watcher's task,
    /// or another provider); read by every request.
    slot: Arc<ArcSwapOption<Config>>,
}

impl LiveConfig {
    /// An empty slot: no configuration loaded yet.
    pub fn new() -> LiveConfig {
        LiveConfig::default()
    }

    /// The current snapshot, if any load has succeeded.
    pub fn current(&self) -> Option<Arc<Config>> {
        self.slot.load_full()
    }

    /// Replaces the snapshot for all subsequent readers.
    pub fn publish(&self, config: Arc<Config>) {
        self.slot.store(Some(config));
    }
}
