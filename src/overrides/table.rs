//! The overrides this instance applies: the book as last read, indexed by
//! target, swapped whole at each read that found a change. A request reads
//! it without a lock; a descriptor costs one hash lookup, and nothing while
//! the book is empty.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use arc_swap::ArcSwap;
use parking_lot::Mutex;

use super::record::Record;
use crate::config::tree::{Entry, RateLimitRule};
use crate::store::overrides::BookEntry;

/// One override in force: its record, version and expiry, and the rule it
/// made of the last rule it was applied to.
#[derive(Debug)]
pub struct Active {
    /// What was written.
    pub record: Record,
    /// The change that wrote it.
    pub version: u64,
    /// When it expires (ms since the epoch; 0: never).
    pub expires_at_ms: u64,
    /// The last (rule, rule with the override) pair: the rule is known by
    /// its address, which a config reload changes.
    made: Mutex<Option<(usize, Arc<RateLimitRule>)>>,
}

impl Active {
    /// `rule` with this override's limit; `None` when the limit cannot be
    /// built for it (logged; the rule then applies as written).
    pub fn applied_to(&self, rule: &Arc<RateLimitRule>) -> Option<Arc<RateLimitRule>> {
        let address = Arc::as_ptr(rule) as usize;
        let mut made = self.made.lock();
        if let Some((a, r)) = made.as_ref() {
            if *a == address {
                return Some(Arc::clone(r));
            }
        }
        match crate::config::limit_block::with_block(rule, &self.record.limit.block()) {
            Ok(r) => {
                let r = Arc::new(r);
                *made = Some((address, Arc::clone(&r)));
                Some(r)
            }
            Err(e) => {
                tracing::warn!(
                    rule = %rule.load_key,
                    "override version {} cannot apply to the rule: {e}",
                    self.version
                );
                None
            }
        }
    }

    fn live_at(&self, now_ms: u64) -> bool {
        self.expires_at_ms == 0 || now_ms < self.expires_at_ms
    }
}

/// The book as this instance last read it.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// The book's version.
    pub version: u64,
    /// By the hash of the target, every override with that hash.
    by_target: HashMap<u64, Vec<Arc<Active>>>,
}

impl Snapshot {
    /// The snapshot of the book's `entries` at `version`; entries whose
    /// record does not parse are logged and left out.
    pub fn of(version: u64, entries: Vec<BookEntry>) -> Snapshot {
        let mut by_target: HashMap<u64, Vec<Arc<Active>>> = HashMap::new();
        for e in entries {
            let record: Record = match serde_json::from_str(&e.record) {
                Ok(r) => r,
                Err(err) => {
                    tracing::warn!(id = %e.id, "overrides: a record that does not parse: {err}");
                    continue;
                }
            };
            let hash = target_hash(
                &record.domain,
                record
                    .descriptor
                    .iter()
                    .map(|d| (d.key.as_str(), d.value.as_str())),
            );
            by_target.entry(hash).or_default().push(Arc::new(Active {
                record,
                version: e.version,
                expires_at_ms: e.expires_at_ms,
                made: Mutex::new(None),
            }));
        }
        Snapshot { version, by_target }
    }

    /// Every override, expired ones included.
    pub fn all(&self) -> impl Iterator<Item = &Arc<Active>> {
        self.by_target.values().flatten()
    }
}

/// The live table.
#[derive(Debug, Default)]
pub struct OverrideTable {
    live: ArcSwap<Snapshot>,
}

impl OverrideTable {
    /// An empty table.
    pub fn new() -> Arc<OverrideTable> {
        Arc::new(OverrideTable::default())
    }

    /// The snapshot in force.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.live.load_full()
    }

    /// Puts `snapshot` in force.
    pub fn publish(&self, snapshot: Snapshot) {
        self.live.store(Arc::new(snapshot));
    }

    /// The version in force.
    pub fn version(&self) -> u64 {
        self.live.load().version
    }

    /// The override of `domain` and exactly `entries` (every key and value,
    /// in order) in force now, if any: the clock is read only on a hit.
    pub fn find(&self, domain: &str, entries: &[Entry]) -> Option<Arc<Active>> {
        self.find_with(domain, entries, now_ms)
    }

    /// [`OverrideTable::find`] at `now_ms`.
    pub fn find_at(&self, domain: &str, entries: &[Entry], now_ms: u64) -> Option<Arc<Active>> {
        self.find_with(domain, entries, || now_ms)
    }

    fn find_with(
        &self,
        domain: &str,
        entries: &[Entry],
        now_ms: impl FnOnce() -> u64,
    ) -> Option<Arc<Active>> {
        let live = self.live.load();
        if live.by_target.is_empty() {
            return None;
        }
        let pairs = || entries.iter().map(|e| (e.key.as_str(), e.value.as_str()));
        let found = live
            .by_target
            .get(&target_hash(domain, pairs()))?
            .iter()
            .find(|a| {
                a.record.domain == domain
                    && a.record.descriptor.len() == entries.len()
                    && a.record
                        .descriptor
                        .iter()
                        .zip(pairs())
                        .all(|(d, (k, v))| d.key == k && d.value == v)
            })?;
        found.live_at(now_ms()).then(|| Arc::clone(found))
    }
}

/// Milliseconds since the Unix epoch, now: the wall clock every instance
/// reads an override's expiry by.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A hash of a target: the domain and every (key, value), each text
/// length-prefixed so that no two targets run together.
fn target_hash<'a>(domain: &str, pairs: impl Iterator<Item = (&'a str, &'a str)>) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    domain.hash(&mut h);
    for (k, v) in pairs {
        k.hash(&mut h);
        v.hash(&mut h);
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::overrides::record::{DescriptorEntry, OverrideLimit};

    fn entry(id: &str, domain: &str, pairs: &[(&str, &str)], expires_at_ms: u64) -> BookEntry {
        let record = Record {
            domain: domain.into(),
            descriptor: pairs
                .iter()
                .map(|(k, v)| DescriptorEntry {
                    key: (*k).into(),
                    value: (*v).into(),
                })
                .collect(),
            limit: OverrideLimit {
                requests_per_unit: 5,
                unit: "minute".into(),
                algorithm: None,
                burst: None,
                unit_multiplier: None,
            },
            expires_at_ms: None,
            updated_at_ms: 0,
            updated_by: "test".into(),
        };
        BookEntry {
            id: id.into(),
            version: 1,
            expires_at_ms,
            record: serde_json::to_string(&record).expect("a record"),
        }
    }

    #[test]
    fn an_override_applies_to_its_exact_descriptor_only() {
        let table = OverrideTable::default();
        table.publish(Snapshot::of(
            1,
            vec![entry("a", "api", &[("tenant", "acme"), ("route", "x")], 0)],
        ));
        let e = |pairs: &[(&str, &str)]| -> Vec<Entry> {
            pairs.iter().map(|(k, v)| Entry::new(*k, *v)).collect()
        };
        assert!(table
            .find_at("api", &e(&[("tenant", "acme"), ("route", "x")]), 0)
            .is_some());
        for other in [
            e(&[("tenant", "acme")]),
            e(&[("route", "x"), ("tenant", "acme")]),
            e(&[("tenant", "acme"), ("route", "y")]),
        ] {
            assert!(table.find_at("api", &other, 0).is_none(), "{other:?}");
        }
        assert!(table
            .find_at("web", &e(&[("tenant", "acme"), ("route", "x")]), 0)
            .is_none());
    }

    #[test]
    fn an_expired_override_is_not_found() {
        let table = OverrideTable::default();
        table.publish(Snapshot::of(
            1,
            vec![entry("a", "api", &[("k", "v")], 1_000)],
        ));
        let e = [Entry::new("k", "v")];
        assert!(table.find_at("api", &e, 999).is_some());
        assert!(table.find_at("api", &e, 1_000).is_none());
    }

    #[test]
    fn a_record_that_does_not_parse_is_left_out() {
        let mut bad = entry("b", "api", &[("k", "w")], 0);
        bad.record = "{".into();
        let s = Snapshot::of(2, vec![bad, entry("a", "api", &[("k", "v")], 0)]);
        assert_eq!(s.all().count(), 1);
    }

    #[test]
    fn the_rule_made_is_reused_until_the_rule_changes() {
        let table = OverrideTable::default();
        table.publish(Snapshot::of(1, vec![entry("a", "api", &[("k", "v")], 0)]));
        let found = table
            .find_at("api", &[Entry::new("k", "v")], 0)
            .expect("found");
        let rule = Arc::new(RateLimitRule::from_override(
            1,
            crate::limiter::Unit::Second,
            "api.k".into(),
        ));
        let a = found.applied_to(&rule).expect("applies");
        assert_eq!(a.requests_per_unit, 5);
        assert!(Arc::ptr_eq(&a, &found.applied_to(&rule).expect("again")));
        let reloaded = Arc::new((*rule).clone());
        assert!(!Arc::ptr_eq(
            &a,
            &found.applied_to(&reloaded).expect("new rule")
        ));
    }
}
