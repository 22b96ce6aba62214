//! One set of store behaviours, run against every store: memory, Redis
//! single, Redis behind sentinels, Redis Cluster (real servers started by
//! the tests on free loopback ports).

mod support;

use std::sync::Arc;
use std::time::Duration;

use ratelimit::limiter::fixed_window::Window;
use ratelimit::limiter::{Clock, SystemClock};
use ratelimit::settings::RedisType;
use ratelimit::store::redis::url::{Credentials, Target};
use ratelimit::store::redis::{connect, RedisOptions, StartupRetry};
use ratelimit::store::{Increment, IncrementPolicy, MemoryStore, Store};
use support::redis::{RedisCluster, RedisSentinel, RedisServer};

fn now() -> u64 {
    SystemClock.now_secs()
}

/// An increment of `key` in the current hour window (tests stay in one window).
fn inc(key: &str, hits: u64, limit: u64) -> Increment {
    Increment {
        key: key.to_string(),
        hits,
        window: Window::containing(now(), 3600),
        ttl_seconds: 3600,
        limit,
    }
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
    let retry = StartupRetry {
        initial: Duration::from_millis(100),
        max: Duration::from_secs(1),
        max_elapsed: Duration::from_secs(30),
    };
    Arc::new(
        connect(&options(target), None, retry)
            .await
            .expect("redis store connects"),
    )
}

/// Counters count per key, zero hits read without consuming.
async fn counts_per_key(store: Arc<dyn Store>, p: &str) {
    let (a, b) = (format!("{p}a"), format!("{p}b"));
    let batch = [inc(&a, 1, 10), inc(&b, 2, 10)];
    assert_eq!(
        store.increment(&batch, IncrementPolicy::Always).await,
        Ok(vec![1, 2])
    );
    assert_eq!(
        store.increment(&batch, IncrementPolicy::Always).await,
        Ok(vec![2, 4])
    );
    assert_eq!(
        store
            .increment(&[inc(&a, 0, 10)], IncrementPolicy::Always)
            .await,
        Ok(vec![2])
    );
    assert_eq!(
        store
            .increment(&[inc(&a, 0, 10)], IncrementPolicy::Always)
            .await,
        Ok(vec![2])
    );
}

/// runtime.md §14.2 C-18: only the counters that would exceed move.
async fn stop_increment_when_over_limit(store: Arc<dyn Store>, p: &str) {
    let (a, b) = (format!("{p}a"), format!("{p}b"));
    let seed = [inc(&a, 10, 15), inc(&b, 10, 14)];
    store
        .increment(&seed, IncrementPolicy::Always)
        .await
        .expect("seed");
    let policy = IncrementPolicy::OnlyIfNoneWouldExceed;
    let one = [inc(&a, 1, 15), inc(&b, 1, 14)];
    assert_eq!(store.increment(&one, policy).await, Ok(vec![11, 11]));
    let two = [inc(&a, 2, 15), inc(&b, 2, 14)];
    assert_eq!(store.increment(&two, policy).await, Ok(vec![13, 13]));
    assert_eq!(store.increment(&two, policy).await, Ok(vec![13, 15]));
}

/// Keys of one request on many nodes come back in request order.
async fn many_keys_keep_their_order(store: Arc<dyn Store>, p: &str) {
    let batch: Vec<_> = (0..50u64)
        .map(|i| inc(&format!("{p}k{i}"), i + 1, 1000))
        .collect();
    let want: Vec<u64> = (0..50u64).map(|i| i + 1).collect();
    assert_eq!(
        store.increment(&batch, IncrementPolicy::Always).await,
        Ok(want)
    );
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
                        .increment(&[inc(&key, 1, u64::MAX)], IncrementPolicy::Always)
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
        store
            .increment(&[inc(&key, 0, 0)], IncrementPolicy::Always)
            .await,
        Ok(vec![64 * 50])
    );
}

async fn all_bodies(store: Arc<dyn Store>) {
    counts_per_key(Arc::clone(&store), "t1_").await;
    stop_increment_when_over_limit(Arc::clone(&store), "t2_").await;
    many_keys_keep_their_order(Arc::clone(&store), "t3_").await;
    no_lost_updates(Arc::clone(&store), "t4_").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory() {
    all_bodies(Arc::new(MemoryStore::new(Arc::new(SystemClock)))).await;
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
    all_bodies(store).await;
    // TTL is set when the key is created, from the increment's ttl.
    let ttl: i64 = server.cli(&["ttl", "t1_a"]).trim().parse().expect("ttl");
    assert!((3590..=3600).contains(&ttl), "ttl {ttl}");
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
    all_bodies(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_cluster() {
    let c = RedisCluster::start();
    let seeds = c.seeds().iter().map(|a| host_port(a)).collect();
    let store = redis_store(Target::Cluster { seeds }).await;
    all_bodies(store).await;
}

#[test]
fn url_targets_cover_every_type() {
    use ratelimit::store::redis::url::parse;
    assert!(matches!(
        parse(
            "REDIS_URL",
            RedisType::Cluster,
            "tcp",
            "127.0.0.1:1,127.0.0.1:2"
        ),
        Ok((Target::Cluster { .. }, _))
    ));
}
