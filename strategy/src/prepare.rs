//! What the API server does to an APIService on its way into storage (kube-aggregator's
//! `pkg/registry/apiservice/strategy.go`): create wipes status (a local APIService is born
//! `Available=True/Local`), update keeps the stored status, a `/status` update keeps spec and
//! metadata.

use serde_json::{json, Map, Value};

use apiagg_apis::{
    apply_defaults, go_quote, validate, validate_update, APIService, FieldError, ValidationErrors,
    GROUP_VERSION,
};
use base64::Engine;

use crate::error::{Result, WriteError};
use crate::go_base64;

/// A condition as the API writes it.
pub fn condition(status: &str, reason: &str, message: &str, now: &str) -> Value {
    json!({"type": "Available", "status": status, "lastTransitionTime": now,
        "reason": reason, "message": message})
}

/// The kind and the version of a body (`APIService` and `v1` where it names none, as
/// kube-apiserver defaults them from the URL).
fn kind_and_version(value: &Value) -> (&str, &str) {
    let text = |key: &str| value.get(key).and_then(Value::as_str).unwrap_or("");
    let kind = Some(text("kind")).filter(|k| !k.is_empty());
    let api_version = Some(text("apiVersion")).filter(|v| !v.is_empty());
    let version = api_version.map_or("v1", |v| v.rsplit_once('/').map_or(v, |(_, v)| v));
    (kind.unwrap_or("APIService"), version)
}

/// kube-apiserver's refusal of a body it cannot decode (400): `<kind> in version "<version>"
/// cannot be handled as a APIService: <why>`.
pub(crate) fn cannot_handle(value: &Value, why: &str) -> WriteError {
    let (kind, version) = kind_and_version(value);
    WriteError::BadRequest(format!(
        "{kind} in version {} cannot be handled as a APIService: {why}",
        go_quote(version)
    ))
}

/// Parses a JSON body as an APIService, defaulted, not validated. The refusals are
/// kube-apiserver's (the detail of a body of the wrong shape is serde's).
pub fn parse(value: &Value) -> Result<APIService> {
    let api_version = value
        .get("apiVersion")
        .and_then(Value::as_str)
        .filter(|v| !v.is_empty())
        .unwrap_or(GROUP_VERSION);
    let (kind, _) = kind_and_version(value);
    if kind == "APIService" && api_version == "apiregistration.k8s.io/v1beta1" {
        return Err(WriteError::BadRequest(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({GROUP_VERSION})"
        )));
    }
    if kind != "APIService" || api_version != GROUP_VERSION {
        let why = format!(
            "no kind {} is registered for version {} in scheme \"pkg/runtime/scheme.go:111\"",
            go_quote(kind),
            go_quote(api_version)
        );
        return Err(cannot_handle(value, &why));
    }
    let mut value = value.clone();
    // Go reads bytes with line breaks and loose last bits; serde's base64 does not.
    if let Some(bundle) = value.pointer_mut("/spec/caBundle") {
        if let Some(text) = bundle.as_str() {
            let bytes = go_base64::decode(text).map_err(|at| {
                let why = format!("illegal base64 data at input byte {at}");
                cannot_handle(&Value::Null, &why)
            })?;
            *bundle = json!(base64::engine::general_purpose::STANDARD.encode(bytes));
        }
    }
    let mut object: APIService =
        serde_json::from_value(value).map_err(|e| cannot_handle(&Value::Null, &e.to_string()))?;
    apply_defaults(&mut object);
    Ok(object)
}

/// Parses a JSON body as an APIService, defaulted and validated as a new object.
pub fn decode(value: &Value) -> Result<APIService> {
    let object = parse(value)?;
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
    }
    value["status"] = if local {
        json!({"conditions": [condition("True", "Local", "Local APIServices are always available", now)]})
    } else {
        json!({})
    };
    Ok(value)
}

/// The object to store for an update of the main resource: status and server-set metadata come
/// from `old` (as kube-apiserver's `BeforeUpdate` sets them before validating: generation,
/// timestamps, the UID when the body has none). APIServices have no generation of their own:
/// kube-aggregator's strategy sets none, so it stays what it was.
pub fn prepare_update(old: &Value, body: &Value) -> Result<Value> {
    let mut body = body.clone();
    if let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) {
        let old_meta = old["metadata"].as_object().cloned().unwrap_or_default();
        let mut keep = vec!["generation", "creationTimestamp", "deletionTimestamp"];
        if meta
            .get("uid")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
        {
            keep.push("uid");
        }
        for key in keep {
            match old_meta.get(key) {
                Some(v) => meta.insert(key.into(), v.clone()),
                None => meta.remove(key),
            };
        }
    }
    let object = parse(&body)?;
    let stored = serde_json::from_value(old.clone()).unwrap_or_default();
    validate_update(&object, &stored)?;
    let mut value = to_value(&object);
    value["status"] = old.get("status").cloned().unwrap_or_else(|| json!({}));
    keep_server_metadata(old, &mut value);
    Ok(value)
}

/// The object to store for an update of `/status`: only `status` comes from the body, each
/// condition's `status` one of upstream's three.
pub fn prepare_status_update(old: &Value, body: &Value) -> Result<Value> {
    let conditions = body["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten();
    let mut errors = Vec::new();
    for (i, condition) in conditions.enumerate() {
        let status = condition["status"].as_str().unwrap_or("");
        if !matches!(status, "True" | "False" | "Unknown") {
            errors.push(FieldError {
                field: format!("status.conditions[{i}].status"),
                kind: format!("Unsupported value: {}", go_quote(status)),
                detail: "supported values: \"True\", \"False\", \"Unknown\"".into(),
            });
        }
    }
    if !errors.is_empty() {
        let name = old["metadata"]["name"].as_str().unwrap_or("").to_string();
        return Err(WriteError::Invalid(ValidationErrors { name, errors }));
    }
    let mut value = old.clone();
    value["status"] = body.get("status").cloned().unwrap_or_else(|| json!({}));
    Ok(value)
}

fn keep_server_metadata(old: &Value, value: &mut Value) {
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
}
