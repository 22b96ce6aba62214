//! The original's service-level cases and HTTP endpoint cases against the
//! real binary on the memory store, plus malformed requests, logs, the
//! statistics sinks, shutdown and the gRPC workers. What a caller can hold
//! (connections, bodies, keys, stalled streams) is in `service_bounds.rs`.

// Tests and the load tool measure the real elapsed time of real processes.
#![allow(clippy::disallowed_types)]

use crate::support;

use std::time::Duration;

use support::*;
use tonic::Code as GrpcCode;

const SECOND: i32 = 1;
const MINUTE: i32 = 2;
const HOUR: i32 = 3;

const RULES: &str = "
domain: test
descriptors:
  - key: foo
    value: bar
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: baz
    value: qux
    rate_limit: {unlimited: true}
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: b
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: shadow1
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: shadow2
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: normal
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: q1
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: q2
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: regular
    value: limit
    metadata: {name: service_1}
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: quota
    value: limit
    metadata: {name: service_2}
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: other
    value: limit
    metadata: {some_other_name: service_2}
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: same
    value: limit
    metadata: {name: service_3}
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: key
    value: value
    rate_limit: {unit: second, requests_per_unit: 10}
";

fn start(env: &[(&str, &str)]) -> Service {
    Service::start(&[("rules.yaml", RULES)], env)
}

async fn hit(
    svc: &Service,
    d: Vec<envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor>,
    times: usize,
) {
    let mut c = svc.client().await;
    for _ in 0..times {
        call(&mut c, request("test", d.clone()))
            .await
            .expect("call");
    }
}

#[tokio::test]
async fn sv01_sv02_empty_domain_and_descriptors() {
    let svc = start(&[]);
    let mut c = svc.client().await;
    let e = call(&mut c, request("", vec![desc(&[("hello", "world")])]))
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (GrpcCode::Unknown, "rate limit domain must not be empty")
    );
    let e = call(&mut c, request("test", vec![])).await.unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (
            GrpcCode::Unknown,
            "rate limit descriptor list must not be empty"
        )
    );
    // Domain is checked first.
    let e = call(&mut c, request("", vec![])).await.unwrap_err();
    assert_eq!(e.message(), "rate limit domain must not be empty");
    assert_eq!(
        svc.stat("ratelimit.service.call.should_rate_limit.service_error"),
        3
    );
    let r = svc.http(
        "POST",
        "/json",
        br#"{"domain":"","descriptors":[{"entries":[{"key":"a","value":"b"}]}]}"#,
    );
    assert_eq!(
        (r.status, r.body.as_str()),
        (400, "Bad Request\nrate limit domain must not be empty\n")
    );
}

#[tokio::test]
async fn sv03_no_configuration_loaded() {
    // Force start with a broken file: no configuration ever loads.
    let mut svc = Service::start(
        &[("bad.yaml", "domain: [")],
        &[("FORCE_START_WITHOUT_INITIAL_CONFIG", "true")],
    );
    let mut c = svc.client().await;
    let e = call(&mut c, request("test", vec![desc(&[("hello", "world")])]))
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (GrpcCode::Unknown, "no rate limit configuration loaded")
    );
    assert_eq!(
        svc.stat("ratelimit.service.call.should_rate_limit.service_error"),
        1
    );
    // With force start the first load may still be running: wait for it.
    assert!(svc.eventually(Duration::from_secs(10), || svc
        .stat("ratelimit.service.config_load_error")
        == 1));
    // The original's empty body, and why in a header.
    let r = svc.debug("/rlconfig");
    assert_eq!(r.body, "");
    assert!(r
        .header("x-ratelimit-hint")
        .is_some_and(|h| h.starts_with("no configuration loaded")));
    // Without force start, a failed first load does not stop start-up either.
    drop(c);
    svc.signal("TERM");
    assert_eq!(svc.wait_exit(Duration::from_secs(20)), Some(0));
    let svc = Service::start(&[("bad.yaml", "domain: [")], &[]);
    let mut c = svc.client().await;
    let e = call(&mut c, request("test", vec![desc(&[("hello", "world")])]))
        .await
        .unwrap_err();
    assert_eq!(e.message(), "no rate limit configuration loaded");
}

#[tokio::test]
async fn sv04_sv05_unknown_domain_and_no_rule() {
    let svc = start(&[]);
    let mut c = svc.client().await;
    let r = call(&mut c, request("foo", vec![desc(&[("hello", "world")])]))
        .await
        .expect("ok");
    assert_eq!(r.overall_code, OK);
    assert_eq!(r.statuses.len(), 1);
    assert_eq!(r.statuses[0].code, OK);
    assert!(r.statuses[0].current_limit.is_none());
    assert_eq!(
        svc.stat("ratelimit.service.rate_limit.foo.domain_not_found"),
        1
    );
    let r = call(&mut c, request("test", vec![desc(&[("nokey", "x")])]))
        .await
        .expect("ok");
    assert_eq!(r.overall_code, OK);
    let s = &r.statuses[0];
    assert_eq!((s.code, s.limit_remaining), (OK, 0));
    assert!(s.current_limit.is_none() && s.duration_until_reset.is_none());
    assert_eq!(
        svc.stat("ratelimit_server.ShouldRateLimit.total_requests"),
        2
    );
}

#[tokio::test]
async fn sv06_limited_unmatched_and_unlimited() {
    wait_for_fresh_window(60, 5);
    let svc = start(&[]);
    let mut c = svc.client().await;
    let r = call(
        &mut c,
        request(
            "test",
            vec![
                desc(&[("foo", "bar")]),
                desc(&[("hello", "world")]),
                desc(&[("baz", "qux")]),
            ],
        ),
    )
    .await
    .expect("ok");
    assert_eq!(r.overall_code, OK);
    let s = &r.statuses;
    let limit = s[0].current_limit.as_ref().expect("limit");
    assert_eq!(
        (
            s[0].code,
            limit.requests_per_unit,
            limit.unit,
            s[0].limit_remaining
        ),
        (OK, 10, MINUTE, 9)
    );
    let dur = s[0].duration_until_reset.expect("dur").seconds;
    assert!((1..=60).contains(&dur), "{dur}");
    assert_eq!((s[1].code, s[1].limit_remaining), (OK, 0));
    assert_eq!((s[2].code, s[2].limit_remaining), (OK, u32::MAX));
    assert!(s[2].current_limit.is_none() && s[2].duration_until_reset.is_none());
    assert_eq!(
        svc.stat("ratelimit.service.rate_limit.test.foo_bar.total_hits"),
        1
    );
    assert_eq!(
        svc.stat("ratelimit.service.rate_limit.test.baz_qux.total_hits"),
        0
    );
}

async fn sv07_like(env: &[(&str, &str)], names: [&str; 3]) {
    wait_for_fresh_window(60, 5);
    let svc = start(env);
    hit(&svc, vec![desc(&[("foo", "bar")])], 10).await;
    let mut c = svc.client().await;
    let before = unix_now();
    let r = call(
        &mut c,
        request(
            "test",
            vec![desc(&[("foo", "bar")]), desc(&[("hello", "world")])],
        ),
    )
    .await
    .expect("ok");
    let after = unix_now();
    assert_eq!(r.overall_code, OVER);
    assert_eq!(
        (r.statuses[0].code, r.statuses[0].limit_remaining),
        (OVER, 0)
    );
    assert_eq!(r.statuses[1].code, OK);
    let h: Vec<(String, String)> = r
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect();
    assert_eq!(h.len(), 3);
    assert_eq!((h[0].0.as_str(), h[0].1.as_str()), (names[0], "10"));
    assert_eq!((h[1].0.as_str(), h[1].1.as_str()), (names[1], "0"));
    assert_eq!(h[2].0, names[2]);
    let reset: u64 = h[2].1.parse().expect("number");
    assert!(
        reset == 60 - before % 60 || reset == 60 - after % 60,
        "reset {reset}"
    );
}

#[tokio::test]
async fn sv07_headers_default_names() {
    sv07_like(
        &[("LIMIT_RESPONSE_HEADERS_ENABLED", "true")],
        ["RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"],
    )
    .await;
}

#[tokio::test]
async fn sv08_headers_custom_names() {
    sv07_like(
        &[
            ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
            ("LIMIT_LIMIT_HEADER", "A-Ratelimit-Limit"),
            ("LIMIT_REMAINING_HEADER", "A-Ratelimit-Remaining"),
            ("LIMIT_RESET_HEADER", "A-Ratelimit-Reset"),
        ],
        [
            "A-Ratelimit-Limit",
            "A-Ratelimit-Remaining",
            "A-Ratelimit-Reset",
        ],
    )
    .await;
}

#[tokio::test]
async fn sv09_headers_pick_smallest_remaining_ties_earlier() {
    let svc = start(&[("LIMIT_RESPONSE_HEADERS_ENABLED", "true")]);
    // A (10/h) seeded to 6, B (5/h) seeded to 1: both end with remaining 3.
    hit(&svc, vec![desc(&[("a", "x")])], 6).await;
    hit(&svc, vec![desc(&[("b", "x")])], 1).await;
    let r = two(&svc, "a", "b", "x").await;
    assert_eq!(r.overall_code, OK);
    let h: Vec<&str> = r
        .response_headers_to_add
        .iter()
        .map(|h| h.value.as_str())
        .collect();
    assert_eq!(&h[..2], &["10", "3"]);
    // Fresh service: A seeded 6, B seeded 2 → remaining 3 vs 2 → B.
    let svc = start(&[("LIMIT_RESPONSE_HEADERS_ENABLED", "true")]);
    hit(&svc, vec![desc(&[("a", "x")])], 6).await;
    hit(&svc, vec![desc(&[("b", "x")])], 2).await;
    let r = two(&svc, "a", "b", "x").await;
    let h: Vec<&str> = r
        .response_headers_to_add
        .iter()
        .map(|h| h.value.as_str())
        .collect();
    assert_eq!(&h[..2], &["5", "2"]);
}

#[tokio::test]
async fn sv10_global_shadow_mode() {
    let svc = start(&[("SHADOW_MODE", "true")]);
    hit(&svc, vec![desc(&[("a", "x")])], 10).await;
    let mut c = svc.client().await;
    let r = call(
        &mut c,
        request(
            "test",
            vec![desc(&[("a", "x")]), desc(&[("hello", "world")])],
        ),
    )
    .await
    .expect("ok");
    assert_eq!(r.overall_code, OK);
    assert_eq!(r.statuses[0].code, OVER);
    assert_eq!(r.statuses[1].code, OK);
    assert_eq!(svc.stat("ratelimit.service.global_shadow_mode"), 1);
}

#[tokio::test]
async fn sv11_sv12_rule_shadow_mode() {
    let svc = start(&[]);
    hit(
        &svc,
        vec![
            desc(&[("shadow1", "x")]),
            desc(&[("shadow2", "x")]),
            desc(&[("normal", "x")]),
        ],
        2,
    )
    .await;
    let r = two(&svc, "shadow1", "shadow2", "x").await;
    assert_eq!(r.overall_code, OK);
    for s in &r.statuses {
        assert_eq!((s.code, s.limit_remaining), (OK, 0));
        assert!(s.current_limit.is_some());
    }
    for k in ["shadow1", "shadow2"] {
        assert_eq!(
            svc.stat(&format!(
                "ratelimit.service.rate_limit.test.{k}.shadow_mode"
            )),
            1
        );
        assert_eq!(
            svc.stat(&format!("ratelimit.service.rate_limit.test.{k}.over_limit")),
            1
        );
    }
    assert_eq!(svc.stat("ratelimit.service.global_shadow_mode"), 0);
    let r = two(&svc, "shadow1", "normal", "x").await;
    assert_eq!(r.overall_code, OVER);
    assert_eq!((r.statuses[0].code, r.statuses[1].code), (OK, OVER));
}

#[tokio::test]
async fn sv13_global_quota_mode_all_over() {
    let svc = start(&[("QUOTA_MODE", "true")]);
    hit(&svc, vec![desc(&[("a", "x")])], 10).await;
    hit(&svc, vec![desc(&[("b", "x")])], 5).await;
    let r = two(&svc, "a", "b", "x").await;
    assert_eq!(r.overall_code, OVER);
}

/// One request with two single-entry descriptors `(a, v)` and `(b, v)`.
async fn two(
    svc: &Service,
    a: &str,
    b: &str,
    v: &str,
) -> envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse {
    let mut c = svc.client().await;
    call(
        &mut c,
        request("test", vec![desc(&[(a, v)]), desc(&[(b, v)])]),
    )
    .await
    .expect("call")
}

#[tokio::test]
async fn sv14_to_sv18_quota_mode_per_rule() {
    let svc = start(&[]);
    // normal OK, quota OK → OK.
    assert_eq!(two(&svc, "normal", "q1", "s16").await.overall_code, OK);
    // normal over, quota not → OVER.
    hit(&svc, vec![desc(&[("normal", "s14")])], 2).await;
    assert_eq!(two(&svc, "normal", "q1", "s14").await.overall_code, OVER);
    // normal OK, the only quota descriptor over → OVER, status stays OVER.
    hit(&svc, vec![desc(&[("q1", "s15")])], 2).await;
    let r = two(&svc, "normal", "q1", "s15").await;
    assert_eq!((r.overall_code, r.statuses[1].code), (OVER, OVER));
    // two quota rules, only one over → OK with statuses [OVER, OK].
    hit(&svc, vec![desc(&[("q1", "s17")])], 2).await;
    let r = two(&svc, "q1", "q2", "s17").await;
    assert_eq!(r.overall_code, OK);
    assert_eq!((r.statuses[0].code, r.statuses[1].code), (OVER, OK));
    // Both over → OVER.
    hit(
        &svc,
        vec![desc(&[("q1", "both")]), desc(&[("q2", "both")])],
        3,
    )
    .await;
    assert_eq!(two(&svc, "q1", "q2", "both").await.overall_code, OVER);
    // both quota over with global shadow mode → OK, counter +1.
    let svc = start(&[("SHADOW_MODE", "true")]);
    hit(&svc, vec![desc(&[("q1", "x")]), desc(&[("q2", "x")])], 3).await;
    assert_eq!(two(&svc, "q1", "q2", "x").await.overall_code, OK);
    assert_eq!(svc.stat("ratelimit.service.global_shadow_mode"), 1);
}

fn metadata_field<'a>(
    s: &'a envoy_types::pb::google::protobuf::Struct,
    k: &str,
) -> Option<&'a envoy_types::pb::google::protobuf::value::Kind> {
    s.fields.get(k).and_then(|v| v.kind.as_ref())
}

#[tokio::test]
async fn sv19_to_sv21_dynamic_metadata() {
    use envoy_types::pb::google::protobuf::value::Kind;
    let svc = start(&[
        ("QUOTA_MODE", "true"),
        ("RESPONSE_DYNAMIC_METADATA", "true"),
    ]);
    hit(&svc, vec![desc(&[("quota", "limit")])], 5).await;
    let r = two(&svc, "regular", "quota", "limit").await;
    assert_eq!(r.overall_code, OK);
    let md = r.dynamic_metadata.expect("metadata");
    assert!(matches!(metadata_field(&md, "domain"), Some(Kind::StringValue(d)) if d == "test"));
    let Some(Kind::StructValue(m)) = metadata_field(&md, "metadata") else {
        panic!("metadata struct")
    };
    assert!(matches!(metadata_field(m, "name"), Some(Kind::StringValue(n)) if n == "service_1"));
    let Some(Kind::ListValue(ds)) = metadata_field(&md, "descriptors") else {
        panic!("descriptors")
    };
    let entries: Vec<String> = ds
        .values
        .iter()
        .filter_map(|v| match &v.kind {
            Some(Kind::StructValue(s)) => match metadata_field(s, "entries") {
                Some(Kind::ListValue(l)) => l.values.first().and_then(|e| match &e.kind {
                    Some(Kind::StringValue(s)) => Some(s.clone()),
                    _ => None,
                }),
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert_eq!(entries, ["regular=limit", "quota=limit"]);
    // both OK, distinct keys merge.
    let r = two(&svc, "regular", "other", "limit").await;
    let md = r.dynamic_metadata.expect("metadata");
    let Some(Kind::StructValue(m)) = metadata_field(&md, "metadata") else {
        panic!("metadata struct")
    };
    assert_eq!(m.fields.len(), 2);
    // same key, first wins.
    let r = two(&svc, "regular", "same", "limit").await;
    let md = r.dynamic_metadata.expect("metadata");
    let Some(Kind::StructValue(m)) = metadata_field(&md, "metadata") else {
        panic!("metadata struct")
    };
    assert!(matches!(metadata_field(m, "name"), Some(Kind::StringValue(n)) if n == "service_1"));
}

#[tokio::test]
async fn sv22_limit_override() {
    let svc = start(&[]);
    let mut c = svc.client().await;
    // Four calls within one second: the fourth is over the override's 3/s.
    // A second boundary can split one burst, so try a few bursts.
    let mut fourth_over = false;
    for _ in 0..5 {
        let mut last = None;
        for _ in 0..4 {
            let req = request("test", vec![desc_override(&[("key", "value")], 3, SECOND)]);
            last = Some(call(&mut c, req).await.expect("ok"));
        }
        let r = last.expect("four calls");
        let l = r.statuses[0].current_limit.as_ref().expect("limit");
        assert_eq!(
            (l.requests_per_unit, l.unit, l.name.as_str()),
            (3, SECOND, "")
        );
        if r.statuses[0].code == OVER {
            fourth_over = true;
            break;
        }
    }
    assert!(fourth_over, "the fourth call of a burst is over the limit");
    assert!(svc.stat("ratelimit.service.rate_limit.test.key_value.total_hits") >= 4);
}

#[tokio::test]
async fn sv23_sv24_zero_hits_checks_without_consuming() {
    let svc = start(&[]);
    hit(&svc, vec![desc(&[("a", "z")])], 11).await;
    hit(&svc, vec![desc(&[("a", "three")])], 3).await;
    let mut c = svc.client().await;
    let r = call(&mut c, request("test", vec![desc_hits(&[("a", "z")], 0)]))
        .await
        .expect("ok");
    assert_eq!(
        (r.statuses[0].code, r.statuses[0].limit_remaining),
        (OVER, 0)
    );
    let r = call(
        &mut c,
        request("test", vec![desc_hits(&[("a", "three")], 0)]),
    )
    .await
    .expect("ok");
    assert_eq!((r.statuses[0].code, r.statuses[0].limit_remaining), (OK, 7));
    let r = call(
        &mut c,
        request("test", vec![desc_hits(&[("a", "three")], 0)]),
    )
    .await
    .expect("ok");
    assert_eq!(r.statuses[0].limit_remaining, 7, "counter not consumed");
}

#[tokio::test]
async fn sv25_request_hits_zero_means_one() {
    let svc = start(&[]);
    let mut c = svc.client().await;
    let r = call(&mut c, request("test", vec![desc(&[("a", "fresh")])]))
        .await
        .expect("ok");
    assert_eq!(r.statuses[0].limit_remaining, 9);
    let mut req = request("test", vec![desc(&[("a", "fresh")])]);
    req.hits_addend = 3;
    let r = call(&mut c, req).await.expect("ok");
    assert_eq!(r.statuses[0].limit_remaining, 6);
    let _ = HOUR;
}

#[tokio::test]
async fn h1_json_endpoint() {
    let svc = start(&[]);
    // The original's status and first line; the reason on the next.
    let r = svc.http("POST", "/json", b"");
    assert_eq!(r.status, 400);
    assert!(
        r.body
            .starts_with("Bad Request\ninvalid RateLimitRequest JSON: EOF"),
        "{}",
        r.body
    );
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    let r = svc.http("POST", "/json", b"}");
    assert_eq!(r.status, 400);
    assert!(r
        .body
        .starts_with("Bad Request\ninvalid RateLimitRequest JSON"));
    let r = svc.http("POST", "/json", br#"{"domain":"test","descriptors":[{"entries":[{"key":"hello","value":"world"}]}],"bogus":1}"#);
    assert_eq!(r.status, 400, "unknown fields are rejected");
    assert!(
        r.body.contains("bogus"),
        "the reason names the field: {}",
        r.body
    );
    let r = svc.http("POST", "/json", br#"{"domain":"test","descriptors":[]}"#);
    assert_eq!(
        (r.status, r.body.as_str()),
        (
            400,
            "Bad Request\nrate limit descriptor list must not be empty\n"
        )
    );
    let r = svc.http(
        "POST",
        "/json",
        br#"{"domain":"nothing","descriptors":[{"entries":[{"key":"hello","value":"world"}]}]}"#,
    );
    assert_eq!(
        (r.status, r.body.as_str()),
        (200, r#"{"overallCode":"OK","statuses":[{"code":"OK"}]}"#)
    );
    assert_eq!(r.header("content-type"), Some("application/json"));
    for _ in 0..2 {
        svc.http(
            "POST",
            "/json",
            br#"{"domain":"test","descriptors":[{"entries":[{"key":"normal","value":"j"}]}]}"#,
        );
    }
    let r = svc.http(
        "GET",
        "/json",
        br#"{"domain":"test","descriptors":[{"entries":[{"key":"normal","value":"j"}]}]}"#,
    );
    assert_eq!(r.status, 429);
    assert!(r.body.starts_with(r#"{"overallCode":"OVER_LIMIT","statuses":[{"code":"OVER_LIMIT","currentLimit":{"requestsPerUnit":2,"unit":"HOUR"},"durationUntilReset":""#), "{}", r.body);
    let r = svc.http("GET", "/nope", b"");
    assert_eq!((r.status, r.body.as_str()), (404, "404 page not found\n"));
    let big = vec![b' '; 5 * 1024 * 1024];
    assert_eq!(svc.http("POST", "/json", &big).status, 413);
}

#[tokio::test]
async fn h2_h3_h4_health() {
    use tonic_health::pb::{health_client::HealthClient, HealthCheckRequest};
    let svc = start(&[("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "true")]);
    let r = svc.http("GET", "/healthcheck", b"");
    assert_eq!((r.status, r.body.as_str()), (200, "OK"));
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", svc.grpc))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    let mut h = HealthClient::new(channel);
    let status = |s: &str| HealthCheckRequest {
        service: s.to_string(),
    };
    assert_eq!(
        h.check(status("ratelimit"))
            .await
            .expect("check")
            .into_inner()
            .status,
        1
    );
    assert_eq!(
        h.check(status(""))
            .await
            .expect("check")
            .into_inner()
            .status,
        1
    );
    assert_eq!(
        h.check(status("other")).await.unwrap_err().code(),
        GrpcCode::NotFound
    );
    // A load with zero domains makes it unhealthy again.
    std::fs::remove_file(svc.config_dir().join("rules.yaml")).expect("remove");
    assert!(svc.eventually(Duration::from_secs(10), || svc
        .http("GET", "/healthcheck", b"")
        .status
        == 500));
    assert_eq!(
        h.check(status("ratelimit"))
            .await
            .expect("check")
            .into_inner()
            .status,
        2
    );
    std::fs::write(svc.config_dir().join("rules.yaml"), RULES).expect("write");
    assert!(svc.eventually(Duration::from_secs(10), || svc
        .http("GET", "/healthcheck", b"")
        .status
        == 200));
}

#[tokio::test]
async fn h4_sigterm_fails_health_during_drain_then_exits() {
    let mut svc = start(&[("SHUTDOWN_DRAIN_DURATION", "5s")]);
    assert_eq!(svc.http("GET", "/healthcheck", b"").status, 200);
    svc.signal("TERM");
    assert!(svc.eventually(Duration::from_secs(2), || svc
        .http("GET", "/healthcheck", b"")
        .status
        == 500));
    assert_eq!(svc.wait_exit(Duration::from_secs(20)), Some(0));
}

#[tokio::test]
async fn reload_is_visible_in_rlconfig() {
    let svc = start(&[]);
    assert!(svc.debug("/rlconfig").body.contains(
        "test.foo_bar: unit=MINUTE requests_per_unit=10, shadow_mode: false, quota_mode: false\n"
    ));
    std::fs::write(svc.config_dir().join("more.yaml"), "domain: more\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 7}\n").expect("write");
    assert!(svc.eventually(Duration::from_secs(10), || svc
        .debug("/rlconfig")
        .body
        .contains("more.k: unit=DAY requests_per_unit=7")));
    // A broken edit keeps the last good config.
    std::fs::write(
        svc.config_dir().join("more.yaml"),
        "domain: more\ndescriptors:\n  - key: k\n    ratelimit: {}\n",
    )
    .expect("write");
    assert!(svc.eventually(Duration::from_secs(10), || svc
        .stat("ratelimit.service.config_load_error")
        >= 1));
    assert!(svc
        .debug("/rlconfig")
        .body
        .contains("more.k: unit=DAY requests_per_unit=7"));
    assert_eq!(svc.stat("runtime.num_values"), 2);
    assert!(svc.stat("runtime.load_attempts") >= 3);
    assert_eq!(svc.debug("/").body, "/rlconfig: print out the currently loaded configuration for debugging\n/stats: print out stats\n/hotkeys: the busiest keys of this instance, by decisions per second (JSON)\n/keys: the memory store's keys by rule, most first, with each rule's evictions (JSON)\n/audit: the decision audit: per audited rule, decisions against its exact contract (JSON)\n/evaluate: POST a /json request: what each descriptor would get, charging nothing (JSON)\n/usage: GET ?domain=D&descriptor=k=v,k2=v2: each applying limit's usage and what remains (JSON)\n/overrides: GET ?domain=D: the per-tenant overrides in force; PUT or DELETE one (JSON, bearer token)\n/overrides/log: GET ?domain=D: the overrides' changes, newest last (JSON)\n");
}

/// `/rlconfig` names the windows that `LOCAL_FIRST_SYNC_INTERVAL` alone
/// made local-first, with their bound; a rule's own interval shows as its.
#[test]
fn rlconfig_shows_the_windows_the_setting_made_local_first() {
    let svc = start(&[("LOCAL_FIRST_SYNC_INTERVAL", "50ms")]);
    let page = svc.debug("/rlconfig").body;
    assert!(
        page.contains(
            "test.foo_bar: unit=MINUTE requests_per_unit=10, shadow_mode: false, quota_mode: false, sync_interval: 50ms (LOCAL_FIRST_SYNC_INTERVAL; at most 10 + N·⌊ε·10/N⌋ a window)\n"
        ),
        "{page}"
    );
}

#[tokio::test]
async fn bad_input_never_panics() {
    let svc = start(&[]);
    let mut c = svc.client().await;
    // Unknown or out-of-range override units.
    for unit in [0, 8, -1, 1000] {
        let e = call(
            &mut c,
            request("test", vec![desc_override(&[("a", "x")], 1, unit)]),
        )
        .await
        .unwrap_err();
        assert_eq!(e.code(), GrpcCode::InvalidArgument, "unit {unit}");
    }
    // Over the caps: INVALID_ARGUMENT naming the limit and its setting.
    let descriptors =
        |n: usize| -> Vec<_> { (0..n).map(|i| desc(&[("a", &format!("v{i}"))])).collect() };
    let e = call(&mut c, request("test", descriptors(10_000)))
        .await
        .unwrap_err();
    assert_eq!(e.code(), GrpcCode::InvalidArgument);
    assert!(
        e.message().contains("10000 descriptors, at most 1000")
            && e.message().contains("REQUEST_MAX_DESCRIPTORS"),
        "{}",
        e.message()
    );
    let wide: Vec<(String, String)> = (0..65).map(|i| (format!("k{i}"), "v".into())).collect();
    let wide: Vec<(&str, &str)> = wide.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let e = call(&mut c, request("test", vec![desc(&wide)]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), GrpcCode::InvalidArgument);
    assert!(
        e.message().contains("REQUEST_MAX_ENTRIES"),
        "{}",
        e.message()
    );
    // At the cap: answered.
    let r = call(&mut c, request("test", descriptors(1_000)))
        .await
        .expect("ok");
    assert_eq!(r.statuses.len(), 1_000);
    // 64 KB keys.
    let key = "k".repeat(64 * 1024);
    let r = call(&mut c, request("test", vec![desc(&[(&key, "v")])]))
        .await
        .expect("ok");
    assert_eq!(r.overall_code, OK);
    // Garbage on the HTTP port.
    let mut s = std::net::TcpStream::connect(svc.http).expect("connect");
    use std::io::{Read, Write};
    s.write_all(b"\x00\x01\x02 garbage \r\n\r\n")
        .expect("write");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    // The service is still up.
    let r = call(&mut c, request("test", vec![desc(&[("a", "after")])]))
        .await
        .expect("still serving");
    assert_eq!(r.overall_code, OK);
}

/// The HTTP/2 `SETTINGS_MAX_CONCURRENT_STREAMS` the gRPC port advertises.
fn advertised_max_streams(addr: std::net::SocketAddr) -> Option<u32> {
    advertised(addr, 3)
}

/// The HTTP/2 setting `id` the gRPC port advertises, read off the wire: the
/// client preface and an empty SETTINGS frame, then the server's first
/// frame, which HTTP/2 requires to be its SETTINGS.
fn advertised(addr: std::net::SocketAddr, id: u16) -> Option<u32> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .expect("preface");
    let mut head = [0u8; 9];
    s.read_exact(&mut head).expect("a frame");
    assert_eq!(head[3], 4, "the server's first frame is SETTINGS");
    let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
    let mut payload = vec![0u8; len];
    s.read_exact(&mut payload).expect("settings");
    payload.chunks(6).find_map(|p| {
        (u16::from_be_bytes([p[0], p[1]]) == id)
            .then(|| u32::from_be_bytes([p[2], p[3], p[4], p[5]]))
    })
}

#[tokio::test]
async fn grpc_advertises_a_finite_stream_limit() {
    let svc = start(&[]);
    assert_eq!(advertised_max_streams(svc.grpc), Some(1024));
    let svc = start(&[("GRPC_MAX_CONCURRENT_STREAMS", "7")]);
    assert_eq!(advertised_max_streams(svc.grpc), Some(7));
    // The flow-control window a stream starts with, and the header limit.
    assert_eq!(advertised(svc.grpc, 4), Some(64 * 1024));
    assert_eq!(advertised(svc.grpc, 6), Some(16 * 1024));
}

#[tokio::test]
async fn malformed_grpc_requests_are_invalid_argument() {
    let svc = start(&[]);
    // Field 1 (domain), length 2, bytes that are not UTF-8.
    let bad_utf8 = [0x0a, 0x02, 0xff, 0xfe];
    let (status, msg) = raw_grpc(svc.grpc, frame(&bad_utf8, 4)).await;
    assert_eq!(status.as_deref(), Some("3"), "{msg:?}");
    // A frame that announces 100 bytes and carries 4.
    let (status, msg) = raw_grpc(svc.grpc, frame(&[0x0a, 0x02, b'a', b'b'], 100)).await;
    assert_eq!(status.as_deref(), Some("3"), "{msg:?}");
    // Garbage that is not protobuf at all.
    let (status, _) = raw_grpc(svc.grpc, frame(&[0xff; 16], 16)).await;
    assert_eq!(status.as_deref(), Some("3"));
    // The server is fine afterwards.
    let mut c = svc.client().await;
    assert!(call(&mut c, request("test", vec![desc(&[("a", "x")])]))
        .await
        .is_ok());
}

#[tokio::test]
async fn grpc_over_a_unix_socket_replacing_a_stale_socket_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("rls.sock");
    // A stale socket file from an earlier run (the original refuses to start).
    drop(std::os::unix::net::UnixListener::bind(&path).expect("stale socket"));
    let p = path.to_str().expect("utf-8 path").to_string();
    let _svc = start(&[("GRPC_UDS", &p)]);
    let channel = tonic::transport::Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_| {
            let p = p.clone();
            async move {
                let s = tokio::net::UnixStream::connect(p).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(s))
            }
        }))
        .await
        .expect("unix connect");
    let mut c = envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient::new(channel);
    let r = call(&mut c, request("test", vec![desc(&[("a", "uds")])]))
        .await
        .expect("call");
    assert_eq!(r.statuses[0].limit_remaining, 9);
}

#[tokio::test]
async fn json_logs_when_asked() {
    let svc = start(&[("LOG_FORMAT", "json")]);
    // The support reader already consumed the start-up lines; ask for one more.
    std::fs::write(svc.config_dir().join("bad.yaml"), "domain: [").expect("write");
    let line = (0..100)
        .find_map(|_| {
            svc.log
                .recv_timeout(Duration::from_millis(100))
                .ok()
                .filter(|l| l.contains("Error loading new configuration"))
        })
        .expect("an error log line");
    let v: serde_json::Value = serde_json::from_str(&line).expect("a JSON log line");
    assert_eq!(v["level"], "error");
    assert!(v["@message"]
        .as_str()
        .expect("message")
        .starts_with("Error loading new configuration: "));
    assert!(v["@timestamp"].as_str().expect("timestamp").ends_with('Z'));
}

#[tokio::test]
async fn statsd_receives_the_original_names_with_extra_tags() {
    use std::io::Read;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("statsd listener");
    let port = listener.local_addr().expect("addr").port().to_string();
    let svc = start(&[
        ("USE_STATSD", "true"),
        ("STATSD_HOST", "127.0.0.1"),
        ("STATSD_PORT", &port),
        ("STATS_FLUSH_INTERVAL", "100ms"),
        ("EXTRA_TAGS", "foo:bar,a:b"),
    ]);
    let mut c = svc.client().await;
    call(&mut c, request("test", vec![desc(&[("a", "statsd")])]))
        .await
        .expect("call");
    let (mut conn, _) = listener.accept().expect("statsd connection");
    conn.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let mut got = String::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < deadline && !got.contains("total_hits.__a=b.__foo=bar:1|c") {
        let mut buf = [0u8; 8192];
        if let Ok(n) = conn.read(&mut buf) {
            got.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    }
    assert!(
        got.contains("ratelimit.service.rate_limit.test.a.total_hits.__a=b.__foo=bar:1|c"),
        "{got}"
    );
    assert!(
        got.contains("ratelimit.service.config_load_success.__a=b.__foo=bar:1|c"),
        "{got}"
    );
}

#[tokio::test]
async fn prometheus_uses_the_original_default_mapping() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("port")
        .local_addr()
        .expect("addr")
        .port();
    let addr = format!("127.0.0.1:{port}");
    let svc = start(&[("USE_PROMETHEUS", "true"), ("PROMETHEUS_ADDR", &addr)]);
    let mut c = svc.client().await;
    for _ in 0..3 {
        call(&mut c, request("test", vec![desc(&[("normal", "prom")])]))
            .await
            .expect("call");
    }
    let body = http(addr.parse().expect("addr"), "GET", "/metrics", b"").body;
    assert!(
        body.contains(r#"ratelimit_service_rate_limit_over_limit{domain="test",key1="normal"} 1"#),
        "{body}"
    );
    assert!(
        body.contains(r#"ratelimit_service_rate_limit_total_hits{domain="test",key1="normal"} 3"#),
        "{body}"
    );
    assert!(
        body.contains("ratelimit_service_config_load_success 1"),
        "{body}"
    );
    assert!(
        !body.contains("ratelimit_service_rate_limit_limit"),
        "the rules' limit gauges are opt-in (RULE_LIMIT_GAUGES): {body}"
    );
    assert_eq!(
        http(addr.parse().expect("addr"), "GET", "/debug/pprof/", b"").status,
        404
    );
}

/// Every limited rule's configured limit is a gauge on both sinks (an
/// unlimited rule has none), and a flood of unique values adds no series
/// of it: one pair per rule of the config.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configured_limit_is_a_gauge_per_rule_on_prometheus_and_statsd() {
    use std::io::Read;
    let rules = "domain: lim
descriptors:
  - key: tenant
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 50}
  - key: route
    value: search
    rate_limit: {unit: second, requests_per_unit: 7}
  - key: tb
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 20}
  - key: free
    rate_limit: {unlimited: true}
";
    let prometheus = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("port")
        .local_addr()
        .expect("addr");
    // One sink at a time, as in the original: Prometheus first.
    let svc = Service::start(
        &[("lim.yaml", rules)],
        &[
            ("USE_PROMETHEUS", "true"),
            ("PROMETHEUS_ADDR", &prometheus.to_string()),
            ("RULE_LIMIT_GAUGES", "true"),
        ],
    );
    let limit_lines = || {
        let body = http(prometheus, "GET", "/metrics", b"").body;
        let mut lines: Vec<String> = body
            .lines()
            .filter(|l| l.starts_with("ratelimit_service_rate_limit_limit{"))
            .map(str::to_string)
            .collect();
        lines.sort();
        (lines, body)
    };
    let (before, body) = limit_lines();
    assert_eq!(
        before,
        [
            r#"ratelimit_service_rate_limit_limit{domain="lim",key1="route_search"} 7"#,
            r#"ratelimit_service_rate_limit_limit{domain="lim",key1="tb"} 10"#,
            r#"ratelimit_service_rate_limit_limit{domain="lim",key1="tenant"} 50"#,
        ],
        "{body}"
    );
    assert!(
        body.contains(
            r#"ratelimit_service_rate_limit_window_seconds{domain="lim",key1="tenant"} 60"#
        ),
        "{body}"
    );
    // A flood of unique tenants: per-value hit series, never limit series.
    let mut c = svc.client().await;
    for i in 0..300 {
        let tenant = format!("t{i}");
        call(&mut c, request("lim", vec![desc(&[("tenant", &tenant)])]))
            .await
            .expect("call");
    }
    let (after, body) = limit_lines();
    assert_eq!(after, before, "the flood added no limit series");
    assert!(
        body.contains(
            r#"ratelimit_service_rate_limit_total_hits{domain="lim",key1="tenant_t299"} 1"#
        ),
        "the flood did reach the per-value series: {body}"
    );
    drop(svc);
    let statsd = std::net::TcpListener::bind("127.0.0.1:0").expect("statsd listener");
    let statsd_port = statsd.local_addr().expect("addr").port().to_string();
    let _svc = Service::start(
        &[("lim.yaml", rules)],
        &[
            ("USE_STATSD", "true"),
            ("STATSD_HOST", "127.0.0.1"),
            ("STATSD_PORT", &statsd_port),
            ("STATS_FLUSH_INTERVAL", "100ms"),
            ("RULE_LIMIT_GAUGES", "true"),
        ],
    );
    let (mut conn, _) = statsd.accept().expect("statsd connection");
    conn.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let mut got = String::new();
    let want = [
        "ratelimit.service.rate_limit.lim.tenant.limit:50|g",
        "ratelimit.service.rate_limit.lim.route_search.limit:7|g",
        "ratelimit.service.rate_limit.lim.tb.window_seconds:1|g",
    ];
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < deadline && !want.iter().all(|w| got.contains(w)) {
        let mut buf = [0u8; 8192];
        if let Ok(n) = conn.read(&mut buf) {
            got.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    }
    for w in want {
        assert!(got.contains(w), "{w} missing from statsd: {got}");
    }
    assert!(
        !got.contains("lim.free.limit"),
        "an unlimited rule has no limit: {got}"
    );
}

#[test]
fn bad_settings_are_all_named_and_exit_1() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ratelimit"))
        .env_clear()
        .env("PORT", "abc")
        .env("GRPC_PORT", "70000")
        .env("USE_STATSD", "maybe")
        .env("REDIS_TIMEOUT", "10")
        .output()
        .expect("binary runs");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    for name in [
        "PORT=abc",
        "GRPC_PORT=70000",
        "USE_STATSD=maybe",
        "REDIS_TIMEOUT=10",
    ] {
        assert!(err.contains(&format!("{name} is not valid")), "{err}");
    }
    assert!(!err.contains("panicked"), "{err}");
}

/// The original waits forever for open streams on shutdown: an
/// open health `Watch` stream must not keep the process alive past
/// `SHUTDOWN_TIMEOUT`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_watch_stream_does_not_hold_shutdown() {
    use tonic_health::pb::{health_client::HealthClient, HealthCheckRequest};
    let mut svc = start(&[("SHUTDOWN_TIMEOUT", "1s")]);
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", svc.grpc))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    let mut h = HealthClient::new(channel);
    let mut stream = h
        .watch(HealthCheckRequest {
            service: "ratelimit".into(),
        })
        .await
        .expect("watch")
        .into_inner();
    assert_eq!(
        stream
            .message()
            .await
            .expect("first status")
            .map(|s| s.status),
        Some(1)
    );
    svc.signal("TERM");
    let code = tokio::task::spawn_blocking(move || svc.wait_exit(Duration::from_secs(15)))
        .await
        .expect("wait");
    assert_eq!(code, Some(0), "exits within the shutdown deadline");
}

/// The opt-in algorithms count the original's per-rule statistics, once
/// per descriptor whatever its number of limits, and answer the response
/// headers from the limit closest to exhaustion.
#[tokio::test]
async fn algorithms_count_the_rule_statistics_and_headers() {
    let rules = "domain: alg\ndescriptors:\n  - key: k\n    rate_limits:\n      - {unit: hour, requests_per_unit: 10, algorithm: token_bucket}\n      - {unit: day, requests_per_unit: 1000, algorithm: sliding_window}\n";
    let svc = Service::start(
        &[("alg.yaml", rules)],
        &[("LIMIT_RESPONSE_HEADERS_ENABLED", "true")],
    );
    let mut c = svc.client().await;
    let mut last = None;
    for _ in 0..12 {
        last = Some(
            call(&mut c, request("alg", vec![desc(&[("k", "v")])]))
                .await
                .expect("call"),
        );
    }
    let last = last.expect("answered");
    assert_eq!(last.overall_code, 2);
    let headers: Vec<(String, String)> = last
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect();
    assert_eq!(headers[0], ("RateLimit-Limit".into(), "10".into()));
    assert_eq!(headers[1], ("RateLimit-Remaining".into(), "0".into()));
    // The next token of 10 per hour comes in 6 minutes.
    let reset: u64 = headers[2].1.parse().expect("seconds");
    assert!((355..=360).contains(&reset), "{reset}");
    let stat = |s: &str| svc.stat(&format!("ratelimit.service.rate_limit.alg.k.{s}"));
    assert_eq!(stat("total_hits"), 12);
    assert_eq!(stat("over_limit"), 2);
    // As the original counts them: every admitted hit is within the
    // limit, and those above 80 % of it are also near it.
    assert_eq!(stat("within_limit"), 10);
    assert_eq!(stat("near_limit"), 2);
}

/// `ratelimit-bench` (its own h2 gRPC client) against the real service:
/// admitted, refused and failed calls are each counted where they belong.
#[test]
fn load_tool_counts_ok_over_limit_and_errors() {
    let rules = "
domain: bench
descriptors:
  - key: key
    rate_limit: {unit: day, requests_per_unit: 5}
";
    let svc = Service::start(&[("bench.yaml", rules)], &[]);
    let bench = |domain: &str| {
        let out = std::process::Command::new(bench_binary())
            .args(["run", "--target", &svc.grpc.to_string(), "--domain", domain])
            .args([
                "--duration",
                "300ms",
                "--warmup",
                "0s",
                "--concurrency",
                "4",
            ])
            .output()
            .expect("run ratelimit-bench");
        assert!(out.status.success(), "{out:?}");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let json = stdout
            .lines()
            .rev()
            .find(|l| l.starts_with('{'))
            .expect("json");
        let json: serde_json::Value = serde_json::from_str(json).expect("valid json");
        (json, stdout)
    };
    let (json, _) = bench("bench");
    let requests = json["requests"].as_u64().expect("requests");
    assert!(requests > 5, "{json}");
    // The window is a day: only a midnight crossing could admit more.
    let ok = json["ok"].as_u64().expect("ok");
    assert!((5..=10).contains(&ok), "{json}");
    assert_eq!(json["over_limit"].as_u64(), Some(requests - ok), "{json}");
    assert_eq!(json["errors"], 0, "{json}");

    let (json, stdout) = bench("");
    assert_eq!(json["ok"], 0, "{json}");
    assert!(json["errors"].as_u64() > Some(0), "{json}");
    assert_eq!(json["errors"], json["requests"], "{json}");
    assert!(
        stdout.contains("Unknown: rate limit domain must not be empty"),
        "{stdout}"
    );
}

/// `GRPC_WORKERS=3`: connections are handed to three single-threaded
/// runtimes in turn (beside them, a large-request lane of three threads);
/// every connection is answered, their counts meet in one store, and
/// SIGTERM drains every worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_spread_over_the_grpc_workers() {
    let mut svc = start(&[("GRPC_WORKERS", "3")]);
    let mut clients = Vec::new();
    for _ in 0..6 {
        clients.push(svc.client().await);
    }
    let mut codes = Vec::new();
    for c in &mut clients {
        for _ in 0..2 {
            let r = call(c, request("test", vec![desc(&[("normal", "workers")])]))
                .await
                .expect("every worker answers");
            codes.push(r.overall_code);
        }
    }
    // One limit of 2 per hour across all connections: two OK in total.
    assert_eq!(codes.iter().filter(|&&c| c == 1).count(), 2, "{codes:?}");
    let threads = std::fs::read_dir(format!("/proc/{}/task", svc.pid()))
        .expect("tasks")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .collect::<Vec<_>>();
    let workers = threads
        .iter()
        .filter_map(|name| name.trim().strip_prefix("grpc-"))
        .filter(|n| n.parse::<usize>().is_ok())
        .count();
    assert_eq!(workers, 3, "one thread per worker: {threads:?}");
    let lane = threads
        .iter()
        .filter(|name| name.trim() == "grpc-large")
        .count();
    assert_eq!(lane, 3, "the large-request lane, as many: {threads:?}");
    drop(clients);
    svc.signal("TERM");
    assert_eq!(svc.wait_exit(Duration::from_secs(20)), Some(0));
}

/// A request of more than 64 descriptors is decided on the large-request
/// lane, and answered as any other; a small one is decided on its worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_requests_are_decided_on_their_own_lane() {
    let svc = start(&[("GRPC_WORKERS", "2")]);
    let mut c = svc.client().await;
    let large: Vec<_> = (0..100)
        .map(|i| desc(&[("normal", &format!("lane{i}"))]))
        .collect();
    let r = call(&mut c, request("test", large))
        .await
        .expect("answered");
    assert_eq!(r.statuses.len(), 100);
    assert_eq!(r.overall_code, 1, "each of its own keys, within its limit");
    let lane = "ratelimit.service.call.should_rate_limit.large_lane";
    assert_eq!(svc.stat(lane), 1);
    let r = call(&mut c, request("test", vec![desc(&[("normal", "small")])]))
        .await
        .expect("answered");
    assert_eq!(r.overall_code, 1);
    assert_eq!(svc.stat(lane), 1, "a small request stays on its worker");
}

/// What `ratelimit ARG` prints, with no environment at all, once it has
/// exited with success; fails if it started the service instead (still
/// running after 5 s).
fn output_of(arg: &str) -> String {
    let mut child = std::process::Command::new(binary())
        .arg(arg)
        .env_clear()
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the binary starts");
    let mut exited = None;
    for _ in 0..100 {
        if let Ok(Some(status)) = child.try_wait() {
            exited = Some(status);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if exited.is_none() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("`ratelimit {arg}` did not exit within 5 s: it started the service");
    }
    let mut out = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        use std::io::Read;
        let _ = stdout.read_to_string(&mut out);
    }
    assert!(exited.is_some_and(|s| s.success()), "{arg}: {exited:?}");
    out
}

/// `ratelimit --version` prints the version and the source revision and
/// exits, without starting the service (any other argument is ignored, as
/// the original ignores them).
#[test]
fn version_prints_the_version_and_revision_and_exits() {
    let out = output_of("--version");
    let want = format!("ratelimit {} (revision ", env!("CARGO_PKG_VERSION"));
    assert!(
        out.starts_with(&want) && out.trim_end().ends_with(')'),
        "{out:?}"
    );
    assert!(!out.contains("revision )"), "a revision is named: {out:?}");
}

/// `ratelimit --help` (and Go's `-h`, `-help`) prints how to run it and
/// exits, instead of starting a service that waits for the default Redis
/// socket.
#[test]
fn help_prints_the_usage_and_the_first_settings_and_exits() {
    for arg in ["--help", "-h", "-help"] {
        let out = output_of(arg);
        for want in [
            "Usage: ratelimit",
            "BACKEND_TYPE=memory",
            "REDIS_URL",
            "docs/settings.md",
        ] {
            assert!(out.contains(want), "{arg}: {want:?} missing from {out}");
        }
    }
}
