//! The main HTTP port (`HOST`:`PORT`): `/healthcheck` and
//! `/json`, any method; anything else 404 `404 page not found`.

pub mod admin_tokens;
pub mod debug;
pub mod evaluate;
pub mod json;
pub mod overrides;
pub mod server;

use std::sync::Arc;
use std::time::Duration;

use axum::body::{to_bytes, Body};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;

use crate::engine::{Code, Engine};
use crate::service::error::to_http_status;
use crate::service::health::Health;

/// Largest `/json` body accepted (the original has no limit); the
/// same as the gRPC port's 4 MiB message limit.
pub const MAX_JSON_BODY: usize = 4 * 1024 * 1024;

/// How long a `/json` call, reading its body included, may take before it
/// is answered as failed (the original has no deadline).
pub const JSON_DEADLINE: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
struct AppState {
    engine: Arc<Engine>,
    health: Health,
}

/// The router of the main HTTP port.
pub fn router(engine: Arc<Engine>, health: Health) -> Router {
    Router::new()
        .route("/healthcheck", any(healthcheck))
        .route("/json", any(json_bridge))
        .fallback(not_found)
        .with_state(AppState { engine, health })
}

/// `text/plain` with Go's `http.Error` headers.
fn plain(status: StatusCode, body: impl Into<Body>) -> Response {
    let body: Body = body.into();
    let mut r = (status, body).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    r
}

async fn not_found() -> Response {
    plain(StatusCode::NOT_FOUND, "404 page not found\n")
}

async fn healthcheck(State(s): State<AppState>) -> Response {
    if s.health.is_healthy() {
        let mut r = (StatusCode::OK, "OK").into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        r
    } else {
        (StatusCode::INTERNAL_SERVER_ERROR, Body::empty()).into_response()
    }
}

async fn json_bridge(State(s): State<AppState>, req: Request) -> Response {
    // The original's status and first line, and the reason on a line of
    // its own: what was wrong with the request, or why the call failed.
    let bad_request = |reason: &str| {
        plain(
            StatusCode::BAD_REQUEST,
            format!("Bad Request\n{}\n", reason.trim_end()),
        )
    };
    // The whole call, body included, within the deadline: a body trickled
    // a byte at a time gets 408 when it passes.
    let deadline = tokio::time::Instant::now() + JSON_DEADLINE;
    let body = match tokio::time::timeout_at(deadline, to_bytes(req.into_body(), MAX_JSON_BODY))
        .await
    {
        Ok(Ok(b)) => b,
        Ok(Err(_)) => return plain(StatusCode::PAYLOAD_TOO_LARGE, "Request Entity Too Large\n"),
        Err(_) => return plain(StatusCode::REQUEST_TIMEOUT, "Request Timeout\n"),
    };
    let request = match json::parse_request(&body) {
        Ok(request) => request,
        Err(e) => return bad_request(&e.to_string()),
    };
    let decided = tokio::time::timeout_at(deadline, s.engine.should_rate_limit(&request));
    // The original's span for the /json decision, with the response.
    let span = crate::platform::telemetry::enabled().then(|| {
        tracing::info_span!(
            target: crate::platform::telemetry::SPAN_TARGET,
            "NewJsonHandler Remaining Execution",
            response = tracing::field::Empty,
        )
    });
    let decided = match &span {
        Some(span) => tracing::Instrument::instrument(decided, span.clone()).await,
        None => decided.await,
    };
    if let (Some(span), Ok(Ok(r))) = (&span, &decided) {
        span.record("response", format!("{:?}", r.overall_code).as_str());
    }
    let response = match decided {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            return match to_http_status(&e) {
                400 => bad_request(&e.to_string()),
                _ => plain(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("Internal Server Error\n{e}\n"),
                ),
            }
        }
        Err(_) => {
            return bad_request(&format!(
                "no decision within the /json deadline ({} s)",
                JSON_DEADLINE.as_secs()
            ))
        }
    };
    let status = match response.overall_code {
        Code::Ok => StatusCode::OK,
        Code::OverLimit => StatusCode::TOO_MANY_REQUESTS,
        Code::Unknown => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let mut r = (status, json::render_response(&response)).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    // The rate-limit headers also as real HTTP headers (the body keeps
    // `responseHeadersToAdd` as the original has it). A name or value that
    // is not a valid header (a `LIMIT_*_HEADER` set to one) stays in the
    // body only.
    for (name, value) in &response.response_headers_to_add {
        if let (Ok(n), Ok(v)) = (
            header::HeaderName::try_from(name.as_str()),
            HeaderValue::try_from(value.as_str()),
        ) {
            r.headers_mut().append(n, v);
        }
    }
    r
}
