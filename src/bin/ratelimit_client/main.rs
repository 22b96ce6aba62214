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
//! - `ratelimit_client overrides put|get|delete|log …` (ours) reads and
//!   writes the per-tenant overrides on the debug port (see `overrides`).
//! - `-dial_string` is `host:port`, `[v6]:port`, optionally prefixed with
//!   `dns:///` or `passthrough:///`, or `unix:PATH` / `unix:///PATH`.

use std::fmt::Write as _;
use std::process::ExitCode;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{
    rate_limit_service_client::RateLimitServiceClient, RateLimitRequest, RateLimitResponse,
};
use hyper_util::rt::TokioIo;
use ratelimit::go::cli::{Flag, FlagError, FlagKind, FlagSet};
use tonic::transport::{Endpoint, Uri};

mod dial;
mod go_text;
mod overrides;

use dial::{open, parse_target, tls_connector, Target};
use go_text::{go_quote, grpc_error_text, response_text};

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

fn main() -> ExitCode {
    let set = flags();
    let args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    // Ours: the per-tenant overrides' API (the original has no such
    // subcommand, and no flag of its is a bare word).
    if args.first().map(String::as_str) == Some("overrides") {
        return overrides::run(&args[1..]);
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
