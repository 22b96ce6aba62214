//! Hot reload against real directories: every way people update the
//! configuration on disk must reach [`LiveConfig::current`], in both layouts
//! (`RUNTIME_WATCH_ROOT=true` with a `RUNTIME_SUBDIRECTORY`, and `false`).
//!
//! Each test builds its own runtime tree in a temporary directory:
//! `TMP/current -> TMP/snap1` (the `RUNTIME_ROOT` symbolic link), with the
//! rule files in `TMP/current/rl/config/`. Changes are awaited by polling
//! with a generous bound ([`WAIT`]); no test asserts how fast a reload is.

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ratelimit::config::{ConfigWatcher, LiveConfig, ProviderOptions, ReloadStatus};
use tempfile::TempDir;
use tokio::sync::watch;
use tokio::time::{sleep, Instant};

/// The longest any awaited change may take before the test fails.
const WAIT: Duration = Duration::from_secs(10);

/// A one-rule file for `domain` whose limit is `n` per second.
fn rule(domain: &str, n: u32) -> String {
    format!(
        "domain: {domain}\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: {n}\n"
    )
}

/// A runtime tree in a temporary directory (removed on drop).
struct Layout {
    tmp: TempDir,
    opts: ProviderOptions,
}

impl Layout {
    /// `TMP/current -> snap1`, `snap1/rl/config/` empty.
    fn new(watch_root: bool) -> Layout {
        let tmp = tempfile::tempdir().expect("tempdir");
        fs::create_dir_all(tmp.path().join("snap1/rl/config")).expect("mkdir");
        symlink("snap1", tmp.path().join("current")).expect("root link");
        Layout::with_root(tmp, watch_root)
    }

    /// Nothing at all under `TMP` yet.
    fn empty(watch_root: bool) -> Layout {
        let tmp = tempfile::tempdir().expect("tempdir");
        Layout::with_root(tmp, watch_root)
    }

    fn with_root(tmp: TempDir, watch_root: bool) -> Layout {
        let opts = ProviderOptions {
            runtime_root: tmp.path().join("current"),
            subdirectory: "rl".to_string(),
            app_directory: "config".to_string(),
            ignore_dotfiles: false,
            watch_root,
            merge_domains: false,
            original_windows_only: false,
        };
        Layout { tmp, opts }
    }

    fn tmp(&self) -> &Path {
        self.tmp.path()
    }

    /// The config directory, through the root link.
    fn dir(&self) -> PathBuf {
        self.opts.runtime_root.join("rl/config")
    }

    /// A file of the config directory, through the root link.
    fn file(&self, rel: &str) -> PathBuf {
        self.dir().join(rel)
    }

    /// The runtime name of `rel` (a path below the config directory).
    fn name(&self, rel: &str) -> String {
        let dotted = rel.replace('/', ".");
        if self.opts.watch_root {
            format!("config.{dotted}")
        } else {
            dotted
        }
    }

    fn write(&self, rel: &str, contents: &str) {
        let path = self.file(rel);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).expect("mkdir");
        }
        fs::write(path, contents).expect("write");
    }

    /// Points `TMP/current` at `TMP/<snapshot>` by an atomic rename of a new
    /// link over the old one (the classic deployment swap).
    fn swap_root(&self, snapshot: &str) {
        let tmp_link = self.tmp().join("current.tmp");
        symlink(snapshot, &tmp_link).expect("new root link");
        fs::rename(&tmp_link, &self.opts.runtime_root).expect("swap root link");
    }
}

/// A started watcher, its status and the live slot.
struct Running {
    watcher: ConfigWatcher,
    status: watch::Receiver<ReloadStatus>,
    live: LiveConfig,
}

impl Running {
    /// Starts a watcher on `opts` and waits for the initial load.
    async fn start(opts: &ProviderOptions) -> Running {
        let live = LiveConfig::new();
        let (watcher, status) = ConfigWatcher::start(opts.clone(), live.clone()).expect("start");
        let first = tokio::time::timeout(WAIT, watcher.first_load())
            .await
            .expect("initial load in time")
            .expect("initial load");
        assert_eq!(first.attempts(), 1, "{first:?}");
        Running {
            watcher,
            status,
            live,
        }
    }

    fn status(&self) -> ReloadStatus {
        self.status.borrow().clone()
    }

    /// The live `/rlconfig` text ("" while nothing is loaded).
    fn dump(&self) -> String {
        self.live.current().map(|c| c.dump()).unwrap_or_default()
    }

    /// The live file names.
    fn files(&self) -> Vec<String> {
        self.live
            .current()
            .map(|c| c.files().to_vec())
            .unwrap_or_default()
    }

    /// Whether the live configuration limits `domain` to `n`.
    fn has(&self, domain: &str, n: u32) -> bool {
        self.dump().lines().any(|line| {
            line.starts_with(&format!("{domain}."))
                && line.contains(&format!("requests_per_unit={n},"))
        })
    }

    /// Whether the live configuration has `domain` at all.
    fn has_domain(&self, domain: &str) -> bool {
        self.dump()
            .lines()
            .any(|line| line.starts_with(&format!("{domain}.")))
    }

    /// Polls `cond` until it holds, failing the test after [`WAIT`].
    async fn eventually(&self, what: &str, mut cond: impl FnMut(&Running) -> bool) {
        let deadline = Instant::now() + WAIT;
        loop {
            if cond(self) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; status {:?}; live:\n{}",
                self.status(),
                self.dump()
            );
            sleep(Duration::from_millis(20)).await;
        }
    }

    async fn stop(self) {
        self.watcher.shutdown().await;
    }
}

/// Runs a scenario once per layout, as `<scenario>::watch_root` and
/// `<scenario>::directory`.
macro_rules! both_layouts {
    ($($scenario:ident),* $(,)?) => {
        $(
            mod $scenario {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn watch_root() {
                    super::$scenario(true).await
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn directory() {
                    super::$scenario(false).await
                }
            }
        )*
    };
}

both_layouts!(
    root_symlink_swap,
    configmap_data_swap,
    in_place_write,
    atomic_rename,
    create,
    delete,
    chmod,
    subdirectory,
    burst_is_debounced,
    broken_file_keeps_last_good,
    root_created_later,
);

/// `RUNTIME_ROOT` is a link swapped to a new snapshot; afterwards the
/// watches follow the new target (an in-place edit there reloads).
async fn root_symlink_swap(watch_root: bool) {
    let layout = Layout::new(watch_root);
    layout.write("a.yaml", &rule("d", 1));
    let run = Running::start(&layout.opts).await;
    assert!(run.has("d", 1), "{}", run.dump());

    let snap2 = layout.tmp().join("snap2/rl/config");
    fs::create_dir_all(&snap2).expect("mkdir");
    fs::write(snap2.join("a.yaml"), rule("d", 2)).expect("write");
    layout.swap_root("snap2");
    run.eventually("the new snapshot", |r| r.has("d", 2)).await;

    fs::write(layout.file("a.yaml"), rule("d", 3)).expect("write");
    run.eventually("an edit in the new snapshot", |r| r.has("d", 3))
        .await;
    fs::remove_dir_all(layout.tmp().join("snap1")).expect("rm old snapshot");
    run.stop().await;
}

/// A Kubernetes ConfigMap mount as the config directory: `..<timestamp>/`
/// holds the files, `..data` links to it, each key is a top-level link into
/// `..data/`. An update writes a new timestamped directory and renames a new
/// `..data` link over the old one. Dot files are not ignored, and still
/// nothing is loaded twice.
async fn configmap_data_swap(watch_root: bool) {
    let layout = Layout::new(watch_root);
    let dir = layout.dir();
    fs::create_dir_all(dir.join("..2026_01_01_00_00_00.1")).expect("mkdir");
    fs::write(dir.join("..2026_01_01_00_00_00.1/a.yaml"), rule("d", 1)).expect("write");
    symlink("..2026_01_01_00_00_00.1", dir.join("..data")).expect("link");
    symlink("..data/a.yaml", dir.join("a.yaml")).expect("link");
    let run = Running::start(&layout.opts).await;
    assert!(run.has("d", 1), "{:?}", run.status());
    assert_eq!(run.files(), [layout.name("a.yaml")]);

    // What the kubelet's atomic writer does.
    let new_ts = "..2026_01_01_00_01_00.2";
    fs::create_dir_all(dir.join(new_ts)).expect("mkdir");
    fs::write(dir.join(new_ts).join("a.yaml"), rule("d", 2)).expect("write");
    fs::write(dir.join(new_ts).join("b.yaml"), rule("e", 1)).expect("write");
    symlink(new_ts, dir.join("..data_tmp")).expect("link");
    fs::rename(dir.join("..data_tmp"), dir.join("..data")).expect("swap ..data");
    symlink("..data/b.yaml", dir.join("b.yaml")).expect("link");
    fs::remove_dir_all(dir.join("..2026_01_01_00_00_00.1")).expect("rm old");

    run.eventually("the updated ConfigMap", |r| r.has("d", 2) && r.has("e", 1))
        .await;
    assert_eq!(run.files(), [layout.name("a.yaml"), layout.name("b.yaml")]);
    assert_eq!(run.status().failures, 0, "{:?}", run.status());
    run.stop().await;
}

/// A file rewritten in place.
async fn in_place_write(watch_root: bool) {
    let layout = Layout::new(watch_root);
    layout.write("a.yaml", &rule("d", 1));
    let run = Running::start(&layout.opts).await;
    assert!(run.has("d", 1));

    layout.write("a.yaml", &rule("d", 2));
    run.eventually("the rewritten file", |r| r.has("d", 2))
        .await;
    run.stop().await;
}

/// `mv tmp a.yaml`: a complete file renamed over the old one.
async fn atomic_rename(watch_root: bool) {
    let layout = Layout::new(watch_root);
    layout.write("a.yaml", &rule("d", 1));
    let run = Running::start(&layout.opts).await;
    assert!(run.has("d", 1));

    let staging = layout.tmp().join("staging.yaml");
    fs::write(&staging, rule("d", 2)).expect("write");
    fs::rename(&staging, layout.file("a.yaml")).expect("mv");
    run.eventually("the renamed file", |r| r.has("d", 2)).await;
    assert_eq!(run.files(), [layout.name("a.yaml")]);
    run.stop().await;
}

/// A new file.
async fn create(watch_root: bool) {
    let layout = Layout::new(watch_root);
    layout.write("a.yaml", &rule("d", 1));
    let run = Running::start(&layout.opts).await;

    layout.write("b.yaml", &rule("e", 1));
    run.eventually("the new file", |r| r.has("d", 1) && r.has("e", 1))
        .await;
    run.stop().await;
}

/// A removed file.
async fn delete(watch_root: bool) {
    let layout = Layout::new(watch_root);
    layout.write("a.yaml", &rule("d", 1));
    layout.write("b.yaml", &rule("e", 1));
    let run = Running::start(&layout.opts).await;
    assert!(run.has("e", 1));

    fs::remove_file(layout.file("b.yaml")).expect("rm");
    run.eventually("the file gone", |r| !r.has_domain("e") && r.has("d", 1))
        .await;
    run.stop().await;
}

/// A mode change reloads. When the file becomes unreadable (not as root) it
/// is skipped, and it comes back once readable again.
async fn chmod(watch_root: bool) {
    let layout = Layout::new(watch_root);
    layout.write("a.yaml", &rule("d", 1));
    layout.write("b.yaml", &rule("e", 1));
    let run = Running::start(&layout.opts).await;
    let b = layout.file("b.yaml");

    let before = run.status().successes;
    fs::set_permissions(&b, fs::Permissions::from_mode(0o000)).expect("chmod 000");
    run.eventually("a reload after chmod 000", |r| {
        r.status().successes > before
    })
    .await;
    if fs::File::open(&b).is_err() {
        run.eventually("the unreadable file skipped", |r| {
            !r.has_domain("e") && r.has("d", 1)
        })
        .await;
    }

    let before = run.status().successes;
    fs::set_permissions(&b, fs::Permissions::from_mode(0o644)).expect("chmod 644");
    run.eventually("a reload after chmod 644", |r| {
        r.status().successes > before && r.has("e", 1) && r.has("d", 1)
    })
    .await;
    run.stop().await;
}

/// Files in sub-directories, including directories created after start
/// (`config/sub/x.yaml` is `config.sub.x.yaml`, resp. `sub.x.yaml`).
async fn subdirectory(watch_root: bool) {
    let layout = Layout::new(watch_root);
    layout.write("a.yaml", &rule("d", 1));
    let run = Running::start(&layout.opts).await;

    // Directory and files created at once: the watcher must re-arm on the
    // new directories without missing the files written meanwhile.
    layout.write("sub/x.yaml", &rule("s", 1));
    layout.write("sub/deeper/y.yaml", &rule("t", 1));
    run.eventually("the files in new sub-directories", |r| {
        r.has("s", 1) && r.has("t", 1)
    })
    .await;
    let files = run.files();
    assert!(files.contains(&layout.name("sub/x.yaml")), "{files:?}");
    assert!(
        files.contains(&layout.name("sub/deeper/y.yaml")),
        "{files:?}"
    );

    // The new directories are watched now.
    layout.write("sub/deeper/y.yaml", &rule("t", 2));
    run.eventually("an edit in a sub-directory", |r| r.has("t", 2))
        .await;
    run.stop().await;
}

/// 50 quick writes: far fewer reloads than events, and the last content
/// wins.
async fn burst_is_debounced(watch_root: bool) {
    let layout = Layout::new(watch_root);
    layout.write("a.yaml", &rule("d", 1000));
    let run = Running::start(&layout.opts).await;
    let before = run.status();

    for n in 1..=50 {
        layout.write("a.yaml", &rule("d", n));
    }
    run.eventually("the last write", |r| r.has("d", 50)).await;
    let after = run.status();
    let reloads = after.attempts() - before.attempts();
    assert!(reloads >= 1);
    assert!(
        after.successes - before.successes < 50,
        "{reloads} reloads for 50 writes: {after:?}"
    );
    run.stop().await;
}

/// A broken file keeps the last good configuration live, counts a failure
/// and records the error with the file name and line; fixing it reloads.
async fn broken_file_keeps_last_good(watch_root: bool) {
    let layout = Layout::new(watch_root);
    layout.write("a.yaml", &rule("d", 1));
    let run = Running::start(&layout.opts).await;
    let before = run.status();
    assert_eq!(before.successes, 1);
    assert_eq!(before.domains, 1);

    let broken = "domain: broken\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n";
    layout.write("bad.yaml", broken);
    run.eventually("a failed load", |r| r.status().failures > before.failures)
        .await;
    let status = run.status();
    assert!(run.has("d", 1), "last good config kept: {}", run.dump());
    assert!(!run.has_domain("broken"));
    assert_eq!(status.generation, before.generation, "{status:?}");
    assert_eq!(status.domains, 1);
    let error = status.last_error.as_ref().expect("error recorded");
    let config_error = error.config_error().expect("a config error");
    assert_eq!(config_error.file, layout.name("bad.yaml"));
    assert_eq!(
        error.to_string(),
        format!(
            "{}: invalid rate limit unit 'fortnight'",
            layout.name("bad.yaml")
        )
    );
    assert!(config_error.line.is_some(), "{config_error:?}");
    assert!(error.detailed().contains("(line "), "{}", error.detailed());

    // A calendar in a zone that does not exist: refused the same way,
    // with the line of the zone and the name that was meant.
    let failures = status.failures;
    let bad_zone = "domain: broken\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: month\n      requests_per_unit: 1\n      calendar: true\n      time_zone: Europe/Lisbn\n";
    layout.write("bad.yaml", bad_zone);
    run.eventually("a failed load", |r| r.status().failures > failures)
        .await;
    let status = run.status();
    assert!(run.has("d", 1), "last good config kept: {}", run.dump());
    assert_eq!(status.generation, before.generation, "{status:?}");
    let error = status.last_error.as_ref().expect("error recorded");
    assert!(
        error
            .detailed()
            .ends_with("(line 8); did you mean 'Europe/Lisbon'?"),
        "{}",
        error.detailed()
    );

    layout.write("bad.yaml", &rule("broken", 7));
    run.eventually("the fixed file", |r| r.has("broken", 7) && r.has("d", 1))
        .await;
    let status = run.status();
    assert!(status.last_error.is_none(), "{status:?}");
    assert_eq!(status.domains, 2);
    assert!(status.generation > before.generation);
    run.stop().await;
}

/// No runtime tree at start: an empty configuration (a success with no
/// domain); the tree appearing later is loaded.
async fn root_created_later(watch_root: bool) {
    let layout = Layout::empty(watch_root);
    let run = Running::start(&layout.opts).await;
    let status = run.status();
    assert_eq!((status.successes, status.domains), (1, 0), "{status:?}");
    assert!(run.live.current().is_some());

    let snap = layout.tmp().join("snap1/rl/config");
    fs::create_dir_all(&snap).expect("mkdir");
    fs::write(snap.join("a.yaml"), rule("d", 1)).expect("write");
    symlink("snap1", layout.tmp().join("current")).expect("root link");
    run.eventually("the new tree", |r| r.has("d", 1)).await;
    run.stop().await;
}

/// The original loads nothing, ever, with an empty `RUNTIME_SUBDIRECTORY`
/// in watch-root mode: a successful empty configuration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_subdirectory_loads_an_empty_configuration() {
    let layout = Layout::new(true);
    layout.write("a.yaml", &rule("d", 1));
    let opts = ProviderOptions {
        subdirectory: String::new(),
        ..layout.opts.clone()
    };
    let run = Running::start(&opts).await;
    let status = run.status();
    assert_eq!(
        (status.successes, status.failures, status.domains),
        (1, 0, 0)
    );
    assert_eq!(run.dump(), "");
    assert!(run.live.current().is_some());
    run.stop().await;
}

/// A broken configuration at start: a failure, nothing live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initial_failure_leaves_nothing_live() {
    let layout = Layout::new(false);
    layout.write(
        "a.yaml",
        "domain: d\ndescriptors:\n  - key: k\n    nope: 1\n",
    );
    let run = Running::start(&layout.opts).await;
    let status = run.status();
    assert_eq!((status.successes, status.failures), (0, 1), "{status:?}");
    assert_eq!(status.generation, 0);
    assert!(run.live.current().is_none());

    layout.write("a.yaml", &rule("d", 1));
    run.eventually("the fixed file", |r| r.has("d", 1)).await;
    run.stop().await;
}

/// `shutdown` ends the task: the status channel closes, and the live slot
/// keeps its last snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_the_task() {
    let layout = Layout::new(false);
    layout.write("a.yaml", &rule("d", 1));
    let run = Running::start(&layout.opts).await;
    let live = run.live.clone();
    let mut status = run.status.clone();
    run.stop().await;
    // The task has ended: the last value is still readable, then the
    // channel reports closed.
    status.mark_unchanged();
    assert!(status.changed().await.is_err(), "status channel closed");
    assert!(live.current().is_some());
}

/// Dropping the watcher stops the task too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_stops_the_task() {
    let layout = Layout::new(true);
    layout.write("a.yaml", &rule("d", 1));
    let run = Running::start(&layout.opts).await;
    let mut status = run.status.clone();
    drop(run);
    let closed =
        tokio::time::timeout(WAIT, async { while status.changed().await.is_ok() {} }).await;
    assert!(closed.is_ok(), "status channel closed after drop");
}

/// The watcher's own walks and reads (open, read, close) are not changes:
/// without any change on disk, no reload follows the initial load. This
/// waits longer than the debounce bound and can only fail on a reload loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_reads_do_not_trigger_reloads() {
    let layout = Layout::new(true);
    layout.write("a.yaml", &rule("d", 1));
    layout.write("sub/b.yaml", &rule("e", 1));
    let run = Running::start(&layout.opts).await;
    // One change, to go through a full re-arm and reload cycle first; a
    // rename is a single event, so exactly one reload is due.
    let staging = layout.tmp().join("staging.yaml");
    fs::write(&staging, rule("d", 2)).expect("write");
    fs::rename(&staging, layout.file("a.yaml")).expect("mv");
    run.eventually("the change", |r| r.has("d", 2)).await;
    let settled = run.status().attempts();
    sleep(ratelimit::config::watcher::MAX_DELAY * 2).await;
    assert_eq!(run.status().attempts(), settled, "{:?}", run.status());
    run.stop().await;
}
