use super::*;

fn utf16(text: &str, big_endian: bool) -> Vec<u8> {
    let mut out = if big_endian {
        vec![0xFE, 0xFF]
    } else {
        vec![0xFF, 0xFE]
    };
    for u in text.encode_utf16() {
        out.extend(if big_endian {
            u.to_be_bytes()
        } else {
            u.to_le_bytes()
        });
    }
    out
}

#[test]
fn utf16_streams_read_as_their_utf8_text() {
    let text = "domain: d\ndescriptors:\n  - key: \u{1F600}\n";
    for big in [false, true] {
        let parsed = parse(&utf16(text, big)).expect("valid UTF-16");
        assert_eq!(parsed, parse(text.as_bytes()).expect("valid UTF-8"));
    }
}

#[test]
fn broken_utf16_is_yaml_v2s_reader_error_with_its_line() {
    let mut lone_high = utf16("a: b\nc: ", false);
    lone_high.extend([0x00, 0xD8, 0x20, 0x00]);
    let e = parse(&lone_high).expect_err("unpaired");
    assert_eq!(
        (e.message.as_str(), e.line),
        ("yaml: expected low surrogate area", Some(2))
    );
    let mut lone_low = utf16("a: ", true);
    lone_low.extend([0xDC, 0x00]);
    assert_eq!(
        parse(&lone_low).expect_err("unpaired").message,
        "yaml: unexpected low surrogate area"
    );
    let mut dangling = utf16("a: ", false);
    dangling.extend([0x00, 0xD8]);
    assert_eq!(
        parse(&dangling).expect_err("cut").message,
        "yaml: incomplete UTF-16 surrogate pair"
    );
    let mut odd = utf16("a: b", false);
    odd.push(0x41);
    assert_eq!(
        parse(&odd).expect_err("odd").message,
        "yaml: incomplete UTF-16 character"
    );
}
