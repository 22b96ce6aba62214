//! Per-tenant overrides through a real Envoy, with two instances on one
//! store (single Redis, and the Cluster): a change written on one instance
//! is enforced by the other within 1 s, survives restarting both, gives the
//! YAML limit back at its expiry, refuses a stale compare-and-set and a
//! write without a credential, and is in the change log with who made it.

use std::time::{Duration, Instant};

use crate::support;
use serde_json::Value;
use support::accuracy::redis_env;
use support::envoy::{Bootstrap, Envoy, Filter, Route};
use support::redis::{RedisCluster, RedisServer};
use support::{http, http_with, wait_for_fresh_window, Service};

const RULES: &str = r#"
domain: tenants
descriptors:
  - key: tenant
    rate_limit:
      unit: minute
      requests_per_unit: 100
"#;

const TOKEN: &str = "s3cret-for-tests";

/// A token file of its own (so that no test reads one another writes),
/// holding [`TOKEN`] named `alice`.
fn token_file() -> std::path::PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = support::target_tmp().join(format!("admin-tokens-{}-{n}", std::process::id()));
    std::fs::write(&path, format!("# test admins\nalice {TOKEN}\n")).expect("token file");
    path
}

/// An instance on `env`'s store that takes writes with [`TOKEN`].
fn instance(env: &[(&str, String)]) -> Service {
    let tokens = token_file().to_string_lossy().into_owned();
    let mut env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    env.push(("ADMIN_TOKEN_FILE", &tokens));
    Service::start(&[("tenants.yaml", RULES)], &env)
}

/// Envoy in front of `svc` alone: `/acme` and `/globex` send one
/// descriptor `tenant=<name>`.
fn envoy_in_front_of(svc: &Service) -> Envoy {
    Envoy::start(&Bootstrap {
        rls: vec![svc.grpc],
        upstream: None,
        filter: Filter::new("tenants"),
        routes: vec![
            Route::generic("/acme", "tenant", "acme"),
            Route::generic("/globex", "tenant", "globex"),
            Route::unlimited("/"),
        ],
        extra_listeners: String::new(),
        echoed: Vec::new(),
    })
}

fn statuses(envoy: &Envoy, path: &str, n: usize) -> Vec<u16> {
    (0..n).map(|_| envoy.get(path, &[]).status).collect()
}

fn json(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// A write with the token: status and body.
fn write(svc: &Service, method: &str, body: &str) -> (u16, Value) {
    let auth = format!("Bearer {TOKEN}");
    let r = http_with(
        svc.debug,
        method,
        "/overrides",
        &[("Authorization", &auth)],
        body.as_bytes(),
    );
    (r.status, json(&r.body))
}

fn put(tenant: &str, n: u32, extra: &str) -> String {
    format!(
        r#"{{"domain": "tenants", "descriptor": [{{"key": "tenant", "value": "{tenant}"}}],
            "limit": {{"requests_per_unit": {n}, "unit": "minute"}}{extra}}}"#
    )
}

/// The override version `svc`'s dry run reports for `tenant` (`None`: the
/// YAML rule's limit applies).
fn override_seen(svc: &Service, tenant: &str) -> Option<u64> {
    let body = format!(
        r#"{{"domain": "tenants", "descriptors": [{{"entries": [{{"key": "tenant", "value": "{tenant}"}}]}}]}}"#
    );
    let r = http(svc.debug, "POST", "/evaluate", body.as_bytes());
    json(&r.body)["descriptors"][0]["rule"]["override_version"].as_u64()
}

/// How long until `svc` applies version `version` for `tenant` (polled
/// every 10 ms, up to 3 s).
fn until_seen(svc: &Service, tenant: &str, version: Option<u64>) -> Duration {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        if override_seen(svc, tenant) == version {
            return started.elapsed();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("{tenant}: version {version:?} not in force after 3 s");
}

fn overrides_across_instances(env: &[(&str, String)]) {
    let a = instance(env);
    let b = instance(env);
    let envoy = envoy_in_front_of(&b);
    // The minute window must not turn over before the restart is done.
    wait_for_fresh_window(60, 40);

    // No credential, a wrong one: refused, nothing written.
    let none = http(a.debug, "PUT", "/overrides", put("acme", 3, "").as_bytes());
    assert_eq!(none.status, 401, "{}", none.body);
    assert!(none.header("www-authenticate").is_some());
    let wrong = http_with(
        a.debug,
        "PUT",
        "/overrides",
        &[("Authorization", "Bearer nope")],
        put("acme", 3, "").as_bytes(),
    );
    assert_eq!(wrong.status, 401);
    assert_eq!(override_seen(&a, "acme"), None);

    // Written on A, enforced by B (behind Envoy) within 1 s.
    let (status, body) = write(&a, "PUT", &put("acme", 3, ""));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["version"], 1);
    assert_eq!(body["matches_rule"], true);
    assert_eq!(
        override_seen(&a, "acme"),
        Some(1),
        "in force where written at once"
    );
    let took = until_seen(&b, "acme", Some(1));
    println!("overrides: version 1 in force on the other instance after {took:?}");
    assert!(took < Duration::from_secs(1), "took {took:?}");
    assert_eq!(statuses(&envoy, "/acme", 5), [200, 200, 200, 429, 429]);
    assert_eq!(
        statuses(&envoy, "/globex", 5),
        [200; 5],
        "another tenant keeps the YAML limit"
    );

    // A stale compare-and-set is refused; a current one goes through.
    let (status, body) = write(&a, "PUT", &put("acme", 9, r#", "if_version": 0"#));
    assert_eq!(
        (status, &body["reason"]),
        (409, &Value::from("stale")),
        "{body}"
    );
    assert_eq!(body["current_version"], 1);
    let (status, body) = write(&b, "PUT", &put("acme", 7, r#", "if_version": 1"#));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["version"], 2);
    assert_eq!(body["before"]["limit"]["requests_per_unit"], 3);
    until_seen(&b, "acme", Some(2));
    // 5 taken of 7 (the two refusals count, as the original counts them).
    assert_eq!(statuses(&envoy, "/acme", 3), [200, 200, 429]);

    // Restart both instances (and Envoy, whose upstream moves): the
    // override is read back from the store before the first request.
    drop(envoy);
    drop(b);
    drop(a);
    let a = instance(env);
    let b = instance(env);
    let envoy = envoy_in_front_of(&b);
    assert_eq!(
        override_seen(&b, "acme"),
        Some(2),
        "persisted across restarts"
    );
    assert_eq!(statuses(&envoy, "/acme", 2), [429, 429], "still 7 a minute");

    // An override that expires gives the YAML limit back.
    let (status, body) = write(&a, "PUT", &put("globex", 1, r#", "expires_in": "2s""#));
    assert_eq!(status, 200, "{body}");
    until_seen(&b, "globex", Some(3));
    assert_eq!(statuses(&envoy, "/globex", 1), [429], "6 of 1");
    let back = until_seen(&b, "globex", None);
    println!("overrides: the expiring override gone after {back:?}");
    assert_eq!(statuses(&envoy, "/globex", 1), [200], "7 of the YAML's 100");

    // A delete on A is undone on B within 1 s.
    let (status, body) = write(
        &a,
        "DELETE",
        r#"{"domain": "tenants", "descriptor": [{"key": "tenant", "value": "acme"}]}"#,
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["version"], 4);
    assert!(until_seen(&b, "acme", None) < Duration::from_secs(1));
    assert_eq!(statuses(&envoy, "/acme", 1), [200]);

    // The log has every change, who made it, and what was there before.
    let log = json(&b.debug("/overrides/log?domain=tenants").body);
    let changes = log["changes"].as_array().expect("changes");
    let summary: Vec<(u64, &str, &str)> = changes
        .iter()
        .map(|c| {
            (
                c["version"].as_u64().unwrap_or(0),
                c["action"].as_str().unwrap_or(""),
                c["descriptor"][0]["value"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (1, "put", "acme"),
            (2, "put", "acme"),
            (3, "put", "globex"),
            (4, "delete", "acme")
        ]
    );
    assert!(changes.iter().all(|c| c["who"] == "alice"));
    assert_eq!(changes[3]["before"]["limit"]["requests_per_unit"], 7);
    assert_eq!(changes[3]["after"], Value::Null);
    let listed = json(&a.debug("/overrides?domain=tenants").body);
    assert_eq!(listed["overrides"], Value::Array(Vec::new()), "{listed}");
}

#[test]
fn overrides_across_two_instances_on_single_redis() {
    let _one = support::one_at_a_time();
    let redis = RedisServer::start();
    overrides_across_instances(&redis_env("single", redis.addr()));
}

#[test]
fn overrides_across_two_instances_on_the_cluster() {
    let _one = support::one_at_a_time();
    let cluster = RedisCluster::start();
    overrides_across_instances(&redis_env("cluster", cluster.seeds().join(",")));
}

/// On the memory store an override is this instance's own; with no
/// `ADMIN_TOKEN_FILE` writes are refused with 403, and bad bodies get 400
/// with the reason.
#[test]
fn without_a_token_file_writes_are_forbidden_and_bad_bodies_say_why() {
    let svc = Service::start(&[("tenants.yaml", RULES)], &[]);
    let r = http_with(
        svc.debug,
        "PUT",
        "/overrides",
        &[("Authorization", "Bearer x")],
        put("acme", 3, "").as_bytes(),
    );
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.body.contains("ADMIN_TOKEN_FILE"));

    let svc = instance(&[]);
    let (status, body) = write(&svc, "PUT", r#"{"domain": "tenants"}"#);
    assert_eq!(status, 400);
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("descriptor")),
        "{body}"
    );
    let (status, body) = write(&svc, "PUT", &put("acme", 3, r#", "expires_in": "soon""#));
    assert_eq!(status, 400);
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("expires_in")),
        "{body}"
    );
    let (status, body) = write(
        &svc,
        "PUT",
        r#"{"domain": "tenants", "descriptor": [{"key": "plan", "value": "gold"}], "limit": {"requests_per_unit": 1, "unit": "second"}}"#,
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["matches_rule"], false, "no rule has the key plan");
}

/// The client tool's form of the API: a put, a list and the log, with the
/// token read from the file.
#[test]
fn the_client_tool_writes_and_reads_overrides() {
    let svc = instance(&[]);
    let tokens = token_file();
    let client = |args: &[&str]| {
        let out = std::process::Command::new(support::built("ratelimit_client"))
            .arg("overrides")
            .args(args)
            .args(["-admin", &svc.debug.to_string()])
            .env("ADMIN_TOKEN_FILE", &tokens)
            .output()
            .expect("ratelimit_client runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, out) = client(&[
        "put",
        "-domain",
        "tenants",
        "-descriptor",
        "tenant=acme",
        "-limit",
        "2/second",
    ]);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(json(&out)["version"], 1);
    let (code, out) = client(&["get", "-domain", "tenants"]);
    assert_eq!(code, Some(0));
    assert_eq!(json(&out)["overrides"][0]["limit"]["requests_per_unit"], 2);
    let (code, out) = client(&[
        "put",
        "-domain",
        "tenants",
        "-descriptor",
        "tenant=acme",
        "-limit",
        "3/second",
        "-if-version",
        "0",
    ]);
    assert_eq!(code, Some(1), "a stale write fails");
    assert_eq!(json(&out)["reason"], "stale");
    let (code, out) = client(&["log"]);
    assert_eq!(code, Some(0));
    assert_eq!(json(&out)["changes"][0]["who"], "alice");
    assert_eq!(override_seen(&svc, "acme"), Some(1));
}
