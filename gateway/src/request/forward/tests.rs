//! The header policy on request heads: what passes, what is stamped, what never reaches a
//! backend.

use super::*;
use apiagg_config::Authentication;

fn request() -> RequestHeader {
    let mut req =
        RequestHeader::build("GET", b"/apis/a.io/v1/x/exec?command=ls", None).expect("req");
    for (name, value) in [
        ("Connection", "Upgrade"),
        ("Upgrade", "websocket"),
        ("Authorization", "Bearer t"),
        ("Impersonate-User", "root"),
        ("X-Remote-User", "admin"),
        ("X-Remote-Group", "system:masters"),
        // CGI-style header maps merge these into X-Remote-* (issue 42, noted).
        ("X_Remote_User", "admin"),
        ("x-remote_group", "system:masters"),
        ("Impersonate_User", "root"),
        ("X_Custom_Header", "kept"),
        ("X-Forwarded-For", "10.9.9.9"),
        ("Host", "gateway"),
    ] {
        req.append_header(name, value).expect("header");
    }
    req
}

const ENDPOINT: HeaderValue = HeaderValue::from_static("10.0.0.1:443");

fn auth() -> Authenticator {
    Authenticator::new(&Authentication::default()).expect("authenticator")
}

fn user() -> User {
    User::new(
        "alice".into(),
        "uid-7".into(),
        vec!["dev".into()],
        vec![("example.org/scopes".into(), vec!["read".into()])],
    )
    .expect("user")
}

fn forwarding<'a>(identity: Identity<'a>, auth: &'a Authenticator) -> Forwarding<'a> {
    Forwarding {
        client_ip: Some(IpAddr::from([127, 0, 0, 1])),
        proto: "https",
        identity,
        auth,
        trace: &[],
    }
}

fn values(req: &RequestHeader, name: &str) -> Vec<String> {
    req.headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(str::to_string)
        .collect()
}

#[test]
fn remote_backends_get_the_caller_as_x_remote_and_no_credentials() {
    let (auth, user) = (auth(), user());
    let mut req = request();
    apply(
        &mut req,
        &forwarding(Identity::Remote(&user), &auth),
        &ENDPOINT,
    )
    .expect("apply");
    assert!(values(&req, "authorization").is_empty());
    assert!(values(&req, "impersonate-user").is_empty());
    assert_eq!(values(&req, "x-remote-user"), ["alice"]);
    assert_eq!(values(&req, "x-remote-uid"), ["uid-7"]);
    assert_eq!(
        values(&req, "x-remote-group"),
        ["dev", "system:authenticated"]
    );
    assert_eq!(
        values(&req, "x-remote-extra-example.org%2fscopes"),
        ["read"]
    );
    assert_eq!(values(&req, "host"), ["10.0.0.1:443"]);
    assert_eq!(values(&req, "x-forwarded-for"), ["10.9.9.9, 127.0.0.1"]);
    assert_eq!(values(&req, "x-forwarded-proto"), ["https"]);
    assert_eq!(values(&req, "x-forwarded-host"), ["10.0.0.1:443"]);
    assert_eq!(values(&req, "x-forwarded-uri"), ["/apis/a.io/v1/x/exec"]);
    assert_eq!(values(&req, "upgrade"), ["websocket"]);
    for underscored in ["x_remote_user", "x-remote_group", "impersonate_user"] {
        assert!(values(&req, underscored).is_empty(), "{underscored}");
    }
    assert_eq!(values(&req, "x_custom_header"), ["kept"]);
}

#[test]
fn the_delegate_keeps_credentials_it_can_verify_but_never_identity_claims() {
    let auth = auth();
    let mut req = request();
    apply(
        &mut req,
        &forwarding(Identity::CallerCredentials, &auth),
        &ENDPOINT,
    )
    .expect("apply");
    assert_eq!(values(&req, "authorization"), ["Bearer t"]);
    assert_eq!(values(&req, "impersonate-user"), ["root"]);
    assert!(values(&req, "x-remote-user").is_empty());
}

#[test]
fn callers_only_apiagg_knows_are_impersonated_on_its_own_token() {
    let (auth, user) = (auth(), user());
    let token = Arc::new(HeaderValue::from_static("Bearer apiagg"));
    let identity = Identity::Impersonate {
        user: &user,
        token: Some(token),
    };
    let mut req = request();
    apply(&mut req, &forwarding(identity, &auth), &ENDPOINT).expect("apply");
    assert_eq!(values(&req, "authorization"), ["Bearer apiagg"]);
    assert_eq!(values(&req, "impersonate-user"), ["alice"]);
    assert_eq!(values(&req, "impersonate-uid"), ["uid-7"]);
    assert_eq!(values(&req, "impersonate-group"), ["dev"]);
    assert_eq!(
        values(&req, "impersonate-extra-example.org%2fscopes"),
        ["read"]
    );
    assert!(values(&req, "x-remote-user").is_empty());
}

#[test]
fn fetches_in_the_callers_name_follow_the_same_policy() {
    let (auth, user) = (auth(), user());
    let mut req = request();
    req.append_header("Accept", "application/vnd.kubernetes.protobuf")
        .expect("header");
    req.append_header("Accept-Encoding", "gzip")
        .expect("header");
    let id = HeaderValue::from_static("0d6e6a9c-audit");
    let headers = fetch_headers(
        &req,
        &forwarding(Identity::Remote(&user), &auth),
        &ENDPOINT,
        Some(id),
    )
    .expect("headers");
    let get = |name: &str| {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect::<Vec<_>>()
    };
    assert_eq!(get("x-remote-user"), ["alice"]);
    assert!(get("authorization").is_empty());
    assert!(get("impersonate-user").is_empty());
    assert!(get("connection").is_empty() && get("upgrade").is_empty());
    assert!(get("accept-encoding").is_empty());
    assert_eq!(get("accept"), ["application/json"]);
    assert_eq!(get("audit-id"), ["0d6e6a9c-audit"]);
    assert_eq!(get("host"), ["10.0.0.1:443"]);
}

#[test]
fn the_upgrade_head_follows_the_same_policy() {
    let (auth, user) = (auth(), user());
    let head = upgrade_head(
        &request(),
        &forwarding(Identity::Remote(&user), &auth),
        &ENDPOINT,
    )
    .expect("head");
    let head = String::from_utf8(head).expect("utf8");
    assert!(
        head.starts_with("GET /apis/a.io/v1/x/exec?command=ls HTTP/1.1\r\nHost: 10.0.0.1:443\r\n")
    );
    let lower = head.to_ascii_lowercase();
    for hidden in [
        "authorization",
        "impersonate-",
        "x-remote-user: admin",
        "host: gateway",
    ] {
        assert!(!lower.contains(hidden), "{hidden} in {head}");
    }
    assert!(lower.contains("x-remote-user: alice\r\n"));
    assert!(lower.contains("x-forwarded-for: 10.9.9.9, 127.0.0.1\r\n"));
    assert_eq!(lower.matches("\r\nhost: ").count(), 1, "{head}");
    assert!(head.ends_with("\r\n\r\n"));
}
