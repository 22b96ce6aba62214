//! One test per matching rule of the original's lookup (the full
//! vector suite is `integration/config_vectors.rs`).

use super::*;
use crate::config::{load, ConfigFile};

fn tree(yaml: &str) -> DescriptorTree {
    let cfg = load(&[ConfigFile::new("t.yaml", yaml)], false).expect("config loads");
    let Config { tree, .. } = cfg;
    tree
}

use crate::config::Config;

fn find(t: &DescriptorTree, entries: &[(&str, &str)]) -> Option<String> {
    let entries: Vec<Entry> = entries.iter().map(|(k, v)| Entry::new(*k, *v)).collect();
    match t.find("d", &entries, None).expect("no override") {
        Lookup::Limit(m) => Some(format!("{}:{}", m.rule.requests_per_unit, m.stats_key)),
        Lookup::NoLimit | Lookup::DomainNotFound => None,
    }
}

const PRECEDENCE: &str = "
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    value: foo*
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: k
    value: foobar
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: k
    value: foob*
    rate_limit: {unit: second, requests_per_unit: 4}
";

#[test]
fn exact_beats_wildcard_beats_key_only() {
    let t = tree(PRECEDENCE);
    assert_eq!(
        find(&t, &[("k", "foobar")]).as_deref(),
        Some("3:d.k_foobar")
    );
    assert_eq!(find(&t, &[("k", "fooz")]).as_deref(), Some("2:d.k_foo*"));
    assert_eq!(find(&t, &[("k", "other")]).as_deref(), Some("1:d.k"));
}

#[test]
fn first_listed_wildcard_wins_not_the_most_specific() {
    let t = tree(PRECEDENCE);
    assert_eq!(find(&t, &[("k", "foobaz")]).as_deref(), Some("2:d.k_foo*"));
    // A value equal to a pattern's text is an exact hit on that rule.
    assert_eq!(find(&t, &[("k", "foob*")]).as_deref(), Some("4:d.k_foob*"));
}

#[test]
fn no_backtracking_after_a_level_chose_a_child() {
    let t = tree(
        "
domain: d
descriptors:
  - key: a
    value: x
    descriptors:
      - key: b
        value: only
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 2}
",
    );
    assert_eq!(find(&t, &[("a", "x"), ("b", "other")]), None);
    assert_eq!(
        find(&t, &[("a", "y"), ("b", "other")]).as_deref(),
        Some("2:d.a.b")
    );
}

#[test]
fn a_limit_applies_only_at_the_depth_of_the_last_entry() {
    let t = tree(
        "
domain: d
descriptors:
  - key: p
    value: v
    rate_limit: {unit: day, requests_per_unit: 15}
    descriptors:
      - key: c
        rate_limit: {unit: day, requests_per_unit: 25}
  - key: leaf
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: mid
    descriptors:
      - key: c
        rate_limit: {unit: day, requests_per_unit: 2}
",
    );
    assert_eq!(find(&t, &[("p", "v")]).as_deref(), Some("15:d.p_v"));
    assert_eq!(
        find(&t, &[("p", "v"), ("c", "1")]).as_deref(),
        Some("25:d.p_v.c")
    );
    // Longer than the tree: no limit even though a node on the way has one.
    assert_eq!(find(&t, &[("leaf", "1"), ("x", "y")]), None);
    // Ends on a node without a limit: no limit ("whitelist").
    assert_eq!(find(&t, &[("mid", "1")]), None);
    assert_eq!(find(&t, &[]), None);
}

#[test]
fn composite_string_corner_cases() {
    let t = tree(
        "
domain: d
descriptors:
  - key: x
    value: b_c
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: p
    value: q
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: a
    value: '*'
    rate_limit: {unit: second, requests_per_unit: 3}
",
    );
    assert_eq!(find(&t, &[("x_b", "c")]).as_deref(), Some("1:d.x_b_c"));
    assert_eq!(find(&t, &[("p_q", "anything")]).as_deref(), Some("2:d.p_q"));
    // The strip of `key_` fails for key `a_b`, so the whole composite stays.
    assert_eq!(find(&t, &[("a_b", "z")]).as_deref(), Some("3:d.a_b_a_*"));
    assert_eq!(find(&t, &[("a", "")]).as_deref(), Some("3:d.a_*"));
}

#[test]
fn star_key_hides_key_only_rules() {
    let t = tree(
        "
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: '*'
    rate_limit: {unit: second, requests_per_unit: 2}
",
    );
    assert_eq!(find(&t, &[("k", "v")]).as_deref(), Some("2:d.k_*"));
}

#[test]
fn override_skips_matching_and_uses_every_value() {
    let t = tree(PRECEDENCE);
    let entries = [Entry::new("zzz", ""), Entry::new("y", "1")];
    let o = LimitOverride {
        requests_per_unit: 7,
        unit: Unit::Hour as i32,
    };
    let Lookup::Limit(m) = t.find("d", &entries, Some(&o)).expect("valid") else {
        panic!("override applies")
    };
    assert_eq!(m.stats_key, "d.zzz.y_1");
    assert!(m.from_override);
    assert_eq!((m.rule.requests_per_unit, m.rule.unit), (7, Unit::Hour));
    let Lookup::Limit(m) = t.find("d", &[], Some(&o)).expect("valid") else {
        panic!("override applies")
    };
    assert_eq!(m.stats_key, "d.");
}

#[test]
fn override_with_unknown_or_out_of_range_unit_is_an_error_not_a_crash() {
    let t = tree(PRECEDENCE);
    for unit in [0, 8, -3, i32::MAX] {
        let o = LimitOverride {
            requests_per_unit: 1,
            unit,
        };
        assert_eq!(
            t.find("d", &[Entry::new("k", "v")], Some(&o)),
            Err(MatchError::InvalidOverrideUnit(unit))
        );
    }
    // An unknown domain still gives no limit, override or not.
    let o = LimitOverride {
        requests_per_unit: 1,
        unit: 0,
    };
    assert_eq!(t.find("nope", &[], Some(&o)), Ok(Lookup::DomainNotFound));
}

#[test]
fn exact_lookup_does_not_scan_siblings() {
    // 10,000 exact siblings and one wildcard that would match everything:
    // an exact hit never consults the wildcard list.
    let mut yaml = String::from("domain: d\ndescriptors:\n  - key: k\n    value: '*'\n    rate_limit: {unit: second, requests_per_unit: 1}\n");
    for i in 0..10_000 {
        yaml.push_str(&format!(
            "  - key: k\n    value: v{i}\n    rate_limit: {{unit: second, requests_per_unit: 2}}\n"
        ));
    }
    let t = tree(&yaml);
    assert_eq!(find(&t, &[("k", "v9999")]).as_deref(), Some("2:d.k_v9999"));
    assert_eq!(find(&t, &[("k", "zzz")]).as_deref(), Some("1:d.k_*"));
}

/// A stats key says whether it carries the request's values: those are
/// per-value series (capped); a rule's own key is the config's.
#[test]
fn stats_keys_say_whether_they_carry_request_values() {
    let t = tree(
        "
domain: d
descriptors:
  - key: plain
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: wild
    value: a*
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: per_value
    value_to_metric: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: detailed
    detailed_metric: true
    rate_limit: {unit: second, requests_per_unit: 1}
",
    );
    let per_value =
        |k: &str, v: &str| match t.find("d", &[Entry::new(k, v)], None).expect("no override") {
            Lookup::Limit(m) => (m.stats_key, m.stats_per_value),
            _ => panic!("{k} has a rule"),
        };
    assert_eq!(per_value("plain", "x"), ("d.plain".into(), false));
    assert_eq!(per_value("wild", "abc"), ("d.wild_a*".into(), false));
    assert_eq!(per_value("per_value", "x"), ("d.per_value_x".into(), true));
    assert_eq!(per_value("detailed", "x"), ("d.detailed_x".into(), true));
}

const NESTED: &str = "
domain: d
descriptors:
  - key: tenant
    value: acme
    descriptors:
      - key: route
        rate_limit: {unit: second, requests_per_unit: 50}
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 10}
";

/// A bucket's pairs, as RLQS reports them: a map, matched in the order the
/// tree asks for its keys.
fn bucket(t: &DescriptorTree, domain: &str, pairs: &[(&str, &str)]) -> Option<Vec<Entry>> {
    let pairs: HashMap<&str, &str> = pairs.iter().copied().collect();
    t.bucket_entries(domain, &pairs)
}

#[test]
fn a_bucket_is_matched_in_the_order_the_tree_asks_for_its_pairs() {
    let t = tree(NESTED);
    let nested = vec![Entry::new("tenant", "acme"), Entry::new("route", "/api")];
    // Either order of the map gives the nested path.
    assert_eq!(
        bucket(&t, "d", &[("route", "/api"), ("tenant", "acme")]),
        Some(nested.clone())
    );
    assert_eq!(
        find(&t, &[("tenant", "acme"), ("route", "/api")]).as_deref(),
        Some("50:d.tenant_acme.route")
    );
    // A pair the tree never asks for is not part of the path.
    assert_eq!(
        bucket(
            &t,
            "d",
            &[("route", "/api"), ("tenant", "acme"), ("zone", "eu")]
        ),
        Some(nested)
    );
    // The key-only default, as a request would match it.
    assert_eq!(
        bucket(&t, "d", &[("tenant", "other")]),
        Some(vec![Entry::new("tenant", "other")])
    );
    assert_eq!(bucket(&t, "d", &[("zone", "eu")]), Some(vec![]));
    assert_eq!(bucket(&t, "unknown", &[("tenant", "acme")]), None);
}
