//! Merge rules on small hand-written documents.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use serde_json::{json, Value};

use super::inputs::{local, remote};
use super::*;
use crate::error::SpecError;
use crate::v2::*;

fn small(paths: Value, definitions: Value) -> Arc<Value> {
    Arc::new(
        json!({"swagger": "2.0", "info": {"title": "t"}, "paths": paths, "definitions": definitions}),
    )
}

fn op(def: &str) -> Value {
    json!({"get": {"responses": {"200": {"schema": {"$ref": format!("#/definitions/{def}")}}}}})
}

#[test]
fn first_document_wins_a_path_and_the_loser_keeps_only_what_its_other_paths_use() {
    let local_doc = small(
        json!({"/apis/g.example/v1/things": op("Thing")}),
        json!({"Thing": {"type": "object", "description": "local"}}),
    );
    let remote_doc = small(
        json!({
            "/apis/g.example/v1/things": op("RemoteThing"),
            "/apis/g.example/v1/other": op("Other"),
            "/apis/g.example/v1": op("Root"),
        }),
        json!({
            "RemoteThing": {"type": "object"},
            "Other": {"type": "object", "properties": {"t": {"$ref": "#/definitions/Thing"}}},
            "Thing": {"type": "object", "description": "remote"},
            "Root": {"type": "object"},
            "Unused": {"type": "string"}
        }),
    );
    let outcome = merge_v2(
        &[local("local", local_doc)],
        &[remote("g.example", "v1", 1000, 15, remote_doc)],
    );
    let doc = merged_value(&outcome);
    assert_eq!(doc["paths"]["/apis/g.example/v1/things"], op("Thing"));
    assert_eq!(
        keys(&doc, "paths"),
        BTreeSet::from([
            "/apis/g.example/v1/other".into(),
            "/apis/g.example/v1/things".into()
        ])
    );
    // RemoteThing (only the lost path) and Root (only the bare path) are pruned; Unused was never
    // used and stays; the remote's different Thing becomes Thing_v2 and Other points at it.
    assert_eq!(
        keys(&doc, "definitions"),
        BTreeSet::from([
            "Other".into(),
            "Thing".into(),
            "Thing_v2".into(),
            "Unused".into()
        ])
    );
    assert_eq!(
        doc["definitions"]["Other"]["properties"]["t"]["$ref"],
        "#/definitions/Thing_v2"
    );
    assert_eq!(doc["definitions"]["Thing"]["description"], "local");
    assert_eq!(doc["definitions"]["Thing_v2"]["description"], "remote");
    assert_refs_resolve(&doc);
}

#[test]
fn renames_count_up_and_reuse_an_equal_twin() {
    let def = |d: &str| json!({"type": "object", "description": d});
    let a = small(json!({"/a": op("Foo")}), json!({"Foo": def("a")}));
    let b = small(json!({"/b": op("Foo")}), json!({"Foo": def("b")}));
    let c = small(
        json!({"/c": op("Foo")}),
        json!({"Foo": def("c"), "Foo_v3": def("own")}),
    );
    let d = small(json!({"/d": op("Foo")}), json!({"Foo": def("b")}));
    let locals: Vec<_> = [a, b, c, d]
        .into_iter()
        .enumerate()
        .map(|(i, doc)| local(&format!("l{i}"), doc))
        .collect();
    let doc = merged_value(&merge_v2(&locals, &[]));
    assert_eq!(doc["definitions"]["Foo"], def("a"));
    assert_eq!(doc["definitions"]["Foo_v2"], def("b"));
    // c owns a Foo_v3 itself, so its Foo skips to _v4.
    assert_eq!(doc["definitions"]["Foo_v3"], def("own"));
    assert_eq!(doc["definitions"]["Foo_v4"], def("c"));
    assert_eq!(doc["paths"]["/c"], op("Foo_v4"));
    // d's Foo equals b's: reuses Foo_v2.
    assert_eq!(doc["paths"]["/d"], op("Foo_v2"));
    assert!(doc["definitions"].get("Foo_v5").is_none());
}

#[test]
fn parameters_are_shared_or_renamed_and_refs_rewritten() {
    let doc_with = |desc: &str, path: &str| {
        Arc::new(json!({
            "swagger": "2.0",
            "paths": {path: {"get": {"parameters": [{"$ref": "#/parameters/limit"}], "responses": {}}}},
            "parameters": {"limit": {"in": "query", "name": "limit", "type": "integer", "description": desc}}
        }))
    };
    let outcome = merge_v2(
        &[
            local("a", doc_with("a", "/a")),
            local("b", doc_with("b", "/b")),
            local("c", doc_with("a", "/c")),
        ],
        &[],
    );
    let doc = merged_value(&outcome);
    assert_eq!(doc["parameters"]["limit"]["description"], "a");
    assert_eq!(doc["parameters"]["limit_v2"]["description"], "b");
    assert_eq!(
        doc["paths"]["/b"]["get"]["parameters"][0]["$ref"],
        "#/parameters/limit_v2"
    );
    assert_eq!(
        doc["paths"]["/c"]["get"]["parameters"][0]["$ref"],
        "#/parameters/limit"
    );
    assert!(doc["parameters"].get("limit_v3").is_none());
}

#[test]
fn equal_definitions_union_their_gvk_lists() {
    let gvk = |g: &str| json!({"group": g, "version": "v1", "kind": "DeleteOptions"});
    let def = |gvks: Value| json!({"type": "object", "x-kubernetes-group-version-kind": gvks, "x-other": 1});
    let a = small(
        json!({"/a": op("D")}),
        json!({"D": def(json!([gvk("b.io")]))}),
    );
    let b = small(
        json!({"/b": op("D")}),
        json!({"D": def(json!([gvk("c.io"), gvk("a.io")]))}),
    );
    let doc = merged_value(&merge_v2(&[local("a", a), local("b", b)], &[]));
    assert_eq!(
        doc["definitions"]["D"]["x-kubernetes-group-version-kind"],
        json!([gvk("a.io"), gvk("b.io"), gvk("c.io")])
    );
    assert_eq!(doc["definitions"]["D"]["x-other"], 1);
    assert!(doc["definitions"].get("D_v2").is_none());
}

#[test]
fn equal_priority_groups_merge_in_apiservice_name_order() {
    let doc = |d: &str, g: &str| {
        small(
            json!({format!("/apis/{g}/x"): op("Foo")}),
            json!({"Foo": {"description": d}}),
        )
    };
    // `v1.zeta.example` sorts before `v2.alpha.example`: zeta keeps `Foo`.
    let remotes = [
        remote(
            "alpha.example",
            "v2",
            100,
            10,
            doc("alpha", "alpha.example/v2"),
        ),
        remote(
            "zeta.example",
            "v1",
            100,
            10,
            doc("zeta", "zeta.example/v1"),
        ),
    ];
    let out = merged_value(&merge_v2(&[], &remotes));
    assert_eq!(out["definitions"]["Foo"]["description"], "zeta");
    assert_eq!(out["definitions"]["Foo_v2"]["description"], "alpha");
    assert_eq!(out["info"]["title"], "t");
}

#[test]
fn same_group_merges_in_version_priority_order() {
    let doc = |v: &str| {
        small(
            json!({format!("/apis/g.example/{v}/x"): op("Foo")}),
            json!({"Foo": {"description": v}}),
        )
    };
    let remotes = [
        remote("g.example", "v1", 100, 10, doc("v1")),
        remote("g.example", "v1beta1", 100, 20, doc("v1beta1")),
        remote("g.example", "v2", 100, 10, doc("v2")),
    ];
    let out = merged_value(&merge_v2(&[], &remotes));
    assert_eq!(out["definitions"]["Foo"]["description"], "v1beta1");
    // Equal versionPriority: kube-aware order, v2 before v1.
    assert_eq!(out["definitions"]["Foo_v2"]["description"], "v2");
    assert_eq!(out["definitions"]["Foo_v3"]["description"], "v1");
}

#[test]
fn malformed_documents_are_rejected_when_prepared_and_the_rest_merges() {
    let prepare = |doc: Value| PreparedV2::remote(&doc, "x.example", "v1").err();
    let cases = [
        (json!([1, 2]), Some(SpecError::NotAnObject)),
        (json!("str"), Some(SpecError::NotAnObject)),
        (
            json!({"paths": ["x"]}),
            Some(SpecError::SectionNotObject { section: "paths" }),
        ),
        (
            json!({"paths": {}, "definitions": 3}),
            Some(SpecError::SectionNotObject {
                section: "definitions",
            }),
        ),
        (
            json!({"paths": {"/apis/x.example/v1/a": "nope"}}),
            Some(SpecError::EntryNotObject {
                section: "paths",
                name: "/apis/x.example/v1/a".into(),
            }),
        ),
        (
            json!({"paths": {}, "parameters": {"p": null}}),
            Some(SpecError::EntryNotObject {
                section: "parameters",
                name: "p".into(),
            }),
        ),
        (
            json!({"paths": {"/apis/x.example/v1/a": op("Missing")}}),
            Some(SpecError::DanglingRef {
                reference: "#/definitions/Missing".into(),
            }),
        ),
        (
            json!({
                "paths": {"/apis/x.example/v1/a": op("K")},
                "definitions": {"K": {"x-kubernetes-group-version-kind": "oops"}}
            }),
            Some(SpecError::MalformedGvk { name: "K".into() }),
        ),
        // A dangling reference only under a dropped path does not matter.
        (json!({"paths": {"/healthz": op("Missing")}}), None),
        // `paths: null` is usable: it contributes nothing (upstream skips such documents).
        (json!({"paths": null, "definitions": {"Z": {}}}), None),
        (json!({}), None),
    ];
    for (doc, expected) in cases {
        assert_eq!(prepare(doc.clone()), expected, "{doc}");
    }
    assert!(SpecError::NotAnObject
        .to_string()
        .contains("not a JSON object"));

    // The usable ones merge; the null-paths document contributes nothing.
    let good = small(
        json!({"/apis/ok.example/v1/x": op("Ok")}),
        json!({"Ok": {"type": "object"}}),
    );
    let remotes = [
        remote("ok.example", "v1", 100, 10, good),
        remote(
            "null.example",
            "v1",
            200,
            10,
            Arc::new(json!({"paths": null, "definitions": {"Z": {}}})),
        ),
    ];
    let doc = merged_value(&merge_v2(&[], &remotes));
    assert_eq!(
        keys(&doc, "paths"),
        BTreeSet::from(["/apis/ok.example/v1/x".to_string()])
    );
    assert_eq!(
        keys(&doc, "definitions"),
        BTreeSet::from(["Ok".to_string()])
    );
    // The first usable document (here the null-paths one, merged first) provides the top level.
    assert!(doc.get("swagger").is_none());
}

#[test]
fn nothing_usable_gives_no_document() {
    assert!(merge_v2(&[], &[]).is_none());
}

#[test]
fn unknown_fields_and_extensions_are_kept_verbatim() {
    let doc = Arc::new(json!({
        "swagger": "2.0",
        "info": {"title": "x", "x-custom": [1]},
        "x-top": true,
        "responses": {"R": {"description": "r"}},
        "paths": {"/a": {"x-item": 1, "get": {"x-kubernetes-action": "get", "responses": {"200": {"$ref": "#/responses/R"}}}}},
    }));
    let out = merged_value(&merge_v2(&[local("a", doc.clone())], &[]));
    assert_eq!(out, *doc);
    let seen: HashSet<&str> = out
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert!(seen.contains("x-top"));
}
