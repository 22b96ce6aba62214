//! The decision audit through the real binary (`DECISION_AUDIT_SAMPLE=1`),
//! on the memory store and on real Redis servers (single and Cluster):
//! what `/audit` says of each rule's decisions against its exact contract.
//!
//! - a boundary burst on a fixed window (the original's vocabulary, and
//!   `algorithm: fixed_window`) shows the burst as "over", within the 2×
//!   bound;
//! - a sliding log and a token bucket show zero disagreements;
//! - a sliding window shows a small rate, within its stated bound;
//! - a sharded rule and a leased one show "under" and never "over";
//! - a Redis outage with a fail-open floor shows its decisions as answered
//!   by policy, and the comparison resumes after it;
//! - a local-first window over 3 instances shows its over-admission as
//!   "over", within its stated bound (`L + ⌊ε·L⌋` a window);
//! - with sampling off nothing is audited and no reference is written.

// Tests and the load tool measure the real elapsed time of real processes.
#![allow(clippy::disallowed_types)]

use crate::support;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use support::redis::{RedisCluster, RedisServer};
use support::*;

const RULES: &str = "
domain: a
descriptors:
  - key: original
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: fixed
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: fixed_window}
  - key: log
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: sliding_log}
  - key: sliding
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: sliding_window}
  - key: bucket
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 10}
  - key: sharded
    rate_limit: {unit: hour, requests_per_unit: 16, shards: 8}
  - key: leased
    rate_limit: {unit: hour, requests_per_unit: 200, lease: true}
  - key: floor
    rate_limit: {unit: hour, requests_per_unit: 100, failure_mode: open, fallback_requests_per_unit: 5}
  - key: shared
    rate_limit: {unit: hour, requests_per_unit: 3, algorithm: sliding_log}
  - key: contended
    rate_limit: {unit: hour, requests_per_unit: 100, algorithm: sliding_log}
  - key: big
    rate_limit: {unit: hour, requests_per_unit: 1000000}
  - key: monthly
    rate_limit: {unit: month, requests_per_unit: 100, calendar: true}
  - key: local
    rate_limit: {unit: hour, requests_per_unit: 100, sync_interval: 50ms}
";

fn audited(extra: &[(&str, &str)]) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("DECISION_AUDIT_SAMPLE", "1".to_string()),
        ("EXPIRATION_JITTER_MAX_SECONDS", "0".to_string()),
    ];
    // Leaked: the environment lives as long as the test process.
    for (k, v) in extra {
        env.push((Box::leak(k.to_string().into_boxed_str()), v.to_string()));
    }
    env
}

fn start(env: &[(&'static str, String)]) -> Service {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Service::start(&[("rules.yaml", RULES)], &env)
}

fn redis_env(kind: &str, url: &str) -> Vec<(&'static str, String)> {
    audited(&[
        ("BACKEND_TYPE", "redis"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_TYPE", kind),
        ("REDIS_URL", url),
        ("REDIS_STARTUP_INITIAL_INTERVAL", "100ms"),
    ])
}

/// `/audit`'s row of the rule whose stats key is `a.<key>`.
fn row(svc: &Service, key: &str) -> Value {
    let body = svc.debug("/audit").body;
    let audit: Value = serde_json::from_str(&body).expect("/audit is JSON");
    audit["rules"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["rule"] == format!("a.{key}")))
        .cloned()
        .unwrap_or_else(|| panic!("no row for {key} in {body}"))
}

fn n(v: &Value, field: &str) -> u64 {
    v[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} in {v}"))
}

async fn one(c: &mut Client, key: &str, value: &str) -> i32 {
    let r = call(c, request("a", vec![desc(&[(key, value)])]))
        .await
        .expect("call");
    r.overall_code
}

/// Sleeps until `at_ms` milliseconds into a second (wall clock).
fn until_ms_of_second(at_ms: u64) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970");
    let ms = u64::from(now.subsec_millis());
    let wait = if ms < at_ms {
        at_ms - ms
    } else {
        1000 - ms + at_ms
    };
    std::thread::sleep(Duration::from_millis(wait));
}

/// 20 requests of `key`, 10 before a second boundary and 10 just after;
/// how many were admitted.
async fn boundary_burst(c: &mut Client, key: &str, value: &str) -> usize {
    // Start in a fresh second, so that the first 10 are its only ones,
    // 300 ms before its end: 10 calls take a few ms, and a stall of this
    // shared host must not push them past the boundary.
    until_ms_of_second(700);
    let mut admitted = 0;
    for _ in 0..10 {
        admitted += usize::from(one(c, key, value).await == OK);
    }
    until_ms_of_second(30);
    for _ in 0..10 {
        admitted += usize::from(one(c, key, value).await == OK);
    }
    admitted
}

/// The burst of a fixed window: 20 admitted where the contract allows 10,
/// so 10 are over; the peak is the 2× bound and within it.
async fn check_boundary_burst(svc: &Service, key: &str) {
    let mut c = svc.client().await;
    let admitted = boundary_burst(&mut c, key, "burst").await;
    let r = row(svc, key);
    println!("{key}: boundary burst admitted {admitted}: {r}");
    assert_eq!(admitted, 20, "the fixed window's boundary burst");
    assert_eq!(n(&r, "decisions"), 20);
    assert_eq!(n(&r, "over"), 10, "the second window's 10 are over");
    assert_eq!(n(&r, "under"), 0);
    assert_eq!(n(&r, "peak_in_window"), 20);
    assert_eq!(r["bound"]["max_in_window"], 20);
    assert_eq!(r["within_bound"], true);
}

/// 2× the limit for 3 s from one caller: `(admitted, row)`.
async fn steady_overload(svc: &Service, key: &str) -> (usize, Value) {
    let mut c = svc.client().await;
    let mut admitted = 0;
    let start = Instant::now();
    for i in 0..60u32 {
        let at = start + Duration::from_millis(50) * i;
        tokio::time::sleep_until(at.into()).await;
        admitted += usize::from(one(&mut c, key, "steady").await == OK);
    }
    (admitted, row(svc, key))
}

async fn check_exact(svc: &Service, key: &str) {
    let (admitted, r) = steady_overload(svc, key).await;
    println!("{key}: steady 2x: admitted {admitted}: {r}");
    assert_eq!(n(&r, "decisions"), 60);
    assert_eq!((n(&r, "over"), n(&r, "under")), (0, 0), "exact: {r}");
    assert!(n(&r, "peak_in_window") <= 10);
    assert_eq!(r["within_bound"], true);
}

async fn check_sliding_window(svc: &Service) {
    let (admitted, r) = steady_overload(svc, "sliding").await;
    println!("sliding: steady 2x: admitted {admitted}: {r}");
    assert_eq!(n(&r, "decisions"), 60);
    assert!(
        n(&r, "peak_in_window") <= 19,
        "at most limit − 1 above: {r}"
    );
    assert!(r["over_rate"].as_f64().unwrap_or(1.0) < 0.2, "{r}");
    assert_eq!(r["within_bound"], true);
}

/// Sharded 8 ways, 16 per hour: one caller's 40 requests fill the
/// sub-buckets unevenly, so some are refused while the limit has room;
/// each of those, and only those, is under. (All 8 filling exactly at the
/// 16th admission has a chance of 16!/(2^8 8^16) < 0.03 %.)
/// The sharded rule's traffic; how many it admitted (16, unless a random
/// sub-bucket drew fewer than its 2 among the 40 picks: about 1 run in 4).
async fn check_sharded(svc: &Service) -> u64 {
    let mut c = svc.client().await;
    let (mut admitted, mut early_refusals) = (0, 0);
    for _ in 0..40 {
        match one(&mut c, "sharded", "s").await {
            OK => admitted += 1,
            _ if admitted < 16 => early_refusals += 1,
            _ => {}
        }
    }
    let r = row(svc, "sharded");
    println!("sharded: admitted {admitted} of 16, {early_refusals} refused before: {r}");
    assert!(admitted <= 16);
    assert_eq!(n(&r, "decisions"), 40);
    assert_eq!(n(&r, "over"), 0, "never above the limit");
    assert!(early_refusals > 0, "some sub-bucket filled first");
    assert_eq!(
        n(&r, "under"),
        early_refusals,
        "refused while the limit had room"
    );
    assert_eq!(r["contract"]["shards"], 8);
    assert_eq!(r["bound"]["under_allowed"], true);
    assert_eq!(r["within_bound"], true);
    admitted
}

/// Every rule kind's traffic and what its row must say; the sharded rule's
/// admissions.
async fn check_every_algorithm(svc: &Service) -> u64 {
    check_boundary_burst(svc, "original").await;
    check_boundary_burst(svc, "fixed").await;
    check_exact(svc, "log").await;
    check_exact(svc, "bucket").await;
    check_sliding_window(svc).await;
    check_sharded(svc).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_memory_each_rule_is_measured_against_its_contract() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let prometheus = format!("127.0.0.1:{port}");
    let svc = start(&audited(&[
        ("USE_PROMETHEUS", "true"),
        ("PROMETHEUS_ADDR", &prometheus),
    ]));
    check_every_algorithm(&svc).await;
    // Statistics in the original's per-rule naming, and in Prometheus.
    assert_eq!(
        svc.stat("ratelimit.service.rate_limit.a.original.audit_over"),
        10
    );
    assert_eq!(
        svc.stat("ratelimit.service.rate_limit.a.log.audit_decisions"),
        60
    );
    let metrics = http(prometheus.parse().expect("addr"), "GET", "/metrics", b"").body;
    assert!(
        metrics
            .contains("ratelimit_service_rate_limit_audit_over{domain=\"a\",key1=\"original\"} 10"),
        "{metrics}"
    );
    // A limit above DECISION_AUDIT_MAX_LIMIT is not audited.
    let mut c = svc.client().await;
    assert_eq!(one(&mut c, "big", "x").await, OK);
    let body = svc.debug("/audit").body;
    assert!(!body.contains("a.big"), "{body}");
    // Nor is a calendar window (its periods vary in length).
    assert_eq!(one(&mut c, "monthly", "x").await, OK);
    let body = svc.debug("/audit").body;
    assert!(!body.contains("a.monthly"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_the_reference_runs_in_the_same_script() {
    let redis = RedisServer::start();
    let svc = start(&redis_env("single", &redis.addr()));
    let sharded = check_every_algorithm(&svc).await;
    // The references are Redis keys beside the limits' own, one per
    // descriptor and limit (the 1 s ones have expired by now).
    let keys = redis.cli(&["--scan", "--pattern", "*audit*"]);
    println!("reference keys: {keys}");
    assert!(keys.contains("rl2:{a_sharded_s_}:audit:fw:3600s"), "{keys}");
    let entries = redis.cli(&["zcard", "rl2:{a_sharded_s_}:audit:fw:3600s"]);
    assert_eq!(
        entries.trim(),
        sharded.to_string(),
        "one entry per admission"
    );
    // Two instances on one Redis share the reference: the second one's
    // refusal agrees with the contract because the first one's admissions
    // are in it (its own reference would have admitted).
    let mut c = svc.client().await;
    for _ in 0..3 {
        assert_eq!(one(&mut c, "shared", "x").await, OK);
    }
    let other = start(&redis_env("single", &redis.addr()));
    let mut c = other.client().await;
    assert_eq!(one(&mut c, "shared", "x").await, OVER);
    let r = row(&other, "shared");
    assert_eq!((n(&r, "decisions"), n(&r, "under")), (1, 0), "{r}");
}

/// 64 concurrent callers over two instances on one key of an exact rule,
/// 300 requests for a limit of 100: the reference is decided in the same
/// script as each decision, so not one of the races at the limit shows as
/// a disagreement; and the original's fixed window never shows "under".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_callers_over_a_fleet_show_no_false_disagreement() {
    let redis = RedisServer::start();
    let fleet = [
        start(&redis_env("single", &redis.addr())),
        start(&redis_env("single", &redis.addr())),
    ];
    let mut clients = Vec::new();
    for svc in &fleet {
        clients.push(svc.client().await);
    }
    for key in ["contended", "floor"] {
        let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let tasks: Vec<_> = (0..64)
            .map(|i| {
                let mut c = clients[i % 2].clone();
                let next = std::sync::Arc::clone(&next);
                tokio::spawn(async move {
                    let mut admitted = 0;
                    while next.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < 300 {
                        admitted += usize::from(one(&mut c, key, "race").await == OK);
                    }
                    admitted
                })
            })
            .collect();
        let mut admitted = 0;
        for t in tasks {
            admitted += t.await.expect("caller");
        }
        let rows = [row(&fleet[0], key), row(&fleet[1], key)];
        println!(
            "{key}: 64 callers, 2 instances: admitted {admitted}: {} / {}",
            rows[0], rows[1]
        );
        assert_eq!(admitted, 100);
        assert_eq!(n(&rows[0], "decisions") + n(&rows[1], "decisions"), 300);
        for r in &rows {
            assert_eq!((n(r, "over"), n(r, "under")), (0, 0), "{r}");
        }
    }
}

/// Off by default: no rows, and the store holds no reference.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_sampling_off_nothing_is_audited() {
    let redis = RedisServer::start();
    let env: Vec<(&'static str, String)> = redis_env("single", &redis.addr())
        .into_iter()
        .filter(|(k, _)| *k != "DECISION_AUDIT_SAMPLE")
        .collect();
    let svc = start(&env);
    let mut c = svc.client().await;
    for key in ["original", "fixed", "log", "bucket"] {
        one(&mut c, key, "x").await;
    }
    let audit: Value = serde_json::from_str(&svc.debug("/audit").body).expect("JSON");
    assert_eq!(audit["rules"].as_array().map(Vec::len), Some(0), "{audit}");
    assert_eq!(redis.cli(&["--scan", "--pattern", "*audit*"]).trim(), "");
    // A share of 0.5 audits about half of the keys, by their hash: ~100
    // references for 200 keys (binomial σ ≈ 7), the same ones from a second
    // instance.
    let half: Vec<(&'static str, String)> = redis_env("single", &redis.addr())
        .into_iter()
        .map(|(k, v)| match k {
            "DECISION_AUDIT_SAMPLE" => (k, "0.5".to_string()),
            _ => (k, v),
        })
        .collect();
    let (first, second) = (start(&half), start(&half));
    for svc in [&first, &second] {
        let mut c = svc.client().await;
        for i in 0..200 {
            one(&mut c, "floor", &format!("tenant-{i}")).await;
        }
    }
    let references = redis.cli(&["--scan", "--pattern", "*audit*"]);
    let count = references.lines().filter(|l| !l.is_empty()).count();
    println!("DECISION_AUDIT_SAMPLE=0.5: {count} of 200 keys audited");
    assert!((60..=140).contains(&count), "{count}");
    let (r1, r2) = (row(&first, "floor"), row(&second, "floor"));
    assert_eq!(n(&r1, "decisions"), count as u64);
    assert_eq!(n(&r2, "decisions"), count as u64, "the same keys");
}

/// A Redis outage with a fail-open floor: its decisions are answered by
/// policy and counted as such, with no over or under; once Redis is back
/// they are compared again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_shows_as_decisions_by_policy() {
    let redis = RedisServer::start();
    let svc = start(
        &redis_env("single", &redis.addr())
            .into_iter()
            .chain([
                ("STORE_TIMEOUT", "50ms".to_string()),
                ("STORE_BREAKER_COOLDOWN", "500ms".to_string()),
            ])
            .collect::<Vec<_>>(),
    );
    let mut c = svc.client().await;
    for _ in 0..5 {
        assert_eq!(one(&mut c, "floor", "f").await, OK);
    }
    redis.pause();
    let mut floor_admitted = 0;
    for _ in 0..10 {
        floor_admitted += usize::from(one(&mut c, "floor", "f").await == OK);
    }
    redis.resume();
    assert_eq!(floor_admitted, 5, "the floor");
    let r = row(&svc, "floor");
    println!("during the outage: {r}");
    assert_eq!(n(&r, "decisions"), 5);
    assert_eq!(n(&r, "by_policy"), 10);
    assert_eq!((n(&r, "over"), n(&r, "under")), (0, 0));
    // Back on Redis (after the breaker's cooldown): compared again.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        one(&mut c, "floor", "f").await;
        if n(&row(&svc, "floor"), "decisions") > 5 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = row(&svc, "floor");
    println!("after the outage: {r}");
    assert!(n(&r, "decisions") > 5, "compared again: {r}");
    assert_eq!((n(&r, "over"), n(&r, "under")), (0, 0), "{r}");
    assert_eq!(r["within_bound"], true);
}

/// On Redis Cluster: a leased rule's refusals while another instance holds
/// tokens are "under" and nothing is "over"; a sharded rule's sub-buckets
/// on other slots are judged against the one reference.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_leases_and_shards_show_under_never_over() {
    let cluster = RedisCluster::start();
    let env = redis_env("cluster", &cluster.seeds().join(","))
        .into_iter()
        .chain([
            ("LEASE_MIN_RATE", "10".to_string()),
            ("LEASE_TTL", "60s".to_string()),
        ])
        .collect::<Vec<_>>();
    let (holder, drainer) = (start(&env), start(&env));
    // The holder becomes hot and takes a lease (batches of 5 % of 200),
    // then keeps what it has not spent.
    let mut h = holder.client().await;
    let mut held = 0;
    for _ in 0..200 {
        assert_eq!(one(&mut h, "leased", "l").await, OK);
        let hot: Value = serde_json::from_str(&holder.debug("/hotkeys").body).expect("JSON");
        held = hot["hot_keys"]
            .as_array()
            .and_then(|k| k.first())
            .and_then(|k| k["leased_tokens"].as_u64())
            .unwrap_or(0);
        if held > 0 {
            break;
        }
    }
    assert!(held > 0, "the holder keeps a lease");
    // The drainer takes the rest and is then refused while the holder's
    // tokens are unspent: the contract would admit those.
    let mut d = drainer.client().await;
    let mut refused = 0;
    for _ in 0..250 {
        refused += usize::from(one(&mut d, "leased", "l").await == OVER);
    }
    let (rh, rd) = (row(&holder, "leased"), row(&drainer, "leased"));
    println!("leased: holder keeps {held}: {rh}\ndrainer refused {refused}: {rd}");
    assert!(refused > 0);
    assert_eq!(n(&rh, "over") + n(&rd, "over"), 0, "never above the limit");
    assert_eq!(
        n(&rd, "under"),
        refused as u64,
        "every refusal came while the holder's tokens were unspent"
    );
    assert_eq!(rd["within_bound"], true);

    check_sharded(&holder).await;
}

/// A local-first window (`sync_interval`) over 3 instances on one Redis,
/// 48 callers offering 5× its limit: its decisions far from the limit come
/// from the instances' views (its reference is still decided at the store,
/// one call per audited request), and what the views admit over the limit
/// shows as "over", within the bound the row states: `L + ⌊ε·L⌋` a window
/// (`LOCAL_FIRST_MAX_OVER` 0.2: 100 + 20; `N·⌊ε·L/N⌋` is 18 here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_first_window_is_judged_by_its_stated_bound() {
    let redis = RedisServer::start();
    let mut env = redis_env("single", &redis.addr());
    env.push(("LOCAL_FIRST_MAX_OVER", "0.2".to_string()));
    let fleet = [start(&env), start(&env), start(&env)];
    let mut clients = Vec::new();
    for svc in &fleet {
        clients.push(svc.client().await);
    }
    // Every instance counts the 3 (the write-back counts them each second).
    for c in clients.iter_mut() {
        assert_eq!(one(c, "local", "warm").await, OK);
    }
    let counted = || {
        fleet
            .iter()
            .all(|s| s.stat("ratelimit.local_first.instances") == 3)
    };
    for _ in 0..100 {
        if counted() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(counted(), "every instance counts the 3 instances");
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let tasks: Vec<_> = (0..48)
        .map(|i| {
            let mut c = clients[i % 3].clone();
            let next = std::sync::Arc::clone(&next);
            tokio::spawn(async move {
                let mut admitted = 0;
                while next.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < 500 {
                    admitted += usize::from(one(&mut c, "local", "five").await == OK);
                }
                admitted
            })
        })
        .collect();
    let mut admitted = 0;
    for t in tasks {
        admitted += t.await.expect("caller");
    }
    let rows: Vec<Value> = fleet.iter().map(|s| row(s, "local")).collect();
    let local: u64 = fleet
        .iter()
        .map(|s| s.stat("ratelimit.local_first.local_decision"))
        .sum();
    println!(
        "local-first, 3 instances, 500 calls: admitted {admitted}, {local} from views: {rows:?}"
    );
    assert!((100..=118).contains(&admitted), "admitted {admitted}");
    assert!(local > 0, "the views answered");
    let sum = |field: &str| rows.iter().map(|r| n(r, field)).sum::<u64>();
    // The 3 warm-up calls and the 500.
    assert_eq!(sum("decisions"), 500 + 3);
    assert_eq!(
        sum("over"),
        admitted as u64 - 100,
        "each admission over the limit"
    );
    assert_eq!(sum("under"), 0, "never refuses what the contract admits");
    for r in &rows {
        assert_eq!(r["contract"]["local_first_over"], 20, "{r}");
        assert_eq!(r["bound"]["max_in_window"], 240, "{r}");
        assert_eq!(r["within_bound"], true, "{r}");
    }
}
