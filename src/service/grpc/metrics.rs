//! `ratelimit_server.<Method>.total_requests` and `.response_time` for the
//! unary gRPC methods (`ShouldRateLimit`, health `Check`), as a tower layer
//! on the gRPC server — the original's request-metrics interceptor.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use tokio::time::Instant;

use tonic::codegen::http;
use tower::{Layer, Service};

use crate::metrics::GrpcCallStats;

/// The unary methods the original counts (streams such as health `Watch`
/// pass through uncounted, as there).
const COUNTED: &[&str] = &["ShouldRateLimit", "Check"];

/// Adds [`GrpcMetrics`] to a service.
#[derive(Debug, Clone, Copy, Default)]
pub struct GrpcMetricsLayer;

impl<S> Layer<S> for GrpcMetricsLayer {
    type Service = GrpcMetrics<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GrpcMetrics {
            inner,
            stats: Arc::default(),
        }
    }
}

/// Times each counted call from request to response headers.
#[derive(Debug, Clone)]
pub struct GrpcMetrics<S> {
    inner: S,
    /// Each of [`COUNTED`]'s series, registered at its first call (after
    /// the service has installed its recorder) and held from then on.
    stats: Arc<[OnceLock<GrpcCallStats>; COUNTED.len()]>,
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
        let counted = req
            .uri()
            .path()
            .rsplit('/')
            .next()
            .and_then(|m| COUNTED.iter().position(|c| *c == m));
        let stats = counted.map(|i| {
            self.stats[i]
                .get_or_init(|| GrpcCallStats::register(COUNTED[i]))
                .clone()
        });
        let started = Instant::now();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let out = fut.await;
            if let Some(stats) = stats {
                stats.record(started.elapsed());
            }
            out
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{build, MetricsOptions};

    #[tokio::test(flavor = "current_thread")]
    async fn each_counted_call_is_recorded_once_and_others_not_at_all() {
        let (recorder, handle) = build(MetricsOptions {
            disable_stats: true,
            ..MetricsOptions::default()
        })
        .expect("build");
        // The layer registers its series at the first call: in this
        // thread's recorder, which the whole test runs in.
        let _current = metrics::set_default_local_recorder(&recorder);
        let mut svc = GrpcMetricsLayer.layer(tower::service_fn(|_: http::Request<()>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(()))
        }));
        let paths = [
            "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
            "/grpc.health.v1.Health/Check",
            "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
            "/grpc.health.v1.Health/Watch",
            "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
        ];
        for path in paths {
            let req = http::Request::builder()
                .uri(path)
                .body(())
                .expect("request");
            svc.call(req).await.expect("answered");
        }
        let stats = handle.render_stats();
        let line = |name: &str| {
            stats
                .lines()
                .find(|l| l.starts_with(name))
                .map(str::to_owned)
        };
        assert_eq!(
            line("ratelimit_server.ShouldRateLimit.total_requests").as_deref(),
            Some("ratelimit_server.ShouldRateLimit.total_requests: 3")
        );
        assert_eq!(
            line("ratelimit_server.Check.total_requests").as_deref(),
            Some("ratelimit_server.Check.total_requests: 1")
        );
        assert!(
            line("ratelimit_server.ShouldRateLimit.response_time")
                .is_some_and(|l| l.contains("count=3")),
            "{stats}"
        );
        assert_eq!(line("ratelimit_server.Watch"), None, "{stats}");
    }
}
