//! OpenAPI v2 documents a backend or the delegate sends, as `gateway/src/controllers/openapi/`
//! uses them: `PreparedV2::local` (the delegate's), `PreparedV2::remote` for every
//! `/apis/<group>/<version>/` the document lists (a backend's, once per APIService), then
//! `merge_order`, `merge_v2` and `render_v2` (JSON, gnostic protobuf, gzip) together with a fixed
//! delegate-like document whose definitions the input may collide with.
//!
//! Input: one JSON document.
#![no_main]

use std::sync::{Arc, OnceLock};

use apiagg_openapi_merge::{
    merge_order, render_v2, LocalSpec, OrderKey, PreparedV2, RemoteSpec, V2Inputs,
};
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};

/// A small delegate document: core paths plus the shared apimachinery definitions.
fn base() -> &'static Arc<PreparedV2> {
    static BASE: OnceLock<Arc<PreparedV2>> = OnceLock::new();
    BASE.get_or_init(|| {
        let meta = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
        let doc = json!({
            "swagger": "2.0",
            "info": {"title": "Kubernetes", "version": "v1.32.0"},
            "paths": {
                "/api/v1/namespaces": {"get": {"operationId": "listCoreV1Namespace",
                    "parameters": [{"$ref": "#/parameters/pretty-tJGM1-ng"}],
                    "responses": {"200": {"description": "OK",
                        "schema": {"$ref": "#/definitions/io.k8s.api.core.v1.Namespace"}}},
                    "x-kubernetes-group-version-kind": {"group": "", "version": "v1", "kind": "Namespace"}}},
                "/apis/metrics.k8s.io/v1beta1/nodes": {"get": {"responses": {"200": {"description": "OK",
                    "schema": {"$ref": "#/definitions/io.k8s.metrics.pkg.apis.metrics.v1beta1.NodeMetrics"}}}}}
            },
            "definitions": {
                "io.k8s.api.core.v1.Namespace": {"type": "object", "properties": {
                    "metadata": {"$ref": format!("#/definitions/{meta}")}},
                    "x-kubernetes-group-version-kind": [{"group": "", "kind": "Namespace", "version": "v1"}]},
                meta: {"type": "object", "properties": {"name": {"type": "string"}}},
                "io.k8s.metrics.pkg.apis.metrics.v1beta1.NodeMetrics": {"type": "object",
                    "properties": {"metadata": {"$ref": format!("#/definitions/{meta}")}}},
                "io.k8s.apimachinery.pkg.apis.meta.v1.Status": {"type": "object"}
            },
            "parameters": {"pretty-tJGM1-ng": {"name": "pretty", "in": "query", "type": "string", "uniqueItems": true}},
            "securityDefinitions": {"BearerToken": {"type": "apiKey", "name": "authorization", "in": "header"}},
            "security": [{"BearerToken": []}]
        });
        Arc::new(PreparedV2::local(&doc).expect("usable base document"))
    })
}

/// The group-versions the document has paths for (at most four), as its APIServices.
fn group_versions(doc: &Value) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let Some(paths) = doc.get("paths").and_then(Value::as_object) else {
        return out;
    };
    for path in paths.keys() {
        let mut parts = path.strip_prefix("/apis/").unwrap_or("").splitn(3, '/');
        if let (Some(g), Some(v), Some(_)) = (parts.next(), parts.next(), parts.next()) {
            let gv = (g.to_string(), v.to_string());
            if !out.contains(&gv) {
                out.push(gv);
                if out.len() == 4 {
                    break;
                }
            }
        }
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let Ok(doc) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let mut inputs = V2Inputs::default();
    inputs.locals.push(LocalSpec {
        name: "k8s_internal_local_delegation_chain_0000000000".into(),
        spec: Arc::clone(base()),
    });
    if let Ok(local) = PreparedV2::local(&doc) {
        inputs.locals.push(LocalSpec {
            name: "k8s_internal_local_delegation_chain_0000000001".into(),
            spec: Arc::new(local),
        });
    }
    let mut gvs = group_versions(&doc);
    gvs.push(("metrics.k8s.io".into(), "v1beta1".into()));
    for (i, (group, version)) in gvs.iter().enumerate() {
        let Ok(spec) = PreparedV2::remote(&doc, group, version) else {
            continue;
        };
        let spec = Arc::new(spec);
        // Two APIServices of the same group-version from two backends: the second loses every
        // path and keeps its definitions only where they differ.
        for copy in 0..2 {
            inputs.remotes.push(RemoteSpec {
                apiservice: format!("{version}.{group}{}", if copy == 0 { "" } else { ".b" }),
                group: group.clone(),
                version: version.clone(),
                group_priority_minimum: 1000 - 100 * i as i32,
                version_priority: 15 + copy,
                spec: Arc::clone(&spec),
            });
        }
    }
    let keys: Vec<OrderKey<'_>> = inputs
        .remotes
        .iter()
        .map(|r| OrderKey {
            apiservice: &r.apiservice,
            group: &r.group,
            version: &r.version,
            group_priority_minimum: r.group_priority_minimum,
            version_priority: r.version_priority,
        })
        .collect();
    let order = merge_order(&keys);
    assert_eq!(order.len(), keys.len());
    if let Some(served) = render_v2(&inputs) {
        // The merged document is served as JSON: it must read back.
        serde_json::from_slice::<Value>(&served.json).expect("merged JSON parses");
    }
});
