//! The first validation of a token (a cache miss): signature, claims and the claim mappings of
//! a typical configuration (username and groups claims with a prefix, one CEL extra mapping,
//! one claim rule and one user rule), for ES256 and RS256 tokens. Later requests with the same
//! token are answered from the gateway's cache and do none of this.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use criterion::{criterion_group, criterion_main, Criterion};
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::json;

const ISSUER: &str = "https://issuer.example.com";

fn config() -> Vec<u8> {
    json!({
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "AuthenticationConfiguration",
        "jwt": [{
            "issuer": {"url": ISSUER, "audiences": ["kubernetes"]},
            "claimValidationRules": [{"expression": "claims.sub != 'root'", "message": "no root"}],
            "claimMappings": {
                "username": {"claim": "sub", "prefix": "oidc:"},
                "groups": {"claim": "groups", "prefix": "oidc:"},
                "extra": [{"key": "example.org/email", "valueExpression": "claims.email"}],
            },
            "userValidationRules": [{"expression": "!user.username.startsWith('system:')"}],
        }],
    })
    .to_string()
    .into_bytes()
}

fn token(key: &EncodingKey, alg: Algorithm) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("epoch")
        .as_secs();
    let claims = json!({
        "iss": ISSUER, "aud": "kubernetes", "sub": "alice", "iat": now, "exp": now + 3600,
        "email": "alice@example.com", "email_verified": true,
        "groups": ["dev", "ops", "platform", "on-call"],
    });
    let mut header = Header::new(alg);
    header.kid = Some("k".into());
    jsonwebtoken::encode(&header, &claims, key).expect("sign")
}

fn key_set(key: &EncodingKey, alg: Algorithm) -> apiagg_authn::jwt::KeySet {
    let mut jwk =
        serde_json::to_value(Jwk::from_encoding_key(key, alg).expect("jwk")).expect("json");
    jwk["kid"] = json!("k");
    let doc = json!({ "keys": [jwk] }).to_string();
    apiagg_authn::jwt::KeySet::parse(doc.as_bytes()).expect("key set")
}

fn first_validation(c: &mut Criterion) {
    let loaded = apiagg_authn::load(&config()).expect("config");
    let authenticator = &loaded.jwt[0];
    let ec = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("ec");
    let rsa = include_bytes!("../src/jwt/testdata/rsa.pem");
    let keys = [
        (
            "ES256",
            EncodingKey::from_ec_pem(ec.serialize_pem().as_bytes()).expect("ec pem"),
            Algorithm::ES256,
        ),
        (
            "RS256",
            EncodingKey::from_rsa_pem(rsa).expect("rsa pem"),
            Algorithm::RS256,
        ),
    ];
    let mut group = c.benchmark_group("first validation");
    group.measurement_time(Duration::from_secs(3));
    for (name, key, alg) in &keys {
        let token = token(key, *alg);
        let set = key_set(key, *alg);
        group.bench_function(*name, |b| {
            b.iter(|| {
                authenticator
                    .authenticate(&token, &set, SystemTime::now())
                    .expect("valid")
            })
        });
    }
    let es = token(&keys[0].1, Algorithm::ES256);
    let es_keys = key_set(&keys[0].1, Algorithm::ES256);
    let audiences = ["kubernetes".to_string()];
    let verify = || {
        apiagg_authn::jwt::verify(&es, &es_keys, ISSUER, &audiences, SystemTime::now())
            .expect("valid")
    };
    group.bench_function("ES256 signature and claims only", |b| b.iter(verify));
    let claims = verify().claims;
    group.bench_function(
        "claims to user only (two claims, one CEL mapping, two rules)",
        |b| b.iter(|| authenticator.map(&claims).expect("user")),
    );
    let token = es;
    group.bench_function("untrusted issuer (every request, before the cache)", |b| {
        b.iter(|| apiagg_authn::jwt::untrusted_issuer(&token).expect("iss"))
    });
    group.finish();
}

criterion_group!(benches, first_validation);
criterion_main!(benches);
