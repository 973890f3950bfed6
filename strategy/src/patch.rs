//! The four patch formats kubectl sends, applied to the stored object (server-side apply as a
//! plain merge is kept for callers that want no field ownership; the API applies through
//! [`crate::apply`]).

use serde_json::{json, Value};

use crate::bounded;
use crate::error::{Result, WriteError};

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
    pub fn from_content_type(content_type: &str) -> Result<PatchKind> {
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

/// Applies a patch body to `current` (the stored object), returning the patched object; bounded
/// as `bounded` says (`TooLarge` beyond).
pub fn apply_patch(current: &Value, kind: PatchKind, body: &[u8]) -> Result<Value> {
    let bad = |e: &dyn std::fmt::Display| WriteError::BadRequest(e.to_string());
    let mut target = current.clone();
    match kind {
        PatchKind::Json => bounded::json_patch(&mut target, body)?,
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
            let applied = bounded::yaml_value(text, "")?;
            json_patch::merge(&mut target, &strip_directives(&applied));
        }
    }
    bounded::check_size(&target)?;
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
mod fuzz_regressions {
    use super::*;

    /// Found by `fuzz/fuzz_targets/apiservice_write.rs` (minimized): json-patch's undo of the
    /// applied `add` failed after the `move` failed, and it panicked.
    #[test]
    fn a_json_patch_failing_after_a_move_is_refused_not_a_panic() {
        let current = json!({"metadata": {"name": "v1.a.io"}, "spec": {"group": "a.io"}});
        let body = br#"[{"op":"add","path":"/metadata/b","value":"o"},{"op":"move","from":"/metadata","path":"/e/"}]"#;
        let result = apply_patch(&current, PatchKind::Json, body);
        assert!(
            matches!(result, Err(WriteError::BadRequest(_))),
            "{result:?}"
        );
    }
}
