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
    use crate::backends::fixtures::{index, table, CONFIG};

    fn names(target: &Target) -> Vec<&str> {
        target.apiservices.iter().map(|a| a.name.as_str()).collect()
    }

    #[test]
    fn one_target_per_service_in_registry_order() {
        let routes = table(CONFIG, &[("", "v1"), ("apps", "v1")]);
        let targets = targets(&routes);
        // Local APIServices have no Service; the others come in registry order (priority).
        let labels: Vec<String> = targets.iter().map(Target::label).collect();
        assert_eq!(
            labels,
            ["test/wardle:443", "test/flunder:443", "test/nowhere:443"]
        );
        let [wardle, flunder, nowhere] = &targets[..] else {
            panic!("three targets")
        };
        assert_eq!(
            names(wardle),
            ["v1.wardle.example.com", "v1beta1.wardle.example.com"]
        );
        assert_eq!(names(flunder), ["v1.flunder.example.com"]);
        let beta = &wardle.apiservices[1];
        assert_eq!(
            (beta.group.as_str(), beta.version.as_str()),
            ("wardle.example.com", "v1beta1")
        );
        // A Service is read through the upstream of its first APIService; one without
        // endpoints has none.
        let first = routes.upstreams[index(&routes, "v1.wardle.example.com")].as_ref();
        let upstream = wardle.upstream.as_ref();
        assert!(first.zip(upstream).is_some_and(|(a, b)| Arc::ptr_eq(a, b)));
        assert!(flunder.upstream.is_some());
        assert!(nowhere.upstream.is_none());
    }

    #[test]
    fn group_version_paths() {
        assert_eq!(group_version_path("", "v1"), "/api/v1");
        assert_eq!(group_version_path("a.io", "v1"), "/apis/a.io/v1");
    }
}
