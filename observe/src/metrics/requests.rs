//! Per-request series: the route kind of every request, the per-backend series of remote
//! group-versions, and the kube-apiserver-shaped series of what apiagg answers itself. Series are
//! resolved once and cached, so a request hashes a small key instead of label strings.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use prometheus::{Histogram, IntCounter, IntCounterVec};

use super::Metrics;

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
    /// Answers apiagg gives itself (`/version`, discovery, OpenAPI, the APIService API). Not
    /// "local", which names APIServices the delegate serves, as in kube-aggregator.
    Own,
    /// Nothing matched.
    NotFound,
    /// Refused during shutdown.
    Shutdown,
    /// Refused by authentication (401) or the request policy (403).
    Refused,
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
            RouteKind::Own => "own",
            RouteKind::NotFound => "notfound",
            RouteKind::Shutdown => "shutdown",
            RouteKind::Refused => "refused",
        }
    }
}

/// A metric label for an HTTP method: the standard methods as they are, anything else `other`
/// (a closed set, as kube-apiserver's verb label).
pub fn standard_method(method: &str) -> &'static str {
    match method {
        "GET" => "GET",
        "HEAD" => "HEAD",
        "POST" => "POST",
        "PUT" => "PUT",
        "PATCH" => "PATCH",
        "DELETE" => "DELETE",
        "OPTIONS" => "OPTIONS",
        "CONNECT" => "CONNECT",
        _ => "other",
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

impl Metrics {
    /// Records one finished request.
    pub fn observe(&self, kind: RouteKind, code: u16, seconds: f64) {
        // A read lock on one shard for a known series; the write lock only once per series.
        if let Some(series) = self.by_kind.get(&(kind, code)) {
            series.0.inc();
            series.1.observe(seconds);
            return;
        }
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
        if let Some(series) = self.by_subresource.get(&(subresource, code)) {
            series.0.inc();
            series.1.observe(seconds);
            return;
        }
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
                // verb, dry_run, group, version, resource, subresource, scope, component, code
                let labels = ["GET", "", "", "", "", subresource, "", component, &code];
                (
                    self.apiserver_requests.with_label_values(&labels),
                    self.apiserver_duration.with_label_values(&labels[..8]),
                )
            });
        series.0.inc();
        series.1.observe(seconds);
    }

    /// Records a request apiagg ended because its backend could not serve it.
    /// The verb label is the HTTP method when it is a standard one, `other` otherwise, so a
    /// client cannot grow the series.
    pub fn terminated(&self, method: &str, group: &str, version: &str, code: u16) {
        let verb = standard_method(method);
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
        if !self.terminated_series.contains(&series) {
            self.terminated_series.insert(series);
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
    pub fn retain_group_versions(&self, live: &HashSet<String>) {
        self.terminated_series
            .retain(|[verb, group, version, code]| {
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
}
