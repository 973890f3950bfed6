//! The SubjectAccessReview API (`--authorization-policy`): `POST
//! /apis/authorization.k8s.io/v1/subjectaccessreviews` answered from a small JSON policy file,
//! read on every review (so a test changes the policy by rewriting it), the way kube-apiserver's
//! RBAC authorizer answers: `allowed` with a reason naming the rule, or not allowed with an empty
//! reason. A rule may also deny (`"deny": true`): `denied` with its reason.
//!
//! ```json
//! {"rules": [
//!   {"users": ["alice"], "verbs": ["get", "list"], "apiGroups": ["wardle.example.com"],
//!    "resources": ["flunders"], "namespaces": ["default"]},
//!   {"groups": ["viewers"], "verbs": ["get"], "nonResourceURLs": ["/metrics", "/apis/*"]},
//!   {"users": ["alice"], "verbs": ["impersonate"], "resources": ["users"], "resourceNames": ["bob"]}
//! ]}
//! ```
//!
//! Every list but `verbs` is optional (`apiGroups`, `namespaces` and `resourceNames` then match
//! anything; a rule without `resources` and `nonResourceURLs` matches nothing); `*` matches
//! anything; `resources` entries may name a subresource (`pods/log`, `*/status`);
//! `nonResourceURLs` entries ending in `*` match by prefix.

use std::path::PathBuf;

use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::response::{bad_request, json, status, Body};

/// Path of the SubjectAccessReview collection.
pub const REVIEW_PATH: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

/// Largest review body read.
const MAX_REVIEW_BYTES: usize = 1 << 20;

/// The policy file, read on every review.
#[derive(Debug)]
pub struct Policy {
    path: PathBuf,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    #[serde(default)]
    rules: Vec<Rule>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Rule {
    #[serde(default)]
    users: Vec<String>,
    #[serde(default)]
    groups: Vec<String>,
    verbs: Vec<String>,
    api_groups: Option<Vec<String>>,
    resources: Option<Vec<String>>,
    resource_names: Option<Vec<String>>,
    namespaces: Option<Vec<String>>,
    #[serde(rename = "nonResourceURLs")]
    non_resource_urls: Option<Vec<String>>,
    #[serde(default)]
    deny: bool,
}

/// `spec` of a review, as kube-apiserver's webhook authorizer sends it.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Spec {
    #[serde(default)]
    user: String,
    #[serde(default)]
    groups: Vec<String>,
    resource_attributes: Option<ResourceAttributes>,
    non_resource_attributes: Option<NonResourceAttributes>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ResourceAttributes {
    namespace: String,
    verb: String,
    group: String,
    resource: String,
    subresource: String,
    name: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct NonResourceAttributes {
    path: String,
    verb: String,
}

fn any(list: &Option<Vec<String>>, value: &str) -> bool {
    list.as_ref()
        .is_none_or(|l| l.iter().any(|v| v == "*" || v == value))
}

fn has(list: &[String], value: &str) -> bool {
    list.iter().any(|v| v == "*" || v == value)
}

impl Rule {
    /// Whether the rule is about the reviewed user.
    fn subject(&self, spec: &Spec) -> bool {
        has(&self.users, &spec.user) || spec.groups.iter().any(|g| has(&self.groups, g))
    }

    fn matches(&self, spec: &Spec) -> bool {
        if !self.subject(spec) {
            return false;
        }
        if let Some(a) = &spec.resource_attributes {
            let Some(resources) = &self.resources else {
                return false;
            };
            let resource_ok = resources.iter().any(|r| {
                if a.subresource.is_empty() {
                    r == "*" || *r == a.resource
                } else {
                    let full = format!("{}/{}", a.resource, a.subresource);
                    r == "*" || *r == full || *r == format!("*/{}", a.subresource)
                }
            });
            return has(&self.verbs, &a.verb)
                && any(&self.api_groups, &a.group)
                && resource_ok
                && any(&self.namespaces, &a.namespace)
                && any(&self.resource_names, &a.name);
        }
        if let Some(a) = &spec.non_resource_attributes {
            let Some(urls) = &self.non_resource_urls else {
                return false;
            };
            let url_ok = urls.iter().any(|u| match u.strip_suffix('*') {
                Some(prefix) => a.path.starts_with(prefix),
                None => *u == a.path,
            });
            return has(&self.verbs, &a.verb) && url_ok;
        }
        false
    }
}

impl Policy {
    /// A policy at `path` (read per review: it may not exist yet).
    pub fn new(path: PathBuf) -> Policy {
        Policy { path }
    }

    /// `status` of the review of `spec`: the first matching rule decides.
    fn decide(&self, spec: &Spec) -> Result<Value, String> {
        let text = std::fs::read_to_string(&self.path)
            .map_err(|e| format!("{}: {e}", self.path.display()))?;
        let file: PolicyFile =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", self.path.display()))?;
        let subject = |rule: &Rule| {
            if has(&rule.users, &spec.user) {
                format!("User {:?}", spec.user)
            } else {
                let group = spec.groups.iter().find(|g| has(&rule.groups, g));
                format!("Group {:?}", group.map_or("", String::as_str))
            }
        };
        for (index, rule) in file.rules.iter().enumerate() {
            if rule.matches(spec) {
                let by = format!(
                    "rule {index} of {:?} to {}",
                    self.file_name(),
                    subject(rule)
                );
                return Ok(if rule.deny {
                    json!({"allowed": false, "denied": true, "reason": format!("RBAC: denied by {by}")})
                } else {
                    json!({"allowed": true, "reason": format!("RBAC: allowed by {by}")})
                });
            }
        }
        Ok(json!({"allowed": false}))
    }

    fn file_name(&self) -> String {
        self.path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
    }
}

/// `POST subjectaccessreviews`: `201` with the review and its `status`; `400` for a malformed
/// body, `500` when the policy cannot be read.
pub async fn review(policy: &Policy, req: Request<Incoming>) -> Response<Body> {
    let body = match Limited::new(req.into_body(), MAX_REVIEW_BYTES)
        .collect()
        .await
    {
        Ok(body) => body.to_bytes(),
        Err(e) => return bad_request(&format!("reading the request body: {e}")),
    };
    let mut review = match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Object(review)) => review,
        Ok(_) => return bad_request("a SubjectAccessReview must be a JSON object"),
        Err(e) => return bad_request(&format!("the body is not a SubjectAccessReview: {e}")),
    };
    for (field, expected) in [
        ("kind", "SubjectAccessReview"),
        ("apiVersion", "authorization.k8s.io/v1"),
    ] {
        match review.get(field) {
            None => {}
            Some(Value::String(value)) if value == expected => {}
            Some(other) => {
                return bad_request(&format!("{field} must be {expected:?}, not {other}"))
            }
        }
    }
    let spec: Spec = match review.get("spec").cloned().map(serde_json::from_value) {
        Some(Ok(spec)) => spec,
        Some(Err(e)) => return bad_request(&format!("spec: {e}")),
        None => return bad_request("spec is required"),
    };
    let both = spec.resource_attributes.is_some() == spec.non_resource_attributes.is_some();
    if both || (spec.user.is_empty() && spec.groups.is_empty()) {
        return bad_request(
            "spec needs a user or groups and exactly one of resourceAttributes and \
             nonResourceAttributes",
        );
    }
    let status_value = match policy.decide(&spec) {
        Ok(status) => status,
        Err(e) => {
            return status(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                &format!("reading the authorization policy: {e}"),
                json!({}),
            )
        }
    };
    tracing::debug!(user = %spec.user, status = %status_value, "SubjectAccessReview");
    review.insert("status".into(), status_value);
    json(StatusCode::CREATED, &Value::Object(review))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decide(policy: &str, spec: Value) -> Value {
        let dir = std::env::temp_dir().join(format!("sar-policy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join(format!("p{}.json", rand_suffix()));
        std::fs::write(&path, policy).expect("policy");
        let spec: Spec = serde_json::from_value(spec).expect("spec");
        let out = Policy::new(path.clone()).decide(&spec).expect("decide");
        let _ = std::fs::remove_file(path);
        out
    }

    fn rand_suffix() -> u128 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    }

    const POLICY: &str = r#"{"rules": [
        {"users": ["alice"], "verbs": ["get", "list"], "apiGroups": ["a.io"], "resources": ["foos", "foos/status"], "namespaces": ["default"]},
        {"groups": ["viewers"], "verbs": ["get"], "nonResourceURLs": ["/metrics", "/apis/*"]},
        {"users": ["alice"], "verbs": ["impersonate"], "resources": ["users"], "resourceNames": ["bob"]},
        {"users": ["mallory"], "verbs": ["*"], "resources": ["*"], "deny": true}
    ]}"#;

    fn resource(user: &str, verb: &str, resource: &str, sub: &str, ns: &str, name: &str) -> Value {
        json!({"user": user, "groups": ["system:authenticated"], "resourceAttributes": {
            "verb": verb, "group": if resource == "foos" { "a.io" } else { "" },
            "resource": resource, "subresource": sub, "namespace": ns, "name": name}})
    }

    #[test]
    fn rules_match_like_rbac() {
        let allowed = |spec| decide(POLICY, spec)["allowed"] == json!(true);
        assert!(allowed(resource(
            "alice", "list", "foos", "", "default", ""
        )));
        assert!(allowed(resource(
            "alice", "get", "foos", "status", "default", "x"
        )));
        assert!(!allowed(resource(
            "alice", "delete", "foos", "", "default", "x"
        )));
        assert!(!allowed(resource("alice", "list", "foos", "", "other", "")));
        assert!(!allowed(resource("bob", "list", "foos", "", "default", "")));
        assert!(allowed(resource(
            "alice",
            "impersonate",
            "users",
            "",
            "",
            "bob"
        )));
        assert!(!allowed(resource(
            "alice",
            "impersonate",
            "users",
            "",
            "",
            "carol"
        )));
        let metrics = json!({"user": "x", "groups": ["viewers"],
            "nonResourceAttributes": {"path": "/metrics", "verb": "get"}});
        assert!(allowed(metrics));
        let apis = json!({"user": "x", "groups": ["viewers"],
            "nonResourceAttributes": {"path": "/apis/a.io", "verb": "get"}});
        assert!(allowed(apis));
        let openapi = json!({"user": "x", "groups": ["viewers"],
            "nonResourceAttributes": {"path": "/openapi/v2", "verb": "get"}});
        assert!(!allowed(openapi));
    }

    #[test]
    fn reasons_name_the_rule() {
        let status = decide(POLICY, resource("alice", "list", "foos", "", "default", ""));
        let reason = status["reason"].as_str().expect("reason");
        assert!(
            reason.starts_with("RBAC: allowed by rule 0 of ")
                && reason.ends_with("to User \"alice\""),
            "{reason}"
        );
        let status = decide(POLICY, resource("bob", "list", "foos", "", "default", ""));
        assert_eq!(status, json!({"allowed": false}));
        let status = decide(POLICY, resource("mallory", "get", "pods", "", "", ""));
        assert_eq!(status["denied"], json!(true));
    }
}
