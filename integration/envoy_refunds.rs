//! Refunds (`is_negative_hits`) and in-flight limits behind a real Envoy
//! (1.40), in the per-route form (`RateLimitPerRoute.rate_limits`, the only
//! one in which Envoy sends `hits_addend`), on the memory store, single
//! Redis and the 6-node Redis Cluster:
//!
//! - 14 sequential requests that each take 1 and give 1 back when their
//!   stream ends, on a rule of 10 a minute (a fixed window, a token bucket
//!   of burst 10): all admitted, and the refunds counted apart;
//! - `max_in_flight: 3` with an upstream that holds each request 2 s: of 8
//!   concurrent requests exactly 3 are admitted, later ones are refused
//!   while those are held, and 3 more are admitted once they end. The
//!   release gives back `%UPSTREAM_REQUEST_ATTEMPT_COUNT%`, so a request
//!   Envoy refused (which Envoy also reports at its stream's end) gives
//!   back nothing;
//! - the Envoy holding all 3 slots SIGKILLed: a new Envoy is refused right
//!   after, and admitted once the slots return by themselves, within
//!   `max_duration` (5 s) of their take plus [`RETURN_MARGIN`];
//! - under load (3 instances on the Cluster, 64 concurrent clients, 8
//!   tenants): the upstream, counting its own concurrent requests, never
//!   serves a tenant more than `max_in_flight` at once.

#![allow(clippy::disallowed_types)]

use crate::support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::accuracy::redis_env;
use support::envoy::{Bootstrap, Envoy, Filter, Route};
use support::redis::{RedisCluster, RedisServer};
use support::upstream::HoldingUpstream;
use support::{wait_for_fresh_window, Service};

const RULES: &str = r#"
domain: refunds
descriptors:
  - key: rule
    value: window
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: rule
    value: bucket
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: token_bucket, burst: 10}
  - key: tenant
    rate_limit: {algorithm: concurrency, max_in_flight: 3, max_duration: 5s}
"#;

/// The slots' `max_duration`.
const MAX_DURATION: Duration = Duration::from_secs(5);

/// How much later than `max_duration` after its take a slot whose release
/// never came is found free by a polling client: the store's clock against
/// the test's, a poll every 100 ms, and a request's way through Envoy.
const RETURN_MARGIN: Duration = Duration::from_secs(1);

/// Take 1 at the request, give 1 back when the stream ends.
fn refunded(rule: &str) -> String {
    format!(
        r#"
- actions: [{{generic_key: {{descriptor_key: rule, descriptor_value: {rule}}}}}]
- actions: [{{generic_key: {{descriptor_key: rule, descriptor_value: {rule}}}}}]
  apply_on_stream_done: true
  hits_addend: {{number: 1, is_negative_hits: true}}
"#
    )
}

/// A slot per request of `x-tenant`, given back at the stream's end if the
/// request went upstream (a refused one never took a slot).
const SLOTS: &str = r#"
- actions: [{request_headers: {header_name: x-tenant, descriptor_key: tenant}}]
- actions: [{request_headers: {header_name: x-tenant, descriptor_key: tenant}}]
  apply_on_stream_done: true
  hits_addend: {format: "%UPSTREAM_REQUEST_ATTEMPT_COUNT%", is_negative_hits: true}
"#;

fn bootstrap(
    rls: Vec<std::net::SocketAddr>,
    upstream: &HoldingUpstream,
    filter: Filter,
) -> Bootstrap {
    let per_route = |prefix: &str, limits: String| Route {
        per_filter_rate_limits: Some(limits),
        ..Route::unlimited(prefix)
    };
    Bootstrap {
        rls,
        upstream: Some(upstream.addr),
        filter,
        routes: vec![
            per_route("/refund/window", refunded("window")),
            per_route("/refund/bucket", refunded("bucket")),
            per_route("/slots", SLOTS.to_string()),
        ],
        extra_listeners: String::new(),
        echoed: Vec::new(),
    }
}

fn stat_of(svc: &Service, rule: &str, stat: &str) -> u64 {
    svc.stat(&format!(
        "ratelimit.service.rate_limit.refunds.{rule}.{stat}"
    ))
}

/// `n` concurrent requests for `tenant` holding `hold_ms` upstream: their
/// statuses, in the order they came back.
fn concurrent(envoy: &Envoy, tenant: &str, n: usize, hold_ms: u64) -> Vec<u16> {
    let front = envoy.listener("front");
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let tenant = tenant.to_string();
            std::thread::spawn(move || {
                let hold = hold_ms.to_string();
                let headers = [("x-tenant", tenant.as_str()), ("x-hold-ms", hold.as_str())];
                support::http_with(front, "GET", "/slots", &headers, b"").status
            })
        })
        .collect();
    threads
        .into_iter()
        .map(|t| t.join().expect("client"))
        .collect()
}

fn count(statuses: &[u16], status: u16) -> usize {
    statuses.iter().filter(|&&s| s == status).count()
}

/// Everything but the load, on `env`'s store.
fn refunds_and_slots(env: &[(&str, String)]) {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let svc = Service::start(&[("refunds.yaml", RULES)], &env);
    let upstream = HoldingUpstream::start(Duration::ZERO);
    let envoy = Envoy::start(&bootstrap(
        vec![svc.grpc],
        &upstream,
        Filter::new("refunds"),
    ));
    wait_for_fresh_window(60, 20);

    // Refunds: each request takes 1 and gives it back when it ends.
    for rule in ["window", "bucket"] {
        let stats = format!("rule_{rule}");
        for i in 1..=14 {
            let got = envoy.get(&format!("/refund/{rule}"), &[]).status;
            assert_eq!(got, 200, "{rule}: request {i} of 14 on a rule of 10");
            let back = svc.eventually(Duration::from_secs(5), || {
                stat_of(&svc, &stats, "refunded_hits") >= i
            });
            assert!(back, "{rule}: request {i}'s refund arrives");
        }
        assert_eq!(
            stat_of(&svc, &stats, "total_hits"),
            14,
            "{rule}: refunds are no hits"
        );
        assert_eq!(
            stat_of(&svc, &stats, "over_limit"),
            0,
            "{rule}: a refund is never refused"
        );
        assert_eq!(stat_of(&svc, &stats, "refunded_hits"), 14);
    }

    // Slots: 8 at once, 3 admitted and held 2 s upstream.
    let started = Instant::now();
    let front = envoy.listener("front");
    let held = std::thread::spawn(move || {
        let threads: Vec<_> = (0..8)
            .map(|_| {
                std::thread::spawn(move || {
                    let headers = [("x-tenant", "b"), ("x-hold-ms", "2000")];
                    support::http_with(front, "GET", "/slots", &headers, b"").status
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("client"))
            .collect::<Vec<u16>>()
    });
    let all_in = svc.eventually(Duration::from_secs(5), || upstream.of("b").now == 3);
    assert!(all_in, "three reach the upstream: {:?}", upstream.of("b"));
    // While they are held, more are refused (and give nothing back).
    let during = concurrent(&envoy, "b", 4, 0);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "asked while held"
    );
    assert_eq!(during, [429; 4], "refused while three are held");
    let first = held.join().expect("clients");
    assert_eq!(
        (count(&first, 200), count(&first, 429)),
        (3, 5),
        "{first:?}"
    );
    assert_eq!(upstream.of("b").peak, 3);
    // The three releases arrive; then three more are admitted.
    let released = svc.eventually(Duration::from_secs(5), || {
        stat_of(&svc, "tenant", "refunded_hits") >= 3
    });
    assert!(released, "the releases arrive");
    let second = concurrent(&envoy, "b", 8, 500);
    assert_eq!(
        (count(&second, 200), count(&second, 429)),
        (3, 5),
        "{second:?}"
    );
    assert_eq!(upstream.of("b").peak, 3, "never more than 3 upstream");
    // Every refused request's stream-done call gave back 0: over_limit
    // counts the refusals, and nothing else was refused.
    assert_eq!(stat_of(&svc, "tenant", "over_limit"), 14);

    // The Envoy holding all three slots dies: they come back by themselves.
    let mut dying = Envoy::start(&bootstrap(
        vec![svc.grpc],
        &upstream,
        Filter::new("refunds"),
    ));
    let released_before = stat_of(&svc, "tenant", "refunded_hits");
    let dying_front = dying.listener("front");
    for _ in 0..3 {
        std::thread::spawn(move || {
            let headers = [("x-tenant", "c"), ("x-hold-ms", "30000")];
            support::http_with(dying_front, "GET", "/slots", &headers, b"")
        });
    }
    let taken = svc.eventually(Duration::from_secs(5), || upstream.of("c").now == 3);
    assert!(taken, "three held upstream: {:?}", upstream.of("c"));
    let taken_at = Instant::now();
    dying.kill();
    let fresh = Envoy::start(&bootstrap(
        vec![svc.grpc],
        &upstream,
        Filter::new("refunds"),
    ));
    let right_after = concurrent(&fresh, "c", 1, 0);
    assert_eq!(right_after, [429], "the dead Envoy's slots are still held");
    let admitted_after = loop {
        let elapsed = taken_at.elapsed();
        assert!(
            elapsed <= MAX_DURATION + RETURN_MARGIN + Duration::from_secs(1),
            "no slot came back within max_duration + margin"
        );
        if concurrent(&fresh, "c", 1, 0) == [200] {
            break elapsed;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    println!("slots of a killed Envoy came back {admitted_after:?} after they were taken");
    assert!(
        admitted_after >= MAX_DURATION - Duration::from_millis(300),
        "refused until the slots expire: {admitted_after:?}"
    );
    assert!(
        admitted_after <= MAX_DURATION + RETURN_MARGIN,
        "back within max_duration + margin: {admitted_after:?}"
    );
    // The admitted request's release arrives; the killed Envoy's never do.
    let one = svc.eventually(Duration::from_secs(5), || {
        stat_of(&svc, "tenant", "refunded_hits") > released_before
    });
    assert!(one, "the admitted request's release arrives");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        stat_of(&svc, "tenant", "refunded_hits") - released_before,
        1
    );
}

#[test]
fn refunds_and_in_flight_limits_through_envoy_on_memory() {
    let _one = support::one_at_a_time();
    refunds_and_slots(&[]);
}

#[test]
fn refunds_and_in_flight_limits_through_envoy_on_redis() {
    let _one = support::one_at_a_time();
    let redis = RedisServer::start();
    refunds_and_slots(&redis_env("single", redis.addr()));
}

#[test]
fn refunds_and_in_flight_limits_through_envoy_on_the_cluster() {
    let _one = support::one_at_a_time();
    let cluster = RedisCluster::start();
    refunds_and_slots(&redis_env("cluster", cluster.seeds().join(",")));
}

/// 3 instances on the Cluster behind one Envoy, 64 clients, 8 tenants of 3
/// slots each, 20 ms upstream: the upstream never serves a tenant more than
/// 3 at once. Envoy fails closed here (`failure_mode_deny`, a 1 s timeout):
/// a call that fails open would let a request through without a slot,
/// which no limit can bound.
#[test]
fn under_load_the_upstream_never_serves_a_tenant_more_than_its_slots() {
    let _one = support::one_at_a_time();
    let cluster = RedisCluster::start();
    let env = redis_env("cluster", cluster.seeds().join(","));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let services: Vec<Service> = (0..3)
        .map(|_| Service::start(&[("refunds.yaml", RULES)], &env))
        .collect();
    let upstream = HoldingUpstream::start(Duration::from_millis(20));
    let filter = Filter {
        failure_mode_deny: true,
        ..Filter::new("refunds")
    };
    let rls = services.iter().map(|s| s.grpc).collect();
    let envoy = Envoy::start(&bootstrap(rls, &upstream, filter));
    let front = envoy.listener("front");
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, refused, other) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let clients: Vec<_> = (0..64)
        .map(|i| {
            let (stop, ok, refused, other) =
                (stop.clone(), ok.clone(), refused.clone(), other.clone());
            std::thread::spawn(move || {
                let tenant = format!("load-{}", i % 8);
                // Bounded: at most 10 s of traffic, then the flag.
                let until = Instant::now() + Duration::from_secs(10);
                while !stop.load(Ordering::Relaxed) && Instant::now() < until {
                    let headers = [("x-tenant", tenant.as_str())];
                    let status = support::http_with(front, "GET", "/slots", &headers, b"").status;
                    match status {
                        200 => ok.fetch_add(1, Ordering::Relaxed),
                        429 => refused.fetch_add(1, Ordering::Relaxed),
                        _ => other.fetch_add(1, Ordering::Relaxed),
                    };
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(8));
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().expect("client");
    }
    let all = upstream.all();
    let (ok, refused, other) = (
        ok.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
        other.load(Ordering::Relaxed),
    );
    let peaks: Vec<(String, u64, u64)> = {
        let mut v: Vec<_> = all
            .iter()
            .map(|(t, c)| (t.clone(), c.peak, c.served))
            .collect();
        v.sort();
        v
    };
    println!("load: {ok} admitted, {refused} refused, {other} other; per tenant (peak, served): {peaks:?}");
    assert_eq!(all.len(), 8, "every tenant was served: {peaks:?}");
    for (tenant, peak, served) in &peaks {
        assert!(*peak <= 3, "{tenant} was served {peak} at once");
        assert!(*served > 0, "{tenant} was served");
    }
    assert!(refused > 0, "the slots were contended");
    assert_eq!(other, 0, "no request failed");
}
