//! Tests of RBAC: helpers shared by the test modules.

mod bootstrap;
mod changes;
mod hostile;
mod objects;
mod upstream;

use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{Policy, PolicyBuilder, RbacObject, RbacSubject};
use crate::attributes::{Attributes, Decision, Subject};

/// A user with owned groups, lent as a [`Subject`].
pub(super) struct User {
    name: String,
    groups: Vec<String>,
}

impl User {
    pub(super) fn subject(&self) -> Subject<'_> {
        Subject {
            name: &self.name,
            uid: "",
            groups: &self.groups,
            extra: &[],
        }
    }
}

pub(super) fn user(name: &str, groups: &[&str]) -> User {
    User {
        name: name.into(),
        groups: groups.iter().map(|g| g.to_string()).collect(),
    }
}

/// A resource request; `resource` may be `resource/subresource`.
pub(super) fn resource(
    verb: &str,
    group: &str,
    resource: &str,
    ns: &str,
    name: &str,
) -> Attributes {
    let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
    Attributes {
        verb: verb.into(),
        resource_request: true,
        namespace: ns.into(),
        group: group.into(),
        version: "v1".into(),
        resource: resource.into(),
        subresource: subresource.into(),
        name: name.into(),
        ..Attributes::default()
    }
}

/// A non-resource request.
pub(super) fn url(verb: &str, path: &str) -> Attributes {
    Attributes {
        verb: verb.into(),
        resource_request: false,
        path: path.into(),
        ..Attributes::default()
    }
}

fn strings(items: &[&str]) -> Option<Vec<String>> {
    (!items.is_empty()).then(|| items.iter().map(|s| s.to_string()).collect())
}

/// A resource rule.
pub(super) fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> PolicyRule {
    PolicyRule {
        verbs: verbs.iter().map(|s| s.to_string()).collect(),
        api_groups: strings(groups),
        resources: strings(resources),
        ..PolicyRule::default()
    }
}

/// A resource rule limited to some object names.
pub(super) fn named_rule(
    verbs: &[&str],
    groups: &[&str],
    resources: &[&str],
    names: &[&str],
) -> PolicyRule {
    PolicyRule {
        resource_names: strings(names),
        ..rule(verbs, groups, resources)
    }
}

/// A non-resource rule.
pub(super) fn url_rule(verbs: &[&str], urls: &[&str]) -> PolicyRule {
    PolicyRule {
        verbs: verbs.iter().map(|s| s.to_string()).collect(),
        non_resource_urls: strings(urls),
        ..PolicyRule::default()
    }
}

fn meta(namespace: &str, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: (!namespace.is_empty()).then(|| namespace.into()),
        ..ObjectMeta::default()
    }
}

pub(super) fn cluster_role(name: &str, rules: Vec<PolicyRule>) -> RbacObject {
    RbacObject::ClusterRole(ClusterRole {
        metadata: meta("", name),
        rules: Some(rules),
        ..ClusterRole::default()
    })
}

pub(super) fn role(namespace: &str, name: &str, rules: Vec<PolicyRule>) -> RbacObject {
    RbacObject::Role(Role {
        metadata: meta(namespace, name),
        rules: Some(rules),
    })
}

/// `Kind:name`, `ServiceAccount:namespace/name` or `ServiceAccount:name` (no namespace).
pub(super) fn subject(spec: &str) -> RbacSubject {
    let (kind, rest) = spec.split_once(':').expect("Kind:name");
    let (namespace, name) = match (kind, rest.split_once('/')) {
        ("ServiceAccount", Some((ns, name))) => (Some(ns.to_string()), name),
        _ => (None, rest),
    };
    RbacSubject {
        api_group: (kind != "ServiceAccount").then(|| "rbac.authorization.k8s.io".into()),
        kind: kind.into(),
        name: name.into(),
        namespace,
    }
}

fn role_ref(kind: &str, name: &str) -> RoleRef {
    RoleRef {
        api_group: "rbac.authorization.k8s.io".into(),
        kind: kind.into(),
        name: name.into(),
    }
}

/// A ClusterRoleBinding to the ClusterRole `role_name`.
pub(super) fn cluster_binding(name: &str, role_name: &str, subjects: &[&str]) -> RbacObject {
    cluster_binding_to(name, "ClusterRole", role_name, subjects)
}

pub(super) fn cluster_binding_to(
    name: &str,
    kind: &str,
    role_name: &str,
    subjects: &[&str],
) -> RbacObject {
    RbacObject::ClusterRoleBinding(ClusterRoleBinding {
        metadata: meta("", name),
        role_ref: role_ref(kind, role_name),
        subjects: Some(subjects.iter().map(|s| subject(s)).collect()),
    })
}

/// A RoleBinding in `namespace` to a `Role` or `ClusterRole`.
pub(super) fn role_binding(
    namespace: &str,
    name: &str,
    kind: &str,
    role_name: &str,
    subjects: &[&str],
) -> RbacObject {
    RbacObject::RoleBinding(RoleBinding {
        metadata: meta(namespace, name),
        role_ref: role_ref(kind, role_name),
        subjects: Some(subjects.iter().map(|s| subject(s)).collect()),
    })
}

pub(super) fn builder_of(objects: Vec<RbacObject>) -> PolicyBuilder {
    let mut builder = PolicyBuilder::new();
    for object in objects {
        builder.apply(object).expect("valid test object");
    }
    builder
}

pub(super) fn policy_of(objects: Vec<RbacObject>) -> Arc<Policy> {
    builder_of(objects).snapshot()
}

/// The decision, checked against a scan of every binding (the index must agree with it).
pub(super) fn decide(policy: &Policy, user: &User, request: &Attributes) -> Decision {
    let decision = policy.authorize(&user.subject(), request);
    assert_eq!(
        decision.allowed(),
        super::policy::scan_allows(policy, &user.subject(), request),
        "index and scan disagree for {} on {request:?}",
        user.name
    );
    decision
}

pub(super) fn allowed(policy: &Policy, user: &User, request: &Attributes) -> bool {
    decide(policy, user, request).allowed()
}

/// The testdata directory; a missing file fails the test loudly.
pub(super) fn testdata(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/testdata/rbac")
        .join(file)
}

/// The objects of one upstream `kind: List` file.
pub(super) fn list_items(file: &str) -> Vec<RbacObject> {
    let path = testdata(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("test data {} is missing: {e}", path.display()));
    let list: serde_json::Value = serde_yaml_ng::from_str(&text).expect("a YAML list");
    let items = list["items"].as_array().expect("items").clone();
    items
        .into_iter()
        .map(|item| RbacObject::from_json(item).expect("an RBAC object"))
        .collect()
}

/// The six bootstrap policy files.
pub(super) const BOOTSTRAP_FILES: [&str; 6] = [
    "cluster-roles.yaml",
    "cluster-role-bindings.yaml",
    "controller-roles.yaml",
    "controller-role-bindings.yaml",
    "namespace-roles.yaml",
    "namespace-role-bindings.yaml",
];

pub(super) fn bootstrap_builder() -> PolicyBuilder {
    builder_of(BOOTSTRAP_FILES.iter().flat_map(|f| list_items(f)).collect())
}
