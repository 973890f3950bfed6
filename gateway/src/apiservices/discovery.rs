//! How `apiregistration.k8s.io/v1` appears in discovery: the legacy `APIResourceList` and the
//! aggregated entry apiagg publishes instead of the delegate's.

use std::sync::Arc;

use serde_json::{json, Value};

use super::GROUP;

/// The `APIResourceList` of `apiregistration.k8s.io/v1`.
pub fn resource_list() -> Value {
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "apiregistration.k8s.io/v1",
    "resources": [
        {"name": "apiservices", "singularName": "apiservice", "namespaced": false,
         "kind": "APIService", "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
         "categories": ["api-extensions"]},
        {"name": "apiservices/status", "singularName": "", "namespaced": false,
         "kind": "APIService", "verbs": ["get", "patch", "update"]}
    ]})
}

/// The aggregated discovery entry of `apiregistration.k8s.io/v1` (built once).
pub fn discovery_entry() -> Option<apiagg_discovery::GroupVersionEntry> {
    use apiagg_discovery::{
        convert_resource_list, fill_missing_response_kinds, Freshness, GroupVersionEntry, Priority,
        Source,
    };
    static ENTRY: std::sync::OnceLock<Option<GroupVersionEntry>> = std::sync::OnceLock::new();
    ENTRY
        .get_or_init(|| {
            let list: apiagg_discovery::APIResourceList =
                serde_json::from_value(resource_list()).ok()?;
            let mut version = convert_resource_list("v1", &list).ok()?;
            fill_missing_response_kinds(&mut version);
            Some(GroupVersionEntry {
                group: GROUP.into(),
                source: Source::Local,
                priority: Priority::default(),
                freshness: Freshness::Current,
                discovery: Arc::new(version),
            })
        })
        .clone()
}
