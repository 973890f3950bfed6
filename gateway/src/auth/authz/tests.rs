use super::*;

fn derive(method: &str, target: &str) -> Attributes {
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    };
    let info =
        RequestInfo::new(method, path, query).unwrap_or_else(|e| panic!("{method} {target}: {e}"));
    apiagg_authz::request::attributes(&info)
}

/// `(verb, namespace, group, version, resource, subresource, name)`.
type Row<'a> = (
    &'a str,
    &'a str,
    &'a str,
    &'a str,
    &'a str,
    &'a str,
    &'a str,
);

fn resource(a: &Attributes) -> Row<'_> {
    assert!(a.resource_request, "{a:?}");
    (
        &a.verb,
        &a.namespace,
        &a.group,
        &a.version,
        &a.resource,
        &a.subresource,
        &a.name,
    )
}

/// The derivation itself is `apiagg-requestinfo`'s (tested there); here: what the review
/// carries, with path segments decoded and a selector's name as it was decoded from the query.
#[test]
fn reviews_carry_the_one_parse_decoded() {
    #[rustfmt::skip]
    let table: [(&str, &str, Row); 5] = [
        ("GET", "/api/v1/namespaces/ns/pods/p", ("get", "ns", "", "v1", "pods", "", "p")),
        ("GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles/system%3Aadmin", ("get", "", "rbac.authorization.k8s.io", "v1", "clusterroles", "", "system:admin")),
        ("GET", "/api/v1/namespaces/ns/pods?fieldSelector=metadata.name%3Dp+q", ("list", "ns", "", "v1", "pods", "", "p q")),
        ("GET", "/api/v1/namespaces/ns/pods?fieldSelector=metadata.name%3Dp%2525", ("list", "ns", "", "v1", "pods", "", "")),
        ("PUT", "/apis/apps/v1/namespaces/ns/deployments/d/scale", ("update", "ns", "apps", "v1", "deployments", "scale", "d")),
    ];
    for (method, target, expected) in table {
        let got = derive(method, target);
        assert_eq!(resource(&got), expected, "{method} {target}");
    }
}

#[test]
fn everything_else_is_a_non_resource_request() {
    for (method, target, verb, path) in [
        ("GET", "/api", "get", "/api"),
        ("GET", "/api/", "get", "/api/"),
        ("GET", "/api/v1", "get", "/api/v1"),
        ("GET", "/apis", "get", "/apis"),
        ("GET", "/apis/apps", "get", "/apis/apps"),
        ("GET", "/apis/apps/v1", "get", "/apis/apps/v1"),
        ("GET", "/apis/apps/v1/", "get", "/apis/apps/v1/"),
        (
            "GET",
            "/openapi/v3/apis/apps/v1?hash=x",
            "get",
            "/openapi/v3/apis/apps/v1",
        ),
        ("GET", "/metrics", "get", "/metrics"),
        (
            "HEAD",
            "/debug/apiagg/status",
            "head",
            "/debug/apiagg/status",
        ),
        ("POST", "/logs/x%20y", "post", "/logs/x y"),
    ] {
        let got = derive(method, target);
        assert!(!got.resource_request, "{target}: {got:?}");
        assert_eq!((got.verb.as_str(), got.path.as_str()), (verb, path));
    }
}

fn user(name: &str) -> User {
    User::new(name.into(), String::new(), vec!["dev".into()], Vec::new()).expect("user")
}

fn message(refusal: Refusal) -> (String, Value) {
    match refusal {
        Refusal::Forbidden {
            message, details, ..
        } => (message, details),
        Refusal::Internal(m) | Refusal::TooManyValues(m) => panic!("not a 403: {m}"),
    }
}

#[test]
fn refusals_are_worded_as_upstream() {
    let a = derive("GET", "/api/v1/namespaces/default/pods/p");
    let (text, details) = message(forbidden(&user("bob"), &a, ""));
    assert_eq!(
        text,
        r#"pods "p" is forbidden: User "bob" cannot get resource "pods" in API group "" in the namespace "default""#
    );
    assert_eq!(details, json!({"name": "p", "kind": "pods"}));

    let a = derive("GET", "/apis/wardle.example.com/v1alpha1/flunders");
    let (text, details) = message(forbidden(&user("bob"), &a, "no rule"));
    assert_eq!(
        text,
        r#"flunders.wardle.example.com is forbidden: User "bob" cannot list resource "flunders" in API group "wardle.example.com" at the cluster scope: no rule"#
    );
    assert_eq!(
        details,
        json!({"group": "wardle.example.com", "kind": "flunders"})
    );

    let a = derive("PUT", "/apis/apps/v1/namespaces/ns/deployments/d/scale");
    let (text, _) = message(forbidden(&user("bob"), &a, ""));
    assert_eq!(
        text,
        r#"deployments.apps "d" is forbidden: User "bob" cannot update resource "deployments/scale" in API group "apps" in the namespace "ns""#
    );

    let a = derive("GET", "/metrics");
    let (text, details) = message(forbidden(&user("bob"), &a, ""));
    assert_eq!(text, r#"forbidden: User "bob" cannot get path "/metrics""#);
    assert_eq!(details, json!({}));
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            http::HeaderName::from_bytes(name.as_bytes()).expect("name"),
            value.parse().expect("value"),
        );
    }
    map
}

#[test]
fn public_paths_need_no_review() {
    for open in [
        "/healthz",
        "/livez/ping",
        "/readyz/",
        "/version",
        "/version/",
    ] {
        assert!(always_allowed(open), "{open}");
    }
    for closed in ["/healthzx", "/versions", "/metrics", "/version/x", "/"] {
        assert!(!always_allowed(closed), "{closed}");
    }
}

mod chain;
