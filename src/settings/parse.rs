//! Value syntax of the settings, with the semantics of the Go functions the original's
//! `envconfig` calls, so that every value the original accepts is accepted here with the
//! same meaning.
//!
//! Deliberate differences, each rejecting or accepting input the original treats another way:
//! - [`parse_duration`] rejects negative durations (see its doc).
//! - [`parse_f64`]/[`parse_f32`] reject hexadecimal floats (`0x1p-2`), which Go accepts.
//! - [`parse_map`] splits an item at its first `:`; Go's `envconfig` rejects an item with
//!   more than one `:`, so this accepts a superset.

use crate::go::syntax::{parse_magnitude, underscore_ok};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::Duration;

/// Why a value does not parse. The `Display` text is the reason shown after
/// `NAME=value is not valid: `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The variable is set to the empty string, which only string-valued settings accept.
    #[error("empty value (unset the variable to use its default)")]
    Empty,
    /// Not one of Go's twelve boolean spellings.
    #[error("expected a boolean: 1, t, T, TRUE, true, True, 0, f, F, FALSE, false or False")]
    Bool,
    /// Not an integer literal.
    #[error("expected an integer such as 42, -7, 0x1F, 0o17, 017 or 0b101")]
    Int,
    /// A well-formed integer outside the range the setting allows.
    #[error("out of range: must be between {min} and {max}")]
    OutOfRange {
        /// Smallest allowed value.
        min: i64,
        /// Largest allowed value.
        max: i64,
    },
    /// A share that is not in (0, 1].
    #[error("must be a share greater than 0 and at most 1")]
    ShareOutOfRange,
    /// A share that is not in [0, 1].
    #[error("must be a share from 0 to 1")]
    ShareOutOfUnitRange,
    /// Zero or negative where the setting needs a positive value.
    #[error("must be greater than zero")]
    NotPositive,
    /// Not a decimal floating-point number, `inf`/`infinity` or `nan`.
    #[error("expected a decimal number such as 0.8, 1e-3 or inf")]
    Float,
    /// A hexadecimal float such as `0x1p-2`.
    #[error("hexadecimal floating-point numbers are not supported; write the value in decimal")]
    HexFloat,
    /// A finite decimal number too large for the setting's float width.
    #[error("out of range for a {bits}-bit float")]
    FloatOutOfRange {
        /// 32 or 64.
        bits: u8,
    },
    /// Not a duration.
    #[error("expected a duration such as 300ms, 1.5h or 1h2m3s")]
    Duration,
    /// A number without a unit (only `0` may omit it).
    #[error("missing unit in duration (units: ns, us, µs, ms, s, m, h; only 0 may omit it)")]
    DurationUnitMissing,
    /// A unit other than `ns`, `us`, `µs`, `μs`, `ms`, `s`, `m`, `h`.
    #[error("unknown unit {unit:?} in duration (units: ns, us, µs, ms, s, m, h)")]
    DurationUnitUnknown {
        /// The unit as written.
        unit: String,
    },
    /// A duration beyond Go's `time.Duration` range.
    #[error("duration too large (at most 2562047h47m16.854775807s)")]
    DurationOutOfRange,
    /// A well-formed negative, non-zero duration.
    #[error("negative durations are not allowed")]
    NegativeDuration,
    /// A map item without `:`.
    #[error("map item {item:?} has no ':' (expected key:value,key:value)")]
    MapItem {
        /// The offending item.
        item: String,
    },
    /// Not one of the values of a closed set.
    #[error("expected one of {expected}")]
    OneOf {
        /// The accepted spellings, comma-separated.
        expected: &'static str,
    },
    /// The process environment holds bytes that are not UTF-8.
    #[error("not valid UTF-8")]
    NotUnicode,
}

/// Go `strconv.ParseBool`: exactly `1, t, T, TRUE, true, True` (true) and
/// `0, f, F, FALSE, false, False` (false); no other case mix, no surrounding spaces.
pub fn parse_bool(s: &str) -> Result<bool, ParseError> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        "" => Err(ParseError::Empty),
        _ => Err(ParseError::Bool),
    }
}

/// Go `strconv.ParseInt(s, 0, 64)`.
///
/// An optional `+`/`-`, then a base given by the prefix: `0b`/`0B` binary, `0o`/`0O` octal,
/// `0x`/`0X` hex, a bare leading `0` octal (`017` is 15, `08` is invalid), otherwise
/// decimal. Underscores may separate digits as in Go integer literals (`1_000`, `0x_ff`,
/// `0_7`), never doubled, leading or trailing. Values outside `i64` are
/// [`ParseError::OutOfRange`].
pub fn parse_int(s: &str) -> Result<i64, ParseError> {
    let (negative, unsigned) = match s.as_bytes().first() {
        None => return Err(ParseError::Empty),
        Some(b'+') => (false, &s[1..]),
        Some(b'-') => (true, &s[1..]),
        Some(_) => (false, s),
    };
    let out_of_range = || ParseError::OutOfRange {
        min: i64::MIN,
        max: i64::MAX,
    };
    let magnitude = i128::from(
        parse_magnitude(unsigned)
            .map_err(|_| ParseError::Int)?
            .ok_or_else(out_of_range)?,
    );
    let value = if negative { -magnitude } else { magnitude };
    i64::try_from(value).map_err(|_| out_of_range())
}

/// [`parse_int`] narrowed to a TCP/UDP port, `0..=65535`.
pub fn parse_port(s: &str) -> Result<u16, ParseError> {
    let out_of_range = || ParseError::OutOfRange {
        min: 0,
        max: u16::MAX.into(),
    };
    match parse_int(s) {
        Ok(value) => u16::try_from(value).map_err(|_| out_of_range()),
        Err(ParseError::OutOfRange { .. }) => Err(out_of_range()),
        Err(e) => Err(e),
    }
}

/// Go `strconv.ParseFloat(s, 64)` for decimal input.
///
/// Accepts an optional sign, digits with at most one `.` (`5.`, `.5`), an optional exponent
/// (`1e-3`, `1E+3`), Go digit-separating underscores, `inf`/`infinity` with an optional
/// sign and `nan` without one (both case-insensitive). The result is the nearest `f64`; a
/// finite input that rounds to infinity is [`ParseError::FloatOutOfRange`], one that
/// underflows becomes 0 (as in Go). Hexadecimal floats are rejected.
pub fn parse_f64(s: &str) -> Result<f64, ParseError> {
    match float_text(s)? {
        FloatText::Special(value) => Ok(value),
        FloatText::Decimal(text) => match text.parse::<f64>() {
            Ok(value) if value.is_infinite() => Err(ParseError::FloatOutOfRange { bits: 64 }),
            Ok(value) => Ok(value),
            Err(_) => Err(ParseError::Float),
        },
    }
}

/// Go `strconv.ParseFloat(s, 32)`: [`parse_f64`]'s syntax, rounded once, directly to the
/// nearest `f32`.
pub fn parse_f32(s: &str) -> Result<f32, ParseError> {
    match float_text(s)? {
        // Only ±inf and NaN reach this arm; they convert exactly.
        FloatText::Special(value) => Ok(value as f32),
        FloatText::Decimal(text) => match text.parse::<f32>() {
            Ok(value) if value.is_infinite() => Err(ParseError::FloatOutOfRange { bits: 32 }),
            Ok(value) => Ok(value),
            Err(_) => Err(ParseError::Float),
        },
    }
}

enum FloatText<'a> {
    /// `inf`, `infinity` or `nan`.
    Special(f64),
    /// Syntax-checked decimal text without underscores; Rust's float grammar accepts it.
    Decimal(Cow<'a, str>),
}

/// Go `strconv.readFloat`/`special` for base 10.
fn float_text(s: &str) -> Result<FloatText<'_>, ParseError> {
    let b = s.as_bytes();
    let (sign, unsigned) = match b.first() {
        None => return Err(ParseError::Empty),
        Some(b'+') => (1.0, &s[1..]),
        Some(b'-') => (-1.0, &s[1..]),
        Some(_) => (1.0, s),
    };
    if unsigned.eq_ignore_ascii_case("inf") || unsigned.eq_ignore_ascii_case("infinity") {
        return Ok(FloatText::Special(sign * f64::INFINITY));
    }
    if s.eq_ignore_ascii_case("nan") {
        return Ok(FloatText::Special(f64::NAN));
    }

    let mut i = b.len() - unsigned.len();
    if i + 2 < b.len() && b[i] == b'0' && b[i + 1] | 0x20 == b'x' {
        return Err(ParseError::HexFloat);
    }
    let (mut saw_dot, mut saw_digits, mut underscores) = (false, false, false);
    while let Some(&c) = b.get(i) {
        match c {
            b'_' => underscores = true,
            b'.' if !saw_dot => saw_dot = true,
            b'0'..=b'9' => saw_digits = true,
            _ => break,
        }
        i += 1;
    }
    if !saw_digits {
        return Err(ParseError::Float);
    }
    if b.get(i).is_some_and(|c| c | 0x20 == b'e') {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if !b.get(i).is_some_and(u8::is_ascii_digit) {
            return Err(ParseError::Float);
        }
        while let Some(&c) = b.get(i) {
            match c {
                b'_' => underscores = true,
                b'0'..=b'9' => {}
                _ => break,
            }
            i += 1;
        }
    }
    if i != b.len() {
        return Err(ParseError::Float);
    }
    if !underscores {
        return Ok(FloatText::Decimal(Cow::Borrowed(s)));
    }
    if !underscore_ok(s) {
        return Err(ParseError::Float);
    }
    Ok(FloatText::Decimal(Cow::Owned(s.replace('_', ""))))
}

/// Go `time.ParseDuration`, restricted to non-negative results.
///
/// Syntax: an optional sign, then `0` alone, or one or more `<number><unit>` terms
/// (`1h2m3s`), where a number is digits with an optional fraction (`1.5`, `.5`, `1.`) and the
/// unit is one of `ns`, `us`, `µs` (U+00B5), `μs` (U+03BC), `ms`, `s`, `m`, `h`. Fractions
/// are converted exactly as Go does (through an `f64`, truncating to whole nanoseconds), and
/// the total must fit Go's `time.Duration` (at most `2562047h47m16.854775807s`).
///
/// Negative durations: the syntax is accepted as Go accepts it, but a negative non-zero
/// result is rejected with [`ParseError::NegativeDuration`] instead of being kept in a signed
/// type. Every duration setting is an interval, timeout, age or window; in the original a
/// negative one is either a start-up crash (the stats flush ticker panics) or a degenerate
/// mode nobody configures on purpose (an instantly expiring timeout), so rejecting it at
/// start-up with a clear reason is safer than carrying a sign that every user would have to
/// re-check. `-0` and `-0s` are zero and accepted.
pub fn parse_duration(s: &str) -> Result<Duration, ParseError> {
    let (negative, nanos) = parse_go_duration(s)?;
    if negative && nanos != 0 {
        return Err(ParseError::NegativeDuration);
    }
    Ok(Duration::from_nanos(nanos))
}

/// [`parse_duration`], also rejecting zero.
pub fn parse_positive_duration(s: &str) -> Result<Duration, ParseError> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(ParseError::NotPositive);
    }
    Ok(d)
}

/// `1 << 63`: the magnitude bound Go's `time.ParseDuration` works with.
const GO_DURATION_LIMIT: u64 = 1 << 63;

/// Go `time.ParseDuration` as (is negative, magnitude in nanoseconds).
fn parse_go_duration(s: &str) -> Result<(bool, u64), ParseError> {
    let (negative, mut rest) = match s.as_bytes().first() {
        None => return Err(ParseError::Empty),
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        Some(_) => (false, s),
    };
    if rest == "0" {
        return Ok((negative, 0));
    }
    if rest.is_empty() {
        return Err(ParseError::Duration);
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        if !rest.starts_with(|c: char| c == '.' || c.is_ascii_digit()) {
            return Err(ParseError::Duration);
        }
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let mut value = leading_int(&rest[..int_len])?;
        rest = &rest[int_len..];
        let (mut fraction, mut scale, mut fraction_len) = (0, 1.0, 0);
        if let Some(after_dot) = rest.strip_prefix('.') {
            fraction_len = after_dot.bytes().take_while(u8::is_ascii_digit).count();
            (fraction, scale) = leading_fraction(&after_dot[..fraction_len]);
            rest = &after_dot[fraction_len..];
        }
        if int_len == 0 && fraction_len == 0 {
            return Err(ParseError::Duration);
        }
        // The unit runs up to the next digit or '.', both ASCII, so the split is on a char
        // boundary.
        let unit_len = rest
            .bytes()
            .take_while(|&c| c != b'.' && !c.is_ascii_digit())
            .count();
        if unit_len == 0 {
            return Err(ParseError::DurationUnitMissing);
        }
        let unit: u64 = match &rest[..unit_len] {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            other => {
                return Err(ParseError::DurationUnitUnknown {
                    unit: other.to_owned(),
                })
            }
        };
        rest = &rest[unit_len..];
        if value > GO_DURATION_LIMIT / unit {
            return Err(ParseError::DurationOutOfRange);
        }
        value *= unit;
        if fraction > 0 {
            // Go: v += uint64(float64(f) * (float64(unit) / scale)); at most 3.6e12 here.
            value += (fraction as f64 * (unit as f64 / scale)) as u64;
            if value > GO_DURATION_LIMIT {
                return Err(ParseError::DurationOutOfRange);
            }
        }
        total = total
            .checked_add(value)
            .filter(|&t| t <= GO_DURATION_LIMIT)
            .ok_or(ParseError::DurationOutOfRange)?;
    }
    if !negative && total > GO_DURATION_LIMIT - 1 {
        return Err(ParseError::DurationOutOfRange);
    }
    Ok((negative, total))
}

/// Go `time.leadingInt` on a run of ASCII digits.
fn leading_int(digits: &str) -> Result<u64, ParseError> {
    let mut x: u64 = 0;
    for c in digits.bytes() {
        if x > GO_DURATION_LIMIT / 10 {
            return Err(ParseError::DurationOutOfRange);
        }
        x = x * 10 + u64::from(c - b'0');
        if x > GO_DURATION_LIMIT {
            return Err(ParseError::DurationOutOfRange);
        }
    }
    Ok(x)
}

/// Go `time.leadingFraction` on a run of ASCII digits: (digits as an integer, 10^count),
/// ignoring digits once the integer would pass `1 << 63`.
fn leading_fraction(digits: &str) -> (u64, f64) {
    let (mut x, mut scale) = (0u64, 1.0f64);
    for c in digits.bytes() {
        if x > (GO_DURATION_LIMIT - 1) / 10 {
            break;
        }
        let y = x * 10 + u64::from(c - b'0');
        if y > GO_DURATION_LIMIT {
            break;
        }
        x = y;
        scale *= 10.0;
    }
    (x, scale)
}

/// `envconfig` list: a value that is empty or only whitespace is the empty list; otherwise
/// the items between commas, verbatim (`"a, b"` is `["a", " b"]`, `"a,,b"` has an empty
/// item).
pub fn parse_list(s: &str) -> Vec<String> {
    if s.trim().is_empty() {
        return Vec::new();
    }
    s.split(',').map(str::to_owned).collect()
}

/// `envconfig` map: a value that is empty or only whitespace is the empty map; otherwise
/// comma-separated `key:value` items, split at the first `:` (so a value may contain `:`),
/// keys and values verbatim; a later duplicate key wins, as in Go. An item without `:`
/// (including the empty item of a trailing comma) is [`ParseError::MapItem`].
pub fn parse_map(s: &str) -> Result<BTreeMap<String, String>, ParseError> {
    let mut map = BTreeMap::new();
    if s.trim().is_empty() {
        return Ok(map);
    }
    for item in s.split(',') {
        let (key, value) = item.split_once(':').ok_or_else(|| ParseError::MapItem {
            item: item.to_owned(),
        })?;
        map.insert(key.to_owned(), value.to_owned());
    }
    Ok(map)
}

/// A share in (0, 1].
pub fn parse_share(s: &str) -> Result<f64, ParseError> {
    let share = parse_f64(s)?;
    if share > 0.0 && share <= 1.0 {
        Ok(share)
    } else {
        Err(ParseError::ShareOutOfRange)
    }
}

/// A count of at least 1.
pub fn parse_positive_size(s: &str) -> Result<usize, ParseError> {
    match parse_int(s)? {
        n @ 1.. => Ok(usize::try_from(n).unwrap_or(usize::MAX)),
        _ => Err(ParseError::OutOfRange {
            min: 1,
            max: i64::MAX,
        }),
    }
}

/// A count ≥ 0.
pub fn parse_count(s: &str) -> Result<u64, ParseError> {
    let n = parse_int(s)?;
    u64::try_from(n).map_err(|_| ParseError::OutOfRange {
        min: 0,
        max: i64::MAX,
    })
}

#[cfg(test)]
mod tests;
