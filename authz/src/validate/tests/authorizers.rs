//! The chain's own checks: types (known, repeated, refused), names (required, unique, DNS-1123),
//! `webhook` only with `type: Webhook`, every error of a file collected.

use super::*;

const NODE_REASON: &str = "not supported by apiagg: the Node authorizer decides kubelets' requests from kube-apiserver's graph of nodes, pods and volumes, which apiagg does not have; keep it in kube-apiserver's chain";
const ABAC_REASON: &str = "not supported by apiagg: ABAC reads its policy from kube-apiserver's --authorization-policy-file flag, which this file cannot carry, and upstream recommends RBAC over it; use RBAC or a Webhook";
const DNS1123: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

#[test]
fn chains() {
    let a = authorizer;
    let unsupported = |t: &str| {
        format!(
            r#"authorizers[0].type: Unsupported value: "{t}": supported values: "AlwaysAllow", "AlwaysDeny", "RBAC", "Webhook""#
        )
    };
    let with_webhook = |type_: &str| AuthorizerConfiguration {
        webhook: Some(valid_webhook()),
        ..a(type_, "x")
    };
    let cases: Vec<(&str, Vec<AuthorizerConfiguration>, Vec<String>)> = vec![
        (
            "every supported type",
            vec![a("Webhook", "w"), a("RBAC", "rbac"), a("AlwaysAllow", "allow"), a("AlwaysDeny", "deny")],
            vec![],
        ),
        ("webhooks repeat", vec![a("Webhook", "one"), a("Webhook", "two")], vec![]),
        ("no authorizer", vec![], vec!["authorizers: Required value: at least one authorization mode must be defined".into()]),
        ("no type", vec![a("", "x")], vec!["authorizers[0].type: Required value".into()]),
        ("unknown type", vec![a("Foo", "x")], vec![unsupported("Foo")]),
        ("types are case-sensitive", vec![a("rbac", "x")], vec![unsupported("rbac")]),
        (
            "other types do not repeat",
            vec![a("RBAC", "one"), a("RBAC", "")],
            vec![r#"authorizers[1].type: Duplicate value: "RBAC""#.into()],
        ),
        (
            "Node is refused",
            vec![a("Node", "node"), a("RBAC", "rbac")],
            vec![format!(r#"authorizers[0].type: Invalid value: "Node": {NODE_REASON}"#)],
        ),
        (
            "ABAC is refused",
            vec![a("ABAC", "abac")],
            vec![format!(r#"authorizers[0].type: Invalid value: "ABAC": {ABAC_REASON}"#)],
        ),
        (
            "a refused type is checked on",
            vec![a("Node", ""), with_webhook("Node")],
            vec![
                format!(r#"authorizers[0].type: Invalid value: "Node": {NODE_REASON}"#),
                "authorizers[0].name: Required value".into(),
                r#"authorizers[1].type: Duplicate value: "Node""#.into(),
            ],
        ),
        ("no name", vec![a("RBAC", "")], vec!["authorizers[0].name: Required value".into()]),
        (
            "names are unique across types",
            vec![a("Webhook", "x"), a("RBAC", "x")],
            vec![r#"authorizers[1].name: Duplicate value: "x""#.into()],
        ),
        ("a DNS-1123 label", vec![a("RBAC", "myauthorizer")], vec![]),
        ("a DNS-1123 subdomain", vec![a("RBAC", "my-authorizer.example.domain")], vec![]),
        (
            "not a DNS-1123 subdomain",
            vec![a("RBAC", "FOO.example.domain")],
            vec![format!(r#"authorizers[0].name: Invalid value: "FOO.example.domain": authorizer name is invalid: {DNS1123}"#)],
        ),
        (
            "no label may be empty",
            vec![a("RBAC", "a..b")],
            vec![format!(r#"authorizers[0].name: Invalid value: "a..b": authorizer name is invalid: {DNS1123}"#)],
        ),
        (
            "a webhook needs its configuration",
            vec![AuthorizerConfiguration { webhook: None, ..a("Webhook", "w") }],
            vec!["authorizers[0].webhook: Required value: required when type=Webhook".into()],
        ),
        (
            "only a webhook has one",
            vec![with_webhook("RBAC")],
            vec![r#"authorizers[0].webhook: Invalid value: "non-null": may only be specified when type=Webhook"#.into()],
        ),
    ];
    for (name, authorizers, want) in cases {
        assert_eq!(errors_of(authorizers), want, "case {name:?}");
    }
}

#[test]
fn a_long_name_is_refused() {
    let name = "a".repeat(254);
    let want = format!(
        r#"authorizers[0].name: Invalid value: "{name}": authorizer name is invalid: must be no more than 253 characters"#
    );
    assert_eq!(errors_of(vec![authorizer("RBAC", &name)]), [want]);
    let name = format!("-{}", "a".repeat(253));
    let want = format!(
        r#"authorizers[0].name: Invalid value: "{name}": authorizer name is invalid: must be no more than 253 characters, {DNS1123}"#
    );
    assert_eq!(errors_of(vec![authorizer("RBAC", &name)]), [want]);
    assert!(errors_of(vec![authorizer("RBAC", &"a".repeat(253))]).is_empty());
}

#[test]
fn every_error_of_a_file_is_reported() {
    let mut bad_webhook = authorizer("Webhook", "Hook");
    if let Some(w) = bad_webhook.webhook.as_mut() {
        w.timeout = GoDuration(0);
        w.failure_policy = "Allow".into();
    }
    let file = vec![
        bad_webhook,
        authorizer("Node", "node"),
        authorizer("", "x"),
        authorizer("RBAC", "rbac"),
        authorizer("RBAC", "rbac-again"),
        authorizer("AlwaysDeny", "rbac"),
    ];
    assert_eq!(
        errors_of(file),
        [
            format!(r#"authorizers[0].name: Invalid value: "Hook": authorizer name is invalid: {DNS1123}"#),
            "authorizers[0].timeout: Required value".to_string(),
            r#"authorizers[0].failurePolicy: Unsupported value: "Allow": supported values: "NoOpinion", "Deny""#.to_string(),
            format!(r#"authorizers[1].type: Invalid value: "Node": {NODE_REASON}"#),
            "authorizers[2].type: Required value".to_string(),
            r#"authorizers[4].type: Duplicate value: "RBAC""#.to_string(),
            r#"authorizers[5].name: Duplicate value: "rbac""#.to_string(),
        ]
    );
}
