//! A test ADS management server: a real gRPC server on loopback that serves
//! versioned `RateLimitConfig` resources over `StreamAggregatedResources`
//! and records every `DiscoveryRequest` it receives. Plaintext or TLS
//! (with client certificates required).

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use envoy_types::pb::google::protobuf::Any;
use futures::Stream;
use prost::Message;
use ratelimit::config::xds::proto::RateLimitConfig;
use ratelimit::config::xds::TYPE_URL;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};
use tonic::{Request, Response, Status, Streaming};

type Outbox = mpsc::Sender<Result<DiscoveryResponse, Status>>;

#[derive(Default)]
struct State {
    version: String,
    resources: Vec<Any>,
    nonce: u64,
    streams: Vec<Outbox>,
    /// The tasks reading each stream's requests (each holds its outbox).
    readers: Vec<tokio::task::JoinHandle<()>>,
    requests: Vec<DiscoveryRequest>,
    metadata: Vec<tonic::metadata::MetadataMap>,
}

impl State {
    fn response(&mut self) -> DiscoveryResponse {
        self.nonce += 1;
        DiscoveryResponse {
            version_info: self.version.clone(),
            resources: self.resources.clone(),
            type_url: TYPE_URL.to_string(),
            nonce: self.nonce.to_string(),
            ..DiscoveryResponse::default()
        }
    }
}

#[derive(Clone)]
struct Ads(Arc<Mutex<State>>);

type Responses = Pin<Box<dyn Stream<Item = Result<DiscoveryResponse, Status>> + Send>>;
type DeltaResponses = Pin<Box<dyn Stream<Item = Result<DeltaDiscoveryResponse, Status>> + Send>>;

#[tonic::async_trait]
impl AggregatedDiscoveryService for Ads {
    type StreamAggregatedResourcesStream = Responses;
    type DeltaAggregatedResourcesStream = DeltaResponses;

    async fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Responses>, Status> {
        let metadata = request.metadata().clone();
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(16);
        {
            let mut s = self.0.lock().expect("state");
            s.metadata.push(metadata);
            s.streams.push(tx.clone());
        }
        let state = Arc::clone(&self.0);
        let reader = tokio::spawn(async move {
            let mut first = true;
            while let Ok(Some(req)) = inbound.message().await {
                let reply = {
                    let mut s = state.lock().expect("state");
                    s.requests.push(req);
                    // The first request of a stream gets the current state.
                    (first && !s.version.is_empty()).then(|| s.response())
                };
                first = false;
                if let Some(r) = reply {
                    let _ = tx.send(Ok(r)).await;
                }
            }
        });
        self.0.lock().expect("state").readers.push(reader);
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn delta_aggregated_resources(
        &self,
        _request: Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<Response<DeltaResponses>, Status> {
        Err(Status::unimplemented("SotW only"))
    }
}

/// TLS of the test server: its identity and the CA its clients must have.
pub struct AdsTls {
    pub cert_pem: String,
    pub key_pem: String,
    pub client_ca_pem: String,
}

/// The running server; stopped on drop.
pub struct AdsServer {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    tls: Option<(String, String, String)>,
}

impl AdsServer {
    /// A server on a free loopback port with nothing to serve yet.
    pub async fn start(tls: Option<AdsTls>) -> AdsServer {
        let mut server = AdsServer {
            addr: "127.0.0.1:0".parse().expect("addr"),
            state: Arc::new(Mutex::new(State::default())),
            stop: None,
            task: None,
            tls: tls.map(|t| (t.cert_pem, t.key_pem, t.client_ca_pem)),
        };
        server.serve().await;
        server
    }

    async fn serve(&mut self) {
        let listener = tokio::net::TcpListener::bind(self.addr)
            .await
            .expect("bind");
        self.addr = listener.local_addr().expect("addr");
        let (stop_tx, stop_rx) = oneshot::channel();
        let mut builder = Server::builder();
        if let Some((cert, key, ca)) = &self.tls {
            builder = builder
                .tls_config(
                    ServerTlsConfig::new()
                        .identity(Identity::from_pem(cert, key))
                        .client_ca_root(Certificate::from_pem(ca)),
                )
                .expect("tls");
        }
        let router = builder.add_service(AggregatedDiscoveryServiceServer::new(Ads(Arc::clone(
            &self.state,
        ))));
        self.stop = Some(stop_tx);
        self.task = Some(tokio::spawn(async move {
            let _ = router
                .serve_with_incoming_shutdown(TcpListenerStream::new(listener), async {
                    let _ = stop_rx.await;
                })
                .await;
        }));
    }

    /// Serves `resources` as `version` from now on, and pushes them to
    /// every open stream.
    pub async fn publish(&self, version: &str, resources: &[RateLimitConfig]) {
        let any: Vec<Any> = resources
            .iter()
            .map(|r| Any {
                type_url: TYPE_URL.to_string(),
                value: r.encode_to_vec(),
            })
            .collect();
        self.publish_any(version, any).await;
    }

    /// Serves raw resources (for a resource that does not decode).
    pub async fn publish_any(&self, version: &str, resources: Vec<Any>) {
        let (outboxes, response) = {
            let mut s = self.state.lock().expect("state");
            s.version = version.to_string();
            s.resources = resources;
            s.streams.retain(|t| !t.is_closed());
            let response = s.response();
            (s.streams.clone(), response)
        };
        for t in outboxes {
            let _ = t.send(Ok(response.clone())).await;
        }
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<DiscoveryRequest> {
        self.state.lock().expect("state").requests.clone()
    }

    /// The gRPC metadata of every stream opened so far.
    pub fn stream_metadata(&self) -> Vec<tonic::metadata::MetadataMap> {
        self.state.lock().expect("state").metadata.clone()
    }

    /// Waits until some request satisfies `f`, for at most `within`.
    pub async fn wait_for(
        &self,
        within: Duration,
        f: impl Fn(&DiscoveryRequest) -> bool,
    ) -> Option<DiscoveryRequest> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(r) = self.requests().into_iter().find(|r| f(r)) {
                return Some(r);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }

    /// Stops the server (closing every stream) and starts it again on the
    /// same port, with the same resources.
    pub async fn restart(&mut self) {
        self.shutdown().await;
        self.state.lock().expect("state").streams.clear();
        tokio::time::sleep(Duration::from_millis(200)).await;
        self.serve().await;
    }

    async fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        // End every open stream (dropping its outboxes), so that the
        // graceful shutdown completes and clients see the stream end.
        {
            let mut s = self.state.lock().expect("state");
            s.streams.clear();
            for r in s.readers.drain(..) {
                r.abort();
            }
        }
        if let Some(mut task) = self.task.take() {
            if tokio::time::timeout(Duration::from_secs(5), &mut task)
                .await
                .is_err()
            {
                task.abort();
            }
        }
    }
}

impl Drop for AdsServer {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
