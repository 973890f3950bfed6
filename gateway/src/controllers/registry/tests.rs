use std::sync::Arc;

use base64::Engine;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

use super::*;
use crate::backends::HealthBook;
use crate::state::Gateway;
use apiagg_store::Embedded;

/// Unix seconds of January 1st, 00:00:00 UTC, of 2030 … 2034.
const JAN_1: [(i32, i64); 5] = [
    (2030, 1_893_456_000),
    (2031, 1_924_992_000),
    (2032, 1_956_528_000),
    (2033, 1_988_150_400),
    (2034, 2_019_686_400),
];

fn jan_1(year: i32) -> i64 {
    JAN_1.iter().find(|(y, _)| *y == year).expect("year").1
}

/// A self-signed certificate valid until January 1st of `year`: (cert PEM, key PEM).
fn certificate(year: i32, ca: bool) -> (String, String) {
    let mut params = CertificateParams::new(vec!["apiagg".to_string()]).expect("params");
    params.distinguished_name.push(DnType::CommonName, "apiagg");
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(year, 1, 1);
    if ca {
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    } else {
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    }
    let key = KeyPair::generate().expect("key");
    let cert = params.self_signed(&key).expect("cert");
    (cert.pem(), key.serialize_pem())
}

fn apiservice(group: &str, ca_pem: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "  - apiVersion: apiregistration.k8s.io/v1\n    kind: APIService\n    metadata: {{name: v1.{group}}}\n    spec: {{group: {group}, version: v1, groupPriorityMinimum: 1000, versionPriority: 15, service: {{namespace: test, name: {group}, port: 443}}, caBundle: {ca}}}\n"
    )
}

fn scraped(metrics: &Metrics, kind: &str) -> Option<i64> {
    let text = String::from_utf8(metrics.render()).expect("utf-8");
    let prefix =
        format!("apiagg_certificate_expiration_timestamp_seconds{{certificate=\"{kind}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|v| v.parse().expect("a number"))
}

#[test]
fn the_expiry_of_the_client_certificates_and_ca_bundles_in_use_is_published() {
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).expect(name);
    let (proxy, proxy_key) = certificate(2031, false);
    let (delegate, delegate_key) = certificate(2032, false);
    let (delegate_ca, _) = certificate(2033, true);
    write("proxy.crt", &proxy);
    write("proxy.key", &proxy_key);
    write("delegate.crt", &delegate);
    write("delegate.key", &delegate_key);
    write("delegate-ca.crt", &delegate_ca);
    // Two backends: the earlier of their CA bundles counts, and every certificate of a bundle.
    let (late_ca, _) = certificate(2034, true);
    let (early_ca, _) = certificate(2030, true);
    let config = format!(
        "proxyClient: {{certFile: proxy.crt, keyFile: proxy.key}}\n\
         delegate: {{url: \"https://127.0.0.1:6443\", caFile: delegate-ca.crt, certFile: delegate.crt, keyFile: delegate.key}}\n\
         services:\n\
         \x20 - {{namespace: test, name: a.example.com, port: 443, endpoints: [\"https://127.0.0.1:9443\"]}}\n\
         \x20 - {{namespace: test, name: b.example.com, port: 443, endpoints: [\"https://127.0.0.1:9444\"]}}\n\
         apiServices:\n{}{}",
        apiservice("a.example.com", &late_ca),
        apiservice("b.example.com", &format!("{late_ca}{early_ca}")),
    );
    write("apiagg.yaml", &config);
    let path = dir.path().join("apiagg.yaml");
    let store = Embedded::open(&dir.path().join("store")).expect("store");
    let (gateway, writers) = Gateway::new(Options::default(), Arc::new(store)).expect("gateway");
    let sources = Sources::read(&path).expect("sources");
    let parsed = sources.parse().expect("config");
    let handles = Handles {
        routes: writers.routes,
        health: gateway.health.clone(),
        clients: gateway.clients.clone(),
        lifecycle: gateway.lifecycle.clone(),
        metrics: gateway.metrics.clone(),
        store: gateway.store.clone(),
        options: gateway.options.clone(),
    };
    let controller =
        RegistryController::new(handles, path.clone(), sources, parsed.clone()).expect("installed");
    let metrics = &gateway.metrics;
    assert_eq!(scraped(metrics, "proxy-client"), Some(jan_1(2031)));
    assert_eq!(scraped(metrics, "delegate-client"), Some(jan_1(2032)));
    assert_eq!(scraped(metrics, "delegate-ca"), Some(jan_1(2033)));
    assert_eq!(scraped(metrics, "backend-ca"), Some(jan_1(2030)));

    // Without a proxy client certificate, a delegate and CA bundles, their series go.
    let mut bare = parsed;
    bare.proxy_client = None;
    bare.delegate = None;
    bare.api_services.clear();
    let health = HealthBook::default();
    let backends = Backends::load(&bare, &health, &Names::default()).expect("backends");
    let composed = compose(&RegistryInputs {
        config: &bare,
        stored: &[],
        delegate_groups: None,
        cluster: None,
    });
    let loaded = Loaded {
        sources: Sources::read(&path).expect("sources"),
        config: Arc::new(bare.clone()),
        backends,
    };
    controller
        .publish(&loaded, composed, None, &Names::default(), true)
        .expect("installed");
    for kind in [
        "proxy-client",
        "delegate-client",
        "delegate-ca",
        "backend-ca",
    ] {
        assert_eq!(scraped(metrics, kind), None, "{kind}");
    }
}
