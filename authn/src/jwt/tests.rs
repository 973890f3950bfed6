use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

use super::*;

const ISSUER: &str = "https://issuer.example.com";
const RSA: &[u8] = include_bytes!("testdata/rsa.pem");

/// A signing key and its public JWK.
pub(crate) struct Signer {
    pub key: EncodingKey,
    pub alg: Algorithm,
    pub jwk: Value,
}

impl Signer {
    pub fn rsa(alg: Algorithm, kid: &str) -> Signer {
        let key = EncodingKey::from_rsa_pem(RSA).expect("rsa key");
        Signer::with(key, alg, kid)
    }

    pub fn ec(alg: Algorithm, kid: &str) -> Signer {
        let curve = match alg {
            Algorithm::ES384 => &rcgen::PKCS_ECDSA_P384_SHA384,
            _ => &rcgen::PKCS_ECDSA_P256_SHA256,
        };
        let pair = rcgen::KeyPair::generate_for(curve).expect("ec key");
        let key = EncodingKey::from_ec_pem(pair.serialize_pem().as_bytes()).expect("ec pem");
        Signer::with(key, alg, kid)
    }

    fn with(key: EncodingKey, alg: Algorithm, kid: &str) -> Signer {
        let mut jwk =
            serde_json::to_value(Jwk::from_encoding_key(&key, alg).expect("jwk")).expect("json");
        jwk["kid"] = json!(kid);
        jwk["use"] = json!("sig");
        Signer { key, alg, jwk }
    }

    pub fn sign(&self, claims: &Value) -> String {
        let mut header = Header::new(self.alg);
        header.kid = self.jwk["kid"].as_str().map(str::to_string);
        jsonwebtoken::encode(&header, claims, &self.key).expect("sign")
    }
}

pub(crate) fn key_set(signers: &[&Signer]) -> KeySet {
    let keys: Vec<&Value> = signers.iter().map(|s| &s.jwk).collect();
    KeySet::parse(json!({ "keys": keys }).to_string().as_bytes()).expect("key set")
}

pub(crate) fn now() -> SystemTime {
    SystemTime::now()
}

fn secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).expect("epoch").as_secs()
}

pub(crate) fn claims(extra: Value) -> Value {
    let mut c = json!({
        "iss": ISSUER,
        "aud": "kubernetes",
        "sub": "alice",
        "iat": secs(now()),
        "exp": secs(now() + Duration::from_secs(600)),
    });
    if let (Some(c), Value::Object(extra)) = (c.as_object_mut(), extra) {
        c.extend(extra);
    }
    c
}

fn check(token: &str, keys: &KeySet) -> Result<Verified, TokenError> {
    verify(
        token,
        keys,
        ISSUER,
        &["kubernetes".to_string(), "other".to_string()],
        now(),
    )
}

fn b64(v: &Value) -> String {
    URL_SAFE_NO_PAD.encode(v.to_string())
}

#[test]
fn every_accepted_algorithm_verifies() {
    let signers = [
        Signer::rsa(Algorithm::RS256, "rs256"),
        Signer::rsa(Algorithm::RS384, "rs384"),
        Signer::rsa(Algorithm::RS512, "rs512"),
        Signer::rsa(Algorithm::PS256, "ps256"),
        Signer::rsa(Algorithm::PS384, "ps384"),
        Signer::rsa(Algorithm::PS512, "ps512"),
        Signer::ec(Algorithm::ES256, "es256"),
        Signer::ec(Algorithm::ES384, "es384"),
    ];
    let keys = key_set(&signers.iter().collect::<Vec<_>>());
    for s in &signers {
        let verified = check(&s.sign(&claims(json!({}))), &keys).expect("verified");
        assert_eq!(verified.claims["sub"], "alice", "{:?}", s.alg);
    }
}

#[test]
fn none_and_hmac_are_refused_whatever_the_key_set() {
    let rsa = Signer::rsa(Algorithm::RS256, "k");
    let keys = key_set(&[&rsa]);
    let payload = b64(&claims(json!({})));
    let none = format!("{}.{payload}.", b64(&json!({"alg": "none", "kid": "k"})));
    assert!(matches!(check(&none, &keys), Err(TokenError::Malformed(_))));
    let none = format!("{}.{payload}.x", b64(&json!({"alg": "none", "kid": "k"})));
    assert_eq!(
        check(&none, &keys),
        Err(TokenError::Algorithm("none".into()))
    );
    // HMAC with the public key's bytes as the secret (the key-confusion attack).
    let public = include_bytes!("testdata/rsa.pub.pem");
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("k".into());
    let forged = jsonwebtoken::encode(
        &header,
        &claims(json!({})),
        &EncodingKey::from_secret(public),
    )
    .expect("sign");
    assert_eq!(
        check(&forged, &keys),
        Err(TokenError::Algorithm("HS256".into()))
    );
    // EdDSA is not among upstream's algorithms.
    let eddsa = format!("{}.{payload}.x", b64(&json!({"alg": "EdDSA", "kid": "k"})));
    assert_eq!(
        check(&eddsa, &keys),
        Err(TokenError::Algorithm("EdDSA".into()))
    );
}

#[test]
fn claims_are_checked_as_upstream() {
    let s = Signer::ec(Algorithm::ES256, "k");
    let keys = key_set(&[&s]);
    let at = |offset: i64| json!(secs(now()) as i64 + offset);
    let cases = [
        (
            json!({"iss": "https://other.example.com"}),
            Some(TokenError::Issuer("https://other.example.com".into())),
        ),
        (
            json!({"aud": "someone-else"}),
            Some(TokenError::Audience(vec!["someone-else".into()])),
        ),
        (json!({"aud": ["a", "other"]}), None),
        (json!({"aud": []}), Some(TokenError::Audience(vec![]))),
        (json!({"exp": at(-1)}), Some(TokenError::Expired)),
        (json!({"exp": "soon"}), Some(TokenError::Expired)),
        (json!({"nbf": at(200)}), None),
        (json!({"nbf": at(400)}), Some(TokenError::NotYetValid)),
        (json!({"iat": at(100_000)}), None),
    ];
    for (extra, want) in cases {
        let got = check(&s.sign(&claims(extra.clone())), &keys).err();
        assert_eq!(got, want, "{extra}");
    }
    let mut no_exp = claims(json!({}));
    no_exp.as_object_mut().expect("object").remove("exp");
    assert_eq!(check(&s.sign(&no_exp), &keys), Err(TokenError::Expired));
}

#[test]
fn keys_are_chosen_by_kid_and_algorithm() {
    let old = Signer::ec(Algorithm::ES256, "old");
    let new = Signer::ec(Algorithm::ES256, "new");
    let keys = key_set(&[&old]);
    assert!(keys.has_kid("old") && !keys.has_kid("new"));
    assert_eq!(
        check(&new.sign(&claims(json!({}))), &keys),
        Err(TokenError::UnknownKey {
            kid: "new".into(),
            alg: "ES256".into()
        })
    );
    // A key of another family never verifies, even under the right kid.
    let rsa = Signer::rsa(Algorithm::RS256, "old");
    assert!(matches!(
        check(&rsa.sign(&claims(json!({}))), &keys),
        Err(TokenError::UnknownKey { .. })
    ));
    // Tampering with the payload breaks the signature.
    let token = old.sign(&claims(json!({})));
    let mut parts: Vec<&str> = token.split('.').collect();
    let forged = b64(&claims(json!({"sub": "admin"})));
    parts[1] = &forged;
    assert_eq!(check(&parts.join("."), &keys), Err(TokenError::Signature));
}

#[test]
fn malformed_and_huge_tokens_are_refused_before_any_work() {
    let s = Signer::ec(Algorithm::ES256, "k");
    let keys = key_set(&[&s]);
    for token in ["", "a.b", "a.b.c.d", "{\"alg\":\"none\"}", "!!!.???.***"] {
        assert!(
            matches!(check(token, &keys), Err(TokenError::Malformed(_))),
            "{token:?}"
        );
    }
    let huge = format!(
        "{}.{}.x",
        b64(&json!({"alg": "ES256"})),
        "a".repeat(MAX_TOKEN)
    );
    assert_eq!(check(&huge, &keys), Err(TokenError::TooLarge));
    assert_eq!(untrusted_issuer(&huge), None);
}

#[test]
fn key_sets_keep_only_signing_keys_and_are_bounded() {
    let s = Signer::ec(Algorithm::ES256, "sig");
    let mut encryption = s.jwk.clone();
    encryption["use"] = json!("enc");
    encryption["kid"] = json!("enc");
    let oct = json!({"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"});
    let doc = json!({"keys": [s.jwk, encryption, oct, {"kty": "weird"}]});
    let keys = KeySet::parse(doc.to_string().as_bytes()).expect("parsed");
    assert_eq!(keys.counts(), (1, 3));
    assert!(!keys.has_kid("hmac") && !keys.has_kid("enc"));
    let only_oct = json!({"keys": [oct]});
    assert_eq!(
        KeySet::parse(only_oct.to_string().as_bytes()).err(),
        Some(KeySetError::NoKeys(1))
    );
    let many = json!({"keys": vec![s.jwk.clone(); MAX_KEYS + 1]});
    assert_eq!(
        KeySet::parse(many.to_string().as_bytes()).err(),
        Some(KeySetError::TooMany(MAX_KEYS + 1))
    );
    let huge = vec![b' '; MAX_JWKS + 1];
    assert_eq!(KeySet::parse(&huge).err(), Some(KeySetError::TooLarge));
    assert!(matches!(
        KeySet::parse(b"<html>"),
        Err(KeySetError::Invalid(_))
    ));
    // A key that names its algorithm verifies only that one.
    let mut rs = Signer::rsa(Algorithm::RS256, "rs").jwk;
    rs["alg"] = json!("RS256");
    let keys = KeySet::parse(json!({"keys": [rs]}).to_string().as_bytes()).expect("parsed");
    let ps = Signer::rsa(Algorithm::PS256, "rs");
    assert!(matches!(
        check(&ps.sign(&claims(json!({}))), &keys),
        Err(TokenError::UnknownKey { .. })
    ));
}

#[test]
fn the_untrusted_issuer_picks_the_authenticator() {
    let s = Signer::ec(Algorithm::ES256, "k");
    assert_eq!(
        untrusted_issuer(&s.sign(&claims(json!({})))).as_deref(),
        Some(ISSUER)
    );
    let google = s.sign(&claims(json!({"iss": "accounts.google.com"})));
    assert_eq!(
        untrusted_issuer(&google).as_deref(),
        Some("https://accounts.google.com")
    );
    assert_eq!(untrusted_issuer("opaque-token-123"), None);
    assert_eq!(untrusted_issuer("a.b.c"), None);
}

/// An ES512 token and its JWK (P-521, which `jsonwebtoken` does not sign or verify).
fn es512(kid: &str, claims: &Value) -> (String, Value) {
    use p521::ecdsa::signature::Signer as _;
    let key = p521::ecdsa::SigningKey::random(&mut p521::elliptic_curve::rand_core::OsRng);
    let point = p521::ecdsa::VerifyingKey::from(&key).to_encoded_point(false);
    let jwk = json!({"kty": "EC", "crv": "P-521", "kid": kid, "use": "sig", "alg": "ES512",
        "x": URL_SAFE_NO_PAD.encode(point.x().expect("x")),
        "y": URL_SAFE_NO_PAD.encode(point.y().expect("y"))});
    let input = format!(
        "{}.{}",
        b64(&json!({"alg": "ES512", "kid": kid})),
        b64(claims)
    );
    let signature: p521::ecdsa::Signature = key.sign(input.as_bytes());
    (
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature.to_bytes())),
        jwk,
    )
}

#[test]
fn es512_tokens_verify_with_p521_keys_only() {
    let (token, jwk) = es512("p521", &claims(json!({})));
    let keys = KeySet::parse(json!({"keys": [jwk]}).to_string().as_bytes()).expect("key set");
    assert_eq!(
        check(&token, &keys).expect("verified").claims["sub"],
        "alice"
    );
    let (other, _) = es512("p521", &claims(json!({})));
    let (_, stranger) = es512("p521", &claims(json!({})));
    let strangers = KeySet::parse(json!({"keys": [stranger]}).to_string().as_bytes()).expect("set");
    assert_eq!(check(&other, &strangers), Err(TokenError::Signature));
    // A P-521 key verifies nothing but ES512, and an ES256 key never an ES512 token.
    let es256 = Signer::ec(Algorithm::ES256, "p521");
    assert!(matches!(
        check(&es256.sign(&claims(json!({}))), &keys),
        Err(TokenError::UnknownKey { .. })
    ));
    let only_es256 = key_set(&[&es256]);
    assert!(matches!(
        check(&token, &only_es256),
        Err(TokenError::UnknownKey { .. })
    ));
}
