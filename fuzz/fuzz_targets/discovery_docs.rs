//! Discovery documents a backend or the delegate sends, through what the gateway does with them
//! (`gateway/src/controllers/discovery.rs`, `autoregister.rs`, `apiservices/discovery.rs`):
//!
//! * aggregated `APIGroupDiscoveryList` (v2, v2beta1): `split_group_versions` as a backend's
//!   answer, `GroupVersionEntry::from_local_document` as the delegate's, `merge_aggregated`,
//!   `render_merged`, `render_aggregated`;
//! * legacy `APIResourceList`: `convert_resource_list` into a remote entry, then the merge;
//! * legacy `APIGroupList`, `APIGroup`, `APIVersions`: decoded and rendered, their group-versions
//!   fed to the registry as the delegate's (autoregister) and to the legacy `/apis` ordering.
//!
//! Input: one JSON document; every type is tried.
#![no_main]

use std::sync::{Arc, OnceLock};

use apiagg_config::{GatewayConfig, LocalGroupVersion, Registry};
use apiagg_discovery::{
    convert_resource_list, fill_missing_response_kinds, legacy_group, legacy_group_list,
    merge_aggregated, render_aggregated, render_legacy, render_merged, split_group_versions,
    APIGroup, APIGroupDiscoveryList, APIGroupList, APIResourceList, APIVersionDiscovery,
    APIVersions, ApiServiceRecord, GroupVersionEntry, Priority, Source,
};
use libfuzzer_sys::fuzz_target;

/// A priority that depends on the names, so the ordering code sees differences.
fn priority_of(group: &str, version: &str) -> Priority {
    Priority {
        group: 100 * (group.len() % 30) as i32,
        version: (version.len() % 20) as i32,
    }
}

fn merge_and_render(entries: &[GroupVersionEntry]) {
    let merged = merge_aggregated(entries);
    let _ = render_aggregated(&merged);
    if let Ok(docs) = render_merged(entries) {
        // What is published must read back as a discovery list.
        let _ = serde_json::from_slice::<APIGroupDiscoveryList>(&docs.v2.bytes);
        let _ = docs.v2beta1.not_modified(Some(&docs.v2.etag));
    }
}

/// The config of an empty config file (built by the loader: the struct grows fields).
fn empty_config() -> &'static GatewayConfig {
    static CONFIG: OnceLock<GatewayConfig> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temporary folder");
        let path = dir.path().join("apiagg.yaml");
        std::fs::write(&path, "").expect("write config");
        GatewayConfig::load(&path).expect("an empty config loads")
    })
}

/// The delegate's group-versions into the registry (autoregister) and the legacy documents.
fn group_versions(gvs: &[(String, String)]) {
    let config = empty_config();
    let local: Vec<LocalGroupVersion> = gvs
        .iter()
        .map(|(group, version)| LocalGroupVersion {
            group: group.clone(),
            version: version.clone(),
        })
        .collect();
    let _ = Registry::build(config, &local);
    let names: Vec<String> = gvs.iter().map(|(g, v)| format!("{v}.{g}")).collect();
    let records: Vec<ApiServiceRecord<'_>> = gvs
        .iter()
        .zip(&names)
        .map(|((group, version), name)| {
            let p = priority_of(group, version);
            ApiServiceRecord {
                name,
                group,
                version,
                group_priority_minimum: p.group,
                version_priority: p.version,
            }
        })
        .collect();
    let _ = render_legacy(&legacy_group_list(&records));
    for (group, _) in gvs.iter().take(8) {
        if let Some(doc) = legacy_group(&records, group) {
            let _ = render_legacy(&doc);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    // Aggregated: as a backend's answer and as the delegate's.
    if let Ok(list) = serde_json::from_slice::<APIGroupDiscoveryList>(data) {
        let _ = render_aggregated(&list);
        let mut entries = GroupVersionEntry::from_local_document(&list, Source::Local, priority_of);
        for (group, version) in split_group_versions(list) {
            let p = priority_of(&group, &version.version);
            let ok = group.len() % 2 == 0;
            let name = version.version.clone();
            entries.push(GroupVersionEntry::remote(
                &group,
                &name,
                p,
                Some(Arc::new(version)),
                ok,
            ));
        }
        merge_and_render(&entries);
    }

    // Legacy group-version document.
    if let Ok(list) = serde_json::from_slice::<APIResourceList>(data) {
        let _ = render_legacy(&list);
        let (group, version) = list
            .group_version
            .split_once('/')
            .unwrap_or(("", list.group_version.as_str()));
        if let Ok(mut doc) = convert_resource_list(version, &list) {
            fill_missing_response_kinds(&mut doc);
            let entries = [
                GroupVersionEntry::remote(
                    group,
                    version,
                    priority_of(group, version),
                    Some(Arc::new(doc)),
                    true,
                ),
                GroupVersionEntry::remote(group, "v1", Priority::default(), None, false),
                GroupVersionEntry::remote(
                    group,
                    version,
                    Priority::default(),
                    Some(Arc::new(APIVersionDiscovery::empty(version))),
                    true,
                ),
            ];
            merge_and_render(&entries);
        }
    }

    // Legacy /apis, /apis/<group>, /api.
    if let Ok(list) = serde_json::from_slice::<APIGroupList>(data) {
        let _ = render_legacy(&list);
        let gvs: Vec<(String, String)> = list
            .groups
            .iter()
            .flat_map(|g| {
                g.versions
                    .iter()
                    .map(|v| (g.name.clone(), v.version.clone()))
            })
            .collect();
        group_versions(&gvs);
    }
    if let Ok(group) = serde_json::from_slice::<APIGroup>(data) {
        let _ = render_legacy(&group);
        let gvs: Vec<(String, String)> = group
            .versions
            .iter()
            .map(|v| (group.name.clone(), v.version.clone()))
            .collect();
        group_versions(&gvs);
    }
    if let Ok(versions) = serde_json::from_slice::<APIVersions>(data) {
        let _ = render_legacy(&versions);
        let gvs: Vec<(String, String)> = versions
            .versions
            .iter()
            .map(|v| (String::new(), v.clone()))
            .collect();
        group_versions(&gvs);
    }
});
