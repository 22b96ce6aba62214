//! A test OTLP receiver: a real server on loopback that accepts trace
//! exports over HTTP (`POST /v1/traces`, protobuf) and gRPC
//! (`TraceService/Export`), decodes them and keeps every span with its
//! resource's `service.name`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use prost::Message;

/// One received span.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    pub name: String,
    pub service_name: String,
    pub trace_id: Vec<u8>,
    pub span_id: Vec<u8>,
    pub parent_span_id: Vec<u8>,
    /// `(key, value as text)` of its attributes.
    pub attributes: Vec<(String, String)>,
}

#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Vec<ReceivedSpan>>>);

impl Spans {
    fn add(&self, request: ExportTraceServiceRequest) {
        let mut all = self.0.lock().expect("spans");
        for rs in request.resource_spans {
            let service_name = rs
                .resource
                .iter()
                .flat_map(|r| r.attributes.iter())
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| kv.value.as_ref())
                .and_then(|v| match &v.value {
                    Some(Value::StringValue(s)) => Some(s.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            for ss in rs.scope_spans {
                for s in ss.spans {
                    all.push(ReceivedSpan {
                        name: s.name,
                        service_name: service_name.clone(),
                        trace_id: s.trace_id,
                        span_id: s.span_id,
                        parent_span_id: s.parent_span_id,
                        attributes: s
                            .attributes
                            .into_iter()
                            .map(|kv| {
                                let v = match kv.value.and_then(|v| v.value) {
                                    Some(Value::StringValue(s)) => s,
                                    Some(Value::IntValue(i)) => i.to_string(),
                                    Some(other) => format!("{other:?}"),
                                    None => String::new(),
                                };
                                (kv.key, v)
                            })
                            .collect(),
                    });
                }
            }
        }
    }
}

#[tonic::async_trait]
impl TraceService for Spans {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.add(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// The receiver: an HTTP and a gRPC listener.
pub struct OtlpReceiver {
    pub http: SocketAddr,
    pub grpc: SocketAddr,
    spans: Spans,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl OtlpReceiver {
    /// Listens on two free loopback ports.
    pub async fn start() -> OtlpReceiver {
        let spans = Spans::default();
        let http_listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let grpc_listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let (http, grpc) = (
            http_listener.local_addr().expect("addr"),
            grpc_listener.local_addr().expect("addr"),
        );
        let for_http = spans.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: axum::body::Bytes| {
                let spans = for_http.clone();
                async move {
                    match ExportTraceServiceRequest::decode(body) {
                        Ok(r) => {
                            spans.add(r);
                            (
                                axum::http::StatusCode::OK,
                                [(axum::http::header::CONTENT_TYPE, "application/x-protobuf")],
                                ExportTraceServiceResponse::default().encode_to_vec(),
                            )
                        }
                        Err(_) => (
                            axum::http::StatusCode::BAD_REQUEST,
                            [(axum::http::header::CONTENT_TYPE, "text/plain")],
                            b"not an ExportTraceServiceRequest".to_vec(),
                        ),
                    }
                }
            }),
        );
        let http_task = tokio::spawn(async move {
            let _ = axum::serve(http_listener, app).await;
        });
        let service = TraceServiceServer::new(spans.clone());
        let grpc_task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(
                    grpc_listener,
                ))
                .await;
        });
        OtlpReceiver {
            http,
            grpc,
            spans,
            tasks: vec![http_task, grpc_task],
        }
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans.0.lock().expect("spans").clone()
    }

    /// Waits until a span named `name` arrived, for at most `within`.
    pub async fn wait_for(&self, name: &str, within: Duration) -> Option<ReceivedSpan> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(s) = self.spans().into_iter().find(|s| s.name == name) {
                return Some(s);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}
