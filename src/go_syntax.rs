//! Number syntax of Go's `strconv`, shared by the settings parser (the
//! original reads integers with `strconv.ParseInt(s, 0, 64)`) and the YAML
//! reader (yaml.v2 resolves plain scalars with the same function after
//! dropping underscores).

/// Go `strconv.ParseInt(s, 0, 64)`, falling back to `ParseUint(s, 0, 64)`
/// for an unsigned text above `i64::MAX`, as yaml.v2 does.
///
/// Base prefixes `0x`, `0o`, `0b` (either case) and a leading `0` (octal) are
/// honoured; underscores are accepted only between digits after a base
/// prefix, as in Go. The result is always in `i64::MIN..=u64::MAX`.
pub(crate) fn parse_int(s: &str) -> Option<i128> {
    let (negative, signed, unsigned) = match s.as_bytes().first()? {
        b'+' => (false, true, &s[1..]),
        b'-' => (true, true, &s[1..]),
        _ => (false, false, s),
    };
    let magnitude = parse_uint(unsigned)?;
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

/// Go `strconv.ParseUint(s, 0, 64)`.
pub(crate) fn parse_uint(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    let (radix, digits, prefixed) = if b.len() >= 2 && b[0] == b'0' {
        match b[1] {
            b'x' | b'X' => (16, &s[2..], true),
            b'o' | b'O' => (8, &s[2..], true),
            b'b' | b'B' => (2, &s[2..], true),
            _ => (8, &s[1..], true),
        }
    } else {
        (10, s, false)
    };
    if digits.is_empty() {
        return None;
    }
    if digits.contains('_') && !underscores_ok(s, prefixed) {
        return None;
    }
    let clean: String = digits.chars().filter(|&c| c != '_').collect();
    if clean.is_empty() || clean.starts_with('+') || clean.starts_with('-') {
        return None;
    }
    u64::from_str_radix(&clean, radix).ok()
}

/// Go's `underscoreOK`: underscores need a base prefix and must separate
/// digits (never doubled, leading or trailing).
fn underscores_ok(s: &str, prefixed: bool) -> bool {
    if !prefixed {
        return false;
    }
    let b = s.as_bytes();
    // After the prefix, the text must alternate digit runs and single '_'.
    // A '_' right after the prefix is allowed by Go ("0x_1F").
    let mut prev_underscore = false;
    for (i, &c) in b.iter().enumerate().skip(1) {
        if c == b'_' {
            if prev_underscore {
                return false;
            }
            prev_underscore = true;
        } else {
            prev_underscore = false;
        }
        if i == b.len() - 1 && c == b'_' {
            return false;
        }
    }
    true
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
    fn underscores_need_a_prefix() {
        assert_eq!(parse_int("1_000"), None);
        assert_eq!(parse_int("0x_1F"), Some(31));
        assert_eq!(parse_int("0b1_0"), Some(2));
        assert_eq!(parse_int("0x1__F"), None);
        assert_eq!(parse_int("0x1F_"), None);
    }
}
