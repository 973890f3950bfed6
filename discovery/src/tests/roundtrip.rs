use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use super::fixtures::{json_files, KUBE, OAUTH};
use crate::types::*;

fn round_trip<T: DeserializeOwned + Serialize>(original: &Value) -> Value {
    let typed: T = serde_json::from_value(original.clone()).expect("decodes");
    serde_json::to_value(&typed).expect("encodes")
}

#[test]
fn every_discovery_fixture_round_trips() {
    let mut checked = Vec::new();
    for dir in [KUBE, OAUTH] {
        for file in json_files(dir) {
            let raw = std::fs::read_to_string(&file).expect("readable fixture");
            let original: Value = serde_json::from_str(&raw).expect("valid JSON");
            let again = match original.get("kind").and_then(Value::as_str) {
                Some("APIGroupDiscoveryList") => round_trip::<APIGroupDiscoveryList>(&original),
                Some("APIGroupList") => round_trip::<APIGroupList>(&original),
                Some("APIGroup") => round_trip::<APIGroup>(&original),
                Some("APIResourceList") => round_trip::<APIResourceList>(&original),
                Some("APIVersions") => round_trip::<APIVersions>(&original),
                // The OpenAPI v3 index lives here too; it is not a discovery type.
                None if file.ends_with("v3-discovery.json") => continue,
                other => panic!("{}: unexpected kind {other:?}", file.display()),
            };
            assert_eq!(
                again,
                original,
                "{} changed in a round trip",
                file.display()
            );
            checked.push(file);
        }
    }
    assert_eq!(checked.len(), 11, "checked {checked:?}");
}

#[test]
fn unknown_fields_survive_and_empty_optionals_are_omitted() {
    let doc = serde_json::json!({
        "kind": "APIGroupDiscoveryList", "apiVersion": APIDISCOVERY_V2, "metadata": {},
        "items": [{
            "metadata": {"name": "x.io", "creationTimestamp": null},
            "futureField": 1,
            "versions": [{"version": "v1", "resources": [{
                "resource": "things", "scope": "Namespaced", "singularResource": "thing",
                "verbs": null, "extra": [1, 2]
            }]}]
        }]
    });
    let list: APIGroupDiscoveryList = serde_json::from_value(doc).expect("decodes");
    let again = serde_json::to_value(&list).expect("encodes");
    assert_eq!(
        again["items"][0]["metadata"]["creationTimestamp"],
        Value::Null
    );
    assert!(again["items"][0]["metadata"]
        .get("creationTimestamp")
        .is_some());
    assert_eq!(again["items"][0]["futureField"], 1);
    let r = &again["items"][0]["versions"][0]["resources"][0];
    assert_eq!(r["extra"], serde_json::json!([1, 2]));
    assert_eq!(
        r["verbs"],
        serde_json::json!([]),
        "null verbs read as empty"
    );
    assert!(r.get("responseKind").is_none());
    assert!(r.get("shortNames").is_none());
    assert!(r.get("subresources").is_none());
    assert!(again["items"][0]["versions"][0].get("freshness").is_none());
}

#[test]
fn api_versions_has_no_api_version_field() {
    let v: APIVersions =
        serde_json::from_str(r#"{"kind":"APIVersions","versions":["v1"]}"#).expect("decodes");
    let out = serde_json::to_value(&v).expect("encodes");
    assert!(out.get("apiVersion").is_none());
    assert_eq!(out["serverAddressByClientCIDRs"], serde_json::json!([]));
}

#[test]
fn garbage_is_an_error_not_a_panic() {
    for bad in [
        "",
        "[]",
        "{\"items\": 3}",
        "{\"items\":[{\"versions\":[{\"freshness\":\"Odd\"}]}]}",
    ] {
        assert!(
            serde_json::from_str::<APIGroupDiscoveryList>(bad).is_err(),
            "{bad}"
        );
    }
}
