//! When Redis cannot answer: real faults on real processes (a redis-server
//! paused with SIGSTOP, killed and restarted on its port; a cluster primary
//! paused until its replica takes over), against the real service binary.
//!
//! What each test shows: how long a call takes during the fault, per
//! `failure_mode` (`error` fails the call as the original does, `closed`
//! denies, `open` admits exactly its local floor per instance); that the
//! breaker stops sending to a failing node and says so once; and that the
//! service answers from Redis again afterwards without a restart.
//!
//! Latency bounds are asserted loosely (well under `REDIS_TIMEOUT`, which is
//! what a call waited before): these machines are shared. The measured
//! times are printed.

// Tests and the load tool measure the real elapsed time of real processes.
#![allow(clippy::disallowed_types)]

use crate::support;

use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use support::redis::{RedisCluster, RedisServer};
use support::*;

const RULES: &str = "
domain: f
descriptors:
  - key: open
    rate_limit: {unit: hour, requests_per_unit: 100, failure_mode: open, fallback_requests_per_unit: 5}
  - key: closed
    rate_limit: {unit: hour, requests_per_unit: 100, failure_mode: closed}
  - key: error
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: bucket
    rate_limit: {unit: minute, requests_per_unit: 60, algorithm: token_bucket, failure_mode: open}
  - key: leased
    rate_limit: {unit: hour, requests_per_unit: 100000, lease: true, failure_mode: open, fallback_requests_per_unit: 5}
";

/// What a call during a fault may take at most: far below the 10 s
/// `REDIS_TIMEOUT` a call waited before the deadline existed, and loose
/// enough for a loaded machine.
const LOOSE_BOUND: Duration = Duration::from_secs(3);

type Answer = Result<RateLimitResponse, tonic::Status>;

struct Timed {
    svc: Service,
    client: Client,
    /// Call times during the fault, by mode.
    times: Vec<(&'static str, Duration)>,
}

impl Timed {
    async fn new(svc: Service) -> Timed {
        let client = svc.client().await;
        Timed {
            svc,
            client,
            times: Vec::new(),
        }
    }

    async fn send(&mut self, mode: &'static str, req: RateLimitRequest) -> Answer {
        let started = Instant::now();
        let answer = call(&mut self.client, req).await;
        self.times.push((mode, started.elapsed()));
        answer
    }

    /// One descriptor `(key, value)` of domain `f`.
    async fn one(&mut self, key: &'static str, value: &str) -> Answer {
        self.send(key, request("f", vec![desc(&[(key, value)])]))
            .await
    }

    /// Whether an `error`-mode call on `value` is answered (by Redis, since
    /// that mode has no fallback) within `tries` tries 100 ms apart.
    async fn answered_again(&mut self, value: &str, tries: u32) -> bool {
        for _ in 0..tries {
            if code(&self.one("error", value).await) == OK {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }

    /// Per mode: calls, median and largest time; and the largest of all.
    fn report(&self, what: &str) -> Duration {
        let mut modes: Vec<&str> = self.times.iter().map(|(m, _)| *m).collect();
        modes.sort_unstable();
        modes.dedup();
        for mode in modes {
            let mut t: Vec<Duration> = self
                .times
                .iter()
                .filter(|(m, _)| *m == mode)
                .map(|(_, d)| *d)
                .collect();
            t.sort_unstable();
            println!(
                "{what}: {mode}: {} calls, p50 {:?}, max {:?}",
                t.len(),
                t[t.len() / 2],
                t[t.len() - 1]
            );
        }
        self.times.iter().map(|(_, d)| *d).max().unwrap_or_default()
    }
}

fn redis_env(url: &str) -> Vec<(&str, &str)> {
    vec![
        ("BACKEND_TYPE", "redis"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", url),
        ("EXPIRATION_JITTER_MAX_SECONDS", "0"),
        ("REDIS_STARTUP_INITIAL_INTERVAL", "100ms"),
        ("STORE_TIMEOUT", "50ms"),
    ]
}

fn code(a: &Answer) -> i32 {
    a.as_ref().map_or(-1, |r| r.statuses[0].code)
}

fn remaining(a: &Answer) -> u32 {
    a.as_ref()
        .map_or(u32::MAX, |r| r.statuses[0].limit_remaining)
}

fn reset_secs(a: &Answer) -> i64 {
    a.as_ref()
        .ok()
        .and_then(|r| r.statuses[0].duration_until_reset)
        .map_or(-1, |d| d.seconds)
}

/// The statsd name of the breaker gauge of `addr`.
fn breaker(addr: &str) -> String {
    let node: String = addr
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("ratelimit.store.breaker.{node}.open")
}

fn hour_window() -> u64 {
    wait_for_fresh_window(3600, 60);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    now - now % 3600
}

/// Redis paused: every mode answers within the deadline, the breaker
/// opens after 5 failures and sends nothing more, `open` admits exactly
/// its floor, and after SIGCONT the service counts on Redis again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_redis_is_answered_by_each_rules_failure_mode() {
    let redis = RedisServer::start();
    let addr = redis.addr();
    let window = hour_window();
    let svc = Service::start(&[("rules.yaml", RULES)], &redis_env(&addr));
    let mut t = Timed::new(svc).await;
    assert_eq!(code(&t.one("error", "a").await), OK);
    assert_eq!(remaining(&t.one("open", "a").await), 99);
    t.times.clear();

    redis.pause();
    // Before the breaker opens each call waits out the 50 ms deadline:
    // never less (the deadline is not cut short), never the 10 s REDIS_TIMEOUT.
    for _ in 0..2 {
        let started = Instant::now();
        let e = t
            .one("error", "a")
            .await
            .expect_err("error mode fails the call");
        assert!(started.elapsed() >= Duration::from_millis(50));
        assert_eq!(e.code(), tonic::Code::Unknown);
        assert_eq!(e.message(), "context deadline exceeded");
    }
    let denied = t.one("closed", "a").await;
    assert_eq!(code(&denied), OVER, "closed denies");
    assert!(reset_secs(&denied) >= 1, "with a retry of at least 1 s");
    // Exactly the floor (5) of the open rule, counted from the outage's
    // start, then refusals; the breaker opens on the way (5th failure).
    let mut admitted = 0;
    for i in 0..8 {
        let a = t.one("open", "a").await;
        match code(&a) {
            OK => {
                admitted += 1;
                assert_eq!(remaining(&a), 4 - i, "the floor's own remaining");
            }
            OVER => assert_eq!(remaining(&a), 0),
            other => panic!("open rule answered {other}: {a:?}"),
        }
    }
    assert_eq!(admitted, 5, "exactly the floor");
    assert!(
        t.svc.stat(&breaker(&addr)) == 1,
        "breaker open after 5 failures"
    );
    // Open breaker: answered at once, by mode.
    let e = t.one("error", "b").await.expect_err("error mode");
    assert!(
        e.message().contains("circuit breaker open"),
        "{}",
        e.message()
    );
    let denied = t.one("closed", "b").await;
    assert_eq!(code(&denied), OVER);
    assert!(reset_secs(&denied) >= 1);
    // A token bucket falls back to a bucket of the same shape: 60/min with
    // a share of 0.1 is a floor of 6 (burst 6).
    let mut bucket = 0;
    for _ in 0..10 {
        if code(&t.one("bucket", "a").await) == OK {
            bucket += 1;
        }
    }
    assert_eq!(bucket, 6, "token bucket floor");
    // One request mixing modes: each descriptor its own answer.
    let mixed = t
        .send(
            "mixed",
            request("f", vec![desc(&[("open", "m")]), desc(&[("closed", "m")])]),
        )
        .await
        .expect("open and closed answer without the store");
    assert_eq!((mixed.statuses[0].code, mixed.statuses[1].code), (OK, OVER));
    assert_eq!(mixed.overall_code, OVER);
    // An `error` limit that failed fails the call, whatever the others say.
    let e = t
        .send(
            "mixed",
            request("f", vec![desc(&[("open", "m2")]), desc(&[("error", "m2")])]),
        )
        .await
        .expect_err("an error-mode limit fails the call");
    assert_eq!(e.code(), tonic::Code::Unknown);
    // Health stays up while answering by policy.
    assert_eq!(t.svc.http("GET", "/healthcheck", b"").status, 200);
    let slowest = t.report("paused");
    assert!(slowest < LOOSE_BOUND, "slowest call {slowest:?}");
    for name in [
        "ratelimit.store.failure",
        "ratelimit.store.timeout",
        "ratelimit.store.circuit_open",
        "ratelimit.store.fail_closed_denial",
    ] {
        assert!(t.svc.stat(name) >= 1, "{name}");
    }
    assert_eq!(
        t.svc.stat("ratelimit.store.fallback_decision"),
        8 + 10 + 2,
        "every open item was decided by its floor"
    );
    assert_eq!(t.svc.stat("ratelimit.store.fallback_over_limit"), 3 + 4);

    redis.resume();
    let resumed = Instant::now();
    let back = t.answered_again("c", 100).await;
    assert!(back, "answered by Redis again without a restart");
    println!("paused: recovered {:?} after SIGCONT", resumed.elapsed());
    assert!(t
        .svc
        .eventually(Duration::from_secs(5), || t.svc.stat(&breaker(&addr)) == 0));
    // Counted on Redis again: a fresh key, twice.
    assert_eq!(remaining(&t.one("open", "z").await), 99);
    assert_eq!(remaining(&t.one("open", "z").await), 98);
    assert_eq!(redis.cli(&["GET", &format!("f_open_z_{window}")]), "2");
    assert!(
        t.svc
            .log
            .try_iter()
            .filter(|l| l.contains("circuit breaker opened"))
            .count()
            <= 1
    );
}

/// Redis killed: refused connections fail at once (no deadline to wait
/// out); restarted on its port: the service finds it again by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_redis_fails_at_once_and_is_found_again_after_a_restart() {
    let mut redis = RedisServer::start();
    let addr = redis.addr();
    let window = hour_window();
    let svc = Service::start(&[("rules.yaml", RULES)], &redis_env(&addr));
    let mut t = Timed::new(svc).await;
    assert_eq!(code(&t.one("closed", "a").await), OK);
    t.times.clear();

    redis.kill();
    for _ in 0..5 {
        assert_eq!(code(&t.one("closed", "a").await), OVER);
        assert_eq!(code(&t.one("open", "a").await), OK);
        let e = t.one("error", "a").await.expect_err("error mode");
        assert_eq!(e.code(), tonic::Code::Unknown);
    }
    let slowest = t.report("killed");
    assert!(slowest < LOOSE_BOUND, "slowest call {slowest:?}");

    redis.restart();
    let restarted = Instant::now();
    let back = t.answered_again("b", 150).await;
    assert!(back, "served by Redis again after the restart");
    println!(
        "killed: recovered {:?} after the restart",
        restarted.elapsed()
    );
    assert_eq!(remaining(&t.one("closed", "z").await), 99);
    assert_eq!(redis.cli(&["GET", &format!("f_closed_z_{window}")]), "1");
}

/// `STORE_BREAKER_FAILURES=0`: no breaker, so every call during the pause
/// waits out the deadline (and no more).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_breaker_every_call_waits_the_deadline() {
    let redis = RedisServer::start();
    let addr = redis.addr();
    let mut env = redis_env(&addr);
    env.push(("STORE_BREAKER_FAILURES", "0"));
    let svc = Service::start(&[("rules.yaml", RULES)], &env);
    let mut t = Timed::new(svc).await;
    assert_eq!(code(&t.one("error", "a").await), OK);
    t.times.clear();
    redis.pause();
    for _ in 0..10 {
        let started = Instant::now();
        let e = t.one("error", "a").await.expect_err("error mode");
        assert!(started.elapsed() >= Duration::from_millis(50));
        assert_eq!(e.message(), "context deadline exceeded");
    }
    let slowest = t.report("no breaker");
    assert!(slowest < LOOSE_BOUND, "slowest call {slowest:?}");
    assert_eq!(t.svc.stat("ratelimit.store.circuit_open"), 0);
    assert_eq!(t.svc.stat("ratelimit.store.timeout"), 10);
    redis.resume();
}

/// Production sees the caller's deadline: an answer ready after the
/// call's `grpc-timeout` ran out counts `past_caller_deadline`, and a call
/// whose caller gave up first (Envoy resets the stream at its timeout)
/// counts `caller_gone`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_answers_and_callers_gone_are_counted() {
    let past = "ratelimit.service.call.should_rate_limit.past_caller_deadline";
    let gone = "ratelimit.service.call.should_rate_limit.caller_gone";
    let redis = RedisServer::start();
    let addr = redis.addr();
    let mut env = redis_env(&addr);
    env.push(("STORE_TIMEOUT", "2s"));
    let svc = Service::start(&[("rules.yaml", RULES)], &env);
    let framed = |value: &str| {
        use prost::Message;
        let body = request("f", vec![desc(&[("closed", value)])]).encode_to_vec();
        frame(&body, body.len() as u32)
    };
    // Ten seconds is plenty: on time, nothing counted.
    let on_time = raw_grpc_with(svc.grpc, framed("a"), &[("grpc-timeout", "10S")]).await;
    assert_eq!(on_time.0.as_deref(), Some("0"), "answered");
    // One microsecond: too little time to ask Redis, so the rule's policy
    // answers at once, and still after its caller gave up; or, when the
    // request's body came in a later read than its headers, the server ends
    // the call at the deadline with CANCELLED. Either way the call missed
    // its caller's deadline, and it is counted once, as that. (A raw
    // client: tonic's would give up itself.)
    let late = raw_grpc_with(svc.grpc, framed("a"), &[("grpc-timeout", "1u")]).await;
    let status = late.0.as_deref();
    assert!(
        status == Some("0") || status == Some("1"),
        "answered by policy or cancelled at the deadline: {status:?}"
    );
    assert!(svc.eventually(Duration::from_secs(2), || svc.stat(past) == 1));
    assert_eq!(svc.stat(gone), 0);

    // Redis paused, no deadline from the caller: the call waits for the
    // 2 s store timeout, and its caller leaves after 200 ms.
    let mut client = svc.client().await;
    redis.pause();
    let left = tokio::time::timeout(
        Duration::from_millis(200),
        call(&mut client, request("f", vec![desc(&[("closed", "b")])])),
    )
    .await;
    assert!(left.is_err(), "the caller gave up first");
    assert!(
        svc.eventually(Duration::from_millis(1500), || svc.stat(gone) == 1),
        "the reset stream is counted, before the store timeout ends the call"
    );
    assert_eq!(svc.stat(past), 1);
    redis.resume();
}

/// The cluster node that owns `key`'s slot (its client port), read from
/// `CLUSTER NODES` on `any_port`.
fn owner(cluster: &RedisCluster, any_port: u16, key: &str) -> u16 {
    let slot: u16 = cluster
        .node_cli(any_port, &["CLUSTER", "KEYSLOT", key])
        .trim()
        .parse()
        .expect("a slot");
    let nodes = cluster.node_cli(any_port, &["CLUSTER", "NODES"]);
    for line in nodes.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 9 || !f[2].contains("master") {
            continue;
        }
        let port: u16 = f[1]
            .split(['@', ':'])
            .nth(1)
            .and_then(|p| p.parse().ok())
            .expect("a port");
        for range in &f[8..] {
            let (a, b) = range.split_once('-').unwrap_or((range, range));
            if let (Ok(a), Ok(b)) = (a.parse::<u16>(), b.parse::<u16>()) {
                if (a..=b).contains(&slot) {
                    return port;
                }
            }
        }
    }
    panic!("no primary owns slot {slot}: {nodes}");
}

/// The service on `cluster`, with the fault tests' rules.
async fn on_cluster(cluster: &RedisCluster) -> Timed {
    let seeds = cluster.seeds().join(",");
    let mut env = redis_env(&seeds);
    env.push(("REDIS_TYPE", "cluster"));
    Timed::new(Service::start(&[("rules.yaml", RULES)], &env)).await
}

/// A cluster primary paused: only its keys are answered by policy, the
/// other primaries' keys are still counted on Redis, and once its replica
/// has taken over the service routes to the new primary by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_cluster_primary_fails_only_its_keys_until_failover() {
    let cluster = RedisCluster::start();
    let window = hour_window();
    let mut t = on_cluster(&cluster).await;

    // Two values whose keys live on different primaries.
    let any = cluster.ports()[0];
    let key_of = |v: &str| format!("f_error_{v}_{window}");
    let (a, b) = {
        let first = owner(&cluster, any, &key_of("v0"));
        let other = (1..64)
            .map(|i| format!("v{i}"))
            .find(|v| owner(&cluster, any, &key_of(v)) != first)
            .expect("a key on another primary");
        ("v0".to_string(), other)
    };
    let (port_a, port_b) = (
        owner(&cluster, any, &key_of(&a)),
        owner(&cluster, any, &key_of(&b)),
    );
    assert_eq!(code(&t.one("error", &a).await), OK);
    assert_eq!(code(&t.one("error", &b).await), OK);
    t.times.clear();

    cluster.pause_node(port_a);
    let paused = Instant::now();
    // The paused primary's keys fail (error mode) ...
    for _ in 0..6 {
        let e = t.one("error", &a).await.expect_err("on the paused primary");
        assert_eq!(e.code(), tonic::Code::Unknown);
    }
    assert_eq!(
        t.svc.stat(&breaker(&format!("127.0.0.1:{port_a}"))),
        1,
        "the paused primary's breaker is open"
    );
    // ... while the other primary's keys are counted on Redis as before.
    for _ in 0..5 {
        assert_eq!(code(&t.one("error", &b).await), OK);
    }
    assert_eq!(
        cluster.node_cli(port_b, &["GET", &key_of(&b)]),
        "6",
        "counted on its own primary"
    );
    assert_eq!(
        t.svc.stat(&breaker(&format!("127.0.0.1:{port_b}"))),
        0,
        "the healthy primary's breaker never opened"
    );
    let slowest = t.report("cluster, one primary paused");
    assert!(slowest < LOOSE_BOUND, "slowest call {slowest:?}");

    // The replica takes over (node timeout 2 s); the service follows.
    let back = t.answered_again(&a, 300).await;
    assert!(
        back,
        "the paused primary's keys served by its promoted replica"
    );
    println!(
        "cluster: the paused primary's keys answered by Redis again {:?} after the pause",
        paused.elapsed()
    );
    let new_owner = owner(&cluster, port_b, &key_of(&a));
    assert_ne!(new_owner, port_a, "a new primary owns the slot");
    cluster.resume_node(port_a);
}

/// A cluster primary killed: its keys fail (or, on `open` and `closed`
/// rules, are answered by policy) from the first refused connection on,
/// while the other primaries' keys are decided on Redis throughout, with
/// no store error, until and after the replica takes over. (The Cluster
/// serves the other primaries' slots meanwhile only with
/// `cluster-require-full-coverage no`; under Redis's default it answers
/// every key `CLUSTERDOWN` from the moment it marks the primary failed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_cluster_primary_fails_only_its_keys() {
    let mut cluster = RedisCluster::start();
    for port in cluster.ports() {
        cluster.node_cli(
            port,
            &["CONFIG", "SET", "cluster-require-full-coverage", "no"],
        );
    }
    let window = hour_window();
    let mut t = on_cluster(&cluster).await;

    // A value per primary, for the `error` rule's keys.
    let any = cluster.ports()[0];
    let key_of = |v: &str| format!("f_error_{v}_{window}");
    let mut by_primary: Vec<(u16, String)> = Vec::new();
    for i in 0..256 {
        let v = format!("v{i}");
        let port = owner(&cluster, any, &key_of(&v));
        if !by_primary.iter().any(|(p, _)| *p == port) {
            by_primary.push((port, v));
        }
        if by_primary.len() == 3 {
            break;
        }
    }
    assert_eq!(by_primary.len(), 3, "three primaries");
    for (_, v) in &by_primary {
        assert_eq!(code(&t.one("error", v).await), OK);
    }
    let (killed, dead) = by_primary[0].clone();
    let healthy: Vec<String> = by_primary[1..].iter().map(|(_, v)| v.clone()).collect();
    t.times.clear();

    cluster.kill_node(killed);
    let t0 = Instant::now();
    let (mut healthy_calls, mut healthy_errors) = (0u32, Vec::new());
    let (mut dead_failed, mut back_at) = (0u32, None);
    let (mut open_tries, mut open_answered) = (0u32, 0u32);
    // Until the replica serves the dead primary's keys, then 20 rounds more;
    // at most 30 s.
    let mut after = 0;
    while after < 20 && t0.elapsed() < Duration::from_secs(30) {
        for v in &healthy {
            healthy_calls += 1;
            if let Err(e) = t.one("error", v).await {
                healthy_errors.push((t0.elapsed(), e.message().to_string()));
            }
        }
        match t.one("error", &dead).await {
            Ok(_) if back_at.is_none() => back_at = Some(t0.elapsed()),
            Ok(_) => {}
            Err(_) => dead_failed += 1,
        }
        if back_at.is_none() {
            // The dead primary's `open` rule answers from its floor.
            open_tries += 1;
            if t.one("open", &dead).await.is_ok() {
                open_answered += 1;
            }
        } else {
            after += 1;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "cluster, a primary killed: its keys failed {dead_failed} times until {back_at:?}; \
         the other primaries' keys: {} errors in {healthy_calls} calls; the open rule answered {open_answered} of {open_tries}",
        healthy_errors.len()
    );
    assert_eq!(
        open_answered, open_tries,
        "every open call answered by policy"
    );
    t.report("cluster, one primary killed");
    assert!(
        back_at.is_some(),
        "the replica took the dead primary's keys"
    );
    assert!(dead_failed > 0, "the dead primary's keys failed first");
    assert!(
        healthy_errors.is_empty(),
        "no store error on the healthy primaries' keys: {} of {healthy_calls}, the first {:?}",
        healthy_errors.len(),
        &healthy_errors[..healthy_errors.len().min(5)]
    );
    for (port, _) in &by_primary[1..] {
        assert_eq!(
            t.svc.stat(&breaker(&format!("127.0.0.1:{port}"))),
            0,
            "the healthy primary {port}'s breaker is closed"
        );
    }
}

/// Graceful and forced `CLUSTER FAILOVER`s, one after another under
/// traffic: every call of an `open` or `closed` rule is answered (by Redis
/// or by the rule's mode), never with an error, whatever the Cluster
/// answers meanwhile (`MOVED`, `READONLY`, `CLUSTERDOWN`, or nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failovers_are_answered_by_each_rules_mode() {
    let cluster = RedisCluster::start();
    for port in cluster.ports() {
        cluster.node_cli(
            port,
            &["CONFIG", "SET", "cluster-require-full-coverage", "no"],
        );
    }
    let mut t = on_cluster(&cluster).await;
    let values: Vec<String> = (0..12).map(|i| format!("w{i}")).collect();
    let port_of = |addr: &str| -> u16 {
        addr.rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("a port")
    };
    let (mut calls, mut errors, mut error_mode_failed) = (0u32, Vec::new(), 0u32);
    for round in 0..6 {
        let replica = cluster.replicas()[round % 3].clone();
        let port = port_of(&replica);
        // A replica fails over only once it is in sync with its primary
        // (a demoted primary takes a moment).
        for _ in 0..100 {
            let repl = cluster.node_cli(port, &["INFO", "replication"]);
            if repl.contains("master_link_status:up") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let how: &[&str] = if round % 2 == 0 {
            &["CLUSTER", "FAILOVER"]
        } else {
            &["CLUSTER", "FAILOVER", "FORCE"]
        };
        cluster.node_cli(port, how);
        let t0 = Instant::now();
        let mut asked = 1;
        let mut promoted = None;
        // Traffic until 1 s after the replica reports itself primary; at
        // most 15 s.
        while t0.elapsed() < Duration::from_secs(15) {
            for v in &values {
                for mode in ["open", "closed"] {
                    calls += 1;
                    if let Err(e) = t.one(mode, v).await {
                        errors.push((round, mode, e.message().to_string()));
                    }
                }
                if t.one("error", v).await.is_err() {
                    error_mode_failed += 1;
                }
            }
            if promoted.is_none() {
                let repl = cluster.node_cli(port, &["INFO", "replication"]);
                if repl.contains("role:master") {
                    promoted = Some(t0.elapsed());
                } else if t0.elapsed() > Duration::from_secs(4 * asked) && asked < 3 {
                    // A manual failover the primary did not take in time
                    // (its replica lagged) is asked for again.
                    cluster.node_cli(port, how);
                    asked += 1;
                }
            }
            if promoted.is_some_and(|p| t0.elapsed() > p + Duration::from_secs(1)) {
                break;
            }
        }
        println!(
            "failover {round} ({}, asked {asked}): promoted after {promoted:?}",
            how.join(" ")
        );
        assert!(promoted.is_some(), "failover {round} happened");
    }
    println!(
        "6 failovers: {calls} open and closed calls, {} errors; the error rule failed {error_mode_failed} times",
        errors.len()
    );
    assert!(
        errors.is_empty(),
        "open and closed calls answered: {} errors, the first {:?}",
        errors.len(),
        &errors[..errors.len().min(5)]
    );
}

/// A request mixing an original window and an opt-in limit makes two store
/// calls; they share the request's one STORE_TIMEOUT (1 s here, breaker
/// off), so during a pause it waits one deadline, not two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_request_waits_one_deadline_for_both_its_store_calls() {
    let redis = RedisServer::start();
    let addr = redis.addr();
    let mut env = redis_env(&addr);
    env.retain(|(k, _)| *k != "STORE_TIMEOUT");
    env.extend([("STORE_TIMEOUT", "1s"), ("STORE_BREAKER_FAILURES", "0")]);
    let svc = Service::start(&[("rules.yaml", RULES)], &env);
    let mut t = Timed::new(svc).await;
    let mixed = || request("f", vec![desc(&[("open", "x")]), desc(&[("bucket", "x")])]);
    assert_eq!(
        t.send("mixed", mixed()).await.map(|r| r.overall_code).ok(),
        Some(OK)
    );
    redis.pause();
    let started = Instant::now();
    let answer = t.send("mixed", mixed()).await.expect("both fail open");
    let took = started.elapsed();
    redis.resume();
    assert_eq!(
        (answer.statuses[0].code, answer.statuses[1].code),
        (OK, OK),
        "both answered by their floors"
    );
    println!("mixed request during the pause: {took:?}");
    assert!(
        took >= Duration::from_secs(1),
        "waited the deadline: {took:?}"
    );
    // Two deadlines would be 2 s; loose for a loaded machine.
    assert!(
        took < Duration::from_millis(1_800),
        "one shared deadline: {took:?}"
    );
}

/// A leased hot key during an outage: the instance spends what it holds,
/// with no store call, and then the rule's failure mode (here the floor of
/// 5) answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_is_spent_during_an_outage_then_the_floor_answers() {
    let redis = RedisServer::start();
    let addr = redis.addr();
    let mut env = redis_env(&addr);
    // Hot from 10 decisions a second; leases that outlive the test.
    env.extend([
        ("LEASE_MIN_RATE", "10"),
        ("LEASE_DURATION", "1s"),
        ("LEASE_TTL", "600s"),
    ]);
    let svc = Service::start(&[("rules.yaml", RULES)], &env);
    let mut t = Timed::new(svc).await;
    for _ in 0..300 {
        assert_eq!(code(&t.one("leased", "hot").await), OK);
    }
    let body = t.svc.debug("/hotkeys").body;
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    let held = v["hot_keys"]
        .as_array()
        .and_then(|keys| keys.iter().find(|k| k["descriptor"][0]["key"] == "leased"))
        .and_then(|k| k["leased_tokens"].as_u64())
        .expect("the leased key is listed");
    println!("held before the pause: {held} tokens");
    assert!(held > 0, "a lease is out");

    redis.pause();
    let mut admitted = 0;
    for _ in 0..held + 20 {
        admitted += u64::from(code(&t.one("leased", "hot").await) == OK);
    }
    redis.resume();
    println!("admitted during the pause: {admitted} (held {held} + floor 5)");
    assert_eq!(admitted, held + 5, "the lease, then the floor");
}

const REPLICATED: &str = "
domain: f
descriptors:
  - key: durable
    rate_limit: {unit: hour, requests_per_unit: 5, failure_mode: closed, durability: replicated}
  - key: durable_error
    rate_limit: {unit: hour, requests_per_unit: 100, durability: replicated}
  - key: plain
    rate_limit: {unit: hour, requests_per_unit: 100, failure_mode: closed}
";

/// `durability: replicated` on a primary with one replica: a count is
/// answered once the replica has it; with the replica paused, no count is
/// acknowledged, so a `closed` rule denies and an `error` rule fails,
/// while the rules that do not ask for it are still decided by the same
/// primary (its breaker stays closed); the replica back, the rule counts
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replicated_rule_answers_once_a_replica_has_its_count() {
    let primary = RedisServer::start();
    let port = primary
        .addr()
        .rsplit(':')
        .next()
        .unwrap_or_default()
        .to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    // A replica counts for WAIT once its primary has it online (after the
    // replica's first acknowledgement, up to a second after the sync).
    let online = |primary: &RedisServer| {
        (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(50));
            primary
                .cli(&["INFO", "replication"])
                .contains("state=online")
        })
    };
    assert!(
        online(&primary),
        "the replica syncs: {}",
        primary.cli(&["INFO", "replication"])
    );
    let window = hour_window();
    let svc = Service::start(&[("rules.yaml", REPLICATED)], &redis_env(&primary.addr()));
    let mut t = Timed::new(svc).await;
    // The replicated lane's connection opens with its first call.
    let mut warm = false;
    for _ in 0..20 {
        warm = code(&t.one("durable_error", "warm").await) == OK;
        if warm {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(warm, "a replicated count is answered");

    for left in (0..5).rev() {
        let a = t.one("durable", "a").await;
        assert_eq!((code(&a), remaining(&a)), (OK, left), "{a:?}");
    }
    assert_eq!(code(&t.one("durable", "a").await), OVER);
    let key = format!("f_durable_a_{window}");
    assert_eq!(
        replica.cli(&["GET", &key]),
        "6",
        "every answered count is on the replica"
    );

    replica.pause();
    t.times.clear();
    for _ in 0..8 {
        let denied = t.one("durable", "b").await;
        assert_eq!(
            code(&denied),
            OVER,
            "closed: not acknowledged is denied: {denied:?}"
        );
        let failed = t.one("durable_error", "b").await;
        assert!(failed.is_err(), "error: the call fails: {failed:?}");
    }
    let slowest = t.report("replica paused");
    assert!(
        slowest < LOOSE_BOUND,
        "answered within the deadline: {slowest:?}"
    );
    for n in 1..=5 {
        let a = t.one("plain", "b").await;
        assert_eq!(
            (code(&a), remaining(&a)),
            (OK, 100 - n),
            "the other rules are still counted on the primary: {a:?}"
        );
    }
    assert_eq!(
        t.svc.stat(&breaker(&primary.addr())),
        0,
        "no breaker opened"
    );
    assert_eq!(
        primary.cli(&["GET", &format!("f_durable_b_{window}")]),
        "8",
        "a count not acknowledged stays on the primary"
    );

    replica.resume();
    assert!(online(&primary), "the replica resumes");
    let a = t.one("durable", "c").await;
    assert_eq!((code(&a), remaining(&a)), (OK, 4), "counted again: {a:?}");
}

/// A primary that refuses the first connection of its own (it is down
/// when the service first calls a key of it: a partition, or a restart
/// beside a failover) is connected to once it answers again, by the
/// connection's own retries: its keys are counted on Redis again within a
/// few seconds of its return, not only after the topology changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_down_at_its_first_call_is_reached_once_it_is_back() {
    let mut cluster = RedisCluster::start();
    let window = hour_window();
    let mut t = on_cluster(&cluster).await;
    let any = cluster.ports()[0];
    let port = owner(&cluster, any, &format!("f_error_v0_{window}"));
    cluster.kill_node(port);
    // Both gRPC workers open their connection to it now, refused.
    for _ in 0..10 {
        assert!(t.one("error", "v0").await.is_err(), "its primary is down");
    }
    cluster.restart_node(port);
    let back = Instant::now();
    assert!(
        t.answered_again("v0", 150).await,
        "counted on Redis again within 15 s of the primary's return"
    );
    println!(
        "answered by Redis again {:?} after the restart",
        back.elapsed()
    );
    assert_eq!(
        owner(&cluster, any, &format!("f_error_v0_{window}")),
        port,
        "the same primary, back (no failover in between)"
    );
}
