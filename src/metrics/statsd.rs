//! The statsd wire format and transport.
//!
//! Lines are `<name>:<value>|c`, `|g` or `|ms`, each terminated by `\n`;
//! DogStatsD lines append `|#k:v,…`. `EXTRA_TAGS` are serialised into plain
//! statsd names as `<name>.__<k>=<v>` (sorted by key; `.`, `:` and `|` in
//! values become `_`; empty keys or values are dropped), as the original's
//! stats library does.
//!
//! The transport ([`StatsdClient`]) is only ever driven by the flush task:
//! the request path never performs I/O. Every network operation is bounded by
//! a timeout; on failure the batch is dropped (never retried, so memory stays
//! bounded), the connection is discarded and re-established at the next
//! flush, and a warning is logged at most once per [`WARN_INTERVAL`].

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::str::FromStr;
use std::time::Duration;

use tokio::time::Instant;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpStream, UdpSocket};

/// Largest UDP datagram sent (a conservative Ethernet-MTU payload); lines
/// are never split, so a single longer line travels alone.
pub const MAX_UDP_PAYLOAD: usize = 1432;

/// Minimum time between two "statsd unreachable" warnings.
pub const WARN_INTERVAL: Duration = Duration::from_secs(60);

/// The environment variable the original's stats library reads for the
/// statsd transport.
pub const STATSD_PROTOCOL_ENV: &str = "STATSD_PROTOCOL";

/// Transport of the statsd sink (`STATSD_PROTOCOL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StatsdProtocol {
    /// TCP, the original's default.
    #[default]
    Tcp,
    /// UDP.
    Udp,
}

/// An unknown `STATSD_PROTOCOL` value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("STATSD_PROTOCOL must be `tcp` or `udp`, not {0:?}")]
pub struct ProtocolError(
    /// The rejected value.
    pub String,
);

impl FromStr for StatsdProtocol {
    type Err = ProtocolError;

    /// `tcp` (also `tcp4`/`tcp6`, and the empty string, as the default) or
    /// `udp` (`udp4`/`udp6`), case-insensitively.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "" | "tcp" | "tcp4" | "tcp6" => Ok(StatsdProtocol::Tcp),
            "udp" | "udp4" | "udp6" => Ok(StatsdProtocol::Udp),
            _ => Err(ProtocolError(s.to_string())),
        }
    }
}

impl std::fmt::Display for StatsdProtocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StatsdProtocol::Tcp => "tcp",
            StatsdProtocol::Udp => "udp",
        })
    }
}

/// A tag value as serialised: `.`, `:` and `|` become `_`.
pub fn sanitize_tag_value(value: &str) -> String {
    value.replace(['.', ':', '|'], "_")
}

/// The tags as the original serialises them into a stat name: for each tag,
/// sorted by key, `.__<k>=<v>` with the value sanitised by
/// [`sanitize_tag_value`]; tags with an empty key or value are dropped.
///
/// ```
/// # use std::collections::BTreeMap;
/// use ratelimit::metrics::statsd::serialize_tags;
/// let tags: BTreeMap<String, String> =
///     [("z".into(), "1.2".into()), ("a".into(), "x:y|z".into())].into();
/// assert_eq!(serialize_tags(&tags), ".__a=x_y_z.__z=1_2");
/// ```
pub fn serialize_tags(tags: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    for (k, v) in tags {
        if k.is_empty() || v.is_empty() {
            continue;
        }
        out.push_str(".__");
        out.push_str(k);
        out.push('=');
        out.push_str(&sanitize_tag_value(v));
    }
    out
}

/// The DogStatsD tag block `|#k:v,…` (sorted by key, values sanitised, empty
/// keys or values dropped); empty when there is no tag.
pub fn dogstatsd_tags(tags: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    for (k, v) in tags {
        if k.is_empty() || v.is_empty() {
            continue;
        }
        out.push_str(if out.is_empty() { "|#" } else { "," });
        out.push_str(k);
        out.push(':');
        out.push_str(&sanitize_tag_value(v));
    }
    out
}

/// A gauge value as the wire carries it: integral values without a decimal
/// point, others in shortest form; negative values are clamped to 0 (a
/// leading sign means "adjust" in statsd, and the original's gauges are
/// unsigned); `None` for NaN or infinities, which are not sent.
pub fn format_gauge(value: f64) -> Option<String> {
    if !value.is_finite() {
        return None;
    }
    let value = value.max(0.0);
    if value.fract() == 0.0 && value < 1e19 {
        Some(format!("{}", value as u64))
    } else {
        Some(format!("{value}"))
    }
}

/// A timer sample (milliseconds) as the original sends it: whole
/// milliseconds, truncated; `None` for negative or non-finite values.
pub fn format_timer_ms(ms: f64) -> Option<String> {
    if !ms.is_finite() || ms < 0.0 {
        return None;
    }
    Some(format!("{}", ms.trunc() as u64))
}

/// Appends one line `<name>:<value>|<ty><tags>\n` to `buf`.
pub fn push_line(buf: &mut String, name: &str, value: &str, ty: &str, tags: &str) {
    // Writing to a String cannot fail.
    let _ = writeln!(buf, "{name}:{value}|{ty}{tags}");
}

/// Splits a payload of `\n`-terminated lines into datagrams of at most
/// [`MAX_UDP_PAYLOAD`] bytes, never splitting a line.
pub fn udp_datagrams(payload: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut end = 0;
    for (i, _) in payload.iter().enumerate().filter(|(_, b)| **b == b'\n') {
        let line_end = i + 1;
        if line_end - start > MAX_UDP_PAYLOAD && end > start {
            out.push(&payload[start..end]);
            start = end;
        }
        end = line_end;
    }
    if end > start {
        out.push(&payload[start..end]);
    }
    if end < payload.len() {
        out.push(&payload[end..]);
    }
    out
}

/// An open connection to the statsd server.
#[derive(Debug)]
enum Conn {
    Tcp(TcpStream),
    Udp(UdpSocket),
}

/// A statsd client: one connection, re-established lazily after failures.
///
/// Invariant: no call takes longer than a few multiples of `timeout` (name
/// resolution, connect and each write are individually bounded).
#[derive(Debug)]
pub struct StatsdClient {
    host: String,
    port: u16,
    protocol: StatsdProtocol,
    timeout: Duration,
    conn: Option<Conn>,
    warned_at: Option<Instant>,
    suppressed_lines: u64,
}

fn timed_out(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, format!("{what} timed out"))
}

impl StatsdClient {
    /// A client for `host:port`; nothing is resolved or connected yet.
    pub fn new(host: &str, port: u16, protocol: StatsdProtocol, timeout: Duration) -> Self {
        StatsdClient {
            host: host.to_string(),
            port,
            protocol,
            timeout,
            conn: None,
            warned_at: None,
            suppressed_lines: 0,
        }
    }

    async fn connect(&self) -> io::Result<Conn> {
        let addrs = tokio::time::timeout(
            self.timeout,
            tokio::net::lookup_host((self.host.as_str(), self.port)),
        )
        .await
        .map_err(|_| timed_out("name resolution"))??;
        let mut last = io::Error::new(
            io::ErrorKind::NotFound,
            format!("{} resolves to no address", self.host),
        );
        for addr in addrs {
            let attempt = async {
                match self.protocol {
                    StatsdProtocol::Tcp => {
                        let s = tokio::time::timeout(self.timeout, TcpStream::connect(addr))
                            .await
                            .map_err(|_| timed_out("connect"))??;
                        s.set_nodelay(true)?;
                        Ok(Conn::Tcp(s))
                    }
                    StatsdProtocol::Udp => {
                        let local = if addr.is_ipv4() {
                            "0.0.0.0:0"
                        } else {
                            "[::]:0"
                        };
                        let s = UdpSocket::bind(local).await?;
                        s.connect(addr).await?;
                        Ok(Conn::Udp(s))
                    }
                }
            };
            match attempt.await {
                Ok(c) => return Ok(c),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Sends `payload` (`\n`-terminated lines). On failure the connection is
    /// dropped (re-established on the next call) and the error returned; the
    /// payload is not kept.
    pub async fn send(&mut self, payload: &[u8]) -> io::Result<()> {
        if payload.is_empty() {
            return Ok(());
        }
        let result = self.try_send(payload).await;
        if result.is_err() {
            self.conn = None;
        }
        result
    }

    async fn try_send(&mut self, payload: &[u8]) -> io::Result<()> {
        let conn = match self.conn.take() {
            Some(c) => c,
            None => self.connect().await?,
        };
        let conn = self.conn.insert(conn);
        let timeout = self.timeout;
        match conn {
            Conn::Tcp(s) => tokio::time::timeout(timeout, async {
                s.write_all(payload).await?;
                s.flush().await
            })
            .await
            .map_err(|_| timed_out("write"))?,
            Conn::Udp(s) => {
                for datagram in udp_datagrams(payload) {
                    tokio::time::timeout(timeout, s.send(datagram))
                        .await
                        .map_err(|_| timed_out("send"))??;
                }
                Ok(())
            }
        }
    }

    /// Sends `payload` holding `lines` lines; a failure is logged (at most
    /// once per [`WARN_INTERVAL`], with the number of lines dropped since the
    /// previous warning) and otherwise ignored. Returns whether it was sent.
    pub async fn send_or_warn(&mut self, payload: &[u8], lines: u64) -> bool {
        match self.send(payload).await {
            Ok(()) => true,
            Err(e) => {
                self.suppressed_lines += lines;
                let due = self.warned_at.is_none_or(|t| t.elapsed() >= WARN_INTERVAL);
                if due {
                    tracing::warn!(
                        target: "ratelimit::metrics",
                        "statsd sink {}://{}:{} unavailable: {e}; dropped {} stat lines \
                         (next warning in {}s at the earliest)",
                        self.protocol,
                        self.host,
                        self.port,
                        self.suppressed_lines,
                        WARN_INTERVAL.as_secs()
                    );
                    self.warned_at = Some(Instant::now());
                    self.suppressed_lines = 0;
                }
                false
            }
        }
    }

    /// Closes the connection (a TCP stream is shut down so buffered lines
    /// are delivered before the FIN), bounded by the timeout.
    pub async fn close(&mut self) {
        if let Some(Conn::Tcp(mut s)) = self.conn.take() {
            let _ = tokio::time::timeout(self.timeout, s.shutdown()).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn extra_tags_serialisation() {
        let t = tags(&[
            ("zone", "eu.west:1|a"),
            ("app", "rl"),
            ("", "x"),
            ("empty", ""),
        ]);
        assert_eq!(serialize_tags(&t), ".__app=rl.__zone=eu_west_1_a");
        assert_eq!(serialize_tags(&BTreeMap::new()), "");
        assert_eq!(dogstatsd_tags(&t), "|#app:rl,zone:eu_west_1_a");
        assert_eq!(dogstatsd_tags(&BTreeMap::new()), "");
    }

    #[test]
    fn wire_lines() {
        let mut buf = String::new();
        push_line(
            &mut buf,
            "ratelimit.service.config_load_success",
            "1",
            "c",
            "",
        );
        push_line(&mut buf, "ratelimit.localcache.hitCount", "5", "g", "");
        push_line(
            &mut buf,
            "ratelimit_server.Check.response_time",
            "12",
            "ms",
            "|#a:b",
        );
        assert_eq!(
            buf,
            "ratelimit.service.config_load_success:1|c\n\
             ratelimit.localcache.hitCount:5|g\n\
             ratelimit_server.Check.response_time:12|ms|#a:b\n"
        );
    }

    #[test]
    fn value_formats() {
        assert_eq!(format_gauge(3.0).as_deref(), Some("3"));
        assert_eq!(format_gauge(0.5).as_deref(), Some("0.5"));
        assert_eq!(format_gauge(-2.0).as_deref(), Some("0"));
        assert_eq!(format_gauge(f64::NAN), None);
        assert_eq!(format_timer_ms(12.9).as_deref(), Some("12"));
        assert_eq!(format_timer_ms(0.4).as_deref(), Some("0"));
        assert_eq!(format_timer_ms(-1.0), None);
    }

    #[test]
    fn protocol_parsing() {
        assert_eq!("tcp".parse(), Ok(StatsdProtocol::Tcp));
        assert_eq!("UDP".parse(), Ok(StatsdProtocol::Udp));
        assert_eq!("".parse(), Ok(StatsdProtocol::Tcp));
        assert!("quic".parse::<StatsdProtocol>().is_err());
    }

    #[test]
    fn datagrams_never_split_lines() {
        let line = format!("{}:1|c\n", "x".repeat(100));
        let payload = line.repeat(40);
        let grams = udp_datagrams(payload.as_bytes());
        assert!(grams.len() > 1);
        for g in &grams {
            assert!(g.len() <= MAX_UDP_PAYLOAD);
            assert!(g.ends_with(b"\n"));
            assert_eq!(g.len() % line.len(), 0);
        }
        assert_eq!(grams.concat(), payload.as_bytes());
        let long = format!("{}:1|c\n", "y".repeat(2000));
        let grams = udp_datagrams(long.as_bytes());
        assert_eq!(grams, vec![long.as_bytes()]);
        assert!(udp_datagrams(b"").is_empty());
    }
}
