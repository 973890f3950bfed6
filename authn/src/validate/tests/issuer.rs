//! `jwt[i].issuer`: URLs, audiences, certificate authority, egress selector.

use super::*;

#[test]
fn issuer_url() {
    check(&[
        ("valid", |_| {}, &[]),
        (
            "with a path and trailing slash",
            |a| a.issuer.url = "https://issuer.example/tenant/".into(),
            &[],
        ),
        (
            "empty",
            |a| a.issuer.url = String::new(),
            &["jwt[0].issuer.url: Required value"],
        ),
        (
            "http",
            |a| a.issuer.url = "http://issuer.example".into(),
            &[
                r#"jwt[0].issuer.url: Invalid value: "http://issuer.example": URL scheme must be https"#,
            ],
        ),
        (
            "no scheme",
            |a| a.issuer.url = "issuer.example".into(),
            &[r#"jwt[0].issuer.url: Invalid value: "issuer.example": URL scheme must be https"#],
        ),
        (
            "user",
            |a| a.issuer.url = "https://alice@issuer.example".into(),
            &[
                r#"jwt[0].issuer.url: Invalid value: "https://alice@issuer.example": URL must not contain a username or password"#,
            ],
        ),
        (
            "query",
            |a| a.issuer.url = "https://issuer.example?a=b".into(),
            &[
                r#"jwt[0].issuer.url: Invalid value: "https://issuer.example?a=b": URL must not contain a query"#,
            ],
        ),
        (
            "empty query and fragment",
            |a| a.issuer.url = "https://issuer.example?#".into(),
            &[],
        ),
        (
            "fragment",
            |a| a.issuer.url = "https://issuer.example#a".into(),
            &[
                r#"jwt[0].issuer.url: Invalid value: "https://issuer.example#a": URL must not contain a fragment"#,
            ],
        ),
        (
            "all at once",
            |a| a.issuer.url = "http://u:p@issuer.example/?q#f".into(),
            &[
                r#"jwt[0].issuer.url: Invalid value: "http://u:p@issuer.example/?q#f": URL scheme must be https"#,
                r#"jwt[0].issuer.url: Invalid value: "http://u:p@issuer.example/?q#f": URL must not contain a username or password"#,
                r#"jwt[0].issuer.url: Invalid value: "http://u:p@issuer.example/?q#f": URL must not contain a query"#,
                r#"jwt[0].issuer.url: Invalid value: "http://u:p@issuer.example/?q#f": URL must not contain a fragment"#,
            ],
        ),
        (
            "control character",
            |a| a.issuer.url = "https://issuer.example/\n".into(),
            &[
                r#"jwt[0].issuer.url: Invalid value: "https://issuer.example/\n": parse "https://issuer.example/\n": net/url: invalid control character in URL"#,
            ],
        ),
        (
            "missing scheme",
            |a| a.issuer.url = "://issuer.example".into(),
            &[
                r#"jwt[0].issuer.url: Invalid value: "://issuer.example": parse "://issuer.example": missing protocol scheme"#,
            ],
        ),
        (
            "colon in first segment",
            |a| a.issuer.url = "1a:b".into(),
            &[
                r#"jwt[0].issuer.url: Invalid value: "1a:b": parse "1a:b": first path segment in URL cannot contain colon"#,
            ],
        ),
        (
            "no host",
            |a| a.issuer.url = "https://".into(),
            &[r#"jwt[0].issuer.url: Invalid value: "https://": parse "https://": empty host"#],
        ),
        (
            "bad port",
            |a| a.issuer.url = "https://issuer.example:abc".into(),
            &[
                r#"jwt[0].issuer.url: Invalid value: "https://issuer.example:abc": parse "https://issuer.example:abc": invalid port number"#,
            ],
        ),
    ]);
}

#[test]
fn discovery_url() {
    check(&[
        (
            "valid",
            |a| a.issuer.discovery_url = "https://discovery.example/openid".into(),
            &[],
        ),
        (
            "same as the URL",
            |a| a.issuer.discovery_url = "https://issuer.example".into(),
            &[
                r#"jwt[0].issuer.discoveryURL: Invalid value: "https://issuer.example": discoveryURL must be different from URL"#,
            ],
        ),
        (
            "same but for trailing slashes",
            |a| {
                a.issuer.url = "https://issuer.example/".into();
                a.issuer.discovery_url = "https://issuer.example//".into();
            },
            &[
                r#"jwt[0].issuer.discoveryURL: Invalid value: "https://issuer.example//": discoveryURL must be different from URL"#,
            ],
        ),
        (
            "compared only with a URL",
            |a| {
                a.issuer.url = String::new();
                a.issuer.discovery_url = "https://discovery.example".into();
            },
            &["jwt[0].issuer.url: Required value"],
        ),
        (
            "http, user, query, fragment",
            |a| a.issuer.discovery_url = "http://u@discovery.example?q#f".into(),
            &[
                r#"jwt[0].issuer.discoveryURL: Invalid value: "http://u@discovery.example?q#f": URL scheme must be https"#,
                r#"jwt[0].issuer.discoveryURL: Invalid value: "http://u@discovery.example?q#f": URL must not contain a username or password"#,
                r#"jwt[0].issuer.discoveryURL: Invalid value: "http://u@discovery.example?q#f": URL must not contain a query"#,
                r#"jwt[0].issuer.discoveryURL: Invalid value: "http://u@discovery.example?q#f": URL must not contain a fragment"#,
            ],
        ),
    ]);
}

#[test]
fn audiences() {
    check(&[
        ("one, MatchAny", |a| a.issuer.audience_match_policy = "MatchAny".into(), &[]),
        (
            "two, MatchAny",
            |a| {
                a.issuer.audiences.push("kubernetes".into());
                a.issuer.audience_match_policy = "MatchAny".into();
            },
            &[],
        ),
        (
            "none",
            |a| a.issuer.audiences.clear(),
            &["jwt[0].issuer.audiences: Required value: at least one jwt[0].issuer.audiences is required"],
        ),
        (
            "none, with a policy",
            |a| {
                a.issuer.audiences.clear();
                a.issuer.audience_match_policy = "MatchAll".into();
            },
            &["jwt[0].issuer.audiences: Required value: at least one jwt[0].issuer.audiences is required"],
        ),
        ("empty", |a| a.issuer.audiences = vec![String::new()], &["jwt[0].issuer.audiences[0]: Required value"]),
        (
            "duplicate",
            |a| {
                a.issuer.audiences = vec!["x".into(), "y".into(), "x".into()];
                a.issuer.audience_match_policy = "MatchAny".into();
            },
            &[r#"jwt[0].issuer.audiences[2]: Duplicate value: "x""#],
        ),
        (
            "two empty ones",
            |a| {
                a.issuer.audiences = vec![String::new(), String::new()];
                a.issuer.audience_match_policy = "MatchAny".into();
            },
            &[
                "jwt[0].issuer.audiences[0]: Required value",
                "jwt[0].issuer.audiences[1]: Required value",
                r#"jwt[0].issuer.audiences[1]: Duplicate value: """#,
            ],
        ),
        (
            "two, no policy",
            |a| a.issuer.audiences.push("kubernetes".into()),
            &[r#"jwt[0].issuer.audienceMatchPolicy: Invalid value: "": audienceMatchPolicy must be MatchAny for multiple audiences"#],
        ),
        (
            "two, another policy",
            |a| {
                a.issuer.audiences.push("kubernetes".into());
                a.issuer.audience_match_policy = "MatchAll".into();
            },
            &[r#"jwt[0].issuer.audienceMatchPolicy: Invalid value: "MatchAll": audienceMatchPolicy must be MatchAny for multiple audiences"#],
        ),
        (
            "one, another policy",
            |a| a.issuer.audience_match_policy = "MatchAll".into(),
            &[r#"jwt[0].issuer.audienceMatchPolicy: Invalid value: "MatchAll": audienceMatchPolicy must be empty or MatchAny for single audience"#],
        ),
    ]);
}

#[test]
fn certificate_authority() {
    let ca = certificate();
    let no_certificate = r#"jwt[0].issuer.certificateAuthority: Invalid value: "<omitted>": data does not contain any valid RSA or ECDSA certificates"#;
    let with = |pem: String| {
        let mut a = valid();
        a.issuer.certificate_authority = pem;
        errors_of(vec![a], None)
    };
    assert_eq!(with(ca.clone()), Vec::<String>::new());
    assert_eq!(
        with(format!("a comment\n{ca}\n{ca}")),
        Vec::<String>::new(),
        "two, text around"
    );
    let key = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
    assert_eq!(
        with(format!("{key}{ca}")),
        Vec::<String>::new(),
        "other blocks skipped"
    );
    assert_eq!(with("not PEM".into()), [no_certificate]);
    assert_eq!(with(key.into()), [no_certificate], "no CERTIFICATE block");
    let bad_base64 = "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n";
    assert_eq!(
        with(bad_base64.into()),
        [no_certificate],
        "unreadable block skipped"
    );
    assert_eq!(
        with(format!("{bad_base64}{ca}")),
        Vec::<String>::new(),
        "unreadable block skipped"
    );
    let truncated: String = ca.lines().take(3).map(|l| format!("{l}\n")).collect();
    assert_eq!(with(truncated), [no_certificate], "no END line");

    let not_der = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
    let errors = with(not_der.into());
    let prefix = r#"jwt[0].issuer.certificateAuthority: Invalid value: "<omitted>": x509: malformed certificate: "#;
    assert!(
        errors.len() == 1 && errors[0].starts_with(prefix),
        "{errors:?}"
    );

    let der = x509_parser::pem::parse_x509_pem(ca.as_bytes())
        .expect("PEM")
        .1
        .contents;
    let trailing = format!(
        "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
        base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            [der, vec![0]].concat()
        )
    );
    assert_eq!(
        with(trailing),
        [r#"jwt[0].issuer.certificateAuthority: Invalid value: "<omitted>": x509: trailing data"#]
    );
}

#[test]
fn egress_selector_type() {
    check(&[
        (
            "controlplane",
            |a| a.issuer.egress_selector_type = "controlplane".into(),
            &[],
        ),
        (
            "cluster",
            |a| a.issuer.egress_selector_type = "cluster".into(),
            &[],
        ),
        (
            "other",
            |a| a.issuer.egress_selector_type = "master".into(),
            &[
                r#"jwt[0].issuer.egressSelectorType: Invalid value: "master": egress selector must be either controlplane or cluster"#,
            ],
        ),
    ]);
}

mod fuzz_regressions {
    use super::*;

    /// Found by `fuzz/fuzz_targets/authn_config.rs`; minimized input: the documented example
    /// with the issuer URL `https:/'token.actions.example.com` (one slash). Go's `url.Parse` reads
    /// no host there, so kube-apiserver accepts the file and then cannot fetch the issuer; the
    /// gateway's client parses URLs as WHATWG does, which skips the missing slash and fetched
    /// from the host `'token.actions.example.com` (with `https:/alice@evil.example`, as `alice`
    /// at `evil.example`): a host other than the one written. Refused at load now.
    #[test]
    fn an_https_url_without_its_host_is_refused() {
        check(&[
            (
                "one slash",
                |a| a.issuer.url = "https:/'token.actions.example.com".into(),
                &[
                    r#"jwt[0].issuer.url: Invalid value: "https:/'token.actions.example.com": URL must have a host (https://<host>/...)"#,
                ],
            ),
            (
                "three slashes",
                |a| a.issuer.url = "https:///issuer.example".into(),
                &[
                    r#"jwt[0].issuer.url: Invalid value: "https:///issuer.example": URL must have a host (https://<host>/...)"#,
                ],
            ),
            (
                "one slash and a user",
                |a| a.issuer.url = "https:/alice@evil.example".into(),
                &[
                    r#"jwt[0].issuer.url: Invalid value: "https:/alice@evil.example": URL must have a host (https://<host>/...)"#,
                ],
            ),
        ]);
    }
}
