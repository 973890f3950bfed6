//! Merge tests on real fixtures and on small hand-written documents.

use std::collections::{BTreeSet, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{json, Value};

use super::*;
use crate::error::SpecError;
use crate::hash::sha512_upper_hex;

const META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.";

fn fixtures_dir() -> PathBuf {
    std::env::var_os("APIAGG_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures"))
}

fn fixture(rel: &str) -> Arc<Value> {
    let path = fixtures_dir().join(rel);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "missing fixture {}: {e} (set APIAGG_FIXTURES)",
            path.display()
        )
    });
    Arc::new(
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("bad JSON in {}: {e}", path.display())),
    )
}

fn local(name: &str, doc: Arc<Value>) -> LocalSpec {
    let spec = PreparedV2::local(doc).unwrap_or_else(|e| panic!("{name}: {e}"));
    LocalSpec {
        name: name.into(),
        spec: Arc::new(spec),
    }
}

fn remote(group: &str, version: &str, gpm: i32, vp: i32, doc: Arc<Value>) -> RemoteSpec {
    let spec = PreparedV2::remote(doc, group, version)
        .unwrap_or_else(|e| panic!("{group}/{version}: {e}"));
    RemoteSpec {
        apiservice: format!("{version}.{group}"),
        group: group.into(),
        version: version.into(),
        group_priority_minimum: gpm,
        version_priority: vp,
        spec: Arc::new(spec),
    }
}

/// kube-apiserver as local; oauth/user, metrics, kubevirt subresources, CRD products and Config
/// Connector CRDs as remotes; plus the definitions-only OpenShift document (paths: null).
fn realistic_inputs() -> (Vec<LocalSpec>, Vec<RemoteSpec>) {
    let locals = vec![local(
        "k8s_internal_local_delegation_chain_0000000001",
        fixture("kubernetes/openapi-v2/swagger-v1.32.json"),
    )];
    let oauth = fixture("extension-apiservers/oauth-apiserver/openapi-v2/swagger.json");
    let kubevirt = fixture("extension-apiservers/kubevirt/swagger-v1.9.0.json");
    let mut remotes = vec![
        remote("oauth.openshift.io", "v1", 9900, 15, oauth.clone()),
        remote("user.openshift.io", "v1", 9900, 15, oauth),
        remote(
            "metrics.k8s.io",
            "v1beta1",
            100,
            100,
            fixture("extension-apiservers/metrics-server/openapi-v2-metrics-server-0.4.0.json"),
        ),
        remote("subresources.kubevirt.io", "v1", 1000, 15, kubevirt.clone()),
        remote("subresources.kubevirt.io", "v1alpha3", 1000, 10, kubevirt),
        remote(
            "config.openshift.io",
            "v1",
            1000,
            15,
            fixture("large/openshift-api-openapi.json"),
        ),
    ];
    for (file, group, version) in [
        ("cert-manager-1.5.3", "cert-manager.io", "v1"),
        ("chaos-mesh-2.0.0", "chaos-mesh.org", "v1alpha1"),
        ("dapr-1.4.1", "dapr.io", "v1alpha1"),
        ("istio-1.11.3", "networking.istio.io", "v1alpha3"),
        ("knative-0.22.0", "serving.knative.dev", "v1"),
        ("kudo-0.19.0", "kudo.dev", "v1beta1"),
    ] {
        let doc = fixture(&format!("large/crd-openapi-v2/{file}.json"));
        remotes.push(remote(group, version, 1000, 100, doc));
    }
    for file in [
        "accesscontextmanager_v1beta1_accesscontextmanagerserviceperimeter",
        "container_v1beta1_containercluster",
        "dataproc_v1beta1_dataprocworkflowtemplate",
        "dlp_v1beta1_dlpdeidentifytemplate",
        "monitoring_v1beta1_monitoringalertpolicy",
        "privateca_v1beta1_privatecacertificate",
        "storagetransfer_v1beta1_storagetransferjob",
        "vpcaccess_v1beta1_vpcaccessconnector",
    ] {
        let service = file.split('_').next().unwrap_or_default();
        let doc = fixture(&format!(
            "large/config-connector-crds/openapiv2/{file}.json"
        ));
        remotes.push(remote(
            &format!("{service}.cnrm.cloud.google.com"),
            "v1beta1",
            1000,
            100,
            doc,
        ));
    }
    (locals, remotes)
}

fn merged_value(merged: &Option<MergedV2>) -> Value {
    let merged = merged.as_ref().expect("a merged document");
    serde_json::from_slice(&merged.json).expect("merged JSON parses")
}

fn keys(v: &Value, section: &str) -> BTreeSet<String> {
    v[section]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

/// Every `$ref` in `v` (anywhere) as written.
fn all_refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                match child {
                    Value::String(s) if k == "$ref" => out.push(s.clone()),
                    _ => all_refs(child, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| all_refs(i, out)),
        _ => {}
    }
}

fn assert_refs_resolve(doc: &Value) -> usize {
    let mut refs = Vec::new();
    all_refs(doc, &mut refs);
    for r in &refs {
        let ok = if let Some(name) = r.strip_prefix("#/definitions/") {
            doc["definitions"].get(name).is_some()
        } else if let Some(name) = r.strip_prefix("#/parameters/") {
            doc["parameters"].get(name).is_some()
        } else {
            false
        };
        assert!(ok, "unresolved $ref {r}");
    }
    refs.len()
}

fn without_gvk(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.as_object_mut() {
        m.shift_remove("x-kubernetes-group-version-kind");
    }
    v
}

#[test]
fn realistic_merge_follows_the_rules() {
    let (locals, remotes) = realistic_inputs();
    let outcome = merge_v2(&locals, &remotes);
    let merged = outcome.as_ref().unwrap();
    assert_eq!(
        merged.etag,
        format!("\"{}\"", sha512_upper_hex(&merged.json))
    );
    let doc = merged_value(&outcome);
    let kube = &**locals[0].spec.doc();

    // Top-level fields come from the first document.
    assert_eq!(doc["swagger"], "2.0");
    for field in ["info", "securityDefinitions", "security"] {
        assert_eq!(doc[field], kube[field], "{field}");
    }
    let top: Vec<&String> = doc.as_object().unwrap().keys().collect();
    let kube_top: Vec<&String> = kube.as_object().unwrap().keys().collect();
    assert_eq!(top, kube_top, "top-level key order is the base document's");

    // Paths: every kube path, plus exactly each remote's `/apis/<g>/<v>/…` paths.
    let paths = keys(&doc, "paths");
    let mut expected = keys(kube, "paths");
    for r in &remotes {
        let prefix = format!("/apis/{}/{}/", r.group, r.version);
        expected.extend(
            keys(r.spec.doc(), "paths")
                .into_iter()
                .filter(|p| p.starts_with(&prefix)),
        );
    }
    assert_eq!(paths, expected);
    for present in [
        "/api/v1/namespaces/{namespace}/pods",
        "/apis/oauth.openshift.io/v1/oauthaccesstokens",
        "/apis/user.openshift.io/v1/users/{name}",
        "/apis/metrics.k8s.io/v1beta1/nodes",
        "/apis/subresources.kubevirt.io/v1/namespaces/{namespace}/virtualmachineinstances/{name}/console",
        "/apis/subresources.kubevirt.io/v1alpha3/healthz",
        "/apis/cert-manager.io/v1/certificates",
    ] {
        assert!(paths.contains(present), "missing {present}");
    }
    // kube's own `/apis/` and `/version/` stay as they are; the remotes' copies are dropped.
    for kube_only in ["/apis/", "/version/"] {
        assert_eq!(doc["paths"][kube_only], kube["paths"][kube_only]);
    }
    for dropped in [
        "/healthz",
        "/apis",
        "/openapi/v2",
        "/dump-profiler",
        "/apis/metrics.k8s.io/",
        "/apis/oauth.openshift.io/v1",
        "/apis/metrics.k8s.io/v1beta1",
        "/apis/subresources.kubevirt.io/v1",
        "/apis/kubevirt.io/v1/virtualmachines",
        "/apis/cert-manager.io/v1alpha2/certificates",
    ] {
        assert!(!paths.contains(dropped), "{dropped} should be dropped");
    }
    assert_eq!(keys(kube, "paths").len(), 478);
    assert_eq!(
        paths.len(),
        777,
        "478 kube paths + 299 from the remotes' own group-versions"
    );

    // Every $ref resolves; the kube shared parameters survive.
    assert!(assert_refs_resolve(&doc) > 5000);
    assert!(keys(kube, "parameters").is_subset(&keys(&doc, "parameters")));

    // Conflicting definitions were renamed; their documents point to the renamed copies.
    let defs = doc["definitions"].as_object().unwrap();
    // Regression anchors for this input set: 838 definitions, 35 of them renamed twins.
    assert_eq!(defs.len(), 838);
    assert_eq!(defs.keys().filter(|k| k.contains("_v")).count(), 35);
    assert!(defs.contains_key(&format!("{META}Status_v5")));
    for renamed in [
        "DeleteOptions_v2",
        "ObjectMeta_v2",
        "ListMeta_v2",
        "APIResourceList_v2",
    ] {
        let name = format!("{META}{renamed}");
        assert!(defs.contains_key(&name), "missing {name}");
    }
    assert_ne!(
        without_gvk(&defs[&format!("{META}ObjectMeta")]),
        without_gvk(&defs[&format!("{META}ObjectMeta_v2")])
    );
    let cert = &doc["definitions"]["io.cert-manager.v1.Certificate"];
    assert_eq!(
        cert["properties"]["metadata"]["$ref"],
        format!("#/definitions/{META}ObjectMeta_v2"),
        "cert-manager's ObjectMeta differs from kube's and was renamed"
    );
    // kube's own references are untouched.
    assert_eq!(
        doc["definitions"]["io.k8s.api.core.v1.Pod"]["properties"]["metadata"]["$ref"],
        format!("#/definitions/{META}ObjectMeta")
    );

    // Identical definitions are shared, never duplicated under a `_vN` name.
    for (name, value) in defs {
        if let Some((base, n)) = name.rsplit_once("_v") {
            if n.parse::<u32>().is_ok() {
                let base_value = defs
                    .get(base)
                    .expect("renamed definitions have an original");
                assert_ne!(
                    without_gvk(base_value),
                    without_gvk(value),
                    "{name} duplicates {base}"
                );
                // Twins (`_v2` vs `_v3`) may end up equal once their own references are renamed:
                // like upstream, definitions are compared before renaming.
            }
        }
    }
    assert!(defs.contains_key(&format!("{META}Time")));
    assert!(!defs.contains_key(&format!("{META}Time_v2")));

    // Vendor extensions survive on operations and definitions.
    let list_pods = &doc["paths"]["/api/v1/namespaces/{namespace}/pods"]["get"];
    assert_eq!(list_pods["x-kubernetes-action"], "list");
    assert_eq!(list_pods["x-kubernetes-group-version-kind"]["kind"], "Pod");
    assert_eq!(
        defs["io.k8s.api.core.v1.Pod"]["x-kubernetes-group-version-kind"][0]["kind"],
        "Pod"
    );

    // The definitions-only OpenShift document contributes nothing.
    assert!(!defs.contains_key("com.github.openshift.api.config.v1.ClusterVersion"));
    // Definitions only used by dropped paths are pruned (kubevirt's `kubevirt.io` CRD types are
    // used only under `/apis/kubevirt.io/…`, its subresource request bodies are kept).
    assert!(!defs.contains_key("v1.KubeVirt"));
    assert!(defs.contains_key("v1.VirtualMachineInstanceGuestAgentInfo"));
    // Kube definitions no path uses are kept (a local is not pruned).
    assert!(keys(kube, "definitions").is_subset(&keys(&doc, "definitions")));
}

#[test]
fn merge_is_deterministic_and_input_order_independent() {
    let (locals, mut remotes) = realistic_inputs();
    let a = merge_v2(&locals, &remotes).unwrap();
    remotes.reverse();
    let b = merge_v2(&locals, &remotes).unwrap();
    assert_eq!(a.etag, b.etag);
    assert_eq!(a.json, b.json);
}

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
    let prepare = |doc: Value| PreparedV2::remote(Arc::new(doc), "x.example", "v1").err();
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

/// kube-openapi's own expected result for merging its aggregator testdata (`openapi-1` and
/// `openapi-2` into `openapi-0` = `openapi.json`). Optional: skipped when the testdata is absent.
#[test]
fn matches_kube_openapi_expected_merge_of_its_testdata() {
    let dir = std::env::var_os("KUBE_OPENAPI_TESTDATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(
                "/usr/share/gocode/src/k8s.io/kube-openapi/test/integration/testdata/aggregator",
            )
        });
    if !dir.join("openapi.json").exists() {
        eprintln!(
            "skipping: kube-openapi testdata not in {} (golang-k8s-kube-openapi-dev)",
            dir.display()
        );
        return;
    }
    let read = |name: &str| -> Arc<Value> {
        let bytes = std::fs::read(dir.join(name)).unwrap();
        Arc::new(serde_json::from_slice(&bytes).unwrap())
    };
    let locals: Vec<LocalSpec> = (0..3)
        .map(|i| local(&format!("openapi-{i}"), read(&format!("openapi-{i}.json"))))
        .collect();
    let ours = merged_value(&merge_v2(&locals, &[]));
    let expected = read("openapi.json");
    assert_eq!(keys(&ours, "paths"), keys(&expected, "paths"));
    assert_eq!(keys(&ours, "definitions"), keys(&expected, "definitions"));
    for name in keys(&expected, "definitions") {
        assert_eq!(
            ours["definitions"][&name], expected["definitions"][&name],
            "{name}"
        );
    }
    for path in keys(&expected, "paths") {
        assert_eq!(ours["paths"][&path], expected["paths"][&path], "{path}");
    }
    for field in ["swagger", "info", "securityDefinitions", "security"] {
        assert_eq!(ours[field], expected[field], "{field}");
    }
    // 14 + 442 + 8 paths, two of them conflicting; the loser's now-unused definitions pruned.
    assert_eq!(
        (keys(&ours, "paths").len(), keys(&ours, "definitions").len()),
        (462, 828)
    );
    assert_refs_resolve(&ours);
}
