//! The `Available` condition (status, reason, message) of the same APIServices registered in
//! both aggregators: a backend up (wardle), down (a port nothing listens on), behind a wrong CA
//! (sample-apiserver with another CA's `caBundle`), a wrong SAN (a Service name sample-apiserver's
//! certificate does not hold), a missing Service, an expired certificate and a CA certificate
//! served as the server's own (two small TLS listeners of the test). apiagg is asked twice: with
//! the Services in its `services` table (the missing one left out), and with
//! `serviceResolution: cluster`, where it looks them up in kube-apiserver as kube-aggregator does.
//!
//! The Services of the test are of type ExternalName `127.0.0.1` (the address the table gives
//! too), so both probe the same URL; the wrong CA's is wardle's own `api` (ExternalName
//! `localhost`: kube-aggregator names `https://localhost:…`, apiagg the table's
//! `https://127.0.0.1:…`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use apiagg_tests::pki::{ca_as_server, Ca};
use apiagg_tests::real_kube::{apiservices_changing, free_port, send, Front, Lookup, RealKube};
use apiagg_tests::{metric_at, wait_until};
use base64::Engine;
use futures_util::FutureExt;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const APISERVICES: &str = "/apis/apiregistration.k8s.io/v1/apiservices";

/// How apiagg's message compares with kube-aggregator's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Words {
    /// The same message.
    Same,
    /// kube-aggregator's message, then the issuer and the trusted CA in parentheses.
    NamesTheCas,
    /// The same but for the time of the check, which apiagg leaves out (`current time is after`).
    WithoutTheTime,
    /// Go accepts a CA certificate as a server's own, webpki does not: apiagg says so.
    RefusesACaAsServer,
}

/// One APIService of the comparison.
struct Case {
    /// What it shows.
    what: &'static str,
    apiservice: Value,
    /// The Service the test creates for it (type ExternalName `127.0.0.1`).
    service: Option<&'static str>,
    /// (status, reason) each should come to: kube-apiserver's, apiagg's.
    theirs: (&'static str, &'static str),
    ours: (&'static str, &'static str),
    words: Words,
}

impl Case {
    fn name(&self) -> &str {
        self.apiservice["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
    }
}

const FAILED: (&str, &str) = ("False", "FailedDiscoveryCheck");
const PASSED: (&str, &str) = ("True", "Passed");

/// A TLS listener on loopback serving `pair` over HTTP/1.1: 200 with an empty
/// `APIResourceList` for `GET /apis/<group>/v1`, 404 for anything else; its port. It ends with
/// the test's runtime.
async fn tls_listener(pair: (String, String), group: &'static str) -> u16 {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let cert = CertificateDer::from_pem_slice(pair.0.as_bytes()).expect("cert");
    let key = PrivateKeyDer::from_pem_slice(pair.1.as_bytes()).expect("key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .expect("server config");
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(stream).await else {
                    return;
                };
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 65536 {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let wanted = format!("GET /apis/{group}/v1 ");
                let body = json!({"kind": "APIResourceList", "apiVersion": "v1",
                    "groupVersion": format!("{group}/v1"), "resources": []})
                .to_string();
                let answer = if head.starts_with(wanted.as_bytes()) {
                    format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len())
                } else {
                    "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                        .into()
                };
                let _ = tls.write_all(answer.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    port
}

/// The cases; `other` is the CA of the wrong `caBundle`.
async fn cases(kube: &RealKube, other: &Ca) -> Vec<Case> {
    let b64 = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem);
    let mut wrong_ca = kube.apiservice("wrongca.example.com", "v1", "api", kube.sample_port);
    wrong_ca["spec"]["caBundle"] = json!(b64(&other.cert_pem));
    let expired = kube.serving_ca.expired_server(&["expired.wardle.svc"]);
    let expired_port = tls_listener(expired, "expired.example.com").await;
    let ca_leaf = ca_as_server(&["caleaf.wardle.svc"]);
    let ca_leaf_bundle = b64(&ca_leaf.0);
    let ca_leaf_port = tls_listener(ca_leaf, "caleaf.example.com").await;
    let mut ca_leaf = kube.apiservice("caleaf.example.com", "v1", "caleaf", ca_leaf_port);
    ca_leaf["spec"]["caBundle"] = json!(ca_leaf_bundle);
    let case = |what, apiservice, service, theirs, ours, words| Case {
        what,
        apiservice,
        service,
        theirs,
        ours,
        words,
    };
    let apiservice = |group, service, port| kube.apiservice(group, "v1", service, port);
    vec![
        case(
            "up",
            kube.wardle_apiservice(),
            None,
            PASSED,
            PASSED,
            Words::Same,
        ),
        case(
            "down",
            apiservice("down.example.com", "down", free_port()),
            Some("down"),
            FAILED,
            FAILED,
            Words::Same,
        ),
        case(
            "wrong CA",
            wrong_ca,
            None,
            FAILED,
            FAILED,
            Words::NamesTheCas,
        ),
        case(
            "wrong SAN",
            apiservice("wrongsan.example.com", "wrongsan", kube.sample_port),
            Some("wrongsan"),
            FAILED,
            FAILED,
            Words::Same,
        ),
        case(
            "missing Service",
            apiservice("missing.example.com", "missing", free_port()),
            None,
            ("False", "ServiceNotFound"),
            ("False", "ServiceNotFound"),
            Words::Same,
        ),
        case(
            "expired",
            apiservice("expired.example.com", "expired", expired_port),
            Some("expired"),
            FAILED,
            FAILED,
            Words::WithoutTheTime,
        ),
        case(
            "CA as the server's own",
            ca_leaf,
            Some("caleaf"),
            PASSED,
            FAILED,
            Words::RefusesACaAsServer,
        ),
    ]
}

/// Creates each case's Service (ExternalName `127.0.0.1`) and APIService in kube-apiserver
/// (wardle's is there already).
async fn register(kube: &RealKube, cases: &[Case]) {
    for case in &cases[1..] {
        if let Some(name) = case.service {
            let port = case.apiservice["spec"]["service"]["port"].clone();
            let service = json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": name, "namespace": "wardle"},
                "spec": {"type": "ExternalName", "externalName": "127.0.0.1",
                    "ports": [{"port": port, "targetPort": port}]}});
            kube.create("/api/v1/namespaces/wardle/services", service)
                .await;
        }
        kube.create(APISERVICES, case.apiservice.clone()).await;
    }
}

/// Deletes what [`register`] created.
async fn unregister(kube: &RealKube, cases: &[Case]) {
    for case in &cases[1..] {
        let mut paths = vec![format!("{APISERVICES}/{}", case.name())];
        paths.extend(
            case.service
                .map(|s| format!("/api/v1/namespaces/wardle/services/{s}")),
        );
        for path in paths {
            let (code, body) = kube.admin("DELETE", &path, None).await;
            assert!(code == 200 || code == 404, "DELETE {path}: {code} {body}");
        }
    }
}

/// The `Available` condition of `name` at `base` (an aggregator's APIService API), once it
/// has `(status, reason)`.
async fn condition(
    kube: &RealKube,
    who: &str,
    base: String,
    name: &str,
    wanted: (&str, &str),
) -> Value {
    let admin = &kube.client(Some(&kube.admin));
    let url = &format!("{base}{APISERVICES}/{name}");
    wait_until(
        &format!("{who} to call {name} {wanted:?}"),
        Duration::from_secs(30),
        move || async move {
            let (_, body) = send(admin, "GET", url, None).await;
            let conditions = body["status"]["conditions"].as_array().cloned();
            let available = conditions
                .into_iter()
                .flatten()
                .find(|c| c["type"] == "Available");
            available.unwrap_or(Value::Null)
        },
        |c| (c["status"].as_str(), c["reason"].as_str()) == (Some(wanted.0), Some(wanted.1)),
    )
    .await
}

/// Go's `current time <t> is after` without the time.
fn without_the_time(message: &str) -> String {
    match message.split_once("current time ") {
        Some((before, after)) => match after.split_once(" is ") {
            Some((_, rest)) => format!("{before}current time is {rest}"),
            None => message.to_string(),
        },
        None => message.to_string(),
    }
}

/// Compares apiagg's conditions (found by `mode`) with kube-apiserver's `theirs`; the report.
async fn compare(
    kube: &RealKube,
    front: &Front,
    cases: &[Case],
    theirs: &[Value],
    mode: &str,
) -> String {
    let mut report = format!("apiagg with {mode}:\n");
    let admin = kube.client(Some(&kube.admin));
    for (case, theirs) in cases.iter().zip(theirs) {
        let ours = condition(kube, "apiagg", front.url(""), case.name(), case.ours).await;
        let text = |c: &Value| c["message"].as_str().unwrap_or_default().to_string();
        let (their, our) = (text(theirs), text(&ours));
        report += &format!(
            "  {}: {}\n    kube-apiserver {} {} {their:?}\n    apiagg         {} {} {our:?}\n",
            case.what,
            case.name(),
            theirs["status"],
            theirs["reason"],
            ours["status"],
            ours["reason"]
        );
        // wardle's Service is ExternalName `localhost` in the cluster, 127.0.0.1 in the table.
        let their = their.replace("https://localhost:", "https://127.0.0.1:");
        match case.words {
            Words::Same => assert_eq!(our, their, "{report}"),
            Words::WithoutTheTime => assert_eq!(our, without_the_time(&their), "{report}"),
            Words::NamesTheCas => {
                let detail = our.strip_prefix(&their).unwrap_or_default();
                let names = "(issued by \"CN=real-kube-serving-ca\"; the trusted CA is \"CN=real-kube-other-ca\")";
                assert_eq!(detail, format!(" {names}"), "{report}");
            }
            Words::RefusesACaAsServer => {
                let port = case.apiservice["spec"]["service"]["port"].clone();
                let url = format!("https://127.0.0.1:{port}/apis/caleaf.example.com/v1");
                let says = format!("failing or missing response from {url}: Get \"{url}\": tls: failed to verify certificate: x509: certificate \"CN=caleaf.wardle.svc\" is a CA certificate (basic constraints CA:TRUE), not accepted as a server's own");
                assert_eq!(our, says, "{report}");
            }
        }
        // The metric says the same, and the log tells the message once.
        let series = format!(
            "aggregator_unavailable_apiservice{{name=\"{}\"}}",
            case.name()
        );
        let gauge = metric_at(&admin, &front.url("/metrics"), &series).await;
        assert_eq!(
            gauge,
            Some(f64::from(u8::from(case.ours.0 != "True"))),
            "{series}"
        );
        let told = front
            .log()
            .lines()
            .filter(|l| l.contains(case.name()) && l.contains(&our))
            .count();
        assert_eq!(
            told,
            1,
            "{} logged {told} times:\n{}",
            case.name(),
            front.log()
        );
    }
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn available_condition_alike_up_down_wrong_ca_wrong_san_missing_expired() {
    let kube = RealKube::shared().await;
    // Nobody else walks the cluster's discovery while these APIServices are registered.
    let _alone = apiservices_changing().await;
    let began = Instant::now();
    let other = Ca::new("real-kube-other-ca");
    let cases = cases(kube, &other).await;
    register(kube, &cases).await;
    let checked = std::panic::AssertUnwindSafe(async {
        let mut theirs = Vec::new();
        for case in &cases {
            let base = kube.kube_url("");
            theirs.push(condition(kube, "kube-apiserver", base, case.name(), case.theirs).await);
        }
        let more: Vec<Value> = cases[1..].iter().map(|c| c.apiservice.clone()).collect();
        let mut report = String::new();
        let table = Lookup::Table {
            missing: &["missing"],
        };
        for (mode, lookup) in [
            ("its services table", table),
            ("serviceResolution: cluster", Lookup::Cluster),
        ] {
            let front = kube
                .apiagg_finding(Some("{mode: Webhook}"), &more, lookup)
                .await;
            report += &compare(kube, &front, &cases, &theirs, mode).await;
        }
        report
    })
    .catch_unwind()
    .await;
    unregister(kube, &cases).await;
    match checked {
        Ok(report) => eprintln!("Available conditions ({:?}):\n{report}", began.elapsed()),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}
