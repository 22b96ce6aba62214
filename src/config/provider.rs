//! The FILE config provider's runtime-directory layout:
//! which files on disk
//! make up the configuration, and the names error messages call them by.
//!
//! This module only collects; it does not watch (that is
//! [`watcher`](super::watcher)). Everything here is synchronous file I/O and
//! must not run on an async worker or on the request path.
//!
//! Two layouts, chosen by [`ProviderOptions::watch_root`]:
//!
//! - **watch-root** (the default): the directory
//!   `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY` is walked recursively; a file's name
//!   is its path relative to that directory with `/` replaced by `.`, and
//!   only names starting with `RUNTIME_APPDIRECTORY + "."` are loaded
//!   (`config/basic.yaml` → `config.basic.yaml`, and, as in the original, a
//!   file `SUBDIR/config.yaml` matches too);
//! - **directory**: `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY`
//!   is walked recursively and every file is loaded, named relative to it
//!   (`basic.yaml`, `sub.x.yaml`).
//!
//! Rules shared by both, as in the original: symbolic links to files are
//! followed, symbolic links to directories are not descended (warning,
//! skipped); a file that cannot be read is logged and skipped, never failing
//! the load; `RUNTIME_IGNOREDOTFILES` skips dot files and does not descend
//! dot directories; a missing directory loads nothing (warning), which is a
//! successful, empty configuration.
//!
//! Deliberate differences from the original:
//!
//! - the files are returned sorted by name, so a load never depends on
//!   directory order (the original's order is random);
//! - directories whose name starts with `..` (the internals of a Kubernetes
//!   ConfigMap mount: `..data`, `..2026_11_30_…`) are never descended, whatever
//!   `RUNTIME_IGNOREDOTFILES` says, so a ConfigMap mount never loads each file
//!   twice (the original fails there with `duplicate domain`);
//! - in watch-root mode, files and directories whose names cannot match the
//!   `RUNTIME_APPDIRECTORY.` prefix are not read at all (the original reads
//!   and then discards them, warning about the unreadable ones);
//! - sockets, FIFOs and devices are skipped with a warning (reading a FIFO
//!   would block the reload forever);
//! - two files that get the same name (`config/a.yaml` and `config.a.yaml` in
//!   watch-root mode) keep only the first by path, with a warning, where the
//!   original keeps a random one.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::{load_with, Config, ConfigError, ConfigFile, LoadOptions};

/// Where the configuration lives on disk, as the original's environment
/// describes it. Each field maps 1:1 to one variable; [`Default`] gives the
/// original's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderOptions {
    /// `RUNTIME_ROOT` (default `/srv/runtime_data/current`). Usually a symbolic
    /// link that deployments swap atomically to a new snapshot.
    pub runtime_root: PathBuf,
    /// `RUNTIME_SUBDIRECTORY` (default empty). A relative path below the
    /// root; a leading `/` is ignored, as Go's `filepath.Join` does. Empty in
    /// watch-root mode means nothing is ever loaded.
    pub subdirectory: String,
    /// `RUNTIME_APPDIRECTORY` (default `config`). In watch-root mode the
    /// prefix of loaded names; in directory mode the directory walked. Empty
    /// in directory mode means nothing is ever loaded.
    pub app_directory: String,
    /// `RUNTIME_IGNOREDOTFILES` (default false): skip files, and do not
    /// descend directories, whose name starts with `.`.
    pub ignore_dotfiles: bool,
    /// `RUNTIME_WATCH_ROOT` (default true): the watch-root layout; false
    /// selects the directory layout.
    pub watch_root: bool,
    /// `MERGE_DOMAIN_CONFIG` (default false): the same domain in several
    /// files is merged instead of rejected.
    pub merge_domains: bool,
    /// The store holds the original's fixed windows only (memcache).
    pub original_windows_only: bool,
}

impl ProviderOptions {
    /// How the files found are loaded.
    pub fn load_options(&self) -> LoadOptions {
        LoadOptions {
            merge_domains: self.merge_domains,
            original_windows_only: self.original_windows_only,
        }
    }
}

impl Default for ProviderOptions {
    fn default() -> Self {
        ProviderOptions {
            runtime_root: PathBuf::from("/srv/runtime_data/current"),
            subdirectory: String::new(),
            app_directory: "config".to_string(),
            ignore_dotfiles: false,
            watch_root: true,
            merge_domains: false,
            original_windows_only: false,
        }
    }
}

impl ProviderOptions {
    /// The directory that is walked: `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY` in
    /// watch-root mode, `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY`
    /// in directory mode. `None` when the mode's required name
    /// (`RUNTIME_SUBDIRECTORY`, resp. `RUNTIME_APPDIRECTORY`) is empty: then
    /// nothing is ever loaded.
    pub fn target_dir(&self) -> Option<PathBuf> {
        if self.watch_root {
            if self.subdirectory.is_empty() {
                return None;
            }
            Some(join_relative(&self.runtime_root, &self.subdirectory))
        } else {
            if self.app_directory.is_empty() {
                return None;
            }
            let sub = join_relative(&self.runtime_root, &self.subdirectory);
            Some(join_relative(&sub, &self.app_directory))
        }
    }

    /// The prefix a name must have to be loaded: `Some(APPDIRECTORY + ".")`
    /// in watch-root mode, `None` (every file) in directory mode.
    fn name_prefix(&self) -> Option<String> {
        self.watch_root.then(|| format!("{}.", self.app_directory))
    }
}

/// `base` joined with the relative path `rel`, component by component: a
/// leading `/` or `.` of `rel` is ignored (Go's `filepath.Join` semantics,
/// where `Path::join` would replace `base` with an absolute `rel`).
fn join_relative(base: &Path, rel: &str) -> PathBuf {
    let mut out = base.to_path_buf();
    for component in Path::new(rel).components() {
        match component {
            Component::Normal(part) => out.push(part),
            Component::ParentDir => out.push(".."),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// The configuration directory could not be read as a whole. (A missing
/// directory is not an error, and a single unreadable file is skipped.)
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProviderError {
    /// The walked directory exists but is not a directory.
    #[error("config directory {} is not a directory", path.display())]
    NotADirectory {
        /// The path that was expected to be a directory.
        path: PathBuf,
    },
    /// The walked directory exists but cannot be listed (permissions...).
    /// Failing here keeps the last good configuration, where loading an empty
    /// one would silently drop every limit.
    #[error("cannot read config directory {}: {source}", path.display())]
    ReadDir {
        /// The directory.
        path: PathBuf,
        /// The I/O error (shared, so that errors can be cloned into status).
        #[source]
        source: Arc<io::Error>,
    },
}

/// Why loading the configuration from disk failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LoadError {
    /// The directory could not be read.
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// The files were read but rejected; `Display` is the original's message.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The loader panicked (a bug). The original crashes; we treat it as a
    /// failed load and keep the last good configuration. Only the
    /// [`watcher`](super::watcher) produces this.
    #[error("internal error while loading the configuration: {0}")]
    Panicked(String),
}

impl LoadError {
    /// The message for logs: for a configuration error, the original's
    /// message with the line and the hint ([`ConfigError::detailed`]).
    pub fn detailed(&self) -> String {
        match self {
            LoadError::Config(e) => e.detailed(),
            other => other.to_string(),
        }
    }

    /// The configuration error, if that is what this is.
    pub fn config_error(&self) -> Option<&ConfigError> {
        match self {
            LoadError::Config(e) => Some(e),
            _ => None,
        }
    }
}

/// Reads every configuration file of the layout `opts` describes,
/// sorted by name, names unique.
///
/// A missing directory, or an empty `RUNTIME_SUBDIRECTORY` (watch-root mode)
/// or `RUNTIME_APPDIRECTORY` (directory mode), gives an empty list and a
/// warning. Unreadable files and sub-directories are warned about and
/// skipped. Only a walked directory that exists but cannot be listed is an
/// error.
pub fn collect(opts: &ProviderOptions) -> Result<Vec<ConfigFile>, ProviderError> {
    Ok(read_files(scan(opts)?.files))
}

/// [`collect`] followed by [`load_with`] under
/// [`ProviderOptions::load_options`]: the whole configuration, all or
/// nothing.
pub fn load_from_disk(opts: &ProviderOptions) -> Result<Config, LoadError> {
    let files = collect(opts)?;
    Ok(load_with(&files, opts.load_options())?)
}

/// A file to load: its runtime name and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    /// The runtime key, e.g. `config.basic.yaml`.
    pub(crate) name: String,
    /// The path through which it is read (possibly a symbolic link).
    pub(crate) path: PathBuf,
}

/// What a walk of the layout found, before any file is read.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    /// The files to load, sorted by name; names are unique.
    pub(crate) files: Vec<Found>,
    /// Every path whose change can change the configuration, for the
    /// watcher: the walked directory, each directory descended, the `..`
    /// directories of a ConfigMap mount (and their sub-directories), and
    /// each symbolic link to a file (a watch on a link watches its target).
    /// Directories pruned by the name prefix or by `ignore_dotfiles` are not
    /// here.
    pub(crate) watch: BTreeSet<PathBuf>,
}

/// Set once the "nothing will ever be loaded" warning has been logged, so
/// that it is logged once per process, not once per reload.
static WARNED_NOTHING_TO_LOAD: AtomicBool = AtomicBool::new(false);

/// Walks the layout without reading any file.
pub(crate) fn scan(opts: &ProviderOptions) -> Result<Scan, ProviderError> {
    let Some(target) = opts.target_dir() else {
        if !WARNED_NOTHING_TO_LOAD.swap(true, Ordering::Relaxed) {
            if opts.watch_root {
                tracing::warn!(
                    "RUNTIME_SUBDIRECTORY is empty with RUNTIME_WATCH_ROOT=true: no rate limit \
                     configuration file will ever be loaded, the service runs with an empty \
                     configuration"
                );
            } else {
                tracing::warn!(
                    "RUNTIME_APPDIRECTORY is empty with RUNTIME_WATCH_ROOT=false: no rate limit \
                     configuration file will ever be loaded, the service runs with an empty \
                     configuration"
                );
            }
        }
        return Ok(Scan::default());
    };
    let entries = match fs::metadata(&target) {
        Ok(meta) if !meta.is_dir() => return Err(ProviderError::NotADirectory { path: target }),
        Ok(_) => fs::read_dir(&target),
        Err(e) => Err(e),
    };
    let entries = match entries {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            tracing::warn!(
                path = %target.display(),
                "config directory does not exist; loading an empty configuration"
            );
            return Ok(Scan::default());
        }
        Err(e) => {
            return Err(ProviderError::ReadDir {
                path: target,
                source: Arc::new(e),
            })
        }
    };
    let mut walker = Walker {
        opts,
        prefix: opts.name_prefix(),
        files: Vec::new(),
        watch: BTreeSet::new(),
    };
    walker.watch.insert(target.clone());
    walker.entries(entries, "", Mode::Collect);

    let mut files = walker.files;
    files.sort_by(|a, b| a.name.cmp(&b.name).then_with(|| a.path.cmp(&b.path)));
    files.dedup_by(|later, first| {
        let same = later.name == first.name;
        if same {
            tracing::warn!(
                name = %first.name,
                kept = %first.path.display(),
                skipped = %later.path.display(),
                "two config files have the same name; only the first is loaded"
            );
        }
        same
    });
    Ok(Scan {
        files,
        watch: walker.watch,
    })
}

/// Reads the files of a scan; a file that cannot be read is warned about and
/// skipped (as the original does), never failing the load.
pub(crate) fn read_files(found: Vec<Found>) -> Vec<ConfigFile> {
    let mut files = Vec::with_capacity(found.len());
    for Found { name, path } in found {
        match fs::read(&path) {
            Ok(contents) => files.push(ConfigFile {
                name,
                path: Some(path),
                contents,
            }),
            Err(e) => tracing::warn!(
                name = %name,
                path = %path.display(),
                error = %e,
                "cannot read config file; skipped"
            ),
        }
    }
    files
}

/// How a directory is walked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Collect files and descend.
    Collect,
    /// Inside a `..` directory: only record sub-directories to watch.
    WatchOnly,
}

/// The state of one walk.
#[derive(Debug)]
struct Walker<'a> {
    opts: &'a ProviderOptions,
    /// [`ProviderOptions::name_prefix`].
    prefix: Option<String>,
    files: Vec<Found>,
    watch: BTreeSet<PathBuf>,
}

impl Walker<'_> {
    /// Whether a file of this name is loaded.
    fn wanted(&self, name: &str) -> bool {
        self.prefix.as_ref().is_none_or(|p| name.starts_with(p))
    }

    /// Whether a directory of this (dotted) name can contain a wanted file:
    /// its names all start with `name + "."`, so that must be a prefix of the
    /// wanted prefix, or the other way round.
    fn may_contain_wanted(&self, name: &str) -> bool {
        match &self.prefix {
            None => true,
            Some(prefix) => {
                let dotted = format!("{name}.");
                dotted.starts_with(prefix.as_str()) || prefix.starts_with(&dotted)
            }
        }
    }

    /// Walks one directory's entries; `rel` is the directory's dotted name
    /// relative to the walked root (empty for the root itself).
    fn entries(&mut self, entries: fs::ReadDir, rel: &str, mode: Mode) {
        let mut list: Vec<fs::DirEntry> = Vec::new();
        for entry in entries {
            match entry {
                Ok(entry) => list.push(entry),
                Err(e) => tracing::warn!(error = %e, "cannot list a config directory entry"),
            }
        }
        list.sort_by_key(|e| e.file_name());
        for entry in list {
            self.entry(&entry, rel, mode);
        }
    }

    fn entry(&mut self, entry: &fs::DirEntry, rel: &str, mode: Mode) {
        let file_name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        let file_type = match entry.file_type() {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot stat config entry; skipped");
                return;
            }
        };
        let name = if rel.is_empty() {
            file_name.clone()
        } else {
            format!("{rel}.{file_name}")
        };

        if mode == Mode::WatchOnly {
            if file_type.is_dir() {
                self.descend(&path, &name, Mode::WatchOnly);
            }
            return;
        }

        if file_name.starts_with("..") {
            // Kubernetes atomic-writer internals: never loaded from, but the
            // real directories are watched, because the top-level file links
            // point into them.
            if file_type.is_dir() {
                self.descend(&path, &name, Mode::WatchOnly);
                return;
            }
            if file_type.is_symlink() && fs::metadata(&path).is_ok_and(|m| m.is_dir()) {
                tracing::debug!(path = %path.display(), "not descending a '..' link");
                return;
            }
        }
        if self.opts.ignore_dotfiles && file_name.starts_with('.') {
            return;
        }

        if file_type.is_dir() {
            if self.may_contain_wanted(&name) {
                self.descend(&path, &name, Mode::Collect);
            }
        } else if file_type.is_symlink() {
            if !self.wanted(&name) {
                return;
            }
            match fs::metadata(&path) {
                Ok(meta) if meta.is_file() => {
                    self.watch.insert(path.clone());
                    self.files.push(Found { name, path });
                }
                Ok(meta) if meta.is_dir() => tracing::warn!(
                    path = %path.display(),
                    "symbolic link to a directory in the config directory is not followed; skipped"
                ),
                Ok(_) => tracing::warn!(
                    path = %path.display(),
                    "symbolic link to something that is not a regular file; skipped"
                ),
                Err(e) => tracing::warn!(
                    path = %path.display(),
                    error = %e,
                    "cannot follow symbolic link in the config directory; skipped"
                ),
            }
        } else if file_type.is_file() {
            if self.wanted(&name) {
                self.files.push(Found { name, path });
            }
        } else if self.wanted(&name) {
            tracing::warn!(path = %path.display(), "not a regular file; skipped");
        }
    }

    /// Records a directory for watching and walks it. A directory that
    /// cannot be listed is warned about and skipped, like an unreadable file.
    fn descend(&mut self, path: &Path, name: &str, mode: Mode) {
        self.watch.insert(path.to_path_buf());
        match fs::read_dir(path) {
            Ok(entries) => self.entries(entries, name, mode),
            Err(e) => tracing::warn!(
                path = %path.display(),
                error = %e,
                "cannot read config sub-directory; skipped"
            ),
        }
    }
}

#[cfg(test)]
mod tests;
