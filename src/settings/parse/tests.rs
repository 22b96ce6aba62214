use super::*;

#[test]
fn bool_accepts_exactly_go_spellings() {
    for s in ["1", "t", "T", "TRUE", "true", "True"] {
        assert_eq!(parse_bool(s), Ok(true), "{s}");
    }
    for s in ["0", "f", "F", "FALSE", "false", "False"] {
        assert_eq!(parse_bool(s), Ok(false), "{s}");
    }
    for s in [
        "yes", "no", "on", "TRue", "tRUE", " true", "true ", "2", "y",
    ] {
        assert_eq!(parse_bool(s), Err(ParseError::Bool), "{s}");
    }
    assert_eq!(parse_bool(""), Err(ParseError::Empty));
}

#[test]
fn int_decimal_and_sign() {
    assert_eq!(parse_int("42"), Ok(42));
    assert_eq!(parse_int("+42"), Ok(42));
    assert_eq!(parse_int("-42"), Ok(-42));
    assert_eq!(parse_int("0"), Ok(0));
    assert_eq!(parse_int("-0"), Ok(0));
}

#[test]
fn int_prefixes_select_the_base() {
    assert_eq!(parse_int("0x1F"), Ok(31));
    assert_eq!(parse_int("0X1f"), Ok(31));
    assert_eq!(parse_int("-0x10"), Ok(-16));
    assert_eq!(parse_int("0o17"), Ok(15));
    assert_eq!(parse_int("0O17"), Ok(15));
    assert_eq!(parse_int("017"), Ok(15), "a bare leading 0 means octal");
    assert_eq!(parse_int("0b101"), Ok(5));
    assert_eq!(parse_int("0B101"), Ok(5));
    assert_eq!(parse_int("00"), Ok(0));
}

#[test]
fn int_underscores_follow_go_literal_rules() {
    assert_eq!(parse_int("1_000"), Ok(1000));
    assert_eq!(parse_int("0x_ff"), Ok(255));
    assert_eq!(parse_int("0b1_0"), Ok(2));
    assert_eq!(parse_int("0_7"), Ok(7));
    assert_eq!(parse_int("-1_0"), Ok(-10));
    for s in ["_1", "1_", "1__0", "0x_", "0b_", "0_", "+_1"] {
        assert_eq!(parse_int(s), Err(ParseError::Int), "{s}");
    }
}

#[test]
fn int_rejects_malformed() {
    for s in [
        "08", "09", "0b2", "0o8", "0x", "0b", "0o", "0xg", "1.0", "1e3", " 1", "1 ", "+", "-",
        "++1", "+-1", "abc", "١",
    ] {
        assert_eq!(parse_int(s), Err(ParseError::Int), "{s:?}");
    }
    assert_eq!(parse_int(""), Err(ParseError::Empty));
}

#[test]
fn int_range_is_i64() {
    let range = ParseError::OutOfRange {
        min: i64::MIN,
        max: i64::MAX,
    };
    assert_eq!(parse_int("9223372036854775807"), Ok(i64::MAX));
    assert_eq!(parse_int("-9223372036854775808"), Ok(i64::MIN));
    assert_eq!(parse_int("-0x8000000000000000"), Ok(i64::MIN));
    assert_eq!(parse_int("9223372036854775808"), Err(range.clone()));
    assert_eq!(parse_int("-9223372036854775809"), Err(range.clone()));
    assert_eq!(parse_int("0xFFFFFFFFFFFFFFFF"), Err(range.clone()));
    assert_eq!(parse_int("99999999999999999999999"), Err(range));
}

#[test]
fn port_range() {
    let range = ParseError::OutOfRange { min: 0, max: 65535 };
    assert_eq!(parse_port("8080"), Ok(8080));
    assert_eq!(parse_port("0x1F90"), Ok(8080));
    assert_eq!(parse_port("0"), Ok(0));
    assert_eq!(parse_port("65535"), Ok(65535));
    assert_eq!(parse_port("65536"), Err(range.clone()));
    assert_eq!(parse_port("-1"), Err(range.clone()));
    assert_eq!(parse_port("99999999999999999999999"), Err(range));
    assert_eq!(parse_port("http"), Err(ParseError::Int));
    assert_eq!(parse_port(""), Err(ParseError::Empty));
}

#[test]
fn float_decimal_forms() {
    assert_eq!(parse_f64("0.8"), Ok(0.8));
    assert_eq!(parse_f64(".5"), Ok(0.5));
    assert_eq!(parse_f64("5."), Ok(5.0));
    assert_eq!(parse_f64("+1.5"), Ok(1.5));
    assert_eq!(parse_f64("-2"), Ok(-2.0));
    assert_eq!(parse_f64("1e3"), Ok(1000.0));
    assert_eq!(parse_f64("1E-3"), Ok(0.001));
    assert_eq!(parse_f64("2.5e+2"), Ok(250.0));
    assert_eq!(parse_f64("1_000.5"), Ok(1000.5));
    assert_eq!(parse_f64("1e1_0"), Ok(1e10));
    assert_eq!(parse_f64("007"), Ok(7.0), "no octal for floats");
    assert_eq!(parse_f64("1e-400"), Ok(0.0), "underflow is zero, as in Go");
}

#[test]
fn float_specials_as_go() {
    assert_eq!(parse_f64("inf"), Ok(f64::INFINITY));
    assert_eq!(parse_f64("+Inf"), Ok(f64::INFINITY));
    assert_eq!(parse_f64("-INFINITY"), Ok(f64::NEG_INFINITY));
    assert!(parse_f64("NaN").is_ok_and(f64::is_nan));
    assert!(parse_f64("nan").is_ok_and(f64::is_nan));
    assert_eq!(parse_f32("-inf"), Ok(f32::NEG_INFINITY));
    // Go accepts no sign on NaN and no partial "infinity".
    for s in ["+nan", "-NaN", "infin", "infinityy", "in"] {
        assert_eq!(parse_f64(s), Err(ParseError::Float), "{s}");
    }
}

#[test]
fn float_rejects_malformed() {
    for s in [
        ".", "e5", "1e", "1e+", "1.2.3", "1_", "_1", "1__0", "1_.5", "1._5", "1e_5", " 1", "1 ",
        "0.8f", "--1", "1,5",
    ] {
        assert_eq!(parse_f64(s), Err(ParseError::Float), "{s:?}");
    }
    assert_eq!(parse_f64(""), Err(ParseError::Empty));
    assert_eq!(parse_f64("0x1p-2"), Err(ParseError::HexFloat));
}

#[test]
fn float_range_depends_on_width() {
    assert_eq!(
        parse_f32("1e39"),
        Err(ParseError::FloatOutOfRange { bits: 32 })
    );
    assert_eq!(parse_f64("1e39"), Ok(1e39));
    assert_eq!(
        parse_f64("1e309"),
        Err(ParseError::FloatOutOfRange { bits: 64 })
    );
    assert_eq!(parse_f32("0.8"), Ok(0.8f32));
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn duration_units() {
    assert_eq!(parse_duration("300ms"), Ok(ms(300)));
    assert_eq!(parse_duration("150us"), Ok(Duration::from_micros(150)));
    assert_eq!(
        parse_duration("150\u{b5}s"),
        Ok(Duration::from_micros(150)),
        "micro sign"
    );
    assert_eq!(
        parse_duration("150\u{3bc}s"),
        Ok(Duration::from_micros(150)),
        "greek mu"
    );
    assert_eq!(parse_duration("7ns"), Ok(Duration::from_nanos(7)));
    assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
    assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
    assert_eq!(parse_duration("24h"), Ok(Duration::from_secs(86_400)));
}

#[test]
fn duration_fractions_and_sums() {
    assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5400)));
    assert_eq!(parse_duration(".5s"), Ok(ms(500)));
    assert_eq!(parse_duration("1.s"), Ok(ms(1000)));
    assert_eq!(parse_duration("1.000000001s"), Ok(Duration::new(1, 1)));
    assert_eq!(parse_duration("0.1ns"), Ok(Duration::ZERO), "truncated");
    assert_eq!(parse_duration("1h2m3s"), Ok(Duration::from_secs(3723)));
    assert_eq!(parse_duration("1s1s"), Ok(Duration::from_secs(2)));
    assert_eq!(parse_duration("+5s"), Ok(Duration::from_secs(5)));
}

#[test]
fn duration_zero_needs_no_unit_but_others_do() {
    assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
    assert_eq!(parse_duration("+0"), Ok(Duration::ZERO));
    assert_eq!(parse_duration("-0"), Ok(Duration::ZERO));
    assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
    assert_eq!(parse_duration("-0s"), Ok(Duration::ZERO));
    assert_eq!(parse_duration("1"), Err(ParseError::DurationUnitMissing));
    assert_eq!(parse_duration("00"), Err(ParseError::DurationUnitMissing));
    assert_eq!(parse_duration("10"), Err(ParseError::DurationUnitMissing));
    assert_eq!(
        parse_duration("1.5.5s"),
        Err(ParseError::DurationUnitMissing)
    );
    assert_eq!(parse_duration("1s5"), Err(ParseError::DurationUnitMissing));
}

#[test]
fn duration_rejects_malformed() {
    for s in [
        "-", "+", ".s", "-.s", "s", "h1", " 1s", "1s ", "--1s", "1 s",
    ] {
        assert!(parse_duration(s).is_err(), "{s:?}");
    }
    assert_eq!(parse_duration(".s"), Err(ParseError::Duration));
    assert_eq!(parse_duration(""), Err(ParseError::Empty));
    let unknown = |u: &str| ParseError::DurationUnitUnknown { unit: u.to_owned() };
    assert_eq!(parse_duration("1x"), Err(unknown("x")));
    assert_eq!(parse_duration("1S"), Err(unknown("S")));
    assert_eq!(parse_duration("1sec"), Err(unknown("sec")));
    assert_eq!(parse_duration("1d"), Err(unknown("d")));
    assert_eq!(parse_duration("1h-2m"), Err(unknown("h-")));
    assert_eq!(parse_duration("1s "), Err(unknown("s ")));
}

#[test]
fn duration_negative_is_rejected() {
    assert_eq!(parse_duration("-1m"), Err(ParseError::NegativeDuration));
    assert_eq!(parse_duration("-1.5h"), Err(ParseError::NegativeDuration));
    assert_eq!(parse_go_duration("-1m"), Ok((true, 60_000_000_000)));
}

#[test]
fn duration_range_is_go_duration() {
    assert_eq!(
        parse_duration("2562047h47m16.854775807s"),
        Ok(Duration::from_nanos(i64::MAX as u64))
    );
    assert_eq!(
        parse_duration("9223372036854775807ns"),
        Ok(Duration::from_nanos(i64::MAX as u64))
    );
    for s in [
        "2562047h47m16.854775808s",
        "9223372036854775808ns",
        "2562048h",
        "99999999999999999999s",
        "9223372036854775808ns9223372036854775808ns",
    ] {
        assert_eq!(
            parse_duration(s),
            Err(ParseError::DurationOutOfRange),
            "{s}"
        );
    }
    // Go's lower bound is one nanosecond further out than its upper bound.
    assert_eq!(
        parse_go_duration("-9223372036854775808ns"),
        Ok((true, 1 << 63))
    );
}

#[test]
fn positive_duration_rejects_zero() {
    assert_eq!(parse_positive_duration("0s"), Err(ParseError::NotPositive));
    assert_eq!(parse_positive_duration("1ns"), Ok(Duration::from_nanos(1)));
}

#[test]
fn list_items_are_verbatim() {
    assert_eq!(parse_list(""), Vec::<String>::new());
    assert_eq!(parse_list("  "), Vec::<String>::new());
    assert_eq!(parse_list("a"), ["a"]);
    assert_eq!(parse_list("a,b"), ["a", "b"]);
    assert_eq!(parse_list("a, b"), ["a", " b"]);
    assert_eq!(parse_list("a,,b"), ["a", "", "b"]);
    assert_eq!(parse_list("a,"), ["a", ""]);
}

#[test]
fn map_items() {
    let map = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|&(k, v)| (k.to_owned(), v.to_owned()))
            .collect::<BTreeMap<_, _>>()
    };
    assert_eq!(parse_map(""), Ok(map(&[])));
    assert_eq!(parse_map(" \t"), Ok(map(&[])));
    assert_eq!(parse_map("a:1,b:2"), Ok(map(&[("a", "1"), ("b", "2")])));
    assert_eq!(parse_map("a:b:c"), Ok(map(&[("a", "b:c")])));
    assert_eq!(parse_map("a:,:v"), Ok(map(&[("a", ""), ("", "v")])));
    assert_eq!(parse_map("a:1,a:2"), Ok(map(&[("a", "2")])));
    assert_eq!(parse_map("a: 1"), Ok(map(&[("a", " 1")])));
    let item = |i: &str| ParseError::MapItem { item: i.to_owned() };
    assert_eq!(parse_map("a"), Err(item("a")));
    assert_eq!(parse_map("a:1,b"), Err(item("b")));
    assert_eq!(parse_map("a:1,"), Err(item("")));
    assert_eq!(parse_map("a=1"), Err(item("a=1")));
}
