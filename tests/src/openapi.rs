//! The OpenAPI tests' world: a delegate serving the Kubernetes fixture documents and an
//! oauth-apiserver backend whose documents live in a temp folder the tests can change (the
//! sample server reads them on every request), plus the requests the tests make.

use std::time::Duration;

use serde_json::Value;
use sha2::{Digest, Sha512};

use crate::*;

/// The `/openapi/v3` key of the oauth backend's own group-version.
pub const OAUTH_KEY: &str = "apis/oauth.openshift.io/v1";
/// The `/openapi/v3` key of the second group-version the oauth backend serves.
pub const USER_KEY: &str = "apis/user.openshift.io/v1";
/// A path only the oauth backend's OpenAPI v2 document has.
pub const OAUTH_PATH: &str = "/apis/oauth.openshift.io/v1/oauthclients";
/// The protobuf media type of OpenAPI v2 (what kubectl asks for).
pub const PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
/// [`PROTOBUF`] in its older dotted spelling.
pub const PROTOBUF_DOTTED: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";
/// Every group-version the delegate and the backend serve.
pub const ALL_KEYS: [&str; 8] = [
    "api/v1",
    // apiagg's own APIService API.
    "apis/apiregistration.k8s.io/v1",
    "apis/apps/v1",
    "apis/batch/v1",
    "apis/discovery.k8s.io/v1",
    "apis/networking.k8s.io/v1alpha1",
    OAUTH_KEY,
    USER_KEY,
];

/// What [`world`] starts.
pub struct World {
    /// apiagg.
    pub gw: Apiagg,
    /// The delegate (the Kubernetes fixture documents).
    pub _delegate: Sample,
    /// The oauth backend; `None` once a test stopped it.
    pub oauth: Option<Sample>,
    /// The oauth backend's port (held by [`World::_oauth_hold`]).
    pub oauth_port: u16,
    /// Keeps the oauth backend's port ours while it is down.
    pub _oauth_hold: PortHold,
    /// The oauth backend's documents: `swagger.json` and `v3/*_openapi.json`.
    pub oauth_docs: tempfile::TempDir,
}

/// A temp folder with a copy of the oauth-apiserver fixture documents: `swagger.json` and
/// `v3/*`.
pub fn copy_oauth_docs() -> tempfile::TempDir {
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

/// One config line: APIService `name` for `<group>/v1` with `groupPriorityMinimum` `gpm`,
/// served by Service `test/<svc>`.
pub fn apiservice_line(name: &str, group: &str, gpm: u32, svc: &str) -> String {
    format!("  - {{apiVersion: apiregistration.k8s.io/v1, kind: APIService, metadata: {{name: {name}}}, spec: {{group: {group}, version: v1, groupPriorityMinimum: {gpm}, versionPriority: 15, service: {{namespace: test, name: {svc}}}}}}}\n")
}

/// The delegate, the oauth backend and apiagg; `garbage` adds `v1.garbage.example.com` served
/// by that port.
pub fn world(garbage: Option<u16>) -> World {
    world_with(garbage, &[])
}

/// [`world`], apiagg started with `extra` arguments too.
pub fn world_with(garbage: Option<u16>, extra: &[&str]) -> World {
    let delegate = kube_delegate(true, &[]);
    let oauth_docs = copy_oauth_docs();
    let oauth_hold = hold_port();
    let oauth_port = oauth_hold.port;
    let oauth = oauth_backend(oauth_port, Some(oauth_docs.path()));
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
    let mut args = vec!["--openapi-refresh", "300ms", "--discovery-refresh", "500ms"];
    args.extend_from_slice(extra);
    let gw = Apiagg::start(&config, &args);
    World {
        gw,
        _delegate: delegate,
        oauth: Some(oauth),
        oauth_port,
        _oauth_hold: oauth_hold,
        oauth_docs,
    }
}

/// A GET with `headers` (the test fails when it does).
pub async fn get(url: &str, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut request = client().get(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.expect("request")
}

/// A GET that must answer 200, its body as JSON.
pub async fn json(url: &str) -> Value {
    let r = get(url, &[]).await;
    assert_eq!(r.status(), 200, "GET {url}");
    serde_json::from_slice(&r.bytes().await.expect("body")).expect("JSON")
}

/// A response header as text (empty when absent).
pub fn header(r: &reqwest::Response, name: &str) -> String {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

/// SHA-512 of `bytes` in upper-case hex, as kube-apiserver's OpenAPI v3 hashes are.
pub fn sha512_upper_hex(bytes: &[u8]) -> String {
    Sha512::digest(bytes)
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect()
}

/// `serverRelativeURL` of every key of `/openapi/v3`.
pub async fn index(gw: &Apiagg) -> Vec<(String, String)> {
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

/// The `serverRelativeURL` of `key` in an [`index`].
pub fn url_of(index: &[(String, String)], key: &str) -> Option<String> {
    index.iter().find(|(k, _)| k == key).map(|(_, u)| u.clone())
}

/// Waits until every source's documents are merged.
pub async fn wait_openapi(gw: &Apiagg) {
    // What is merged yet: the v3 index's status and the documents it lacks, and whether v2
    // has the oauth paths.
    let merged = || async {
        let v3 = get(&gw.url("/openapi/v3"), &[]).await;
        let status = v3.status().as_u16();
        let doc: Value =
            serde_json::from_slice(&v3.bytes().await.expect("body")).unwrap_or_default();
        let absent: Vec<&str> = ALL_KEYS
            .iter()
            .filter(|k| doc["paths"].get(**k).is_none())
            .copied()
            .collect();
        let v2 = get(&gw.url("/openapi/v2"), &[]).await;
        let oauth = v2.status() == 200
            && String::from_utf8_lossy(&v2.bytes().await.expect("body")).contains(OAUTH_PATH);
        (status, absent, oauth)
    };
    wait_until(
        "every source's OpenAPI documents to be merged (v3 status and absent documents, v2 \
         merged observed)",
        Duration::from_secs(60),
        merged,
        |(status, absent, oauth)| *status == 200 && absent.is_empty() && *oauth,
    )
    .await;
}
