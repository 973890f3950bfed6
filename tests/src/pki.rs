//! Test certificate authorities and the client and serving certificates they issue (rcgen).

use std::path::{Path, PathBuf};

use base64::Engine;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SigningKey,
};

/// A test certificate authority.
pub struct Ca {
    /// The CA certificate, PEM.
    pub cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl Ca {
    /// A fresh self-signed CA named `common_name`.
    pub fn new(common_name: &str) -> Ca {
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name = common_name_dn(common_name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).expect("self-signed CA");
        Ca {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A client certificate (clientAuth EKU) with subject CN and one O per group:
    /// (cert_pem, key_pem).
    pub fn client(&self, common_name: &str, organizations: &[&str]) -> (String, String) {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("client params");
        params.distinguished_name = common_name_dn(common_name);
        if let [organization] = organizations {
            params
                .distinguished_name
                .push(DnType::OrganizationName, *organization);
        }
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().expect("client key");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("sign client cert");
        let pem = if organizations.len() > 1 {
            // rcgen keeps one value per attribute type: the subject is rewritten and re-signed.
            let subject = subject_der(common_name, organizations);
            let der = resubject(cert.der(), &subject, self.issuer.key());
            pem_encode("CERTIFICATE", &der)
        } else {
            cert.pem()
        };
        (pem, key.serialize_pem())
    }

    /// An X.509 v1 client certificate (no version field, no extensions), as old CAs and
    /// `openssl x509 -req` without an extension file issue: (cert_pem, key_pem).
    pub fn client_v1(&self, common_name: &str) -> (String, String) {
        let (cert, key) = self.client(common_name, &[]);
        let v3 = pem_decode(&cert);
        let (certificate, _) = read_tlv(&v3);
        let (tbs, rest) = read_tlv(certificate);
        let (algorithm, _) = split_tlv(rest);
        let mut fields = Vec::new();
        let mut rest = tbs;
        while !rest.is_empty() {
            let (field, tail) = split_tlv(rest);
            // [0] version and [3] extensions are what v1 lacks.
            if field[0] != 0xa0 && field[0] != 0xa3 {
                fields.extend_from_slice(field);
            }
            rest = tail;
        }
        let tbs = der(0x30, &fields);
        let signature = self.issuer.key().sign(&tbs).expect("sign certificate");
        let bit_string = der(0x03, &[&[0u8][..], &signature].concat());
        let v1 = der(0x30, &[tbs, algorithm.to_vec(), bit_string].concat());
        (pem_encode("CERTIFICATE", &v1), key)
    }

    /// A serving certificate (serverAuth EKU) for DNS names / IPs (IP literals become IP SANs):
    /// (cert_pem, key_pem).
    pub fn server(&self, names: &[&str]) -> (String, String) {
        let params = server_params(names);
        let key = KeyPair::generate().expect("server key");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("sign server cert");
        (cert.pem(), key.serialize_pem())
    }

    /// [`Ca::server`] that expired: valid from 2020-01-01 to 2021-01-01 (00:00 UTC).
    pub fn expired_server(&self, names: &[&str]) -> (String, String) {
        let mut params = server_params(names);
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        let key = KeyPair::generate().expect("server key");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("sign server cert");
        (cert.pem(), key.serialize_pem())
    }

    /// Writes the CA cert to `dir/<name>.crt` and returns the path.
    pub fn write_ca(&self, dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(format!("{name}.crt"));
        std::fs::write(&path, &self.cert_pem).expect("write CA cert");
        path
    }
}

/// A self-signed CA certificate (basic constraints `CA:TRUE`) for `names`, to be served as a
/// server's own and trusted as its own CA: (cert_pem, key_pem). Go's `crypto/x509` accepts it,
/// webpki does not.
pub fn ca_as_server(names: &[&str]) -> (String, String) {
    let mut params = server_params(names);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages.push(KeyUsagePurpose::KeyCertSign);
    let key = KeyPair::generate().expect("key");
    let cert = params.self_signed(&key).expect("self-signed");
    (cert.pem(), key.serialize_pem())
}

/// What a serving certificate for `names` holds (IP literals become IP SANs).
fn server_params(names: &[&str]) -> CertificateParams {
    let sans: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let mut params = CertificateParams::new(sans).expect("server names");
    params.distinguished_name = common_name_dn(names.first().copied().unwrap_or("server"));
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params
}

/// Writes a (cert, key) pair to `dir/<name>.crt` and `dir/<name>.key`; returns both paths.
pub fn write_pair(dir: &Path, name: &str, pair: &(String, String)) -> (PathBuf, PathBuf) {
    let cert = dir.join(format!("{name}.crt"));
    let key = dir.join(format!("{name}.key"));
    std::fs::write(&cert, &pair.0).expect("write cert");
    std::fs::write(&key, &pair.1).expect("write key");
    (cert, key)
}

fn common_name_dn(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    dn
}

/// DER `Name`: one RDN for the CN, then one per O (UTF8String values).
fn subject_der(common_name: &str, organizations: &[&str]) -> Vec<u8> {
    const CN: [u8; 3] = [0x55, 0x04, 0x03];
    const O: [u8; 3] = [0x55, 0x04, 0x0a];
    let rdn = |oid: &[u8], value: &str| {
        let attribute = [der(0x06, oid), der(0x0c, value.as_bytes())].concat();
        der(0x31, &der(0x30, &attribute))
    };
    let mut rdns = rdn(&CN, common_name);
    for organization in organizations {
        rdns.extend(rdn(&O, organization));
    }
    der(0x30, &rdns)
}

/// `cert` with `subject` (DER) as its subject, signed again by `key` (same algorithm).
fn resubject(cert: &[u8], subject: &[u8], key: &KeyPair) -> Vec<u8> {
    let (certificate, _) = read_tlv(cert);
    let (tbs, rest) = read_tlv(certificate);
    let (algorithm, _) = split_tlv(rest);
    let mut fields = Vec::new();
    let mut rest = tbs;
    while !rest.is_empty() {
        let (field, tail) = split_tlv(rest);
        fields.push(field);
        rest = tail;
    }
    // TBSCertificate: [0] version, serial, signature, issuer, validity, subject, …
    let subject_index = if fields.first().map(|f| f[0]) == Some(0xa0) {
        5
    } else {
        4
    };
    let mut new_tbs = Vec::new();
    for (i, field) in fields.iter().enumerate() {
        new_tbs.extend_from_slice(if i == subject_index { subject } else { field });
    }
    let new_tbs = der(0x30, &new_tbs);
    let signature = key.sign(&new_tbs).expect("sign certificate");
    let bit_string = der(0x03, &[&[0u8][..], &signature].concat());
    der(0x30, &[new_tbs, algorithm.to_vec(), bit_string].concat())
}

/// A DER element: tag, definite length, content.
fn der(tag: u8, content: &[u8]) -> Vec<u8> {
    let len = content.len();
    let mut out = vec![tag];
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

/// Splits `input` into its first whole element and the rest.
fn split_tlv(input: &[u8]) -> (&[u8], &[u8]) {
    let (header, len) = header(input);
    input.split_at(header + len)
}

/// The content of the first element of `input`, and the rest.
fn read_tlv(input: &[u8]) -> (&[u8], &[u8]) {
    let (header, len) = header(input);
    (&input[header..header + len], &input[header + len..])
}

/// (header length, content length) of the element at the start of `input`.
fn header(input: &[u8]) -> (usize, usize) {
    let first = input[1];
    if first < 0x80 {
        return (2, first as usize);
    }
    let count = (first & 0x7f) as usize;
    let len = input[2..2 + count]
        .iter()
        .fold(0usize, |acc, b| (acc << 8) | *b as usize);
    (2 + count, len)
}

/// The DER of the first PEM block.
fn pem_decode(pem: &str) -> Vec<u8> {
    let b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD
        .decode(b64)
        .expect("base64")
}

/// PEM armour around DER.
fn pem_encode(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}
