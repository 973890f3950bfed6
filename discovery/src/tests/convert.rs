use serde_json::json;

use super::fixtures::{load, KUBE, OAUTH};
use crate::convert::*;
use crate::types::*;

fn aggregated_version(
    list: &APIGroupDiscoveryList,
    group: &str,
    version: &str,
) -> APIVersionDiscovery {
    list.items
        .iter()
        .find(|g| g.name() == group)
        .and_then(|g| g.versions.iter().find(|v| v.version == version))
        .cloned()
        .unwrap_or_else(|| panic!("{group}/{version} not in document"))
}

#[test]
fn oauth_legacy_lists_convert_to_the_served_aggregated_entries() {
    let aggregated: APIGroupDiscoveryList = load(&format!("{OAUTH}/aggregated_v2.json"));
    for group in ["oauth.openshift.io", "user.openshift.io"] {
        let legacy: APIResourceList = load(&format!("{OAUTH}/apis__{group}__v1.json"));
        let converted = convert_resource_list("v1", &legacy).expect("converts");
        let mut expected = aggregated_version(&aggregated, group, "v1");
        expected.freshness = None;
        assert_eq!(
            serde_json::to_value(&converted).expect("encodes"),
            serde_json::to_value(&expected).expect("encodes"),
            "{group}/v1"
        );
    }
}

#[test]
fn apiregistration_legacy_list_converts_to_kube_aggregated_entry() {
    let aggregated: APIGroupDiscoveryList = load(&format!("{KUBE}/aggregated_v2.json"));
    let legacy: APIResourceList = load(&format!("{KUBE}/apis__apiregistration.k8s.io__v1.json"));
    let mut converted = convert_resource_list("v1", &legacy).expect("converts");
    let mut expected = aggregated_version(&aggregated, "apiregistration.k8s.io", "v1");
    expected.freshness = None;
    // The two fixtures come from different k/k commits: the older legacy list lacks `watch`.
    let served = std::mem::take(&mut expected.resources[0].verbs);
    let ours = std::mem::take(&mut converted.resources[0].verbs);
    assert!(
        ours.iter().all(|v| served.contains(v)),
        "{ours:?} vs {served:?}"
    );
    assert_eq!(converted, expected);
}

fn find<'a>(v: &'a APIVersionDiscovery, name: &str) -> &'a APIResourceDiscovery {
    v.resources
        .iter()
        .find(|r| r.resource == name)
        .unwrap_or_else(|| panic!("{name} missing"))
}

fn gvk(group: &str, version: &str, kind: &str) -> Option<GroupVersionKind> {
    Some(GroupVersionKind {
        group: group.into(),
        version: version.into(),
        kind: kind.into(),
    })
}

#[test]
fn core_v1_converts_like_kube_aggregated_discovery() {
    let legacy: APIResourceList = load(&format!("{KUBE}/api__v1.json"));
    let v1 = convert_resource_list("v1", &legacy).expect("converts");
    assert_eq!(v1.version, "v1");
    assert_eq!(v1.freshness, None);
    let names: Vec<&str> = v1.resources.iter().map(|r| r.resource.as_str()).collect();
    assert_eq!(
        names,
        [
            "bindings",
            "componentstatuses",
            "configmaps",
            "endpoints",
            "events",
            "limitranges",
            "namespaces",
            "nodes",
            "persistentvolumeclaims",
            "persistentvolumes",
            "pods",
            "podtemplates",
            "replicationcontrollers",
            "resourcequotas",
            "secrets",
            "serviceaccounts",
            "services"
        ]
    );

    let pods = find(&v1, "pods");
    assert_eq!(pods.scope, Scope::Namespaced);
    assert_eq!(pods.singular_resource, "pod");
    assert_eq!(pods.short_names, ["po"]);
    assert_eq!(pods.categories, ["all"]);
    assert_eq!(pods.response_kind, gvk("", "", "Pod"));
    assert_eq!(
        pods.verbs,
        [
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch"
        ]
    );
    let subs: Vec<(&str, Vec<&str>)> = pods
        .subresources
        .iter()
        .map(|s| {
            (
                s.subresource.as_str(),
                s.verbs.iter().map(String::as_str).collect(),
            )
        })
        .collect();
    assert_eq!(
        subs,
        [
            ("attach", vec!["create", "get"]),
            ("binding", vec!["create"]),
            ("checkpoint", vec!["create"]),
            ("ephemeralcontainers", vec!["get", "patch", "update"]),
            ("eviction", vec!["create"]),
            ("exec", vec!["create", "get"]),
            ("log", vec!["get"]),
            ("portforward", vec!["create", "get"]),
            ("proxy", vec!["create", "delete", "get", "patch", "update"]),
            ("status", vec!["get", "patch", "update"]),
        ]
    );
    let sub = |name: &str| {
        pods.subresources
            .iter()
            .find(|s| s.subresource == name)
            .unwrap_or_else(|| panic!("pods/{name}"))
    };
    assert_eq!(
        sub("eviction").response_kind,
        gvk("policy", "v1", "Eviction")
    );
    assert_eq!(sub("log").response_kind, gvk("", "", "Pod"));
    assert_eq!(sub("exec").response_kind, gvk("", "", "PodExecOptions"));
    assert!(sub("exec").accepted_types.is_empty());

    let rc = find(&v1, "replicationcontrollers");
    assert_eq!(rc.short_names, ["rc"]);
    assert_eq!(rc.subresources[0].subresource, "scale");
    assert_eq!(
        rc.subresources[0].response_kind,
        gvk("autoscaling", "v1", "Scale")
    );
    let sa = find(&v1, "serviceaccounts");
    assert_eq!(
        sa.subresources[0].response_kind,
        gvk("authentication.k8s.io", "v1", "TokenRequest")
    );
    let ns = find(&v1, "namespaces");
    assert_eq!(ns.scope, Scope::Cluster);
    assert_eq!(ns.short_names, ["ns"]);
    let subs: Vec<&str> = ns
        .subresources
        .iter()
        .map(|s| s.subresource.as_str())
        .collect();
    assert_eq!(subs, ["finalize", "status"]);
    assert!(find(&v1, "bindings").subresources.is_empty());

    // The JSON shape of one converted subresource, as kube serves it.
    let log = serde_json::to_value(sub("log")).expect("encodes");
    assert_eq!(
        log,
        json!({"subresource": "log", "responseKind": {"group": "", "version": "", "kind": "Pod"}, "verbs": ["get"]})
    );
}

fn legacy(name: &str, namespaced: bool, kind: &str) -> APIResource {
    APIResource {
        name: name.into(),
        namespaced,
        kind: kind.into(),
        verbs: vec!["get".into()],
        ..APIResource::default()
    }
}

#[test]
fn orphan_subresources_get_a_synthesized_parent() {
    let list = [
        legacy("things", true, "Thing"),
        legacy("widgets/status", false, "Widget"),
        legacy("widgets/scale", false, ""),
        legacy("things/a/b", true, "Thing"),
    ];
    let out = convert_resources(&list).expect("converts");
    assert_eq!(out.len(), 2);
    let widgets = &out[1];
    assert_eq!(widgets.resource, "widgets");
    assert_eq!(widgets.scope, Scope::Cluster);
    assert_eq!(widgets.response_kind, Some(GroupVersionKind::default()));
    assert!(widgets.verbs.is_empty());
    assert_eq!(widgets.singular_resource, "");
    assert_eq!(widgets.subresources[0].response_kind, gvk("", "", "Widget"));
    assert_eq!(
        widgets.subresources[1].response_kind,
        Some(GroupVersionKind::default())
    );
    assert_eq!(out[0].subresources[0].subresource, "a/b");
    let parent = serde_json::to_value(widgets).expect("encodes");
    assert_eq!(
        parent["responseKind"],
        json!({"group": "", "version": "", "kind": ""})
    );
}

#[test]
fn scope_mismatch_is_an_error() {
    let list = [
        legacy("things", true, "Thing"),
        legacy("things/status", false, "Thing"),
    ];
    let err = convert_resources(&list).expect_err("mismatch");
    assert_eq!(
        err,
        ConvertError::ScopeMismatch {
            parent: "things".into(),
            parent_scope: Scope::Namespaced,
            subresource: "status".into(),
            subresource_scope: Scope::Cluster,
        }
    );
    assert!(err.to_string().contains("scope do not match"));
}

#[test]
fn missing_response_kinds_are_filled_when_splitting_a_document() {
    let doc: APIGroupDiscoveryList = serde_json::from_value(json!({
        "items": [{"metadata": {"name": "a.io"}, "versions": [
            {"version": "v1", "resources": [{"resource": "xs", "scope": "Cluster",
              "singularResource": "x", "verbs": ["get"],
              "subresources": [{"subresource": "status", "verbs": ["get"]}]}]},
            {"version": "v2"}]}]
    }))
    .expect("decodes");
    let split = split_group_versions(doc);
    assert_eq!(split.len(), 2);
    assert_eq!(split[0].0, "a.io");
    let r = &split[0].1.resources[0];
    assert_eq!(r.response_kind, Some(GroupVersionKind::default()));
    assert_eq!(
        r.subresources[0].response_kind,
        Some(GroupVersionKind::default())
    );
    assert_eq!(split[1].1.version, "v2");
}
