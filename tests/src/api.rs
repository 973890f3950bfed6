//! Requests to the APIService API that several test files send.

use serde_json::{json, Value};

use crate::{client, json_of};

/// Sends `body` (with its content type) to `url`: the status and the answer as JSON.
pub async fn send(method: reqwest::Method, url: &str, body: Option<(&str, Value)>) -> (u16, Value) {
    let mut req = client().request(method, url);
    if let Some((content_type, body)) = body {
        req = req
            .header("Content-Type", content_type)
            .body(body.to_string());
    }
    let resp = req.send().await.expect("request");
    let code = resp.status().as_u16();
    (code, json_of(resp).await)
}

/// An APIService `name` of `group`, served by a Service nobody lists.
pub fn object(name: &str, group: &str) -> Value {
    json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": name},
        "spec": {"group": group, "version": "v1", "groupPriorityMinimum": 100, "versionPriority": 10,
            "service": {"namespace": "test", "name": "nothing"}}})
}

/// Sends raw bytes with a content type: the status, the `Retry-After` header, the answer as JSON
/// and how long the answer took.
pub async fn send_bytes(
    method: reqwest::Method,
    url: &str,
    content_type: &str,
    body: Vec<u8>,
) -> (u16, Option<String>, Value, std::time::Duration) {
    let started = std::time::Instant::now();
    let resp = client()
        .request(method, url)
        .header("Content-Type", content_type)
        .body(body)
        .send()
        .await
        .expect("request");
    let elapsed = started.elapsed();
    let code = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    (code, retry_after, json_of(resp).await, elapsed)
}

/// An APIService `<version>.<group>` served by Service `test/<service>`.
pub fn remote(group: &str, version: &str, service: &str) -> Value {
    json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": format!("{version}.{group}")},
        "spec": {"group": group, "version": version, "groupPriorityMinimum": 1000,
            "versionPriority": 15, "service": {"namespace": "test", "name": service}}})
}

/// The peak resident set (`VmHWM`, KiB) of process `pid`.
pub fn peak_rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmHWM:")
}

/// The resident set now (`VmRSS`, KiB) of process `pid`.
pub fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// A `kB` field of `/proc/<pid>/status`.
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"))
}

/// A delegate that serves only `wardle.example.com/v1alpha1` (and an empty core `/api`): the
/// sample with a fixture folder holding `api.json`, written into `dir`.
pub fn wardle_delegate(dir: &std::path::Path) -> crate::Sample {
    let fixtures = dir.join("wardle-delegate");
    std::fs::create_dir_all(&fixtures).expect("fixture dir");
    let api = json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []});
    std::fs::write(fixtures.join("api.json"), api.to_string()).expect("api.json");
    let path = fixtures.to_str().expect("utf8 path");
    crate::Sample::start(&["--fixtures", path, "--name", "delegate"], false)
}
