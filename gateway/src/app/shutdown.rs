//! Graceful termination driven by apiagg (spec §11.3): SIGTERM turns readyz red at once, the
//! server keeps serving for the shutdown delay, then refuses new requests with 429 while the
//! in-flight ones drain (bounded), and only then lets pingora stop.

use std::sync::Arc;

use async_trait::async_trait;
use pingora_core::server::{ShutdownSignal, ShutdownSignalWatch};
use tokio::signal::unix::{signal, SignalKind};

use crate::observe::{Lifecycle, Milestone};
use crate::state::{Gateway, Options};

/// The shutdown watcher handed to pingora.
pub struct GracefulShutdown {
    lifecycle: Arc<Lifecycle>,
    options: Options,
}

impl GracefulShutdown {
    /// A watcher for `gateway`.
    pub fn new(gateway: &Gateway) -> GracefulShutdown {
        GracefulShutdown {
            lifecycle: gateway.lifecycle.clone(),
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
        tracing::info!(
            in_flight = lifecycle.in_flight(),
            "refusing new requests, draining in-flight ones"
        );
        let drained = tokio::select! {
            d = lifecycle.drain(options.drain_timeout) => d,
            _ = int.recv() => return ShutdownSignal::FastShutdown,
        };
        if drained {
            tracing::info!("all requests finished, exiting");
        } else {
            tracing::warn!(
                in_flight = lifecycle.in_flight(),
                "drain timeout reached, exiting"
            );
        }
        ShutdownSignal::GracefulTerminate
    }
}
