//! The discovery controller: fetches every backend's discovery (one fetch per Service), keeps the
//! last good document, merges it with the delegate's groups and publishes the aggregated `/apis`
//! as precomputed bytes (spec §6.3–§6.6).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use apiagg_discovery::{
    convert_resource_list, render_merged, split_group_versions, APIGroupDiscoveryList,
    APIResourceList, APIVersionDiscovery, AggregatedDocs, GroupVersionEntry, Priority, Source,
};
use async_trait::async_trait;
use pingora_core::server::ShutdownWatch;
use pingora_core::services::background::BackgroundService;

use super::targets::{group_version_path, targets, Target};
use crate::backends::{Client, Clients, FetchError, Fetched, RouteTable, Upstream};
use crate::observe::{Lifecycle, Metrics, Milestone, Repeats};

/// How often a failure that goes on is logged again (with the count of repeats).
const REPEAT_INTERVAL: Duration = Duration::from_secs(600);
use crate::state::{Publisher, Routes, StatusBook};

/// What backends are asked for at `/apis`.
const AGGREGATED_ACCEPT: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
/// Upper bound of one discovery request (spec §6.3).
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

use super::targets::ServiceKey;

/// Group-version documents indexed by `"<group>/<version>"`.
type GvDocs = HashMap<String, Arc<APIVersionDiscovery>>;

fn gv_key(group: &str, version: &str) -> String {
    format!("{group}/{version}")
}

/// What is known about one Service between rounds.
#[derive(Default)]
struct ServiceState {
    /// ETag and documents of the last aggregated answer.
    etag: Option<String>,
    aggregated: Option<GvDocs>,
}

/// Per-APIService outcome: last good document and whether the latest fetch succeeded.
#[derive(Default, Clone)]
struct GvState {
    cached: Option<Arc<APIVersionDiscovery>>,
    ok: bool,
}

fn is_aggregated(content_type: &str) -> bool {
    let mut parts = content_type.split(';').map(str::trim);
    let base = parts.next().unwrap_or("");
    let params: Vec<&str> = parts.collect();
    base.eq_ignore_ascii_case("application/json")
        && params.contains(&"g=apidiscovery.k8s.io")
        && params.contains(&"as=APIGroupDiscoveryList")
        && (params.contains(&"v=v2") || params.contains(&"v=v2beta1"))
}

fn decode_aggregated(fetched: &Fetched) -> Result<GvDocs, FetchError> {
    let list: APIGroupDiscoveryList = fetched.json()?;
    Ok(split_group_versions(list)
        .into_iter()
        .map(|(group, version)| (gv_key(&group, &version.version), Arc::new(version)))
        .collect())
}

async fn fetch_legacy(
    client: &Client,
    group: &str,
    version: &str,
) -> Result<APIVersionDiscovery, FetchError> {
    let path = group_version_path(group, version);
    let fetched = client
        .get(&path, "application/json", None, FETCH_TIMEOUT)
        .await?;
    let list: APIResourceList = fetched.json()?;
    convert_resource_list(version, &list).map_err(|e| fetched.invalid(e))
}

/// Fetches one Service: aggregated `/apis` with If-None-Match, legacy fallback per APIService.
async fn fetch_service(
    clients: &Clients,
    target: &Target,
    state: &mut ServiceState,
    gvs: &mut HashMap<String, GvState>,
    repeats: &Repeats,
) {
    let key = format!("{:?}", target.key);
    let fail_all = |gvs: &mut HashMap<String, GvState>, why: &dyn std::fmt::Display| {
        for api in &target.apiservices {
            tracing::debug!(apiservice = %api.name, "discovery failed: {why}");
            gvs.entry(api.name.clone()).or_default().ok = false;
        }
    };
    let Some(upstream) = &target.upstream else {
        fail_all(gvs, &"no endpoints");
        return;
    };
    let client = match clients.pick(upstream) {
        Ok(c) => c,
        Err(e) => {
            fail_all(gvs, &e);
            return;
        }
    };
    let answer = client
        .get(
            "/apis",
            AGGREGATED_ACCEPT,
            state.etag.as_deref(),
            FETCH_TIMEOUT,
        )
        .await;
    let docs = match answer {
        Ok(f) if f.status == 304 && state.aggregated.is_some() => state.aggregated.clone(),
        Ok(f) if f.status == 200 && is_aggregated(&f.content_type) => match decode_aggregated(&f) {
            Ok(docs) => {
                state.etag = f.etag.clone();
                state.aggregated = Some(docs.clone());
                Some(docs)
            }
            Err(e) => {
                repeats.warn(&key, &format!("discovery: {e}"));
                fail_all(gvs, &e);
                return;
            }
        },
        Ok(f) if f.status == 503 => {
            fail_all(gvs, &"503 from backend");
            return;
        }
        Ok(_) => None,
        Err(e) => {
            repeats.warn(&key, &format!("discovery: {e}"));
            fail_all(gvs, &e);
            return;
        }
    };
    repeats.recovered(&key, "discovery");
    match docs {
        Some(docs) => {
            for api in &target.apiservices {
                let doc = docs
                    .get(&gv_key(&api.group, &api.version))
                    .cloned()
                    .unwrap_or_else(|| Arc::new(APIVersionDiscovery::empty(&api.version)));
                gvs.insert(
                    api.name.clone(),
                    GvState {
                        cached: Some(doc),
                        ok: true,
                    },
                );
            }
        }
        None => {
            // Not an aggregated answer: read every group-version the legacy way (not cached).
            state.etag = None;
            state.aggregated = None;
            for api in &target.apiservices {
                let slot = gvs.entry(api.name.clone()).or_default();
                match fetch_legacy(&client, &api.group, &api.version).await {
                    Ok(doc) => {
                        slot.cached = Some(Arc::new(doc));
                        slot.ok = true;
                    }
                    Err(e) => {
                        repeats.warn(&api.name, &format!("discovery: {e}"));
                        slot.ok = false;
                    }
                }
            }
        }
    }
}

/// The delegate's aggregated `/apis`, converted from its legacy documents when it has none.
async fn fetch_local(
    clients: &Clients,
    delegate: &Upstream,
    routes: &RouteTable,
) -> Result<APIGroupDiscoveryList, FetchError> {
    let client = clients.pick(delegate)?;
    let fetched = client
        .get("/apis", AGGREGATED_ACCEPT, None, FETCH_TIMEOUT)
        .await?;
    if fetched.status == 200 && is_aggregated(&fetched.content_type) {
        return fetched.json();
    }
    let mut by_group: Vec<apiagg_discovery::APIGroupDiscovery> = Vec::new();
    for entry in routes
        .registry
        .entries()
        .iter()
        .filter(|e| e.is_delegated())
    {
        if entry.group.is_empty() {
            continue;
        }
        let version = fetch_legacy(&client, &entry.group, &entry.version).await?;
        match by_group.iter_mut().find(|g| g.metadata.name == entry.group) {
            Some(g) => g.versions.push(version),
            None => by_group.push(apiagg_discovery::APIGroupDiscovery {
                metadata: apiagg_discovery::GroupMeta::named(&entry.group),
                versions: vec![version],
                ..Default::default()
            }),
        }
    }
    Ok(APIGroupDiscoveryList::v2(by_group))
}

/// What the discovery controller works with.
pub struct Handles {
    /// The routes whose backends it reads.
    pub routes: Routes,
    /// The APIServices' conditions (an unavailable backend is `Stale`).
    pub availability: Arc<StatusBook>,
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
    routes: Routes,
    availability: Arc<StatusBook>,
    clients: Arc<Clients>,
    published: Publisher<Option<Arc<AggregatedDocs>>>,
    lifecycle: Arc<Lifecycle>,
    metrics: Arc<Metrics>,
    refresh: Duration,
    /// Failing backends, logged when their failure starts or changes, then every ten minutes.
    repeats: Repeats,
}

impl DiscoveryController {
    /// A controller publishing `gateway`'s aggregated discovery.
    pub fn new(handles: Handles) -> DiscoveryController {
        let Handles {
            routes,
            availability,
            clients,
            published,
            lifecycle,
            metrics,
            refresh,
        } = handles;
        DiscoveryController {
            routes,
            availability,
            clients,
            published,
            lifecycle,
            metrics,
            refresh,
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
}

impl DiscoveryController {
    /// One full round: every Service and the delegate, concurrently; then merge and publish.
    async fn round(&self, rounds: &mut Rounds) {
        let routes = self.routes.load();
        let targets = targets(&routes);
        let clients = &*self.clients;
        let repeats = &self.repeats;
        let mut work = Vec::with_capacity(targets.len());
        for target in &targets {
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
            match &routes.delegate {
                Some(delegate) => Some(fetch_local(clients, delegate, &routes).await),
                None => None,
            }
        };
        let (results, local) =
            futures_util::future::join(futures_util::future::join_all(work), local).await;

        rounds.gvs.clear();
        for (key, state, gvs) in results {
            rounds.services.insert(key, state);
            rounds.gvs.extend(gvs);
        }
        rounds
            .services
            .retain(|key, _| targets.iter().any(|t| &t.key == key));
        match local {
            Some(Ok(list)) => rounds.local = Some(list),
            Some(Err(e)) => tracing::warn!(
                "discovery of the delegate failed, keeping the last good document: {e}"
            ),
            None => rounds.local = None,
        }
        self.publish(&routes, rounds);
    }

    /// Merges the current state and publishes it if it changed.
    fn publish(&self, routes: &RouteTable, rounds: &Rounds) {
        let mut entries = Vec::new();
        if let Some(local) = &rounds.local {
            entries.extend(GroupVersionEntry::from_local_document(
                local,
                Source::Local,
                |g, v| {
                    routes
                        .registry
                        .lookup(&apiagg_config::route_key(g, v))
                        .map_or(
                            Priority {
                                group: 1000,
                                version: 100,
                            },
                            |e| Priority {
                                group: e.group_priority_minimum,
                                version: e.version_priority,
                            },
                        )
                },
            ));
        }
        // apiagg serves apiregistration.k8s.io itself: the delegate's copy is hidden.
        entries.retain(|e| e.group != crate::apiservices::GROUP);
        entries.extend(crate::apiservices::discovery_entry());
        for entry in routes.registry.entries() {
            if entry.is_delegated() {
                continue;
            }
            // Stale only when its discovery could not be fetched (an unavailable backend's
            // fetch fails in the round its availability change starts).
            let state = rounds.gvs.get(&entry.name).cloned().unwrap_or_default();
            entries.push(GroupVersionEntry::remote(
                &entry.group,
                &entry.version,
                Priority {
                    group: entry.group_priority_minimum,
                    version: entry.version_priority,
                },
                state.cached,
                state.ok,
            ));
        }
        match render_merged(&entries) {
            Ok(docs) => {
                let current = self.published.current();
                if current.as_ref().map(|d| &d.v2.etag) != Some(&docs.v2.etag) {
                    self.published.publish(Some(Arc::new(docs)));
                    self.metrics.discovery_aggregations.inc();
                }
            }
            Err(e) => tracing::error!("cannot render aggregated discovery: {e}"),
        }
    }
}

#[async_trait]
impl BackgroundService for DiscoveryController {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut rounds = Rounds::default();
        let refresh = self.refresh;
        let mut generation = self.routes.subscribe();
        let mut availability = self.availability.subscribe();
        let lifecycle = &self.lifecycle;
        loop {
            let delegate_ready = lifecycle.reached(Milestone::DelegateRegistered);
            self.round(&mut rounds).await;
            if delegate_ready && !lifecycle.reached(Milestone::DiscoverySynced) {
                lifecycle.reach(Milestone::DiscoverySynced);
                tracing::info!("first discovery round done");
            }
            tokio::select! {
                _ = generation.changed() => {}
                _ = availability.changed() => {
                    // Publish the change at once; the round below refreshes the documents.
                    self.publish(&self.routes.load(), &rounds);
                }
                _ = tokio::time::sleep(refresh) => {}
                // The delegate's groups may be registered after the routes woke this loop.
                () = lifecycle.until(Milestone::DelegateRegistered), if !delegate_ready => {}
                _ = shutdown.changed() => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::is_aggregated;

    #[test]
    fn recognises_aggregated_content_types() {
        assert!(is_aggregated(
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
        ));
        assert!(is_aggregated(
            "application/json; as=APIGroupDiscoveryList; v=v2beta1; g=apidiscovery.k8s.io"
        ));
        assert!(!is_aggregated("application/json"));
        assert!(!is_aggregated("text/html"));
    }
}
