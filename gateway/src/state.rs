//! The state shared by the request path and the controllers.

use std::sync::Arc;
use std::time::Duration;

use apiagg_discovery::{AggregatedDocs, NegotiateOptions};
use arc_swap::{ArcSwap, ArcSwapOption};
use tokio::sync::watch;

use crate::health_state::HealthBook;
use crate::lifecycle::Lifecycle;
use crate::metrics::Metrics;
use crate::openapi::OpenApiDocs;
use crate::routes::RouteTable;

/// Options that shape the gateway's behaviour.
#[derive(Debug, Clone)]
pub struct Options {
    /// Time between SIGTERM and refusing new requests (readyz is red during it).
    pub shutdown_delay: Duration,
    /// Upper bound on waiting for in-flight requests (watches included) after the delay.
    pub drain_timeout: Duration,
    /// How often the config files are checked for changes.
    pub reload_interval: Duration,
    /// How often the delegate's group-versions are re-read.
    pub delegate_refresh: Duration,
    /// Whether the listener serves TLS (for `X-Forwarded-Proto`).
    pub serving_tls: bool,
    /// How often every backend's discovery is re-read (it is also re-read on registry changes).
    pub discovery_refresh: Duration,
    /// Discovery negotiation switches (v2beta1 on or off).
    pub negotiate: NegotiateOptions,
    /// Active health probing of backend endpoints.
    pub probes: crate::availability::ProbeOptions,
    /// Record per-request metrics (off only to measure their cost).
    pub request_metrics: bool,
    /// How often every OpenAPI source is re-read (also on registry changes).
    pub openapi_refresh: Duration,
    /// Upper bound of one OpenAPI download.
    pub openapi_timeout: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            shutdown_delay: Duration::ZERO,
            drain_timeout: Duration::from_secs(60),
            reload_interval: Duration::from_secs(1),
            delegate_refresh: Duration::from_secs(60),
            serving_tls: false,
            discovery_refresh: Duration::from_secs(60),
            negotiate: NegotiateOptions::default(),
            probes: crate::availability::ProbeOptions {
                interval: Duration::from_millis(500),
                timeout: Duration::from_millis(500),
            },
            request_metrics: true,
            openapi_refresh: Duration::from_secs(60),
            openapi_timeout: Duration::from_secs(30),
        }
    }
}

/// Everything the request path reads, lock-free.
pub struct Gateway {
    /// Current routes (swapped whole on every change).
    pub routes: ArcSwap<RouteTable>,
    /// Aggregated `/apis` (v2 and v2beta1), once the discovery controller has rendered it.
    pub aggregated: ArcSwapOption<AggregatedDocs>,
    /// `/openapi/v2` and `/openapi/v3`, once the OpenAPI controller has published them.
    pub openapi: ArcSwapOption<OpenApiDocs>,
    /// Bumped whenever new routes are published; controllers `subscribe()` to it.
    pub routes_generation: watch::Sender<u64>,
    /// Bumped whenever some APIService's availability changes.
    pub availability_generation: watch::Sender<u64>,
    /// Lifecycle flags.
    pub lifecycle: Arc<Lifecycle>,
    /// Health of every backend endpoint.
    pub health: HealthBook,
    /// Availability of every APIService, written by the availability controller.
    pub availability: crate::availability::StatusBook,
    /// Metrics.
    pub metrics: Metrics,
    /// Options.
    pub options: Options,
}

impl Gateway {
    /// A gateway with no routes yet.
    pub fn new(options: Options) -> Result<Arc<Gateway>, prometheus::Error> {
        Ok(Arc::new(Gateway {
            routes: ArcSwap::from_pointee(RouteTable::empty()),
            aggregated: ArcSwapOption::empty(),
            openapi: ArcSwapOption::empty(),
            routes_generation: watch::Sender::new(0),
            availability_generation: watch::Sender::new(0),
            lifecycle: Lifecycle::new(),
            health: HealthBook::default(),
            availability: crate::availability::StatusBook::default(),
            metrics: Metrics::new()?,
            options,
        }))
    }
}
