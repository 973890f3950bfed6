//! Go durations, read and printed as Go does, and the file's strict types.

use super::*;

#[test]
fn go_durations_parse_as_go_parses_them() {
    let cases: [(&str, i64); 14] = [
        ("0", 0),
        ("0s", 0),
        ("3s", 3_000_000_000),
        ("+3s", 3_000_000_000),
        ("-30s", -30_000_000_000),
        ("5m", 300_000_000_000),
        ("1m30s", 90_000_000_000),
        ("1.5h", 5_400_000_000_000),
        ("1h2m3.5s", 3_723_500_000_000),
        (".5s", 500_000_000),
        ("100ms", 100_000_000),
        ("10us", 10_000),
        ("10\u{b5}s", 10_000),
        ("7ns", 7),
    ];
    for (text, nanos) in cases {
        assert_eq!(GoDuration::parse(text), Ok(GoDuration(nanos)), "{text}");
    }
    let errors = [
        ("", r#"time: invalid duration """#),
        ("3", r#"time: missing unit in duration "3""#),
        ("3x", r#"time: unknown unit "x" in duration "3x""#),
        ("s", r#"time: invalid duration "s""#),
        (".s", r#"time: invalid duration ".s""#),
        ("-", r#"time: invalid duration "-""#),
        ("1d", r#"time: unknown unit "d" in duration "1d""#),
        ("3 s", r#"time: unknown unit " s" in duration "3 s""#),
        (
            "9999999999999999999h",
            r#"time: invalid duration "9999999999999999999h""#,
        ),
        ("3000000h", r#"time: invalid duration "3000000h""#),
    ];
    for (text, want) in errors {
        assert_eq!(GoDuration::parse(text), Err(want.to_string()), "{text:?}");
    }
}

#[test]
fn go_durations_print_as_go_prints_them() {
    let cases: [(i64, &str); 10] = [
        (0, "0s"),
        (7, "7ns"),
        (1_500, "1.5\u{b5}s"),
        (1_500_000, "1.5ms"),
        (3_000_000_000, "3s"),
        (-30_000_000_000, "-30s"),
        (60_000_000_000, "1m0s"),
        (90_500_000_000, "1m30.5s"),
        (3_600_000_000_000, "1h0m0s"),
        (3_723_500_000_000, "1h2m3.5s"),
    ];
    for (nanos, text) in cases {
        assert_eq!(GoDuration(nanos).to_string(), text, "{nanos}");
    }
    assert_eq!(
        GoDuration::seconds(3).to_std(),
        Some(std::time::Duration::from_secs(3))
    );
    assert_eq!(GoDuration(-1).to_std(), None);
}

#[test]
fn every_field_decodes() {
    let file = r#"
apiVersion: apiserver.config.k8s.io/v1
kind: AuthorizationConfiguration
authorizers:
- type: Webhook
  name: webhook
  webhook:
    authorizedTTL: 1m
    cacheAuthorizedRequests: false
    unauthorizedTTL: 10s
    cacheUnauthorizedRequests: true
    timeout: 3s
    subjectAccessReviewVersion: v1
    matchConditionSubjectAccessReviewVersion: v1
    failurePolicy: Deny
    connectionInfo:
      type: KubeConfigFile
      kubeConfigFile: /etc/apiagg/webhook.kubeconfig
    matchConditions:
    - expression: request.user != ''
- type: RBAC
  name: rbac
"#;
    let config: AuthorizationConfiguration = serde_yaml_ng::from_str(file).expect("decodes");
    let webhook = config.authorizers[0].webhook.clone().expect("webhook");
    assert_eq!(
        webhook,
        WebhookConfiguration {
            authorized_ttl: GoDuration::seconds(60),
            cache_authorized_requests: Some(false),
            unauthorized_ttl: GoDuration::seconds(10),
            cache_unauthorized_requests: Some(true),
            timeout: GoDuration::seconds(3),
            subject_access_review_version: "v1".into(),
            match_condition_subject_access_review_version: "v1".into(),
            failure_policy: "Deny".into(),
            connection_info: WebhookConnectionInfo {
                type_: "KubeConfigFile".into(),
                kube_config_file: Some("/etc/apiagg/webhook.kubeconfig".into()),
            },
            match_conditions: vec![WebhookMatchCondition {
                expression: "request.user != ''".into()
            }],
        }
    );
    assert_eq!(config.authorizers[1].type_, "RBAC");
    assert_eq!(config.authorizers[1].webhook, None);
}

#[test]
fn durations_must_be_strings() {
    let file = "apiVersion: v\nkind: k\nauthorizers:\n- webhook:\n    timeout: 3\n";
    let e = serde_yaml_ng::from_str::<AuthorizationConfiguration>(file).expect_err("a number");
    assert_eq!(
        e.to_string(),
        r#"authorizers[0].webhook.timeout: time: missing unit in duration "3" at line 5 column 14"#
    );
    let file = "apiVersion: v\nkind: k\nauthorizers:\n- webhook:\n    timeout: [3s]\n";
    let e = serde_yaml_ng::from_str::<AuthorizationConfiguration>(file).expect_err("a list");
    assert!(
        e.to_string()
            .contains("expected a Go duration string such as \"3s\" or \"1m30s\""),
        "{e}"
    );
    let file = "apiVersion: v\nkind: k\nauthorizers:\n- webhook:\n    timeout: 3x\n";
    let e = serde_yaml_ng::from_str::<AuthorizationConfiguration>(file).expect_err("a unit");
    assert!(
        e.to_string()
            .contains(r#"time: unknown unit "x" in duration "3x""#),
        "{e}"
    );
}
