use super::*;
use crate::config::tree::RuleId;
use crate::limiter::fixed_window::Window;
use crate::limiter::ManualClock;
use crate::platform::workers::SLICE;
use crate::store::Work;
use crate::store::{testing::RunItems, Item, Limit, OriginalWindow, Policy};

fn inc(key: &str, hits: u64, now: u64, unit: u64, limit: u64) -> Item {
    let w = OriginalWindow {
        limit,
        window: Window::containing(now, unit),
        ttl_seconds: unit,
        jitter_seconds: 0,
    };
    Item::new(key, Limit::Counter(w), hits)
}

#[tokio::test]
async fn counts_per_key_and_expires_with_the_window() {
    let clock = Arc::new(ManualClock::at_secs(1200));
    let store = MemoryStore::new(clock.clone());
    let b = [inc("a", 1, 1200, 60, 10), inc("b", 2, 1200, 60, 10)];
    assert_eq!(store.counts(&b, Policy::Commit).await, Ok(vec![1, 2]));
    assert_eq!(store.counts(&b, Policy::Commit).await, Ok(vec![2, 4]));
    clock.set(Duration::from_secs(1260));
    // The same key past its window reads as a fresh counter.
    let later = [inc("a", 1, 1260, 60, 10)];
    assert_eq!(store.counts(&later, Policy::Commit).await, Ok(vec![1]));
    assert_eq!(store.sweep(), 1);
    assert_eq!(store.len(), 1);
}

#[tokio::test]
async fn zero_hits_reads_without_consuming() {
    let store = MemoryStore::new(Arc::new(ManualClock::at_secs(0)));
    let b = [inc("a", 3, 0, 60, 10)];
    store.counts(&b, Policy::Commit).await.expect("ok");
    let read = [inc("a", 0, 0, 60, 10)];
    assert_eq!(store.counts(&read, Policy::Commit).await, Ok(vec![3]));
}

/// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: only the counter that would
/// exceed moves.
#[tokio::test]
async fn stop_increment_when_over_limit() {
    let store = MemoryStore::new(Arc::new(ManualClock::at_secs(0)));
    let seed = [inc("a", 10, 0, 3600, 15), inc("b", 10, 0, 3600, 14)];
    store.counts(&seed, Policy::Commit).await.expect("ok");
    let p = Policy::CommitStopping;
    let one = [inc("a", 1, 0, 3600, 15), inc("b", 1, 0, 3600, 14)];
    assert_eq!(store.counts(&one, p).await, Ok(vec![11, 11]));
    let two = [inc("a", 2, 0, 3600, 15), inc("b", 2, 0, 3600, 14)];
    assert_eq!(store.counts(&two, p).await, Ok(vec![13, 13]));
    assert_eq!(store.counts(&two, p).await, Ok(vec![13, 15]));
}

#[test]
fn no_lost_updates_under_64_concurrent_callers() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .build()
        .expect("runtime");
    let store = Arc::new(MemoryStore::new(Arc::new(ManualClock::at_secs(0))));
    rt.block_on(async {
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let store = store.clone();
                tokio::spawn(async move {
                    for _ in 0..1000 {
                        let b = [inc("hot", 1, 0, 60, u64::MAX)];
                        store
                            .counts(&b, Policy::Commit)
                            .await
                            .expect("memory never fails");
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("task");
        }
        let read = [inc("hot", 0, 0, 60, u64::MAX)];
        assert_eq!(store.counts(&read, Policy::Commit).await, Ok(vec![64_000]));
    });
}

#[tokio::test]
async fn sweeping_gives_memory_back() {
    let clock = Arc::new(ManualClock::at_secs(0));
    let store = MemoryStore::new(clock.clone());
    let batch: Vec<_> = (0..10_000)
        .map(|i| inc(&format!("k{i}"), 1, 0, 1, 10))
        .collect();
    store.counts(&batch, Policy::Commit).await.expect("ok");
    assert_eq!(store.len(), 10_000);
    clock.set(Duration::from_secs(1));
    assert_eq!(store.sweep(), 10_000);
    assert!(store.is_empty());
    let capacity: usize = store
        .shards
        .iter()
        .map(|s| s.lock().counters.capacity())
        .sum();
    assert!(capacity < 10_000, "tables shrank, capacity {capacity}");
}

/// The original's counter on `key` of rule `rule`.
fn of_rule(rule: &RuleId, key: &str, unit: u64) -> Item {
    let mut item = inc(key, 1, 0, unit, 10);
    item.rule.id = Some(rule.clone());
    item
}

#[tokio::test]
async fn a_flood_of_one_rule_takes_only_its_own_part_of_a_full_store() {
    let clock = Arc::new(ManualClock::at_secs(0));
    // 32 keys a shard: the quiet rule's 50 keys hold at most a few of
    // any shard, far below half of it.
    let store = MemoryStore::with_max_keys(clock.clone(), 2048);
    let (flood, quiet) = (RuleId::new("d.flood"), RuleId::new("d.quiet"));
    let active: Vec<Item> = (0..40)
        .map(|i| of_rule(&quiet, &format!("active{i}"), 60))
        .collect();
    for a in &active {
        store
            .counts(std::slice::from_ref(a), Policy::Commit)
            .await
            .expect("room");
    }
    // 10,000 unique keys of one rule, for the whole window: never
    // refused, its own oldest keys make way.
    for i in 0..10_000 {
        let key = of_rule(&flood, &format!("flood{i}"), 60);
        store
            .counts(&[key], Policy::Commit)
            .await
            .expect("room, by the flood's own keys");
        // Meanwhile the quiet rule adds keys too, and keeps them.
        if i % 1_000 == 999 {
            let new = of_rule(&quiet, &format!("late{i}"), 60);
            assert_eq!(store.counts(&[new], Policy::Commit).await, Ok(vec![1]));
        }
    }
    assert_eq!(store.len(), 2048, "full, and no more");
    // Every key of the quiet rule still counts from where it was.
    for a in &active {
        let counted = store.counts(std::slice::from_ref(a), Policy::Commit).await;
        assert_eq!(counted, Ok(vec![2]), "{}", a.key);
    }
    let held = store.holdings();
    let by = |r: &RuleId| {
        held.iter()
            .find(|(n, ..)| n == r.name())
            .map(|(_, k, e)| (*k, *e))
    };
    let (flood_keys, flood_evicted) = by(&flood).expect("the flood's row");
    assert_eq!(by(&quiet), Some((50, 0)), "the quiet rule lost nothing");
    assert_eq!(flood_keys + 50, store.len() as u64);
    assert_eq!(
        flood_evicted,
        10_000 - flood_keys,
        "each new flood key past its part evicted one"
    );
    assert_eq!(held[0].0, *flood.name(), "most keys first");
    // A minute later the flood's keys have expired and been swept.
    clock.set(Duration::from_secs(60));
    store.sweep();
    assert_eq!(store.len(), 0);
}

#[tokio::test]
async fn two_floods_share_what_the_quiet_rules_leave() {
    let clock = Arc::new(ManualClock::at_secs(0));
    let store = MemoryStore::with_max_keys(clock.clone(), 64 * 16);
    let (a, b) = (RuleId::new("d.a"), RuleId::new("d.b"));
    for i in 0..20_000 {
        let rule = if i % 2 == 0 { &a } else { &b };
        let key = of_rule(rule, &format!("k{i}"), 60);
        store.counts(&[key], Policy::Commit).await.expect("room");
    }
    let held = store.holdings();
    let keys = |r: &RuleId| {
        held.iter()
            .find(|(n, ..)| n == r.name())
            .map_or(0, |(_, k, _)| *k)
    };
    // Equal shares, per shard within one key.
    assert!(keys(&a).abs_diff(keys(&b)) <= 64, "{held:?}");
    assert_eq!(keys(&a) + keys(&b), 1024);
}

/// A large work of counters alone is applied in slices, and answers as one
/// step would: each counter counted, a refusal refusing only itself, and
/// the work committed iff no binding counter refused.
#[tokio::test]
async fn a_large_work_of_counters_answers_as_one_step() {
    let clock = Arc::new(ManualClock::at_secs(1200));
    let sliced = MemoryStore::new(clock.clone());
    let items: Vec<Item> = (0..3 * SLICE + 5)
        .map(|i| inc(&format!("k{i}"), 1, 1200, 60, 1))
        .collect();
    let work = Work::new(items.clone(), Policy::Commit);
    assert!(work.is_independent());
    let first = sliced.apply_in_slices(&work).await;
    assert!(first.committed);
    let again = sliced.apply_in_slices(&work).await;
    assert!(!again.committed, "every counter is over its limit of 1");
    // The same works in one step, on a store of their own.
    let whole = MemoryStore::new(clock);
    assert_eq!(whole.apply(&work).expect("applied"), first);
    assert_eq!(whole.apply(&work).expect("applied"), again);
    assert_eq!(sliced.len(), items.len());
}
