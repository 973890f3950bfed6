//! The availability controller (spec §9, with DESIGN.md's improvements): probes every endpoint of
//! every remote Service continuously with TLS verified like the proxy, folds in the failures the
//! proxy path reports, and keeps each APIService's `Available` condition, the endpoint health the
//! request path reads, and the availability metrics.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use apiagg_config::{ApiServiceEntry, Backend};
use async_trait::async_trait;
use dashmap::DashMap;
use pingora_core::server::ShutdownWatch;
use pingora_core::services::background::BackgroundService;
use serde::Serialize;

use crate::fetch::BackendClient;
use crate::routes::{RouteTable, Upstream};
use crate::state::Gateway;

/// `Available` condition of one APIService.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Always `Available`.
    #[serde(rename = "type")]
    pub type_: &'static str,
    /// `True`, `False` or `Unknown`.
    pub status: &'static str,
    /// RFC 3339, changed only when `status` changes.
    pub last_transition_time: String,
    /// Upstream reason (`Local`, `Passed`, `ServiceNotFound`, `MissingEndpoints`,
    /// `FailedDiscoveryCheck`).
    pub reason: &'static str,
    /// Human message.
    pub message: String,
}

/// One endpoint as shown in the status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EndpointStatus {
    /// Endpoint URL.
    pub url: String,
    /// Whether requests go to it.
    pub healthy: bool,
    /// Last failure, when unhealthy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Status of one APIService.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApiServiceStatus {
    /// The `Available` condition.
    pub condition: Condition,
    /// `Local` or `namespace/name:port`.
    pub service: String,
    /// Endpoints and their health.
    pub endpoints: Vec<EndpointStatus>,
}

/// Every APIService's status, by name.
#[derive(Default)]
pub struct StatusBook {
    statuses: DashMap<String, ApiServiceStatus>,
}

impl StatusBook {
    /// A copy of one status.
    pub fn get(&self, name: &str) -> Option<ApiServiceStatus> {
        self.statuses.get(name).map(|s| s.clone())
    }

    /// Every status, sorted by name.
    pub fn all(&self) -> Vec<(String, ApiServiceStatus)> {
        let mut all: Vec<(String, ApiServiceStatus)> = self
            .statuses
            .iter()
            .map(|e| (e.key().clone(), e.value().clone()))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }
}

/// The status of every APIService as JSON (`/debug/apiagg/status`, `apiagg status`).
pub fn status_document(book: &StatusBook) -> bytes::Bytes {
    let items: Vec<serde_json::Value> = book
        .all()
        .into_iter()
        .map(|(name, status)| {
            serde_json::json!({
                "name": name,
                "service": status.service,
                "conditions": [status.condition],
                "endpoints": status.endpoints,
            })
        })
        .collect();
    bytes::Bytes::from(serde_json::json!({ "items": items }).to_string())
}

/// Probing settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeOptions {
    /// Time between two probes of an endpoint.
    pub interval: Duration,
    /// Timeout of one probe.
    pub timeout: Duration,
}

fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// What the checks decided for one APIService, before time stamps.
struct Verdict {
    status: &'static str,
    reason: &'static str,
    message: String,
}

fn verdict(entry: &ApiServiceEntry, upstream: Option<&Upstream>) -> Verdict {
    let Backend::Remote(remote) = &entry.backend else {
        return Verdict {
            status: "True",
            reason: "Local",
            message: "Local APIServices are always available".into(),
        };
    };
    let (name, ns) = (&remote.service, &remote.namespace);
    match (&remote.endpoints, upstream) {
        (None, _) => Verdict {
            status: "False",
            reason: "ServiceNotFound",
            message: format!("service/{name} in \"{ns}\" is not present"),
        },
        (Some(_), None) => Verdict {
            status: "False",
            reason: "MissingEndpoints",
            message: format!(
                "endpoints for service/{name} in \"{ns}\" have no addresses with port name \"\""
            ),
        },
        (Some(_), Some(up)) if up.available() => Verdict {
            status: "True",
            reason: "Passed",
            message: "all checks passed".into(),
        },
        (Some(_), Some(up)) => Verdict {
            status: "False",
            reason: "FailedDiscoveryCheck",
            message: up
                .endpoints
                .iter()
                .rev()
                .find_map(|e| e.health.last_error())
                .map_or_else(|| "all endpoints failed".to_string(), |e| (*e).clone()),
        },
    }
}

/// The probe path of an APIService (`/api/v1` for the core group).
fn probe_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    }
}

/// Keeps every APIService's availability current.
pub struct AvailabilityController {
    gateway: Arc<Gateway>,
    options: ProbeOptions,
}

impl AvailabilityController {
    /// A controller for `gateway`, probing as its options say.
    pub fn new(gateway: Arc<Gateway>) -> Self {
        let options = gateway.options.probes;
        AvailabilityController { gateway, options }
    }

    /// Probes every endpoint of every remote Service once, concurrently.
    /// With `spread`, the probes are spread over half an interval (periodic rounds); without,
    /// they all start at once (start-up and route changes, so new APIServices get their
    /// condition at once).
    async fn probe_all(
        &self,
        routes: &RouteTable,
        clients: &mut HashMap<u64, BackendClient>,
        spread: bool,
    ) {
        let mut seen: HashSet<u64> = HashSet::new();
        let mut probes = Vec::new();
        for (index, entry) in routes.registry.entries().iter().enumerate() {
            let Some(upstream) = routes.upstreams.get(index).cloned().flatten() else {
                continue;
            };
            for (i, endpoint) in upstream.endpoints.iter().enumerate() {
                let key = endpoint.peer.group_key;
                if !seen.insert(key) {
                    continue;
                }
                if let std::collections::hash_map::Entry::Vacant(slot) = clients.entry(key) {
                    match BackendClient::new(&upstream, i, self.options.timeout) {
                        Ok(c) => {
                            slot.insert(c);
                        }
                        Err(e) => {
                            endpoint.health.mark_failed(e);
                            continue;
                        }
                    }
                }
                probes.push((
                    key,
                    endpoint.health.clone(),
                    probe_path(&entry.group, &entry.version),
                    endpoint.url.clone(),
                ));
            }
        }
        clients.retain(|k, _| seen.contains(k));
        let clients = &*clients;
        let timeout = self.options.timeout;
        // Spread the probes over half an interval so many backends do not burst at once.
        let spread = if spread {
            self.options.interval / 2
        } else {
            Duration::ZERO
        };
        let count = probes.len().max(1) as u32;
        let changed = &self.gateway.health.changed;
        futures_util::future::join_all(probes.into_iter().enumerate().map(
            |(k, (key, health, path, url))| async move {
                tokio::time::sleep(spread * k as u32 / count).await;
                let outcome = match clients.get(&key) {
                    Some(client) => {
                        let attempt = client.probe(&path);
                        match tokio::time::timeout(timeout + Duration::from_millis(100), attempt).await {
                            Ok(Ok(code)) if (200..300).contains(&code) => Ok(()),
                            Ok(Ok(code)) => Err(format!(
                                "failing or missing response from {url}{path}: bad status from {url}{path}: {code}"
                            )),
                            Ok(Err(e)) => Err(format!("failing or missing response from {url}{path}: {e}")),
                            Err(_) => Err(format!("timed out waiting for {url}{path}")),
                        }
                    }
                    None => Err("no client".to_string()),
                };
                // A flip is published at once, not at the end of the round.
                let flipped = match outcome {
                    Ok(()) => health.mark_healthy(),
                    Err(e) => health.mark_failed(e),
                };
                if flipped {
                    changed.notify_one();
                }
            },
        ))
        .await;
        self.gateway
            .health
            .retain(&seen_with_delegate(routes, seen));
    }

    /// Recomputes every APIService's condition and the metrics; returns whether any condition
    /// status changed.
    fn evaluate(&self, routes: &RouteTable) -> bool {
        let book = &self.gateway.availability.statuses;
        let metrics = &self.gateway.metrics;
        let mut changed = false;
        let mut live: HashSet<String> = HashSet::new();
        for (index, entry) in routes.registry.entries().iter().enumerate() {
            live.insert(entry.name.clone());
            let upstream = routes.upstreams.get(index).and_then(|u| u.as_deref());
            let v = verdict(entry, upstream);
            let (service, endpoints) = match (&entry.backend, upstream) {
                (Backend::Local, _) => ("Local".to_string(), Vec::new()),
                (Backend::Remote(r), up) => (
                    format!("{}/{}:{}", r.namespace, r.service, r.port),
                    up.map(|u| {
                        u.endpoints
                            .iter()
                            .map(|e| EndpointStatus {
                                url: e.url.clone(),
                                healthy: e.health.is_healthy(),
                                error: e.health.last_error().map(|s| (*s).clone()),
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
                ),
            };
            let previous = book.get(&entry.name).map(|s| s.clone());
            if let Some(p) = &previous {
                let c = &p.condition;
                let same = c.status == v.status
                    && c.reason == v.reason
                    && c.message == v.message
                    && p.service == service
                    && p.endpoints == endpoints;
                if same {
                    // Nothing to write: the status and its series are current.
                    continue;
                }
            }
            let last_transition_time = match &previous {
                Some(p) if p.condition.status == v.status => {
                    p.condition.last_transition_time.clone()
                }
                _ => now_rfc3339(),
            };
            if previous.as_ref().map(|p| p.condition.status) != Some(v.status) {
                changed = true;
                tracing::info!(apiservice = %entry.name, status = v.status, reason = v.reason, "{}", v.message);
                if previous
                    .as_ref()
                    .is_some_and(|p| p.condition.status == "True")
                    && v.status != "True"
                {
                    metrics
                        .unavailable_total
                        .with_label_values(&[&entry.name, v.reason])
                        .inc();
                }
            }
            metrics
                .unavailable
                .with_label_values(&[&entry.name])
                .set(i64::from(v.status != "True"));
            for e in &endpoints {
                metrics
                    .endpoint_healthy
                    .with_label_values(&[&entry.name, &e.url])
                    .set(i64::from(e.healthy));
            }
            let status = ApiServiceStatus {
                condition: Condition {
                    type_: "Available",
                    status: v.status,
                    last_transition_time,
                    reason: v.reason,
                    message: v.message,
                },
                service,
                endpoints,
            };
            if let Some(before) = &previous {
                metrics.forget_endpoints(&entry.name, before, &status);
            }
            book.insert(entry.name.clone(), status);
        }
        // Deleted APIServices leave no status and no series behind.
        let gone: Vec<(String, ApiServiceStatus)> = book
            .iter()
            .filter(|e| !live.contains(e.key()))
            .map(|e| (e.key().clone(), e.value().clone()))
            .collect();
        for (name, status) in gone {
            book.remove(&name);
            metrics.forget_apiservice(&name, &status);
            changed = true;
        }
        changed
    }
}

fn seen_with_delegate(routes: &RouteTable, mut seen: HashSet<u64>) -> HashSet<u64> {
    if let Some(d) = &routes.delegate {
        seen.extend(d.endpoints.iter().map(|e| e.peer.group_key));
    }
    seen
}

#[async_trait]
impl BackgroundService for AvailabilityController {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut clients: HashMap<u64, BackendClient> = HashMap::new();
        let mut generation = self.gateway.routes_generation.subscribe();
        let mut tick = tokio::time::interval(self.options.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut first = true;
        loop {
            let spread = tokio::select! {
                _ = tick.tick() => !std::mem::take(&mut first),
                _ = generation.changed() => false,
                // A failure seen by the proxy: publish it now, probe again on the next tick.
                _ = self.gateway.health.changed.notified() => {
                    self.publish(&self.gateway.routes.load_full());
                    continue;
                }
                _ = shutdown.changed() => return,
            };
            let routes = self.gateway.routes.load_full();
            let round = self.probe_all(&routes, &mut clients, spread);
            tokio::pin!(round);
            // Health flips during the round (probes or proxied traffic) are published as they
            // happen.
            loop {
                tokio::select! {
                    _ = &mut round => break,
                    _ = self.gateway.health.changed.notified() => self.publish(&routes),
                    _ = shutdown.changed() => return,
                }
            }
            self.publish(&routes);
        }
    }
}

impl AvailabilityController {
    /// Re-evaluates every condition and tells discovery when something changed.
    fn publish(&self, routes: &RouteTable) {
        if self.evaluate(routes) {
            self.gateway
                .availability_generation
                .send_modify(|g| *g += 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_seconds() {
        let t = now_rfc3339();
        assert_eq!(t.len(), 20, "{t}");
        assert!(t.ends_with('Z') && t.as_bytes()[10] == b'T', "{t}");
    }

    #[test]
    fn probe_paths() {
        assert_eq!(probe_path("", "v1"), "/api/v1");
        assert_eq!(probe_path("a.io", "v1"), "/apis/a.io/v1");
    }
}
