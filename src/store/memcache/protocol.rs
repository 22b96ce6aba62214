//! The four commands of memcached's text protocol the original's backend
//! uses, as pure encoders and a reply parser over bytes: `get` of many keys,
//! `incr`, `add`, and nothing else.
//!
//! Replies (memcached's `protocol.txt`):
//! - `get`: `VALUE <key> <flags> <bytes>\r\n<data>\r\n` per key found, then
//!   `END\r\n`;
//! - `incr`: the new value, or `NOT_FOUND`;
//! - `add`: `STORED` or `NOT_STORED`;
//! - any: `ERROR`, `CLIENT_ERROR <text>`, `SERVER_ERROR <text>`.

/// A reply, or why the bytes are not one yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `get`: the values found, in reply order.
    Values(Vec<(String, Vec<u8>)>),
    /// `incr`: the value after it.
    Number(u64),
    /// `incr` of a key that does not exist.
    NotFound,
    /// `add` stored the key.
    Stored,
    /// `add` of a key that exists.
    NotStored,
    /// The server refused the command.
    Error(String),
}

/// Why bytes could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// More bytes are needed.
    #[error("incomplete reply")]
    Incomplete,
    /// Not a reply of this protocol.
    #[error("malformed memcache reply: {0}")]
    Malformed(String),
}

/// Whether memcached accepts `key`: 1 to 250 bytes, no whitespace or
/// control characters.
pub fn valid_key(key: &str) -> bool {
    !key.is_empty() && key.len() <= 250 && key.bytes().all(|b| b > b' ' && b != 0x7f)
}

/// `get k1 k2 …\r\n`.
pub fn get(keys: &[&str]) -> Vec<u8> {
    let mut out = b"get".to_vec();
    for k in keys {
        out.push(b' ');
        out.extend_from_slice(k.as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// `incr <key> <by>\r\n`.
pub fn incr(key: &str, by: u64) -> Vec<u8> {
    format!("incr {key} {by}\r\n").into_bytes()
}

/// `decr <key> <by>\r\n`: memcached stops at 0.
pub fn decr(key: &str, by: u64) -> Vec<u8> {
    format!("decr {key} {by}\r\n").into_bytes()
}

/// `add <key> 0 <exptime> <len>\r\n<value>\r\n`.
pub fn add(key: &str, value: &str, exptime: u64) -> Vec<u8> {
    format!("add {key} 0 {exptime} {}\r\n{value}\r\n", value.len()).into_bytes()
}

/// The `exptime` for a key that should live `ttl` seconds at Unix time
/// `now`: memcached reads a value above 30 days as an absolute Unix time,
/// so a longer TTL is sent as `now + ttl` (the original sends the seconds
/// and its month and year keys expire at once).
pub fn exptime(ttl: u64, now: u64) -> u64 {
    const THIRTY_DAYS: u64 = 30 * 24 * 3600;
    if ttl > THIRTY_DAYS {
        now + ttl
    } else {
        ttl
    }
}

/// One line of `buf` from `at`: the line and where the next starts.
fn line(buf: &[u8], at: usize) -> Result<(&str, usize), ParseError> {
    let rest = &buf[at.min(buf.len())..];
    let end = rest
        .windows(2)
        .position(|w| w == b"\r\n")
        .ok_or(ParseError::Incomplete)?;
    let text = std::str::from_utf8(&rest[..end])
        .map_err(|_| ParseError::Malformed("a reply line that is not UTF-8".into()))?;
    Ok((text, at + end + 2))
}

/// Parses the reply to a `get` (`multi: true`) or another command at the
/// start of `buf`: the reply and how many bytes it took.
pub fn parse(buf: &[u8], multi: bool) -> Result<(Reply, usize), ParseError> {
    let (first, mut at) = line(buf, 0)?;
    if first == "ERROR" || first.starts_with("CLIENT_ERROR") || first.starts_with("SERVER_ERROR") {
        return Ok((Reply::Error(first.to_string()), at));
    }
    if !multi {
        let reply = match first {
            "NOT_FOUND" => Reply::NotFound,
            "STORED" => Reply::Stored,
            "NOT_STORED" => Reply::NotStored,
            n => Reply::Number(
                n.trim()
                    .parse()
                    .map_err(|_| ParseError::Malformed(n.to_string()))?,
            ),
        };
        return Ok((reply, at));
    }
    let mut values = Vec::new();
    let mut header = first;
    loop {
        if header == "END" {
            return Ok((Reply::Values(values), at));
        }
        let mut parts = header.split(' ');
        let (Some("VALUE"), Some(key), Some(_flags), Some(len)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(ParseError::Malformed(header.to_string()));
        };
        let len: usize = len
            .parse()
            .map_err(|_| ParseError::Malformed(header.to_string()))?;
        let key = key.to_string();
        if buf.len() < at + len + 2 {
            return Err(ParseError::Incomplete);
        }
        values.push((key, buf[at..at + len].to_vec()));
        at += len + 2;
        let (next, after) = line(buf, at)?;
        header = next;
        at = after;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_the_commands() {
        assert_eq!(get(&["a", "b_c"]), b"get a b_c\r\n");
        assert_eq!(incr("k", 3), b"incr k 3\r\n");
        assert_eq!(add("k", "3", 60), b"add k 0 60 1\r\n3\r\n");
    }

    #[test]
    fn parses_every_reply() {
        let got = b"VALUE a 0 1\r\n5\r\nVALUE b 0 2\r\n12\r\nEND\r\n";
        assert_eq!(
            parse(got, true),
            Ok((
                Reply::Values(vec![
                    ("a".into(), b"5".to_vec()),
                    ("b".into(), b"12".to_vec())
                ]),
                got.len()
            ))
        );
        assert_eq!(parse(b"END\r\n", true), Ok((Reply::Values(vec![]), 5)));
        assert_eq!(parse(b"7\r\n", false), Ok((Reply::Number(7), 3)));
        assert_eq!(parse(b"NOT_FOUND\r\n", false), Ok((Reply::NotFound, 11)));
        assert_eq!(parse(b"STORED\r\n", false), Ok((Reply::Stored, 8)));
        assert_eq!(parse(b"NOT_STORED\r\n", false), Ok((Reply::NotStored, 12)));
        assert_eq!(
            parse(b"CLIENT_ERROR bad data chunk\r\n", false).map(|r| r.0),
            Ok(Reply::Error("CLIENT_ERROR bad data chunk".into()))
        );
        for partial in [
            &b"VALUE a 0 1\r\n5"[..],
            b"VALUE a 0 1\r\n5\r\n",
            b"EN",
            b"7",
        ] {
            assert_eq!(
                parse(partial, !partial.starts_with(b"7")),
                Err(ParseError::Incomplete)
            );
        }
        assert!(matches!(
            parse(b"WHAT\r\n", true),
            Err(ParseError::Malformed(_))
        ));
    }

    #[test]
    fn keys_and_expiry_follow_memcached_rules() {
        assert!(valid_key("domain_key_value_1700000000"));
        assert!(!valid_key("has space") && !valid_key("") && !valid_key(&"k".repeat(251)));
        assert_eq!(exptime(3600, 1_700_000_000), 3600);
        assert_eq!(
            exptime(31_536_000, 1_700_000_000),
            1_731_536_000,
            "a year: absolute"
        );
    }

    proptest::proptest! {
        /// Any byte string either parses, is incomplete, or is malformed:
        /// never a panic; a parsed reply never claims more bytes than given.
        #[test]
        fn never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..64), multi in proptest::bool::ANY) {
            if let Ok((_, used)) = parse(&bytes, multi) {
                proptest::prop_assert!(used <= bytes.len());
            }
        }
    }
}
