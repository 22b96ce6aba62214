//! The rate-limit headers through the real binary, in each format of
//! `LIMIT_RESPONSE_HEADERS_FORMAT`, on gRPC (`response_headers_to_add`) and
//! as real HTTP headers on `/json` (OVER_LIMIT stays 429).

use crate::support;

use support::*;

const RULES: &str = "
domain: h
descriptors:
  - key: ip
    rate_limit: {unit: hour, requests_per_unit: 2, name: per-ip}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 10, unit_multiplier: 5, algorithm: sliding_window}
";

const BODY: &[u8] = br#"{"domain":"h","descriptors":[{"entries":[{"key":"ip","value":"1.2.3.4"}]},{"entries":[{"key":"path","value":"/a"}]}]}"#;

fn start(format: &str) -> Service {
    wait_for_fresh_window(3600, 30);
    Service::start(
        &[("rules.yaml", RULES)],
        &[
            ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
            ("LIMIT_RESPONSE_HEADERS_FORMAT", format),
        ],
    )
}

async fn grpc_headers(svc: &Service) -> Vec<(String, String)> {
    let mut c = svc.client().await;
    let r = call(
        &mut c,
        request(
            "h",
            vec![desc(&[("ip", "1.2.3.4")]), desc(&[("path", "/a")])],
        ),
    )
    .await
    .expect("answered");
    r.response_headers_to_add
        .into_iter()
        .map(|h| (h.key, h.value))
        .collect()
}

fn get<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
    h.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// The seconds part of a `t=` or reset value is time-dependent: check the
/// shape and range instead.
fn secs_in(v: &str, max: u64) -> bool {
    v.parse::<u64>().is_ok_and(|s| (1..=max).contains(&s))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ietf_fields_on_grpc_and_json() {
    let svc = start("ietf");
    let h = grpc_headers(&svc).await;
    assert_eq!(
        get(&h, "RateLimit-Policy"),
        Some(r#""per-ip";q=2;w=3600, "path=/a";q=10;w=300"#)
    );
    let state = get(&h, "RateLimit").expect("RateLimit");
    assert!(state.starts_with(r#""per-ip";r=1;t="#), "{state}");
    assert!(state.contains(r#", "path=/a";r=9;t="#), "{state}");
    assert_eq!(get(&h, "Retry-After"), None);
    // /json: the second request is allowed, the third refused (429) with
    // Retry-After, as real headers.
    let ok = svc.http("POST", "/json", BODY);
    assert_eq!(ok.status, 200);
    assert!(ok.header("RateLimit").is_some_and(|v| v.contains("r=0")));
    let refused = svc.http("POST", "/json", BODY);
    assert_eq!(refused.status, 429);
    let retry = refused.header("Retry-After").expect("Retry-After");
    assert!(secs_in(retry, 3600), "{retry}");
    assert!(
        refused.body.contains("responseHeadersToAdd"),
        "the body keeps them too"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x_ratelimit_headers_on_grpc_and_json() {
    let svc = start("x-ratelimit");
    let h = grpc_headers(&svc).await;
    assert_eq!(
        get(&h, "X-RateLimit-Limit"),
        Some(r#"2, 2;w=3600;name="per-ip", 10;w=300"#)
    );
    assert_eq!(get(&h, "X-RateLimit-Remaining"), Some("1"));
    assert!(get(&h, "X-RateLimit-Reset").is_some_and(|v| secs_in(v, 3600)));
    let r = svc.http("POST", "/json", BODY);
    assert_eq!(r.header("X-RateLimit-Remaining"), Some("0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn original_headers_by_default_and_as_http_headers_on_json() {
    let svc = start("original");
    let h = grpc_headers(&svc).await;
    let names: Vec<&str> = h.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        ["RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"]
    );
    assert_eq!(get(&h, "RateLimit-Limit"), Some("2"));
    assert_eq!(get(&h, "RateLimit-Remaining"), Some("1"));
    let r = svc.http("POST", "/json", BODY);
    assert_eq!(r.header("RateLimit-Remaining"), Some("0"));
    assert_eq!(r.header("RateLimit-Limit"), Some("2"));
}

#[test]
fn a_bad_format_is_a_clear_start_up_error() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ratelimit"))
        .env_clear()
        .env("BACKEND_TYPE", "memory")
        .env("LIMIT_RESPONSE_HEADERS_FORMAT", "draft-03")
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("LIMIT_RESPONSE_HEADERS_FORMAT=draft-03 is not valid"),
        "{err}"
    );
}
