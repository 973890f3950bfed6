//! The availability controller (kube-aggregator's
//! `pkg/controllers/status/remote/remote_available_controller.go`, with the improvements listed
//! in `docs/differences-from-kube-aggregator.md`): probes every endpoint of every remote
//! APIService on its own path, continuously, with TLS verified like the proxy (ejecting after
//! repeated slow or failed probes, at once on a refused connection), folds in the failures the
//! proxy path reports, and keeps each APIService's `Available` condition, the endpoint health the
//! request path reads, and the availability metrics.
//!
//! The loop only schedules probes and publications. A publication reads the route table and the
//! endpoint health as plain data, asks the pure steps what to set ([`conditions::evaluate`]) and
//! what to write to the store ([`status_writes::status_writes`]), then applies that.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora_core::server::ShutdownWatch;
use pingora_core::services::background::BackgroundService;
use tokio::sync::{mpsc, Notify};

mod conditions;
mod probe;
mod status_writes;
#[cfg(test)]
mod tests;

use self::conditions::{evaluate, Evaluation, Observed};
use self::probe::probe;
use self::status_writes::{status_writes, StatusWrite};
use super::targets::group_version_path;
use crate::backends::{Clients, EndpointHealth, Failure, HealthBook, RouteTable, Upstream};
use crate::state::{EndpointStatus, ProbeOptions, Publisher, Routes, Statuses};
use apiagg_observe::Metrics;
use apiagg_store::Store;

/// Now, as condition and managed-field time stamps write it.
fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

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
    pub book: Publisher<Arc<Statuses>>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Stored APIServices, whose status it writes.
    pub store: Arc<dyn Store>,
    /// Probe interval, timeout and threshold.
    pub options: ProbeOptions,
}

/// Keeps every APIService's availability current.
pub struct AvailabilityController {
    /// What it works with.
    handles: Handles,
    /// Signalled when a probe flips an endpoint.
    flipped: Notify,
}

/// One probe of an endpoint as the controller probes it (`apiagg check --apiservice`): `None`
/// when it answered 2xx, else the message its APIService's `Available` condition would carry.
pub async fn probe_endpoint(
    client: &crate::backends::Client,
    url: &str,
    path: &str,
    timeout: std::time::Duration,
) -> Option<String> {
    let failure = probe(client, url, path, timeout).await?;
    Some(match failure.ours {
        true => "apiagg ran out of connections or files before it could ask".to_string(),
        false => failure.message,
    })
}

impl AvailabilityController {
    /// A controller probing the endpoints of `gateway`'s routes as its options say.
    pub fn new(handles: Handles) -> Self {
        AvailabilityController {
            handles,
            flipped: Notify::new(),
        }
    }

    /// Probes the endpoints `round` names of every remote APIService once, on that APIService's
    /// own path, and the delegate's, concurrently. A periodic round spreads its probes over half
    /// an interval; the others start them all at once (start-up and route changes, so new
    /// APIServices get their condition at once; rechecks of endpoints just ejected).
    async fn probe_all(&self, routes: &RouteTable, round: Round) {
        let mut seen: HashSet<u64> = HashSet::new();
        let mut probes = Vec::new();
        let wanted = |health: &EndpointHealth| round != Round::Recheck || recheck(health);
        for (index, entry) in routes.registry.entries().iter().enumerate() {
            let Some(upstream) = routes.upstreams.get(index).cloned().flatten() else {
                continue;
            };
            for (i, endpoint) in upstream.endpoints.iter().enumerate() {
                if !wanted(&endpoint.health) || !seen.insert(endpoint.health_key) {
                    continue;
                }
                match self.handles.clients.endpoint(&upstream, i) {
                    Ok(client) => probes.push((
                        client,
                        (upstream.clone(), i),
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
                if !wanted(&endpoint.health) {
                    continue;
                }
                if let Ok(client) = self.handles.clients.endpoint(delegate, i) {
                    probes.push((
                        client,
                        (delegate.clone(), i),
                        DELEGATE_PROBE.to_string(),
                        endpoint.url.clone(),
                    ));
                }
            }
        }
        // Spread the probes over half an interval so many backends do not burst at once.
        let spread = if round == Round::Periodic {
            self.handles.options.interval / 2
        } else {
            Duration::ZERO
        };
        let count = probes.len().max(1) as u32;
        let timeout = self.handles.options.timeout;
        let threshold = self.handles.options.failure_threshold;
        let changed = &self.flipped;
        let clients = &self.handles.clients;
        futures_util::future::join_all(probes.into_iter().enumerate().map(
            |(k, (client, (upstream, i), path, url))| async move {
                tokio::time::sleep(spread * k as u32 / count).await;
                let failure = probe(&client, &url, &path, timeout).await;
                let endpoint = &upstream.endpoints[i];
                let health = &endpoint.health;
                // A flip is published at once, not at the end of the round.
                let flipped = match failure {
                    None => health.mark_healthy(),
                    Some(f) if f.ours => false,
                    // Counted as a failed probe too (what ends the rechecks).
                    Some(f) if f.definitive => health.probe_failed(f.message, 1),
                    Some(f) => health.probe_failed(f.message, threshold),
                };
                if flipped {
                    if health.last_error().is_some() {
                        // Failed: the connections kept to it go (kubernetes#137157); the next
                        // request or probe connects afresh.
                        endpoint.idle.clear();
                        endpoint.own_idle.clear();
                        clients.forget(&upstream, i);
                    }
                    changed.notify_one();
                }
            },
        ))
        .await;
        self.handles.health.retain(&routes.health_keys());
        let names = routes.registry.entries().iter().map(|e| e.name.as_str());
        self.handles
            .health
            .retain_apiservices(&names.chain(["delegate"]).collect());
    }
}

#[async_trait]
impl BackgroundService for AvailabilityController {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut generation = self.handles.routes.subscribe();
        let mut tick = tokio::time::interval(self.handles.options.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut rechecks = tokio::time::interval(recheck_interval(self.handles.options.interval));
        rechecks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut first = true;
        let Some(mut reported) = self.handles.health.take_reports() else {
            tracing::error!("the endpoint failures are read by another availability controller");
            return;
        };
        loop {
            let round = tokio::select! {
                _ = tick.tick() => match std::mem::take(&mut first) {
                    true => Round::All,
                    false => Round::Periodic,
                },
                _ = generation.changed() => Round::All,
                _ = rechecks.tick() => {
                    if !any_recheck(&self.handles.routes.load()) {
                        continue;
                    }
                    Round::Recheck
                }
                // A failure seen by the proxy: publish it now, probe again on the next tick.
                Some(failure) = reported.recv() => {
                    if eject(failure, &mut reported) {
                        self.publish(&self.handles.routes.load());
                    }
                    continue;
                }
                _ = shutdown.changed() => return,
            };
            let routes = self.handles.routes.load();
            let round = self.probe_all(&routes, round);
            tokio::pin!(round);
            // Health flips during the round (probes or proxied traffic) are published as they
            // happen.
            loop {
                tokio::select! {
                    _ = &mut round => break,
                    _ = self.flipped.notified() => self.publish(&routes),
                    Some(failure) = reported.recv() => {
                        if eject(failure, &mut reported) {
                            self.publish(&routes);
                        }
                    }
                    _ = shutdown.changed() => return,
                }
            }
            self.publish(&routes);
        }
    }
}

/// Which endpoints a round probes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Round {
    /// Every endpoint, spread over half an interval.
    Periodic,
    /// Every endpoint at once (start-up, route changes).
    All,
    /// Only endpoints ejected a short while ago, at once: a backend that restarts serves again
    /// within a fraction of the interval (kube-aggregator re-checks a failing APIService with a
    /// fast, growing backoff too).
    Recheck,
}

/// Probes failed in a row up to which an ejected endpoint is rechecked between rounds: with
/// the default 500 ms interval, rechecks every 100 ms for about the first three seconds of an
/// outage; then only the periodic rounds probe it.
const RECHECKS: u32 = 30;

/// Time between two rechecks: a fifth of the interval, at least 50 ms.
fn recheck_interval(interval: Duration) -> Duration {
    (interval / 5).max(Duration::from_millis(50))
}

/// Whether an endpoint is rechecked between rounds.
fn recheck(health: &EndpointHealth) -> bool {
    !health.is_healthy() && health.failed_probes() < RECHECKS
}

/// Whether any endpoint of `routes` is to be rechecked.
fn any_recheck(routes: &RouteTable) -> bool {
    let remote = routes.upstreams.iter().flatten();
    remote
        .chain(routes.delegate.iter())
        .flat_map(|u| u.endpoints.iter())
        .any(|e| recheck(&e.health))
}

/// Ejects the endpoint of `failure` and of every other failure already reported; whether some
/// endpoint flipped.
fn eject(failure: Failure, reported: &mut mpsc::Receiver<Failure>) -> bool {
    let mut flipped = false;
    let mut next = Some(failure);
    while let Some(failure) = next {
        if failure.health.mark_failed(failure.message.clone()) {
            let message = &failure.message;
            tracing::warn!(backend = %failure.backend, endpoint = %failure.url, "endpoint ejected: {message}");
            flipped = true;
        }
        next = reported.try_recv().ok();
    }
    flipped
}

/// The route table's APIServices with their endpoints' health as it is now.
fn observe(routes: &RouteTable) -> Vec<Observed<'_>> {
    let health = |upstream: &Upstream| {
        upstream
            .endpoints
            .iter()
            .map(|e| EndpointStatus {
                url: e.url.clone(),
                healthy: e.health.is_healthy(),
                error: e.health.last_error().map(|s| (*s).clone()),
            })
            .collect()
    };
    let entries = routes.registry.entries().iter().enumerate();
    entries
        .map(|(index, entry)| {
            let upstream = routes.upstreams.get(index).and_then(|u| u.as_deref());
            Observed {
                entry,
                endpoints: upstream.map(health),
                broken: routes.broken.get(&index).map(String::as_str),
                probed: upstream
                    .is_some_and(|u| u.endpoints.iter().any(|e| e.health.passed_probe())),
            }
        })
        .collect()
}

impl AvailabilityController {
    /// Re-evaluates every condition, applies what changed and tells discovery when some
    /// availability changed; then brings the stored APIServices' conditions up to date.
    fn publish(&self, routes: &RouteTable) {
        let now = now_rfc3339();
        let current = self.handles.book.current();
        let evaluation = evaluate(&observe(routes), &current.by_name, &now);
        if let Some(next) = self.apply(evaluation, &current) {
            self.handles.book.publish(Arc::new(next));
        }
        let (stored, _) = self.handles.store.list();
        let statuses = self.handles.book.current();
        let condition_of = |name: &str| statuses.get(name).map(|s| s.condition.clone());
        let writes = status_writes(&stored, &routes.displaced, condition_of, &now);
        self.write_status(writes);
    }

    /// The statuses after `evaluation` (`None` when nothing changed); logs the flips and keeps
    /// the metrics.
    fn apply(&self, evaluation: Evaluation, current: &Statuses) -> Option<Statuses> {
        if evaluation.updates.is_empty() && evaluation.removed.is_empty() {
            return None;
        }
        let mut next = current.clone();
        if evaluation.changed() {
            next.flips += 1;
        }
        let metrics = &self.handles.metrics;
        for update in evaluation.updates {
            let (name, c) = (&update.name, &update.status.condition);
            // Once per change of the condition, with the condition's own message.
            if update.told && c.reason == "Local" {
                tracing::debug!(apiservice = %name, "{}", c.message);
            } else if update.told {
                tracing::info!(apiservice = %name, status = c.status, reason = c.reason, "{}", c.message);
            }
            if update.lost {
                metrics.unavailable_transition(name, c.reason);
            }
            metrics
                .unavailable
                .with_label_values(&[name])
                .set(i64::from(c.status != "True"));
            for e in &update.status.endpoints {
                metrics
                    .endpoint_healthy
                    .with_label_values(&[name, &e.url])
                    .set(i64::from(e.healthy));
            }
            for url in &update.gone_endpoints {
                metrics.forget_endpoint(name, url);
            }
            next.by_name.insert(update.name, update.status);
        }
        for (name, status) in &evaluation.removed {
            next.by_name.remove(name);
            metrics.forget_apiservice(name, status.endpoints.iter().map(|e| e.url.as_str()));
        }
        Some(next)
    }

    /// Makes the status writes on their own (so `kubectl get` and watches see the conditions);
    /// one that loses to a concurrent write is redone next round.
    fn write_status(&self, writes: Vec<StatusWrite>) {
        if writes.is_empty() {
            return;
        }
        let store = self.handles.store.clone();
        tokio::spawn(async move {
            for write in writes {
                let StatusWrite {
                    name,
                    object,
                    expected,
                } = write;
                if let Err(e) = store.update(&name, object, Some(expected)).await {
                    tracing::debug!(apiservice = %name, "status not written: {e}");
                }
            }
        });
    }
}
