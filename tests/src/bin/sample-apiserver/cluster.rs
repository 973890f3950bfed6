//! `--cluster`: core `services` and `discovery.k8s.io/v1` `endpointslices`, served like a
//! cluster's kube-apiserver serves them to apiagg's `serviceResolution` (list with
//! `labelSelector`, watch, create, replace, delete), so tests can move a Service's endpoints;
//! and the cluster-scoped `flowcontrol.apiserver.k8s.io/v1` `flowschemas` and
//! `prioritylevelconfigurations` that apiagg's `--flow-control-from-cluster` follows; and
//! `rbac.authorization.k8s.io/v1` Roles, ClusterRoles, RoleBindings and ClusterRoleBindings, which
//! an `RBAC` authorizer of apiagg's `--authorization-config` follows. Objects are
//! stored as sent (no validation), so tests can also put objects a real cluster would refuse.

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, Response};

use crate::resource::{self, ResourceInfo};
use crate::response::{not_found, Body};
use crate::store::Store;

/// One served kind.
struct Kind {
    /// `/api/v1`, `/apis/discovery.k8s.io/v1` or `/apis/flowcontrol.apiserver.k8s.io/v1`.
    prefix: &'static str,
    /// Served under `namespaces/<ns>/`, else cluster-scoped (`<prefix>/<resource>[/<name>]`).
    namespaced: bool,
    info: ResourceInfo,
    store: Arc<Store>,
}

/// Services, EndpointSlices, FlowSchemas, PriorityLevelConfigurations and RBAC objects.
pub struct ClusterResources {
    kinds: [Kind; 8],
}

impl ClusterResources {
    pub fn new() -> ClusterResources {
        let kind = |prefix, group: &str, resource: &str, kind: &str, namespaced| {
            let version = "v1";
            let api_version = match group {
                "" => version.to_string(),
                g => format!("{g}/{version}"),
            };
            Kind {
                prefix,
                namespaced,
                info: ResourceInfo {
                    group: group.into(),
                    version: version.into(),
                    resource: resource.into(),
                    kind: kind.into(),
                    cbor: false,
                    watch_list: crate::args::WatchListMode::Native,
                    expired_status: false,
                },
                store: Arc::new(Store::new(api_version, kind.into())),
            }
        };
        const DISCOVERY: &str = "/apis/discovery.k8s.io/v1";
        const FLOWCONTROL: &str = "/apis/flowcontrol.apiserver.k8s.io/v1";
        let flowcontrol = "flowcontrol.apiserver.k8s.io";
        const RBAC: &str = "/apis/rbac.authorization.k8s.io/v1";
        let rbac = "rbac.authorization.k8s.io";
        ClusterResources {
            kinds: [
                kind("/api/v1", "", "services", "Service", true),
                kind(
                    DISCOVERY,
                    "discovery.k8s.io",
                    "endpointslices",
                    "EndpointSlice",
                    true,
                ),
                kind(FLOWCONTROL, flowcontrol, "flowschemas", "FlowSchema", false),
                kind(
                    FLOWCONTROL,
                    flowcontrol,
                    "prioritylevelconfigurations",
                    "PriorityLevelConfiguration",
                    false,
                ),
                kind(RBAC, rbac, "roles", "Role", true),
                kind(RBAC, rbac, "clusterroles", "ClusterRole", false),
                kind(RBAC, rbac, "rolebindings", "RoleBinding", true),
                kind(
                    RBAC,
                    rbac,
                    "clusterrolebindings",
                    "ClusterRoleBinding",
                    false,
                ),
            ],
        }
    }

    /// The kind a path belongs to, with the rest of the path split in segments.
    fn find<'p>(&self, path: &'p str) -> Option<(&Kind, Vec<&'p str>)> {
        self.kinds.iter().find_map(|kind| {
            let rest = path.strip_prefix(kind.prefix)?.strip_prefix('/')?;
            let segments: Vec<&str> = rest.split('/').collect();
            let ours = match segments.as_slice() {
                ["namespaces", _, r, ..] if kind.namespaced => *r == kind.info.resource,
                [r] | [r, _] => *r == kind.info.resource,
                _ => false,
            };
            ours.then_some((kind, segments))
        })
    }

    /// Whether `path` is one of the served collections or objects.
    pub fn owns(&self, path: &str) -> bool {
        self.find(path).is_some()
    }

    /// Answers a request for a path [`ClusterResources::owns`].
    pub async fn route(&self, path: &str, req: Request<Incoming>) -> Response<Body> {
        let Some((kind, segments)) = self.find(path) else {
            return not_found();
        };
        let (info, store) = (&kind.info, &kind.store);
        if !kind.namespaced {
            // Cluster-scoped: stored with the empty namespace.
            return match segments.as_slice() {
                [_] => resource::collection(info, store, Some(""), req).await,
                [_, name] if !name.is_empty() => resource::item(info, store, "", name, req).await,
                _ => not_found(),
            };
        }
        match segments.as_slice() {
            [_] => resource::collection(info, store, None, req).await,
            ["namespaces", ns, _] if !ns.is_empty() => {
                resource::collection(info, store, Some(ns), req).await
            }
            ["namespaces", ns, _, name] if !ns.is_empty() && !name.is_empty() => {
                resource::item(info, store, ns, name, req).await
            }
            _ => not_found(),
        }
    }
}
