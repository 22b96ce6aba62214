//! Test support, shared by the integration tests and the chaos soak
//! (workspace members, so it is compiled once): the real `ratelimit` binary
//! on free loopback ports, with a runtime directory of its own; Redis
//! (single, sentinel, cluster), memcached and Envoy processes; small gRPC
//! and HTTP clients.

// The test support measures the real elapsed time of real processes.
#![allow(clippy::disallowed_types)]
#![allow(dead_code)]

pub mod accuracy;
pub mod certs;
pub mod dns;
pub mod envoy;
pub mod envoy_quota;
pub mod memcached;
pub mod otlp;
pub mod redis;
pub mod upstream;
pub mod xds;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::{Entry, RateLimitOverride},
    RateLimitDescriptor,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::{
    rate_limit_service_client::RateLimitServiceClient, RateLimitRequest, RateLimitResponse,
};
use envoy_types::pb::google::protobuf::UInt64Value;

/// A gRPC client of the service's `RateLimitService`.
pub type Client = RateLimitServiceClient<tonic::transport::Channel>;

/// A status's or a response's `code` as the wire carries it: allowed.
pub const OK: i32 = Code::Ok as i32;
/// Refused.
pub const OVER: i32 = Code::OverLimit as i32;

/// The service binary under test: `RATELIMIT_TEST_BINARY` (to run a test
/// against another build, e.g. an earlier commit's for a before-and-after),
/// or this build's, beside the running test or tool in the target
/// directory (cargo builds it for the service crate's integration tests;
/// the soak's script builds it first).
pub fn binary() -> PathBuf {
    std::env::var_os("RATELIMIT_TEST_BINARY").map_or_else(|| built("ratelimit"), Into::into)
}

/// `name`, built in the profile directory of the running executable
/// (`target/<profile>/`, whether it runs from there or from its `deps/`).
pub fn built(name: &str) -> PathBuf {
    let path = profile_dir().join(name);
    assert!(
        path.exists(),
        "{} is not built: `cargo build --workspace --bins` (scripts/test.sh does it)",
        path.display()
    );
    path
}

/// Scratch space under the target directory (`target/tmp`), for what a
/// test or the soak keeps after it ends.
pub fn target_tmp() -> PathBuf {
    let mut dir = profile_dir();
    dir.pop();
    dir.join("tmp")
}

/// `target/<profile>/` of the running executable, whether it runs from
/// there or from its `deps/`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the running executable's path");
    let mut dir = exe.parent().expect("a directory").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir
}

/// The load tool `ratelimit-bench` (the workspace member `bench/`):
/// `RATELIMIT_TEST_BENCH`, or this build's.
pub fn bench_binary() -> PathBuf {
    std::env::var_os("RATELIMIT_TEST_BENCH").map_or_else(|| built("ratelimit-bench"), Into::into)
}

/// The machine's one turn for the tests that time answers against a short
/// deadline, count per second, or load both cores: no two of them run at
/// once in the one integration binary, where each would be the other's
/// noise. A plain test takes it with [`one_at_a_time`], an async one with
/// [`one_at_a_time_async`].
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Waits for the machine's turn (see [`TURN`]), from a plain test (never
/// from inside a runtime).
pub fn one_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    TURN.blocking_lock()
}

/// [`one_at_a_time`], from an async test.
pub async fn one_at_a_time_async() -> tokio::sync::MutexGuard<'static, ()> {
    TURN.lock().await
}

/// A running service. Killed (and its directory removed) on drop.
pub struct Service {
    child: Child,
    pub dir: tempfile::TempDir,
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    pub debug: SocketAddr,
    pub log: mpsc::Receiver<String>,
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where config files go: `<runtime>/current/ratelimit/config`.
pub fn config_dir(root: &Path) -> PathBuf {
    root.join("current").join("ratelimit").join("config")
}

impl Service {
    /// Starts the binary with `files` (name, YAML) in its config directory
    /// and `env` on top of test defaults (memory store, ports 0, loopback).
    pub fn start(files: &[(&str, &str)], env: &[(&str, &str)]) -> Service {
        Service::start_via(&[], files, env)
    }

    /// [`Service::start`] with the binary run by `wrapper` (a command and
    /// its arguments, e.g. `setpriv` to change user), if not empty.
    pub fn start_via(wrapper: &[&str], files: &[(&str, &str)], env: &[(&str, &str)]) -> Service {
        let dir = tempfile::tempdir().expect("tempdir");
        let cfg = config_dir(dir.path());
        std::fs::create_dir_all(&cfg).expect("config dir");
        for (name, text) in files {
            std::fs::write(cfg.join(name), text).expect("config file");
        }
        let mut cmd = match wrapper.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(binary());
                c
            }
            None => Command::new(binary()),
        };
        cmd.env_clear()
            .env("BACKEND_TYPE", "memory")
            .env("USE_STATSD", "false")
            .env("RUNTIME_ROOT", dir.path().join("current"))
            .env("RUNTIME_SUBDIRECTORY", "ratelimit")
            .env("RUNTIME_WATCH_ROOT", "false")
            .env("HOST", "127.0.0.1")
            .env("PORT", "0")
            .env("GRPC_HOST", "127.0.0.1")
            .env("GRPC_PORT", "0")
            .env("DEBUG_HOST", "127.0.0.1")
            .env("DEBUG_PORT", "0")
            .env("LOG_LEVEL", "info")
            // Tests that count exactly must not turn a busy test machine's
            // slow Redis answer into a failure; the fault tests set the
            // production deadline (50 ms) themselves.
            .env("STORE_TIMEOUT", "10s");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("ratelimit binary starts");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let (mut grpc, mut http, mut debug) = (None, None, None);
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut seen = Vec::new();
        while grpc.is_none() || http.is_none() || debug.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = rx.recv_timeout(left).unwrap_or_else(|_| {
                panic!(
                    "service did not report its listeners in time; its log:\n{}",
                    seen.join("\n")
                )
            });
            seen.push(line.clone());
            let addr = |what: &str| -> Option<SocketAddr> {
                let marker = format!("Listening for {what} on '");
                let start = line.find(&marker)? + marker.len();
                let end = line[start..].find('\'')? + start;
                line[start..end].parse().ok()
            };
            grpc = grpc.or_else(|| addr("gRPC")).or_else(|| {
                // gRPC on a unix socket: no TCP address to report.
                line.contains("Listening for gRPC on unix socket")
                    .then(|| SocketAddr::from(([0, 0, 0, 0], 0)))
            });
            http = http.or_else(|| addr("HTTP"));
            debug = debug.or_else(|| addr("debug"));
        }
        Service {
            child,
            dir,
            grpc: grpc.expect("grpc"),
            http: http.expect("http"),
            debug: debug.expect("debug"),
            log: rx,
        }
    }

    /// The config directory of this service.
    pub fn config_dir(&self) -> PathBuf {
        config_dir(self.dir.path())
    }

    /// Sends a signal to the process.
    pub fn signal(&self, sig: &str) {
        let _ = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status();
    }

    /// Waits for the process to exit; its exit code.
    pub fn wait_exit(&mut self, within: Duration) -> Option<i32> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// A gRPC client.
    pub async fn client(&self) -> Client {
        RateLimitServiceClient::connect(format!("http://{}", self.grpc))
            .await
            .expect("grpc connect")
    }

    /// One HTTP/1.1 request to the main port.
    pub fn http(&self, method: &str, path: &str, body: &[u8]) -> HttpResponse {
        http(self.http, method, path, body)
    }

    /// One HTTP/1.1 request to the debug port.
    pub fn debug(&self, path: &str) -> HttpResponse {
        http(self.debug, "GET", path, b"")
    }

    /// The value of a statistic in `/stats` (0 when absent).
    pub fn stat(&self, name: &str) -> u64 {
        stat_in(&self.debug("/stats").body, name)
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Polls `cond` every 50 ms for up to `within` (see [`eventually`]).
    pub fn eventually(&self, within: Duration, cond: impl FnMut() -> bool) -> bool {
        eventually(within, cond)
    }
}

/// Polls `cond` every 50 ms for up to `within`; whether it held.
pub fn eventually(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    cond()
}

/// A parsed HTTP response.
#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A minimal HTTP/1.1 client (connection: close, body read to EOF). A
/// server may answer before the body is sent (413 for a body over the
/// limit) and close: a failed body write or a reset after the answer is
/// not an error here, the answer is what counts.
pub fn http(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> HttpResponse {
    http_with(addr, method, path, &[], body)
}

/// [`http`] with extra request headers.
pub fn http_with(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> HttpResponse {
    let mut s = TcpStream::connect(addr).expect("http connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).expect("write head");
    let sent = s.write_all(body);
    let mut raw = Vec::new();
    let read = s.read_to_end(&mut raw);
    if raw.is_empty() {
        sent.expect("write body");
        read.expect("read response");
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    HttpResponse {
        status,
        headers,
        body: body.to_string(),
    }
}

/// A descriptor from `(key, value)` pairs.
pub fn desc(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

/// A descriptor with a per-descriptor hits addend.
pub fn desc_hits(entries: &[(&str, &str)], hits: u64) -> RateLimitDescriptor {
    RateLimitDescriptor {
        hits_addend: Some(UInt64Value { value: hits }),
        ..desc(entries)
    }
}

/// A descriptor with a limit override.
pub fn desc_override(entries: &[(&str, &str)], rpu: u32, unit: i32) -> RateLimitDescriptor {
    RateLimitDescriptor {
        limit: Some(RateLimitOverride {
            requests_per_unit: rpu,
            unit,
        }),
        ..desc(entries)
    }
}

/// A request.
pub fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_string(),
        descriptors,
        hits_addend: 0,
    }
}

/// Sends one request; the response or the gRPC status.
pub async fn call(
    client: &mut RateLimitServiceClient<tonic::transport::Channel>,
    req: RateLimitRequest,
) -> Result<RateLimitResponse, tonic::Status> {
    client.should_rate_limit(req).await.map(|r| r.into_inner())
}

/// Runs the binary with `files` in its config directory and `env`,
/// expecting it to refuse to start (exit 1, no panic); its stderr.
pub fn refused_start(files: &[(&str, &str)], env: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config_dir(dir.path());
    std::fs::create_dir_all(&cfg).expect("config dir");
    for (name, text) in files {
        std::fs::write(cfg.join(name), text).expect("config file");
    }
    let out = Command::new(binary())
        .env_clear()
        .env("USE_STATSD", "false")
        .env("RUNTIME_ROOT", dir.path().join("current"))
        .env("RUNTIME_SUBDIRECTORY", "ratelimit")
        .env("PORT", "0")
        .env("GRPC_PORT", "0")
        .env("DEBUG_PORT", "0")
        .envs(env.iter().copied())
        .output()
        .expect("binary runs");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

/// Now, in Unix seconds.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

/// Waits until fewer than `margin` seconds remain to the next multiple of
/// `unit` would be crossed, so a short scenario stays in one window.
pub fn wait_for_fresh_window(unit: u64, margin: u64) {
    loop {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock after 1970")
            .as_secs();
        if unit - now % unit > margin {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The value of statistic `name` in a `/stats` text of `name: value` lines,
/// the service's and Envoy's admin alike (0 when absent).
pub fn stat_in(body: &str, name: &str) -> u64 {
    body.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// One raw gRPC call over h2: the `grpc-status` and `grpc-message`.
pub async fn raw_grpc(addr: SocketAddr, framed: Vec<u8>) -> (Option<String>, Option<String>) {
    raw_grpc_with(addr, framed, &[]).await
}

/// [`raw_grpc`] with extra request headers, sent as given (a `grpc-timeout`
/// here is the server's to see; no client-side deadline enforces it).
pub async fn raw_grpc_with(
    addr: SocketAddr,
    framed: Vec<u8>,
    headers: &[(&str, &str)],
) -> (Option<String>, Option<String>) {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (client, conn) = h2::client::handshake(tcp).await.expect("h2 handshake");
    tokio::spawn(conn);
    let mut client = client.ready().await.expect("ready");
    let mut req = http::Request::builder()
        .method("POST")
        .uri(format!(
            "http://{addr}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(()).expect("request");
    let (resp, mut stream) = client.send_request(req, false).expect("send");
    stream
        .send_data(bytes::Bytes::from(framed), true)
        .expect("data");
    let resp = tokio::time::timeout(Duration::from_secs(10), resp)
        .await
        .expect("no stall")
        .expect("response");
    let (parts, mut body) = resp.into_parts();
    let get =
        |h: &http::HeaderMap, k: &str| h.get(k).and_then(|v| v.to_str().ok()).map(str::to_string);
    if let Some(s) = get(&parts.headers, "grpc-status") {
        return (Some(s), get(&parts.headers, "grpc-message"));
    }
    while let Some(chunk) = body.data().await {
        let _ = chunk;
    }
    let trailers = tokio::time::timeout(Duration::from_secs(10), body.trailers())
        .await
        .expect("no stall")
        .expect("trailers")
        .unwrap_or_default();
    (
        get(&trailers, "grpc-status"),
        get(&trailers, "grpc-message"),
    )
}

/// `msg` as one gRPC message whose length prefix says `claimed_len`.
pub fn frame(msg: &[u8], claimed_len: u32) -> Vec<u8> {
    let mut f = vec![0u8];
    f.extend_from_slice(&claimed_len.to_be_bytes());
    f.extend_from_slice(msg);
    f
}
