//! Hot reload of the FILE provider's configuration.
//!
//! A reload is a value on a channel: file-system events become a debounced
//! reload; the reload (walk, read, parse, validate) runs on a blocking thread,
//! never on the notify thread nor on the request path; a success is published
//! as one whole [`Config`] snapshot through [`LiveConfig`], a failure keeps the
//! last good one; either way the outcome is a new [`ReloadStatus`] on a
//! [`tokio::sync::watch`] channel.
//!
//! # Triggers (a deliberate improvement)
//!
//! The original reloads only on a swap of `RUNTIME_ROOT` in watch-root mode,
//! and only on changes directly inside the config directory in directory mode
//! (renames excluded). This watcher reloads, in both modes, on every way
//! people update configuration: a symbolic-link swap of `RUNTIME_ROOT`, a
//! Kubernetes ConfigMap update (the `..data` link swap), an in-place write, an
//! atomic rename into the directory (`mv tmp x.yaml`), create, delete, chmod,
//! and any of these in sub-directories, and the (re)creation of any directory
//! on the way from the parent of `RUNTIME_ROOT` to the config directory.
//!
//! # How watching works
//!
//! The watcher never relies on `notify`'s own recursion. Each reload *re-arms*
//! non-recursive watches on an explicit set of paths, then loads:
//!
//! - the *anchors*: the parent of `RUNTIME_ROOT` (or, if it is missing, its
//!   nearest existing ancestor), `RUNTIME_ROOT` itself and every existing
//!   directory between it and the walked directory — these see the root swap
//!   and the creation, removal or replacement of any directory on the way;
//! - everything the provider's walk reports (`provider::scan`): the walked
//!   directory, each directory it descends, the `..` directories of a
//!   ConfigMap mount, and each symbolic link to a file (inotify follows the
//!   link, so the target's changes are seen).
//!
//! Watches are made on the literal paths (through `RUNTIME_ROOT`'s link), so
//! every event's path starts with the literal walked directory or is one of
//! its ancestors; anything else (a sibling of `RUNTIME_ROOT`, our own reads)
//! is ignored by `is_relevant`. Because inotify resolves a link when the
//! watch is made, a watch made through `RUNTIME_ROOT` keeps pointing at the
//! old snapshot after a swap; the swap itself is an event on an anchor, and
//! the reload it triggers re-arms every watch through the new target.
//!
//! Re-arming drops every previous watch and adds the new set, then walks
//! again: if the second walk wants the same set, the files of that walk are
//! read, so any change made before the watches were in place is seen by the
//! read and any change after it raises an event. If the set changed in the
//! meantime (a directory appeared), it re-arms again (bounded), and
//! otherwise schedules another reload.
//!
//! # Debounce
//!
//! After the first relevant event, the task waits until no event has arrived
//! for [`QUIET_PERIOD`], but at most [`MAX_DELAY`] after the first, and then
//! does one reload. Events arriving during a reload schedule (at most) one
//! more.

use std::collections::BTreeSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::event::{AccessKind, AccessMode};
use notify::{Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher as _};
use tokio::sync::{oneshot, watch, Notify};
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, Instant};

use super::live::LiveConfig;
use super::provider::{self, LoadError, ProviderOptions};
use super::{load_with, Config};

/// How long the file system must stay quiet after an event before a reload.
pub const QUIET_PERIOD: Duration = Duration::from_millis(100);

/// The longest a reload is delayed after the first event of a burst, however
/// long the burst lasts.
pub const MAX_DELAY: Duration = Duration::from_secs(1);

/// How many times one reload re-arms the watches when the directory tree
/// changes under it, before it gives up and schedules another reload.
const MAX_REARMS: usize = 3;

/// The outcome of the loads so far, for observers (statistics, health).
/// The watcher sends a new value after each load attempt.
#[derive(Debug, Clone, Default)]
pub struct ReloadStatus {
    /// The number of the live configuration: 0 while none is loaded,
    /// incremented with each successful publication.
    pub generation: u64,
    /// Successful loads (`ratelimit.service.config_load_success`).
    pub successes: u64,
    /// Failed loads (`ratelimit.service.config_load_error`).
    pub failures: u64,
    /// The error of the latest attempt if it failed; `None` after a success.
    pub last_error: Option<LoadError>,
    /// The number of domains of the live configuration (0 while none).
    pub domains: usize,
}

impl ReloadStatus {
    /// Load attempts so far, successful or not; 0 before the initial load.
    pub fn attempts(&self) -> u64 {
        self.successes + self.failures
    }
}

/// The watcher could not be started, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// [`ConfigWatcher::start`] was called outside a tokio runtime.
    #[error("the config watcher needs a tokio runtime: {0}")]
    NoRuntime(#[from] tokio::runtime::TryCurrentError),
    /// The file-system notification backend could not be created.
    #[error("cannot create the config file watcher: {0}")]
    Notify(#[from] notify::Error),
    /// The watcher stopped before the awaited load happened.
    #[error("the config watcher has stopped")]
    Stopped,
}

/// The running hot-reload watcher: an RAII guard. Dropping it (or
/// [`shutdown`](ConfigWatcher::shutdown)) stops the background task and the
/// file-system watches; the [`LiveConfig`] keeps its last snapshot.
#[derive(Debug)]
pub struct ConfigWatcher {
    /// The shutdown signal. The task holds the receiving end and stops as
    /// soon as this sender is dropped (by `Drop` or `shutdown`): it checks it
    /// first at every await, including while a reload runs on the blocking
    /// pool, so nothing is published after shutdown. A oneshot rather than a
    /// broadcast because there is exactly one listener.
    shutdown: Option<oneshot::Sender<()>>,
    /// The background task (see `run`). It owns the notify watcher (so
    /// the inotify thread ends when the task does), the status sender (so
    /// status receivers see the channel close when it ends) and a `LiveConfig`
    /// handle. Awaited by `shutdown`, detached by `Drop`.
    task: Option<JoinHandle<()>>,
    /// A status receiver of our own, for [`first_load`](Self::first_load).
    status: watch::Receiver<ReloadStatus>,
}

impl ConfigWatcher {
    /// Starts watching the layout `opts` describes and publishing into
    /// `live`. Must be called within a tokio runtime.
    ///
    /// The initial load is the task's first action; it is not awaited here.
    /// The original waits for that first event at start-up: call
    /// [`first_load`](Self::first_load) to do so (or skip it for
    /// `FORCE_START_WITHOUT_INITIAL_CONFIG`). When the layout loads nothing
    /// (empty `RUNTIME_SUBDIRECTORY` in watch-root mode, empty
    /// `RUNTIME_APPDIRECTORY` in directory mode), the empty configuration is
    /// loaded once and nothing is watched, as in the original.
    ///
    /// `opts` is fixed for the watcher's life (a relative `runtime_root` is
    /// made absolute now).
    pub fn start(
        mut opts: ProviderOptions,
        live: LiveConfig,
    ) -> Result<(ConfigWatcher, watch::Receiver<ReloadStatus>), WatchError> {
        let runtime = tokio::runtime::Handle::try_current()?;
        if let Ok(root) = std::path::absolute(&opts.runtime_root) {
            opts.runtime_root = root;
        }
        let trigger = Arc::new(Notify::new());
        let armer = match opts.target_dir() {
            Some(target) => Some(Armer::new(target, Arc::clone(&trigger))?),
            None => None,
        };
        let (status_tx, status_rx) = watch::channel(ReloadStatus::default());
        let (shutdown_tx, shutdown_rx) = oneshot::channel();
        let task = runtime.spawn(run(Task {
            opts,
            armer,
            live,
            status: status_tx,
            trigger,
            shutdown: shutdown_rx,
        }));
        let watcher = ConfigWatcher {
            shutdown: Some(shutdown_tx),
            task: Some(task),
            status: status_rx.clone(),
        };
        Ok((watcher, status_rx))
    }

    /// Waits until the first load attempt is over, success or failure, and
    /// returns the status then. Returns at once if it already happened.
    pub async fn first_load(&self) -> Result<ReloadStatus, WatchError> {
        let mut status = self.status.clone();
        let current = status
            .wait_for(|s| s.attempts() > 0)
            .await
            .map_err(|_| WatchError::Stopped)?;
        Ok(current.clone())
    }

    /// Stops the watcher and waits for its task to end.
    pub async fn shutdown(mut self) {
        drop(self.shutdown.take());
        if let Some(task) = self.task.take() {
            if let Err(e) = task.await {
                if e.is_panic() {
                    tracing::error!("config watcher task panicked: {e}");
                }
            }
        }
    }
}

impl Drop for ConfigWatcher {
    fn drop(&mut self) {
        // Closing the oneshot is the signal; the task ends at its next
        // await and drops the notify watcher with it.
        drop(self.shutdown.take());
    }
}

/// Everything the background task owns.
struct Task {
    /// Fixed for the watcher's life; `runtime_root` is absolute.
    opts: ProviderOptions,
    /// The notify watcher and its current watches. `None` when the layout
    /// loads nothing (nothing to watch), and while a reload has it on the
    /// blocking pool: it is moved into each reload job and back, so no lock
    /// is needed (only one reload runs at a time).
    armer: Option<Armer>,
    /// Where successes are published.
    live: LiveConfig,
    /// The status channel's only sender: the task updates it after each
    /// attempt; dropping it when the task ends tells receivers it stopped.
    status: watch::Sender<ReloadStatus>,
    /// Raised by the notify callback (on notify's own thread) for each
    /// relevant event, and by a reload that could not settle its watches.
    /// A `Notify` holds at most one pending permit, so a burst of events
    /// while nobody waits coalesces into one wake-up; never closed.
    trigger: Arc<Notify>,
    /// Resolves (with an error) when the [`ConfigWatcher`] is dropped or
    /// shut down.
    shutdown: oneshot::Receiver<()>,
}

/// The background task: the initial load, then one debounced reload per
/// burst of relevant events, until shutdown.
async fn run(mut task: Task) {
    if !reload(&mut task).await {
        return;
    }
    if task.armer.is_none() {
        // Nothing can ever be loaded: nothing to watch. The task stays
        // (holding the status sender) until shutdown, so that receivers only
        // see the channel close when the watcher is stopped.
        let _ = (&mut task.shutdown).await;
        return;
    }
    loop {
        tokio::select! {
            biased;
            _ = &mut task.shutdown => return,
            _ = task.trigger.notified() => {}
        }
        let deadline = Instant::now() + MAX_DELAY;
        loop {
            let quiet_until = (Instant::now() + QUIET_PERIOD).min(deadline);
            tokio::select! {
                biased;
                _ = &mut task.shutdown => return,
                _ = sleep_until(quiet_until) => break,
                _ = task.trigger.notified() => {}
            }
        }
        if !reload(&mut task).await {
            return;
        }
    }
}

/// One load attempt on the blocking pool, then publication and status.
/// Returns false if the task must stop (shutdown, or the runtime is going
/// away).
async fn reload(task: &mut Task) -> bool {
    let opts = task.opts.clone();
    let mut armer = task.armer.take();
    let job = tokio::task::spawn_blocking(move || {
        let outcome = catch_unwind(AssertUnwindSafe(|| load_and_arm(&opts, armer.as_mut())));
        (armer, outcome)
    });
    let (armer, outcome) = tokio::select! {
        biased;
        _ = &mut task.shutdown => return false,
        joined = job => match joined {
            Ok(done) => done,
            Err(e) => {
                tracing::error!("config reload job did not complete: {e}");
                return false;
            }
        },
    };
    task.armer = armer;
    let result = match outcome {
        Ok(result) => result,
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "panic".to_string());
            Err(LoadError::Panicked(message))
        }
    };
    match result {
        Ok(config) => {
            let domains = config.tree().domain_count();
            task.live.publish(Arc::new(config));
            task.status.send_modify(|s| {
                s.generation += 1;
                s.successes += 1;
                s.last_error = None;
                s.domains = domains;
            });
            tracing::info!(domains, "Successfully loaded new configuration");
        }
        Err(e) => {
            tracing::error!("Error loading new configuration: {}", e.detailed());
            task.status.send_modify(|s| {
                s.failures += 1;
                s.last_error = Some(e);
            });
        }
    }
    true
}

/// The blocking part of a reload: re-arm the watches, walk, read, load.
fn load_and_arm(opts: &ProviderOptions, armer: Option<&mut Armer>) -> Result<Config, LoadError> {
    let Some(armer) = armer else {
        let files = provider::collect(opts)?;
        return Ok(load_with(&files, opts.load_options())?);
    };
    let mut armed: Option<BTreeSet<PathBuf>> = None;
    let mut rearms = 0;
    let scan = loop {
        let anchors = armer.anchors(&opts.runtime_root);
        let scan = match provider::scan(opts) {
            Ok(scan) => scan,
            Err(e) => {
                // Keep watching the way there, to see the fix.
                if armed.as_ref() != Some(&anchors) {
                    armer.arm(&anchors);
                }
                return Err(e.into());
            }
        };
        let mut wanted = anchors;
        wanted.extend(scan.watch.iter().cloned());
        if armed.as_ref() == Some(&wanted) {
            break scan;
        }
        if rearms == MAX_REARMS {
            // The tree keeps changing under us: load what we have and come
            // back once it has settled.
            armer.trigger.notify_one();
            break scan;
        }
        armer.arm(&wanted);
        armed = Some(wanted);
        rearms += 1;
    };
    let files = provider::read_files(scan.files);
    Ok(load_with(&files, opts.load_options())?)
}

/// The notify watcher and the paths it currently watches.
struct Armer {
    /// inotify here. Its callback runs on notify's own thread and only
    /// filters the event and raises the trigger; it never parses.
    watcher: RecommendedWatcher,
    /// The paths given to `watch` by the last [`Armer::arm`] that
    /// succeeded; all non-recursive.
    armed: Vec<PathBuf>,
    /// The walked directory (literal path, absolute).
    target: PathBuf,
    /// The task's trigger, to schedule another reload.
    trigger: Arc<Notify>,
}

impl Armer {
    fn new(target: PathBuf, trigger: Arc<Notify>) -> Result<Armer, notify::Error> {
        let filter_target = target.clone();
        let callback_trigger = Arc::clone(&trigger);
        let watcher =
            notify::recommended_watcher(move |event: notify::Result<Event>| match event {
                Ok(event) => {
                    if is_relevant(&event, &filter_target) {
                        callback_trigger.notify_one();
                    }
                }
                Err(e) => tracing::warn!("config file watcher error: {e}"),
            })?;
        Ok(Armer {
            watcher,
            armed: Vec::new(),
            target,
            trigger,
        })
    }

    /// The directories that see the way to the walked directory change: the
    /// nearest existing directory above `root` (its parent, normally), and
    /// every existing directory from `root` down to the walked directory's
    /// parent.
    fn anchors(&self, root: &Path) -> BTreeSet<PathBuf> {
        let mut out = BTreeSet::new();
        let mut up = root.parent();
        while let Some(dir) = up {
            if dir.is_dir() {
                out.insert(dir.to_path_buf());
                break;
            }
            up = dir.parent();
        }
        for dir in self.target.ancestors().skip(1) {
            if !dir.starts_with(root) {
                break;
            }
            if dir.is_dir() {
                out.insert(dir.to_path_buf());
            }
        }
        out
    }

    /// Replaces every watch by non-recursive watches on `paths`. A path that
    /// vanished meanwhile is skipped (its removal is an event on a watched
    /// parent, or the next walk differs); other failures (watch limit,
    /// permissions) are warned about.
    fn arm(&mut self, paths: &BTreeSet<PathBuf>) {
        for path in self.armed.drain(..) {
            // notify drops a watch by itself when its path is removed or
            // moved; "not found" is expected then.
            let _ = self.watcher.unwatch(&path);
        }
        for path in paths {
            match self.watcher.watch(path, RecursiveMode::NonRecursive) {
                Ok(()) => self.armed.push(path.clone()),
                Err(e) if matches!(e.kind, notify::ErrorKind::PathNotFound) => {
                    tracing::debug!(path = %path.display(), "config path vanished before it was watched");
                }
                Err(e) if matches!(e.kind, notify::ErrorKind::Io(ref io) if io.kind() == std::io::ErrorKind::NotFound) =>
                {
                    tracing::debug!(path = %path.display(), "config path vanished before it was watched");
                }
                Err(e) => tracing::warn!(
                    path = %path.display(),
                    error = %e,
                    "cannot watch config path; changes there will not reload the configuration"
                ),
            }
        }
    }
}

impl std::fmt::Debug for Armer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Armer")
            .field("armed", &self.armed)
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

/// Whether an event can change the configuration: anything but a read
/// (opening, reading and closing without writing — our own walks and reads
/// produce those), on the walked directory, below it, or on one of its
/// ancestors (a root swap, a directory on the way re-created). A queue
/// overflow (rescan) is always relevant.
fn is_relevant(event: &Event, target: &Path) -> bool {
    if event.need_rescan() {
        return true;
    }
    match event.kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => {}
        EventKind::Access(_) => return false,
        _ => {}
    }
    event
        .paths
        .iter()
        .any(|p| p.starts_with(target) || target.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{CreateKind, ModifyKind};

    fn event(kind: EventKind, path: &str) -> Event {
        Event::new(kind).add_path(PathBuf::from(path))
    }

    #[test]
    fn reads_are_not_relevant() {
        let target = Path::new("/r/current/rl");
        let open = EventKind::Access(AccessKind::Open(AccessMode::Any));
        let close_read = EventKind::Access(AccessKind::Close(AccessMode::Read));
        let close_write = EventKind::Access(AccessKind::Close(AccessMode::Write));
        assert!(!is_relevant(
            &event(open, "/r/current/rl/config/a.yaml"),
            target
        ));
        assert!(!is_relevant(
            &event(close_read, "/r/current/rl/config/a.yaml"),
            target
        ));
        assert!(is_relevant(
            &event(close_write, "/r/current/rl/config/a.yaml"),
            target
        ));
    }

    #[test]
    fn changes_below_and_on_the_way_are_relevant_and_siblings_not() {
        let target = Path::new("/r/current/rl");
        let create = EventKind::Create(CreateKind::File);
        let modify = EventKind::Modify(ModifyKind::Any);
        assert!(is_relevant(
            &event(modify, "/r/current/rl/config/sub/a.yaml"),
            target
        ));
        assert!(is_relevant(&event(create, "/r/current"), target));
        assert!(is_relevant(&event(create, "/r/current/rl"), target));
        assert!(!is_relevant(&event(create, "/r/current.tmp"), target));
        assert!(!is_relevant(&event(create, "/r/snapshot_2"), target));
        assert!(!is_relevant(&event(create, "/r/current/other"), target));
    }

    #[test]
    fn rescan_is_relevant() {
        let ev = Event::new(EventKind::Other).set_flag(notify::event::Flag::Rescan);
        assert!(is_relevant(&ev, Path::new("/r")));
    }

    #[test]
    fn status_attempts() {
        let s = ReloadStatus {
            successes: 2,
            failures: 3,
            ..ReloadStatus::default()
        };
        assert_eq!(s.attempts(), 5);
    }

    #[test]
    fn live_config_publishes_whole_snapshots() {
        let live = LiveConfig::new();
        assert!(live.current().is_none());
        let other = live.clone();
        other.publish(Arc::new(Config::default()));
        let snapshot = live.current().expect("published");
        live.publish(Arc::new(Config::default()));
        let newer = live.current().expect("published");
        assert!(!Arc::ptr_eq(&snapshot, &newer));
    }
}
