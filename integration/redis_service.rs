//! The service on Redis (single and cluster), against real servers:
//! the original's counter arithmetic with keys seeded as the original
//! writes them, the local cache, STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT,
//! per-second Redis, outage and recovery, share threshold, commands per
//! decision, exact admission under concurrency across four instances, and
//! calendar windows (with the memory store beside them).

// Tests and the load tool measure the real elapsed time of real processes.
#![allow(clippy::disallowed_types)]

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use support::redis::{RedisCluster, RedisSentinel, RedisServer};
use support::*;

const RULES: &str = "
domain: d
descriptors:
  - key: l10
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: l15
    rate_limit: {unit: hour, requests_per_unit: 15}
  - key: l14
    rate_limit: {unit: hour, requests_per_unit: 14}
  - key: l20
    rate_limit: {unit: hour, requests_per_unit: 20}
  - key: l8
    rate_limit: {unit: hour, requests_per_unit: 8}
  - key: l5
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: shadow15
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 15}
  - key: sec
    rate_limit: {unit: second, requests_per_unit: 100}
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: files_no_share
    value: files_no_share/*
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: tb
    rate_limit: {algorithm: token_bucket, unit: second, requests_per_unit: 1000, burst: 2000}
  - key: sw
    rate_limit: {algorithm: sliding_window, unit: minute, requests_per_unit: 1000}
";

/// A Redis deployment for the service.
enum Redis {
    Single(RedisServer),
    Cluster(RedisCluster),
    Sentinel(RedisSentinel),
}

impl Redis {
    fn env(&self) -> Vec<(String, String)> {
        let mut env = vec![
            ("BACKEND_TYPE".into(), "redis".into()),
            ("REDIS_SOCKET_TYPE".into(), "tcp".into()),
            ("EXPIRATION_JITTER_MAX_SECONDS".into(), "0".into()),
            ("REDIS_STARTUP_INITIAL_INTERVAL".into(), "100ms".into()),
        ];
        match self {
            Redis::Single(s) => env.push(("REDIS_URL".into(), s.addr())),
            Redis::Cluster(c) => {
                env.push(("REDIS_TYPE".into(), "cluster".into()));
                env.push(("REDIS_URL".into(), c.seeds().join(",")));
            }
            Redis::Sentinel(s) => {
                env.push(("REDIS_TYPE".into(), "sentinel".into()));
                env.push(("REDIS_URL".into(), s.url()));
            }
        }
        env
    }

    fn cli(&self, args: &[&str]) -> String {
        match self {
            Redis::Single(s) => s.cli(args),
            Redis::Cluster(c) => c.cli(args),
            Redis::Sentinel(s) => support::redis::redis_cli(s.primary_port(), args).text(),
        }
    }

    /// The ports of the primaries.
    fn primary_ports(&self) -> Vec<u16> {
        match self {
            Redis::Single(s) => vec![s.port],
            Redis::Cluster(c) => c
                .primaries()
                .iter()
                .filter_map(|a| a.rsplit_once(':').and_then(|(_, p)| p.parse().ok()))
                .collect(),
            Redis::Sentinel(s) => vec![s.primary_port()],
        }
    }

    /// Sum of a command's calls over the primaries (`INFO commandstats`;
    /// replicas replay script effects and would count them twice).
    fn calls(&self, command: &str) -> u64 {
        self.primary_ports()
            .into_iter()
            .map(|p| {
                let info = support::redis::redis_cli(p, &["info", "commandstats"]).text();
                info.lines()
                    .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
                    .and_then(|r| r.split(',').next())
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or(0)
            })
            .sum()
    }
}

fn start(redis: &Redis, extra: &[(&str, &str)]) -> Service {
    let mut env = redis.env();
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Service::start(&[("rules.yaml", RULES)], &env)
}

fn hour_window() -> u64 {
    wait_for_fresh_window(3600, 30);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    now - now % 3600
}

/// The original's key for `(key, value)` in domain `d`.
fn key(k: &str, v: &str, window: u64) -> String {
    format!("d_{k}_{v}_{window}")
}

async fn one(svc: &Service, k: &str, v: &str, hits: Option<u64>) -> (i32, u32) {
    let mut c = svc.client().await;
    let d = match hits {
        Some(h) => desc_hits(&[(k, v)], h),
        None => desc(&[(k, v)]),
    };
    let r = call(&mut c, request("d", vec![d])).await.expect("call");
    (r.statuses[0].code, r.statuses[0].limit_remaining)
}

fn stat(svc: &Service, k: &str, name: &str) -> u64 {
    svc.stat(&format!("ratelimit.service.rate_limit.d.{k}.{name}"))
}

/// The original's status arithmetic (the rows whose `before` is
/// `after − h`): seed the counter
/// as the original leaves it, call once, check status and counters.
async fn counter_arithmetic(redis: &Redis) {
    let svc = start(redis, &[]);
    let w = hour_window();
    // (rule, L, h, after, status, remaining, over, near, within)
    type Row<'a> = (&'a str, u64, u64, i32, u32, u64, u64, u64);
    let rows: [Row; 12] = [
        ("l10", 1, 5, OK, 5, 0, 0, 1),
        ("l10", 1, 11, OVER, 0, 1, 0, 0),
        ("l10", 0, 11, OVER, 0, 0, 0, 0),
        ("l15", 1, 11, OK, 4, 0, 0, 1),
        ("l15", 1, 13, OK, 2, 0, 1, 1),
        ("l15", 1, 16, OVER, 0, 1, 0, 0),
        ("l20", 3, 5, OK, 15, 0, 0, 3),
        ("l8", 2, 7, OK, 1, 0, 1, 2),
        ("l20", 3, 19, OK, 1, 0, 3, 3),
        ("l20", 3, 22, OVER, 0, 2, 1, 0),
        ("l20", 7, 22, OVER, 0, 2, 4, 0),
        ("l10", 3, 30, OVER, 0, 3, 0, 0),
    ];
    for (i, (rule, h, after, code, remaining, over, near, within)) in rows.into_iter().enumerate() {
        let value = format!("row{i}");
        let k = key(rule, &value, w);
        if after > h {
            redis.cli(&["set", &k, &(after - h).to_string(), "ex", "3600"]);
        }
        let before = (
            stat(&svc, rule, "over_limit"),
            stat(&svc, rule, "near_limit"),
            stat(&svc, rule, "within_limit"),
        );
        let got = one(&svc, rule, &value, Some(h)).await;
        assert_eq!(got, (code, remaining), "C-{} status", i + 1);
        let after_stats = (
            stat(&svc, rule, "over_limit"),
            stat(&svc, rule, "near_limit"),
            stat(&svc, rule, "within_limit"),
        );
        assert_eq!(
            (
                after_stats.0 - before.0,
                after_stats.1 - before.1,
                after_stats.2 - before.2
            ),
            (over, near, within),
            "C-{} counters",
            i + 1
        );
        assert_eq!(
            redis.cli(&["get", &k]).trim(),
            after.to_string(),
            "C-{} stored value",
            i + 1
        );
    }
    // a new key gets the window as its TTL (no jitter configured).
    let k = key("l10", "fresh", w);
    one(&svc, "l10", "fresh", None).await;
    let ttl: u64 = redis.cli(&["ttl", &k]).trim().parse().expect("ttl");
    assert!((3590..=3600).contains(&ttl), "ttl {ttl}");
    // Two new keys in one request, with the same hits (one cost and TTL for
    // the node's group) and with different hits (one per counter): each is
    // counted and gets the window as its TTL.
    for (v, hits) in [("fresh2", [1, 1]), ("fresh3", [1, 2])] {
        let mut c = svc.client().await;
        let descriptors = vec![
            desc_hits(&[("l10", v)], hits[0]),
            desc_hits(&[("l15", v)], hits[1]),
        ];
        call(&mut c, request("d", descriptors)).await.expect("call");
        for (rule, h) in [("l10", hits[0]), ("l15", hits[1])] {
            let k = key(rule, v, w);
            assert_eq!(redis.cli(&["get", &k]).trim(), h.to_string(), "{k}");
            let ttl: u64 = redis.cli(&["ttl", &k]).trim().parse().expect("ttl");
            assert!((3590..=3600).contains(&ttl), "{k}: ttl {ttl}");
        }
    }
    // hits [0, 1] where the first has no rule and the second is at 10/10.
    let k = key("l10", "c20", w);
    redis.cli(&["set", &k, "10", "ex", "3600"]);
    let mut c = svc.client().await;
    let r = call(
        &mut c,
        request(
            "d",
            vec![
                desc_hits(&[("nothing", "x")], 0),
                desc_hits(&[("l10", "c20")], 1),
            ],
        ),
    )
    .await
    .expect("call");
    assert_eq!(
        (
            r.statuses[0].code,
            r.statuses[1].code,
            r.statuses[1].limit_remaining
        ),
        (OK, OVER, 0)
    );
}

/// The local over-limit cache answers without Redis.
async fn local_cache(redis: &Redis, rule: &str) {
    let svc = start(redis, &[("LOCAL_CACHE_SIZE_IN_BYTES", "1000")]);
    let w = hour_window();
    let k = key(rule, "lc", w);
    let shadow = rule.starts_with("shadow");
    let want_over = if shadow { OK } else { OVER };
    for (seed, want) in [(10, (OK, 4)), (12, (OK, 2)), (15, (want_over, 0))] {
        redis.cli(&["set", &k, &seed.to_string(), "ex", "3600"]);
        assert_eq!(one(&svc, rule, "lc", None).await, want);
    }
    let evals = redis.calls("evalsha");
    assert_eq!(one(&svc, rule, "lc", None).await, (want_over, 0));
    assert_eq!(
        redis.calls("evalsha"),
        evals,
        "the 4th call never reaches Redis"
    );
    assert_eq!(stat(&svc, rule, "total_hits"), 4);
    assert_eq!(stat(&svc, rule, "over_limit"), 2);
    assert_eq!(stat(&svc, rule, "over_limit_with_local_cache"), 1);
    assert_eq!(stat(&svc, rule, "near_limit"), 1);
    assert_eq!(stat(&svc, rule, "within_limit"), 2);
    if shadow {
        assert_eq!(stat(&svc, rule, "shadow_mode"), 2);
    }
}

/// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT through the service.
async fn stop_increment(redis: &Redis) {
    let svc = start(
        redis,
        &[("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true")],
    );
    let w = hour_window();
    let (ka, kb) = (key("l15", "s", w), key("l14", "s", w));
    redis.cli(&["set", &ka, "10", "ex", "3600"]);
    redis.cli(&["set", &kb, "10", "ex", "3600"]);
    let c = svc.client().await;
    let send = |h: u64| {
        let req = request(
            "d",
            vec![desc_hits(&[("l15", "s")], h), desc_hits(&[("l14", "s")], h)],
        );
        let mut c = c.clone();
        async move { call(&mut c, req).await.expect("call") }
    };
    let r = send(1).await;
    assert_eq!(
        (r.statuses[0].limit_remaining, r.statuses[1].limit_remaining),
        (4, 3)
    );
    let r = send(2).await;
    assert_eq!(
        (r.statuses[0].limit_remaining, r.statuses[1].limit_remaining),
        (2, 1)
    );
    let r = send(2).await;
    assert_eq!((r.statuses[0].code, r.statuses[0].limit_remaining), (OK, 2));
    assert_eq!(
        (r.statuses[1].code, r.statuses[1].limit_remaining),
        (OVER, 0)
    );
    assert_eq!(r.overall_code, OVER);
    assert_eq!(redis.cli(&["get", &ka]).trim(), "13", "A not incremented");
    assert_eq!(redis.cli(&["get", &kb]).trim(), "15");
}

/// share_threshold shares one counter, the plain wildcard does not.
async fn share_threshold(redis: &Redis) {
    let svc = start(redis, &[]);
    hour_window();
    for _ in 0..10 {
        one(&svc, "files", "files/a.pdf", None).await;
    }
    assert_eq!(one(&svc, "files", "files/b.csv", None).await, (OVER, 0));
    for i in 0..10 {
        assert_eq!(
            one(&svc, "files_no_share", &format!("files_no_share/{i}"), None).await,
            (OK, 9)
        );
    }
}

/// One script call per decision on a single node (the original sends two
/// commands per key).
async fn one_script_per_decision(redis: &Redis) {
    let svc = start(redis, &[]);
    hour_window();
    one(&svc, "l10", "warm", None).await;
    let before = (
        redis.calls("evalsha"),
        redis.calls("incrby"),
        redis.calls("expire"),
    );
    let mut c = svc.client().await;
    for i in 0..20 {
        let v = format!("x{i}");
        call(
            &mut c,
            request(
                "d",
                vec![
                    desc(&[("l10", &v)]),
                    desc(&[("l20", &v)]),
                    desc(&[("l15", &v)]),
                ],
            ),
        )
        .await
        .expect("call");
    }
    let evals = redis.calls("evalsha") - before.0;
    match redis {
        // Three keys, one node: one call per request.
        Redis::Single(_) => assert_eq!(evals, 20),
        // One call per primary touched: at most three per request.
        Redis::Cluster(_) => assert!((20..=60).contains(&evals), "evalsha {evals}"),
        Redis::Sentinel(_) => assert_eq!(evals, 20),
    }
    // INCRBY/EXPIRE run inside the script only (counted by Redis as well).
    assert_eq!(redis.calls("incrby") - before.1, 60);
}

/// A request that mixes the original's window with opt-in limits is one
/// trip: one script call per node, whatever the mix. 100 requests, each an
/// original window, a token bucket and a sliding window on fresh values.
async fn mixed_requests_are_one_trip(redis: &Redis) {
    let svc = start(redis, &[]);
    hour_window();
    let mut c = svc.client().await;
    let before = redis.calls("evalsha");
    for i in 0..100 {
        let v = format!("m{i}");
        let r = call(
            &mut c,
            request(
                "d",
                vec![
                    desc(&[("l20", &v)]),
                    desc(&[("tb", &v)]),
                    desc(&[("sw", &v)]),
                ],
            ),
        )
        .await
        .expect("call");
        assert_eq!(r.overall_code, OK);
    }
    let evals = redis.calls("evalsha") - before;
    println!("100 mixed requests: {evals} script calls");
    match redis {
        // One node: one call per request (the goal is at most 105).
        Redis::Single(_) | Redis::Sentinel(_) => assert!(evals <= 105, "evalsha {evals}"),
        // One call per primary touched: at most three per request.
        Redis::Cluster(_) => assert!((100..=300).contains(&evals), "evalsha {evals}"),
    }
    // The opt-in limits took what the requests asked: 999 of 1000 left.
    let r = call(&mut c, request("d", vec![desc_hits(&[("sw", "m0")], 0)]))
        .await
        .expect("call");
    assert_eq!(r.statuses[0].limit_remaining, 999);
}

/// Ten descriptors of a request, on ten hash slots, are one script call per
/// node: one on a single Redis, at most one per primary (three) on the
/// cluster, where a call per slot would be ten; each still decided on its
/// own key.
async fn ten_descriptors_are_a_call_per_node(redis: &Redis) {
    let svc = start(redis, &[]);
    hour_window();
    let mut c = svc.client().await;
    let before = redis.calls("evalsha");
    for i in 0..10 {
        let values: Vec<String> = (0..10).map(|j| format!("ten{i}_{j}")).collect();
        let descriptors = values.iter().map(|v| desc(&[("l20", v)])).collect();
        let r = call(&mut c, request("d", descriptors)).await.expect("call");
        assert_eq!(r.overall_code, OK);
        let remaining: Vec<u32> = r.statuses.iter().map(|s| s.limit_remaining).collect();
        assert_eq!(remaining, vec![19; 10]);
    }
    let evals = redis.calls("evalsha") - before;
    println!("10 requests of 10 descriptors: {evals} script calls");
    match redis {
        Redis::Cluster(_) => assert!((10..=30).contains(&evals), "evalsha {evals}"),
        Redis::Single(_) | Redis::Sentinel(_) => assert_eq!(evals, 10),
    }
}

/// A server that lost its scripts (`SCRIPT FLUSH`, a restart without
/// persistence, a failover to a replica that never loaded them) answers
/// `NOSCRIPT`; the service loads the script again and decides, on Redis 7
/// and on Valkey 8, whose NOSCRIPT text differs after the code.
async fn lost_scripts_are_loaded_again(redis: &Redis) {
    let svc = start(redis, &[]);
    let value = format!("noscript{}", unix_now());
    assert_eq!(one(&svc, "l5", &value, None).await, (OK, 4));
    for port in redis.primary_ports() {
        let flushed = support::redis::redis_cli(port, &["SCRIPT", "FLUSH"]).text();
        assert_eq!(flushed, "OK", "port {port}");
    }
    assert_eq!(
        one(&svc, "l5", &value, None).await,
        (OK, 3),
        "decided after the flush"
    );
    // A decided limit (a token bucket) runs the same script.
    let mut c = svc.client().await;
    let r = call(&mut c, request("d", vec![desc(&[("tb", &value)])]))
        .await
        .expect("call");
    assert_eq!(r.overall_code, OK);
}

/// A service loads its scripts on every primary at start: the first
/// request of each kind (a window, a token bucket) is one script call, with
/// no `NOSCRIPT` reply on the way, even on servers whose script cache was
/// flushed before the service started.
async fn scripts_are_loaded_at_start(redis: &Redis) {
    let ports = redis.primary_ports();
    for &port in &ports {
        assert_eq!(
            support::redis::redis_cli(port, &["SCRIPT", "FLUSH"]).text(),
            "OK"
        );
        support::redis::redis_cli(port, &["CONFIG", "RESETSTAT"]);
    }
    let svc = start(redis, &[]);
    let value = format!("preload{}", unix_now());
    assert_eq!(one(&svc, "l5", &value, None).await, (OK, 4));
    let mut c = svc.client().await;
    let r = call(&mut c, request("d", vec![desc(&[("tb", &value)])]))
        .await
        .expect("call");
    assert_eq!(r.overall_code, OK);
    for port in ports {
        let errors = support::redis::redis_cli(port, &["INFO", "errorstats"]).text();
        assert!(
            !errors.contains("NOSCRIPT"),
            "port {port} answered NOSCRIPT: {errors}"
        );
    }
}

/// With `EXPIRATION_JITTER_MAX_SECONDS` (300 here, the default), a new
/// counter's TTL is its window plus a draw from 0 .. 299 s, each key its
/// own: counters of one request (one group per node) and of a request that
/// also holds a token bucket (on the bucket's node, the script's general
/// path).
async fn new_keys_expire_with_their_own_jitter(redis: &Redis) {
    let svc = start(redis, &[("EXPIRATION_JITTER_MAX_SECONDS", "300")]);
    let w = hour_window();
    let run = format!("j{}", unix_now());
    let mut c = svc.client().await;
    let compact: Vec<String> = (0..20).map(|i| format!("{run}c{i}")).collect();
    let descriptors = compact.iter().map(|v| desc(&[("l20", v)])).collect();
    let r = call(&mut c, request("d", descriptors)).await.expect("call");
    assert_eq!(r.overall_code, OK);
    let general: Vec<String> = (0..8).map(|i| format!("{run}g{i}")).collect();
    let mut descriptors: Vec<_> = general.iter().map(|v| desc(&[("l20", v)])).collect();
    descriptors.push(desc(&[("tb", &run)]));
    let r = call(&mut c, request("d", descriptors)).await.expect("call");
    assert_eq!(r.overall_code, OK);
    for (name, values) in [("one group per node", &compact), ("general path", &general)] {
        let ttls: std::collections::BTreeSet<u64> = values
            .iter()
            .map(|v| {
                let k = key("l20", v, w);
                assert_eq!(redis.cli(&["get", &k]).trim(), "1", "{k}");
                let ttl: u64 = redis.cli(&["ttl", &k]).trim().parse().expect("ttl");
                assert!((3590..3900).contains(&ttl), "{name}: {k}: ttl {ttl}");
                ttl
            })
            .collect();
        // Twenty (eight) independent draws from 300 values: fewer than 5
        // (2) distinct ones has a chance below 10^-20 (10^-19).
        let least = if values.len() > 10 { 5 } else { 2 };
        assert!(ttls.len() >= least, "{name}: TTLs {ttls:?}");
    }
}

/// The dry run on Redis: for the original's window and two algorithms,
/// `POST /evaluate` says what the next real request gets, and asking twice
/// changes nothing (the real request then finds what the dry run read).
async fn dry_run(redis: &Redis) {
    let svc = start(redis, &[]);
    let tag = format!("dry{}", std::process::id());
    let evaluate = |body: &str| {
        let r = http(svc.debug, "POST", "/evaluate", body.as_bytes());
        assert_eq!(r.status, 200, "{}", r.body);
        let v: serde_json::Value = serde_json::from_str(&r.body).expect("JSON");
        v["descriptors"][0].clone()
    };
    for key in ["l5", "tb", "sw"] {
        for step in 0..7 {
            let body = format!(
                r#"{{"domain":"d","descriptors":[{{"entries":[{{"key":"{key}","value":"{tag}"}}]}}]}}"#
            );
            let (first, again) = (evaluate(&body), evaluate(&body));
            let read = |v: &serde_json::Value| {
                let l = &v["limits"][0];
                (
                    v["allowed"].clone(),
                    l["remaining"].clone(),
                    l["used"].clone(),
                )
            };
            assert_eq!(read(&first), read(&again), "{key} step {step}: asking took");
            let real = svc.http("POST", "/json", body.as_bytes());
            let allowed = first["allowed"].as_bool().expect("allowed");
            assert_eq!(
                allowed,
                real.status == 200,
                "{key} step {step}: dry run {first}, the request got {} {}",
                real.status,
                real.body
            );
            if allowed {
                let got: serde_json::Value = serde_json::from_str(&real.body).expect("JSON");
                // proto3 JSON leaves out a remaining of 0.
                assert_eq!(
                    first["limits"][0]["remaining"].as_u64(),
                    Some(got["statuses"][0]["limitRemaining"].as_u64().unwrap_or(0)),
                    "{key} step {step}: {first} against {got}"
                );
            }
        }
    }
    // The usage read-back of the original's window: the original counts
    // every request, refused ones too: 7 used of 5, none left.
    let usage = svc.debug(&format!("/usage?domain=d&descriptor=l5={tag}"));
    let v: serde_json::Value = serde_json::from_str(&usage.body).expect("JSON");
    let limit = &v["descriptors"][0]["limits"][0];
    assert_eq!(
        (&limit["used"], &limit["remaining"]),
        (&serde_json::json!(7), &serde_json::json!(0)),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_redis() {
    let redis = Redis::Single(RedisServer::start());
    counter_arithmetic(&redis).await;
    local_cache(&redis, "l15").await;
    local_cache(&redis, "shadow15").await;
    stop_increment(&redis).await;
    share_threshold(&redis).await;
    one_script_per_decision(&redis).await;
    mixed_requests_are_one_trip(&redis).await;
    ten_descriptors_are_a_call_per_node(&redis).await;
    lost_scripts_are_loaded_again(&redis).await;
    scripts_are_loaded_at_start(&redis).await;
    new_keys_expire_with_their_own_jitter(&redis).await;
    dry_run(&redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster() {
    let redis = Redis::Cluster(RedisCluster::start());
    counter_arithmetic(&redis).await;
    local_cache(&redis, "l15").await;
    stop_increment(&redis).await;
    share_threshold(&redis).await;
    one_script_per_decision(&redis).await;
    mixed_requests_are_one_trip(&redis).await;
    ten_descriptors_are_a_call_per_node(&redis).await;
    lost_scripts_are_loaded_again(&redis).await;
    scripts_are_loaded_at_start(&redis).await;
    new_keys_expire_with_their_own_jitter(&redis).await;
    dry_run(&redis).await;
}

/// SECOND limits go only to the per-second Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_second_redis() {
    let main = RedisServer::start();
    let per_second = RedisServer::start();
    let redis = Redis::Single(main);
    let ps = per_second.addr();
    let svc = start(
        &redis,
        &[
            ("REDIS_PERSECOND", "true"),
            ("REDIS_PERSECOND_SOCKET_TYPE", "tcp"),
            ("REDIS_PERSECOND_URL", &ps),
        ],
    );
    one(&svc, "sec", "x", None).await;
    one(&svc, "l10", "x", None).await;
    let main_keys = redis.cli(&["keys", "*"]);
    let ps_keys = per_second.cli(&["keys", "*"]);
    assert!(
        main_keys.contains("d_l10_x_") && !main_keys.contains("d_sec_x_"),
        "{main_keys}"
    );
    assert!(
        ps_keys.contains("d_sec_x_") && !ps_keys.contains("d_l10_x_"),
        "{ps_keys}"
    );
}

/// Redis down → UNKNOWN and redis_error; back → served again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_and_recovery() {
    let mut server = RedisServer::start();
    let addr = server.addr();
    let svc = Service::start(
        &[("rules.yaml", RULES)],
        &[
            ("BACKEND_TYPE", "redis"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", &addr),
            ("REDIS_TIMEOUT", "1s"),
        ],
    );
    assert_eq!(one(&svc, "l10", "o", None).await.0, OK);
    server.kill();
    let mut c = svc.client().await;
    let e = call(&mut c, request("d", vec![desc(&[("l10", "o")])]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unknown);
    assert!(svc.stat("ratelimit.service.call.should_rate_limit.redis_error") >= 1);
    let r = svc.http(
        "POST",
        "/json",
        br#"{"domain":"d","descriptors":[{"entries":[{"key":"l10","value":"o"}]}]}"#,
    );
    // The original's 400, with why: the store's error.
    assert_eq!(r.status, 400);
    let reason = r.body.strip_prefix("Bad Request\n").unwrap_or_default();
    assert!(!reason.trim().is_empty(), "no reason: {:?}", r.body);
    server.restart();
    let mut recovered = false;
    for _ in 0..100 {
        if call(&mut c, request("d", vec![desc(&[("l10", "o")])]))
            .await
            .is_ok()
        {
            recovered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        recovered,
        "served again after Redis came back, without a restart"
    );
}

/// Four instances, 64 concurrent callers spread over them, one key with a
/// limit of L: exactly L requests are admitted.
async fn exact_admission(redis: &Redis, limits: &[u32]) {
    let mut rules = String::from("domain: c\ndescriptors:\n");
    for l in limits {
        rules.push_str(&format!(
            "  - key: l{l}\n    rate_limit: {{unit: hour, requests_per_unit: {l}}}\n"
        ));
    }
    let env = redis.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let instances: Vec<Service> = (0..4)
        .map(|_| Service::start(&[("rules.yaml", &rules)], &env))
        .collect();
    hour_window();
    for &limit in limits {
        let total = limit as usize + 200;
        let mut clients = Vec::new();
        for svc in &instances {
            clients.push(svc.client().await);
        }
        let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let admitted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let tasks: Vec<_> = (0..64)
            .map(|i| {
                let mut c = clients[i % 4].clone();
                let (next, admitted) = (Arc::clone(&next), Arc::clone(&admitted));
                let key = format!("l{limit}");
                tokio::spawn(async move {
                    while next.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < total {
                        let r = call(&mut c, request("c", vec![desc(&[(&key, "one")])]))
                            .await
                            .expect("call");
                        if r.overall_code == OK {
                            admitted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        }
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("caller");
        }
        assert_eq!(
            admitted.load(std::sync::atomic::Ordering::SeqCst),
            limit as usize,
            "L = {limit}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_admission_single() {
    exact_admission(&Redis::Single(RedisServer::start()), &[1, 100, 10_000]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_admission_cluster() {
    exact_admission(&Redis::Cluster(RedisCluster::start()), &[1, 100, 10_000]).await;
}

/// Runs the binary expecting it to refuse to start; its stderr.
fn refused(env: &[(&str, &str)]) -> String {
    refused_start(&[("rules.yaml", RULES)], env)
}

#[test]
fn malformed_redis_settings_are_clear_start_up_errors() {
    for (ty, url) in [
        ("single", "localhost"),
        ("sentinel", "mymaster"),
        ("cluster", "a:1,b"),
        ("single", "redis://h:1/x"),
    ] {
        let err = refused(&[
            ("BACKEND_TYPE", "redis"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_TYPE", ty),
            ("REDIS_URL", url),
        ]);
        assert!(err.contains("REDIS_URL="), "{err}");
    }
    let err = refused(&[
        ("BACKEND_TYPE", "redis"),
        ("REDIS_POOL_ON_EMPTY_BEHAVIOR", "CREATE"),
    ]);
    assert!(err.contains("REDIS_POOL_ON_EMPTY_BEHAVIOR"), "{err}");
    // A Redis that never answers: gives up after REDIS_STARTUP_MAX_ELAPSED_TIME.
    let port = support::redis::free_port().to_string();
    let url = format!("127.0.0.1:{port}");
    let err = refused(&[
        ("BACKEND_TYPE", "redis"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", &url),
        ("REDIS_STARTUP_INITIAL_INTERVAL", "50ms"),
        ("REDIS_STARTUP_MAX_ELAPSED_TIME", "500ms"),
    ]);
    assert!(
        err.contains("timed out waiting for Redis connection to"),
        "{err}"
    );
    assert!(err.contains("check REDIS_URL"), "names the settings: {err}");
    // The original's default, a unix socket that is not there: said
    // plainly, with the settings to change.
    let err = refused(&[
        ("BACKEND_TYPE", "redis"),
        ("REDIS_SOCKET_TYPE", "unix"),
        ("REDIS_URL", "/nonexistent/ratelimit.sock"),
        ("REDIS_STARTUP_INITIAL_INTERVAL", "50ms"),
        ("REDIS_STARTUP_MAX_ELAPSED_TIME", "500ms"),
    ]);
    assert!(
        err.contains("no socket at /nonexistent/ratelimit.sock")
            && err.contains("REDIS_SOCKET_TYPE=tcp")
            && err.contains("BACKEND_TYPE=memory")
            && !err.contains("Os {"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_with_password_and_user() {
    let server = RedisServer::start_with(&["--requirepass", "pa:ss"]);
    let addr = server.addr();
    // A password with ':' is written with an empty user.
    let svc = Service::start(
        &[("rules.yaml", RULES)],
        &[
            ("BACKEND_TYPE", "redis"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", &addr),
            ("REDIS_AUTH", ":pa:ss"),
        ],
    );
    assert_eq!(one(&svc, "l10", "auth", None).await.0, OK);
    // user:password form, with the default user.
    let svc = Service::start(
        &[("rules.yaml", RULES)],
        &[
            ("BACKEND_TYPE", "redis"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", &addr),
            ("REDIS_AUTH", "default:pa:ss"),
        ],
    );
    assert_eq!(one(&svc, "l10", "auth", None).await, (OK, 8));
    // A wrong password never connects.
    let err = refused(&[
        ("BACKEND_TYPE", "redis"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", &addr),
        ("REDIS_AUTH", "wrong"),
        ("REDIS_STARTUP_INITIAL_INTERVAL", "50ms"),
        ("REDIS_STARTUP_MAX_ELAPSED_TIME", "500ms"),
    ]);
    assert!(
        err.contains("timed out waiting for Redis connection"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_follows_the_redis_connection_when_asked() {
    let mut server = RedisServer::start();
    let addr = server.addr();
    let svc = Service::start(
        &[("rules.yaml", RULES)],
        &[
            ("BACKEND_TYPE", "redis"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", &addr),
            ("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "true"),
        ],
    );
    assert_eq!(svc.http("GET", "/healthcheck", b"").status, 200);
    server.kill();
    assert!(svc.eventually(Duration::from_secs(10), || svc
        .http("GET", "/healthcheck", b"")
        .status
        == 500));
    server.restart();
    assert!(svc.eventually(Duration::from_secs(15), || svc
        .http("GET", "/healthcheck", b"")
        .status
        == 200));
}

const BASIC: &str = "
domain: basic
descriptors:
  - key: key1
    rate_limit: {unit: second, requests_per_unit: 50}
  - key: key1_local
    rate_limit: {unit: second, requests_per_unit: 50}
  - key: one_per_minute
    rate_limit: {unit: minute, requests_per_unit: 1}
";
const ANOTHER: &str = "
domain: another
descriptors:
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key3
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: key2_local
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key3_local
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: key4
    rate_limit: {unit: day, requests_per_unit: 20}
  - key: key4_local
    rate_limit: {unit: day, requests_per_unit: 20}
";

/// The original's "basic" integration test, steps 1–5,
/// with and without a local cache (`S` = `_local`).
async fn basic_scenario(env: &[(&str, &str)], local: bool) {
    wait_for_fresh_window(60, 15);
    let mut env: Vec<(&str, &str)> = env.to_vec();
    if local {
        env.push(("LOCAL_CACHE_SIZE_IN_BYTES", "1000"));
    }
    let svc = Service::start(&[("basic.yaml", BASIC), ("another.yaml", ANOTHER)], &env);
    let s = if local { "_local" } else { "" };
    let stat = |name: &str| svc.stat(name);
    let mut c = svc.client().await;
    // 1. Unknown domain.
    let r = call(
        &mut c,
        request("foo", vec![desc(&[(&format!("hello{s}"), "world")])]),
    )
    .await
    .expect("call");
    assert_eq!((r.overall_code, r.statuses[0].code), (OK, OK));
    // 2. First hit of a 50/s rule.
    let r = call(
        &mut c,
        request("basic", vec![desc(&[(&format!("key1{s}"), "foo")])]),
    )
    .await
    .expect("call");
    let st = &r.statuses[0];
    assert_eq!((st.code, st.limit_remaining), (OK, 49));
    assert_eq!(
        stat(&format!(
            "ratelimit.service.rate_limit.basic.key1{s}.total_hits"
        )),
        1
    );
    // 3. 25 calls on a 20/min rule.
    let k2 = format!("key2{s}");
    let r1 = format!("r{}", std::process::id());
    for i in 0..25u32 {
        let r = call(&mut c, request("another", vec![desc(&[(&k2, &r1)])]))
            .await
            .expect("call");
        let st = &r.statuses[0];
        if i < 20 {
            assert_eq!(
                (st.code, st.limit_remaining),
                (OK, 19 - i),
                "step 3 call {i}"
            );
        } else {
            assert_eq!((st.code, st.limit_remaining), (OVER, 0), "step 3 call {i}");
        }
        assert_eq!(r.overall_code, st.code);
        let base = format!("ratelimit.service.rate_limit.another.{k2}");
        assert_eq!(stat(&format!("{base}.total_hits")), u64::from(i) + 1);
        assert_eq!(
            stat(&format!("{base}.over_limit")),
            u64::from(i.saturating_sub(19))
        );
        let cached = if local && i >= 20 {
            u64::from(i - 20)
        } else {
            0
        };
        assert_eq!(stat(&format!("{base}.over_limit_with_local_cache")), cached);
    }
    // 4. 15 calls with two descriptors: 20/min and 10/hour.
    let k3 = format!("key3{s}");
    let r2 = format!("q{}", std::process::id());
    for i in 0..15u32 {
        let r = call(
            &mut c,
            request("another", vec![desc(&[(&k2, &r2)]), desc(&[(&k3, &r2)])]),
        )
        .await
        .expect("call");
        assert_eq!(
            (r.statuses[0].code, r.statuses[0].limit_remaining),
            (OK, 19 - i),
            "step 4 call {i}"
        );
        let want = if i < 10 { (OK, 9 - i) } else { (OVER, 0) };
        assert_eq!(
            (r.statuses[1].code, r.statuses[1].limit_remaining),
            want,
            "step 4 call {i}"
        );
        assert_eq!(r.overall_code, r.statuses[1].code);
        let base3 = format!("ratelimit.service.rate_limit.another.{k3}");
        assert_eq!(stat(&format!("{base3}.total_hits")), u64::from(i) + 1);
        assert_eq!(
            stat(&format!("{base3}.over_limit")),
            u64::from(i.saturating_sub(9))
        );
    }
    // 5. Reset times count down.
    let k4 = format!("key4{s}");
    let first = call(&mut c, request("another", vec![desc(&[(&k4, "durTest")])]))
        .await
        .expect("call");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let second = call(&mut c, request("another", vec![desc(&[(&k4, "durTest")])]))
        .await
        .expect("call");
    let d = |r: &envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse| {
        r.statuses[0]
            .duration_until_reset
            .expect("duration")
            .seconds
    };
    assert!(d(&second) < d(&first), "{} then {}", d(&first), d(&second));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_scenario_every_backend() {
    basic_scenario(&[("BACKEND_TYPE", "memory")], false).await;
    basic_scenario(&[("BACKEND_TYPE", "memory")], true).await;
    let single = Redis::Single(RedisServer::start());
    let env = single.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    basic_scenario(&env, false).await;
    basic_scenario(&env, true).await;
    let mut prefixed = env.clone();
    prefixed.push(("CACHE_KEY_PREFIX", "prefix:"));
    basic_scenario(&prefixed, false).await;
    let cluster = Redis::Cluster(RedisCluster::start());
    let env = cluster.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    basic_scenario(&env, false).await;
    basic_scenario(&env, true).await;
    let sentinel = Redis::Sentinel(RedisSentinel::start());
    let env = sentinel.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    basic_scenario(&env, false).await;
}

/// The debug port's answers that are empty on Redis say why, and what to
/// do instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_debug_answers_say_why() {
    let redis = Redis::Single(RedisServer::start());
    let svc = start(&redis, &[("HOT_KEYS_TOP_K", "0")]);
    let hint = |path: &str| -> String {
        let body: serde_json::Value = serde_json::from_str(&svc.debug(path).body).expect("JSON");
        body["hint"].as_str().unwrap_or_default().to_string()
    };
    assert!(
        hint("/keys").contains("redis-cli --scan"),
        "{}",
        hint("/keys")
    );
    assert!(hint("/audit").contains("DECISION_AUDIT_SAMPLE"));
    assert!(hint("/hotkeys").contains("HOT_KEYS_TOP_K=0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_sentinel() {
    let redis = Redis::Sentinel(RedisSentinel::start());
    counter_arithmetic(&redis).await;
    stop_increment(&redis).await;
    one_script_per_decision(&redis).await;
    new_keys_expire_with_their_own_jitter(&redis).await;
}

/// `REDIS_TLS` with a CA and a client certificate (the original's "TLS with
/// client certificate" variant), and host-name verification skipping.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_over_tls_with_client_certificate() {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).expect("write pem");
        p.display().to_string()
    };
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "redis test ca");
    let ca_key = KeyPair::generate().expect("key");
    let ca_cert = ca_params.self_signed(&ca_key).expect("ca");
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf = |names: Vec<String>| {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(names.clone()).expect("params");
        params
            .distinguished_name
            .push(DnType::CommonName, names[0].clone());
        let cert = params.signed_by(&key, &issuer).expect("leaf");
        (cert.pem(), key.serialize_pem())
    };
    let ca = write("ca.pem", &ca_cert.pem());
    let (srv_cert, srv_key) = leaf(vec!["localhost".into(), "127.0.0.1".into()]);
    let (cli_cert, cli_key) = leaf(vec!["client".into()]);
    let (srv_cert, srv_key) = (write("srv.pem", &srv_cert), write("srv.key", &srv_key));
    let (cli_cert, cli_key) = (write("cli.pem", &cli_cert), write("cli.key", &cli_key));
    let tls_port = support::redis::free_port().to_string();
    let server = RedisServer::start_with(&[
        "--tls-port",
        &tls_port,
        "--tls-cert-file",
        &srv_cert,
        "--tls-key-file",
        &srv_key,
        "--tls-ca-cert-file",
        &ca,
        "--tls-auth-clients",
        "yes",
    ]);
    let url = format!("127.0.0.1:{tls_port}");
    let base = [
        ("BACKEND_TYPE", "redis"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", url.as_str()),
        ("REDIS_TLS", "true"),
        ("REDIS_TLS_CACERT", ca.as_str()),
        ("REDIS_TLS_CLIENT_CERT", cli_cert.as_str()),
        ("REDIS_TLS_CLIENT_KEY", cli_key.as_str()),
    ];
    let svc = Service::start(&[("rules.yaml", RULES)], &base);
    assert_eq!(one(&svc, "l10", "tls", None).await, (OK, 9));
    // The certificate names 127.0.0.1 and localhost; skipping the host-name
    // check still verifies the chain.
    let mut skip = base.to_vec();
    skip.push(("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "true"));
    let svc = Service::start(&[("rules.yaml", RULES)], &skip);
    assert_eq!(one(&svc, "l10", "tls", None).await, (OK, 8));
    // Without the client certificate the server refuses the connection.
    let no_client: Vec<_> = base
        .iter()
        .copied()
        .filter(|(k, _)| !k.starts_with("REDIS_TLS_CLIENT"))
        .collect();
    let mut no_client = no_client;
    no_client.extend([
        ("REDIS_STARTUP_INITIAL_INTERVAL", "50ms"),
        ("REDIS_STARTUP_MAX_ELAPSED_TIME", "500ms"),
    ]);
    let err = refused(&no_client);
    assert!(
        err.contains("timed out waiting for Redis connection"),
        "{err}"
    );
    drop(server);
}

const LIMITS: &str = "
domain: m
descriptors:
  - key: user
    rate_limits:
      - {name: per_second, unit: second, requests_per_unit: 10, algorithm: token_bucket}
      - {name: per_minute, unit: minute, requests_per_unit: 15, algorithm: sliding_window}
  - key: plain
    rate_limit: {unit: hour, requests_per_unit: 3}
";

/// Several limits on one descriptor through the service on Redis, next to
/// an original fixed window in the same request: all must pass, the
/// tightest is reported, a refused request takes nothing from the
/// descriptor's other limits, and the descriptor's keys share a slot.
async fn several_limits(redis: &Redis) {
    let env = redis.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let svc = Service::start(&[("rules.yaml", LIMITS)], &env);
    let mut c = svc.client().await;
    wait_for_fresh_window(60, 10);
    let user = || desc(&[("user", "ann")]);
    let mut admitted = 0;
    let started = std::time::Instant::now();
    for _ in 0..20 {
        let r = call(&mut c, request("m", vec![user()]))
            .await
            .expect("call");
        admitted += usize::from(r.overall_code == OK);
    }
    // The burst, plus what 10/s refills while the calls ran (a loaded
    // machine takes longer than 100 ms for them).
    let refilled = (started.elapsed().as_secs_f64() * 10.0).ceil() as usize;
    assert!(
        (10..=10 + refilled).contains(&admitted),
        "the bucket's burst: {admitted} admitted, {refilled} refilled"
    );
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let r = call(&mut c, request("m", vec![user()]))
        .await
        .expect("call");
    assert_eq!(r.overall_code, OK);
    let s = &r.statuses[0];
    assert_eq!(
        s.limit_remaining as usize,
        15 - admitted - 1,
        "the minute is the closest to exhaustion"
    );
    assert_eq!(
        s.current_limit.as_ref().map(|l| l.name.as_str()),
        Some("per_minute")
    );
    // An original fixed window in the same request is counted its own way.
    let plain = || desc(&[("plain", "x")]);
    for want in [OK, OK, OK, OVER] {
        let r = call(&mut c, request("m", vec![plain()]))
            .await
            .expect("call");
        assert_eq!(r.overall_code, want);
    }
    // [user, plain]: plain refuses, so user's limits take nothing.
    for _ in 0..5 {
        let r = call(&mut c, request("m", vec![user(), plain()]))
            .await
            .expect("call");
        assert_eq!(r.overall_code, OVER);
        assert_eq!(r.statuses[0].code, OK);
    }
    let r = call(&mut c, request("m", vec![user()]))
        .await
        .expect("call");
    assert_eq!(
        r.statuses[0].limit_remaining as usize,
        15 - admitted - 2,
        "only the admitted requests counted"
    );
    let keys = redis.cli(&["--scan", "--pattern", "rl2:*"]);
    let mut keys: Vec<&str> = keys.lines().collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        ["rl2:{m_user_ann_}:sw:60s", "rl2:{m_user_ann_}:tb:1s"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_limits_single() {
    several_limits(&Redis::Single(RedisServer::start())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_limits_cluster() {
    several_limits(&Redis::Cluster(RedisCluster::start())).await;
}

const CALENDARS: &str = "
domain: cal
descriptors:
  - key: plan
    rate_limit: {unit: month, requests_per_unit: 3, calendar: true, time_zone: Asia/Kolkata}
  - key: daily
    rate_limits:
      - {unit: day, requests_per_unit: 2, calendar: true, time_zone: America/New_York}
      - {unit: second, requests_per_unit: 100}
  - key: epoch
    rate_limit: {unit: day, requests_per_unit: 5}
";

/// The calendar's current period, at least `margin` seconds before its
/// end (waits past an end that is closer).
fn period_away_from_its_end(
    calendar: &ratelimit::limiter::Calendar,
    margin: u64,
) -> ratelimit::limiter::fixed_window::Window {
    for _ in 0..=margin * 5 {
        let now = unix_now();
        let w = calendar.window_at(now);
        if w.end() - now > margin {
            return w;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("no period with {margin} s to spare");
}

/// Calendar windows on the store: a month in Asia/Kolkata counted the
/// original's way and a New York day decided all or nothing, each on a key
/// that names its period and expires with it, the reset at the period's
/// end; a rule without `calendar` keeps the original's key. `None`: the
/// memory store, whose keys are not visible.
async fn calendar_windows(redis: Option<&Redis>) {
    use ratelimit::limiter::{Calendar, Unit};
    let env = match redis {
        Some(redis) => redis.env(),
        None => vec![("BACKEND_TYPE".into(), "memory".into())],
    };
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let svc = Service::start(&[("rules.yaml", CALENDARS)], &env);
    let mut c = svc.client().await;
    let month = Calendar::new(Unit::Month, "Asia/Kolkata").expect("a zone");
    let day = Calendar::new(Unit::Day, "America/New_York").expect("a zone");
    let (m, d) = (
        period_away_from_its_end(&month, 30),
        period_away_from_its_end(&day, 30),
    );
    let reset_of = |r: &envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse| {
        r.statuses[0]
            .duration_until_reset
            .as_ref()
            .map_or(0, |d| d.seconds as u64)
    };
    for (i, want) in [OK, OK, OK, OVER].into_iter().enumerate() {
        let before = unix_now();
        let r = call(&mut c, request("cal", vec![desc(&[("plan", "acme")])]))
            .await
            .expect("call");
        assert_eq!(r.overall_code, want, "month request {i}");
        let reset = reset_of(&r);
        assert!(
            (m.end() - unix_now() - 1..=m.end() - before).contains(&reset),
            "the month resets at its end in Kolkata: {reset} s, ends at {}",
            m.end()
        );
        let limit = r.statuses[0].current_limit.as_ref().expect("a limit");
        assert_eq!(limit.unit, 5, "MONTH");
    }
    if let Some(redis) = redis {
        calendar_keys(redis, m);
    }
    for want in [OK, OK, OVER, OVER] {
        let r = call(&mut c, request("cal", vec![desc(&[("daily", "x")])]))
            .await
            .expect("call");
        assert_eq!(r.overall_code, want);
        if want == OVER {
            let reset = reset_of(&r);
            let left = d.end() - unix_now();
            assert!(
                (left.saturating_sub(2)..=left + 1).contains(&reset),
                "midnight in New York: {reset} s, {left} s left"
            );
        }
    }
    let r = call(&mut c, request("cal", vec![desc(&[("epoch", "x")])]))
        .await
        .expect("call");
    assert_eq!(r.overall_code, OK);
    if let Some(redis) = redis {
        day_keys(redis, d);
    }
}

/// The month's key names its period and ends with it.
fn calendar_keys(redis: &Redis, m: ratelimit::limiter::fixed_window::Window) {
    let month_key = format!("rl2:{{cal_plan_acme_}}:cal:month:{}", m.start);
    assert_eq!(redis.cli(&["get", &month_key]), "4", "every hit counted");
    let ttl: u64 = redis.cli(&["ttl", &month_key]).parse().expect("a TTL");
    let left = m.end() - unix_now();
    assert!(
        (left.saturating_sub(5)..=left + 1).contains(&ttl),
        "the key ends with the month: TTL {ttl}, {left} s left"
    );
}

/// The day's key counts only what it admitted and ends with the day; the
/// rule without `calendar` keeps the original's key, byte for byte.
fn day_keys(redis: &Redis, d: ratelimit::limiter::fixed_window::Window) {
    let day_key = format!("rl2:{{cal_daily_x_}}:cal:day:{}", d.start);
    assert_eq!(redis.cli(&["get", &day_key]), "2", "only admitted requests");
    let ttl: u64 = redis.cli(&["ttl", &day_key]).parse().expect("a TTL");
    assert!(ttl <= d.end() - unix_now() + 1 && ttl + 5 >= d.end() - unix_now());
    let now = unix_now();
    let original = format!("cal_epoch_x_{}", now - now % 86_400);
    assert_eq!(redis.cli(&["get", &original]), "1", "{original}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calendar_windows_single() {
    calendar_windows(Some(&Redis::Single(RedisServer::start()))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calendar_windows_memory() {
    calendar_windows(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calendar_windows_cluster() {
    calendar_windows(Some(&Redis::Cluster(RedisCluster::start()))).await;
}
