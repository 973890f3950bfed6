//! Graceful termination driven by apiagg (as k8s.io/apiserver's `pkg/server/genericapiserver.go`
//! terminates): SIGTERM turns readyz red at once, the server keeps serving for the shutdown
//! delay, then stops taking new requests (or, with `--shutdown-send-retry-after`, refuses them
//! with 429) while the in-flight ones drain (bounded) and open watches end at a bounded rate,
//! and only then lets pingora stop.

use std::sync::Arc;

use async_trait::async_trait;
use pingora_core::server::{ShutdownSignal, ShutdownSignalWatch};
use tokio::signal::unix::{signal, SignalKind};

use crate::state::{Gateway, Options};
use apiagg_audit::Auditor;
use apiagg_observe::{Lifecycle, Milestone, Tracer, Watches};

/// Upper bound on flushing the audit backends at exit.
const AUDIT_FLUSH: std::time::Duration = std::time::Duration::from_secs(10);
/// Upper bound on exporting the queued spans at exit.
const TRACE_FLUSH: std::time::Duration = std::time::Duration::from_secs(5);

/// The shutdown watcher handed to pingora.
pub struct GracefulShutdown {
    lifecycle: Arc<Lifecycle>,
    watches: Arc<Watches>,
    /// Flushed once the last request drained, so no audit event is lost.
    auditor: Auditor,
    /// Its queued spans are exported after the audit flush.
    tracer: Option<Arc<Tracer>>,
    options: Options,
}

impl GracefulShutdown {
    /// A watcher for `gateway`, flushing `auditor` and `tracer` at the end.
    pub fn new(
        gateway: &Gateway,
        auditor: Auditor,
        tracer: Option<Arc<Tracer>>,
    ) -> GracefulShutdown {
        GracefulShutdown {
            lifecycle: gateway.lifecycle.clone(),
            watches: gateway.watches.clone(),
            auditor,
            tracer,
            options: gateway.options.clone(),
        }
    }
}

#[async_trait]
impl ShutdownSignalWatch for GracefulShutdown {
    async fn recv(&self) -> ShutdownSignal {
        let (mut term, mut int) = match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(t), Ok(i)) => (t, i),
            (Err(e), _) | (_, Err(e)) => {
                tracing::error!("cannot watch termination signals: {e}");
                return std::future::pending().await;
            }
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {
                tracing::info!("SIGINT: stopping now");
                return ShutdownSignal::FastShutdown;
            }
        }
        let lifecycle = &self.lifecycle;
        let options = &self.options;
        lifecycle.reach(Milestone::ShuttingDown);
        tracing::info!(delay = ?options.shutdown_delay, "SIGTERM: readyz is failing, still serving during the shutdown delay");
        tokio::select! {
            _ = tokio::time::sleep(options.shutdown_delay) => {}
            _ = int.recv() => return ShutdownSignal::FastShutdown,
        }
        lifecycle.reach(Milestone::Rejecting);
        let grace = options.watch_termination_grace;
        let watches = self.watches.open_now();
        let rate = self.watches.start_draining(grace);
        let refusing = if options.send_retry_after {
            "refusing new requests (429, Retry-After: 5)"
        } else {
            "not taking new requests"
        };
        tracing::info!(
            in_flight = lifecycle.in_flight(),
            watches,
            "{refusing}, draining in-flight ones; open watches end at {rate:.0} a second within {grace:?}"
        );
        // The drain waits for the watches' grace period at least.
        let limit = options
            .drain_timeout
            .max(grace + std::time::Duration::from_secs(1));
        let drained = tokio::select! {
            d = lifecycle.drain(limit) => d,
            _ = int.recv() => return ShutdownSignal::FastShutdown,
        };
        if drained {
            tracing::info!(
                watches_ended = self.watches.drained(),
                "all requests finished, exiting"
            );
        } else {
            tracing::warn!(
                in_flight = lifecycle.in_flight(),
                "drain timeout reached, exiting"
            );
        }
        // Every request has ended (or the drain bound passed): its events are queued.
        self.auditor.shutdown(AUDIT_FLUSH).await;
        if let Some(tracer) = &self.tracer {
            tracer.shutdown(TRACE_FLUSH).await;
        }
        ShutdownSignal::GracefulTerminate
    }
}
