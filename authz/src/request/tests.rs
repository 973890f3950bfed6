use super::*;

fn attrs(method: &str, target: &str) -> Attributes {
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    };
    match RequestInfo::new(method, path, query) {
        Ok(info) => attributes(&info),
        Err(e) => panic!("{method} {target}: {e}"),
    }
}

fn req(key: &str, operator: Operator, values: &[&str]) -> Requirement {
    Requirement {
        key: key.to_string(),
        operator,
        values: values.iter().map(|v| v.to_string()).collect(),
    }
}

type Selectors = (Option<Vec<Requirement>>, Option<Vec<Requirement>>);

fn selectors(method: &str, target: &str) -> Selectors {
    let a = attrs(method, target);
    (a.field_selector, a.label_selector)
}

#[test]
fn a_list_carries_its_selectors() {
    let a = attrs(
        "GET",
        "/apis/apps/v1/namespaces/ns/deployments?fieldSelector=metadata.namespace%3Dns\
         &labelSelector=app%3Dweb",
    );
    let want = Attributes {
        verb: "list".into(),
        resource_request: true,
        path: String::new(),
        namespace: "ns".into(),
        group: "apps".into(),
        version: "v1".into(),
        resource: "deployments".into(),
        subresource: String::new(),
        name: String::new(),
        field_selector: Some(vec![req("metadata.namespace", Operator::In, &["ns"])]),
        label_selector: Some(vec![req("app", Operator::In, &["web"])]),
    };
    assert_eq!(a, want);
}

#[test]
fn selectors_follow_the_verb() {
    use Operator::*;
    let app = || Some(vec![req("app", In, &["web"])]);
    let table: Vec<(&str, &str, Selectors)> = vec![
        ("GET", "/api/v1/pods?labelSelector=app%3Dweb", (None, app())),
        (
            "GET",
            "/api/v1/pods?watch=true&labelSelector=app%3Dweb",
            (None, app()),
        ),
        (
            "DELETE",
            "/api/v1/namespaces/ns/pods?labelSelector=app%3Dweb&fieldSelector=spec.nodeName!%3Dn",
            (Some(vec![req("spec.nodeName", NotIn, &["n"])]), app()),
        ),
        // Not a collection: a get, a delete, a create, a subresource of one object.
        (
            "GET",
            "/api/v1/namespaces/ns/pods/p?labelSelector=app%3Dweb",
            (None, None),
        ),
        (
            "DELETE",
            "/api/v1/namespaces/ns/pods/p?labelSelector=app%3Dweb",
            (None, None),
        ),
        (
            "POST",
            "/api/v1/namespaces/ns/pods?labelSelector=app%3Dweb",
            (None, None),
        ),
        (
            "GET",
            "/api/v1/namespaces/ns/pods/p/log?labelSelector=app%3Dweb",
            (None, None),
        ),
        // The verb from the path (the deprecated watch endpoints): no selectors, as upstream.
        (
            "GET",
            "/api/v1/watch/pods?labelSelector=app%3Dweb",
            (None, None),
        ),
        (
            "GET",
            "/apis/apps/v1/watch/namespaces/ns/deployments?labelSelector=app%3Dweb",
            (None, None),
        ),
        // Non-resource requests have none.
        ("GET", "/metrics?labelSelector=app%3Dweb", (None, None)),
    ];
    for (method, target, want) in table {
        assert_eq!(selectors(method, target), want, "{method} {target}");
    }
}

#[test]
fn selector_values_are_decoded_and_mapped() {
    use Operator::*;
    let table: Vec<(&str, Selectors)> = vec![
        (
            "labelSelector=env+in+(prod,dev)",
            (None, Some(vec![req("env", In, &["dev", "prod"])])),
        ),
        (
            "labelSelector=env%20notin%20(a%2Cb)",
            (None, Some(vec![req("env", NotIn, &["a", "b"])])),
        ),
        (
            "labelSelector=!canary,tier",
            (
                None,
                Some(vec![
                    req("canary", DoesNotExist, &[]),
                    req("tier", Exists, &[]),
                ]),
            ),
        ),
        (
            "labelSelector=a%3D%3Db,c!%3Dd",
            (
                None,
                Some(vec![req("a", In, &["b"]), req("c", NotIn, &["d"])]),
            ),
        ),
        // `gt` and `lt` have no SubjectAccessReview form: left out, and a selector of them only
        // is none.
        (
            "labelSelector=a%3E1,b%3Dc",
            (None, Some(vec![req("b", In, &["c"])])),
        ),
        ("labelSelector=a%3C1", (None, None)),
        // Selectors that do not parse are dropped; the other one stays.
        (
            "labelSelector=a%3D%3D%3Db&fieldSelector=x%3Dy",
            (Some(vec![req("x", In, &["y"])]), None),
        ),
        (
            "fieldSelector=nooperator&labelSelector=a",
            (None, Some(vec![req("a", Exists, &[])])),
        ),
        // Empty selectors are none.
        ("fieldSelector=&labelSelector=", (None, None)),
        ("fieldSelector=,", (None, None)),
        // Field values: escapes undone, `==` and `!=`, sorted terms, an empty value kept.
        (
            "fieldSelector=b%3D%3D1%5C%2C2,a!%3D",
            (
                Some(vec![req("a", NotIn, &[""]), req("b", In, &["1,2"])]),
                None,
            ),
        ),
    ];
    for (query, want) in table {
        let target = format!("/api/v1/pods?{query}");
        assert_eq!(selectors("GET", &target), want, "{query}");
    }
}

#[test]
fn a_name_from_the_field_selector_keeps_the_selector() {
    let a = attrs(
        "GET",
        "/api/v1/namespaces/ns/pods?fieldSelector=metadata.name%3Dp%2B1",
    );
    assert_eq!((a.verb.as_str(), a.name.as_str()), ("list", "p+1"));
    let want = vec![req("metadata.name", Operator::In, &["p+1"])];
    assert_eq!(a.field_selector, Some(want));
}

#[test]
fn selectors_cannot_be_smuggled() {
    let one = || Some(vec![req("a", Operator::In, &["1"])]);
    let two = || Some(vec![req("a", Operator::In, &["2"])]);
    let table: Vec<(&str, Option<Vec<Requirement>>)> = vec![
        // The first parameter wins, as Go's `Query().Get`.
        ("fieldSelector=a%3D1&fieldSelector=a%3D2", one()),
        ("fieldSelector=a%3D2&fieldSelector=", two()),
        // A percent-encoded key is the same key.
        ("field%53elector=a%3D1&fieldSelector=a%3D2", one()),
        ("fieldSelector=a%3D2&field%53elector=a%3D1", two()),
        ("%66ieldSelector=a%3D1", one()),
        // Not the key: case matters, `+` is a space.
        ("FieldSelector=a%3D1&fieldSelector=a%3D2", two()),
        ("field+Selector=a%3D1&fieldSelector=a%3D2", two()),
    ];
    for (query, want) in table {
        let target = format!("/api/v1/pods?{query}");
        assert_eq!(selectors("GET", &target).0, want, "{query}");
    }
    // Go skips pairs with `;` or a bad escape, and would read the second value: the one parse
    // refuses such a query, so no selector can be authorized as one and served as another.
    for query in [
        "fieldSelector=a%3D1;x&fieldSelector=a%3D2",
        "fieldSelector=a%3D1%zz&fieldSelector=a%3D2",
        "fieldSelector%=a%3D1&fieldSelector=a%3D2",
        "limit=5;x&fieldSelector=a%3D1",
        "labelSelector=a%3D1;&labelSelector=",
    ] {
        assert!(
            RequestInfo::new("GET", "/api/v1/pods", Some(query)).is_err(),
            "{query}"
        );
    }
}
