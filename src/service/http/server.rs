//! The HTTP and debug ports' server: hyper's HTTP/1 over TCP with the
//! bounds a port open to a network needs, which `axum::serve` does not set.
//!
//! Bounds:
//! - at most [`HttpLimits::max_connections`] connections are open at once;
//!   one more is accepted and closed at once (counted in the port's
//!   statistic, with one log line each time the port fills up), so the
//!   process never runs out of file descriptors through this port;
//! - a request's head must arrive within [`HttpLimits::header_timeout`] of
//!   the connection starting to wait for it, or the connection is closed:
//!   a silent connection, a head trickled a byte at a time, and a keep-alive
//!   connection idle between requests are all closed then;
//! - a body is the handler's to bound (`/json` reads it within its own
//!   deadline).
//!
//! On shutdown it stops accepting, lets each connection finish the request
//! it is serving, and returns when every connection has closed.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tower::ServiceExt;

/// The bounds of one port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// Connections open at once.
    pub max_connections: usize,
    /// How long a request's head may take to arrive.
    pub header_timeout: Duration,
}

/// Serves `router` on `listener` within `limits` until `shutdown`
/// completes; `refused` is the statistic counting connections closed at
/// the cap, and `port` names the port in logs.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: HttpLimits,
    port: &'static str,
    refused: &'static str,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let (stop_tx, stop_rx) = watch::channel(false);
    let full = AtomicBool::new(false);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors or the like: wait, do not spin.
                    tracing::warn!("{port} accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            ::metrics::counter!(refused).increment(1);
            if !full.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    limit = limits.max_connections,
                    "{port}: connection limit reached; new connections are closed until some close"
                );
            }
            drop(stream);
            continue;
        };
        full.store(false, Ordering::Relaxed);
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(
            router
                .clone()
                .map_request(|r: axum::http::Request<Incoming>| r.map(Body::new)),
        );
        let mut stop = stop_rx.clone();
        tokio::spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout);
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            let mut conn = std::pin::pin!(conn);
            let stopping = async move {
                let _ = stop.wait_for(|s| *s).await;
            };
            tokio::select! {
                _ = conn.as_mut() => {}
                () = stopping => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
            drop(permit);
        });
    }
    let _ = stop_tx.send(true);
    drop(listener);
    // Every connection holds a permit until it closes.
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    let _ = permits.acquire_many(all).await;
    Ok(())
}
