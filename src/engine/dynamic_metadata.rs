//! Response dynamic metadata. Pure.

use std::collections::BTreeMap;

use crate::config::{Metadata, MetadataValue};
use crate::engine::types::RateLimitRequest;
use crate::limiter::Unit;

/// The metadata struct: the request's domain and descriptors, and the merge
/// of the rule metadata of the descriptors that passed (earlier wins, nested
/// structs merge recursively). `rule_metadata[i]` is the metadata of
/// descriptor `i`'s applied limit.
pub fn build(
    request: &RateLimitRequest,
    rule_metadata: &[Option<&Metadata>],
    passed: &[usize],
) -> Metadata {
    let mut root = BTreeMap::new();
    root.insert(
        "domain".into(),
        MetadataValue::String(request.domain.clone()),
    );
    let descriptors = request
        .descriptors
        .iter()
        .map(|d| {
            let mut m = BTreeMap::new();
            m.insert(
                "entries".into(),
                MetadataValue::List(
                    d.entries
                        .iter()
                        .map(|e| MetadataValue::String(format!("{}={}", e.key, e.value)))
                        .collect(),
                ),
            );
            if let Some(o) = &d.limit {
                // A stable rendering (the original uses Go's randomised
                // protobuf text format here).
                let unit = Unit::from_proto(o.unit)
                    .map(|u| u.name().to_string())
                    .unwrap_or_else(|| o.unit.to_string());
                m.insert(
                    "limit".into(),
                    MetadataValue::String(format!(
                        "requests_per_unit:{} unit:{unit}",
                        o.requests_per_unit
                    )),
                );
            }
            if let Some(h) = d.hits_addend {
                m.insert("hitsAddend".into(), MetadataValue::Number(h as f64));
            }
            MetadataValue::Struct(Metadata(m))
        })
        .collect();
    root.insert("descriptors".into(), MetadataValue::List(descriptors));
    if request.hits_addend != 0 {
        root.insert(
            "hitsAddend".into(),
            MetadataValue::Number(f64::from(request.hits_addend)),
        );
    }
    let mut merged = Metadata::default();
    for &i in passed {
        if let Some(Some(m)) = rule_metadata.get(i) {
            merged.merge_missing(m);
        }
    }
    if !merged.0.is_empty() {
        root.insert("metadata".into(), MetadataValue::Struct(merged));
    }
    Metadata(root)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Entry;
    use crate::engine::types::RequestDescriptor;

    fn md(k: &str, v: &str) -> Metadata {
        Metadata(BTreeMap::from([(
            k.to_string(),
            MetadataValue::String(v.into()),
        )]))
    }

    fn req(domain: &str, entries: &[(&str, &str)], hits: u32) -> RateLimitRequest {
        RateLimitRequest {
            domain: domain.into(),
            descriptors: entries
                .iter()
                .map(|(k, v)| RequestDescriptor {
                    entries: vec![Entry::new(*k, *v)],
                    ..RequestDescriptor::default()
                })
                .collect(),
            hits_addend: hits,
        }
    }

    /// The original's `TestRatelimitToMetadata`.
    #[test]
    fn only_passed_descriptors_contribute_first_wins() {
        let r = req(
            "mixed-domain",
            &[
                ("regular_key", "regular_val"),
                ("quota_key", "quota_val"),
                ("another_quota", "another_val"),
            ],
            0,
        );
        let (a, b, c) = (
            md("name", "service_1"),
            md("name", "service_2"),
            md("name", "service_3"),
        );
        let m = build(&r, &[Some(&a), Some(&b), Some(&c)], &[1, 2]);
        assert_eq!(m.0["domain"], MetadataValue::String("mixed-domain".into()));
        let MetadataValue::Struct(merged) = &m.0["metadata"] else {
            panic!("metadata present")
        };
        assert_eq!(merged, &md("name", "service_2"));
        let MetadataValue::List(ds) = &m.0["descriptors"] else {
            panic!("descriptors")
        };
        assert_eq!(ds.len(), 3);
    }

    #[test]
    fn nothing_passed_has_no_metadata_and_request_hits_appear() {
        let r = req("fake-domain", &[("key1", "val1")], 0);
        let m = build(&r, &[None], &[]);
        assert!(!m.0.contains_key("metadata"));
        assert!(!m.0.contains_key("hitsAddend"));
        let r = req("addend-domain", &[("test_key", "test_val")], 5);
        let m = build(&r, &[None], &[0]);
        assert_eq!(m.0["hitsAddend"], MetadataValue::Number(5.0));
    }

    #[test]
    fn merges_distinct_keys() {
        let r = req("d", &[("a", "1"), ("b", "2")], 0);
        let (a, b) = (md("name", "service_1"), md("some_other_name", "service_2"));
        let m = build(&r, &[Some(&a), Some(&b)], &[0, 1]);
        let MetadataValue::Struct(merged) = &m.0["metadata"] else {
            panic!("metadata present")
        };
        assert_eq!(merged.0.len(), 2);
    }
}
