//! The SubjectAccessReview a webhook authorizer is asked (authorization.k8s.io/v1 or v1beta1),
//! as k8s.io/apiserver's webhook authorizer builds it, the cache key of its answer, and the
//! reading of that answer ([`read_status`]).
//!
//! The spec is written in Go's field order with `omitempty` as upstream: `resourceAttributes`
//! (`namespace`, `verb`, `group`, `version`, `resource`, `subresource`, `name`, `fieldSelector`,
//! `labelSelector`) or `nonResourceAttributes` (`path`, `verb`), then `user`, `groups`, `extra`
//! (keys sorted, as Go writes a map) and `uid`. Selectors carry `requirements` only (upstream
//! never sends `rawSelector`); a requirement's `values` is left out when empty. v1beta1 differs
//! only in its `apiVersion` and in naming the groups field `group`; it carries the selectors too.

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::attributes::{Attributes, Requirement, Subject};

mod answer;

pub use self::answer::{read_status, AnswerError, ConditionalAnswer, ReviewAnswer};

/// The version of the SubjectAccessReview a webhook speaks (`subjectAccessReviewVersion`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReviewVersion {
    /// `authorization.k8s.io/v1`.
    #[default]
    V1,
    /// `authorization.k8s.io/v1beta1`.
    V1beta1,
}

impl ReviewVersion {
    /// Its `apiVersion`.
    pub fn api_version(self) -> &'static str {
        match self {
            ReviewVersion::V1 => "authorization.k8s.io/v1",
            ReviewVersion::V1beta1 => "authorization.k8s.io/v1beta1",
        }
    }
}

fn put(map: &mut Map<String, Value>, key: &str, value: &str) {
    if !value.is_empty() {
        map.insert(key.into(), json!(value));
    }
}

/// A selector's `{"requirements": [...]}`; `None` when it has none.
fn selector(requirements: Option<&Vec<Requirement>>) -> Option<Value> {
    let requirements = requirements.filter(|r| !r.is_empty())?;
    let list: Vec<Value> = requirements
        .iter()
        .map(|r| {
            let mut item = Map::new();
            item.insert("key".into(), json!(r.key));
            item.insert("operator".into(), json!(r.operator.as_str()));
            if !r.values.is_empty() {
                item.insert("values".into(), json!(r.values));
            }
            Value::Object(item)
        })
        .collect();
    Some(json!({ "requirements": list }))
}

/// The v1 `spec` of the review of `subject` doing `a`.
pub fn review_spec(subject: &Subject<'_>, a: &Attributes) -> Value {
    let mut spec = Map::new();
    let mut attributes = Map::new();
    if a.resource_request {
        for (key, value) in [
            ("namespace", &a.namespace),
            ("verb", &a.verb),
            ("group", &a.group),
            ("version", &a.version),
            ("resource", &a.resource),
            ("subresource", &a.subresource),
            ("name", &a.name),
        ] {
            put(&mut attributes, key, value);
        }
        if let Some(fields) = selector(a.field_selector.as_ref()) {
            attributes.insert("fieldSelector".into(), fields);
        }
        if let Some(labels) = selector(a.label_selector.as_ref()) {
            attributes.insert("labelSelector".into(), labels);
        }
        spec.insert("resourceAttributes".into(), Value::Object(attributes));
    } else {
        put(&mut attributes, "path", &a.path);
        put(&mut attributes, "verb", &a.verb);
        spec.insert("nonResourceAttributes".into(), Value::Object(attributes));
    }
    put(&mut spec, "user", subject.name);
    if !subject.groups.is_empty() {
        spec.insert("groups".into(), json!(subject.groups));
    }
    if !subject.extra.is_empty() {
        let mut extra: Vec<&(String, Vec<String>)> = subject.extra.iter().collect();
        extra.sort_by(|x, y| x.0.cmp(&y.0));
        let extra: Map<String, Value> = extra
            .into_iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        spec.insert("extra".into(), Value::Object(extra));
    }
    put(&mut spec, "uid", subject.uid);
    Value::Object(spec)
}

/// The review to post: `apiVersion`, `kind` and `spec` (a [`review_spec`], with `groups`
/// renamed `group` for v1beta1).
pub fn review_body(spec: Value, version: ReviewVersion) -> Value {
    let spec = match (version, spec) {
        (ReviewVersion::V1beta1, Value::Object(map)) => Value::Object(
            map.into_iter()
                .map(|(k, v)| match k.as_str() {
                    "groups" => ("group".to_string(), v),
                    _ => (k, v),
                })
                .collect(),
        ),
        (_, spec) => spec,
    };
    json!({
        "apiVersion": version.api_version(),
        "kind": "SubjectAccessReview",
        "spec": spec,
    })
}

/// The hash a decision is cached under: every field of the review, length-prefixed, the
/// selectors included.
pub fn cache_key(subject: &Subject<'_>, a: &Attributes) -> [u8; 32] {
    let mut hash = Sha256::new();
    let mut field = |value: &str| {
        hash.update((value.len() as u64).to_le_bytes());
        hash.update(value.as_bytes());
    };
    field(subject.name);
    field(subject.uid);
    field(&subject.groups.len().to_string());
    for g in subject.groups {
        field(g);
    }
    field(&subject.extra.len().to_string());
    for (key, values) in subject.extra {
        field(key);
        field(&values.len().to_string());
        for v in values {
            field(v);
        }
    }
    field(if a.resource_request { "r" } else { "n" });
    for value in [
        &a.verb,
        &a.path,
        &a.namespace,
        &a.group,
        &a.version,
        &a.resource,
        &a.subresource,
        &a.name,
    ] {
        field(value);
    }
    for requirements in [&a.field_selector, &a.label_selector] {
        let Some(requirements) = requirements else {
            field("-");
            continue;
        };
        field(&requirements.len().to_string());
        for r in requirements {
            field(&r.key);
            field(r.operator.as_str());
            field(&r.values.len().to_string());
            for v in &r.values {
                field(v);
            }
        }
    }
    hash.finalize().into()
}

#[cfg(test)]
mod tests;
