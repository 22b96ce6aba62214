//! What Go prints: grpc-go's error text, `strconv.Quote`, and the compact
//! protobuf text format the original prints the response in.

use std::fmt::Write as _;

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    self, quota::ExpirationSpecifier, rate_limit::Unit, Code, DescriptorStatus, Quota,
};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::google::protobuf::{value::Kind, ListValue, NullValue, Struct, Value};

/// Go's `strconv.Quote` (what `%q` prints for a string).
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if go_is_print(c) => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if (c as u32) < 0x10000 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => {
                let _ = write!(out, "\\U{:08x}", c as u32);
            }
        }
    }
    out.push('"');
    out
}

/// An approximation of Go's `unicode.IsPrint`: no control characters, no
/// space other than U+0020, no format characters, no private use.
fn go_is_print(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    if c.is_control() || c.is_whitespace() {
        return false;
    }
    let u = c as u32;
    !matches!(u,
        0xad | 0x600..=0x605 | 0x61c | 0x6dd | 0x70f | 0x180e | 0x200b..=0x200f
        | 0x202a..=0x202e | 0x2060..=0x206f | 0xd800..=0xf8ff | 0xfeff
        | 0xfff9..=0xfffb | 0xfffe | 0xffff | 0xe0001 | 0xe0020..=0xe007f
        | 0xf0000..=0x10ffff)
}

/// grpc-go's `status.Error(...).Error()` text.
pub(crate) fn grpc_error_text(status: &tonic::Status) -> String {
    use tonic::Code as C;
    let code = match status.code() {
        C::Ok => "OK",
        C::Cancelled => "Canceled",
        C::Unknown => "Unknown",
        C::InvalidArgument => "InvalidArgument",
        C::DeadlineExceeded => "DeadlineExceeded",
        C::NotFound => "NotFound",
        C::AlreadyExists => "AlreadyExists",
        C::PermissionDenied => "PermissionDenied",
        C::ResourceExhausted => "ResourceExhausted",
        C::FailedPrecondition => "FailedPrecondition",
        C::Aborted => "Aborted",
        C::OutOfRange => "OutOfRange",
        C::Unimplemented => "Unimplemented",
        C::Internal => "Internal",
        C::Unavailable => "Unavailable",
        C::DataLoss => "DataLoss",
        C::Unauthenticated => "Unauthenticated",
    };
    let mut message = status.message().to_string();
    if message.is_empty() {
        // Some transport failures carry their cause in the source chain only.
        let mut source = std::error::Error::source(status);
        while let Some(e) = source {
            if !message.is_empty() {
                message.push_str(": ");
            }
            message.push_str(&e.to_string());
            source = e.source();
        }
    }
    format!("rpc error: code = {code} desc = {message}")
}

// ---------------------------------------------------------------------------
// Go's compact protobuf text format for the response.

/// One message being written: `name:value` items separated by one space.
#[derive(Default)]
pub(crate) struct Text {
    items: Vec<String>,
}

impl Text {
    fn scalar(&mut self, name: &str, value: impl std::fmt::Display) {
        self.items.push(format!("{name}:{value}"));
    }

    fn message(&mut self, name: &str, inner: Text) {
        self.items.push(format!("{name}:{{{}}}", inner.finish()));
    }

    fn string(&mut self, name: &str, value: &str) {
        if !value.is_empty() {
            self.scalar(name, text_quote(value.as_bytes()));
        }
    }

    fn bytes(&mut self, name: &str, value: &[u8]) {
        if !value.is_empty() {
            self.scalar(name, text_quote(value));
        }
    }

    fn uint(&mut self, name: &str, value: u64) {
        if value != 0 {
            self.scalar(name, value);
        }
    }

    fn int(&mut self, name: &str, value: i64) {
        if value != 0 {
            self.scalar(name, value);
        }
    }

    fn enumeration(&mut self, name: &str, value: i32, label: Option<&'static str>) {
        if value != 0 {
            match label {
                Some(label) => self.scalar(name, label),
                None => self.scalar(name, value),
            }
        }
    }

    fn finish(self) -> String {
        self.items.join(" ")
    }
}

/// Go prototext's string quoting (also used for bytes).
fn text_quote(bytes: &[u8]) -> String {
    let mut out = String::from("\"");
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if (c as u32) < 0x20 || c == '\u{7f}' => {
                    let _ = write!(out, "\\x{:02x}", c as u32);
                }
                c if (0x80..=0x9f).contains(&(c as u32)) => {
                    let _ = write!(out, "\\u{:04x}", c as u32);
                }
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out.push('"');
    out
}

/// Go's `strconv.FormatFloat(f, 'g', -1, 64)` with prototext's inf/nan.
pub(crate) fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.into();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.into();
    }
    // Shortest round-trip digits and exponent, e.g. "-1.2345e-7".
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    // Shortest formatting decides with precision 6, as Go does.
    if !(-4..6).contains(&exp) {
        let mut m = digits[..1].to_string();
        if digits.len() > 1 {
            m.push('.');
            m.push_str(&digits[1..]);
        }
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{m}e{esign}{:02}", exp.abs());
    }
    let n = digits.len() as i32;
    let body = if exp < 0 {
        format!("0.{}{digits}", "0".repeat((-exp - 1) as usize))
    } else if exp + 1 >= n {
        format!("{digits}{}", "0".repeat((exp + 1 - n) as usize))
    } else {
        let split = (exp + 1) as usize;
        format!("{}.{}", &digits[..split], &digits[split..])
    };
    format!("{sign}{body}")
}

pub(crate) fn response_text(r: &RateLimitResponse) -> String {
    let mut t = Text::default();
    t.enumeration(
        "overall_code",
        r.overall_code,
        Code::try_from(r.overall_code).ok().map(|c| c.as_str_name()),
    );
    for s in &r.statuses {
        t.message("statuses", status_text(s));
    }
    for h in &r.response_headers_to_add {
        t.message("response_headers_to_add", header_text(h));
    }
    for h in &r.request_headers_to_add {
        t.message("request_headers_to_add", header_text(h));
    }
    t.bytes("raw_body", &r.raw_body);
    if let Some(m) = &r.dynamic_metadata {
        t.message("dynamic_metadata", struct_text(m));
    }
    if let Some(q) = &r.quota {
        t.message("quota", quota_text(q));
    }
    t.finish()
}

fn status_text(s: &DescriptorStatus) -> Text {
    let mut t = Text::default();
    t.enumeration(
        "code",
        s.code,
        Code::try_from(s.code).ok().map(|c| c.as_str_name()),
    );
    if let Some(l) = &s.current_limit {
        t.message("current_limit", limit_text(l));
    }
    t.uint("limit_remaining", u64::from(s.limit_remaining));
    if let Some(d) = &s.duration_until_reset {
        let mut dt = Text::default();
        dt.int("seconds", d.seconds);
        dt.int("nanos", i64::from(d.nanos));
        t.message("duration_until_reset", dt);
    }
    if let Some(q) = &s.quota {
        t.message("quota", quota_text(q));
    }
    t
}

fn limit_text(l: &rate_limit_response::RateLimit) -> Text {
    // Declaration order in rls.proto: name (3), requests_per_unit (1), unit (2).
    let mut t = Text::default();
    t.string("name", &l.name);
    t.uint("requests_per_unit", u64::from(l.requests_per_unit));
    t.enumeration(
        "unit",
        l.unit,
        Unit::try_from(l.unit).ok().map(|u| u.as_str_name()),
    );
    t
}

fn quota_text(q: &Quota) -> Text {
    let mut t = Text::default();
    t.uint("requests", u64::from(q.requests));
    if let Some(ExpirationSpecifier::ValidUntil(ts)) = &q.expiration_specifier {
        let mut tt = Text::default();
        tt.int("seconds", ts.seconds);
        tt.int("nanos", i64::from(ts.nanos));
        t.message("valid_until", tt);
    }
    t.string("id", &q.id);
    t
}

fn header_text(h: &HeaderValue) -> Text {
    let mut t = Text::default();
    t.string("key", &h.key);
    t.string("value", &h.value);
    t.bytes("raw_value", &h.raw_value);
    t
}

fn struct_text(s: &Struct) -> Text {
    let mut t = Text::default();
    let mut keys: Vec<&String> = s.fields.keys().collect();
    keys.sort();
    for k in keys {
        let mut entry = Text::default();
        entry.scalar("key", text_quote(k.as_bytes()));
        if let Some(v) = s.fields.get(k) {
            entry.message("value", value_text(v));
        }
        t.message("fields", entry);
    }
    t
}

fn value_text(v: &Value) -> Text {
    let mut t = Text::default();
    match &v.kind {
        None => {}
        Some(Kind::NullValue(n)) => t.scalar(
            "null_value",
            NullValue::try_from(*n)
                .map(|n| n.as_str_name().to_string())
                .unwrap_or_else(|_| n.to_string()),
        ),
        Some(Kind::NumberValue(f)) => t.scalar("number_value", go_float(*f)),
        Some(Kind::StringValue(s)) => t.scalar("string_value", text_quote(s.as_bytes())),
        Some(Kind::BoolValue(b)) => t.scalar("bool_value", b),
        Some(Kind::StructValue(s)) => t.message("struct_value", struct_text(s)),
        Some(Kind::ListValue(l)) => t.message("list_value", list_text(l)),
    }
    t
}

fn list_text(l: &ListValue) -> Text {
    let mut t = Text::default();
    for v in &l.values {
        t.message("values", value_text(v));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::google::protobuf::Duration;

    #[test]
    fn go_quote_matches_strconv_quote() {
        assert_eq!(go_quote("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(go_quote("\n\t\u{1}\u{7f}"), r#""\n\t\x01\x7f""#);
        assert_eq!(go_quote("é ü"), "\"é ü\"");
        assert_eq!(go_quote("\u{a0}\u{200b}"), r#""\u00a0\u200b""#);
    }

    #[test]
    fn text_format_of_a_full_status() {
        let r = RateLimitResponse {
            overall_code: Code::OverLimit as i32,
            statuses: vec![
                DescriptorStatus {
                    code: Code::Ok as i32,
                    current_limit: Some(rate_limit_response::RateLimit {
                        name: String::new(),
                        requests_per_unit: 10,
                        unit: Unit::Minute as i32,
                    }),
                    limit_remaining: 9,
                    duration_until_reset: Some(Duration {
                        seconds: 41,
                        nanos: 0,
                    }),
                    quota: None,
                },
                DescriptorStatus::default(),
                DescriptorStatus {
                    code: 9,
                    ..Default::default()
                },
            ],
            response_headers_to_add: vec![HeaderValue {
                key: "X-RateLimit-Limit".into(),
                value: "10, 10;w=60".into(),
                raw_value: vec![],
            }],
            raw_body: b"a\xff\"".to_vec(),
            ..Default::default()
        };
        assert_eq!(
            response_text(&r),
            "overall_code:OVER_LIMIT statuses:{code:OK current_limit:{requests_per_unit:10 \
             unit:MINUTE} limit_remaining:9 duration_until_reset:{seconds:41}} statuses:{} \
             statuses:{code:9} response_headers_to_add:{key:\"X-RateLimit-Limit\" \
             value:\"10, 10;w=60\"} raw_body:\"a\\xff\\\"\""
        );
        assert_eq!(response_text(&RateLimitResponse::default()), "");
    }

    #[test]
    fn text_format_of_metadata() {
        let mut inner = Struct::default();
        inner.fields.insert(
            "z".into(),
            Value {
                kind: Some(Kind::BoolValue(true)),
            },
        );
        inner.fields.insert(
            "a".into(),
            Value {
                kind: Some(Kind::ListValue(ListValue {
                    values: vec![
                        Value {
                            kind: Some(Kind::NumberValue(1.5)),
                        },
                        Value {
                            kind: Some(Kind::NullValue(0)),
                        },
                    ],
                })),
            },
        );
        let r = RateLimitResponse {
            dynamic_metadata: Some(inner),
            ..Default::default()
        };
        assert_eq!(
            response_text(&r),
            "dynamic_metadata:{fields:{key:\"a\" value:{list_value:{values:{number_value:1.5} \
             values:{null_value:NULL_VALUE}}}} fields:{key:\"z\" value:{bool_value:true}}}"
        );
    }

    #[test]
    fn floats_like_go() {
        for (f, s) in [
            (1.0, "1"),
            (0.1, "0.1"),
            (123456.0, "123456"),
            (100000.0, "100000"),
            (1e6, "1e+06"),
            (1e21, "1e+21"),
            (1234567.0, "1.234567e+06"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-2.5e-7, "-2.5e-07"),
            (f64::INFINITY, "inf"),
            (f64::NAN, "nan"),
        ] {
            assert_eq!(go_float(f), s, "{f}");
        }
    }
}
