//! Requests to the APIService API that several test files send.

use serde_json::{json, Value};

use super::{client, json_of};

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
