use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use super::*;

/// A CA named `name`: its certificate and what signs with it.
fn ca(name: &str) -> (CertificateDer<'static>, Issuer<'static, KeyPair>) {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    let key = KeyPair::generate().expect("key");
    let cert = params.self_signed(&key).expect("CA");
    (cert.der().clone(), Issuer::new(params, key))
}

/// A serving certificate for `names` signed by `issuer`, `edit`ed first.
fn serving(
    names: &[&str],
    issuer: &Issuer<'_, KeyPair>,
    edit: impl FnOnce(&mut CertificateParams),
) -> CertificateDer<'static> {
    let sans: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let mut params = CertificateParams::new(sans).expect("names");
    params.distinguished_name.push(DnType::CommonName, names[0]);
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    edit(&mut params);
    let key = KeyPair::generate().expect("key");
    params.signed_by(&key, issuer).expect("sign").der().clone()
}

/// What a client trusting `trusted` says of `leaf` presented for `host`: `None` when accepted.
fn verdict(
    trusted: &[&CertificateDer<'static>],
    leaf: &CertificateDer<'_>,
    host: &str,
) -> Option<String> {
    let mut roots = RootCertStore::empty();
    for ca in trusted {
        roots.add((*ca).clone()).expect("root");
    }
    let names = trusted.iter().map(|c| subject_of(c)).collect();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier =
        ExplainingVerifier::new(roots, Trusted::Bundle(names), provider).expect("verifier");
    let name = ServerName::try_from(host.to_string()).expect("name");
    let checked = verifier.verify_server_cert(leaf, &[], &name, &[], UnixTime::now());
    checked.err().map(|e| go_words(&e))
}

const SAMPLE: [&str; 3] = ["api.wardle.svc", "localhost", "127.0.0.1"];

#[test]
fn a_certificate_of_the_trusted_ca_for_the_name_asked_is_accepted() {
    let (root, issuer) = ca("serving-ca");
    let leaf = serving(&SAMPLE, &issuer, |_| {});
    assert_eq!(verdict(&[&root], &leaf, "api.wardle.svc"), None);
    assert_eq!(verdict(&[&root], &leaf, "127.0.0.1"), None);
}

#[test]
fn a_wrong_name_is_told_as_go_does_with_the_names_the_certificate_holds() {
    let (root, issuer) = ca("serving-ca");
    let leaf = serving(&SAMPLE, &issuer, |_| {});
    assert_eq!(
        verdict(&[&root], &leaf, "other.wardle.svc").as_deref(),
        Some("tls: failed to verify certificate: x509: certificate is valid for api.wardle.svc, localhost, not other.wardle.svc")
    );
    assert_eq!(
        verdict(&[&root], &leaf, "10.0.0.1").as_deref(),
        Some("tls: failed to verify certificate: x509: certificate is valid for 127.0.0.1, not 10.0.0.1")
    );
    let names_only = serving(&["api.wardle.svc"], &issuer, |_| {});
    assert_eq!(
        verdict(&[&root], &names_only, "10.0.0.1").as_deref(),
        Some("tls: failed to verify certificate: x509: cannot validate certificate for 10.0.0.1 because it doesn't contain any IP SANs")
    );
}

#[test]
fn an_unknown_authority_names_the_issuer_and_the_trusted_cas() {
    let (_, issuer) = ca("serving-ca");
    let (other, _) = ca("other-ca");
    let leaf = serving(&SAMPLE, &issuer, |_| {});
    assert_eq!(
        verdict(&[&other], &leaf, "api.wardle.svc").as_deref(),
        Some("tls: failed to verify certificate: x509: certificate signed by unknown authority (issued by \"CN=serving-ca\"; the trusted CA is \"CN=other-ca\")")
    );
    // A CA of the same name with another key (a CA made anew).
    let (renewed, _) = ca("serving-ca");
    let (third, _) = ca("third-ca");
    assert_eq!(
        verdict(&[&renewed, &third], &leaf, "api.wardle.svc").as_deref(),
        Some("tls: failed to verify certificate: x509: certificate signed by unknown authority (issued by \"CN=serving-ca\", the name of a trusted CA, but not with its key)")
    );
    let many: Vec<_> = (0..5).map(|i| ca(&format!("ca-{i}")).0).collect();
    let many: Vec<&CertificateDer<'static>> = many.iter().collect();
    let told = verdict(&many, &leaf, "api.wardle.svc").expect("refused");
    assert!(
        told.ends_with("the trusted CAs are \"CN=ca-0\", \"CN=ca-1\", \"CN=ca-2\", 2 more)"),
        "{told}"
    );
}

#[test]
fn a_wrong_name_is_told_before_an_unknown_authority_as_go_checks_it_first() {
    let (_, issuer) = ca("serving-ca");
    let (other, _) = ca("other-ca");
    let leaf = serving(&SAMPLE, &issuer, |_| {});
    let told = verdict(&[&other], &leaf, "other.wardle.svc").expect("refused");
    assert!(
        told.ends_with(
            "x509: certificate is valid for api.wardle.svc, localhost, not other.wardle.svc"
        ),
        "{told}"
    );
}

#[test]
fn an_expired_certificate_names_its_end_and_not_the_time_of_the_check() {
    let (root, issuer) = ca("serving-ca");
    let leaf = serving(&SAMPLE, &issuer, |p| {
        p.not_before = rcgen::date_time_ymd(2020, 1, 1);
        p.not_after = rcgen::date_time_ymd(2021, 1, 1);
    });
    // Expired and for another name: Go tells the period first, as here.
    for host in ["api.wardle.svc", "other.wardle.svc"] {
        assert_eq!(
            verdict(&[&root], &leaf, host).as_deref(),
            Some("tls: failed to verify certificate: x509: certificate has expired or is not yet valid: current time is after 2021-01-01T00:00:00Z")
        );
    }
    let early = serving(&SAMPLE, &issuer, |p| {
        p.not_before = rcgen::date_time_ymd(2999, 1, 1);
        p.not_after = rcgen::date_time_ymd(3000, 1, 1);
    });
    assert_eq!(
        verdict(&[&root], &early, "api.wardle.svc").as_deref(),
        Some("tls: failed to verify certificate: x509: certificate has expired or is not yet valid: current time is before 2999-01-01T00:00:00Z")
    );
}

#[test]
fn a_ca_certificate_served_as_the_servers_own_is_named() {
    let (root, _) = {
        let mut params =
            CertificateParams::new(vec!["api.wardle.svc".to_string()]).expect("params");
        params
            .distinguished_name
            .push(DnType::CommonName, "wardle-self");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let key = KeyPair::generate().expect("key");
        let cert = params.self_signed(&key).expect("self-signed");
        (cert.der().clone(), key)
    };
    assert_eq!(
        verdict(&[&root], &root, "api.wardle.svc").as_deref(),
        Some("tls: failed to verify certificate: x509: certificate \"CN=wardle-self\" is a CA certificate (basic constraints CA:TRUE), not accepted as a server's own")
    );
}

#[test]
fn a_certificate_without_names_whose_common_name_is_asked_for_relies_on_it() {
    let (root, issuer) = ca("serving-ca");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params
        .distinguished_name
        .push(DnType::CommonName, "api.wardle.svc");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate().expect("key");
    let leaf = params.signed_by(&key, &issuer).expect("sign").der().clone();
    assert_eq!(
        verdict(&[&root], &leaf, "api.wardle.svc").as_deref(),
        Some("tls: failed to verify certificate: x509: certificate relies on legacy Common Name field, use SANs instead")
    );
}
