//! The backend Services behind the remote APIServices: one fetch per Service serves every
//! APIService behind it (discovery and OpenAPI both fetch this way).

use std::sync::Arc;

use apiagg_config::Backend;

use crate::backends::{RouteTable, Upstream};

/// `namespace/name:port` of a backend Service.
pub type ServiceKey = (String, String, i32);

/// An APIService behind a Service.
#[derive(Debug, Clone)]
pub struct ApiRef {
    /// APIService name.
    pub name: String,
    /// Its group (empty for the core group).
    pub group: String,
    /// Its version.
    pub version: String,
}

/// One Service to fetch and the APIServices it serves.
pub struct Target {
    /// Which Service.
    pub key: ServiceKey,
    /// Its endpoints; `None` when it has none.
    pub upstream: Option<Arc<Upstream>>,
    /// The APIServices behind it, in registry order.
    pub apiservices: Vec<ApiRef>,
}

impl Target {
    /// `namespace/name:port`, for logs and metric labels.
    pub fn label(&self) -> String {
        format!("{}/{}:{}", self.key.0, self.key.1, self.key.2)
    }
}

/// Every Service behind a remote APIService of `routes`, in registry order.
pub fn targets(routes: &RouteTable) -> Vec<Target> {
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

/// The legacy discovery path of a group-version (`/api/v1` for the core group).
pub fn group_version_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_version_paths() {
        assert_eq!(group_version_path("", "v1"), "/api/v1");
        assert_eq!(group_version_path("a.io", "v1"), "/apis/a.io/v1");
    }
}
