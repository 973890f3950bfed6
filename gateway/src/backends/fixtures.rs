//! Route tables for unit tests (the controllers' and the request path's), built from a config
//! file's text the way the registry controller builds them. Endpoints are IP literals: nothing resolves, nothing
//! connects.

use std::sync::Arc;

use apiagg_config::{LocalGroupVersion, Registry, Sources};

use super::{build_delegate, build_table, HealthBook, Names, RouteTable};
use apiagg_observe::Metrics;

/// A delegate, two backend Services and an APIService file: `wardle` serves two versions,
/// `flunder` one, `nowhere` is not in the `services` table.
pub const CONFIG: &str = "delegate: {url: \"https://10.0.0.9:6443\", insecureSkipTLSVerify: true}\n\
services:\n\
\x20 - {namespace: test, name: wardle, port: 443, endpoints: [\"https://10.0.0.1:443\", \"https://10.0.0.2:443\"]}\n\
\x20 - {namespace: test, name: flunder, port: 443, endpoints: [\"https://10.0.0.3:443\"]}\n\
apiServices:\n\
\x20 - {apiVersion: apiregistration.k8s.io/v1, kind: APIService, metadata: {name: v1.wardle.example.com}, spec: {group: wardle.example.com, version: v1, groupPriorityMinimum: 2000, versionPriority: 15, insecureSkipTLSVerify: true, service: {namespace: test, name: wardle, port: 443}}}\n\
\x20 - {apiVersion: apiregistration.k8s.io/v1, kind: APIService, metadata: {name: v1.flunder.example.com}, spec: {group: flunder.example.com, version: v1, groupPriorityMinimum: 1500, versionPriority: 15, insecureSkipTLSVerify: true, service: {namespace: test, name: flunder, port: 443}}}\n\
\x20 - {apiVersion: apiregistration.k8s.io/v1, kind: APIService, metadata: {name: v1beta1.wardle.example.com}, spec: {group: wardle.example.com, version: v1beta1, groupPriorityMinimum: 1000, versionPriority: 10, insecureSkipTLSVerify: true, service: {namespace: test, name: wardle, port: 443}}}\n\
\x20 - {apiVersion: apiregistration.k8s.io/v1, kind: APIService, metadata: {name: v1.nowhere.example.com}, spec: {group: nowhere.example.com, version: v1, groupPriorityMinimum: 900, versionPriority: 15, insecureSkipTLSVerify: true, service: {namespace: test, name: nowhere, port: 443}}}\n";

/// The route table of `yaml` with local APIServices for `delegate_groups` (`(group, version)`).
pub fn table(yaml: &str, delegate_groups: &[(&str, &str)]) -> RouteTable {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("apiagg.yaml");
    std::fs::write(&path, yaml).expect("write");
    let config = Sources::read(&path)
        .and_then(|s| s.parse())
        .expect("config");
    let groups: Vec<LocalGroupVersion> = delegate_groups
        .iter()
        .map(|(group, version)| LocalGroupVersion {
            group: group.to_string(),
            version: version.to_string(),
        })
        .collect();
    let registry = Registry::build(&config, &groups);
    let (book, names) = (HealthBook::default(), Names::default());
    let delegate = config.delegate.as_ref().map(|d| {
        Arc::new(build_delegate(d, &Default::default(), &book, &names).expect("delegate"))
    });
    let metrics = Metrics::new().expect("metrics");
    build_table(Arc::new(registry), delegate, None, &book, &metrics, &names).expect("table")
}

/// The index of the APIService `name` in `routes`.
pub fn index(routes: &RouteTable, name: &str) -> usize {
    routes
        .registry
        .entries()
        .iter()
        .position(|e| e.name == name)
        .unwrap_or_else(|| panic!("{name} is not registered"))
}
