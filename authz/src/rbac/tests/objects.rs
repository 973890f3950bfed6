//! Objects read from JSON: the kinds, and the errors a bad object gives.

use serde_json::json;

use super::super::{ObjectError, RbacKind};
use super::*;

#[test]
fn reads_each_kind_from_a_watch_event_object() {
    let objects = [
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": "r", "namespace": "ns"},
               "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
        json!({"kind": "ClusterRole", "metadata": {"name": "cr"}, "rules": null}),
        json!({"kind": "RoleBinding", "metadata": {"name": "rb", "namespace": "ns"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
               "subjects": [{"kind": "User", "name": "alice"}]}),
        json!({"kind": "ClusterRoleBinding", "metadata": {"name": "crb"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cr"}}),
    ];
    let mut builder = PolicyBuilder::new();
    let mut kinds = Vec::new();
    for object in objects {
        let object = RbacObject::from_json(object).expect("valid");
        kinds.push((
            object.kind(),
            object.namespace().to_string(),
            object.name().to_string(),
        ));
        builder.apply(object).expect("valid");
    }
    assert_eq!(
        kinds,
        [
            (RbacKind::Role, "ns".into(), "r".into()),
            (RbacKind::ClusterRole, "".into(), "cr".into()),
            (RbacKind::RoleBinding, "ns".into(), "rb".into()),
            (RbacKind::ClusterRoleBinding, "".into(), "crb".into()),
        ]
    );
    assert!(allowed(
        &builder.snapshot(),
        &user("alice", &[]),
        &resource("get", "", "pods", "ns", "p")
    ));
}

#[test]
fn a_list_item_without_kind_is_read_as_the_list_kind() {
    let item = json!({"metadata": {"name": "crb"},
                      "roleRef": {"kind": "ClusterRole", "name": "cr"}, "subjects": []});
    let object = RbacObject::from_json_as(RbacKind::ClusterRoleBinding, item).expect("valid");
    assert_eq!(object.kind(), RbacKind::ClusterRoleBinding);
    let error = RbacObject::from_json(json!({"metadata": {"name": "x"}})).expect_err("no kind");
    assert!(matches!(error, ObjectError::MissingKind));
}

#[test]
fn bad_objects_give_clear_errors() {
    let message = |value: serde_json::Value| {
        RbacObject::from_json(value)
            .and_then(|object| PolicyBuilder::new().apply(object))
            .expect_err("invalid")
            .to_string()
    };
    assert_eq!(
        message(json!([1, 2])),
        "an RBAC object must be a JSON object, got an array"
    );
    assert_eq!(
        message(json!(null)),
        "an RBAC object must be a JSON object, got null"
    );
    assert_eq!(
        message(json!({"kind": "Pod", "metadata": {"name": "p"}})),
        r#"kind "Pod" is not an RBAC kind (Role, ClusterRole, RoleBinding, ClusterRoleBinding)"#
    );
    let old_version = message(json!({"apiVersion": "rbac.authorization.k8s.io/v1beta1",
                                     "kind": "ClusterRole", "metadata": {"name": "cr"}}));
    assert!(
        old_version.starts_with("ClusterRole does not decode: invalid value"),
        "{old_version}"
    );
    let bad_subjects = message(
        json!({"kind": "RoleBinding", "metadata": {"name": "rb", "namespace": "ns"},
                                      "roleRef": {"kind": "Role", "name": "r"}, "subjects": "alice"}),
    );
    assert!(
        bad_subjects.starts_with("RoleBinding does not decode: invalid type"),
        "{bad_subjects}"
    );
    assert_eq!(
        message(json!({"kind": "ClusterRole", "metadata": {}})),
        "ClusterRole has no metadata.name"
    );
    assert_eq!(
        message(
            json!({"kind": "RoleBinding", "metadata": {"name": "rb"}, "roleRef": {"kind": "Role", "name": "r"}})
        ),
        r#"RoleBinding "rb" has no metadata.namespace"#
    );
    let error = RbacObject::from_json_as(RbacKind::Role, json!({"kind": "RoleBinding"}))
        .expect_err("wrong kind");
    assert_eq!(error.to_string(), "expected a Role, got a RoleBinding");
}

#[test]
fn apply_json_and_remove_object_follow_a_watch() {
    let mut builder = PolicyBuilder::new();
    let role = json!({"kind": "ClusterRole", "metadata": {"name": "cr"},
                      "rules": [{"nonResourceURLs": ["/healthz"], "verbs": ["get"]}]});
    let binding = json!({"kind": "ClusterRoleBinding", "metadata": {"name": "crb"},
                         "roleRef": {"kind": "ClusterRole", "name": "cr"},
                         "subjects": [{"kind": "Group", "name": "g"}]});
    builder.apply_json(role).expect("valid");
    builder.apply_json(binding.clone()).expect("valid");
    let member = user("m", &["g"]);
    assert!(allowed(
        &builder.snapshot(),
        &member,
        &url("get", "/healthz")
    ));
    let deleted = RbacObject::from_json(binding).expect("valid");
    assert!(builder.remove_object(&deleted));
    assert!(!allowed(
        &builder.snapshot(),
        &member,
        &url("get", "/healthz")
    ));
}
