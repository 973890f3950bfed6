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

#[test]
fn match_conditions_see_the_request() {
    let request = |source: &str| Expression::compile(source, Scope::Request);
    assert!(request("request.user.startsWith('system:serviceaccount:')").is_ok());
    assert!(matches!(
        request("claims.sub == 'x'"),
        Err(CompileError::Undeclared {
            allowed: "request",
            ..
        })
    ));
    let spec = to_cel(&serde_json::json!({
        "user": "system:serviceaccount:team-a:builder",
        "groups": ["system:serviceaccounts", "system:authenticated"],
        "resourceAttributes": {"namespace": "team-a", "verb": "get"},
    }));
    let namespace = request("request.resourceAttributes.namespace == 'team-a'").expect("ok");
    assert_eq!(namespace.eval_bool(&spec), Ok(true));
    let groups = request("'system:masters' in request.groups").expect("ok");
    assert_eq!(groups.eval_bool(&spec), Ok(false));
    let user = request("request.user").expect("ok");
    assert_eq!(
        user.eval_bool(&spec),
        Err(EvalError("must evaluate to bool but got string".into()))
    );
    let missing = request("request.nonResourceAttributes.path == '/healthz'").expect("ok");
    assert!(missing.eval_bool(&spec).is_err());
}

#[test]
fn known_result_types() {
    let known = |source: &str| {
        Expression::compile(source, Scope::Request)
            .expect(source)
            .known_type()
    };
    for source in [
        "request.user == 'a'",
        "'g' in request.groups",
        "has(request.resourceAttributes) && request.uid != ''",
        "request.groups.exists(g, g == 'a')",
        "request.groups.all(g, g != '')",
        "request.user.startsWith('system:')",
        "true ? false : true",
    ] {
        assert_eq!(known(source), Some("bool"), "{source}");
    }
    assert_eq!(known("'text'"), Some("string"));
    assert_eq!(known("size(request.groups)"), Some("int"));
    assert_eq!(known("request.groups.map(g, g + 'x')"), Some("list"));
    assert_eq!(known("{'a': 1}"), Some("map"));
    assert_eq!(known("request.user"), None);
    assert_eq!(known("request.extra['k'][0] + ''"), None);
    assert_eq!(known("true ? 1 : 'a'"), None);
}
