//! `ratelimit_server.<Method>.total_requests` and `.response_time` for the
//! unary gRPC methods (`ShouldRateLimit`, health `Check`), as a tower layer
//! on the gRPC server — the original's request-metrics interceptor.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::time::Instant;

use tonic::codegen::http;
use tower::{Layer, Service};

/// The unary methods the original counts (streams such as health `Watch`
/// pass through uncounted, as there).
const COUNTED: &[&str] = &["ShouldRateLimit", "Check"];

/// Adds [`GrpcMetrics`] to a service.
#[derive(Debug, Clone, Copy, Default)]
pub struct GrpcMetricsLayer;

impl<S> Layer<S> for GrpcMetricsLayer {
    type Service = GrpcMetrics<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GrpcMetrics { inner }
    }
}

/// Times each counted call from request to response headers.
#[derive(Debug, Clone)]
pub struct GrpcMetrics<S> {
    inner: S,
}

impl<S, B> Service<http::Request<B>> for GrpcMetrics<S>
where
    S: Service<http::Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let method = req
            .uri()
            .path()
            .rsplit('/')
            .next()
            .and_then(|m| COUNTED.iter().find(|c| **c == m))
            .copied();
        let started = Instant::now();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let out = fut.await;
            if let Some(m) = method {
                crate::metrics::record_grpc_call(m, started.elapsed());
            }
            out
        })
    }
}
