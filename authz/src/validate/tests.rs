//! Loading: decoding, `apiVersion`/`kind`, the documented example in every version, defaults,
//! and the helpers of the validation tables: `authorizers.rs` (the chain: types, names,
//! `webhook` presence) and `webhook.rs` (a webhook's fields and match conditions).

use serde_json::{json, Value};

use super::*;
use crate::config::{AuthorizerConfiguration, WebhookConfiguration, WebhookConnectionInfo};

mod authorizers;
mod webhook;

/// The smallest webhook upstream accepts.
fn valid_webhook() -> WebhookConfiguration {
    WebhookConfiguration {
        timeout: GoDuration::seconds(3),
        subject_access_review_version: "v1".into(),
        failure_policy: "NoOpinion".into(),
        connection_info: WebhookConnectionInfo {
            type_: "KubeConfigFile".into(),
            kube_config_file: Some("/etc/apiagg/webhook.kubeconfig".into()),
        },
        ..WebhookConfiguration::default()
    }
}

/// `authorizers[i]` of this type and name, with the valid webhook when the type is `Webhook`.
fn authorizer(type_: &str, name: &str) -> AuthorizerConfiguration {
    AuthorizerConfiguration {
        type_: type_.into(),
        name: name.into(),
        webhook: (type_ == "Webhook").then(valid_webhook),
    }
}

/// The errors of a configuration holding these authorizers (none: empty).
fn errors_of(authorizers: Vec<AuthorizerConfiguration>) -> Vec<String> {
    let config = AuthorizationConfiguration {
        api_version: "apiserver.config.k8s.io/v1".into(),
        kind: config::KIND.into(),
        authorizers,
    };
    validate(&config).err().map(|e| e.0).unwrap_or_default()
}

/// The error of a file that does not load.
fn load_error(text: &str) -> Vec<String> {
    load(text.as_bytes()).expect_err("the file must not load").0
}

/// The example of the documentation: service accounts' requests go to a webhook first, then
/// RBAC decides, and what neither allows is denied.
fn documented(version: &str) -> String {
    format!(
        r#"apiVersion: apiserver.config.k8s.io/{version}
kind: AuthorizationConfiguration
authorizers:
- type: Webhook
  name: service-accounts.example.com
  webhook:
    timeout: 3s
    authorizedTTL: 5m
    unauthorizedTTL: 30s
    subjectAccessReviewVersion: v1
    matchConditionSubjectAccessReviewVersion: v1
    failurePolicy: NoOpinion
    connectionInfo:
      type: KubeConfigFile
      kubeConfigFile: /etc/apiagg/authz-webhook.kubeconfig
    matchConditions:
    # only service accounts' requests, and never kube-system's
    - expression: "'system:serviceaccounts' in request.groups"
    - expression: "!request.user.startsWith('system:serviceaccount:kube-system:')"
- type: RBAC
  name: rbac
- type: AlwaysDeny
  name: deny
"#
    )
}

/// A loaded chain as JSON, to compare it whole.
fn summary(loaded: &Loaded) -> Value {
    let authorizers: Vec<Value> = loaded
        .authorizers
        .iter()
        .map(|a| match a {
            AuthorizerSpec::Webhook(w) => json!({
                "type": a.type_name(), "name": a.name(),
                "timeout": format!("{:?}", w.timeout),
                "authorizedTTL": w.authorized_ttl.map(|d| format!("{d:?}")),
                "unauthorizedTTL": w.unauthorized_ttl.map(|d| format!("{d:?}")),
                "review": w.review_version.api_version(),
                "failurePolicy": format!("{:?}", w.failure_policy),
                "connection": format!("{:?}", w.connection),
                "matchConditions": w.match_conditions.sources().collect::<Vec<_>>(),
            }),
            _ => json!({ "type": a.type_name(), "name": a.name() }),
        })
        .collect();
    json!(authorizers)
}

#[test]
fn the_documented_file_loads_in_every_version() {
    for version in config::VERSIONS {
        let loaded = load(documented(version).as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            summary(&loaded),
            json!([
                {
                    "type": "Webhook", "name": "service-accounts.example.com",
                    "timeout": "3s", "authorizedTTL": "300s", "unauthorizedTTL": "30s",
                    "review": "authorization.k8s.io/v1", "failurePolicy": "NoOpinion",
                    "connection": r#"KubeConfigFile("/etc/apiagg/authz-webhook.kubeconfig")"#,
                    "matchConditions": [
                        "'system:serviceaccounts' in request.groups",
                        "!request.user.startsWith('system:serviceaccount:kube-system:')",
                    ],
                },
                { "type": "RBAC", "name": "rbac" },
                { "type": "AlwaysDeny", "name": "deny" },
            ]),
            "{version}"
        );
    }
}

#[test]
fn the_documented_webhook_is_asked_about_service_accounts_only() {
    let loaded = load(documented("v1").as_bytes()).expect("loads");
    let AuthorizerSpec::Webhook(webhook) = &loaded.authorizers[0] else {
        panic!("the first authorizer is the webhook");
    };
    let spec = |user: &str, groups: &[&str]| json!({ "user": user, "groups": groups, "resourceAttributes": { "verb": "get", "resource": "pods" } });
    let conditions = &webhook.match_conditions;
    let builder = spec(
        "system:serviceaccount:ci:builder",
        &["system:serviceaccounts", "system:authenticated"],
    );
    assert_eq!(conditions.evaluate(&builder), Ok(true));
    let kube_system = spec(
        "system:serviceaccount:kube-system:coredns",
        &["system:serviceaccounts"],
    );
    assert_eq!(conditions.evaluate(&kube_system), Ok(false));
    let alice = spec("alice", &["system:authenticated"]);
    assert_eq!(conditions.evaluate(&alice), Ok(false));
}

#[test]
fn defaults_are_upstream_ones() {
    let loaded = validate(&AuthorizationConfiguration {
        authorizers: vec![authorizer("Webhook", "w")],
        ..AuthorizationConfiguration::default()
    })
    .expect("valid");
    let AuthorizerSpec::Webhook(w) = &loaded.authorizers[0] else {
        panic!("a webhook");
    };
    assert_eq!(w.authorized_ttl, Some(DEFAULT_AUTHORIZED_TTL));
    assert_eq!(w.unauthorized_ttl, Some(DEFAULT_UNAUTHORIZED_TTL));
    assert_eq!(DEFAULT_AUTHORIZED_TTL, Duration::from_secs(300));
    assert_eq!(DEFAULT_UNAUTHORIZED_TTL, Duration::from_secs(30));
    assert!(w.match_conditions.is_empty());
    // 0s is the default too (upstream defaults before it validates); a cache turned off has
    // no TTL whatever the file says.
    let file = "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\nauthorizers:\n- type: Webhook\n  name: w\n  webhook:\n    timeout: 30s\n    authorizedTTL: 0s\n    unauthorizedTTL: 1m\n    cacheUnauthorizedRequests: false\n    subjectAccessReviewVersion: v1beta1\n    failurePolicy: Deny\n    connectionInfo:\n      type: InClusterConfig\n";
    let loaded = load(file.as_bytes()).expect("loads");
    assert_eq!(
        summary(&loaded),
        json!([{
            "type": "Webhook", "name": "w", "timeout": "30s",
            "authorizedTTL": "300s", "unauthorizedTTL": null,
            "review": "authorization.k8s.io/v1beta1", "failurePolicy": "Deny",
            "connection": "InClusterConfig", "matchConditions": [],
        }])
    );
}

#[test]
fn json_loads_as_yaml_does() {
    let file = json!({
        "apiVersion": "apiserver.config.k8s.io/v1beta1",
        "kind": "AuthorizationConfiguration",
        "authorizers": [{"type": "AlwaysAllow", "name": "allow"}, {"type": "RBAC", "name": "rbac"}],
    });
    for text in [
        file.to_string(),
        serde_json::to_string_pretty(&file).expect("json"),
    ] {
        let loaded = load(text.as_bytes()).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(
            summary(&loaded),
            json!([{"type": "AlwaysAllow", "name": "allow"}, {"type": "RBAC", "name": "rbac"}])
        );
    }
}

#[test]
fn decoding_errors() {
    let head = "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\n";
    let webhook = "authorizers:\n- type: Webhook\n  name: w\n  webhook:\n";
    let cases: [(String, &str); 11] = [
        (format!("{head}foo: 1\n"), "strict decoding error: unknown field `foo`, expected one of `apiVersion`, `kind`, `authorizers` at line 3 column 1"),
        (
            format!("{head}{webhook}    timeout: 3s\n    retries: 3\n"),
            "strict decoding error: authorizers[0].webhook: unknown field `retries`, expected one of `authorizedTTL`, `cacheAuthorizedRequests`, `unauthorizedTTL`, `cacheUnauthorizedRequests`, `timeout`, `subjectAccessReviewVersion`, `matchConditionSubjectAccessReviewVersion`, `failurePolicy`, `connectionInfo`, `matchConditions` at line 8 column 5",
        ),
        (
            format!("{head}{webhook}    connectionInfo:\n      type: KubeConfigFile\n      kubeconfigFile: /x\n"),
            "strict decoding error: authorizers[0].webhook.connectionInfo: unknown field `kubeconfigFile`, expected `type` or `kubeConfigFile` at line 9 column 7",
        ),
        (
            format!("{head}{webhook}    timeout: 3 seconds\n"),
            r#"decoding error: authorizers[0].webhook.timeout: time: unknown unit " seconds" in duration "3 seconds" at line 7 column 14"#,
        ),
        (format!("{head}authorizers: RBAC\n"), "decoding error: authorizers: invalid type: string \"RBAC\", expected a sequence at line 3 column 14"),
        ("\n".to_string(), "Object 'Kind' is missing"),
        ("kind: AuthorizationConfiguration\n".to_string(), "Object 'apiVersion' is missing"),
        (
            "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\n".to_string(),
            r#"no kind "AuthenticationConfiguration" is registered for version "apiserver.config.k8s.io/v1""#,
        ),
        (
            "apiVersion: apiserver.config.k8s.io/v2\nkind: AuthorizationConfiguration\n".to_string(),
            r#"no kind "AuthorizationConfiguration" is registered for version "apiserver.config.k8s.io/v2""#,
        ),
        (
            "apiVersion: v1\nkind: AuthorizationConfiguration\n".to_string(),
            r#"no kind "AuthorizationConfiguration" is registered for version "v1""#,
        ),
        // apiVersion and kind are checked before the rest is decoded strictly.
        (
            "apiVersion: apiserver.config.k8s.io/v1\nkind: Foo\nfoo: 1\n".to_string(),
            r#"no kind "Foo" is registered for version "apiserver.config.k8s.io/v1""#,
        ),
    ];
    for (text, want) in cases {
        assert_eq!(load_error(&text), [want], "{text:?}");
    }
}

#[test]
fn an_empty_file_has_no_authorizer() {
    let want = ["authorizers: Required value: at least one authorization mode must be defined"];
    assert_eq!(load(b"").expect_err("no authorizer").0, want);
    let file = "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\n";
    assert_eq!(load_error(file), want);
    assert_eq!(load_error(&format!("{file}authorizers: []\n")), want);
}

#[test]
fn errors_print_as_go_aggregates_them() {
    let one = ValidationErrors(vec!["a: Required value".into()]);
    assert_eq!(one.to_string(), "a: Required value");
    let two = ValidationErrors(vec!["a".into(), "b".into(), "a".into()]);
    assert_eq!(two.to_string(), "[a, b]");
}

/// The complete file docs/trust-and-security.md shows users is valid as written.
#[test]
fn the_documented_example_loads() {
    let doc =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/trust-and-security.md");
    let text = std::fs::read_to_string(&doc).expect("docs/trust-and-security.md");
    let after = text
        .split_once("### A complete file")
        .expect("the example's heading")
        .1;
    let block = after
        .split_once("```yaml\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .expect("the example's YAML block")
        .0;
    let loaded = load(block.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    let types: Vec<&str> = loaded.authorizers.iter().map(|a| a.type_name()).collect();
    assert_eq!(types, ["Webhook", "RBAC", "AlwaysDeny"]);
    let AuthorizerSpec::Webhook(webhook) = &loaded.authorizers[0] else {
        panic!("a webhook first");
    };
    assert_eq!(webhook.match_conditions.len(), 2);
    let service_account = serde_json::json!({
        "user": "system:serviceaccount:team:robot", "groups": ["system:serviceaccounts"],
        "resourceAttributes": {"verb": "list", "resource": "pods"}});
    assert_eq!(
        webhook.match_conditions.evaluate(&service_account).ok(),
        Some(true)
    );
    let admin = serde_json::json!({
        "user": "system:serviceaccount:team:robot", "groups": ["system:masters"],
        "resourceAttributes": {"verb": "list", "resource": "pods"}});
    assert_eq!(webhook.match_conditions.evaluate(&admin).ok(), Some(false));
}
