//! The cluster's RBAC objects at a delegate started with `--cluster`: kube-apiserver's bootstrap
//! policy (upstream's `bootstrappolicy/testdata`, kept in `authz/tests/testdata/rbac`) and the
//! grants a test adds and removes, written with apiagg's own token as a cluster admin would.

use std::path::PathBuf;

use serde_json::{json, Value};

use crate::Sample;

/// The RBAC API of the delegate.
const RBAC: &str = "/apis/rbac.authorization.k8s.io/v1";

/// The folder of upstream's bootstrap policy files.
pub fn bootstrap_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../authz/tests/testdata/rbac")
}

/// The items of upstream's bootstrap `files` (`kind: List`), with their `kind`.
pub fn bootstrap_objects(files: &[&str]) -> Vec<Value> {
    let mut objects = Vec::new();
    for file in files {
        let path = bootstrap_dir().join(file);
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let list: Value =
            serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        objects.extend(list["items"].as_array().cloned().unwrap_or_default());
    }
    objects
}

/// Writes to the delegate's RBAC API as `token`.
pub struct RbacWriter<'a> {
    delegate: &'a Sample,
    token: &'a str,
    http: reqwest::Client,
}

/// The collection path of `object` (by its `kind` and namespace).
fn collection(object: &Value) -> String {
    let kind = object["kind"].as_str().unwrap_or_default();
    let resource = match kind {
        "ClusterRole" => "clusterroles",
        "ClusterRoleBinding" => "clusterrolebindings",
        "Role" => "roles",
        "RoleBinding" => "rolebindings",
        other => panic!("not an RBAC kind: {other}"),
    };
    match object["metadata"]["namespace"].as_str() {
        Some(ns) if !ns.is_empty() => format!("{RBAC}/namespaces/{ns}/{resource}"),
        _ => format!("{RBAC}/{resource}"),
    }
}

impl<'a> RbacWriter<'a> {
    /// A writer at `delegate` with `token`.
    pub fn new(delegate: &'a Sample, token: &'a str) -> RbacWriter<'a> {
        RbacWriter {
            delegate,
            token,
            http: reqwest::Client::new(),
        }
    }

    /// Creates `object`.
    pub async fn create(&self, object: &Value) {
        let url = format!("{}{}", self.delegate.url, collection(object));
        let response = self
            .http
            .post(&url)
            .bearer_auth(self.token)
            .json(object)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        let code = response.status().as_u16();
        assert!(matches!(code, 200 | 201), "{url}: {code}: {object}");
    }

    /// Deletes `object`.
    pub async fn delete(&self, object: &Value) {
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let url = format!("{}{}/{name}", self.delegate.url, collection(object));
        let response = self
            .http
            .delete(&url)
            .bearer_auth(self.token)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        assert!(
            response.status().is_success(),
            "{url}: {}",
            response.status()
        );
    }

    /// Creates every object of `objects`.
    pub async fn create_all(&self, objects: &[Value]) {
        for object in objects {
            self.create(object).await;
        }
    }
}

/// A ClusterRole of `rules` named `name` and its ClusterRoleBinding to `subject` (a `{kind,
/// name}` of `User` or `Group`).
pub fn cluster_grant(name: &str, subject: Value, rules: Value) -> [Value; 2] {
    let mut subject = subject;
    subject["apiGroup"] = json!("rbac.authorization.k8s.io");
    [
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": name}, "rules": rules}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": name},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
               "subjects": [subject]}),
    ]
}

/// A RoleBinding in `namespace` of the ClusterRole `role` to `subject`.
pub fn role_binding(namespace: &str, name: &str, role: &str, subject: Value) -> Value {
    let mut subject = subject;
    subject["apiGroup"] = json!("rbac.authorization.k8s.io");
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
           "metadata": {"name": name, "namespace": namespace},
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
           "subjects": [subject]})
}
