//! k8s.io/apimachinery's rules for an object's metadata (`api/validation/objectmeta.go`), as
//! kube-apiserver 1.37 applies them to an APIService: names and `generateName` by the kind's name
//! rule, `generation`, labels, annotations, owner references and finalizers; on an update, the
//! fields that may not change.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::{Map, Value};

use super::field::{invalid, required, too_long, FieldError};
use super::names::{go_json, go_quote};
use apiagg_requestinfo::{label_key_errors, label_value_errors};

/// The most bytes of annotations (keys and values) an object may carry.
const ANNOTATIONS_MAX_BYTES: usize = 256 * 1024;

/// `ValidateObjectMeta` of a cluster-scoped object whose names follow `name_rule` (the messages
/// of a name that breaks it; it judges `generateName` as a name too).
pub(super) fn object_meta(
    meta: &ObjectMeta,
    name_rule: impl Fn(&str) -> Vec<String>,
) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if let Some(prefix) = meta.generate_name.as_deref().filter(|g| !g.is_empty()) {
        for message in name_rule(prefix) {
            errors.push(invalid("metadata.generateName", go_quote(prefix), &message));
        }
    }
    match meta.name.as_deref().unwrap_or("") {
        "" => errors.push(required(
            "metadata.name",
            "name or generateName is required",
        )),
        name => {
            for message in name_rule(name) {
                errors.push(invalid("metadata.name", go_quote(name), &message));
            }
        }
    }
    if let Some(generation) = meta.generation.filter(|g| *g < 0) {
        let detail = "must be greater than or equal to 0";
        errors.push(invalid("metadata.generation", generation, detail));
    }
    labels_annotations_owners(meta, &mut errors);
    finalizers(meta, &mut errors);
    errors
}

/// `ValidateObjectMetaUpdate` after the API server has set what an update may not change
/// (generation, timestamps; a missing UID): the name, UID and deletion grace period, then the
/// labels, annotations and owner references of `new` again.
pub(super) fn object_meta_update(new: &ObjectMeta, old: &ObjectMeta) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let text = |value: &Option<String>| value.clone().unwrap_or_default();
    for (field, new, old) in [
        ("metadata.name", text(&new.name), text(&old.name)),
        ("metadata.uid", text(&new.uid), text(&old.uid)),
    ] {
        if new != old {
            errors.push(invalid(field, go_quote(&new), "field is immutable"));
        }
    }
    let (grace, old_grace) = (
        new.deletion_grace_period_seconds,
        old.deletion_grace_period_seconds,
    );
    if grace != old_grace {
        let shown = grace.map_or_else(|| "null".to_string(), |g| g.to_string());
        let field = "metadata.deletionGracePeriodSeconds";
        errors.push(invalid(field, shown, "field is immutable"));
    }
    labels_annotations_owners(new, &mut errors);
    errors
}

/// Labels (keys and values), annotations (keys, whatever their case, and their total size) and
/// owner references.
fn labels_annotations_owners(meta: &ObjectMeta, errors: &mut Vec<FieldError>) {
    for (key, value) in meta.labels.iter().flatten() {
        for message in label_key_errors(key) {
            errors.push(invalid("metadata.labels", go_quote(key), &message));
        }
        for message in label_value_errors(value) {
            errors.push(invalid("metadata.labels", go_quote(value), &message));
        }
    }
    let annotations = meta.annotations.iter().flatten();
    for key in annotations.clone().map(|(key, _)| key) {
        for message in label_key_errors(&key.to_lowercase()) {
            errors.push(invalid("metadata.annotations", go_quote(key), &message));
        }
    }
    let size: usize = annotations.map(|(k, v)| k.len() + v.len()).sum();
    if size > ANNOTATIONS_MAX_BYTES {
        let detail = format!("may not be more than {ANNOTATIONS_MAX_BYTES} bytes");
        errors.push(too_long("metadata.annotations", &detail));
    }
    owner_references(meta.owner_references.as_deref().unwrap_or_default(), errors);
}

/// Each reference's fields, then at most one controller.
fn owner_references(references: &[OwnerReference], errors: &mut Vec<FieldError>) {
    let mut controller: Option<String> = None;
    for (i, reference) in references.iter().enumerate() {
        owner_reference(reference, &format!("metadata.ownerReferences[{i}]"), errors);
        if reference.controller != Some(true) {
            continue;
        }
        let this = format!("{}/{}", reference.kind, reference.name);
        match &controller {
            None => controller = Some(this),
            Some(first) => {
                let all = Value::Array(references.iter().map(owner_json).collect());
                let detail = format!("Only one reference can have Controller set to true. Found \"true\" in references for {first} and {this}");
                errors.push(invalid("metadata.ownerReferences", go_json(&all), &detail));
            }
        }
    }
}

fn owner_reference(reference: &OwnerReference, at: &str, errors: &mut Vec<FieldError>) {
    let group_version = parse_group_version(&reference.api_version);
    let api_version = format!("{at}.apiVersion");
    if reference.api_version.is_empty() {
        errors.push(required(&api_version, "must not be empty"));
    } else if group_version.is_none_or(|(_, version)| version.is_empty()) {
        let detail = "must be <group>/<version> or <version>";
        errors.push(invalid(
            &api_version,
            go_quote(&reference.api_version),
            detail,
        ));
    }
    for (field, value) in [
        ("kind", &reference.kind),
        ("name", &reference.name),
        ("uid", &reference.uid),
    ] {
        if value.is_empty() {
            errors.push(required(&format!("{at}.{field}"), "must not be empty"));
        }
    }
    // apimachinery's `BannedOwners`: an Event owns nothing.
    if group_version == Some(("", "v1")) && reference.kind == "Event" {
        let detail = "/v1, Kind=Event is disallowed from being an owner";
        errors.push(invalid(at, go_json(&owner_json(reference)), detail));
    }
}

/// `schema.ParseGroupVersion`: `version` or `group/version` (`None`: more than one `/`).
fn parse_group_version(text: &str) -> Option<(&str, &str)> {
    match text {
        "" | "/" => Some(("", "")),
        _ => match text.matches('/').count() {
            0 => Some(("", text)),
            1 => text.split_once('/'),
            _ => None,
        },
    }
}

/// A reference as Go's JSON encoding writes it (its fields in the struct's order).
fn owner_json(reference: &OwnerReference) -> Value {
    let mut object = Map::new();
    for (key, value) in [
        ("apiVersion", &reference.api_version),
        ("kind", &reference.kind),
        ("name", &reference.name),
        ("uid", &reference.uid),
    ] {
        object.insert(key.into(), Value::String(value.clone()));
    }
    for (key, value) in [
        ("controller", reference.controller),
        ("blockOwnerDeletion", reference.block_owner_deletion),
    ] {
        if let Some(value) = value {
            object.insert(key.into(), Value::Bool(value));
        }
    }
    Value::Object(object)
}

/// Each finalizer is a label key; `orphan` and `foregroundDeletion` exclude each other.
fn finalizers(meta: &ObjectMeta, errors: &mut Vec<FieldError>) {
    let finalizers = meta.finalizers.as_deref().unwrap_or_default();
    for finalizer in finalizers {
        for message in label_key_errors(finalizer) {
            errors.push(invalid(
                "metadata.finalizers",
                go_quote(finalizer),
                &message,
            ));
        }
    }
    let has = |name: &str| finalizers.iter().any(|f| f == name);
    if has("orphan") && has("foregroundDeletion") {
        let all = Value::Array(finalizers.iter().cloned().map(Value::String).collect());
        let detail = "finalizer orphan and foregroundDeletion cannot be both set";
        errors.push(invalid("metadata.finalizers", go_json(&all), detail));
    }
}
