//! OpenAPI documents for the generated group, used when the fixtures bring none.
//!
//! Deliberately small: the resource's paths and two schemas (`<Kind>`, `<Kind>List`)
//! named like kube-apiserver names them (`com.example.wardle.v1alpha1.Flunder`).
//! Metadata is an inline object, so no `io.k8s.apimachinery` definition is redefined.

use bytes::Bytes;
use serde_json::{json, Map, Value};

use crate::args::Args;

/// Rendered OpenAPI v2 and v3 documents.
pub struct GeneratedOpenApi {
    pub v2: Bytes,
    pub v3_index: Bytes,
    /// Path below `/openapi/v3/` (`apis/<g>/<v>`) and its document.
    pub v3_path: String,
    pub v3: Bytes,
}

impl GeneratedOpenApi {
    pub fn new(args: &Args) -> Self {
        let (g, v, kind) = (&args.group, &args.version, &args.kind);
        let reversed: Vec<&str> = g.split('.').rev().collect();
        let def = format!("{}.{v}.{kind}", reversed.join("."));
        let list_def = format!("{def}List");
        let gvk = json!([{"group": g, "version": v, "kind": kind}]);

        let object_schema = |api_kind: &str| {
            json!({
                "type": "object",
                "description": format!("{api_kind} served by sample-apiserver."),
                "properties": {
                    "apiVersion": {"type": "string"},
                    "kind": {"type": "string"},
                    "metadata": {"type": "object"},
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                },
                "x-kubernetes-group-version-kind": [{"group": g, "version": v, "kind": api_kind}],
            })
        };
        let mut list_schema = object_schema(&format!("{kind}List"));
        list_schema["properties"]["items"] =
            json!({"type": "array", "items": {"$ref": format!("REF{def}")}});
        let schemas = [
            (def.clone(), object_schema(kind)),
            (list_def.clone(), list_schema),
        ];

        let prefix = if args.namespaced {
            format!("/apis/{g}/{v}/namespaces/{{namespace}}/{}", args.resource)
        } else {
            format!("/apis/{g}/{v}/{}", args.resource)
        };
        let op = |action: &str, verb: &str, target: &str, code: &str| {
            json!({
                "operationId": format!("{verb}{kind}"),
                "x-kubernetes-action": action,
                "x-kubernetes-group-version-kind": gvk[0],
                "responses": {code: {"description": "OK", "schema": {"$ref": format!("REF{target}")}}},
            })
        };
        let paths = json!({
            &prefix: {
                "get": op("list", "list", &list_def, "200"),
                "post": op("post", "create", &def, "201"),
            },
            format!("{prefix}/{{name}}"): {
                "get": op("get", "read", &def, "200"),
                "delete": op("delete", "delete", &def, "200"),
            },
        });
        let info = json!({"title": "sample-apiserver", "version": "v1.32.0"});

        let v2 = json!({
            "swagger": "2.0",
            "info": info,
            "paths": paths,
            "definitions": Map::from_iter(schemas.clone()),
        });
        let v2 = refs(v2, "#/definitions/");
        let v3 = json!({
            "openapi": "3.0.0",
            "info": info,
            "paths": v3_paths(paths),
            "components": {"schemas": Map::from_iter(schemas)},
        });
        let v3 = refs(v3, "#/components/schemas/");
        let v3_path = format!("apis/{g}/{v}");
        let v3_index = json!({"paths": {&v3_path: {
            "serverRelativeURL": format!("/openapi/v3/{v3_path}?hash={:016X}", fnv1a(&v3)),
        }}});
        let render = |v: &Value| Bytes::from(serde_json::to_vec(v).unwrap_or_default());
        GeneratedOpenApi {
            v2: render(&v2),
            v3_index: render(&v3_index),
            v3_path,
            v3: render(&v3),
        }
    }
}

/// v2 responses carry `schema`; v3 wraps it in `content`.
fn v3_paths(mut paths: Value) -> Value {
    for ops in paths
        .as_object_mut()
        .into_iter()
        .flat_map(|p| p.values_mut())
    {
        for op in ops.as_object_mut().into_iter().flat_map(|o| o.values_mut()) {
            for resp in op["responses"]
                .as_object_mut()
                .into_iter()
                .flat_map(|r| r.values_mut())
            {
                if let Some(schema) = resp.as_object_mut().and_then(|r| r.remove("schema")) {
                    resp["content"] = json!({"application/json": {"schema": schema}});
                }
            }
        }
    }
    paths
}

/// Replaces the `REF` placeholder at the start of every `$ref`.
fn refs(doc: Value, prefix: &str) -> Value {
    let text = serde_json::to_string(&doc).unwrap_or_default();
    let text = text.replace("\"$ref\":\"REF", &format!("\"$ref\":\"{prefix}"));
    serde_json::from_str(&text).unwrap_or(doc)
}

fn fnv1a(bytes: &Value) -> u64 {
    let text = serde_json::to_vec(bytes).unwrap_or_default();
    text.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}
