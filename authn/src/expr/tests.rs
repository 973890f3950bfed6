use super::*;

fn compile(source: &str) -> Result<Expression, CompileError> {
    Expression::compile(source, Scope::Claims)
}

#[test]
fn expressions_see_only_their_scope() {
    assert!(compile("claims.sub").is_ok());
    assert!(compile("claims.groups.map(g, 'oidc:' + g)").is_ok());
    assert!(compile("claims.groups.all(g, g.startsWith('team-'))").is_ok());
    assert!(compile("type(claims.sub) == string").is_ok());
    assert_eq!(
        compile("user.username").err(),
        Some(CompileError::Undeclared {
            name: "user".into(),
            allowed: "claims"
        })
    );
    assert!(Expression::compile("user.username.startsWith('x')", Scope::User).is_ok());
    assert!(matches!(
        Expression::compile("claims.sub", Scope::User),
        Err(CompileError::Undeclared { .. })
    ));
    // A comprehension's variable is bound only inside it.
    assert!(matches!(
        compile("claims.groups.all(g, g != '') && g == ''"),
        Err(CompileError::Undeclared { .. })
    ));
}

#[test]
fn bad_expressions_are_configuration_errors() {
    assert_eq!(compile("  ").err(), Some(CompileError::Empty));
    assert!(matches!(
        compile("claims.sub +"),
        Err(CompileError::Syntax(_))
    ));
    let long = format!("claims.sub == '{}'", "a".repeat(MAX_EXPRESSION));
    assert!(matches!(compile(&long), Err(CompileError::TooLong(_))));
}

#[test]
fn nested_comprehensions_over_token_lists_cost_too_much() {
    let one = compile("claims.groups.exists(g, g == 'admins')").expect("one level");
    assert!(one.cost() < COST_LIMIT, "{}", one.cost());
    assert!(matches!(
        compile("claims.groups.all(a, claims.groups.all(b, a != b))"),
        Err(CompileError::TooCostly { .. })
    ));
}

#[test]
fn reads_of_a_claim_are_found_wherever_they_are() {
    let reads = |source: &str, claim: &str| compile(source).expect(source).reads_claim(claim);
    assert!(reads("claims.email", "email"));
    assert!(reads(
        "has(claims.email) ? claims.email : claims.sub",
        "email"
    ));
    assert!(reads(
        "claims.email_verified ? claims.email : ''",
        "email_verified"
    ));
    assert!(!reads("claims.emails", "email"));
    assert!(!reads("claims.sub", "email"));
}

#[test]
fn evaluation_sees_the_claims() {
    let claims = to_cel(&serde_json::json!({"sub": "alice", "groups": ["a", "b"]}));
    let e = compile("claims.groups.map(g, 'x:' + g)").expect("ok");
    let value = e.eval(&claims).expect("value");
    assert_eq!(
        value,
        Value::List(Arc::new(vec!["x:a".into(), "x:b".into()]))
    );
    let missing = compile("claims.email").expect("ok");
    assert!(missing.eval(&claims).is_err());
}
