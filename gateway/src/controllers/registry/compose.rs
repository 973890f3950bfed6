//! The registry controller's one pure step: the registry from its inputs. Precedence, highest
//! first: the config file, then APIServices registered through the API, then one local
//! APIService per group-version the delegate serves. A stored APIService never takes a built-in
//! group or a group-version the delegate serves (it is displaced, and its condition says why);
//! a stored object that does not decode was left out by the store follower, so one bad object
//! costs only itself.

use std::collections::BTreeSet;

use apiagg_apis::APIService;
use apiagg_config::{
    split_stored, Backend, Displaced, GatewayConfig, LocalGroupVersion, Registry, SourcedApiService,
};
use apiagg_config::{ClusterServices, ServiceResolution};
use serde_json::Value;

use crate::backends::{names_of, HostPort};

/// Where [`RegistryInputs::stored`] objects say they come from in the registry's entries.
const FROM_API: &str = "the APIService API";

/// Everything a registry is built from, each kept current by its own input of the controller.
pub struct RegistryInputs<'a> {
    /// The config file (and the APIService files it names), as last accepted.
    pub config: &'a GatewayConfig,
    /// APIServices registered through the API, without status or bookkeeping.
    pub stored: &'a [APIService],
    /// The delegate's group-versions; `None` while unknown.
    pub delegate_groups: Option<&'a [LocalGroupVersion]>,
    /// The cluster's Services, when the config resolves through them.
    pub cluster: Option<&'a ClusterServices>,
}

/// What [`compose`] builds.
pub struct Composed {
    /// Every APIService that routes, ordered.
    pub registry: Registry,
    /// Stored APIServices an owner keeps out of the routes.
    pub displaced: Vec<Displaced>,
    /// The read-only APIServices the API lists: the config file's and the delegate's.
    pub declared: Vec<Value>,
}

/// Builds the registry of `inputs`.
pub fn compose(inputs: &RegistryInputs<'_>) -> Composed {
    let config = inputs.config;
    let groups = inputs.delegate_groups.unwrap_or(&[]);
    let in_file = |name: &str| {
        config
            .api_services
            .iter()
            .any(|s| s.object.metadata.name.as_deref() == Some(name))
    };
    let registered = inputs
        .stored
        .iter()
        .filter(|o| !in_file(o.metadata.name.as_deref().unwrap_or("")))
        .map(|object| SourcedApiService {
            object: object.clone(),
            origin: FROM_API.into(),
        })
        .collect();
    let (routable, displaced) = split_stored(registered, groups);
    let cluster = inputs
        .cluster
        .filter(|_| config.service_resolution != ServiceResolution::Config);
    Composed {
        registry: Registry::build_with(config, &routable, groups, cluster),
        displaced,
        declared: declared(config, groups),
    }
}

/// The host names the endpoints of `registry` use (IP literals need no resolution).
pub fn names_wanted(registry: &Registry) -> BTreeSet<HostPort> {
    names_of(registry.entries().iter().flat_map(|e| {
        match &e.backend {
            Backend::Remote(remote) => match &remote.endpoints {
                Ok(endpoints) => endpoints
                    .iter()
                    .map(|ep| (ep.host.as_str(), ep.port))
                    .collect(),
                Err(_) => Vec::new(),
            },
            Backend::Delegate => Vec::new(),
        }
    }))
}

/// The APIServices the API lists read-only: the config file's, annotated with where they are
/// declared, and the local ones registered for the delegate's group-versions.
fn declared(config: &GatewayConfig, delegate: &[LocalGroupVersion]) -> Vec<Value> {
    let mut out: Vec<Value> = config
        .api_services
        .iter()
        .filter_map(|s| {
            let mut value = serde_json::to_value(&s.object).ok()?;
            value["apiVersion"] = "apiregistration.k8s.io/v1".into();
            value["kind"] = "APIService".into();
            value["metadata"]["annotations"][crate::apiservices::DECLARED_BY] =
                s.origin.clone().into();
            Some(value)
        })
        .collect();
    for gv in delegate {
        let name = format!("{}.{}", gv.version, gv.group);
        if out.iter().any(|o| o["metadata"]["name"] == name.as_str()) {
            continue;
        }
        let (gpm, vp) = apiagg_apis::builtin_priority(&gv.group, &gv.version);
        out.push(serde_json::json!({
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": name, "annotations": {crate::apiservices::DECLARED_BY: "the delegate"}},
            "spec": {"group": gv.group, "version": gv.version, "groupPriorityMinimum": gpm, "versionPriority": vp},
        }));
    }
    out
}

#[cfg(test)]
mod tests {
    use apiagg_config::{Origin, Sources};

    use super::*;

    fn config(yaml: &str) -> GatewayConfig {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("apiagg.yaml");
        std::fs::write(&path, yaml).expect("write");
        Sources::read(&path)
            .and_then(|s| s.parse())
            .expect("config")
    }

    fn api(name: &str, group: &str, endpoint_service: &str) -> APIService {
        let version = name.split('.').next().unwrap_or("v1");
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {"group": group, "version": version, "groupPriorityMinimum": 1000,
                     "versionPriority": 15, "insecureSkipTLSVerify": true,
                     "service": {"namespace": "test", "name": endpoint_service, "port": 443}},
        }))
        .expect("apiservice")
    }

    fn gv(group: &str, version: &str) -> LocalGroupVersion {
        LocalGroupVersion {
            group: group.into(),
            version: version.into(),
        }
    }

    const FILE: &str = "services:\n\
        \x20 - {namespace: test, name: file, port: 443, endpoints: [\"https://10.0.0.1:443\"]}\n\
        \x20 - {namespace: test, name: api, port: 443, endpoints: [\"https://api.example:8443\", \"https://10.0.0.2:443\"]}\n\
        apiServices:\n\
        \x20 - apiVersion: apiregistration.k8s.io/v1\n\
        \x20   kind: APIService\n\
        \x20   metadata: {name: v1.wardle.example.com}\n\
        \x20   spec: {group: wardle.example.com, version: v1, groupPriorityMinimum: 1000, versionPriority: 15, insecureSkipTLSVerify: true, service: {namespace: test, name: file, port: 443}}\n";

    fn entry<'a>(composed: &'a Composed, name: &str) -> &'a apiagg_config::ApiServiceEntry {
        composed
            .registry
            .entries()
            .iter()
            .find(|e| e.name == name)
            .unwrap_or_else(|| panic!("{name} is not registered"))
    }

    #[test]
    fn the_config_file_wins_over_stored_objects_and_stored_over_the_delegate() {
        let config = config(FILE);
        let stored = [
            // Same name as the file's: the file's stays.
            api("v1.wardle.example.com", "wardle.example.com", "api"),
            api("v1beta1.metrics.k8s.io", "metrics.k8s.io", "api"),
        ];
        let groups = [gv("", "v1"), gv("apps", "v1")];
        let composed = compose(&RegistryInputs {
            config: &config,
            stored: &stored,
            delegate_groups: Some(&groups),
            cluster: None,
        });
        let wardle = entry(&composed, "v1.wardle.example.com");
        assert!(matches!(&wardle.origin, Origin::Config(_)));
        let Backend::Remote(remote) = &wardle.backend else {
            panic!("remote")
        };
        assert_eq!(remote.service, "file");
        assert_eq!(
            entry(&composed, "v1beta1.metrics.k8s.io").origin,
            Origin::Api
        );
        assert_eq!(entry(&composed, "v1.apps").origin, Origin::Delegate);
        assert_eq!(entry(&composed, "v1.").origin, Origin::Delegate);
        assert!(composed.displaced.is_empty());
        // The API lists the file's and the delegate's objects read-only, not the stored ones.
        let names: Vec<&str> = composed
            .declared
            .iter()
            .filter_map(|d| d["metadata"]["name"].as_str())
            .collect();
        assert_eq!(names, ["v1.wardle.example.com", "v1.", "v1.apps"]);
    }

    #[test]
    fn stored_objects_never_take_builtin_groups_or_the_delegates_group_versions() {
        let config = config(FILE);
        let stored = [
            api("v1.apps", "apps", "api"),
            api("v2.apps", "apps", "api"),
            api("v1.karmada.io", "karmada.io", "api"),
        ];
        let groups = [gv("karmada.io", "v1")];
        // Before the delegate's group-versions are known, built-in groups are refused anyway.
        let unknown = compose(&RegistryInputs {
            config: &config,
            stored: &stored,
            delegate_groups: None,
            cluster: None,
        });
        let displaced: Vec<&str> = unknown.displaced.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(displaced, ["v1.apps", "v2.apps"]);
        assert_eq!(entry(&unknown, "v1.karmada.io").origin, Origin::Api);
        // Once known, the delegate's group-version is the delegate's.
        let known = compose(&RegistryInputs {
            config: &config,
            stored: &stored,
            delegate_groups: Some(&groups),
            cluster: None,
        });
        let displaced: Vec<&str> = known.displaced.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(displaced, ["v1.apps", "v2.apps", "v1.karmada.io"]);
        assert_eq!(entry(&known, "v1.karmada.io").origin, Origin::Delegate);
        assert!(known.displaced.iter().all(|d| !d.message.is_empty()));
    }

    #[test]
    fn a_stored_object_without_endpoints_fails_alone_and_names_are_collected() {
        let config = config(FILE);
        let stored = [api("v1.nowhere.example.com", "nowhere.example.com", "gone")];
        let composed = compose(&RegistryInputs {
            config: &config,
            stored: &stored,
            delegate_groups: None,
            cluster: None,
        });
        let Backend::Remote(nowhere) = &entry(&composed, "v1.nowhere.example.com").backend else {
            panic!("remote")
        };
        assert!(nowhere.endpoints.is_err());
        let Backend::Remote(wardle) = &entry(&composed, "v1.wardle.example.com").backend else {
            panic!("remote")
        };
        assert!(wardle.endpoints.is_ok());
        assert!(names_wanted(&composed.registry).is_empty());
        // A name among the endpoints is wanted; IP literals are not.
        let named = [api("v1.named.example.com", "named.example.com", "api")];
        let composed = compose(&RegistryInputs {
            config: &config,
            stored: &named,
            delegate_groups: None,
            cluster: None,
        });
        let wanted = names_wanted(&composed.registry);
        assert_eq!(wanted, BTreeSet::from([("api.example".to_string(), 8443)]));
    }
}
