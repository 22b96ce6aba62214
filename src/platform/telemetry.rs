//! OTLP tracing (`TRACING_ENABLED=true`), as the original exports it:
//! - OTLP over HTTP (protobuf) or gRPC per `TRACING_EXPORTER_PROTOCOL`;
//!   endpoint, headers and TLS from the standard `OTEL_EXPORTER_OTLP_*`
//!   variables, which the exporter reads itself;
//! - resource `service.name` = `TRACING_SERVICE_NAME`, `service.namespace`,
//!   `service.instance.id` (a random UUID v4 when empty);
//! - parent-based sampling at `TRACING_SAMPLING_RATE` (≥ 1 always, ≤ 0
//!   never); W3C trace-context, B3 (single and multiple headers) and
//!   baggage propagation from the request's headers;
//! - spans: the gRPC server span (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`),
//!   `ShouldRateLimit Execution`, the store's (`Redis Pipeline
//!   Execution`, `Memcached Fetch Execution`) and `/json`'s
//!   (`NewJsonHandler Remaining Execution`).
//!
//! Spans are `tracing` spans of target [`SPAN_TARGET`], turned into
//! OpenTelemetry spans by `tracing-opentelemetry`; with tracing off they
//! are not even created ([`enabled`]). Export runs on the SDK's batch
//! thread with a bounded queue: when the collector is down, spans are
//! dropped there and the request path never waits.

use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::propagation::{Extractor, TextMapCompositePropagator};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::KeyValue;
use opentelemetry_otlp::{SpanExporter, WithExportConfig};
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The target of the spans that are exported.
pub const SPAN_TARGET: &str = "ratelimit::trace";

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether spans are exported: only then are they created.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Why tracing could not start.
#[derive(Debug, thiserror::Error)]
#[error("tracing: {0}")]
pub struct TelemetryError(String);

/// How spans leave the process (OTLP's two transports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExportProtocol {
    /// OTLP over HTTP (protobuf).
    #[default]
    Http,
    /// OTLP over gRPC.
    Grpc,
}

/// What the exported spans say of this process, and which of them leave.
#[derive(Debug, Clone, PartialEq)]
pub struct TracingOptions {
    /// `service.name`.
    pub service_name: String,
    /// `service.namespace`; none when empty.
    pub service_namespace: String,
    /// `service.instance.id`; a random UUID v4 when empty.
    pub service_instance_id: String,
    /// The exporter's transport; endpoint, headers and TLS come from the
    /// standard `OTEL_EXPORTER_OTLP_*` variables, which it reads itself.
    pub protocol: ExportProtocol,
    /// The trace-id ratio sampled (≥ 1 all, ≤ 0 none), parent-based.
    pub sampling_rate: f64,
}

/// The tracer provider for `settings`. Call inside the tokio runtime (the
/// gRPC exporter's channel lives on it).
pub fn provider(settings: &TracingOptions) -> Result<SdkTracerProvider, TelemetryError> {
    let exporter = match settings.protocol {
        ExportProtocol::Http => SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .build(),
        ExportProtocol::Grpc => SpanExporter::builder().with_tonic().build(),
    }
    .map_err(|e| TelemetryError(e.to_string()))?;
    let instance = if settings.service_instance_id.is_empty() {
        uuid_v4()
    } else {
        settings.service_instance_id.clone()
    };
    let mut attributes = vec![KeyValue::new("service.instance.id", instance)];
    if !settings.service_namespace.is_empty() {
        attributes.push(KeyValue::new(
            "service.namespace",
            settings.service_namespace.clone(),
        ));
    }
    let resource = Resource::builder()
        .with_service_name(settings.service_name.clone())
        .with_attributes(attributes)
        .build();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(sampler(settings.sampling_rate))
        .with_resource(resource)
        .build();
    opentelemetry::global::set_text_map_propagator(TextMapCompositePropagator::new(vec![
        Box::new(TraceContextPropagator::new()),
        Box::new(B3),
        Box::new(BaggagePropagator::new()),
    ]));
    ENABLED.store(true, Ordering::Relaxed);
    Ok(provider)
}

/// B3, extraction only (the service starts no outgoing calls): the
/// single `b3` header (`{trace}-{span}[-{sampled}[-{parent}]]`) or the
/// `X-B3-TraceId` / `X-B3-SpanId` / `X-B3-Sampled` / `X-B3-Flags` headers.
/// A 64-bit trace id is widened with zeros on the left, as B3 specifies.
/// (The OpenTelemetry B3 propagator ships only in the deprecated Zipkin
/// exporter crate.)
#[derive(Debug)]
struct B3;

impl B3 {
    fn span_context(extractor: &dyn Extractor) -> Option<opentelemetry::trace::SpanContext> {
        use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
        let (trace, span, sampled) = match extractor.get("b3") {
            Some(single) => {
                let mut parts = single.split('-');
                let trace = parts.next()?.to_string();
                let span = parts.next()?.to_string();
                (trace, span, parts.next().map(str::to_string))
            }
            None => (
                extractor.get("x-b3-traceid")?.to_string(),
                extractor.get("x-b3-spanid")?.to_string(),
                match extractor.get("x-b3-flags") {
                    Some("1") => Some("d".to_string()),
                    _ => extractor.get("x-b3-sampled").map(str::to_string),
                },
            ),
        };
        if !(trace.len() == 16 || trace.len() == 32) || span.len() != 16 {
            return None;
        }
        let trace_id = TraceId::from_hex(&format!("{trace:0>32}")).ok()?;
        let span_id = SpanId::from_hex(&span).ok()?;
        let flags = match sampled.as_deref() {
            Some("1" | "d" | "true") => TraceFlags::SAMPLED,
            _ => TraceFlags::default(),
        };
        let cx = SpanContext::new(trace_id, span_id, flags, true, TraceState::default());
        cx.is_valid().then_some(cx)
    }
}

impl opentelemetry::propagation::TextMapPropagator for B3 {
    fn inject_context(
        &self,
        _cx: &opentelemetry::Context,
        _injector: &mut dyn opentelemetry::propagation::Injector,
    ) {
    }

    fn extract_with_context(
        &self,
        cx: &opentelemetry::Context,
        extractor: &dyn Extractor,
    ) -> opentelemetry::Context {
        use opentelemetry::trace::TraceContextExt;
        match B3::span_context(extractor) {
            Some(span) => cx.with_remote_span_context(span),
            None => cx.clone(),
        }
    }

    fn fields(&self) -> opentelemetry::propagation::text_map_propagator::FieldIter<'_> {
        static FIELDS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
        let fields = FIELDS.get_or_init(|| {
            [
                "b3",
                "x-b3-traceid",
                "x-b3-spanid",
                "x-b3-sampled",
                "x-b3-flags",
            ]
            .map(String::from)
            .to_vec()
        });
        opentelemetry::propagation::text_map_propagator::FieldIter::new(fields)
    }
}

/// Parent-based, at `rate` of the traces that start here.
fn sampler(rate: f64) -> Sampler {
    let root = if rate >= 1.0 {
        Sampler::AlwaysOn
    } else if rate <= 0.0 {
        Sampler::AlwaysOff
    } else {
        Sampler::TraceIdRatioBased(rate)
    };
    Sampler::ParentBased(Box::new(root))
}

/// The `tracing` layer that exports [`SPAN_TARGET`] spans through `provider`.
pub fn layer<S>(provider: &SdkTracerProvider) -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    use tracing_subscriber::Layer;
    let tracer = provider.tracer("ratelimit");
    tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(
            tracing_subscriber::filter::Targets::new()
                .with_target(SPAN_TARGET, tracing::Level::TRACE),
        )
}

struct Headers<'a>(&'a tonic::codegen::http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

/// The gRPC server span of `method`, a child of the trace the request's
/// headers carry (if any).
pub fn server_span(
    method: &'static str,
    headers: &tonic::codegen::http::HeaderMap,
) -> tracing::Span {
    let span = tracing::info_span!(
        target: SPAN_TARGET,
        "grpc.server",
        otel.name = method,
        otel.kind = "server",
        rpc.system = "grpc",
    );
    let parent = opentelemetry::global::get_text_map_propagator(|p| p.extract(&Headers(headers)));
    let _ = span.set_parent(parent);
    span
}

/// A random UUID v4, as the original's default instance id.
fn uuid_v4() -> String {
    let mut b: [u8; 16] = rand::random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_ids_are_uuid_v4() {
        let id = uuid_v4();
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
        assert!(matches!(&id[19..20], "8" | "9" | "a" | "b"));
        assert_ne!(uuid_v4(), id);
    }

    #[test]
    fn b3_headers_in_both_encodings() {
        struct Map(Vec<(&'static str, &'static str)>);
        impl Extractor for Map {
            fn get(&self, key: &str) -> Option<&str> {
                self.0.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
            }
            fn keys(&self) -> Vec<&str> {
                self.0.iter().map(|(k, _)| *k).collect()
            }
        }
        let single = Map(vec![(
            "b3",
            "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1",
        )]);
        let cx = B3::span_context(&single).expect("single header");
        assert_eq!(
            cx.trace_id().to_string(),
            "80f198ee56343ba864fe8b2a57d3eff7"
        );
        assert!(cx.is_sampled() && cx.is_remote());
        let multi = Map(vec![
            ("x-b3-traceid", "64fe8b2a57d3eff7"),
            ("x-b3-spanid", "e457b5a2e4d86bd1"),
            ("x-b3-sampled", "0"),
        ]);
        let cx = B3::span_context(&multi).expect("multiple headers");
        assert_eq!(
            cx.trace_id().to_string(),
            "000000000000000064fe8b2a57d3eff7"
        );
        assert!(!cx.is_sampled());
        assert!(
            B3::span_context(&Map(vec![("b3", "0")])).is_none(),
            "deny-only is no context"
        );
        assert!(B3::span_context(&Map(vec![("b3", "xyz-abc")])).is_none());
    }

    #[test]
    fn the_sampling_rate_is_clamped_as_the_original() {
        assert!(format!("{:?}", sampler(1.5)).contains("AlwaysOn"));
        assert!(format!("{:?}", sampler(0.0)).contains("AlwaysOff"));
        assert!(format!("{:?}", sampler(0.25)).contains("0.25"));
    }
}
