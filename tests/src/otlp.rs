//! An OpenTelemetry collector's trace receiver on loopback: the OTLP/gRPC `TraceService`
//! (`opentelemetry.proto.collector.trace.v1`) served over HTTP/2 cleartext, as a collector
//! listens on port 4317. Tests read back every span it received, with its resource's
//! `service.name`, and wait for them without sleeping.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, KeyValue};
use tokio::sync::watch;

/// A span as the receiver got it (IDs in lower-case hex, as in `traceparent`).
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    /// `service.name` of the span's resource.
    pub service: String,
    /// The span's name.
    pub name: String,
    /// Its trace ID (32 hex digits).
    pub trace_id: String,
    /// Its span ID (16 hex digits).
    pub span_id: String,
    /// Its parent's span ID (empty for a root span).
    pub parent_span_id: String,
    /// `SpanKind` as a number (2: server, 3: client).
    pub kind: i32,
    /// Its attributes, values as text.
    pub attributes: BTreeMap<String, String>,
    /// Its status code (2: error).
    pub status: i32,
}

/// The received spans, and a count that changes with each export.
#[derive(Clone)]
struct Store {
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    exports: Arc<watch::Sender<u64>>,
}

/// A running receiver; stops with the test's runtime.
pub struct OtlpReceiver {
    /// `127.0.0.1:PORT`, as `endpoint` of a `TracingConfiguration`.
    pub endpoint: String,
    store: Store,
}

impl OtlpReceiver {
    /// Starts a receiver on a free loopback port, on the current tokio runtime.
    pub async fn start() -> OtlpReceiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the OTLP receiver");
        let endpoint = listener.local_addr().expect("address").to_string();
        let (exports, _) = watch::channel(0);
        let store = Store {
            spans: Arc::default(),
            exports: Arc::new(exports),
        };
        let service = TraceServiceServer::new(store.clone());
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        tokio::spawn(async move {
            let served = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(incoming)
                .await;
            if let Err(e) = served {
                eprintln!("OTLP receiver stopped: {e}");
            }
        });
        OtlpReceiver { endpoint, store }
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.store
            .spans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Waits (at most `limit`) until the spans received satisfy `done`; returns them either way.
    pub async fn wait_for(
        &self,
        limit: Duration,
        done: impl Fn(&[ReceivedSpan]) -> bool,
    ) -> Vec<ReceivedSpan> {
        let mut exports = self.store.exports.subscribe();
        let _ = tokio::time::timeout(limit, async {
            loop {
                if done(&self.spans()) {
                    return;
                }
                if exports.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
        self.spans()
    }

    /// How many export requests arrived so far.
    pub fn exports(&self) -> u64 {
        *self.store.exports.borrow()
    }
}

#[tonic::async_trait]
impl TraceService for Store {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut received = Vec::new();
        for resource_spans in request.into_inner().resource_spans {
            let service = resource_spans
                .resource
                .as_ref()
                .and_then(|r| attributes(&r.attributes).remove("service.name"))
                .unwrap_or_default();
            for scope in resource_spans.scope_spans {
                for span in scope.spans {
                    received.push(ReceivedSpan {
                        service: service.clone(),
                        name: span.name,
                        trace_id: hex(&span.trace_id),
                        span_id: hex(&span.span_id),
                        parent_span_id: hex(&span.parent_span_id),
                        kind: span.kind,
                        attributes: attributes(&span.attributes),
                        status: span.status.map_or(0, |s| s.code),
                    });
                }
            }
        }
        self.spans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(received);
        self.exports.send_modify(|n| *n += 1);
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

fn attributes(list: &[KeyValue]) -> BTreeMap<String, String> {
    list.iter()
        .map(|kv| (kv.key.clone(), text(kv.value.as_ref())))
        .collect()
}

fn text(value: Option<&AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
