//! `--cluster`: core `services` and `discovery.k8s.io/v1` `endpointslices`, served like a
//! cluster's kube-apiserver serves them to apiagg's `serviceResolution` (list with
//! `labelSelector`, watch, create, replace, delete), so tests can move a Service's endpoints.

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, Response};

use crate::resource::{self, ResourceInfo};
use crate::response::{not_found, Body};
use crate::store::Store;

/// One served kind.
struct Kind {
    /// `/api/v1` or `/apis/discovery.k8s.io/v1`.
    prefix: &'static str,
    info: ResourceInfo,
    store: Arc<Store>,
}

/// Services and EndpointSlices.
pub struct ClusterResources {
    kinds: [Kind; 2],
}

impl ClusterResources {
    pub fn new() -> ClusterResources {
        let kind = |prefix, group: &str, version: &str, resource: &str, kind: &str| {
            let api_version = match group {
                "" => version.to_string(),
                g => format!("{g}/{version}"),
            };
            Kind {
                prefix,
                info: ResourceInfo {
                    group: group.into(),
                    version: version.into(),
                    resource: resource.into(),
                    kind: kind.into(),
                },
                store: Arc::new(Store::new(api_version, kind.into())),
            }
        };
        ClusterResources {
            kinds: [
                kind("/api/v1", "", "v1", "services", "Service"),
                kind(
                    "/apis/discovery.k8s.io/v1",
                    "discovery.k8s.io",
                    "v1",
                    "endpointslices",
                    "EndpointSlice",
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
                ["namespaces", _, r, ..] | [r] | [r, _] => *r == kind.info.resource,
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
