//! What an override is on the wire and in the book: the JSON of the API,
//! checked and capped, and the record the store keeps.

use serde::{Deserialize, Serialize};

use crate::config::limit_block::{check_block, LimitBlock};

/// The most entries an override's descriptor may have.
pub const MAX_ENTRIES: usize = 32;
/// The longest domain, key or value, in bytes.
pub const MAX_TEXT: usize = 256;
/// The longest expiry (`expires_in`): a year.
pub const MAX_EXPIRES_IN: std::time::Duration = std::time::Duration::from_secs(366 * 24 * 3600);

/// One `(key, value)` of a descriptor, as a request carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DescriptorEntry {
    /// The key.
    pub key: String,
    /// The value ("" for none).
    #[serde(default)]
    pub value: String,
}

/// An override's limit: the keys of a `rate_limit` block that say how much.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverrideLimit {
    /// Allowed hits per window (a token bucket: its rate per unit).
    pub requests_per_unit: u32,
    /// `second`, `minute`, `hour`, `day`, `week`, `month` or `year`.
    pub unit: String,
    /// An algorithm; absent: the rule's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub algorithm: Option<String>,
    /// A token bucket's capacity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
    /// Windows of this many units.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit_multiplier: Option<u32>,
}

impl OverrideLimit {
    /// The limit as a config block.
    pub fn block(&self) -> LimitBlock {
        LimitBlock {
            requests_per_unit: self.requests_per_unit,
            unit: self.unit.clone(),
            algorithm: self.algorithm.clone(),
            burst: self.burst,
            unit_multiplier: self.unit_multiplier,
        }
    }
}

/// The body of `PUT /overrides`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PutRequest {
    /// The domain.
    pub domain: String,
    /// The full descriptor, in the order requests carry it.
    pub descriptor: Vec<DescriptorEntry>,
    /// The limit.
    pub limit: OverrideLimit,
    /// How long it lasts (`10m`, `1h30m`); absent: until deleted.
    #[serde(default)]
    pub expires_in: Option<String>,
    /// The version it replaces (0: it must not exist yet).
    #[serde(default)]
    pub if_version: Option<u64>,
}

/// The body of `DELETE /overrides`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeleteRequest {
    /// The domain.
    pub domain: String,
    /// The full descriptor.
    pub descriptor: Vec<DescriptorEntry>,
    /// The version it deletes.
    #[serde(default)]
    pub if_version: Option<u64>,
}

/// What the book keeps for one override (its version and expiry are the
/// book's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The domain.
    pub domain: String,
    /// The full descriptor.
    pub descriptor: Vec<DescriptorEntry>,
    /// The limit.
    pub limit: OverrideLimit,
    /// When it expires, ms since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
    /// When it was written, ms since the Unix epoch.
    pub updated_at_ms: u64,
    /// Who wrote it (the credential's name).
    pub updated_by: String,
}

/// A request the API refuses, with the status it answers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    /// The body is not the JSON the endpoint takes.
    #[error("the body is not a valid request: {0}")]
    Body(String),
    /// Something in it is out of bounds or not a limit.
    #[error("{0}")]
    Field(String),
}

/// The book's id of the override of `domain` and `descriptor`: one text
/// per (domain, descriptor), unambiguous whatever the texts hold.
pub fn id_of(domain: &str, descriptor: &[DescriptorEntry]) -> String {
    let pairs: Vec<[&str; 2]> = descriptor
        .iter()
        .map(|e| [e.key.as_str(), e.value.as_str()])
        .collect();
    serde_json::json!([domain, pairs]).to_string()
}

/// The domain and descriptor of an override, within the caps.
pub fn check_target(domain: &str, descriptor: &[DescriptorEntry]) -> Result<(), Invalid> {
    let field = |m: String| Err(Invalid::Field(m));
    if domain.is_empty() {
        return field("domain is empty".into());
    }
    if descriptor.is_empty() {
        return field("descriptor has no entries".into());
    }
    if descriptor.len() > MAX_ENTRIES {
        return field(format!(
            "descriptor has {} entries; at most {MAX_ENTRIES}",
            descriptor.len()
        ));
    }
    if let Some(e) = descriptor.iter().find(|e| e.key.is_empty()) {
        return field(format!(
            "descriptor entry with value {:?} has an empty key",
            e.value
        ));
    }
    let long = std::iter::once(domain)
        .chain(
            descriptor
                .iter()
                .flat_map(|e| [e.key.as_str(), e.value.as_str()]),
        )
        .find(|t| t.len() > MAX_TEXT);
    if let Some(t) = long {
        return field(format!(
            "{:?}… is {} bytes; a domain, key or value is at most {MAX_TEXT}",
            t.chars().take(16).collect::<String>(),
            t.len()
        ));
    }
    Ok(())
}

/// A put's limit and expiry, checked: the limit as the same YAML block
/// would be (same messages), the expiry a Go duration up to a year. The
/// expiry's length when one is given.
pub fn check_put(put: &PutRequest) -> Result<Option<std::time::Duration>, Invalid> {
    check_target(&put.domain, &put.descriptor)?;
    check_block(&put.limit.block()).map_err(|e| {
        let hint = e.hint.map(|h| format!(" ({h})")).unwrap_or_default();
        Invalid::Field(format!("limit: {}{hint}", e.kind))
    })?;
    let Some(text) = &put.expires_in else {
        return Ok(None);
    };
    let d = crate::settings::parse::parse_duration(text)
        .map_err(|e| Invalid::Field(format!("expires_in {text:?}: {e}")))?;
    if d.is_zero() || d > MAX_EXPIRES_IN {
        return Err(Invalid::Field(format!(
            "expires_in {text:?} is not in (0s, 8784h]"
        )));
    }
    Ok(Some(d))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(body: &str) -> Result<PutRequest, serde_json::Error> {
        serde_json::from_str(body)
    }

    #[test]
    fn the_documented_body_parses_and_checks() {
        let p = put(r#"{"domain": "api", "descriptor": [{"key": "tenant", "value": "acme"}],
            "limit": {"requests_per_unit": 50, "unit": "minute"}, "expires_in": "10m", "if_version": 3}"#)
        .expect("the issue's example");
        assert_eq!(p.if_version, Some(3));
        assert_eq!(check_put(&p), Ok(Some(std::time::Duration::from_secs(600))));
    }

    #[test]
    fn unknown_fields_and_bad_limits_are_refused_with_what_is_wrong() {
        assert!(put(r#"{"domain": "api", "descriptor": [], "limit": {"requests_per_unit": 1, "unit": "second"}, "ttl": 3}"#).is_err());
        let p = put(r#"{"domain": "api", "descriptor": [{"key": "k"}], "limit": {"requests_per_unit": 1, "unit": "minutes"}}"#)
            .expect("well-formed");
        let Err(Invalid::Field(m)) = check_put(&p) else {
            panic!("a unit that is not one");
        };
        assert!(
            m.contains("minutes") && m.contains("did you mean 'minute'"),
            "{m}"
        );
        let p = put(r#"{"domain": "api", "descriptor": [{"key": "k"}], "limit": {"requests_per_unit": 1, "unit": "second"}, "expires_in": "0s"}"#)
            .expect("well-formed");
        assert!(check_put(&p).is_err());
    }

    #[test]
    fn targets_are_capped() {
        let many: Vec<DescriptorEntry> = (0..=MAX_ENTRIES)
            .map(|i| DescriptorEntry {
                key: format!("k{i}"),
                value: String::new(),
            })
            .collect();
        assert!(check_target("api", &many).is_err());
        let long = DescriptorEntry {
            key: "k".into(),
            value: "v".repeat(MAX_TEXT + 1),
        };
        assert!(check_target("api", &[long]).is_err());
        assert!(check_target("", &many[..1]).is_err());
    }

    #[test]
    fn ids_tell_every_target_apart() {
        let e = |k: &str, v: &str| DescriptorEntry {
            key: k.into(),
            value: v.into(),
        };
        // An underscore or a dot in a text cannot make two targets one id.
        assert_ne!(id_of("a", &[e("b_c", "d")]), id_of("a", &[e("b", "c_d")]));
        assert_ne!(id_of("a.b", &[e("c", "")]), id_of("a", &[e("b.c", "")]));
    }
}
