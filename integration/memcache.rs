//! The memcache backend (`BACKEND_TYPE=memcache`) against real `memcached`
//! processes on free loopback ports: two instances share counters on the
//! original's keys with the original's TTLs, keys spread over servers by
//! CRC32, a month window stays counted (the original's expires at once),
//! an outage follows the rules' `failure_mode`, and `MEMCACHE_SRV` finds
//! the servers through DNS.

// Tests and the load tool measure the real elapsed time of real processes.
#![allow(clippy::disallowed_types)]

use crate::support;

use std::time::Duration;

use support::memcached::Memcached;
use support::*;

const RULES: &str = "
domain: mc
descriptors:
  - key: hour
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: month
    rate_limit: {unit: month, requests_per_unit: 2}
  - key: open
    rate_limit: {unit: hour, requests_per_unit: 100, failure_mode: open, fallback_requests_per_unit: 2}
";

fn start(servers: &str, extra: &[(&str, &str)]) -> Service {
    let mut env = vec![
        ("BACKEND_TYPE", "memcache"),
        ("MEMCACHE_HOST_PORT", servers),
        ("EXPIRATION_JITTER_MAX_SECONDS", "0"),
        ("STORE_TIMEOUT", "1s"),
    ];
    env.extend_from_slice(extra);
    Service::start(&[("rules.yaml", RULES)], &env)
}

async fn code(svc: &Service, key: &str, value: &str) -> Result<(i32, u32), tonic::Status> {
    let mut c = svc.client().await;
    call(&mut c, request("mc", vec![desc(&[(key, value)])]))
        .await
        .map(|r| (r.overall_code, r.statuses[0].limit_remaining))
}

fn window(unit: u64) -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    now - now % unit
}

/// Polls until `f` holds (the increments are not awaited by the answer).
fn eventually(f: impl FnMut() -> bool) -> bool {
    support::eventually(Duration::from_secs(5), f)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_counters_on_the_original_keys() {
    wait_for_fresh_window(3600, 20);
    let mc = Memcached::start();
    let (a, b) = (start(&mc.addr(), &[]), start(&mc.addr(), &[]));
    let key = format!("mc_hour_shared_{}", window(3600));
    assert_eq!(code(&a, "hour", "shared").await.expect("answer"), (OK, 2));
    assert!(
        eventually(|| mc.get(&key).as_deref() == Some("1")),
        "{:?}",
        mc.get(&key)
    );
    let ttl = mc.ttl(&key).expect("ttl");
    assert!((3590..=3600).contains(&ttl), "the window's TTL: {ttl}");
    assert_eq!(code(&b, "hour", "shared").await.expect("answer"), (OK, 1));
    assert!(eventually(|| mc.get(&key).as_deref() == Some("2")));
    assert_eq!(code(&a, "hour", "shared").await.expect("answer"), (OK, 0));
    assert!(eventually(|| mc.get(&key).as_deref() == Some("3")));
    assert_eq!(code(&b, "hour", "shared").await.expect("answer").0, OVER);
    // An old instance's counter is read as it left it.
    let seeded = format!("mc_hour_seeded_{}", window(3600));
    mc.exchange(&format!("set {seeded} 0 3600 1\r\n3\r\n"), |l| {
        l == "STORED"
    });
    assert_eq!(code(&a, "hour", "seeded").await.expect("answer").0, OVER);
    assert!(a.stat("ratelimit.memcache.multiget.__code=success") >= 3);
    assert!(a.stat("ratelimit.memcache.add.__code=success") >= 1);

    // A month window: memcached reads TTLs above 30 days as absolute times,
    // so the key is sent one; it is kept and counts.
    let month = 2_592_000;
    let key = format!("mc_month_m_{}", window(month));
    assert_eq!(code(&a, "month", "m").await.expect("answer").0, OK);
    assert!(eventually(|| mc.get(&key).as_deref() == Some("1")), "kept");
    let ttl = mc.ttl(&key).expect("ttl");
    assert!(ttl > 30 * 86_400 - 60 && ttl <= month as i64, "ttl {ttl}");
    code(&a, "month", "m").await.expect("answer");
    assert!(eventually(|| mc.get(&key).as_deref() == Some("2")));
    assert_eq!(code(&a, "month", "m").await.expect("answer").0, OVER);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_decrements_the_counter_never_below_zero() {
    wait_for_fresh_window(3600, 20);
    let mc = Memcached::start();
    let svc = start(&mc.addr(), &[]);
    let key = format!("mc_hour_refund_{}", window(3600));
    let refund = |hits: u64| {
        let mut d = desc(&[("hour", "refund")]);
        d.hits_addend = Some(envoy_types::pb::google::protobuf::UInt64Value { value: hits });
        d.is_negative_hits = true;
        request("mc", vec![d])
    };
    for _ in 0..3 {
        assert_eq!(code(&svc, "hour", "refund").await.expect("answer").0, OK);
    }
    assert!(eventually(|| mc.get(&key).as_deref() == Some("3")));
    let mut c = svc.client().await;
    let r = call(&mut c, refund(2)).await.expect("answer");
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (OK, 2));
    assert!(
        eventually(|| mc.get(&key).as_deref() == Some("1")),
        "{:?}",
        mc.get(&key)
    );
    let r = call(&mut c, refund(10)).await.expect("answer");
    assert_eq!(r.overall_code, OK);
    assert!(
        eventually(|| mc.get(&key).as_deref() == Some("0")),
        "{:?}",
        mc.get(&key)
    );
    assert!(
        eventually(|| svc.stat("ratelimit.service.rate_limit.mc.hour.refunded_hits") == 12),
        "refunds are counted apart"
    );
    assert_eq!(
        svc.stat("ratelimit.service.rate_limit.mc.hour.total_hits"),
        3
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_spread_over_servers_and_an_outage_follows_the_failure_mode() {
    wait_for_fresh_window(3600, 20);
    let (one, mut two) = (Memcached::start(), Memcached::start());
    let svc = start(&format!("{},{}", one.addr(), two.addr()), &[]);
    for i in 0..20 {
        code(&svc, "hour", &format!("v{i}")).await.expect("answer");
    }
    let w = window(3600);
    let on = |m: &Memcached| {
        (0..20)
            .filter(|i| m.get(&format!("mc_hour_v{i}_{w}")).is_some())
            .count()
    };
    assert!(eventually(|| on(&one) + on(&two) == 20));
    for i in 0..20 {
        let key = format!("mc_hour_v{i}_{w}");
        let home = if crc32fast::hash(key.as_bytes()).is_multiple_of(2) {
            &one
        } else {
            &two
        };
        assert!(home.get(&key).is_some(), "{key} on the server CRC32 picks");
    }
    println!("spread: {} and {} of 20 keys", on(&one), on(&two));

    // Server two down: its keys fail by their rules, server one's work.
    two.kill();
    let mut by_server = (0, 0);
    for i in 0..20 {
        let key = format!("mc_hour_v{i}_{w}");
        let answer = code(&svc, "hour", &format!("v{i}")).await;
        if crc32fast::hash(key.as_bytes()).is_multiple_of(2) {
            assert!(answer.is_ok(), "{key}: {answer:?}");
            by_server.0 += 1;
        } else {
            let e = answer.expect_err("the original's error");
            assert_eq!(e.code(), tonic::Code::Unknown);
            by_server.1 += 1;
        }
    }
    println!(
        "during the outage: {} answered, {} failed (failure_mode error)",
        by_server.0, by_server.1
    );
    // A fail-open rule on the dead server falls back to its floor of 2.
    let value = (0..100)
        .map(|i| format!("x{i}"))
        .find(|v| crc32fast::hash(format!("mc_open_{v}_{w}").as_bytes()) % 2 == 1)
        .expect("a key on server two");
    let mut open = Vec::new();
    for _ in 0..4 {
        open.push(
            code(&svc, "open", &value)
                .await
                .expect("answered by the floor")
                .0,
        );
    }
    assert_eq!(open, [OK, OK, OVER, OVER], "the floor");
}

/// `MEMCACHE_SRV`: the service (in its own mount namespace, with a
/// resolv.conf naming a DNS server of the test on 127.0.0.1:53) finds its
/// servers by SRV and counts on them. Needs root for the namespace and the
/// port, as the tests run in CI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memcache_srv_finds_the_servers_through_dns() {
    wait_for_fresh_window(3600, 20);
    let mc = Memcached::start();
    let dns = support::dns::SrvServer::start("_memcache._tcp.rl.test.", &[("localhost.", mc.port)]);
    let dir = tempfile::tempdir().expect("tempdir");
    let resolv = dir.path().join("resolv.conf");
    std::fs::write(&resolv, format!("nameserver {}\n", dns.ip())).expect("resolv.conf");
    let script = format!(
        "mount --bind {} /etc/resolv.conf && exec \"$0\" \"$@\"",
        resolv.display()
    );
    let wrapper = ["unshare", "--mount", "sh", "-c", script.as_str()];
    let svc = Service::start_via(
        &wrapper,
        &[("rules.yaml", RULES)],
        &[
            ("BACKEND_TYPE", "memcache"),
            ("MEMCACHE_SRV", "_memcache._tcp.rl.test"),
            ("MEMCACHE_SRV_REFRESH", "200ms"),
            ("EXPIRATION_JITTER_MAX_SECONDS", "0"),
        ],
    );
    assert_eq!(code(&svc, "hour", "srv").await.expect("answer"), (OK, 2));
    let key = format!("mc_hour_srv_{}", window(3600));
    assert!(eventually(|| mc.get(&key).as_deref() == Some("1")));
    assert!(dns.queries() >= 1);

    // The record now names another server: MEMCACHE_SRV_REFRESH follows it.
    let moved = Memcached::start();
    dns.set_targets(&[("localhost.", moved.port)]);
    let key = format!("mc_hour_moved_{}", window(3600));
    let mut on_new = false;
    for _ in 0..50 {
        code(&svc, "hour", "moved").await.expect("answer");
        if support::eventually(Duration::from_millis(100), || moved.get(&key).is_some()) {
            on_new = true;
            break;
        }
    }
    assert!(on_new, "counted on the server the refreshed record names");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_over_tls() {
    wait_for_fresh_window(3600, 20);
    let dir = tempfile::tempdir().expect("tempdir");
    let authority = support::certs::ca("memcache ca");
    let (cert, key) = support::certs::leaf(&authority, &["localhost"]);
    let path = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).expect("pem");
        p.display().to_string()
    };
    let (cert, key, ca) = (
        path("tls.crt", &cert),
        path("tls.key", &key),
        path("ca.crt", &authority.cert_pem),
    );
    let mc = Memcached::start_tls(&cert, &key);
    let svc = start(
        &format!("localhost:{}", mc.port),
        &[("MEMCACHE_TLS", "true"), ("MEMCACHE_TLS_CACERT", &ca)],
    );
    let mut codes = Vec::new();
    for _ in 0..4 {
        codes.push(code(&svc, "hour", "tls").await.expect("answer").0);
        // The increments are not awaited: let each land first.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(codes, [OK, OK, OK, OVER], "counted through TLS");
    // Without trusting the CA the handshake fails: the rule's mode answers.
    let untrusting = start(
        &format!("localhost:{}", mc.port),
        &[("MEMCACHE_TLS", "true")],
    );
    let e = code(&untrusting, "hour", "tls")
        .await
        .expect_err("no trust");
    assert_eq!(e.code(), tonic::Code::Unknown, "{e:?}");
}

#[test]
fn both_server_settings_or_a_bad_srv_name_stop_start_up() {
    for (env, said) in [
        (
            vec![
                ("MEMCACHE_HOST_PORT", "127.0.0.1:1"),
                ("MEMCACHE_SRV", "_m._tcp.x"),
            ],
            "both set",
        ),
        (
            vec![("MEMCACHE_SRV", "not-an-srv-name")],
            "not of the form _service._proto.name",
        ),
    ] {
        let mut all = vec![("BACKEND_TYPE", "memcache")];
        all.extend(env);
        let err = refused_start(&[], &all);
        assert!(err.contains(said), "{err}");
    }
}

/// Memcache holds the original's windows only: a config using an opt-in
/// algorithm is refused where it loads and the last good one stays live;
/// `ALL_OR_NOTHING` stops start-up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_memcache_cannot_count_is_refused_where_the_config_loads() {
    let svc = start("127.0.0.1:1", &[]);
    assert!(svc.debug("/rlconfig").body.contains("mc.hour"));
    std::fs::write(
        svc.config_dir().join("more.yaml"),
        "domain: more\ndescriptors:\n  - key: k\n    rate_limit: {algorithm: token_bucket, unit: second, requests_per_unit: 5}\n",
    )
    .expect("write");
    assert!(svc.eventually(Duration::from_secs(10), || svc
        .stat("ratelimit.service.config_load_error")
        >= 1));
    let body = svc.debug("/rlconfig").body;
    assert!(
        body.contains("mc.hour") && !body.contains("more.k"),
        "{body}"
    );
    let err = refused_start(
        &[],
        &[
            ("BACKEND_TYPE", "memcache"),
            ("MEMCACHE_HOST_PORT", "127.0.0.1:1"),
            ("ALL_OR_NOTHING", "true"),
        ],
    );
    assert!(err.contains("ALL_OR_NOTHING"), "{err}");
}
