//! Per-tenant overrides in the engine: where they stand between a
//! request-carried limit and the YAML rule, what an unmatched one does, and
//! the over-limit cache after a change.

use super::*;
use crate::config::tree::LimitOverride;
use crate::overrides::table::Snapshot;
use crate::overrides::OverrideTable;
use crate::store::overrides::BookEntry;

const RULE: &str = "domain: d\ndescriptors:\n  - key: tenant\n    rate_limit:\n      unit: minute\n      requests_per_unit: 2\n";

/// The book at `version` with one override per `(tenant, limit)`.
fn book(version: u64, overrides: &[(&str, u32)]) -> Snapshot {
    let entries = overrides
        .iter()
        .enumerate()
        .map(|(i, (tenant, n))| BookEntry {
            id: format!("{i}"),
            version,
            expires_at_ms: 0,
            record: serde_json::json!({
                "domain": "d",
                "descriptor": [{"key": "tenant", "value": tenant}],
                "limit": {"requests_per_unit": n, "unit": "minute"},
                "updated_at_ms": 0,
                "updated_by": "test",
            })
            .to_string(),
        })
        .collect();
    Snapshot::of(version, entries)
}

fn with_table(f: Fixture, table: &Arc<OverrideTable>) -> Fixture {
    Fixture {
        engine: f.engine.with_overrides(Arc::clone(table)),
        clock: f.clock,
    }
}

#[tokio::test]
async fn an_override_replaces_the_rules_limit_for_its_descriptor_only() {
    let table = OverrideTable::new();
    table.publish(book(1, &[("acme", 5)]));
    let f = with_table(fixture(RULE, EngineOptions::default()), &table);
    assert_eq!(f.admitted(&[&[("tenant", "acme")]], 8).await, 5);
    assert_eq!(f.admitted(&[&[("tenant", "globex")]], 8).await, 2);
    let r = f.ask(&[&[("tenant", "acme")]], 1).await;
    assert_eq!(
        r.statuses[0]
            .current_limit
            .as_ref()
            .map(|l| l.requests_per_unit),
        Some(5)
    );
}

#[tokio::test]
async fn a_request_carried_limit_comes_before_an_override() {
    let table = OverrideTable::new();
    table.publish(book(1, &[("acme", 5)]));
    let f = with_table(fixture(RULE, EngineOptions::default()), &table);
    let mut carried = request(&[&[("tenant", "acme")]], 1);
    carried.descriptors[0].limit = Some(LimitOverride {
        requests_per_unit: 1,
        unit: Unit::Minute as i32,
    });
    let mut admitted = 0;
    for _ in 0..4 {
        let r = f.engine.should_rate_limit(&carried).await.expect("decided");
        admitted += usize::from(r.overall_code == Code::Ok);
    }
    assert_eq!(admitted, 1);
}

#[tokio::test]
async fn an_override_no_rule_matches_limits_nothing() {
    let table = OverrideTable::new();
    table.publish(book(1, &[("acme", 1)]));
    let f = with_table(fixture(RULE, EngineOptions::default()), &table);
    assert_eq!(f.admitted(&[&[("plan", "acme")]], 5).await, 5);
}

#[tokio::test]
async fn a_raised_limit_is_not_refused_from_the_over_limit_cache() {
    let config = load(&[ConfigFile::new("t.yaml", RULE)], false).expect("config");
    let live = LiveConfig::new();
    live.publish(Arc::new(config));
    let clock = Arc::new(ManualClock::new(Duration::from_millis(1_700_000_400_500)));
    let table = OverrideTable::new();
    let engine = Engine::new(
        live,
        Arc::new(MemoryStore::new(clock.clone())),
        clock.clone(),
        EngineOptions::default(),
        Some(LocalCache::new(1 << 20)),
        Arc::new(crate::metrics::Stats::new()),
    )
    .with_overrides(Arc::clone(&table));
    let f = Fixture { engine, clock };
    assert_eq!(f.admitted(&[&[("tenant", "acme")]], 3).await, 2);
    assert!(
        f.engine.local_cache().is_some_and(|c| !c.is_empty()),
        "the key is cached over"
    );
    table.publish(book(1, &[("acme", 10)]));
    assert_eq!(
        f.admitted(&[&[("tenant", "acme")]], 1).await,
        1,
        "3 + 1 of 10"
    );
}
