//! The proto3 JSON mapping of `RateLimitRequest` / `RateLimitResponse` for
//! the `/json` endpoint: both field-name styles accepted,
//! unknown fields rejected, enums by name or number, 64-bit and 32-bit
//! integers as numbers or strings; output compact, lowerCamelCase, default
//! values omitted, fields in proto order.

use serde_json::Value;

use crate::config::{Entry, LimitOverride, Metadata, MetadataValue};
use crate::engine::{
    Code, DescriptorStatus, RateLimitRequest, RateLimitResponse, RequestDescriptor,
};
use crate::limiter::Unit;

/// Why a `/json` body is not a `RateLimitRequest`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid RateLimitRequest JSON: {0}")]
pub struct JsonError(String);

fn err<T>(msg: impl Into<String>) -> Result<T, JsonError> {
    Err(JsonError(msg.into()))
}

/// Parses a request body.
pub fn parse_request(body: &[u8]) -> Result<RateLimitRequest, JsonError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| JsonError(e.to_string()))?;
    let mut req = RateLimitRequest::default();
    for (k, v) in object(&v, "request")? {
        match k.as_str() {
            "domain" => req.domain = string(v, k)?,
            "descriptors" => {
                for d in array(v, k)? {
                    req.descriptors.push(descriptor(d)?);
                }
            }
            "hitsAddend" | "hits_addend" => req.hits_addend = uint(v, k, u32::MAX.into())? as u32,
            other => return err(format!("unknown field {other:?} in request")),
        }
    }
    Ok(req)
}

fn object<'a>(v: &'a Value, what: &str) -> Result<&'a serde_json::Map<String, Value>, JsonError> {
    match v {
        Value::Object(m) => Ok(m),
        _ => err(format!("{what} must be an object")),
    }
}

fn array<'a>(v: &'a Value, what: &str) -> Result<&'a [Value], JsonError> {
    match v {
        Value::Array(a) => Ok(a),
        Value::Null => Ok(&[]),
        _ => err(format!("{what} must be an array")),
    }
}

fn string(v: &Value, what: &str) -> Result<String, JsonError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Null => Ok(String::new()),
        _ => err(format!("{what} must be a string")),
    }
}

/// An unsigned integer as a JSON number (integral) or a decimal string.
fn uint(v: &Value, what: &str, max: u64) -> Result<u64, JsonError> {
    let n = match v {
        Value::Null => Some(0),
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= max as f64)
                .map(|f| f as u64)
        }),
        Value::String(s) => s.parse::<u64>().ok(),
        _ => None,
    };
    match n {
        Some(n) if n <= max => Ok(n),
        _ => err(format!("{what} must be an unsigned integer up to {max}")),
    }
}

fn descriptor(v: &Value) -> Result<RequestDescriptor, JsonError> {
    let mut d = RequestDescriptor::default();
    for (k, v) in object(v, "descriptor")? {
        match k.as_str() {
            "entries" => {
                for e in array(v, k)? {
                    d.entries.push(entry(e)?);
                }
            }
            "limit" if v.is_null() => {}
            "limit" => d.limit = Some(limit(v)?),
            "hitsAddend" | "hits_addend" if v.is_null() => {}
            "hitsAddend" | "hits_addend" => d.hits_addend = Some(uint(v, k, u64::MAX)?),
            "isNegativeHits" | "is_negative_hits" => match v {
                Value::Bool(b) => d.is_negative_hits = *b,
                Value::Null => {}
                _ => return err(format!("{k} must be a boolean")),
            },
            other => return err(format!("unknown field {other:?} in descriptor")),
        }
    }
    Ok(d)
}

fn entry(v: &Value) -> Result<Entry, JsonError> {
    let mut e = Entry::default();
    for (k, v) in object(v, "entry")? {
        match k.as_str() {
            "key" => e.key = string(v, k)?,
            "value" => e.value = string(v, k)?,
            other => return err(format!("unknown field {other:?} in entry")),
        }
    }
    Ok(e)
}

fn limit(v: &Value) -> Result<LimitOverride, JsonError> {
    let mut l = LimitOverride {
        requests_per_unit: 0,
        unit: 0,
    };
    for (k, v) in object(v, "limit")? {
        match k.as_str() {
            "requestsPerUnit" | "requests_per_unit" => {
                l.requests_per_unit = uint(v, k, u32::MAX.into())? as u32
            }
            "unit" => {
                l.unit = match v {
                    Value::String(name) => match Unit::from_name(name) {
                        Some(u) if name.chars().all(|c| c.is_ascii_uppercase()) => u as i32,
                        _ => return err(format!("unknown unit {name:?}")),
                    },
                    Value::Number(n) => match n.as_i64().and_then(|n| i32::try_from(n).ok()) {
                        Some(n) => n,
                        None => return err("unit must be an enum name or number"),
                    },
                    Value::Null => 0,
                    _ => return err("unit must be an enum name or number"),
                }
            }
            other => return err(format!("unknown field {other:?} in limit")),
        }
    }
    Ok(l)
}

fn code_name(c: Code) -> &'static str {
    match c {
        Code::Unknown => "UNKNOWN",
        Code::Ok => "OK",
        Code::OverLimit => "OVER_LIMIT",
    }
}

fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// Renders a response, omitting default values as proto3 JSON does.
pub fn render_response(r: &RateLimitResponse) -> String {
    let mut fields = Vec::new();
    if r.overall_code != Code::Unknown {
        fields.push(format!(
            "\"overallCode\":{}",
            quote(code_name(r.overall_code))
        ));
    }
    if !r.statuses.is_empty() {
        let statuses: Vec<String> = r.statuses.iter().map(render_status).collect();
        fields.push(format!("\"statuses\":[{}]", statuses.join(",")));
    }
    for (name, headers) in [
        ("responseHeadersToAdd", &r.response_headers_to_add),
        ("requestHeadersToAdd", &r.request_headers_to_add),
    ] {
        if !headers.is_empty() {
            let headers: Vec<String> = headers
                .iter()
                .map(|(k, v)| format!("{{\"key\":{},\"value\":{}}}", quote(k), quote(v)))
                .collect();
            fields.push(format!("\"{name}\":[{}]", headers.join(",")));
        }
    }
    if let Some(m) = &r.dynamic_metadata {
        fields.push(format!("\"dynamicMetadata\":{}", render_struct(m)));
    }
    format!("{{{}}}", fields.join(","))
}

fn render_status(s: &DescriptorStatus) -> String {
    let mut fields = Vec::new();
    if s.code != Code::Unknown {
        fields.push(format!("\"code\":{}", quote(code_name(s.code))));
    }
    if let Some(l) = &s.current_limit {
        let mut lf = Vec::new();
        if l.requests_per_unit != 0 {
            lf.push(format!("\"requestsPerUnit\":{}", l.requests_per_unit));
        }
        if l.unit != Unit::Unknown {
            lf.push(format!("\"unit\":{}", quote(l.unit.name())));
        }
        if !l.name.is_empty() {
            lf.push(format!("\"name\":{}", quote(&l.name)));
        }
        fields.push(format!("\"currentLimit\":{{{}}}", lf.join(",")));
    }
    if s.limit_remaining != 0 {
        fields.push(format!("\"limitRemaining\":{}", s.limit_remaining));
    }
    if let Some(d) = s.duration_until_reset {
        fields.push(format!(
            "\"durationUntilReset\":\"{}\"",
            proto_json_duration(d)
        ));
    }
    format!("{{{}}}", fields.join(","))
}

fn render_struct(m: &Metadata) -> String {
    let fields: Vec<String> =
        m.0.iter()
            .map(|(k, v)| format!("{}:{}", quote(k), render_value(v)))
            .collect();
    format!("{{{}}}", fields.join(","))
}

fn render_value(v: &MetadataValue) -> String {
    match v {
        MetadataValue::Null => "null".into(),
        MetadataValue::Bool(b) => b.to_string(),
        MetadataValue::Number(n) if n.is_finite() && n.fract() == 0.0 && n.abs() < 9.0e15 => {
            format!("{}", *n as i64)
        }
        MetadataValue::Number(n) if n.is_finite() => n.to_string(),
        // proto3 JSON spells non-finite numbers as strings.
        MetadataValue::Number(n) if n.is_nan() => "\"NaN\"".into(),
        MetadataValue::Number(n) if *n > 0.0 => "\"Infinity\"".into(),
        MetadataValue::Number(_) => "\"-Infinity\"".into(),
        MetadataValue::String(s) => quote(s),
        MetadataValue::List(l) => format!(
            "[{}]",
            l.iter().map(render_value).collect::<Vec<_>>().join(",")
        ),
        MetadataValue::Struct(s) => render_struct(s),
    }
}

/// A `google.protobuf.Duration` in proto3 JSON: seconds with 0, 3, 6 or 9
/// fractional digits, as protojson writes it (`"41s"`, `"0.100s"`).
fn proto_json_duration(d: std::time::Duration) -> String {
    let (secs, nanos) = (d.as_secs(), d.subsec_nanos());
    match nanos {
        0 => format!("{secs}s"),
        n if n % 1_000_000 == 0 => format!("{secs}.{:03}s", n / 1_000_000),
        n if n % 1_000 == 0 => format!("{secs}.{:06}s", n / 1_000),
        n => format!("{secs}.{n:09}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::CurrentLimit;
    use std::time::Duration;

    #[test]
    fn parses_both_name_styles_and_wrappers() {
        let r = parse_request(
            br#"{"domain":"d","hits_addend":"2","descriptors":[{"entries":[{"key":"k","value":"v"}],"hitsAddend":0,"limit":{"requests_per_unit":3,"unit":"SECOND"}},{"entries":[]}]}"#,
        )
        .expect("valid");
        assert_eq!(r.domain, "d");
        assert_eq!(r.hits_addend, 2);
        assert_eq!(r.descriptors[0].hits_addend, Some(0));
        assert_eq!(r.descriptors[1].hits_addend, None);
        assert!(!r.descriptors[0].is_negative_hits);
        let refund = parse_request(
            br#"{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}],"hits_addend":1,"is_negative_hits":true},{"entries":[],"isNegativeHits":false}]}"#,
        )
        .expect("valid");
        assert!(refund.descriptors[0].is_negative_hits && !refund.descriptors[1].is_negative_hits);
        assert!(parse_request(
            br#"{"domain":"d","descriptors":[{"entries":[],"is_negative_hits":1}]}"#
        )
        .is_err());
        assert_eq!(
            r.descriptors[0].limit,
            Some(LimitOverride {
                requests_per_unit: 3,
                unit: 1
            })
        );
    }

    #[test]
    fn rejects_unknown_fields_and_bad_types() {
        for body in [
            &b""[..],
            b"}",
            b"[]",
            br#"{"domain":"d","bogus":1}"#,
            br#"{"descriptors":[{"entries":[{"key":"k","extra":"x"}]}]}"#,
            br#"{"hitsAddend":-1}"#,
            br#"{"hitsAddend":4294967296}"#,
            br#"{"descriptors":[{"limit":{"unit":"FORTNIGHT"}}]}"#,
            br#"{"domain":5}"#,
        ] {
            assert!(
                parse_request(body).is_err(),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn renders_like_protojson() {
        let r = RateLimitResponse {
            overall_code: Code::OverLimit,
            statuses: vec![
                DescriptorStatus {
                    code: Code::OverLimit,
                    current_limit: Some(CurrentLimit {
                        requests_per_unit: 1,
                        unit: Unit::Minute,
                        name: String::new(),
                        window_seconds: 60,
                        burst: None,
                    }),
                    limit_remaining: 0,
                    duration_until_reset: Some(Duration::from_secs(41)),
                    shadowed: false,
                },
                DescriptorStatus {
                    code: Code::Ok,
                    current_limit: Some(CurrentLimit {
                        requests_per_unit: 2,
                        unit: Unit::Minute,
                        name: String::new(),
                        window_seconds: 60,
                        burst: None,
                    }),
                    limit_remaining: 1,
                    duration_until_reset: Some(Duration::from_secs(41)),
                    shadowed: false,
                },
            ],
            ..RateLimitResponse::default()
        };
        assert_eq!(
            render_response(&r),
            r#"{"overallCode":"OVER_LIMIT","statuses":[{"code":"OVER_LIMIT","currentLimit":{"requestsPerUnit":1,"unit":"MINUTE"},"durationUntilReset":"41s"},{"code":"OK","currentLimit":{"requestsPerUnit":2,"unit":"MINUTE"},"limitRemaining":1,"durationUntilReset":"41s"}]}"#
        );
        let ok = RateLimitResponse {
            overall_code: Code::Ok,
            ..RateLimitResponse::default()
        };
        assert_eq!(render_response(&ok), r#"{"overallCode":"OK"}"#);
        let zero = DescriptorStatus {
            code: Code::OverLimit,
            current_limit: Some(CurrentLimit {
                requests_per_unit: 0,
                unit: Unit::Second,
                name: String::new(),
                window_seconds: 1,
                burst: None,
            }),
            ..DescriptorStatus::default()
        };
        assert!(render_status(&zero).contains(r#""currentLimit":{"unit":"SECOND"}"#));
    }

    #[test]
    fn durations_keep_their_fraction_as_protojson_does() {
        let d = |s, n| proto_json_duration(Duration::new(s, n));
        assert_eq!(d(41, 0), "41s");
        assert_eq!(d(0, 100_000_000), "0.100s");
        assert_eq!(d(1, 1_000), "1.000001s");
        assert_eq!(d(2, 5), "2.000000005s");
    }
}
