//! The OpenID provider of the JWT authentication suites against itself (no apiagg): its
//! discovery document names the harness's issuer, its JWKS publishes the test's keys, its
//! client_credentials tokens are JWTs signed by the first key with the asked audience, the
//! client's claims and the configured lifetime; a restart with a rotated key set signs with the
//! new key on the same issuer; a provider held down starts later on its port, under an issuer
//! path, and answers a discovery URL other than the issuer's.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use apiagg_tests::oidc::{
    decode_jwt, verify_jwt, Alg, OidcClient, OidcOptions, OidcProvider, SigningKey,
};
use serde_json::{json, Value};

fn alice() -> OidcClient {
    OidcClient::new(
        "alice",
        json!({"email": "alice@example.com", "email_verified": true, "groups": ["dev", "ops"], "preferred_username": "alice"}),
    )
}

fn kids(jwks: &Value) -> BTreeSet<String> {
    let keys = jwks["keys"].as_array().expect("keys");
    keys.iter()
        .map(|k| k["kid"].as_str().expect("kid").to_string())
        .collect()
}

fn set(kids: &[&str]) -> BTreeSet<String> {
    kids.iter().map(|k| k.to_string()).collect()
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

/// Whether nothing listens on the provider's port any more.
async fn refused(provider: &OidcProvider) -> bool {
    // A new connection (the shared client's pooled ones would fail otherwise: the question is
    // whether anyone listens on the provider's port).
    let connected = tokio::net::TcpStream::connect(("127.0.0.1", provider.port())).await;
    matches!(connected, Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_jwts_of_the_first_key_and_follow_a_rotation() {
    let es = SigningKey::generate(Alg::Es256, "key-es");
    let rs = SigningKey::generate(Alg::Rs256, "key-rs");
    let options = OidcOptions {
        token_ttl: Duration::from_secs(3),
        ..OidcOptions::new(vec![es.clone(), rs.clone()], vec![alice()])
    };
    let mut provider = OidcProvider::start(options);
    let issuer = provider.issuer();
    assert_eq!(issuer, format!("https://127.0.0.1:{}", provider.port()));

    let discovery = provider.get_json(&provider.discovery_url()).await;
    assert_eq!(discovery["issuer"], issuer, "{discovery}");
    assert_eq!(discovery["jwks_uri"], provider.jwks_uri());
    assert_eq!(discovery["token_endpoint"], provider.token_endpoint());
    let grants = discovery["grant_types_supported"]
        .as_array()
        .expect("grants");
    assert!(grants.contains(&json!("client_credentials")), "{discovery}");

    // Every key published, public members only, as the harness computes them.
    let jwks = provider.get_json(&provider.jwks_uri()).await;
    assert_eq!(kids(&jwks), set(&["key-es", "key-rs"]));
    for key in [&es, &rs] {
        let published = jwks["keys"]
            .as_array()
            .expect("keys")
            .iter()
            .find(|k| k["kid"] == key.kid.as_str())
            .expect("published");
        assert_eq!(published, &key.public_jwk());
    }

    let before = now();
    let token = provider.token("alice", "apiagg").await;
    let (header, payload) = decode_jwt(&token);
    assert_eq!(header["kid"], "key-es", "{header}");
    assert_eq!(header["alg"], "ES256");
    assert_eq!(header["typ"], "at+jwt");
    assert_eq!(payload["iss"], issuer, "{payload}");
    assert_eq!(payload["aud"], "apiagg");
    assert_eq!(payload["sub"], "alice");
    assert_eq!(payload["client_id"], "alice");
    assert_eq!(payload["email"], "alice@example.com");
    assert_eq!(payload["email_verified"], true);
    assert_eq!(payload["groups"], json!(["dev", "ops"]));
    assert_eq!(payload["preferred_username"], "alice");
    let (iat, exp) = (
        payload["iat"].as_u64().expect("iat"),
        payload["exp"].as_u64().expect("exp"),
    );
    assert_eq!(exp - iat, 3, "the configured lifetime: {payload}");
    assert!(
        (before..=now()).contains(&iat),
        "iat {iat} is now: {payload}"
    );
    assert_eq!(verify_jwt(&token, &jwks), Ok(payload.clone()));
    // Any audience, URL or not.
    let (_, other) = decode_jwt(
        &provider
            .token("alice", "https://kubernetes.default.svc")
            .await,
    );
    assert_eq!(other["aud"], "https://kubernetes.default.svc");

    let (status, body) = provider
        .request_token("alice", "wrong", Some("https://x.example"))
        .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (401, Some("invalid_client"))
    );

    // Rotation: the new key first signs, the old one second stays published.
    let ps = SigningKey::generate(Alg::Ps256, "key-ps");
    provider.restart(vec![ps.clone(), es.clone()]);
    assert_eq!(provider.issuer(), issuer, "same port, same issuer");
    let jwks = provider.get_json(&provider.jwks_uri()).await;
    assert_eq!(kids(&jwks), set(&["key-ps", "key-es"]));
    let rotated = provider.token("alice", "apiagg").await;
    let (header, payload) = decode_jwt(&rotated);
    assert_eq!(
        (header["kid"].as_str(), header["alg"].as_str()),
        (Some("key-ps"), Some("PS256"))
    );
    assert_eq!(payload["iss"], issuer);
    assert!(verify_jwt(&rotated, &jwks).is_ok());
    assert!(
        verify_jwt(&token, &jwks).is_ok(),
        "the old key is still published"
    );

    // The old key dropped: its tokens verify with nothing published.
    provider.restart(vec![ps]);
    let jwks = provider.get_json(&provider.jwks_uri()).await;
    assert_eq!(kids(&jwks), set(&["key-ps"]));
    assert!(verify_jwt(&token, &jwks).is_err());
    assert!(verify_jwt(&rotated, &jwks).is_ok());

    provider.stop();
    assert!(!provider.running());
    assert!(refused(&provider).await, "a stopped provider refuses");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_down_at_first_starts_later_under_its_issuer_path() {
    let bob = OidcClient::new(
        "bob",
        json!({"sub": "user-bob", "iss": "https://evil.example"}),
    );
    let options = OidcOptions {
        issuer_path: "/realms/test".into(),
        ..OidcOptions::new(vec![SigningKey::generate(Alg::Es256, "only")], vec![bob])
    };
    let mut provider = OidcProvider::reserve(options);
    let issuer = provider.issuer();
    assert_eq!(
        issuer,
        format!("https://127.0.0.1:{}/realms/test", provider.port())
    );
    assert!(!provider.running());
    assert!(refused(&provider).await, "down: the port refuses");

    provider.up();
    let discovery = provider.get_json(&provider.discovery_url()).await;
    assert_eq!(discovery["issuer"], issuer);
    assert_eq!(discovery["jwks_uri"], format!("{issuer}/jwks"));
    // Another discovery URL (localhost) for the same issuer.
    let elsewhere = provider.discovery_url().replace("127.0.0.1", "localhost");
    assert_eq!(provider.get_json(&elsewhere).await["issuer"], issuer);
    // Nothing outside the issuer path.
    let root = format!(
        "https://127.0.0.1:{}/.well-known/openid-configuration",
        provider.port()
    );
    let response = provider
        .http()
        .get(&root)
        .send()
        .await
        .expect("GET outside the path");
    assert_eq!(response.status(), 404);

    // `sub` from the client's claims; `iss` the provider's own.
    let token = provider.token("bob", "apiagg").await;
    let (header, payload) = decode_jwt(&token);
    assert_eq!(header["kid"], "only");
    assert_eq!(payload["sub"], "user-bob", "{payload}");
    assert_eq!(payload["iss"], issuer, "{payload}");
    assert_eq!(
        payload["exp"].as_u64().unwrap() - payload["iat"].as_u64().unwrap(),
        300
    );
    let jwks = provider.get_json(&provider.jwks_uri()).await;
    assert!(verify_jwt(&token, &jwks).is_ok());
}
