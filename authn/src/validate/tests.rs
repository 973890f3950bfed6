//! Loading: decoding, `apiVersion`/`kind`, a complete file in every version, and the helpers of
//! the validation tables: `configuration.rs` (the file's own checks, `anonymous`, messages),
//! `issuer.rs`, `rules.rs` (claim and user validation rules), `mappings.rs` (claim mappings).

use serde_json::{json, Value};

use super::*;
use crate::config::{AnonymousConfig, ClaimMappings, Issuer};

mod configuration;
mod issuer;
mod mappings;
mod rules;

/// A valid issuer: the smallest `jwt[i]` upstream accepts.
fn valid() -> config::JwtAuthenticator {
    config::JwtAuthenticator {
        issuer: Issuer {
            url: "https://issuer.example".to_string(),
            audiences: vec!["apiagg".to_string()],
            ..Issuer::default()
        },
        claim_mappings: ClaimMappings {
            username: PrefixedClaimOrExpression {
                claim: "sub".to_string(),
                prefix: Some("oidc:".to_string()),
                ..PrefixedClaimOrExpression::default()
            },
            ..ClaimMappings::default()
        },
        ..config::JwtAuthenticator::default()
    }
}

/// The errors of a configuration holding these issuers (none: empty).
fn errors_of(
    jwt: Vec<config::JwtAuthenticator>,
    anonymous: Option<AnonymousConfig>,
) -> Vec<String> {
    let config = AuthenticationConfiguration {
        api_version: "apiserver.config.k8s.io/v1".to_string(),
        kind: "AuthenticationConfiguration".to_string(),
        jwt,
        anonymous,
    };
    validate(&config).err().map(|e| e.0).unwrap_or_default()
}

/// A change to the valid issuer.
type Edit = fn(&mut config::JwtAuthenticator);

/// Applies each edit to [`valid`] and expects exactly these errors, in this order.
fn check(cases: &[(&str, Edit, &[&str])]) {
    for (name, edit, want) in cases {
        let mut authenticator = valid();
        edit(&mut authenticator);
        assert_eq!(errors_of(vec![authenticator], None), *want, "case {name:?}");
    }
}

/// The error of a file that does not load.
fn load_error(text: &str) -> Vec<String> {
    load(text.as_bytes()).expect_err("the file must not load").0
}

/// A self-signed certificate, PEM.
fn certificate() -> String {
    rcgen::generate_simple_self_signed(vec!["ca.example".to_string()])
        .expect("generate a certificate")
        .cert
        .pem()
}

/// A complete file: every field of the configuration set.
fn complete(version: &str, ca: &str) -> String {
    let ca: String = ca.lines().map(|l| format!("      {l}\n")).collect();
    format!(
        r#"apiVersion: apiserver.config.k8s.io/{version}
kind: AuthenticationConfiguration
jwt:
- issuer:
    url: https://issuer.example
    discoveryURL: https://discovery.example/.well-known/openid-configuration
    certificateAuthority: |
{ca}    audiences: [apiagg, kubernetes]
    audienceMatchPolicy: MatchAny
    egressSelectorType: controlplane
  claimValidationRules:
  - claim: hd
    requiredValue: example.com
  - expression: claims.exp - claims.nbf <= 86400
    message: total token lifetime must not exceed 24 hours
  - expression: claims.email_verified == true
  claimMappings:
    username:
      claim: sub
      prefix: "oidc:"
    groups:
      claim: groups
      prefix: "oidc:"
    uid:
      claim: sub
    extra:
    - key: example.com/tenant
      valueExpression: claims.tenant
  userValidationRules:
  - expression: "!user.username.startsWith('system:')"
    message: 'username cannot use reserved system: prefix'
- issuer:
    url: https://other.example
    audiences: [apiagg]
  claimMappings:
    username:
      expression: "'other:' + claims.sub"
    groups:
      expression: claims.roles
    uid:
      expression: claims.sub
anonymous:
  enabled: true
  conditions:
  - path: /livez
  - path: /readyz
"#
    )
}

fn source(s: &Source) -> Value {
    match s {
        Source::Claim { claim, prefix } => json!({ "claim": claim, "prefix": prefix }),
        Source::Expression(e) => json!({ "expression": e.source() }),
    }
}

/// A compiled issuer as JSON, to compare it whole.
fn summary(a: &JwtAuthenticator) -> Value {
    let rules = |rules: &[Rule]| -> Vec<Value> {
        rules
            .iter()
            .map(|r| json!([r.expression.source(), r.message]))
            .collect()
    };
    json!({
        "issuer": a.issuer,
        "discoveryURL": a.discovery_url,
        "certificateAuthority": !a.certificate_authority.is_empty(),
        "audiences": a.audiences,
        "requiredClaims": a.required_claims,
        "claimRules": rules(&a.claim_rules),
        "username": source(&a.username),
        "groups": a.groups.as_ref().map(source),
        "uid": a.uid.as_ref().map(source),
        "extra": a.extra.iter().map(|(k, e)| json!([k, e.source()])).collect::<Vec<_>>(),
        "userRules": rules(&a.user_rules),
    })
}

#[test]
fn a_complete_file_loads_in_every_version() {
    let ca = certificate();
    for version in config::VERSIONS {
        let loaded =
            load(complete(version, &ca).as_bytes()).unwrap_or_else(|e| panic!("{version}: {e}"));
        assert_eq!(loaded.jwt[0].certificate_authority, ca, "{version}");
        let jwt: Vec<Value> = loaded.jwt.iter().map(summary).collect();
        assert_eq!(
            jwt,
            [
                json!({
                    "issuer": "https://issuer.example",
                    "discoveryURL": "https://discovery.example/.well-known/openid-configuration",
                    "certificateAuthority": true,
                    "audiences": ["apiagg", "kubernetes"],
                    "requiredClaims": [["hd", "example.com"]],
                    "claimRules": [
                        ["claims.exp - claims.nbf <= 86400", "total token lifetime must not exceed 24 hours"],
                        ["claims.email_verified == true", "expression claims.email_verified == true returned false"],
                    ],
                    "username": { "claim": "sub", "prefix": "oidc:" },
                    "groups": { "claim": "groups", "prefix": "oidc:" },
                    "uid": { "claim": "sub", "prefix": "" },
                    "extra": [["example.com/tenant", "claims.tenant"]],
                    "userRules": [[
                        "!user.username.startsWith('system:')",
                        "username cannot use reserved system: prefix",
                    ]],
                }),
                json!({
                    "issuer": "https://other.example",
                    "discoveryURL": "",
                    "certificateAuthority": false,
                    "audiences": ["apiagg"],
                    "requiredClaims": [],
                    "claimRules": [],
                    "username": { "expression": "'other:' + claims.sub" },
                    "groups": { "expression": "claims.roles" },
                    "uid": { "expression": "claims.sub" },
                    "extra": [],
                    "userRules": [],
                }),
            ],
            "{version}"
        );
        let paths = Some(vec!["/livez".to_string(), "/readyz".to_string()]);
        assert_eq!(
            loaded.anonymous,
            Some(Anonymous {
                enabled: true,
                paths
            }),
            "{version}"
        );
    }
}

#[test]
fn the_loaded_issuer_maps_claims() {
    let loaded = load(complete("v1", &certificate()).as_bytes()).expect("loads");
    let claims = json!({
        "sub": "alice", "groups": ["dev"], "hd": "example.com", "exp": 1000, "nbf": 100,
        "email_verified": true, "tenant": "t1",
    });
    let Value::Object(claims) = claims else {
        unreachable!()
    };
    let identity = loaded.jwt[0].map(&claims).expect("maps");
    assert_eq!(identity.username, "oidc:alice");
    assert_eq!(identity.uid, "alice");
    assert_eq!(identity.groups, ["oidc:dev"]);
    assert_eq!(
        identity.extra.get("example.com/tenant"),
        Some(&vec!["t1".to_string()])
    );
}

#[test]
fn json_loads_as_yaml_does() {
    let file = json!({
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "AuthenticationConfiguration",
        "jwt": [{
            "issuer": { "url": "https://issuer.example", "audiences": ["apiagg"] },
            "claimMappings": { "username": { "claim": "sub", "prefix": "" } },
        }],
        "anonymous": { "enabled": false },
    });
    for text in [
        file.to_string(),
        serde_json::to_string_pretty(&file).expect("json"),
    ] {
        let loaded = load(text.as_bytes()).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(loaded.jwt.len(), 1);
        assert_eq!(
            source(&loaded.jwt[0].username),
            json!({ "claim": "sub", "prefix": "" })
        );
        assert_eq!(
            loaded.anonymous,
            Some(Anonymous {
                enabled: false,
                paths: None
            })
        );
    }
    let loaded = load(
        br#"{"apiVersion":"apiserver.config.k8s.io/v1beta1","kind":"AuthenticationConfiguration"}"#,
    )
    .expect("an empty configuration loads");
    assert!(loaded.jwt.is_empty() && loaded.anonymous.is_none());
}

#[test]
fn decoding_errors() {
    let head = "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\n";
    let cases: [(String, &str); 11] = [
        (format!("{head}foo: 1\n"), "strict decoding error: unknown field `foo`, expected one of `apiVersion`, `kind`, `jwt`, `anonymous` at line 3 column 1"),
        (
            format!("{head}jwt:\n- issuer:\n    url: https://x\n    bar: 1\n"),
            "strict decoding error: jwt[0].issuer: unknown field `bar`, expected one of `url`, `discoveryURL`, `certificateAuthority`, `audiences`, `audienceMatchPolicy`, `egressSelectorType` at line 6 column 5",
        ),
        (format!("{head}jwt: 3\n"), "decoding error: jwt: invalid type: integer `3`, expected a sequence at line 3 column 6"),
        (String::new(), "Object 'Kind' is missing"),
        ("apiVersion: apiserver.config.k8s.io/v1\n".to_string(), "Object 'Kind' is missing"),
        ("kind: AuthenticationConfiguration\n".to_string(), "Object 'apiVersion' is missing"),
        (
            "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\n".to_string(),
            r#"no kind "AuthorizationConfiguration" is registered for version "apiserver.config.k8s.io/v1""#,
        ),
        (
            "apiVersion: apiserver.config.k8s.io/v2\nkind: AuthenticationConfiguration\n".to_string(),
            r#"no kind "AuthenticationConfiguration" is registered for version "apiserver.config.k8s.io/v2""#,
        ),
        (
            "apiVersion: example.com/v1\nkind: AuthenticationConfiguration\n".to_string(),
            r#"no kind "AuthenticationConfiguration" is registered for version "example.com/v1""#,
        ),
        (
            "apiVersion: v1\nkind: AuthenticationConfiguration\n".to_string(),
            r#"no kind "AuthenticationConfiguration" is registered for version "v1""#,
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
