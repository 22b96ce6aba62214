//! The service run in-process through [`run`]: what its `ready` hook
//! promises (every listener open, the first config already live) and how a
//! shutdown signal ends it (`run` returns and the ports close).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{run, BoundAddrs, ShutdownTimings, Signal};
use crate::metrics::MetricsOptions;
use crate::settings::{MapSource, Settings};

const CONFIG: &str = "domain: app\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: hour\n      requests_per_unit: 1\n";

/// One HTTP/1.1 request on a fresh connection: the status line's code and
/// the body.
async fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.expect("connects");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("writes");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.expect("reads");
    let code = answer
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, body)
}

fn settings(root: &std::path::Path) -> Settings {
    let mut vars = MapSource::new();
    for (k, v) in [
        ("BACKEND_TYPE", "memory"),
        ("USE_STATSD", "false"),
        ("RUNTIME_ROOT", root.to_str().unwrap_or_default()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("RUNTIME_WATCH_ROOT", "false"),
        ("HOST", "127.0.0.1"),
        ("PORT", "0"),
        ("GRPC_HOST", "127.0.0.1"),
        ("GRPC_PORT", "0"),
        ("DEBUG_HOST", "127.0.0.1"),
        ("DEBUG_PORT", "0"),
    ] {
        vars.insert(k, v);
    }
    Settings::from_source(&vars).expect("valid settings")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_comes_with_every_port_open_and_the_first_config_live_and_a_signal_ends_the_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("ratelimit").join("config");
    std::fs::create_dir_all(&config).expect("config dir");
    std::fs::write(config.join("app.yaml"), CONFIG).expect("config file");
    let (_, metrics) = crate::metrics::build(MetricsOptions {
        disable_stats: true,
        ..MetricsOptions::default()
    })
    .expect("metrics");
    let (ready_tx, ready) = tokio::sync::oneshot::channel::<BoundAddrs>();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let service = tokio::spawn(run(
        settings(dir.path()),
        ShutdownTimings {
            drain: Duration::ZERO,
            deadline: Duration::from_secs(5),
        },
        metrics,
        Some(ready_tx),
        async move {
            let _ = stopped.await;
            Signal::Interrupt
        },
    ));
    let addrs = tokio::time::timeout(Duration::from_secs(20), ready)
        .await
        .expect("ready within 20 s")
        .expect("ready is sent");

    // Every port answers at once, and the first request is decided by the
    // config: it was loaded before any listener opened.
    let grpc = addrs.grpc.expect("a TCP gRPC listener");
    assert!(TcpStream::connect(grpc).await.is_ok(), "gRPC port open");
    assert_eq!(http(addrs.http, "GET", "/healthcheck", "").await.0, 200);
    let (code, rlconfig) = http(addrs.debug, "GET", "/rlconfig", "").await;
    assert_eq!(code, 200);
    assert!(rlconfig.contains("app.k"), "the rule is live: {rlconfig}");
    let request = r#"{"domain":"app","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}"#;
    let (first, body) = http(addrs.http, "POST", "/json", request).await;
    assert_eq!((first, body.contains("\"OK\"")), (200, true), "{body}");
    let (second, body) = http(addrs.http, "POST", "/json", request).await;
    assert_eq!(
        (second, body.contains("OVER_LIMIT")),
        (429, true),
        "the second of 1 per hour: {body}"
    );

    // The signal ends the run, and the ports with it.
    let _ = stop.send(());
    let ended = tokio::time::timeout(Duration::from_secs(10), service)
        .await
        .expect("run returns within the shutdown deadline")
        .expect("run's task");
    assert!(ended.is_ok(), "{ended:?}");
    for addr in [grpc, addrs.http, addrs.debug] {
        assert!(TcpStream::connect(addr).await.is_err(), "{addr} closed");
    }
}
