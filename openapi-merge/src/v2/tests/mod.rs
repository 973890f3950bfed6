//! Merge tests on real fixtures ([`realistic`]) and on small hand-written documents
//! ([`small`]).

/// The inputs the benchmark and the memory example load too, so all three measure and check the
/// same set.
#[path = "../../../benches/support/inputs.rs"]
mod inputs;
mod realistic;
mod small;

use std::collections::BTreeSet;

use serde_json::Value;

use super::MergedV2;
// What `inputs` expects from its includer.
use super::{LocalSpec, PreparedV2, RemoteSpec};

/// The merged document, parsed.
pub(super) fn merged_value(merged: &Option<MergedV2>) -> Value {
    let merged = merged.as_ref().expect("a merged document");
    serde_json::from_slice(&merged.json).expect("merged JSON parses")
}

/// The keys of a top-level section (`paths`, `definitions`, …).
pub(super) fn keys(v: &Value, section: &str) -> BTreeSet<String> {
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

pub(super) fn assert_refs_resolve(doc: &Value) -> usize {
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

pub(super) fn without_gvk(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.as_object_mut() {
        m.shift_remove("x-kubernetes-group-version-kind");
    }
    v
}
