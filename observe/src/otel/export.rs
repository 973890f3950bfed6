//! Spans leave the request path through a bounded queue: ending a span only tries to queue it
//! (a full queue drops it, counted in `apiagg_tracing_spans_dropped_total{reason="queue_full"}`),
//! and a thread of its own takes what is queued every [`POLL`], in batches of at most
//! [`MAX_BATCH`], to the collector over OTLP/gRPC. A failed export drops its batch (counted as
//! `export_failed`) and is logged when the failure starts or changes, not per span.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use opentelemetry::Context;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use opentelemetry_sdk::Resource;
use prometheus::{IntCounter, IntCounterVec, Opts, Registry};
use tokio::sync::{mpsc, oneshot, watch};

use super::TracingError;

/// Spans waiting for the exporter at most (the SDK's batch processor's default).
pub const QUEUE: usize = 2048;
/// Spans per export at most (the SDK's default).
pub const MAX_BATCH: usize = 512;
/// How often the exporter looks for queued spans. Waiting on the queue instead would wake the
/// exporter's thread from the request path for every span.
const POLL: Duration = Duration::from_millis(250);
/// Upper bound of one export.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The counters of the export.
#[derive(Clone)]
pub struct ExportMetrics {
    queue_full: IntCounter,
    export_failed: IntCounter,
    exported: IntCounter,
}

impl ExportMetrics {
    /// Registers `apiagg_tracing_spans_dropped_total{reason}` and
    /// `apiagg_tracing_spans_exported_total` in `registry`.
    pub fn register(registry: &Registry) -> Result<ExportMetrics, prometheus::Error> {
        let dropped = IntCounterVec::new(
            Opts::new(
                "apiagg_tracing_spans_dropped_total",
                "Spans not sent to the collector: queue_full (the export queue was full), \
                 export_failed (the collector did not take them).",
            ),
            &["reason"],
        )?;
        let exported = IntCounter::new(
            "apiagg_tracing_spans_exported_total",
            "Spans the collector took.",
        )?;
        registry.register(Box::new(dropped.clone()))?;
        registry.register(Box::new(exported.clone()))?;
        Ok(ExportMetrics {
            queue_full: dropped.with_label_values(&["queue_full"]),
            export_failed: dropped.with_label_values(&["export_failed"]),
            exported,
        })
    }
}

/// The SDK's span processor: queues ended spans, never waits.
pub struct BoundedProcessor {
    queue: mpsc::Sender<SpanData>,
    queue_full: IntCounter,
}

impl std::fmt::Debug for BoundedProcessor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoundedProcessor")
            .field("capacity", &self.queue.max_capacity())
            .finish()
    }
}

impl SpanProcessor for BoundedProcessor {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if self.queue.try_send(span).is_err() {
            self.queue_full.inc();
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// The running exporter thread: how to stop it and learn that it is done.
pub struct Exporter {
    stop: watch::Sender<Option<Instant>>,
    done: Mutex<Option<oneshot::Receiver<()>>>,
}

impl Exporter {
    /// Starts the thread exporting to `endpoint` as `resource`; the processor feeds it.
    pub fn start(
        endpoint: String,
        resource: Resource,
        metrics: ExportMetrics,
    ) -> Result<(BoundedProcessor, Exporter), TracingError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(TracingError::Thread)?;
        let (queue, spans) = mpsc::channel(QUEUE);
        let (stop, stopped) = watch::channel(None);
        let (finished, done) = oneshot::channel();
        let processor = BoundedProcessor {
            queue,
            queue_full: metrics.queue_full.clone(),
        };
        std::thread::Builder::new()
            .name("apiagg-tracing".into())
            .spawn(move || {
                runtime.block_on(run(endpoint, resource, metrics, spans, stopped));
                let _ = finished.send(());
            })
            .map_err(TracingError::Thread)?;
        let exporter = Exporter {
            stop,
            done: Mutex::new(Some(done)),
        };
        Ok((processor, exporter))
    }

    /// Exports what is queued, giving up after `timeout`; later spans are not exported.
    pub async fn shutdown(&self, timeout: Duration) {
        let done = self.done.lock().unwrap_or_else(|e| e.into_inner()).take();
        let Some(done) = done else { return };
        let deadline = Instant::now() + timeout;
        let _ = self.stop.send(Some(deadline));
        if tokio::time::timeout_at(deadline.into(), done)
            .await
            .is_err()
        {
            tracing::warn!(?timeout, "tracing: queued spans were not exported in time");
        }
    }
}

/// The exporter's loop: every [`POLL`], queued spans in batches to the collector; at stop,
/// what is queued then, within the deadline.
async fn run(
    endpoint: String,
    resource: Resource,
    metrics: ExportMetrics,
    mut spans: mpsc::Receiver<SpanData>,
    mut stop: watch::Receiver<Option<Instant>>,
) {
    let built = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint.clone())
        .with_timeout(EXPORT_TIMEOUT)
        .build();
    let mut exporter = match built {
        Ok(exporter) => exporter,
        Err(e) => {
            tracing::error!(%endpoint, "tracing: no OTLP exporter, spans are dropped: {e}");
            return;
        }
    };
    exporter.set_resource(&resource);
    let mut failing: Option<String> = None;
    let mut clock = tokio::time::interval(POLL);
    clock.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut batch = Vec::with_capacity(MAX_BATCH);
    loop {
        let deadline = tokio::select! {
            _ = clock.tick() => None,
            changed = stop.changed() => {
                Some(changed.ok().and_then(|()| *stop.borrow()).unwrap_or_else(Instant::now))
            }
        };
        loop {
            while batch.len() < MAX_BATCH {
                match spans.try_recv() {
                    Ok(span) => batch.push(span),
                    Err(_) => break,
                }
            }
            if batch.is_empty() {
                break;
            }
            let n = batch.len() as u64;
            let sent = std::mem::replace(&mut batch, Vec::with_capacity(MAX_BATCH));
            let outcome = match deadline {
                Some(at) => tokio::time::timeout_at(at.into(), exporter.export(sent))
                    .await
                    .unwrap_or(Err(OTelSdkError::Timeout(EXPORT_TIMEOUT))),
                None => exporter.export(sent).await,
            };
            match outcome {
                Ok(()) => {
                    metrics.exported.inc_by(n);
                    if failing.take().is_some() {
                        tracing::info!(%endpoint, "tracing: exporting spans again");
                    }
                }
                Err(e) => {
                    metrics.export_failed.inc_by(n);
                    let message = e.to_string();
                    if failing.as_deref() != Some(message.as_str()) {
                        tracing::warn!(%endpoint, "tracing: spans not exported: {message}");
                        failing = Some(message);
                    }
                }
            }
            if deadline.is_some_and(|at| Instant::now() >= at) {
                break;
            }
        }
        if deadline.is_some() {
            let _ = exporter.shutdown();
            return;
        }
    }
}
