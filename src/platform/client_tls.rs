//! Client TLS (rustls with ring) to a server this process dials: a store
//! (Redis, memcache), or the rate limit service itself for
//! `ratelimit_client`. One builder for the trusted roots, a client
//! certificate for mutual TLS, and an optional host-name exemption (the
//! chain is still verified); each caller words its own errors. (The xDS
//! client's TLS is tonic's own.)

use std::path::PathBuf;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The certificates a connection trusts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Roots {
    /// The system's roots, and a CA file beside them if given (the
    /// original's `*_TLS_CACERT`: every certificate in it must load).
    System {
        /// The extra CA file.
        extra_ca: Option<PathBuf>,
    },
    /// Only the certificates of this bundle (the original client's
    /// `-grpc-server-ca-file`); ones the verifier cannot use are skipped,
    /// and a bundle with none usable is an error.
    Only(PathBuf),
}

impl Default for Roots {
    fn default() -> Roots {
        Roots::System { extra_ca: None }
    }
}

/// TLS files and checks for a client's connections.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClientTls {
    /// What is trusted.
    pub roots: Roots,
    /// Client certificate chain and key, for mutual TLS.
    pub client: Option<(PathBuf, PathBuf)>,
    /// Verify the chain but not the host name.
    pub skip_hostname_verification: bool,
}

/// Why a client TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientTlsError {
    /// A CA file could not be read or holds a certificate that does not load.
    #[error("CA {path}: {message}")]
    Ca {
        /// The file.
        path: PathBuf,
        /// What failed.
        message: String,
    },
    /// Nothing is trusted: no system roots and no CA, or a bundle without
    /// a usable certificate.
    #[error("no trusted certificate{}", .0.as_ref().map(|p| format!(" in {}", p.display())).unwrap_or_default())]
    NoRoots(Option<PathBuf>),
    /// The client certificate or its key could not be loaded or do not match.
    #[error("client certificate ({}, {}): {message}", .cert.display(), .key.display())]
    ClientCertificate {
        /// The certificate chain file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// What failed.
        message: String,
    },
    /// rustls refused the configuration.
    #[error("config: {0}")]
    Config(String),
}

impl ClientTls {
    /// From the original's `*_TLS_*` paths for a store, where an empty
    /// path means none (a client certificate needs both its files): the
    /// system roots and the CA beside them.
    pub fn from_paths(
        ca: &str,
        client_cert: &str,
        client_key: &str,
        skip_hostname_verification: bool,
    ) -> ClientTls {
        let nonempty = |s: &str| (!s.is_empty()).then(|| PathBuf::from(s));
        ClientTls {
            roots: Roots::System {
                extra_ca: nonempty(ca),
            },
            client: nonempty(client_cert).zip(nonempty(client_key)),
            skip_hostname_verification,
        }
    }

    /// The rustls configuration.
    pub fn rustls_config(&self) -> Result<rustls::ClientConfig, ClientTlsError> {
        let roots = Arc::new(self.root_store()?);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config_error = |e: rustls::Error| ClientTlsError::Config(e.to_string());
        let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(config_error)?;
        let builder = if self.skip_hostname_verification {
            let inner =
                rustls::client::WebPkiServerVerifier::builder_with_provider(roots, provider)
                    .build()
                    .map_err(|e| ClientTlsError::Config(e.to_string()))?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(ChainOnly(inner)))
        } else {
            builder.with_root_certificates(roots)
        };
        match &self.client {
            None => Ok(builder.with_no_client_auth()),
            Some((cert, key)) => {
                let failed = |e: &dyn std::fmt::Display| ClientTlsError::ClientCertificate {
                    cert: cert.clone(),
                    key: key.clone(),
                    message: e.to_string(),
                };
                let chain = CertificateDer::pem_file_iter(cert)
                    .map_err(|e| failed(&e))?
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| failed(&e))?;
                let key = PrivateKeyDer::from_pem_file(key).map_err(|e| failed(&e))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| failed(&e))
            }
        }
    }

    fn root_store(&self) -> Result<rustls::RootCertStore, ClientTlsError> {
        let mut roots = rustls::RootCertStore::empty();
        let ca_error = |path: &PathBuf, e: &dyn std::fmt::Display| ClientTlsError::Ca {
            path: path.clone(),
            message: e.to_string(),
        };
        match &self.roots {
            Roots::System { extra_ca } => {
                // A system certificate the verifier cannot use is skipped.
                for cert in rustls_native_certs::load_native_certs().certs {
                    let _ = roots.add(cert);
                }
                if let Some(ca) = extra_ca {
                    for cert in CertificateDer::pem_file_iter(ca).map_err(|e| ca_error(ca, &e))? {
                        let cert = cert.map_err(|e| ca_error(ca, &e))?;
                        roots.add(cert).map_err(|e| ca_error(ca, &e))?;
                    }
                }
                if roots.is_empty() {
                    return Err(ClientTlsError::NoRoots(extra_ca.clone()));
                }
            }
            Roots::Only(bundle) => {
                let certs =
                    CertificateDer::pem_file_iter(bundle).map_err(|e| ca_error(bundle, &e))?;
                for cert in certs {
                    let _ = roots.add(cert.map_err(|e| ca_error(bundle, &e))?);
                }
                if roots.is_empty() {
                    return Err(ClientTlsError::NoRoots(Some(bundle.clone())));
                }
            }
        }
        Ok(roots)
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed CA and a leaf it signs, as PEM files in `dir`:
    /// (ca, leaf cert, leaf key).
    fn files(dir: &std::path::Path) -> (PathBuf, PathBuf, PathBuf) {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_key = KeyPair::generate().expect("key");
        let ca = params.self_signed(&ca_key).expect("ca");
        let issuer = Issuer::new(params, ca_key);
        let leaf_key = KeyPair::generate().expect("key");
        let leaf = CertificateParams::new(vec!["localhost".to_string()])
            .expect("params")
            .signed_by(&leaf_key, &issuer)
            .expect("leaf");
        let write = |name: &str, pem: String| {
            let path = dir.join(name);
            std::fs::write(&path, pem).expect("write");
            path
        };
        (
            write("ca.pem", ca.pem()),
            write("leaf.pem", leaf.pem()),
            write("leaf.key", leaf_key.serialize_pem()),
        )
    }

    fn only(bundle: &std::path::Path) -> ClientTls {
        ClientTls {
            roots: Roots::Only(bundle.to_path_buf()),
            ..ClientTls::default()
        }
    }

    #[test]
    fn a_ca_bundle_and_a_client_certificate_build_a_configuration() {
        let dir = tempfile::tempdir().expect("dir");
        let (ca, cert, key) = files(dir.path());
        let mutual = ClientTls {
            client: Some((cert, key)),
            skip_hostname_verification: true,
            ..only(&ca)
        };
        let config = mutual.rustls_config().expect("valid files");
        assert!(config.client_auth_cert_resolver.has_certs());
        let beside_system = ClientTls::from_paths(&ca.to_string_lossy(), "", "", false);
        assert!(beside_system.rustls_config().is_ok());
    }

    #[test]
    fn each_bad_file_is_named_in_its_error() {
        let dir = tempfile::tempdir().expect("dir");
        let (ca, cert, _) = files(dir.path());
        let missing = dir.path().join("missing.pem");
        let err = only(&missing).rustls_config().expect_err("no file");
        assert!(
            matches!(&err, ClientTlsError::Ca { path, .. } if *path == missing),
            "{err}"
        );
        // A CA beside the system's roots must load.
        let garbled = dir.path().join("garbled.pem");
        std::fs::write(
            &garbled,
            "-----BEGIN CERTIFICATE-----\n!!\n-----END CERTIFICATE-----\n",
        )
        .expect("write");
        let err = ClientTls::from_paths(&garbled.to_string_lossy(), "", "", false)
            .rustls_config()
            .expect_err("garbled CA");
        assert!(
            matches!(&err, ClientTlsError::Ca { path, .. } if *path == garbled),
            "{err}"
        );
        // A bundle that holds no certificate trusts nothing.
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").expect("write");
        let err = only(&empty).rustls_config().expect_err("empty bundle");
        assert!(
            matches!(&err, ClientTlsError::NoRoots(Some(p)) if *p == empty),
            "{err}"
        );
        // A client certificate whose key file is missing.
        let mutual = ClientTls {
            client: Some((cert.clone(), missing.clone())),
            ..only(&ca)
        };
        let err = mutual.rustls_config().expect_err("no key");
        assert!(
            matches!(&err, ClientTlsError::ClientCertificate { cert: c, key, .. } if *c == cert && *key == missing),
            "{err}"
        );
        assert!(err.to_string().contains("missing.pem"), "{err}");
    }
}
