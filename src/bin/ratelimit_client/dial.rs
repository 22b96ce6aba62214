//! Dialing the service: the dial string's target (TCP or a unix socket),
//! the connection, and TLS with the flags' roots and client certificate.

use std::sync::Arc;

use ratelimit::platform::client_tls::{ClientTls, ClientTlsError, Roots};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};

use super::go_text::go_quote;
use super::Options;

/// Where to connect.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    Tcp { host: String, port: u16 },
    Unix(String),
}

pub(crate) fn parse_target(dial: &str) -> Result<Target, String> {
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

pub(crate) trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
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

pub(crate) async fn open(
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

pub(crate) fn tls_connector(
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

#[cfg(test)]
mod tests {
    use super::*;

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
