//! A webhook's fields: timeout, TTLs, versions, failure policy, connection and match
//! conditions, with upstream's paths (under `authorizers[i]`, without `webhook`).

use super::*;
use crate::config::WebhookMatchCondition;

/// A change to the valid webhook.
type Edit = fn(&mut WebhookConfiguration);

/// Applies each edit to [`valid_webhook`] and expects exactly these errors, in this order.
fn check(cases: &[(&str, Edit, &[&str])]) {
    for (name, edit, want) in cases {
        let mut w = valid_webhook();
        edit(&mut w);
        let a = AuthorizerConfiguration {
            webhook: Some(w),
            ..authorizer("Webhook", "w")
        };
        assert_eq!(errors_of(vec![a]), *want, "case {name:?}");
    }
}

fn conditions(sources: &[&str]) -> Vec<WebhookMatchCondition> {
    let condition = |s: &&str| WebhookMatchCondition {
        expression: s.to_string(),
    };
    sources.iter().map(condition).collect()
}

#[test]
fn timeouts_and_ttls() {
    check(&[
        (
            "30s is the longest timeout",
            |w| w.timeout = GoDuration::seconds(30),
            &[],
        ),
        (
            "100ms is fine",
            |w| w.timeout = GoDuration(100_000_000),
            &[],
        ),
        (
            "no timeout",
            |w| w.timeout = GoDuration(0),
            &["authorizers[0].timeout: Required value"],
        ),
        (
            "a negative timeout",
            |w| w.timeout = GoDuration::seconds(-30),
            &[r#"authorizers[0].timeout: Invalid value: "-30s": must be > 0s and <= 30s"#],
        ),
        (
            "a timeout over 30s",
            |w| w.timeout = GoDuration::seconds(60),
            &[r#"authorizers[0].timeout: Invalid value: "1m0s": must be > 0s and <= 30s"#],
        ),
        (
            "a negative authorizedTTL",
            |w| w.authorized_ttl = GoDuration::seconds(-30),
            &[r#"authorizers[0].authorizedTTL: Invalid value: "-30s": must be > 0s"#],
        ),
        (
            "a negative unauthorizedTTL, even without caching",
            |w| {
                w.unauthorized_ttl = GoDuration(-1_500_000);
                w.cache_unauthorized_requests = Some(false);
            },
            &[r#"authorizers[0].unauthorizedTTL: Invalid value: "-1.5ms": must be > 0s"#],
        ),
    ]);
}

#[test]
fn versions_and_failure_policy() {
    check(&[
        ("v1beta1 reviews", |w| w.subject_access_review_version = "v1beta1".into(), &[]),
        (
            "no review version",
            |w| w.subject_access_review_version = String::new(),
            &["authorizers[0].subjectAccessReviewVersion: Required value"],
        ),
        (
            "an unknown review version",
            |w| w.subject_access_review_version = "v2beta1".into(),
            &[r#"authorizers[0].subjectAccessReviewVersion: Unsupported value: "v2beta1": supported values: "v1", "v1beta1""#],
        ),
        ("v1 for match conditions", |w| w.match_condition_subject_access_review_version = "v1".into(), &[]),
        (
            "match conditions need their version",
            |w| w.match_conditions = conditions(&["request.user != ''"]),
            &["authorizers[0].matchConditionSubjectAccessReviewVersion: Required value: required if match conditions are specified"],
        ),
        (
            "match conditions see v1 only",
            |w| w.match_condition_subject_access_review_version = "v1beta1".into(),
            &[r#"authorizers[0].matchConditionSubjectAccessReviewVersion: Unsupported value: "v1beta1": supported values: "v1""#],
        ),
        ("Deny", |w| w.failure_policy = "Deny".into(), &[]),
        ("no failure policy", |w| w.failure_policy = String::new(), &["authorizers[0].failurePolicy: Required value"]),
        (
            "an unknown failure policy",
            |w| w.failure_policy = "AlwaysAllow".into(),
            &[r#"authorizers[0].failurePolicy: Unsupported value: "AlwaysAllow": supported values: "NoOpinion", "Deny""#],
        ),
    ]);
}

#[test]
fn connections() {
    check(&[
        (
            "in-cluster",
            |w| {
                w.connection_info = WebhookConnectionInfo {
                    type_: "InClusterConfig".into(),
                    kube_config_file: None,
                }
            },
            &[],
        ),
        (
            "no type",
            |w| w.connection_info.type_ = String::new(),
            &["authorizers[0].connectionInfo.type: Required value"],
        ),
        (
            "an unknown type",
            |w| w.connection_info.type_ = "ExternalClusterConfig".into(),
            &[
                r#"authorizers[0].connectionInfo.type: Unsupported value: "ExternalClusterConfig": supported values: "InClusterConfig", "KubeConfigFile""#,
            ],
        ),
        (
            "in-cluster with a file",
            |w| w.connection_info.type_ = "InClusterConfig".into(),
            &[
                r#"authorizers[0].connectionInfo.kubeConfigFile: Invalid value: "/etc/apiagg/webhook.kubeconfig": can only be set when type=KubeConfigFile"#,
            ],
        ),
        (
            "in-cluster with an empty file",
            |w| {
                w.connection_info = WebhookConnectionInfo {
                    type_: "InClusterConfig".into(),
                    kube_config_file: Some(String::new()),
                }
            },
            &[
                r#"authorizers[0].connectionInfo.kubeConfigFile: Invalid value: "": can only be set when type=KubeConfigFile"#,
            ],
        ),
        (
            "no file",
            |w| w.connection_info.kube_config_file = None,
            &["authorizers[0].connectionInfo.kubeConfigFile: Required value"],
        ),
        (
            "an empty file",
            |w| w.connection_info.kube_config_file = Some(String::new()),
            &["authorizers[0].connectionInfo.kubeConfigFile: Required value"],
        ),
        (
            "a relative file",
            |w| w.connection_info.kube_config_file = Some("webhook.kubeconfig".into()),
            &[
                r#"authorizers[0].connectionInfo.kubeConfigFile: Invalid value: "webhook.kubeconfig": must be an absolute path"#,
            ],
        ),
    ]);
}

#[test]
fn match_conditions() {
    fn with<'a>(sources: &'a [&'a str]) -> impl Fn(&mut WebhookConfiguration) + 'a {
        move |w| {
            w.match_condition_subject_access_review_version = "v1".into();
            w.match_conditions = conditions(sources);
        }
    }
    let errors = |sources: &[&str]| {
        let mut w = valid_webhook();
        with(sources)(&mut w);
        let a = AuthorizerConfiguration {
            webhook: Some(w),
            ..authorizer("Webhook", "w")
        };
        errors_of(vec![a])
    };
    let many: Vec<String> = (0..65).map(|i| format!("request.uid != '{i}'")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    assert_eq!(errors(&many[..64]), Vec::<String>::new());
    assert_eq!(
        errors(&many),
        ["authorizers[0].matchConditions: Too many: 65: must have at most 64 items"]
    );
    assert_eq!(
        errors(&["request.user != ''", " ", "request.user != ''"]),
        [
            "authorizers[0].matchConditions[1].expression: Required value",
            r#"authorizers[0].matchConditions[2].expression: Duplicate value: "request.user != ''""#,
        ]
    );
    assert_eq!(
        errors(&["'yes'", "size(request.groups)"]),
        [
            r#"authorizers[0].matchConditions[0].expression: Invalid value: "'yes'": must evaluate to bool but got string"#,
            r#"authorizers[0].matchConditions[1].expression: Invalid value: "size(request.groups)": must evaluate to bool but got int"#,
        ]
    );
    assert_eq!(
        errors(&["user.name == 'a'"]),
        [
            r#"authorizers[0].matchConditions[0].expression: Invalid value: "user.name == 'a'": compilation failed: undeclared reference to 'user' (only 'request' is declared)"#
        ]
    );
    let syntax = errors(&["request.user =="]);
    assert_eq!(syntax.len(), 1);
    let prefix = r#"authorizers[0].matchConditions[0].expression: Invalid value: "request.user ==": compilation failed: "#;
    assert!(syntax[0].starts_with(prefix), "{syntax:?}");
    let costly = errors(&["request.groups.all(a, request.groups.all(b, a != b))"]);
    assert!(costly[0].contains(": estimated cost "), "{costly:?}");
}
