//! Number syntax of Go's `strconv`, shared by the settings parser (the
//! original reads integers with `strconv.ParseInt(s, 0, 64)`) and the YAML
//! reader (yaml.v2 resolves plain scalars with the same function after
//! dropping underscores).

/// Go `strconv.ParseInt(s, 0, 64)`, falling back to `ParseUint(s, 0, 64)`
/// for an unsigned text above `i64::MAX`, as yaml.v2 does.
///
/// Base prefixes `0x`, `0o`, `0b` (either case) and a leading `0` (octal) are
/// honoured; underscores may separate digits as in Go integer literals. The
/// result is always in `i64::MIN..=u64::MAX`.
pub(crate) fn parse_int(s: &str) -> Option<i128> {
    let (negative, signed, unsigned) = match s.as_bytes().first()? {
        b'+' => (false, true, &s[1..]),
        b'-' => (true, true, &s[1..]),
        _ => (false, false, s),
    };
    let magnitude = parse_magnitude(unsigned).ok()??;
    let value = if negative {
        -(magnitude as i128)
    } else {
        magnitude as i128
    };
    let fits_i64 = value >= i64::MIN as i128 && value <= i64::MAX as i128;
    // ParseUint takes no sign, so only an unsigned text may exceed i64::MAX.
    if fits_i64 || (!signed && value <= u64::MAX as i128) {
        Some(value)
    } else {
        None
    }
}

/// The text is not an integer in Go syntax.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NotAnInteger;

/// Go `strconv.ParseUint(s, 0, 64)` on the unsigned part: `Ok(None)` is a well-formed
/// number that does not fit `u64`.
pub(crate) fn parse_magnitude(s: &str) -> Result<Option<u64>, NotAnInteger> {
    let b = s.as_bytes();
    let (base, digits): (u8, &[u8]) = match b {
        [] => return Err(NotAnInteger),
        [b'0', p, _, ..] if p | 0x20 == b'b' => (2, &b[2..]),
        [b'0', p, _, ..] if p | 0x20 == b'o' => (8, &b[2..]),
        [b'0', p, _, ..] if p | 0x20 == b'x' => (16, &b[2..]),
        [b'0', rest @ ..] => (8, rest),
        _ => (10, b),
    };
    let mut value = Some(0u64);
    let mut underscores = false;
    for &c in digits {
        let digit = match c {
            b'_' => {
                underscores = true;
                continue;
            }
            b'0'..=b'9' => c - b'0',
            b'a'..=b'z' | b'A'..=b'Z' => (c | 0x20) - b'a' + 10,
            _ => return Err(NotAnInteger),
        };
        if digit >= base {
            return Err(NotAnInteger);
        }
        value = value
            .and_then(|v| v.checked_mul(base.into()))
            .and_then(|v| v.checked_add(digit.into()));
    }
    if underscores && !underscore_ok(s) {
        return Err(NotAnInteger);
    }
    Ok(value)
}

/// Go `strconv.underscoreOK`: underscores only between digits, or between a base prefix
/// and a digit.
pub(crate) fn underscore_ok(s: &str) -> bool {
    let mut b = s.as_bytes();
    if let [b'+' | b'-', rest @ ..] = b {
        b = rest;
    }
    // The class of the last byte seen: `^` start, `0` digit or base prefix, `_`, `!` other.
    let mut saw = b'^';
    let mut hex = false;
    if let [b'0', p, rest @ ..] = b {
        if matches!(p | 0x20, b'b' | b'o' | b'x') {
            saw = b'0';
            hex = p | 0x20 == b'x';
            b = rest;
        }
    }
    for &c in b {
        if c.is_ascii_digit() || (hex && c.is_ascii_hexdigit()) {
            saw = b'0';
        } else if c == b'_' {
            if saw != b'0' {
                return false;
            }
            saw = b'_';
        } else {
            if saw == b'_' {
                return false;
            }
            saw = b'!';
        }
    }
    saw != b'_'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bases_and_signs() {
        assert_eq!(parse_int("10"), Some(10));
        assert_eq!(parse_int("010"), Some(8));
        assert_eq!(parse_int("0x1f"), Some(31));
        assert_eq!(parse_int("0X1F"), Some(31));
        assert_eq!(parse_int("0o17"), Some(15));
        assert_eq!(parse_int("0b101"), Some(5));
        assert_eq!(parse_int("-0x10"), Some(-16));
        assert_eq!(parse_int("+7"), Some(7));
        assert_eq!(parse_int("0"), Some(0));
        assert_eq!(parse_int("08"), None);
        assert_eq!(parse_int("0x"), None);
        assert_eq!(parse_int(""), None);
        assert_eq!(parse_int("-"), None);
        assert_eq!(parse_int("1.5"), None);
        assert_eq!(parse_int("--1"), None);
        assert_eq!(parse_int("-+1"), None);
    }

    #[test]
    fn ranges() {
        assert_eq!(parse_int("9223372036854775807"), Some(i64::MAX as i128));
        assert_eq!(parse_int("-9223372036854775808"), Some(i64::MIN as i128));
        assert_eq!(parse_int("-9223372036854775809"), None);
        assert_eq!(parse_int("18446744073709551615"), Some(u64::MAX as i128));
        assert_eq!(parse_int("+18446744073709551615"), None);
        assert_eq!(parse_int("18446744073709551616"), None);
    }

    #[test]
    fn underscores_separate_digits() {
        assert_eq!(parse_int("1_000"), Some(1000));
        assert_eq!(parse_int("_1"), None);
        assert_eq!(parse_int("0x_1F"), Some(31));
        assert_eq!(parse_int("0b1_0"), Some(2));
        assert_eq!(parse_int("0x1__F"), None);
        assert_eq!(parse_int("0x1F_"), None);
    }
}
