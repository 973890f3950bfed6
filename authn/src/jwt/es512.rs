//! ES512 (ECDSA on P-521 with SHA-512), which kube-apiserver accepts and `jsonwebtoken` does
//! not verify: the key is read from its JWK and the signature checked by RustCrypto's `p521`,
//! the same family of crates `jsonwebtoken` verifies ES256 and ES384 with.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use p521::ecdsa::signature::Verifier;
use p521::ecdsa::{Signature, VerifyingKey};
use serde_json::Value;

/// Bytes of one P-521 coordinate.
const COORDINATE: usize = 66;

/// A P-521 verification key.
pub(super) struct Key(VerifyingKey);

/// The key of a JWK when it is a P-521 signing key (`kty` EC, `crv` P-521, no `use` other than
/// `sig`, no `alg` other than ES512); `None` for any other JWK.
pub(super) fn key(jwk: &Value) -> Option<Key> {
    let text = |name: &str| jwk.get(name).and_then(Value::as_str);
    if text("kty") != Some("EC") || text("crv") != Some("P-521") {
        return None;
    }
    if text("use").is_some_and(|u| u != "sig") || text("alg").is_some_and(|a| a != "ES512") {
        return None;
    }
    let coordinate = |name| {
        let bytes = URL_SAFE_NO_PAD.decode(text(name)?).ok()?;
        (bytes.len() == COORDINATE).then_some(bytes)
    };
    let mut point = vec![0x04];
    point.extend(coordinate("x")?);
    point.extend(coordinate("y")?);
    VerifyingKey::from_sec1_bytes(&point).ok().map(Key)
}

/// Whether `signature` (base64url, r ‖ s) signs `message` with `key`.
pub(super) fn verify(key: &Key, message: &[u8], signature: &str) -> bool {
    let Ok(bytes) = URL_SAFE_NO_PAD.decode(signature) else {
        return false;
    };
    let Ok(signature) = Signature::from_slice(&bytes) else {
        return false;
    };
    key.0.verify(message, &signature).is_ok()
}
