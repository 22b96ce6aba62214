//! Where setting values come from: the process environment in production, a map in tests.
//!
//! Settings are read only through [`Source`], so no test has to touch the process
//! environment (`clippy.toml` bans `std::env::set_var`).

use std::collections::HashMap;
use std::ffi::OsString;

/// A read-only view of named setting values.
pub trait Source {
    /// The value of `name`: `None` when unset, `Some("")` when set to the empty string (which
    /// is *not* unset: it is parsed as an empty value and does not take the default).
    ///
    /// A value that is not valid UTF-8 is returned lossily converted (invalid bytes become
    /// U+FFFD); [`Source::get_utf8`] reports it instead.
    fn get(&self, name: &str) -> Option<String>;

    /// Like [`Source::get`], but a value that is not valid UTF-8 is an error.
    ///
    /// The default suits sources that only hold `String`s; a source that can hold other bytes
    /// must override it.
    fn get_utf8(&self, name: &str) -> Result<Option<String>, NotUnicode> {
        Ok(self.get(name))
    }
}

/// A set value that is not valid UTF-8.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotUnicode {
    /// The value with each invalid byte sequence replaced by U+FFFD, for messages.
    pub lossy: String,
}

/// The process environment.
#[derive(Debug, Clone, Copy, Default)]
pub struct Env;

impl Source for Env {
    fn get(&self, name: &str) -> Option<String> {
        std::env::var_os(name).map(|value| utf8(value).unwrap_or_else(|e| e.lossy))
    }

    fn get_utf8(&self, name: &str) -> Result<Option<String>, NotUnicode> {
        std::env::var_os(name).map(utf8).transpose()
    }
}

fn utf8(value: OsString) -> Result<String, NotUnicode> {
    value.into_string().map_err(|raw| NotUnicode {
        lossy: raw.to_string_lossy().into_owned(),
    })
}

/// A fixed map of values, for tests and embedding. Names absent from the map are unset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MapSource {
    values: HashMap<String, String>,
}

impl MapSource {
    /// An empty source: every variable is unset.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `name` to `value`, replacing any previous value.
    pub fn insert(&mut self, name: impl Into<String>, value: impl Into<String>) {
        self.values.insert(name.into(), value.into());
    }
}

impl Source for MapSource {
    fn get(&self, name: &str) -> Option<String> {
        self.values.get(name).cloned()
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for MapSource {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        Self {
            values: iter
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_source_distinguishes_unset_from_empty() {
        let src: MapSource = [("EMPTY", ""), ("SET", "x")].into_iter().collect();
        assert_eq!(src.get("UNSET"), None);
        assert_eq!(src.get("EMPTY"), Some(String::new()));
        assert_eq!(src.get("SET"), Some("x".to_owned()));
        assert_eq!(src.get_utf8("SET"), Ok(Some("x".to_owned())));
        assert_eq!(src.get_utf8("UNSET"), Ok(None));
    }

    #[test]
    fn map_source_insert_replaces() {
        let mut src = MapSource::new();
        src.insert("A", "1");
        src.insert("A", String::from("2"));
        assert_eq!(src.get("A"), Some("2".to_owned()));
    }

    #[test]
    fn env_reads_without_writing() {
        // Reads only: a name nobody sets.
        let name = "RATELIMIT_SETTINGS_TEST_NEVER_SET_7F3A";
        assert_eq!(Env.get(name), None);
        assert_eq!(Env.get_utf8(name), Ok(None));
    }

    #[cfg(unix)]
    #[test]
    fn non_utf8_is_reported_not_panicked() {
        use std::os::unix::ffi::OsStringExt;
        let raw = OsString::from_vec(b"ab\xffcd".to_vec());
        assert_eq!(
            utf8(raw),
            Err(NotUnicode {
                lossy: "ab\u{fffd}cd".to_owned()
            })
        );
        assert_eq!(utf8(OsString::from("ok")), Ok("ok".to_owned()));
    }
}
