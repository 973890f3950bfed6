//! JWT validation as kube-apiserver's OIDC authenticator does it: compact JWS only, a signature
//! by one of the issuer's published keys with an asymmetric algorithm upstream accepts (RS, PS
//! and ES, 256 to 512; `none`, HMAC and EdDSA never), `iss` equal to the issuer URL, `aud` containing an accepted
//! audience, `exp` in the future (no leeway) and `nbf` no more than five minutes ahead. The
//! signature is checked by `jsonwebtoken`; this module only chooses the key and reads claims.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde::Deserialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The longest token read, in bytes (larger ones are refused before any decoding).
pub const MAX_TOKEN: usize = 32 * 1024;
/// The largest JWKS document read, in bytes.
pub const MAX_JWKS: usize = 512 * 1024;
/// The most keys one issuer may publish.
pub const MAX_KEYS: usize = 100;
/// How far ahead of the clock `nbf` may be (go-oidc's leeway for clock skew).
pub const NBF_LEEWAY: Duration = Duration::from_secs(300);

mod es512;

/// The algorithms `jsonwebtoken` verifies of kube-apiserver's `allowedSigningAlgs`; the last,
/// ES512, is verified by [`es512`].
const ACCEPTED: [Algorithm; 8] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
];

/// Why a token is refused (for the log and the metrics; callers get a bare 401).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not three base64url parts with JSON header and payload. Not retryable.
    #[error("malformed token: {0}")]
    Malformed(&'static str),
    /// Longer than [`MAX_TOKEN`]. Not retryable.
    #[error("token is larger than {MAX_TOKEN} bytes")]
    TooLarge,
    /// `alg` is `none`, HMAC, or another algorithm not accepted. Not retryable.
    #[error("unsupported signing algorithm {0:?}")]
    Algorithm(String),
    /// No published key has this `kid` (or fits the algorithm). Retryable once the keys are
    /// fetched again (a rotation at the issuer).
    #[error("no published key for kid {kid:?} and {alg}")]
    UnknownKey {
        /// The token's `kid` (empty when none).
        kid: String,
        /// The token's `alg`.
        alg: String,
    },
    /// The signature does not verify. Not retryable.
    #[error("signature does not verify")]
    Signature,
    /// `iss` is not the issuer. Not retryable.
    #[error("token issuer {0:?} is not the configured issuer")]
    Issuer(String),
    /// No accepted audience in `aud`. Not retryable.
    #[error("token audiences {0:?} are not accepted")]
    Audience(Vec<String>),
    /// `exp` is missing or past. Not retryable.
    #[error("token is expired or has no expiry")]
    Expired,
    /// `nbf` is more than five minutes ahead. Retryable later.
    #[error("token is not valid yet")]
    NotYetValid,
}

/// One verification key.
struct Key {
    kid: Option<String>,
    /// Which key this is, whatever its `kid`.
    id: KeyId,
    verifier: Verifier,
}

/// Which published key verified a token: the SHA-256 of its JWK as the issuer published it. A
/// key replaced under the same `kid`, or a token that names no `kid`, is told apart by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyId([u8; 32]);

impl KeyId {
    fn of(jwk: &Value) -> KeyId {
        KeyId(Sha256::digest(jwk.to_string().as_bytes()).into())
    }
}

/// What checks a signature.
enum Verifier {
    /// A key `jsonwebtoken` verifies with, and the algorithms it may verify.
    Jose {
        algorithms: &'static [Algorithm],
        decoding: DecodingKey,
    },
    /// A P-521 key (ES512).
    Es512(es512::Key),
}

/// A signing algorithm accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Alg {
    Jose(Algorithm),
    Es512,
}

impl Verifier {
    fn verifies(&self, alg: Alg) -> bool {
        match (self, alg) {
            (Verifier::Jose { algorithms, .. }, Alg::Jose(a)) => algorithms.contains(&a),
            (Verifier::Es512(_), Alg::Es512) => true,
            _ => false,
        }
    }

    fn check(&self, alg: Alg, message: &[u8], signature: &str) -> bool {
        match (self, alg) {
            (Verifier::Jose { decoding, .. }, Alg::Jose(a)) => {
                jsonwebtoken::crypto::verify(signature, message, decoding, a).unwrap_or(false)
            }
            (Verifier::Es512(key), Alg::Es512) => es512::verify(key, message, signature),
            _ => false,
        }
    }
}

/// An issuer's published keys, parsed and bounded.
pub struct KeySet {
    keys: Vec<Key>,
    /// SHA-256 of the document, for the `jwks_fetch_last_keyset_hash` metric.
    hash: [u8; 32],
    /// Keys left out (symmetric, unsupported curve, encryption-only), for the log.
    skipped: usize,
}

/// Why a JWKS document is unusable. Retryable: the next fetch may get a good one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeySetError {
    /// Larger than [`MAX_JWKS`].
    #[error("key set is larger than {MAX_JWKS} bytes")]
    TooLarge,
    /// Not a JWKS.
    #[error("key set is not a JWKS document: {0}")]
    Invalid(String),
    /// More than [`MAX_KEYS`] keys.
    #[error("key set has {0} keys, more than {MAX_KEYS}")]
    TooMany(usize),
    /// No key apiagg can verify with.
    #[error("key set has no usable signing key ({0} left out: symmetric, unsupported or for encryption)")]
    NoKeys(usize),
}

#[derive(Deserialize)]
struct Document {
    keys: Vec<Value>,
}

impl KeySet {
    /// Parses a JWKS document. Keys that cannot verify tokens here are left out, never an
    /// error on their own (providers publish encryption keys beside signing ones).
    pub fn parse(bytes: &[u8]) -> Result<KeySet, KeySetError> {
        if bytes.len() > MAX_JWKS {
            return Err(KeySetError::TooLarge);
        }
        let document: Document =
            serde_json::from_slice(bytes).map_err(|e| KeySetError::Invalid(e.to_string()))?;
        if document.keys.len() > MAX_KEYS {
            return Err(KeySetError::TooMany(document.keys.len()));
        }
        let mut keys = Vec::new();
        let mut skipped = 0;
        for value in document.keys {
            let id = KeyId::of(&value);
            let p521 = es512::key(&value).map(|key| Key {
                kid: value.get("kid").and_then(Value::as_str).map(str::to_string),
                id,
                verifier: Verifier::Es512(key),
            });
            let found = p521.or_else(|| {
                serde_json::from_value::<Jwk>(value)
                    .ok()
                    .and_then(|jwk| key(&jwk, id))
            });
            match found {
                Some(key) => keys.push(key),
                None => skipped += 1,
            }
        }
        if keys.is_empty() {
            return Err(KeySetError::NoKeys(skipped));
        }
        Ok(KeySet {
            keys,
            hash: Sha256::digest(bytes).into(),
            skipped,
        })
    }

    /// SHA-256 of the document.
    pub fn hash(&self) -> [u8; 32] {
        self.hash
    }

    /// How many keys are usable, and how many were left out.
    pub fn counts(&self) -> (usize, usize) {
        (self.keys.len(), self.skipped)
    }

    /// Whether a key with this `kid` is published.
    pub fn has_kid(&self, kid: &str) -> bool {
        self.keys.iter().any(|k| k.kid.as_deref() == Some(kid))
    }

    /// Whether the key `id` is still published, unchanged (a token it verified still holds).
    pub fn holds(&self, id: &KeyId) -> bool {
        self.keys.iter().any(|k| k.id == *id)
    }
}

/// The verification key of `jwk` (known as `id`), when it is an asymmetric signing key apiagg
/// verifies with.
fn key(jwk: &Jwk, id: KeyId) -> Option<Key> {
    if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
        return None;
    }
    let algorithms: &'static [Algorithm] = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => &ACCEPTED[..6],
        AlgorithmParameters::EllipticCurve(ec) => match ec.curve {
            EllipticCurve::P256 => &[Algorithm::ES256],
            EllipticCurve::P384 => &[Algorithm::ES384],
            _ => return None,
        },
        // Symmetric keys would let anyone who read the key set sign; Ed25519 upstream refuses.
        _ => return None,
    };
    // A key that names its algorithm verifies only that one.
    let algorithms = match jwk.common.key_algorithm {
        None => algorithms,
        Some(named) => {
            let named = algorithm_of(named)?;
            let one = ACCEPTED.iter().position(|a| *a == named)?;
            if !algorithms.contains(&named) {
                return None;
            }
            &ACCEPTED[one..=one]
        }
    };
    Some(Key {
        kid: jwk.common.key_id.clone(),
        id,
        verifier: Verifier::Jose {
            algorithms,
            decoding: DecodingKey::from_jwk(jwk).ok()?,
        },
    })
}

fn algorithm_of(named: KeyAlgorithm) -> Option<Algorithm> {
    Some(match named {
        KeyAlgorithm::RS256 => Algorithm::RS256,
        KeyAlgorithm::RS384 => Algorithm::RS384,
        KeyAlgorithm::RS512 => Algorithm::RS512,
        KeyAlgorithm::PS256 => Algorithm::PS256,
        KeyAlgorithm::PS384 => Algorithm::PS384,
        KeyAlgorithm::PS512 => Algorithm::PS512,
        KeyAlgorithm::ES256 => Algorithm::ES256,
        KeyAlgorithm::ES384 => Algorithm::ES384,
        _ => return None,
    })
}

/// The `iss` of a token, read without verifying anything: only to pick the issuer that will
/// verify it (kube-apiserver's `untrustedIssuer`). `None` for anything that is not a JWT.
pub fn untrusted_issuer(token: &str) -> Option<String> {
    if token.len() > MAX_TOKEN {
        return None;
    }
    let mut parts = token.split('.');
    let (_, payload, _, None) = (parts.next()?, parts.next()?, parts.next()?, parts.next()) else {
        return None;
    };
    #[derive(Deserialize)]
    struct Iss {
        iss: String,
    }
    let bytes = URL_SAFE_NO_PAD.decode(payload).ok()?;
    let iss = serde_json::from_slice::<Iss>(&bytes).ok()?.iss;
    // Google's legacy issuer, coalesced as upstream does.
    Some(if iss == "accounts.google.com" {
        "https://accounts.google.com".to_string()
    } else {
        iss
    })
}

/// A verified token's payload, and when it expires.
#[derive(Debug, Clone, PartialEq)]
pub struct Verified {
    /// Every claim.
    pub claims: Map<String, Value>,
    /// `exp`.
    pub expires: SystemTime,
    /// The `kid` of the header (`None` when the token names none).
    pub kid: Option<String>,
    /// The key that verified the signature.
    pub key: KeyId,
}

#[derive(Deserialize)]
struct Header {
    alg: String,
    #[serde(default)]
    kid: Option<String>,
}

/// Verifies `token` against `keys`, for `issuer` and any of `audiences`, at `now`.
pub fn verify(
    token: &str,
    keys: &KeySet,
    issuer: &str,
    audiences: &[String],
    now: SystemTime,
) -> Result<Verified, TokenError> {
    if token.len() > MAX_TOKEN {
        return Err(TokenError::TooLarge);
    }
    let (signed, signature) = token
        .rsplit_once('.')
        .ok_or(TokenError::Malformed("not three parts"))?;
    let (header, payload) = signed
        .split_once('.')
        .ok_or(TokenError::Malformed("not three parts"))?;
    if payload.contains('.') || signature.is_empty() {
        return Err(TokenError::Malformed("not three parts"));
    }
    let header: Header = decode_json(header).ok_or(TokenError::Malformed("header"))?;
    let kid = header.kid.clone();
    let algorithm = match header.alg.as_str() {
        "ES512" => Alg::Es512,
        other => other
            .parse::<Algorithm>()
            .ok()
            .filter(|a| ACCEPTED.contains(a))
            .map(Alg::Jose)
            .ok_or_else(|| TokenError::Algorithm(header.alg.clone()))?,
    };
    let candidates = keys.keys.iter().filter(|k| {
        k.verifier.verifies(algorithm)
            && (header.kid.is_none() || k.kid.is_none() || k.kid == header.kid)
    });
    let mut tried = false;
    let mut verified = None;
    for key in candidates {
        tried = true;
        if key.verifier.check(algorithm, signed.as_bytes(), signature) {
            verified = Some(key.id);
            break;
        }
    }
    if !tried {
        return Err(TokenError::UnknownKey {
            kid: header.kid.unwrap_or_default(),
            alg: header.alg,
        });
    }
    let Some(key) = verified else {
        return Err(TokenError::Signature);
    };
    let claims: Map<String, Value> =
        decode_json(payload).ok_or(TokenError::Malformed("payload"))?;
    match claims.get("iss").and_then(Value::as_str) {
        Some(iss) if iss == issuer => {}
        other => return Err(TokenError::Issuer(other.unwrap_or("").to_string())),
    }
    let aud: Vec<String> = match claims.get("aud") {
        Some(Value::String(one)) => vec![one.clone()],
        Some(Value::Array(many)) => many
            .iter()
            .filter_map(|a| a.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    };
    if !aud.iter().any(|a| audiences.contains(a)) {
        return Err(TokenError::Audience(aud));
    }
    let expires = claims
        .get("exp")
        .and_then(seconds)
        .ok_or(TokenError::Expired)?;
    if expires <= now {
        return Err(TokenError::Expired);
    }
    if let Some(nbf) = claims.get("nbf").and_then(seconds) {
        if nbf > now + NBF_LEEWAY {
            return Err(TokenError::NotYetValid);
        }
    }
    Ok(Verified {
        claims,
        expires,
        kid,
        key,
    })
}

/// A NumericDate (seconds since the epoch, possibly fractional).
fn seconds(value: &Value) -> Option<SystemTime> {
    let secs = value.as_f64()?;
    (secs.is_finite() && (0.0..1e12).contains(&secs))
        .then(|| UNIX_EPOCH + Duration::from_secs_f64(secs))
}

fn decode_json<T: serde::de::DeserializeOwned>(part: &str) -> Option<T> {
    let bytes = URL_SAFE_NO_PAD.decode(part).ok()?;
    serde_json::from_slice(&bytes).ok()
}

#[cfg(test)]
pub(crate) mod tests;
