//! The golden discovery files (`tests/golden`, compared with apiagg's answers by
//! `discovery.rs`) checked against an independent source: the fixture documents the backends of
//! that test serve (the delegate: `kubernetes/discovery`; the oauth backend:
//! `extension-apiservers/oauth-apiserver/discovery`). What a backend says about its own
//! group-versions must reach the merged documents unchanged.

use std::path::Path;

use apiagg_tests::fixtures;
use serde_json::Value;

fn read(path: &Path) -> Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{} missing: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn golden(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("golden")
        .join(name)
}

/// The aggregated documents the two fixture-backed backends serve.
fn served_aggregated() -> Vec<Value> {
    let root = fixtures();
    vec![
        read(&root.join("kubernetes/discovery/aggregated_v2.json")),
        read(&root.join("extension-apiservers/oauth-apiserver/discovery/aggregated_v2.json")),
    ]
}

fn group<'a>(doc: &'a Value, name: &str) -> Option<&'a Value> {
    doc["items"]
        .as_array()?
        .iter()
        .find(|g| g["metadata"]["name"] == name)
}

fn version<'a>(group: &'a Value, version: &str) -> Option<&'a Value> {
    group["versions"]
        .as_array()?
        .iter()
        .find(|v| v["version"] == version)
}

#[test]
fn aggregated_golden_carries_every_served_resource_unchanged() {
    let merged = read(&golden("apis-aggregated-v2.json"));
    let mut checked = 0;
    for served in served_aggregated() {
        for g in served["items"].as_array().expect("items") {
            let name = g["metadata"]["name"].as_str().expect("group name");
            let merged_group =
                group(&merged, name).unwrap_or_else(|| panic!("group {name} missing"));
            for v in g["versions"].as_array().expect("versions") {
                let v_name = v["version"].as_str().expect("version");
                let merged_version = version(merged_group, v_name)
                    .unwrap_or_else(|| panic!("{name}/{v_name} missing"));
                assert_eq!(
                    merged_version["resources"], v["resources"],
                    "resources of {name}/{v_name} differ from what the backend serves"
                );
                assert_eq!(merged_version["freshness"], "Current", "{name}/{v_name}");
                checked += 1;
            }
        }
    }
    assert!(checked >= 30, "only {checked} group-versions compared");
}

#[test]
fn legacy_golden_lists_every_served_group_with_its_preferred_version() {
    let merged = read(&golden("apis-legacy.json"));
    let root = fixtures();
    let oauth = root.join("extension-apiservers/oauth-apiserver/discovery");
    let mut served: Vec<Value> = read(&root.join("kubernetes/discovery/apis.json"))["groups"]
        .as_array()
        .expect("groups")
        .clone();
    served.push(read(&oauth.join("apis__oauth.openshift.io.json")));
    served.push(read(&oauth.join("apis__user.openshift.io.json")));
    let groups = merged["groups"].as_array().expect("groups");
    for g in &served {
        let name = &g["name"];
        let merged_group = groups
            .iter()
            .find(|m| &m["name"] == name)
            .unwrap_or_else(|| panic!("group {name} missing"));
        let versions = |doc: &Value| -> Vec<String> {
            let mut v: Vec<String> = doc["versions"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|v| v["groupVersion"].as_str().unwrap_or("").to_string())
                .collect();
            v.sort();
            v
        };
        assert_eq!(versions(merged_group), versions(g), "versions of {name}");
        assert_eq!(
            merged_group["preferredVersion"], g["preferredVersion"],
            "preferred version of {name}"
        );
    }
}

#[test]
fn api_resources_golden_lists_the_preferred_versions_resources() {
    let table = std::fs::read_to_string(golden("api-resources.txt")).expect("api-resources.txt");
    let rows: Vec<Vec<&str>> = table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    let listed = |name: &str, api_version: &str, kind: &str| {
        rows.iter().any(|r| {
            r.first() == Some(&name) && r.contains(&api_version) && r.last() == Some(&kind)
        })
    };
    let mut checked = 0;
    for served in served_aggregated() {
        for g in served["items"].as_array().expect("items") {
            let name = g["metadata"]["name"].as_str().expect("group name");
            // kubectl lists the preferred (first) version of each group.
            let Some(preferred) = g["versions"].as_array().and_then(|v| v.first()) else {
                continue;
            };
            let gv = format!("{name}/{}", preferred["version"].as_str().expect("version"));
            for r in preferred["resources"].as_array().into_iter().flatten() {
                let resource = r["resource"].as_str().expect("resource");
                let kind = r["responseKind"]["kind"].as_str().expect("kind");
                assert!(
                    listed(resource, &gv, kind),
                    "{resource} ({gv}, {kind}) is not in api-resources.txt"
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 40, "only {checked} resources compared");
}
