//! `AuthorizationConfiguration` (`apiserver.config.k8s.io/v1`; `v1beta1` and `v1alpha1` read the
//! same way, as kube-apiserver reads them: the three versions have the same fields), decoded
//! strictly: an unknown field is an error. Nothing is defaulted or checked here; `validate` does
//! both. An unknown authorizer `type` decodes (it is a string upstream) and is refused by
//! validation.

use serde::Deserialize;

mod duration;

pub use duration::GoDuration;

/// The group of the file's `apiVersion`.
pub const GROUP: &str = "apiserver.config.k8s.io";
/// The versions read.
pub const VERSIONS: [&str; 3] = ["v1", "v1beta1", "v1alpha1"];
/// The file's `kind`.
pub const KIND: &str = "AuthorizationConfiguration";

/// The whole file.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AuthorizationConfiguration {
    /// `apiserver.config.k8s.io/v1` (or `v1beta1`, `v1alpha1`).
    pub api_version: String,
    /// `AuthorizationConfiguration`.
    pub kind: String,
    /// The chain, asked in order until one allows or denies.
    #[serde(default)]
    pub authorizers: Vec<AuthorizerConfiguration>,
}

/// `authorizers[i]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AuthorizerConfiguration {
    /// `Webhook`, `RBAC`, `AlwaysAllow`, `AlwaysDeny` (`Node` and `ABAC` are refused by apiagg).
    #[serde(default, rename = "type")]
    pub type_: String,
    /// A DNS-1123 subdomain, unique in the file (metrics and logs name the authorizer by it).
    #[serde(default)]
    pub name: String,
    /// Required with `type: Webhook`, refused otherwise.
    #[serde(default)]
    pub webhook: Option<WebhookConfiguration>,
}

/// `authorizers[i].webhook`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WebhookConfiguration {
    /// How long an allow is cached (zero or absent: 5m).
    #[serde(default, rename = "authorizedTTL")]
    pub authorized_ttl: GoDuration,
    /// Whether allows are cached (absent: true).
    #[serde(default)]
    pub cache_authorized_requests: Option<bool>,
    /// How long a denial or no-opinion is cached (zero or absent: 30s).
    #[serde(default, rename = "unauthorizedTTL")]
    pub unauthorized_ttl: GoDuration,
    /// Whether denials and no-opinions are cached (absent: true).
    #[serde(default)]
    pub cache_unauthorized_requests: Option<bool>,
    /// The webhook call's timeout, required, at most 30s.
    #[serde(default)]
    pub timeout: GoDuration,
    /// The SubjectAccessReview version sent: `v1` or `v1beta1`.
    #[serde(default)]
    pub subject_access_review_version: String,
    /// The version match conditions see: `v1`, required with match conditions.
    #[serde(default)]
    pub match_condition_subject_access_review_version: String,
    /// `NoOpinion` or `Deny`: the decision when the call or a match condition fails.
    #[serde(default)]
    pub failure_policy: String,
    /// Where the webhook is.
    #[serde(default)]
    pub connection_info: WebhookConnectionInfo,
    /// CEL over `request`, all true for the webhook to be asked (at most 64).
    #[serde(default)]
    pub match_conditions: Vec<WebhookMatchCondition>,
}

/// `authorizers[i].webhook.connectionInfo`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WebhookConnectionInfo {
    /// `KubeConfigFile` or `InClusterConfig`.
    #[serde(default, rename = "type")]
    pub type_: String,
    /// The kubeconfig naming the webhook, an absolute path (`KubeConfigFile` only).
    #[serde(default)]
    pub kube_config_file: Option<String>,
}

/// `authorizers[i].webhook.matchConditions[j]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WebhookMatchCondition {
    /// CEL over `request` (the SubjectAccessReview's `spec`, v1), evaluating to a bool.
    #[serde(default)]
    pub expression: String,
}

#[cfg(test)]
mod tests;
