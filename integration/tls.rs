//! gRPC over TLS and mTLS against the
//! real binary, with certificates made by the test.

use crate::support;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use support::certs::{ca, leaf};
use support::*;

const RULES: &str =
    "domain: test\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 10}\n";

async fn connect(
    addr: SocketAddr,
    ca_pem: &str,
    client: Option<&(String, String)>,
) -> Result<RateLimitServiceClient<tonic::transport::Channel>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots
            .add(c.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots);
    let mut cfg = match client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain: Vec<_> = CertificateDer::pem_slice_iter(cert.as_bytes())
                .collect::<Result<_, _>>()
                .map_err(|e| e.to_string())?;
            let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).map_err(|e| e.to_string())?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| e.to_string())?
        }
    };
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| e.to_string())?
        .connect_with_connector(tower::service_fn(move |_| {
            let connector = connector.clone();
            async move {
                let tcp = tokio::net::TcpStream::connect(addr).await?;
                let name = ServerName::try_from("localhost").expect("dns name");
                let tls = connector.connect(name, tcp).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tls))
            }
        }))
        .await
        .map_err(|e| format!("{e:?}"))?;
    Ok(RateLimitServiceClient::new(channel))
}

async fn works(addr: SocketAddr, ca_pem: &str, client: Option<&(String, String)>) -> bool {
    let Ok(mut c) = connect(addr, ca_pem, client).await else {
        return false;
    };
    call(&mut c, request("test", vec![desc(&[("a", "x")])]))
        .await
        .is_ok()
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write pem");
    p.display().to_string()
}

#[tokio::test]
async fn tls_and_mtls_trust_only_the_configured_ca() {
    let certs = tempfile::tempdir().expect("tempdir");
    let server_ca = ca("server ca");
    let client_ca = ca("client ca");
    let other_ca = ca("other ca");
    let (cert, key) = leaf(&server_ca, &["localhost"]);
    let cert_path = write(certs.path(), "tls.crt", &cert);
    let key_path = write(certs.path(), "tls.key", &key);
    let client_ca_path = write(certs.path(), "../client-ca.pem", &client_ca.cert_pem);

    // Plain TLS: no client certificate needed.
    let svc = Service::start(
        &[("rules.yaml", RULES)],
        &[
            ("GRPC_SERVER_USE_TLS", "true"),
            ("GRPC_SERVER_TLS_CERT", &cert_path),
            ("GRPC_SERVER_TLS_KEY", &key_path),
        ],
    );
    assert!(works(svc.grpc, &server_ca.cert_pem, None).await);
    assert!(
        !works(svc.grpc, &other_ca.cert_pem, None).await,
        "server cert must verify"
    );
    drop(svc);

    // mTLS with a SAN requirement.
    let svc = Service::start(
        &[("rules.yaml", RULES)],
        &[
            ("GRPC_SERVER_USE_TLS", "true"),
            ("GRPC_SERVER_TLS_CERT", &cert_path),
            ("GRPC_SERVER_TLS_KEY", &key_path),
            ("GRPC_CLIENT_TLS_CACERT", &client_ca_path),
            ("GRPC_CLIENT_TLS_SAN", "localhost"),
        ],
    );
    let good = leaf(&client_ca, &["localhost"]);
    let wrong_san = leaf(&client_ca, &["other.example"]);
    let foreign = leaf(&other_ca, &["localhost"]);
    assert!(works(svc.grpc, &server_ca.cert_pem, Some(&good)).await);
    assert!(
        !works(svc.grpc, &server_ca.cert_pem, None).await,
        "a client certificate is required"
    );
    assert!(
        !works(svc.grpc, &server_ca.cert_pem, Some(&foreign)).await,
        "only the configured CA is trusted"
    );
    assert!(
        !works(svc.grpc, &server_ca.cert_pem, Some(&wrong_san)).await,
        "the SAN must match"
    );
}

#[tokio::test]
async fn certificate_rotation_is_picked_up_without_restart() {
    let certs = tempfile::tempdir().expect("tempdir");
    let (ca_a, ca_b) = (ca("a"), ca("b"));
    let (cert_a, key_a) = leaf(&ca_a, &["localhost"]);
    let (cert_b, key_b) = leaf(&ca_b, &["localhost"]);
    let cert_path = write(certs.path(), "tls.crt", &cert_a);
    let key_path = write(certs.path(), "tls.key", &key_a);
    let svc = Service::start(
        &[("rules.yaml", RULES)],
        &[
            ("GRPC_SERVER_USE_TLS", "true"),
            ("GRPC_SERVER_TLS_CERT", &cert_path),
            ("GRPC_SERVER_TLS_KEY", &key_path),
        ],
    );
    assert!(works(svc.grpc, &ca_a.cert_pem, None).await);
    assert!(!works(svc.grpc, &ca_b.cert_pem, None).await);
    // Rename B's files over A's, as a rotation does.
    write(certs.path(), "new.key", &key_b);
    write(certs.path(), "new.crt", &cert_b);
    std::fs::rename(certs.path().join("new.key"), &key_path).expect("rename key");
    std::fs::rename(certs.path().join("new.crt"), &cert_path).expect("rename cert");
    let mut rotated = false;
    for _ in 0..100 {
        if works(svc.grpc, &ca_b.cert_pem, None).await {
            rotated = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(rotated, "new certificate served within 10 s");
    assert!(!works(svc.grpc, &ca_a.cert_pem, None).await);
}
