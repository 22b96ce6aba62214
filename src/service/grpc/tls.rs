//! TLS and mTLS for the gRPC port.
//!
//! - `GRPC_SERVER_USE_TLS`: the certificate chain `GRPC_SERVER_TLS_CERT` and
//!   key `GRPC_SERVER_TLS_KEY` (both in one directory) are served; the pair
//!   is reloaded whenever that directory changes (a failed reload keeps the
//!   previous pair), so certificate rotation needs no restart.
//! - `GRPC_CLIENT_TLS_CACERT`: clients must present a certificate that
//!   verifies against **that CA only**. The original trusts the system roots
//!   too, so any publicly issued client certificate got in.
//! - `GRPC_CLIENT_TLS_SAN`: the client certificate must also be valid for
//!   that DNS name.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use arc_swap::ArcSwap;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{DistinguishedName, RootCertStore, ServerConfig, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::admit::Held;
use tokio_rustls::server::TlsStream;

/// A TLS setup problem, found at start-up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or parsed.
    #[error("cannot load {what} from {path}: {reason}")]
    Load {
        /// What was being loaded.
        what: &'static str,
        /// From where.
        path: String,
        /// Why not.
        reason: String,
    },
    /// Certificate and key must share a directory (they are reloaded together).
    #[error("GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY must be in the same directory")]
    SplitDirectories,
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// What the gRPC listener's TLS needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsOptions {
    /// PEM certificate chain.
    pub cert: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
    /// PEM CA for client certificates; `None` asks for no client certificate.
    pub client_ca: Option<PathBuf>,
    /// DNS name the client certificate must be valid for.
    pub client_san: Option<String>,
}

fn load_pair(cert: &Path, key: &Path) -> Result<CertifiedKey, TlsError> {
    let fail = |what, path: &Path, reason: String| TlsError::Load {
        what,
        path: path.display().to_string(),
        reason,
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| fail("certificate", cert, e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| fail("certificate", cert, e.to_string()))?;
    if chain.is_empty() {
        return Err(fail("certificate", cert, "no certificate in file".into()));
    }
    let key_der =
        PrivateKeyDer::from_pem_file(key).map_err(|e| fail("private key", key, e.to_string()))?;
    let signer = rustls::crypto::ring::sign::any_supported_type(&key_der)
        .map_err(|e| fail("private key", key, e.to_string()))?;
    Ok(CertifiedKey::new(chain, signer))
}

/// Serves the current certificate pair; [`ReloadingCert::reload`] swaps it.
#[derive(Debug)]
pub struct ReloadingCert {
    current: ArcSwap<CertifiedKey>,
    cert: PathBuf,
    key: PathBuf,
}

impl ReloadingCert {
    fn new(cert: PathBuf, key: PathBuf) -> Result<ReloadingCert, TlsError> {
        let pair = load_pair(&cert, &key)?;
        Ok(ReloadingCert {
            current: ArcSwap::from_pointee(pair),
            cert,
            key,
        })
    }

    /// Re-reads the pair; on failure the previous pair stays in use.
    pub fn reload(&self) {
        match load_pair(&self.cert, &self.key) {
            Ok(pair) => {
                self.current.store(Arc::new(pair));
                tracing::info!("reloaded gRPC TLS certificate {}", self.cert.display());
            }
            Err(e) => tracing::error!("keeping the previous gRPC TLS certificate: {e}"),
        }
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// WebPKI client verification plus a DNS-name check on the leaf.
#[derive(Debug)]
struct SanVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    san: ServerName<'static>,
}

impl ClientCertVerifier for SanVerifier {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let cert = webpki::EndEntityCert::try_from(end_entity)
            .map_err(|e| rustls::Error::General(format!("client certificate: {e}")))?;
        cert.verify_is_valid_for_subject_name(&self.san)
            .map_err(|_| {
                rustls::Error::General(format!(
                    "client certificate is not valid for {:?}",
                    self.san
                ))
            })?;
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The server TLS configuration and its reloadable certificate.
pub fn server_config(
    opts: &TlsOptions,
) -> Result<(Arc<ServerConfig>, Arc<ReloadingCert>), TlsError> {
    if opts.cert.parent() != opts.key.parent() {
        return Err(TlsError::SplitDirectories);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match &opts.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(ca).map_err(|e| TlsError::Load {
                what: "client CA",
                path: ca.display().to_string(),
                reason: e.to_string(),
            })? {
                let cert = cert.map_err(|e| TlsError::Load {
                    what: "client CA",
                    path: ca.display().to_string(),
                    reason: e.to_string(),
                })?;
                roots
                    .add(cert)
                    .map_err(|e| TlsError::Config(e.to_string()))?;
            }
            let webpki = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| TlsError::Config(e.to_string()))?;
            let verifier: Arc<dyn ClientCertVerifier> = match &opts.client_san {
                None => webpki,
                Some(san) => Arc::new(SanVerifier {
                    inner: webpki,
                    san: ServerName::try_from(san.clone())
                        .map_err(|e| TlsError::Config(format!("GRPC_CLIENT_TLS_SAN: {e}")))?,
                }),
            };
            builder.with_client_cert_verifier(verifier)
        }
    };
    let cert = Arc::new(ReloadingCert::new(opts.cert.clone(), opts.key.clone())?);
    let mut config = builder.with_cert_resolver(Arc::clone(&cert) as Arc<dyn ResolvesServerCert>);
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok((Arc::new(config), cert))
}

/// A server-side TLS connection that tonic can serve.
#[derive(Debug)]
pub struct TlsConn(pub TlsStream<Held<TcpStream>>);

impl tonic::transport::server::Connected for TlsConn {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.0.get_ref().0.connect_info()
    }
}

impl AsyncRead for TlsConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}

/// The TLS connections of the accepted TCP connections `conns`: each
/// handshake runs on its own task (on the caller's runtime), at most 10 s,
/// so a slow client does not hold up the others; failed handshakes are
/// logged and dropped.
pub fn incoming(
    conns: impl tokio_stream::Stream<Item = Held<tokio::net::TcpStream>> + Send + 'static,
    config: Arc<ServerConfig>,
) -> tokio_stream::wrappers::ReceiverStream<std::io::Result<TlsConn>> {
    use tokio_stream::StreamExt;
    let (tx, rx) = tokio::sync::mpsc::channel(128);
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    tokio::spawn(async move {
        let mut conns = std::pin::pin!(conns);
        while let Some(tcp) = conns.next().await {
            if tx.is_closed() {
                break;
            }
            let peer = tcp
                .get_ref()
                .peer_addr()
                .map_or_else(|_| "a client".to_string(), |a| a.to_string());
            let acceptor = acceptor.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                let handshake =
                    tokio::time::timeout(std::time::Duration::from_secs(10), acceptor.accept(tcp))
                        .await;
                match handshake {
                    Ok(Ok(tls)) => {
                        let _ = tx.send(Ok(TlsConn(tls))).await;
                    }
                    Ok(Err(e)) => tracing::debug!("TLS handshake with {peer} failed: {e}"),
                    Err(_) => tracing::debug!("TLS handshake with {peer} timed out"),
                }
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

/// Reloads `cert` whenever the certificate's directory changes. The
/// returned watcher must be kept alive.
pub fn watch_certificate(
    cert: Arc<ReloadingCert>,
) -> Result<notify::RecommendedWatcher, notify::Error> {
    use notify::Watcher;
    let dir = cert
        .cert
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let target = Arc::clone(&cert);
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if let Ok(e) = event {
            if !e.kind.is_access() {
                target.reload();
            }
        }
    })?;
    watcher.watch(&dir, notify::RecursiveMode::NonRecursive)?;
    Ok(watcher)
}
