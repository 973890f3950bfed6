//! Layer 2: what the controllers publish and the request path reads. Every snapshot has one
//! writer and cheap, lock-free readers; controllers take only the handles they use.

mod openapi_v2;
mod snapshot;
mod status;

use std::sync::Arc;
use std::time::Duration;

use apiagg_discovery::{AggregatedDocs, NegotiateOptions};
use apiagg_openapi_merge::OpenApiDocs;

use crate::backends::{Clients, HealthBook, RouteTable};
use apiagg_observe::{Lifecycle, Metrics, Watches};
use apiagg_store::Store;

pub use openapi_v2::{OpenApiV2, V2Demand};
pub use snapshot::{snapshot, Publisher, Snapshot};
pub use status::{ApiServiceStatus, Condition, EndpointStatus, StatusBook, Statuses};

/// Active health probing of backend endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeOptions {
    /// Time between two probes of an endpoint.
    pub interval: Duration,
    /// Timeout of one probe.
    pub timeout: Duration,
    /// Probes that must time out or fail in a row before an endpoint is ejected (a refused
    /// connection ejects at once).
    pub failure_threshold: u32,
}

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
    pub probes: ProbeOptions,
    /// Record per-request metrics (off only to measure their cost).
    pub request_metrics: bool,
    /// How often every OpenAPI source is re-read (also on registry changes).
    pub openapi_refresh: Duration,
    /// Upper bound of one OpenAPI download.
    pub openapi_timeout: Duration,
    /// Upper bound on waiting for the delegate's OpenAPI documents before readyz turns green.
    pub openapi_startup_timeout: Duration,
    /// Whether `/openapi/v2` is merged on demand or not served (`--openapi-v2`).
    pub openapi_v2: OpenApiV2,
    /// Largest body apiagg reads from a backend or the delegate (discovery, OpenAPI).
    pub backend_body_limit: u64,
    /// Bound of a forwarded request that is not long-running (`--request-timeout`).
    pub request_timeout: Duration,
    /// Bound of connecting to a backend or the delegate, TLS handshake included.
    pub connect_timeout: Duration,
    /// A watch without `timeoutSeconds` lasts between this and twice this
    /// (`--min-request-timeout`; zero: unbounded).
    pub min_request_timeout: Duration,
    /// On SIGTERM, open watches are ended at a bounded rate within this period
    /// (`--shutdown-watch-termination-grace-period`).
    pub watch_termination_grace: Duration,
    /// After the shutdown delay, new requests get 429 with `Retry-After` until the in-flight
    /// ones drained (`--shutdown-send-retry-after`); otherwise apiagg stops taking requests.
    pub send_retry_after: bool,
    /// Requests (not long-running) in flight to one APIService's backend at most; more get 429.
    pub max_requests_per_apiservice: usize,
    /// The same, per endpoint of a backend.
    pub max_requests_per_endpoint: usize,
    /// The command-line flags apiagg was started with and their values (defaults included,
    /// secrets shown as `CLASSIFIED`), sorted by name: what `/flagz` lists.
    pub flags: Arc<[(String, String)]>,
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
            probes: ProbeOptions {
                interval: Duration::from_millis(500),
                timeout: Duration::from_millis(500),
                failure_threshold: 3,
            },
            request_metrics: true,
            openapi_refresh: Duration::from_secs(60),
            openapi_timeout: Duration::from_secs(30),
            openapi_startup_timeout: Duration::from_secs(10),
            openapi_v2: OpenApiV2::OnDemand,
            backend_body_limit: 64 << 20,
            request_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(5),
            min_request_timeout: Duration::from_secs(1800),
            watch_termination_grace: Duration::from_secs(30),
            send_retry_after: false,
            max_requests_per_apiservice: 150,
            max_requests_per_endpoint: 150,
            flags: Arc::from([]),
        }
    }
}

/// The current route table (swapped whole on every change).
pub type Routes = Snapshot<Arc<RouteTable>>;
/// Aggregated `/apis` (v2 and v2beta1), once the discovery controller has rendered it.
pub type Discovery = Snapshot<Option<Arc<AggregatedDocs>>>;
/// `/openapi/v2` and `/openapi/v3`, once the OpenAPI controller has published them.
pub type OpenApi = Snapshot<Option<Arc<OpenApiDocs>>>;

/// The writing halves of the published snapshots, handed by the composition root to their one
/// writer each.
pub struct Writers {
    /// The registry controller's.
    pub routes: Publisher<Arc<RouteTable>>,
    /// The discovery controller's.
    pub discovery: Publisher<Option<Arc<AggregatedDocs>>>,
    /// The OpenAPI controller's.
    pub openapi: Publisher<Option<Arc<OpenApiDocs>>>,
    /// The availability controller's.
    pub availability: Publisher<Arc<Statuses>>,
}

/// Every shared handle; the composition root hands each part the ones it needs.
pub struct Gateway {
    /// Current routes (swapped whole on every change).
    pub routes: Routes,
    /// Aggregated `/apis` (v2 and v2beta1), once the discovery controller has rendered it.
    pub discovery: Discovery,
    /// `/openapi/v2` and `/openapi/v3`, once the OpenAPI controller has published them.
    pub openapi: OpenApi,
    /// Clients asking for `/openapi/v2`, which is merged on demand.
    pub openapi_v2: Arc<V2Demand>,
    /// Availability of every APIService, written by the availability controller.
    pub availability: StatusBook,
    /// Health of every backend endpoint.
    pub health: Arc<HealthBook>,
    /// The controllers' HTTP clients.
    pub clients: Arc<Clients>,
    /// APIServices registered through the API.
    pub store: Arc<dyn Store>,
    /// Lifecycle flags.
    pub lifecycle: Arc<Lifecycle>,
    /// Open watches, their lifetimes and their end on SIGTERM.
    pub watches: Arc<Watches>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Options.
    pub options: Options,
    /// When the gateway started (`/statusz`).
    pub started: std::time::SystemTime,
}

impl Gateway {
    /// A gateway with no routes yet, keeping API-registered APIServices in `store`; and the
    /// writers of its snapshots.
    pub fn new(
        options: Options,
        store: Arc<dyn Store>,
    ) -> Result<(Gateway, Writers), prometheus::Error> {
        let (routes_writer, routes) = snapshot(Arc::new(RouteTable::empty()));
        let (discovery_writer, discovery) = snapshot(None);
        let (openapi_writer, openapi) = snapshot(None);
        let (availability_writer, availability) = snapshot(Arc::default());
        let writers = Writers {
            routes: routes_writer,
            discovery: discovery_writer,
            openapi: openapi_writer,
            availability: availability_writer,
        };
        let gateway = Gateway {
            routes,
            discovery,
            openapi,
            openapi_v2: Arc::default(),
            availability,
            health: Arc::default(),
            clients: Arc::new(Clients::new(
                options.backend_body_limit,
                options.connect_timeout,
            )),
            store,
            lifecycle: Lifecycle::new(),
            watches: Watches::new(options.min_request_timeout),
            metrics: Arc::new(Metrics::new()?),
            options,
            started: std::time::SystemTime::now(),
        };
        Ok((gateway, writers))
    }
}
