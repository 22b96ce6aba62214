//! The original's key check over the whole document, before decoding.
//!
//! Every mapping key at every depth (outside `metadata`) must be a string
//! from one flat set; every list must hold only mappings; every leaf must be a
//! string, an int, a bool or null. The original walks Go maps, so with
//! several offending keys the one it reports is random; this walk is in
//! document order, so the same file always gives the same error.

use super::error::{ConfigErrorKind, TypeError};
use crate::go::yaml::{Node, NodeKind, Resolved};

/// The keys the original accepts, anywhere in a file.
pub const VALID_KEYS: &[&str] = &[
    "domain",
    "key",
    "value",
    "descriptors",
    "rate_limit",
    "unit",
    "requests_per_unit",
    "unlimited",
    "shadow_mode",
    "quota_mode",
    "name",
    "replaces",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
    // Extensions (opt-in; docs/algorithms.md).
    "algorithm",
    "burst",
    "unit_multiplier",
    "rate_limits",
    "failure_mode",
    "fallback_requests_per_unit",
    "durability",
    "shards",
    "lease",
    "calendar",
    "time_zone",
    "max_in_flight",
    "max_duration",
    "sync_interval",
];

/// A failed check: the message and the 1-based line of the offending node.
#[derive(Debug)]
pub(crate) struct CheckError {
    pub(crate) kind: ConfigErrorKind,
    pub(crate) line: usize,
    pub(crate) hint: Option<String>,
}

/// P2: the document itself must be a mapping (null counts as an empty one).
pub(crate) fn check_document(root: &Node) -> Result<(), CheckError> {
    match &root.kind {
        NodeKind::Map(_) => check_map(root),
        NodeKind::Scalar(s) if s.value == Resolved::Null => Ok(()),
        NodeKind::Scalar(s) => Err(CheckError {
            kind: ConfigErrorKind::Types(vec![TypeError::new(
                root.line,
                root.tag(),
                Some(&s.text),
                "map[interface {}]interface {}",
            )]),
            line: root.line,
            hint: None,
        }),
        NodeKind::Seq(_) => Err(CheckError {
            kind: ConfigErrorKind::Types(vec![TypeError::new(
                root.line,
                "!!seq",
                None,
                "map[interface {}]interface {}",
            )]),
            line: root.line,
            hint: None,
        }),
    }
}

fn check_map(map: &Node) -> Result<(), CheckError> {
    for (key, value) in last_wins(map) {
        let name = match &key.kind {
            NodeKind::Scalar(s) if matches!(s.value, Resolved::Str | Resolved::Binary(_)) => {
                s.text.as_str()
            }
            _ => {
                return Err(CheckError {
                    kind: ConfigErrorKind::NonStringKey(go_format(key)),
                    line: key.line,
                    hint: None,
                })
            }
        };
        if !VALID_KEYS.contains(&name) {
            return Err(CheckError {
                kind: ConfigErrorKind::UnknownKey(name.to_string()),
                line: key.line,
                hint: suggest(name).map(|k| format!("did you mean '{k}'?")),
            });
        }
        if name == "metadata" {
            continue;
        }
        match &value.kind {
            NodeKind::Seq(items) => {
                for item in items {
                    if !matches!(item.kind, NodeKind::Map(_)) {
                        return Err(CheckError {
                            kind: ConfigErrorKind::NonMapListElement(go_format(item)),
                            line: item.line,
                            hint: None,
                        });
                    }
                    check_map(item)?;
                }
            }
            NodeKind::Map(_) => check_map(value)?,
            NodeKind::Scalar(s) => {
                let leaf_ok = match s.value {
                    Resolved::Str | Resolved::Bool(_) | Resolved::Null => true,
                    // Go decodes ints above int64 as uint64, which the check rejects.
                    Resolved::Int(i) => i <= i64::MAX as i128,
                    Resolved::Float(_) | Resolved::Binary(_) | Resolved::Merge => false,
                };
                if !leaf_ok {
                    return Err(CheckError {
                        kind: ConfigErrorKind::InvalidLeaf,
                        line: value.line,
                        hint: None,
                    });
                }
            }
        }
    }
    Ok(())
}

/// The closest allowed key to a misspelled one, if any is close enough.
pub fn suggest(unknown: &str) -> Option<&'static str> {
    closest(unknown, VALID_KEYS)
}

/// The closest of `candidates` to a misspelled word, if any is close enough
/// (Jaro-Winkler similarity of at least 0.8).
pub fn closest(unknown: &str, candidates: &[&'static str]) -> Option<&'static str> {
    candidates
        .iter()
        .map(|k| (strsim::jaro_winkler(unknown, k), *k))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k)
}

/// The pairs of a mapping as Go's `map[interface{}]interface{}` holds them:
/// one per distinct key, with the value of its last occurrence, in the order
/// keys first appear.
pub(crate) fn last_wins(map: &Node) -> Vec<(&Node, &Node)> {
    let NodeKind::Map(pairs) = &map.kind else {
        return Vec::new();
    };
    let mut out: Vec<(&Node, &Node)> = Vec::with_capacity(pairs.len());
    for (k, v) in pairs {
        match out.iter_mut().find(|(seen, _)| same_key(seen, k)) {
            Some(slot) => slot.1 = v,
            None => out.push((k, v)),
        }
    }
    out
}

fn same_key(a: &Node, b: &Node) -> bool {
    match (&a.kind, &b.kind) {
        (NodeKind::Scalar(x), NodeKind::Scalar(y)) => match (&x.value, &y.value) {
            (Resolved::Null, Resolved::Null) => true,
            (Resolved::Bool(p), Resolved::Bool(q)) => p == q,
            (Resolved::Int(p), Resolved::Int(q)) => p == q,
            (Resolved::Str, Resolved::Str) => x.text == y.text,
            _ => false,
        },
        _ => false,
    }
}

/// Go's `%v` of a value decoded into `interface{}`.
pub(crate) fn go_format(node: &Node) -> String {
    match &node.kind {
        NodeKind::Scalar(s) => match &s.value {
            Resolved::Null => "<nil>".to_string(),
            Resolved::Bool(b) => b.to_string(),
            Resolved::Int(i) => i.to_string(),
            Resolved::Float(f) => go_format_float(*f),
            Resolved::Binary(bytes) => format!(
                "[{}]",
                bytes
                    .iter()
                    .map(|b| b.to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
            Resolved::Str | Resolved::Merge => s.text.clone(),
        },
        NodeKind::Seq(items) => format!(
            "[{}]",
            items.iter().map(go_format).collect::<Vec<_>>().join(" ")
        ),
        NodeKind::Map(_) => {
            let mut entries: Vec<String> = last_wins(node)
                .into_iter()
                .map(|(k, v)| format!("{}:{}", go_format(k), go_format(v)))
                .collect();
            entries.sort();
            format!("map[{}]", entries.join(" "))
        }
    }
}

/// Go's `%v` of a float64: shortest digits, `%e` form when the exponent is
/// below -4 or at least 6 (`1e+06`, `2.5e-05`), else plain (`0.25`).
pub(crate) fn go_format_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_string();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.to_string();
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..6).contains(&exp) {
        format!("{f}")
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::go::yaml::parse;

    fn check(doc: &str) -> Result<(), String> {
        let node = parse(doc.as_bytes()).map_err(|e| e.message)?;
        check_document(&node).map_err(|e| e.kind.to_string())
    }

    #[test]
    fn floats_format_like_go() {
        assert_eq!(go_format_float(0.25), "0.25");
        assert_eq!(go_format_float(1e6), "1e+06");
        assert_eq!(go_format_float(123456.0), "123456");
        assert_eq!(go_format_float(2.5e-5), "2.5e-05");
        assert_eq!(go_format_float(1.5), "1.5");
    }

    #[test]
    fn reports_the_first_problem_in_document_order() {
        assert_eq!(
            check("domain: d\nfoo: 1\nbar: 2\n"),
            Err("config error, unknown key 'foo'".into())
        );
    }

    #[test]
    fn metadata_is_exempt() {
        assert_eq!(
            check("domain: d\nmetadata: {anything: 1.5, 2: [x]}\n"),
            Ok(())
        );
    }

    #[test]
    fn suggestions_for_misspelled_keys() {
        assert_eq!(suggest("ratelimit"), Some("rate_limit"));
        assert_eq!(suggest("requestsperunit"), Some("requests_per_unit"));
        assert_eq!(suggest("unlimied"), Some("unlimited"));
        assert_eq!(suggest("zzzzzz"), None);
        assert_eq!(closest("minuet", &["second", "minute"]), Some("minute"));
    }

    #[test]
    fn key_and_leaf_types() {
        assert_eq!(
            check("1: a\n"),
            Err("config error, key is not of type string: 1".into())
        );
        assert_eq!(
            check("~: a\n"),
            Err("config error, key is not of type string: <nil>".into())
        );
        assert_eq!(check("domain: 1.5\n"), Err("error checking config".into()));
        assert_eq!(
            check("descriptors: [[a, b]]\n"),
            Err("config error, yaml file contains list of type other than map: [a b]".into())
        );
        assert_eq!(
            check("domain: 9223372036854775808\n"),
            Err("error checking config".into())
        );
    }
}
