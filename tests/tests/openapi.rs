//! OpenAPI v2 and v3 merged at runtime, through the real `apiagg`: a delegate serving the
//! Kubernetes fixture documents and an oauth-apiserver backend whose documents live in a temp
//! folder the tests can change (the sample server reads them on every request).

mod common;

use std::io::Read;
use std::path::Path;
use std::time::{Duration, SystemTime};

use common::*;
use serde_json::Value;
use sha2::{Digest, Sha512};

const OAUTH_KEY: &str = "apis/oauth.openshift.io/v1";
const USER_KEY: &str = "apis/user.openshift.io/v1";
const OAUTH_PATH: &str = "/apis/oauth.openshift.io/v1/oauthclients";
const PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
const PROTOBUF_DOTTED: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";
/// Every group-version the delegate and the backend serve.
const ALL_KEYS: [&str; 7] = [
    "api/v1",
    "apis/apps/v1",
    "apis/batch/v1",
    "apis/discovery.k8s.io/v1",
    "apis/networking.k8s.io/v1alpha1",
    OAUTH_KEY,
    USER_KEY,
];

struct World {
    gw: Apiagg,
    _delegate: Sample,
    oauth: Option<Sample>,
    oauth_port: u16,
    /// Keeps the oauth backend's port ours while it is down.
    _oauth_hold: PortHold,
    /// The oauth backend's documents: `swagger.json` and `v3/*_openapi.json`.
    oauth_docs: tempfile::TempDir,
}

fn copy_oauth_docs() -> tempfile::TempDir {
    let src = fixtures().join("extension-apiservers/oauth-apiserver");
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::copy(
        src.join("openapi-v2/swagger.json"),
        dir.path().join("swagger.json"),
    )
    .expect("copy swagger.json");
    std::fs::create_dir(dir.path().join("v3")).expect("mkdir v3");
    for entry in std::fs::read_dir(src.join("openapi-v3")).expect("read openapi-v3") {
        let path = entry.expect("entry").path();
        let name = path.file_name().expect("name");
        std::fs::copy(&path, dir.path().join("v3").join(name)).expect("copy v3 document");
    }
    dir
}

fn oauth_backend(port: u16, docs: &Path) -> Sample {
    let discovery = fixtures().join("extension-apiservers/oauth-apiserver/discovery");
    Sample::start(
        &[
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--fixtures",
            discovery.to_str().expect("utf8"),
            "--openapi-v2",
            docs.join("swagger.json").to_str().expect("utf8"),
            "--openapi-v3-dir",
            docs.join("v3").to_str().expect("utf8"),
            "--group",
            "oauth.openshift.io",
            "--version",
            "v1",
            "--resource",
            "oauthclients",
            "--kind",
            "OAuthClient",
            "--name",
            "oauth",
        ],
        false,
    )
}

fn apiservice_line(name: &str, group: &str, gpm: u32, svc: &str) -> String {
    format!("  - {{apiVersion: apiregistration.k8s.io/v1, kind: APIService, metadata: {{name: {name}}}, spec: {{group: {group}, version: v1, groupPriorityMinimum: {gpm}, versionPriority: 15, service: {{namespace: test, name: {svc}}}}}}}\n")
}

/// The delegate, the oauth backend and apiagg; `garbage` adds `v1.garbage.example.com` served
/// by that port.
fn world(garbage: Option<u16>) -> World {
    let delegate = kube_delegate(true, &[]);
    let oauth_docs = copy_oauth_docs();
    let oauth_hold = hold_port();
    let oauth_port = oauth_hold.port;
    let oauth = oauth_backend(oauth_port, oauth_docs.path());
    let mut config = format!(
        "delegate: {{url: \"{}\"}}\nservices:\n{}",
        delegate.url,
        service("oauth", &format!("http://127.0.0.1:{oauth_port}")),
    );
    if let Some(port) = garbage {
        config.push_str(&service("garbage", &format!("http://127.0.0.1:{port}")));
    }
    config.push_str("apiServices:\n");
    config.push_str(&apiservice_line(
        "v1.oauth.openshift.io",
        "oauth.openshift.io",
        9900,
        "oauth",
    ));
    config.push_str(&apiservice_line(
        "v1.user.openshift.io",
        "user.openshift.io",
        9900,
        "oauth",
    ));
    if garbage.is_some() {
        config.push_str(&apiservice_line(
            "v1.garbage.example.com",
            "garbage.example.com",
            100,
            "garbage",
        ));
    }
    let gw = Apiagg::start(
        &config,
        &["--openapi-refresh", "300ms", "--discovery-refresh", "500ms"],
    );
    World {
        gw,
        _delegate: delegate,
        oauth: Some(oauth),
        oauth_port,
        _oauth_hold: oauth_hold,
        oauth_docs,
    }
}

async fn get(url: &str, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut request = client().get(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.expect("request")
}

async fn json(url: &str) -> Value {
    let r = get(url, &[]).await;
    assert_eq!(r.status(), 200, "GET {url}");
    serde_json::from_slice(&r.bytes().await.expect("body")).expect("JSON")
}

fn header(r: &reqwest::Response, name: &str) -> String {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

fn sha512_upper_hex(bytes: &[u8]) -> String {
    Sha512::digest(bytes)
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect()
}

/// `serverRelativeURL` of every key of `/openapi/v3`.
async fn index(gw: &Apiagg) -> Vec<(String, String)> {
    let doc = json(&gw.url("/openapi/v3")).await;
    doc["paths"]
        .as_object()
        .expect("paths")
        .iter()
        .map(|(k, v)| {
            let url = v["serverRelativeURL"].as_str().expect("url").to_string();
            (k.clone(), url)
        })
        .collect()
}

fn url_of(index: &[(String, String)], key: &str) -> Option<String> {
    index.iter().find(|(k, _)| k == key).map(|(_, u)| u.clone())
}

/// Waits until every source's documents are merged.
async fn wait_openapi(gw: &Apiagg) {
    let ready = eventually(Duration::from_secs(60), || async {
        let v3 = get(&gw.url("/openapi/v3"), &[]).await;
        if v3.status() != 200 {
            return false;
        }
        let doc: Value = serde_json::from_slice(&v3.bytes().await.expect("body")).expect("JSON");
        if !ALL_KEYS.iter().all(|k| doc["paths"].get(*k).is_some()) {
            return false;
        }
        let v2 = get(&gw.url("/openapi/v2"), &[]).await;
        v2.status() == 200
            && String::from_utf8_lossy(&v2.bytes().await.expect("body")).contains(OAUTH_PATH)
    })
    .await;
    assert!(ready, "the OpenAPI documents were never all merged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_explain_works_for_delegate_and_backend_resources() {
    let w = world(None);
    w.gw.wait_ready().await;
    wait_openapi(&w.gw).await;
    let cases: [(&str, &[&str]); 4] = [
        (
            "deployments.spec",
            &["DeploymentSpec", "replicas", "template"],
        ),
        (
            "pods.spec.containers",
            &["containers", "image", "livenessProbe"],
        ),
        (
            "oauthclients",
            &["OAuthClient", "oauth.openshift.io", "redirectURIs"],
        ),
        (
            "oauthclients.redirectURIs",
            &["redirectURIs", "redirection"],
        ),
    ];
    for binary in ["kubectl", KUBECTL_127_BIN] {
        for (what, expected) in cases {
            let (ok, out, err) = kubectl(binary, w.gw.port, &["explain", what]);
            assert!(ok, "{binary} explain {what} failed: {err}");
            for needle in expected {
                assert!(
                    out.contains(needle),
                    "{binary} explain {what}: no {needle:?} in\n{out}"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v3_index_hashes_redirects_and_caching() {
    let w = world(None);
    w.gw.wait_ready().await;
    wait_openapi(&w.gw).await;
    let entries = index(&w.gw).await;
    let keys: Vec<&str> = entries.iter().map(|(k, _)| k.as_str()).collect();
    // Exactly the delegate's group-versions and the backend's APIService group-versions (its
    // other keys, `apis` and `version`, belong to no APIService of it).
    assert_eq!(keys, ALL_KEYS);

    // The index has an ETag and answers 304.
    let r = get(&w.gw.url("/openapi/v3"), &[]).await;
    assert_eq!(header(&r, "content-type"), "application/json");
    let etag = header(&r, "etag");
    assert!(etag.starts_with('"'), "{etag}");
    let r = get(&w.gw.url("/openapi/v3"), &[("If-None-Match", &etag)]).await;
    assert_eq!(r.status(), 304);

    let expected_year = httpdate::parse_http_date;
    for (key, file) in [
        ("api/v1", fixtures().join("kubernetes/openapi-v3/api__v1_openapi.json")),
        (
            OAUTH_KEY,
            fixtures().join("extension-apiservers/oauth-apiserver/openapi-v3/apis__oauth.openshift.io__v1_openapi.json"),
        ),
    ] {
        let url = url_of(&entries, key).expect("listed");
        let expected = std::fs::read(&file).expect("fixture");
        let hash = sha512_upper_hex(&expected);
        assert_eq!(url, format!("/openapi/v3/{key}?hash={hash}"));

        // Current hash: the bytes, immutable for a year.
        let r = get(&w.gw.url(&url), &[]).await;
        assert_eq!(r.status(), 200);
        assert_eq!(header(&r, "cache-control"), "public, immutable");
        assert_eq!(header(&r, "etag"), format!("\"{hash}\""));
        assert_eq!(header(&r, "content-type"), "application/json");
        let expires = expected_year(&header(&r, "expires")).expect("RFC 1123 Expires");
        let ahead = expires
            .duration_since(SystemTime::now())
            .expect("Expires in the future");
        assert!(ahead > Duration::from_secs(364 * 24 * 3600), "{ahead:?}");
        assert_eq!(&r.bytes().await.expect("body")[..], &expected[..]);

        // Stale hash: 301 to the current one.
        let stale = format!("/openapi/v3/{key}?hash=0123");
        let r = client_no_redirect().get(w.gw.url(&stale)).send().await.expect("get");
        assert_eq!(r.status(), 301);
        assert_eq!(header(&r, "location"), url);

        // No hash: ETag and 304.
        let plain = w.gw.url(&format!("/openapi/v3/{key}"));
        let r = get(&plain, &[]).await;
        assert_eq!(r.status(), 200);
        assert_eq!(header(&r, "cache-control"), "");
        let r = get(&plain, &[("If-None-Match", &format!("\"{hash}\""))]).await;
        assert_eq!(r.status(), 304);
    }

    let r = get(&w.gw.url("/openapi/v3/apis/nothing.example.com/v1"), &[]).await;
    assert_eq!(r.status(), 404);
    let status: Value = serde_json::from_slice(&r.bytes().await.expect("body")).expect("JSON");
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["code"], 404);
}

fn client_no_redirect() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_is_merged_negotiated_compressed_and_cached() {
    let w = world(None);
    w.gw.wait_ready().await;
    wait_openapi(&w.gw).await;
    let url = w.gw.url("/openapi/v2");

    let r = get(&url, &[("Accept", "application/json")]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "content-type"), "application/json");
    assert_eq!(header(&r, "content-encoding"), "");
    let etag = header(&r, "etag");
    let plain = r.bytes().await.expect("body");
    assert_eq!(etag, format!("\"{}\"", sha512_upper_hex(&plain)));
    let doc: Value = serde_json::from_slice(&plain).expect("valid JSON");
    let paths = doc["paths"].as_object().expect("paths");
    for path in [
        OAUTH_PATH,
        "/apis/user.openshift.io/v1/users",
        "/api/v1/namespaces/{namespace}/pods",
        "/apis/apps/v1/namespaces/{namespace}/deployments",
    ] {
        assert!(paths.contains_key(path), "{path} missing");
    }
    // The backend's paths outside its APIServices' group-versions are filtered out.
    assert!(!paths.contains_key("/apis/oauth.openshift.io/"));
    assert!(paths.contains_key("/apis/oauth.openshift.io/v1/"));
    assert!(doc["definitions"]
        .as_object()
        .expect("definitions")
        .keys()
        .any(|d| d.contains("oauth.v1.OAuthClient")));

    // 304 on a matching If-None-Match.
    let r = get(&url, &[("If-None-Match", &etag)]).await;
    assert_eq!(r.status(), 304);
    assert_eq!(header(&r, "etag"), etag);

    // gzip: the same bytes, compressed.
    let r = get(&url, &[("Accept-Encoding", "gzip")]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "content-encoding"), "gzip");
    assert_eq!(header(&r, "vary"), "Accept, Accept-Encoding");
    assert_eq!(header(&r, "etag"), etag);
    let compressed = r.bytes().await.expect("body");
    assert!(compressed.len() < plain.len() / 4);
    let mut unzipped = Vec::new();
    flate2::read::GzDecoder::new(&compressed[..])
        .read_to_end(&mut unzipped)
        .expect("gunzip");
    assert_eq!(unzipped, &plain[..]);

    // Protobuf (gnostic), same ETag, also gzip-compressed; the first acceptable clause wins.
    for accept in [PROTOBUF, PROTOBUF_DOTTED] {
        let r = get(&url, &[("Accept", accept)]).await;
        assert_eq!(r.status(), 200, "{accept}");
        assert_eq!(header(&r, "content-type"), PROTOBUF_DOTTED);
        assert_eq!(header(&r, "etag"), etag);
        let body = r.bytes().await.expect("body");
        // swagger = "2.0" is field 1.
        assert!(body.windows(5).any(|w| w == b"\x0a\x032.0"));
        assert!(body
            .windows(OAUTH_PATH.len())
            .any(|w| w == OAUTH_PATH.as_bytes()));
    }
    let r = get(&url, &[("Accept", PROTOBUF), ("Accept-Encoding", "gzip")]).await;
    assert_eq!(header(&r, "content-encoding"), "gzip");
    assert_eq!(header(&r, "content-type"), PROTOBUF_DOTTED);
    let r = get(
        &url,
        &[("Accept", &format!("application/json, {PROTOBUF}"))],
    )
    .await;
    assert_eq!(header(&r, "content-type"), "application/json");
    let r = get(
        &url,
        &[("Accept", &format!("{PROTOBUF}, application/json"))],
    )
    .await;
    assert_eq!(header(&r, "content-type"), PROTOBUF_DOTTED);
    // Nothing acceptable: 406 Status; v3 documents are JSON only.
    for (path, accept) in [
        ("/openapi/v2", "application/yaml"),
        ("/openapi/v3/api/v1", PROTOBUF),
    ] {
        let r = get(&w.gw.url(path), &[("Accept", accept)]).await;
        assert_eq!(r.status(), 406, "{path} {accept}");
        let status: Value = serde_json::from_slice(&r.bytes().await.expect("body")).expect("JSON");
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["code"], 406);
    }
    let r = get(&url, &[("Accept", "*/*")]).await;
    assert_eq!(r.status(), 200);

    let metrics = String::from_utf8_lossy(
        &get(&w.gw.url("/metrics"), &[])
            .await
            .bytes()
            .await
            .expect("body"),
    )
    .to_string();
    assert!(metrics.contains("apiagg_openapi_v2_regenerations_total"));
    assert!(metrics.contains("apiagg_openapi_v2_regeneration_duration_seconds_count"));
}

/// Rewrites a JSON file of the oauth backend.
fn edit_json(path: &Path, change: impl FnOnce(&mut Value)) {
    let mut doc: Value = serde_json::from_slice(&std::fs::read(path).expect("read")).expect("JSON");
    change(&mut doc);
    std::fs::write(path, serde_json::to_vec(&doc).expect("render")).expect("write");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_backend_document_changes_its_hash_and_the_merge() {
    let w = world(None);
    w.gw.wait_ready().await;
    wait_openapi(&w.gw).await;
    let before = index(&w.gw).await;
    let old_oauth = url_of(&before, OAUTH_KEY).expect("oauth");

    let docs = w.oauth_docs.path();
    edit_json(
        &docs.join("v3/apis__oauth.openshift.io__v1_openapi.json"),
        |doc| doc["info"]["title"] = Value::from("changed by the test"),
    );
    edit_json(&docs.join("swagger.json"), |doc| {
        let item = doc["paths"][OAUTH_PATH].clone();
        doc["paths"]["/apis/oauth.openshift.io/v1/newthings"] = item;
    });

    let changed = eventually(Duration::from_secs(20), || async {
        url_of(&index(&w.gw).await, OAUTH_KEY).as_ref() != Some(&old_oauth)
    })
    .await;
    assert!(changed, "the oauth document's hash never changed");
    let after = index(&w.gw).await;
    let new_oauth = url_of(&after, OAUTH_KEY).expect("oauth");
    let doc = json(&w.gw.url(&new_oauth)).await;
    assert_eq!(doc["info"]["title"], "changed by the test");
    // Only that document's hash changed.
    for key in ALL_KEYS.iter().filter(|k| **k != OAUTH_KEY) {
        assert_eq!(url_of(&before, key), url_of(&after, key), "{key}");
    }
    // The old URL now redirects to the new one.
    let r = client_no_redirect()
        .get(w.gw.url(&old_oauth))
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 301);
    assert_eq!(header(&r, "location"), new_oauth);

    let merged = eventually(Duration::from_secs(20), || async {
        let v2 = json(&w.gw.url("/openapi/v2")).await;
        v2["paths"]
            .get("/apis/oauth.openshift.io/v1/newthings")
            .is_some()
    })
    .await;
    assert!(merged, "the changed v2 document was never merged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_backend_keeps_its_last_good_documents() {
    let mut w = world(None);
    w.gw.wait_ready().await;
    wait_openapi(&w.gw).await;
    let before_index = index(&w.gw).await;
    let before_v2 = get(&w.gw.url("/openapi/v2"), &[]).await;
    let v2_etag = header(&before_v2, "etag");

    w.oauth = None; // killed
                    // The refresh that failed is recorded before anything is compared.
    let metrics_url = w.gw.url("/metrics");
    let failed = eventually(Duration::from_secs(20), || async {
        let body = get(&metrics_url, &[])
            .await
            .text()
            .await
            .unwrap_or_default();
        body.lines()
            .any(|l| l.starts_with("apiagg_openapi_download_failures_total{source=\"test/oauth"))
    })
    .await;
    assert!(
        failed,
        "no failed download of the dead backend was recorded"
    );

    assert_eq!(index(&w.gw).await, before_index);
    let r = get(&w.gw.url("/openapi/v2"), &[]).await;
    assert_eq!(header(&r, "etag"), v2_etag);
    let url = url_of(&before_index, OAUTH_KEY).expect("oauth");
    let r = get(&w.gw.url(&url), &[]).await;
    assert_eq!(r.status(), 200, "the last good v3 document is still served");

    // Back with the same documents: nothing changes.
    w.oauth = Some(oauth_backend(w.oauth_port, w.oauth_docs.path()));
    // Two downloads from the restarted backend: the first was fully processed when the second
    // round asked again.
    let oauth = w.oauth.as_ref().expect("oauth");
    oauth
        .wait_requests("/openapi/v2", 2, Duration::from_secs(20))
        .await;
    assert_eq!(index(&w.gw).await, before_index);
    let r = get(&w.gw.url("/openapi/v2"), &[]).await;
    assert_eq!(header(&r, "etag"), v2_etag);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_documents_never_crash_or_change_the_merge() {
    let w = world(None);
    w.gw.wait_ready().await;
    wait_openapi(&w.gw).await;
    let before_index = index(&w.gw).await;
    let v2_etag = header(&get(&w.gw.url("/openapi/v2"), &[]).await, "etag");

    let docs = w.oauth_docs.path();
    let v3_doc = docs.join("v3/apis__oauth.openshift.io__v1_openapi.json");
    for (v2, v3) in [
        (&b"<html>not OpenAPI</html>"[..], &b"\x00\x01garbage"[..]),
        (&b"{\"swagger\": \"2.0\", \"paths\": 5}"[..], &b"[1, 2, 3]"[..]),
        (
            &b"{\"paths\": {\"/apis/oauth.openshift.io/v1/x\": {\"get\": {\"responses\": {\"200\": {\"schema\": {\"$ref\": \"#/definitions/missing\"}}}}}}}"[..],
            &b"{\"paths\": {}}"[..],
        ),
        (&b"{\"paths\": {\"/apis/oauth.openshift.io/v1/x\": 7}}"[..], &b"{\"openapi\": "[..]),
    ] {
        let oauth = w.oauth.as_ref().expect("oauth");
        let asked = oauth.requests("/openapi/v2").await;
        std::fs::write(docs.join("swagger.json"), v2).expect("write");
        std::fs::write(&v3_doc, v3).expect("write");
        // Two more downloads: the garbage was read and handled by at least one full round.
        oauth
            .wait_requests("/openapi/v2", asked + 2, Duration::from_secs(20))
            .await;
        assert_eq!(get(&w.gw.url("/healthz"), &[]).await.status(), 200);
        let r = get(&w.gw.url("/openapi/v2"), &[]).await;
        assert_eq!(r.status(), 200);
        assert_eq!(header(&r, "etag"), v2_etag, "{}", String::from_utf8_lossy(v2));
        // The index only changes by the new hash the backend's own index announces for the
        // garbage document; apiagg keeps serving the last good one under its own hash.
        assert_eq!(index(&w.gw).await, before_index, "{}", String::from_utf8_lossy(v3));
    }
}

/// A backend that answers every request with the same bytes.
async fn garbage_server(response: &'static [u8]) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = socket.read(&mut buf).await;
                let _ = socket.write_all(response).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbage_backend_contributes_nothing_and_breaks_nothing() {
    for response in [
        &b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nConnection: close\r\n\r\n<html>not OpenAPI</html>"[..],
        &b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{\"paths\": {\"apis/garbage.example.com/v1\": 17}"[..],
        &b"\x00\x01garbage\r\n\r\n"[..],
    ] {
        let port = garbage_server(response).await;
        let w = world(Some(port));
        w.gw.wait_ready().await;
        wait_openapi(&w.gw).await;
        let keys: Vec<String> = index(&w.gw).await.into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys.len(), ALL_KEYS.len(), "{keys:?}");
        let v2 = json(&w.gw.url("/openapi/v2")).await;
        assert!(v2["paths"].get(OAUTH_PATH).is_some());
        assert!(v2["paths"].get("/api/v1/pods").is_some());
        assert_eq!(get(&w.gw.url("/healthz"), &[]).await.status(), 200);
    }
}
