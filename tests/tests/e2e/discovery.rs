//! Merged discovery through the real `apiagg`: a delegate serving the Kubernetes fixture
//! documents, the oauth-apiserver fixture backend and a metrics.k8s.io backend.

use std::path::PathBuf;
use std::time::Duration;

use apiagg_tests::*;
use serde_json::Value;

const V2: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
const V2BETA1: &str = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";
/// What client-go and kubectl (1.28+) send.
const CLIENT_GO: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
/// What kubectl 1.27 sends.
const KUBECTL_127: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

struct World {
    gw: Apiagg,
    _delegate: Sample,
    oauth: Option<Sample>,
    oauth_port: u16,
    /// Keeps the oauth backend's port ours while it is down.
    _oauth_hold: PortHold,
    _metrics: Sample,
}

fn world(extra: &[&str], garbage: Option<u16>) -> World {
    let delegate = kube_delegate(false, &[]);
    let oauth_hold = hold_port();
    let oauth_port = oauth_hold.port;
    let oauth = oauth_backend(oauth_port, None);
    let metrics = Sample::start(
        &[
            "--group",
            "metrics.k8s.io",
            "--version",
            "v1beta1",
            "--resource",
            "nodes",
            "--kind",
            "NodeMetrics",
            "--name",
            "metrics",
        ],
        false,
    );
    let apiservice = |name: &str, group: &str, version: &str, gpm: u32, vp: u32, svc: &str| {
        format!("  - {{apiVersion: apiregistration.k8s.io/v1, kind: APIService, metadata: {{name: {name}}}, spec: {{group: {group}, version: {version}, groupPriorityMinimum: {gpm}, versionPriority: {vp}, service: {{namespace: test, name: {svc}}}}}}}\n")
    };
    let mut config = format!(
        "delegate: {{url: \"{}\"}}\nservices:\n{}{}",
        delegate.url,
        service("oauth", &format!("http://127.0.0.1:{oauth_port}")),
        service("metrics", &metrics.url),
    );
    if let Some(port) = garbage {
        config.push_str(&service("garbage", &format!("http://127.0.0.1:{port}")));
    }
    config.push_str("apiServices:\n");
    config.push_str(&apiservice(
        "v1.oauth.openshift.io",
        "oauth.openshift.io",
        "v1",
        9900,
        15,
        "oauth",
    ));
    config.push_str(&apiservice(
        "v1.user.openshift.io",
        "user.openshift.io",
        "v1",
        9900,
        15,
        "oauth",
    ));
    config.push_str(&apiservice(
        "v1beta1.metrics.k8s.io",
        "metrics.k8s.io",
        "v1beta1",
        100,
        100,
        "metrics",
    ));
    if garbage.is_some() {
        config.push_str(&apiservice(
            "v1.garbage.example.com",
            "garbage.example.com",
            "v1",
            100,
            100,
            "garbage",
        ));
    }
    let mut args = vec!["--discovery-refresh", "500ms"];
    args.extend_from_slice(extra);
    let gw = Apiagg::start(&config, &args);
    World {
        gw,
        _delegate: delegate,
        oauth: Some(oauth),
        oauth_port,
        _oauth_hold: oauth_hold,
        _metrics: metrics,
    }
}

fn golden(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("golden")
        .join(name)
}

/// Compares with a golden file; `APIAGG_UPDATE_GOLDEN=1` rewrites it.
fn assert_golden(name: &str, actual: &str) {
    let path = golden(name);
    if std::env::var_os("APIAGG_UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir golden");
        std::fs::write(&path, actual).expect("write golden");
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "golden file {} missing ({e}); run with APIAGG_UPDATE_GOLDEN=1",
            path.display()
        )
    });
    assert_eq!(actual, expected, "differs from {}", path.display());
}

async fn get(url: &str, accept: Option<&str>) -> reqwest::Response {
    let mut request = client().get(url);
    if let Some(accept) = accept {
        request = request.header("Accept", accept);
    }
    request.send().await.expect("request")
}

async fn aggregated(gw: &Apiagg) -> Value {
    let r = get(&gw.url("/apis"), Some(V2)).await;
    serde_json::from_str(&r.text().await.expect("body")).expect("JSON")
}

fn freshness(doc: &Value, group: &str, version: &str) -> Option<String> {
    doc["items"]
        .as_array()?
        .iter()
        .find(|g| g["metadata"]["name"] == group)
        .and_then(|g| {
            g["versions"]
                .as_array()?
                .iter()
                .find(|v| v["version"] == version)
                .map(|v| v["freshness"].as_str().unwrap_or("").to_string())
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_api_resources_lists_the_union() {
    let w = world(&[], None);
    w.gw.wait_ready().await;
    for binary in ["kubectl", KUBECTL_127_BIN] {
        let (ok, out, err) = kubectl(binary, w.gw.port, &["api-resources"]);
        assert!(ok, "{binary} failed: {err}");
        assert!(err.is_empty(), "{binary}: {err}");
        assert_golden("api-resources.txt", &out);
    }
    let (ok, out, err) = kubectl(
        "kubectl",
        w.gw.port,
        &[
            "api-resources",
            "--api-group",
            "oauth.openshift.io",
            "-o",
            "name",
        ],
    );
    assert!(ok, "{err}");
    assert!(
        out.lines().any(|l| l == "oauthclients.oauth.openshift.io"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merged_documents_match_golden_files_and_agree() {
    let w = world(&[], None);
    w.gw.wait_ready().await;
    let v2 = get(&w.gw.url("/apis"), Some(V2)).await;
    assert_eq!(v2.headers()["content-type"], V2);
    let v2: Value = serde_json::from_str(&v2.text().await.expect("body")).expect("JSON");
    assert_golden(
        "apis-aggregated-v2.json",
        &format!("{}\n", serde_json::to_string_pretty(&v2).expect("pretty")),
    );

    let beta = get(&w.gw.url("/apis"), Some(V2BETA1)).await;
    assert_eq!(beta.headers()["content-type"], V2BETA1);
    let mut beta: Value = serde_json::from_str(&beta.text().await.expect("body")).expect("JSON");
    assert_eq!(beta["apiVersion"], "apidiscovery.k8s.io/v2beta1");
    beta["apiVersion"] = Value::from("apidiscovery.k8s.io/v2");
    assert_eq!(beta, v2, "v2 and v2beta1 differ in more than apiVersion");

    let legacy = get(&w.gw.url("/apis"), Some("application/json")).await;
    assert_eq!(legacy.headers()["content-type"], "application/json");
    let legacy: Value = serde_json::from_str(&legacy.text().await.expect("body")).expect("JSON");
    assert_eq!(legacy["kind"], "APIGroupList");
    assert_golden(
        "apis-legacy.json",
        &format!(
            "{}\n",
            serde_json::to_string_pretty(&legacy).expect("pretty")
        ),
    );
    // Every group-version the legacy view lists is in the aggregated view and vice versa
    // (apiregistration.k8s.io is listed by both).
    let mut legacy_gvs: Vec<String> = legacy["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["versions"].as_array().cloned().unwrap_or_default())
        .map(|v| v["groupVersion"].as_str().unwrap_or("").to_string())
        .collect();
    let mut aggregated_gvs: Vec<String> = v2["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter(|g| g["metadata"]["name"] != "")
        .flat_map(|g| {
            let name = g["metadata"]["name"].as_str().unwrap_or("").to_string();
            g["versions"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(move |v| format!("{name}/{}", v["version"].as_str().unwrap_or("")))
        })
        .collect();
    for gv in [
        "oauth.openshift.io/v1",
        "user.openshift.io/v1",
        "metrics.k8s.io/v1beta1",
        "apps/v1",
    ] {
        assert!(legacy_gvs.iter().any(|x| x == gv), "{gv} not in legacy");
        assert!(
            aggregated_gvs.iter().any(|x| x == gv),
            "{gv} not in aggregated"
        );
    }
    legacy_gvs.sort();
    aggregated_gvs.sort();
    let remote_only = |v: &Vec<String>| -> Vec<String> {
        v.iter()
            .filter(|gv| gv.contains("openshift") || gv.contains("metrics.k8s.io"))
            .cloned()
            .collect()
    };
    assert_eq!(remote_only(&legacy_gvs), remote_only(&aggregated_gvs));

    // /apis/<group> is the legacy APIGroup of the group's APIServices.
    let group = get(&w.gw.url("/apis/oauth.openshift.io"), None).await;
    let group: Value = serde_json::from_str(&group.text().await.expect("body")).expect("JSON");
    assert_eq!(group["kind"], "APIGroup");
    assert_eq!(
        group["preferredVersion"]["groupVersion"],
        "oauth.openshift.io/v1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_backend_turns_stale_and_comes_back() {
    let mut w = world(&[], None);
    w.gw.wait_ready().await;
    let doc = aggregated(&w.gw).await;
    assert_eq!(
        freshness(&doc, "oauth.openshift.io", "v1").as_deref(),
        Some("Current")
    );

    drop(w.oauth.take());
    let gw = &w.gw;
    let started = std::time::Instant::now();
    let oauth = || async { freshness(&aggregated(gw).await, "oauth.openshift.io", "v1") };
    wait_until(
        "oauth.openshift.io/v1 to turn Stale",
        Duration::from_secs(10),
        oauth,
        |freshness| freshness.as_deref() == Some("Stale"),
    )
    .await;
    let took = started.elapsed();
    println!("Stale {took:?} after the backend died");
    // Probes mark it within a second; the bound (the wait above) leaves room for a loaded
    // machine.
    assert!(took < Duration::from_secs(10), "took {took:?}");
    let doc = aggregated(gw).await;
    assert_eq!(
        freshness(&doc, "user.openshift.io", "v1").as_deref(),
        Some("Stale")
    );
    assert_eq!(
        freshness(&doc, "metrics.k8s.io", "v1beta1").as_deref(),
        Some("Current")
    );
    assert_eq!(freshness(&doc, "apps", "v1").as_deref(), Some("Current"));
    // The last good resources stay listed.
    let oauth = doc["items"]
        .as_array()
        .and_then(|items| {
            items
                .iter()
                .find(|g| g["metadata"]["name"] == "oauth.openshift.io")
        })
        .expect("oauth group listed");
    assert!(oauth["versions"][0]["resources"]
        .as_array()
        .is_some_and(|r| !r.is_empty()));

    // kubectl loses exactly the stale groups.
    let (_, out, _) = kubectl("kubectl", gw.port, &["api-resources"]);
    assert!(!out.contains("openshift.io"), "{out}");
    assert!(out.contains("metrics.k8s.io/v1beta1"), "{out}");
    assert!(out.contains("apps/v1"), "{out}");
    let (ok, _, err) = kubectl("kubectl", gw.port, &["get", "oauthclients"]);
    assert!(!ok && err.contains("oauthclients"), "{err}");

    // Back again: Current.
    w.oauth = Some(oauth_backend(w.oauth_port, None));
    let gw = &w.gw;
    wait_until(
        "oauth.openshift.io/v1 to be Current again",
        Duration::from_secs(10),
        || async { freshness(&aggregated(gw).await, "oauth.openshift.io", "v1") },
        |freshness| freshness.as_deref() == Some("Current"),
    )
    .await;
    let (ok, out, err) = kubectl("kubectl", gw.port, &["api-resources"]);
    assert!(ok, "{err}");
    assert!(out.contains("oauth.openshift.io/v1"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etag_and_accept_negotiation() {
    let w = world(&[], None);
    w.gw.wait_ready().await;
    let url = w.gw.url("/apis");

    let first = get(&url, Some(CLIENT_GO)).await;
    assert_eq!(first.status(), 200);
    assert_eq!(first.headers()["content-type"], V2);
    assert_eq!(first.headers()["vary"], "Accept");
    assert_eq!(first.headers()["cache-control"], "public");
    let etag = first.headers()["etag"].to_str().expect("etag").to_string();
    assert!(etag.starts_with('"') && etag.len() == 130, "{etag}");

    let again = client()
        .get(&url)
        .header("Accept", CLIENT_GO)
        .header("If-None-Match", &etag)
        .send()
        .await
        .expect("304");
    assert_eq!(again.status(), 304);
    assert_eq!(again.headers()["etag"], etag.as_str());
    assert!(again.bytes().await.expect("body").is_empty());
    for no_match in [
        format!("W/{etag}"),
        format!("{etag}, \"other\""),
        "*".to_string(),
    ] {
        let r = client()
            .get(&url)
            .header("Accept", CLIENT_GO)
            .header("If-None-Match", &no_match)
            .send()
            .await
            .expect("request");
        assert_eq!(r.status(), 200, "If-None-Match {no_match}");
    }
    // Same ETag for v2beta1.
    let beta = get(&url, Some(KUBECTL_127)).await;
    assert_eq!(beta.headers()["content-type"], V2BETA1);
    assert_eq!(beta.headers()["etag"], etag.as_str());

    // kube-rs `run()` sends no Accept; Python sends application/json: legacy.
    for accept in [None, Some("application/json"), Some("*/*")] {
        let r = get(&url, accept).await;
        assert_eq!(
            r.headers()["content-type"],
            "application/json",
            "{accept:?}"
        );
        let body: Value = serde_json::from_str(&r.text().await.expect("body")).expect("JSON");
        assert_eq!(body["kind"], "APIGroupList", "{accept:?}");
    }
    // Python uses the trailing slash: legacy only; an aggregated-only Accept there is 406.
    let slash = get(&w.gw.url("/apis/"), Some("application/json")).await;
    assert_eq!(slash.status(), 200);
    let not_acceptable = get(&w.gw.url("/apis/"), Some(V2)).await;
    assert_eq!(not_acceptable.status(), 406);
    let body: Value = serde_json::from_str(&not_acceptable.text().await.expect("b")).expect("JSON");
    assert_eq!(
        (body["kind"].as_str(), body["code"].as_u64()),
        (Some("Status"), Some(406))
    );
    assert_eq!(
        get(&w.gw.url("/apis/oauth.openshift.io"), Some(V2))
            .await
            .status(),
        406
    );
    assert_eq!(
        get(&url, Some("application/vnd.kubernetes.protobuf"))
            .await
            .status(),
        406
    );
    // profile=nopeer is the same document.
    let nopeer = get(&url, Some(&format!("{V2};profile=nopeer"))).await;
    assert_eq!(nopeer.headers()["etag"], etag.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2beta1_can_be_switched_off() {
    let w = world(&["--disable-discovery-v2beta1"], None);
    w.gw.wait_ready().await;
    let r = get(&w.gw.url("/apis"), Some(KUBECTL_127)).await;
    assert_eq!(r.headers()["content-type"], "application/json");
    let r = get(&w.gw.url("/apis"), Some(V2BETA1)).await;
    assert_eq!(r.status(), 406);
    let r = get(&w.gw.url("/apis"), Some(CLIENT_GO)).await;
    assert_eq!(r.headers()["content-type"], V2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_backends_are_stale_never_a_crash() {
    for response in [
        &b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nConnection: close\r\n\r\n<html>not discovery</html>"[..],
        &b"HTTP/1.1 200 OK\r\nContent-Type: application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList\r\nConnection: close\r\n\r\n{\"items\": [{\"versions\": 17}"[..],
        &b"\x00\x01garbage\r\n\r\n"[..],
    ] {
        let port = fixed_server(response).await;
        let w = world(&[], Some(port));
        w.gw.wait_ready().await;
        let doc = aggregated(&w.gw).await;
        assert_eq!(freshness(&doc, "garbage.example.com", "v1").as_deref(), Some("Stale"));
        assert_eq!(freshness(&doc, "oauth.openshift.io", "v1").as_deref(), Some("Current"));
        assert_eq!(get(&w.gw.url("/healthz"), None).await.status(), 200);
    }
}

/// The backends of the v2beta1-retirement test (issue 22): `--discovery` mode (`None`: the
/// sample's default, v2 preferred), group (version `v1`), resource, kind.
const GENERATIONS: [(Option<&str>, &str, &str, &str); 3] = [
    (None, "current.example.com", "widgets", "Widget"),
    (Some("v2beta1"), "beta.example.com", "gadgets", "Gadget"),
    (Some("legacy"), "legacy.example.com", "gizmos", "Gizmo"),
];

/// What one `Accept` clause asks `/apis` for.
#[derive(Debug, PartialEq)]
enum Clause {
    V2,
    V2beta1,
    Legacy,
    Other(String),
}

/// The clauses of an `Accept`, in order.
fn clauses(accept: &str) -> Vec<Clause> {
    accept
        .split(',')
        .map(|clause| {
            let parts: Vec<&str> = clause.split(';').map(str::trim).collect();
            let has = |p: &str| parts.contains(&p);
            match parts[0] {
                "application/json" if parts.len() == 1 => Clause::Legacy,
                "application/json"
                    if has("g=apidiscovery.k8s.io") && has("as=APIGroupDiscoveryList") =>
                {
                    if has("v=v2") {
                        Clause::V2
                    } else if has("v=v2beta1") {
                        Clause::V2beta1
                    } else {
                        Clause::Other(clause.to_string())
                    }
                }
                _ => Clause::Other(clause.to_string()),
            }
        })
        .collect()
}

/// Whether an aggregated document lists the three generations' groups, each with its resource
/// (kind, verbs, scope) in `v1` and none `Stale`; `Err` says what is missing.
fn lists_generations(doc: &Value) -> Result<(), String> {
    for (_, group, resource, kind) in GENERATIONS {
        let item = doc["items"]
            .as_array()
            .and_then(|items| items.iter().find(|g| g["metadata"]["name"] == group))
            .ok_or(format!("group {group} not listed"))?;
        let version = item["versions"]
            .as_array()
            .and_then(|vs| vs.iter().find(|v| v["version"] == "v1"))
            .ok_or(format!("{group}/v1 not listed: {item}"))?;
        if version["freshness"] == "Stale" {
            return Err(format!("{group}/v1 is Stale: {version}"));
        }
        let found = version["resources"]
            .as_array()
            .and_then(|rs| rs.iter().find(|r| r["resource"] == resource))
            .ok_or(format!("{group}/v1 has no {resource}: {version}"))?;
        let verbs: Vec<&str> = found["verbs"]
            .as_array()
            .map(|vs| vs.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        // A legacy document's resources converted the way kube-aggregator does
        // (`ConvertGroupVersionIntoToDiscovery`) keep the `APIResource`'s own `group` and
        // `version`, empty when it names none (they mean "the list's"): both are fine.
        let response_kind = &found["responseKind"];
        let same_or_empty = |field: &str, expected: &str| {
            response_kind[field] == expected || response_kind[field] == ""
        };
        if response_kind["kind"] != kind
            || !same_or_empty("group", group)
            || !same_or_empty("version", "v1")
            || verbs != ["create", "delete", "get", "list", "watch"]
            || found["scope"] != "Cluster"
        {
            return Err(format!("{group}/v1 {resource} is wrong: {found}"));
        }
    }
    Ok(())
}

/// `GET /apis` with `accept`: Content-Type and JSON body.
async fn apis(gw: &Apiagg, accept: &str) -> (String, Value) {
    let r = get(&gw.url("/apis"), Some(accept)).await;
    assert_eq!(r.status(), 200, "GET /apis with {accept}");
    let content_type = r.headers()["content-type"]
        .to_str()
        .expect("content-type")
        .to_string();
    let body = serde_json::from_str(&r.text().await.expect("body")).expect("JSON");
    (content_type, body)
}

/// Issue 22 (v2beta1 retirement): a backend serving aggregated v2, one serving only v2beta1 and
/// one serving only legacy discovery all appear in every discovery apiagg serves (v2, v2beta1,
/// legacy), and kubectl 1.27 and the current kubectl find and reach their resources.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_v2beta1_and_legacy_only_backends_are_all_discovered() {
    let delegate = kube_delegate(false, &[]);
    let backends: Vec<Sample> = GENERATIONS
        .iter()
        .map(|(mode, group, resource, kind)| {
            let name = mode.unwrap_or("v2");
            let mut args = vec![
                "--group",
                group,
                "--version",
                "v1",
                "--resource",
                resource,
                "--kind",
                kind,
                "--name",
                name,
            ];
            if let Some(mode) = mode {
                args.extend(["--discovery", mode]);
            }
            Sample::start(&args, false)
        })
        .collect();
    let mut config = format!("delegate: {{url: \"{}\"}}\nservices:\n", delegate.url);
    for ((mode, ..), backend) in GENERATIONS.iter().zip(&backends) {
        config.push_str(&service(mode.unwrap_or("v2"), &backend.url));
    }
    config.push_str("apiServices:\n");
    for (mode, group, ..) in GENERATIONS {
        config.push_str(&apiservice_v1(group, mode.unwrap_or("v2")));
    }
    let gw = Apiagg::start_logged(&config, &[]);
    gw.wait_ready().await;
    let gw = &gw;

    // (a) Aggregated v2, as client-go and kubectl 1.30+ ask.
    wait_until(
        "v2 to list every generation (what it lacks, and apiagg's log, observed)",
        Duration::from_secs(30),
        || async {
            let lacking = lists_generations(&apis(gw, CLIENT_GO).await.1).err();
            (lacking, Text(gw.log()))
        },
        |(lacking, _)| lacking.is_none(),
    )
    .await;
    let (content_type, v2) = apis(gw, CLIENT_GO).await;
    assert_eq!(content_type, V2);
    assert_eq!(v2["apiVersion"], "apidiscovery.k8s.io/v2");

    // (b) Aggregated v2beta1, as kubectl 1.27–1.29 ask.
    let (content_type, beta) = apis(gw, KUBECTL_127).await;
    assert_eq!(content_type, V2BETA1);
    assert_eq!(beta["apiVersion"], "apidiscovery.k8s.io/v2beta1");
    assert_eq!(lists_generations(&beta), Ok(()), "v2beta1");

    // (c) Legacy `/apis` (plain JSON).
    let (content_type, legacy) = apis(gw, "application/json").await;
    assert_eq!(content_type, "application/json");
    assert_eq!(legacy["kind"], "APIGroupList");
    for (_, group, ..) in GENERATIONS {
        let listed = legacy["groups"].as_array().is_some_and(|groups| {
            groups.iter().any(|g| {
                g["name"] == group && g["preferredVersion"]["groupVersion"] == format!("{group}/v1")
            })
        });
        assert!(listed, "{group} not in legacy /apis: {legacy}");
    }

    // (d) What each backend was asked at `/apis` and answered: apiagg prefers v2, then
    // v2beta1, then legacy JSON; each backend answered in the newest format it speaks.
    let answers = [
        "200 application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
        "200 application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList",
        "200 application/json",
    ];
    for ((mode, group, ..), (backend, answer)) in
        GENERATIONS.iter().zip(backends.iter().zip(answers))
    {
        let log = backend.negotiation("/apis").await;
        println!("{group} ({mode:?}) /apis: {log:?}");
        assert!(!log.is_empty(), "{group}: apiagg never asked /apis");
        for (accept, answered) in &log {
            assert_eq!(
                clauses(accept),
                [Clause::V2, Clause::V2beta1, Clause::Legacy],
                "{group}: Accept {accept:?}"
            );
            assert_eq!(
                answered.keys().collect::<Vec<_>>(),
                [answer],
                "{group}: answers to {accept:?}"
            );
        }
    }
    // The legacy backend's resources can only come from its `/apis/<group>/<version>` (its
    // `/apis` is an APIGroupList without resources): apiagg's legacy fallback read it. (The
    // availability probes GET that path too, with the same Accept, so the count alone would
    // not prove it.)
    let gv = "/apis/legacy.example.com/v1";
    let log = backends[2].negotiation(gv).await;
    println!("legacy.example.com {gv}: {log:?}");
    assert!(
        log.get("application/json")
            .and_then(|answers| answers.get("200 application/json"))
            .is_some_and(|n| *n >= 1),
        "{gv}: {log:?}"
    );

    // kubectl 1.27 (v2beta1) and the current kubectl (v2) list the three resources and reach
    // them through apiagg.
    for binary in [KUBECTL_127_BIN, "kubectl"] {
        let (ok, out, err) = kubectl(binary, gw.port, &["api-resources"]);
        assert!(ok, "{binary} api-resources failed: {err}");
        assert!(err.is_empty(), "{binary}: {err}");
        for (_, group, resource, kind) in GENERATIONS {
            let listed = out.lines().any(|line| {
                let columns: Vec<&str> = line.split_whitespace().collect();
                columns.first() == Some(&resource)
                    && columns.contains(&format!("{group}/v1").as_str())
                    && columns.last() == Some(&kind)
            });
            assert!(listed, "{binary}: {resource} of {group} not listed:\n{out}");
        }
        for (i, (_, group, resource, _)) in GENERATIONS.iter().enumerate() {
            let path = format!("/apis/{group}/v1/{resource}");
            let before = backends[i].requests(&path).await;
            let (ok, _, err) = kubectl(binary, gw.port, &["get", &format!("{resource}.{group}")]);
            assert!(ok, "{binary} get {resource}.{group}: {err}");
            assert!(
                backends[i].requests(&path).await > before,
                "{binary} get {resource}.{group} never reached the backend"
            );
        }
    }
}

/// A backend whose `/apis` fails once is read again within a second (kube-aggregator retries a
/// failed fetch from 500 ms since kubernetes#137634), not at the next refresh an hour later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_discovery_fetch_is_retried_within_a_second() {
    let backend = sample_with(G, "wardle", false, &["--fail-discovery", "1"]);
    let config = one_backend("wardle", &backend);
    let gw = Apiagg::start(&config, &["--discovery-refresh", "1h"]);
    gw.wait_ready().await;
    let started = std::time::Instant::now();
    let current = || async { freshness(&aggregated(&gw).await, G, V) };
    wait_until(
        "the failed backend to be read again",
        Duration::from_secs(5),
        current,
        |freshness| freshness.as_deref() == Some("Current"),
    )
    .await;
    let took = started.elapsed();
    println!("discovered {took:?} after readiness");
    assert!(took < Duration::from_secs(1), "took {took:?}");
    // It failed once and was read again (the probe's own requests go elsewhere).
    assert!(backend.requests("/apis").await >= 2);
}
