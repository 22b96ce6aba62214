//! The debug port (`DEBUG_HOST`:`DEBUG_PORT`): the original's `/rlconfig`
//! and `/stats`, our `/hotkeys`, `/keys`, `/audit`, the dry run and
//! usage read-back ([`super::evaluate`]), and the per-tenant overrides
//! ([`super::overrides`], merged in by the app); `/` and any unknown path
//! list the endpoints. [`HotKeysView`] is what `/hotkeys` and the
//! `ratelimit.hot_keys` gauges show: the top keys with the leases held.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::Router;

use crate::engine::Engine;
use crate::hotkeys::TopKeys;
use crate::limiter::Clock;
use crate::resilience::leases::LeaseTable;
use crate::store::MemoryStore;

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
    (
        "/keys",
        "the memory store's keys by rule, most first, with each rule's evictions (JSON)",
    ),
    (
        "/audit",
        "the decision audit: per audited rule, decisions against its exact contract (JSON)",
    ),
    (
        "/evaluate",
        "POST a /json request: what each descriptor would get, charging nothing (JSON)",
    ),
    (
        "/usage",
        "GET ?domain=D&descriptor=k=v,k2=v2: each applying limit's usage and what remains (JSON)",
    ),
    (
        "/overrides",
        "GET ?domain=D: the per-tenant overrides in force; PUT or DELETE one (JSON, bearer token)",
    ),
    (
        "/overrides/log",
        "GET ?domain=D: the overrides' changes, newest last (JSON)",
    ),
];

#[derive(Clone)]
struct DebugState {
    /// The engine the service decides with: its live config, its audit,
    /// and the dry run.
    engine: Arc<Engine>,
    stats: StatsRenderer,
    hot_keys: Option<HotKeysView>,
    memory: Option<Arc<MemoryStore>>,
}

/// The router of the debug port.
pub fn router(
    engine: Arc<Engine>,
    stats: StatsRenderer,
    hot_keys: Option<HotKeysView>,
    memory: Option<Arc<MemoryStore>>,
) -> Router {
    Router::new()
        .route("/rlconfig", any(rlconfig))
        .route("/stats", any(stats_page))
        .route("/hotkeys", any(hot_keys_page))
        .route("/audit", any(audit_page))
        .route("/keys", any(keys_page))
        .route("/evaluate", post(evaluate_page))
        .route("/usage", get(usage_page))
        .fallback(index)
        .with_state(DebugState {
            engine,
            stats,
            hot_keys,
            memory,
        })
}

/// `POST /evaluate`: see [`super::evaluate::evaluate`].
async fn evaluate_page(State(s): State<DebugState>, body: axum::body::Bytes) -> Response {
    let (status, body) = super::evaluate::evaluate(&s.engine, &body).await;
    json_status(status, body)
}

/// `GET /usage`: see [`super::evaluate::usage`].
async fn usage_page(State(s): State<DebugState>, uri: axum::http::Uri) -> Response {
    let (status, body) = super::evaluate::usage(&s.engine, uri.query().unwrap_or("")).await;
    json_status(status, body)
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

/// Why `/rlconfig` is empty, in a header: the body stays the original's
/// (empty), which tools may read.
const NO_CONFIG_HINT: &str =
    "no configuration loaded: see the log for the file and line of the error, or check RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config";

async fn rlconfig(State(s): State<DebugState>) -> Response {
    match s.engine.config().current() {
        Some(c) => text(c.dump_with(s.engine.options().local_first_sync_interval)),
        None => {
            let mut r = text(String::new());
            r.headers_mut()
                .insert("x-ratelimit-hint", HeaderValue::from_static(NO_CONFIG_HINT));
            r
        }
    }
}

async fn stats_page(State(s): State<DebugState>) -> Response {
    text((s.stats)())
}

/// `/hotkeys`: see [`HotKeysView::json`]; with `HOT_KEYS_TOP_K=0` an
/// empty list.
async fn hot_keys_page(State(s): State<DebugState>) -> Response {
    json(match &s.hot_keys {
        Some(view) => view.json(),
        None => serde_json::json!({
            "hot_keys": [],
            "hint": "hot key detection is off: HOT_KEYS_TOP_K=0",
        }),
    })
}

/// `/audit`: see [`Audit::to_json`]; with `DECISION_AUDIT_SAMPLE=0` no
/// rules.
async fn audit_page(State(s): State<DebugState>) -> Response {
    json(match s.engine.audit() {
        Some(audit) => audit.to_json(),
        None => serde_json::json!({
            "sample": 0.0,
            "rules": [],
            "hint": "the audit is off: set DECISION_AUDIT_SAMPLE (e.g. 0.01) to audit a share of decisions",
        }),
    })
}

/// `/keys`: `{"max_keys", "keys", "rules": [{rule, keys, evictions}]}`,
/// most keys first; on a store other than memory, no rules.
async fn keys_page(State(s): State<DebugState>) -> Response {
    json(match &s.memory {
        Some(store) => {
            let rules: Vec<serde_json::Value> = store
                .holdings()
                .into_iter()
                .map(|(rule, keys, evictions)| {
                    serde_json::json!({"rule": &*rule, "keys": keys, "evictions": evictions})
                })
                .collect();
            serde_json::json!({"max_keys": store.max_keys(), "keys": store.len(), "rules": rules})
        }
        None => serde_json::json!({
            "rules": [],
            "hint": "/keys shows the memory store's keys (BACKEND_TYPE=memory); on Redis, count them there: redis-cli --scan --pattern '<domain>_*'",
        }),
    })
}

fn json(body: serde_json::Value) -> Response {
    json_status(StatusCode::OK, body)
}

pub(super) fn json_status(status: StatusCode, body: serde_json::Value) -> Response {
    let mut r = (status, body.to_string()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// The top keys with what this instance holds of their leases.
#[derive(Debug, Clone)]
pub struct HotKeysView {
    /// The counted keys.
    pub top: Arc<TopKeys>,
    /// The leases (none on the memory store).
    pub leases: Option<Arc<LeaseTable>>,
    /// The clock both count on.
    pub clock: Arc<dyn Clock>,
}

impl HotKeysView {
    /// The `/hotkeys` body: `{"hot_keys": [{domain, descriptor: [{key,
    /// value}], rate, shards, lease, leased_tokens}]}`, busiest first.
    pub fn json(&self) -> serde_json::Value {
        let now = self.clock.now();
        let keys: Vec<serde_json::Value> = self
            .top
            .snapshot(now)
            .into_iter()
            .map(|h| {
                let held: u64 = match &self.leases {
                    Some(t) => h.info.lease_keys.iter().map(|k| t.held(k, now)).sum(),
                    None => 0,
                };
                serde_json::json!({
                    "domain": h.info.domain,
                    "descriptor": h.info.entries.iter()
                        .map(|(k, v)| serde_json::json!({"key": k, "value": v}))
                        .collect::<Vec<_>>(),
                    "rate": (h.rate * 10.0).round() / 10.0,
                    "shards": h.info.shards,
                    "lease": h.info.lease,
                    "leased_tokens": held,
                })
            })
            .collect();
        serde_json::json!({ "hot_keys": keys })
    }

    /// Decisions per second of the busiest keys by rank (1 = busiest), for
    /// the gauges `ratelimit.hot_keys.rank_<n>.rate`: at most `k` series,
    /// whatever the keys are.
    pub fn rates_by_rank(&self) -> Vec<f64> {
        self.top
            .snapshot(self.clock.now())
            .into_iter()
            .map(|h| (h.rate * 10.0).round() / 10.0)
            .collect()
    }
}
