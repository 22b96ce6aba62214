//! OTLP tracing (`TRACING_ENABLED=true`) through the real binary against
//! the test OTLP receiver of the support: over HTTP and gRPC, the span
//! names and the resource's service name, the caller's trace continued
//! from its `traceparent`, and a dead collector costing the requests
//! nothing.

// Tests and the load tool measure the real elapsed time of real processes.
#![allow(clippy::disallowed_types)]

use crate::support;

use std::time::{Duration, Instant};

use support::otlp::OtlpReceiver;
use support::redis::RedisServer;
use support::*;

const RULES: &str =
    "domain: tr\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n";
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const WAIT: Duration = Duration::from_secs(20);

fn start(extra: &[(&str, &str)]) -> Service {
    let mut env = vec![
        ("TRACING_ENABLED", "true"),
        ("TRACING_SERVICE_NAME", "rl-under-test"),
        ("TRACING_SERVICE_NAMESPACE", "tests"),
        ("TRACING_SERVICE_INSTANCE_ID", "pod-1"),
        ("TRACING_SAMPLING_RATE", "1"),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ];
    env.extend_from_slice(extra);
    Service::start(&[("rules.yaml", RULES)], &env)
}

/// One request carrying the caller's trace.
async fn traced_call(svc: &Service) {
    let mut c = svc.client().await;
    let mut req = tonic::Request::new(request("tr", vec![desc(&[("k", "v")])]));
    req.metadata_mut().insert(
        "traceparent",
        format!("00-{TRACE_ID}-00f067aa0ba902b7-01")
            .parse()
            .expect("header"),
    );
    c.should_rate_limit(req).await.expect("answered");
}

async fn check_spans(receiver: &OtlpReceiver, store_span: &str) {
    let server = receiver
        .wait_for(
            "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
            WAIT,
        )
        .await
        .unwrap_or_else(|| panic!("no server span; got {:?}", receiver.spans()));
    let execution = receiver
        .wait_for("ShouldRateLimit Execution", WAIT)
        .await
        .expect("the execution span");
    let store = receiver
        .wait_for(store_span, WAIT)
        .await
        .expect("the store span");
    assert_eq!(server.service_name, "rl-under-test");
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    assert_eq!(
        hex(&server.trace_id),
        TRACE_ID,
        "the caller's trace continues"
    );
    assert_eq!(hex(&server.parent_span_id), "00f067aa0ba902b7");
    assert_eq!(execution.parent_span_id, server.span_id);
    assert_eq!(store.trace_id, server.trace_id);
    println!(
        "spans: {:?}",
        receiver
            .spans()
            .iter()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exports_spans_over_http_and_grpc() {
    let redis = RedisServer::start();
    let receiver = OtlpReceiver::start().await;
    let http_endpoint = format!("http://{}/v1/traces", receiver.http);
    let svc = start(&[
        ("BACKEND_TYPE", "redis"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", &redis.addr()),
        ("TRACING_EXPORTER_PROTOCOL", "http"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &http_endpoint),
    ]);
    traced_call(&svc).await;
    check_spans(&receiver, "Redis Pipeline Execution").await;
    let store = receiver
        .wait_for("Redis Pipeline Execution", WAIT)
        .await
        .expect("span");
    assert!(
        store
            .attributes
            .iter()
            .any(|(k, v)| k == "pipeline length" && v == "1"),
        "{:?}",
        store.attributes
    );
    drop(svc);

    let receiver = OtlpReceiver::start().await;
    let grpc_endpoint = format!("http://{}", receiver.grpc);
    let svc = start(&[
        ("TRACING_EXPORTER_PROTOCOL", "grpc"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &grpc_endpoint),
        ("BACKEND_TYPE", "redis"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", &redis.addr()),
    ]);
    traced_call(&svc).await;
    check_spans(&receiver, "Redis Pipeline Execution").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_json_bridge_has_its_span() {
    let receiver = OtlpReceiver::start().await;
    let endpoint = format!("http://{}/v1/traces", receiver.http);
    let svc = start(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &endpoint)]);
    let body = br#"{"domain":"tr","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}"#;
    assert_eq!(svc.http("POST", "/json", body).status, 200);
    let span = receiver
        .wait_for("NewJsonHandler Remaining Execution", WAIT)
        .await
        .expect("the /json span");
    assert!(
        span.attributes
            .iter()
            .any(|(k, v)| k == "response" && v == "Ok"),
        "{:?}",
        span.attributes
    );
    assert_eq!(span.service_name, "rl-under-test");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_b3_trace_is_continued_too() {
    let receiver = OtlpReceiver::start().await;
    let endpoint = format!("http://{}/v1/traces", receiver.http);
    let svc = start(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &endpoint)]);
    let mut c = svc.client().await;
    let mut req = tonic::Request::new(request("tr", vec![desc(&[("k", "v")])]));
    req.metadata_mut().insert(
        "b3",
        format!("{TRACE_ID}-00f067aa0ba902b7-1")
            .parse()
            .expect("header"),
    );
    c.should_rate_limit(req).await.expect("answered");
    let server = receiver
        .wait_for(
            "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
            WAIT,
        )
        .await
        .expect("the server span");
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    assert_eq!(hex(&server.trace_id), TRACE_ID);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_collector_does_not_slow_the_requests() {
    // A port nobody listens on.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
    let endpoint = format!("http://{}/v1/traces", dead.local_addr().expect("addr"));
    drop(dead);
    let svc = start(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &endpoint)]);
    let mut c = svc.client().await;
    let started = Instant::now();
    for _ in 0..500 {
        call(&mut c, request("tr", vec![desc(&[("k", "v")])]))
            .await
            .expect("answered");
    }
    let took = started.elapsed();
    println!("500 traced requests with the collector down: {took:?}");
    // Loose: an exporter on the request path would wait out its 10 s
    // timeout per batch.
    assert!(took < Duration::from_secs(10), "{took:?}");
}

#[test]
fn an_unknown_exporter_protocol_stops_start_up() {
    let err = refused_start(
        &[],
        &[
            ("BACKEND_TYPE", "memory"),
            ("TRACING_ENABLED", "true"),
            ("TRACING_EXPORTER_PROTOCOL", "carrier-pigeon"),
        ],
    );
    assert!(err.contains("TRACING_EXPORTER_PROTOCOL"), "{err}");
}
