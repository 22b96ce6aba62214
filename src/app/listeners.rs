//! The ports: the Prometheus port, opened first, and the debug, HTTP and
//! gRPC listeners, opened once the store and the first config are in.

use std::net::SocketAddr;

use tokio::net::{TcpListener, UnixListener};

use super::{AppError, BoundAddrs};
use crate::metrics::MetricsHandle;
use crate::service::grpc::edge::GrpcListener;
use crate::settings::Settings;

/// The Prometheus listener (`USE_PROMETHEUS`); it stops when dropped.
#[derive(Debug)]
pub(super) struct PrometheusListener {
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// Opens the Prometheus port (`PROMETHEUS_ADDR`, `PROMETHEUS_PATH`) when
/// `USE_PROMETHEUS` asks for it, serving `metrics` until the returned
/// listener is dropped.
pub(super) async fn serve_prometheus(
    settings: &Settings,
    metrics: &MetricsHandle,
) -> Result<Option<PrometheusListener>, AppError> {
    if !settings.stats.use_prometheus {
        return Ok(None);
    }
    let addr = crate::metrics::listen_addr(&settings.stats.prometheus_addr);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|source| AppError::Listen {
            what: "Prometheus",
            addr: addr.clone(),
            source,
        })?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (metrics, path) = (metrics.clone(), settings.stats.prometheus_path.clone());
    tokio::spawn(async move {
        let stopped = async {
            let _ = stopped.await;
        };
        if let Err(e) = metrics.serve_prometheus(listener, path, stopped).await {
            tracing::error!("Prometheus listener: {e}");
        }
    });
    Ok(Some(PrometheusListener { _stop: stop }))
}

/// The three listeners, bound.
pub(super) struct Listeners {
    pub(super) debug: TcpListener,
    pub(super) http: TcpListener,
    pub(super) grpc: GrpcListener,
}

impl Listeners {
    /// Binds debug, HTTP and gRPC (TCP or `GRPC_UDS`) and logs where, as
    /// the original does.
    pub(super) async fn bind(
        l: &crate::settings::ListenerSettings,
    ) -> Result<(Listeners, BoundAddrs), AppError> {
        let debug = bind("debug", &l.debug_host, l.debug_port).await?;
        let http = bind("HTTP", &l.host, l.port).await?;
        let grpc = if l.grpc_uds.is_empty() {
            GrpcListener::Tcp(bind("gRPC", &l.grpc_host, l.grpc_port).await?)
        } else {
            GrpcListener::Unix(bind_unix(&l.grpc_uds)?)
        };
        let addrs = BoundAddrs {
            grpc: match &grpc {
                GrpcListener::Tcp(t) => t.local_addr().ok(),
                GrpcListener::Unix(_) => None,
            },
            http: local_addr(&http),
            debug: local_addr(&debug),
        };
        tracing::warn!("Listening for debug on '{}'", addrs.debug);
        match &addrs.grpc {
            Some(a) => tracing::warn!("Listening for gRPC on '{a}'"),
            None => tracing::warn!("Listening for gRPC on unix socket '{}'", l.grpc_uds),
        }
        tracing::warn!("Listening for HTTP on '{}'", addrs.http);
        Ok((Listeners { debug, http, grpc }, addrs))
    }
}

fn local_addr(l: &TcpListener) -> SocketAddr {
    l.local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
}

async fn bind(what: &'static str, host: &str, port: u16) -> Result<TcpListener, AppError> {
    let addr = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    TcpListener::bind(&addr)
        .await
        .map_err(|source| AppError::Listen { what, addr, source })
}

/// A unix socket for gRPC; a stale socket file from an earlier run is
/// removed first (the original fails to start).
fn bind_unix(path: &str) -> Result<UnixListener, AppError> {
    use std::os::unix::fs::FileTypeExt;
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if meta.file_type().is_socket() {
            let _ = std::fs::remove_file(path);
        }
    }
    UnixListener::bind(path).map_err(|source| AppError::Listen {
        what: "gRPC unix socket",
        addr: path.to_string(),
        source,
    })
}
