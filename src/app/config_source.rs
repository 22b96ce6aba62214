//! The configuration's source (the runtime directory or an xDS stream),
//! its first load, and its reloads followed into statistics and health.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::watch;

use super::options::{original_windows_only, xds_options};
use super::{AppError, Signal};
use crate::config::provider::ProviderOptions;
use crate::config::watcher::{ConfigWatcher, ReloadStatus};
use crate::config::{Config, LiveConfig};
use crate::metrics::{RuleLimit, Stats};
use crate::resilience::leases::Fleet;
use crate::service::health::{Component, Health};
use crate::settings::{ConfigType, Settings};
use crate::xds::XdsProvider;

/// Starts the configuration provider and, unless
/// `FORCE_START_WITHOUT_INITIAL_CONFIG`, waits for its first load; `None` if a
/// shutdown signal came first. Returns the source (file watcher or xDS
/// stream) and the task that follows its loads into statistics and health.
pub(super) async fn start_config(
    settings: &Settings,
    live: &LiveConfig,
    stats: &Arc<Stats>,
    health: &Health,
    fleet: Option<Arc<Fleet>>,
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
        settings.stats.rule_limit_gauges,
        fleet.map(|f| (f, settings.hot_keys.lease.local_first_sync_interval)),
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
pub(super) enum ConfigSource {
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

    pub(super) async fn shutdown(self) {
        match self {
            ConfigSource::Files(w) => w.shutdown().await,
            ConfigSource::Xds(x) => x.shutdown().await,
        }
    }
}

/// Turns reload outcomes into the `config_load_*` and `runtime.*` stats,
/// the rules' limit gauges (with `RULE_LIMIT_GAUGES`) and the `config`
/// health component (healthy iff the live config has a domain); and
/// tells the local-first write-back the shortest `sync_interval` of the
/// config and of `LOCAL_FIRST_SYNC_INTERVAL` (the `Option` beside the
/// fleet), so that it counts the instances before the first request of a
/// local-first rule (which is then decided from its view).
async fn follow_reloads(
    mut status: watch::Receiver<ReloadStatus>,
    stats: Arc<Stats>,
    health: Health,
    live: LiveConfig,
    limit_gauges: bool,
    fleet: Option<(Arc<Fleet>, Option<std::time::Duration>)>,
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
                if limit_gauges {
                    stats.configured_limits(&rule_limits(&config));
                }
                if let Some((fleet, setting)) = &fleet {
                    let shortest = shortest_sync_interval(&config)
                        .into_iter()
                        .chain(*setting)
                        .min();
                    if let Some(interval) = shortest {
                        fleet.note(interval);
                    }
                }
            }
        }
        seen = now;
        if status.changed().await.is_err() {
            return;
        }
    }
}

/// The shortest `sync_interval` a rule of `config` sets.
fn shortest_sync_interval(config: &Config) -> Option<std::time::Duration> {
    config
        .tree()
        .rules()
        .into_iter()
        .flat_map(|rule| {
            let own = rule.sync_interval;
            own.into_iter()
                .chain(rule.limits.iter().filter_map(|l| l.sync_interval))
        })
        .min()
}

/// Every limited rule's configured limit, for its gauges: an original
/// rule's `requests_per_unit` per unit, or the first of its `rate_limits`
/// (the one its descriptor statuses name) with its window or period. An
/// `unlimited` rule has no limit to show.
fn rule_limits(config: &Config) -> Vec<RuleLimit> {
    config
        .tree()
        .rules()
        .into_iter()
        .filter(|rule| !rule.unlimited)
        .map(|rule| {
            let (limit, window_seconds) = match rule.limits.first() {
                Some(l) => (l.limiter.limit(), l.limiter.window_seconds()),
                None => (
                    u64::from(rule.requests_per_unit),
                    rule.unit.seconds().unwrap_or(0),
                ),
            };
            RuleLimit {
                stats_key: rule.load_key.clone(),
                limit,
                window_seconds,
            }
        })
        .collect()
}
