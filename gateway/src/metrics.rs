//! Prometheus metrics of the gateway (text exposition format on `/metrics`).

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts,
    Registry, TextEncoder,
};

/// Kind of route a request took; a label on the request metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteKind {
    /// Proxied to a remote APIService.
    Proxy,
    /// HTTP/1.1 upgrade tunnelled to a remote APIService.
    Upgrade,
    /// Passed to the delegate.
    Delegate,
    /// Health endpoints.
    Health,
    /// `/metrics`.
    Metrics,
    /// Documents apiagg serves itself (`/version`, discovery).
    Local,
    /// Nothing matched.
    NotFound,
    /// Refused during shutdown.
    Shutdown,
}

impl RouteKind {
    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            RouteKind::Proxy => "proxy",
            RouteKind::Upgrade => "upgrade",
            RouteKind::Delegate => "delegate",
            RouteKind::Health => "health",
            RouteKind::Metrics => "metrics",
            RouteKind::Local => "local",
            RouteKind::NotFound => "notfound",
            RouteKind::Shutdown => "shutdown",
        }
    }
}

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
    /// `aggregator_discovery_aggregation_count_total`
    pub discovery_aggregations: IntCounter,
    /// `apiagg_openapi_v2_regenerations_total`
    pub openapi_v2_regenerations: IntCounter,
    /// `apiagg_openapi_v2_regeneration_duration_seconds`
    pub openapi_v2_regeneration_duration: Histogram,
    /// `apiagg_openapi_v3_index_regenerations_total`
    pub openapi_v3_index_regenerations: IntCounter,
    /// `apiagg_openapi_download_failures_total{source}`
    pub openapi_download_failures: IntCounterVec,
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Result<Metrics, prometheus::Error> {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new(
                "apiagg_requests_total",
                "Requests answered by apiagg, by route kind and HTTP status code.",
            ),
            &["kind", "code"],
        )?;
        let duration = HistogramVec::new(
            HistogramOpts::new(
                "apiagg_request_duration_seconds",
                "Time from request arrival to the end of the response, by route kind and code.",
            )
            .buckets(vec![
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0, 30.0, 60.0,
            ]),
            &["kind", "code"],
        )?;
        let reloads = IntCounterVec::new(
            Opts::new(
                "apiagg_config_reloads_total",
                "Config reload attempts, by result (success or failure).",
            ),
            &["result"],
        )?;
        let last_reload_ok = IntGauge::new(
            "apiagg_config_last_reload_successful",
            "1 when the last config reload attempt succeeded, 0 when it was rejected.",
        )?;
        let registered = IntGauge::new(
            "apiagg_registered_apiservices",
            "APIServices in the serving registry (config and delegate).",
        )?;
        let in_flight = IntGauge::new(
            "apiagg_requests_in_flight",
            "Requests being served right now.",
        )?;
        let discovery_aggregations = IntCounter::new(
            "aggregator_discovery_aggregation_count_total",
            "Times the aggregated discovery document was rebuilt because something changed.",
        )?;
        let openapi_v2_regenerations = IntCounter::new(
            "apiagg_openapi_v2_regenerations_total",
            "Times the merged OpenAPI v2 document was rebuilt because an input changed.",
        )?;
        let openapi_v2_regeneration_duration = Histogram::with_opts(
            HistogramOpts::new(
                "apiagg_openapi_v2_regeneration_duration_seconds",
                "Time to merge and compress the OpenAPI v2 document.",
            )
            .buckets(vec![
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            ]),
        )?;
        let openapi_v3_index_regenerations = IntCounter::new(
            "apiagg_openapi_v3_index_regenerations_total",
            "Times the OpenAPI v3 index changed (a document was added, removed or changed).",
        )?;
        let openapi_download_failures = IntCounterVec::new(
            Opts::new(
                "apiagg_openapi_download_failures_total",
                "Failed OpenAPI downloads (the last good documents stay), by source.",
            ),
            &["source"],
        )?;
        registry.register(Box::new(openapi_v2_regenerations.clone()))?;
        registry.register(Box::new(openapi_v2_regeneration_duration.clone()))?;
        registry.register(Box::new(openapi_v3_index_regenerations.clone()))?;
        registry.register(Box::new(openapi_download_failures.clone()))?;
        registry.register(Box::new(discovery_aggregations.clone()))?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(duration.clone()))?;
        registry.register(Box::new(reloads.clone()))?;
        registry.register(Box::new(last_reload_ok.clone()))?;
        registry.register(Box::new(registered.clone()))?;
        registry.register(Box::new(in_flight.clone()))?;
        Ok(Metrics {
            registry,
            requests,
            duration,
            reloads,
            last_reload_ok,
            registered,
            in_flight,
            discovery_aggregations,
            openapi_v2_regenerations,
            openapi_v2_regeneration_duration,
            openapi_v3_index_regenerations,
            openapi_download_failures,
        })
    }

    /// Records one finished request.
    pub fn observe(&self, kind: RouteKind, code: u16, seconds: f64) {
        let code = code.to_string();
        let labels = [kind.as_str(), code.as_str()];
        self.requests.with_label_values(&labels).inc();
        self.duration.with_label_values(&labels).observe(seconds);
    }

    /// Text exposition of every metric.
    pub fn render(&self) -> Vec<u8> {
        let mut out = Vec::new();
        // Encoding into a Vec cannot fail for well-formed metric families.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        out
    }
}
