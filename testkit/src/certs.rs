//! Certificates made by the tests: a CA and leaves it signs.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

/// A certificate authority.
pub struct Ca {
    /// Its certificate, PEM.
    pub cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

/// A new CA called `name`.
pub fn ca(name: &str) -> Ca {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    let key = KeyPair::generate().expect("key");
    let cert = params.self_signed(&key).expect("ca cert");
    Ca {
        cert_pem: cert.pem(),
        issuer: Issuer::new(params, key),
    }
}

/// A leaf certificate for `names`, signed by `ca`: (cert PEM, key PEM).
pub fn leaf(ca: &Ca, names: &[&str]) -> (String, String) {
    let params = CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        .expect("params");
    let key = KeyPair::generate().expect("key");
    let cert = params.signed_by(&key, &ca.issuer).expect("leaf");
    (cert.pem(), key.serialize_pem())
}

/// A gRPC client of the RLS over TLS to `addr`, trusting `ca_pem`, as
/// `localhost`, with a client certificate if given.
pub async fn tls_client(
    addr: std::net::SocketAddr,
    ca_pem: &str,
    identity: Option<&(String, String)>,
) -> Result<
    envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient<
        tonic::transport::Channel,
    >,
    String,
>{
    use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca_pem))
        .domain_name("localhost");
    if let Some((cert, key)) = identity {
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    let channel = Endpoint::from_shared(format!("https://{addr}"))
        .map_err(|e| e.to_string())?
        .tls_config(tls)
        .map_err(|e| e.to_string())?
        .connect()
        .await
        .map_err(|e| format!("{e:?}"))?;
    Ok(envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient::new(channel))
}
