//! The no-op rate limit service (`noop`, and the child `compare` starts):
//! it answers OK at once, one status per descriptor, on the service's own
//! gRPC edge, so that it measures the gRPC stack's ceiling.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::{
    rate_limit_service_server::{RateLimitService, RateLimitServiceServer},
    RateLimitRequest, RateLimitResponse,
};

use ratelimit::go::cli::FlagSet;

use super::flags::{parse_duration, parse_flags, string_flag, LoadConfig};
use super::{Failure, MIN_NOOP_LIFE};

#[derive(Debug, Default)]
struct Noop {
    served: Arc<AtomicU64>,
}

#[tonic::async_trait]
impl RateLimitService for Noop {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        self.served.fetch_add(1, Ordering::Relaxed);
        let status = DescriptorStatus {
            code: Code::Ok as i32,
            ..Default::default()
        };
        Ok(tonic::Response::new(RateLimitResponse {
            overall_code: Code::Ok as i32,
            statuses: vec![status; request.get_ref().descriptors.len()],
            ..Default::default()
        }))
    }
}

/// Serves the no-op service on `listener` until `shutdown` completes, on
/// the service's own gRPC edge (one single-threaded runtime per core, see
/// `ratelimit::service::grpc::edge`), so the ceiling it measures is the service's
/// gRPC stack's.
async fn serve_noop(
    listener: tokio::net::TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    served: Arc<AtomicU64>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), Failure> {
    use ratelimit::service::grpc::edge;
    let router: Arc<dyn Fn() -> edge::Router + Send + Sync> = Arc::new(move || {
        tonic::transport::Server::builder()
            .layer(ratelimit::service::grpc::metrics::GrpcMetricsLayer)
            .add_service(RateLimitServiceServer::new(Noop {
                served: Arc::clone(&served),
            }))
    });
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    // GRPC_WORKERS as the service reads it (a number; 0: the shared
    // runtime), one per core by default: the memory store's default.
    let workers = std::env::var("GRPC_WORKERS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or_else(edge::cores);
    let fatal = |e: &dyn std::fmt::Display| Failure::Fatal(format!("no-op server: {e}"));
    let listener = edge::GrpcListener::Tcp(listener);
    // The service's defaults, so the ceiling pays what the service pays.
    let admission = Arc::new(ratelimit::service::grpc::admit::Admission::new(
        ratelimit::service::grpc::admit::default_max_connections(1024),
        Duration::from_secs(5),
    ));
    let served = match workers {
        0 => {
            edge::serve_shared(listener, tls, router(), admission, stop_rx)
                .map_err(|e| fatal(&e))?
                .await
        }
        n => {
            let workers = ratelimit::platform::workers::Workers::start(n).map_err(|e| fatal(&e))?;
            edge::serve(&workers, listener, tls, router, admission, stop_rx)
                .map_err(|e| fatal(&e))?
                .await
        }
    };
    served.map_err(|e| fatal(&e))
}

pub(crate) struct NoopOptions {
    listen: String,
    duration: Duration,
    tls: Option<Arc<rustls::ServerConfig>>,
}

pub(crate) fn parse_noop(args: &[String]) -> Result<NoopOptions, Failure> {
    let set = FlagSet::new(
        "noop",
        vec![
            string_flag("listen", "127.0.0.1:8081"),
            string_flag("duration", "0"),
            string_flag("tls-cert", ""),
            string_flag("tls-key", ""),
            string_flag("tls-client-ca", ""),
        ],
    );
    let p = parse_flags(&set, args)?;
    let duration = parse_duration(&p.string(&set, "duration")).map_err(Failure::Usage)?;
    let (cert, key, client_ca) = (
        p.string(&set, "tls-cert"),
        p.string(&set, "tls-key"),
        p.string(&set, "tls-client-ca"),
    );
    let tls = match (cert.is_empty(), key.is_empty()) {
        (true, true) if client_ca.is_empty() => None,
        (false, false) => Some(tls_acceptor(&cert, &key, &client_ca)?),
        _ => {
            return Err(Failure::Usage(
                "--tls-cert and --tls-key go together (and --tls-client-ca needs them)".into(),
            ))
        }
    };
    Ok(NoopOptions {
        listen: p.string(&set, "listen"),
        duration,
        tls,
    })
}

/// The TLS side of `noop --tls-cert`: rustls with ring, ALPN h2, optional
/// client certificates.
fn tls_acceptor(
    cert: &str,
    key: &str,
    client_ca: &str,
) -> Result<Arc<rustls::ServerConfig>, Failure> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let fatal = |what: &str, e: &dyn std::fmt::Display| Failure::Fatal(format!("{what}: {e}"));
    let chain = CertificateDer::pem_file_iter(cert)
        .map_err(|e| fatal(cert, &e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fatal(cert, &e))?;
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| fatal(key, &e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| fatal("tls", &e))?;
    let builder = if client_ca.is_empty() {
        builder.with_no_client_auth()
    } else {
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(client_ca).map_err(|e| fatal(client_ca, &e))? {
            roots
                .add(c.map_err(|e| fatal(client_ca, &e))?)
                .map_err(|e| fatal(client_ca, &e))?;
        }
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| fatal(client_ca, &e))?;
        builder.with_client_cert_verifier(verifier)
    };
    let mut config = builder
        .with_single_cert(chain, key_der)
        .map_err(|e| fatal(cert, &e))?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

pub(crate) fn noop_command(options: NoopOptions) -> Result<(), Failure> {
    // The main runtime accepts, as the service's does; the workers serve.
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Fatal(format!("cannot start the runtime: {e}")))?
        .block_on(async move {
            let listener = tokio::net::TcpListener::bind(&options.listen)
                .await
                .map_err(|e| Failure::Fatal(format!("cannot listen on {}: {e}", options.listen)))?;
            let addr = listener
                .local_addr()
                .map_err(|e| Failure::Fatal(format!("cannot read the bound address: {e}")))?;
            out!("listening on {addr}");
            let served = Arc::new(AtomicU64::new(0));
            let limit = options.duration;
            let shutdown = async move {
                let deadline = async {
                    if limit.is_zero() {
                        std::future::pending::<()>().await;
                    } else {
                        tokio::time::sleep(limit).await;
                    }
                };
                tokio::select! {
                    () = deadline => {}
                    () = signal() => {}
                }
            };
            serve_noop(listener, options.tls, Arc::clone(&served), shutdown).await?;
            out!("served {} requests", served.load(Ordering::Relaxed));
            Ok(())
        })
}

/// Completes on SIGINT or SIGTERM (never if the handlers cannot be set).
async fn signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(mut int), Ok(mut term)) => {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
        }
        _ => std::future::pending().await,
    }
}

/// The no-op server of `compare`: this binary's `noop` in a child process,
/// so that it runs like the target does (its own process, allocator and
/// runtime). Killed when dropped.
pub(crate) struct NoopChild {
    child: std::process::Child,
    /// Where it listens.
    pub(crate) addr: String,
    // Kept open so the child never writes into a closed pipe.
    _stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl NoopChild {
    pub(crate) fn start(config: &LoadConfig) -> Result<NoopChild, Failure> {
        use std::io::BufRead as _;
        let fatal = |e: std::io::Error| Failure::Fatal(format!("no-op server: {e}"));
        // Outlives the load even if this process is killed before it ends it.
        let lifetime =
            (config.warmup + config.duration + config.timeout) * 2 * config.rounds + MIN_NOOP_LIFE;
        let mut child = std::process::Command::new(std::env::current_exe().map_err(fatal)?)
            .args(["noop", "--listen", "127.0.0.1:0", "--duration"])
            .arg(format!("{}ms", lifetime.as_millis()))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .map_err(fatal)?;
        let Some(stdout) = child.stdout.take() else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Failure::Fatal("no-op server: no standard output".into()));
        };
        let mut reader = std::io::BufReader::new(stdout);
        let mut line = String::new();
        let read = reader.read_line(&mut line);
        let mut noop = NoopChild {
            child,
            addr: String::new(),
            _stdout: reader,
        };
        read.map_err(fatal)?;
        match line.trim().strip_prefix("listening on ") {
            Some(addr) => noop.addr = addr.to_string(),
            None => {
                return Err(Failure::Fatal(format!(
                    "no-op server did not start (said {line:?})"
                )))
            }
        }
        Ok(noop)
    }
}

impl Drop for NoopChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
