//! The Prometheus port: the text of every mapped statistic on one path.

use std::future::Future;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, StatusCode, Uri};
use axum::response::Response;

use super::{MetricsError, MetricsHandle, PROMETHEUS_CONTENT_TYPE};

impl MetricsHandle {
    /// Serves the Prometheus text on `path` only (a path ending in
    /// `/` also serves everything below it, like Go's mux; empty = `/metrics`)
    /// until `shutdown` completes; any method is accepted, other paths get
    /// `404 page not found`.
    pub async fn serve_prometheus(
        &self,
        listener: tokio::net::TcpListener,
        path: String,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), MetricsError> {
        let path = if path.is_empty() {
            "/metrics".to_string()
        } else {
            path
        };
        if !path.starts_with('/') {
            return Err(MetricsError::InvalidPath(path));
        }
        let path: Arc<str> = path.into();
        let me = self.clone();
        let app = axum::Router::new().fallback(move |uri: Uri| {
            let me = me.clone();
            let path = path.clone();
            async move { me.prometheus_response(&path, uri.path()).await }
        });
        axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(MetricsError::Serve)
    }

    async fn prometheus_response(&self, pattern: &str, path: &str) -> Response {
        let matches = if pattern.ends_with('/') {
            path.starts_with(pattern)
        } else {
            path == pattern
        };
        if !matches {
            return text_response(
                StatusCode::NOT_FOUND,
                "text/plain; charset=utf-8",
                "404 page not found\n".into(),
            );
        }
        let me = self.clone();
        match tokio::task::spawn_blocking(move || me.render_prometheus()).await {
            Ok(body) => text_response(StatusCode::OK, PROMETHEUS_CONTENT_TYPE, body),
            Err(e) => {
                tracing::error!(target: "ratelimit::metrics", "rendering metrics failed: {e}");
                text_response(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "text/plain; charset=utf-8",
                    "Internal Server Error\n".into(),
                )
            }
        }
    }
}

fn text_response(status: StatusCode, content_type: &'static str, body: String) -> Response {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    r
}
