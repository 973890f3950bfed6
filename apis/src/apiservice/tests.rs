//! The rules and their messages, as kube-apiserver 1.37 answers them (`real_kube::invalid_apiservices`).

use super::*;

fn parse(json: serde_json::Value) -> APIService {
    let mut svc: APIService = serde_json::from_value(json).expect("test object parses");
    apply_defaults(&mut svc);
    svc
}

fn remote(name: &str, group: &str, version: &str, gpm: i32, vp: i32) -> APIService {
    parse(serde_json::json!({
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": name},
        "spec": {"group": group, "version": version, "groupPriorityMinimum": gpm,
                 "versionPriority": vp, "insecureSkipTLSVerify": true,
                 "service": {"namespace": "ns", "name": "svc"}}
    }))
}

#[test]
fn defaults_port() {
    let svc = remote("v1.a.io", "a.io", "v1", 100, 10);
    let port = svc.spec.and_then(|s| s.service).and_then(|s| s.port);
    assert_eq!(port, Some(443));
}

#[test]
fn accepts_inclusive_bounds() {
    assert!(validate(&remote("v1.a.io", "a.io", "v1", 20000, 1000)).is_ok());
    assert!(validate(&remote("v1.a.io", "a.io", "v1", 1, 1)).is_ok());
}

#[test]
fn rejects_out_of_range_priorities_with_upstream_messages() {
    let err = validate(&remote("v1.a.io", "a.io", "v1", 20001, 0)).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains(
            "spec.groupPriorityMinimum: Invalid value: 20001: must be positive and less than 20000"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "spec.versionPriority: Invalid value: 0: must be positive and less than 1000"
        ),
        "{text}"
    );
}

#[test]
fn name_must_match() {
    let err = validate(&remote("wrong", "a.io", "v1", 100, 10)).unwrap_err();
    assert_eq!(
        err.errors[0].to_string(),
        "metadata.name: Invalid value: \"wrong\": must be `spec.version+\".\"+spec.group`: \"v1.a.io\""
    );
}

#[test]
fn empty_group_only_for_v1() {
    assert!(validate(&remote("v1.", "", "v1", 100, 10)).is_ok());
    let err = validate(&remote("v2.", "", "v2", 100, 10)).unwrap_err();
    assert_eq!(
        err.errors[0].to_string(),
        "spec.group: Required value: only v1 may have an empty group and it better be legacy kube"
    );
}

#[test]
fn local_may_not_have_tls_settings() {
    let svc = parse(serde_json::json!({
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": "v1.a.io"},
        "spec": {"group": "a.io", "version": "v1", "groupPriorityMinimum": 100,
                 "versionPriority": 10, "insecureSkipTLSVerify": true, "caBundle": "YWJj"}
    }));
    let text = validate(&svc).unwrap_err().to_string();
    assert!(
        text.contains("local APIServices may not have a caBundle"),
        "{text}"
    );
    assert!(text.contains("\"3 bytes\""), "{text}");
    assert!(
        text.contains("local APIServices may not have insecureSkipTLSVerify"),
        "{text}"
    );
}

#[test]
fn remote_rules() {
    let svc = parse(serde_json::json!({
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": "v1.a.io"},
        "spec": {"group": "a.io", "version": "v1", "groupPriorityMinimum": 100,
                 "versionPriority": 10, "insecureSkipTLSVerify": true, "caBundle": "YWJj",
                 "service": {"port": 70000}}
    }));
    let text = validate(&svc).unwrap_err().to_string();
    assert!(
        text.contains("spec.service.namespace: Required value"),
        "{text}"
    );
    assert!(text.contains("spec.service.name: Required value"), "{text}");
    assert!(
        text.contains("port is not valid: must be between 1 and 65535, inclusive"),
        "{text}"
    );
    assert!(
        text.contains("may not be true if caBundle is present"),
        "{text}"
    );
}

#[test]
fn rejects_bad_group_and_version() {
    let err = validate(&remote("V1.A_b", "A_b", "V1", 100, 10)).unwrap_err();
    let fields: Vec<&str> = err.errors.iter().map(|e| e.field.as_str()).collect();
    assert!(fields.contains(&"spec.group"));
    assert!(fields.contains(&"spec.version"));
}

fn valid_with(patch: serde_json::Value) -> APIService {
    let mut value = serde_json::json!({
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": "v1.a.io"},
        "spec": {"group": "a.io", "version": "v1", "groupPriorityMinimum": 100,
                 "versionPriority": 10, "service": {"namespace": "ns", "name": "svc"}}
    });
    for (key, part) in patch.as_object().into_iter().flatten() {
        for (field, v) in part.as_object().into_iter().flatten() {
            value[key][field] = v.clone();
        }
    }
    parse(value)
}

fn messages(err: &ValidationErrors) -> Vec<String> {
    err.errors.iter().map(ToString::to_string).collect()
}

#[test]
fn message_names_the_qualified_kind_and_says_each_error_once() {
    let err = validate(&valid_with(
        serde_json::json!({"spec": {"versionPriority": 0}}),
    ))
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "APIService.apiregistration.k8s.io \"v1.a.io\" is invalid: spec.versionPriority: Invalid value: 0: must be positive and less than 1000"
    );
    let twice = ValidationErrors {
        name: "n".into(),
        errors: vec![err.errors[0].clone(), err.errors[0].clone()],
    };
    assert!(!twice.to_string().contains('['), "{twice}");
}

#[test]
fn causes_have_upstream_reasons_and_bodies() {
    let err = validate(&valid_with(
        serde_json::json!({"spec": {"service": {"namespace": ""}}}),
    ))
    .unwrap_err();
    let e = &err.errors[0];
    assert_eq!(
        (e.reason(), e.body().as_str()),
        ("FieldValueRequired", "Required value")
    );
    let unsupported = FieldError {
        field: "f".into(),
        kind: "Unsupported value: \"x\"".into(),
        detail: "supported values: \"a\"".into(),
    };
    assert_eq!(unsupported.reason(), "FieldValueNotSupported");
}

#[test]
fn names_are_path_segments_before_anything_else() {
    let err = validate(&valid_with(
        serde_json::json!({"metadata": {"name": "v1/a%io"}}),
    ))
    .unwrap_err();
    assert_eq!(
        messages(&err),
        [
            "metadata.name: Invalid value: \"v1/a%io\": may not contain '/'",
            "metadata.name: Invalid value: \"v1/a%io\": may not contain '%'"
        ]
    );
}

#[test]
fn generate_name_is_judged_as_a_name() {
    let err = validate(&valid_with(
        serde_json::json!({"metadata": {"generateName": "gen-"}}),
    ))
    .unwrap_err();
    assert_eq!(
        messages(&err),
        ["metadata.generateName: Invalid value: \"gen-\": must be `spec.version+\".\"+spec.group`: \"v1.a.io\""]
    );
}

#[test]
fn long_groups_and_versions_say_their_length() {
    let group = format!("{}.io", "a".repeat(251));
    let svc = remote(&format!("v1.{group}"), &group, "v1", 100, 10);
    let err = validate(&svc).unwrap_err();
    assert_eq!(err.errors[0].detail, "must be no more than 253 characters");
}

#[test]
fn metadata_rules() {
    let svc = valid_with(serde_json::json!({"metadata": {
        "generation": -1,
        "labels": {"bad key": "x"},
        "annotations": {"Example.com/Key": "fine", "a/b/c": "x"},
        "ownerReferences": [{"apiVersion": "v1", "kind": "Event", "name": "n", "uid": "u"},
            {"apiVersion": "", "kind": "K", "name": "n", "uid": "u", "controller": true}],
        "finalizers": ["orphan", "foregroundDeletion"]}}));
    let fields: Vec<String> = validate(&svc)
        .unwrap_err()
        .errors
        .iter()
        .map(|e| format!("{} {}", e.field, e.reason()))
        .collect();
    assert_eq!(
        fields,
        [
            "metadata.generation FieldValueInvalid",
            "metadata.labels FieldValueInvalid",
            "metadata.annotations FieldValueInvalid",
            "metadata.ownerReferences[0] FieldValueInvalid",
            "metadata.ownerReferences[1].apiVersion FieldValueRequired",
            "metadata.finalizers FieldValueInvalid",
        ]
    );
    let big =
        valid_with(serde_json::json!({"metadata": {"annotations": {"k": "x".repeat(262144)}}}));
    assert_eq!(
        messages(&validate(&big).unwrap_err()),
        ["metadata.annotations: Too long: may not be more than 262144 bytes"]
    );
}

#[test]
fn updates_repeat_metadata_rules_and_keep_the_uid() {
    let old = valid_with(serde_json::json!({"metadata": {"uid": "a"}}));
    let labelled =
        valid_with(serde_json::json!({"metadata": {"uid": "a", "labels": {"bad key": "x"}}}));
    assert_eq!(
        validate_update(&labelled, &old).unwrap_err().errors.len(),
        4
    );
    let moved = valid_with(serde_json::json!({"metadata": {"uid": "b"}}));
    assert_eq!(
        messages(&validate_update(&moved, &old).unwrap_err()),
        [
            "metadata.uid: Invalid value: \"b\": field is immutable",
            "metadata.uid: Invalid value: \"b\": field is immutable"
        ]
    );
    assert!(validate_update(&old, &old).is_ok());
}
