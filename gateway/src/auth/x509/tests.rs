use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use super::*;
use crate::auth::user::{Field, Why};

/// A CA: its PEM and what signs with it.
fn ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let key = KeyPair::generate().expect("key");
    let cert = params.self_signed(&key).expect("CA");
    (cert.pem(), Issuer::new(params, key))
}

/// A client certificate chain (leaf only) with subject CN and Os.
fn client(
    issuer: &Issuer<'static, KeyPair>,
    cn: &str,
    orgs: &[&str],
) -> Vec<CertificateDer<'static>> {
    client_valid(issuer, cn, orgs, (2020, 4000))
}

/// [`client`] valid from the first year to the second.
fn client_valid(
    issuer: &Issuer<'static, KeyPair>,
    cn: &str,
    orgs: &[&str],
    (from, until): (i32, i32),
) -> Vec<CertificateDer<'static>> {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.not_before = rcgen::date_time_ymd(from, 1, 1);
    params.not_after = rcgen::date_time_ymd(until, 1, 1);
    params.distinguished_name.push(DnType::CommonName, cn);
    for o in orgs {
        params.distinguished_name.push(DnType::OrganizationName, *o);
    }
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let key = KeyPair::generate().expect("key");
    let cert = params.signed_by(&key, issuer).expect("sign");
    vec![cert.der().clone()]
}

struct Fixture {
    _dir: tempfile::TempDir,
    path: PathBuf,
    ca: Arc<CaFile>,
    checks: Arc<ClientCertificates>,
}

fn fixture(ca_pem: &str) -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("client-ca.crt");
    std::fs::write(&path, ca_pem).expect("write");
    let ca = Arc::new(CaFile::load(path.clone(), CertificateKind::ClientCa).expect("CA"));
    let checks = Arc::new(ClientCertificates {
        client_ca: Some(ca.clone()),
        front_proxy: None,
    });
    Fixture {
        _dir: dir,
        path,
        ca,
        checks,
    }
}

fn refusal(verdict: &Verdict) -> &CertificateRefusal {
    match &verdict.certificate {
        Some(Err(e)) => e,
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn the_verdict_is_reused_until_the_ca_is_reloaded() {
    let (first_pem, first) = ca("first");
    let f = fixture(&first_pem);
    let connection = f.checks.identify(&client(&first, "alice", &["dev"]));
    let verdict = connection.verdict();
    let Some(Ok(user)) = &verdict.certificate else {
        panic!("{verdict:?}");
    };
    assert_eq!(
        (user.name.as_str(), &user.groups[..]),
        (
            "alice",
            &["dev".to_string(), "system:authenticated".to_string()][..]
        )
    );
    assert!(Arc::ptr_eq(&verdict, &connection.verdict()), "reused");

    // Another CA replaces the file: the same connection is verified again, and refused.
    let (second_pem, _) = ca("second");
    std::fs::write(&f.path, second_pem).expect("rotate");
    let generation = f.ca.generation();
    assert!(f.ca.reload().expect("rotated"));
    assert_eq!(f.ca.generation(), generation + 1);
    let again = connection.verdict();
    assert!(
        matches!(refusal(&again), CertificateRefusal::Unverified { .. }),
        "{again:?}"
    );
    assert!(
        Arc::ptr_eq(&again, &connection.verdict()),
        "the new verdict is cached"
    );

    // An unchanged or unreadable file changes nothing.
    assert!(!f.ca.reload().expect("unchanged"));
    std::fs::write(&f.path, b"\x30\x03DER").expect("garbage");
    let err = f.ca.reload().expect_err("not PEM");
    assert!(matches!(err, CaError::NotPem), "{err:?}");
    assert!(err.to_string().starts_with("not PEM"), "{err}");
    assert_eq!(f.ca.generation(), generation + 1);
}

#[test]
fn a_certificate_name_that_cannot_be_forwarded_is_an_identity_refusal() {
    let (pem, issuer) = ca("ca");
    let f = fixture(&pem);
    for (cn, orgs, field, why) in [
        ("mallory\u{1}", &[][..], Field::User, Why::Control),
        ("admin ", &[][..], Field::User, Why::Whitespace),
        // rcgen keeps one O per subject.
        (
            "eve",
            &["system:masters "][..],
            Field::Group(0),
            Why::Whitespace,
        ),
    ] {
        let verdict = f.checks.identify(&client(&issuer, cn, orgs)).verdict();
        let CertificateRefusal::Identity(e) = refusal(&verdict) else {
            panic!("{cn:?}: {verdict:?}");
        };
        assert_eq!((&e.field, e.why), (&field, why), "{cn:?}");
    }
    let verdict = f.checks.identify(&client(&issuer, "", &[])).verdict();
    assert_eq!(refusal(&verdict), &CertificateRefusal::NoCommonName);
}

#[test]
fn a_verdict_holds_until_a_validity_boundary_of_the_chain() {
    let (pem, issuer) = ca("ca");
    let f = fixture(&pem);
    let at = |year: u64| {
        UnixTime::since_unix_epoch(std::time::Duration::from_secs((year - 1970) * 31_557_600))
    };
    let connection = f
        .checks
        .identify(&client_valid(&issuer, "alice", &[], (2020, 2030)));
    assert_eq!(connection.epoch(at(2019)), Some(0));
    assert_eq!(connection.epoch(at(2025)), Some(1));
    assert_eq!(connection.epoch(at(2031)), Some(2));
    // An expired certificate is refused once; its refusal is reused, not verified per request.
    let expired = f
        .checks
        .identify(&client_valid(&issuer, "old", &[], (2001, 2002)));
    let verdict = expired.verdict();
    let CertificateRefusal::Unverified { source, .. } = refusal(&verdict) else {
        panic!("{verdict:?}");
    };
    assert!(source.to_string().contains("expired"), "{source}");
    assert!(Arc::ptr_eq(&verdict, &expired.verdict()));
}

#[test]
fn the_ca_file_reports_the_expiry_of_the_bundle_that_verifies() {
    let dated = |year| {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.not_after = rcgen::date_time_ymd(year, 1, 1);
        let key = KeyPair::generate().expect("key");
        params.self_signed(&key).expect("CA").pem()
    };
    // 2030-01-01 and 2040-01-01, 00:00:00 UTC.
    let f = fixture(&format!("{}{}", dated(2040), dated(2030)));
    assert_eq!(
        f.ca.expiry(),
        Some((CertificateKind::ClientCa, 1_893_456_000))
    );
    std::fs::write(&f.path, dated(2040)).expect("rotate");
    assert!(f.ca.reload().expect("rotated"));
    assert_eq!(
        f.ca.expiry(),
        Some((CertificateKind::ClientCa, 2_208_988_800))
    );
    // A file that turns bad keeps the bundle in use, and its date.
    std::fs::write(&f.path, "garbage").expect("garbage");
    assert!(f.ca.reload().is_err());
    assert_eq!(
        f.ca.expiry(),
        Some((CertificateKind::ClientCa, 2_208_988_800))
    );
}
