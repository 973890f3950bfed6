//! Loading an `AuthorizationConfiguration`: strict decoding, upstream's defaults (`authorizedTTL`
//! 5m, `unauthorizedTTL` 30s, both caches on), then every check of kube-apiserver's
//! `ValidateAuthorizationConfiguration` and `ValidateWebhookConfiguration` with their field
//! paths and messages, each match condition compiled on the way. All the problems of a file are
//! reported at once, as upstream does.
//!
//! Field paths are upstream's, quirk included: a webhook's fields are named under the
//! authorizer, without `webhook` (`authorizers[0].timeout`, `authorizers[0].connectionInfo.type`),
//! as kube-apiserver names them.
//!
//! Beyond upstream: `Node` and `ABAC`, which kube-apiserver knows, are refused with the reason
//! (see [`REFUSED_TYPES`]). Short of upstream: a `kubeConfigFile` is checked to be an absolute
//! path, not read (this crate does no I/O; the gateway reports a file it cannot read).

use std::collections::HashSet;
use std::time::Duration;

use apiagg_authn::expr::{CompileError, Expression};

use crate::config::{self, AuthorizationConfiguration, GoDuration};
use crate::matching::{self, ConditionError, MatchConditions, MAX_MATCH_CONDITIONS};

mod field;
mod spec;

pub(crate) use field::quote;
use field::Errors;
pub use spec::{AuthorizerSpec, Connection, FailurePolicy, Loaded, ReviewVersion, WebhookSpec};

/// The authorizer types apiagg runs, as upstream's `NotSupported` lists them (sorted).
pub const SUPPORTED_TYPES: [&str; 4] = ["AlwaysAllow", "AlwaysDeny", "RBAC", "Webhook"];
/// The types kube-apiserver knows that apiagg refuses, with the reason given.
pub const REFUSED_TYPES: [(&str, &str); 2] = [
    (
        "Node",
        "not supported by apiagg: the Node authorizer decides kubelets' requests from kube-apiserver's graph of nodes, pods and volumes, which apiagg does not have; keep it in kube-apiserver's chain",
    ),
    (
        "ABAC",
        "not supported by apiagg: ABAC reads its policy from kube-apiserver's --authorization-policy-file flag, which this file cannot carry, and upstream recommends RBAC over it; use RBAC or a Webhook",
    ),
];
/// `authorizedTTL` when zero or absent (upstream's default).
pub const DEFAULT_AUTHORIZED_TTL: Duration = Duration::from_secs(5 * 60);
/// `unauthorizedTTL` when zero or absent (upstream's default).
pub const DEFAULT_UNAUTHORIZED_TTL: Duration = Duration::from_secs(30);
/// The longest webhook `timeout` (upstream's limit; it has no default).
pub const MAX_TIMEOUT: GoDuration = GoDuration::seconds(30);

/// Every problem of a file, each `<field path>: <message>` as kube-apiserver words them (the
/// type both configuration files share).
pub use apiagg_authn::ValidationErrors;

/// Decodes (YAML or JSON, unknown fields refused), defaults and validates a configuration file.
/// Empty input is the empty configuration, refused for having no authorizer (as upstream).
pub fn load(bytes: &[u8]) -> Result<Loaded, ValidationErrors> {
    if bytes.is_empty() {
        return validate(&AuthorizationConfiguration::default());
    }
    let config = decode(bytes).map_err(|e| ValidationErrors(vec![e]))?;
    validate(&config)
}

/// The file's one decoding error, worded as upstream's decoder.
fn decode(bytes: &[u8]) -> Result<AuthorizationConfiguration, String> {
    apiagg_authn::validate::field::decode_config(
        bytes,
        config::GROUP,
        &config::VERSIONS,
        config::KIND,
    )
}

/// Defaults and validates a decoded configuration, and compiles it.
pub fn validate(config: &AuthorizationConfiguration) -> Result<Loaded, ValidationErrors> {
    let mut errs = Errors::default();
    if config.authorizers.is_empty() {
        let detail = "at least one authorization mode must be defined";
        errs.required("authorizers", detail);
    }
    let mut seen_types = HashSet::new();
    let mut seen_names = HashSet::new();
    let mut authorizers = Vec::with_capacity(config.authorizers.len());
    for (i, a) in config.authorizers.iter().enumerate() {
        let path = format!("authorizers[{i}]");
        let before = errs.len();
        let Some(type_) = authorizer_type(&mut errs, a, &path, &mut seen_types) else {
            continue;
        };
        name(&mut errs, &a.name, &format!("{path}.name"), &mut seen_names);
        let webhook_path = format!("{path}.webhook");
        let compiled = match (type_, &a.webhook) {
            ("Webhook", None) => {
                errs.required(&webhook_path, "required when type=Webhook");
                continue;
            }
            ("Webhook", Some(w)) => {
                webhook(&mut errs, w, &path, &a.name).map(AuthorizerSpec::Webhook)
            }
            (_, Some(_)) => {
                let detail = "may only be specified when type=Webhook";
                errs.invalid(&webhook_path, "non-null", detail);
                None
            }
            ("RBAC", None) => Some(AuthorizerSpec::Rbac {
                name: a.name.clone(),
            }),
            ("AlwaysAllow", None) => Some(AuthorizerSpec::AlwaysAllow {
                name: a.name.clone(),
            }),
            ("AlwaysDeny", None) => Some(AuthorizerSpec::AlwaysDeny {
                name: a.name.clone(),
            }),
            (_, None) => None,
        };
        if errs.len() == before {
            authorizers.extend(compiled);
        }
    }
    if !errs.0.is_empty() {
        return Err(ValidationErrors(errs.0));
    }
    Ok(Loaded { authorizers })
}

/// `authorizers[i].type`: the type when the rest of the entry is to be checked (upstream stops
/// at an empty, unknown or repeated type). `Node` and `ABAC` are refused and checked on.
fn authorizer_type<'a>(
    errs: &mut Errors,
    a: &'a config::AuthorizerConfiguration,
    root: &str,
    seen: &mut HashSet<&'a str>,
) -> Option<&'a str> {
    let path = format!("{root}.type");
    let type_ = a.type_.as_str();
    let refused = REFUSED_TYPES.iter().find(|(t, _)| *t == type_);
    if type_.is_empty() {
        errs.required(&path, "");
        return None;
    }
    if !SUPPORTED_TYPES.contains(&type_) && refused.is_none() {
        errs.not_supported(&path, type_, &SUPPORTED_TYPES);
        return None;
    }
    if !seen.insert(type_) && type_ != "Webhook" {
        errs.duplicate(&path, type_);
        return None;
    }
    if let Some((_, reason)) = refused {
        errs.invalid(&path, type_, reason);
    }
    Some(type_)
}

/// `authorizers[i].name`: required, unique, a DNS-1123 subdomain.
fn name<'a>(errs: &mut Errors, name: &'a str, path: &str, seen: &mut HashSet<&'a str>) {
    if name.is_empty() {
        errs.required(path, "");
    } else if seen.contains(name) {
        errs.duplicate(path, name);
    } else {
        let problems = field::dns1123_subdomain(name);
        if !problems.is_empty() {
            let detail = format!("authorizer name is invalid: {}", problems.join(", "));
            errs.invalid(path, name, &detail);
        }
    }
    seen.insert(name);
}

/// `authorizers[i].webhook`, its fields named under `root` (`authorizers[i]`) as upstream
/// names them; the spec when it is valid.
fn webhook(
    errs: &mut Errors,
    w: &config::WebhookConfiguration,
    root: &str,
    name: &str,
) -> Option<WebhookSpec> {
    let before = errs.len();
    let timeout_path = format!("{root}.timeout");
    if w.timeout == GoDuration(0) {
        errs.required(&timeout_path, "");
    } else if w.timeout > MAX_TIMEOUT || w.timeout < GoDuration(0) {
        let value = w.timeout.to_string();
        errs.invalid(&timeout_path, &value, "must be > 0s and <= 30s");
    }
    let authorized_ttl = ttl(
        errs,
        w.authorized_ttl,
        DEFAULT_AUTHORIZED_TTL,
        root,
        "authorizedTTL",
    );
    let unauthorized_ttl = ttl(
        errs,
        w.unauthorized_ttl,
        DEFAULT_UNAUTHORIZED_TTL,
        root,
        "unauthorizedTTL",
    );
    let review_path = format!("{root}.subjectAccessReviewVersion");
    let review_version = match w.subject_access_review_version.as_str() {
        "v1" => Some(ReviewVersion::V1),
        "v1beta1" => Some(ReviewVersion::V1beta1),
        "" => {
            errs.required(&review_path, "");
            None
        }
        other => {
            errs.not_supported(&review_path, other, &["v1", "v1beta1"]);
            None
        }
    };
    let conditions_version_path = format!("{root}.matchConditionSubjectAccessReviewVersion");
    match w.match_condition_subject_access_review_version.as_str() {
        "" if !w.match_conditions.is_empty() => {
            let detail = "required if match conditions are specified";
            errs.required(&conditions_version_path, detail);
        }
        "" | "v1" => {}
        other => errs.not_supported(&conditions_version_path, other, &["v1"]),
    }
    let policy_path = format!("{root}.failurePolicy");
    let failure_policy = match w.failure_policy.as_str() {
        "NoOpinion" => Some(FailurePolicy::NoOpinion),
        "Deny" => Some(FailurePolicy::Deny),
        "" => {
            errs.required(&policy_path, "");
            None
        }
        other => {
            errs.not_supported(&policy_path, other, &["NoOpinion", "Deny"]);
            None
        }
    };
    let connection = connection(errs, &w.connection_info, root);
    let conditions = match_conditions(errs, &w.match_conditions, root);
    if errs.len() > before {
        return None;
    }
    let cached = |on: Option<bool>, ttl: Duration| on.unwrap_or(true).then_some(ttl);
    Some(WebhookSpec {
        name: name.to_string(),
        timeout: w.timeout.to_std()?,
        authorized_ttl: cached(w.cache_authorized_requests, authorized_ttl?),
        unauthorized_ttl: cached(w.cache_unauthorized_requests, unauthorized_ttl?),
        review_version: review_version?,
        failure_policy: failure_policy?,
        connection: connection?,
        match_conditions: MatchConditions::new(conditions),
    })
}

/// A TTL: zero is the default (upstream defaults before it validates), negative is refused.
fn ttl(
    errs: &mut Errors,
    value: GoDuration,
    default: Duration,
    root: &str,
    field: &str,
) -> Option<Duration> {
    if value == GoDuration(0) {
        return Some(default);
    }
    let ttl = value.to_std();
    if ttl.is_none() {
        let path = format!("{root}.{field}");
        errs.invalid(&path, &value.to_string(), "must be > 0s");
    }
    ttl
}

/// `connectionInfo`.
fn connection(
    errs: &mut Errors,
    c: &config::WebhookConnectionInfo,
    root: &str,
) -> Option<Connection> {
    let type_path = format!("{root}.connectionInfo.type");
    let file_path = format!("{root}.connectionInfo.kubeConfigFile");
    match (c.type_.as_str(), c.kube_config_file.as_deref()) {
        ("", _) => {
            errs.required(&type_path, "");
            None
        }
        ("InClusterConfig", None) => Some(Connection::InClusterConfig),
        ("InClusterConfig", Some(file)) => {
            let detail = "can only be set when type=KubeConfigFile";
            {
                errs.invalid(&file_path, file, detail);
                None
            }
        }
        ("KubeConfigFile", None | Some("")) => {
            errs.required(&file_path, "");
            None
        }
        ("KubeConfigFile", Some(file)) if !file.starts_with('/') => {
            errs.invalid(&file_path, file, "must be an absolute path");
            None
        }
        ("KubeConfigFile", Some(file)) => Some(Connection::KubeConfigFile(file.to_string())),
        (other, _) => {
            let supported = ["InClusterConfig", "KubeConfigFile"];
            {
                errs.not_supported(&type_path, other, &supported);
                None
            }
        }
    }
}

/// `matchConditions`: at most [`MAX_MATCH_CONDITIONS`], each set, unique and compiling to a
/// bool; the compiled ones.
fn match_conditions(
    errs: &mut Errors,
    conditions: &[config::WebhookMatchCondition],
    root: &str,
) -> Vec<Expression> {
    let path = format!("{root}.matchConditions");
    if conditions.len() > MAX_MATCH_CONDITIONS {
        errs.too_many(&path, conditions.len(), MAX_MATCH_CONDITIONS);
        return Vec::new();
    }
    let mut seen = HashSet::new();
    let mut compiled = Vec::with_capacity(conditions.len());
    for (i, condition) in conditions.iter().enumerate() {
        let path = format!("{path}[{i}].expression");
        let source = condition.expression.as_str();
        if source.trim().is_empty() {
            errs.required(&path, "");
        } else if !seen.insert(source) {
            errs.duplicate(&path, source);
        } else {
            match matching::compile(source) {
                Ok(expression) => compiled.push(expression),
                Err(ConditionError::Compile(CompileError::Empty)) => errs.required(&path, ""),
                Err(e) => errs.invalid(&path, source, &e.to_string()),
            }
        }
    }
    compiled
}

#[cfg(test)]
mod tests;
