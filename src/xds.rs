//! The xDS config source (`CONFIG_TYPE=GRPC_XDS_SOTW`), as Envoy Gateway
//! runs the service: one ADS stream (`StreamAggregatedResources`) to the
//! management server for every [`resource::TYPE_URL`] resource (state of
//! the world, wildcard), published into the same [`LiveConfig`] slot as
//! the file provider's. This is the network side; turning a resource into
//! the config model is [`crate::config::xds`]'s.
//!
//! Per response: every resource is unpacked and the set is loaded as one
//! configuration ([`resource::load`]). A good set is published and ACKed
//! (the request carries the response's version and nonce); a bad one is
//! NACKed with the error text (the last ACKed version, this nonce,
//! `error_detail.message`) and the last good configuration stays live.
//! Every load attempt is counted in the [`ReloadStatus`] the file watcher
//! also reports, so statistics and health follow either provider alike.
//!
//! When the stream fails or ends, the client waits and dials again; the
//! first request of the new stream repeats the last ACKed version and
//! nonce. Fixed against the original: each dial gives up after
//! [`CONNECT_TIMEOUT`] instead of blocking, and the wait grows from
//! `XDS_CLIENT_BACKOFF_INITIAL_INTERVAL`, doubling up to
//! `XDS_CLIENT_BACKOFF_MAX_INTERVAL`, with `XDS_CLIENT_BACKOFF_RANDOM_FACTOR`
//! as the jitter's share (the original multiplies by the factor, 0.5, so
//! its wait is a constant 10 s); a stream that delivered a response starts
//! the wait over.

use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};
use envoy_types::pb::google::rpc::Status;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::config::watcher::ReloadStatus;
use crate::config::xds as resource;
use crate::config::LiveConfig;

/// The longest one dial of the management server may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// TLS to the management server (`CONFIG_GRPC_XDS_SERVER_USE_TLS`).
#[derive(Debug, Clone, Default)]
pub struct XdsTls {
    /// Client certificate and key (PEM), if any.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
    /// A CA (PEM) trusted beside the system roots.
    pub ca: Option<Vec<u8>>,
    /// The name the server's certificate must carry; `None`: the URL's host.
    pub server_name: Option<String>,
}

/// The reconnect back-off (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// The first wait.
    pub initial: Duration,
    /// The longest wait.
    pub max: Duration,
    /// With `jitter`, each wait is drawn from `wait × (1 ± random_factor)`.
    pub random_factor: f64,
    /// Whether waits are jittered.
    pub jitter: bool,
}

impl Backoff {
    /// The wait before dial number `attempt` (0 for the first retry),
    /// without jitter: `initial × 2^attempt`, at most `max`.
    pub fn base(&self, attempt: u32) -> Duration {
        let factor = 2u32.saturating_pow(attempt.min(30));
        self.initial
            .saturating_mul(factor)
            .min(self.max.max(self.initial))
    }

    /// The wait before dial number `attempt`, jittered per the settings.
    pub fn wait(&self, attempt: u32) -> Duration {
        let base = self.base(attempt);
        if !self.jitter {
            return base;
        }
        let f = self.random_factor.clamp(0.0, 1.0);
        let scale = 1.0 - f + 2.0 * f * rand::random::<f64>();
        base.mul_f64(scale)
    }
}

/// What the provider needs from the settings.
#[derive(Debug, Clone)]
pub struct XdsOptions {
    /// `CONFIG_GRPC_XDS_SERVER_URL` (`host:port`, or a URL).
    pub server_url: String,
    /// `CONFIG_GRPC_XDS_NODE_ID`.
    pub node_id: String,
    /// `CONFIG_GRPC_XDS_NODE_METADATA`, parsed.
    pub node_metadata: Vec<(String, String)>,
    /// `CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS`: gRPC metadata on the stream.
    pub headers: Vec<(String, String)>,
    /// TLS, if on.
    pub tls: Option<XdsTls>,
    /// `XDS_CLIENT_BACKOFF_*`.
    pub backoff: Backoff,
    /// `XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES` when above 0.
    pub max_message_size: Option<usize>,
    /// `MERGE_DOMAIN_CONFIG`, and whether the store holds the original's
    /// fixed windows only.
    pub load: crate::config::LoadOptions,
}

/// `k1=v1,k2=v2` as the original splits it: on `,`, then on the first `=`;
/// items without `=` are left out.
pub fn parse_node_metadata(text: &str) -> Vec<(String, String)> {
    text.split(',')
        .filter_map(|item| item.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The running provider.
#[derive(Debug)]
pub struct XdsProvider {
    task: tokio::task::JoinHandle<()>,
    status: watch::Receiver<ReloadStatus>,
}

impl XdsProvider {
    /// Starts the stream; loads publish into `live`. The receiver sees each
    /// load attempt's outcome.
    pub fn start(
        options: XdsOptions,
        live: LiveConfig,
    ) -> (XdsProvider, watch::Receiver<ReloadStatus>) {
        let (tx, rx) = watch::channel(ReloadStatus::default());
        let task = tokio::spawn(run(options, live, tx));
        (
            XdsProvider {
                task,
                status: rx.clone(),
            },
            rx,
        )
    }

    /// Waits for the first response's load, good or bad.
    pub async fn first_load(&self) -> ReloadStatus {
        let mut status = self.status.clone();
        let _ = status.wait_for(|s| s.attempts() > 0).await;
        let now = status.borrow().clone();
        now
    }

    /// Closes the stream.
    pub async fn shutdown(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

/// The state carried from one stream to the next.
#[derive(Debug, Default)]
struct Acked {
    version: String,
    nonce: String,
}

async fn run(options: XdsOptions, live: LiveConfig, status: watch::Sender<ReloadStatus>) {
    let mut acked = Acked::default();
    let mut attempt = 0u32;
    loop {
        match stream(&options, &live, &status, &mut acked).await {
            Ok(true) => attempt = 0,
            Ok(false) => {}
            Err(e) => tracing::warn!(server = %options.server_url, "xDS stream: {e}"),
        }
        let wait = options.backoff.wait(attempt);
        tracing::info!("xDS: dialing {} again in {:?}", options.server_url, wait);
        tokio::time::sleep(wait).await;
        attempt = attempt.saturating_add(1);
    }
}

/// Why a stream ended.
#[derive(Debug, thiserror::Error)]
enum StreamError {
    #[error("{0}")]
    Connect(String),
    #[error("{0}")]
    Status(#[from] tonic::Status),
}

async fn channel(options: &XdsOptions) -> Result<Channel, StreamError> {
    let url = if options.server_url.contains("://") {
        options.server_url.clone()
    } else if options.tls.is_some() {
        format!("https://{}", options.server_url)
    } else {
        format!("http://{}", options.server_url)
    };
    let mut endpoint = Endpoint::from_shared(url)
        .map_err(|e| StreamError::Connect(format!("CONFIG_GRPC_XDS_SERVER_URL: {e}")))?
        .connect_timeout(CONNECT_TIMEOUT);
    if let Some(tls) = &options.tls {
        let mut config = ClientTlsConfig::new().with_native_roots();
        if let Some(ca) = &tls.ca {
            config = config.ca_certificate(Certificate::from_pem(ca));
        }
        if let Some((cert, key)) = &tls.identity {
            config = config.identity(Identity::from_pem(cert, key));
        }
        if let Some(name) = &tls.server_name {
            config = config.domain_name(name.clone());
        }
        endpoint = endpoint
            .tls_config(config)
            .map_err(|e| StreamError::Connect(format!("xDS TLS: {e}")))?;
    }
    endpoint
        .connect()
        .await
        .map_err(|e| StreamError::Connect(format!("dialing {}: {e}", options.server_url)))
}

fn node(options: &XdsOptions) -> Node {
    let fields = options
        .node_metadata
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                Value {
                    kind: Some(Kind::StringValue(v.clone())),
                },
            )
        })
        .collect();
    Node {
        id: options.node_id.clone(),
        metadata: Some(Struct { fields }),
        ..Node::default()
    }
}

fn request(
    options: &XdsOptions,
    acked: &Acked,
    nonce: &str,
    error: Option<String>,
) -> DiscoveryRequest {
    DiscoveryRequest {
        version_info: acked.version.clone(),
        node: Some(node(options)),
        type_url: resource::TYPE_URL.to_string(),
        response_nonce: nonce.to_string(),
        error_detail: error.map(|message| Status {
            // INVALID_ARGUMENT, as go-control-plane's clients send.
            code: 3,
            message,
            details: Vec::new(),
        }),
        ..DiscoveryRequest::default()
    }
}

/// One stream: `Ok(true)` if it delivered a response before it ended.
async fn stream(
    options: &XdsOptions,
    live: &LiveConfig,
    status: &watch::Sender<ReloadStatus>,
    acked: &mut Acked,
) -> Result<bool, StreamError> {
    let channel = channel(options).await?;
    let mut client = AggregatedDiscoveryServiceClient::new(channel);
    if let Some(n) = options.max_message_size {
        client = client.max_decoding_message_size(n);
    }
    let (tx, rx) = mpsc::channel(4);
    // The first request repeats what was last ACKed.
    let first = request(options, acked, &acked.nonce, None);
    let _ = tx.send(first).await;
    let mut call = tonic::Request::new(ReceiverStream::new(rx));
    for (k, v) in &options.headers {
        match (
            k.parse::<tonic::metadata::MetadataKey<tonic::metadata::Ascii>>(),
            v.parse(),
        ) {
            (Ok(k), Ok(v)) => {
                call.metadata_mut().insert(k, v);
            }
            _ => {
                tracing::warn!(header = %k, "xDS: a header that is not valid gRPC metadata is not sent")
            }
        }
    }
    let mut responses = client.stream_aggregated_resources(call).await?.into_inner();
    tracing::info!(server = %options.server_url, "xDS: stream open");
    let mut got = false;
    while let Some(response) = responses.message().await? {
        got = true;
        let outcome = apply(options, live, status, &response);
        acked.nonce = response.nonce.clone();
        let next = match outcome {
            Ok(()) => {
                acked.version = response.version_info.clone();
                request(options, acked, &response.nonce, None)
            }
            Err(text) => request(options, acked, &response.nonce, Some(text)),
        };
        if tx.send(next).await.is_err() {
            break;
        }
    }
    Ok(got)
}

/// Loads one response: publishes a good configuration; the error text of
/// a bad one.
fn apply(
    options: &XdsOptions,
    live: &LiveConfig,
    status: &watch::Sender<ReloadStatus>,
    response: &DiscoveryResponse,
) -> Result<(), String> {
    let decoded: Result<Vec<_>, _> = response
        .resources
        .iter()
        .enumerate()
        .map(|(i, any)| resource::unpack(i, &any.type_url, &any.value))
        .collect();
    let loaded = decoded.and_then(|r| resource::load(&r, options.load));
    match loaded {
        Ok(config) => {
            let domains = config.tree().domain_count();
            live.publish(std::sync::Arc::new(config));
            tracing::warn!(
                version = %response.version_info,
                "Successfully loaded new configuration"
            );
            status.send_modify(|s| {
                s.generation += 1;
                s.successes += 1;
                s.last_error = None;
                s.domains = domains;
            });
            Ok(())
        }
        Err(e) => {
            let text = e.to_string();
            tracing::error!(version = %response.version_info, "error loading new configuration from xDS: {text}");
            status.send_modify(|s| {
                s.failures += 1;
            });
            Err(text)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_metadata_splits_as_the_original() {
        assert_eq!(
            parse_node_metadata("a=1,b=x=y,junk,c="),
            vec![
                ("a".to_string(), "1".to_string()),
                ("b".to_string(), "x=y".to_string()),
                ("c".to_string(), String::new()),
            ]
        );
        assert!(parse_node_metadata("").is_empty());
    }

    #[test]
    fn the_backoff_doubles_up_to_its_cap() {
        let b = Backoff {
            initial: Duration::from_secs(10),
            max: Duration::from_secs(60),
            random_factor: 0.5,
            jitter: false,
        };
        let waits: Vec<u64> = (0..5).map(|i| b.wait(i).as_secs()).collect();
        assert_eq!(waits, [10, 20, 40, 60, 60]);
        let j = Backoff { jitter: true, ..b };
        for i in 0..50 {
            let w = j.wait(i % 4).as_secs_f64();
            let base = b.base(i % 4).as_secs_f64();
            assert!(w >= base * 0.5 && w <= base * 1.5, "{w} around {base}");
        }
    }
}
