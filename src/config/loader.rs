//! Loading a set of files into a [`Config`]: phase A (parse, key check,
//! typed decoding) for every file, then phase B (validation and tree
//! building) in the given order. Any error rejects the whole set.

use std::path::PathBuf;

use super::check;
use super::error::{ConfigError, ConfigErrorKind};
use super::model;
use super::tree::DescriptorTree;
use super::validate;
use super::Config;
use crate::go::yaml;

/// One configuration file's contents and the name errors call it by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigFile {
    /// The runtime key (`config.basic.yaml`), or any name the caller chose.
    pub name: String,
    /// Where it was read from, if from disk (for logs).
    pub path: Option<PathBuf>,
    /// The raw bytes.
    pub contents: Vec<u8>,
}

impl ConfigFile {
    /// A file given by name and contents.
    pub fn new(name: impl Into<String>, contents: impl Into<Vec<u8>>) -> ConfigFile {
        ConfigFile {
            name: name.into(),
            path: None,
            contents: contents.into(),
        }
    }
}

/// How a set of files becomes one configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LoadOptions {
    /// `MERGE_DOMAIN_CONFIG`: the same domain in several files is merged
    /// instead of rejected.
    pub merge_domains: bool,
    /// The store holds the original's fixed windows only (memcache): a rule
    /// that needs more is refused, naming it, where the config loads.
    pub original_windows_only: bool,
}

/// [`load_with`] for any store, merging domains iff `merge_domains`.
pub fn load(files: &[ConfigFile], merge_domains: bool) -> Result<Config, ConfigError> {
    load_with(
        files,
        LoadOptions {
            merge_domains,
            ..LoadOptions::default()
        },
    )
}

/// Parses and validates `files` as one configuration. Files are taken in the
/// order given (callers sort them, so results never depend on directory
/// order); a parse error in any file wins over a load error in another.
pub fn load_with(files: &[ConfigFile], options: LoadOptions) -> Result<Config, ConfigError> {
    let parsed = files.iter().map(parse).collect::<Result<Vec<_>, _>>()?;
    build_with(&parsed, options)
}

/// A file that passed phase A: syntax, key check and typed decoding.
#[derive(Debug, Clone)]
pub struct ParsedFile {
    name: String,
    raw: model::RawFile,
}

impl ParsedFile {
    /// A file decoded by other means than YAML (an xDS resource).
    pub(crate) fn from_raw(name: String, raw: model::RawFile) -> ParsedFile {
        ParsedFile { name, raw }
    }
}

/// [`build_with`] for any store, merging domains iff `merge_domains`.
pub fn build(files: &[ParsedFile], merge_domains: bool) -> Result<Config, ConfigError> {
    build_with(
        files,
        LoadOptions {
            merge_domains,
            ..LoadOptions::default()
        },
    )
}

/// Phase B over parsed files, in the order given.
pub fn build_with(files: &[ParsedFile], options: LoadOptions) -> Result<Config, ConfigError> {
    let raw: Vec<(&str, &model::RawFile)> =
        files.iter().map(|f| (f.name.as_str(), &f.raw)).collect();
    let tree: DescriptorTree = validate::build(&raw, options.merge_domains)?;
    if options.original_windows_only {
        validate::require_original_windows(&raw)?;
    }
    Ok(Config::new(
        tree,
        files.iter().map(|f| f.name.clone()).collect(),
    ))
}

/// Phase A for one file.
pub fn parse(file: &ConfigFile) -> Result<ParsedFile, ConfigError> {
    Ok(ParsedFile {
        name: file.name.clone(),
        raw: parse_raw(file)?,
    })
}

fn parse_raw(file: &ConfigFile) -> Result<model::RawFile, ConfigError> {
    let root = yaml::parse(&file.contents)
        .map_err(|e| ConfigError::new(&file.name, ConfigErrorKind::Syntax(e.message), e.line))?;
    check::check_document(&root).map_err(|e| {
        let mut err = ConfigError::new(&file.name, e.kind, Some(e.line));
        err.hint = e.hint;
        err
    })?;
    model::decode_file(&root).map_err(|errors| {
        let line = errors.first().map(|e| e.line);
        ConfigError::new(&file.name, ConfigErrorKind::Types(errors), line)
    })
}
