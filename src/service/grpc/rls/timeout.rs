//! The caller's deadline, as gRPC sends it: `grpc-timeout`.

use std::time::Duration;

use tonic::codegen::http::HeaderMap;

/// The `grpc-timeout` of a call: at most 8 digits and a unit (`H`, `M`,
/// `S`, `m`, `u`, `n`). `None` when the header is absent or malformed; a
/// malformed one is treated as absent, so the call keeps the store's own
/// deadline rather than being refused.
pub fn grpc_timeout(headers: &HeaderMap) -> Option<Duration> {
    parse(headers.get("grpc-timeout")?.to_str().ok()?)
}

fn parse(value: &str) -> Option<Duration> {
    if value.len() < 2 || value.len() > 9 {
        return None;
    }
    let (digits, unit) = value.split_at(value.len() - 1);
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unit_of_the_grpc_spec_is_read() {
        assert_eq!(parse("20m"), Some(Duration::from_millis(20)));
        assert_eq!(parse("19999u"), Some(Duration::from_micros(19_999)));
        assert_eq!(parse("5n"), Some(Duration::from_nanos(5)));
        assert_eq!(parse("1S"), Some(Duration::from_secs(1)));
        assert_eq!(parse("2M"), Some(Duration::from_secs(120)));
        assert_eq!(parse("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(
            parse("99999999H"),
            Some(Duration::from_secs(99_999_999 * 3600))
        );
    }

    #[test]
    fn a_malformed_timeout_is_no_timeout() {
        for bad in [
            "",
            "m",
            "20",
            "20ms",
            "-1m",
            "+1m",
            "123456789m",
            "1.5S",
            "20x",
            " 20m",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_header_is_read_from_the_call() {
        let mut headers = HeaderMap::new();
        assert_eq!(grpc_timeout(&headers), None);
        headers.insert("grpc-timeout", "15m".parse().expect("header value"));
        assert_eq!(grpc_timeout(&headers), Some(Duration::from_millis(15)));
    }
}
