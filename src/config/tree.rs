//! The validated rule tree and its lookup.
//!
//! Each domain is a tree of nodes keyed by the *composite* string of a rule:
//! `key` when the rule has no value, `key_value` otherwise. A request entry
//! `(k, v)` is looked up as the composite `k_v` — exact hit first (a hash
//! lookup, so the cost does not grow with the number of siblings), then the
//! node's wildcard composites in document order (first match wins), then the
//! key-only child `k`. There is no backtracking, and a limit applies only if
//! it sits on the node reached by the request's last entry.
//!
//! Matching on the composite string rather than on `(key, value)` pairs is
//! deliberate: it reproduces the original's results for keys and values that
//! contain `_` or `*`, on which existing configs depend.

use super::failure::FailurePolicy;
use std::collections::HashMap;
use std::sync::Arc;

use indexmap::IndexMap;

use super::glob::Glob;
use super::metadata::Metadata;
use crate::limiter::Unit;

/// One `(key, value)` entry of a request descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Entry {
    /// The entry key, compared exactly.
    pub key: String,
    /// The entry value; "" matches key-only rules.
    pub value: String,
}

impl Entry {
    /// An entry from anything string-like.
    pub fn new(key: impl Into<String>, value: impl Into<String>) -> Entry {
        Entry {
            key: key.into(),
            value: value.into(),
        }
    }
}

/// A per-request limit override (`descriptor.limit`), unit as sent on the
/// wire so an out-of-range number can be reported rather than trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitOverride {
    /// Allowed hits per unit.
    pub requests_per_unit: u32,
    /// The protobuf enum number of the unit.
    pub unit: i32,
}

/// A limit as configured (or built from an override).
#[derive(Debug, Clone, PartialEq)]
pub struct RateLimitRule {
    /// Allowed hits per unit window; 0 makes every hit over the limit.
    pub requests_per_unit: u32,
    /// The window; [`Unit::Unknown`] only when `unlimited`.
    pub unit: Unit,
    /// The name `replaces` refers to; "" when unnamed.
    pub name: String,
    /// Matches but is never counted.
    pub unlimited: bool,
    /// Over-limit results are reported as OK.
    pub shadow_mode: bool,
    /// Counts as a quota rule for the overall verdict.
    pub quota_mode: bool,
    /// Stats key uses the request's values (honoured on this node only).
    pub detailed_metric: bool,
    /// Names of limits this one cancels when both apply to a request.
    pub replaces: Vec<String>,
    /// The descriptor's `metadata`.
    pub metadata: Option<Arc<Metadata>>,
    /// `domain.composite.composite…`: the path of the rule, as `/rlconfig`
    /// shows it and as the stats key of a plain match.
    pub load_key: String,
    /// The rule as the stores tell it apart (its load key, hashed once).
    pub id: RuleId,
    /// The opt-in limits (extension keys `algorithm`, `burst`,
    /// `unit_multiplier`, `rate_limits`), all of which must pass. Empty for
    /// a rule written in the original's vocabulary, which keeps the
    /// original's fixed window, keys and arithmetic exactly; then the limit
    /// is `requests_per_unit` per `unit`.
    pub limits: Vec<ConfiguredLimit>,
    /// What the rule does when the store cannot answer (for a rule in the
    /// original's vocabulary; each extension limit has its own).
    pub failure: FailurePolicy,
    /// `calendar: true` on a rule in the original's vocabulary: its windows
    /// are the calendar's, on keys of their own. `None`: the original's
    /// epoch-aligned windows and keys.
    pub calendar: Option<crate::limiter::Calendar>,
    /// `sync_interval` on a rule in the original's vocabulary: its window
    /// is decided local-first, written back this often (see
    /// [`crate::resilience::leases::local`]). `None`: at the store, or as
    /// `LOCAL_FIRST_SYNC_INTERVAL` says.
    pub sync_interval: Option<std::time::Duration>,
}

/// One limit of a rule that uses the extension keys.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfiguredLimit {
    /// As configured; the response's `current_limit` reports it.
    pub requests_per_unit: u32,
    /// The proto unit of the window; the window is `unit × unit_multiplier`.
    pub unit: Unit,
    /// Windows of any length: `unit_multiplier` units (≥ 1).
    pub unit_multiplier: u32,
    /// The block's `name` ("" when unnamed).
    pub name: String,
    /// The built algorithm.
    pub limiter: crate::limiter::Limiter,
    /// `<algorithm tag>:<window seconds>s`: what tells this limit's store
    /// key from the other limits of the same descriptor.
    pub key_suffix: String,
    /// What this limit does when the store cannot answer.
    pub failure: FailurePolicy,
    /// How a hot key of this limit spreads its store work (`shards`,
    /// `lease`).
    pub hot: HotKeyPolicy,
    /// With `shards: K`, the K sub-buckets (see
    /// [`crate::limiter::Limiter::sub_bucket`]); empty otherwise.
    pub sub_buckets: Vec<crate::limiter::Limiter>,
    /// `calendar: true`: a fixed window over the calendar's periods (the
    /// limiter then holds the unit's nominal length, for failure floors).
    pub calendar: Option<crate::limiter::Calendar>,
    /// `sync_interval` on a calendar window: decided local-first.
    pub sync_interval: Option<std::time::Duration>,
}

/// A limit's remedies for a hot key (extensions, both off by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HotKeyPolicy {
    /// `shards: K`: K sub-buckets that add up to the limit (1: none).
    pub shards: u8,
    /// `lease: true`: an instance may take a batch of tokens at once.
    pub lease: bool,
}

impl Default for HotKeyPolicy {
    fn default() -> HotKeyPolicy {
        HotKeyPolicy {
            shards: 1,
            lease: false,
        }
    }
}

/// A rule as the stores tell it apart: its load key, hashed once when the
/// rule is built, so that telling two keys' rules apart costs a compare.
/// The memory store shares its key cap between rules by it.
#[derive(Debug, Clone)]
pub struct RuleId {
    hash: u64,
    name: Arc<str>,
}

impl RuleId {
    /// The id of the rule at `load_key`.
    pub fn new(load_key: &str) -> RuleId {
        use std::hash::{Hash, Hasher};
        // Fixed keys: the same rule has the same id in every process.
        let mut h = std::collections::hash_map::DefaultHasher::new();
        load_key.hash(&mut h);
        RuleId {
            hash: h.finish(),
            name: load_key.into(),
        }
    }

    /// Its hash.
    pub fn hash(&self) -> u64 {
        self.hash
    }

    /// Its load key.
    pub fn name(&self) -> &Arc<str> {
        &self.name
    }
}

impl PartialEq for RuleId {
    fn eq(&self, other: &RuleId) -> bool {
        self.hash == other.hash && self.name == other.name
    }
}

impl Eq for RuleId {}

impl RateLimitRule {
    /// How a decision names the rule: its `name`, or its path (the load
    /// key) when it has none.
    pub fn label(&self) -> &str {
        if self.name.is_empty() {
            &self.load_key
        } else {
            &self.name
        }
    }

    /// Every name `replaces` can refer to this rule by: its `name`, and with
    /// `rate_limits` the name of every block.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.name.as_str())
            .chain(self.limits.iter().map(|l| l.name.as_str()))
            .filter(|n| !n.is_empty())
    }

    /// Whether the rule runs the original's fixed window (no extension key
    /// but `calendar`, which changes only its windows and keys).
    pub fn is_original(&self) -> bool {
        self.limits.is_empty()
    }
}

impl RateLimitRule {
    /// The rule a per-request override stands for: no name, no modes, no
    /// metadata.
    pub(crate) fn from_override(
        requests_per_unit: u32,
        unit: Unit,
        load_key: String,
    ) -> RateLimitRule {
        RateLimitRule {
            requests_per_unit,
            unit,
            name: String::new(),
            unlimited: false,
            shadow_mode: false,
            quota_mode: false,
            detailed_metric: false,
            replaces: Vec::new(),
            metadata: None,
            id: RuleId::new(&load_key),
            load_key,
            limits: Vec::new(),
            failure: FailurePolicy::default(),
            calendar: None,
            sync_interval: None,
        }
    }
}

/// The limit a descriptor matched, with what depends on the request.
#[derive(Debug, Clone, PartialEq)]
pub struct MatchedLimit {
    /// The rule; shared with the tree, so a match costs no copy of it.
    pub rule: Arc<RateLimitRule>,
    /// The key the per-rule stats are counted under.
    pub stats_key: String,
    /// Whether `stats_key` carries values of the request (`detailed_metric`,
    /// `value_to_metric`, an override): a per-value series, unbounded by the
    /// config. Otherwise the key is the rule's own, one of the config's.
    pub stats_per_value: bool,
    /// With `share_threshold`: per request entry, the pattern that replaces
    /// the entry's value in the cache key, or "".
    pub share_threshold_key_pattern: Option<Vec<String>>,
    /// Built from a per-request override rather than matched.
    pub from_override: bool,
    /// The version of the per-tenant override ([`crate::overrides`]) that
    /// replaced the rule's limit, if one did.
    pub tenant_override: Option<u64>,
}

/// The outcome of [`DescriptorTree::find`].
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup {
    /// The domain is not configured (the caller counts `domain_not_found`).
    DomainNotFound,
    /// No limit applies to this descriptor.
    NoLimit,
    /// This limit applies.
    Limit(MatchedLimit),
}

/// A descriptor that cannot be matched at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MatchError {
    /// An override whose unit is UNKNOWN or outside the enum; the original
    /// crashes on it.
    #[error("descriptor limit override has invalid unit {0}")]
    InvalidOverrideUnit(i32),
}

/// How one level of a request matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum How {
    Exact,
    Wildcard,
    Default,
}

/// A node of the tree. Children are kept in document order (for the dump)
/// and indexed by composite (for lookup).
#[derive(Debug, Default)]
pub(crate) struct Node {
    /// Shared with the parent's index: one copy of a (possibly long)
    /// descriptor value.
    pub(crate) composite: Arc<str>,
    pub(crate) children: Vec<Node>,
    pub(crate) index: HashMap<Arc<str>, usize>,
    /// Children whose composite contains `*`, in insertion order.
    pub(crate) wildcards: Vec<(usize, Glob)>,
    pub(crate) limit: Option<Arc<RateLimitRule>>,
    pub(crate) value_to_metric: bool,
    pub(crate) share_threshold: bool,
}

impl Node {
    pub(crate) fn new(composite: impl Into<Arc<str>>) -> Node {
        Node {
            composite: composite.into(),
            ..Node::default()
        }
    }

    /// Adds a child; the caller has checked the composite is new.
    pub(crate) fn insert(&mut self, child: Node) {
        let at = self.children.len();
        if let Some(glob) = Glob::new(&child.composite) {
            self.wildcards.push((at, glob));
        }
        self.index.insert(Arc::clone(&child.composite), at);
        self.children.push(child);
    }

    pub(crate) fn has_child(&self, composite: &str) -> bool {
        self.index.contains_key(composite)
    }

    fn child(&self, composite: &str) -> Option<&Node> {
        self.index.get(composite).map(|&i| &self.children[i])
    }

    /// Exact, then first matching wildcard, then key-only.
    fn choose(&self, probe: &str, key: &str) -> Option<(&Node, How)> {
        if let Some(c) = self.child(probe) {
            return Some((c, How::Exact));
        }
        if let Some((i, _)) = self.wildcards.iter().find(|(_, g)| g.matches(probe)) {
            return Some((&self.children[*i], How::Wildcard));
        }
        self.child(key).map(|c| (c, How::Default))
    }
}

/// Every configured domain with its rules: the matching half of a loaded
/// configuration. Immutable once built; a reload builds a new one.
#[derive(Debug, Default)]
pub struct DescriptorTree {
    pub(crate) domains: IndexMap<String, Node>,
}

impl DescriptorTree {
    /// Number of configured domains.
    pub fn domain_count(&self) -> usize {
        self.domains.len()
    }

    /// The configured domains, in load order.
    pub fn domains(&self) -> impl Iterator<Item = &str> {
        self.domains.keys().map(String::as_str)
    }

    /// The limit for one request descriptor.
    pub fn find(
        &self,
        domain: &str,
        entries: &[Entry],
        limit_override: Option<&LimitOverride>,
    ) -> Result<Lookup, MatchError> {
        let Some(root) = self.domains.get(domain) else {
            return Ok(Lookup::DomainNotFound);
        };
        if let Some(o) = limit_override {
            return override_limit(domain, entries, o).map(Lookup::Limit);
        }
        let mut path: Vec<(&Node, How)> = Vec::with_capacity(entries.len());
        let mut shares: Vec<Option<&str>> = Vec::new();
        let mut node = root;
        let mut result: Option<&Arc<RateLimitRule>> = None;
        let mut probe = String::new();
        for (i, e) in entries.iter().enumerate() {
            probe.clear();
            probe.push_str(&e.key);
            probe.push('_');
            probe.push_str(&e.value);
            let Some((child, how)) = node.choose(&probe, &e.key) else {
                break;
            };
            if how == How::Wildcard && child.share_threshold {
                shares.resize(entries.len(), None);
                shares[i] = Some(strip_key(&child.composite, &e.key));
            }
            path.push((child, how));
            if i == entries.len() - 1 {
                result = child.limit.as_ref();
            }
            if child.children.is_empty() {
                break;
            }
            node = child;
        }
        let Some(rule) = result else {
            return Ok(Lookup::NoLimit);
        };
        let stats_key = stats_key(domain, entries, &path, &shares, rule.detailed_metric);
        // A value enters the key where detailed_metric asks, or where
        // value_to_metric does at a wildcard or default (not replaced by a
        // share_threshold pattern).
        let stats_per_value = rule.detailed_metric
            || path.iter().enumerate().any(|(i, (node, how))| {
                node.value_to_metric
                    && *how != How::Exact
                    && shares.get(i).copied().flatten().is_none()
            });
        let share_threshold_key_pattern = (!shares.is_empty()).then(|| {
            shares
                .iter()
                .map(|p| p.unwrap_or_default().to_string())
                .collect()
        });
        Ok(Lookup::Limit(MatchedLimit {
            rule: Arc::clone(rule),
            stats_key,
            stats_per_value,
            share_threshold_key_pattern,
            from_override: false,
            tenant_override: None,
        }))
    }

    /// The descriptor an RLQS bucket stands for: its `(key, value)` pairs in
    /// the order the domain's tree asks for them. From the root, each level
    /// takes the pair that one of its children matches (exact value, then
    /// wildcard, then key-only, as [`DescriptorTree::find`] chooses; among
    /// several pairs, the first by key), until no pair left matches or the
    /// path reaches a leaf. Pairs the tree never asks for are not part of
    /// it, so the bucket's rule is the one at the end of the longest path
    /// its pairs make. `None` for an unknown domain.
    pub fn bucket_entries(&self, domain: &str, pairs: &HashMap<&str, &str>) -> Option<Vec<Entry>> {
        let mut node = self.domains.get(domain)?;
        let mut left: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, *v)).collect();
        left.sort_unstable();
        let mut entries = Vec::new();
        let mut probe = String::new();
        loop {
            let found = left.iter().enumerate().find_map(|(i, (k, v))| {
                probe.clear();
                probe.push_str(k);
                probe.push('_');
                probe.push_str(v);
                node.choose(&probe, k).map(|(child, _)| (i, child))
            });
            let Some((i, child)) = found else {
                break;
            };
            let (k, v) = left.remove(i);
            entries.push(Entry::new(k, v));
            if child.children.is_empty() {
                break;
            }
            node = child;
        }
        Some(entries)
    }

    /// Every node that has a limit, depth first, parents before children,
    /// domains in load order and siblings in document order.
    pub fn rules(&self) -> Vec<&RateLimitRule> {
        fn walk<'a>(node: &'a Node, out: &mut Vec<&'a RateLimitRule>) {
            if let Some(rule) = &node.limit {
                out.push(rule);
            }
            for child in &node.children {
                walk(child, out);
            }
        }
        let mut out = Vec::new();
        for root in self.domains.values() {
            walk(root, &mut out);
        }
        out
    }
}

/// `strings.TrimPrefix(composite, key + "_")`.
fn strip_key<'a>(composite: &'a str, key: &str) -> &'a str {
    composite
        .strip_prefix(key)
        .and_then(|rest| rest.strip_prefix('_'))
        .unwrap_or(composite)
}

fn override_limit(
    domain: &str,
    entries: &[Entry],
    o: &LimitOverride,
) -> Result<MatchedLimit, MatchError> {
    let unit = match Unit::from_proto(o.unit) {
        Some(Unit::Unknown) | None => return Err(MatchError::InvalidOverrideUnit(o.unit)),
        Some(u) => u,
    };
    let mut key = String::from(domain);
    key.push('.');
    for (i, e) in entries.iter().enumerate() {
        if i > 0 {
            key.push('.');
        }
        key.push_str(&e.key);
        if !e.value.is_empty() {
            key.push('_');
            key.push_str(&e.value);
        }
    }
    Ok(MatchedLimit {
        rule: Arc::new(RateLimitRule::from_override(
            o.requests_per_unit,
            unit,
            key.clone(),
        )),
        stats_key: key,
        stats_per_value: true,
        share_threshold_key_pattern: None,
        from_override: true,
        tenant_override: None,
    })
}

/// The per-rule stats key for a request that reached a limit: `path` has one
/// node per entry.
fn stats_key(
    domain: &str,
    entries: &[Entry],
    path: &[(&Node, How)],
    shares: &[Option<&str>],
    detailed: bool,
) -> String {
    let share = |i: usize| shares.get(i).copied().flatten();
    let mut key = String::from(domain);
    for (i, (e, (node, how))) in entries.iter().zip(path).enumerate() {
        key.push('.');
        key.push_str(&e.key);
        let value: &str = if detailed {
            if !shares.is_empty() {
                share(i).unwrap_or(&e.value)
            } else {
                // Always with the underscore, even for an empty value.
                key.push('_');
                key.push_str(&e.value);
                continue;
            }
        } else {
            match how {
                How::Exact => &e.value,
                How::Wildcard => match share(i) {
                    Some(p) => p,
                    None if node.value_to_metric => &e.value,
                    None => strip_key(&node.composite, &e.key),
                },
                How::Default if node.value_to_metric => &e.value,
                How::Default => "",
            }
        };
        if !value.is_empty() {
            key.push('_');
            key.push_str(value);
        }
    }
    key
}

#[cfg(test)]
mod tests;
