//! Reading variables from a [`Source`], collecting every failure instead of stopping at the
//! first: one start-up error then names every bad variable.

use super::parse::ParseError;
use super::source::{NotUnicode, Source};
use super::{vars, InvalidVar};

/// Reads variables from a source, collecting every failure instead of stopping at the first.
pub(super) struct Reader<'a> {
    src: &'a dyn Source,
    invalid: Vec<InvalidVar>,
}

impl<'a> Reader<'a> {
    pub(super) fn new(src: &'a dyn Source) -> Reader<'a> {
        Reader {
            src,
            invalid: Vec::new(),
        }
    }

    /// The failures, in reading order.
    pub(super) fn into_invalid(self) -> Vec<InvalidVar> {
        self.invalid
    }

    /// The parsed value of `name`, its default text when unset. On failure the failure is
    /// recorded and `T::default()` stands in.
    pub(super) fn get<T: Default>(
        &mut self,
        name: &'static str,
        parse: impl FnOnce(&str) -> Result<T, ParseError>,
    ) -> T {
        let value = match self.src.get_utf8(name) {
            Ok(value) => value,
            Err(NotUnicode { lossy }) => {
                self.invalid.push(InvalidVar {
                    name,
                    value: lossy,
                    error: ParseError::NotUnicode,
                });
                return T::default();
            }
        };
        // Every name read here is in VARS (unit-tested), so the fallback is never used.
        let text = value
            .as_deref()
            .unwrap_or_else(|| vars::spec(name).map_or("", |v| v.default));
        match parse(text) {
            Ok(parsed) => parsed,
            Err(error) => {
                self.invalid.push(InvalidVar {
                    name,
                    value: text.to_owned(),
                    error,
                });
                T::default()
            }
        }
    }

    pub(super) fn string(&mut self, name: &'static str) -> String {
        self.get(name, |s| Ok(s.to_owned()))
    }
}
