//! Bad configuration input: every case gets a clear error naming the file
//! and the line, never a panic; random input (proptest) never panics the
//! loader or the matcher.

use proptest::prelude::*;
use ratelimit::config::{load, ConfigError, ConfigFile, Entry, LimitOverride};

fn load_one(contents: impl Into<Vec<u8>>) -> Result<ratelimit::config::Config, ConfigError> {
    load(&[ConfigFile::new("config.bad.yaml", contents)], false)
}

fn err(contents: impl Into<Vec<u8>>) -> ConfigError {
    match load_one(contents) {
        Ok(_) => panic!("expected the file to be rejected"),
        Err(e) => e,
    }
}

#[test]
fn tab_indentation_names_file_and_line() {
    let e = err("domain: d\ndescriptors:\n\t- key: a\n");
    assert_eq!(
        e.to_string(),
        "config.bad.yaml: error loading config file: yaml: line 3: found character that cannot start any token"
    );
    assert_eq!(e.line, Some(3));
}

#[test]
fn float_value_gets_the_original_text_and_our_line() {
    let e = err("domain: d\ndescriptors:\n  - key: a\n    value: 1.5\n");
    assert_eq!(e.to_string(), "config.bad.yaml: error checking config");
    assert_eq!(e.line, Some(4));
}

#[test]
fn huge_numbers_are_rejected_with_a_line() {
    let e = err("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 99999999999999999999999}\n");
    assert_eq!(e.to_string(), "config.bad.yaml: error checking config");
    assert_eq!(e.line, Some(4));
    let e = err("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 4294967296}\n");
    assert!(e
        .to_string()
        .contains("line 4: cannot unmarshal !!int `4294967296` into uint32"));
    assert_eq!(e.line, Some(4));
}

#[test]
fn non_utf8_bytes_name_the_line() {
    let mut bytes = b"domain: d\ndescriptors:\n  - key: a\n    value: ".to_vec();
    bytes.extend_from_slice(&[0xff, 0xfe, b'\n']);
    let e = err(bytes);
    assert!(
        e.to_string()
            .starts_with("config.bad.yaml: error loading config file: yaml: "),
        "{e}"
    );
    assert_eq!(e.line, Some(4));
}

#[test]
fn unknown_key_suggests_the_right_one() {
    let e = err("domain: d\ndescriptors:\n  - key: a\n    rate_limt: {unit: second}\n");
    assert_eq!(
        e.to_string(),
        "config.bad.yaml: config error, unknown key 'rate_limt'"
    );
    assert_eq!(e.line, Some(4));
    assert_eq!(e.hint.as_deref(), Some("did you mean 'rate_limit'?"));
    assert_eq!(
        e.detailed(),
        "config.bad.yaml: config error, unknown key 'rate_limt' (line 4); did you mean 'rate_limit'?"
    );
}

#[test]
fn validation_errors_carry_the_line() {
    let e = err("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: fortnight\n");
    assert_eq!(
        e.to_string(),
        "config.bad.yaml: invalid rate limit unit 'fortnight'"
    );
    assert_eq!(e.line, Some(5));
    let e = err("domain: d\ndescriptors:\n  - key: a\n  - key: a\n");
    assert_eq!(e.line, Some(4));
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let doc = format!("domain: d\ndescriptors: {}", "[".repeat(200_000));
    let e = err(doc);
    assert!(e.to_string().contains("exceeded max depth"), "{e}");
    assert_eq!(e.line, Some(2));
    // Deep but valid descriptor nesting loads.
    let mut doc = String::from("domain: d\ndescriptors:\n");
    for depth in 0..100 {
        let pad = "  ".repeat(depth * 2);
        doc.push_str(&format!("{pad}- key: k{depth}\n{pad}  descriptors:\n"));
    }
    assert!(load_one(doc).is_ok());
}

#[test]
fn ten_megabytes_of_junk_is_a_syntax_error() {
    let mut doc = "domain: d\ndescriptors:\n".to_string();
    while doc.len() < 10 * 1024 * 1024 {
        doc.push_str("  - key: a\n    value: \"unterminated\n");
    }
    let e = err(doc);
    assert!(
        e.to_string()
            .starts_with("config.bad.yaml: error loading config file: yaml: "),
        "{e}"
    );
    assert!(e.line.is_some());
}

#[test]
fn ten_megabytes_of_valid_rules_load() {
    let mut doc = "domain: d\ndescriptors:\n".to_string();
    let mut i = 0;
    while doc.len() < 10 * 1024 * 1024 {
        doc.push_str(&format!(
            "  - key: k\n    value: v{i}\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n"
        ));
        i += 1;
    }
    let cfg = load_one(doc).expect("loads");
    assert_eq!(cfg.dump().lines().count(), i);
}

#[test]
fn alias_bomb_is_bounded() {
    let mut doc = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..10 {
        let p = i - 1;
        doc.push_str(&format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    let e = err(doc);
    assert!(e.to_string().contains("excessive aliasing"), "{e}");
}

const KEYS: &[&str] = &[
    "domain",
    "descriptors",
    "key",
    "value",
    "rate_limit",
    "unit",
    "requests_per_unit",
    "unlimited",
    "name",
    "replaces",
    "shadow_mode",
    "metadata",
    "share_threshold",
    "bogus",
];
const SCALARS: &[&str] = &[
    "a",
    "'*'",
    "a*b",
    "second",
    "minute",
    "5",
    "-1",
    "010",
    "1.5",
    "yes",
    "~",
    "''",
    "\"x\"",
    "[]",
    "{}",
    "[a]",
    "&x a",
    "*x",
    "!!binary /w==",
    "0x1F",
    "\t",
    "- a",
];

/// A YAML-ish document assembled from the spec's vocabulary, so the fuzzing
/// reaches the checks behind the parser rather than only syntax errors.
fn yamlish() -> impl Strategy<Value = String> {
    let line = (
        0usize..6,
        prop::sample::select(KEYS),
        prop::sample::select(SCALARS),
        any::<bool>(),
    )
        .prop_map(|(indent, key, scalar, list)| {
            let dash = if list { "- " } else { "" };
            format!("{}{dash}{key}: {scalar}\n", "  ".repeat(indent))
        });
    prop::collection::vec(line, 0..24).prop_map(|lines| lines.concat())
}

fn entries() -> impl Strategy<Value = Vec<Entry>> {
    let part = prop::sample::select(vec!["a", "k", "v", "a_b", "*", "", "foo", "x_y_z"]);
    prop::collection::vec((part.clone(), part), 0..5)
        .prop_map(|v| v.into_iter().map(|(k, val)| Entry::new(k, val)).collect())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = load_one(bytes);
    }

    #[test]
    fn yamlish_documents_never_panic_and_errors_name_the_file(doc in yamlish()) {
        if let Err(e) = load_one(doc) {
            prop_assert!(e.to_string().starts_with("config.bad.yaml: "));
        }
    }

    #[test]
    fn matcher_never_panics(doc in yamlish(), es in entries(), unit in -2i32..10, domain in prop::sample::select(vec!["d", "a", ""])) {
        let base = "domain: d\ndescriptors:\n  - key: a\n    value: '*'\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n    descriptors:\n      - key: k\n        detailed_metric: true\n        rate_limit: {unit: minute, requests_per_unit: 2}\n  - key: a_b\n    value_to_metric: true\n    rate_limit: {unit: hour, requests_per_unit: 3}\n";
        for text in [doc.as_str(), base] {
            if let Ok(cfg) = load_one(text) {
                let _ = cfg.tree().find(domain, &es, None);
                let o = LimitOverride { requests_per_unit: 1, unit };
                let _ = cfg.tree().find(domain, &es, Some(&o));
            }
        }
    }
}
