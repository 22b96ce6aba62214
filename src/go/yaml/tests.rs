use super::*;

fn scalar(text: &str) -> Resolved {
    resolve_plain(text)
}

#[test]
fn yaml11_booleans_and_nulls() {
    for t in ["y", "Yes", "ON", "true"] {
        assert_eq!(scalar(t), Resolved::Bool(true), "{t}");
    }
    for t in ["n", "No", "off", "FALSE"] {
        assert_eq!(scalar(t), Resolved::Bool(false), "{t}");
    }
    for t in ["", "~", "null", "Null", "NULL"] {
        assert_eq!(scalar(t), Resolved::Null, "{t}");
    }
    assert_eq!(scalar("nULL"), Resolved::Str);
}

#[test]
fn yaml11_integers() {
    assert_eq!(scalar("010"), Resolved::Int(8));
    assert_eq!(scalar("0x1F"), Resolved::Int(31));
    assert_eq!(scalar("0b101"), Resolved::Int(5));
    assert_eq!(scalar("0o17"), Resolved::Int(15));
    assert_eq!(scalar("1_000"), Resolved::Int(1000));
    assert_eq!(scalar("-1"), Resolved::Int(-1));
    assert_eq!(scalar("+5"), Resolved::Int(5));
    assert_eq!(
        scalar("18446744073709551615"),
        Resolved::Int(u64::MAX as i128)
    );
    // One past uint64 is a float, as in yaml.v2.
    assert!(matches!(scalar("18446744073709551616"), Resolved::Float(_)));
    // `08` is not octal, so it falls through to the float pattern.
    assert_eq!(scalar("08"), Resolved::Float(8.0));
}

#[test]
fn yaml11_floats_and_strings() {
    assert_eq!(scalar("1.5"), Resolved::Float(1.5));
    assert_eq!(scalar("1e3"), Resolved::Float(1000.0));
    assert_eq!(scalar(".5"), Resolved::Float(0.5));
    assert_eq!(scalar(".inf"), Resolved::Float(f64::INFINITY));
    assert_eq!(scalar("1e999"), Resolved::Str);
    assert_eq!(scalar("2020-01-01"), Resolved::Str);
    assert_eq!(scalar("50.0.0.5"), Resolved::Str);
    assert_eq!(scalar("-"), Resolved::Str);
}

#[test]
fn quoted_scalars_are_strings() {
    let node = parse(b"a: '5'\nb: \"yes\"\nc: 5\n").expect("parses");
    let NodeKind::Map(pairs) = node.kind else {
        panic!("not a map")
    };
    let values: Vec<_> = pairs
        .iter()
        .map(|(_, v)| match &v.kind {
            NodeKind::Scalar(s) => s.value.clone(),
            _ => panic!("not a scalar"),
        })
        .collect();
    assert_eq!(values, [Resolved::Str, Resolved::Str, Resolved::Int(5)]);
}

#[test]
fn lines_are_one_based() {
    let node = parse(b"a: 1\nb:\n  - c: 2\n").expect("parses");
    let NodeKind::Map(pairs) = node.kind else {
        panic!("not a map")
    };
    assert_eq!(pairs[0].0.line, 1);
    assert_eq!(pairs[1].1.line, 3);
}

#[test]
fn syntax_errors_use_yaml_v2_line_rules() {
    assert_eq!(
        parse(b"'''\n").unwrap_err().message,
        "yaml: line 2: found unexpected end of stream"
    );
    assert_eq!(
        parse(b"a: *x\n").unwrap_err().message,
        "yaml: unknown anchor 'x' referenced"
    );
}

#[test]
fn only_the_first_document_is_read() {
    let node = parse(b"a: 1\n---\nb: [\n").expect("second document ignored");
    assert!(matches!(node.kind, NodeKind::Map(ref p) if p.len() == 1));
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let deep = "[".repeat(100_000);
    let err = parse(deep.as_bytes()).unwrap_err();
    assert!(
        err.message.contains("exceeded max depth"),
        "{}",
        err.message
    );
}

#[test]
fn aliases_are_bounded_by_the_bytes_they_expand_to() {
    // One 64 KiB scalar aliased 100 times: 6.4 MiB from a 65 KiB file,
    // few nodes, refused by bytes with the line of the alias that
    // crossed the budget.
    let big = "v".repeat(64 * 1024);
    let mut doc = format!("big: &big {big}\nlist:\n");
    for _ in 0..100 {
        doc.push_str("  - *big\n");
    }
    let err = parse(doc.as_bytes()).expect_err("refused");
    assert!(
        err.message.contains("excessive aliasing"),
        "{}",
        err.message
    );
    assert!(err.message.contains("bytes"), "{}", err.message);
    let line = err.line.expect("a line");
    assert!((3..=102).contains(&line), "line {line}");
    // A few aliased blocks, as configs use them, are fine.
    let ok = "base: &b {unit: second, requests_per_unit: 5}\na: *b\nb: *b\nc: *b\n";
    assert!(parse(ok.as_bytes()).is_ok());
}

#[test]
fn alias_bombs_are_bounded() {
    let mut doc = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..12 {
        let prev = i - 1;
        doc.push_str(&format!(
                "a{i}: &a{i} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"
            ));
    }
    let err = parse(doc.as_bytes()).unwrap_err();
    assert!(
        err.message.contains("excessive aliasing"),
        "{}",
        err.message
    );
}

#[test]
fn merge_keys_apply_in_order() {
    let node = parse(b"base: &b {x: 1, y: 2}\nm:\n  x: 0\n  <<: *b\n  y: 3\n").expect("parses");
    let NodeKind::Map(pairs) = node.kind else {
        panic!("not a map")
    };
    let NodeKind::Map(m) = &pairs[1].1.kind else {
        panic!("not a map")
    };
    let keys: Vec<_> = m
        .iter()
        .map(|(k, _)| match &k.kind {
            NodeKind::Scalar(s) => s.text.clone(),
            _ => String::new(),
        })
        .collect();
    assert_eq!(keys, ["x", "x", "y", "y"]);
}
