//! The discovery controller: fetches every backend's discovery (one fetch per Service), keeps the
//! last good document, merges it with the delegate's groups and publishes the aggregated `/apis`
//! as precomputed bytes (kube-aggregator's `pkg/apiserver/handler_discovery.go`).
//!
//! The loop only schedules rounds. A round asks the pure [`plan::plan`] what to read, reads it
//! ([`fetch`]), and publishes what the pure [`plan::entries`] merge into when it changed. A
//! Service (or the delegate) whose fetch failed is read again on its own after 500 ms, doubling
//! up to the refresh interval, as kube-aggregator retries since kubernetes#137634, instead of
//! waiting for the next full round.

mod fetch;
mod plan;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use apiagg_discovery::{render_merged, APIGroupDiscoveryList, AggregatedDocs};
use async_trait::async_trait;
use pingora_core::server::ShutdownWatch;
use pingora_core::services::background::BackgroundService;

use self::fetch::{fetch_local, fetch_service, ServiceState};
use self::plan::{entries, plan, GvState};
use super::backoff::Backoff;
use super::targets::ServiceKey;
use crate::backends::{Clients, RouteTable};
use crate::state::{Publisher, Routes, StatusBook};
use apiagg_observe::{Lifecycle, Metrics, Milestone, Repeats};

/// How often a failure that goes on is logged again (with the count of repeats).
const REPEAT_INTERVAL: Duration = Duration::from_secs(600);
/// The first retry of a failed fetch (then doubling up to the refresh interval).
const FIRST_RETRY: Duration = Duration::from_millis(500);

/// What the discovery controller works with.
pub struct Handles {
    /// The routes whose backends it reads.
    pub routes: Routes,
    /// The APIServices' conditions (an unavailable backend is `Stale`).
    pub availability: StatusBook,
    /// The downloads' clients.
    pub clients: Arc<Clients>,
    /// The aggregated discovery's only writer.
    pub published: Publisher<Option<Arc<AggregatedDocs>>>,
    /// Start-up milestones.
    pub lifecycle: Arc<Lifecycle>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// How often every backend is read again.
    pub refresh: Duration,
}

/// Keeps the aggregated discovery document current.
pub struct DiscoveryController {
    /// What it works with.
    handles: Handles,
    /// Failing backends, logged when their failure starts or changes, then every ten minutes.
    repeats: Repeats,
}

impl DiscoveryController {
    /// A controller publishing `gateway`'s aggregated discovery.
    pub fn new(handles: Handles) -> DiscoveryController {
        DiscoveryController {
            handles,
            repeats: Repeats::new(REPEAT_INTERVAL),
        }
    }
}

/// State carried between rounds.
#[derive(Default)]
struct Rounds {
    services: HashMap<ServiceKey, ServiceState>,
    gvs: HashMap<String, GvState>,
    local: Option<APIGroupDiscoveryList>,
    /// Services whose last fetch failed, with their retry schedule.
    retries: HashMap<ServiceKey, Backoff>,
    /// The delegate's retry schedule while its fetch fails.
    delegate_retry: Option<Backoff>,
}

impl Rounds {
    /// When the earliest retry is due.
    fn next_retry(&self) -> Option<tokio::time::Instant> {
        self.retries
            .values()
            .chain(self.delegate_retry.as_ref())
            .filter_map(|b| b.retry_at)
            .min()
    }
}

/// What a round reads.
#[derive(Clone, Copy)]
enum Scope<'a> {
    /// Every Service and the delegate.
    Full,
    /// The Services (and the delegate when `delegate`) whose retry is due.
    Retry {
        services: &'a HashSet<ServiceKey>,
        delegate: bool,
    },
}

impl DiscoveryController {
    /// One round: every Service and the delegate (or those whose retry is due), concurrently;
    /// then merge and publish.
    async fn round(&self, rounds: &mut Rounds, scope: Scope<'_>) {
        let routes = self.handles.routes.load();
        let plan = plan(&routes);
        let clients = &*self.handles.clients;
        let repeats = &self.repeats;
        let mut work = Vec::with_capacity(plan.services.len());
        let wanted = |key: &ServiceKey| match scope {
            Scope::Full => true,
            Scope::Retry { services, .. } => services.contains(key),
        };
        let read_delegate = match scope {
            Scope::Full => true,
            Scope::Retry { delegate, .. } => delegate,
        };
        for target in plan.services.iter().filter(|t| wanted(&t.key)) {
            let mut state = rounds.services.remove(&target.key).unwrap_or_default();
            let mut gvs: HashMap<String, GvState> = target
                .apiservices
                .iter()
                .map(|api| {
                    let state = rounds.gvs.get(&api.name).cloned().unwrap_or_default();
                    (api.name.clone(), state)
                })
                .collect();
            work.push(async move {
                fetch_service(clients, target, &mut state, &mut gvs, repeats).await;
                (target.key.clone(), state, gvs)
            });
        }
        let local = async {
            match &plan.delegate {
                Some(delegate) if read_delegate => Some(fetch_local(clients, delegate).await),
                _ => None,
            }
        };
        let (results, local) =
            futures_util::future::join(futures_util::future::join_all(work), local).await;

        let refresh = self.handles.refresh;
        if matches!(scope, Scope::Full) {
            rounds.gvs.clear();
        }
        for (key, state, gvs) in results {
            // A Service whose fetch failed for any of its APIServices is read again soon.
            if gvs.values().any(|gv| !gv.ok) {
                let retry = rounds.retries.entry(key.clone());
                retry
                    .or_insert_with(|| Backoff::new(FIRST_RETRY, refresh))
                    .failed();
            } else {
                rounds.retries.remove(&key);
            }
            rounds.services.insert(key, state);
            rounds.gvs.extend(gvs);
        }
        let current = |key: &ServiceKey| plan.services.iter().any(|t| &t.key == key);
        rounds.services.retain(|key, _| current(key));
        rounds.retries.retain(|key, _| current(key));
        match local {
            Some(Ok(list)) => {
                rounds.local = Some(list);
                rounds.delegate_retry = None;
            }
            Some(Err(e)) => {
                tracing::warn!(
                    "discovery of the delegate failed, keeping the last good document: {e}"
                );
                let retry = rounds
                    .delegate_retry
                    .get_or_insert_with(|| Backoff::new(FIRST_RETRY, refresh));
                retry.failed();
            }
            None if plan.delegate.is_none() => {
                rounds.local = None;
                rounds.delegate_retry = None;
            }
            None => {}
        }
        self.publish(&routes, rounds);
    }

    /// Reads again the Services (and the delegate) whose retry is due.
    async fn retry_due(&self, rounds: &mut Rounds) {
        let now = tokio::time::Instant::now();
        let services: HashSet<ServiceKey> = rounds
            .retries
            .iter()
            .filter(|(_, b)| b.due(now))
            .map(|(k, _)| k.clone())
            .collect();
        let delegate = rounds.delegate_retry.as_ref().is_some_and(|b| b.due(now));
        let scope = Scope::Retry {
            services: &services,
            delegate,
        };
        self.round(rounds, scope).await;
    }

    /// Merges the current state and publishes it if it changed.
    fn publish(&self, routes: &RouteTable, rounds: &Rounds) {
        let entries = entries(&routes.registry, rounds.local.as_ref(), &rounds.gvs);
        match render_merged(&entries) {
            Ok(docs) => {
                let current = self.handles.published.current();
                if current.as_ref().map(|d| &d.v2.etag) != Some(&docs.v2.etag) {
                    self.handles.published.publish(Some(Arc::new(docs)));
                    self.handles.metrics.discovery_aggregations.inc();
                }
            }
            Err(e) => tracing::error!("cannot render aggregated discovery: {e}"),
        }
    }
}

/// Sleeps until `at`; for ever without one.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[async_trait]
impl BackgroundService for DiscoveryController {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut rounds = Rounds::default();
        let refresh = self.handles.refresh;
        let mut generation = self.handles.routes.subscribe();
        let mut availability = self.handles.availability.subscribe();
        let lifecycle = &self.handles.lifecycle;
        let mut flips = self.handles.availability.guard().flips;
        let mut refetch = true;
        loop {
            let delegate_ready = lifecycle.reached(Milestone::DelegateRegistered);
            if refetch {
                self.round(&mut rounds, Scope::Full).await;
            }
            refetch = true;
            if delegate_ready && !lifecycle.reached(Milestone::DiscoverySynced) {
                lifecycle.reach(Milestone::DiscoverySynced);
                tracing::info!("first discovery round done");
            }
            tokio::select! {
                _ = generation.changed() => {}
                _ = availability.changed() => {
                    // A flip is published at once and the round below refreshes the
                    // documents; other status changes (endpoint details) need neither.
                    let now = self.handles.availability.guard().flips;
                    refetch = now != flips;
                    if refetch {
                        flips = now;
                        self.publish(&self.handles.routes.load(), &rounds);
                    }
                }
                _ = tokio::time::sleep(refresh) => {}
                () = sleep_until(rounds.next_retry()) => {
                    self.retry_due(&mut rounds).await;
                    refetch = false;
                }
                // The delegate's groups may be registered after the routes woke this loop.
                () = lifecycle.until(Milestone::DelegateRegistered), if !delegate_ready => {}
                _ = shutdown.changed() => return,
            }
        }
    }
}
