//! The same requests sent to kube-apiserver's own aggregator and to apiagg (authorizing by a
//! SubjectAccessReview at kube-apiserver), compared on what clients read: status code, Status
//! reason and message, `Warning` headers, flow-control UIDs, `Content-Type`.

use std::time::{Duration, Instant};

use apiagg_tests::real_kube::{RealKube, WARDLE};
use apiagg_tests::wait_until;
use serde_json::{json, Value};

use super::{flunder, flunders, grant_flunder_reading};

/// A client trusting the control plane's CA that sends `Authorization: Bearer <token>`.
fn bearer(kube: &RealKube, token: &str) -> reqwest::Client {
    let ca = reqwest::Certificate::from_pem(kube.serving_ca.cert_pem.as_bytes()).expect("CA");
    let mut headers = reqwest::header::HeaderMap::new();
    let value = format!("Bearer {token}").parse().expect("header");
    headers.insert(reqwest::header::AUTHORIZATION, value);
    let builder = reqwest::Client::builder()
        .add_root_certificate(ca)
        .default_headers(headers);
    builder.build().expect("client")
}

/// Makes sample-apiserver's admission (BanFlunder) refuse flunders named `name`: a Fischer that
/// disallows it; waits until a dry run is refused.
async fn ban_flunder(kube: &RealKube, name: &str) {
    let fischer = json!({"apiVersion": "wardle.example.com/v1alpha1", "kind": "Fischer",
        "metadata": {"name": format!("ban-{name}")}, "disallowedFlunders": [name]});
    kube.create(&format!("{WARDLE}/fischers"), fischer).await;
    let dry_run = format!("{}?dryRun=All", flunders("default"));
    wait_until(
        "sample-apiserver's admission to refuse the banned name",
        Duration::from_secs(20),
        || kube.admin("POST", &dry_run, Some(flunder(name, json!({})))),
        |(code, _)| *code == 403,
    )
    .await;
}

/// What a client reads of an answer: the status code, the Status `reason` and `message` (empty
/// when the answer is not a Status), the `Warning` headers, the flow-control UIDs (the first
/// value: kube-apiserver's aggregator sends its own and the backend's), the `Content-Type`;
/// compared row by row. `noted`: which of [`NOTED`] the answer carries, reported, not compared.
#[derive(Debug)]
struct Outcome {
    read: (u16, String, String, Vec<String>, [Option<String>; 3]),
    noted: Vec<&'static str>,
}

/// Headers whose presence is reported beside each row (see the differences in docs/testing.md).
const NOTED: [&str; 3] = ["audit-id", "cache-control", "x-content-type-options"];

impl Outcome {
    /// `code reason`, the warnings counted.
    fn short(&self) -> String {
        let (code, reason, _, warnings, _) = &self.read;
        let warned = match warnings.len() {
            0 => String::new(),
            n => format!(" +{n} Warning"),
        };
        format!("{code} {reason}{warned}")
    }
}

/// Sends `method url` with `body` (merge patch for PATCH) and reads the [`Outcome`].
async fn exchange(c: &reqwest::Client, method: &str, url: &str, body: Option<&Value>) -> Outcome {
    let response = apiagg_tests::real_kube::sent(c, method, url, body).await;
    let code = response.status().as_u16();
    let headers = response.headers().clone();
    let text = |value: &reqwest::header::HeaderValue| {
        String::from_utf8_lossy(value.as_bytes()).into_owned()
    };
    let warnings = headers.get_all("warning").iter().map(text).collect();
    let first = |name: &str| headers.get(name).map(text);
    let read = [
        first("x-kubernetes-pf-flowschema-uid"),
        first("x-kubernetes-pf-prioritylevel-uid"),
        first("content-type"),
    ];
    let noted = NOTED
        .into_iter()
        .filter(|name| headers.contains_key(*name))
        .collect();
    let body: Value =
        serde_json::from_str(&response.text().await.unwrap_or_default()).unwrap_or(Value::Null);
    let field = |name: &str| match body["kind"].as_str() {
        Some("Status") => body[name].as_str().unwrap_or_default().to_string(),
        _ => String::new(),
    };
    Outcome {
        read: (code, field("reason"), field("message"), warnings, read),
        noted,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_aggregator_and_apiagg_answer_alike() {
    let kube = RealKube::shared().await;
    let began = Instant::now();
    // apiagg authorizing as kube-apiserver does for the aggregated group: a SubjectAccessReview
    // at the delegate, decided by its RBAC.
    let front = kube.apiagg(Some("{mode: Webhook}")).await;
    let (ns, other) = ("real-kube-diff", "real-kube-diff-other");
    kube.namespace(ns).await;
    kube.namespace(other).await;
    grant_flunder_reading(kube, ns).await;
    ban_flunder(kube, "banned").await;
    let existing = flunder("existing", json!({}));
    let (code, body) = kube
        .admin("POST", &flunders(ns), Some(existing.clone()))
        .await;
    assert!(code == 201 || code == 409, "{body}");

    let account_token = kube.service_account_token(ns, "reader").await;
    let clients = [
        ("admin", kube.client(Some(&kube.admin))),
        (
            "narrow",
            kube.client(Some(&kube.client_ca.client("narrow", &[]))),
        ),
        ("anonymous", kube.client(None)),
        ("bad-token", bearer(kube, "not-a-token")),
        ("service-account", bearer(kube, &account_token)),
    ];
    let (list, item) = (flunders(ns), format!("{}/existing", flunders(ns)));
    let (missing, elsewhere) = (format!("{list}/missing"), flunders(other));
    let (fischers, nothings) = (
        format!("{WARDLE}/fischers"),
        format!("{WARDLE}/namespaces/{ns}/x"),
    );
    let no_namespace = flunders("no-such-namespace");
    let bad_timeout = format!("{list}?timeout=soon");
    let invalid = json!({"apiVersion": "wardle.example.com/v1alpha1", "kind": "Flunder",
        "metadata": {"name": "invalid"}, "spec": {"referenceType": "Flunder"}});
    let (banned, new) = (flunder("banned", json!({})), flunder("new", json!({})));
    let label = json!({"metadata": {"labels": {"a": "b"}}});
    let rows: [(&str, &str, &str, Option<&Value>); 26] = [
        ("admin", "GET", &list, None),
        ("admin", "GET", &item, None),
        ("admin", "GET", &missing, None),
        ("admin", "POST", &list, Some(&existing)),
        ("admin", "POST", &list, Some(&invalid)),
        ("admin", "POST", &list, Some(&banned)),
        ("admin", "POST", &no_namespace, Some(&new)),
        ("admin", "PATCH", &missing, Some(&label)),
        ("admin", "GET", &fischers, None),
        ("admin", "GET", &nothings, None),
        ("admin", "GET", "/apis/wardle.example.com/v9", None),
        ("admin", "GET", "/apis/nothing.example.com/v1/things", None),
        ("narrow", "GET", &list, None),
        ("narrow", "GET", &item, None),
        ("narrow", "POST", &list, Some(&new)),
        ("narrow", "DELETE", &item, None),
        ("narrow", "GET", &elsewhere, None),
        ("narrow", "GET", &fischers, None),
        ("narrow", "GET", WARDLE, None),
        ("anonymous", "GET", &list, None),
        ("anonymous", "GET", WARDLE, None),
        ("bad-token", "GET", &list, None),
        // A `?timeout=` that does not parse is refused before the credentials are looked at
        // (WithRequestDeadline precedes authentication): 400, not 401.
        ("bad-token", "GET", &bad_timeout, None),
        ("anonymous", "GET", &bad_timeout, None),
        ("service-account", "GET", &list, None),
        ("service-account", "GET", WARDLE, None),
    ];
    let mut table = String::new();
    let mut differ = Vec::new();
    for (who, method, path, body) in rows {
        let c = &clients
            .iter()
            .find(|(name, _)| *name == who)
            .expect("client")
            .1;
        let theirs = exchange(c, method, &kube.kube_url(path), body).await;
        let ours = exchange(c, method, &front.url(path), body).await;
        let mut line = format!(
            "{who} {method} {path}: kube-apiserver {}, apiagg {}",
            theirs.short(),
            ours.short()
        );
        if theirs.read != ours.read {
            line += &format!("\n  differ: {:?}\n  and:    {:?}", theirs.read, ours.read);
            differ.push(line.clone());
        }
        let only_theirs: Vec<_> = theirs
            .noted
            .iter()
            .filter(|h| !ours.noted.contains(h))
            .collect();
        let only_ours: Vec<_> = ours
            .noted
            .iter()
            .filter(|h| !theirs.noted.contains(h))
            .collect();
        if !only_theirs.is_empty() || !only_ours.is_empty() {
            line += &format!(" (only kube-apiserver: {only_theirs:?}, only apiagg: {only_ours:?})");
        }
        table.push_str(&line);
        table.push('\n');
    }
    eprintln!("differential rows ({:?}):\n{table}", began.elapsed());
    assert!(differ.is_empty(), "answers differ:\n{}", differ.join("\n"));
}
