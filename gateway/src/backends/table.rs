//! The route table the request path reads: the registry plus, for every remote APIService and
//! the delegate, its upstream, and the legacy discovery documents. Built off the request path
//! and published whole.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use apiagg_config::{Backend, Displaced, LocalGroupVersion, Registry};
use apiagg_discovery::{
    legacy_group, legacy_group_list, render_legacy, ApiServiceRecord, RenderError, RenderedDoc,
};

use super::credentials::ClientIdentity;
use super::endpoint_health::HealthBook;
use super::names::Names;
use super::upstream::{build_upstream, trust_anchors, Own, TlsSettings, Upstream};
use apiagg_observe::Metrics;

/// Why a route table cannot be built (the previous one keeps serving).
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    /// The legacy discovery documents cannot be rendered (a bug, not an input problem).
    #[error("legacy discovery: {0}")]
    Legacy(#[from] RenderError),
}

/// What the request path needs, published as one snapshot.
pub struct RouteTable {
    /// Every APIService.
    pub registry: Arc<Registry>,
    /// Upstream per registry entry (same order); `None` for local APIServices and for remote ones
    /// whose Service has no endpoints.
    pub upstreams: Vec<Option<Arc<Upstream>>>,
    /// Why a remote APIService has no upstream although its Service resolved (a name that does
    /// not resolve, an unusable CA bundle), by registry index: that APIService fails, not the
    /// table.
    pub broken: HashMap<usize, String>,
    /// The delegate, when configured.
    pub delegate: Option<Arc<Upstream>>,
    /// Legacy discovery built from the APIServices (kube-aggregator's
    /// `pkg/apiserver/handler_apis.go`): `/apis` and `/apis/<group>`.
    pub legacy: LegacyDiscovery,
    /// The config file's APIServices as the APIService API lists them (read-only there).
    pub declared: Arc<Vec<serde_json::Value>>,
    /// The group-versions the delegate serves (empty without a delegate); `None` while a
    /// delegate is configured and not read yet.
    pub delegate_groups: Option<Arc<[LocalGroupVersion]>>,
    /// APIServices of the API kept out of the routes: an owner (Kubernetes, the delegate) has
    /// their group-version.
    pub displaced: Arc<Vec<Displaced>>,
}

/// Legacy discovery documents, rendered once per registry.
pub struct LegacyDiscovery {
    /// `APIGroupList` for `/apis`.
    pub apis: RenderedDoc,
    /// `APIGroup` for `/apis/<group>`, for every group with an APIService.
    pub groups: HashMap<String, RenderedDoc>,
}

impl LegacyDiscovery {
    /// Renders the legacy documents of a registry.
    pub fn build(registry: &Registry) -> Result<LegacyDiscovery, RenderError> {
        let records: Vec<ApiServiceRecord<'_>> = registry
            .entries()
            .iter()
            .map(|e| ApiServiceRecord {
                name: &e.name,
                group: &e.group,
                version: &e.version,
                group_priority_minimum: e.group_priority_minimum,
                version_priority: e.version_priority,
            })
            .collect();
        let apis = render_legacy(&legacy_group_list(&records))?;
        let mut groups = HashMap::new();
        for e in registry.entries() {
            if e.group.is_empty() || groups.contains_key(&e.group) {
                continue;
            }
            if let Some(group) = legacy_group(&records, &e.group) {
                let doc = render_legacy(&group)?;
                groups.insert(e.group.clone(), doc);
            }
        }
        Ok(LegacyDiscovery { apis, groups })
    }
}

impl RouteTable {
    /// An empty table (nothing registered yet).
    pub fn empty() -> RouteTable {
        let registry = Arc::new(Registry::default());
        let legacy = LegacyDiscovery::build(&registry).unwrap_or_else(|_| LegacyDiscovery {
            apis: RenderedDoc {
                bytes: bytes::Bytes::new(),
                etag: String::new(),
                content_type: "application/json",
                cbor: bytes::Bytes::new(),
                cbor_content_type: apiagg_apis::CBOR,
            },
            groups: HashMap::new(),
        });
        RouteTable {
            registry,
            upstreams: Vec::new(),
            broken: HashMap::new(),
            delegate: None,
            legacy,
            declared: Arc::default(),
            delegate_groups: None,
            displaced: Arc::default(),
        }
    }
}

/// Builds the route table for a registry; remote backends get `proxy_identity` as client
/// certificate. An APIService whose endpoints cannot be resolved or whose CA bundle is unusable
/// gets no upstream and its reason in [`RouteTable::broken`]; the rest of the table is built.
pub fn build(
    registry: Arc<Registry>,
    delegate: Option<Arc<Upstream>>,
    proxy_identity: Option<&ClientIdentity>,
    book: &HealthBook,
    metrics: &Metrics,
    names: &Names,
) -> Result<RouteTable, TableError> {
    let mut upstreams = Vec::with_capacity(registry.entries().len());
    let mut broken = HashMap::new();
    for (index, entry) in registry.entries().iter().enumerate() {
        let Backend::Remote(remote) = &entry.backend else {
            upstreams.push(None);
            continue;
        };
        let endpoints = match &remote.endpoints {
            Ok(endpoints) if !endpoints.is_empty() => endpoints,
            _ => {
                upstreams.push(None);
                continue;
            }
        };
        let built = trust_anchors(remote.ca_bundle.as_deref(), "spec.caBundle").and_then(|ca| {
            build_upstream(
                entry.name.clone(),
                endpoints,
                TlsSettings {
                    ca: ca.as_deref(),
                    insecure: remote.insecure_skip_tls_verify,
                    server_name: &remote.server_name,
                    identity: proxy_identity,
                },
                Own::Shared,
                remote.watch_list,
                book,
                names,
            )
        });
        match built {
            Ok(mut upstream) => {
                upstream.metrics = Some(metrics.group_version(&entry.group, &entry.version));
                upstreams.push(Some(Arc::new(upstream)));
            }
            Err(e) => {
                broken.insert(index, e.to_string());
                upstreams.push(None);
            }
        }
    }
    let legacy = LegacyDiscovery::build(&registry)?;
    Ok(RouteTable {
        registry,
        upstreams,
        broken,
        delegate,
        legacy,
        declared: Arc::default(),
        delegate_groups: None,
        displaced: Arc::default(),
    })
}

impl RouteTable {
    /// The health keys of every endpoint in the table (delegate included).
    pub fn health_keys(&self) -> HashSet<u64> {
        self.upstreams
            .iter()
            .flatten()
            .chain(&self.delegate)
            .flat_map(|u| u.endpoints.iter())
            .map(|e| e.health_key)
            .collect()
    }

    /// The pool keys of every endpoint in the table (delegate included).
    pub fn endpoint_keys(&self) -> HashSet<u64> {
        self.upstreams
            .iter()
            .flatten()
            .chain(&self.delegate)
            .flat_map(|u| u.endpoints.iter())
            .flat_map(|e| [e.peer.group_key, e.own_peer.group_key])
            .collect()
    }
}
