//! The servers: the gRPC router with its HTTP/2 limits, the gRPC task on
//! its listener (TLS, workers), and how every server ends at shutdown.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::{AppError, MAX_GRPC_MESSAGE};
use crate::engine::Engine;
use crate::platform::workers::Workers;
use crate::service::grpc::admit::Admission;
use crate::service::grpc::edge::GrpcListener;
use crate::service::grpc::rlqs::QuotaService;
use crate::service::grpc::rls::RlsServer;

/// How many request bytes a client may send on one gRPC stream before the
/// server reads them (HTTP/2 `SETTINGS_INITIAL_WINDOW_SIZE`): an RLS
/// request is a few hundred bytes; a larger one is read in turns.
const GRPC_STREAM_WINDOW: u32 = 64 * 1024;

/// How many unread request bytes one gRPC connection may hold in all (the
/// connection's flow-control window; hyper's default is 1 MiB).
const GRPC_CONNECTION_WINDOW: u32 = 256 * 1024;

/// The largest header block a gRPC request may carry
/// (`SETTINGS_MAX_HEADER_LIST_SIZE`).
const GRPC_MAX_HEADER_LIST: u32 = 16 * 1024;

/// The gRPC services (rate limit and health) with grpc-go's server
/// defaults, which the original runs with: a keepalive ping after 2 h idle,
/// answered within 20 s; and at most `GRPC_MAX_CONCURRENT_STREAMS` streams
/// per connection (grpc-go advertises no limit), so a client that never
/// reads its answers holds at most that many of them.
pub(super) fn grpc_router(
    l: &crate::settings::ListenerSettings,
    engine: Arc<Engine>,
    large_lane: Option<tokio::runtime::Handle>,
    quota: QuotaService,
    health_service: tonic_health::pb::health_server::HealthServer<
        impl tonic_health::pb::health_server::Health,
    >,
) -> GrpcRouter {
    tonic::transport::Server::builder()
        .max_connection_age(l.grpc_max_connection_age)
        .max_connection_age_grace(l.grpc_max_connection_age_grace)
        .http2_keepalive_interval(Some(Duration::from_secs(2 * 3600)))
        .http2_keepalive_timeout(Some(Duration::from_secs(20)))
        .max_concurrent_streams(Some(l.grpc_max_concurrent_streams))
        .initial_stream_window_size(GRPC_STREAM_WINDOW)
        .initial_connection_window_size(GRPC_CONNECTION_WINDOW)
        .http2_max_header_list_size(GRPC_MAX_HEADER_LIST)
        .layer(crate::service::grpc::metrics::GrpcMetricsLayer)
        .add_service(RlsServer::new(engine, MAX_GRPC_MESSAGE).with_large_lane(large_lane))
        .add_service(quota.server(MAX_GRPC_MESSAGE))
        .add_service(health_service)
}

/// The gRPC server task on `listener`, served by `workers` single-threaded
/// runtimes (see [`crate::service::grpc::edge`]), with TLS when
/// `GRPC_SERVER_USE_TLS` (and the watcher that reloads a rotated
/// certificate, to keep alive).
pub(super) fn serve_grpc(
    router: Arc<dyn Fn() -> GrpcRouter + Send + Sync>,
    listener: GrpcListener,
    tls: &crate::settings::GrpcTlsSettings,
    workers: &Workers,
    admission: Arc<Admission>,
    stop: watch::Receiver<bool>,
) -> Result<GrpcServing, AppError> {
    let (tls_config, cert_watch) = if tls.enabled {
        let opts = crate::service::grpc::tls::TlsOptions {
            cert: PathBuf::from(&tls.server_cert),
            key: PathBuf::from(&tls.server_key),
            client_ca: (!tls.client_ca_cert.is_empty()).then(|| PathBuf::from(&tls.client_ca_cert)),
            client_san: (!tls.client_san.is_empty()).then(|| tls.client_san.clone()),
        };
        let (config, cert) = crate::service::grpc::tls::server_config(&opts)
            .map_err(|e| AppError::Unsupported(e.to_string()))?;
        let watch = crate::service::grpc::tls::watch_certificate(cert)
            .map_err(|e| AppError::Unsupported(format!("watching the TLS certificate: {e}")))?;
        (Some(config), Some(watch))
    } else {
        (None, None)
    };
    let unsupported =
        |e: crate::service::grpc::edge::EdgeError| AppError::Unsupported(e.to_string());
    let task = if workers.is_empty() {
        spawn_server(
            crate::service::grpc::edge::serve_shared(
                listener,
                tls_config,
                router(),
                admission,
                stop,
            )
            .map_err(unsupported)?,
        )
    } else {
        spawn_server(
            crate::service::grpc::edge::serve(
                workers, listener, tls_config, router, admission, stop,
            )
            .map_err(unsupported)?,
        )
    };
    Ok((task, cert_watch))
}

/// The gRPC services behind the call-statistics layer.
pub(super) type GrpcRouter = crate::service::grpc::edge::Router;

/// The gRPC server's task and, with TLS, its certificate watcher.
pub(super) type GrpcServing = (ServerTask, Option<notify::RecommendedWatcher>);

/// A server running on its own task; its error as text.
pub(super) type ServerTask = tokio::task::JoinHandle<Result<(), String>>;

pub(super) fn spawn_server<E: std::fmt::Display>(
    serve: impl Future<Output = Result<(), E>> + Send + 'static,
) -> ServerTask {
    tokio::spawn(async move { serve.await.map_err(|e| e.to_string()) })
}

/// Lets the servers (told to stop) finish their in-flight calls for at most
/// `deadline`, then cuts what is left; logs how each ended.
pub(super) async fn finish_servers(servers: [(&'static str, ServerTask); 3], deadline: Duration) {
    let aborts: Vec<_> = servers.iter().map(|(_, t)| t.abort_handle()).collect();
    let all = futures::future::join_all(servers.into_iter().map(|(what, task)| async move {
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!("{what} server: {e}"),
            Err(e) => tracing::error!("{what} server task: {e}"),
        }
    }));
    if tokio::time::timeout(deadline, all).await.is_err() {
        tracing::warn!("in-flight calls still open after {deadline:?}; closing them");
        for a in aborts {
            a.abort();
        }
    }
}
