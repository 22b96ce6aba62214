//! The dry run and the usage read-back on the debug port, as JSON:
//!
//! - `POST /evaluate` with a `/json` request body: per descriptor, the rule
//!   that matched (or why none applies), each of its limits' algorithm,
//!   limit, usage and what would remain, and whether the request would be
//!   admitted; nothing is charged ([`Engine::evaluate`]);
//! - `GET /usage?domain=D&descriptor=k=v,k2=v2` (the parameter repeated for
//!   several descriptors, a descriptor's leading entries for the rule at
//!   that depth): the same, read at no cost.
//!
//! A request the service would refuse to decide (no domain, no descriptor,
//! bad JSON) is a 400 with the reason; no config loaded yet is a 503.

use axum::http::StatusCode;
use serde_json::{json, Value};

use super::json::parse_request;
use crate::config::Entry;
use crate::engine::evaluate::{Evaluated, LimitFound};
use crate::engine::{Engine, RateLimitRequest, RequestDescriptor, ServiceError};

/// `POST /evaluate`: the status and the body.
pub async fn evaluate(engine: &Engine, body: &[u8]) -> (StatusCode, Value) {
    let request = match parse_request(body) {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_REQUEST, json!({ "error": e.to_string() })),
    };
    answer(engine, &request, None).await
}

/// `GET /usage`: the status and the body.
pub async fn usage(engine: &Engine, query: &str) -> (StatusCode, Value) {
    match usage_request(query) {
        Ok(request) => answer(engine, &request, Some(0)).await,
        Err(e) => (StatusCode::BAD_REQUEST, json!({ "error": e })),
    }
}

/// The request `/usage?domain=D&descriptor=k=v,k2=v2…` asks about.
fn usage_request(query: &str) -> Result<RateLimitRequest, String> {
    let mut request = RateLimitRequest::default();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = decode(value)?;
        match decode(name)?.as_str() {
            "domain" => request.domain = value,
            "descriptor" => {
                let entries = value
                    .split(',')
                    .filter(|e| !e.is_empty())
                    .map(|e| {
                        let (k, v) = e.split_once('=').unwrap_or((e, ""));
                        Entry::new(k, v)
                    })
                    .collect();
                request.descriptors.push(RequestDescriptor {
                    entries,
                    ..RequestDescriptor::default()
                });
            }
            other => {
                return Err(format!(
                    "unknown parameter '{other}': expected domain and descriptor (e.g. /usage?domain=api&descriptor=tenant=acme,route=search)"
                ))
            }
        }
    }
    Ok(request)
}

/// A query component, `+` and `%XX` decoded.
pub(super) fn decode(s: &str) -> Result<String, String> {
    percent_encoding::percent_decode_str(&s.replace('+', " "))
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| format!("'{s}' is not UTF-8 once decoded"))
}

async fn answer(
    engine: &Engine,
    request: &RateLimitRequest,
    cost: Option<u64>,
) -> (StatusCode, Value) {
    match engine.evaluate(request, cost).await {
        Ok(found) => (StatusCode::OK, render(request, &found)),
        Err(ServiceError::NoConfig) => (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "error": ServiceError::NoConfig.to_string() }),
        ),
        Err(e) => (StatusCode::BAD_REQUEST, json!({ "error": e.to_string() })),
    }
}

/// The body: the domain, one object per descriptor, and whether the
/// request as a whole would pass (every descriptor admitted or in shadow
/// mode).
fn render(request: &RateLimitRequest, found: &[Evaluated]) -> Value {
    let descriptors: Vec<Value> = request
        .descriptors
        .iter()
        .zip(found)
        .map(|(d, e)| {
            let entries: Vec<Value> = d
                .entries
                .iter()
                .map(|e| json!({"key": e.key, "value": e.value}))
                .collect();
            let rule = e.rule.as_ref().map(|r| {
                json!({
                    "name": r.label,
                    "path": r.path,
                    "limit_from_request": r.from_request,
                    "override_version": r.override_version,
                    "shadow_mode": r.shadow_mode,
                })
            });
            json!({
                "entries": entries,
                "rule": rule,
                "why_no_limit": e.why,
                "hits": e.hits,
                "allowed": e.allowed,
                "limits": e.limits.iter().map(render_limit).collect::<Vec<_>>(),
            })
        })
        .collect();
    let allowed = found
        .iter()
        .all(|e| e.allowed || e.rule.as_ref().is_some_and(|r| r.shadow_mode));
    json!({ "domain": request.domain, "allowed": allowed, "descriptors": descriptors })
}

fn render_limit(l: &LimitFound) -> Value {
    json!({
        "algorithm": l.algorithm,
        "limit": l.limit,
        "window_seconds": l.window_seconds,
        "used": l.used,
        "remaining": l.remaining,
        "reset_after_seconds": l.reset_after.as_secs_f64(),
        "allowed": l.allowed,
        "error": l.error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_usage_query_names_its_domain_and_descriptors() {
        let r = usage_request("domain=api&descriptor=tenant=acme,route=se%20arch&descriptor=ip")
            .expect("parsed");
        assert_eq!(r.domain, "api");
        assert_eq!(
            r.descriptors[0].entries,
            vec![Entry::new("tenant", "acme"), Entry::new("route", "se arch")]
        );
        assert_eq!(r.descriptors[1].entries, vec![Entry::new("ip", "")]);
    }

    #[test]
    fn an_unknown_usage_parameter_is_named_with_an_example() {
        let e = usage_request("domain=api&tenant=acme").expect_err("refused");
        assert!(
            e.contains("'tenant'") && e.contains("/usage?domain="),
            "{e}"
        );
    }
}
