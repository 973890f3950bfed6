//! JWT headers and claims through the authn crate as the gateway's JWT issuers use it
//! (`gateway/src/auth/jwt`): `untrusted_issuer` (which issuer a token is for), `jwt::verify`
//! (header, algorithm and key choice, signature, `iss`, `aud`, `exp`, `nbf`), and
//! `JwtAuthenticator::map` (required claims, claim validation rules, username, groups, uid and
//! extra by claim and by CEL, user validation rules), for a fixed `AuthenticationConfiguration`
//! with two issuers: one mapping claims, one mapping by expressions.
//!
//! Input: the header's JSON, a NUL byte, and the payload's JSON (no NUL: the whole is the
//! payload, under `{"alg":"ES256","kid":"fuzz"}`). Two modes:
//! - fuzzing (the default): the token, with a signature that does not verify, goes through
//!   `verify` (all that happens before the signature is checked), and the payload's claims go
//!   through `map` directly, as they would after a valid signature;
//! - signed (`JWT_CLAIMS_SIGNED=1`, to replay a corpus: `jwt_claims -runs=0 <corpus>`): each
//!   token is signed with a real ES256 test key (below; its JWK is in the issuers' key set,
//!   beside an RSA key), and `JwtAuthenticator::authenticate` runs it end to end, signature
//!   verified, so every check after the signature is reached honestly. Not while fuzzing: the
//!   instrumented elliptic-curve code costs ten times the rest, and its loop counts, different
//!   for every token, filled the corpus with inputs that were new only to it.
//!
//! Checked beyond "no panic": a mapped user has a username, neither it nor a group is in
//! `system:`; the claim-mapping issuer's groups carry its prefix; an accepted token expires
//! after the clock; a token accepted end to end maps to what its claims map to; a token whose
//! signature does not verify is never accepted.
#![no_main]

use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use apiagg_authn::jwt::{self, KeySet, TokenError};
use apiagg_authn::{Identity, JwtAuthenticator, MappingError};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, EncodingKey};
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Map, Value};

/// A P-256 key generated for this target only: it signs fuzz inputs, nothing else trusts it.
const TEST_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgEa/mnerJif356vHu
6y+D0W5zv8bPmcI4sF0q9EuqLTWhRANCAAShJBJB2yG2FsjBCbQ5TkAOnr/A81Ae
Q7de9MxFHq10fYfc6ufs4TX94jEgtS7cd62uuPDjDN9QjBIhXsMiibrX
-----END PRIVATE KEY-----
";
/// The RSA key of the authn crate's tests (only its public half is published here).
const RSA_KEY: &[u8] = include_bytes!("../../authn/src/jwt/testdata/rsa.pem");

/// The configuration: the first issuer maps claims (with a required claim and prefixes), the
/// second maps by expressions; both have claim and user validation rules.
const CONFIG: &str = r#"apiVersion: apiserver.config.k8s.io/v1
kind: AuthenticationConfiguration
jwt:
- issuer:
    url: https://login.example.com/realms/platform
    audiences: [kubernetes, kubectl]
    audienceMatchPolicy: MatchAny
  claimValidationRules:
  - claim: hd
    requiredValue: example.com
  - expression: "claims.exp - claims.iat <= 86400"
    message: tokens may live one day at most
  claimMappings:
    username:
      claim: email
      prefix: ""
    groups:
      claim: groups
      prefix: "oidc:"
    uid:
      claim: sub
    extra:
    - key: example.com/tenant
      valueExpression: "has(claims.tenant) ? claims.tenant : ''"
  userValidationRules:
  - expression: "!user.username.startsWith('system:')"
    message: identity provider users may not be system users
- issuer:
    url: https://token.actions.example.com
    audiences: [apiagg]
  claimValidationRules:
  - expression: "has(claims.repository) && claims.repository.startsWith('org/')"
    message: only the org's repositories
  - expression: "!has(claims.ref_type) || claims.ref_type in ['branch', 'tag']"
  claimMappings:
    username:
      expression: "'ci:' + claims.repository + ':' + (has(claims.ref) ? claims.ref : 'none')"
    groups:
      expression: "has(claims.teams) ? claims.teams.map(t, 'ci:' + string(t)) : ['ci:' + claims.repository_owner]"
    uid:
      expression: "has(claims.repository_id) ? string(claims.repository_id) : ''"
    extra:
    - key: example.com/environment
      valueExpression: "has(claims.environment) ? claims.environment.lowerAscii() : null"
    - key: example.com/scopes
      valueExpression: "has(claims.scp) ? claims.scp.split(' ').filter(s, s != '') : []"
    - key: example.com/workflow
      valueExpression: "has(claims.workflow) && size(claims.workflow) < 64 ? [claims.workflow] : []"
  userValidationRules:
  - expression: "user.groups.all(g, g.startsWith('ci:'))"
    message: groups must be ci groups
  - expression: "size(user.username) < 256 && !('example.com/blocked' in user.extra)"
"#;

struct Fixture {
    issuers: Vec<JwtAuthenticator>,
    keys: KeySet,
    signer: EncodingKey,
    now: SystemTime,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let loaded = apiagg_authn::load(CONFIG.as_bytes()).expect("the target's configuration");
        let signer = EncodingKey::from_ec_pem(TEST_KEY.as_bytes()).expect("test key");
        let rsa = EncodingKey::from_rsa_pem(RSA_KEY).expect("rsa key");
        let jwk = |key: &EncodingKey, alg, kid: &str| {
            let mut jwk =
                serde_json::to_value(Jwk::from_encoding_key(key, alg).expect("jwk")).expect("json");
            jwk["kid"] = json!(kid);
            jwk["use"] = json!("sig");
            jwk
        };
        let set = json!({ "keys": [jwk(&rsa, Algorithm::RS256, "rsa"), jwk(&signer, Algorithm::ES256, "fuzz")] });
        Fixture {
            issuers: loaded.jwt,
            keys: KeySet::parse(set.to_string().as_bytes()).expect("key set"),
            signer,
            now: UNIX_EPOCH + Duration::from_secs(1_750_000_000),
        }
    })
}

/// What every mapped user must be.
fn check_identity(issuer: usize, identity: &Identity) {
    assert!(!identity.username.is_empty(), "{identity:?}");
    assert!(!identity.username.starts_with("system:"), "{identity:?}");
    assert!(
        !identity.groups.iter().any(|g| g.starts_with("system:")),
        "{identity:?}"
    );
    if issuer == 0 {
        assert!(
            identity.groups.iter().all(|g| g.starts_with("oidc:")),
            "{identity:?}"
        );
    }
    assert!(
        identity.extra.values().all(|v| !v.is_empty()),
        "{identity:?}"
    );
}

/// Whether tokens are signed (`JWT_CLAIMS_SIGNED` set).
fn signed_mode() -> bool {
    static SIGNED: OnceLock<bool> = OnceLock::new();
    *SIGNED.get_or_init(|| std::env::var_os("JWT_CLAIMS_SIGNED").is_some())
}

fuzz_target!(|data: &[u8]| {
    let (header, payload) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (&br#"{"alg":"ES256","kid":"fuzz"}"#[..], data),
    };
    let f = fixture();
    let signed = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header),
        URL_SAFE_NO_PAD.encode(payload)
    );

    if signed_mode() {
        let signature = jsonwebtoken::crypto::sign(signed.as_bytes(), &f.signer, Algorithm::ES256)
            .expect("sign");
        let token = format!("{signed}.{signature}");
        let picked = jwt::untrusted_issuer(&token);
        for (i, issuer) in f.issuers.iter().enumerate() {
            match issuer.authenticate(&token, &f.keys, f.now) {
                Ok(accepted) => {
                    check_identity(i, &accepted.identity);
                    assert!(accepted.expires > f.now);
                    // (`None` for a payload `untrusted_issuer` cannot read, e.g. with `iss`
                    // twice: such a token is not routed to an issuer at all.)
                    if let Some(picked) = &picked {
                        assert_eq!(picked, &issuer.issuer, "routed to another issuer");
                    }
                    let claims: Map<String, Value> =
                        serde_json::from_slice(payload).expect("accepted claims are JSON");
                    assert_eq!(issuer.map(&claims).as_ref(), Ok(&accepted.identity));
                }
                Err(MappingError::Token(TokenError::Signature)) => {
                    // Only a header naming another key than the one that signed.
                }
                Err(_) => {}
            }
        }
        return;
    }

    // A signature that does not verify: nothing may be accepted.
    let token = format!("{signed}.c2lnbmF0dXJl");
    let _ = jwt::untrusted_issuer(&token);
    for issuer in &f.issuers {
        let verified = jwt::verify(&token, &f.keys, &issuer.issuer, &issuer.audiences, f.now);
        assert!(verified.is_err(), "a token accepted with a wrong signature");
    }
    // The claims as they would be after a valid signature.
    let Ok(claims) = serde_json::from_slice::<Map<String, Value>>(payload) else {
        return;
    };
    for (i, issuer) in f.issuers.iter().enumerate() {
        if let Ok(identity) = issuer.map(&claims) {
            check_identity(i, &identity);
        }
    }
});
