//! The file's own checks (how many issuers, duplicates, `anonymous`), collecting every error,
//! and how messages are worded.

use super::*;
use crate::config::AnonymousCondition;

#[test]
fn too_many_and_duplicate_issuers() {
    let many = |n: usize| -> Vec<config::JwtAuthenticator> {
        (0..n)
            .map(|i| {
                let mut a = valid();
                a.issuer.url = format!("https://issuer-{i}.example");
                a
            })
            .collect()
    };
    assert_eq!(errors_of(many(64), None), Vec::<String>::new());
    // Too many: the only error, as upstream stops there.
    let mut too_many = many(65);
    too_many[0].issuer.url = String::new();
    let anonymous = AnonymousConfig {
        enabled: false,
        conditions: vec![AnonymousCondition { path: "/x".into() }],
    };
    assert_eq!(
        errors_of(too_many, Some(anonymous)),
        ["jwt: Too many: 65: must have at most 64 items"]
    );

    let (mut first, mut second, mut third) = (valid(), valid(), valid());
    first.issuer.discovery_url = "https://discovery.example".to_string();
    second.issuer.discovery_url = "https://discovery.example".to_string();
    third.issuer.url = "https://third.example".to_string();
    assert_eq!(
        errors_of(vec![first, second, third], None),
        [
            r#"jwt[1].issuer.url: Duplicate value: "https://issuer.example""#,
            r#"jwt[1].issuer.discoveryURL: Duplicate value: "https://discovery.example""#,
        ]
    );
    // An empty URL is required, and a second one a duplicate, as upstream.
    let (mut first, mut second) = (valid(), valid());
    first.issuer.url = String::new();
    second.issuer.url = String::new();
    assert_eq!(
        errors_of(vec![first, second], None),
        [
            "jwt[0].issuer.url: Required value",
            "jwt[1].issuer.url: Required value",
            r#"jwt[1].issuer.url: Duplicate value: """#,
        ]
    );
}

#[test]
fn anonymous() {
    let condition = |path: &str| AnonymousCondition {
        path: path.to_string(),
    };
    let cases: [(bool, Vec<AnonymousCondition>, &[&str]); 5] = [
        (true, vec![], &[]),
        (false, vec![], &[]),
        (true, vec![condition("/livez"), condition("/readyz")], &[]),
        (
            false,
            vec![condition("/livez"), condition("/readyz")],
            &[
                r#"anonymous.conditions: Invalid value: []apiserver.AnonymousAuthCondition{apiserver.AnonymousAuthCondition{Path:"/livez"}, apiserver.AnonymousAuthCondition{Path:"/readyz"}}: enabled should be set to true when conditions are defined"#,
            ],
        ),
        (
            true,
            vec![condition(""), condition("livez")],
            &[
                "anonymous.conditions[0].path: Required value",
                r#"anonymous.conditions[1].path: Invalid value: "livez": must start with "/""#,
            ],
        ),
    ];
    for (enabled, conditions, want) in cases {
        let config = AnonymousConfig {
            enabled,
            conditions: conditions.clone(),
        };
        assert_eq!(
            errors_of(vec![], Some(config)),
            want,
            "{enabled} {conditions:?}"
        );
    }
    let file = "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\nanonymous:\n  enabled: true\n";
    let loaded = load(file.as_bytes()).expect("loads");
    assert_eq!(
        loaded.anonymous,
        Some(Anonymous {
            enabled: true,
            paths: None
        })
    );
}

#[test]
fn every_error_of_a_file_is_reported() {
    let mut bad = valid();
    bad.issuer.url = "http://issuer.example".to_string();
    bad.claim_mappings.username.prefix = None;
    let anonymous = AnonymousConfig {
        enabled: true,
        conditions: vec![AnonymousCondition { path: "x".into() }],
    };
    let want = [
        r#"jwt[0].issuer.url: Invalid value: "http://issuer.example": URL scheme must be https"#,
        "jwt[0].claimMappings.username.prefix: Required value: prefix is required when claim is set. It can be set to an empty string to disable prefixing",
        r#"jwt[1].issuer.audiences: Required value: at least one jwt[1].issuer.audiences is required"#,
        r#"anonymous.conditions[0].path: Invalid value: "x": must start with "/""#,
    ];
    let mut second = valid();
    second.issuer.url = "https://second.example".to_string();
    second.issuer.audiences.clear();
    assert_eq!(errors_of(vec![bad, second], Some(anonymous)), want);
}

#[test]
fn errors_display_as_go_aggregates() {
    let errors =
        |e: &[&str]| ValidationErrors(e.iter().map(|s| s.to_string()).collect()).to_string();
    assert_eq!(errors(&["a: Required value"]), "a: Required value");
    assert_eq!(
        errors(&["a: Required value", "b: Required value"]),
        "[a: Required value, b: Required value]"
    );
    assert_eq!(
        errors(&["a: Required value", "a: Required value"]),
        "a: Required value"
    );
    assert_eq!(errors(&[]), "");
    let text = "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\njwt:\n- issuer: {}\n  claimMappings: {username: {claim: sub, prefix: ''}}\n";
    let error = load(text.as_bytes()).expect_err("invalid");
    assert_eq!(
        error.to_string(),
        "[jwt[0].issuer.url: Required value, jwt[0].issuer.audiences: Required value: at least one jwt[0].issuer.audiences is required]"
    );
}

#[test]
fn quote_is_go_strconv_quote() {
    assert_eq!(quote("plain"), r#""plain""#);
    assert_eq!(quote("a\"b\\c"), r#""a\"b\\c""#);
    assert_eq!(quote("\t\n\r\x07\x08\x0b\x0c"), r#""\t\n\r\a\b\v\f""#);
    assert_eq!(quote("\x01\x7f\u{85}é"), r#""\x01\x7f\u0085é""#);
}
