//! The registry: an immutable snapshot of every APIService, ordered as legacy discovery orders
//! them (kube-aggregator's `pkg/apis/apiregistration/v1/helper/helpers.go`), with its backend
//! resolved and an O(1) route table keyed by group/version.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

use apiagg_apis::{builtin_priority, compare_apiservices, WatchListMode, DEFAULT_SERVICE_PORT};

use crate::cluster::{ClusterServices, ServiceResolution, Unresolved};
use crate::endpoint::{parse_endpoint, Endpoint};
use crate::file::{DelegateConfig, GatewayConfig, ServiceEntry, SourcedApiService};

/// Where an APIService came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Declared in the config (file and position).
    Config(String),
    /// Registered through apiagg's APIService API (kept in its store).
    Api,
    /// Registered automatically for a group-version the delegate serves.
    Delegate,
}

/// How to reach a remote APIService.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteBackend {
    /// `spec.service.namespace`.
    pub namespace: String,
    /// `spec.service.name`.
    pub service: String,
    /// `spec.service.port`.
    pub port: i32,
    /// TLS server name: `<service>.<namespace>.svc`.
    pub server_name: String,
    /// PEM CA bundle from `spec.caBundle` (system roots when `None`).
    pub ca_bundle: Option<Arc<[u8]>>,
    /// `spec.insecureSkipTLSVerify`.
    pub insecure_skip_tls_verify: bool,
    /// Endpoints from the `services` table or the cluster, or why there are none.
    pub endpoints: Result<Vec<Endpoint>, Unresolved>,
    /// How its streaming lists are served (the `apiagg.io/watch-list` annotation; a value it
    /// cannot take was refused by validation, and counts as the default here).
    pub watch_list: WatchListMode,
}

/// Where requests for an APIService go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// Served by the delegate (`spec.service` unset: kube-aggregator's "local" APIService).
    Delegate,
    /// Served by an extension API server.
    Remote(RemoteBackend),
}

/// One registered APIService.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiServiceEntry {
    /// `<version>.<group>`.
    pub name: String,
    /// API group (empty for the core `v1.`).
    pub group: String,
    /// API version.
    pub version: String,
    /// `spec.groupPriorityMinimum`.
    pub group_priority_minimum: i32,
    /// `spec.versionPriority`.
    pub version_priority: i32,
    /// Backend.
    pub backend: Backend,
    /// Declaration site.
    pub origin: Origin,
}

impl ApiServiceEntry {
    /// Whether the delegate serves it.
    pub fn is_delegated(&self) -> bool {
        matches!(self.backend, Backend::Delegate)
    }
}

/// A group-version the delegate serves, to be registered as a local APIService.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalGroupVersion {
    /// Group (empty for core).
    pub group: String,
    /// Version.
    pub version: String,
}

/// Immutable snapshot of every APIService.
#[derive(Debug, Default)]
pub struct Registry {
    entries: Vec<Arc<ApiServiceEntry>>,
    /// Looked up on every request: a fast hash (the keys are the registered group-versions;
    /// a caller's key can only miss or find one of them).
    routes: rustc_hash::FxHashMap<Box<str>, usize>,
}

/// Route-table key of a group-version: `"<group>/<version>"` (`"/v1"` for core).
pub fn route_key(group: &str, version: &str) -> String {
    format!("{group}/{version}")
}

fn legacy_order(a: &ApiServiceEntry, b: &ApiServiceEntry) -> Ordering {
    compare_apiservices(
        (a.group_priority_minimum, &a.name),
        (b.group_priority_minimum, &b.name),
    )
}

/// The delegate's endpoint URLs: its `endpoints`, or its `url`.
fn delegate_urls(delegate: Option<&DelegateConfig>) -> Vec<String> {
    let Some(delegate) = delegate else {
        return Vec::new();
    };
    let origin = |u: &url::Url| u.origin().ascii_serialization();
    if delegate.endpoints.is_empty() {
        vec![origin(&delegate.url)]
    } else {
        delegate.endpoints.iter().map(origin).collect()
    }
}

/// Endpoint URLs parsed; one that is no URL leaves the APIService unusable.
fn parse_all(urls: &[String]) -> Result<Vec<Endpoint>, Unresolved> {
    urls.iter()
        .map(|u| parse_endpoint(u).map_err(Unresolved::unusable))
        .collect()
}

fn count_pem_certificates(pem: &[u8]) -> usize {
    let text = String::from_utf8_lossy(pem);
    text.matches("-----BEGIN CERTIFICATE-----").count()
}

impl Registry {
    /// Builds the registry from a config plus the group-versions the delegate serves. A config
    /// APIService with the same name as a delegate group-version wins over the automatic one:
    /// pass APIServices of the API only after [`split_stored`](crate::split_stored).
    /// Services resolve through the config's `services` table only.
    pub fn build(config: &GatewayConfig, local: &[LocalGroupVersion]) -> Registry {
        Registry::build_with(config, &[], local, None)
    }

    /// [`Registry::build`], plus APIServices registered through the API (`stored`, after
    /// [`crate::ownership::split_stored`]; a name the config declares must not be among them),
    /// with Services the table does not list resolved through `cluster` as the config's
    /// `serviceResolution` says.
    pub fn build_with(
        config: &GatewayConfig,
        stored: &[SourcedApiService],
        local: &[LocalGroupVersion],
        cluster: Option<&ClusterServices>,
    ) -> Registry {
        let services: HashMap<(&str, &str, i32), &ServiceEntry> = config
            .services
            .iter()
            .map(|s| ((s.namespace.as_str(), s.name.as_str(), s.port), s))
            .collect();
        let mut entries: Vec<ApiServiceEntry> = Vec::new();
        let declared = config.api_services.iter().map(|s| (s, false));
        for (sourced, api) in declared.chain(stored.iter().map(|s| (s, true))) {
            let obj = &sourced.object;
            let name = obj.metadata.name.clone().unwrap_or_default();
            let spec = obj.spec.clone().unwrap_or_default();
            let backend = match &spec.service {
                None => Backend::Delegate,
                Some(svc) => {
                    let namespace = svc.namespace.clone().unwrap_or_default();
                    let service = svc.name.clone().unwrap_or_default();
                    let port = svc.port.unwrap_or(DEFAULT_SERVICE_PORT);
                    let ca_bundle = spec
                        .ca_bundle
                        .as_ref()
                        .filter(|b| !b.0.is_empty())
                        .map(|b| Arc::<[u8]>::from(b.0.as_slice()));
                    // A bad bundle or endpoint fails this APIService only (its condition says
                    // why), never the registry.
                    let bad_bundle = ca_bundle
                        .as_ref()
                        .is_some_and(|ca| count_pem_certificates(ca) == 0);
                    let loopback = (namespace.as_str(), service.as_str(), port)
                        == ("default", "kubernetes", DEFAULT_SERVICE_PORT);
                    let table = services.get(&(namespace.as_str(), service.as_str(), port));
                    let endpoints = match table {
                        _ if bad_bundle => Err(Unresolved::unusable(
                            "spec.caBundle: no PEM certificate found",
                        )),
                        Some(entry) => parse_all(&entry.endpoints),
                        // `default/kubernetes:443` is the API server itself (upstream's
                        // loopback resolver): the delegate.
                        None if loopback && config.delegate.is_some() => {
                            parse_all(&delegate_urls(config.delegate.as_ref()))
                        }
                        None => match (cluster, config.service_resolution) {
                            (Some(c), mode) => c.resolve(mode, &namespace, &service, port),
                            (None, ServiceResolution::Config) => {
                                Err(Unresolved::not_found(&namespace, &service))
                            }
                            // Looked up in the cluster, whose Services are not listed yet:
                            // `Unknown`, not a Service said to be missing.
                            (None, mode) => {
                                ClusterServices::default().resolve(mode, &namespace, &service, port)
                            }
                        },
                    };
                    Backend::Remote(RemoteBackend {
                        server_name: format!("{service}.{namespace}.svc"),
                        namespace,
                        service,
                        port,
                        ca_bundle,
                        insecure_skip_tls_verify: spec.insecure_skip_tls_verify.unwrap_or(false),
                        endpoints,
                        watch_list: WatchListMode::of(&obj.metadata).unwrap_or_default(),
                    })
                }
            };
            entries.push(ApiServiceEntry {
                name,
                group: spec.group.unwrap_or_default(),
                version: spec.version.unwrap_or_default(),
                group_priority_minimum: spec.group_priority_minimum,
                version_priority: spec.version_priority,
                backend,
                origin: if api {
                    Origin::Api
                } else {
                    Origin::Config(sourced.origin.clone())
                },
            });
        }
        for gv in local {
            let name = format!("{}.{}", gv.version, gv.group);
            if entries.iter().any(|e| e.name == name) {
                continue;
            }
            let (gpm, vp) = builtin_priority(&gv.group, &gv.version);
            entries.push(ApiServiceEntry {
                name,
                group: gv.group.clone(),
                version: gv.version.clone(),
                group_priority_minimum: gpm,
                version_priority: vp,
                backend: Backend::Delegate,
                origin: Origin::Delegate,
            });
        }
        entries.sort_by(legacy_order);
        let entries: Vec<Arc<ApiServiceEntry>> = entries.into_iter().map(Arc::new).collect();
        let routes = entries
            .iter()
            .enumerate()
            .map(|(i, e)| (route_key(&e.group, &e.version).into_boxed_str(), i))
            .collect();
        Registry { entries, routes }
    }

    /// Every APIService, sorted by group priority (desc) then name.
    pub fn entries(&self) -> &[Arc<ApiServiceEntry>] {
        &self.entries
    }

    /// Position of the APIService for a route key (`"<group>/<version>"`), O(1).
    pub fn index_of(&self, key: &str) -> Option<usize> {
        self.routes.get(key).copied()
    }

    /// The APIService for a route key (`"<group>/<version>"`), O(1).
    pub fn lookup(&self, key: &str) -> Option<&Arc<ApiServiceEntry>> {
        self.index_of(key).map(|i| &self.entries[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::Sources;

    fn config(yaml: &str) -> GatewayConfig {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.yaml");
        std::fs::write(&path, yaml).expect("write");
        Sources::read(&path)
            .and_then(|s| s.parse())
            .expect("valid config")
    }

    fn svc(name: &str, gpm: i32, vp: i32) -> String {
        let (version, group) = name.split_once('.').expect("name has a dot");
        format!("  - {{apiVersion: apiregistration.k8s.io/v1, kind: APIService, metadata: {{name: {name}}}, spec: {{group: {group}, version: {version}, groupPriorityMinimum: {gpm}, versionPriority: {vp}, service: {{namespace: ns, name: s}}}}}}\n")
    }

    #[test]
    fn legacy_order_ties_by_apiservice_name() {
        let yaml = format!(
            "services: [{{namespace: ns, name: s, endpoints: [\"https://127.0.0.1:1\"]}}]\napiServices:\n{}{}{}{}",
            svc("v2.alpha.io", 100, 10),
            svc("v1.zeta.io", 100, 10),
            svc("v1.top.io", 500, 10),
            svc("v1beta1.zeta.io", 100, 10),
        );
        let reg = Registry::build(&config(&yaml), &[]);
        let names: Vec<&str> = reg.entries().iter().map(|e| e.name.as_str()).collect();
        assert_eq!(
            names,
            ["v1.top.io", "v1.zeta.io", "v1beta1.zeta.io", "v2.alpha.io"]
        );
    }

    #[test]
    fn routes_and_backends() {
        let yaml = format!(
            "services: [{{namespace: ns, name: s, endpoints: [\"https://127.0.0.1:9443\", \"http://[::1]:80\"]}}]\napiServices:\n{}",
            svc("v1.a.io", 100, 10)
        );
        let reg = Registry::build(
            &config(&yaml),
            &[
                LocalGroupVersion {
                    group: String::new(),
                    version: "v1".into(),
                },
                LocalGroupVersion {
                    group: "apps".into(),
                    version: "v1".into(),
                },
                LocalGroupVersion {
                    group: "a.io".into(),
                    version: "v1".into(),
                },
            ],
        );
        assert_eq!(reg.entries().len(), 3);
        assert_eq!(reg.lookup("/v1").map(|e| e.name.as_str()), Some("v1."));
        assert_eq!(
            reg.lookup("apps/v1").map(|e| e.group_priority_minimum),
            Some(17800)
        );
        let a = reg.lookup("a.io/v1").expect("a.io");
        let Backend::Remote(remote) = &a.backend else {
            panic!("remote expected")
        };
        assert_eq!(remote.server_name, "s.ns.svc");
        let eps = remote.endpoints.as_ref().expect("service found");
        assert_eq!((eps[0].tls, eps[0].port), (true, 9443));
        assert_eq!((eps[1].host.as_str(), eps[1].tls), ("::1", false));
        assert!(reg.lookup("a.io/v2").is_none());
    }

    #[test]
    fn default_kubernetes_is_the_delegate() {
        let yaml = "delegate: {url: \"https://10.0.0.1:6443\"}\napiServices:\n  - {apiVersion: apiregistration.k8s.io/v1, kind: APIService, metadata: {name: v1.a.io}, spec: {group: a.io, version: v1, groupPriorityMinimum: 1, versionPriority: 1, insecureSkipTLSVerify: true, service: {namespace: default, name: kubernetes}}}\n";
        let reg = Registry::build(&config(yaml), &[]);
        let Backend::Remote(remote) = &reg.entries()[0].backend else {
            panic!()
        };
        let eps = remote.endpoints.as_ref().expect("the delegate");
        assert_eq!((eps[0].host.as_str(), eps[0].port), ("10.0.0.1", 6443));
    }

    #[test]
    fn missing_service_and_bad_ca() {
        let yaml = format!("apiServices:\n{}", svc("v1.a.io", 100, 10));
        let reg = Registry::build(&config(&yaml), &[]);
        let Backend::Remote(remote) = &reg.entries()[0].backend else {
            panic!()
        };
        let missing = remote.endpoints.as_ref().unwrap_err();
        assert_eq!(missing.reason, "ServiceNotFound");
        // Looked up in the cluster before its Services are listed: not known to be missing.
        let yaml = format!(
            "delegate: {{url: \"https://10.0.0.1:6443\"}}\nserviceResolution: cluster\napiServices:\n{}",
            svc("v1.a.io", 100, 10)
        );
        let reg = Registry::build(&config(&yaml), &[]);
        let Backend::Remote(remote) = &reg.entries()[0].backend else {
            panic!()
        };
        let unknown = remote.endpoints.as_ref().unwrap_err();
        assert_eq!(
            (unknown.status, unknown.reason),
            ("Unknown", "ServiceAccessError")
        );
        assert_eq!(
            unknown.message,
            "service/s in \"ns\" cannot be checked due to: the Services are not listed yet"
        );

        let yaml = "services: [{namespace: ns, name: s, endpoints: [\"https://127.0.0.1:1\"]}]\napiServices:\n  - {apiVersion: apiregistration.k8s.io/v1, kind: APIService, metadata: {name: v1.a.io}, spec: {group: a.io, version: v1, groupPriorityMinimum: 1, versionPriority: 1, caBundle: bm90IGEgY2VydA==, service: {namespace: ns, name: s}}}\n";
        let reg = Registry::build(&config(yaml), &[]);
        let Backend::Remote(remote) = &reg.entries()[0].backend else {
            panic!()
        };
        let unusable = remote.endpoints.as_ref().unwrap_err();
        assert_eq!(unusable.reason, "FailedDiscoveryCheck");
        assert_eq!(unusable.message, "spec.caBundle: no PEM certificate found");
    }
}
