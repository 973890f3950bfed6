use std::sync::Arc;

use crate::merge::{merge_aggregated, GroupVersionEntry, Priority, Source};
use crate::order::*;
use crate::types::*;

fn rec<'a>(
    name: &'a str,
    group: &'a str,
    version: &'a str,
    gp: i32,
    vp: i32,
) -> ApiServiceRecord<'a> {
    ApiServiceRecord {
        name,
        group,
        version,
        group_priority_minimum: gp,
        version_priority: vp,
    }
}

fn entry(
    group: &str,
    version: &str,
    group_priority: i32,
    version_priority: i32,
) -> GroupVersionEntry {
    GroupVersionEntry::remote(
        group,
        version,
        Priority {
            group: group_priority,
            version: version_priority,
        },
        None,
        true,
    )
}

fn legacy_names(list: &APIGroupList) -> Vec<(&str, Vec<&str>)> {
    list.groups
        .iter()
        .map(|g| {
            (
                g.name.as_str(),
                g.versions.iter().map(|v| v.version.as_str()).collect(),
            )
        })
        .collect()
}

fn aggregated_names(list: &APIGroupDiscoveryList) -> Vec<(&str, Vec<&str>)> {
    list.items
        .iter()
        .map(|g| {
            (
                g.name(),
                g.versions.iter().map(|v| v.version.as_str()).collect(),
            )
        })
        .collect()
}

const SHUFFLED: [&str; 7] = [
    "foo2", "v1alpha1", "v1", "foo10", "v2alpha1", "v1beta1", "v1beta2",
];
const SORTED: [&str; 7] = [
    "v1", "v1beta2", "v1beta1", "v2alpha1", "v1alpha1", "foo10", "foo2",
];

#[test]
fn equal_priority_ties_legacy_by_apiservice_name_aggregated_by_group_name() {
    let records = [
        rec("v2.alpha", "alpha", "v2", 1000, 15),
        rec("v1.zeta", "zeta", "v1", 1000, 15),
    ];
    let legacy = legacy_group_list(&records);
    assert_eq!(
        legacy_names(&legacy),
        [
            ("apiregistration.k8s.io", vec!["v1"]),
            ("zeta", vec!["v1"]),
            ("alpha", vec!["v2"])
        ]
    );

    let merged = merge_aggregated(&[
        entry("zeta", "v1", 1000, 15),
        entry("alpha", "v2", 1000, 15),
    ]);
    assert_eq!(
        aggregated_names(&merged),
        [("alpha", vec!["v2"]), ("zeta", vec!["v1"])]
    );
}

#[test]
fn equal_version_priority_falls_back_to_kube_aware_order() {
    let names: Vec<String> = SHUFFLED.iter().map(|v| format!("{v}.x.io")).collect();
    let records: Vec<ApiServiceRecord<'_>> = SHUFFLED
        .iter()
        .zip(&names)
        .map(|(v, n)| rec(n, "x.io", v, 1000, 15))
        .collect();
    let legacy = legacy_group_list(&records);
    assert_eq!(
        legacy.groups[1]
            .versions
            .iter()
            .map(|v| v.version.as_str())
            .collect::<Vec<_>>(),
        SORTED
    );
    assert_eq!(
        legacy.groups[1]
            .preferred_version
            .as_ref()
            .map(|p| p.version.as_str()),
        Some("v1")
    );

    let entries: Vec<GroupVersionEntry> = SHUFFLED
        .iter()
        .map(|v| entry("x.io", v, 1000, 15))
        .collect();
    let merged = merge_aggregated(&entries);
    assert_eq!(aggregated_names(&merged), [("x.io", SORTED.to_vec())]);
}

#[test]
fn version_priority_beats_kube_order() {
    let records = [
        rec("v1.x.io", "x.io", "v1", 1000, 15),
        rec("v1beta1.x.io", "x.io", "v1beta1", 1000, 20),
    ];
    let legacy = legacy_group_list(&records);
    assert_eq!(legacy_names(&legacy)[1], ("x.io", vec!["v1beta1", "v1"]));
    let merged = merge_aggregated(&[
        entry("x.io", "v1", 1000, 15),
        entry("x.io", "v1beta1", 1000, 20),
    ]);
    assert_eq!(aggregated_names(&merged), [("x.io", vec!["v1beta1", "v1"])]);
}

#[test]
fn group_position_comes_from_its_highest_priority_version() {
    let records = [
        rec("v1.b.io", "b.io", "v1", 2000, 15),
        rec("v1.a.io", "a.io", "v1", 100, 15),
        rec("v2.a.io", "a.io", "v2", 3000, 15),
    ];
    assert_eq!(
        legacy_names(&legacy_group_list(&records)),
        [
            ("apiregistration.k8s.io", vec!["v1"]),
            ("a.io", vec!["v2", "v1"]),
            ("b.io", vec!["v1"])
        ]
    );
    let merged = merge_aggregated(&[
        entry("b.io", "v1", 2000, 15),
        entry("a.io", "v1", 100, 15),
        entry("a.io", "v2", 3000, 15),
    ]);
    assert_eq!(
        aggregated_names(&merged),
        [("a.io", vec!["v2", "v1"]), ("b.io", vec!["v1"])]
    );
}

#[test]
fn apiregistration_is_always_first_and_core_is_skipped() {
    let records = [
        rec("v1.", "", "v1", 18000, 1),
        rec("v1.top.io", "top.io", "v1", 20000, 15),
        rec(
            "v1.apiregistration.k8s.io",
            "apiregistration.k8s.io",
            "v1",
            18000,
            15,
        ),
    ];
    assert_eq!(
        legacy_names(&legacy_group_list(&records)),
        [
            ("apiregistration.k8s.io", vec!["v1"]),
            ("top.io", vec!["v1"])
        ]
    );

    let apireg = GroupVersionEntry {
        group: "apiregistration.k8s.io".into(),
        source: Source::Local,
        priority: Priority::default(),
        freshness: Freshness::Current,
        discovery: Arc::new(APIVersionDiscovery::empty("v1")),
    };
    let merged = merge_aggregated(&[entry("top.io", "v1", 20000, 15), apireg]);
    assert_eq!(merged.items[0].name(), "apiregistration.k8s.io");
    assert_eq!(merged.items[1].name(), "top.io");
}

#[test]
fn defaults_are_1000_and_15() {
    assert_eq!(
        Priority::default(),
        Priority {
            group: 1000,
            version: 15
        }
    );
    let defaulted = GroupVersionEntry::remote("d.io", "v1", Priority::default(), None, true);
    let merged = merge_aggregated(&[
        entry("low.io", "v1", 999, 15),
        defaulted,
        entry("high.io", "v1", 1001, 15),
    ]);
    let names: Vec<&str> = merged.items.iter().map(|g| g.name()).collect();
    assert_eq!(names, ["high.io", "d.io", "low.io"]);
}

#[test]
fn legacy_group_document() {
    let records = [
        rec("v1.x.io", "x.io", "v1", 1000, 15),
        rec("v2beta1.x.io", "x.io", "v2beta1", 1000, 15),
    ];
    let group = legacy_group(&records, "x.io").expect("group exists");
    let json = serde_json::to_value(&group).expect("encodes");
    assert_eq!(
        json,
        serde_json::json!({
            "kind": "APIGroup", "apiVersion": "v1", "name": "x.io",
            "versions": [
                {"groupVersion": "x.io/v1", "version": "v1"},
                {"groupVersion": "x.io/v2beta1", "version": "v2beta1"}
            ],
            "preferredVersion": {"groupVersion": "x.io/v1", "version": "v1"}
        })
    );
    assert!(legacy_group(&records, "nope.io").is_none());
    assert!(legacy_group(&records, "").is_none());
    let apireg = legacy_group(&records, "apiregistration.k8s.io").expect("own group");
    assert_eq!(apireg.versions.len(), 1);
}

#[test]
fn legacy_list_shape_matches_kube() {
    let list = legacy_group_list(&[rec(
        "v1beta1.metrics.k8s.io",
        "metrics.k8s.io",
        "v1beta1",
        100,
        100,
    )]);
    let json = serde_json::to_value(&list).expect("encodes");
    assert_eq!(
        json,
        serde_json::json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [
            {"name": "apiregistration.k8s.io",
             "versions": [{"groupVersion": "apiregistration.k8s.io/v1", "version": "v1"}],
             "preferredVersion": {"groupVersion": "apiregistration.k8s.io/v1", "version": "v1"}},
            {"name": "metrics.k8s.io",
             "versions": [{"groupVersion": "metrics.k8s.io/v1beta1", "version": "v1beta1"}],
             "preferredVersion": {"groupVersion": "metrics.k8s.io/v1beta1", "version": "v1beta1"}}
        ]})
    );
}
