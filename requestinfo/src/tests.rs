use super::*;

fn info<'a>(method: &str, target: &'a str) -> RequestInfo<'a> {
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    };
    RequestInfo::new(method, path, query).unwrap_or_else(|e| panic!("{method} {target}: {e}"))
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

fn row<'a>(i: &'a RequestInfo<'_>) -> Row<'a> {
    assert!(i.resource_request, "{i:?}");
    (
        &i.verb,
        i.namespace,
        i.group,
        i.version,
        i.resource,
        i.subresource,
        &i.name,
    )
}

#[test]
fn resource_requests_follow_upstream() {
    #[rustfmt::skip]
    let table: [(&str, &str, Row); 30] = [
        ("GET", "/api/v1/pods", ("list", "", "", "v1", "pods", "", "")),
        ("GET", "/api/v1/namespaces/ns/pods", ("list", "ns", "", "v1", "pods", "", "")),
        ("GET", "/api/v1/namespaces/ns/pods/p", ("get", "ns", "", "v1", "pods", "", "p")),
        ("HEAD", "/api/v1/namespaces/ns/pods/p", ("get", "ns", "", "v1", "pods", "", "p")),
        ("GET", "/api/v1/namespaces/ns/pods/p/log", ("get", "ns", "", "v1", "pods", "log", "p")),
        ("POST", "/api/v1/namespaces/ns/pods/p/exec", ("create", "ns", "", "v1", "pods", "exec", "p")),
        ("GET", "/api/v1/namespaces/ns/pods?watch=true", ("watch", "ns", "", "v1", "pods", "", "")),
        ("GET", "/api/v1/namespaces/ns/pods?watch=1&limit=5", ("watch", "ns", "", "v1", "pods", "", "")),
        ("GET", "/api/v1/namespaces/ns/pods?watch=false", ("list", "ns", "", "v1", "pods", "", "")),
        ("GET", "/api/v1/namespaces/ns/pods?watch=0", ("list", "ns", "", "v1", "pods", "", "")),
        ("GET", "/api/v1/watch/namespaces/ns/pods", ("watch", "ns", "", "v1", "pods", "", "")),
        ("GET", "/api/v1/watch/namespaces/ns/pods/p", ("watch", "ns", "", "v1", "pods", "", "p")),
        ("GET", "/api/v1/namespaces/ns/pods?fieldSelector=metadata.name%3Dp", ("list", "ns", "", "v1", "pods", "", "p")),
        ("GET", "/api/v1/namespaces/ns/pods?watch=true&fieldSelector=metadata.name==p,spec.x!=y", ("watch", "ns", "", "v1", "pods", "", "p")),
        ("GET", "/api/v1/namespaces/ns/pods?fieldSelector=metadata.name!%3Dp", ("list", "ns", "", "v1", "pods", "", "")),
        ("GET", "/api/v1/namespaces", ("list", "", "", "v1", "namespaces", "", "")),
        ("GET", "/api/v1/namespaces/ns", ("get", "ns", "", "v1", "namespaces", "", "ns")),
        ("PUT", "/api/v1/namespaces/ns/finalize", ("update", "ns", "", "v1", "namespaces", "finalize", "ns")),
        ("PATCH", "/api/v1/namespaces/ns/status", ("patch", "ns", "", "v1", "namespaces", "status", "ns")),
        ("DELETE", "/api/v1/namespaces/ns/pods/p", ("delete", "ns", "", "v1", "pods", "", "p")),
        ("DELETE", "/api/v1/namespaces/ns/pods", ("deletecollection", "ns", "", "v1", "pods", "", "")),
        ("POST", "/apis/apps/v1/namespaces/ns/deployments", ("create", "ns", "apps", "v1", "deployments", "", "")),
        ("PUT", "/apis/apps/v1/namespaces/ns/deployments/d/scale", ("update", "ns", "apps", "v1", "deployments", "scale", "d")),
        ("GET", "/apis/apiregistration.k8s.io/v1/apiservices/v1.a.io/status", ("get", "", "apiregistration.k8s.io", "v1", "apiservices", "status", "v1.a.io")),
        ("GET", "/api/v1/proxy/namespaces/ns/pods/p/x/y", ("proxy", "ns", "", "v1", "pods", "", "p")),
        ("OPTIONS", "/apis/a.io/v1/foos", ("", "", "a.io", "v1", "foos", "", "")),
        ("GET", "/apis/a.io/v1/namespaces/n/foos/f/sub/x/y/z/w", ("get", "n", "a.io", "v1", "foos", "sub", "f")),
        ("GET", "/apis/a.io/v1/foos/", ("list", "", "a.io", "v1", "foos", "", "")),
        // The first value of a parameter wins, for everybody.
        ("GET", "/apis/a.io/v1/foos?watch=false&watch=true", ("list", "", "a.io", "v1", "foos", "", "")),
        // An exact name term narrows the list; the handler applies every term.
        ("GET", "/apis/a.io/v1/foos?fieldSelector=metadata.name%3Dx,metadata.name!%3Dy", ("list", "", "a.io", "v1", "foos", "", "x")),
    ];
    for (method, target, expected) in table {
        let got = info(method, target);
        assert_eq!(row(&got), expected, "{method} {target}");
    }
}

#[test]
fn everything_else_is_a_non_resource_request() {
    for (method, target, verb) in [
        ("GET", "/api", "get"),
        ("GET", "/api/", "get"),
        ("GET", "/api/v1", "get"),
        ("GET", "/apis", "get"),
        ("GET", "/apis/apps", "get"),
        ("GET", "/apis/apps/v1", "get"),
        ("GET", "/apis/apps/v1/", "get"),
        ("GET", "/openapi/v3/apis/apps/v1?hash=x", "get"),
        ("GET", "/metrics", "get"),
        ("HEAD", "/debug/apiagg/status", "head"),
        ("PROPFIND", "/logs/x", "propfind"),
    ] {
        let got = info(method, target);
        assert!(!got.resource_request, "{target}: {got:?}");
        assert_eq!(&*got.verb, verb, "{target}");
    }
}

#[test]
fn a_bare_special_verb_cannot_be_described() {
    for path in ["/api/v1/watch", "/apis/a.io/v1/proxy"] {
        assert!(RequestInfo::new("GET", path, None).is_err(), "{path}");
    }
}

#[test]
fn the_name_of_a_selector_counts_only_when_the_options_parse() {
    for (query, name) in [
        ("fieldSelector=metadata.name%3Db,metadata.name%3Da", "a"),
        ("fieldSelector=metadata.name%3Da&limit=x", ""),
        ("fieldSelector=metadata.name%3Da%2Fb", ""),
        ("fieldSelector=metadata.name", ""),
        ("fieldSelector=metadata.name%3D..", ""),
        (
            "fieldSelector=metadata.name%3Da&fieldSelector=metadata.name%3Db",
            "a",
        ),
    ] {
        let got = RequestInfo::new("GET", "/apis/a.io/v1/foos", Some(query)).expect("info");
        assert_eq!(&*got.name, name, "{query}");
    }
}

#[test]
fn long_running_requests_are_upstreams() {
    for (method, target, long) in [
        ("GET", "/api/v1/namespaces/n/pods?watch=1", true),
        ("GET", "/api/v1/namespaces/n/pods?watch=yes", true),
        ("GET", "/api/v1/namespaces/n/pods?watch=0", false),
        ("GET", "/api/v1/watch/pods", true),
        ("POST", "/api/v1/namespaces/n/pods/p/exec", true),
        ("GET", "/api/v1/namespaces/n/pods/p/log", true),
        ("GET", "/api/v1/proxy/nodes/n/x", true),
        ("GET", "/api/v1/namespaces/n/pods/p", false),
        ("GET", "/apis/a.io/v1", false),
    ] {
        assert_eq!(info(method, target).is_long_running(), long, "{target}");
    }
}

#[test]
fn segments_and_group_versions_borrow_the_path() {
    let got = info("GET", "/apis/a.io/v1/foos/bar");
    assert_eq!(got.segment(0), "apis");
    assert_eq!(got.segment(4), "bar");
    assert_eq!(got.segment(9), "");
    assert_eq!(got.after(1), "a.io/v1/foos/bar");
    assert_eq!(got.group_version_key(), Some("a.io/v1"));
    assert_eq!(got.parts, "foos/bar");
    assert_eq!(info("GET", "/api/v1/pods").group_version_key(), None);
    assert_eq!(info("GET", "/apis/a.io").group_version_key(), None);
}

#[test]
fn field_selectors_read_as_upstream() {
    let s = FieldSelector::parse("metadata.name!=y,metadata.name=x").expect("parse");
    assert_eq!(s.requires_exact("metadata.name"), Some("x"));
    assert!(s.matches(|_| Some("x")));
    assert!(!s.matches(|_| Some("y")));
    assert!(!s.matches(|_| Some("z")));
    let escaped = FieldSelector::parse(r"a=b\,c").expect("escaped comma");
    assert_eq!(escaped.terms[0].value, "b,c");
    assert!(FieldSelector::parse("a=b=c").is_err());
    assert!(FieldSelector::parse(r"a=\q").is_err());
    assert!(FieldSelector::parse("nonsense").is_err());
    assert_eq!(FieldSelector::parse("").expect("empty").terms, []);
}

#[test]
fn query_keys_and_values_decode_once() {
    let q = QueryParams::parse("wat%63h=1&timeout=5s&timeout=1h&x&labelSelector=a+b");
    assert_eq!(q.watch, Some("1"));
    assert_eq!(q.timeout, Some("5s"));
    assert_eq!(
        QueryParams::decoded(q.label_selector).as_deref(),
        Some("a b")
    );
}

#[test]
fn a_query_servers_would_read_differently_is_refused() {
    for query in [
        "watch=false;&watch=true",
        "a=1;b=2",
        "fieldSelector=%zz&fieldSelector=metadata.name%3Dx",
        "labelSelector=a%2",
    ] {
        let parsed = RequestInfo::new("GET", "/api/v1/pods", Some(query));
        assert_eq!(parsed, Err(InfoError::AmbiguousQuery), "{query}");
    }
    assert!(RequestInfo::new("GET", "/api/v1/pods", Some("labelSelector=a%3Db&x=%41")).is_ok());
}
