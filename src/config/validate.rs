//! Phase B: raw files into a [`DescriptorTree`], with the original's rules
//! and error order: files in the given order,
//! descriptors depth first in document order, first error wins.

use std::sync::Arc;

use super::error::{ConfigError, ConfigErrorKind};
use super::failure::FailurePolicy;
use super::metadata;
use super::model::{RawDescriptor, RawFile, RawMetadata};
use super::tree::{DescriptorTree, Node, RateLimitRule};
use limit::{
    calendar_of, check_rate_limit, extension_limits, failure_policy, limit_of, sync_interval_of,
};

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

/// Refuses the first rule that a store holding the original's fixed
/// windows only (memcache) cannot count: an opt-in algorithm, a burst, a
/// unit multiplier, several limits, sub-buckets or leasing. Files, then
/// descriptors depth first in document order, as the other errors.
pub(crate) fn require_original_windows(files: &[(&str, &RawFile)]) -> Result<(), ConfigError> {
    fn walk(
        file: &str,
        parent_key: &str,
        descriptors: &[RawDescriptor],
    ) -> Result<(), ConfigError> {
        for d in descriptors {
            let load_key = match d.value.is_empty() {
                true => format!("{parent_key}.{}", d.key),
                false => format!("{parent_key}.{}_{}", d.key, d.value),
            };
            if let Some((line, feature)) = opt_in_feature(d) {
                let kind = ConfigErrorKind::StoreCannotCount {
                    rule: load_key,
                    feature,
                };
                return Err(ConfigError::new(file, kind, Some(line)));
            }
            walk(file, &load_key, &d.descriptors)?;
        }
        Ok(())
    }
    for (name, file) in files {
        walk(name, &file.domain, &file.descriptors)?;
    }
    Ok(())
}

/// The first opt-in feature a descriptor's rule uses, and its line.
fn opt_in_feature(d: &RawDescriptor) -> Option<(usize, &'static str)> {
    if let Some((line, _)) = &d.rate_limits {
        return Some((*line, "rate_limits"));
    }
    let rl = d.rate_limit.as_ref()?;
    let feature = if rl.calendar {
        "calendar"
    } else if !rl.algorithm.is_empty() {
        "algorithm"
    } else if rl.burst.is_some() {
        "burst"
    } else if rl.unit_multiplier.is_some() {
        "unit_multiplier"
    } else if rl.shards.is_some() {
        "shards"
    } else if rl.lease {
        "lease"
    } else {
        return None;
    };
    Some((rl.line, feature))
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
        let (unit, failure, calendar, sync_interval) = match &d.rate_limit {
            Some(rl) => (
                Some(check_rate_limit(file, rl)?),
                failure_policy(file, rl)?,
                calendar_of(file, rl)?,
                sync_interval_of(file, rl)?,
            ),
            None => (None, FailurePolicy::default(), None, None),
        };
        let (blocks, limits) = extension_limits(file, d)?;
        if d.share_threshold && !composite.contains('*') {
            return Err(err(
                ConfigErrorKind::ShareThresholdWithoutWildcard(composite),
                d.line,
            ));
        }
        let metadata = match &d.metadata {
            Some(RawMetadata::Yaml(node)) => Some(Arc::new(
                metadata::from_node(node)
                    .map_err(|e| err(ConfigErrorKind::Metadata(e), node.line))?,
            )),
            Some(RawMetadata::Decoded(m)) => Some(Arc::new(m.clone())),
            None => None,
        };
        // The composite moves into the node, and the rule owns the load
        // key that the children extend: a long value is copied as few
        // times as the tree needs.
        let mut child = Node::new(composite);
        child.value_to_metric = d.value_to_metric;
        child.share_threshold = d.share_threshold;
        let rule = match (&d.rate_limit, blocks) {
            (Some(rl), _) => unit.map(|unit| (rl, unit)),
            (None, Some(first)) => limits.first().map(|l| (first, l.unit)),
            (None, None) => None,
        };
        child.limit = rule.map(|(rl, unit)| {
            Arc::new(RateLimitRule {
                requests_per_unit: limit_of(rl),
                unit,
                name: rl.name.clone(),
                unlimited: rl.unlimited,
                shadow_mode: d.shadow_mode,
                quota_mode: d.quota_mode,
                detailed_metric: d.detailed_metric,
                replaces: rl.replaces.iter().map(|r| r.name.clone()).collect(),
                metadata: metadata.clone(),
                id: super::tree::RuleId::new(&load_key),
                load_key: load_key.clone(),
                limits: limits.clone(),
                failure,
                calendar: calendar.clone(),
                sync_interval,
            })
        });
        let rule = child.limit.clone();
        let parent_key = match &rule {
            Some(rule) => {
                drop(load_key);
                rule.load_key.as_str()
            }
            None => load_key.as_str(),
        };
        load_descriptors(file, &mut child, parent_key, &d.descriptors)?;
        parent.insert(child);
    }
    Ok(())
}

/// One limit block's unit and `replaces` checks (see [`super::limit_block`]).
pub(crate) fn check_block(
    file: &str,
    rl: &super::model::RawRateLimit,
) -> Result<crate::limiter::Unit, ConfigError> {
    limit::check_rate_limit(file, rl)
}

/// A descriptor's opt-in limits (see [`super::limit_block`]).
pub(crate) fn extension_limits_of(
    file: &str,
    d: &RawDescriptor,
) -> Result<(bool, Vec<crate::config::tree::ConfiguredLimit>), ConfigError> {
    limit::extension_limits(file, d).map(|(first, limits)| (first.is_some(), limits))
}

mod limit;

#[cfg(test)]
mod tests;
