//! The test's signing keys and JWTs: keys made here (P-256 by rcgen, RSA by `openssl`), their
//! public and private JWKs, tokens signed with them, and tokens read back.

use std::process::Command;

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use serde_json::{json, Value};

/// A JWS algorithm the provider signs access tokens with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alg {
    /// RSASSA-PKCS1-v1_5 with SHA-256 (2048-bit RSA key).
    Rs256,
    /// RSASSA-PSS with SHA-256 (2048-bit RSA key).
    Ps256,
    /// ECDSA P-256 with SHA-256.
    Es256,
}

impl Alg {
    /// The JOSE name (`RS256`, `PS256`, `ES256`).
    pub fn name(self) -> &'static str {
        match self {
            Alg::Rs256 => "RS256",
            Alg::Ps256 => "PS256",
            Alg::Es256 => "ES256",
        }
    }
}

/// A signing key of the provider: a private key with its `kid` and `alg`, as a JWK.
#[derive(Clone)]
pub struct SigningKey {
    /// Its key ID, the `kid` of the JWK and of the tokens it signs.
    pub kid: String,
    /// The algorithm it signs with.
    pub alg: Alg,
    /// The private key, PKCS#8 DER.
    pkcs8: Vec<u8>,
    /// The public JWK members of the key type (`crv`, `x`, `y` or `n`, `e`).
    public: Value,
    /// The private JWK members (`d`, and `p`, `q`, `dp`, `dq`, `qi` for RSA).
    private: Value,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SigningKey({} {})", self.kid, self.alg.name())
    }
}

impl SigningKey {
    /// A fresh key for `alg` named `kid`: P-256 from rcgen, RSA (2048 bits) from the `openssl`
    /// command (rcgen on ring cannot generate RSA keys).
    pub fn generate(alg: Alg, kid: &str) -> SigningKey {
        let (pkcs8, public, private) = match alg {
            Alg::Es256 => {
                let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
                    .expect("generate a P-256 key");
                let point = key.public_key_raw();
                assert_eq!(point.len(), 65, "uncompressed P-256 point");
                let pkcs8 = key.serialize_der();
                let private = json!({"d": b64(ec_private_scalar(&pkcs8))});
                let public = json!({"kty": "EC", "crv": "P-256", "x": b64(&point[1..33]), "y": b64(&point[33..])});
                (pkcs8, public, private)
            }
            Alg::Rs256 | Alg::Ps256 => {
                // PEM PKCS#8 (its DER output is PKCS#1).
                let out = Command::new("openssl")
                    .args(["genpkey", "-quiet", "-algorithm", "RSA"])
                    .args(["-pkeyopt", "rsa_keygen_bits:2048"])
                    .output()
                    .expect("run openssl genpkey (Debian's openssl)");
                let stderr = String::from_utf8_lossy(&out.stderr);
                assert!(out.status.success(), "openssl genpkey failed: {stderr}");
                let pem = String::from_utf8_lossy(&out.stdout);
                assert!(
                    pem.starts_with("-----BEGIN PRIVATE KEY-----"),
                    "PKCS#8: {pem}"
                );
                let base64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
                let pkcs8 = STANDARD.decode(base64).expect("PEM base64");
                let [n, e, d, p, q, dp, dq, qi] = rsa_private_integers(&pkcs8);
                let public = json!({"kty": "RSA", "n": b64(n), "e": b64(e)});
                let private = json!({"d": b64(d), "p": b64(p), "q": b64(q), "dp": b64(dp), "dq": b64(dq), "qi": b64(qi)});
                (pkcs8, public, private)
            }
        };
        SigningKey {
            kid: kid.to_string(),
            alg,
            pkcs8,
            public,
            private,
        }
    }

    /// The public JWK, as the provider publishes it: `kty`, `kid`, `alg`, `use: sig` and the
    /// public members.
    pub fn public_jwk(&self) -> Value {
        let mut jwk = self.public.clone();
        jwk["kid"] = json!(self.kid);
        jwk["alg"] = json!(self.alg.name());
        jwk["use"] = json!("sig");
        jwk
    }

    /// The private JWK the provider is given.
    pub fn private_jwk(&self) -> Value {
        let mut jwk = self.public_jwk();
        for (name, value) in self.private.as_object().expect("private members") {
            jwk[name] = value.clone();
        }
        jwk
    }

    /// The private key, PKCS#8 DER.
    pub fn pkcs8_der(&self) -> &[u8] {
        &self.pkcs8
    }

    /// A JWT with these claims signed by this key, header `{"alg", "kid", "typ": "JWT"}`: a
    /// token the provider would not issue (expired, another `iss`, a key it does not publish).
    pub fn sign_jwt(&self, claims: &Value) -> String {
        let header = json!({"alg": self.alg.name(), "kid": self.kid, "typ": "JWT"});
        let input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let rng = ring::rand::SystemRandom::new();
        let signature = match self.alg {
            Alg::Es256 => {
                let alg = &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING;
                let key = ring::signature::EcdsaKeyPair::from_pkcs8(alg, &self.pkcs8, &rng)
                    .expect("P-256 PKCS#8");
                key.sign(&rng, input.as_bytes())
                    .expect("ECDSA signature")
                    .as_ref()
                    .to_vec()
            }
            Alg::Rs256 | Alg::Ps256 => {
                let key = ring::signature::RsaKeyPair::from_pkcs8(&self.pkcs8).expect("RSA PKCS#8");
                let padding: &dyn ring::signature::RsaEncoding = if self.alg == Alg::Rs256 {
                    &ring::signature::RSA_PKCS1_SHA256
                } else {
                    &ring::signature::RSA_PSS_SHA256
                };
                let mut signature = vec![0; key.public().modulus_len()];
                key.sign(padding, &rng, input.as_bytes(), &mut signature)
                    .expect("RSA signature");
                signature
            }
        };
        format!("{input}.{}", b64(&signature))
    }
}

/// The header and payload of a JWT (compact JWS), unverified.
pub fn decode_jwt(token: &str) -> (Value, Value) {
    let mut parts = token.split('.');
    let mut part = |what: &str| -> Value {
        let text = parts
            .next()
            .unwrap_or_else(|| panic!("JWT without {what}: {token}"));
        let bytes = URL_SAFE_NO_PAD
            .decode(text)
            .unwrap_or_else(|e| panic!("JWT {what} not base64url ({e}): {token}"));
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("JWT {what} not JSON ({e}): {token}"))
    };
    let header = part("header");
    let payload = part("payload");
    (header, payload)
}

/// The payload of `token` when a key of `jwks` (`{"keys": [...]}`, public JWKs) with the
/// header's `kid` verifies its signature with the header's `alg` (RS256, PS256, ES256); why not
/// otherwise. Claims are not checked.
pub fn verify_jwt(token: &str, jwks: &Value) -> Result<Value, String> {
    use ring::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey};
    let (header, payload) = decode_jwt(token);
    let (input, signature) = token.rsplit_once('.').ok_or("not a JWS")?;
    let signature = URL_SAFE_NO_PAD
        .decode(signature)
        .map_err(|e| e.to_string())?;
    let kid = header["kid"].as_str().ok_or("no kid")?;
    let alg = header["alg"].as_str().ok_or("no alg")?;
    let keys = jwks["keys"].as_array().ok_or("no keys")?;
    let jwk = keys
        .iter()
        .find(|k| k["kid"] == kid)
        .ok_or_else(|| format!("no key {kid}"))?;
    if jwk.get("alg").is_some_and(|a| a != alg) {
        return Err(format!(
            "key {kid} is for {}, the token says {alg}",
            jwk["alg"]
        ));
    }
    let member = |name: &str| -> Result<Vec<u8>, String> {
        let text = jwk[name]
            .as_str()
            .ok_or_else(|| format!("key {kid} has no {name}"))?;
        URL_SAFE_NO_PAD.decode(text).map_err(|e| e.to_string())
    };
    let verified = match alg {
        "ES256" => {
            let point = [vec![4], member("x")?, member("y")?].concat();
            UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point)
                .verify(input.as_bytes(), &signature)
        }
        "RS256" | "PS256" => {
            let params = if alg == "RS256" {
                &signature::RSA_PKCS1_2048_8192_SHA256
            } else {
                &signature::RSA_PSS_2048_8192_SHA256
            };
            let (n, e) = (member("n")?, member("e")?);
            RsaPublicKeyComponents { n, e }.verify(params, input.as_bytes(), &signature)
        }
        other => return Err(format!("alg {other} not supported here")),
    };
    verified.map_err(|_| format!("bad signature for key {kid} ({alg})"))?;
    Ok(payload)
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// (tag, content, rest) of the first DER element of `input`.
fn der_next(input: &[u8]) -> (u8, &[u8], &[u8]) {
    let (tag, first) = (input[0], input[1]);
    let (header, len) = if first < 0x80 {
        (2, first as usize)
    } else {
        let count = (first & 0x7f) as usize;
        let len = input[2..2 + count]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | *b as usize);
        (2 + count, len)
    };
    (tag, &input[header..header + len], &input[header + len..])
}

/// The `privateKey` OCTET STRING of a P-256 PKCS#8 key (`PrivateKeyInfo` around RFC 5915's
/// `ECPrivateKey`).
fn ec_private_scalar(pkcs8: &[u8]) -> &[u8] {
    let (_, info, _) = der_next(pkcs8);
    let (_, _version, rest) = der_next(info);
    let (_, _algorithm, rest) = der_next(rest);
    let (tag, private_key, _) = der_next(rest);
    assert_eq!(tag, 0x04, "PKCS#8 privateKey");
    let (_, ec_private_key, _) = der_next(private_key);
    let (_, _version, rest) = der_next(ec_private_key);
    let (tag, d, _) = der_next(rest);
    assert_eq!((tag, d.len()), (0x04, 32), "ECPrivateKey privateKey");
    d
}

/// n, e, d, p, q, dp, dq, qi of an RSA PKCS#8 key (`PrivateKeyInfo` around RFC 8017's
/// `RSAPrivateKey`), unsigned big-endian without leading zeros.
fn rsa_private_integers(pkcs8: &[u8]) -> [&[u8]; 8] {
    let (_, info, _) = der_next(pkcs8);
    let (_, _version, rest) = der_next(info);
    let (_, _algorithm, rest) = der_next(rest);
    let (tag, private_key, _) = der_next(rest);
    assert_eq!(tag, 0x04, "PKCS#8 privateKey");
    let (_, rsa, _) = der_next(private_key);
    let (_, _version, mut rest) = der_next(rsa);
    let mut integers = [&[][..]; 8];
    for integer in &mut integers {
        let (tag, value, tail) = der_next(rest);
        assert_eq!(tag, 0x02, "RSAPrivateKey INTEGER");
        let zeros = value.iter().take_while(|b| **b == 0).count();
        *integer = &value[zeros..];
        rest = tail;
    }
    integers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sign_what_their_public_jwk_verifies() {
        for alg in [Alg::Es256, Alg::Rs256, Alg::Ps256] {
            let key = SigningKey::generate(alg, "k");
            let other = SigningKey::generate(alg, "k");
            let token = key.sign_jwt(&json!({"sub": "alice"}));
            let jwks = json!({"keys": [key.public_jwk()]});
            let payload = verify_jwt(&token, &jwks).expect("verifies");
            assert_eq!(payload["sub"], "alice");
            let (header, _) = decode_jwt(&token);
            assert_eq!(
                (header["alg"].as_str(), header["kid"].as_str()),
                (Some(alg.name()), Some("k"))
            );
            let wrong = json!({"keys": [other.public_jwk()]});
            assert!(
                verify_jwt(&token, &wrong).is_err(),
                "{alg:?}: another key verifies"
            );
            // Private JWKs hold the private members, public ones none.
            let private = key.private_jwk();
            assert!(private.get("d").is_some() && key.public_jwk().get("d").is_none());
        }
    }
}
