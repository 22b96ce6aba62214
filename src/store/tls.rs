//! Client TLS to a store (Redis, memcache): the original's semantics for
//! `*_TLS_CACERT` (added to the system roots), a client certificate for
//! mutual TLS, and `*_TLS_SKIP_HOSTNAME_VERIFICATION` (the chain is still
//! verified).

use std::path::PathBuf;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::store::{StoreError, StoreErrorKind};

/// TLS files for a store's connections.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClientTls {
    /// Extra trusted CA (besides the system roots, as the original).
    pub ca: Option<PathBuf>,
    /// Client certificate chain and key, for mutual TLS.
    pub client: Option<(PathBuf, PathBuf)>,
    /// Verify the chain but not the host name.
    pub skip_hostname_verification: bool,
}

impl ClientTls {
    /// From the original's `*_TLS_*` paths, where an empty path means
    /// none (a client certificate needs both its files).
    pub fn from_paths(
        ca: &str,
        client_cert: &str,
        client_key: &str,
        skip_hostname_verification: bool,
    ) -> ClientTls {
        let nonempty = |s: &str| (!s.is_empty()).then(|| PathBuf::from(s));
        ClientTls {
            ca: nonempty(ca),
            client: nonempty(client_cert).zip(nonempty(client_key)),
            skip_hostname_verification,
        }
    }

    /// The rustls configuration; errors name `store` (`Redis`, `memcache`)
    /// and the file that failed.
    pub fn rustls_config(&self, store: &str) -> Result<rustls::ClientConfig, StoreError> {
        build(self, store)
    }
}

fn tls_error(store: &str, what: &str, e: &dyn std::fmt::Display) -> StoreError {
    StoreError::new(StoreErrorKind::Rejected, format!("{store} TLS {what}: {e}"))
}

fn build(t: &ClientTls, what: &str) -> Result<rustls::ClientConfig, StoreError> {
    let tls_error = |part: &str, e: &dyn std::fmt::Display| tls_error(what, part, e);
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for cert in native.certs {
        let _ = roots.add(cert);
    }
    if let Some(ca) = &t.ca {
        for cert in CertificateDer::pem_file_iter(ca).map_err(|e| tls_error("CA", &e))? {
            roots
                .add(cert.map_err(|e| tls_error("CA", &e))?)
                .map_err(|e| tls_error("CA", &e))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_error("config", &e))?;
    let roots = Arc::new(roots);
    let builder = if t.skip_hostname_verification {
        let inner = rustls::client::WebPkiServerVerifier::builder_with_provider(roots, provider)
            .build()
            .map_err(|e| tls_error("config", &e))?;
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ChainOnly(inner)))
    } else {
        builder.with_root_certificates(roots)
    };
    let config = match &t.client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .map_err(|e| tls_error("client certificate", &e))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| tls_error("client certificate", &e))?;
            let key = PrivateKeyDer::from_pem_file(key).map_err(|e| tls_error("client key", &e))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| tls_error("client certificate", &e))?
        }
    };
    Ok(config)
}

/// Verifies the certificate chain but accepts any host name
/// (`REDIS_TLS_SKIP_HOSTNAME_VERIFICATION`).
#[derive(Debug)]
struct ChainOnly(Arc<rustls::client::WebPkiServerVerifier>);

impl rustls::client::danger::ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &rustls::pki_types::ServerName<'_>,
        ocsp: &[u8],
        now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName))
            | Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(rustls::client::danger::ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
