//! What the API server does to an APIService on its way into storage (spec §1.4): create wipes
//! status (a local APIService is born `Available=True/Local`), update keeps the stored status,
//! a `/status` update keeps spec and metadata; plus the patch formats kubectl sends. Pure: the
//! caller supplies the time, the UID and the stored object.

use serde_json::{json, Map, Value};

use crate::apiservice::{self, APIService, ValidationErrors};

/// Why a write is refused; each maps to a Kubernetes Status reason. None is retryable as is.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The object breaks a validation rule (`Invalid`, 422).
    #[error(transparent)]
    Invalid(#[from] ValidationErrors),
    /// The body is not an APIService, or the patch does not apply (`BadRequest`, 400).
    #[error("{0}")]
    BadRequest(String),
    /// The patch content type is not one of the four kubectl uses (`UnsupportedMediaType`, 415).
    #[error("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json")]
    UnsupportedPatch,
}

/// A condition as the API writes it.
pub fn condition(status: &str, reason: &str, message: &str, now: &str) -> Value {
    json!({"type": "Available", "status": status, "lastTransitionTime": now,
        "reason": reason, "message": message})
}

/// Parses a JSON body as an APIService, defaulted and validated.
pub fn decode(value: &Value) -> Result<APIService, WriteError> {
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
    apiservice::apply_defaults(&mut object);
    apiservice::validate(&object)?;
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
pub fn prepare_create(body: &Value, uid: &str, now: &str) -> Result<Value, WriteError> {
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
pub fn prepare_update(old: &Value, body: &Value) -> Result<Value, WriteError> {
    let object = decode(body)?;
    let mut value = to_value(&object);
    let spec_changed = value.get("spec") != old.get("spec");
    value["status"] = old.get("status").cloned().unwrap_or_else(|| json!({}));
    keep_server_metadata(old, &mut value, spec_changed);
    Ok(value)
}

/// The object to store for an update of `/status`: only `status` comes from the body.
pub fn prepare_status_update(old: &Value, body: &Value) -> Result<Value, WriteError> {
    for condition in body["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let status = condition["status"].as_str().unwrap_or("");
        if !matches!(status, "True" | "False" | "Unknown") {
            return Err(WriteError::Invalid(ValidationErrors {
                name: old["metadata"]["name"].as_str().unwrap_or("").to_string(),
                errors: vec![apiservice::FieldError {
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

/// How a PATCH body is to be applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    /// RFC 6902 (`application/json-patch+json`).
    Json,
    /// RFC 7386 (`application/merge-patch+json`).
    Merge,
    /// kubectl's strategic merge (`application/strategic-merge-patch+json`).
    Strategic,
    /// Server-side apply (`application/apply-patch+yaml`).
    Apply,
}

impl PatchKind {
    /// The kind a `Content-Type` names.
    pub fn from_content_type(content_type: &str) -> Result<PatchKind, WriteError> {
        let base = content_type.split(';').next().unwrap_or("").trim();
        match base {
            "application/json-patch+json" => Ok(PatchKind::Json),
            "application/merge-patch+json" => Ok(PatchKind::Merge),
            "application/strategic-merge-patch+json" => Ok(PatchKind::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => Ok(PatchKind::Apply),
            _ => Err(WriteError::UnsupportedPatch),
        }
    }
}

/// Applies a patch body to `current` (the stored object), returning the patched object.
pub fn apply_patch(current: &Value, kind: PatchKind, body: &[u8]) -> Result<Value, WriteError> {
    let bad = |e: &dyn std::fmt::Display| WriteError::BadRequest(e.to_string());
    let mut target = current.clone();
    match kind {
        PatchKind::Json => {
            let patch: json_patch::Patch = serde_json::from_slice(body).map_err(|e| bad(&e))?;
            json_patch::patch(&mut target, &patch).map_err(|e| bad(&e))?;
        }
        PatchKind::Merge => {
            let patch: Value = serde_json::from_slice(body).map_err(|e| bad(&e))?;
            json_patch::merge(&mut target, &patch);
        }
        PatchKind::Strategic => {
            let patch: Value = serde_json::from_slice(body).map_err(|e| bad(&e))?;
            strategic_merge(&mut target, &patch);
        }
        PatchKind::Apply => {
            let text = std::str::from_utf8(body).map_err(|e| bad(&e))?;
            let applied: Value = serde_yaml_ng::from_str(text).map_err(|e| bad(&e))?;
            json_patch::merge(&mut target, &strip_directives(&applied));
        }
    }
    Ok(target)
}

/// A strategic merge for APIService: maps merge as in a merge patch; `status.conditions` merge
/// by `type`; `$patch`, `$retainKeys`, `$setElementOrder/…` and `$deleteFromPrimitiveList/…`
/// directives are honoured where they matter here and otherwise dropped.
fn strategic_merge(target: &mut Value, patch: &Value) {
    let Value::Object(patch_map) = patch else {
        *target = patch.clone();
        return;
    };
    if patch_map.get("$patch").and_then(Value::as_str) == Some("replace") {
        *target = strip_directives(patch);
        return;
    }
    if !target.is_object() {
        *target = json!({});
    }
    let Some(target_map) = target.as_object_mut() else {
        return;
    };
    for (key, value) in patch_map {
        if key.starts_with('$') {
            continue;
        }
        match value {
            Value::Null => {
                target_map.remove(key);
            }
            Value::Array(items) if key == "conditions" => {
                let existing = target_map.entry(key.clone()).or_insert_with(|| json!([]));
                merge_by_type(existing, items);
            }
            Value::Object(_) => {
                let entry = target_map.entry(key.clone()).or_insert(Value::Null);
                strategic_merge(entry, value);
            }
            other => {
                target_map.insert(key.clone(), strip_directives(other));
            }
        }
    }
}

fn merge_by_type(existing: &mut Value, items: &[Value]) {
    if !existing.is_array() {
        *existing = json!([]);
    }
    let Some(list) = existing.as_array_mut() else {
        return;
    };
    for item in items {
        let key = item.get("type").cloned();
        let position = list.iter().position(|e| e.get("type").cloned() == key);
        let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
        match (position, delete) {
            (Some(i), true) => {
                list.remove(i);
            }
            (Some(i), false) => strategic_merge(&mut list[i], item),
            (None, false) => list.push(strip_directives(item)),
            (None, true) => {}
        }
    }
}

fn strip_directives(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip_directives(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(strip_directives).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests;
