//! Redis memory per active key for each algorithm: N keys written through
//! the store's own script (`Store::check`), then `MEMORY USAGE` summed over
//! every key of the algorithm, and each key's TTL compared with the
//! algorithm's full refill or window.
//!
//! Beside `MEMORY USAGE` (the key and its value alone), the growth of
//! Redis's `used_memory` per key: what a key really costs, with its share of
//! the key space's and the expiry table's hash tables. The original's
//! counters (`INCRBY` + `EXPIRE` keys) are measured the same way.
//!
//! `cargo bench --bench redis_memory` uses N = 100,000 per algorithm
//! (`REDIS_MEMORY_KEYS=2000000` for the sizing page's 2 million); under
//! `cargo test` (no `--bench` argument) 5,000, so the suite stays fast.
//! Keys look like production ones: `rl2:{api_user_u-00012345_}:tb:86400s`
//! (a limit of 100 per day, so that a token bucket's key, which lasts one
//! token's refill, outlives the writing of two million keys).

// The test support crate (testkit/).
use ratelimit_testkit as support;

use std::sync::Arc;
use std::time::Duration;

use ratelimit::config::Entry;
use ratelimit::limiter::fixed_window::Window;
use ratelimit::limiter::{AlgorithmName, Clock, Limiter, SystemClock};
use ratelimit::store::key::algorithm_key;
use ratelimit::store::redis::url::{Credentials, Target};
use ratelimit::store::redis::{connect, RedisOptions, StartupRetry};
use ratelimit::store::{testing::RunItems, Item, Limit, OriginalWindow, Policy, Store};
use support::redis::{redis_cli_within, RedisServer};

/// Sums `MEMORY USAGE` and `PTTL` over the keys matching `ARGV[1]`.
const MEASURE: &str = "local ks = redis.call('KEYS', ARGV[1]) \
local bytes, ttl, none = 0, 0, 0 \
for _, k in ipairs(ks) do \
  bytes = bytes + redis.call('MEMORY', 'USAGE', k, 'SAMPLES', '0') \
  local t = redis.call('PTTL', k) \
  if t < 0 then none = none + 1 else ttl = ttl + t end \
end \
return {#ks, bytes, ttl, none}";

/// [`MEASURE`] over the keys matching `pattern`: one script walks them
/// all, which takes seconds at two million keys.
fn measure(server: &RedisServer, pattern: &str) -> String {
    redis_cli_within(
        server.port,
        None,
        &["eval", MEASURE, "0", pattern],
        Duration::from_secs(600),
    )
    .text()
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let n: usize = match std::env::var("REDIS_MEMORY_KEYS").ok() {
        Some(v) if bench => v.parse().expect("REDIS_MEMORY_KEYS is a number"),
        _ if bench => 100_000,
        _ => 5_000,
    };
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let store: Arc<dyn Store> = rt.block_on(async {
        let options = RedisOptions {
            target: Target::Tcp {
                host: "127.0.0.1".into(),
                port: server.port,
                db: None,
            },
            credentials: Credentials::default(),
            sentinel_credentials: Credentials::default(),
            pool_size: 2,
            timeout: Duration::from_secs(5),
            tls: None,
            display: "bench".into(),
        };
        let retry = StartupRetry {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(1),
            max_elapsed: Duration::from_secs(30),
        };
        Arc::new(
            connect(
                &options,
                None,
                retry,
                &ratelimit::platform::workers::Workers::none(),
            )
            .await
            .expect("connects"),
        )
    });
    println!("{n} active keys per algorithm, limit 100 per day (the original's counters: per hour), one request each");
    println!(
        "| algorithm | bytes/key (MEMORY USAGE) | bytes/key (used_memory) | mean TTL | full refill/window |"
    );
    println!("|---|---|---|---|---|");
    let used_memory = || -> u64 {
        let info = server.cli(&["info", "memory"]);
        info.lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("used_memory")
    };
    // The original's counters: one key per descriptor and window.
    {
        server.cli(&["flushall"]);
        let before = used_memory();
        let window = OriginalWindow {
            limit: 100,
            window: Window::containing(SystemClock.now_secs(), 3600),
            ttl_seconds: 3600,
            jitter_seconds: 0,
        };
        rt.block_on(async {
            for chunk in (0..n).collect::<Vec<_>>().chunks(200) {
                let batch: Vec<Item> = chunk
                    .iter()
                    .map(|i| {
                        let key = format!("api_user_u-{i:08}_{}", window.window.start);
                        Item::new(&key, Limit::Counter(window), 1)
                    })
                    .collect();
                store.counts(&batch, Policy::Commit).await.expect("count");
            }
        });
        let grown = used_memory().saturating_sub(before);
        let out = measure(&server, "api_user_*");
        let v: Vec<u64> = out.lines().filter_map(|l| l.trim().parse().ok()).collect();
        let [keys, bytes, ttl_ms, without_ttl] = v[..] else {
            panic!("unexpected reply {out:?}");
        };
        assert_eq!(keys, n as u64, "every counter written");
        assert_eq!(without_ttl, 0, "every counter has a TTL");
        println!(
            "| original fixed window (counter) | {} | {} | {:.1?} | 3600s |",
            bytes / keys,
            grown / keys,
            Duration::from_millis(ttl_ms / keys)
        );
    }
    for algorithm in AlgorithmName::ALL {
        server.cli(&["flushall"]);
        let before = used_memory();
        // A day: a token bucket's key lasts one token's refill (period /
        // limit), and writing two million keys must take less than that.
        let period = Duration::from_secs(86_400);
        let limiter = Limiter::new(algorithm, 100, period, None).expect("valid");
        let suffix = format!("{}:86400s", algorithm.key_tag());
        rt.block_on(async {
            for chunk in (0..n).collect::<Vec<_>>().chunks(200) {
                let batch: Vec<Item> = chunk
                    .iter()
                    .map(|i| Item {
                        key: algorithm_key(
                            "",
                            "api",
                            &[Entry::new("user", format!("u-{i:08}"))],
                            None,
                            &suffix,
                        ),
                        limit: Limit::Algorithm(limiter),
                        hits: ratelimit::store::Hits::Take(1),
                        binding: true,
                        node: None,
                        rule: Default::default(),
                    })
                    .collect();
                let reply = store.run(&batch, Policy::Commit).await.expect("check");
                assert!(reply.committed);
            }
        });
        let grown = used_memory().saturating_sub(before);
        let pattern = format!("rl2:*:{suffix}");
        let out = measure(&server, &pattern);
        let v: Vec<u64> = out.lines().filter_map(|l| l.trim().parse().ok()).collect();
        let [keys, bytes, ttl_ms, without_ttl] = v[..] else {
            panic!("unexpected reply {out:?}");
        };
        assert_eq!(keys, n as u64, "every key written");
        assert_eq!(without_ttl, 0, "every key has a TTL");
        let mean_ttl = Duration::from_millis(ttl_ms / keys);
        // One request of a 100/day bucket is 864 s of refill; windows last
        // one window (two for the sliding window counter's previous count).
        let full = match algorithm {
            AlgorithmName::TokenBucket => period / 100,
            AlgorithmName::SlidingWindow => 2 * period,
            _ => period,
        };
        assert!(
            mean_ttl <= full + Duration::from_millis(2),
            "{algorithm}: {mean_ttl:?}"
        );
        if algorithm == AlgorithmName::TokenBucket {
            assert!(
                bytes / keys <= 100,
                "token bucket: {} bytes per key",
                bytes / keys
            );
        }
        println!(
            "| {algorithm} | {} | {} | {:.1?} | {:?} |",
            bytes / keys,
            grown / keys,
            mean_ttl,
            full
        );
    }
    // A sliding log grows with its entries: 1,000 keys of 100 entries each.
    let limiter = Limiter::new(
        AlgorithmName::SlidingLog,
        100,
        Duration::from_secs(3600),
        None,
    )
    .expect("valid");
    rt.block_on(async {
        for i in 0..1_000 {
            let key = algorithm_key(
                "",
                "api",
                &[Entry::new("login", format!("ip-{i:08}"))],
                None,
                "sl:3600s",
            );
            let check = Item {
                key,
                limit: Limit::Algorithm(limiter),
                hits: ratelimit::store::Hits::Take(100),
                binding: true,
                node: None,
                rule: Default::default(),
            };
            assert!(
                store
                    .run(&[check], Policy::Commit)
                    .await
                    .expect("check")
                    .committed
            );
        }
    });
    let out = measure(&server, "rl2:{api_login_*");
    let v: Vec<u64> = out.lines().filter_map(|l| l.trim().parse().ok()).collect();
    let [keys, bytes, ..] = v[..] else {
        panic!("unexpected reply {out:?}");
    };
    println!(
        "| sliding_log, 100 entries | {} ({} per entry) | | | |",
        bytes / keys,
        bytes / keys / 100
    );
}
