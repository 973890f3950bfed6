use super::*;

fn derive(method: &str, target: &str) -> Attributes {
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    };
    let headers = HeaderMap::new();
    let info =
        RequestInfo::new(method, path, query).unwrap_or_else(|e| panic!("{method} {target}: {e}"));
    attributes(&AuthzRequest {
        info: &info,
        headers: &headers,
    })
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
        Refusal::Forbidden { message, details } => (message, details),
        Refusal::Internal(m) => panic!("not a 403: {m}"),
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
fn impersonation_checks_each_thing_asked_for() {
    let wanted = impersonation(&headers(&[
        ("Impersonate-User", "bob"),
        ("Impersonate-Group", "dev"),
        ("Impersonate-Extra-Example.org%2Fscopes", "read"),
        ("Impersonate-Uid", "u-1"),
    ]))
    .expect("valid")
    .expect("some");
    let rows: Vec<(String, String, String, String)> = wanted
        .checks
        .iter()
        .map(|c| {
            (
                c.resource.clone(),
                c.subresource.clone(),
                c.group.clone(),
                c.name.clone(),
            )
        })
        .collect();
    let row = |r: &str, s: &str, g: &str, n: &str| (r.into(), s.into(), g.into(), n.into());
    assert_eq!(
        rows,
        [
            row("users", "", "", "bob"),
            row("groups", "", "", "dev"),
            row(
                "userextras",
                "example.org/scopes",
                "authentication.k8s.io",
                "read"
            ),
            row("uids", "", "authentication.k8s.io", "u-1"),
        ]
    );
    assert!(wanted.checks.iter().all(|c| c.verb == "impersonate"));
    assert_eq!(wanted.user.name, "bob");
    assert_eq!(wanted.user.uid, "u-1");
    assert_eq!(wanted.user.groups, ["dev", AUTHENTICATED]);
    assert_eq!(
        wanted.user.extra,
        [("example.org/scopes".to_string(), vec!["read".to_string()])]
    );

    let (text, details) = message(forbidden(&user("alice"), &wanted.checks[0], ""));
    assert_eq!(
        text,
        r#"users "bob" is forbidden: User "alice" cannot impersonate resource "users" in API group "" at the cluster scope"#
    );
    assert_eq!(details, json!({"name": "bob", "kind": "users"}));
}

#[test]
fn service_accounts_are_impersonated_in_their_namespace() {
    let wanted = impersonation(&headers(&[(
        "Impersonate-User",
        "system:serviceaccount:ns:builder",
    )]))
    .expect("valid")
    .expect("some");
    let check = &wanted.checks[0];
    assert_eq!(
        (
            check.resource.as_str(),
            check.namespace.as_str(),
            check.name.as_str()
        ),
        ("serviceaccounts", "ns", "builder")
    );
    assert_eq!(
        wanted.user.groups,
        [
            "system:serviceaccounts",
            "system:serviceaccounts:ns",
            AUTHENTICATED
        ]
    );
    let (text, _) = message(forbidden(&user("alice"), check, ""));
    assert_eq!(
        text,
        r#"serviceaccounts "builder" is forbidden: User "alice" cannot impersonate resource "serviceaccounts" in API group "" in the namespace "ns""#
    );
}

#[test]
fn impersonation_needs_a_user() {
    assert_eq!(
        impersonation(&headers(&[("Impersonate-Group", "x")])).err(),
        Some(ImpersonationError::NoUser)
    );
    assert!(impersonation(&headers(&[])).expect("none").is_none());
}

#[test]
fn the_cache_key_covers_user_and_attributes() {
    let a = derive("GET", "/api/v1/pods");
    let b = derive("GET", "/api/v1/pods?watch=1");
    assert_ne!(cache_key(&user("x"), &a), cache_key(&user("x"), &b));
    assert_ne!(cache_key(&user("x"), &a), cache_key(&user("y"), &a));
    assert_eq!(cache_key(&user("x"), &a), cache_key(&user("x"), &a));
    // Length prefixes keep field boundaries apart.
    let joined = User::new("ab".into(), String::new(), vec![], vec![]).expect("user");
    let split = User::new("a".into(), "b".into(), vec![], vec![]).expect("user");
    assert_ne!(cache_key(&joined, &a), cache_key(&split, &a));
}

fn decision(allowed: bool) -> Decision {
    Decision {
        allowed,
        reason: String::new(),
    }
}

fn numbered(i: u64) -> [u8; 32] {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&i.to_le_bytes());
    key
}

#[tokio::test]
async fn denials_are_kept_apart_and_failures_not_at_all() {
    let cache = DecisionCache::new(Duration::from_secs(60), Duration::from_secs(60));
    let ok = |d: Decision| async move { Ok::<_, String>(d) };
    assert_eq!(
        cache.load([1; 32], ok(decision(true))).await,
        Ok(decision(true))
    );
    assert_eq!(cache.get(&[1; 32]).await, Some(decision(true)));
    assert_eq!(
        cache.load([9; 32], ok(decision(false))).await,
        Ok(decision(false))
    );
    assert_eq!(cache.get(&[9; 32]).await, Some(decision(false)));
    // A flood of distinct denials (more than either cache holds) leaves the allowed one.
    for i in 0..CACHE_LIMIT + 500 {
        let key = numbered(i + 10);
        assert_eq!(
            cache.load(key, ok(decision(false))).await,
            Ok(decision(false))
        );
    }
    if let Some(denied) = &cache.denied {
        denied.run_pending_tasks().await;
        assert!(denied.entry_count() <= CACHE_LIMIT);
    }
    assert_eq!(cache.get(&[1; 32]).await, Some(decision(true)));
    // A failure is not remembered: the next look-up asks again.
    let failed = cache
        .load([2; 32], async { Err::<Decision, _>("down") })
        .await;
    assert_eq!(failed, Err("down"));
    assert_eq!(cache.get(&[2; 32]).await, None);
    // A zero TTL keeps nothing.
    let none = DecisionCache::new(Duration::ZERO, Duration::ZERO);
    assert_eq!(
        none.load([3; 32], ok(decision(true))).await,
        Ok(decision(true))
    );
    assert_eq!(none.get(&[3; 32]).await, None);
}

#[tokio::test]
async fn concurrent_reviews_of_one_key_are_asked_once() {
    let cache = DecisionCache::new(Duration::from_secs(60), Duration::from_secs(60));
    for allowed in [true, false] {
        let key = [u8::from(allowed); 32];
        let asked = std::sync::atomic::AtomicUsize::new(0);
        let (release, released) = tokio::sync::watch::channel(false);
        let look_ups = (0..20).map(|_| {
            let mut released = released.clone();
            let asked = &asked;
            cache.load(key, async move {
                asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                // Held until every look-up has started (the join below polls them all first).
                let _ = released.wait_for(|r| *r).await;
                Ok::<_, String>(decision(allowed))
            })
        });
        let all = futures_util::future::join_all(look_ups);
        let release = async {
            tokio::task::yield_now().await;
            let _ = release.send(true);
        };
        let (decisions, ()) = tokio::join!(all, release);
        assert!(decisions.iter().all(|d| *d == Ok(decision(allowed))));
        assert_eq!(
            asked.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "{allowed}"
        );
    }
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

#[test]
fn the_review_spec_leaves_empty_fields_out() {
    let u = User::new(
        "alice".into(),
        "u-1".into(),
        vec!["dev".into()],
        vec![("scopes".into(), vec!["a".into()])],
    )
    .expect("user");
    let spec = review_spec(&u, &derive("GET", "/apis/a.io/v1/foos"));
    assert_eq!(
        spec,
        json!({
            "resourceAttributes": {"verb": "list", "group": "a.io", "version": "v1", "resource": "foos"},
            "user": "alice",
            "groups": ["dev", AUTHENTICATED],
            "extra": {"scopes": ["a"]},
            "uid": "u-1",
        })
    );
    let spec = review_spec(&u, &derive("GET", "/metrics"));
    assert_eq!(
        spec["nonResourceAttributes"],
        json!({"path": "/metrics", "verb": "get"})
    );
}
