//! What apiagg answers itself about what does not exist, and which Kubernetes it says it is
//! (issue 46, items 4 and 9):
//! - every 404 apiagg writes is a `metav1.Status`, negotiated as kube-apiserver negotiates its
//!   errors: JSON by default, CBOR when the client prefers `application/cbor`. The 404 of a path
//!   nothing serves is the `Status` kube-apiserver's last handler writes since
//!   kubernetes#138219 (1.37.2 still writes the text `404 page not found`);
//! - without a delegate, apiagg's own `/version` names the Kubernetes release whose API it
//!   serves (1.37), so kubectl 1.37 warns of no version skew.

use apiagg_tests::cbor::decode;
use apiagg_tests::*;
use serde_json::{json, Value};

const CBOR: &str = "application/cbor";

/// The 404 `Status` of a path nothing serves, byte for byte (kubernetes#138219).
const UNKNOWN_PATH: &str = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","code":404}"#;

/// GET `url` over HTTP/1.1 with `accept` (none when `None`): code, `Content-Type` and body.
async fn get(c: &reqwest::Client, url: &str, accept: Option<&str>) -> (u16, String, Vec<u8>) {
    let mut request = c.get(url);
    if let Some(accept) = accept {
        request = request.header("Accept", accept);
    }
    let resp = request.send().await.expect("GET");
    assert_eq!(resp.version(), reqwest::Version::HTTP_11, "{url}");
    let code = resp.status().as_u16();
    let kind = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    (code, kind, resp.bytes().await.expect("body").to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_404_apiagg_writes_is_a_status_in_json_or_cbor_as_asked() {
    let gw = Apiagg::start("apiServices: []\n", &["--openapi-v2=false"]);
    gw.wait_ready().await;
    let c = client();
    let unknown: Value = serde_json::from_str(UNKNOWN_PATH).expect("JSON");
    let api = "/apis/apiregistration.k8s.io/v1";
    let name = "v1.nothing.example.com";
    let missing_apiservice = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("apiservices.apiregistration.k8s.io \"{name}\" not found"),
        "reason": "NotFound",
        "details": {"name": name, "group": "apiregistration.k8s.io", "kind": "apiservices"},
        "code": 404,
    });
    // go-restful's 404 in a group-version kube-apiserver serves has empty `details`.
    let mut unknown_subresource = unknown.clone();
    unknown_subresource["details"] = json!({});
    let rows: Vec<(String, &Value)> = vec![
        // Paths nothing serves (no delegate): unknown groups, the core group, anything else.
        ("/apis/nothing.example.com/v1/things".into(), &unknown),
        ("/apis/nothing.example.com".into(), &unknown),
        ("/api/v1/pods".into(), &unknown),
        ("/not/an/api/path".into(), &unknown),
        // Health checks that do not exist (were the text `404 page not found`).
        ("/healthz/nope".into(), &unknown),
        ("/readyz/nope".into(), &unknown),
        // OpenAPI: v2 turned off, a v3 document nobody publishes (404 before any 406).
        ("/openapi/v2".into(), &unknown),
        ("/openapi/v3/apis/nothing.example.com/v1".into(), &unknown),
        // The APIService API (was JSON whatever the client asked).
        (format!("{api}/apiservices/{name}"), &missing_apiservice),
        (
            format!("{api}/apiservices/{name}/scale"),
            &unknown_subresource,
        ),
        (format!("{api}/namespaces/default/apiservices"), &unknown),
    ];
    for (path, expected) in &rows {
        let url = gw.url(path);
        let (code, kind, unasked) = get(&c, &url, None).await;
        assert_eq!((code, kind.as_str()), (404, "application/json"), "{path}");
        let as_json: Value = serde_json::from_slice(&unasked)
            .unwrap_or_else(|e| panic!("{path}: not JSON ({e}): {unasked:?}"));
        assert_eq!(&as_json, *expected, "{path}");
        if *expected == &unknown {
            assert_eq!(String::from_utf8_lossy(&unasked), UNKNOWN_PATH, "{path}");
        }
        for accept in ["application/json", "application/json, application/cbor"] {
            let (code, kind, json) = get(&c, &url, Some(accept)).await;
            assert_eq!(
                (code, kind.as_str()),
                (404, "application/json"),
                "{path} {accept}"
            );
            assert_eq!(json, unasked, "{path} {accept}");
        }
        for accept in [
            CBOR,
            "application/cbor, application/json",
            "application/cbor;q=0.9",
        ] {
            let (code, kind, cbor) = get(&c, &url, Some(accept)).await;
            assert_eq!((code, kind.as_str()), (404, CBOR), "{path} {accept}");
            assert_eq!(&decode(&cbor), *expected, "{path} {accept}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_delegate_version_is_kubernetes_137_and_kubectl_137_sees_no_skew() {
    let gw = Apiagg::start("apiServices: []\n", &[]);
    gw.wait_ready().await;
    let version = json_of(client().get(gw.url("/version")).send().await.expect("GET")).await;
    let git_version = version["gitVersion"].as_str().unwrap_or_default();
    assert!(git_version.starts_with("v1.37.0-apiagg."), "{version}");
    for (field, value) in [
        ("major", "1"),
        ("minor", "37"),
        ("emulationMajor", "1"),
        ("emulationMinor", "37"),
        ("compiler", "rustc"),
    ] {
        assert_eq!(version[field], value, "{field}: {version}");
    }

    let binary = apiagg_tests::real_kube::kubectl_137();
    let (ok, stdout, stderr) = kubectl(&binary.to_string_lossy(), gw.port, &["version"]);
    assert!(ok, "kubectl version: {stderr}\n{stdout}");
    assert!(stdout.contains("Client Version: v1.37."), "{stdout}");
    assert!(
        stdout.contains(&format!("Server Version: {git_version}")),
        "{stdout}"
    );
    // kubectl warns when the server's minor is more than one from its own (1.32 was five).
    for out in [&stdout, &stderr] {
        assert!(!out.contains("WARNING"), "{stdout}\n{stderr}");
        assert!(!out.contains("version difference"), "{stdout}\n{stderr}");
    }
}
