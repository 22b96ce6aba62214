//! The xDS config provider (`CONFIG_TYPE=GRPC_XDS_SOTW`) against the test
//! ADS server of the support (a real gRPC server on loopback that records
//! every DiscoveryRequest): the first load, an update without restart, the
//! NACK of a bad resource with the last good config kept, reconnection
//! after the server restarts, TLS both ways, and the environment Envoy
//! Gateway starts the container with, verbatim.

// Tests and the load tool measure the real elapsed time of real processes.
#![allow(clippy::disallowed_types)]

use crate::support;

use std::time::Duration;

use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use envoy_types::pb::google::protobuf::Any;
use ratelimit::config::xds::proto::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};
use ratelimit::config::xds::TYPE_URL;
use support::certs::{ca, leaf, tls_client};
use support::otlp::OtlpReceiver;
use support::redis::{has_setpriv, RedisServer};
use support::xds::{AdsServer, AdsTls};
use support::*;

const WAIT: Duration = Duration::from_secs(15);

/// `domain` with one descriptor `key` limited to `n` per hour.
fn config(name: &str, domain: &str, key: &str, n: u32) -> RateLimitConfig {
    RateLimitConfig {
        name: name.into(),
        domain: domain.into(),
        descriptors: vec![RateLimitDescriptor {
            key: key.into(),
            rate_limit: Some(RateLimitPolicy {
                unit: RateLimitUnit::Hour as i32,
                requests_per_unit: n,
                ..RateLimitPolicy::default()
            }),
            ..RateLimitDescriptor::default()
        }],
    }
}

fn xds_env(ads: &AdsServer) -> Vec<(String, String)> {
    vec![
        ("CONFIG_TYPE".into(), "GRPC_XDS_SOTW".into()),
        ("CONFIG_GRPC_XDS_SERVER_URL".into(), ads.addr.to_string()),
        ("CONFIG_GRPC_XDS_NODE_ID".into(), "test-node".into()),
        (
            "CONFIG_GRPC_XDS_NODE_METADATA".into(),
            "zone=a,team=rl".into(),
        ),
        (
            "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS".into(),
            "x-tenant:blue".into(),
        ),
        ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL".into(), "100ms".into()),
        ("XDS_CLIENT_BACKOFF_MAX_INTERVAL".into(), "500ms".into()),
    ]
}

fn start(env: &[(String, String)]) -> Service {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Service::start(&[], &env)
}

/// The code of one request for `(key, "")` in `domain`.
async fn code(svc: &Service, domain: &str, key: &str) -> Result<i32, tonic::Status> {
    let mut c = svc.client().await;
    call(&mut c, request(domain, vec![desc(&[(key, "")])]))
        .await
        .map(|r| r.overall_code)
}

fn acks(ads: &AdsServer, version: &str) -> Vec<DiscoveryRequest> {
    ads.requests()
        .into_iter()
        .filter(|r| {
            r.version_info == version && r.error_detail.is_none() && !r.response_nonce.is_empty()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loads_updates_nacks_and_keeps_the_last_good_config() {
    let ads = AdsServer::start(None).await;
    ads.publish("v1", &[config("one", "xd", "k", 2)]).await;
    let svc = start(&xds_env(&ads));

    // The first load: listening only after it.
    assert_eq!(code(&svc, "xd", "k").await.expect("answer"), OK);
    assert_eq!(code(&svc, "xd", "k").await.expect("answer"), OK);
    assert_eq!(code(&svc, "xd", "k").await.expect("answer"), OVER);
    let first = &ads.requests()[0];
    assert_eq!(first.type_url, TYPE_URL);
    assert_eq!(
        (first.version_info.as_str(), first.response_nonce.as_str()),
        ("", "")
    );
    assert!(first.resource_names.is_empty(), "wildcard");
    let node = first.node.as_ref().expect("node");
    assert_eq!(node.id, "test-node");
    let fields = &node.metadata.as_ref().expect("metadata").fields;
    assert_eq!(fields.len(), 2);
    assert!(fields.contains_key("zone") && fields.contains_key("team"));
    let md = &ads.stream_metadata()[0];
    assert_eq!(
        md.get("x-tenant").and_then(|v| v.to_str().ok()),
        Some("blue")
    );
    assert!(
        ads.wait_for(WAIT, |r| r.version_info == "v1")
            .await
            .is_some(),
        "ACK v1"
    );
    assert!(svc
        .debug("/rlconfig")
        .body
        .contains("xd.k: unit=HOUR requests_per_unit=2"));

    // An update, without restart.
    ads.publish(
        "v2",
        &[config("one", "xd", "k", 2), config("two", "other", "j", 5)],
    )
    .await;
    assert!(
        ads.wait_for(WAIT, |r| r.version_info == "v2")
            .await
            .is_some(),
        "ACK v2"
    );
    assert_eq!(code(&svc, "other", "j").await.expect("answer"), OK);
    let ack = acks(&ads, "v2").pop().expect("ack");
    assert!(!ack.response_nonce.is_empty());

    // A bad resource: NACKed with the loader's text, v2 stays live.
    let mut bad = config("broken", "xd", "k", 1);
    bad.descriptors[0].rate_limit.as_mut().expect("policy").unit = RateLimitUnit::Unknown as i32;
    ads.publish("v3", &[bad]).await;
    let nack = ads
        .wait_for(WAIT, |r| r.error_detail.is_some())
        .await
        .expect("NACK");
    assert_eq!(
        nack.version_info, "v2",
        "a NACK names the last good version"
    );
    assert_eq!(
        nack.error_detail.as_ref().map(|e| e.message.as_str()),
        Some("broken: invalid rate limit unit 'UNKNOWN'")
    );
    assert_eq!(
        code(&svc, "other", "j").await.expect("answer"),
        OK,
        "v2 still live"
    );
    assert!(svc.stat("ratelimit.service.config_load_error") >= 1);
    assert!(svc.stat("ratelimit.service.config_load_success") >= 2);

    // A resource that does not unpack is NACKed too.
    ads.publish_any(
        "v4",
        vec![Any {
            type_url: TYPE_URL.into(),
            value: vec![0xff, 0xff, 0xff],
        }],
    )
    .await;
    let nack = ads
        .wait_for(WAIT, |r| {
            r.error_detail
                .as_ref()
                .is_some_and(|e| e.message.contains("failed to unpack"))
        })
        .await
        .expect("NACK of v4");
    assert_eq!(nack.version_info, "v2");
    assert_eq!(code(&svc, "other", "j").await.expect("answer"), OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnects_after_the_server_restarts() {
    let mut ads = AdsServer::start(None).await;
    ads.publish("v1", &[config("one", "xd", "k", 100)]).await;
    let svc = start(&xds_env(&ads));
    assert_eq!(code(&svc, "xd", "k").await.expect("answer"), OK);
    ads.wait_for(WAIT, |r| r.version_info == "v1")
        .await
        .expect("ACK");
    let before = ads.requests().len();

    ads.restart().await;
    // The new stream's first request repeats the last ACKed version.
    let deadline = std::time::Instant::now() + WAIT;
    while ads.requests().len() <= before && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(ads.requests().len() > before, "redialed");
    let reopened = &ads.requests()[before];
    assert_eq!(reopened.version_info, "v1");
    assert!(!reopened.response_nonce.is_empty());
    // Served meanwhile from the last good config, then updated.
    assert_eq!(code(&svc, "xd", "k").await.expect("answer"), OK);
    ads.publish("v2", &[config("one", "new", "k", 100)]).await;
    ads.wait_for(WAIT, |r| r.version_info == "v2")
        .await
        .expect("ACK v2");
    assert_eq!(code(&svc, "new", "k").await.expect("answer"), OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_above_the_max_message_size_is_not_taken() {
    let ads = AdsServer::start(None).await;
    let many: Vec<RateLimitConfig> = (0..50)
        .map(|i| config(&format!("r{i}"), &format!("d{i}"), "k", 1))
        .collect();
    ads.publish("big", &many).await;
    let mut env = xds_env(&ads);
    env.extend([
        ("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES".into(), "200".into()),
        ("FORCE_START_WITHOUT_INITIAL_CONFIG".into(), "true".into()),
    ]);
    let svc = start(&env);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        ads.requests().iter().all(|r| r.version_info.is_empty()),
        "never ACKed"
    );
    let err = code(&svc, "d0", "k").await.expect_err("no config");
    assert!(
        err.message().contains("no rate limit configuration loaded"),
        "{err:?}"
    );
    // Within the size, the same server's config loads.
    ads.publish("small", &[config("r", "d0", "k", 1)]).await;
    ads.wait_for(WAIT, |r| r.version_info == "small")
        .await
        .expect("ACK");
    assert_eq!(code(&svc, "d0", "k").await.expect("answer"), OK);
}

/// PEM files in a directory any user can read (the service may run as
/// 65534).
struct Certs {
    dir: tempfile::TempDir,
    ca_pem: String,
    client: (String, String),
}

impl Certs {
    fn new() -> Certs {
        let dir = tempfile::tempdir().expect("tempdir");
        let authority = ca("test ca");
        let server = leaf(&authority, &["localhost", "127.0.0.1"]);
        let client = leaf(&authority, &["client"]);
        for (name, text) in [
            ("ca.crt", authority.cert_pem.as_str()),
            ("tls.crt", server.0.as_str()),
            ("tls.key", server.1.as_str()),
        ] {
            std::fs::write(dir.path().join(name), text).expect("pem");
        }
        set_mode(dir.path(), 0o755);
        for name in ["ca.crt", "tls.crt", "tls.key"] {
            set_mode(&dir.path().join(name), 0o644);
        }
        Certs {
            dir,
            ca_pem: authority.cert_pem,
            client,
        }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    fn server_tls(&self) -> AdsTls {
        AdsTls {
            cert_pem: std::fs::read_to_string(self.path("tls.crt")).expect("cert"),
            key_pem: std::fs::read_to_string(self.path("tls.key")).expect("key"),
            client_ca_pem: self.ca_pem.clone(),
        }
    }
}

fn set_mode(path: &std::path::Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_to_the_management_server_with_a_client_certificate() {
    let certs = Certs::new();
    let ads = AdsServer::start(Some(certs.server_tls())).await;
    ads.publish("v1", &[config("one", "xd", "k", 10)]).await;
    let mut env = xds_env(&ads);
    env.extend([
        (
            "CONFIG_GRPC_XDS_SERVER_URL".into(),
            format!("localhost:{}", ads.addr.port()),
        ),
        ("CONFIG_GRPC_XDS_SERVER_USE_TLS".into(), "true".into()),
        (
            "CONFIG_GRPC_XDS_CLIENT_TLS_CERT".into(),
            certs.path("tls.crt"),
        ),
        (
            "CONFIG_GRPC_XDS_CLIENT_TLS_KEY".into(),
            certs.path("tls.key"),
        ),
        (
            "CONFIG_GRPC_XDS_SERVER_TLS_CACERT".into(),
            certs.path("ca.crt"),
        ),
    ]);
    let svc = start(&env);
    assert_eq!(code(&svc, "xd", "k").await.expect("answer"), OK);

    // Without a client certificate the server refuses the stream: no
    // config, so the service never opens its listeners.
    let ads_b = AdsServer::start(Some(certs.server_tls())).await;
    ads_b.publish("v1", &[config("one", "xd", "k", 10)]).await;
    let mut env = xds_env(&ads_b);
    env.extend([
        (
            "CONFIG_GRPC_XDS_SERVER_URL".into(),
            format!("localhost:{}", ads_b.addr.port()),
        ),
        ("CONFIG_GRPC_XDS_SERVER_USE_TLS".into(), "true".into()),
        (
            "CONFIG_GRPC_XDS_SERVER_TLS_CACERT".into(),
            certs.path("ca.crt"),
        ),
        ("FORCE_START_WITHOUT_INITIAL_CONFIG".into(), "true".into()),
    ]);
    let refused = start(&env);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        ads_b.requests().is_empty(),
        "no stream without a client certificate"
    );
    let err = code(&refused, "xd", "k").await.expect_err("no config");
    assert!(
        err.message().contains("no rate limit configuration loaded"),
        "{err:?}"
    );
}

/// The container as Envoy Gateway's rate limit Deployment starts it, with
/// exactly its environment (paths made by the test), as uid 65534 where
/// this machine can switch users.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_and_serves_with_the_environment_envoy_gateway_sets() {
    let certs = Certs::new();
    let ads = AdsServer::start(Some(certs.server_tls())).await;
    ads.publish("1", &[config("default/policy", "gateway", "k", 1)])
        .await;
    let redis = RedisServer::start();
    let otlp = OtlpReceiver::start().await;
    let prom = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
    let prom_port = prom.local_addr().expect("addr").port();
    drop(prom);
    let env: Vec<(String, String)> = [
        ("RUNTIME_ROOT", "/data".to_string()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit".into()),
        ("RUNTIME_IGNOREDOTFILES", "true".into()),
        ("RUNTIME_WATCH_ROOT", "false".into()),
        ("LOG_LEVEL", "info".into()),
        ("USE_STATSD", "false".into()),
        ("CONFIG_TYPE", "GRPC_XDS_SOTW".into()),
        (
            "CONFIG_GRPC_XDS_SERVER_URL",
            format!("localhost:{}", ads.addr.port()),
        ),
        ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit".into()),
        ("GRPC_SERVER_USE_TLS", "true".into()),
        ("GRPC_SERVER_TLS_CERT", certs.path("tls.crt")),
        ("GRPC_SERVER_TLS_KEY", certs.path("tls.key")),
        ("GRPC_SERVER_TLS_CA_CERT", certs.path("ca.crt")),
        ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true".into()),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", certs.path("tls.crt")),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", certs.path("tls.key")),
        ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", certs.path("ca.crt")),
        ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true".into()),
        ("REDIS_SOCKET_TYPE", "tcp".into()),
        ("REDIS_URL", redis.addr()),
        ("USE_PROMETHEUS", "true".into()),
        ("PROMETHEUS_ADDR", format!("127.0.0.1:{prom_port}")),
        (
            "PROMETHEUS_MAPPER_YAML",
            "/etc/statsd-exporter/conf.yaml".into(),
        ),
        ("TRACING_ENABLED", "true".into()),
        ("TRACING_SERVICE_NAME", "envoy-ratelimit".into()),
        ("TRACING_SERVICE_NAMESPACE", "envoy-gateway-system".into()),
        (
            "TRACING_SERVICE_INSTANCE_ID",
            "envoy-ratelimit-6c9f8b7d5-x2x4q".into(),
        ),
        ("TRACING_SAMPLING_RATE", "1".into()),
        (
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            format!("http://{}/v1/traces", otlp.http),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let as_nobody = [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
    ];
    let nobody = has_setpriv() && unsafe_is_root();
    let wrapper: &[&str] = if nobody { &as_nobody } else { &[] };
    println!("running as uid {}", if nobody { 65534 } else { 0 });
    let svc = Service::start_via(wrapper, &[], &env);
    ads.wait_for(WAIT, |r| r.version_info == "1")
        .await
        .expect("ACK");
    let mut client = tls_client(svc.grpc, &certs.ca_pem, Some(&certs.client))
        .await
        .expect("TLS client");
    let mut codes = Vec::new();
    for _ in 0..2 {
        let r = call(&mut client, request("gateway", vec![desc(&[("k", "")])]))
            .await
            .expect("answered");
        codes.push(r.overall_code);
    }
    assert_eq!(codes, [OK, OVER], "counted on Redis");
    // The mapper file is missing: served with no mappings, as the original.
    let metrics = http_get(prom_port, "/metrics");
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    assert!(metrics.contains("total_hits"), "{metrics}");
    let span = otlp.wait_for("ShouldRateLimit Execution", WAIT).await;
    let log: Vec<String> = svc.log.try_iter().collect();
    let span = span.unwrap_or_else(|| {
        panic!(
            "no span at the collector ({:?}); the log:\n{}",
            otlp.spans(),
            log.join("\n")
        )
    });
    assert_eq!(span.service_name, "envoy-ratelimit");
}

fn unsafe_is_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn http_get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .expect("write");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}
