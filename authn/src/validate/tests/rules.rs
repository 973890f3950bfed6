//! `jwt[i].claimValidationRules` and `.userValidationRules`, and the compiler's errors.

use super::mappings::username_expression;
use super::*;
use crate::config::{ClaimValidationRule, UserValidationRule};

pub(super) fn claim_rule(
    claim: &str,
    required_value: &str,
    expression: &str,
    message: &str,
) -> ClaimValidationRule {
    ClaimValidationRule {
        claim: claim.into(),
        required_value: required_value.into(),
        expression: expression.into(),
        message: message.into(),
    }
}

pub(super) fn user_rule(expression: &str) -> UserValidationRule {
    UserValidationRule {
        expression: expression.into(),
        message: String::new(),
    }
}

#[test]
fn claim_validation_rules() {
    check(&[
        (
            "both forms",
            |a| {
                a.claim_validation_rules = vec![
                    claim_rule("hd", "example.com", "", ""),
                    claim_rule("", "", "claims.x == 1", "m"),
                ]
            },
            &[],
        ),
        (
            "claim and expression",
            |a| a.claim_validation_rules = vec![claim_rule("hd", "", "claims.x == 1", "")],
            &[
                r#"jwt[0].claimValidationRules[0]: Invalid value: "hd": claim and expression can't both be set"#,
            ],
        ),
        (
            "neither",
            |a| a.claim_validation_rules = vec![claim_rule("", "v", "", "m")],
            &["jwt[0].claimValidationRules[0]: Required value: claim or expression is required"],
        ),
        (
            "message with claim",
            |a| a.claim_validation_rules = vec![claim_rule("hd", "v", "", "m")],
            &[
                r#"jwt[0].claimValidationRules[0].message: Invalid value: "m": may not be specified when claim is set"#,
            ],
        ),
        (
            "requiredValue with expression",
            |a| a.claim_validation_rules = vec![claim_rule("", "v", "claims.x == 1", "")],
            &[
                r#"jwt[0].claimValidationRules[0].requiredValue: Invalid value: "v": may not be specified when expression is set"#,
            ],
        ),
        (
            "duplicate claim",
            |a| {
                a.claim_validation_rules =
                    vec![claim_rule("hd", "a", "", ""), claim_rule("hd", "b", "", "")]
            },
            &[r#"jwt[0].claimValidationRules[1].claim: Duplicate value: "hd""#],
        ),
        (
            "duplicate expression",
            |a| {
                a.claim_validation_rules = vec![
                    claim_rule("", "", "claims.x == 1", ""),
                    claim_rule("", "", "claims.x == 1", "m"),
                ]
            },
            &[r#"jwt[0].claimValidationRules[1].expression: Duplicate value: "claims.x == 1""#],
        ),
        (
            "undeclared variable",
            |a| a.claim_validation_rules = vec![claim_rule("", "", "user.username == 'a'", "")],
            &[
                r#"jwt[0].claimValidationRules[0].expression: Invalid value: "user.username == 'a'": compilation failed: undeclared reference to 'user' (only 'claims' is declared)"#,
            ],
        ),
        (
            "blank expression",
            |a| a.claim_validation_rules = vec![claim_rule("", "", "  ", "")],
            &["jwt[0].claimValidationRules[0].expression: Required value"],
        ),
    ]);
}

#[test]
fn expression_errors_carry_the_compiler_text() {
    for (source, scope) in [
        ("claims.x +", Scope::Claims),
        (
            "x".repeat(crate::expr::MAX_EXPRESSION + 1).as_str(),
            Scope::Claims,
        ),
        // Issue 42: a claim the bearer sets, replaced into itself (estimated cost, limit, why).
        ("claims.s.replace('a', claims.s)", Scope::Claims),
    ] {
        let why = Expression::compile(source, scope)
            .expect_err("does not compile")
            .to_string();
        let mut a = valid();
        username_expression(&mut a, source);
        let want = format!(
            "jwt[0].claimMappings.username.expression: Invalid value: {}: {why}",
            quote(source)
        );
        assert_eq!(errors_of(vec![a], None), [want]);
    }
}

#[test]
fn rule_messages() {
    let mut a = valid();
    a.claim_validation_rules = vec![
        claim_rule("", "", "claims.a == 1", "a must be 1"),
        claim_rule("", "", "claims.b == 2", ""),
    ];
    a.user_validation_rules = vec![user_rule("user.uid != ''")];
    let config = AuthenticationConfiguration {
        jwt: vec![a],
        ..AuthenticationConfiguration::default()
    };
    let loaded = validate(&config).expect("valid");
    let messages = |rules: &[Rule]| rules.iter().map(|r| r.message.clone()).collect::<Vec<_>>();
    assert_eq!(
        messages(&loaded.jwt[0].claim_rules),
        ["a must be 1", "expression claims.b == 2 returned false"]
    );
    assert_eq!(
        messages(&loaded.jwt[0].user_rules),
        ["expression user.uid != '' returned false"]
    );
}

#[test]
fn user_validation_rules() {
    check(&[
        (
            "valid",
            |a| a.user_validation_rules = vec![user_rule("!user.username.startsWith('system:')")],
            &[],
        ),
        (
            "empty",
            |a| a.user_validation_rules = vec![user_rule("")],
            &["jwt[0].userValidationRules[0].expression: Required value"],
        ),
        (
            "blank",
            |a| a.user_validation_rules = vec![user_rule(" ")],
            &["jwt[0].userValidationRules[0].expression: Required value"],
        ),
        (
            "duplicate",
            |a| {
                a.user_validation_rules =
                    vec![user_rule("user.uid != ''"), user_rule("user.uid != ''")]
            },
            &[r#"jwt[0].userValidationRules[1].expression: Duplicate value: "user.uid != ''""#],
        ),
        (
            "claims are not declared",
            |a| a.user_validation_rules = vec![user_rule("claims.sub != ''")],
            &[
                r#"jwt[0].userValidationRules[0].expression: Invalid value: "claims.sub != ''": compilation failed: undeclared reference to 'claims' (only 'user' is declared)"#,
            ],
        ),
    ]);
}
