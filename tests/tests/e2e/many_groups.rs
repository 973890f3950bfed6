//! Users in many groups (issue 46, item 1): 600 groups arriving as `Impersonate-Group` (over
//! HTTP/1.1 and HTTP/2), stated by a front proxy, or held by a static token's or a JWT's user,
//! and leaving as `X-Remote-Group` to a backend and `Impersonate-Group` to the delegate. Each is
//! served with every group, asserted on what the backend and the delegate received, or refused
//! by apiagg with a 431 Status naming the limit it passed; never a reset connection, a bare 400,
//! or a head a backend would refuse.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use apiagg_tests::oidc::{Alg, OidcOptions, OidcProvider, SigningKey};
use apiagg_tests::trust::{Cluster, Setup, APIAGG_USER, OUTER_PROXY_CN};
use apiagg_tests::{G, V};
use reqwest::Version;
use serde_json::{json, Value};

/// The groups of the users of this suite.
const GROUPS: usize = 600;
const AUDIENCE: &str = "kubernetes";
/// A static token whose user is in [`GROUPS`] groups.
const MANY_TOKEN: &str = "many-groups-token";
/// A static token whose user is in more groups than a forwarded head may carry values.
const COUNTLESS_TOKEN: &str = "countless-groups-token";
/// A static token whose user's groups are more bytes than a forwarded head may carry.
const WORDY_TOKEN: &str = "wordy-groups-token";
/// Groups of [`COUNTLESS_TOKEN`]'s user: past kube-apiserver's 16,384 header values.
const COUNTLESS: usize = 17_000;
/// Groups of [`WORDY_TOKEN`]'s user, each [`WORDY_LENGTH`] bytes long: past 1 MiB of header
/// fields counted as HTTP/2 counts them, within 16,384 values.
const WORDY: usize = 7_300;
const WORDY_LENGTH: usize = 100;

/// Everybody authenticated may use the sample group and the delegate's debug paths; alice may
/// impersonate anyone (the cap on values comes before any check).
const POLICY: &str = r#"{"rules": [
    {"groups": ["system:authenticated"], "verbs": ["*"], "apiGroups": ["wardle.example.com"], "resources": ["*"]},
    {"groups": ["system:authenticated"], "verbs": ["get"], "nonResourceURLs": ["/debug/*"]},
    {"users": ["alice"], "verbs": ["impersonate"], "resources": ["users", "groups"]}
]}"#;

/// `team-000` … in order, `prefix`ed.
fn groups(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}team-{i:03}")).collect()
}

/// A token-file line: `token,user,uid,"g1,g2,…"`.
fn token_line(token: &str, user: &str, groups: &[String]) -> String {
    format!("{token},{user},uid-{user},\"{}\"\n", groups.join(","))
}

/// Where the request goes: the backend's `whoami` (as `X-Remote-*`) or the delegate's (as
/// apiagg's token with `Impersonate-*`).
#[derive(Debug, Clone, Copy)]
enum To {
    Backend,
    Delegate,
}

impl To {
    fn path(self) -> String {
        match self {
            To::Backend => format!("/apis/{G}/{V}/whoami"),
            To::Delegate => "/debug/whoami".to_string(),
        }
    }
}

/// One answer: the status (0 when there was none: the connection broke), the HTTP version,
/// the body as JSON (`null` if it is not) or the error's text.
#[derive(Debug)]
struct Answer {
    code: u16,
    version: Option<Version>,
    body: Value,
}

/// A client of `c` presenting `identity`, speaking only HTTP/1.1 or only HTTP/2.
fn client(c: &Cluster, identity: Option<&(String, String)>, h2: bool) -> reqwest::Client {
    let ca = reqwest::Certificate::from_pem(c.serving_ca.cert_pem.as_bytes()).expect("CA");
    let mut builder = reqwest::Client::builder()
        .add_root_certificate(ca)
        .timeout(Duration::from_secs(20));
    builder = if h2 {
        builder.http2_prior_knowledge()
    } else {
        builder.http1_only()
    };
    if let Some((cert, key)) = identity {
        let pem = format!("{cert}{key}");
        builder = builder.identity(reqwest::Identity::from_pem(pem.as_bytes()).expect("id"));
    }
    builder.build().expect("client")
}

async fn get(c: &Cluster, client: &reqwest::Client, to: To, headers: &[(&str, &str)]) -> Answer {
    let mut request = client.get(c.url(&to.path()));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    match request.send().await {
        Ok(response) => {
            let code = response.status().as_u16();
            let version = Some(response.version());
            let text = response.text().await.unwrap_or_default();
            let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
            Answer {
                code,
                version,
                body,
            }
        }
        Err(e) => Answer {
            code: 0,
            version: None,
            body: Value::String(format!("{e:?}")),
        },
    }
}

/// The group names of a `whoami` answer.
fn names(who: &Value) -> Vec<String> {
    let list = who["groups"].as_array().cloned().unwrap_or_default();
    list.iter()
        .filter_map(|g| g.as_str().map(str::to_string))
        .collect()
}

/// Asserts `answer` is served to `user` in exactly `groups` (and `system:authenticated`), by
/// the delegate through apiagg's impersonation when `to` says so.
fn assert_served(what: &str, answer: &Answer, to: To, user: &str, groups: &[String]) {
    let who = &answer.body;
    assert_eq!(answer.code, 200, "{what}: {who}");
    assert_eq!(who["user"], user, "{what}: {who}");
    let mut expected = groups.to_vec();
    expected.push("system:authenticated".to_string());
    assert_eq!(names(who), expected, "{what}: the groups received");
    match to {
        To::Backend => assert_eq!(who["via"], "front-proxy", "{what}: {who}"),
        To::Delegate => assert_eq!(who["impersonatedBy"], APIAGG_USER, "{what}: {who}"),
    }
}

/// Asserts `answer` is apiagg's 431 Status whose message holds `limit`.
fn assert_refused(what: &str, answer: &Answer, limit: &str) {
    let status = &answer.body;
    assert_eq!(answer.code, 431, "{what}: {status}");
    assert_eq!(status["kind"], "Status", "{what}: {status}");
    assert_eq!(
        status["reason"], "RequestHeaderFieldsTooLarge",
        "{what}: {status}"
    );
    assert_eq!(status["code"], 431, "{what}: {status}");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(limit),
        "{what}: {limit:?} not named: {status}"
    );
}

/// How many requests for `to` the backend or the delegate served.
async fn seen(c: &Cluster, to: To) -> u64 {
    match to {
        To::Backend => c.backend.requests(&to.path()).await,
        To::Delegate => c.delegate.requests(&to.path()).await,
    }
}

/// The issuer's configuration: `sub` and `groups` under the prefix `oidc:`.
fn jwt_config(provider: &OidcProvider) -> String {
    json!({
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "AuthenticationConfiguration",
        "jwt": [{
            "issuer": {
                "url": provider.issuer(),
                "certificateAuthority": provider.ca_pem(),
                "audiences": [AUDIENCE],
            },
            "claimMappings": {
                "username": {"claim": "sub", "prefix": "oidc:"},
                "groups": {"claim": "groups", "prefix": "oidc:"},
            },
        }],
    })
    .to_string()
}

/// The cluster of this suite: webhook authorization from [`POLICY`], the static tokens above,
/// and a JWT issuer; with its signing key and the issuer (kept running).
async fn cluster() -> (Cluster, SigningKey, OidcProvider) {
    let key = SigningKey::generate(Alg::Es256, "k1");
    let provider = OidcProvider::start(OidcOptions::new(vec![key.clone()], Vec::new()));
    let wordy: Vec<String> = (0..WORDY)
        .map(|i| format!("{i:0>width$}", width = WORDY_LENGTH))
        .collect();
    let tokens = [
        token_line(MANY_TOKEN, "many", &groups("", GROUPS)),
        token_line(COUNTLESS_TOKEN, "countless", &groups("", COUNTLESS)),
        token_line(WORDY_TOKEN, "wordy", &wordy),
    ]
    .concat();
    let authentication = jwt_config(&provider);
    let c = Cluster::start_setup(Setup {
        authorization: Some("{mode: Webhook}"),
        policy: Some(POLICY),
        authentication: Some(&authentication),
        tokens: Some(&tokens),
        ..Setup::default()
    })
    .await;
    (c, key, provider)
}

/// A JWT of the issuer for `oidc:many` in [`GROUPS`] groups.
fn many_jwt(key: &SigningKey, provider: &OidcProvider) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("epoch")
        .as_secs();
    key.sign_jwt(&json!({
        "iss": provider.issuer(), "aud": AUDIENCE, "sub": "many",
        "iat": now, "exp": now + 600, "groups": groups("", GROUPS),
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_in_600_groups_are_served_or_refused_with_the_limit_named() {
    let (c, key, provider) = cluster().await;
    let jwt = format!("Bearer {}", many_jwt(&key, &provider));
    let token = format!("Bearer {MANY_TOKEN}");
    let alice = c.client_ca.client("alice", &[]);
    let outer = c.front_proxy_ca.client(OUTER_PROXY_CN, &[]);
    let asked = groups("", GROUPS);
    let mut impersonating = vec![("Impersonate-User", "dave")];
    impersonating.extend(asked.iter().map(|g| ("Impersonate-Group", g.as_str())));
    let mut stated = vec![("X-Remote-User", "frank")];
    stated.extend(asked.iter().map(|g| ("X-Remote-Group", g.as_str())));

    for h2 in [false, true] {
        let wire = if h2 { "HTTP/2" } else { "HTTP/1.1" };
        let plain = client(&c, None, h2);
        let alice = client(&c, Some(&alice), h2);
        let outer = client(&c, Some(&outer), h2);
        for to in [To::Backend, To::Delegate] {
            let what = |case: &str| format!("{case} over {wire} to the {to:?}");

            // A static token's and a JWT's user: every group arrives, one header line each.
            let answer = get(&c, &plain, to, &[("Authorization", &token)]).await;
            assert_served(&what("static token"), &answer, to, "many", &asked);
            let expected = if h2 {
                Version::HTTP_2
            } else {
                Version::HTTP_11
            };
            assert_eq!(answer.version, Some(expected), "{}", what("static token"));
            let answer = get(&c, &plain, to, &[("Authorization", &jwt)]).await;
            assert_served(
                &what("JWT"),
                &answer,
                to,
                "oidc:many",
                &groups("oidc:", GROUPS),
            );

            // 600 `Impersonate-Group` values: past the 64 values apiagg checks (HTTP/2), or
            // past the 256 header lines of its HTTP/1.1 parser. A front proxy stating 600
            // groups: believed over HTTP/2, past the parser's lines over HTTP/1.1. What is
            // refused reaches nobody behind apiagg.
            let before = seen(&c, to).await;
            let answer = get(&c, &alice, to, &impersonating).await;
            let limit = if h2 { "limit of 64" } else { "limit of 256" };
            assert_refused(&what("600 Impersonate-Group"), &answer, limit);
            let answer = get(&c, &outer, to, &stated).await;
            if h2 {
                assert_served(&what("front proxy"), &answer, to, "frank", &asked);
                assert_eq!(seen(&c, to).await, before + 1, "{}", what("served"));
            } else {
                assert_refused(&what("front proxy"), &answer, "limit of 256");
                assert_eq!(seen(&c, to).await, before, "{}", what("refused requests"));
            }
        }
    }

    // Over HTTP/2 a header list past 64 KiB (1,000 groups of 40 bytes: 86,000 bytes as HTTP/2
    // counts) is answered by the HTTP/2 layer itself: 431 without a body, the connection kept.
    let wide: Vec<String> = (0..1_000).map(|i| format!("{i:0>40}")).collect();
    let mut stated = vec![("X-Remote-User", "frank")];
    stated.extend(wide.iter().map(|g| ("X-Remote-Group", g.as_str())));
    let outer = client(&c, Some(&outer), true);
    let answer = get(&c, &outer, To::Backend, &stated).await;
    assert_eq!((answer.code, &answer.body), (431, &json!("")), "{answer:?}");
    let token = [("Authorization", token.as_str())];
    let again = get(&c, &outer, To::Backend, &token).await;
    assert_served("the next request", &again, To::Backend, "many", &asked);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identities_past_what_kube_apiserver_accepts_are_refused_before_they_are_sent() {
    let (c, _key, _provider) = cluster().await;
    for h2 in [false, true] {
        let wire = if h2 { "HTTP/2" } else { "HTTP/1.1" };
        let plain = client(&c, None, h2);
        for to in [To::Backend, To::Delegate] {
            let before = seen(&c, to).await;
            for (token, limit) in [(COUNTLESS_TOKEN, "16384"), (WORDY_TOKEN, "1048576")] {
                let bearer = format!("Bearer {token}");
                let answer = get(&c, &plain, to, &[("Authorization", &bearer)]).await;
                assert_refused(
                    &format!("{token} over {wire} to the {to:?}"),
                    &answer,
                    limit,
                );
            }
            assert_eq!(
                seen(&c, to).await,
                before,
                "refused requests reached the {to:?}"
            );
        }
    }
}
