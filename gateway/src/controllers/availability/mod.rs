//! The availability controller (spec §9, with DESIGN.md's improvements): probes every endpoint of
//! every remote APIService on its own path, continuously, with TLS verified like the proxy
//! (ejecting after repeated slow or failed probes, at once on a refused connection), folds in the
//! failures the
//! proxy path reports, and keeps each APIService's `Available` condition, the endpoint health the
//! request path reads, and the availability metrics.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use apiagg_config::Backend;
use apiagg_strategy::{self as strategy, managed_fields};
use async_trait::async_trait;
use pingora_core::server::ShutdownWatch;
use pingora_core::services::background::BackgroundService;

mod checks;

use self::checks::{probe, verdict};
use super::targets::group_version_path;
use crate::backends::{Clients, HealthBook, RouteTable};
use crate::observe::Metrics;
use crate::state::{ApiServiceStatus, Condition, EndpointStatus, ProbeOptions, Routes, StatusBook};
use crate::store::{self, Store};

fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// The field manager of the `Available` conditions apiagg writes (kube-apiserver's name).
const STATUS_MANAGER: &str = "kube-apiserver";

/// Where the delegate's endpoints are probed (open to anyone on kube-apiserver).
const DELEGATE_PROBE: &str = "/readyz";

/// What the availability controller works with.
pub struct Handles {
    /// The routes whose endpoints it probes.
    pub routes: Routes,
    /// Endpoint health, which it writes.
    pub health: Arc<HealthBook>,
    /// The probes' clients.
    pub clients: Arc<Clients>,
    /// The APIServices' conditions, which it writes.
    pub book: Arc<StatusBook>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Stored APIServices, whose status it writes.
    pub store: Arc<dyn Store>,
    /// Probe interval, timeout and threshold.
    pub options: ProbeOptions,
}

/// Keeps every APIService's availability current.
pub struct AvailabilityController {
    routes: Routes,
    health: Arc<HealthBook>,
    clients: Arc<Clients>,
    book: Arc<StatusBook>,
    metrics: Arc<Metrics>,
    store: Arc<dyn Store>,
    options: ProbeOptions,
}

impl AvailabilityController {
    /// A controller probing the endpoints of `gateway`'s routes as its options say.
    pub fn new(handles: Handles) -> Self {
        let Handles {
            routes,
            health,
            clients,
            book,
            metrics,
            store,
            options,
        } = handles;
        AvailabilityController {
            routes,
            health,
            clients,
            book,
            metrics,
            store,
            options,
        }
    }

    /// Probes every endpoint of every remote APIService once, on that APIService's own path,
    /// concurrently.
    /// With `spread`, the probes are spread over half an interval (periodic rounds); without,
    /// they all start at once (start-up and route changes, so new APIServices get their
    /// condition at once).
    async fn probe_all(&self, routes: &RouteTable, spread: bool) {
        let mut seen: HashSet<u64> = HashSet::new();
        let mut probes = Vec::new();
        for (index, entry) in routes.registry.entries().iter().enumerate() {
            let Some(upstream) = routes.upstreams.get(index).cloned().flatten() else {
                continue;
            };
            for (i, endpoint) in upstream.endpoints.iter().enumerate() {
                if !seen.insert(endpoint.health_key) {
                    continue;
                }
                match self.clients.endpoint(&upstream, i) {
                    Ok(client) => probes.push((
                        client,
                        endpoint.health.clone(),
                        group_version_path(&entry.group, &entry.version),
                        endpoint.url.clone(),
                    )),
                    Err(e) => {
                        endpoint.health.mark_failed(e.to_string());
                    }
                }
            }
        }
        // The delegate's endpoints (an HA control plane) are probed on `/readyz`.
        if let Some(delegate) = &routes.delegate {
            for (i, endpoint) in delegate.endpoints.iter().enumerate() {
                if let Ok(client) = self.clients.endpoint(delegate, i) {
                    probes.push((
                        client,
                        endpoint.health.clone(),
                        DELEGATE_PROBE.to_string(),
                        endpoint.url.clone(),
                    ));
                }
            }
        }
        // Spread the probes over half an interval so many backends do not burst at once.
        let spread = if spread {
            self.options.interval / 2
        } else {
            Duration::ZERO
        };
        let count = probes.len().max(1) as u32;
        let timeout = self.options.timeout;
        let threshold = self.options.failure_threshold;
        let changed = &self.health.changed;
        futures_util::future::join_all(probes.into_iter().enumerate().map(
            |(k, (client, health, path, url))| async move {
                tokio::time::sleep(spread * k as u32 / count).await;
                let failure = probe(&client, &url, &path, timeout).await;
                // A flip is published at once, not at the end of the round.
                let flipped = match failure {
                    None => health.mark_healthy(),
                    Some(f) if f.ours => false,
                    Some(f) if f.definitive => health.mark_failed(f.message),
                    Some(f) => health.probe_failed(f.message, threshold),
                };
                if flipped {
                    changed.notify_one();
                }
            },
        ))
        .await;
        self.health.retain(&routes.health_keys());
        let names = routes.registry.entries().iter().map(|e| e.name.as_str());
        self.health
            .retain_apiservices(&names.chain(["delegate"]).collect());
    }

    /// Recomputes every APIService's condition and the metrics; returns whether any condition
    /// status changed.
    fn evaluate(&self, routes: &RouteTable) -> bool {
        let book = &self.book;
        let metrics = &self.metrics;
        let mut changed = false;
        let mut live: HashSet<String> = HashSet::new();
        for (index, entry) in routes.registry.entries().iter().enumerate() {
            live.insert(entry.name.clone());
            let upstream = routes.upstreams.get(index).and_then(|u| u.as_deref());
            let v = verdict(entry, upstream, routes.broken.get(&index));
            let (service, endpoints) = match (&entry.backend, upstream) {
                (Backend::Delegate, _) => ("Local".to_string(), Vec::new()),
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
            let previous = book.get(&entry.name);
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
                if v.reason == "Local" {
                    tracing::debug!(apiservice = %entry.name, "{}", v.message);
                } else {
                    tracing::info!(apiservice = %entry.name, status = v.status, reason = v.reason, "{}", v.message);
                }
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
                for gone in before
                    .endpoints
                    .iter()
                    .filter(|b| !status.endpoints.iter().any(|a| a.url == b.url))
                {
                    metrics.forget_endpoint(&entry.name, &gone.url);
                }
            }
            book.insert(entry.name.clone(), status);
        }
        // Deleted APIServices leave no status and no series behind.
        for (name, status) in book.retain(|name| live.contains(name)) {
            metrics.forget_apiservice(&name, status.endpoints.iter().map(|e| e.url.as_str()));
            changed = true;
        }
        changed
    }
}

#[async_trait]
impl BackgroundService for AvailabilityController {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut generation = self.routes.subscribe();
        let mut tick = tokio::time::interval(self.options.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut first = true;
        loop {
            let spread = tokio::select! {
                _ = tick.tick() => !std::mem::take(&mut first),
                _ = generation.changed() => false,
                // A failure seen by the proxy: publish it now, probe again on the next tick.
                _ = self.health.changed.notified() => {
                    self.publish(&self.routes.load());
                    continue;
                }
                _ = shutdown.changed() => return,
            };
            let routes = self.routes.load();
            let round = self.probe_all(&routes, spread);
            tokio::pin!(round);
            // Health flips during the round (probes or proxied traffic) are published as they
            // happen.
            loop {
                tokio::select! {
                    _ = &mut round => break,
                    _ = self.health.changed.notified() => self.publish(&routes),
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
            self.book.announce();
        }
        self.write_status(routes);
    }

    /// Writes the `Available` condition of APIServices registered through the API into the
    /// store when it differs from the stored one (so `kubectl get` and watches see it); one an
    /// owner displaces is `False` with the owner's reason. The writes run on their own; one that
    /// loses to a concurrent write is redone next round.
    fn write_status(&self, routes: &RouteTable) {
        let (stored, _) = self.store.list();
        let now = now_rfc3339();
        let mut writes = Vec::new();
        for object in stored {
            let name = object["metadata"]["name"]
                .as_str()
                .unwrap_or("")
                .to_string();
            let current = &object["status"]["conditions"][0];
            let condition = match routes.displaced.iter().find(|d| d.name == name) {
                Some(d) => Condition {
                    type_: "Available",
                    status: "False",
                    last_transition_time: match current["status"].as_str() {
                        Some("False") => current["lastTransitionTime"]
                            .as_str()
                            .unwrap_or(&now)
                            .to_string(),
                        _ => now.clone(),
                    },
                    reason: d.reason,
                    message: d.message.clone(),
                },
                None => match self.book.get(&name) {
                    Some(status) => status.condition,
                    None => continue,
                },
            };
            let c = &condition;
            if current["status"] == c.status
                && current["reason"] == c.reason
                && current["message"] == c.message.as_str()
            {
                continue;
            }
            let body = serde_json::json!({"status": {"conditions": [c]}});
            if let Ok(mut next) = strategy::prepare_status_update(&object, &body) {
                // Recorded as kube-apiserver's own status writes are.
                let writer = managed_fields::Writer {
                    manager: STATUS_MANAGER,
                    subresource: managed_fields::Subresource::Status,
                    now: &now,
                };
                managed_fields::update(Some(&object), &mut next, None, &writer);
                writes.push((name, next, store::revision_of(&object)));
            }
        }
        if writes.is_empty() {
            return;
        }
        let store = self.store.clone();
        tokio::spawn(async move {
            for (name, next, expected) in writes {
                if let Err(e) = store.update(&name, next, Some(expected)).await {
                    tracing::debug!(apiservice = %name, "status not written: {e}");
                }
            }
        });
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
}
