//! Descriptor configuration: the original's YAML rule files, read, checked,
//! validated and matched exactly as the original does.
//!
//! The pipeline, one module a step:
//! - the crate's YAML 1.1 (yaml.v2) reader gives a node tree with lines;
//! - `check`: the flat allowed-key check (phase A.2);
//! - `model`: typed decoding with yaml.v2's type errors (phase A.3);
//! - `validate`: the rules of phase B, building a [`DescriptorTree`];
//! - [`loader`]: a set of files into a [`Config`], all or nothing;
//! - [`tree`]: the rule tree and its lookup;
//! - [`dump`]: the `/rlconfig` text;
//! - [`live`]: the live configuration every provider publishes into.

pub mod check;
pub mod dump;
pub mod error;
pub mod failure;
pub mod glob;
pub mod limit_block;
pub mod live;
pub mod loader;
pub mod metadata;
pub(crate) mod model;
pub mod provider;
pub mod tree;
pub(crate) mod validate;
pub mod watcher;
pub mod xds;

pub use error::{ConfigError, ConfigErrorKind};
pub use failure::{Durability, FailureDefaults, FailureMode, FailurePolicy, OnFailure};
pub use live::LiveConfig;
pub use loader::{load, load_with, ConfigFile, LoadOptions};
pub use metadata::{Metadata, MetadataValue};
pub use provider::{load_from_disk, LoadError, ProviderError, ProviderOptions};
pub use tree::{
    ConfiguredLimit, DescriptorTree, Entry, HotKeyPolicy, LimitOverride, Lookup, MatchError,
    MatchedLimit, RateLimitRule,
};
pub use watcher::{ConfigWatcher, ReloadStatus, WatchError};

/// A loaded configuration: the rules of every domain and the files they came
/// from. Immutable; a reload publishes a new one.
#[derive(Debug, Default)]
pub struct Config {
    tree: DescriptorTree,
    files: Vec<String>,
}

impl Config {
    pub(crate) fn new(tree: DescriptorTree, files: Vec<String>) -> Config {
        Config { tree, files }
    }

    /// The rule tree.
    pub fn tree(&self) -> &DescriptorTree {
        &self.tree
    }

    /// The names of the files this configuration was loaded from, in order.
    pub fn files(&self) -> &[String] {
        &self.files
    }

    /// The `/rlconfig` text.
    pub fn dump(&self) -> String {
        dump::dump(&self.tree, None)
    }

    /// The `/rlconfig` text of a service whose `LOCAL_FIRST_SYNC_INTERVAL`
    /// is `default_sync`: the windows it makes local-first show it too.
    pub fn dump_with(&self, default_sync: Option<std::time::Duration>) -> String {
        dump::dump(&self.tree, default_sync)
    }
}
