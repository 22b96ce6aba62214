//! The only module that touches the generated Envoy types: wire messages to
//! the engine's domain types and back.

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3 as pb;
use envoy_types::pb::google::protobuf as wkt;

use crate::config::{Entry, LimitOverride, Metadata, MetadataValue};
use crate::engine::{
    Code, DescriptorStatus, RateLimitRequest, RateLimitResponse, RequestDescriptor,
};

/// A wire request as the engine's request. Every wire request converts:
/// the engine validates what it needs (empty domain, units).
impl From<pb::RateLimitRequest> for RateLimitRequest {
    fn from(r: pb::RateLimitRequest) -> Self {
        RateLimitRequest {
            domain: r.domain,
            descriptors: r
                .descriptors
                .into_iter()
                .map(|d| RequestDescriptor {
                    entries: d
                        .entries
                        .into_iter()
                        .map(|e| Entry {
                            key: e.key,
                            value: e.value,
                        })
                        .collect(),
                    limit: d.limit.map(|l| LimitOverride {
                        requests_per_unit: l.requests_per_unit,
                        unit: l.unit,
                    }),
                    hits_addend: d.hits_addend.map(|h| h.value),
                    is_negative_hits: d.is_negative_hits,
                })
                .collect(),
            hits_addend: r.hits_addend,
        }
    }
}

fn code(c: Code) -> i32 {
    match c {
        Code::Unknown => pb::rate_limit_response::Code::Unknown as i32,
        Code::Ok => pb::rate_limit_response::Code::Ok as i32,
        Code::OverLimit => pb::rate_limit_response::Code::OverLimit as i32,
    }
}

fn status(s: DescriptorStatus) -> pb::rate_limit_response::DescriptorStatus {
    pb::rate_limit_response::DescriptorStatus {
        code: code(s.code),
        current_limit: s.current_limit.map(|l| pb::rate_limit_response::RateLimit {
            requests_per_unit: l.requests_per_unit,
            // Unit numbers are Envoy's: the enum is copied by number.
            unit: l.unit as i32,
            name: l.name,
        }),
        limit_remaining: s.limit_remaining,
        // Whole seconds for the original's windows; the opt-in algorithms
        // report sub-second waits.
        duration_until_reset: s.duration_until_reset.map(|d| wkt::Duration {
            seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            nanos: d.subsec_nanos() as i32,
        }),
        quota: None,
    }
}

/// Rule metadata as a `google.protobuf.Struct`.
pub fn to_struct(m: &Metadata) -> wkt::Struct {
    wkt::Struct {
        fields: m.0.iter().map(|(k, v)| (k.clone(), to_value(v))).collect(),
    }
}

fn to_value(v: &MetadataValue) -> wkt::Value {
    use wkt::value::Kind;
    let kind = match v {
        MetadataValue::Null => Kind::NullValue(0),
        MetadataValue::Bool(b) => Kind::BoolValue(*b),
        MetadataValue::Number(n) => Kind::NumberValue(*n),
        MetadataValue::String(s) => Kind::StringValue(s.clone()),
        MetadataValue::List(l) => Kind::ListValue(wkt::ListValue {
            values: l.iter().map(to_value).collect(),
        }),
        MetadataValue::Struct(s) => Kind::StructValue(to_struct(s)),
    };
    wkt::Value { kind: Some(kind) }
}

/// Headers as the wire carries them.
fn header_values(headers: Vec<(String, String)>) -> Vec<HeaderValue> {
    headers
        .into_iter()
        .map(|(key, value)| HeaderValue {
            key,
            value,
            ..HeaderValue::default()
        })
        .collect()
}

impl From<RateLimitResponse> for pb::RateLimitResponse {
    fn from(r: RateLimitResponse) -> Self {
        pb::RateLimitResponse {
            overall_code: code(r.overall_code),
            statuses: r.statuses.into_iter().map(status).collect(),
            response_headers_to_add: header_values(r.response_headers_to_add),
            request_headers_to_add: header_values(r.request_headers_to_add),
            dynamic_metadata: r.dynamic_metadata.as_ref().map(to_struct),
            ..pb::RateLimitResponse::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::CurrentLimit;
    use crate::limiter::Unit;
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3 as common;
    use std::collections::BTreeMap;
    use std::time::Duration;

    #[test]
    fn request_keeps_hits_presence() {
        let wire = pb::RateLimitRequest {
            domain: "d".into(),
            descriptors: vec![
                common::RateLimitDescriptor {
                    entries: vec![common::rate_limit_descriptor::Entry {
                        key: "k".into(),
                        value: "v".into(),
                    }],
                    hits_addend: Some(wkt::UInt64Value { value: 0 }),
                    is_negative_hits: true,
                    limit: Some(common::rate_limit_descriptor::RateLimitOverride {
                        requests_per_unit: 3,
                        unit: 9,
                    }),
                },
                common::RateLimitDescriptor::default(),
            ],
            hits_addend: 0,
        };
        let r = RateLimitRequest::from(wire);
        assert_eq!(r.descriptors[0].hits_addend, Some(0));
        assert_eq!(r.descriptors[1].hits_addend, None);
        assert!(r.descriptors[0].is_negative_hits && !r.descriptors[1].is_negative_hits);
        assert_eq!(r.descriptors[0].limit.map(|l| l.unit), Some(9));
        assert_eq!(r.descriptors[0].entries, vec![Entry::new("k", "v")]);
    }

    #[test]
    fn sub_second_resets_keep_their_nanoseconds() {
        let r = RateLimitResponse {
            overall_code: Code::OverLimit,
            statuses: vec![DescriptorStatus {
                code: Code::OverLimit,
                duration_until_reset: Some(Duration::from_millis(1_500)),
                ..DescriptorStatus::default()
            }],
            ..RateLimitResponse::default()
        };
        let wire = pb::RateLimitResponse::from(r);
        let d = wire.statuses[0].duration_until_reset.expect("a reset");
        assert_eq!((d.seconds, d.nanos), (1, 500_000_000));
    }

    #[test]
    fn response_fields_and_units_by_number() {
        let r = RateLimitResponse {
            overall_code: Code::OverLimit,
            statuses: vec![DescriptorStatus {
                code: Code::OverLimit,
                current_limit: Some(CurrentLimit {
                    requests_per_unit: 10,
                    unit: Unit::Week,
                    name: "n".into(),
                    window_seconds: 604_800,
                    burst: None,
                }),
                limit_remaining: 0,
                duration_until_reset: Some(Duration::from_secs(58)),
                shadowed: false,
            }],
            response_headers_to_add: vec![("RateLimit-Limit".into(), "10".into())],
            request_headers_to_add: vec![("x-rl-remaining".into(), "0".into())],
            dynamic_metadata: Some(Metadata(BTreeMap::from([(
                "domain".to_string(),
                MetadataValue::String("d".into()),
            )]))),
        };
        let wire = pb::RateLimitResponse::from(r);
        assert_eq!(wire.overall_code, 2);
        let limit = wire.statuses[0].current_limit.as_ref().expect("limit");
        assert_eq!(limit.unit, 7);
        assert_eq!(
            wire.statuses[0].duration_until_reset.map(|d| d.seconds),
            Some(58)
        );
        assert_eq!(wire.response_headers_to_add[0].key, "RateLimit-Limit");
        assert_eq!(wire.request_headers_to_add[0].key, "x-rl-remaining");
        assert_eq!(wire.request_headers_to_add[0].value, "0");
        assert!(wire.dynamic_metadata.is_some());
    }
}
