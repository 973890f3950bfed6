//! The OpenAPI controller: keeps every source's documents current and publishes the merged
//! snapshot. One download per backend Service serves every APIService behind it.
//!
//! Schedule: a full round on start, on every route change and every `--openapi-refresh`; a
//! failing source is retried alone with backoff (500 ms, doubling, capped at the refresh
//! interval). Downloads are bounded by `--openapi-timeout`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant as StdInstant;

use apiagg_config::Backend;
use apiagg_openapi_merge::{LocalSpec, PreparedV2, RemoteSpec};
use async_trait::async_trait;
use pingora_core::server::ShutdownWatch;
use pingora_core::services::background::BackgroundService;
use serde_json::Value;
use tokio::time::Instant;

use super::download::{prepare_local, prepare_remote, Backoff, V2Answer, V2State, V3State};
use super::publish::{render_v2, render_v3, v3_key, without_remote_keys, V2Inputs, V3Input};
use super::{OpenApiDocs, V2Served};
use crate::fetch::BackendClient;
use crate::routes::{RouteTable, Upstream};
use crate::state::Gateway;

/// Name of the delegate's v2 document in the merge (kube-aggregator's naming).
const DELEGATE_SPEC: &str = "k8s_internal_local_delegation_chain_0000000001";

/// `namespace/name:port` of a backend Service.
type ServiceKey = (String, String, i32);

/// An APIService behind a Service.
#[derive(Clone)]
struct ApiRef {
    name: String,
    group: String,
    version: String,
}

/// One Service to download and the APIServices it serves.
struct Target {
    key: ServiceKey,
    upstream: Option<Arc<Upstream>>,
    apiservices: Vec<ApiRef>,
}

/// What is known about the delegate.
#[derive(Default)]
struct LocalSource {
    /// Which delegate this is (its state is dropped when the delegate changes).
    identity: String,
    v2: V2State,
    spec: Option<Arc<PreparedV2>>,
    v3: V3State,
    backoff: Backoff,
}

/// What is known about one backend Service.
#[derive(Default)]
struct ServiceSource {
    v2: V2State,
    /// The last accepted document (prepared again for APIServices added later).
    doc: Option<Arc<Value>>,
    /// Prepared document per APIService name.
    specs: HashMap<String, Arc<PreparedV2>>,
    v3: V3State,
    backoff: Backoff,
}

/// Everything carried between rounds.
#[derive(Default)]
struct Sources {
    local: Option<LocalSource>,
    services: HashMap<ServiceKey, ServiceSource>,
    /// The inputs of the published v2 document and the document itself.
    v2_inputs: Option<V2Inputs>,
    v2: Option<Arc<V2Served>>,
}

impl Sources {
    /// The earliest retry of a failing source.
    fn next_retry(&self) -> Option<Instant> {
        let local = self.local.as_ref().and_then(|l| l.backoff.retry_at);
        self.services
            .values()
            .filter_map(|s| s.backoff.retry_at)
            .chain(local)
            .min()
    }
}

fn targets(routes: &RouteTable) -> Vec<Target> {
    let mut targets: Vec<Target> = Vec::new();
    for (index, entry) in routes.registry.entries().iter().enumerate() {
        let Backend::Remote(remote) = &entry.backend else {
            continue;
        };
        let key = (
            remote.namespace.clone(),
            remote.service.clone(),
            remote.port,
        );
        let apiservice = ApiRef {
            name: entry.name.clone(),
            group: entry.group.clone(),
            version: entry.version.clone(),
        };
        match targets.iter_mut().find(|t| t.key == key) {
            Some(t) => t.apiservices.push(apiservice),
            None => targets.push(Target {
                key,
                upstream: routes.upstreams.get(index).cloned().flatten(),
                apiservices: vec![apiservice],
            }),
        }
    }
    targets
}

fn delegate_identity(delegate: &Upstream) -> String {
    let endpoints: Vec<&str> = delegate
        .endpoints
        .iter()
        .map(|e| e.authority.as_str())
        .collect();
    format!("{} {}", delegate.server_name, endpoints.join(","))
}

fn client_for(
    upstream: Option<&Arc<Upstream>>,
    gateway: &Gateway,
) -> Result<BackendClient, String> {
    let upstream = upstream.ok_or("no endpoints")?;
    let index = upstream.pick().ok_or("no endpoints")?;
    BackendClient::new(upstream, index, gateway.options.openapi_timeout)
}

/// Downloads one Service's v2 document and prepares it for its APIServices.
async fn refresh_service_v2(
    client: &BackendClient,
    target: &Target,
    source: &mut ServiceSource,
) -> Result<(), String> {
    source
        .specs
        .retain(|name, _| target.apiservices.iter().any(|a| &a.name == name));
    match source.v2.fetch(client).await? {
        V2Answer::Missing => {
            source.v2.clear();
            source.doc = None;
            source.specs.clear();
            Ok(())
        }
        V2Answer::New { etag, hash, doc } => {
            let group_versions = target
                .apiservices
                .iter()
                .map(|a| (a.group.clone(), a.version.clone()))
                .collect();
            let specs = prepare_remote(Arc::clone(&doc), group_versions).await?;
            source.v2.accept(etag, hash);
            source.doc = Some(doc);
            source.specs = target
                .apiservices
                .iter()
                .map(|a| a.name.clone())
                .zip(specs)
                .collect();
            Ok(())
        }
        V2Answer::Unchanged => {
            // APIServices added behind an unchanged document are prepared from it.
            let Some(doc) = source.doc.clone() else {
                return Ok(());
            };
            let missing: Vec<&ApiRef> = target
                .apiservices
                .iter()
                .filter(|a| !source.specs.contains_key(&a.name))
                .collect();
            if missing.is_empty() {
                return Ok(());
            }
            let group_versions = missing
                .iter()
                .map(|a| (a.group.clone(), a.version.clone()))
                .collect();
            let specs = prepare_remote(doc, group_versions).await?;
            for (a, spec) in missing.into_iter().zip(specs) {
                source.specs.insert(a.name.clone(), spec);
            }
            Ok(())
        }
    }
}

/// Downloads everything one Service offers for its APIServices.
async fn refresh_service(gateway: &Gateway, target: &Target, source: &mut ServiceSource) {
    let label = format!("{}/{}:{}", target.key.0, target.key.1, target.key.2);
    let client = match client_for(target.upstream.as_ref(), gateway) {
        Ok(c) => c,
        Err(e) => {
            fail(gateway, &label, &mut source.backoff, &e);
            return;
        }
    };
    let mut errors = Vec::new();
    if let Err(e) = refresh_service_v2(&client, target, source).await {
        errors.push(e);
    }
    let keys: HashSet<String> = target
        .apiservices
        .iter()
        .map(|a| v3_key(&a.group, &a.version))
        .collect();
    if let Err(e) = source.v3.fetch(&client, |k| keys.contains(k)).await {
        errors.push(e);
    }
    if errors.is_empty() {
        source.backoff.succeeded();
    } else {
        fail(gateway, &label, &mut source.backoff, &errors.join("; "));
    }
}

/// Downloads the delegate's documents.
async fn refresh_local(gateway: &Gateway, delegate: &Arc<Upstream>, source: &mut LocalSource) {
    let client = match client_for(Some(delegate), gateway) {
        Ok(c) => c,
        Err(e) => {
            fail(gateway, "delegate", &mut source.backoff, &e);
            return;
        }
    };
    let mut errors = Vec::new();
    match source.v2.fetch(&client).await {
        Ok(V2Answer::Unchanged) => {}
        Ok(V2Answer::Missing) => {
            source.v2.clear();
            source.spec = None;
        }
        Ok(V2Answer::New { etag, hash, doc }) => match prepare_local(doc).await {
            Ok(spec) => {
                source.v2.accept(etag, hash);
                source.spec = Some(spec);
            }
            Err(e) => errors.push(e),
        },
        Err(e) => errors.push(e),
    }
    if let Err(e) = source.v3.fetch(&client, |_| true).await {
        errors.push(e);
    }
    if errors.is_empty() {
        source.backoff.succeeded();
    } else {
        fail(gateway, "delegate", &mut source.backoff, &errors.join("; "));
    }
}

fn fail(gateway: &Gateway, label: &str, backoff: &mut Backoff, why: &str) {
    tracing::warn!(
        source = label,
        "OpenAPI download failed, the last good documents stay: {why}"
    );
    gateway
        .metrics
        .openapi_download_failures
        .with_label_values(&[label])
        .inc();
    backoff.failed(gateway.options.openapi_refresh);
}

/// Keeps `/openapi/v2` and `/openapi/v3` current.
pub struct OpenApiController {
    gateway: Arc<Gateway>,
}

impl OpenApiController {
    /// A controller publishing into `gateway`.
    pub fn new(gateway: Arc<Gateway>) -> OpenApiController {
        OpenApiController { gateway }
    }

    /// Downloads what is due (everything when `full`), then publishes.
    async fn round(&self, sources: &mut Sources, full: bool) {
        let routes = self.gateway.routes.load_full();
        let now = Instant::now();
        let due = |backoff: &Backoff| full || backoff.retry_at.is_some_and(|at| at <= now);
        let targets = targets(&routes);

        let mut work = Vec::new();
        for target in &targets {
            let mut source = sources.services.remove(&target.key).unwrap_or_default();
            let gateway = &self.gateway;
            let run = due(&source.backoff);
            work.push(async move {
                if run {
                    refresh_service(gateway, target, &mut source).await;
                }
                (target.key.clone(), source)
            });
        }
        let mut fresh = false;
        let mut local = match &routes.delegate {
            Some(delegate) => {
                let identity = delegate_identity(delegate);
                let kept = sources.local.take().filter(|l| l.identity == identity);
                fresh = kept.is_none();
                Some(kept.unwrap_or_else(|| LocalSource {
                    identity,
                    ..LocalSource::default()
                }))
            }
            None => None,
        };
        let local_work = async {
            if let (Some(delegate), Some(source)) = (&routes.delegate, local.as_mut()) {
                if fresh || due(&source.backoff) {
                    refresh_local(&self.gateway, delegate, source).await;
                }
            }
        };
        let (results, ()) =
            futures_util::future::join(futures_util::future::join_all(work), local_work).await;
        sources.services = results.into_iter().collect();
        sources.local = local;
        self.publish(&routes, sources).await;
    }

    /// Builds the snapshot from the current inputs and stores it when something changed.
    async fn publish(&self, routes: &RouteTable, sources: &mut Sources) {
        let mut inputs = V2Inputs::default();
        if let Some(spec) = sources.local.as_ref().and_then(|l| l.spec.clone()) {
            inputs.locals.push(LocalSpec {
                name: DELEGATE_SPEC.into(),
                spec,
            });
        }
        let mut remote_docs = Vec::new();
        let mut remote_keys = HashSet::new();
        let mut remotes: Vec<_> = routes
            .registry
            .entries()
            .iter()
            .filter_map(|e| match &e.backend {
                Backend::Remote(r) => Some((e, (r.namespace.clone(), r.service.clone(), r.port))),
                Backend::Local => None,
            })
            .collect();
        // v3 sources in v2 merge order: group priority, then version priority, then name.
        remotes.sort_by(|(a, _), (b, _)| {
            b.group_priority_minimum
                .cmp(&a.group_priority_minimum)
                .then(b.version_priority.cmp(&a.version_priority))
                .then(a.name.cmp(&b.name))
        });
        for (entry, key) in remotes {
            let v3 = v3_key(&entry.group, &entry.version);
            let source = sources.services.get(&key);
            if let Some(spec) = source.and_then(|s| s.specs.get(&entry.name)) {
                inputs.remotes.push(RemoteSpec {
                    apiservice: entry.name.clone(),
                    group: entry.group.clone(),
                    version: entry.version.clone(),
                    group_priority_minimum: entry.group_priority_minimum,
                    version_priority: entry.version_priority,
                    spec: Arc::clone(spec),
                });
            }
            if let Some(doc) = source.and_then(|s| s.v3.get(&v3)) {
                remote_docs.push(V3Input {
                    name: entry.name.clone(),
                    docs: vec![Arc::clone(doc)],
                });
            }
            remote_keys.insert(v3);
        }

        let unchanged = sources
            .v2_inputs
            .as_ref()
            .is_some_and(|previous| previous.same_as(&inputs));
        if !unchanged {
            let started = StdInstant::now();
            let merge_inputs = inputs.clone();
            match tokio::task::spawn_blocking(move || render_v2(&merge_inputs)).await {
                Ok(rendered) => {
                    let metrics = &self.gateway.metrics;
                    metrics.openapi_v2_regenerations.inc();
                    metrics
                        .openapi_v2_regeneration_duration
                        .observe(started.elapsed().as_secs_f64());
                    sources.v2 = rendered.map(Arc::new);
                    sources.v2_inputs = Some(inputs);
                    tracing::info!(
                        bytes = sources.v2.as_ref().map_or(0, |d| d.json.len()),
                        "OpenAPI v2 merged"
                    );
                }
                Err(e) => tracing::error!("OpenAPI v2 merge failed: {e}"),
            }
        }

        let mut v3_inputs = Vec::with_capacity(remote_docs.len() + 1);
        if let Some(local) = &sources.local {
            let mut docs: Vec<_> = local.v3.documents().map(|(_, d)| Arc::clone(d)).collect();
            docs.sort_by(|a, b| a.doc.key.cmp(&b.doc.key));
            v3_inputs.push(V3Input {
                name: "delegate".into(),
                docs: without_remote_keys(docs, &remote_keys),
            });
        }
        v3_inputs.extend(remote_docs);
        let v3 = render_v3(&v3_inputs);

        let current = self.gateway.openapi.load();
        let same = current.as_ref().is_some_and(|c| {
            c.v3_index_etag == v3.etag
                && match (&c.v2, &sources.v2) {
                    (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                    (None, None) => true,
                    _ => false,
                }
        });
        if same {
            return;
        }
        if current.as_ref().is_none_or(|c| c.v3_index_etag != v3.etag) {
            self.gateway.metrics.openapi_v3_index_regenerations.inc();
        }
        self.gateway.openapi.store(Some(Arc::new(OpenApiDocs {
            v2: sources.v2.clone(),
            v3_index: v3.index,
            v3_index_etag: v3.etag,
            v3: v3.docs,
        })));
    }
}

#[async_trait]
impl BackgroundService for OpenApiController {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut sources = Sources::default();
        let refresh = self.gateway.options.openapi_refresh;
        let mut generation = self.gateway.routes_generation.subscribe();
        let mut full = true;
        let mut next_full = Instant::now();
        loop {
            if full {
                next_full = Instant::now() + refresh;
            }
            self.round(&mut sources, full).await;
            let retry = sources.next_retry();
            full = tokio::select! {
                _ = generation.changed() => true,
                _ = tokio::time::sleep_until(next_full) => true,
                _ = async {
                    match retry {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending::<()>().await,
                    }
                } => false,
                _ = shutdown.changed() => return,
            };
        }
    }
}
