//! Hot keys on the real 6-node Redis Cluster of the test support (3
//! primaries, 3 replicas), with 2 to 4 instances of the real binary and 64
//! concurrent callers: sub-bucket sharding (`shards: K`) and token leasing
//! (`lease: true`).
//!
//! What each test shows, with the numbers printed:
//! - a sharded descriptor's script calls spread evenly over the primaries
//!   (INFO commandstats per primary);
//! - leasing cuts script calls per decision at least tenfold and never
//!   admits more than the limit; under-admission stays within instances ×
//!   largest batch;
//! - SIGTERM returns the unspent lease: the store then holds exactly what
//!   was admitted; SIGKILL strands at most one batch;
//! - `/hotkeys` names the hot descriptor, with its rate and its lease;
//! - a leased key in overload (the accuracy harness's overload patterns,
//!   1.5x and 5x its limit, every leasable algorithm, on a single Redis and
//!   on the cluster) costs at most 0.1 script calls per decision and keeps
//!   the algorithm's bound.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use support::accuracy::{check_overload, overload, redis_env, rules, LEASABLE};
use support::redis::{RedisCluster, RedisServer};
use support::*;

const RULES: &str = "
domain: h
descriptors:
  - key: plain
    rate_limit: {unit: hour, requests_per_unit: 1000000}
  - key: sharded
    rate_limit: {unit: hour, requests_per_unit: 1000000, shards: 6}
  - key: leased
    rate_limit: {unit: hour, requests_per_unit: 20000, lease: true}
  - key: kept
    rate_limit: {unit: hour, requests_per_unit: 1000000, lease: true}
";

fn instances(cluster: &RedisCluster, n: usize, extra: &[(&str, &str)]) -> Vec<Service> {
    let mut env = redis_env("cluster", cluster.seeds().join(","));
    env.push(("EXPIRATION_JITTER_MAX_SECONDS", "0".into()));
    env.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    (0..n)
        .map(|_| Service::start(&[("rules.yaml", RULES)], &env))
        .collect()
}

/// The ports of addresses `host:port`.
fn ports(addrs: &[String]) -> Vec<u16> {
    addrs
        .iter()
        .filter_map(|a| a.rsplit_once(':').and_then(|(_, p)| p.parse().ok()))
        .collect()
}

/// Script calls (EVALSHA) of each primary, by port.
fn script_calls(cluster: &RedisCluster) -> Vec<(u16, u64)> {
    script_calls_of(&ports(&cluster.primaries()))
}

/// Script calls (EVALSHA and EVAL) of each server of `ports`.
fn script_calls_of(ports: &[u16]) -> Vec<(u16, u64)> {
    ports
        .iter()
        .map(|&port| {
            let info = support::redis::redis_cli(port, &["info", "commandstats"]).text();
            let calls = ["evalsha", "eval"]
                .iter()
                .map(|cmd| {
                    info.lines()
                        .find_map(|l| l.strip_prefix(&format!("cmdstat_{cmd}:calls=")))
                        .and_then(|r| r.split(',').next())
                        .and_then(|n| n.parse::<u64>().ok())
                        .unwrap_or(0)
                })
                .sum();
            (port, calls)
        })
        .collect()
}

fn reset_stats(cluster: &RedisCluster) {
    reset_stats_of(&ports(&cluster.primaries()));
}

fn reset_stats_of(ports: &[u16]) {
    for &port in ports {
        support::redis::redis_cli(port, &["config", "resetstat"]);
    }
}

/// `total` requests for `(key, value)` from 64 callers spread over
/// `instances`; how many were admitted.
async fn drive(instances: &[Service], key: &str, value: &str, total: usize) -> usize {
    let mut clients = Vec::new();
    for svc in instances {
        clients.push(svc.client().await);
    }
    let next = Arc::new(AtomicUsize::new(0));
    let admitted = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let mut c = clients[i % clients.len()].clone();
            let (next, admitted) = (Arc::clone(&next), Arc::clone(&admitted));
            let (key, value) = (key.to_string(), value.to_string());
            tokio::spawn(async move {
                while next.fetch_add(1, Ordering::SeqCst) < total {
                    let r = call(&mut c, request("h", vec![desc(&[(&key, &value)])]))
                        .await
                        .expect("call");
                    if r.overall_code == OK {
                        admitted.fetch_add(1, Ordering::SeqCst);
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("caller");
    }
    admitted.load(Ordering::SeqCst)
}

/// Per primary, the hits counted in its keys that match `pattern`: an
/// original counter's value, or a fixed window's `<window>:<count>:0`.
fn counted_per_primary(cluster: &RedisCluster, pattern: &str) -> Vec<(u16, u64)> {
    ports(&cluster.primaries())
        .into_iter()
        .map(|port| {
            let keys = support::redis::redis_cli(port, &["keys", pattern]).text();
            let counted = keys
                .lines()
                .filter(|k| !k.trim().is_empty())
                .map(|k| {
                    let v = support::redis::redis_cli(port, &["get", k.trim()]).text();
                    let v = v.trim();
                    let count = v.split(':').nth(1).unwrap_or(v);
                    count.parse::<u64>().unwrap_or(0)
                })
                .sum();
            (port, counted)
        })
        .collect()
}

/// The fixed-window count of a leased rule's key, as the store holds it.
fn stored_count(cluster: &RedisCluster, key: &str, value: &str) -> u64 {
    let v = cluster.cli(&["get", &format!("rl2:{{h_{key}_{value}_}}:fw:3600s")]);
    // "<window>:<count>:0"
    v.trim()
        .split(':')
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharding_spreads_one_descriptor_over_the_primaries() {
    // Each loads 2 cores with a fleet, a Redis and 64 callers.
    let _turn = support::one_at_a_time_async().await;
    let cluster = RedisCluster::start();
    let svcs = instances(&cluster, 4, &[]);
    wait_for_fresh_window(3600, 60);
    let total = 6_000;
    for (key, pattern, even) in [
        ("plain", "h_plain_tenant_*", false),
        ("sharded", "rl2s:*h_sharded_tenant_*", true),
    ] {
        reset_stats(&cluster);
        let admitted = drive(&svcs, key, "tenant", total).await;
        assert_eq!(admitted, total);
        let calls = script_calls(&cluster);
        let sum_calls: u64 = calls.iter().map(|c| c.1).sum();
        println!("{key}: script calls per primary {calls:?}, {sum_calls} for {total} decisions");
        // Coalesced per primary: never more calls than decisions.
        assert!(sum_calls <= total as u64, "{sum_calls} calls");
        let counted = counted_per_primary(&cluster, pattern);
        let sum: u64 = counted.iter().map(|c| c.1).sum();
        println!("{key}: decisions counted per primary {counted:?}");
        assert_eq!(sum, total as u64, "every decision counted once");
        if even {
            let fair = sum as f64 / counted.len() as f64;
            for (port, n) in &counted {
                let off = (*n as f64 - fair) / fair;
                println!("  primary {port}: {:+.1} % of even", off * 100.0);
                assert!(off.abs() <= 0.25, "primary {port}: {n} of {sum}");
            }
        } else {
            let busy = counted.iter().filter(|c| c.1 > 0).count();
            assert_eq!(busy, 1, "an unsharded key pins one primary: {counted:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leasing_cuts_script_calls_and_never_admits_over_the_limit() {
    // Each loads 2 cores with a fleet, a Redis and 64 callers.
    let _turn = support::one_at_a_time_async().await;
    let cluster = RedisCluster::start();
    let svcs = instances(&cluster, 4, &[]);
    wait_for_fresh_window(3600, 60);
    reset_stats(&cluster);
    let limit = 20_000;
    let total = 30_000;
    let admitted = drive(&svcs, "leased", "tenant", total).await;
    let calls: u64 = script_calls(&cluster).iter().map(|c| c.1).sum();
    let per_decision = calls as f64 / total as f64;
    let largest_batch = limit / 20;
    println!(
        "lease: admitted {admitted} of {limit} ({total} offered by 64 callers on 4 instances), \
         {calls} script calls = {per_decision:.4} per decision"
    );
    assert!(admitted <= limit, "never above the limit");
    assert!(
        admitted + 4 * largest_batch >= limit,
        "under-admission within instances × largest batch"
    );
    assert!(per_decision <= 0.1, "at least 10x fewer store calls");
    // The store counted what was admitted plus what leases still hold.
    let stored = stored_count(&cluster, "leased", "tenant");
    println!("stored count {stored}");
    assert!(stored as usize >= admitted && stored <= limit as u64);

    // /hotkeys names the descriptor, with its rate and its lease.
    let body = svcs[0].debug("/hotkeys").body;
    println!("/hotkeys: {body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    let top = &v["hot_keys"][0];
    assert_eq!(top["domain"], "h");
    assert_eq!(top["descriptor"][0]["key"], "leased");
    assert_eq!(top["lease"], true);
    assert!(top["rate"].as_f64().unwrap_or(0.0) > 0.0);
    // The gauges: one per rank, whatever the keys.
    let stats = svcs[0].debug("/stats").body;
    let ranks: Vec<&str> = stats
        .lines()
        .filter(|l| l.starts_with("ratelimit.hot_keys.rank_"))
        .collect();
    println!("{ranks:?}");
    assert_eq!(ranks.len(), 16, "HOT_KEYS_TOP_K series");
    assert!(!ranks
        .iter()
        .any(|l| l.starts_with("ratelimit.hot_keys.rank_1.rate: 0")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_returns_leases_and_sigkill_strands_at_most_a_batch() {
    // Each loads 2 cores with a fleet, a Redis and 64 callers.
    let _turn = support::one_at_a_time_async().await;
    let cluster = RedisCluster::start();
    // Leases that live long, so that only the signal ends them.
    let long = [("LEASE_TTL", "600s"), ("SHUTDOWN_DRAIN_DURATION", "0s")];
    wait_for_fresh_window(3600, 60);
    for (signal, value) in [("TERM", "term"), ("KILL", "kill")] {
        let mut svcs = instances(&cluster, 2, &long);
        let admitted = drive(&svcs, "kept", value, 6_000).await;
        assert_eq!(admitted, 6_000);
        let held = stored_count(&cluster, "kept", value) - admitted as u64;
        println!("{signal}: before the signal the leases hold {held} tokens");
        assert!(held > 0, "a lease is out");
        svcs[0].signal(signal);
        svcs[0].wait_exit(Duration::from_secs(10));
        let after = stored_count(&cluster, "kept", value) - admitted as u64;
        // The other instance still holds its lease: return it too.
        svcs[1].signal("TERM");
        svcs[1].wait_exit(Duration::from_secs(10));
        let stranded = stored_count(&cluster, "kept", value) - admitted as u64;
        println!("{signal}: after it {after} held; after the other's SIGTERM {stranded}");
        let largest_batch = 1_000_000 / 20;
        if signal == "TERM" {
            assert_eq!(stranded, 0, "every unspent token went back");
        } else {
            assert!(stranded <= largest_batch, "at most one batch stranded");
        }
        svcs.clear();
    }
}

/// Every leasable algorithm's overload pattern at `factor` times the limit
/// on two instances of `env` whose primaries are `primaries`: admitted
/// within the bound, and at most 0.1 script calls per decision after the
/// warm-up (refunds of ended leases included). Prints the harness rows and
/// the calls. The single Redis runs 5x and the Cluster 1.5x: each pattern
/// and each store once, in half the time of every pattern on both (the
/// leases are the same code over both stores).
async fn overload_on(
    store: &str,
    env: Vec<(&'static str, String)>,
    primaries: &[u16],
    factor: f64,
) {
    let rules = rules();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let svcs: Vec<Service> = (0..2)
        .map(|_| Service::start(&[("rules.yaml", &rules)], &env))
        .collect();
    println!("{}", support::accuracy::header());
    let mut worst: f64 = 0.0;
    for a in LEASABLE {
        let (o, decisions) = overload(store, &svcs, a, factor, || reset_stats_of(primaries)).await;
        let calls: u64 = script_calls_of(primaries).iter().map(|c| c.1).sum();
        let per = calls as f64 / decisions as f64;
        worst = worst.max(per);
        println!(
            "{} {calls} script calls for {decisions} decisions after the warm-up: {per:.4}",
            o.row()
        );
        check_overload(&o, svcs.len());
        assert!(
            per <= 0.1,
            "{per:.4} script calls per decision: {}",
            o.row()
        );
    }
    println!("{store}: at most {worst:.4} script calls per decision");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leased_key_in_overload_costs_a_script_call_per_batch_on_a_single_redis() {
    // Each loads 2 cores with a fleet, a Redis and 64 callers.
    let _turn = support::one_at_a_time_async().await;
    let server = RedisServer::start();
    let port = ports(&[server.addr()]);
    overload_on("redis", redis_env("single", server.addr()), &port, 5.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leased_key_in_overload_costs_a_script_call_per_batch_on_the_cluster() {
    // Each loads 2 cores with a fleet, a Redis and 64 callers.
    let _turn = support::one_at_a_time_async().await;
    let cluster = RedisCluster::start();
    let primaries = ports(&cluster.primaries());
    overload_on(
        "cluster",
        redis_env("cluster", cluster.seeds().join(",")),
        &primaries,
        1.5,
    )
    .await;
}
