use std::collections::BTreeMap;

use jsonwebtoken::Algorithm;
use serde_json::{json, Map, Value};

use super::*;
use crate::expr::Scope;
use crate::jwt::tests::{claims, key_set, now, Signer};

fn expr(source: &str) -> Expression {
    Expression::compile(source, Scope::Claims).expect(source)
}

fn authenticator(username: Source) -> JwtAuthenticator {
    JwtAuthenticator {
        issuer: "https://issuer.example.com".into(),
        discovery_url: String::new(),
        certificate_authority: String::new(),
        audiences: vec!["kubernetes".into()],
        required_claims: Vec::new(),
        claim_rules: Vec::new(),
        username,
        groups: None,
        uid: None,
        extra: Vec::new(),
        user_rules: Vec::new(),
    }
}

fn claim(claim: &str, prefix: &str) -> Source {
    Source::Claim {
        claim: claim.into(),
        prefix: prefix.into(),
    }
}

fn object(v: Value) -> Map<String, Value> {
    v.as_object().cloned().expect("object")
}

#[test]
fn claims_map_to_a_user_with_prefixes() {
    let mut a = authenticator(claim("sub", "oidc:"));
    a.groups = Some(claim("groups", "oidc:"));
    a.uid = Some(claim("uid", ""));
    a.extra = vec![
        (
            "example.org/team".into(),
            expr("has(claims.team) ? claims.team : ''"),
        ),
        ("example.org/none".into(), expr("''")),
    ];
    let user = a
        .map(&object(
            json!({"sub": "alice", "groups": ["dev", "ops"], "uid": "u-1", "team": "blue"}),
        ))
        .expect("user");
    assert_eq!(
        user,
        Identity {
            username: "oidc:alice".into(),
            uid: "u-1".into(),
            groups: vec!["oidc:dev".into(), "oidc:ops".into()],
            extra: BTreeMap::from([("example.org/team".into(), vec!["blue".into()])]),
        }
    );
    // A single group as a string; no groups claim at all.
    let one = a
        .map(&object(json!({"sub": "bob", "groups": "dev", "uid": "u"})))
        .expect("user");
    assert_eq!(one.groups, vec!["oidc:dev"]);
    let none = a
        .map(&object(json!({"sub": "bob", "uid": "u"})))
        .expect("user");
    assert!(none.groups.is_empty());
    let refused = |claims: Value| a.map(&object(claims)).err();
    assert!(matches!(
        refused(json!({"sub": "bob", "uid": "u", "groups": ["dev", 7]})),
        Some(MappingError::Claim { what: "groups", .. })
    ));
    assert!(matches!(
        refused(json!({"sub": "bob"})),
        Some(MappingError::Claim { what: "uid", .. })
    ));
    assert!(matches!(
        refused(json!({"uid": "u"})),
        Some(MappingError::Claim {
            what: "username",
            ..
        })
    ));
    assert!(matches!(
        refused(json!({"sub": 42, "uid": "u"})),
        Some(MappingError::Claim {
            what: "username",
            ..
        })
    ));
}

#[test]
fn email_usernames_need_a_verified_email_when_it_is_said() {
    let a = authenticator(claim("email", ""));
    let ok = a
        .map(&object(
            json!({"email": "a@example.com", "email_verified": true}),
        ))
        .expect("user");
    assert_eq!(ok.username, "a@example.com");
    assert!(a.map(&object(json!({"email": "a@example.com"}))).is_ok());
    for bad in [json!(false), json!("true"), json!(null)] {
        assert_eq!(
            a.map(&object(
                json!({"email": "a@example.com", "email_verified": bad})
            )),
            Err(MappingError::EmailNotVerified)
        );
    }
}

#[test]
fn expressions_map_and_their_types_are_checked() {
    let mut a = authenticator(Source::Expression(expr("'user:' + claims.sub")));
    a.groups = Some(Source::Expression(expr("claims.roles.map(r, 'role:' + r)")));
    a.uid = Some(Source::Expression(expr("claims.sub + '-id'")));
    let user = a
        .map(&object(json!({"sub": "alice", "roles": ["a"]})))
        .expect("user");
    assert_eq!(
        (user.username.as_str(), user.uid.as_str()),
        ("user:alice", "alice-id")
    );
    assert_eq!(user.groups, vec!["role:a"]);
    let a = authenticator(Source::Expression(expr("claims.n")));
    assert!(matches!(
        a.map(&object(json!({"n": 5}))),
        Err(MappingError::Expression {
            what: "username",
            ..
        })
    ));
    assert_eq!(
        a.map(&object(json!({"n": ""}))),
        Err(MappingError::EmptyUsername)
    );
}

#[test]
fn rules_refuse_with_their_message() {
    let mut a = authenticator(claim("sub", ""));
    a.required_claims = vec![("hd".into(), "example.com".into())];
    a.claim_rules = vec![Rule {
        expression: expr("claims.sub != 'root'"),
        message: "no root".into(),
    }];
    a.user_rules = vec![Rule {
        expression: Expression::compile("!user.username.startsWith('blocked-')", Scope::User)
            .expect("user rule"),
        message: "no blocked users".into(),
    }];
    let map = |claims: Value| a.map(&object(claims));
    assert!(map(json!({"sub": "alice", "hd": "example.com"})).is_ok());
    let missing = MappingError::RequiredClaim("hd".into());
    assert_eq!(map(json!({"sub": "alice"})), Err(missing.clone()));
    assert_eq!(map(json!({"sub": "alice", "hd": "evil.com"})), Err(missing));
    assert_eq!(
        map(json!({"sub": "root", "hd": "example.com"})),
        Err(MappingError::Rule("no root".into()))
    );
    assert_eq!(
        map(json!({"sub": "blocked-eve", "hd": "example.com"})),
        Err(MappingError::Rule("no blocked users".into()))
    );
    let mut not_bool = authenticator(claim("sub", ""));
    not_bool.claim_rules = vec![Rule {
        expression: expr("claims.sub"),
        message: "m".into(),
    }];
    assert!(matches!(
        not_bool.map(&object(json!({"sub": "x"}))),
        Err(MappingError::Expression { .. })
    ));
}

#[test]
fn a_signed_token_authenticates_end_to_end() {
    let s = Signer::ec(Algorithm::ES256, "k");
    let keys = key_set(&[&s]);
    let a = authenticator(claim("sub", "oidc:"));
    let accepted = a
        .authenticate(&s.sign(&claims(json!({}))), &keys, now())
        .expect("user");
    assert_eq!(accepted.identity.username, "oidc:alice");
    assert_eq!(accepted.kid.as_deref(), Some("k"));
    assert!(accepted.expires > now());
    let other = Signer::ec(Algorithm::ES256, "k");
    assert_eq!(
        a.authenticate(&other.sign(&claims(json!({}))), &keys, now())
            .err(),
        Some(MappingError::Token(crate::jwt::TokenError::Signature))
    );
}

#[test]
fn reserved_names_are_never_mapped() {
    let mut a = authenticator(claim("sub", ""));
    a.groups = Some(claim("groups", ""));
    let map = |claims: Value| a.map(&object(claims));
    assert!(map(json!({"sub": "alice", "groups": ["dev"]})).is_ok());
    assert_eq!(
        map(json!({"sub": "system:serviceaccount:kube-system:admin"})),
        Err(MappingError::Reserved {
            what: "username",
            name: "system:serviceaccount:kube-system:admin".into()
        })
    );
    assert_eq!(
        map(json!({"sub": "alice", "groups": ["dev", "system:masters"]})),
        Err(MappingError::Reserved {
            what: "group",
            name: "system:masters".into()
        })
    );
    let by_expression = authenticator(Source::Expression(expr("'system:' + claims.sub")));
    assert!(matches!(
        by_expression.map(&object(json!({"sub": "node:a"}))),
        Err(MappingError::Reserved { .. })
    ));
}

#[test]
fn a_mapping_that_grows_past_its_budget_refuses_the_token() {
    // Issue 42: `claims.s.replace('a', claims.s)` is refused at load (expr tests); a replacement
    // within the estimate still grows with the token, and the evaluation's budget stops it.
    let grows = format!("claims.s.replace('a', '{}')", "x".repeat(300));
    let s = Signer::ec(Algorithm::ES256, "k");
    let keys = key_set(&[&s]);
    let a = authenticator(Source::Expression(expr(&grows)));
    let token = |a_count: usize| s.sign(&claims(json!({"s": "a".repeat(a_count)})));
    // The issue's token: 11 KB, 8,000 `a`s; 2.4 MB mapped, within the budget.
    let issues = token(8000);
    assert!((10_000..12_000).contains(&issues.len()), "{}", issues.len());
    let accepted = a
        .authenticate(&issues, &keys, now())
        .expect("within budget");
    assert_eq!(accepted.identity.username.len(), 2_400_000);
    // 20,000 `a`s, still a token accepted: 6 MB would be built; the token is refused (401).
    let large = token(20_000);
    assert!(large.len() < crate::jwt::MAX_TOKEN, "{}", large.len());
    assert_eq!(
        a.authenticate(&large, &keys, now()),
        Err(MappingError::Expression {
            what: "username",
            expression: grows.clone(),
            why: format!(
                "evaluation exceeded its budget of {} bytes built or copied",
                crate::expr::EVAL_BUDGET
            ),
        })
    );
}
