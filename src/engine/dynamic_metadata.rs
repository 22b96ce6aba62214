//! Response dynamic metadata: the original's (`RESPONSE_DYNAMIC_METADATA`)
//! and the decision's (`RESPONSE_DECISION_METADATA`, ours). Pure.

use std::collections::BTreeMap;

use crate::config::{Metadata, MetadataValue};
use crate::engine::types::{Code, DecisionId, RateLimitRequest};
use crate::limiter::Unit;

/// What the decision's metadata says of one request.
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionFacts {
    /// The decision's id.
    pub id: DecisionId,
    /// The code Envoy was answered (after global shadow mode).
    pub code: Code,
    /// The rule that decided: the refusing one, else the one closest to
    /// its limit; its name, or its path when unnamed. `None`: no rule
    /// applied.
    pub rule: Option<String>,
    /// The rules over their limit that shadow mode let through.
    pub shadow_violations: Vec<String>,
}

/// The `decision` struct: `id`, `code` (`OK` or `OVER_LIMIT`), `rule` when
/// one applied, `shadow_violations` when any. Envoy's access log reads it
/// as `%DYNAMIC_METADATA(envoy.filters.http.ratelimit:decision:rule)%`.
pub fn decision(facts: &DecisionFacts) -> MetadataValue {
    let mut m = BTreeMap::new();
    m.insert("id".into(), MetadataValue::String(facts.id.to_string()));
    let code = match facts.code {
        Code::OverLimit => "OVER_LIMIT",
        Code::Ok => "OK",
        Code::Unknown => "UNKNOWN",
    };
    m.insert("code".into(), MetadataValue::String(code.into()));
    if let Some(rule) = &facts.rule {
        m.insert("rule".into(), MetadataValue::String(rule.clone()));
    }
    if !facts.shadow_violations.is_empty() {
        let list = facts
            .shadow_violations
            .iter()
            .map(|r| MetadataValue::String(r.clone()))
            .collect();
        m.insert("shadow_violations".into(), MetadataValue::List(list));
    }
    MetadataValue::Struct(Metadata(m))
}

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
    fn the_decision_names_its_id_code_rule_and_shadow_violations() {
        let facts = DecisionFacts {
            id: DecisionId(0xab),
            code: Code::Ok,
            rule: Some("per_tenant".into()),
            shadow_violations: vec!["d.trial".into()],
        };
        let MetadataValue::Struct(m) = decision(&facts) else {
            panic!("a struct")
        };
        assert_eq!(m.0["id"], MetadataValue::String("00000000000000ab".into()));
        assert_eq!(m.0["code"], MetadataValue::String("OK".into()));
        assert_eq!(m.0["rule"], MetadataValue::String("per_tenant".into()));
        assert_eq!(
            m.0["shadow_violations"],
            MetadataValue::List(vec![MetadataValue::String("d.trial".into())])
        );
        let quiet = DecisionFacts {
            rule: None,
            shadow_violations: Vec::new(),
            ..facts
        };
        let MetadataValue::Struct(m) = decision(&quiet) else {
            panic!("a struct")
        };
        assert_eq!(
            m.0.keys().collect::<Vec<_>>(),
            ["code", "id"],
            "no empty fields"
        );
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
