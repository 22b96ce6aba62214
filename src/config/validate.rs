//! Phase B: raw files into a [`DescriptorTree`], with the original's rules
//! and error order (config-and-matching.md §3.1): files in the given order,
//! descriptors depth first in document order, first error wins.

use std::sync::Arc;

use super::error::{ConfigError, ConfigErrorKind};
use super::metadata;
use super::model::{RawDescriptor, RawFile, RawRateLimit};
use super::tree::{DescriptorTree, Node, RateLimitRule};
use crate::limiter::Unit;

/// Builds the tree from parsed files. With `merge_domains`, a domain seen
/// again gets the later file's top-level descriptors appended (a shallow
/// merge); without it, that is an error naming the later file.
pub(crate) fn build(
    files: &[(&str, &RawFile)],
    merge_domains: bool,
) -> Result<DescriptorTree, ConfigError> {
    let mut tree = DescriptorTree::default();
    for (name, file) in files {
        if file.domain.is_empty() {
            return Err(ConfigError::new(
                name,
                ConfigErrorKind::EmptyDomain,
                Some(file.domain_line),
            ));
        }
        if tree.domains.contains_key(&file.domain) && !merge_domains {
            return Err(ConfigError::new(
                name,
                ConfigErrorKind::DuplicateDomain(file.domain.clone()),
                Some(file.domain_line),
            ));
        }
        let root = tree
            .domains
            .entry(file.domain.clone())
            .or_insert_with(|| Node::new(""));
        load_descriptors(name, root, &file.domain, &file.descriptors)?;
    }
    Ok(tree)
}

fn load_descriptors(
    file: &str,
    parent: &mut Node,
    parent_key: &str,
    descriptors: &[RawDescriptor],
) -> Result<(), ConfigError> {
    for d in descriptors {
        let err = |kind, line| ConfigError::new(file, kind, Some(line));
        if d.key.is_empty() {
            return Err(err(ConfigErrorKind::EmptyKey, d.line));
        }
        let composite = if d.value.is_empty() {
            d.key.clone()
        } else {
            format!("{}_{}", d.key, d.value)
        };
        let load_key = format!("{parent_key}.{composite}");
        if parent.has_child(&composite) {
            return Err(err(
                ConfigErrorKind::DuplicateCompositeKey(load_key),
                d.line,
            ));
        }
        let unit = match &d.rate_limit {
            Some(rl) => Some(check_rate_limit(file, rl)?),
            None => None,
        };
        if d.share_threshold && !composite.contains('*') {
            return Err(err(
                ConfigErrorKind::ShareThresholdWithoutWildcard(composite),
                d.line,
            ));
        }
        let metadata = match &d.metadata {
            Some(node) => Some(Arc::new(
                metadata::from_node(node)
                    .map_err(|e| err(ConfigErrorKind::Metadata(e), node.line))?,
            )),
            None => None,
        };
        let mut child = Node::new(&composite);
        child.value_to_metric = d.value_to_metric;
        child.share_threshold = d.share_threshold;
        child.limit = d.rate_limit.as_ref().zip(unit).map(|(rl, unit)| {
            Arc::new(RateLimitRule {
                requests_per_unit: rl.requests_per_unit,
                unit,
                name: rl.name.clone(),
                unlimited: rl.unlimited,
                shadow_mode: d.shadow_mode,
                quota_mode: d.quota_mode,
                detailed_metric: d.detailed_metric,
                replaces: rl.replaces.iter().map(|r| r.name.clone()).collect(),
                metadata: metadata.clone(),
                load_key: load_key.clone(),
            })
        });
        load_descriptors(file, &mut child, &load_key, &d.descriptors)?;
        parent.insert(child);
    }
    Ok(())
}

/// The unit rules of §2.4–2.5 and the `replaces` rules; returns the unit to
/// store (UNKNOWN for unlimited rules).
fn check_rate_limit(file: &str, rl: &RawRateLimit) -> Result<Unit, ConfigError> {
    let valid = Unit::from_name(&rl.unit).filter(|u| *u != Unit::Unknown);
    let unit = match (rl.unlimited, valid) {
        (true, Some(_)) => {
            return Err(ConfigError::new(
                file,
                ConfigErrorKind::UnitWithUnlimited,
                Some(rl.line),
            ))
        }
        (true, None) => Unit::Unknown,
        (false, Some(unit)) => unit,
        (false, None) => {
            return Err(ConfigError::new(
                file,
                ConfigErrorKind::InvalidUnit(rl.unit.clone()),
                Some(rl.line),
            ))
        }
    };
    for r in &rl.replaces {
        if r.name.is_empty() {
            return Err(ConfigError::new(
                file,
                ConfigErrorKind::EmptyReplaces,
                Some(r.line),
            ));
        }
        if r.name == rl.name {
            return Err(ConfigError::new(
                file,
                ConfigErrorKind::ReplacesSelf,
                Some(r.line),
            ));
        }
    }
    Ok(unit)
}
