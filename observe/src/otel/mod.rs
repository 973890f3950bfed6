//! OpenTelemetry tracing (`--tracing-config-file`, as kube-apiserver): the tracer of the
//! process, sampling `ParentBased(TraceIdRatioBased(samplingRatePerMillion / 10⁶))` (the
//! sampled `traceparent` of a privileged caller is continued; anyone else's is only linked), W3C trace context in and out, spans exported as
//! `service.name=apiagg` over OTLP/gRPC off the request path (export.rs). Without the flag
//! there is no tracer at all: the request path checks one `Option`.

mod config;
mod export;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{
    Link, SpanBuilder, SpanContext, SpanKind, TraceContextExt, Tracer as _, TracerProvider,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider, Span};
use opentelemetry_sdk::Resource;
use prometheus::Registry;

pub use config::{load, TracingSettings};

use export::{ExportMetrics, Exporter};

/// Why tracing cannot start. Not retryable: the process does not start.
#[derive(Debug, thiserror::Error)]
pub enum TracingError {
    /// The exporter's thread or runtime cannot be made.
    #[error("cannot start the span exporter: {0}")]
    Thread(std::io::Error),
    /// The tracing metrics cannot be registered (a name taken twice).
    #[error("tracing metrics: {0}")]
    Metrics(#[from] prometheus::Error),
}

/// `traceparent` and `tracestate`, the W3C trace-context headers.
pub const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
/// See [`TRACEPARENT`].
pub const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// The process's tracer.
pub struct Tracer {
    tracer: SdkTracer,
    provider: SdkTracerProvider,
    propagator: TraceContextPropagator,
    exporter: Exporter,
}

impl std::fmt::Debug for Tracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracer").finish_non_exhaustive()
    }
}

impl Tracer {
    /// Starts tracing as `settings` say, its counters in `registry`.
    pub fn start(
        settings: &TracingSettings,
        registry: &Registry,
    ) -> Result<Arc<Tracer>, TracingError> {
        let metrics = ExportMetrics::register(registry)?;
        let resource = Resource::builder().with_service_name("apiagg").build();
        let (processor, exporter) =
            Exporter::start(settings.endpoint.clone(), resource.clone(), metrics)?;
        let ratio = f64::from(settings.sampling_rate_per_million) / f64::from(config::MILLION);
        let provider = SdkTracerProvider::builder()
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                ratio,
            ))))
            .with_resource(resource)
            .with_span_processor(processor)
            .build();
        let tracer = provider.tracer("apiagg");
        Ok(Arc::new(Tracer {
            tracer,
            provider,
            propagator: TraceContextPropagator::new(),
            exporter,
        }))
    }

    /// The caller's trace context in `headers` (`traceparent` / `tracestate`), when valid.
    pub fn extract(&self, headers: &HeaderMap) -> Option<SpanContext> {
        let context = self
            .propagator
            .extract_with_context(&Context::new(), &Headers(headers));
        let remote = context.span().span_context().clone();
        remote.is_valid().then_some(remote)
    }

    /// A server span named `name` that began at `start`, returned as the context its children
    /// start from. The caller's context `remote` is its parent only when `trusted` (as
    /// kube-apiserver continues only privileged callers' traces, kubernetes#127053); otherwise
    /// the span is a new root, sampled by apiagg's rate alone, with a link to `remote`.
    pub fn server(
        &self,
        name: &'static str,
        remote: Option<&SpanContext>,
        trusted: bool,
        start: SystemTime,
        attributes: Vec<KeyValue>,
    ) -> Context {
        let mut builder = SpanBuilder::from_name(name)
            .with_kind(SpanKind::Server)
            .with_start_time(start)
            .with_attributes(attributes);
        let parent = match remote {
            Some(remote) if trusted => Context::new().with_remote_span_context(remote.clone()),
            Some(remote) => {
                builder = builder.with_links(vec![Link::with_context(remote.clone())]);
                Context::new()
            }
            None => Context::new(),
        };
        let span = self.tracer.build_with_context(builder, &parent);
        parent.with_span(span)
    }

    /// A span `name` inside `parent` that ran from `start` to `end`.
    pub fn finished_child(
        &self,
        parent: &Context,
        name: &'static str,
        start: SystemTime,
        end: SystemTime,
    ) {
        use opentelemetry::trace::Span as _;
        let mut span = self.tracer.build_with_context(
            SpanBuilder::from_name(name)
                .with_kind(SpanKind::Internal)
                .with_start_time(start),
            parent,
        );
        span.end_with_timestamp(end);
    }

    /// A span `name` of `kind` inside `parent`.
    pub fn child(
        &self,
        parent: &Context,
        name: &'static str,
        kind: SpanKind,
        attributes: Vec<KeyValue>,
    ) -> Span {
        self.tracer.build_with_context(
            SpanBuilder::from_name(name)
                .with_kind(kind)
                .with_attributes(attributes),
            parent,
        )
    }

    /// The `traceparent` (and `tracestate`, when there is one) naming `span` as the parent.
    pub fn headers_of(&self, span: &Span) -> Vec<(HeaderName, HeaderValue)> {
        use opentelemetry::trace::Span as _;
        let cx = Context::new().with_remote_span_context(span.span_context().clone());
        let mut out = Vec::with_capacity(2);
        self.propagator.inject_context(&cx, &mut Out(&mut out));
        out
    }

    /// Exports the spans ended so far (within `timeout`) and stops exporting.
    pub async fn shutdown(&self, timeout: Duration) {
        // Ends the SDK's side first: no span is queued after this.
        let _ = self.provider.shutdown();
        self.exporter.shutdown(timeout).await;
    }
}

/// Reads the trace-context headers of a request.
struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

/// Collects the trace-context headers to send.
struct Out<'a>(&'a mut Vec<(HeaderName, HeaderValue)>);

impl Injector for Out<'_> {
    fn set(&mut self, key: &str, value: String) {
        let name = match key {
            "traceparent" => TRACEPARENT,
            // An empty trace state is not sent.
            "tracestate" if !value.is_empty() => TRACESTATE,
            _ => return,
        };
        if let Ok(value) = HeaderValue::try_from(value) {
            self.0.push((name, value));
        }
    }
}
