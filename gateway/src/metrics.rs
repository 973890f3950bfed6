//! Prometheus metrics of the gateway (text exposition format on `/metrics`).

use std::sync::{Arc, Mutex};

use dashmap::DashMap;
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

use crate::availability::ApiServiceStatus;

/// Kind of route a request took; a label on the request metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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

/// Status codes whose per-backend counters are created up front (the hot path then needs no
/// label lookup for them).
const COMMON_CODES: [u16; 10] = [200, 201, 204, 304, 400, 401, 403, 404, 409, 503];

/// Request metrics of one remote group-version, resolved once per route table.
pub struct GroupVersionMetrics {
    group: String,
    version: String,
    duration: Histogram,
    common: Vec<IntCounter>,
    requests: IntCounterVec,
    /// Codes outside [`COMMON_CODES`] seen so far (to remove their series later).
    rare: Mutex<Vec<u16>>,
}

impl GroupVersionMetrics {
    /// The group label.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// The version label.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Records one proxied request.
    pub fn observe(&self, code: u16, seconds: f64) {
        self.duration.observe(seconds);
        match COMMON_CODES.iter().position(|c| *c == code) {
            Some(i) => self.common[i].inc(),
            None => {
                let code_text = code.to_string();
                self.requests
                    .with_label_values(&[&self.group, &self.version, &code_text])
                    .inc();
                let mut rare = self.rare.lock().unwrap_or_else(|e| e.into_inner());
                if !rare.contains(&code) {
                    rare.push(code);
                }
            }
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
    per_gv: DashMap<String, Arc<GroupVersionMetrics>>,
    /// Resolved series of `requests`/`duration`, so a request hashes two small keys instead of
    /// label strings.
    by_kind: DashMap<(RouteKind, u16), (IntCounter, Histogram)>,
    /// Resolved series of `apiserver_requests`/`apiserver_duration` (`subresource`, `code`).
    by_subresource: DashMap<(&'static str, u16), (IntCounter, Histogram)>,
    /// `apiagg_openapi_v2_regenerations_total`
    pub openapi_v2_regenerations: IntCounter,
    /// `apiagg_openapi_v2_regeneration_duration_seconds`
    pub openapi_v2_regeneration_duration: Histogram,
    /// `apiagg_openapi_v3_index_regenerations_total`
    pub openapi_v3_index_regenerations: IntCounter,
    /// `apiagg_openapi_download_failures_total{source}`
    pub openapi_download_failures: IntCounterVec,
    /// Label sets of `terminations` (`verb`, `group`, `version`, `code`), to drop them with
    /// their APIService.
    terminated_series: Mutex<Vec<[String; 4]>>,
}

const APISERVER_BUCKETS: [f64; 23] = [
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0,
    10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
];

const PROXY_BUCKETS: [f64; 16] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// Reasons an `aggregator_unavailable_apiservice_total` series can carry.
const REASONS: [&str; 5] = [
    "ServiceNotFound",
    "MissingEndpoints",
    "FailedDiscoveryCheck",
    "ServiceAccessError",
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

impl Metrics {
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
            &["verb", "dry_run", "group", "version", "resource", "subresource", "scope", "component", "code"],
        )?;
        let apiserver_duration = histogram(
            &r,
            "apiserver_request_duration_seconds",
            "Latency of the requests apiagg answered itself, as kube-apiserver labels them.",
            &APISERVER_BUCKETS,
            &[
                "verb",
                "dry_run",
                "group",
                "version",
                "resource",
                "subresource",
                "scope",
                "component",
            ],
        )?;
        let terminations = counter(
            &r,
            "apiserver_request_terminations_total",
            "Requests apiagg ended itself because the backend could not serve them.",
            &[
                "verb",
                "group",
                "version",
                "resource",
                "subresource",
                "scope",
                "component",
                "code",
            ],
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
        Ok(Metrics {
            registry: r,
            requests,
            duration,
            reloads,
            last_reload_ok,
            registered,
            in_flight,
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
            by_kind: DashMap::new(),
            by_subresource: DashMap::new(),
            openapi_v2_regenerations,
            openapi_v2_regeneration_duration,
            openapi_v3_index_regenerations,
            openapi_download_failures,
            terminated_series: Mutex::new(Vec::new()),
        })
    }

    /// Records one finished request.
    pub fn observe(&self, kind: RouteKind, code: u16, seconds: f64) {
        let series = self.by_kind.entry((kind, code)).or_insert_with(|| {
            let code = code.to_string();
            let labels = [kind.as_str(), code.as_str()];
            (
                self.requests.with_label_values(&labels),
                self.duration.with_label_values(&labels),
            )
        });
        series.0.inc();
        series.1.observe(seconds);
    }

    /// Records a request apiagg answered itself, labelled like kube-apiserver does (`component`
    /// is `apiserver` for `/apis`, empty otherwise).
    pub fn observe_apiserver(&self, subresource: &'static str, code: u16, seconds: f64) {
        let series = self
            .by_subresource
            .entry((subresource, code))
            .or_insert_with(|| {
                let component = if subresource == "apis" {
                    "apiserver"
                } else {
                    ""
                };
                let code = code.to_string();
                (
                    self.apiserver_requests.with_label_values(&[
                        "GET",
                        "",
                        "",
                        "",
                        "",
                        subresource,
                        "",
                        component,
                        &code,
                    ]),
                    self.apiserver_duration.with_label_values(&[
                        "GET",
                        "",
                        "",
                        "",
                        "",
                        subresource,
                        "",
                        component,
                    ]),
                )
            });
        series.0.inc();
        series.1.observe(seconds);
    }

    /// Records a request apiagg ended because its backend could not serve it.
    pub fn terminated(&self, verb: &str, group: &str, version: &str, code: u16) {
        let code = code.to_string();
        self.terminations
            .with_label_values(&[verb, group, version, "", "", "", "aggregator", &code])
            .inc();
        let series = [
            verb.to_string(),
            group.to_string(),
            version.to_string(),
            code,
        ];
        let mut known = self
            .terminated_series
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if !known.contains(&series) {
            known.push(series);
        }
    }

    /// The per-backend request metrics of a group-version (created on first use).
    pub fn group_version(&self, group: &str, version: &str) -> Arc<GroupVersionMetrics> {
        let key = format!("{group}/{version}");
        self.per_gv
            .entry(key)
            .or_insert_with(|| {
                let common = COMMON_CODES
                    .iter()
                    .map(|c| {
                        self.proxy_requests
                            .with_label_values(&[group, version, &c.to_string()])
                    })
                    .collect();
                Arc::new(GroupVersionMetrics {
                    group: group.to_string(),
                    version: version.to_string(),
                    duration: self.proxy_duration.with_label_values(&[group, version]),
                    common,
                    requests: self.proxy_requests.clone(),
                    rare: Mutex::new(Vec::new()),
                })
            })
            .clone()
    }

    /// Drops the per-backend series of group-versions no APIService serves any more.
    pub fn retain_group_versions(&self, live: &std::collections::HashSet<String>) {
        let mut known = self
            .terminated_series
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        known.retain(|[verb, group, version, code]| {
            let keep = live.contains(&format!("{group}/{version}"));
            if !keep {
                let labels = [
                    verb.as_str(),
                    group,
                    version,
                    "",
                    "",
                    "",
                    "aggregator",
                    code,
                ];
                let _ = self.terminations.remove_label_values(&labels);
            }
            keep
        });
        drop(known);
        let gone: Vec<Arc<GroupVersionMetrics>> = self
            .per_gv
            .iter()
            .filter(|e| !live.contains(e.key()))
            .map(|e| e.value().clone())
            .collect();
        for m in gone {
            self.per_gv.remove(&format!("{}/{}", m.group, m.version));
            let (g, v) = (m.group.as_str(), m.version.as_str());
            let _ = self.proxy_duration.remove_label_values(&[g, v]);
            let rare = m.rare.lock().map(|r| r.clone()).unwrap_or_default();
            for code in COMMON_CODES.iter().chain(rare.iter()) {
                let _ = self
                    .proxy_requests
                    .remove_label_values(&[g, v, &code.to_string()]);
            }
        }
    }

    /// Drops every availability series of a deleted APIService.
    pub fn forget_apiservice(&self, name: &str, status: &ApiServiceStatus) {
        let _ = self.unavailable.remove_label_values(&[name]);
        for reason in REASONS {
            let _ = self.unavailable_total.remove_label_values(&[name, reason]);
        }
        for e in &status.endpoints {
            let _ = self.endpoint_healthy.remove_label_values(&[name, &e.url]);
        }
    }

    /// Drops the endpoint series of endpoints an APIService no longer has.
    pub fn forget_endpoints(
        &self,
        name: &str,
        before: &ApiServiceStatus,
        after: &ApiServiceStatus,
    ) {
        for e in &before.endpoints {
            if !after.endpoints.iter().any(|n| n.url == e.url) {
                let _ = self.endpoint_healthy.remove_label_values(&[name, &e.url]);
            }
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
