//! The debug port (`DEBUG_HOST`:`DEBUG_PORT`): the original's `/rlconfig`
//! and `/stats`, our `/hotkeys`; `/` and any unknown path list the
//! endpoints.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;

use crate::config::LiveConfig;
use crate::hotkeys::HotKeysView;

/// Renders the `/stats` text.
pub type StatsRenderer = Arc<dyn Fn() -> String + Send + Sync>;

const ENDPOINTS: &[(&str, &str)] = &[
    (
        "/rlconfig",
        "print out the currently loaded configuration for debugging",
    ),
    ("/stats", "print out stats"),
    (
        "/hotkeys",
        "the busiest keys of this instance, by decisions per second (JSON)",
    ),
];

#[derive(Clone)]
struct DebugState {
    config: LiveConfig,
    stats: StatsRenderer,
    hot_keys: Option<HotKeysView>,
}

/// The router of the debug port.
pub fn router(config: LiveConfig, stats: StatsRenderer, hot_keys: Option<HotKeysView>) -> Router {
    Router::new()
        .route("/rlconfig", any(rlconfig))
        .route("/stats", any(stats_page))
        .route("/hotkeys", any(hot_keys_page))
        .fallback(index)
        .with_state(DebugState {
            config,
            stats,
            hot_keys,
        })
}

fn text(body: String) -> Response {
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

async fn index() -> Response {
    text(
        ENDPOINTS
            .iter()
            .map(|(path, help)| format!("{path}: {help}\n"))
            .collect(),
    )
}

async fn rlconfig(State(s): State<DebugState>) -> Response {
    text(s.config.current().map(|c| c.dump()).unwrap_or_default())
}

async fn stats_page(State(s): State<DebugState>) -> Response {
    text((s.stats)())
}

/// `/hotkeys`: see [`HotKeysView::json`]; with `HOT_KEYS_TOP_K=0` an
/// empty list.
async fn hot_keys_page(State(s): State<DebugState>) -> Response {
    let body = match &s.hot_keys {
        Some(view) => view.json(),
        None => serde_json::json!({ "hot_keys": [] }),
    };
    let mut r = (StatusCode::OK, body.to_string()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}
