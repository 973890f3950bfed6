//! Prometheus metrics of the gateway (text exposition format on `/metrics`). Callers pass
//! strings and numbers: nothing here knows the gateway's own types.

mod availability;
mod certificates;
mod requests;
mod watch_events;

use std::sync::Arc;

use dashmap::DashMap;
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};
use rustc_hash::FxBuildHasher;

pub use certificates::CertificateKind;
pub use requests::{GroupVersionMetrics, RouteKind};
pub use watch_events::{WatchEventSeries, WatchEvents};

/// Every metric apiagg exports.
pub struct Metrics {
    registry: Registry,
    /// `apiagg_requests_total{kind,code}`
    pub requests: IntCounterVec,
    /// `apiagg_request_duration_seconds{kind,code}`
    pub duration: HistogramVec,
    /// `apiagg_config_reloads_total{result}`
    pub reloads: IntCounterVec,
    /// `apiagg_config_last_reload_successful`
    pub last_reload_ok: IntGauge,
    /// `apiagg_registered_apiservices`
    pub registered: IntGauge,
    /// `apiagg_requests_in_flight`
    pub in_flight: IntGauge,
    /// `apiserver_current_inflight_requests{request_kind}`: `readOnly` and `mutating` requests
    /// admitted by flow control and running.
    pub current_inflight: [IntGauge; 2],
    /// `apiagg_authorization_decisions_total{decision,cache}`
    pub authorization_decisions: IntCounterVec,
    /// `aggregator_discovery_aggregation_count_total`
    pub discovery_aggregations: IntCounter,
    /// `aggregator_unavailable_apiservice{name}`
    pub unavailable: IntGaugeVec,
    /// `aggregator_unavailable_apiservice_total{name,reason}`
    pub unavailable_total: IntCounterVec,
    /// `apiagg_backend_endpoint_healthy{apiservice,endpoint}`
    pub endpoint_healthy: IntGaugeVec,
    /// `apiagg_proxy_requests_total{group,version,code}`
    pub proxy_requests: IntCounterVec,
    /// `apiagg_proxy_request_duration_seconds{group,version}`
    pub proxy_duration: HistogramVec,
    /// `apiserver_request_total{verb,dry_run,group,version,resource,subresource,scope,component,code}`
    pub apiserver_requests: IntCounterVec,
    /// `apiserver_request_duration_seconds{verb,dry_run,group,version,resource,subresource,scope,component}`
    pub apiserver_duration: HistogramVec,
    /// `apiserver_request_terminations_total{verb,group,version,resource,subresource,scope,component,code}`
    pub terminations: IntCounterVec,
    /// `apiserver_watch_events_total` and `apiserver_watch_events_sizes{group,version,resource}`
    /// of the watches apiagg writes itself.
    pub watch_events: WatchEvents,
    /// `apiagg_watch_list_streams_total{apiservice,mode}` (see [`Metrics::watch_list_stream`]).
    watch_list_streams: IntCounterVec,
    per_gv: DashMap<String, Arc<GroupVersionMetrics>>,
    /// Resolved series of `requests`/`duration`, so a request hashes two small keys (with
    /// FxHash: the keys come from closed sets, so a DoS-resistant hash buys nothing) instead of
    /// label strings.
    by_kind: DashMap<(RouteKind, u16), (IntCounter, Histogram), FxBuildHasher>,
    /// Resolved series of `apiserver_requests`/`apiserver_duration` (`subresource`, `code`).
    by_subresource: DashMap<(&'static str, u16), (IntCounter, Histogram), FxBuildHasher>,
    /// `apiagg_openapi_v2_regenerations_total`
    pub openapi_v2_regenerations: IntCounter,
    /// `apiagg_openapi_v2_regeneration_duration_seconds`
    pub openapi_v2_regeneration_duration: Histogram,
    /// `apiagg_openapi_v3_index_regenerations_total`
    pub openapi_v3_index_regenerations: IntCounter,
    /// `apiagg_openapi_download_failures_total{source}`
    pub openapi_download_failures: IntCounterVec,
    /// `apiagg_certificate_expiration_timestamp_seconds{certificate}` (set through
    /// [`Metrics::certificate_expiry`]).
    certificate_expiration: IntGaugeVec,
    /// Label sets of `terminations` (`verb`, `group`, `version`, `code`), to drop them with
    /// their APIService.
    terminated_series: dashmap::DashSet<[String; 4]>,
}

const APISERVER_BUCKETS: [f64; 23] = [
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0,
    10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
];

const PROXY_BUCKETS: [f64; 16] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// Labels of `apiserver_request_total` (the duration histogram has all but `code`).
#[rustfmt::skip]
const APISERVER_LABELS: [&str; 9] =
    ["verb", "dry_run", "group", "version", "resource", "subresource", "scope", "component", "code"];

/// Labels of `apiserver_request_terminations_total`.
#[rustfmt::skip]
const TERMINATION_LABELS: [&str; 8] =
    ["verb", "group", "version", "resource", "subresource", "scope", "component", "code"];

/// The series `apiagg_authorization_decisions_total` can have (failures are never cached).
const AUTHORIZATION_SERIES: [(&str, &str); 5] = [
    ("allowed", "hit"),
    ("allowed", "miss"),
    ("denied", "hit"),
    ("denied", "miss"),
    ("error", "miss"),
];

/// Reasons an `aggregator_unavailable_apiservice_total` series can carry: those of an
/// `Available` condition that is not `True` (kube-aggregator's
/// `pkg/controllers/status/remote/remote_available_controller.go`), and `UnknownReason` for
/// any other (upstream's `metrics.go` for a condition without one).
const REASONS: [&str; 8] = [
    "ServiceNotFound",
    "ServiceAccessError",
    "ServicePortError",
    "EndpointsNotFound",
    "EndpointsAccessError",
    "MissingEndpoints",
    "FailedDiscoveryCheck",
    "UnknownReason",
];

fn counter(
    r: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> prometheus::Result<IntCounterVec> {
    let c = IntCounterVec::new(Opts::new(name, help), labels)?;
    r.register(Box::new(c.clone()))?;
    Ok(c)
}

/// Registers an unlabelled metric and returns it.
fn single<M: prometheus::core::Collector + Clone + 'static>(
    r: &Registry,
    m: M,
) -> prometheus::Result<M> {
    r.register(Box::new(m.clone()))?;
    Ok(m)
}

fn gauge(r: &Registry, name: &str, help: &str, labels: &[&str]) -> prometheus::Result<IntGaugeVec> {
    let g = IntGaugeVec::new(Opts::new(name, help), labels)?;
    r.register(Box::new(g.clone()))?;
    Ok(g)
}

fn histogram(
    r: &Registry,
    name: &str,
    help: &str,
    buckets: &[f64],
    labels: &[&str],
) -> prometheus::Result<HistogramVec> {
    let h = HistogramVec::new(
        HistogramOpts::new(name, help).buckets(buckets.to_vec()),
        labels,
    )?;
    r.register(Box::new(h.clone()))?;
    Ok(h)
}

/// One request counted in `apiserver_current_inflight_requests` until dropped.
pub struct Running(IntGauge);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Metrics {
    /// Counts a request admitted by flow control as running until the guard drops.
    pub fn running(&self, mutating: bool) -> Running {
        let gauge = self.current_inflight[usize::from(mutating)].clone();
        gauge.inc();
        Running(gauge)
    }

    /// The registry every metric is registered in (crates and modules with metrics of their own
    /// add them here, so `/metrics` shows them).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Creates and registers every metric.
    pub fn new() -> Result<Metrics, prometheus::Error> {
        let r = Registry::new();
        let requests = counter(
            &r,
            "apiagg_requests_total",
            "Requests answered by apiagg, by route kind and HTTP status code.",
            &["kind", "code"],
        )?;
        let duration = histogram(
            &r,
            "apiagg_request_duration_seconds",
            "Time from request arrival to the end of the response, by route kind and code.",
            &PROXY_BUCKETS,
            &["kind", "code"],
        )?;
        let reloads = counter(
            &r,
            "apiagg_config_reloads_total",
            "Config reload attempts, by result (success or failure).",
            &["result"],
        )?;
        let last_reload_ok = single(
            &r,
            IntGauge::new(
                "apiagg_config_last_reload_successful",
                "1 when the last config reload attempt succeeded, 0 when it was rejected.",
            )?,
        )?;
        let registered = single(
            &r,
            IntGauge::new(
                "apiagg_registered_apiservices",
                "APIServices in the serving registry (config and delegate).",
            )?,
        )?;
        let in_flight = single(
            &r,
            IntGauge::new(
                "apiagg_requests_in_flight",
                "Requests being served right now.",
            )?,
        )?;
        let inflight = gauge(
            &r,
            "apiserver_current_inflight_requests",
            "Requests admitted by flow control and running, by kind (readOnly, mutating).",
            &["request_kind"],
        )?;
        let current_inflight = [
            inflight.with_label_values(&["readOnly"]),
            inflight.with_label_values(&["mutating"]),
        ];
        let authorization_decisions = counter(
            &r,
            "apiagg_authorization_decisions_total",
            "Authorization decisions (authorization.mode: Webhook), by decision (allowed, denied, \
             error) and whether the cache answered (hit) or the delegate was asked (miss).",
            &["decision", "cache"],
        )?;
        for (decision, cache) in AUTHORIZATION_SERIES {
            authorization_decisions.with_label_values(&[decision, cache]);
        }
        let discovery_aggregations = single(
            &r,
            IntCounter::new(
                "aggregator_discovery_aggregation_count_total",
                "Times the aggregated discovery document was rebuilt because something changed.",
            )?,
        )?;
        let unavailable = gauge(
            &r,
            "aggregator_unavailable_apiservice",
            "1 when the APIService is not available, 0 when it is.",
            &["name"],
        )?;
        let unavailable_total = counter(
            &r,
            "aggregator_unavailable_apiservice_total",
            "Transitions of an APIService from available to not available, by reason.",
            &["name", "reason"],
        )?;
        let endpoint_healthy = gauge(
            &r,
            "apiagg_backend_endpoint_healthy",
            "1 when requests go to the endpoint, 0 while it is ejected.",
            &["apiservice", "endpoint"],
        )?;
        let proxy_requests = counter(
            &r,
            "apiagg_proxy_requests_total",
            "Requests proxied to remote APIServices, by group, version and status code.",
            &["group", "version", "code"],
        )?;
        let proxy_duration = histogram(
            &r,
            "apiagg_proxy_request_duration_seconds",
            "Duration of requests proxied to remote APIServices, from arrival to the end of the response.",
            &PROXY_BUCKETS,
            &["group", "version"],
        )?;
        let apiserver_requests = counter(
            &r,
            "apiserver_request_total",
            "Requests apiagg answered itself (discovery, OpenAPI, health), as kube-apiserver labels them.",
            &APISERVER_LABELS,
        )?;
        let apiserver_duration = histogram(
            &r,
            "apiserver_request_duration_seconds",
            "Latency of the requests apiagg answered itself, as kube-apiserver labels them.",
            &APISERVER_BUCKETS,
            &APISERVER_LABELS[..8],
        )?;
        let terminations = counter(
            &r,
            "apiserver_request_terminations_total",
            "Requests apiagg ended itself because the backend could not serve them.",
            &TERMINATION_LABELS,
        )?;
        let openapi_v2_regenerations = single(
            &r,
            IntCounter::new(
                "apiagg_openapi_v2_regenerations_total",
                "Times the merged OpenAPI v2 document was rebuilt because an input changed.",
            )?,
        )?;
        let openapi_v2_regeneration_duration = single(
            &r,
            Histogram::with_opts(
                HistogramOpts::new(
                    "apiagg_openapi_v2_regeneration_duration_seconds",
                    "Time to merge and compress the OpenAPI v2 document.",
                )
                .buckets(vec![
                    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                ]),
            )?,
        )?;
        let openapi_v3_index_regenerations = single(
            &r,
            IntCounter::new(
                "apiagg_openapi_v3_index_regenerations_total",
                "Times the OpenAPI v3 index changed (a document was added, removed or changed).",
            )?,
        )?;
        let openapi_download_failures = counter(
            &r,
            "apiagg_openapi_download_failures_total",
            "Failed OpenAPI downloads (the last good documents stay), by source.",
            &["source"],
        )?;
        let certificate_expiration = gauge(
            &r,
            "apiagg_certificate_expiration_timestamp_seconds",
            "Earliest notAfter (Unix seconds) among the certificates in use of each kind: serving, \
             client-ca, requestheader-ca, proxy-client, delegate-client, delegate-ca, backend-ca \
             (absent when none of that kind is configured).",
            &["certificate"],
        )?;
        let watch_list_streams = counter(
            &r,
            "apiagg_watch_list_streams_total",
            "Streaming lists (sendInitialEvents=true) to remote APIServices, by APIService and \
             mode: native (passed through to a backend that honours them) or emulated (apiagg \
             listed, sent the initial events and the annotated BOOKMARK, then watched).",
            &["apiservice", "mode"],
        )?;
        let watch_events = WatchEvents::register(&r)?;
        let metrics = Metrics {
            watch_events,
            registry: r,
            watch_list_streams,
            requests,
            duration,
            reloads,
            last_reload_ok,
            registered,
            in_flight,
            current_inflight,
            authorization_decisions,
            discovery_aggregations,
            unavailable,
            unavailable_total,
            endpoint_healthy,
            proxy_requests,
            proxy_duration,
            apiserver_requests,
            apiserver_duration,
            terminations,
            per_gv: DashMap::new(),
            by_kind: DashMap::with_hasher(FxBuildHasher),
            by_subresource: DashMap::with_hasher(FxBuildHasher),
            openapi_v2_regenerations,
            openapi_v2_regeneration_duration,
            openapi_v3_index_regenerations,
            openapi_download_failures,
            certificate_expiration,
            terminated_series: dashmap::DashSet::new(),
        };
        // The process's own series (process_open_fds, process_max_fds, memory, CPU), added as
        // any crate or module adds metrics of its own.
        #[cfg(target_os = "linux")]
        metrics.registry().register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))?;
        Ok(metrics)
    }
    /// Counts one authorization decision; labels outside the closed sets are not recorded.
    pub fn authorization_decision(&self, decision: &str, cache: &str) {
        if AUTHORIZATION_SERIES.contains(&(decision, cache)) {
            self.authorization_decisions
                .with_label_values(&[decision, cache])
                .inc();
        }
    }

    /// Text exposition of every metric.
    pub fn render(&self) -> Vec<u8> {
        let mut out = Vec::new();
        // Encoding into a Vec cannot fail for well-formed metric families.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_os = "linux")]
    #[test]
    fn process_metrics_are_exported() {
        let metrics = super::Metrics::new().expect("metrics");
        let text = String::from_utf8(metrics.render()).expect("utf-8");
        for name in [
            "process_open_fds ",
            "process_max_fds ",
            "process_start_time_seconds ",
        ] {
            assert!(text.contains(name), "{name} missing:\n{text}");
        }
    }
}
