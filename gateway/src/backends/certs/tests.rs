use rcgen::{
    CertificateParams, DnType, ExtendedKeyUsagePurpose, KeyPair, KeyUsagePurpose, SigningKey,
};

use super::*;

const CERT: &str = "/etc/apiagg/proxy.crt";
const KEY: &str = "/etc/apiagg/proxy.key";

/// A self-signed leaf for `purpose`, valid from `from` to `until` (years): (cert DER, key).
fn leaf(eku: ExtendedKeyUsagePurpose, from: i32, until: i32) -> (Vec<u8>, KeyPair) {
    let mut params = CertificateParams::new(vec!["proxy".to_string()]).expect("params");
    params.distinguished_name.push(DnType::CommonName, "proxy");
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![eku];
    params.not_before = rcgen::date_time_ymd(from, 1, 1);
    params.not_after = rcgen::date_time_ymd(until, 1, 1);
    let key = KeyPair::generate().expect("key");
    let cert = params.self_signed(&key).expect("cert");
    (cert.der().to_vec(), key)
}

fn client_leaf() -> (Vec<u8>, KeyPair) {
    leaf(ExtendedKeyUsagePurpose::ClientAuth, 2020, 4000)
}

fn pem(label: &str, der: &[u8]) -> Vec<u8> {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let lines: Vec<&str> = b64
        .as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).expect("base64"))
        .collect();
    format!(
        "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
        lines.join("\n")
    )
    .into_bytes()
}

fn check(cert: &[u8], key: &KeyPair, purpose: Purpose) -> Result<CheckedPair, CertError> {
    check_pair(cert, key.serialize_pem().as_bytes(), (CERT, KEY), purpose)
}

/// The message, asserted to name the certificate file once and to hold `cause` once.
fn said_once(err: CertError, file: &str, cause: &str) -> String {
    let message = err.to_string();
    assert_eq!(message.matches(cause).count(), 1, "{message}");
    assert!(message.starts_with(file), "{message}");
    assert!(!message.contains("does not belong"), "{message}");
    message
}

/// DER helpers: a TLV's header length and content length.
fn tlv(input: &[u8]) -> (usize, usize) {
    if input[1] < 0x80 {
        return (2, input[1] as usize);
    }
    let n = (input[1] & 0x7f) as usize;
    let len = input[2..2 + n]
        .iter()
        .fold(0, |a, b| (a << 8) | *b as usize);
    (2 + n, len)
}

fn der(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(content);
    out
}

/// `cert` made X.509 v1 (no version field, no extensions), signed again with `key`: rcgen only
/// issues v3, and a v1 certificate is what old CAs and `openssl x509 -req` without extensions
/// still produce.
fn as_v1(cert: &[u8], key: &KeyPair) -> Vec<u8> {
    let (h, len) = tlv(cert);
    let body = &cert[h..h + len];
    let (th, tlen) = tlv(body);
    let tbs = &body[th..th + tlen];
    let algorithm = &body[th + tlen..];
    let (ah, alen) = tlv(algorithm);
    let algorithm = &algorithm[..ah + alen];
    let mut fields = Vec::new();
    let mut rest = tbs;
    while !rest.is_empty() {
        let (fh, flen) = tlv(rest);
        let (field, tail) = rest.split_at(fh + flen);
        // [0] version and [3] extensions are what v1 lacks.
        if field[0] != 0xa0 && field[0] != 0xa3 {
            fields.extend_from_slice(field);
        }
        rest = tail;
    }
    let tbs = der(0x30, &fields);
    let signature = key.sign(&tbs).expect("sign");
    let bits = der(0x03, &[&[0u8][..], &signature].concat());
    der(0x30, &[tbs, algorithm.to_vec(), bits].concat())
}

#[test]
fn a_good_pair_passes() {
    let (cert, key) = client_leaf();
    let pair = check(&pem("CERTIFICATE", &cert), &key, Purpose::ClientAuth).expect("good");
    assert_eq!(pair.chain.len(), 1);
}

#[test]
fn a_v1_certificate_is_named_as_such() {
    let (cert, key) = client_leaf();
    let v1 = as_v1(&cert, &key);
    let err = check(&pem("CERTIFICATE", &v1), &key, Purpose::ClientAuth).expect_err("v1");
    assert!(
        matches!(err, CertError::Version { version: 1, .. }),
        "{err:?}"
    );
    said_once(
        err,
        CERT,
        "X.509 v1 certificates are not supported; issue a v3 certificate",
    );
}

#[test]
fn validity_is_checked_with_the_dates() {
    let (cert, key) = leaf(ExtendedKeyUsagePurpose::ClientAuth, 2001, 2002);
    let err = check(&pem("CERTIFICATE", &cert), &key, Purpose::ClientAuth).expect_err("old");
    let message = said_once(err, CERT, "expired on");
    assert!(
        message.contains("2002") && message.contains("2001"),
        "{message}"
    );
    let (cert, key) = leaf(ExtendedKeyUsagePurpose::ClientAuth, 3999, 4000);
    let err = check(&pem("CERTIFICATE", &cert), &key, Purpose::ClientAuth).expect_err("early");
    let message = said_once(err, CERT, "is not valid before");
    assert!(message.contains("3999"), "{message}");
}

#[test]
fn a_certificate_for_the_other_end_is_refused() {
    let (cert, key) = leaf(ExtendedKeyUsagePurpose::ServerAuth, 2020, 4000);
    let err = check(&pem("CERTIFICATE", &cert), &key, Purpose::ClientAuth).expect_err("eku");
    let message = said_once(
        err,
        CERT,
        "does not allow client authentication (clientAuth)",
    );
    assert!(message.contains("it allows: serverAuth"), "{message}");
    assert!(check(&pem("CERTIFICATE", &cert), &key, Purpose::ServerAuth).is_ok());
}

#[test]
fn another_certificates_key_is_refused() {
    let (cert, _) = client_leaf();
    let (_, other) = client_leaf();
    let err = check(&pem("CERTIFICATE", &cert), &other, Purpose::ClientAuth).expect_err("key");
    assert!(matches!(err, CertError::KeyMismatch { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!("{KEY} is not the private key of the certificate in {CERT}")
    );
}

#[test]
fn files_that_are_not_pem_or_hold_encrypted_keys_say_so() {
    let (cert, key) = client_leaf();
    let err = check(&cert, &key, Purpose::ClientAuth).expect_err("DER");
    said_once(err, CERT, "not PEM");
    let good = pem("CERTIFICATE", &cert);
    let key_der = key.serialize_der();
    let err = check_pair(&good, &key_der, (CERT, KEY), Purpose::ClientAuth).expect_err("DER key");
    said_once(err, KEY, "not PEM");
    let encrypted = pem("ENCRYPTED PRIVATE KEY", &key_der);
    let err = check_pair(&good, &encrypted, (CERT, KEY), Purpose::ClientAuth).expect_err("enc");
    assert!(matches!(err, CertError::EncryptedKey { .. }), "{err:?}");
    said_once(err, KEY, "the private key is encrypted");
    let err = check_pair(&good, &good, (CERT, KEY), Purpose::ClientAuth).expect_err("no key");
    said_once(err, KEY, "no private key");
}

#[test]
fn the_earliest_not_after_is_extracted_in_unix_seconds() {
    let (later, _) = leaf(ExtendedKeyUsagePurpose::ServerAuth, 2020, 2040);
    let (earlier, _) = leaf(ExtendedKeyUsagePurpose::ServerAuth, 2020, 2030);
    let (far, _) = client_leaf();
    let chain = [later.clone(), earlier.clone()].map(CertificateDer::from);
    // 2030-01-01T00:00:00Z and 2040-01-01T00:00:00Z.
    assert_eq!(earliest_not_after(&chain), Some(1_893_456_000));
    assert_eq!(
        earliest_not_after(&[CertificateDer::from(later.clone())]),
        Some(2_208_988_800)
    );
    // A date past 2049 is a GeneralizedTime: 4000-01-01T00:00:00Z.
    assert_eq!(
        earliest_not_after(&[CertificateDer::from(far)]),
        Some(64_060_588_800)
    );
    assert_eq!(earliest_not_after(&[]), None);
    // A bundle: every certificate counts, garbage is left out.
    let mut bundle = pem("CERTIFICATE", &later);
    bundle.extend(pem("CERTIFICATE", &earlier));
    assert_eq!(bundle_not_after(&bundle), Some(1_893_456_000));
    assert_eq!(bundle_not_after(b"not a bundle"), None);
    let junk = pem("CERTIFICATE", b"junk");
    assert_eq!(bundle_not_after(&junk), None);
}
