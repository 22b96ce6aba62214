//! The `*` glob of descriptor composites.

/// A composite containing at least one `*`, pre-split on `*`.
///
/// `matches(s)` is true iff `s = p0 · x1 · p1 · … · xk · pk` for arbitrary,
/// possibly empty, strings `x`. There is no escape, no `?`, no classes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    parts: Vec<Box<str>>,
    fixed_len: usize,
}

impl Glob {
    /// `None` when `pattern` has no `*`.
    pub fn new(pattern: &str) -> Option<Glob> {
        if !pattern.contains('*') {
            return None;
        }
        let parts: Vec<Box<str>> = pattern.split('*').map(Box::from).collect();
        let fixed_len = parts.iter().map(|p| p.len()).sum();
        Some(Glob { parts, fixed_len })
    }

    /// Whether `s` matches. Prefix and suffix may not overlap; the inner
    /// parts are found leftmost-first in order, which is exact for `*`-only
    /// globs. Cost is linear in `s` times the number of parts.
    pub fn matches(&self, s: &str) -> bool {
        let (first, rest) = match self.parts.split_first() {
            Some(x) => x,
            None => return false,
        };
        let Some((last, inner)) = rest.split_last() else {
            return s == &**first;
        };
        if s.len() < self.fixed_len || !s.starts_with(&**first) || !s.ends_with(&**last) {
            return false;
        }
        let mut middle = &s.as_bytes()[first.len()..s.len() - last.len()];
        for part in inner {
            match find(middle, part.as_bytes()) {
                Some(at) => middle = &middle[at + part.len()..],
                None => return false,
            }
        }
        true
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return Some(0);
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pattern: &str, s: &str) -> bool {
        Glob::new(pattern).expect("has a star").matches(s)
    }

    #[test]
    fn spec_examples() {
        assert!(m("wild_foo*", "wild_foo1"));
        assert!(m("wild_foo*", "wild_foo"));
        assert!(m("midWild_bar*b", "midWild_barab"));
        assert!(m("midWild_bar*b", "midWild_bar123b"));
        assert!(m("midWild_bar*b", "midWild_barb"));
        assert!(!m("midWild_bar*b", "midWild_bara"));
        assert!(!m("midWild_bar*b", "midWild_xbarb"));
        assert!(m("multiWild_foo*bar*baz", "multiWild_foobarbaz"));
        assert!(m("multiWild_foo*bar*baz", "multiWild_foo123bar456baz"));
        assert!(!m("multiWild_foo*bar*baz", "multiWild_foo123baz"));
        assert!(!m("multiWild_foo*bar*baz", "multiWild_bar456baz"));
        assert!(m("midpath_/api*v1", "midpath_/api/v1"));
        assert!(!m("midpath_/api*v1", "midpath_/api/v2"));
        assert!(m("multiroute_svc*ep*rpc", "multiroute_svceprpc"));
        assert!(!m("multiroute_svc*ep*rpc", "multiroute_svcABCrpc"));
    }

    #[test]
    fn prefix_and_suffix_do_not_overlap() {
        assert!(!m("ab*ba", "aba"));
        assert!(m("ab*ba", "abba"));
        assert!(m("*", ""));
        assert!(m("a_*", "a_"));
    }

    #[test]
    fn no_star_is_not_a_glob() {
        assert_eq!(Glob::new("abc"), None);
    }
}
