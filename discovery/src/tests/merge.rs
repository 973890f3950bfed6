use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{json, Value};

use super::fixtures::{load, KUBE, OAUTH};
use crate::convert::split_group_versions;
use crate::merge::*;
use crate::order::{legacy_group_list, ApiServiceRecord};
use crate::render::render_aggregated;
use crate::types::*;

/// Priorities that reproduce the fixture's own order (group i, version j).
fn fixture_priorities(doc: &APIGroupDiscoveryList) -> HashMap<(String, String), Priority> {
    let mut out = HashMap::new();
    for (i, g) in doc.items.iter().enumerate() {
        for (j, v) in g.versions.iter().enumerate() {
            let priority = Priority {
                group: 19000 - 10 * i as i32,
                version: 100 - j as i32,
            };
            out.insert((g.name().to_owned(), v.version.clone()), priority);
        }
    }
    out
}

const OAUTH_PRIORITY: Priority = Priority {
    group: 9900,
    version: 15,
};
const METRICS_PRIORITY: Priority = Priority {
    group: 100,
    version: 100,
};

fn scenario() -> (APIGroupDiscoveryList, Vec<GroupVersionEntry>) {
    let kube: APIGroupDiscoveryList = load(&format!("{KUBE}/aggregated_v2.json"));
    let priorities = fixture_priorities(&kube);
    let mut entries = GroupVersionEntry::from_local_document(&kube, Source::Local, |g, v| {
        priorities
            .get(&(g.to_owned(), v.to_owned()))
            .copied()
            .unwrap_or_default()
    });
    let oauth: APIGroupDiscoveryList = load(&format!("{OAUTH}/aggregated_v2.json"));
    for (group, version) in split_group_versions(oauth) {
        let name = version.version.clone();
        entries.push(GroupVersionEntry::remote(
            &group,
            &name,
            OAUTH_PRIORITY,
            Some(Arc::new(version)),
            true,
        ));
    }
    entries.push(GroupVersionEntry::remote(
        "metrics.k8s.io",
        "v1beta1",
        METRICS_PRIORITY,
        None,
        false,
    ));
    (kube, entries)
}

fn names(list: &APIGroupDiscoveryList) -> Vec<(String, Vec<String>)> {
    list.items
        .iter()
        .map(|g| {
            (
                g.name().to_owned(),
                g.versions.iter().map(|v| v.version.clone()).collect(),
            )
        })
        .collect()
}

#[test]
fn kube_local_plus_oauth_remote_plus_stale_remote() {
    let (kube, entries) = scenario();
    let merged = merge_aggregated(&entries);

    let mut expected = names(&kube);
    expected.push(("oauth.openshift.io".into(), vec!["v1".into()]));
    expected.push(("user.openshift.io".into(), vec!["v1".into()]));
    expected.push(("metrics.k8s.io".into(), vec!["v1beta1".into()]));
    assert_eq!(names(&merged), expected);

    // Local groups come out exactly as the delegate served them.
    for (ours, theirs) in merged.items.iter().zip(&kube.items) {
        assert_eq!(ours, theirs, "group {}", theirs.name());
    }

    let json = serde_json::to_value(&merged).expect("encodes");
    assert_eq!(json["kind"], "APIGroupDiscoveryList");
    assert_eq!(json["apiVersion"], APIDISCOVERY_V2);
    assert_eq!(json["metadata"], json!({}));
    let items = json["items"].as_array().expect("items");
    let oauth = &items[items.len() - 3];
    assert_eq!(oauth["metadata"], json!({"name": "oauth.openshift.io"}));
    assert_eq!(oauth["versions"][0]["freshness"], "Current");
    assert_eq!(
        oauth["versions"][0]["resources"].as_array().map(Vec::len),
        Some(6)
    );
    assert_eq!(
        items[items.len() - 1],
        json!({"metadata": {"name": "metrics.k8s.io"}, "versions": [{"version": "v1beta1", "freshness": "Stale"}]})
    );
}

#[test]
fn v2_and_v2beta1_differ_only_in_api_version() {
    let (_, entries) = scenario();
    let docs = render_aggregated(&merge_aggregated(&entries)).expect("renders");
    let mut v2: Value = serde_json::from_slice(&docs.v2.bytes).expect("v2 JSON");
    let mut beta: Value = serde_json::from_slice(&docs.v2beta1.bytes).expect("v2beta1 JSON");
    assert_eq!(v2["apiVersion"], "apidiscovery.k8s.io/v2");
    assert_eq!(beta["apiVersion"], "apidiscovery.k8s.io/v2beta1");
    v2["apiVersion"] = Value::Null;
    beta["apiVersion"] = Value::Null;
    assert_eq!(v2, beta);
    assert_eq!(docs.v2.etag, docs.v2beta1.etag);
    // The rendered bytes decode to the merged document.
    let decoded: APIGroupDiscoveryList = serde_json::from_slice(&docs.v2.bytes).expect("decodes");
    assert_eq!(decoded, merge_aggregated(&entries));
}

#[test]
fn legacy_and_aggregated_views_list_the_same_group_versions() {
    let (_, entries) = scenario();
    let merged = merge_aggregated(&entries);
    let apiservice_names: Vec<String> = entries
        .iter()
        .map(|e| format!("{}.{}", e.discovery.version, e.group))
        .collect();
    let records: Vec<ApiServiceRecord<'_>> = entries
        .iter()
        .zip(&apiservice_names)
        .map(|(e, name)| ApiServiceRecord {
            name,
            group: &e.group,
            version: &e.discovery.version,
            group_priority_minimum: e.priority.group,
            version_priority: e.priority.version,
        })
        .collect();
    let legacy = legacy_group_list(&records);
    let legacy_names: Vec<(String, Vec<String>)> = legacy
        .groups
        .iter()
        .map(|g| {
            (
                g.name.clone(),
                g.versions.iter().map(|v| v.version.clone()).collect(),
            )
        })
        .collect();
    // No priority ties here, so even the order agrees.
    assert_eq!(legacy_names, names(&merged));
}

fn version_with(name: &str, resource: &str) -> Arc<APIVersionDiscovery> {
    Arc::new(APIVersionDiscovery {
        resources: vec![APIResourceDiscovery {
            resource: resource.into(),
            ..APIResourceDiscovery::default()
        }],
        ..APIVersionDiscovery::empty(name)
    })
}

fn local(
    group: &str,
    source: Source,
    discovery: Arc<APIVersionDiscovery>,
    priority: Priority,
) -> GroupVersionEntry {
    GroupVersionEntry {
        group: group.into(),
        source,
        priority,
        freshness: Freshness::Current,
        discovery,
    }
}

#[test]
fn remote_beats_local_beats_crd_and_versions_merge_into_one_group() {
    let p = Priority::default();
    for reversed in [false, true] {
        let mut entries = vec![
            local(
                "x.io",
                Source::Crd,
                version_with("v1", "from-crd"),
                Priority {
                    group: 5000,
                    version: 1,
                },
            ),
            local("x.io", Source::Local, version_with("v1", "from-local"), p),
            GroupVersionEntry::remote(
                "x.io",
                "v1",
                p,
                Some(version_with("v1", "from-remote")),
                true,
            ),
            local("x.io", Source::Local, version_with("v2", "local-only"), p),
            local("y.io", Source::Crd, version_with("v1", "crd-y"), p),
            local("y.io", Source::Local, version_with("v1", "local-y"), p),
        ];
        if reversed {
            entries.reverse();
        }
        let merged = merge_aggregated(&entries);
        let x = &merged.items[0];
        assert_eq!(x.name(), "x.io");
        let resources: Vec<(&str, &str)> = x
            .versions
            .iter()
            .map(|v| (v.version.as_str(), v.resources[0].resource.as_str()))
            .collect();
        assert_eq!(resources, [("v2", "local-only"), ("v1", "from-remote")]);
        // The losing CRD entry's priority does not count for the group.
        assert_eq!(merged.items[1].versions[0].resources[0].resource, "local-y");
        assert_eq!(merged.items.len(), 2);
    }
}

#[test]
fn failed_fetch_keeps_cached_resources_but_marks_stale() {
    let cached = version_with("v1", "things");
    let e = GroupVersionEntry::remote("c.io", "v1", Priority::default(), Some(cached), false);
    let merged = merge_aggregated(&[e]);
    let v = &merged.items[0].versions[0];
    assert_eq!(v.freshness, Some(Freshness::Stale));
    assert_eq!(v.resources[0].resource, "things");
}

#[test]
fn empty_input_gives_an_empty_list() {
    let merged = merge_aggregated(&[]);
    let json = serde_json::to_value(&merged).expect("encodes");
    assert_eq!(
        json,
        json!({"kind": "APIGroupDiscoveryList", "apiVersion": APIDISCOVERY_V2, "metadata": {}, "items": []})
    );
}

#[test]
fn render_merged_matches_merge_then_render() {
    let (_, entries) = scenario();
    let slow = render_aggregated(&merge_aggregated(&entries)).expect("renders");
    let fast = crate::render::render_merged(&entries).expect("renders");
    assert_eq!(fast, slow);
    let empty = crate::render::render_merged(&[]).expect("renders");
    assert_eq!(
        empty,
        render_aggregated(&merge_aggregated(&[])).expect("renders")
    );
}
