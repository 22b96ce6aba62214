//! `ratelimit_client`: a drop-in for the original's command-line client.
//!
//! Sends one `ShouldRateLimit` call and prints what the original prints:
//!
//! ```text
//! Flag: --descriptors="[ <key=a, value=b>  <key=c, value=d> ] [ <key=e, value=f> ] "
//! Flag: --dial_string="localhost:8081"
//! Flag: --domain="d"
//! Flag: --grpc-cert-file=""
//! Flag: --grpc-key-file=""
//! Flag: --grpc-server-ca-file=""
//! Flag: --grpc-use-tls="false"
//! Flag: --oltp-protocol=""
//! response: overall_code:OK statuses:{code:OK} statuses:{code:OK}
//! ```
//!
//! - The flag lines are Go's `flag.VisitAll` (every flag, sorted by name,
//!   final value quoted with Go's `%q`). The descriptors flag is shown with
//!   the original's own `String()`: per descriptor `[` + ` <key=K, value=V> `
//!   per entry + `] `.
//! - `-descriptors k=v,k2=v2` adds one descriptor; entries are split on `,`
//!   and every entry must be exactly `key=value` (one `=`), as in the
//!   original; anything else is Go's `invalid value ... for flag
//!   -descriptors: invalid descriptor list` with exit status 2.
//! - The response is printed in Go's compact protobuf text format (fields in
//!   declaration order, default scalars omitted, enums by name), with single
//!   spaces (Go inserts a random extra space at times; that is not kept).
//! - An RPC failure prints `request error: rpc error: code = <Code> desc =
//!   <message>` (grpc-go's error text) and exits 1.
//! - `-grpc-use-tls` connects with rustls: the `-grpc-server-ca-file` is then
//!   the only trust root (the original adds it to the system roots); without
//!   it the system's roots are (`SSL_CERT_FILE`, or the platform's store, as
//!   the stores' TLS reads them; `ratelimit::platform::client_tls` builds both). `-grpc-cert-file` with `-grpc-key-file` adds a client
//!   certificate. ALPN is `h2`.
//! - `-oltp-protocol` accepts `http`, `grpc` or empty and has no effect (no
//!   tracing export); any other value fails as the original's does
//!   (`Invalid otlptrace client protocol: X`, exit status 2).
//! - `-dial_string` is `host:port`, `[v6]:port`, optionally prefixed with
//!   `dns:///` or `passthrough:///`, or `unix:PATH` / `unix:///PATH`.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    self, quota::ExpirationSpecifier, rate_limit::Unit, Code, DescriptorStatus, Quota,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{
    rate_limit_service_client::RateLimitServiceClient, RateLimitRequest, RateLimitResponse,
};
use envoy_types::pb::google::protobuf::{value::Kind, ListValue, NullValue, Struct, Value};
use hyper_util::rt::TokioIo;
use ratelimit::go::cli::{Flag, FlagError, FlagKind, FlagSet};
use ratelimit::platform::client_tls::{ClientTls, ClientTlsError, Roots};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tonic::transport::{Endpoint, Uri};

const PROGRAM: &str = "ratelimit_client";

/// Writes a line to standard output, ignoring a closed pipe.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, $($arg)*);
        let _ = stdout.flush();
    }};
}

fn flags() -> FlagSet {
    FlagSet::new(
        PROGRAM,
        vec![
            Flag {
                name: "dial_string",
                kind: FlagKind::String,
                usage: "url of ratelimit server in <host>:<port> form",
                default: "localhost:8081",
            },
            Flag {
                name: "domain",
                kind: FlagKind::String,
                usage: "rate limit configuration domain to query",
                default: "",
            },
            Flag {
                name: "descriptors",
                kind: FlagKind::Repeated,
                usage: "descriptor list to query in <key>=<value>,<key>=<value>,... form",
                default: "",
            },
            Flag {
                name: "oltp-protocol",
                kind: FlagKind::String,
                usage: "protocol to use when exporting tracing span, accept http, grpc or empty \
                        (disable tracing) as value, please use OLTP environment variables to \
                        set endpoint (refer to README.MD)",
                default: "",
            },
            Flag {
                name: "grpc-server-ca-file",
                kind: FlagKind::String,
                usage: "path to the server CA file for TLS connection",
                default: "",
            },
            Flag {
                name: "grpc-use-tls",
                kind: FlagKind::Bool,
                usage: "Use TLS for connection to server",
                default: "false",
            },
            Flag {
                name: "grpc-cert-file",
                kind: FlagKind::String,
                usage: "path to the client cert file for TLS connection",
                default: "",
            },
            Flag {
                name: "grpc-key-file",
                kind: FlagKind::String,
                usage: "path to the client key for TLS connection",
                default: "",
            },
        ],
    )
}

/// Go's usage text; the custom descriptors flag shows `value` like Go's.
fn usage(set: &FlagSet) -> String {
    set.usage()
        .replace("  -descriptors string\n", "  -descriptors value\n")
}

/// Everything the command line asks for.
#[derive(Debug)]
struct Options {
    dial_string: String,
    domain: String,
    descriptors: Vec<RateLimitDescriptor>,
    use_tls: bool,
    ca_file: String,
    cert_file: String,
    key_file: String,
}

/// Parses one `-descriptors` value as the original does.
fn parse_descriptor(arg: &str) -> Result<RateLimitDescriptor, &'static str> {
    let mut entries = Vec::new();
    for pair in arg.split(',') {
        let parts: Vec<&str> = pair.split('=').collect();
        let [key, value] = parts.as_slice() else {
            return Err("invalid descriptor list");
        };
        entries.push(Entry {
            key: (*key).to_string(),
            value: (*value).to_string(),
        });
    }
    Ok(RateLimitDescriptor {
        entries,
        ..Default::default()
    })
}

/// The original's `descriptorsValue.String()`.
fn descriptors_string(descriptors: &[RateLimitDescriptor]) -> String {
    let mut ret = String::new();
    for d in descriptors {
        let mut tmp = String::new();
        for e in &d.entries {
            let _ = write!(tmp, " <key={}, value={}> ", e.key, e.value);
        }
        let _ = write!(ret, "[{tmp}] ");
    }
    ret
}

/// Go's `strconv.Quote` (what `%q` prints for a string).
fn go_quote(s: &str) -> String {
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

fn main() -> ExitCode {
    let set = flags();
    let args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let parsed = match set.parse(args) {
        Ok(p) => p,
        Err(FlagError::Help) => {
            eprint!("{}", usage(&set));
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("{e}");
            eprint!("{}", usage(&set));
            return ExitCode::from(2);
        }
    };
    let mut descriptors = Vec::new();
    for arg in parsed.all("descriptors") {
        match parse_descriptor(&arg) {
            Ok(d) => descriptors.push(d),
            Err(why) => {
                eprintln!(
                    "invalid value {} for flag -descriptors: {why}",
                    go_quote(&arg)
                );
                eprint!("{}", usage(&set));
                return ExitCode::from(2);
            }
        }
    }
    let options = Options {
        dial_string: parsed.string(&set, "dial_string"),
        domain: parsed.string(&set, "domain"),
        descriptors,
        use_tls: parsed.bool(&set, "grpc-use-tls"),
        ca_file: parsed.string(&set, "grpc-server-ca-file"),
        cert_file: parsed.string(&set, "grpc-cert-file"),
        key_file: parsed.string(&set, "grpc-key-file"),
    };

    // flag.VisitAll: every flag, sorted by name, with its final value.
    let mut names: Vec<&'static str> = vec![
        "dial_string",
        "domain",
        "descriptors",
        "oltp-protocol",
        "grpc-server-ca-file",
        "grpc-use-tls",
        "grpc-cert-file",
        "grpc-key-file",
    ];
    names.sort_unstable();
    for name in names {
        let value = match name {
            "descriptors" => descriptors_string(&options.descriptors),
            "grpc-use-tls" => options.use_tls.to_string(),
            other => parsed.string(&set, other),
        };
        say!("Flag: --{name}={}", go_quote(&value));
    }

    // The original builds an OTLP exporter for "http" or "grpc" (not done
    // here) and panics on anything else.
    let oltp = parsed.string(&set, "oltp-protocol");
    if !matches!(oltp.as_str(), "" | "http" | "grpc") {
        {
            use std::io::Write as _;
            let mut stdout = std::io::stdout().lock();
            let _ = write!(stdout, "Invalid otlptrace client protocol: {oltp}");
            let _ = stdout.flush();
        }
        eprintln!("panic: Invalid otlptrace client protocol");
        return ExitCode::from(2);
    }

    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(options)) {
        Ok(response) => {
            say!("response: {}", response_text(&response));
            ExitCode::SUCCESS
        }
        Err(RunError::Setup(msg)) => {
            say!("error connecting: {msg}");
            ExitCode::from(1)
        }
        Err(RunError::Request(status)) => {
            say!("request error: {}", grpc_error_text(&status));
            ExitCode::from(1)
        }
    }
}

#[derive(Debug)]
enum RunError {
    /// Before any request: bad dial string, unreadable TLS files.
    Setup(String),
    /// The call failed (including connecting, as grpc-go dials lazily).
    Request(tonic::Status),
}

/// Where to connect.
#[derive(Debug, Clone)]
enum Target {
    Tcp { host: String, port: u16 },
    Unix(String),
}

fn parse_target(dial: &str) -> Result<Target, String> {
    if let Some(path) = dial.strip_prefix("unix://") {
        return Ok(Target::Unix(path.to_string()));
    }
    if let Some(path) = dial.strip_prefix("unix:") {
        return Ok(Target::Unix(path.to_string()));
    }
    let rest = dial
        .strip_prefix("dns:///")
        .or_else(|| dial.strip_prefix("passthrough:///"))
        .unwrap_or(dial);
    let (host, port) = rest
        .rsplit_once(':')
        .ok_or_else(|| format!("address {rest}: missing port in address"))?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let port: u16 = port
        .parse()
        .map_err(|_| format!("address {rest}: invalid port {port:?}"))?;
    let host = if host.is_empty() { "localhost" } else { host };
    Ok(Target::Tcp {
        host: host.to_string(),
        port,
    })
}

trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// An I/O error's text as Go prints it: `connection refused`, not
/// `Connection refused (os error 111)`.
fn go_io_text(e: &std::io::Error) -> String {
    let text = e.to_string();
    let text = match text.find(" (os error ") {
        Some(i) => &text[..i],
        None => &text,
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// grpc-go's text for a failed connection attempt.
fn dial_error(detail: String) -> std::io::Error {
    std::io::Error::other(format!("connection error: desc = {}", go_quote(&detail)))
}

async fn open(
    target: Target,
    tls: Option<(tokio_rustls::TlsConnector, ServerName<'static>)>,
) -> std::io::Result<Box<dyn Io>> {
    let stream: Box<dyn Io> = match target {
        Target::Tcp { host, port } => {
            let addrs = tokio::net::lookup_host((host.as_str(), port))
                .await
                .map_err(|e| {
                    dial_error(format!(
                        "transport: Error while dialing: dial tcp: lookup {host}: {}",
                        go_io_text(&e)
                    ))
                })?;
            let mut last = dial_error(format!(
                "transport: Error while dialing: dial tcp: lookup {host}: no such host"
            ));
            let mut connected = None;
            for addr in addrs {
                match tokio::net::TcpStream::connect(addr).await {
                    Ok(s) => {
                        connected = Some(s);
                        break;
                    }
                    Err(e) => {
                        last = dial_error(format!(
                            "transport: Error while dialing: dial tcp {addr}: connect: {}",
                            go_io_text(&e)
                        ));
                    }
                }
            }
            let s = connected.ok_or(last)?;
            s.set_nodelay(true)?;
            Box::new(s)
        }
        Target::Unix(path) => {
            Box::new(tokio::net::UnixStream::connect(&path).await.map_err(|e| {
                dial_error(format!(
                    "transport: Error while dialing: dial unix {path}: connect: {}",
                    go_io_text(&e)
                ))
            })?)
        }
    };
    match tls {
        None => Ok(stream),
        Some((connector, name)) => {
            let tls = connector.connect(name, stream).await.map_err(|e| {
                dial_error(format!(
                    "transport: authentication handshake failed: {}",
                    go_io_text(&e)
                ))
            })?;
            Ok(Box::new(tls))
        }
    }
}

fn tls_connector(
    options: &Options,
    host: &str,
) -> Result<(tokio_rustls::TlsConnector, ServerName<'static>), String> {
    // The CA file is the only trust root (see the module doc).
    let tls = ClientTls {
        roots: match options.ca_file.as_str() {
            "" => Roots::System { extra_ca: None },
            ca => Roots::Only(ca.into()),
        },
        client: (!options.cert_file.is_empty() && !options.key_file.is_empty()).then(|| {
            (
                options.cert_file.clone().into(),
                options.key_file.clone().into(),
            )
        }),
        skip_hostname_verification: false,
    };
    let mut config = tls.rustls_config().map_err(|e| match e {
        ClientTlsError::Ca { path, message } => {
            format!("failed to read file: {}: {message}", path.display())
        }
        ClientTlsError::NoRoots(Some(path)) => format!(
            "failed to load the provided TLS CA certificate: {}",
            path.display()
        ),
        ClientTlsError::NoRoots(None) => {
            "no system CA bundle found; pass -grpc-server-ca-file".to_string()
        }
        ClientTlsError::ClientCertificate { message, .. } => format!(
            "failed to load TLS key pair ({},{}): {message}",
            options.cert_file, options.key_file
        ),
        ClientTlsError::Config(message) => message,
    })?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    let name = ServerName::try_from(host.to_string())
        .map_err(|e| format!("invalid server name {host:?}: {e}"))?;
    Ok((tokio_rustls::TlsConnector::from(Arc::new(config)), name))
}

async fn run(options: Options) -> Result<RateLimitResponse, RunError> {
    let target = parse_target(&options.dial_string).map_err(RunError::Setup)?;
    let (authority, host) = match &target {
        Target::Tcp { host, port } if host.contains(':') => {
            (format!("[{host}]:{port}"), host.clone())
        }
        Target::Tcp { host, port } => (format!("{host}:{port}"), host.clone()),
        Target::Unix(_) => ("localhost".to_string(), "localhost".to_string()),
    };
    let tls = if options.use_tls {
        Some(tls_connector(&options, &host).map_err(RunError::Setup)?)
    } else {
        None
    };
    // The connector below does TLS itself; the scheme is only the
    // request's `:scheme` (tonic refuses `https` without its own TLS).
    let uri: Uri = format!("http://{authority}")
        .parse()
        .map_err(|e| RunError::Setup(format!("bad dial string: {e}")))?;
    let connector = tower::service_fn(move |_: Uri| {
        let target = target.clone();
        let tls = tls.clone();
        async move { open(target, tls).await.map(TokioIo::new) }
    });
    let channel = Endpoint::from(uri).connect_with_connector_lazy(connector);
    let mut client = RateLimitServiceClient::new(channel);
    let request = RateLimitRequest {
        domain: options.domain,
        descriptors: options.descriptors,
        hits_addend: 1,
    };
    client
        .should_rate_limit(request)
        .await
        .map(tonic::Response::into_inner)
        .map_err(RunError::Request)
}

/// grpc-go's `status.Error(...).Error()` text.
fn grpc_error_text(status: &tonic::Status) -> String {
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
struct Text {
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
fn go_float(f: f64) -> String {
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

fn response_text(r: &RateLimitResponse) -> String {
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
    fn descriptors_parse_and_print_like_the_original() {
        let ds = vec![
            parse_descriptor("a=b,c=d").expect("valid"),
            parse_descriptor("e=f").expect("valid"),
        ];
        assert_eq!(
            descriptors_string(&ds),
            "[ <key=a, value=b>  <key=c, value=d> ] [ <key=e, value=f> ] "
        );
        assert_eq!(parse_descriptor("a=b=c"), Err("invalid descriptor list"));
        assert_eq!(parse_descriptor(""), Err("invalid descriptor list"));
        assert_eq!(parse_descriptor("a=b,"), Err("invalid descriptor list"));
        let empty = parse_descriptor("=").expect("valid");
        assert_eq!(empty.entries[0].key, "");
    }

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

    #[test]
    fn io_errors_read_like_go() {
        let e = std::io::Error::from_raw_os_error(111);
        assert_eq!(go_io_text(&e), "connection refused");
        assert_eq!(
            dial_error("a \"b\"".into()).to_string(),
            "connection error: desc = \"a \\\"b\\\"\""
        );
    }

    #[test]
    fn dial_strings() {
        assert!(matches!(
            parse_target("localhost:8081"),
            Ok(Target::Tcp { ref host, port: 8081 }) if host == "localhost"
        ));
        assert!(matches!(
            parse_target("dns:///[::1]:9"),
            Ok(Target::Tcp { ref host, port: 9 }) if host == "::1"
        ));
        assert!(matches!(
            parse_target("unix:///tmp/x.sock"),
            Ok(Target::Unix(ref p)) if p == "/tmp/x.sock"
        ));
        assert!(parse_target("nohost").is_err());
    }
}
