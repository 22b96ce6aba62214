//! The per-tenant overrides' API on the debug port ([`crate::overrides`]):
//!
//! - `PUT /overrides` `{"domain", "descriptor": [{"key", "value"}…],
//!   "limit": {"requests_per_unit", "unit", …}, "expires_in"?,
//!   "if_version"?}` creates or replaces one; `DELETE /overrides`
//!   `{"domain", "descriptor", "if_version"?}` removes one. Both need
//!   `Authorization: Bearer <token>`, a token of the file `ADMIN_TOKEN_FILE`
//!   names (read at each write, so a rotated file needs no restart): 401
//!   without a valid one, 403 when no file is set. 400: not a valid
//!   request (the reason says what); 409: `if_version` is stale, or the
//!   book is full (`"reason"` tells which); 404: a delete of nothing; 503:
//!   the store did not answer.
//! - `GET /overrides?domain=D` lists those in force (every domain without
//!   `domain`), with versions and expiries; `GET /overrides/log?domain=D`
//!   the changes, newest last. Reads follow the debug port's rules (no
//!   credential).

use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use serde_json::{json, Value};

use crate::config::Lookup;
use crate::engine::Engine;
use crate::overrides::record::{DeleteRequest, PutRequest, Record};
use crate::overrides::{timestamp, Overrides, Refused, Written};

/// The largest request body.
const MAX_BODY: usize = 16 * 1024;

#[derive(Clone)]
struct OverridesState {
    overrides: Arc<Overrides>,
    engine: Arc<Engine>,
    /// `ADMIN_TOKEN_FILE`; `None`: writes are refused.
    token_file: Option<PathBuf>,
}

/// The routes of the overrides' API.
pub fn router(
    overrides: Arc<Overrides>,
    engine: Arc<Engine>,
    token_file: Option<PathBuf>,
) -> Router {
    Router::new()
        .route("/overrides", get(list).put(put).delete(delete))
        .route("/overrides/log", get(log))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(OverridesState {
            overrides,
            engine,
            token_file,
        })
}

fn reply(status: StatusCode, body: Value) -> Response {
    super::debug::json_status(status, body)
}

fn error(status: StatusCode, message: impl std::fmt::Display) -> Response {
    reply(status, json!({ "error": message.to_string() }))
}

/// A request refused before it reached the book: its status and why. A
/// 401 carries the bearer challenge.
struct Failure(StatusCode, String);

impl Failure {
    fn response(self) -> Response {
        let mut r = error(self.0, self.1);
        if self.0 == StatusCode::UNAUTHORIZED {
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer realm=\"ratelimit\""),
            );
        }
        r
    }
}

/// Who the request's bearer token names, or the refusal.
async fn caller(s: &OverridesState, headers: &HeaderMap) -> Result<String, Failure> {
    let Some(file) = &s.token_file else {
        return Err(Failure(
            StatusCode::FORBIDDEN,
            "writes are off: set ADMIN_TOKEN_FILE to a file of bearer tokens".into(),
        ));
    };
    let unauthorized = |m: &str| Failure(StatusCode::UNAUTHORIZED, m.into());
    let Some(given) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
    else {
        return Err(unauthorized(
            "an Authorization: Bearer <token> header is needed",
        ));
    };
    let text = tokio::fs::read_to_string(file).await.map_err(|e| {
        tracing::error!("ADMIN_TOKEN_FILE {}: {e}", file.display());
        Failure(
            StatusCode::SERVICE_UNAVAILABLE,
            "the admin token file cannot be read (see the log)".into(),
        )
    })?;
    match super::admin_tokens::who(&text, given) {
        Some(who) => Ok(who),
        None => Err(unauthorized(
            "the bearer token is not one of ADMIN_TOKEN_FILE's",
        )),
    }
}

fn body<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, Failure> {
    serde_json::from_slice(bytes).map_err(|e| {
        Failure(
            StatusCode::BAD_REQUEST,
            format!("the body is not a valid request: {e}"),
        )
    })
}

fn refused(r: &Refused) -> Response {
    let (status, reason) = match r {
        Refused::Invalid(_) => (StatusCode::BAD_REQUEST, "invalid"),
        Refused::Stale { .. } => (StatusCode::CONFLICT, "stale"),
        Refused::Full { .. } => (StatusCode::CONFLICT, "full"),
        Refused::Missing => (StatusCode::NOT_FOUND, "missing"),
        Refused::Store(_) => (StatusCode::SERVICE_UNAVAILABLE, "store"),
    };
    let mut body = json!({ "error": r.to_string(), "reason": reason });
    if let Refused::Stale { current, .. } = r {
        body["current_version"] = json!(current);
    }
    reply(status, body)
}

/// Whether a YAML rule matches the override's descriptor now.
fn matches_rule(engine: &Engine, record: &Record) -> bool {
    let Some(config) = engine.config().current() else {
        return false;
    };
    let entries: Vec<crate::config::Entry> = record
        .descriptor
        .iter()
        .map(|e| crate::config::Entry::new(e.key.as_str(), e.value.as_str()))
        .collect();
    matches!(
        config.tree().find(&record.domain, &entries, None),
        Ok(Lookup::Limit(_))
    )
}

/// An override as the API shows it.
fn shown(engine: &Engine, version: u64, record: &Record) -> Value {
    json!({
        "domain": record.domain,
        "descriptor": record.descriptor,
        "limit": record.limit,
        "version": version,
        "expires_at": record.expires_at_ms.map(timestamp),
        "updated_at": timestamp(record.updated_at_ms),
        "updated_by": record.updated_by,
        "matches_rule": matches_rule(engine, record),
    })
}

fn written(engine: &Engine, w: &Written) -> Response {
    let mut body = match &w.after {
        Some(r) => shown(engine, w.version, r),
        None => json!({ "version": w.version }),
    };
    body["before"] = w
        .before
        .as_ref()
        .map_or(Value::Null, |(v, r)| shown(engine, *v, r));
    reply(StatusCode::OK, body)
}

/// A write's caller and body, or why it is refused.
async fn write_request<T: serde::de::DeserializeOwned>(
    s: &OverridesState,
    headers: &HeaderMap,
    bytes: &[u8],
) -> Result<(String, T), Failure> {
    let who = caller(s, headers).await?;
    Ok((who, body(bytes)?))
}

async fn put(
    State(s): State<OverridesState>,
    headers: HeaderMap,
    bytes: axum::body::Bytes,
) -> Response {
    let answer = match write_request::<PutRequest>(&s, &headers, &bytes).await {
        Ok((who, request)) => s.overrides.put(request, &who).await,
        Err(f) => return f.response(),
    };
    match answer {
        Ok(w) => written(&s.engine, &w),
        Err(r) => refused(&r),
    }
}

async fn delete(
    State(s): State<OverridesState>,
    headers: HeaderMap,
    bytes: axum::body::Bytes,
) -> Response {
    let answer = match write_request::<DeleteRequest>(&s, &headers, &bytes).await {
        Ok((who, request)) => s.overrides.delete(request, &who).await,
        Err(f) => return f.response(),
    };
    match answer {
        Ok(w) => written(&s.engine, &w),
        Err(r) => refused(&r),
    }
}

/// The `domain` of a query, if it names one; an error for any other
/// parameter.
fn domain_of(uri: &axum::http::Uri) -> Result<Option<String>, Failure> {
    let mut domain = None;
    for pair in uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        match name {
            "domain" => {
                domain = Some(
                    super::evaluate::decode(value)
                        .map_err(|e| Failure(StatusCode::BAD_REQUEST, e))?,
                )
            }
            other => {
                return Err(Failure(
                    StatusCode::BAD_REQUEST,
                    format!("unknown parameter '{other}': expected domain"),
                ))
            }
        }
    }
    Ok(domain)
}

async fn list(State(s): State<OverridesState>, uri: axum::http::Uri) -> Response {
    let domain = match domain_of(&uri) {
        Ok(d) => d,
        Err(f) => return f.response(),
    };
    // Read the book first, so that a list after a write on another
    // instance shows it; if the store cannot answer, what is in force here.
    let fresh = s.overrides.refresh().await.is_ok();
    let snapshot = s.overrides.table().snapshot();
    let now = crate::overrides::table::now_ms();
    let mut found: Vec<_> = snapshot
        .all()
        .filter(|a| a.expires_at_ms == 0 || now < a.expires_at_ms)
        .filter(|a| domain.as_deref().is_none_or(|d| a.record.domain == d))
        .collect();
    found.sort_by(|a, b| {
        (&a.record.domain, &a.record.descriptor.len(), a.version).cmp(&(
            &b.record.domain,
            &b.record.descriptor.len(),
            b.version,
        ))
    });
    let shown: Vec<Value> = found
        .iter()
        .map(|a| shown(&s.engine, a.version, &a.record))
        .collect();
    reply(
        StatusCode::OK,
        json!({
            "version": snapshot.version,
            "fresh": fresh,
            "max": s.overrides.max_entries(),
            "overrides": shown,
        }),
    )
}

async fn log(State(s): State<OverridesState>, uri: axum::http::Uri) -> Response {
    let domain = match domain_of(&uri) {
        Ok(d) => d,
        Err(f) => return f.response(),
    };
    match s.overrides.log(domain.as_deref()).await {
        Ok(changes) => reply(StatusCode::OK, json!({ "changes": changes })),
        Err(e) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the store did not answer: {e}"),
        ),
    }
}
