//! The xDS resource, `ratelimit.config.ratelimit.v3.RateLimitConfig`, into
//! a [`Config`]: each resource becomes the raw model of one file (its
//! `name` in the place of the file name), and the set goes through the
//! same validation as files do (phase B; there is no YAML, so phase A does
//! not apply). An unset unit is `UNKNOWN` and fails as a YAML `unit:
//! unknown` would, unless the policy is unlimited; `value_to_metric` and
//! `share_threshold` are not in this API and are false.

use prost::Message;

use crate::config::error::ConfigError;
use crate::config::loader::{self, ParsedFile};
use crate::config::metadata::{Metadata, MetadataValue};
use crate::config::model::{RawDescriptor, RawFile, RawMetadata, RawRateLimit, RawReplace};
use crate::config::Config;

/// The generated messages of `api/ratelimit/config/ratelimit/v3/rls_conf.proto`.
#[allow(missing_docs, clippy::all)]
pub mod proto {
    include!(concat!(
        env!("OUT_DIR"),
        "/ratelimit.config.ratelimit.v3.rs"
    ));
}

/// The resource type this provider subscribes to.
pub const TYPE_URL: &str = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// Why a response could not become a configuration; the text is what the
/// NACK carries.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ResourceError {
    /// A resource that is not a `RateLimitConfig`, or does not decode.
    #[error("failed to unpack resource {index} ({type_url}): {reason}")]
    Unpack {
        /// Its position in the response.
        index: usize,
        /// Its type URL.
        type_url: String,
        /// Why.
        reason: String,
    },
    /// The resources decode, but are not a valid configuration.
    #[error("{0}")]
    Config(#[from] ConfigError),
}

/// Decodes one resource (`type_url`, `value`).
pub fn unpack(
    index: usize,
    type_url: &str,
    value: &[u8],
) -> Result<proto::RateLimitConfig, ResourceError> {
    let fail = |reason: String| ResourceError::Unpack {
        index,
        type_url: type_url.to_string(),
        reason,
    };
    if type_url != TYPE_URL {
        return Err(fail(format!("expected {TYPE_URL}")));
    }
    proto::RateLimitConfig::decode(value).map_err(|e| fail(e.to_string()))
}

/// Loads `resources` as one configuration, in the order given.
pub fn load(
    resources: &[proto::RateLimitConfig],
    options: loader::LoadOptions,
) -> Result<Config, ResourceError> {
    let files: Vec<ParsedFile> = resources
        .iter()
        .map(|r| ParsedFile::from_raw(r.name.clone(), raw_file(r)))
        .collect();
    Ok(loader::build_with(&files, options)?)
}

fn raw_file(r: &proto::RateLimitConfig) -> RawFile {
    RawFile {
        domain: r.domain.clone(),
        domain_line: 0,
        descriptors: r.descriptors.iter().map(raw_descriptor).collect(),
    }
}

fn raw_descriptor(d: &proto::RateLimitDescriptor) -> RawDescriptor {
    RawDescriptor {
        key: d.key.clone(),
        value: d.value.clone(),
        rate_limit: d.rate_limit.as_ref().map(raw_policy),
        descriptors: d.descriptors.iter().map(raw_descriptor).collect(),
        shadow_mode: d.shadow_mode,
        quota_mode: d.quota_mode,
        detailed_metric: d.detailed_metric,
        metadata: d
            .metadata
            .as_ref()
            .map(|s| RawMetadata::Decoded(metadata(s))),
        ..RawDescriptor::default()
    }
}

fn raw_policy(p: &proto::RateLimitPolicy) -> RawRateLimit {
    let unit = proto::RateLimitUnit::try_from(p.unit)
        .map(|u| u.as_str_name().to_string())
        .unwrap_or_else(|_| p.unit.to_string());
    RawRateLimit {
        unit,
        requests_per_unit: p.requests_per_unit,
        unlimited: p.unlimited,
        name: p.name.clone(),
        replaces: p
            .replaces
            .iter()
            .map(|r| RawReplace {
                name: r.name.clone(),
                ..RawReplace::default()
            })
            .collect(),
        ..RawRateLimit::default()
    }
}

fn metadata(s: &prost_types::Struct) -> Metadata {
    Metadata(
        s.fields
            .iter()
            .map(|(k, v)| (k.clone(), value(v)))
            .collect(),
    )
}

fn value(v: &prost_types::Value) -> MetadataValue {
    use prost_types::value::Kind;
    match &v.kind {
        None | Some(Kind::NullValue(_)) => MetadataValue::Null,
        Some(Kind::BoolValue(b)) => MetadataValue::Bool(*b),
        Some(Kind::NumberValue(n)) => MetadataValue::Number(*n),
        Some(Kind::StringValue(s)) => MetadataValue::String(s.clone()),
        Some(Kind::ListValue(l)) => MetadataValue::List(l.values.iter().map(value).collect()),
        Some(Kind::StructValue(s)) => MetadataValue::Struct(metadata(s)),
    }
}

#[cfg(test)]
mod tests {
    use super::proto::*;
    use super::*;
    use crate::config::{Entry, LoadOptions, Lookup};

    fn policy(unit: RateLimitUnit, n: u32) -> Option<RateLimitPolicy> {
        Some(RateLimitPolicy {
            unit: unit as i32,
            requests_per_unit: n,
            ..RateLimitPolicy::default()
        })
    }

    fn resource(
        name: &str,
        domain: &str,
        descriptors: Vec<RateLimitDescriptor>,
    ) -> RateLimitConfig {
        RateLimitConfig {
            name: name.into(),
            domain: domain.into(),
            descriptors,
        }
    }

    #[test]
    fn a_resource_loads_as_a_file_would() {
        let d = RateLimitDescriptor {
            key: "k".into(),
            value: "v".into(),
            rate_limit: policy(RateLimitUnit::Minute, 7),
            quota_mode: true,
            metadata: Some(prost_types::Struct {
                fields: [(
                    "team".to_string(),
                    prost_types::Value {
                        kind: Some(prost_types::value::Kind::StringValue("a".into())),
                    },
                )]
                .into(),
            }),
            ..RateLimitDescriptor::default()
        };
        let config = load(&[resource("r1", "d", vec![d])], Default::default()).expect("valid");
        assert_eq!(
            config.dump(),
            "d.k_v: unit=MINUTE requests_per_unit=7, shadow_mode: false, quota_mode: true\n"
        );
        match config.tree().find("d", &[Entry::new("k", "v")], None) {
            Ok(Lookup::Limit(m)) => assert!(m.rule.metadata.is_some()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn errors_name_the_resource_and_say_what_the_original_says() {
        let unset = RateLimitDescriptor {
            key: "k".into(),
            rate_limit: Some(RateLimitPolicy {
                requests_per_unit: 1,
                ..RateLimitPolicy::default()
            }),
            ..RateLimitDescriptor::default()
        };
        let e =
            load(&[resource("bad", "d", vec![unset])], Default::default()).expect_err("refused");
        assert_eq!(e.to_string(), "bad: invalid rate limit unit 'UNKNOWN'");
        let twice = [resource("a", "d", vec![]), resource("b", "d", vec![])];
        assert_eq!(
            load(&twice, LoadOptions::default())
                .expect_err("refused")
                .to_string(),
            "b: duplicate domain 'd' in config file"
        );
        assert!(
            load(
                &twice,
                LoadOptions {
                    merge_domains: true,
                    ..LoadOptions::default()
                }
            )
            .is_ok(),
            "MERGE_DOMAIN_CONFIG merges"
        );
        let e = unpack(0, "type.googleapis.com/other", b"").expect_err("refused");
        assert!(
            e.to_string()
                .contains("expected type.googleapis.com/ratelimit"),
            "{e}"
        );
        assert!(unpack(0, TYPE_URL, &[0xff, 0xff]).is_err());
    }
}
