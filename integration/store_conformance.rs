//! One set of store behaviours, run against every store: memory, Redis
//! single, Redis behind sentinels, Redis Cluster, memcache (real servers
//! started by the tests on free loopback ports), over every kind of job: a
//! request's limits, the RLQS demand boards and the overrides' book. Each body runs on every
//! store that promises what it checks ([`Promises`]).

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use ratelimit::limiter::fixed_window::Window;
use ratelimit::limiter::{AlgorithmName, Decision, Limiter};
use ratelimit::limiter::{Clock, SystemClock};
use ratelimit::platform::workers::Workers;
use ratelimit::resilience::{self, BreakerOptions, ResilienceOptions};
use ratelimit::store::board::{BoardOp, BoardStep, BoardWork};
use ratelimit::store::memcache::{MemcacheOptions, MemcacheStore};
use ratelimit::store::overrides::{BookAnswer, BookKeys, BookStep, BookWork, BookWrite};
use ratelimit::store::redis::url::{Credentials, Target};
use ratelimit::store::redis::{connect, RedisOptions, RedisStore, StartupRetry};
use ratelimit::store::{
    testing::RunItems, Item, Limit, MemoryStore, OriginalWindow, Policy, Store, StoreExt,
};
use support::memcached::Memcached;
use support::redis::{RedisCluster, RedisSentinel, RedisServer};

fn now() -> u64 {
    SystemClock.now_secs()
}

/// The original's window of `limit` in the current hour (tests stay in one
/// window).
fn hour_window(limit: u64) -> OriginalWindow {
    OriginalWindow {
        limit,
        window: Window::containing(now(), 3600),
        ttl_seconds: 3600,
        jitter_seconds: 0,
    }
}

/// The original's counter on `key`, counted the original's way.
fn inc(key: &str, hits: u64, limit: u64) -> Item {
    Item::new(key, Limit::Counter(hour_window(limit)), hits)
}

fn options(target: Target) -> RedisOptions {
    RedisOptions {
        target,
        credentials: Credentials::default(),
        sentinel_credentials: Credentials::default(),
        pool_size: 4,
        timeout: Duration::from_secs(5),
        tls: None,
        display: "test".into(),
    }
}

fn host_port(addr: &str) -> (String, u16) {
    let (h, p) = addr.rsplit_once(':').expect("host:port");
    (h.to_string(), p.parse().expect("port"))
}

async fn redis_store(target: Target) -> Arc<dyn Store> {
    Arc::new(connect_redis(target).await)
}

async fn connect_redis(target: Target) -> RedisStore {
    let retry = StartupRetry {
        initial: Duration::from_millis(100),
        max: Duration::from_secs(1),
        max_elapsed: Duration::from_secs(30),
    };
    connect(&options(target), None, retry, &Workers::none())
        .await
        .expect("redis store connects")
}

/// The stack the service runs on Redis: fallback over per-node breakers over
/// a deadline. The deadline is generous: these bodies test what the store
/// answers, and a loaded test machine must not turn them into timeouts.
async fn wrapped_redis_store(target: Target) -> Arc<dyn Store> {
    let options = ResilienceOptions {
        timeout: Duration::from_secs(5),
        breaker: Some(BreakerOptions {
            failures: 5,
            cooldown: Duration::from_secs(1),
        }),
    };
    resilience::wrap(
        connect_redis(target).await,
        resilience::Layers::Remote {
            options,
            leases: Default::default(),
        },
        Arc::new(SystemClock),
    )
    .store
}

/// Counters count per key, zero hits read without consuming.
async fn counts_per_key(store: Arc<dyn Store>, p: &str) {
    let (a, b) = (format!("{p}a"), format!("{p}b"));
    let batch = [inc(&a, 1, 10), inc(&b, 2, 10)];
    assert_eq!(store.counts(&batch, Policy::Commit).await, Ok(vec![1, 2]));
    assert_eq!(store.counts(&batch, Policy::Commit).await, Ok(vec![2, 4]));
    assert_eq!(
        store.counts(&[inc(&a, 0, 10)], Policy::Commit).await,
        Ok(vec![2])
    );
    assert_eq!(
        store.counts(&[inc(&a, 0, 10)], Policy::Commit).await,
        Ok(vec![2])
    );
}

/// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: when any counter would pass its
/// limit, only the counters that would pass it move.
async fn stop_increment_when_over_limit(store: Arc<dyn Store>, p: &str) {
    let (a, b) = (format!("{p}a"), format!("{p}b"));
    let seed = [inc(&a, 10, 15), inc(&b, 10, 14)];
    store.counts(&seed, Policy::Commit).await.expect("seed");
    let policy = Policy::CommitStopping;
    let one = [inc(&a, 1, 15), inc(&b, 1, 14)];
    assert_eq!(store.counts(&one, policy).await, Ok(vec![11, 11]));
    let two = [inc(&a, 2, 15), inc(&b, 2, 14)];
    assert_eq!(store.counts(&two, policy).await, Ok(vec![13, 13]));
    assert_eq!(store.counts(&two, policy).await, Ok(vec![13, 15]));
}

/// Keys of one request on many nodes come back in request order.
async fn many_keys_keep_their_order(store: Arc<dyn Store>, p: &str) {
    let batch: Vec<_> = (0..50u64)
        .map(|i| inc(&format!("{p}k{i}"), i + 1, 1000))
        .collect();
    let want: Vec<u64> = (0..50u64).map(|i| i + 1).collect();
    assert_eq!(store.counts(&batch, Policy::Commit).await, Ok(want));
}

/// Concurrent callers' counters coalesced into one call each get their
/// own values: 32 callers, two keys of their own per request, with hits of
/// 1, 2 or 3 (so runs of equal cost alternate with others in a call).
async fn concurrent_callers_get_their_own_counts(store: Arc<dyn Store>, p: &str) {
    let tasks: Vec<_> = (0..32u64)
        .map(|c| {
            let store = Arc::clone(&store);
            let (a, b) = (format!("{p}c{c}_a"), format!("{p}c{c}_b"));
            let hits = 1 + c % 3;
            tokio::spawn(async move {
                for j in 1..=20u64 {
                    let batch = [inc(&a, hits, u64::MAX), inc(&b, hits, u64::MAX)];
                    let got = store.counts(&batch, Policy::Commit).await;
                    assert_eq!(got, Ok(vec![j * hits, j * hits]), "caller {c}, request {j}");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("caller");
    }
}

/// No lost updates: 64 concurrent callers on one key.
async fn no_lost_updates(store: Arc<dyn Store>, p: &str) {
    let key = format!("{p}hot");
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let store = Arc::clone(&store);
            let key = key.clone();
            tokio::spawn(async move {
                for _ in 0..50 {
                    store
                        .counts(&[inc(&key, 1, u64::MAX)], Policy::Commit)
                        .await
                        .expect("increment");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task");
    }
    assert_eq!(
        store.counts(&[inc(&key, 0, 0)], Policy::Commit).await,
        Ok(vec![64 * 50])
    );
}

const HOUR: Duration = Duration::from_secs(3600);

/// A check of `limit` per hour on `key` with `algorithm`.
fn check(key: &str, algorithm: AlgorithmName, limit: u64, cost: u64) -> Item {
    let limiter = Limiter::new(algorithm, limit, HOUR, None).expect("valid");
    Item::new(key, Limit::Algorithm(limiter), cost)
}

/// Every algorithm admits exactly its capacity at once, then refuses with a
/// retry time; a refusal takes nothing.
async fn each_algorithm_admits_its_capacity(store: Arc<dyn Store>, p: &str) {
    for algorithm in AlgorithmName::ALL {
        let key = format!("{p}rl2:{{{algorithm}}}:x");
        let mut admitted = 0;
        for _ in 0..8 {
            let reply = store
                .run(&[check(&key, algorithm, 5, 1)], Policy::Commit)
                .await
                .expect("check");
            let d = reply.results[0].decision;
            assert_eq!(reply.committed, d.is_allowed());
            if d.is_allowed() {
                admitted += 1;
                assert_eq!(d.remaining(), 5 - admitted, "{algorithm}");
            } else {
                let retry = d.retry_after().expect("a denial has a retry time");
                // A sliding window may wait into the next window, as its
                // previous count decays: at most two windows.
                assert!(
                    retry > Duration::ZERO && retry <= 2 * HOUR,
                    "{algorithm}: {retry:?}"
                );
            }
        }
        assert_eq!(admitted, 5, "{algorithm}");
        let reply = store
            .run(&[check(&key, algorithm, 5, 9)], Policy::Commit)
            .await
            .expect("check");
        assert!(
            matches!(
                reply.results[0].decision,
                Decision::ExceedsCapacity { capacity: 5, .. }
            ),
            "{algorithm}"
        );
        let reply = store
            .run(&[check(&key, algorithm, 5, 0)], Policy::Commit)
            .await
            .expect("check");
        assert!(
            reply.results[0].decision.is_allowed(),
            "a zero cost only asks"
        );
    }
}

/// A batch commits only if every binding check passes, also when its keys
/// are on different slots (reserve, then refund).
async fn all_or_nothing(store: Arc<dyn Store>, p: &str) {
    let (a, b) = (format!("{p}rl2:{{a}}:tb"), format!("{p}rl2:{{b}}:sw"));
    let tb = AlgorithmName::TokenBucket;
    let sw = AlgorithmName::SlidingLog;
    let batch = [check(&a, tb, 100, 1), check(&b, sw, 1, 1)];
    let first = store.run(&batch, Policy::Commit).await.expect("check");
    assert!(first.committed);
    for _ in 0..5 {
        let reply = store.run(&batch, Policy::Commit).await.expect("check");
        assert!(!reply.committed);
        assert!(reply.results[0].decision.is_allowed());
        assert!(!reply.results[1].decision.is_allowed());
    }
    let left = store
        .run(&[check(&a, tb, 100, 0)], Policy::Commit)
        .await
        .expect("check");
    assert_eq!(
        left.results[0].decision.remaining(),
        99,
        "refused requests took nothing"
    );
    // A non-binding refusal does not stop the others.
    let mut shadow = check(&b, sw, 1, 1);
    shadow.binding = false;
    let reply = store
        .run(&[check(&a, tb, 100, 1), shadow], Policy::Commit)
        .await
        .expect("check");
    assert!(reply.committed);
    let left = store
        .run(&[check(&a, tb, 100, 0)], Policy::Commit)
        .await
        .expect("check");
    assert_eq!(left.results[0].decision.remaining(), 98);
    // Decide only: nothing taken even when everything passes.
    let reply = store
        .run(&[check(&a, tb, 100, 1)], Policy::Decide)
        .await
        .expect("check");
    assert!(!reply.committed && reply.results[0].decision.is_allowed());
    assert_eq!(
        reply.results[0].decision.remaining(),
        97,
        "98 left, 1 asked"
    );
    let left = store
        .run(&[check(&a, tb, 100, 0)], Policy::Commit)
        .await
        .expect("check");
    assert_eq!(left.results[0].decision.remaining(), 98, "still 98");
    // Two checks on one key see each other.
    let c = format!("{p}rl2:{{c}}:tb");
    let twice = [check(&c, tb, 5, 3), check(&c, tb, 5, 3)];
    let reply = store.run(&twice, Policy::Commit).await.expect("check");
    assert!(!reply.committed && !reply.results[1].decision.is_allowed());
    let reply = store
        .run(&[check(&c, tb, 5, 5)], Policy::Commit)
        .await
        .expect("check");
    assert!(reply.committed, "the refused pair took nothing");
}

/// With `ALL_OR_NOTHING`, the original's windows are read and written on the
/// original's key and value: an `increment` (the original's way) sees them.
async fn original_window_shares_the_original_counter(store: Arc<dyn Store>, p: &str) {
    let key = format!("{p}orig");
    let original = |cost| Item::new(key.clone(), Limit::Window(hour_window(3)), cost);
    store
        .counts(&[inc(&key, 1, 3)], Policy::Commit)
        .await
        .expect("seed as the original would");
    let reply = store
        .run(&[original(2)], Policy::Commit)
        .await
        .expect("check");
    assert!(reply.committed);
    assert_eq!(reply.results[0].count, 3);
    let reply = store
        .run(&[original(1)], Policy::Commit)
        .await
        .expect("check");
    assert!(!reply.committed);
    assert_eq!(reply.results[0].count, 3, "a refusal counts nothing");
    let d = reply.results[0].decision;
    assert!(d
        .retry_after()
        .is_some_and(|r| r > Duration::ZERO && r <= HOUR));
    assert_eq!(
        store.counts(&[inc(&key, 0, 3)], Policy::Commit).await,
        Ok(vec![3])
    );
}

/// A request that mixes the original's counters with opt-in limits is one
/// work: the counters count whatever the rest decides, and a binding
/// counter over its limit takes nothing from the opt-in limits, also when
/// they sit on other slots (reserve, then refund).
async fn mixed_work_counts_the_counters_and_vetoes_the_rest(store: Arc<dyn Store>, p: &str) {
    let counter_key = format!("{p}mixed_orig");
    let (a, tb) = (format!("{p}rl2:{{mixed}}:tb"), AlgorithmName::TokenBucket);
    let work = [inc(&counter_key, 1, 1), check(&a, tb, 100, 1)];
    let first = store.run(&work, Policy::Commit).await.expect("mixed");
    assert!(first.committed);
    assert_eq!(first.results[0].count, 1);
    assert!(first.results[0].decision.is_allowed());
    assert_eq!(first.results[1].decision.remaining(), 99);
    let second = store.run(&work, Policy::Commit).await.expect("mixed");
    assert!(!second.committed, "the counter is over its limit");
    assert_eq!(second.results[0].count, 2, "the counter counted anyway");
    assert!(!second.results[0].decision.is_allowed());
    let left = store
        .run(&[check(&a, tb, 100, 0)], Policy::Commit)
        .await
        .expect("peek");
    assert_eq!(left.results[0].decision.remaining(), 99, "nothing taken");
    // A counter that does not bind (shadow mode, quota) vetoes nothing.
    let mut shadow = inc(&counter_key, 1, 1);
    shadow.binding = false;
    let third = store
        .run(&[shadow, check(&a, tb, 100, 1)], Policy::Commit)
        .await
        .expect("mixed");
    assert!(third.committed);
    assert_eq!(third.results[0].count, 3);
    // Deciding only still counts the counters, as the original counts
    // every request.
    let decided = store.run(&work, Policy::Decide).await.expect("decide");
    assert!(!decided.committed);
    assert_eq!(decided.results[0].count, 4);
    let left = store
        .run(&[check(&a, tb, 100, 0)], Policy::Commit)
        .await
        .expect("peek");
    assert_eq!(left.results[0].decision.remaining(), 98);
}

/// No excess from races: 64 concurrent callers on one key of every
/// algorithm admit exactly the limit.
async fn no_excess_under_concurrency(store: Arc<dyn Store>, p: &str) {
    for algorithm in AlgorithmName::ALL {
        let key = format!("{p}rl2:{{hot_{algorithm}}}:x");
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let store = Arc::clone(&store);
                let key = key.clone();
                tokio::spawn(async move {
                    let mut admitted = 0u64;
                    for _ in 0..5 {
                        let reply = store
                            .run(&[check(&key, algorithm, 100, 1)], Policy::Commit)
                            .await
                            .expect("check");
                        admitted += u64::from(reply.committed);
                    }
                    admitted
                })
            })
            .collect();
        let mut admitted = 0;
        for t in tasks {
            admitted += t.await.expect("task");
        }
        assert_eq!(admitted, 100, "{algorithm}: 320 tries on a limit of 100");
    }
}

/// What a refused request holds of another limit while it is refused.
/// 32 callers send `[a, b]` where `b` is used up (always refused), while
/// one caller sends `[a]` alone, one after another, `a` being 100 per hour
/// (no refill to speak of). Ideal: the lone caller gets exactly 100 and the
/// refused pairs take nothing. On one script (memory, one node) that is
/// exact. On keys of different Cluster slots a pair reserves `a` and
/// refunds it one round trip later, so the lone caller can be refused
/// while budget remains (at any instant at most one unit per pair in
/// flight is held) and nothing is lost for good. Returns those "early"
/// refusals: refusals followed by a later admission.
async fn refused_requests_take_nothing(store: Arc<dyn Store>, p: &str) -> u64 {
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    let (a, b) = (format!("{p}rl2:{{a}}:tb"), format!("{p}rl2:{{b}}:tb"));
    let tb = AlgorithmName::TokenBucket;
    let used_up = store
        .run(&[check(&b, tb, 1, 1)], Policy::Commit)
        .await
        .expect("check");
    assert!(used_up.committed);
    let done = Arc::new(AtomicBool::new(false));
    let pairs: Vec<_> = (0..32)
        .map(|_| {
            let (store, done, a, b) = (Arc::clone(&store), Arc::clone(&done), a.clone(), b.clone());
            tokio::spawn(async move {
                while !done.load(SeqCst) {
                    let reply = store
                        .run(
                            &[check(&a, tb, 100, 1), check(&b, tb, 1, 1)],
                            Policy::Commit,
                        )
                        .await
                        .expect("check");
                    assert!(!reply.committed);
                    // The memory store never awaits: let the others run.
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    let (mut admitted, mut early, mut refused_since_admission) = (0u64, 0u64, 0u64);
    for _ in 0..1_000 {
        let reply = store
            .run(&[check(&a, tb, 100, 1)], Policy::Commit)
            .await
            .expect("check");
        if reply.committed {
            admitted += 1;
            early += refused_since_admission;
            refused_since_admission = 0;
            if admitted == 100 {
                break;
            }
        } else {
            refused_since_admission += 1;
        }
        tokio::task::yield_now().await;
    }
    done.store(true, SeqCst);
    for t in pairs {
        t.await.expect("pair caller");
    }
    let left = store
        .run(&[check(&a, tb, 100, 0)], Policy::Commit)
        .await
        .expect("check");
    let left = left.results[0].decision.remaining();
    assert_eq!(admitted, 100, "the lone caller gets the whole limit");
    assert_eq!(left, 0, "and nothing more");
    early
}

/// Every kind of item gives back what counts now: no more than was taken,
/// never below nothing, in one work with items that take (and whatever
/// they decide), and answered as admitted.
async fn give_backs_return_what_counts_now(store: Arc<dyn Store>, p: &str) {
    let mut kinds: Vec<(String, Limit)> = AlgorithmName::ALL
        .into_iter()
        .map(|a| {
            let limiter = Limiter::new(a, 5, HOUR, None).expect("valid");
            (format!("{p}rl2:{{{a}}}:x"), Limit::Algorithm(limiter))
        })
        .collect();
    kinds.push((format!("{p}oc"), Limit::Counter(hour_window(5))));
    kinds.push((format!("{p}ow"), Limit::Window(hour_window(5))));
    for (key, limit) in kinds {
        let take = |cost| Item::new(key.clone(), limit, cost);
        let back = |cost| take(cost).giving_back();
        let admitted = |reply: ratelimit::store::testing::Ran| match limit {
            Limit::Counter(w) => w.admits(reply.results[0].count),
            _ => reply.results[0].decision.is_allowed(),
        };
        let mut n = 0;
        for _ in 0..5 {
            n += u32::from(admitted(
                store.run(&[take(1)], Policy::Commit).await.expect("take"),
            ));
        }
        assert_eq!(n, 5, "{key}");
        let reply = store
            .run(&[back(2)], Policy::Commit)
            .await
            .expect("give back");
        assert!(
            reply.results[0].decision.is_allowed(),
            "{key}: a give-back is admitted"
        );
        let mut n = 0;
        for _ in 0..4 {
            n += u32::from(admitted(
                store.run(&[take(1)], Policy::Commit).await.expect("take"),
            ));
        }
        // (A counter counts its refused hits too, the original's way.)
        assert_eq!(n, 2, "{key}: two came back");
        // Far more than is held: back to nothing, never below.
        store
            .run(&[back(100)], Policy::Commit)
            .await
            .expect("give back");
        let mut n = 0;
        for _ in 0..7 {
            n += u32::from(admitted(
                store.run(&[take(1)], Policy::Commit).await.expect("take"),
            ));
        }
        assert_eq!(n, 5, "{key}: the limit again, no more");
        // Beside a refused binding item, in one work: given back anyway.
        let refused = check(&format!("{key}-full"), AlgorithmName::TokenBucket, 1, 2);
        let reply = store
            .run(&[refused, back(100)], Policy::Commit)
            .await
            .expect("mixed");
        assert!(!reply.committed);
        let mut n = 0;
        for _ in 0..7 {
            n += u32::from(admitted(
                store.run(&[take(1)], Policy::Commit).await.expect("take"),
            ));
        }
        assert_eq!(n, 5, "{key}: the give-back beside a refusal was applied");
    }
}

/// Slots taken and given back by many callers at once lose no update: all
/// given back, all free.
async fn in_flight_slots_lose_no_update(store: Arc<dyn Store>, p: &str) {
    let key = format!("{p}rl2:{{slots}}:cc");
    let limiter = Limiter::new(AlgorithmName::Concurrency, 8, HOUR, None).expect("valid");
    let item = Item::new(key.clone(), Limit::Algorithm(limiter), 1);
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (store, item) = (Arc::clone(&store), item.clone());
            tokio::spawn(async move {
                let mut taken = 0;
                for _ in 0..25 {
                    let reply = store
                        .run(std::slice::from_ref(&item), Policy::Commit)
                        .await
                        .expect("take");
                    if reply.committed {
                        taken += 1;
                        tokio::task::yield_now().await;
                        let back = item.clone().giving_back();
                        store.run(&[back], Policy::Commit).await.expect("give back");
                    }
                }
                taken
            })
        })
        .collect();
    let mut taken = 0;
    for t in tasks {
        taken += t.await.expect("task");
    }
    assert!(taken >= 8, "slots were taken: {taken}");
    let read = Item::new(key, Limit::Algorithm(limiter), 0);
    let reply = store.run(&[read], Policy::Commit).await.expect("read");
    assert_eq!(
        reply.results[0].decision.remaining(),
        8,
        "every slot is free again"
    );
}

/// What a store promises, and so which bodies it is held to.
#[derive(Debug, Clone, Copy)]
struct Promises {
    /// Every read-modify-write is atomic and answered after it is applied,
    /// so every limit body holds (all but memcache, which reads, answers,
    /// then increments, as the original does).
    atomic: bool,
    /// A whole work is one atomic step (memory, one Redis node): all or
    /// nothing is exact, not only eventual.
    one_step: bool,
}

/// Memory and a single Redis (or one behind sentinels).
const ONE_STEP: Promises = Promises {
    atomic: true,
    one_step: true,
};
/// Redis Cluster: atomic per slot, a work over several slots reserves
/// and refunds.
const CLUSTERED: Promises = Promises {
    atomic: true,
    one_step: false,
};
/// Memcache: the original's read-then-increment.
const READ_THEN_INCREMENT: Promises = Promises {
    atomic: false,
    one_step: false,
};

/// `instance`'s `steps` on the demand boards.
fn boards(instance: &str, steps: Vec<BoardStep>) -> BoardWork {
    BoardWork {
        instance: instance.into(),
        ttl: Duration::from_secs(30),
        steps,
    }
}

/// A step on board `key` of 10 requests a second.
fn board_step(key: &str, op: BoardOp) -> BoardStep {
    BoardStep {
        key: key.to_string(),
        node: None,
        rate: 10.0,
        op,
    }
}

/// The calling instance's (line, assigned) on each board of a reply.
async fn lines(store: &Arc<dyn Store>, work: &BoardWork) -> Vec<Vec<(u64, f64)>> {
    store
        .share(work, None)
        .await
        .into_iter()
        .map(|r| r.expect("the board answered").lines)
        .collect()
}

/// A board splits its rate over the live lines of every instance on it: a
/// newcomer gets its share in the step that adds it, the others see theirs
/// shrink at their next step, and a leaver's share goes back to them.
async fn boards_split_each_rate_over_its_live_lines(store: Arc<dyn Store>, p: &str) {
    let key = format!("{p}board");
    let report = |line, demand| board_step(&key, BoardOp::Report { line, demand });
    let sync = || board_step(&key, BoardOp::Sync);
    assert_eq!(
        lines(&store, &boards("i1", vec![report(1, 30.0)])).await,
        vec![vec![(1, 10.0)]]
    );
    // A newcomer is counted as wanting the whole rate until it is split.
    assert_eq!(
        lines(&store, &boards("i2", vec![report(1, 10.0)])).await,
        vec![vec![(1, 5.0)]]
    );
    assert_eq!(
        lines(&store, &boards("i1", vec![sync()])).await,
        vec![vec![(1, 5.0)]]
    );
    let left = lines(
        &store,
        &boards("i2", vec![board_step(&key, BoardOp::Leave { line: 1 })]),
    )
    .await;
    assert_eq!(left, vec![vec![]], "its line is gone");
    assert_eq!(
        lines(&store, &boards("i1", vec![sync()])).await,
        vec![vec![(1, 10.0)]]
    );
}

/// Steps on many boards (on many nodes of a Cluster) come back in step
/// order, each answering its own board.
async fn board_steps_keep_their_order(store: Arc<dyn Store>, p: &str) {
    let steps = (0..20u64)
        .map(|i| {
            board_step(
                &format!("{p}order{i}"),
                BoardOp::Report {
                    line: i,
                    demand: 1.0,
                },
            )
        })
        .collect();
    let got = lines(&store, &boards("i1", steps)).await;
    let want: Vec<Vec<(u64, f64)>> = (0..20u64).map(|i| vec![(i, 10.0)]).collect();
    assert_eq!(got, want);
}

/// Counters count per key on a store that reads, answers, then
/// increments: each answer is what was stored plus the request's hits,
/// and the increments land shortly after.
async fn counts_land_after_the_answer(store: Arc<dyn Store>, p: &str) {
    let (a, b) = (format!("{p}a"), format!("{p}b"));
    let batch = [inc(&a, 1, 10), inc(&b, 2, 10)];
    assert_eq!(store.counts(&batch, Policy::Commit).await, Ok(vec![1, 2]));
    let read = [inc(&a, 0, 10), inc(&b, 0, 10)];
    let mut landed = Vec::new();
    for _ in 0..50 {
        landed = store.counts(&read, Policy::Commit).await.expect("read");
        if landed == [1, 2] {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(landed, vec![1, 2], "the increments landed");
    assert_eq!(store.counts(&batch, Policy::Commit).await, Ok(vec![2, 4]));
}

async fn book_step(store: &Arc<dyn Store>, p: &str, step: BookStep) -> BookAnswer {
    let work = BookWork {
        keys: BookKeys::new(p),
        node: None,
        steps: vec![step],
    };
    store
        .book(&work, None)
        .await
        .pop()
        .expect("one answer")
        .expect("the book answers")
}

fn book_put(id: &str, record: &str, if_version: Option<u64>, max_entries: usize) -> BookStep {
    BookStep::Write(BookWrite {
        id: id.into(),
        record: Some(record.into()),
        expires_at_ms: 0,
        if_version,
        max_entries,
        now_ms: 1_000,
        log_head: format!("{{\"id\":\"{id}\""),
    })
}

/// The overrides' book: versions, compare-and-set, the cap, the read of
/// an unchanged book, the log with the record before each change.
async fn the_book_versions_every_change(store: Arc<dyn Store>, p: &str) {
    let s = &store;
    assert_eq!(
        book_step(s, p, BookStep::Read { known: 0 }).await,
        BookAnswer::Unchanged
    );
    assert_eq!(
        book_step(s, p, book_put("a", "{\"n\":1}", Some(0), 2)).await,
        BookAnswer::Written {
            version: 1,
            before: None
        }
    );
    assert_eq!(
        book_step(s, p, book_put("a", "{\"n\":2}", Some(0), 2)).await,
        BookAnswer::Stale { current: 1 }
    );
    let BookAnswer::Written {
        version: 2,
        before: Some(before),
    } = book_step(s, p, book_put("a", "{\"n\":2}", Some(1), 2)).await
    else {
        panic!("a current compare-and-set writes");
    };
    assert_eq!((before.version, before.record.as_str()), (1, "{\"n\":1}"));
    book_step(s, p, book_put("b", "{}", None, 2)).await;
    assert_eq!(
        book_step(s, p, book_put("c", "{}", None, 2)).await,
        BookAnswer::Full
    );
    assert_eq!(
        book_step(s, p, BookStep::Read { known: 3 }).await,
        BookAnswer::Unchanged
    );
    let BookAnswer::Snapshot {
        version,
        mut entries,
    } = book_step(s, p, BookStep::Read { known: 1 }).await
    else {
        panic!("a reader behind gets the book");
    };
    entries.sort_by(|x, y| x.id.cmp(&y.id));
    let got: Vec<(&str, u64, &str)> = entries
        .iter()
        .map(|e| (e.id.as_str(), e.version, e.record.as_str()))
        .collect();
    assert_eq!(
        (version, got),
        (3, vec![("a", 2, "{\"n\":2}"), ("b", 3, "{}")])
    );
    assert_eq!(
        book_step(s, p, BookStep::Log { count: 2 }).await,
        BookAnswer::Log(vec![
            "{\"id\":\"a\",\"version\":2,\"before\":{\"n\":1}}".into(),
            "{\"id\":\"b\",\"version\":3,\"before\":null}".into(),
        ])
    );
}

/// Every body `store` promises to keep, the boards' and the book's
/// included.
async fn all_bodies(store: Arc<dyn Store>, promises: Promises) {
    the_book_versions_every_change(Arc::clone(&store), "o1_").await;
    boards_split_each_rate_over_its_live_lines(Arc::clone(&store), "b1_").await;
    board_steps_keep_their_order(Arc::clone(&store), "b2_").await;
    many_keys_keep_their_order(Arc::clone(&store), "t3_").await;
    if !promises.atomic {
        counts_land_after_the_answer(Arc::clone(&store), "t13_").await;
        return;
    }
    give_backs_return_what_counts_now(Arc::clone(&store), "t11_").await;
    in_flight_slots_lose_no_update(Arc::clone(&store), "t12_").await;
    each_algorithm_admits_its_capacity(Arc::clone(&store), "t5_").await;
    all_or_nothing(Arc::clone(&store), "t6_").await;
    original_window_shares_the_original_counter(Arc::clone(&store), "t7_").await;
    mixed_work_counts_the_counters_and_vetoes_the_rest(Arc::clone(&store), "t7m_").await;
    no_excess_under_concurrency(Arc::clone(&store), "t8_").await;
    let early = refused_requests_take_nothing(Arc::clone(&store), "t9_").await;
    println!("early refusals while refused pairs held a reservation: {early}");
    if promises.one_step {
        assert_eq!(early, 0, "one script: all or nothing is exact");
    }
    counts_per_key(Arc::clone(&store), "t1_").await;
    stop_increment_when_over_limit(Arc::clone(&store), "t2_").await;
    no_lost_updates(Arc::clone(&store), "t4_").await;
    concurrent_callers_get_their_own_counts(Arc::clone(&store), "t10_").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory() {
    all_bodies(Arc::new(MemoryStore::new(Arc::new(SystemClock))), ONE_STEP).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_single() {
    let server = RedisServer::start();
    let (host, port) = host_port(&server.addr());
    let store = redis_store(Target::Tcp {
        host,
        port,
        db: None,
    })
    .await;
    all_bodies(store, ONE_STEP).await;
    // TTL is set when the key is created, from the increment's ttl.
    let ttl: i64 = server.cli(&["ttl", "t1_a"]).trim().parse().expect("ttl");
    assert!((3590..=3600).contains(&ttl), "ttl {ttl}");
    // An algorithm's key lives just past its full refill: five tokens of
    // 5 per hour were taken, so one hour.
    let pttl: i64 = server
        .cli(&["pttl", "t5_rl2:{token_bucket}:x"])
        .trim()
        .parse()
        .expect("pttl");
    assert!((3_590_000..=3_600_001).contains(&pttl), "pttl {pttl}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_sentinel() {
    let s = RedisSentinel::start();
    let sentinels = s.sentinels().iter().map(|a| host_port(a)).collect();
    let store = redis_store(Target::Sentinel {
        master: s.master_name().to_string(),
        sentinels,
    })
    .await;
    all_bodies(store, ONE_STEP).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_cluster() {
    let c = RedisCluster::start();
    let seeds = c.seeds().iter().map(|a| host_port(a)).collect();
    let store = redis_store(Target::Cluster { seeds }).await;
    all_bodies(store, CLUSTERED).await;
}

/// The address of `server`.
fn tcp_target(server: &RedisServer) -> Target {
    let (host, port) = host_port(&server.addr());
    Target::Tcp {
        host,
        port,
        db: None,
    }
}

/// A store connected for two gRPC workers, and the workers.
async fn redis_store_on_workers(target: Target) -> (Arc<dyn Store>, Workers) {
    let workers = Workers::start(2).expect("workers start");
    let retry = StartupRetry {
        initial: Duration::from_millis(100),
        max: Duration::from_secs(1),
        max_elapsed: Duration::from_secs(30),
    };
    let store = connect(&options(target), None, retry, &workers)
        .await
        .expect("redis store connects");
    (Arc::new(store), workers)
}

/// The same bodies run on a gRPC worker, through its own connections and
/// coalescing lane.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_single_on_a_worker() {
    let server = RedisServer::start();
    let (store, workers) = redis_store_on_workers(tcp_target(&server)).await;
    workers.handles()[1]
        .spawn(all_bodies(store, ONE_STEP))
        .await
        .expect("the bodies pass on the worker");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_on_a_worker() {
    let c = RedisCluster::start();
    let seeds = c.seeds().iter().map(|a| host_port(a)).collect();
    let (store, workers) = redis_store_on_workers(Target::Cluster { seeds }).await;
    workers.handles()[0]
        .spawn(all_bodies(store, CLUSTERED))
        .await
        .expect("the bodies pass on the worker");
}

/// Each gRPC worker decides on a connection of its own: once every
/// connection has been idle for three seconds, decisions made on one worker
/// leave exactly one connection used since by a script, and the other
/// worker's decisions another one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_worker_decides_on_its_own_connection() {
    let server = RedisServer::start();
    let (store, workers) = redis_store_on_workers(tcp_target(&server)).await;
    // Each connection's id, idle seconds and last command (the asking
    // connection's own left out).
    let connections = || -> Vec<(String, u64, String)> {
        let list = server.cli(&["client", "list"]);
        list.lines()
            .filter(|l| !l.contains(" cmd=client|list "))
            .filter_map(|l| {
                let field = |name: &str| {
                    l.split(' ')
                        .find_map(|f| f.strip_prefix(name).map(str::to_string))
                };
                Some((field("id=")?, field("idle=")?.parse().ok()?, field("cmd=")?))
            })
            .collect()
    };
    let mut seen = Vec::new();
    for (i, worker) in workers.handles().iter().enumerate() {
        // Idle seconds only grow on a connection that is not used, so one
        // that is idle for less than the least of them after the decisions
        // was used by them, however long this host takes to ask.
        let mut quiet = 0;
        for _ in 0..100 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            quiet = connections().iter().map(|c| c.1).min().unwrap_or(0);
            if quiet >= 3 {
                break;
            }
        }
        assert!(quiet >= 3, "the connections never went quiet");
        let store = Arc::clone(&store);
        worker
            .spawn(async move {
                for n in 0..20 {
                    let key = format!("own{i}_{n}");
                    store
                        .counts(&[inc(&key, 1, 100)], Policy::Commit)
                        .await
                        .expect("decided");
                }
            })
            .await
            .expect("runs on the worker");
        let list = connections();
        let busy: Vec<String> = list
            .iter()
            .filter(|(_, idle, cmd)| *idle < quiet && cmd == "evalsha")
            .map(|c| c.0.clone())
            .collect();
        assert_eq!(busy.len(), 1, "worker {i}: one connection used: {list:?}");
        assert!(
            !seen.contains(&busy[0]),
            "worker {i} has its own: {busy:?} {seen:?}"
        );
        seen.push(busy[0].clone());
    }
}

/// The same bodies through the resilience layers, on a healthy Redis: the
/// layers change no answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_single_wrapped() {
    let server = RedisServer::start();
    let (host, port) = host_port(&server.addr());
    let store = wrapped_redis_store(Target::Tcp {
        host,
        port,
        db: None,
    })
    .await;
    all_bodies(store, ONE_STEP).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_cluster_wrapped() {
    let c = RedisCluster::start();
    let seeds = c.seeds().iter().map(|a| host_port(a)).collect();
    all_bodies(
        wrapped_redis_store(Target::Cluster { seeds }).await,
        CLUSTERED,
    )
    .await;
}

/// Memcache holds the original's counters and this instance's boards.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memcache() {
    let server = Memcached::start();
    let store = MemcacheStore::new(&MemcacheOptions {
        servers: vec![server.addr()],
        max_idle: 4,
        tls: None,
    })
    .expect("memcache store");
    all_bodies(Arc::new(store), READ_THEN_INCREMENT).await;
}

#[test]
fn url_targets_cover_every_type() {
    use ratelimit::store::redis::url::{parse, Deployment};
    assert!(matches!(
        parse(
            "REDIS_URL",
            Deployment::Cluster,
            "tcp",
            "127.0.0.1:1,127.0.0.1:2"
        ),
        Ok((Target::Cluster { .. }, _))
    ));
}
