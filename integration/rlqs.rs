//! RLQS (`RateLimitQuotaService`) with fleets of simulated Envoys
//! (`support/envoy_quota.rs`) against the real binary, on virtual time:
//! each round is 5 s of an Envoy's traffic, reported as Envoy reports it.
//!
//! What each test shows, with the numbers printed per round:
//! - three Envoys (demand 150, 60 and 10 a second) on a limit of 100 a
//!   second: the fleet stays within the limit (+10 %) and uses at least
//!   85 % of it, the light Envoy gets its demand, neither busy one is
//!   starved; after the demands shift, a fair split within 4 reports;
//! - two instances on one Redis (single, or Cluster) split one global
//!   limit, and a closed stream's share returns to the others;
//! - a per-minute rule works as a rate; a nested rule is found from a
//!   bucket's pairs in any order; blanket rules (a limit of 0, `unlimited`,
//!   `shadow_mode`, no rule, an unknown domain); usage in the rule's
//!   statistics; SIGTERM expires every assignment at once.

use crate::support;

use std::time::Duration;

use support::envoy_quota::{Enforced, SimEnvoy};
use support::redis::{RedisCluster, RedisServer};
use support::Service;

const RULES: &str = "
domain: q
descriptors:
  - key: fleet
    rate_limit: {unit: second, requests_per_unit: 100}
  - key: minute
    rate_limit: {unit: minute, requests_per_unit: 600}
  - key: tenant
    value: acme
    descriptors:
      - key: route
        rate_limit: {unit: second, requests_per_unit: 50}
  - key: closed
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: open
    rate_limit: {unlimited: true}
  - key: shadow
    rate_limit: {unit: second, requests_per_unit: 5}
    shadow_mode: true
";

/// Seconds per round: Envoy's report interval.
const ROUND: u64 = 5;

fn service(env: &[(&str, &str)]) -> Service {
    Service::start(&[("rules.yaml", RULES)], env)
}

/// What one round of a fleet did.
struct Round {
    /// Allowed per Envoy.
    allowed: Vec<u64>,
    /// The tokens the fleet's assignment changes put in at the start of
    /// the round (Envoy starts a changed bucket full): the `max_tokens` of
    /// every Envoy whose assignment changed at its last report.
    refilled: u64,
}

impl Round {
    fn total(&self) -> u64 {
        self.allowed.iter().sum()
    }
}

/// One round of every Envoy in `fleet`; `seen` holds each Envoy's
/// assignment changes as of the last round.
async fn round(fleet: &mut [SimEnvoy], seen: &mut Vec<u32>) -> Round {
    seen.resize(fleet.len(), 0);
    let mut refilled = 0;
    for (e, seen) in fleet.iter().zip(seen.iter_mut()) {
        if e.changes != *seen {
            if let Enforced::Bucket(max, _, _) = e.gate.enforced {
                refilled += u64::from(max);
            }
            *seen = e.changes;
        }
    }
    let mut allowed = Vec::new();
    for envoy in fleet.iter_mut() {
        allowed.push(envoy.round(ROUND).await.0);
    }
    Round { allowed, refilled }
}

/// The fleet's bound for one round of a limit of `rate` a second: within
/// it (+10 %) plus what the round's assignment changes refilled (the
/// stated bound), and at least 85 % of it used while the demand exceeds
/// it.
fn within(rate: f64, r: &Round, what: &str) {
    let (total, budget) = (r.total() as f64, rate * ROUND as f64);
    let most = 1.1 * budget + r.refilled as f64;
    assert!(
        total <= most,
        "{what}: {total} allowed, at most {most}: {:?}",
        r.allowed
    );
    assert!(
        total >= 0.85 * budget,
        "{what}: {total} allowed of {budget}: {:?}",
        r.allowed
    );
}

/// The bound over a span of rounds: within the limit (+10 %) and at least
/// 85 % of it, refills included.
fn within_span(rate: f64, rounds: &[Round], what: &str) {
    let total: u64 = rounds.iter().map(Round::total).sum();
    let budget = rate * (ROUND * rounds.len() as u64) as f64;
    println!(
        "{what}: {total} allowed of {budget} ({:.3})",
        total as f64 / budget
    );
    assert!(
        total as f64 <= 1.1 * budget && total as f64 >= 0.85 * budget,
        "{what}"
    );
}

async fn fleet_of(grpc: std::net::SocketAddr, demands: &[f64]) -> Vec<SimEnvoy> {
    fleet_naming(grpc, demands, false).await
}

/// [`fleet_of`]; `domain_once`: each names the domain in its first report
/// only.
async fn fleet_naming(
    grpc: std::net::SocketAddr,
    demands: &[f64],
    domain_once: bool,
) -> Vec<SimEnvoy> {
    let mut fleet = Vec::new();
    for &d in demands {
        let mut e = SimEnvoy::connect(grpc, "q", &[("fleet", "f")], d, false).await;
        if domain_once {
            e = e.naming_the_domain_once();
        }
        let took = e.start().await;
        assert!(
            took < Duration::from_secs(1),
            "the first report is answered at once: {took:?}"
        );
        fleet.push(e);
    }
    fleet
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_envoys_split_one_limit_by_their_demand() {
    three_envoys(false).await;
}

/// The proto's client: the domain in the first report only, the same
/// fleet results.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoys_that_name_the_domain_once_split_it_alike() {
    three_envoys(true).await;
}

async fn three_envoys(domain_once: bool) {
    let svc = service(&[]);
    let mut fleet = fleet_naming(svc.grpc, &[150.0, 60.0, 10.0], domain_once).await;
    let mut seen = Vec::new();
    let mut converged = Vec::new();
    println!("round | allowed (150/s, 60/s, 10/s) | total of 500 | refilled by changes");
    for r in 1..=8 {
        let round = round(&mut fleet, &mut seen).await;
        let allowed = &round.allowed;
        println!("{r} | {allowed:?} | {} | {}", round.total(), round.refilled);
        if r >= 3 {
            within(100.0, &round, &format!("round {r}"));
            assert!(
                allowed[2] >= 48,
                "the light Envoy gets its demand: {allowed:?}"
            );
            // Neither busy Envoy starved: each at least 80 % of the even
            // split of what the light one leaves.
            assert!(
                allowed[0] >= 175 && allowed[1] >= 175,
                "starved: {allowed:?}"
            );
            converged.push(round);
        }
    }
    within_span(100.0, &converged, "rounds 3 to 8");
    // The demands shift: the busy Envoy turns light and the light one busy.
    fleet[0].demand = 10.0;
    fleet[2].demand = 150.0;
    println!("shift: (10/s, 60/s, 150/s)");
    for r in 1..=6 {
        let round = round(&mut fleet, &mut seen).await;
        let allowed = &round.allowed;
        println!("{r} | {allowed:?} | {} | {}", round.total(), round.refilled);
        if r >= 4 {
            within(100.0, &round, &format!("round {r} after the shift"));
            assert!(allowed[0] >= 48, "the now light Envoy: {allowed:?}");
            assert!(
                allowed[1] >= 175 && allowed[2] >= 175,
                "starved: {allowed:?}"
            );
        }
    }
    let changes: Vec<u32> = fleet.iter().map(|e| e.changes).collect();
    println!("assignment changes per Envoy over 14 rounds: {changes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_redis_share_one_limit() {
    let redis = RedisServer::start();
    let env = [
        ("BACKEND_TYPE", "redis"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", &redis.addr()),
    ];
    share_across_instances(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_redis_cluster_share_one_limit() {
    let cluster = RedisCluster::start();
    let seeds = cluster.seeds().join(",");
    let env = [
        ("BACKEND_TYPE", "redis"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_TYPE", "cluster"),
        ("REDIS_URL", &seeds),
    ];
    share_across_instances(&env).await;
}

/// Two instances on `env`'s Redis: 150/s and 60/s on one, 150/s on the
/// other, one limit of 100/s; then the other's stream closes.
async fn share_across_instances(env: &[(&str, &str)]) {
    let (one, two) = (service(env), service(env));
    let mut fleet = fleet_of(one.grpc, &[150.0, 60.0]).await;
    let mut seen = Vec::new();
    fleet.extend(fleet_of(two.grpc, &[150.0]).await);
    println!("round | allowed (150/s and 60/s on one instance, 150/s on the other) | total of 500");
    for r in 1..=6 {
        let round = round(&mut fleet, &mut seen).await;
        let allowed = &round.allowed;
        println!("{r} | {allowed:?} | {} | {}", round.total(), round.refilled);
        if r >= 3 {
            within(100.0, &round, &format!("round {r}"));
        }
    }
    // The other instance's Envoy closes its stream: its share returns.
    let gone = fleet.pop().expect("three");
    gone.close();
    tokio::time::sleep(Duration::from_millis(200)).await;
    println!("the other instance's stream closed");
    seen.truncate(fleet.len());
    for r in 1..=4 {
        let round = round(&mut fleet, &mut seen).await;
        let allowed = &round.allowed;
        println!("{r} | {allowed:?} | {} | {}", round.total(), round.refilled);
        if r >= 3 {
            within(100.0, &round, &format!("round {r} after the close"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minute_rule_is_a_rate_and_buckets_find_their_rules() {
    let svc = service(&[]);
    // 600 a minute is 10 a second, split between two Envoys of 20/s.
    let mut fleet = Vec::new();
    for _ in 0..2 {
        let mut e = SimEnvoy::connect(svc.grpc, "q", &[("minute", "m")], 20.0, false).await;
        e.start().await;
        fleet.push(e);
    }
    let mut seen = Vec::new();
    round(&mut fleet, &mut seen).await;
    let mut minute = 0;
    for _ in 0..12 {
        minute += round(&mut fleet, &mut seen).await.total();
    }
    println!(
        "per-minute rule: {minute} allowed in 60 s of 600; {:?}",
        fleet[0].gate.enforced
    );
    assert!((510..=660).contains(&minute), "{minute} of 600 a minute");

    // Nested, pairs in any order: {route, tenant} finds tenant=acme → route.
    let mut nested = SimEnvoy::connect(
        svc.grpc,
        "q",
        &[("route", "/api"), ("tenant", "acme")],
        80.0,
        true,
    )
    .await;
    nested.start().await;
    let mut allowed = 0;
    for _ in 0..4 {
        allowed += nested.round(ROUND).await.0;
    }
    println!(
        "nested rule of 50/s at 80/s: {allowed} allowed in 20 s; {:?}",
        nested.gate.enforced
    );
    assert!(
        matches!(nested.gate.enforced, Enforced::Bucket(..)),
        "{:?}",
        nested.gate.enforced
    );
    assert!((850..=1_100).contains(&allowed), "{allowed} of 1,000");

    // Blanket rules.
    for (domain, pairs, want) in [
        ("q", [("closed", "x")], Enforced::DenyAll),
        ("q", [("open", "x")], Enforced::AllowAll),
        ("q", [("shadow", "x")], Enforced::AllowAll),
        ("q", [("nothing", "x")], Enforced::AllowAll),
        ("unknown", [("fleet", "f")], Enforced::AllowAll),
    ] {
        let mut e = SimEnvoy::connect(svc.grpc, domain, &pairs, 10.0, domain == "q").await;
        e.start().await;
        e.round(ROUND).await;
        assert_eq!(e.gate.enforced, want, "{domain} {pairs:?}");
    }
    // Reported usage counts in the rule's statistics.
    let stats = svc.debug("/stats").body;
    let hits = |key: &str| {
        stats
            .lines()
            .find_map(|l| l.strip_prefix(&format!("ratelimit.service.rate_limit.q.{key}: ")))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    println!(
        "stats: minute total_hits {}, shadow total_hits {}",
        hits("minute.total_hits"),
        hits("shadow.total_hits")
    );
    assert!(
        hits("minute.total_hits") >= 2 * 20 * 65,
        "every reported request counts"
    );
    assert!(hits("minute.over_limit") > 0);
    assert_eq!(hits("shadow.total_hits"), 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_expires_every_assignment_at_once() {
    let svc = service(&[("SHUTDOWN_DRAIN_DURATION", "2s")]);
    let mut e = SimEnvoy::connect(svc.grpc, "q", &[("fleet", "f")], 50.0, false).await;
    e.start().await;
    e.round(ROUND).await;
    assert_eq!(e.ttl, Some(Duration::from_secs(15)));
    svc.signal("TERM");
    let told = e
        .next(Duration::from_secs(5))
        .await
        .expect("told before the drain ends");
    e.apply(&told);
    println!("at SIGTERM: {told:?}");
    assert_eq!(e.ttl, Some(Duration::ZERO), "expired at once");
    assert!(
        matches!(e.gate.enforced, Enforced::Bucket(..)),
        "the same strategy: no refill"
    );
}

/// With Redis paused, a report is answered within `STORE_TIMEOUT`: a
/// bucket keeps its assignment (nothing is sent for it) until its TTL,
/// then its rule's `failure_mode` answers (`closed`: deny all; the
/// default, `error`: nothing, Envoy's own expired-assignment behaviour).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_redis_is_answered_within_the_store_timeout_by_policy() {
    let redis = RedisServer::start();
    let rules = "
domain: q
descriptors:
  - key: fleet
    rate_limit: {unit: second, requests_per_unit: 100}
  - key: strict
    rate_limit: {unit: second, requests_per_unit: 100, failure_mode: closed}
";
    let svc = Service::start(
        &[("rules.yaml", rules)],
        &[
            ("BACKEND_TYPE", "redis"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", &redis.addr()),
            ("STORE_TIMEOUT", "200ms"),
            ("RLQS_ASSIGNMENT_TTL", "1s"),
        ],
    );
    let mut plain = SimEnvoy::connect(svc.grpc, "q", &[("fleet", "f")], 50.0, false).await;
    let mut strict = SimEnvoy::connect(svc.grpc, "q", &[("strict", "s")], 50.0, false).await;
    plain.start().await;
    strict.start().await;
    assert!(matches!(plain.gate.enforced, Enforced::Bucket(..)));
    assert!(matches!(strict.gate.enforced, Enforced::Bucket(..)));
    redis.pause();
    let mut took = Vec::new();
    for e in [&mut plain, &mut strict] {
        let t = tokio::time::Instant::now();
        e.round(1).await;
        took.push(t.elapsed());
        assert!(matches!(e.gate.enforced, Enforced::Bucket(..)), "kept");
    }
    // Past the TTL: the policies answer.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    for e in [&mut plain, &mut strict] {
        let t = tokio::time::Instant::now();
        e.round(1).await;
        took.push(t.elapsed());
    }
    redis.resume();
    println!("answers with Redis paused (STORE_TIMEOUT 200 ms): {took:?}");
    for t in &took {
        assert!(*t < Duration::from_millis(900), "{took:?}");
    }
    assert!(
        matches!(plain.gate.enforced, Enforced::Bucket(..)),
        "failure_mode error sends nothing: {:?}",
        plain.gate.enforced
    );
    assert_eq!(
        strict.gate.enforced,
        Enforced::DenyAll,
        "failure_mode closed"
    );
    // Redis back: the bucket is assigned again, once the breaker's probe
    // finds it answering.
    for _ in 0..50 {
        strict.round(1).await;
        if matches!(strict.gate.enforced, Enforced::Bucket(..)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        matches!(strict.gate.enforced, Enforced::Bucket(..)),
        "assigned again: {:?}",
        strict.gate.enforced
    );
    assert!(svc.stat("ratelimit.rlqs.board_failure") >= 4);
}

/// How fast a moved share reaches a stream: an Envoy on one instance uses
/// the whole limit; ten times a newcomer joins, then closes its stream,
/// on the same instance and on another one on the same Redis. Each time,
/// the first Envoy is pushed its shrunk and its regrown share: at once on
/// the same instance, within one `RLQS_SYNC_INTERVAL` (250 ms) plus a
/// round trip from the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_share_is_pushed_within_one_sync_interval() {
    let redis = RedisServer::start();
    let env = [
        ("BACKEND_TYPE", "redis"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", &redis.addr()),
    ];
    let (one, two) = (service(&env), service(&env));
    let mut first = SimEnvoy::connect(one.grpc, "q", &[("fleet", "f")], 150.0, false).await;
    first.start().await;
    first.round(ROUND).await;
    for (name, grpc) in [("same instance", one.grpc), ("other instance", two.grpc)] {
        let (mut joins, mut leaves) = (Vec::new(), Vec::new());
        for _ in 0..10 {
            let mut newcomer = SimEnvoy::connect(grpc, "q", &[("fleet", "f")], 150.0, false).await;
            let t = tokio::time::Instant::now();
            newcomer.start().await;
            joins.push(until_pushed(&mut first, t).await);
            let t = tokio::time::Instant::now();
            newcomer.close();
            leaves.push(until_pushed(&mut first, t).await);
        }
        let ms = |v: &[Duration]| v.iter().map(|d| d.as_millis()).collect::<Vec<_>>();
        println!(
            "{name}: pushed after a join {:?} ms, after a leave {:?} ms",
            ms(&joins),
            ms(&leaves)
        );
        for d in joins.iter().chain(&leaves) {
            assert!(*d < Duration::from_millis(750), "{name}: {d:?}");
        }
    }
}

/// How long after `since` `e`'s assignment changed (an upper bound: a
/// message already waiting is read now).
async fn until_pushed(e: &mut SimEnvoy, since: tokio::time::Instant) -> Duration {
    let before = e.changes;
    while let Some(m) = e.next(Duration::from_secs(2)).await {
        e.apply(&m);
        if e.changes != before {
            return since.elapsed();
        }
    }
    panic!("nothing pushed within 2 s");
}

/// One board call per node carries a whole report, and one a whole sync:
/// a stream reports 1,000 buckets of 1,000 tenants (1,000 boards) on a
/// single Redis; Redis counts one script call for the report, and one per
/// `RLQS_SYNC_INTERVAL` (100 ms here) while the instance holds the lines.
/// Prints what each costs Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_and_a_sync_are_one_board_call_per_node() {
    use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
    use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
    use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
        BucketId, RateLimitQuotaUsageReports,
    };
    use support::redis::info_field;

    // It counts script calls against the clock.
    let _turn = support::one_at_a_time_async().await;
    let redis = RedisServer::start();
    let rules = "
domain: q
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 100}
";
    let svc = Service::start(
        &[("rules.yaml", rules)],
        &[
            ("BACKEND_TYPE", "redis"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", &redis.addr()),
            ("RLQS_SYNC_INTERVAL", "100ms"),
        ],
    );
    let evalsha = || {
        let info = redis.cli(&["INFO", "commandstats"]);
        let stat = info_field(&info, "cmdstat_evalsha").unwrap_or_default();
        let field = |name: &str| {
            stat.split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        (field("calls") as u64, field("usec"))
    };
    let mut client = RateLimitQuotaServiceClient::connect(format!("http://{}", svc.grpc))
        .await
        .expect("connect");
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let outbound =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|r| (r, rx)) });
    let mut inbound = client
        .stream_rate_limit_quotas(outbound)
        .await
        .expect("stream")
        .into_inner();
    let report = RateLimitQuotaUsageReports {
        domain: "q".into(),
        bucket_quota_usages: (0..1_000)
            .map(|i| BucketQuotaUsage {
                bucket_id: Some(BucketId {
                    bucket: [("tenant".to_string(), format!("t{i}"))].into(),
                }),
                time_elapsed: None,
                num_requests_allowed: 0,
                num_requests_denied: 0,
            })
            .collect(),
    };
    let (calls0, usec0) = evalsha();
    let sent = tokio::time::Instant::now();
    tx.send(report).await.expect("send");
    let answer = inbound.message().await.expect("answer").expect("open");
    let (calls1, usec1) = evalsha();
    // The syncs go on every 100 ms meanwhile: one may start in each 100 ms
    // the report and the reads around it took.
    let syncs_meanwhile = 1 + (sent.elapsed().as_millis() / 100) as u64;
    assert_eq!(answer.bucket_action.len(), 1_000);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (calls2, usec2) = evalsha();
    let syncs = calls2 - calls1;
    println!(
        "a report of 1,000 boards: {} script call(s), {:.0} µs of Redis; {syncs} syncs of them in 2 s, {:.0} µs each",
        calls1 - calls0,
        usec1 - usec0,
        (usec2 - usec1) / syncs.max(1) as f64
    );
    // The report is one call, beside the syncs that ran meanwhile.
    assert!(
        (1..=1 + syncs_meanwhile).contains(&(calls1 - calls0)),
        "{} calls, at most {syncs_meanwhile} of them syncs",
        calls1 - calls0
    );
    assert!((5..=21).contains(&syncs), "{syncs} syncs in 2 s at 100 ms");
    drop(tx);
}
