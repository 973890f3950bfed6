//! Services and EndpointSlices as a cluster reports them, and how `spec.service` resolves through
//! them (k8s.io/apiserver's `pkg/util/proxy/proxy.go`, `ResolveCluster` and `ResolveEndpoint`): to
//! the Service's cluster IP, as kube-apiserver does by default, or to every ready endpoint, as
//! with `--enable-aggregator-routing`. Pure: the caller feeds the objects.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Display;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde::Deserialize;

use crate::endpoint::{parse_endpoint, Endpoint};

/// The label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// Where `spec.service` of an APIService is looked up (config key `serviceResolution`). The
/// config's `services` table always wins for the Services it lists.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ServiceResolution {
    /// Only the `services` table.
    #[default]
    Config,
    /// The delegate's Services: `https://<clusterIP>:<port>` (kube-apiserver's default).
    Cluster,
    /// The delegate's EndpointSlices: every ready address of the Service
    /// (`--enable-aggregator-routing`).
    Endpoints,
}

/// Why a Service yields no endpoints: the `Available` condition it leads to (kube-aggregator's
/// `pkg/controllers/status/remote/remote_available_controller.go`).
/// Retryable when `status` is `Unknown` (`ServiceAccessError`: the next list or watch may
/// succeed); with `False` it holds until the cluster or the config changes, which re-resolves.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Unresolved {
    /// `False` or `Unknown`.
    pub status: &'static str,
    /// The condition's reason (`ServiceNotFound`, `ServicePortError`, …).
    pub reason: &'static str,
    /// The condition's message, as upstream words it.
    pub message: String,
}

impl Unresolved {
    /// `ServiceNotFound`: the Service does not exist.
    pub fn not_found(namespace: &str, name: &str) -> Unresolved {
        Unresolved {
            status: "False",
            reason: "ServiceNotFound",
            message: format!("service/{name} in \"{namespace}\" is not present"),
        }
    }

    fn access(namespace: &str, name: &str, why: &str) -> Unresolved {
        Unresolved {
            status: "Unknown",
            reason: "ServiceAccessError",
            message: format!("service/{name} in \"{namespace}\" cannot be checked due to: {why}"),
        }
    }

    /// `FailedDiscoveryCheck` for a backend that cannot be used at all (a bad CA bundle, an
    /// endpoint that is no URL); `why` is the message.
    pub(crate) fn unusable(why: impl Display) -> Unresolved {
        Unresolved {
            status: "False",
            reason: "FailedDiscoveryCheck",
            message: why.to_string(),
        }
    }

    fn failed(namespace: &str, name: &str, why: &str) -> Unresolved {
        Unresolved {
            status: "False",
            reason: "FailedDiscoveryCheck",
            message: format!("service/{name} in \"{namespace}\" cannot be routed to: {why}"),
        }
    }
}

/// What of a Service resolution needs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ServiceFacts {
    kind: String,
    cluster_ip: Option<String>,
    external_name: Option<String>,
    /// `(name, port)` of each service port.
    ports: Vec<(String, i32)>,
}

/// What of an EndpointSlice resolution needs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SliceFacts {
    service: String,
    /// `(name, port)` of each endpoint port.
    ports: Vec<(String, i32)>,
    /// Addresses of ready endpoints (IP slices only).
    ready: Vec<String>,
}

/// `(namespace, name)` of an object.
type Key = (String, String);

/// The result of resolving a Service.
type Result<T, E = Unresolved> = std::result::Result<T, E>;

/// Services and EndpointSlices of a cluster, kept as the delegate's lists and watches report them.
#[derive(Debug, Default)]
pub struct ClusterServices {
    services: HashMap<Key, ServiceFacts>,
    slices: HashMap<Key, SliceFacts>,
    /// `(namespace, service)` → names of its slices.
    slices_of: HashMap<Key, BTreeSet<String>>,
    /// Whether Services (and, in `endpoints` mode, EndpointSlices) have been listed once.
    listed: bool,
    /// Why the last list or watch failed, while it fails.
    problem: Option<String>,
}

/// The `(namespace, name)` of a Kubernetes object in JSON.
pub fn object_key(object: &serde_json::Value) -> Option<Key> {
    let meta = object.get("metadata")?;
    let name = meta.get("name")?.as_str()?;
    let namespace = meta.get("namespace").and_then(|n| n.as_str()).unwrap_or("");
    Some((namespace.to_string(), name.to_string()))
}

fn service_facts(object: &serde_json::Value) -> Option<ServiceFacts> {
    let service: Service = serde_json::from_value(object.clone()).ok()?;
    let spec = service.spec.unwrap_or_default();
    Some(ServiceFacts {
        kind: spec.type_.unwrap_or_else(|| "ClusterIP".into()),
        cluster_ip: spec.cluster_ip,
        external_name: spec.external_name,
        ports: spec
            .ports
            .unwrap_or_default()
            .into_iter()
            .map(|p| (p.name.unwrap_or_default(), p.port))
            .collect(),
    })
}

fn slice_facts(object: &serde_json::Value) -> Option<SliceFacts> {
    let slice: EndpointSlice = serde_json::from_value(object.clone()).ok()?;
    let service = slice.metadata.labels?.remove(SERVICE_NAME_LABEL)?;
    let ip = matches!(slice.address_type.as_str(), "IPv4" | "IPv6");
    let ready = slice
        .endpoints
        .into_iter()
        .filter(|_| ip)
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
        .flat_map(|e| e.addresses)
        .collect();
    let ports = slice
        .ports
        .unwrap_or_default()
        .into_iter()
        .filter_map(|p| Some((p.name.unwrap_or_default(), p.port?)))
        .collect();
    Some(SliceFacts {
        service,
        ports,
        ready,
    })
}

fn url(host: &str, port: i32) -> String {
    if host.contains(':') {
        format!("https://[{host}]:{port}")
    } else {
        format!("https://{host}:{port}")
    }
}

/// A [`url()`] as an endpoint; one that is no URL (an ExternalName that is no host name, a port
/// out of range) leaves the Service unusable.
fn endpoint(url: &str) -> Result<Endpoint> {
    parse_endpoint(url).map_err(Unresolved::unusable)
}

impl ClusterServices {
    /// Replaces every Service by a fresh list; returns whether anything changed.
    pub fn replace_services(&mut self, items: &[serde_json::Value]) -> bool {
        let next: HashMap<Key, ServiceFacts> = items
            .iter()
            .filter_map(|o| Some((object_key(o)?, service_facts(o)?)))
            .collect();
        let changed = next != self.services;
        self.services = next;
        changed
    }

    /// Replaces every EndpointSlice by a fresh list; returns whether anything changed.
    pub fn replace_slices(&mut self, items: &[serde_json::Value]) -> bool {
        let before = std::mem::take(&mut self.slices);
        self.slices_of.clear();
        for object in items {
            self.put_slice(object);
        }
        before != self.slices
    }

    /// A Service was added or modified (`deleted: false`) or deleted; returns whether anything
    /// resolution reads changed.
    pub fn service_event(&mut self, object: &serde_json::Value, deleted: bool) -> bool {
        let Some(key) = object_key(object) else {
            return false;
        };
        if deleted {
            return self.services.remove(&key).is_some();
        }
        match service_facts(object) {
            Some(facts) => self.services.insert(key, facts.clone()) != Some(facts),
            None => self.services.remove(&key).is_some(),
        }
    }

    /// An EndpointSlice was added or modified (`deleted: false`) or deleted; returns whether
    /// anything resolution reads changed.
    pub fn slice_event(&mut self, object: &serde_json::Value, deleted: bool) -> bool {
        let Some(key) = object_key(object) else {
            return false;
        };
        let before = self.remove_slice(&key);
        let after = if deleted {
            None
        } else {
            self.put_slice(object)
        };
        before != after
    }

    fn put_slice(&mut self, object: &serde_json::Value) -> Option<SliceFacts> {
        let key = object_key(object)?;
        let facts = slice_facts(object)?;
        self.slices_of
            .entry((key.0.clone(), facts.service.clone()))
            .or_default()
            .insert(key.1.clone());
        self.slices.insert(key, facts.clone());
        Some(facts)
    }

    fn remove_slice(&mut self, key: &Key) -> Option<SliceFacts> {
        let facts = self.slices.remove(key)?;
        let owner = (key.0.clone(), facts.service.clone());
        if let Some(names) = self.slices_of.get_mut(&owner) {
            names.remove(&key.1);
            if names.is_empty() {
                self.slices_of.remove(&owner);
            }
        }
        Some(facts)
    }

    /// Records that every kind watched has been listed once: resolution answers for real from
    /// then on, and keeps the last known state through later failures.
    pub fn mark_listed(&mut self) {
        self.listed = true;
    }

    /// Records why listing or watching fails (`None` once it works again); returns whether that
    /// changed.
    pub fn set_problem(&mut self, problem: Option<String>) -> bool {
        let changed = self.problem != problem;
        self.problem = problem;
        changed
    }

    /// Whether the first lists are in.
    pub fn listed(&self) -> bool {
        self.listed
    }

    /// Whether the first lists are in or have failed: the registry can be installed either way.
    pub fn settled(&self) -> bool {
        self.listed || self.problem.is_some()
    }

    /// The endpoints of `namespace/name` port `port`, or why there are none.
    pub fn resolve(
        &self,
        mode: ServiceResolution,
        namespace: &str,
        name: &str,
        port: i32,
    ) -> Result<Vec<Endpoint>> {
        if !self.listed {
            let why = self
                .problem
                .as_deref()
                .unwrap_or("the Services are not listed yet");
            return Err(Unresolved::access(namespace, name, why));
        }
        let key = (namespace.to_string(), name.to_string());
        let Some(service) = self.services.get(&key) else {
            return Err(Unresolved::not_found(namespace, name));
        };
        if service.kind == "ExternalName" {
            return match (mode, service.external_name.as_deref()) {
                (ServiceResolution::Cluster, Some(host)) if !host.is_empty() => {
                    Ok(vec![endpoint(&url(host, port))?])
                }
                _ => Err(Unresolved::failed(
                    namespace,
                    name,
                    "an ExternalName Service",
                )),
            };
        }
        let Some((port_name, _)) = service.ports.iter().find(|(_, p)| *p == port) else {
            return Err(Unresolved {
                status: "False",
                reason: "ServicePortError",
                message: format!(
                    "service/{name} in \"{namespace}\" is not listening on port {port}"
                ),
            });
        };
        match mode {
            ServiceResolution::Endpoints => self.endpoints(namespace, name, port_name),
            _ => match service.cluster_ip.as_deref() {
                Some(ip) if !ip.is_empty() && ip != "None" => Ok(vec![endpoint(&url(ip, port))?]),
                _ => Err(Unresolved::failed(namespace, name, "a headless Service")),
            },
        }
    }

    /// Every ready address of the Service's slices, on the slice port named like the service
    /// port; sorted, so an unchanged set builds identical routes.
    fn endpoints(&self, namespace: &str, name: &str, port_name: &str) -> Result<Vec<Endpoint>> {
        let owner = (namespace.to_string(), name.to_string());
        let Some(names) = self.slices_of.get(&owner) else {
            return Err(Unresolved {
                status: "False",
                reason: "EndpointsNotFound",
                message: format!("cannot find endpoints for service/{name} in \"{namespace}\""),
            });
        };
        let mut urls: Vec<String> = names
            .iter()
            .filter_map(|slice| self.slices.get(&(namespace.to_string(), slice.clone())))
            .filter_map(|slice| {
                let (_, port) = slice.ports.iter().find(|(n, _)| n == port_name)?;
                Some(slice.ready.iter().map(move |a| url(a, *port)))
            })
            .flatten()
            .collect();
        urls.sort();
        urls.dedup();
        if urls.is_empty() {
            return Err(Unresolved {
                status: "False",
                reason: "MissingEndpoints",
                message: format!("endpoints for service/{name} in \"{namespace}\" have no addresses with port name \"{port_name}\""),
            });
        }
        urls.iter().map(|u| endpoint(u)).collect()
    }
}

#[cfg(test)]
mod tests;
