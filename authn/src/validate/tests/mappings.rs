//! `jwt[i].claimMappings`.

use super::rules::{claim_rule, user_rule};
use super::*;
use crate::config::ExtraMapping;

fn extra(key: &str, value_expression: &str) -> ExtraMapping {
    ExtraMapping {
        key: key.into(),
        value_expression: value_expression.into(),
    }
}

pub(super) fn username_expression(a: &mut config::JwtAuthenticator, expression: &str) {
    a.claim_mappings.username = PrefixedClaimOrExpression {
        expression: expression.into(),
        ..PrefixedClaimOrExpression::default()
    };
}

#[test]
fn username() {
    check(&[
        ("claim with an empty prefix", |a| a.claim_mappings.username.prefix = Some(String::new()), &[]),
        ("expression", |a| username_expression(a, "'u:' + claims.sub"), &[]),
        (
            "neither",
            |a| a.claim_mappings.username = PrefixedClaimOrExpression::default(),
            &["jwt[0].claimMappings.username: Required value: claim or expression is required"],
        ),
        (
            "neither, with a prefix",
            |a| a.claim_mappings.username.claim = String::new(),
            &["jwt[0].claimMappings.username: Required value: claim or expression is required"],
        ),
        (
            "claim and expression",
            |a| a.claim_mappings.username.expression = "claims.sub".into(),
            &[r#"jwt[0].claimMappings.username: Invalid value: "": claim and expression can't both be set"#],
        ),
        (
            "prefix with expression",
            |a| {
                username_expression(a, "claims.sub");
                a.claim_mappings.username.prefix = Some(String::new());
            },
            &[r#"jwt[0].claimMappings.username.prefix: Invalid value: "": may not be specified when expression is set"#],
        ),
        (
            "claim without prefix",
            |a| a.claim_mappings.username.prefix = None,
            &["jwt[0].claimMappings.username.prefix: Required value: prefix is required when claim is set. It can be set to an empty string to disable prefixing"],
        ),
        (
            "system: prefix",
            |a| a.claim_mappings.username.prefix = Some("system:x".into()),
            &[r#"jwt[0].claimMappings.username.prefix: Invalid value: "system:x": must not start with "system:" (reserved for Kubernetes identities)"#],
        ),
        ("prefix containing system:", |a| a.claim_mappings.username.prefix = Some("oidc:system:".into()), &[]),
        (
            "undeclared variable",
            |a| username_expression(a, "user.username"),
            &[r#"jwt[0].claimMappings.username.expression: Invalid value: "user.username": compilation failed: undeclared reference to 'user' (only 'claims' is declared)"#],
        ),
        ("blank expression", |a| username_expression(a, " "), &["jwt[0].claimMappings.username.expression: Required value"]),
    ]);
}

#[test]
fn groups() {
    check(&[
        ("none", |_| {}, &[]),
        ("claim with a prefix", |a| set_groups(a, "groups", Some("oidc:"), ""), &[]),
        ("claim with an empty prefix", |a| set_groups(a, "groups", Some(""), ""), &[]),
        ("expression", |a| set_groups(a, "", None, "claims.roles"), &[]),
        (
            "prefix alone",
            |a| set_groups(a, "", Some("oidc:"), ""),
            &[],
        ),
        (
            "claim and expression",
            |a| set_groups(a, "groups", Some(""), "claims.roles"),
            &[r#"jwt[0].claimMappings.groups: Invalid value: "": claim and expression can't both be set"#],
        ),
        (
            "prefix with expression",
            |a| set_groups(a, "", Some("g:"), "claims.roles"),
            &[r#"jwt[0].claimMappings.groups.prefix: Invalid value: "g:": may not be specified when expression is set"#],
        ),
        (
            "claim without prefix",
            |a| set_groups(a, "groups", None, ""),
            &["jwt[0].claimMappings.groups.prefix: Required value: prefix is required when claim is set. It can be set to an empty string to disable prefixing"],
        ),
        (
            "system: prefix",
            |a| set_groups(a, "groups", Some("system:"), ""),
            &[r#"jwt[0].claimMappings.groups.prefix: Invalid value: "system:": must not start with "system:" (reserved for Kubernetes identities)"#],
        ),
        (
            "undeclared variable",
            |a| set_groups(a, "", None, "roles"),
            &[r#"jwt[0].claimMappings.groups.expression: Invalid value: "roles": compilation failed: undeclared reference to 'roles' (only 'claims' is declared)"#],
        ),
    ]);
}

fn set_groups(
    a: &mut config::JwtAuthenticator,
    claim: &str,
    prefix: Option<&str>,
    expression: &str,
) {
    a.claim_mappings.groups = PrefixedClaimOrExpression {
        claim: claim.into(),
        prefix: prefix.map(String::from),
        expression: expression.into(),
    };
}

#[test]
fn uid() {
    check(&[
        ("claim", |a| a.claim_mappings.uid.claim = "sub".into(), &[]),
        (
            "expression",
            |a| a.claim_mappings.uid.expression = "claims.sub".into(),
            &[],
        ),
        (
            "claim and expression",
            |a| {
                a.claim_mappings.uid.claim = "sub".into();
                a.claim_mappings.uid.expression = "claims.sub".into();
            },
            &[
                r#"jwt[0].claimMappings.uid: Invalid value: "": claim and expression can't both be set"#,
            ],
        ),
        (
            "undeclared variable",
            |a| a.claim_mappings.uid.expression = "sub".into(),
            &[
                r#"jwt[0].claimMappings.uid.expression: Invalid value: "sub": compilation failed: undeclared reference to 'sub' (only 'claims' is declared)"#,
            ],
        ),
    ]);
}

#[test]
fn extra_mappings() {
    const DNS: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
    let cases: [(Vec<ExtraMapping>, Vec<String>); 13] = [
        (vec![extra("example.org/team", "claims.team"), extra("a.example.org/x~y", "[claims.a]")], vec![]),
        (vec![extra("notk8s.io/x", "claims.x"), extra("k8s.iox/x", "claims.x")], vec![]),
        (
            vec![extra("", "claims.x")],
            vec!["jwt[0].claimMappings.extra[0].key: Required value".into()],
        ),
        (
            vec![extra("team", "claims.x"), extra("/team", "claims.x"), extra("example.org/", "claims.x")],
            ["team", "/team", "example.org/"]
                .iter()
                .enumerate()
                .map(|(i, k)| format!(r#"jwt[0].claimMappings.extra[{i}].key: Invalid value: "{k}": must be a domain-prefixed path (such as "acme.io/foo")"#))
                .collect(),
        ),
        (
            vec![extra("Example.org/team", "claims.x")],
            vec![
                format!(r#"jwt[0].claimMappings.extra[0].key: Invalid value: "Example.org": {DNS}"#),
                r#"jwt[0].claimMappings.extra[0].key: Invalid value: "Example.org/team": must be lowercase"#.into(),
            ],
        ),
        (
            vec![extra("-a.org/team", "claims.x"), extra("a..org/team", "claims.x")],
            vec![
                format!(r#"jwt[0].claimMappings.extra[0].key: Invalid value: "-a.org": {DNS}"#),
                format!(r#"jwt[0].claimMappings.extra[1].key: Invalid value: "a..org": {DNS}"#),
            ],
        ),
        (
            vec![extra(&format!("{}.org/team", "a".repeat(250)), "claims.x")],
            vec![format!(
                r#"jwt[0].claimMappings.extra[0].key: Invalid value: "{}.org": must be no more than 253 characters"#,
                "a".repeat(250)
            )],
        ),
        (
            vec![extra("example.org/a b", "claims.x")],
            vec![r#"jwt[0].claimMappings.extra[0].key: Invalid value: "a b": Invalid path (regex used for validation is '[A-Za-z0-9/\-._~%!$&'()*+,;=:]+')"#.into()],
        ),
        (
            vec![extra("example.org/Team", "claims.x")],
            vec![r#"jwt[0].claimMappings.extra[0].key: Invalid value: "example.org/Team": must be lowercase"#.into()],
        ),
        (
            vec![extra("kubernetes.io/x", "claims.x"), extra("a.k8s.io/x", "claims.x")],
            ["kubernetes.io/x", "a.k8s.io/x"]
                .iter()
                .enumerate()
                .map(|(i, k)| format!(r#"jwt[0].claimMappings.extra[{i}].key: Invalid value: "{k}": k8s.io, kubernetes.io and their subdomains are reserved for Kubernetes use"#))
                .collect(),
        ),
        (
            vec![extra("example.org/a", "claims.a"), extra("example.org/a", "")],
            vec![r#"jwt[0].claimMappings.extra[1].key: Duplicate value: "example.org/a""#.into()],
        ),
        (
            vec![extra("example.org/a", "")],
            vec!["jwt[0].claimMappings.extra[0].valueExpression: Required value".into()],
        ),
        (
            vec![extra("example.org/a", "user.extra")],
            vec![r#"jwt[0].claimMappings.extra[0].valueExpression: Invalid value: "user.extra": compilation failed: undeclared reference to 'user' (only 'claims' is declared)"#.into()],
        ),
    ];
    for (mappings, want) in cases {
        let mut a = valid();
        a.claim_mappings.extra = mappings.clone();
        assert_eq!(errors_of(vec![a], None), want, "{mappings:?}");
    }
}

#[test]
fn email_verified_must_be_read_with_email() {
    const WHY: &str = "claims.email_verified must be used in claimMappings.username.expression or claimMappings.extra[*].valueExpression or claimValidationRules[*].expression when claims.email is used in claimMappings.username.expression";
    let missing = format!(
        r#"jwt[0].claimMappings.username.expression: Invalid value: "claims.email": {WHY}"#
    );
    let email = |a: &mut config::JwtAuthenticator| username_expression(a, "claims.email");
    let cases: [(&str, Edit, Vec<String>); 7] = [
        ("email alone", email, vec![missing.clone()]),
        (
            "in the username",
            |a| username_expression(a, "claims.email_verified ? claims.email : ''"),
            vec![],
        ),
        (
            "in a claim rule",
            |a| {
                username_expression(a, "claims.email");
                a.claim_validation_rules = vec![claim_rule("", "", "claims.email_verified", "")];
            },
            vec![],
        ),
        (
            "in an extra mapping",
            |a| {
                username_expression(a, "claims.email");
                a.claim_mappings.extra =
                    vec![extra("example.org/v", "string(claims.email_verified)")];
            },
            vec![],
        ),
        (
            "a required claim does not count",
            |a| {
                username_expression(a, "claims.email");
                a.claim_validation_rules = vec![claim_rule("email_verified", "true", "", "")];
            },
            vec![missing.clone()],
        ),
        (
            "a user rule does not count",
            |a| {
                username_expression(a, "claims.email");
                a.user_validation_rules =
                    vec![user_rule("user.extra['email_verified'] == ['true']")];
            },
            vec![missing.clone()],
        ),
        // The claim form is checked when a token is mapped, as upstream does.
        (
            "the email claim",
            |a| a.claim_mappings.username.claim = "email".into(),
            vec![],
        ),
    ];
    for (name, edit, want) in cases {
        let mut a = valid();
        edit(&mut a);
        assert_eq!(errors_of(vec![a], None), want, "{name}");
    }
}
