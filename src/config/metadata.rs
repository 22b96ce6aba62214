//! Rule metadata: the free-form `metadata` mapping of a descriptor, as the
//! protobuf `Struct` the original turns it into (numbers are doubles, keys
//! are strings, strings must be valid UTF-8).

use std::collections::BTreeMap;

use crate::go::yaml::{Node, NodeKind, Resolved};

/// A `google.protobuf.Struct`, independent of the generated types.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Metadata(pub BTreeMap<String, MetadataValue>);

/// A `google.protobuf.Value`.
#[derive(Debug, Clone, PartialEq)]
pub enum MetadataValue {
    /// `null`.
    Null,
    /// A boolean.
    Bool(bool),
    /// Every number, as in protobuf: a double.
    Number(f64),
    /// A UTF-8 string.
    String(String),
    /// A list.
    List(Vec<MetadataValue>),
    /// A nested struct.
    Struct(Metadata),
}

impl Metadata {
    /// Merges `other` into `self` where `self` has no value yet; nested
    /// structs merge recursively. Earlier metadata therefore wins, as in the
    /// original's dynamic-metadata merge.
    pub fn merge_missing(&mut self, other: &Metadata) {
        for (k, v) in &other.0 {
            match (self.0.get_mut(k), v) {
                (None, _) => {
                    self.0.insert(k.clone(), v.clone());
                }
                (Some(MetadataValue::Struct(mine)), MetadataValue::Struct(theirs)) => {
                    mine.merge_missing(theirs)
                }
                (Some(_), _) => {}
            }
        }
    }
}

/// Converts a `metadata` mapping; the error text is the protobuf library's.
pub(crate) fn from_node(node: &Node) -> Result<Metadata, String> {
    match value(node)? {
        MetadataValue::Struct(m) => Ok(m),
        _ => Ok(Metadata::default()),
    }
}

fn value(node: &Node) -> Result<MetadataValue, String> {
    Ok(match &node.kind {
        NodeKind::Scalar(s) => match &s.value {
            Resolved::Null => MetadataValue::Null,
            Resolved::Bool(b) => MetadataValue::Bool(*b),
            Resolved::Int(i) => MetadataValue::Number(*i as f64),
            Resolved::Float(f) => MetadataValue::Number(*f),
            Resolved::Str | Resolved::Merge => MetadataValue::String(s.text.clone()),
            Resolved::Binary(bytes) => MetadataValue::String(utf8(bytes)?),
        },
        NodeKind::Seq(items) => {
            MetadataValue::List(items.iter().map(value).collect::<Result<_, _>>()?)
        }
        NodeKind::Map(pairs) => {
            let mut map = BTreeMap::new();
            for (k, v) in pairs {
                map.insert(key(k)?, value(v)?);
            }
            MetadataValue::Struct(Metadata(map))
        }
    })
}

fn key(node: &Node) -> Result<String, String> {
    match &node.kind {
        NodeKind::Scalar(s) => match &s.value {
            Resolved::Binary(bytes) => utf8(bytes),
            Resolved::Null => Ok(String::new()),
            _ => Ok(s.text.clone()),
        },
        _ => Ok(super::check::go_format(node)),
    }
}

fn utf8(bytes: &[u8]) -> Result<String, String> {
    String::from_utf8(bytes.to_vec()).map_err(|_| {
        format!(
            "proto: invalid UTF-8 in string: \"{}\"",
            bytes.escape_ascii()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::go::yaml::parse;

    #[test]
    fn numbers_become_doubles_and_keys_strings() {
        let node = parse(b"{a: 1, 2: [x, 1.5], n: {b: true, c: ~}}").expect("parses");
        let m = from_node(&node).expect("converts");
        assert_eq!(m.0["a"], MetadataValue::Number(1.0));
        assert_eq!(
            m.0["2"],
            MetadataValue::List(vec![
                MetadataValue::String("x".into()),
                MetadataValue::Number(1.5)
            ])
        );
        let MetadataValue::Struct(n) = &m.0["n"] else {
            panic!("nested struct")
        };
        assert_eq!(n.0["c"], MetadataValue::Null);
    }

    #[test]
    fn invalid_utf8_is_the_protobuf_error() {
        let node = parse(b"{x: !!binary /w==}").expect("parses");
        let err = from_node(&node).unwrap_err();
        assert!(err.starts_with("proto: invalid UTF-8"), "{err}");
    }

    #[test]
    fn merge_keeps_earlier_values_recursively() {
        let a = from_node(&parse(b"{name: s1, n: {x: 1}}").expect("parses")).expect("ok");
        let b = from_node(&parse(b"{name: s2, other: 2, n: {x: 2, y: 3}}").expect("parses"))
            .expect("ok");
        let mut merged = a.clone();
        merged.merge_missing(&b);
        assert_eq!(merged.0["name"], MetadataValue::String("s1".into()));
        assert_eq!(merged.0["other"], MetadataValue::Number(2.0));
        let MetadataValue::Struct(n) = &merged.0["n"] else {
            panic!("nested struct")
        };
        assert_eq!(n.0["x"], MetadataValue::Number(1.0));
        assert_eq!(n.0["y"], MetadataValue::Number(3.0));
    }
}
