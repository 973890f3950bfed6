//! `AuthenticationConfiguration` (`apiserver.config.k8s.io/v1`; `v1beta1` and `v1alpha1` read the
//! same way, as kube-apiserver reads them), decoded strictly: an unknown field is an error.

use serde::Deserialize;

/// The group of the file's `apiVersion`.
pub const GROUP: &str = "apiserver.config.k8s.io";
/// The versions read.
pub const VERSIONS: [&str; 3] = ["v1", "v1beta1", "v1alpha1"];

/// The whole file.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AuthenticationConfiguration {
    /// `apiserver.config.k8s.io/v1` (or `v1beta1`, `v1alpha1`).
    pub api_version: String,
    /// `AuthenticationConfiguration`.
    pub kind: String,
    /// The JWT issuers, tried by the token's `iss`.
    #[serde(default)]
    pub jwt: Vec<JwtAuthenticator>,
    /// Anonymous requests, and on which paths.
    #[serde(default)]
    pub anonymous: Option<AnonymousConfig>,
}

/// One issuer and how its tokens become users.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JwtAuthenticator {
    /// Who signs, for whom.
    #[serde(default)]
    pub issuer: Issuer,
    /// Rules every token's claims must pass.
    #[serde(default)]
    pub claim_validation_rules: Vec<ClaimValidationRule>,
    /// How claims become the user.
    #[serde(default)]
    pub claim_mappings: ClaimMappings,
    /// Rules the mapped user must pass.
    #[serde(default)]
    pub user_validation_rules: Vec<UserValidationRule>,
}

/// `issuer`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Issuer {
    /// The `iss` tokens carry, an `https` URL.
    #[serde(default)]
    pub url: String,
    /// Where the discovery document is, when not under `url`.
    #[serde(default, rename = "discoveryURL")]
    pub discovery_url: String,
    /// PEM CA bundle for discovery and the JWKS (the system's roots when empty).
    #[serde(default)]
    pub certificate_authority: String,
    /// Acceptable `aud` values.
    #[serde(default)]
    pub audiences: Vec<String>,
    /// `MatchAny`, or empty with a single audience.
    #[serde(default)]
    pub audience_match_policy: String,
    /// Accepted and ignored: apiagg has no egress selector.
    #[serde(default)]
    pub egress_selector_type: String,
}

/// `claimValidationRules[i]`: a claim with its required value, or an expression.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaimValidationRule {
    /// A claim that must be a string equal to `requiredValue`.
    #[serde(default)]
    pub claim: String,
    /// The value `claim` must have.
    #[serde(default)]
    pub required_value: String,
    /// CEL over `claims`, true to pass.
    #[serde(default)]
    pub expression: String,
    /// Why a token failed `expression`.
    #[serde(default)]
    pub message: String,
}

/// `claimMappings`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaimMappings {
    /// The username (required).
    #[serde(default)]
    pub username: PrefixedClaimOrExpression,
    /// The groups.
    #[serde(default)]
    pub groups: PrefixedClaimOrExpression,
    /// The UID.
    #[serde(default)]
    pub uid: ClaimOrExpression,
    /// Extra attributes.
    #[serde(default)]
    pub extra: Vec<ExtraMapping>,
}

/// A claim with a prefix, or an expression.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PrefixedClaimOrExpression {
    /// The claim.
    #[serde(default)]
    pub claim: String,
    /// Put before the claim's value; required with `claim` (may be empty).
    #[serde(default)]
    pub prefix: Option<String>,
    /// CEL over `claims`.
    #[serde(default)]
    pub expression: String,
}

/// A claim, or an expression.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaimOrExpression {
    /// The claim.
    #[serde(default)]
    pub claim: String,
    /// CEL over `claims`.
    #[serde(default)]
    pub expression: String,
}

/// `extra[i]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExtraMapping {
    /// A domain-prefixed, lowercase key (`example.org/team`).
    #[serde(default)]
    pub key: String,
    /// CEL over `claims`: a string or a list of strings.
    #[serde(default)]
    pub value_expression: String,
}

/// `userValidationRules[i]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UserValidationRule {
    /// CEL over `user`, true to pass.
    #[serde(default)]
    pub expression: String,
    /// Why a user failed it.
    #[serde(default)]
    pub message: String,
}

/// `anonymous`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnonymousConfig {
    /// Whether requests without credentials are `system:anonymous`.
    #[serde(default)]
    pub enabled: bool,
    /// When set, only these paths are open to anonymous requests.
    #[serde(default)]
    pub conditions: Vec<AnonymousCondition>,
}

/// `anonymous.conditions[i]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnonymousCondition {
    /// An exact request path (`/livez`).
    #[serde(default)]
    pub path: String,
}
