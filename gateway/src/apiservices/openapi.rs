//! The OpenAPI of `apiregistration.k8s.io/v1`, which apiagg serves itself: one description of
//! the operations and of the APIService schema, rendered as a v2 spec (merged into
//! `/openapi/v2`) and as the v3 document `apis/apiregistration.k8s.io/v1`. The operations carry
//! `x-kubernetes-group-version-kind` and `fieldValidation`, which kubectl looks for before it
//! lets the server validate.

use serde_json::{json, Map, Value};

/// The v3 index key of the document.
pub const V3_KEY: &str = "apis/apiregistration.k8s.io/v1";

use super::schemas::{gvk, schemas, META, PREFIX};

/// `(path, method, action, operationId, description, body, list)`.
type Operation = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    bool,
    bool,
);

const COLLECTION: &str = "/apis/apiregistration.k8s.io/v1/apiservices";
const ITEM: &str = "/apis/apiregistration.k8s.io/v1/apiservices/{name}";
const STATUS: &str = "/apis/apiregistration.k8s.io/v1/apiservices/{name}/status";

const OPERATIONS: [Operation; 10] = [
    (
        COLLECTION,
        "get",
        "list",
        "listApiregistrationV1APIService",
        "list or watch APIServices",
        false,
        true,
    ),
    (
        COLLECTION,
        "post",
        "post",
        "createApiregistrationV1APIService",
        "create an APIService",
        true,
        false,
    ),
    (
        COLLECTION,
        "delete",
        "deletecollection",
        "deleteApiregistrationV1CollectionAPIService",
        "delete a collection of APIServices",
        false,
        false,
    ),
    (
        ITEM,
        "get",
        "get",
        "readApiregistrationV1APIService",
        "read the specified APIService",
        false,
        false,
    ),
    (
        ITEM,
        "put",
        "put",
        "replaceApiregistrationV1APIService",
        "replace the specified APIService",
        true,
        false,
    ),
    (
        ITEM,
        "patch",
        "patch",
        "patchApiregistrationV1APIService",
        "partially update the specified APIService",
        true,
        false,
    ),
    (
        ITEM,
        "delete",
        "delete",
        "deleteApiregistrationV1APIService",
        "delete an APIService",
        false,
        false,
    ),
    (
        STATUS,
        "get",
        "get",
        "readApiregistrationV1APIServiceStatus",
        "read status of the specified APIService",
        false,
        false,
    ),
    (
        STATUS,
        "put",
        "put",
        "replaceApiregistrationV1APIServiceStatus",
        "replace status of the specified APIService",
        true,
        false,
    ),
    (
        STATUS,
        "patch",
        "patch",
        "patchApiregistrationV1APIServiceStatus",
        "partially update status of the specified APIService",
        true,
        false,
    ),
];

/// Replaces `{ref:Name}` strings by `$ref` targets of the format.
fn resolve(value: &Value, base: &str) -> Value {
    match value {
        Value::String(s) if s.starts_with("{ref:") => Value::String(format!(
            "{base}{}",
            s.trim_start_matches("{ref:").trim_end_matches('}')
        )),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), resolve(v, base)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(|v| resolve(v, base)).collect()),
        other => other.clone(),
    }
}

fn query(name: &str, kind: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "type": kind, "uniqueItems": true, "description": description})
}

fn parameters(op: &Operation) -> Vec<Value> {
    let (path, method, ..) = *op;
    let mut out = Vec::new();
    if path != COLLECTION {
        out.push(json!({"name": "name", "in": "path", "required": true, "type": "string", "uniqueItems": true, "description": "name of the APIService"}));
    }
    if matches!(method, "post" | "put" | "patch") {
        out.push(query(
            "dryRun",
            "string",
            "All: process every dry-run stage without persisting.",
        ));
        out.push(query(
            "fieldManager",
            "string",
            "Name of the actor or entity making the change.",
        ));
        out.push(query(
            "fieldValidation",
            "string",
            "Ignore, Warn or Strict: how unknown or duplicate fields are handled.",
        ));
    }
    if method == "patch" {
        out.push(query(
            "force",
            "boolean",
            "Force an apply request to take over conflicting fields.",
        ));
    }
    if op.6 {
        for (name, kind, d) in [
            ("labelSelector", "string", "Select objects by their labels."),
            (
                "fieldSelector",
                "string",
                "Select objects by their fields (metadata.name).",
            ),
            (
                "limit",
                "integer",
                "Maximum number of objects in one answer.",
            ),
            ("continue", "string", "Token of the next page."),
            (
                "resourceVersion",
                "string",
                "Where a list or a watch starts.",
            ),
            (
                "timeoutSeconds",
                "integer",
                "Limit on the duration of a watch.",
            ),
            ("watch", "boolean", "Watch for changes instead of listing."),
            ("allowWatchBookmarks", "boolean", "Send BOOKMARK events."),
            (
                "sendInitialEvents",
                "boolean",
                "Start a watch with the current objects.",
            ),
        ] {
            out.push(query(name, kind, d));
        }
    }
    out
}

fn answer_kind(op: &Operation) -> &'static str {
    match op.1 {
        "get" if op.6 => "APIServiceList",
        "delete" if op.2 == "deletecollection" => "Status",
        _ => "APIService",
    }
}

/// The v2 spec (paths and definitions) of the group.
pub fn v2_spec() -> Value {
    let mut paths: Map<String, Value> = Map::new();
    for op in &OPERATIONS {
        let (path, method, action, id, description, body, _) = *op;
        let kind = answer_kind(op);
        let target = if kind == "Status" { META } else { PREFIX };
        let schema = json!({"$ref": format!("#/definitions/{target}.{kind}")});
        let mut params = parameters(op);
        if body {
            params.insert(0, json!({"name": "body", "in": "body", "required": true, "schema": if method == "patch" { json!({"type": "object"}) } else { json!({"$ref": format!("#/definitions/{PREFIX}.APIService")}) }}));
        }
        let mut operation = json!({
            "description": description, "operationId": id, "tags": ["apiregistration_v1"],
            "produces": ["application/json", "application/yaml"], "schemes": ["https"],
            "parameters": params,
            "responses": {"200": {"description": "OK", "schema": schema}, "401": {"description": "Unauthorized"}},
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": gvk("APIService"),
        });
        if method == "patch" {
            operation["consumes"] = json!([
                "application/json-patch+json",
                "application/merge-patch+json",
                "application/strategic-merge-patch+json",
                "application/apply-patch+yaml"
            ]);
        } else {
            operation["consumes"] = json!(["*/*"]);
        }
        paths.entry(path.to_string()).or_insert_with(|| json!({}))[method] = operation;
    }
    let definitions: Map<String, Value> = schemas()
        .into_iter()
        .map(|(n, s)| (n, resolve(&s, "#/definitions/")))
        .collect();
    json!({"swagger": "2.0", "info": {"title": "apiagg", "version": "v1"}, "paths": paths, "definitions": definitions})
}

/// The v3 document `apis/apiregistration.k8s.io/v1`.
pub fn v3_document() -> Value {
    let mut paths: Map<String, Value> = Map::new();
    for op in &OPERATIONS {
        let (path, method, action, id, description, body, _) = *op;
        let kind = answer_kind(op);
        let target = if kind == "Status" { META } else { PREFIX };
        let params: Vec<Value> = parameters(op)
            .into_iter()
            .map(|mut p| {
                let kind = p["type"].take();
                if let Some(map) = p.as_object_mut() {
                    map.remove("type");
                    map.remove("uniqueItems");
                    map.insert("schema".into(), json!({"type": kind}));
                }
                p
            })
            .collect();
        let mut operation = json!({
            "description": description, "operationId": id, "tags": ["apiregistration_v1"],
            "parameters": params,
            "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{target}.{kind}")}}}}},
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": gvk("APIService"),
        });
        if body {
            let types: &[&str] = if method == "patch" {
                &[
                    "application/json-patch+json",
                    "application/merge-patch+json",
                    "application/strategic-merge-patch+json",
                    "application/apply-patch+yaml",
                ]
            } else {
                &["*/*"]
            };
            let schema = if method == "patch" {
                json!({"type": "object"})
            } else {
                json!({"$ref": format!("#/components/schemas/{PREFIX}.APIService")})
            };
            let content: Map<String, Value> = types
                .iter()
                .map(|t| (t.to_string(), json!({"schema": schema.clone()})))
                .collect();
            operation["requestBody"] = json!({"required": true, "content": content});
        }
        paths.entry(path.to_string()).or_insert_with(|| json!({}))[method] = operation;
    }
    let schemas: Map<String, Value> = schemas()
        .into_iter()
        .map(|(n, s)| (n, resolve(&s, "#/components/schemas/")))
        .collect();
    json!({"openapi": "3.0.0", "info": {"title": "apiagg", "version": "v1"}, "paths": paths, "components": {"schemas": schemas}})
}
