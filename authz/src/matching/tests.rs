//! Compiling conditions, `request` as upstream builds it, and the order of false and errors.

use serde_json::json;

use super::*;

fn conditions(sources: &[&str]) -> MatchConditions {
    let compiled = sources
        .iter()
        .map(|s| compile(s).unwrap_or_else(|e| panic!("{s}: {e}")))
        .collect();
    MatchConditions::new(compiled)
}

/// A service account asking to get a pod.
fn service_account() -> Value {
    json!({
        "user": "system:serviceaccount:team-a:builder",
        "groups": ["system:serviceaccounts", "system:serviceaccounts:team-a", "system:authenticated"],
        "resourceAttributes": {"namespace": "team-a", "verb": "get", "version": "v1", "resource": "pods"},
    })
}

#[test]
fn conditions_must_compile_to_a_bool() {
    assert!(compile("request.user.startsWith('system:serviceaccount:')").is_ok());
    assert!(
        compile("request.user").is_ok(),
        "its type is known only at runtime"
    );
    assert_eq!(
        compile("'yes'").err(),
        Some(ConditionError::NotBool("string"))
    );
    assert_eq!(
        compile("size(request.groups)").err().map(|e| e.to_string()),
        Some("must evaluate to bool but got int".to_string())
    );
    assert!(matches!(
        compile("user.name == 'a'"),
        Err(ConditionError::Compile(CompileError::Undeclared {
            allowed: "request",
            ..
        }))
    ));
    assert!(matches!(
        compile("request.user =="),
        Err(ConditionError::Compile(CompileError::Syntax(_)))
    ));
}

#[test]
fn all_true_matches_and_no_conditions_match_everything() {
    let spec = service_account();
    assert_eq!(MatchConditions::default().evaluate(&spec), Ok(true));
    let c = conditions(&[
        "request.user.startsWith('system:serviceaccount:')",
        "'system:serviceaccounts' in request.groups",
        "has(request.resourceAttributes) && request.resourceAttributes.namespace == 'team-a'",
    ]);
    assert_eq!(c.len(), 3);
    assert_eq!(c.evaluate(&spec), Ok(true));
    let human = json!({"user": "alice", "groups": ["dev"], "nonResourceAttributes": {"path": "/healthz", "verb": "get"}});
    assert_eq!(c.evaluate(&human), Ok(false));
}

#[test]
fn a_false_wins_over_errors_wherever_it_is() {
    let spec = service_account();
    let failing = "request.nonResourceAttributes.path == '/healthz'";
    let c = conditions(&[failing, "request.user == 'alice'"]);
    assert_eq!(c.evaluate(&spec), Ok(false));
    let c = conditions(&["request.user == 'alice'", failing]);
    assert_eq!(c.evaluate(&spec), Ok(false));
    let c = conditions(&[failing, "request.uid == ''", "request.user"]);
    let error = c.evaluate(&spec).expect_err("none false, two failed");
    assert_eq!(error.0.len(), 2);
    assert!(
        error.0[0].starts_with("cel evaluation error: expression 'request.nonResourceAttributes.path == '/healthz'' resulted in error: "),
        "{error}"
    );
    assert_eq!(
        error.0[1],
        "cel evaluation error: expression 'request.user' resulted in error: must evaluate to bool but got string"
    );
    assert!(error.to_string().starts_with('['), "{error}");
}

#[test]
fn request_has_every_field_upstream_gives_it() {
    // A cluster-scoped list by an anonymous user: the SubjectAccessReview omits empty fields.
    let spec = json!({
        "resourceAttributes": {
            "verb": "list", "resource": "nodes", "version": "v1",
            "fieldSelector": {"requirements": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]},
            "labelSelector": {"rawSelector": "a=b", "requirements": [{"key": "a", "operator": "In", "values": ["b"]}]},
        },
    });
    assert_eq!(
        request_variable(&spec),
        json!({
            "user": "", "groups": [], "uid": "", "extra": {},
            "resourceAttributes": {
                "namespace": "", "verb": "list", "group": "", "version": "v1",
                "resource": "nodes", "subresource": "", "name": "",
                "fieldSelector": {"requirements": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]},
                "labelSelector": {"rawSelector": "a=b"},
            },
        })
    );
    let c = conditions(&[
        "request.resourceAttributes.namespace == ''",
        "request.extra.size() == 0 && request.groups.size() == 0",
        "request.resourceAttributes.fieldSelector.requirements[0].values == ['a']",
    ]);
    assert_eq!(c.evaluate(&spec), Ok(true));
    let non_resource = json!({"user": "u", "extra": {"example.com/team": ["a"]}, "nonResourceAttributes": {"path": "/metrics"}});
    assert_eq!(
        request_variable(&non_resource),
        json!({
            "user": "u", "groups": [], "uid": "", "extra": {"example.com/team": ["a"]},
            "nonResourceAttributes": {"verb": "", "path": "/metrics"},
        })
    );
}
