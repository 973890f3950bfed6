//! What the API server does to an APIService on its way into storage (kube-aggregator's
//! `pkg/registry/apiservice/strategy.go`): create wipes status (a local APIService is born
//! `Available=True/Local`), update keeps the stored status, a `/status` update keeps spec and
//! metadata.

use serde_json::{json, Map, Value};

use apiagg_apis::{apply_defaults, validate, APIService, FieldError, ValidationErrors};

use crate::error::{Result, WriteError};

/// A condition as the API writes it.
pub fn condition(status: &str, reason: &str, message: &str, now: &str) -> Value {
    json!({"type": "Available", "status": status, "lastTransitionTime": now,
        "reason": reason, "message": message})
}

/// Parses a JSON body as an APIService, defaulted and validated.
pub fn decode(value: &Value) -> Result<APIService> {
    let kind = value
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("APIService");
    let api_version = value
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("apiregistration.k8s.io/v1");
    if kind != "APIService" || api_version != "apiregistration.k8s.io/v1" {
        return Err(WriteError::BadRequest(format!(
            "expected apiregistration.k8s.io/v1 APIService, got {api_version} {kind}"
        )));
    }
    let mut object: APIService = serde_json::from_value(value.clone())
        .map_err(|e| WriteError::BadRequest(format!("not a valid APIService: {e}")))?;
    apply_defaults(&mut object);
    validate(&object)?;
    Ok(object)
}

/// The fields of `body` an APIService does not have (`spec.foo`), for `fieldValidation=Strict`;
/// empty when the body does not decode at all (the write reports that instead).
pub fn unknown_fields(body: &Value) -> Vec<String> {
    let Ok(object) = serde_json::from_value::<APIService>(body.clone()) else {
        return Vec::new();
    };
    let known = to_value(&object);
    let mut out = Vec::new();
    collect_unknown(body, &known, "", &mut out);
    out
}

fn collect_unknown(body: &Value, known: &Value, path: &str, out: &mut Vec<String>) {
    match (body, known) {
        (Value::Object(b), Value::Object(k)) => {
            for (key, value) in b {
                let at = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match k.get(key) {
                    Some(inner) => collect_unknown(value, inner, &at, out),
                    // Nulls and empty values are dropped on the way, not unknown.
                    None if value.is_null() => {}
                    None => out.push(at),
                }
            }
        }
        (Value::Array(b), Value::Array(k)) => {
            for (i, (value, inner)) in b.iter().zip(k).enumerate() {
                collect_unknown(value, inner, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

fn to_value(object: &APIService) -> Value {
    let mut value = serde_json::to_value(object).unwrap_or(Value::Null);
    if let Some(map) = value.as_object_mut() {
        map.insert("apiVersion".into(), json!("apiregistration.k8s.io/v1"));
        map.insert("kind".into(), json!("APIService"));
    }
    value
}

/// `metadata` as a map (made one if it is missing). `value` is always an encoded APIService.
fn metadata(value: &mut Value) -> Option<&mut Map<String, Value>> {
    if !value.get("metadata").is_some_and(Value::is_object) {
        value.as_object_mut()?.insert("metadata".into(), json!({}));
    }
    value.get_mut("metadata")?.as_object_mut()
}

/// The object to store for a create: validated, status reset, metadata set by the server.
pub fn prepare_create(body: &Value, uid: &str, now: &str) -> Result<Value> {
    let object = decode(body)?;
    let local = object.spec.as_ref().is_none_or(|s| s.service.is_none());
    let mut value = to_value(&object);
    if let Some(meta) = metadata(&mut value) {
        for server_set in [
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ] {
            meta.remove(server_set);
        }
        meta.insert("uid".into(), json!(uid));
        meta.insert("creationTimestamp".into(), json!(now));
        meta.insert("generation".into(), json!(1));
    }
    value["status"] = if local {
        json!({"conditions": [condition("True", "Local", "Local APIServices are always available", now)]})
    } else {
        json!({})
    };
    Ok(value)
}

/// The object to store for an update of the main resource: status and server-set metadata come
/// from `old`; `generation` grows when the spec changed.
pub fn prepare_update(old: &Value, body: &Value) -> Result<Value> {
    let object = decode(body)?;
    let mut value = to_value(&object);
    let spec_changed = value.get("spec") != old.get("spec");
    value["status"] = old.get("status").cloned().unwrap_or_else(|| json!({}));
    keep_server_metadata(old, &mut value, spec_changed);
    Ok(value)
}

/// The object to store for an update of `/status`: only `status` comes from the body.
pub fn prepare_status_update(old: &Value, body: &Value) -> Result<Value> {
    for condition in body["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let status = condition["status"].as_str().unwrap_or("");
        if !matches!(status, "True" | "False" | "Unknown") {
            return Err(WriteError::Invalid(ValidationErrors {
                name: old["metadata"]["name"].as_str().unwrap_or("").to_string(),
                errors: vec![FieldError {
                    field: "status.conditions[].status".into(),
                    kind: format!("Unsupported value: {status:?}"),
                    detail: "supported values: \"False\", \"True\", \"Unknown\"".into(),
                }],
            }));
        }
    }
    let mut value = old.clone();
    value["status"] = body.get("status").cloned().unwrap_or_else(|| json!({}));
    Ok(value)
}

fn keep_server_metadata(old: &Value, value: &mut Value, spec_changed: bool) {
    let old_meta = old["metadata"].as_object().cloned().unwrap_or_default();
    let Some(meta) = metadata(value) else {
        return;
    };
    for key in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "managedFields",
    ] {
        match old_meta.get(key) {
            Some(v) => meta.insert(key.into(), v.clone()),
            None => meta.remove(key),
        };
    }
    let generation = old_meta
        .get("generation")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let generation = if spec_changed {
        generation + 1
    } else {
        generation
    };
    meta.insert("generation".into(), json!(generation));
}
