//! `envoy.service.ratelimit.v3.RateLimitService` over gRPC.
//!
//! A hand-written tonic service (rather than the generated server) so that
//! requests decode through [`codec::RlsCodec`]: a malformed request is
//! INVALID_ARGUMENT, never INTERNAL and never a panic.
//!
//! A call that carries `grpc-timeout` (Envoy sends its filter's `timeout`)
//! has its store step end before it, less the margin of
//! [`crate::resilience::deadline::caller_margin`], so the caller hears each
//! rule's failure policy instead of timing out.

pub mod codec;
pub mod convert;
pub mod timeout;

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use envoy_types::pb::envoy::service::ratelimit::v3 as pb;
use tonic::codegen::{http, Body, BoxFuture, Service, StdError};
use tonic::server::{Grpc, NamedService, UnaryService};

use tokio::runtime::Handle;

use crate::engine::{Engine, RateLimitRequest, RateLimitResponse, ServiceError};
use crate::platform::workers::SLICE;
use crate::service::error::to_status;

/// The gRPC path of `ShouldRateLimit`.
pub const SHOULD_RATE_LIMIT_PATH: &str =
    "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// The RLS gRPC service around an [`Engine`].
#[derive(Debug, Clone)]
pub struct RlsServer {
    engine: Arc<Engine>,
    max_decoding_message_size: usize,
    /// Where a request of more than [`SLICE`] descriptors is decided (the
    /// workers' large-request lane); `None`: where it arrived.
    large: Option<Handle>,
}

impl RlsServer {
    /// A service; requests larger than `max_decoding_message_size` bytes are
    /// refused (RESOURCE_EXHAUSTED), as grpc-go's 4 MiB default does.
    pub fn new(engine: Arc<Engine>, max_decoding_message_size: usize) -> RlsServer {
        RlsServer {
            engine,
            max_decoding_message_size,
            large: None,
        }
    }

    /// The service, deciding requests of more than [`SLICE`] descriptors
    /// on `lane` (see [`crate::platform::workers::Workers::large`]).
    pub fn with_large_lane(self, lane: Option<Handle>) -> RlsServer {
        RlsServer {
            large: lane,
            ..self
        }
    }
}

impl NamedService for RlsServer {
    const NAME: &'static str = "envoy.service.ratelimit.v3.RateLimitService";
}

/// Holds one call to its caller's deadline, where production can see it.
/// A call not answered by its `grpc-timeout` counts
/// [`metrics::PAST_CALLER_DEADLINE`](crate::metrics::PAST_CALLER_DEADLINE),
/// whether its answer came late or the server gave up on it at the deadline
/// (tonic ends such a call with CANCELLED, the caller having left); a call
/// dropped unanswered before any deadline of its own (its caller reset the
/// stream or closed the connection) counts
/// [`metrics::CALLER_GONE`](crate::metrics::CALLER_GONE). Each call counts
/// at most once.
struct CallWatch {
    /// When the caller gives up: arrival plus its `grpc-timeout`.
    gives_up: Option<tokio::time::Instant>,
    answered: bool,
}

impl CallWatch {
    fn answered(mut self) {
        self.answered = true;
        if self.past_deadline() {
            ::metrics::counter!(crate::metrics::PAST_CALLER_DEADLINE).increment(1);
        }
    }

    fn past_deadline(&self) -> bool {
        self.gives_up
            .is_some_and(|t| tokio::time::Instant::now() >= t)
    }
}

impl Drop for CallWatch {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        let counter = if self.past_deadline() {
            crate::metrics::PAST_CALLER_DEADLINE
        } else {
            crate::metrics::CALLER_GONE
        };
        ::metrics::counter!(counter).increment(1);
    }
}

/// One call: the engine, when the call's store step must end, and the
/// large-request lane.
struct ShouldRateLimit(Arc<Engine>, Option<tokio::time::Instant>, Option<Handle>);

/// Decides `request` (telemetry's span around it when tracing is on).
async fn decide(
    engine: Arc<Engine>,
    request: RateLimitRequest,
    deadline: Option<tokio::time::Instant>,
) -> Result<RateLimitResponse, ServiceError> {
    let decided = engine.should_rate_limit_by(&request, deadline);
    if crate::platform::telemetry::enabled() {
        use tracing::Instrument;
        let span = tracing::info_span!(
            target: crate::platform::telemetry::SPAN_TARGET,
            "ShouldRateLimit Execution"
        );
        decided.instrument(span).await
    } else {
        decided.await
    }
}

impl UnaryService<pb::RateLimitRequest> for ShouldRateLimit {
    type Response = pb::RateLimitResponse;
    type Future = BoxFuture<tonic::Response<Self::Response>, tonic::Status>;

    fn call(&mut self, request: tonic::Request<pb::RateLimitRequest>) -> Self::Future {
        let (engine, deadline) = (Arc::clone(&self.0), self.1);
        let lane = self.2.clone();
        Box::pin(async move {
            let request = RateLimitRequest::from(request.into_inner());
            let decided = match lane {
                Some(lane) if request.descriptors.len() > SLICE => {
                    ::metrics::counter!(crate::metrics::LARGE_REQUESTS).increment(1);
                    // Fails only if the decision panicked, or the lane is
                    // shutting down.
                    lane.spawn(decide(engine, request, deadline))
                        .await
                        .map_err(|e| tonic::Status::internal(format!("large-request lane: {e}")))?
                }
                _ => decide(engine, request, deadline).await,
            };
            decided
                .map(|r| tonic::Response::new(r.into()))
                .map_err(|e| to_status(&e))
        })
    }
}

impl<B> Service<http::Request<B>> for RlsServer
where
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if req.uri().path() != SHOULD_RATE_LIMIT_PATH {
            return Box::pin(async move {
                let mut response = http::Response::new(tonic::body::Body::default());
                let headers = response.headers_mut();
                headers.insert(
                    tonic::Status::GRPC_STATUS,
                    (tonic::Code::Unimplemented as i32).into(),
                );
                headers.insert(
                    http::header::CONTENT_TYPE,
                    tonic::metadata::GRPC_CONTENT_TYPE,
                );
                Ok(response)
            });
        }
        // The clock is read only for a call that brings a deadline.
        let (deadline, gives_up) = match timeout::grpc_timeout(req.headers()) {
            Some(t) => {
                let received = tokio::time::Instant::now();
                let store_by = crate::resilience::deadline::caller_deadline(received, t);
                (Some(store_by), Some(received + t))
            }
            None => (None, None),
        };
        let watch = CallWatch {
            gives_up,
            answered: false,
        };
        let method = ShouldRateLimit(Arc::clone(&self.engine), deadline, self.large.clone());
        let max = self.max_decoding_message_size;
        let span = crate::platform::telemetry::enabled().then(|| {
            crate::platform::telemetry::server_span(&SHOULD_RATE_LIMIT_PATH[1..], req.headers())
        });
        let call = async move {
            let mut grpc = Grpc::new(codec::RlsCodec::default())
                .apply_max_message_size_config(Some(max), None);
            let mut response = grpc.unary(method, req).await;
            watch.answered();
            // The engine never fails with INTERNAL: an INTERNAL here is
            // tonic's own report of a request it could not read (a truncated
            // frame, a broken stream), which is the caller's fault.
            let headers = response.headers_mut();
            if headers
                .get(tonic::Status::GRPC_STATUS)
                .map(|v| v.as_bytes())
                == Some(b"13")
            {
                headers.insert(
                    tonic::Status::GRPC_STATUS,
                    (tonic::Code::InvalidArgument as i32).into(),
                );
            }
            Ok(response)
        };
        match span {
            Some(span) => Box::pin(tracing::Instrument::instrument(call, span)),
            None => Box::pin(call),
        }
    }
}
