//! JWT issuers of an `AuthenticationConfiguration` (`--authentication-config`) end to end,
//! against a real OpenID provider (npm's `oidc-provider`, `apiagg_tests::oidc`): its tokens
//! sign in, the mapped identity reaches the backend as `X-Remote-*` and the delegate as
//! `Impersonate-*`; forged, expired and misdirected tokens are 401 and reach nobody; a rotated
//! key is accepted at once and a dropped one ends its tokens; an issuer down at start is
//! retried; the anonymous rule opens only its paths; the file is reloaded without a restart.

use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use apiagg_tests::oidc::{Alg, OidcClient, OidcOptions, OidcProvider, SigningKey};
use apiagg_tests::trust::{Cluster, AUTHENTICATION_CONFIG};
use apiagg_tests::{wait_until, G, V};

use crate::trust_kubectl::{create, kubeconfig, kubectl, watch};

const AUDIENCE: &str = "kubernetes";
const TOKEN_REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";

fn whoami() -> String {
    format!("/apis/{G}/{V}/whoami")
}

/// The configuration of one issuer (`provider`), JSON (which YAML reads as it is).
fn config(provider: &OidcProvider, prefix: &str) -> String {
    json!({
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "AuthenticationConfiguration",
        "jwt": [{
            "issuer": {
                "url": provider.issuer(),
                "certificateAuthority": provider.ca_pem(),
                "audiences": [AUDIENCE, "other"],
                "audienceMatchPolicy": "MatchAny",
            },
            "claimValidationRules": [{"expression": "claims.sub != 'root'", "message": "no root"}],
            "claimMappings": {
                "username": {"claim": "sub", "prefix": prefix},
                "groups": {"claim": "groups", "prefix": prefix},
                "extra": [{"key": "example.org/email", "valueExpression": "has(claims.email) ? claims.email : ''"}],
            },
            "userValidationRules": [{
                "expression": "!user.username.startsWith('system:')",
                "message": "no system users",
            }],
        }],
        "anonymous": {"enabled": true, "conditions": [{"path": "/readyz"}, {"path": "/livez"}]},
    })
    .to_string()
}

fn alice() -> OidcClient {
    OidcClient::new(
        "alice",
        json!({"groups": ["dev", "ops"], "email": "alice@example.com", "email_verified": true}),
    )
}

async fn get(c: &Cluster, token: &str, path: &str) -> (u16, Value) {
    let auth = format!("Bearer {token}");
    c.get(&c.client(None), path, &[("authorization", &auth)])
        .await
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).expect("epoch").as_secs()
}

/// Claims as the provider would sign them, for tokens it would not issue.
fn claims(provider: &OidcProvider, extra: Value) -> Value {
    let now = unix(SystemTime::now());
    let mut c = json!({"iss": provider.issuer(), "aud": AUDIENCE, "sub": "mallory",
        "iat": now, "exp": now + 300});
    if let (Some(c), Value::Object(extra)) = (c.as_object_mut(), extra) {
        c.extend(extra);
    }
    c
}

/// An ES256 provider with alice, apiagg trusting it with `prefix` on names, and a token of
/// alice's.
async fn started(prefix: &str) -> (SigningKey, OidcProvider, Cluster, String) {
    let key = SigningKey::generate(Alg::Es256, "k1");
    let provider = OidcProvider::start(OidcOptions::new(vec![key.clone()], vec![alice()]));
    let c = Cluster::start_structured(&config(&provider, prefix)).await;
    let token = provider.token("alice", AUDIENCE).await;
    (key, provider, c, token)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_tokens_reach_backends_and_the_delegate_as_the_mapped_user() {
    let (key, provider, c, token) = started("oidc:").await;
    let reviews = c.delegate.requests(TOKEN_REVIEWS).await;

    let (code, seen) = get(&c, &token, &whoami()).await;
    assert_eq!(code, 200, "{seen}");
    assert_eq!(seen["user"], "oidc:alice");
    assert_eq!(
        seen["groups"],
        json!(["oidc:dev", "oidc:ops", "system:authenticated"])
    );
    assert_eq!(
        seen["extra"]["example.org/email"],
        json!(["alice@example.com"])
    );
    // The delegate cannot validate the token itself: apiagg impersonates the mapped user.
    let (code, seen) = get(&c, &token, "/debug/whoami").await;
    assert_eq!(code, 200, "{seen}");
    assert_eq!(seen["user"], "oidc:alice");
    assert!(seen["impersonatedBy"].is_string(), "{seen}");
    assert_eq!(
        seen["extra"]["example.org/email"],
        json!(["alice@example.com"])
    );

    // New tokens cost no round trip to the delegate.
    let again = provider.token("alice", AUDIENCE).await;
    assert_ne!(again, token);
    assert_eq!(get(&c, &again, &whoami()).await.0, 200);
    assert_eq!(
        c.delegate.requests(TOKEN_REVIEWS).await,
        reviews,
        "no TokenReview for a JWT"
    );

    // The hostile rows: each is 401 with nothing of the reason in the body.
    let unpublished = SigningKey::generate(Alg::Es256, "k1");
    let hmac = {
        use base64::Engine;
        let b64 =
            |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
        let head = b64(&json!({"alg": "HS256", "kid": "k1"}));
        format!("{head}.{}.c2ln", b64(&claims(&provider, json!({}))))
    };
    let none = {
        use base64::Engine;
        let b64 =
            |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
        format!(
            "{}.{}.",
            b64(&json!({"alg": "none"})),
            b64(&claims(&provider, json!({})))
        )
    };
    let now = unix(SystemTime::now());
    let forged = [
        (
            "signed by a key the issuer does not publish",
            unpublished.sign_jwt(&claims(&provider, json!({}))),
        ),
        ("HMAC with the kid of the public key", hmac),
        ("alg none", none),
        (
            "expired",
            key.sign_jwt(&claims(&provider, json!({"exp": now - 1}))),
        ),
        (
            "not valid for ten minutes",
            key.sign_jwt(&claims(&provider, json!({"nbf": now + 600}))),
        ),
        (
            "for another audience",
            provider.token("alice", "someone-else").await,
        ),
        (
            "refused by a claim rule",
            key.sign_jwt(&claims(&provider, json!({"sub": "root"}))),
        ),
        (
            "a huge token",
            format!("{}.{}.x", "e".repeat(10), "a".repeat(40_000)),
        ),
    ];
    let served = c.backend.requests(&whoami()).await;
    assert!(
        served >= 2,
        "the backend's log counts alice's requests: {served}"
    );
    for (what, token) in &forged {
        let (code, body) = get(&c, token, &whoami()).await;
        assert_eq!(code, 401, "{what}: {body}");
        let text = body.to_string();
        for leak in ["signature", "kid", "audience", "expired", "root", "system"] {
            assert!(
                !text.contains(leak),
                "{what}: the body says {leak:?}: {text}"
            );
        }
    }
    assert_eq!(
        c.backend.requests(&whoami()).await,
        served,
        "no refused token reached the backend"
    );
    // A token of another issuer is not this issuer's: the next authenticator (TokenReview at
    // the delegate) refuses it.
    let elsewhere = key.sign_jwt(&claims(
        &provider,
        json!({"iss": "https://elsewhere.example.com"}),
    ));
    assert_eq!(get(&c, &elsewhere, &whoami()).await.0, 401);
    assert!(
        c.delegate.requests(TOKEN_REVIEWS).await > reviews,
        "another issuer's token goes to TokenReview"
    );
    let validated = c
        .metric_sum("apiserver_authentication_jwt_authenticator_latency_seconds_count")
        .await;
    assert!(validated >= 1.0, "{validated}");
    let success = c
        .metric_sum("authentication_attempts{result=\"success\"}")
        .await;
    let failure = c
        .metric_sum("authentication_attempts{result=\"failure\"}")
        .await;
    assert!(
        success >= 2.0 && failure >= forged.len() as f64,
        "{success} {failure}"
    );

    // Anonymous requests only on the paths the rule names.
    let anonymous = c.client(None);
    assert_eq!(c.get(&anonymous, "/readyz", &[]).await.0, 200);
    assert_eq!(c.get(&anonymous, "/apis", &[]).await.0, 401);
    assert_eq!(c.get(&anonymous, &whoami(), &[]).await.0, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_key_is_accepted_at_once_and_a_dropped_one_ends_its_tokens() {
    let old = SigningKey::generate(Alg::Rs256, "old");
    let mut provider = OidcProvider::start(OidcOptions::new(vec![old.clone()], vec![alice()]));
    let c = Cluster::start_structured(&config(&provider, "oidc:")).await;
    let before = provider.token("alice", AUDIENCE).await;
    assert_eq!(get(&c, &before, &whoami()).await.0, 200);

    // The provider signs with a new key and still publishes the old one: a token of the new
    // key names a kid apiagg does not know, which fetches the key set at once.
    let new = SigningKey::generate(Alg::Es256, "new");
    provider.restart(vec![new.clone(), old.clone()]);
    let after = provider.token("alice", AUDIENCE).await;
    let started = std::time::Instant::now();
    assert_eq!(get(&c, &after, &whoami()).await.0, 200);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        get(&c, &before, &whoami()).await.0,
        200,
        "the old key still signs"
    );

    // The old key is dropped: once apiagg fetches the key set again (a token with an unknown
    // kid asks for that, at most every ten seconds), the old key's tokens end.
    provider.restart(vec![new.clone()]);
    let stranger = SigningKey::generate(Alg::Es256, "stranger");
    let probe = stranger.sign_jwt(&claims(&provider, json!({})));
    wait_until(
        "the old key's token to be refused",
        Duration::from_secs(30),
        || async {
            get(&c, &probe, &whoami()).await;
            get(&c, &before, &whoami()).await.0
        },
        |code| *code == 401,
    )
    .await;
    assert_eq!(get(&c, &after, &whoami()).await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_issuer_down_at_start_is_retried_until_it_answers() {
    let key = SigningKey::generate(Alg::Es256, "k1");
    let mut options = OidcOptions::new(vec![key.clone()], vec![alice()]);
    // An issuer under a path, its discovery document found at another URL (`discoveryURL`).
    options.issuer_path = "/realms/test".into();
    let mut provider = OidcProvider::reserve(options);
    let discovery = provider.discovery_url().replace("127.0.0.1", "localhost");
    let mut authentication: Value =
        serde_json::from_str(&config(&provider, "oidc:")).expect("config");
    authentication["jwt"][0]["issuer"]["discoveryURL"] = json!(discovery);
    let c = Cluster::start_structured(&authentication.to_string()).await;
    let token = key.sign_jwt(&claims(&provider, json!({"sub": "alice"})));
    assert_eq!(get(&c, &token, &whoami()).await.0, 401, "no keys yet");
    // Other callers are not held up by the issuer.
    let (code, _) = c.get(&c.client(None), "/readyz", &[]).await;
    assert_eq!(code, 200);
    provider.up();
    wait_until(
        "the issuer's keys",
        Duration::from_secs(30),
        || async { get(&c, &token, &whoami()).await },
        |(code, _)| *code == 200,
    )
    .await;
    let fetched = c
        .metric_sum("apiserver_authentication_jwks_fetch_last_timestamp_seconds")
        .await;
    assert!(fetched > 0.0, "fetch timestamps are exported");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_file_keeps_the_old_configuration_and_a_good_one_applies() {
    let (_, provider, c, token) = started("oidc:").await;
    assert_eq!(get(&c, &token, &whoami()).await.1["user"], "oidc:alice");
    let file = c.dir.join(AUTHENTICATION_CONFIG);

    // A CEL expression that does not compile: refused, the old issuer keeps serving.
    let bad = config(&provider, "oidc:").replace("claims.sub != 'root'", "claims.sub !=");
    std::fs::write(&file, bad).expect("bad file");
    wait_until(
        "the failed reload to be counted",
        Duration::from_secs(20),
        || c.metric_sum("apiserver_authentication_config_controller_automatic_reloads_total{status=\"failure\"}"),
        |n| *n == 1.0,
    )
    .await;
    assert!(
        c.gw.log().contains("claimValidationRules[0].expression"),
        "{}",
        c.gw.log()
    );
    assert_eq!(get(&c, &token, &whoami()).await.1["user"], "oidc:alice");

    // A good file with another prefix applies without a restart.
    std::fs::write(&file, config(&provider, "sso:")).expect("good file");
    wait_until(
        "the new prefix",
        Duration::from_secs(20),
        || async { get(&c, &token, &whoami()).await.1["user"].clone() },
        |user| *user == json!("sso:alice"),
    )
    .await;
    let ok = c.metric_sum("apiserver_authentication_config_controller_automatic_reloads_total{status=\"success\"}",
    )
    .await;
    assert_eq!(ok, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_and_the_python_client_list_and_watch_with_a_provider_token() {
    let (_, _provider, c, token) = started("oidc:").await;
    let client = reqwest::Client::builder()
        .add_root_certificate(
            reqwest::Certificate::from_pem(c.serving_ca.cert_pem.as_bytes()).expect("ca"),
        )
        .default_headers(
            [(
                reqwest::header::AUTHORIZATION,
                format!("Bearer {token}").parse().expect("header"),
            )]
            .into_iter()
            .collect(),
        )
        .build()
        .expect("client");
    create(&c, &client, "first").await;

    let config = kubeconfig(&c, "oidc.kubeconfig", &format!("{{token: {token}}}"));
    let names = kubectl(&config, &["get", "flunders", "-o", "name"]);
    assert!(
        names.contains("flunder.wardle.example.com/first"),
        "{names}"
    );
    let who = kubectl(&config, &["get", "--raw", &whoami()]);
    assert!(who.contains("oidc:alice"), "{who}");
    watch(&c, &config, &client, "by-oidc").await;

    let script = r#"
import sys
from kubernetes import client, watch
configuration = client.Configuration()
configuration.host = sys.argv[1]
configuration.ssl_ca_cert = sys.argv[2]
configuration.api_key = {"authorization": "Bearer " + sys.argv[3]}
api = client.CustomObjectsApi(client.ApiClient(configuration))
for item in api.list_namespaced_custom_object(sys.argv[4], sys.argv[5], "default", "flunders")["items"]:
    print("listed", item["metadata"]["name"])
stream = watch.Watch().stream(api.list_namespaced_custom_object, sys.argv[4], sys.argv[5],
    "default", "flunders", timeout_seconds=2)
for event in stream:
    print("watched", event["type"], event["object"]["metadata"]["name"])
"#;
    let ca = c.dir.join("serving-ca-for-python.crt");
    std::fs::write(&ca, &c.serving_ca.cert_pem).expect("ca file");
    let out = Command::new("python3")
        .args([
            "-c",
            script,
            &c.url(""),
            ca.to_str().expect("utf8"),
            &token,
            G,
            V,
        ])
        .output()
        .expect("python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("listed first"), "{stdout}");
    assert!(stdout.contains("watched ADDED by-oidc"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_token_maps_to_a_reserved_name_even_without_prefixes() {
    // No prefixes: claims become names as they are. (The user rule of `config` refuses
    // `system:` usernames too; the groups row is refused by apiagg's reserved-name rule alone.)
    let (key, provider, c, token) = started("").await;
    let (code, seen) = get(&c, &token, &whoami()).await;
    assert_eq!((code, &seen["user"]), (200, &json!("alice")), "{seen}");
    let served = c.backend.requests(&whoami()).await;
    let reserved = [
        json!({"sub": "system:serviceaccount:kube-system:default"}),
        json!({"sub": "system:node:worker-1", "groups": ["system:nodes"]}),
        json!({"sub": "mallory", "groups": ["dev", "system:masters"]}),
    ];
    for claims_of in reserved {
        let forged = key.sign_jwt(&claims(&provider, claims_of.clone()));
        let (code, body) = get(&c, &forged, &whoami()).await;
        assert_eq!(code, 401, "{claims_of}: {body}");
        // Nor anything apiagg serves itself (the group row would otherwise be system:masters,
        // whom apiagg lets change routes).
        let (code, _) = get(&c, &forged, "/apis/apiregistration.k8s.io/v1/apiservices").await;
        assert_eq!(code, 401, "{claims_of}");
    }
    assert_eq!(
        c.backend.requests(&whoami()).await,
        served,
        "nothing reached the backend"
    );
}
