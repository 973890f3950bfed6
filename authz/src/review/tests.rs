use serde_json::json;

use super::*;
use crate::attributes::{Decision, Operator};

fn req(key: &str, operator: Operator, values: &[&str]) -> Requirement {
    Requirement {
        key: key.to_string(),
        operator,
        values: values.iter().map(|v| v.to_string()).collect(),
    }
}

fn list_pods() -> Attributes {
    Attributes {
        verb: "list".into(),
        resource_request: true,
        namespace: "ns".into(),
        version: "v1".into(),
        resource: "pods".into(),
        field_selector: Some(vec![req("spec.nodeName", Operator::In, &["n1"])]),
        label_selector: Some(vec![
            req("app", Operator::NotIn, &["a", "b"]),
            req("canary", Operator::DoesNotExist, &[]),
        ]),
        ..Attributes::default()
    }
}

/// Serialised, so that the field order is checked too.
fn text(value: &Value) -> String {
    value.to_string()
}

#[test]
fn a_resource_review_carries_the_selectors() {
    let groups = ["system:authenticated".to_string(), "dev".to_string()];
    let extra = [
        ("scopes".to_string(), vec!["x".to_string()]),
        (
            "authentication.kubernetes.io/credential-id".to_string(),
            vec!["id".to_string()],
        ),
    ];
    let subject = Subject {
        name: "jane",
        uid: "42",
        groups: &groups,
        extra: &extra,
    };
    let want = json!({
        "resourceAttributes": {
            "namespace": "ns",
            "verb": "list",
            "version": "v1",
            "resource": "pods",
            "fieldSelector": {
                "requirements": [{"key": "spec.nodeName", "operator": "In", "values": ["n1"]}]
            },
            "labelSelector": {
                "requirements": [
                    {"key": "app", "operator": "NotIn", "values": ["a", "b"]},
                    {"key": "canary", "operator": "DoesNotExist"}
                ]
            }
        },
        "user": "jane",
        "groups": ["system:authenticated", "dev"],
        "extra": {
            "authentication.kubernetes.io/credential-id": ["id"],
            "scopes": ["x"]
        },
        "uid": "42"
    });
    assert_eq!(text(&review_spec(&subject, &list_pods())), text(&want));
}

#[test]
fn empty_fields_and_selectors_are_left_out() {
    let subject = Subject {
        name: "",
        uid: "",
        groups: &[],
        extra: &[],
    };
    let get = Attributes {
        verb: "get".into(),
        resource_request: true,
        group: "apps".into(),
        version: "v1".into(),
        resource: "deployments".into(),
        name: "d".into(),
        field_selector: Some(Vec::new()),
        ..Attributes::default()
    };
    let want = json!({"resourceAttributes": {
        "verb": "get", "group": "apps", "version": "v1", "resource": "deployments", "name": "d"
    }});
    assert_eq!(text(&review_spec(&subject, &get)), text(&want));
    let metrics = Attributes {
        verb: "get".into(),
        path: "/metrics".into(),
        ..Attributes::default()
    };
    let want = json!({"nonResourceAttributes": {"path": "/metrics", "verb": "get"}});
    assert_eq!(text(&review_spec(&subject, &metrics)), text(&want));
}

#[test]
fn bodies_name_their_version() {
    let groups = ["g".to_string()];
    let subject = Subject {
        name: "u",
        uid: "",
        groups: &groups,
        extra: &[],
    };
    let spec = review_spec(&subject, &list_pods());
    let v1 = review_body(spec.clone(), ReviewVersion::V1);
    assert_eq!(
        text(&v1),
        text(
            &json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                     "spec": spec.clone()})
        )
    );
    let v1beta1 = review_body(spec.clone(), ReviewVersion::V1beta1);
    let want = json!({
        "apiVersion": "authorization.k8s.io/v1beta1",
        "kind": "SubjectAccessReview",
        "spec": {
            "resourceAttributes": spec["resourceAttributes"].clone(),
            "user": "u",
            "group": ["g"]
        }
    });
    assert_eq!(text(&v1beta1), text(&want));
}

#[test]
fn the_cache_key_covers_every_field_and_the_selectors() {
    let groups = ["g".to_string()];
    let subject = Subject {
        name: "u",
        uid: "",
        groups: &groups,
        extra: &[],
    };
    let a = list_pods();
    let key = cache_key(&subject, &a);
    assert_eq!(key, cache_key(&subject, &a.clone()));
    let mut variants = Vec::new();
    let mut other = a.clone();
    other.field_selector = None;
    variants.push(other);
    let mut other = a.clone();
    other.label_selector = Some(vec![req("app", Operator::NotIn, &["a"])]);
    variants.push(other);
    let mut other = a.clone();
    other.label_selector = Some(vec![req("app", Operator::In, &["a", "b"])]);
    variants.push(other);
    let mut other = a.clone();
    other.field_selector = Some(vec![req("spec.nodeName", Operator::In, &["n2"])]);
    variants.push(other);
    let mut other = a.clone();
    other.field_selector = Some(Vec::new());
    variants.push(other);
    let mut other = a.clone();
    std::mem::swap(&mut other.field_selector, &mut other.label_selector);
    variants.push(other);
    let mut other = a.clone();
    other.namespace = "other".into();
    variants.push(other);
    for variant in &variants {
        assert_ne!(cache_key(&subject, variant), key, "{variant:?}");
    }
    let joined = ["ab".to_string()];
    let split = ["a".to_string(), "b".to_string()];
    let with = |groups| Subject {
        name: "u",
        uid: "",
        groups,
        extra: &[],
    };
    assert_ne!(cache_key(&with(&joined), &a), cache_key(&with(&split), &a));
}

#[test]
fn only_a_plain_allow_allows() {
    let conditional = "webhook authorizer tried to return conditional decision although client \
                       does not support it";
    let map = |conditions: Value| json!({"type": "ConditionsMap", "conditionsMap": conditions});
    let allow_if = json!({"conditions": [{"id": "a", "effect": "Allow", "condition": "x"}]});
    let deny_if = json!({"conditions": [{"id": "d", "effect": "Deny", "condition": "y"}]});
    let table: Vec<(Value, Decision)> = vec![
        (
            json!({"status": {"allowed": true, "reason": "ok"}}),
            Decision::Allow("ok".into()),
        ),
        (
            json!({"status": {"allowed": false, "reason": "no"}}),
            Decision::NoOpinion("no".into()),
        ),
        (
            json!({"status": {"denied": true, "reason": "no"}}),
            Decision::Deny("no".into()),
        ),
        (
            json!({"status": {"allowed": true, "denied": true, "reason": "r"}}),
            Decision::Deny("r".into()),
        ),
        (json!({"status": {}}), Decision::NoOpinion(String::new())),
        (json!({}), Decision::NoOpinion(String::new())),
        (json!({"status": null}), Decision::NoOpinion(String::new())),
        (
            json!({"status": {"allowed": null, "reason": null}}),
            Decision::NoOpinion(String::new()),
        ),
        (
            json!({"status": {"allowed": true, "unknownField": 1}}),
            Decision::Allow(String::new()),
        ),
        // Conditional answers never allow, whatever `allowed` says.
        (
            json!({"status": {"conditionalDecision": map(allow_if.clone())}}),
            Decision::NoOpinion(conditional.into()),
        ),
        (
            json!({"status": {"allowed": true, "conditionalDecision": map(allow_if.clone())}}),
            Decision::NoOpinion(conditional.into()),
        ),
        (
            json!({"status": {"allowed": true, "conditionalDecision": map(deny_if.clone())}}),
            Decision::Deny(conditional.into()),
        ),
        (
            json!({"status": {"conditionalDecision": map(json!({"allowConditions": [{"id": "a"}]}))}}),
            Decision::NoOpinion(conditional.into()),
        ),
        (
            json!({"status": {"conditionalDecision": map(json!({"denyConditions": [{"id": "d"}]}))}}),
            Decision::Deny(conditional.into()),
        ),
        (
            json!({"status": {"allowed": true, "conditionalDecision": {"type": "Allow"}}}),
            Decision::NoOpinion(conditional.into()),
        ),
        (
            json!({"status": {"conditionalDecision": {"type": "Deny"}}}),
            Decision::Deny(conditional.into()),
        ),
        (
            json!({"status": {"conditionalDecision": {"type": "Something"}}}),
            Decision::Deny(conditional.into()),
        ),
        (
            json!({"status": {"conditionalDecision": {}}}),
            Decision::Deny(conditional.into()),
        ),
        (
            json!({"status": {"allowed": true, "conditionalDecision": {"type": "Union", "union": [
            {"type": "NoOpinion"}, map(allow_if.clone())]}}}),
            Decision::NoOpinion(conditional.into()),
        ),
        (
            json!({"status": {"conditionalDecision": {"type": "Union", "union": [
            {"authorizerName": "a", "decision": {"type": "Allow"}},
            {"authorizerName": "b", "decision": map(deny_if.clone())}]}}}),
            Decision::Deny(conditional.into()),
        ),
        (
            json!({"status": {"conditionalDecision": {"type": "Union", "union": [{"authorizerName": "a"}]}}}),
            Decision::Deny(conditional.into()),
        ),
        // The KEP's first draft.
        (
            json!({"status": {"allowed": true, "conditionsChain": [{"authorizerName": "a", "conditions": [
            {"id": "a", "effect": "Allow", "type": "t", "condition": "x"}]}]}}),
            Decision::NoOpinion(conditional.into()),
        ),
        (
            json!({"status": {"conditionsChain": [{"allowed": true}, {"denied": true}]}}),
            Decision::Deny(conditional.into()),
        ),
        (
            json!({"status": {"allowed": true, "conditionsChain": "yes"}}),
            Decision::Deny(conditional.into()),
        ),
    ];
    for (body, want) in table {
        let answer =
            read_status(body.to_string().as_bytes()).unwrap_or_else(|e| panic!("{body}: {e}"));
        assert_eq!(answer.decision(), want, "{body}");
    }
}

#[test]
fn the_answer_keeps_its_fields() {
    let body = br#"{"apiVersion":"authorization.k8s.io/v1beta1","kind":"SubjectAccessReview",
        "status":{"allowed":true,"denied":true,"reason":"r","evaluationError":"e"}}"#;
    let answer = read_status(body).unwrap_or_else(|e| panic!("{e}"));
    let want = ReviewAnswer {
        allowed: true,
        denied: true,
        reason: "r".into(),
        evaluation_error: "e".into(),
        conditional: None,
    };
    assert_eq!(answer, want);
    let both = "webhook subject access review returned both allow and deny response";
    assert_eq!(answer.error(), Some(both));
    let allowed = read_status(br#"{"status":{"allowed":true}}"#).map(|a| a.error());
    assert!(matches!(allowed, Ok(None)), "{allowed:?}");
}

#[test]
fn malformed_answers_are_errors() {
    for (body, want) in [
        ("not json", "SubjectAccessReview answer is not JSON"),
        (
            "[]",
            "SubjectAccessReview answer: the answer is not an object",
        ),
        (
            r#"{"status":"Failure"}"#,
            "SubjectAccessReview answer: status is not an object",
        ),
        (
            r#"{"status":{"allowed":"true"}}"#,
            "SubjectAccessReview answer: status.allowed is not a boolean",
        ),
        (
            r#"{"status":{"denied":1}}"#,
            "SubjectAccessReview answer: status.denied is not a boolean",
        ),
        (
            r#"{"status":{"reason":{}}}"#,
            "SubjectAccessReview answer: status.reason is not a string",
        ),
        (
            r#"{"status":{"conditionalDecision":[]}}"#,
            "SubjectAccessReview answer: status.conditionalDecision is not an object",
        ),
    ] {
        match read_status(body.as_bytes()) {
            Ok(answer) => panic!("{body}: {answer:?}"),
            Err(e) => assert!(e.to_string().starts_with(want), "{body}: {e}"),
        }
    }
}
